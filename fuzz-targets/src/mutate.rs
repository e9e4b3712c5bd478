//! A small seeded mutator for the smoke run under `cargo test`: the same
//! seed gives the same inputs on every machine, so a failure there is
//! reproducible without libFuzzer. It knows byte edits, splices between
//! seeds and a dictionary of tokens that matter to nexo's parsers.

/// A deterministic xorshift generator (no dependency, same sequence everywhere).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (zero is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next_u64() % n as u64) as usize }
    }
}

/// Tokens inserted whole: delimiters of YAML frontmatter, TOML, JSON and
/// SSE, path pieces, escapes and characters whose byte length differs from
/// their width.
pub const DICTIONARY: &[&[u8]] = &[
    b"---\n",
    b"\n",
    b"\r\n",
    b"\"",
    b"'",
    b"=",
    b"[",
    b"]",
    b"{",
    b"}",
    b":",
    b",",
    b"#",
    b"\\",
    b"\\u0000",
    b"\\uD800",
    b"data: ",
    b"event: ",
    b"\n\n",
    b"data: [DONE]\n\n",
    b"..",
    b"/",
    b"./",
    b"../",
    b"%2e%2e",
    b"\x1b[",
    b"\x1b]",
    b"\x07",
    b"\xe2\x80\xa6",
    b"\xf0\x9f\x98\x80",
    b"\xc3",
    b"\xff",
    b"\0",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"18446744073709551616",
    b"1e999",
    b"&a",
    b"*a",
    b"!!binary",
    b"<<: ",
    b"[[",
    b"]]",
    b"\"\"\"",
    b"'''",
    b"@",
    b"::ffff:",
    b"[::1]",
    b"127.0.0.1",
    b"169.254.169.254",
    b"0x7f.1",
    b"localhost",
    b"xn--",
    b"http://",
    b"https://",
    b"file://",
    b"user:pass@",
    b"%00",
    b"?",
    b"#frag",
    b"*.",
    b"\t",
];

/// One mutated copy of `input`: one to four edits, sometimes splicing in a
/// piece of another seed from `pool`. Inputs stay below `max_len` bytes.
pub fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        edit(rng, &mut out, pool);
    }
    out.truncate(max_len);
    out
}

fn edit(rng: &mut Rng, out: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let len = out.len();
    match rng.below(10) {
        0 if len > 0 => {
            let at = rng.below(len);
            out[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            out[at] = rng.next_u64() as u8;
        }
        2 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            out.splice(at..at, bytes);
        }
        3 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            out.drain(at..at + n);
        }
        4 if len > 0 => {
            // Duplicate a range (repetition finds quadratic paths and deep nesting).
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            let piece = out[at..at + n].to_vec();
            let to = rng.below(len + 1);
            for _ in 0..1 + rng.below(4) {
                out.splice(to..to, piece.iter().copied());
            }
        }
        5 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(256));
                let at = rng.below(len + 1);
                out.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        6 if len > 0 => out.truncate(rng.below(len)),
        _ => {
            let token = DICTIONARY[rng.below(DICTIONARY.len())];
            let at = rng.below(len + 1);
            out.splice(at..at, token.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let pool = vec![b"name = \"x\"".to_vec()];
        let a: Vec<Vec<u8>> = {
            let mut rng = Rng::new(7);
            (0..50).map(|_| mutate(&mut rng, b"hello world", &pool, 1 << 16)).collect()
        };
        let mut rng = Rng::new(7);
        let b: Vec<Vec<u8>> = (0..50).map(|_| mutate(&mut rng, b"hello world", &pool, 1 << 16)).collect();
        assert_eq!(a, b);
        assert!(a.iter().any(|m| m.as_slice() != b"hello world"));
    }
}
