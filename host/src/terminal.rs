//! Showing untrusted text on a terminal.
//!
//! Tool arguments, paths, file contents, model text and server error bodies
//! all come from parties the operator does not control. Printed raw, an ESC
//! sequence in them could move the cursor, erase lines, retitle the window
//! or redraw the `ask` prompt, and a bidirectional override could reorder
//! what the operator reads. [`escape`] is the one routine every such string
//! goes through before it reaches a terminal: control characters come out as
//! visible `\x1b`-style escapes, so what is shown is what was sent.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

/// How line breaks are treated by [`escape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Newline and tab pass through: for answers and multi-line messages.
    Keep,
    /// Newline and tab are escaped too, so the text stays on one line: for
    /// prompts and one-line status output, which a newline could otherwise
    /// push out of view.
    Flatten,
}

/// Whether `c` must not reach a terminal raw: C0 controls and DEL, C1
/// controls (which some terminals honour as 8-bit CSI/OSC), and the Unicode
/// bidirectional controls.
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character shown as a visible escape
/// (`\x1b`, `\r`, `\u{202e}`); newline and tab are kept or escaped as
/// `lines` says. Text without controls is returned as it is.
pub fn escape(text: &str, lines: Lines) -> Cow<'_, str> {
    let keep = |c: char| lines == Lines::Keep && (c == '\n' || c == '\t');
    if !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
            continue;
        }
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// Appends the visible form of control character `c`.
fn push_escaped(out: &mut String, c: char) {
    let _ = match c {
        '\n' => out.write_str("\\n"),
        '\t' => out.write_str("\\t"),
        '\r' => out.write_str("\\r"),
        c if (c as u32) < 0x100 => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    };
}

/// Writes `text` and a newline to stderr, escaped (newlines kept). A closed
/// or full stderr is ignored: diagnostics must never crash the host.
pub fn eprint_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}", escape(text, Lines::Keep));
}

/// Writes `text` and a newline to stdout. When stdout is a terminal the text
/// is escaped (newlines kept); into a pipe or file it goes unchanged, so
/// output stays byte-exact for programs. A closed stdout (`nexo … | head`)
/// is ignored instead of panicking.
pub fn print_line(text: &str) {
    let stdout = std::io::stdout();
    let shown = if std::io::IsTerminal::is_terminal(&stdout) { escape(text, Lines::Keep) } else { Cow::Borrowed(text) };
    let mut out = stdout.lock();
    let _ = writeln!(out, "{shown}");
}

/// One formatted log record, made safe for a terminal. The `tracing`
/// formatter already escapes ESC, BEL, BS, FF, DEL and C1 inside messages
/// and fields; this escapes what it leaves: the other C0 controls (a `\r`
/// would let a field overwrite its own line) and the bidirectional
/// controls. ESC itself passes, since what remains of it is the
/// formatter's own colouring.
pub fn escape_log_record(record: &[u8]) -> Cow<'_, [u8]> {
    let text = String::from_utf8_lossy(record);
    let unsafe_here =
        |c: char| is_unsafe(c) && !matches!(c, '\n' | '\t' | '\x1b') && !('\u{7f}'..='\u{9f}').contains(&c);
    if !text.chars().any(unsafe_here) {
        return Cow::Borrowed(record);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_here(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out.into_bytes())
}

/// A JSON text with every [`is_unsafe`] character left in it written as a
/// `\uXXXX` escape. The JSON means the same, and stays safe to show on a
/// terminal (serde_json leaves DEL, C1 and bidirectional controls raw).
pub fn json_safe(json: &str) -> Cow<'_, str> {
    // serde_json escapes C0 inside strings; what it leaves raw outside them
    // is whitespace of pretty printing.
    let escape = |c: char| is_unsafe(c) && !matches!(c, '\n' | '\t' | '\r');
    if !json.chars().any(escape) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escape(c) {
            // Outside strings JSON is ASCII, so `c` is inside one.
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes one JSON value and a newline to stdout ([`json_safe`]); a closed
/// stdout is ignored.
pub fn print_json(value: &serde_json::Value) {
    let text = value.to_string();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", json_safe(&text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(escape("ls -la src/\tx\n", Lines::Keep), Cow::Borrowed(_)));
        assert!(matches!(escape("héllo → wörld", Lines::Flatten), Cow::Borrowed(_)));
    }

    #[test]
    fn the_prompt_spoof_is_shown_not_obeyed() {
        let attack = "touch PWNED #\r\x1b[2K\x1b[1A\x1b[2KAllow `shell` ls";
        let shown = escape(attack, Lines::Flatten);
        assert_eq!(shown, "touch PWNED #\\r\\x1b[2K\\x1b[1A\\x1b[2KAllow `shell` ls");
        assert!(!shown.chars().any(is_unsafe));
    }

    #[test]
    fn every_class_of_control_is_escaped() {
        let cases = [
            ("\x07bell", "\\x07bell"),
            ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
            ("del\x7f", "del\\x7f"),
            ("c1\u{9b}31m", "c1\\x9b31m"),
            ("bidi\u{202e}txt.exe", "bidi\\u{202e}txt.exe"),
            ("iso\u{2066}x\u{2069}", "iso\\u{2066}x\\u{2069}"),
            ("nul\0", "nul\\x00"),
        ];
        for (raw, want) in cases {
            assert_eq!(escape(raw, Lines::Keep), want, "{raw:?}");
        }
    }

    #[test]
    fn json_stays_valid_and_safe() {
        let value = serde_json::json!({ "t": "a\u{9b}b\u{202e}c\x7f\x1b[2K" });
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = json_safe(&text);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), value);
    }

    #[test]
    fn log_records_keep_colours_but_lose_line_tricks() {
        let record = b"\x1b[33m WARN\x1b[0m body: fake\rINFO ok \xe2\x80\xae\n";
        assert_eq!(&*escape_log_record(record), b"\x1b[33m WARN\x1b[0m body: fake\\rINFO ok \\u{202e}\n");
        assert!(matches!(escape_log_record(b"plain line\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn lines_decides_newlines_and_tabs() {
        assert_eq!(escape("a\nb\tc\r", Lines::Keep), "a\nb\tc\\r");
        assert_eq!(escape("a\nb\tc", Lines::Flatten), "a\\nb\\tc");
    }
}
