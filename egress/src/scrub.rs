//! Scrubbing secrets out of responses, in the forms an upstream is likely to
//! echo them in.
//!
//! The bytes are decoded once into a normalized view, and ASCII letters are
//! lowercased. Decoded are: percent escapes (`%73`, `%u0073`), JSON and
//! JavaScript escapes (`\u0073`, `\u{73}`, `\x73`, octal `\163`, `\/`, `\"`
//! and the other one-letter escapes), HTML numeric entities with or without
//! their `;` (`&#115;`, `&#x73`) and the named entities of ASCII punctuation
//! ([`NAMED_ENTITIES`]). Decoding, rather than listing every escaped
//! spelling as a pattern, also catches mixes such as `s%6B-\u0074est`. Two
//! Aho-Corasick searches then run over that view:
//!
//! - exact: each secret value; its hex form; the hex of its UTF-16LE and
//!   UTF-16BE encodings; the stable inner part of the base64 forms of those
//!   three byte strings (standard and URL-safe, at each of the three offsets
//!   they can sit at inside a longer base64 string); and the stable inner
//!   part of its base32 form at each of the five offsets;
//! - separator-tolerant, over the view's letters and digits only (everything
//!   else dropped): the letters and digits of the same forms, so `s k - t e s
//!   t`, `s.k.t.e.s.t`, hex written `73:6b:…` and line-wrapped base64 match
//!   too; and every run of [`FRAGMENT_LEN`] consecutive characters of the
//!   secret's own letters and digits (its skeleton). A fragment match grows
//!   to the whole run of consecutive skeleton characters around it, so an
//!   unknown escape or separator inside a key leaves fewer than
//!   [`FRAGMENT_LEN`] of its characters on each side of it.
//!
//! Every match maps back to a range of the original bytes, and each range
//! becomes `<redacted>`. Decoding and both searches are linear in the input.

use std::collections::BTreeMap;
use std::fmt;

