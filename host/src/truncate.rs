//! The one output-truncation routine. Everything that hands long text to a
//! model (shell output now; fetched pages and tool results later) goes
//! through it, so one command cannot flood a small context window.

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
        kept.push_str(&format!("\n…[truncated {dropped} lines]"));
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
    fn keeps_the_last_lines_and_marks_the_cut() {
        let text: String = (1..=250).map(|i| format!("line {i}\n")).collect();
        let out = truncate(&text, Truncation::default());
        assert!(out.starts_with("line 51\n"), "{}", &out[..20]);
        assert!(out.ends_with("line 250\n…[truncated 50 lines]"));
        assert_eq!(out.lines().count(), 201);
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
    fn short_text_is_untouched() {
        assert_eq!(truncate("ok\nfine", Truncation::default()), "ok\nfine");
        assert_eq!(truncate("", Truncation::default()), "");
    }
}
