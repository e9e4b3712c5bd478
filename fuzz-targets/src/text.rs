//! The one truncation routine (`nexo-text`): nothing it returns is longer
//! than the cap its caller asked for.

use nexo_text::{Truncation, capped_output, first_line, head_bytes, head_chars, head_str, truncate};

/// The note [`truncate`] adds after a character cut.
const CHAR_NOTE: &str = "…[truncated]";

/// Every cut of `nexo-text` on arbitrary text and limits. The first four
/// bytes choose the limits, the rest is the text (invalid UTF-8 as U+FFFD).
pub fn text_truncate(data: &[u8]) {
    let (limits, rest) = data.split_at(data.len().min(4));
    let limit = |i: usize| limits.get(i).copied().unwrap_or(0) as usize;
    let (max_lines, max_chars, max) = (limit(0) % 64, limit(1) * 4, limit(2) + (limit(3) % 16) * 256);
    let text = String::from_utf8_lossy(rest);

    let out = truncate(&text, Truncation { max_lines, max_chars });
    // The line cut adds one note line; then the character cap holds, plus its note.
    let chars = out.chars().count();
    assert!(chars <= max_chars + CHAR_NOTE.chars().count(), "truncate: {chars} chars for a cap of {max_chars}");
    if !out.ends_with(CHAR_NOTE) {
        assert!(out.lines().count() <= max_lines + 1, "truncate kept more than {max_lines} lines and its note");
    }

    let out = head_chars(&text, max);
    assert!(out.chars().count() <= max, "head_chars: {} chars for a cap of {max}", out.chars().count());
    assert!(text.starts_with(out.trim_end_matches('…')), "head_chars changed the text it kept");

    let out = first_line(&text, max);
    // The ellipsis follows the `max` characters kept.
    assert!(out.chars().count() <= max + 1, "first_line: {} chars for a cap of {max}", out.chars().count());
    assert!(!out.contains('\n'), "first_line kept a line break");

    let (out, cut) = head_bytes(rest, max);
    if std::str::from_utf8(rest).is_ok() {
        assert!(out.len() <= max, "head_bytes: {} bytes for a cap of {max}", out.len());
        assert!(text.starts_with(&out), "head_bytes changed the text it kept");
    }
    assert_eq!(cut, rest.len() > max, "head_bytes: wrong `cut` flag");
    if let Ok(valid) = std::str::from_utf8(rest) {
        // The borrowing cut keeps exactly what the copying one keeps.
        assert_eq!(head_str(valid, max), (out.as_str(), cut), "head_str and head_bytes disagree");
    }

    let kept = &rest[..rest.len().min(max)];
    let out = capped_output(kept, rest.len() > max, max, "stdout");
    if rest.len() > max {
        let Some((body, note)) = out.rsplit_once('\n') else { panic!("a cut output must end with its note: {out:?}") };
        assert_eq!(note, format!("[stdout cut at {max} bytes]"));
        if std::str::from_utf8(kept).is_ok() {
            assert!(body.len() <= max, "capped_output: {} bytes for a cap of {max}", body.len());
        }
    }
}