use aho_corasick::{AhoCorasick, Input, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

use crate::error::EgressError;

/// What a scrubbed secret becomes.
pub(crate) const REDACTED: &[u8] = b"<redacted>";

/// Shorter secrets are too likely to occur by chance to be scrubbed.
pub(crate) const MIN_SCRUB_LEN: usize = 8;

/// The fewest consecutive skeleton characters a fragment match needs. Twelve
/// random letters and digits (lowercased: 36 symbols) are about 62 bits, so
/// an unrelated text of a few MiB matches one of a key's fragments with a
/// probability around 10^-11; a fixed public prefix such as `sk-proj-` only
/// lowers that to about 31 bits, still rare, and a false match merely
/// redacts a few innocent characters. A skeleton shorter than this is
/// matched whole (it is at least [`MIN_SCRUB_LEN`] long): a shorter fragment
/// of an already short key would match ordinary text far too often.
pub(crate) const FRAGMENT_LEN: usize = 12;

/// The longest run of non-alphanumeric bytes the tolerant search skips
/// between two characters. It bounds how long a match can be, which the body
/// cap's overlap depends on.
const MAX_SEPARATOR_RUN: usize = 16;

/// The most input bytes one byte of the view comes from (`&#x10FFFF;`,
/// `\u{10FFFF}`, `&lowbar;`).
const MAX_ESCAPE_LEN: usize = 10;

/// Named HTML entities decoded in the view: those of ASCII punctuation and
/// white space. `&hyphen;`, `&dash;` (U+2010), `&nbsp;` (U+00A0) and
/// `&tilde;` (U+02DC) stand for look-alikes; they are folded to the ASCII
/// character because an echo that uses them means that character.
pub(crate) const NAMED_ENTITIES: &[(&str, char)] = &[
    ("amp", '&'),
    ("AMP", '&'),
    ("quot", '"'),
    ("QUOT", '"'),
    ("apos", '\''),
    ("lt", '<'),
    ("LT", '<'),
    ("gt", '>'),
    ("GT", '>'),
    ("nbsp", ' '),
    ("Tab", '\t'),
    ("NewLine", '\n'),
    ("sol", '/'),
    ("bsol", '\\'),
    ("hyphen", '-'),
    ("dash", '-'),
    ("period", '.'),
    ("lowbar", '_'),
    ("UnderBar", '_'),
    ("colon", ':'),
    ("semi", ';'),
    ("comma", ','),
    ("plus", '+'),
    ("equals", '='),
    ("num", '#'),
    ("percnt", '%'),
    ("ast", '*'),
    ("midast", '*'),
    ("excl", '!'),
    ("quest", '?'),
    ("commat", '@'),
    ("dollar", '$'),
    ("lpar", '('),
    ("rpar", ')'),
    ("lsqb", '['),
    ("lbrack", '['),
    ("rsqb", ']'),
    ("rbrack", ']'),
    ("lbrace", '{'),
    ("lcub", '{'),
    ("rbrace", '}'),
    ("rcub", '}'),
    ("verbar", '|'),
    ("vert", '|'),
    ("tilde", '~'),
    ("grave", '`'),
    ("Hat", '^'),
];

/// The entities HTML also decodes without their `;` (its legacy set, as far
/// as [`NAMED_ENTITIES`] goes).
const LEGACY_ENTITIES: &[&str] = &["amp", "AMP", "quot", "QUOT", "lt", "LT", "gt", "GT", "nbsp"];

/// The longest name in [`NAMED_ENTITIES`].
const MAX_ENTITY_NAME: usize = 8;

/// Replaces secrets in text, literally and in the encodings an upstream (or
/// a model provider's error body) is likely to echo them in: case, percent,
/// JSON, JavaScript and HTML escapes, hex, base64 and base32 of the UTF-8
/// and UTF-16 bytes, separators between the characters, and any run of
/// 12 or more consecutive letters and digits of a secret. Each
/// match becomes `<redacted>`.
///
/// Build one per set of secrets and reuse it: building prepares the
/// patterns, [`Redactor::redact`] is then linear in its input. Secrets
/// shorter than 8 bytes are skipped, as they would match ordinary text.
/// `Debug` never shows the secrets.
///
/// ```
/// let redactor = nexo_egress::Redactor::new([b"sk-Live/7Gh2Qx9Lm4Tz8Wp3".as_slice()])?;
/// let echoed = r"invalid key \x73\x6b\x2d\x4c\x69\x76\x65\x2f7Gh2Qx9Lm4Tz8Wp3";
/// assert_eq!(redactor.redact_str(echoed), "invalid key <redacted>");
/// # Ok::<(), nexo_egress::EgressError>(())
/// ```
pub struct Redactor {
    exact: Option<AhoCorasick>,
    tolerant: Option<AhoCorasick>,
    /// Tolerant patterns from this id on are fragments, described in
    /// `fragments` (same order).
    first_fragment: usize,
    /// For each fragment pattern: its skeleton (in `skeletons`) and every
    /// offset it sits at there.
    fragments: Vec<Fragment>,
    skeletons: Vec<Vec<u8>>,
    max_match: usize,
}

/// A run of [`FRAGMENT_LEN`] skeleton characters searched for.
struct Fragment {
    /// The skeleton it comes from, in `Redactor::skeletons`.
    skeleton: usize,
    /// Every offset it sits at in that skeleton (a key may repeat itself).
    offsets: Vec<usize>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The patterns are encodings of the secret: never shown.
        f.write_str("Redactor(<redacted>)")
    }
}

