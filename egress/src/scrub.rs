//! Scrubbing secrets out of responses, in the forms an upstream is likely to
//! echo them in.
//!
//! The bytes are decoded once into a normalized view: percent escapes
//! (`%73`), JSON and JavaScript escapes (`\u0073`, `\/`) and HTML numeric
//! entities (`&#115;`) become what they stand for, and ASCII letters are
//! lowercased. Decoding, rather than listing every escaped spelling as a
//! pattern, also catches mixes such as `s%6B-\u0074est`. Two Aho-Corasick
//! searches then run over that view:
//!
//! - exact: each secret value, its hex form and the stable inner part of its
//!   base64 forms (standard and URL-safe, at each of the three offsets it can
//!   sit at inside a longer base64 string);
//! - separator-tolerant: the letters and digits of the same forms, over the
//!   view with everything else dropped, so `s k - t e s t`, `s.k.t.e.s.t`,
//!   hex written `73:6b:…` and line-wrapped base64 match too.
//!
//! Every match maps back to a range of the original bytes, and each range
//! becomes `<redacted>`. Decoding and both searches are linear in the input.

use std::fmt;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

use crate::client::EgressError;

/// What a scrubbed secret becomes.
pub(crate) const REDACTED: &[u8] = b"<redacted>";

/// Shorter secrets are too likely to occur by chance to be scrubbed.
pub(crate) const MIN_SCRUB_LEN: usize = 8;

/// The longest run of non-alphanumeric bytes the tolerant search skips
/// between two characters. It bounds how long a match can be, which the body
/// cap's overlap depends on.
const MAX_SEPARATOR_RUN: usize = 16;

/// The most input bytes one byte of the view comes from (`&#x10FFFF;`).
const MAX_ESCAPE_LEN: usize = 10;

/// The precomputed patterns of one secret header (its whole value and its
/// bare key).
pub(crate) struct Scrubber {
    exact: Option<AhoCorasick>,
    tolerant: Option<AhoCorasick>,
    max_match: usize,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The patterns are encodings of the secret: never shown.
        f.write_str("Scrubber(<redacted>)")
    }
}

impl Scrubber {
    /// The patterns for `values`; values shorter than [`MIN_SCRUB_LEN`] are
    /// skipped.
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Scrubber, EgressError> {
        let mut exact = Vec::new();
        let mut tolerant = Vec::new();
        for value in values.into_iter().filter(|v| v.len() >= MIN_SCRUB_LEN) {
            for form in forms(value) {
                let form = form.to_ascii_lowercase();
                let alnum: Vec<u8> = form.iter().copied().filter(u8::is_ascii_alphanumeric).collect();
                if alnum.len() >= MIN_SCRUB_LEN {
                    tolerant.push(alnum);
                }
                if form.len() >= MIN_SCRUB_LEN {
                    exact.push(form);
                }
            }
        }
        for patterns in [&mut exact, &mut tolerant] {
            patterns.sort();
            patterns.dedup();
        }
        let longest = |p: &[Vec<u8>]| p.iter().map(Vec::len).max().unwrap_or(0);
        let max_match =
            (longest(&exact) * MAX_ESCAPE_LEN).max(longest(&tolerant) * (MAX_SEPARATOR_RUN + 1) * MAX_ESCAPE_LEN);
        Ok(Scrubber { exact: automaton(&exact)?, tolerant: automaton(&tolerant)?, max_match })
    }

    /// The most input bytes one match can span: a body read this far past
    /// its cap holds every match that starts before the cap.
    pub(crate) fn max_match(&self) -> usize {
        self.max_match
    }

    fn is_empty(&self) -> bool {
        self.exact.is_none() && self.tolerant.is_none()
    }

    /// Pushes the input ranges of this secret's matches onto `out`.
    fn find(&self, view: &View, alphanumeric: &(Vec<u8>, Vec<usize>), out: &mut Vec<(usize, usize)>) {
        if let Some(exact) = &self.exact {
            for m in exact.find_iter(&view.bytes) {
                out.push((view.starts[m.start()], view.end_of(m.end() - 1)));
            }
        }
        if let Some(tolerant) = &self.tolerant {
            let (bytes, index) = alphanumeric;
            for m in tolerant.find_iter(bytes) {
                out.push((view.starts[index[m.start()]], view.end_of(index[m.end() - 1])));
            }
        }
    }
}

fn automaton(patterns: &[Vec<u8>]) -> Result<Option<AhoCorasick>, EgressError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(patterns)
        .map(Some)
        .map_err(|e| EgressError::Config(format!("cannot prepare the scrubbing of a secret header: {e}")))
}

