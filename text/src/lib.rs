//! The one place text is cut before it reaches a model: shell output keeps
//! its end ([`truncate`]), fetched pages and search snippets keep their start
//! ([`head_chars`], [`head_bytes`]), and output read up to a byte cap says
//! where it was cut ([`capped_output`]). One crate, so every cut is marked
//! the same way, never splits a character, and a long page or a noisy command
//! cannot flood a small context window.
//!
//! A crate of its own, without dependencies, so the sandbox (which the host
//! depends on) cuts its process output with the same code as the host.

/// Limits for [`truncate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Lines kept, counted from the end.
    pub max_lines: usize,
    /// Characters kept after the line cut.
    pub max_chars: usize,
}

impl Default for Truncation {
    /// 200 lines and 16 000 characters, as for shell output.
    fn default() -> Self {
        Truncation { max_lines: 200, max_chars: 16_000 }
    }
}

/// Strips ANSI escape sequences, keeps the **last** `max_lines` lines (the end
/// of a build log is where the error is), notes how many lines were dropped,
/// then caps the result at `max_chars` characters.
pub fn truncate(text: &str, limits: Truncation) -> String {
    let clean = strip_ansi(text);
    let lines: Vec<&str> = clean.lines().collect();
    let mut out = if lines.len() > limits.max_lines {
        let dropped = lines.len() - limits.max_lines;
        let mut kept = lines[dropped..].join("\n");
        // With no line kept, the note alone (not an empty line before it).
        if !kept.is_empty() {
            kept.push('\n');
        }
        kept.push_str(&format!("…[truncated {dropped} lines]"));
        kept
    } else {
        clean
    };
    if out.chars().count() > limits.max_chars {
        out = out.chars().take(limits.max_chars).collect();
        out.push_str("…[truncated]");
    }
    out
}

/// Keeps the first `max` characters of `text`, ending with `…` when cut (the
/// ellipsis counts towards `max`). Used for search snippets and titles, skill
/// descriptions in the listing, and text quoted in error messages.
pub fn head_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    // No room even for the ellipsis (found by the text_truncate fuzz target).
    if max == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The first line of `text`, at most `max` characters, ending with `…` when
/// anything was left out (a longer line, or more lines). For one-line
/// summaries: progress lines, events, `nexo inspect` rows.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > max || text.lines().nth(1).is_some() {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line.to_string()
    }
}

/// Decodes at most `max` bytes of `bytes` as UTF-8 (invalid sequences become
/// U+FFFD) without splitting a character at the cut. Returns the text and
/// whether anything was dropped. Used for fetched pages.
pub fn head_bytes(bytes: &[u8], max: usize) -> (String, bool) {
    if bytes.len() <= max {
        return (String::from_utf8_lossy(bytes).into_owned(), false);
    }
    (String::from_utf8_lossy(without_split_char(&bytes[..max])).into_owned(), true)
}

/// The first at most `max` bytes of `text`, cut at a character boundary,
/// borrowed; and whether anything was dropped. [`head_bytes`] for text that
/// is already UTF-8, without a copy: used for log lines, on every call.
pub fn head_str(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    (&text[..text.floor_char_boundary(max)], true)
}

/// The text of output that was read up to `cap` bytes: `kept` is what was
/// kept, `cut` whether more came. Decoded as UTF-8 (invalid sequences become
/// U+FFFD); when cut, a character split at the cap is dropped and a last line
/// names the stream and the cap, as [`cut_note`] writes it. Used for the
/// output of shell commands and container CLIs.
pub fn capped_output(kept: &[u8], cut: bool, cap: usize, stream: &str) -> String {
    if !cut {
        return String::from_utf8_lossy(kept).into_owned();
    }
    let mut text = String::from_utf8_lossy(without_split_char(&kept[..kept.len().min(cap)])).into_owned();
    text.push('\n');
    text.push_str(&cut_note(stream, cap));
    text
}

/// The note that ends output cut at `cap` bytes: `[stdout cut at 4194304 bytes]`.
pub fn cut_note(stream: &str, cap: usize) -> String {
    format!("[{stream} cut at {cap} bytes]")
}

/// `bytes` without a last character that the end cuts short, so a cut never
/// shows half a character as U+FFFD. Invalid sequences are left for the
/// lossy decoding to mark.
fn without_split_char(bytes: &[u8]) -> &[u8] {
    // A character is at most four bytes: its first byte is among the last four.
    for back in 1..=bytes.len().min(4) {
        let at = bytes.len() - back;
        let byte = bytes[at];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let len = match byte.leading_ones() {
            n @ 2..=4 => n as usize,
            _ => 1,
        };
        return if len > back { &bytes[..at] } else { bytes };
    }
    bytes
}