impl Redactor {
    /// The patterns for `secrets`; secrets shorter than 8 bytes are skipped.
    ///
    /// Fragments are taken only from secrets that contain no other secret of
    /// the set: for a header value `Bearer <key>` given with its bare key,
    /// fragments straddling the public prefix would carry little of the key
    /// and match other keys of the same kind.
    ///
    /// # Errors
    ///
    /// [`EgressError::Config`] if the patterns cannot be compiled (they are
    /// then too many or too large).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Result<Redactor, EgressError> {
        let values: Vec<&[u8]> = secrets.into_iter().filter(|v| v.len() >= MIN_SCRUB_LEN).collect();
        let mut exact = Vec::new();
        let mut tolerant = Vec::new();
        for value in &values {
            for form in forms(value) {
                let form = form.to_ascii_lowercase();
                let alnum = skeleton(&form);
                if alnum.len() >= MIN_SCRUB_LEN {
                    tolerant.push(alnum);
                }
                if form.len() >= MIN_SCRUB_LEN {
                    exact.push(form);
                }
            }
        }
        // The skeletons of the secrets that contain no other one, and their
        // fragments with where they sit.
        let mut skeletons: Vec<Vec<u8>> = Vec::new();
        let mut pieces: BTreeMap<Vec<u8>, Fragment> = BTreeMap::new();
        for value in &values {
            let lower = value.to_ascii_lowercase();
            let contains_another = values.iter().any(|other| {
                other.len() < value.len() && lower.windows(other.len()).any(|w| w.eq_ignore_ascii_case(other))
            });
            let skel = skeleton(&lower);
            if contains_another || skel.len() < MIN_SCRUB_LEN || skeletons.contains(&skel) {
                continue;
            }
            let len = FRAGMENT_LEN.min(skel.len());
            for (at, piece) in skel.windows(len).enumerate() {
                // Two secrets sharing a piece (never seen in practice: one
                // redactor holds one key) grow its matches along the first.
                let fragment = pieces
                    .entry(piece.to_vec())
                    .or_insert_with(|| Fragment { skeleton: skeletons.len(), offsets: Vec::new() });
                if fragment.skeleton == skeletons.len() {
                    fragment.offsets.push(at);
                }
            }
            skeletons.push(skel);
        }
        for patterns in [&mut exact, &mut tolerant] {
            patterns.sort();
            patterns.dedup();
        }
        let longest = |p: &[Vec<u8>]| p.iter().map(Vec::len).max().unwrap_or(0);
        // A fragment grows at most to its whole skeleton.
        let longest_tolerant = longest(&tolerant).max(longest(&skeletons));
        let max_match =
            (longest(&exact) * MAX_ESCAPE_LEN).max(longest_tolerant * (MAX_SEPARATOR_RUN + 1) * MAX_ESCAPE_LEN);
        // A form that is also a fragment is searched as the fragment.
        tolerant.retain(|p| !pieces.contains_key(p));
        let first_fragment = tolerant.len();
        let mut fragments = Vec::with_capacity(pieces.len());
        for (piece, fragment) in pieces {
            tolerant.push(piece);
            fragments.push(fragment);
        }
        Ok(Redactor {
            exact: automaton(&exact)?,
            tolerant: automaton(&tolerant)?,
            first_fragment,
            fragments,
            skeletons,
            max_match,
        })
    }

    /// `input` with every form of every secret replaced by `<redacted>`.
    pub fn redact(&self, input: Vec<u8>) -> Vec<u8> {
        scrub(input, &[self])
    }

    /// [`Redactor::redact`] for text. Replaced ranges cover whole
    /// characters, so the result stays valid UTF-8 (a lossy conversion is
    /// only the fallback).
    pub fn redact_str(&self, input: &str) -> String {
        let out = self.redact(input.as_bytes().to_vec());
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
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
            let mut at = 0;
            while let Some(m) = tolerant.find(Input::new(bytes).range(at..)) {
                let (mut start, mut end) = (m.start(), m.end());
                if let Some(fragment) =
                    m.pattern().as_usize().checked_sub(self.first_fragment).and_then(|i| self.fragments.get(i))
                {
                    let skeleton = &self.skeletons[fragment.skeleton];
                    for &offset in &fragment.offsets {
                        let (s, e) = grow(bytes, m.start(), m.end(), skeleton, offset);
                        (start, end) = (start.min(s), end.max(e));
                    }
                }
                out.push((view.starts[index[start]], view.end_of(index[end - 1])));
                at = end;
            }
        }
    }
}

/// The letters and digits of `bytes`.
fn skeleton(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().copied().filter(u8::is_ascii_alphanumeric).collect()
}