/// The spellings of `value` searched for (before lowercasing): itself, with
/// `+` for spaces (form encoding), hex, and base64 at each offset.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec(), hex::encode(value).into_bytes()];
    if value.contains(&b' ') {
        forms.push(value.iter().map(|&b| if b == b' ' { b'+' } else { b }).collect());
    }
    for offset in 0..3 {
        forms.push(base64_inner(&STANDARD_NO_PAD, value, offset));
        forms.push(base64_inner(&URL_SAFE_NO_PAD, value, offset));
    }
    forms
}

/// The base64 characters of `value` that do not depend on the bytes around
/// it, when it starts `offset` bytes into a 3-byte group of a longer string.
/// Padding is never part of it, so padded and unpadded encodings both match.
fn base64_inner(engine: &impl Engine, value: &[u8], offset: usize) -> Vec<u8> {
    let mut shifted = vec![0u8; offset];
    shifted.extend_from_slice(value);
    let encoded = engine.encode(&shifted);
    // Character `c` stands for input bits 6c..6c+6: keep those within the value's bits.
    let (first_bit, end_bit) = (8 * offset, 8 * (offset + value.len()));
    encoded.bytes().enumerate().filter(|(c, _)| 6 * c >= first_bit && 6 * c + 6 <= end_bit).map(|(_, b)| b).collect()
}

/// The normalized view of some input: decoded, lowercased bytes and, for
/// each, where in the input the escape (or byte) it came from starts.
struct View {
    bytes: Vec<u8>,
    starts: Vec<usize>,
    input_len: usize,
}

impl View {
    fn decode(input: &[u8]) -> View {
        let mut bytes = Vec::with_capacity(input.len());
        let mut starts = Vec::with_capacity(input.len());
        let mut i = 0;
        while i < input.len() {
            match escape_at(&input[i..]) {
                Some((c, len)) => {
                    let mut utf8 = [0u8; 4];
                    for b in c.encode_utf8(&mut utf8).bytes() {
                        bytes.push(b.to_ascii_lowercase());
                        starts.push(i);
                    }
                    i += len;
                }
                None => {
                    bytes.push(input[i].to_ascii_lowercase());
                    starts.push(i);
                    i += 1;
                }
            }
        }
        View { bytes, starts, input_len: input.len() }
    }

    /// Where the escape that view byte `k` came from ends in the input.
    fn end_of(&self, k: usize) -> usize {
        let start = self.starts[k];
        self.starts[k + 1..].iter().copied().find(|&s| s != start).unwrap_or(self.input_len)
    }

    /// The letters and digits of the view, with the view index of each. A
    /// run of more than [`MAX_SEPARATOR_RUN`] other bytes leaves a `.`,
    /// which no pattern contains, so no match spans it.
    fn alphanumeric(&self) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::with_capacity(self.bytes.len());
        let mut index = Vec::with_capacity(self.bytes.len());
        let mut run = 0;
        for (k, &b) in self.bytes.iter().enumerate() {
            if b.is_ascii_alphanumeric() {
                bytes.push(b);
                index.push(k);
                run = 0;
            } else {
                run += 1;
                if run == MAX_SEPARATOR_RUN + 1 {
                    bytes.push(b'.');
                    index.push(k);
                }
            }
        }
        (bytes, index)
    }
}