/// Removes CSI (`ESC [ … letter`) and OSC (`ESC ] … BEL/ST`) sequences and
/// lone escapes.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.peek() == Some(&'\\')) {
                        if c == '\u{1b}' {
                            chars.next();
                        }
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_keeps_one_line_and_marks_the_rest() {
        assert_eq!(first_line("short", 10), "short");
        assert_eq!(first_line("one\ntwo", 10), "one…");
        assert_eq!(first_line("abcdefghijkl", 10), "abcdefghij…");
        assert_eq!(first_line("", 10), "");
    }

    #[test]
    fn keeps_the_last_lines_and_marks_the_cut() {
        let text: String = (1..=250).map(|i| format!("line {i}\n")).collect();
        let out = truncate(&text, Truncation::default());
        assert!(out.starts_with("line 51\n"), "{}", &out[..20]);
        assert!(out.ends_with("line 250\n…[truncated 50 lines]"));
        assert_eq!(out.lines().count(), 201);
    }

    #[test]
    fn keeping_no_line_leaves_the_note_alone() {
        // Found by the text_truncate fuzz target: the note used to follow an empty line.
        let out = truncate("one\ntwo", Truncation { max_lines: 0, max_chars: 100 });
        assert_eq!(out, "…[truncated 2 lines]");
    }

    #[test]
    fn caps_characters_after_lines() {
        let out = truncate(&"x".repeat(20_000), Truncation::default());
        assert_eq!(out.chars().count(), 16_000 + "…[truncated]".chars().count());
    }

    #[test]
    fn strips_ansi_escapes() {
        let out = truncate("\u{1b}[31mred\u{1b}[0m and \u{1b}]0;title\u{7}plain", Truncation::default());
        assert_eq!(out, "red and plain");
    }

    #[test]
    fn head_chars_counts_characters_and_marks_the_cut() {
        assert_eq!(head_chars("short", 300), "short");
        let cut = head_chars(&"é".repeat(400), 300);
        assert_eq!(cut.chars().count(), 300);
        assert!(cut.ends_with('…'));
        assert_eq!(head_chars(&"x".repeat(300), 300), "x".repeat(300));
        // A cap of zero keeps nothing, not even the ellipsis.
        assert_eq!(head_chars("abc", 0), "");
    }

    #[test]
    fn head_bytes_never_splits_a_character() {
        let text = "aé€😀".repeat(10);
        for max in 0..text.len() + 2 {
            let (out, cut) = head_bytes(text.as_bytes(), max);
            assert!(out.len() <= max, "{max}: {out}");
            assert!(!out.contains('\u{fffd}'), "{max}: {out}");
            assert_eq!(cut, max < text.len());
            assert!(text.starts_with(&out));
        }
        assert_eq!(head_bytes(b"ok", 200_000), ("ok".to_string(), false));
    }

    #[test]
    fn head_str_cuts_where_head_bytes_does() {
        let text = "aé€😀".repeat(10);
        for max in 0..text.len() + 2 {
            let (out, cut) = head_bytes(text.as_bytes(), max);
            assert_eq!(head_str(&text, max), (out.as_str(), cut), "{max}");
        }
    }

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate("ok\nfine", Truncation::default()), "ok\nfine");
        assert_eq!(truncate("", Truncation::default()), "");
    }

    #[test]
    fn capped_output_names_the_stream_and_the_cap() {
        assert_eq!(capped_output(b"all of it", false, 9, "stdout"), "all of it");
        assert_eq!(capped_output(b"0123", true, 4, "stderr"), "0123\n[stderr cut at 4 bytes]");
        assert_eq!(cut_note("stdout", 4 << 20), "[stdout cut at 4194304 bytes]");
        // Invalid bytes are shown, not refused.
        assert_eq!(capped_output(b"a\xffb", false, 8, "stdout"), "a\u{fffd}b");
    }

    #[test]
    fn capped_output_never_splits_a_character() {
        let text = "aé€😀".repeat(10);
        for cap in 0..text.len() {
            let out = capped_output(&text.as_bytes()[..cap], true, cap, "stdout");
            let (kept, note) = out.rsplit_once('\n').unwrap();
            assert_eq!(note, format!("[stdout cut at {cap} bytes]"));
            assert!(!kept.contains('\u{fffd}') && text.starts_with(kept), "{cap}: {kept}");
            // At most the three bytes of a split character are dropped.
            assert!(kept.len() + 3 >= cap, "{cap}: {kept}");
        }
    }

    #[test]
    fn a_lone_lead_byte_at_the_cut_is_dropped_but_invalid_bytes_before_it_stay_marked() {
        assert_eq!(capped_output(b"\xffab\xe2", true, 4, "stdout"), "\u{fffd}ab\n[stdout cut at 4 bytes]");
        assert_eq!(
            capped_output(b"ab\x80\x80\x80\x80", true, 6, "stdout"),
            format!("ab{}\n[stdout cut at 6 bytes]", "\u{fffd}".repeat(4))
        );
    }
}