/// The run of `haystack` around `start..end`, a copy of `skeleton` from
/// `offset` on, grown while both go on agreeing on either side.
fn grow(haystack: &[u8], start: usize, end: usize, skeleton: &[u8], offset: usize) -> (usize, usize) {
    let before =
        haystack[..start].iter().rev().zip(skeleton[..offset].iter().rev()).take_while(|(a, b)| a == b).count();
    let after = skeleton
        .get(offset + (end - start)..)
        .map_or(0, |rest| haystack[end..].iter().zip(rest).take_while(|(a, b)| a == b).count());
    (start - before, end + after)
}

fn automaton(patterns: &[Vec<u8>]) -> Result<Option<AhoCorasick>, EgressError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(patterns)
        .map(Some)
        .map_err(|e| EgressError::Config(format!("cannot prepare the scrubbing of a secret: {e}")))
}

/// The spellings of `value` searched for (before lowercasing): itself, with
/// `+` for spaces (form encoding), and the hex and base64 of its bytes and
/// of its UTF-16 encodings (JavaScript strings, Windows APIs), and base32.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec()];
    if value.contains(&b' ') {
        forms.push(value.iter().map(|&b| if b == b' ' { b'+' } else { b }).collect());
    }
    let mut encoded = vec![value.to_vec()];
    if let Ok(text) = std::str::from_utf8(value) {
        encoded.push(text.encode_utf16().flat_map(u16::to_le_bytes).collect());
        encoded.push(text.encode_utf16().flat_map(u16::to_be_bytes).collect());
    }
    for bytes in &encoded {
        forms.push(hex::encode(bytes).into_bytes());
        for offset in 0..3 {
            forms.push(inner(|b| STANDARD_NO_PAD.encode(b), 6, bytes, offset));
            forms.push(inner(|b| URL_SAFE_NO_PAD.encode(b), 6, bytes, offset));
        }
    }
    for offset in 0..5 {
        forms.push(inner(|b| data_encoding::BASE32_NOPAD.encode(b), 5, value, offset));
    }
    forms
}

/// The characters of an encoding of `value`, `bits` input bits per
/// character, that do not depend on the bytes around it, when it starts
/// `offset` bytes into a group of a longer string (3 bytes for base64, 5 for
/// base32). Padding is never part of it, so padded and unpadded encodings
/// both match.
fn inner(encode: impl Fn(&[u8]) -> String, bits: usize, value: &[u8], offset: usize) -> Vec<u8> {
    let mut shifted = vec![0u8; offset];
    shifted.extend_from_slice(value);
    let encoded = encode(&shifted);
    // Character `c` stands for input bits bits*c..bits*(c+1): keep those within the value's bits.
    let (first_bit, end_bit) = (8 * offset, 8 * (offset + value.len()));
    encoded
        .bytes()
        .enumerate()
        .filter(|(c, _)| bits * c >= first_bit && bits * c + bits <= end_bit)
        .map(|(_, b)| b)
        .collect()
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
            // Every escape starts with one of these: skip the lookup for the rest.
            let escape = if matches!(input[i], b'%' | b'\\' | b'&') { escape_at(&input[i..]) } else { None };
            match escape {
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
        // `%uXXXX`: the non-standard `escape()` of JavaScript and IIS.
        [b'%', b'u' | b'U', tail @ ..] => Some((char::from_u32(hex_exactly(tail, 4)?)?, 6)),
        [b'%', tail @ ..] => Some((char::from_u32(hex_exactly(tail, 2)?)?, 3)),
        [b'\\', b'u', b'{', tail @ ..] => {
            let (unit, digits) = hex_prefix(tail, 6);
            if digits == 0 || tail.get(digits) != Some(&b'}') {
                return None;
            }
            Some((char::from_u32(unit)?, digits + 4))
        }
        [b'\\', b'u', tail @ ..] => Some((char::from_u32(hex_exactly(tail, 4)?)?, 6)),
        [b'\\', b'x', tail @ ..] => Some((char::from_u32(hex_exactly(tail, 2)?)?, 4)),
        [b'\\', b'0'..=b'7', ..] => {
            // One to three octal digits, as long as the value fits a byte (`\377`).
            let mut value = 0u32;
            let mut digits = 0;
            for &d in rest[1..].iter().take(3) {
                let next = match d {
                    b'0'..=b'7' => value * 8 + u32::from(d - b'0'),
                    _ => break,
                };
                if next > 0o377 {
                    break;
                }
                (value, digits) = (next, digits + 1);
            }
            Some((char::from_u32(value)?, digits + 1))
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
            if count == 0 || count > max {
                return None;
            }
            let text = std::str::from_utf8(&digits[..count]).ok()?;
            let c = char::from_u32(u32::from_str_radix(text, radix).ok()?)?;
            // HTML decodes numeric entities without their `;` too.
            let semicolon = usize::from(digits.get(count) == Some(&b';'));
            Some((c, skip + count + semicolon))
        }
        [b'&', tail @ ..] => {
            let name_len = tail.iter().take(MAX_ENTITY_NAME + 1).take_while(|b| b.is_ascii_alphanumeric()).count();
            let name = &tail[..name_len];
            if tail.get(name_len) == Some(&b';')
                && let Some((_, c)) = NAMED_ENTITIES.iter().find(|(n, _)| n.as_bytes() == name)
            {
                return Some((*c, name_len + 2));
            }
            let legacy = LEGACY_ENTITIES.iter().find(|n| name.starts_with(n.as_bytes()))?;
            let (_, c) = NAMED_ENTITIES.iter().find(|(n, _)| n == legacy)?;
            Some((*c, legacy.len() + 1))
        }
        _ => None,
    }
}