/// The character an escape at the start of `rest` stands for, and the
/// escape's length; `None` if `rest` does not start with an escape.
fn escape_at(rest: &[u8]) -> Option<(char, usize)> {
    match rest {
        [b'%', hi, lo, ..] => Some((char::from((hex_digit(*hi)? << 4) | hex_digit(*lo)?), 3)),
        [b'\\', b'u', a, b, c, d, ..] => {
            let unit = [a, b, c, d].iter().try_fold(0u32, |n, &&h| Some((n << 4) | u32::from(hex_digit(h)?)))?;
            Some((char::from_u32(unit)?, 6))
        }
        [b'\\', e, ..] => {
            let c = match e {
                b'/' | b'\\' | b'"' | b'\'' => char::from(*e),
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                _ => return None,
            };
            Some((c, 2))
        }
        [b'&', b'#', entity @ ..] => {
            let (radix, digits, skip) = match entity {
                [b'x' | b'X', digits @ ..] => (16, digits, 3),
                digits => (10, digits, 2),
            };
            let max = if radix == 16 { 6 } else { 7 };
            let count = digits.iter().take(max + 1).take_while(|d| char::from(**d).is_digit(radix)).count();
            if count == 0 || count > max || digits.get(count) != Some(&b';') {
                return None;
            }
            let text = std::str::from_utf8(&digits[..count]).ok()?;
            let c = char::from_u32(u32::from_str_radix(text, radix).ok()?)?;
            Some((c, skip + count + 1))
        }
        _ => None,
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Replaces every form of every secret of `scrubbers` in `input` with
/// `<redacted>`.
pub(crate) fn scrub(input: Vec<u8>, scrubbers: &[&Scrubber]) -> Vec<u8> {
    if scrubbers.iter().all(|s| s.is_empty()) || input.is_empty() {
        return input;
    }
    let view = View::decode(&input);
    let alphanumeric = view.alphanumeric();
    let mut ranges = Vec::new();
    for scrubber in scrubbers {
        scrubber.find(&view, &alphanumeric, &mut ranges);
    }
    if ranges.is_empty() {
        return input;
    }
    // Each search yields its matches in order; they only need merging where
    // forms (or secrets) overlap. Matches are rare, so sorting is cheap.
    ranges.sort_unstable();
    let mut out = Vec::with_capacity(input.len());
    let mut copied = 0;
    let mut current: Option<(usize, usize)> = None;
    for (start, end) in ranges {
        match &mut current {
            Some((_, cur_end)) if start < *cur_end => *cur_end = (*cur_end).max(end),
            _ => {
                if let Some((s, e)) = current.take() {
                    out.extend_from_slice(&input[copied..s]);
                    out.extend_from_slice(REDACTED);
                    copied = e;
                }
                current = Some((start, end));
            }
        }
    }
    if let Some((s, e)) = current {
        out.extend_from_slice(&input[copied..s]);
        out.extend_from_slice(REDACTED);
        copied = e;
    }
    out.extend_from_slice(&input[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-Test-0123456789abcdef";

    fn scrubbed(input: &str) -> String {
        let scrubber = Scrubber::new([KEY.as_bytes()]).unwrap();
        String::from_utf8(scrub(input.as_bytes().to_vec(), &[&scrubber])).unwrap()
    }

    #[test]
    fn every_occurrence_is_replaced() {
        let scrubber = Scrubber::new([b"SECRET12".as_slice()]).unwrap();
        assert_eq!(scrub(b"a-SECRET12-b-SECRET12".to_vec(), &[&scrubber]), b"a-<redacted>-b-<redacted>");
    }

    #[test]
    fn escapes_are_decoded_before_matching() {
        for echoed in [
            "sk%2DTest%2D0123456789abcdef",
            "%73%6b%2d%54%65%73%74%2d%30%31%32%33%34%35%36%37%38%39%61%62%63%64%65%66",
            "\\u0073\\u006B-\\u0054est-0123456789abcdef",
            "s%6B-\\u0074est-&#48;&#x31;23456789abcdef",
            "SK-TEST-0123456789ABCDEF",
        ] {
            assert_eq!(scrubbed(&format!("[{echoed}]")), "[<redacted>]", "{echoed}");
        }
    }

    #[test]
    fn separated_characters_are_found() {
        let spaced: String = KEY.chars().flat_map(|c| [c, ' ']).collect();
        assert_eq!(scrubbed(&format!("[{}]", spaced.trim_end())), "[<redacted>]");
        let dotted = KEY.chars().map(String::from).collect::<Vec<_>>().join(".");
        assert_eq!(scrubbed(&format!("[{dotted}]")), "[<redacted>]");
        // A long run of other bytes between characters is not a separator.
        let far = KEY.chars().map(String::from).collect::<Vec<_>>().join(&" ".repeat(MAX_SEPARATOR_RUN + 1));
        assert_eq!(scrubbed(&far), far);
    }

    #[test]
    fn base64_inner_parts_cover_each_offset() {
        for offset in 0..3 {
            let mut blob = b"user:".to_vec();
            blob.truncate(offset);
            blob.extend_from_slice(KEY.as_bytes());
            blob.extend_from_slice(b":more");
            for engine in [&base64::engine::general_purpose::STANDARD, &base64::engine::general_purpose::URL_SAFE] {
                let encoded = engine.encode(&blob);
                let out = scrubbed(&encoded);
                assert!(out.contains("<redacted>"), "offset {offset}: {encoded} -> {out}");
                assert!(out.len() < encoded.len(), "{out}");
            }
        }
    }

    #[test]
    fn unrelated_text_is_left_alone() {
        let text = "{\"q\": \"sk-test\", \"n\": 0123456789, \"u\": \"a%20b\\u00e9 &#233; &amp;\"}";
        assert_eq!(scrubbed(text), text);
    }

    #[test]
    fn short_values_are_not_scrubbed_and_matches_are_bounded() {
        let short = Scrubber::new([b"abc".as_slice()]).unwrap();
        assert!(short.is_empty());
        assert_eq!(short.max_match(), 0);
        let scrubber = Scrubber::new([KEY.as_bytes()]).unwrap();
        // Hex is the longest form: two characters per byte.
        assert_eq!(scrubber.max_match(), 2 * KEY.len() * (MAX_SEPARATOR_RUN + 1) * MAX_ESCAPE_LEN);
        assert!(!format!("{scrubber:?}").contains("0123"));
    }
}