/// The value of the first `count` bytes of `bytes`, if they are all hex digits.
fn hex_exactly(bytes: &[u8], count: usize) -> Option<u32> {
    match hex_prefix(bytes, count) {
        (value, digits) if digits == count => Some(value),
        _ => None,
    }
}

/// The value of the hex digits `bytes` starts with (at most `max`), and how
/// many there are.
fn hex_prefix(bytes: &[u8], max: usize) -> (u32, usize) {
    let mut value = 0u32;
    let mut digits = 0;
    for d in bytes.iter().take(max).map_while(|&b| char::from(b).to_digit(16)) {
        (value, digits) = ((value << 4) | d, digits + 1);
    }
    (value, digits)
}

/// Replaces every form of every secret of `redactors` in `input` with
/// `<redacted>`.
pub(crate) fn scrub(input: Vec<u8>, redactors: &[&Redactor]) -> Vec<u8> {
    let ranges = matches(&input, redactors);
    if ranges.is_empty() {
        return input;
    }
    replace(&input, &ranges)
}

/// Scrubs `input[..cut]` for a stream that releases its body in pieces:
/// matches are searched in all of `input`, so the bytes past `cut` are
/// context, and a match that straddles `cut` is released whole. Returns the
/// scrubbed piece and how many bytes of `input` it covers (at least `cut`).
pub(crate) fn scrub_prefix(input: &[u8], redactors: &[&Redactor], cut: usize) -> (Vec<u8>, usize) {
    let mut cut = cut.min(input.len());
    let mut ranges = matches(input, redactors);
    // Merged ranges are disjoint and sorted: at most one straddles the cut.
    if let Some(&(_, end)) = ranges.iter().find(|(start, end)| *start < cut && *end > cut) {
        cut = end;
    }
    ranges.retain(|(_, end)| *end <= cut);
    (replace(&input[..cut], &ranges), cut)
}

/// The input ranges of every match, sorted, overlapping ones merged.
fn matches(input: &[u8], redactors: &[&Redactor]) -> Vec<(usize, usize)> {
    if redactors.iter().all(|s| s.is_empty()) || input.is_empty() {
        return Vec::new();
    }
    let view = View::decode(input);
    let alphanumeric = view.alphanumeric();
    let mut ranges = Vec::new();
    for redactor in redactors {
        redactor.find(&view, &alphanumeric, &mut ranges);
    }
    // Each search yields its matches in order; they only need merging where
    // forms (or secrets) overlap. Matches are rare, so sorting is cheap.
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some((_, cur_end)) if start < *cur_end => *cur_end = (*cur_end).max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// `input` with each of `ranges` (sorted, disjoint) replaced by `<redacted>`.
fn replace(input: &[u8], ranges: &[(usize, usize)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut copied = 0;
    for &(start, end) in ranges {
        out.extend_from_slice(&input[copied..start]);
        out.extend_from_slice(REDACTED);
        copied = end;
    }
    out.extend_from_slice(&input[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-Test-0123456789abcdef";

    fn scrubbed(input: &str) -> String {
        let scrubber = Redactor::new([KEY.as_bytes()]).unwrap();
        String::from_utf8(scrub(input.as_bytes().to_vec(), &[&scrubber])).unwrap()
    }

    #[test]
    fn every_occurrence_is_replaced() {
        let scrubber = Redactor::new([b"SECRET12".as_slice()]).unwrap();
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
    fn javascript_html_and_iis_escapes_are_decoded() {
        let each = |f: &dyn Fn(char) -> String| KEY.chars().map(f).collect::<String>();
        for echoed in [
            each(&|c| format!("\\x{:02x}", c as u32)),
            each(&|c| format!("\\x{:02X}", c as u32)),
            each(&|c| format!("\\u{{{:x}}}", c as u32)),
            each(&|c| format!("\\u{{00{:X}}}", c as u32)),
            each(&|c| format!("\\{:o}", c as u32)),
            each(&|c| format!("\\{:03o}", c as u32)),
            each(&|c| format!("%u{:04X}", c as u32)),
            each(&|c| format!("&#{}", c as u32)),
            each(&|c| format!("&#x{:x}", c as u32)),
            "sk&hyphen;Test&dash;0123456789abcdef".into(),
            "sk&period;Test&lowbar;0123456789abcdef".into(),
            "sk&#x2dTest&#45-0123456789abcdef".into(),
        ] {
            // Each escape is replaced whole: nothing of it is left behind.
            assert_eq!(scrubbed(&format!("[{echoed}]")), "[<redacted>]", "{echoed}");
        }
    }

    #[test]
    fn escapes_decode_to_what_they_stand_for() {
        let view = |s: &str| String::from_utf8(View::decode(s.as_bytes()).bytes).unwrap();
        assert_eq!(view(r"\x2F\u{2f}\57\0\400%u002f&#47&#x2F;&sol;"), "///\u{0} 0////");
        assert_eq!(view("&amp;&amplifier&ampx;&bogus;&lt&Hat;"), "&&lifier&x;&bogus;<^");
        // Not escapes: left as they are.
        assert_eq!(view(r"\x4 \u{} \u{1234567} %u12 &# &#x; \q"), r"\x4 \u{} \u{1234567} %u12 &# &#x; \q");
        for (name, c) in NAMED_ENTITIES {
            assert!(name.len() <= MAX_ENTITY_NAME && name.len() + 2 <= MAX_ESCAPE_LEN, "{name}");
            assert_eq!(view(&format!("&{name};")), c.to_ascii_lowercase().to_string(), "{name}");
        }
    }

    #[test]
    fn utf16_and_base32_forms_are_found() {
        let utf16 = |le: bool| -> Vec<u8> {
            KEY.encode_utf16().flat_map(|u| if le { u.to_le_bytes() } else { u.to_be_bytes() }).collect()
        };
        let base32 = data_encoding::BASE32.encode(KEY.as_bytes());
        for echoed in [
            hex::encode(utf16(true)),
            hex::encode_upper(utf16(false)),
            base64::engine::general_purpose::STANDARD.encode(utf16(true)),
            base64::engine::general_purpose::URL_SAFE.encode([b"x".as_slice(), &utf16(false)].concat()),
            base32.clone(),
            base32.trim_end_matches('=').to_lowercase(),
        ] {
            let out = scrubbed(&format!("[{echoed}]"));
            assert!(out.starts_with('[') && out.ends_with(']') && out.contains("<redacted>"), "{echoed} -> {out}");
            // Only the characters at the ends, which also encode the bytes around the key, are left.
            assert!(out.len() <= "[<redacted>]".len() + 5, "{echoed} -> {out}");
        }
        // UTF-16 text itself: the zero bytes are separators (the last one,
        // after the key, stays).
        let text = [b"[".as_slice(), &utf16(true), b"]"].concat();
        assert_eq!(scrub(text, &[&Redactor::new([KEY.as_bytes()]).unwrap()]), b"[<redacted>\0]");
        // Base32 inside a longer string, at each of the five byte offsets.
        for offset in 0..5 {
            let blob = [&b"abcd"[..offset], KEY.as_bytes(), b":more"].concat();
            let encoded = data_encoding::BASE32.encode(&blob);
            let out = scrubbed(&encoded);
            // 24 key bytes are 38 characters; at most one at each end is left.
            assert!(
                out.contains("<redacted>") && out.len() + 26 <= encoded.len(),
                "offset {offset}: {encoded} -> {out}"
            );
        }
    }

    #[test]
    fn a_fragment_redacts_the_whole_run_around_it() {
        // An unknown entity splits the key: the twelve characters after it
        // go, the ten before it stay.
        assert_eq!(scrubbed("[sk-Test-0123&bogus;456789abcdef]"), "[sk-Test-0123&bogus;<redacted>]");
        // Fifteen characters of the key: all of them go, not only twelve.
        assert_eq!(scrubbed("xx sk-Test-012345678 yy"), "xx <redacted> yy");
        assert_eq!(scrubbed("xx S.K.T.E.S.T.0.1.2.3.4.5.6.7.8 yy"), "xx <redacted> yy");
        assert_eq!(scrubbed("xx 3456789abcdef"), "xx <redacted>");
        // Eleven are not enough.
        for text in ["xx sk-Test-01234 yy", "6789abcdefzz", "sktest0123&bogus;4567"] {
            assert_eq!(scrubbed(text), text);
        }
    }

    #[test]
    fn fragments_come_from_the_bare_key_and_short_keys_match_whole() {
        let prefixed = Redactor::new([format!("Bearer {KEY}").as_bytes(), KEY.as_bytes()]).unwrap();
        // The public prefix plus a few characters of some other key is not a fragment.
        let text = "use Bearer sk-Test-x in the header";
        assert_eq!(prefixed.redact_str(text), text);
        assert_eq!(prefixed.redact_str("Bearer sk-Test-0123456789"), "Bearer <redacted>");
        // A ten-character skeleton is matched whole, never in part.
        let short = Redactor::new([b"ab-cd-ef-gh-ij".as_slice()]).unwrap();
        assert_eq!(short.redact_str("[abcdefghij]"), "[<redacted>]");
        assert_eq!(short.redact_str("[abcdefghi]"), "[abcdefghi]");
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
        let short = Redactor::new([b"abc".as_slice()]).unwrap();
        assert!(short.is_empty());
        assert_eq!(short.max_match(), 0);
        let scrubber = Redactor::new([KEY.as_bytes()]).unwrap();
        // The hex of UTF-16 is the longest form: four characters per byte.
        assert_eq!(scrubber.max_match(), 4 * KEY.len() * (MAX_SEPARATOR_RUN + 1) * MAX_ESCAPE_LEN);
        assert!(!format!("{scrubber:?}").contains("0123"));
    }

    #[test]
    fn a_prefix_is_scrubbed_with_the_rest_as_context() {
        let scrubber = Redactor::new([KEY.as_bytes()]).unwrap();
        let input = format!("head {KEY} tail");
        // The cut falls inside the key: the whole key is released, redacted.
        let (out, consumed) = scrub_prefix(input.as_bytes(), &[&scrubber], 10);
        assert_eq!(out, b"head <redacted>");
        assert_eq!(consumed, 5 + KEY.len());
        // A cut before the match leaves it, raw, for the next piece.
        let (out, consumed) = scrub_prefix(input.as_bytes(), &[&scrubber], 3);
        assert_eq!((out.as_slice(), consumed), (b"hea".as_slice(), 3));
        let (out, consumed) = scrub_prefix(input.as_bytes(), &[&scrubber], input.len());
        assert_eq!((out, consumed), (scrub(input.clone().into_bytes(), &[&scrubber]), input.len()));
    }
}
