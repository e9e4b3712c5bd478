//! Reading the files an operator names: components, TOML agents and the
//! config file.
//!
//! Each is read only if it is a regular file, opened without blocking, and
//! never past a size cap counted in bytes actually read. So a FIFO or a
//! device passed by mistake (or through a symlink) is a clear error instead
//! of a hang or an unbounded read. TOML errors name the line and column and
//! quote a short excerpt, never the whole line.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest TOML file (agent or config) read: 1 MiB.
pub const MAX_TOML_BYTES: u64 = 1 << 20;

/// The largest component file read: 512 MiB.
pub const MAX_COMPONENT_BYTES: u64 = 512 << 20;

/// The most characters of a TOML line quoted in an error.
const EXCERPT_CHARS: usize = 60;

/// The most characters of a TOML parser message kept (serde messages can
/// quote a whole offending value).
const MESSAGE_CHARS: usize = 300;

/// Reads `path` whole if it is a regular file of at most `max` bytes.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    let file = File::options().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {}, not a regular file; pass the file itself", kind_name(&kind)),
        ));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is larger than the {max}-byte limit for this kind of file"),
        ));
    }
    Ok(bytes)
}

/// [`read_regular`] for text: the bytes must be UTF-8.
pub fn read_regular_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// What kind of file `kind` is, for messages.
pub fn kind_name(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

/// A TOML parse error as one short line: where it is, what is wrong, and at
/// most a few dozen characters of the line around it. Values are never
/// shown: strings (in the quoted line and in the parser's message) and the
/// bare words after a `=` become `…`. A config file's values hold tokens and
/// headers, and a stray character next to a token, or a token missing its
/// quotes, must not put it on the terminal or in a log.
pub fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let message = crate::truncate::head_chars(&mask_quoted(error.message().trim()), MESSAGE_CHARS);
    let Some(span) = error.span() else { return message };
    let start = text.floor_char_boundary(span.start);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    // A window of the line that starts a little before the error, strings masked.
    let in_string = string_chars(&text[..line_end]);
    let line: Vec<(char, bool)> =
        text[line_start..line_end].char_indices().map(|(i, c)| (c, in_string[line_start + i])).collect();
    // Values are masked too, quoted or not (a token written without its
    // quotes is still a token): after the line's first `=`, only TOML's
    // punctuation is shown. A table header shows whole (strings aside).
    let header = line.iter().find(|(c, _)| !c.is_whitespace()).is_some_and(|(c, _)| *c == '[');
    let mut after_equals = false;
    let mut line: Vec<(char, bool)> = line
        .into_iter()
        .map(|(c, inside)| {
            let value = after_equals && !header && !(c.is_whitespace() || "[]{},=\"'".contains(c));
            after_equals |= c == '=' && !inside;
            (c, inside || value)
        })
        .collect();
    // Nothing after the error is shown: the parser never read it, so the
    // scan above may have paired its quotes wrongly (a stray quote before
    // a token turns the token into "unquoted" text). The character at the
    // error shows only if it is TOML punctuation.
    let cut_after = line.len() > column;
    let at_a_character = line.len() >= column;
    line.truncate(column);
    if let Some(last) = line.last_mut().filter(|_| at_a_character) {
        let punctuation = last.0.is_whitespace() || "[]{},=\"'#.".contains(last.0);
        last.1 |= !punctuation;
    }
    if cut_after && !line.last().is_some_and(|(_, masked)| *masked) {
        line.push(('…', false));
    }
    let skip = column.saturating_sub(EXCERPT_CHARS / 3 + 1);
    let mut window = String::new();
    let mut masking = false;
    for &(c, inside) in line.iter().skip(skip).take(EXCERPT_CHARS) {
        if inside {
            if !masking {
                window.push('…');
            }
            masking = true;
        } else {
            masking = false;
            window.push(c);
        }
    }
    let cut_left = if skip > 0 { "…" } else { "" };
    let cut_right = if line.len() > skip + EXCERPT_CHARS { "…" } else { "" };
    format!("line {line_no}, column {column}: {message} (at `{cut_left}{}{cut_right}`)", window.trim_end_matches('\r'))
}

/// For each byte of `text`, whether it is inside a TOML string (its quotes
/// excluded): basic, literal and multi-line strings, with comments skipped.
/// A one-line string that is not closed ends with its line; a multi-line
/// one runs to the end.
fn string_chars(text: &str) -> Vec<bool> {
    let mut inside = vec![false; text.len()];
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes[i..].starts_with(if quote == b'"' { b"\"\"\"" } else { b"\'\'\'" });
                let open = if triple { 3 } else { 1 };
                i += open;
                while i < bytes.len() {
                    if quote == b'"' && bytes[i] == b'\\' {
                        inside[i] = true;
                        if i + 1 < bytes.len() {
                            inside[i + 1] = true;
                        }
                        i += 2;
                        continue;
                    }
                    let closes = if triple { bytes[i..].starts_with(&[quote; 3]) } else { bytes[i] == quote };
                    if closes {
                        i += open;
                        break;
                    }
                    // A one-line string ends at the line's end, as TOML says.
                    if !triple && bytes[i] == b'\n' {
                        break;
                    }
                    inside[i] = true;
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    inside
}

/// `message` with the contents of its double-quoted parts shown as `…`:
/// serde quotes a mistyped value whole (`invalid type: string "…"`), and
/// an unknown enum value in backticks (`unknown variant `…``). Field names
/// stay: they are keys, and the user needs them to find a typo.
fn mask_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '`' && out.ends_with("variant `") {
            if chars.by_ref().any(|c| c == '`') {
                out.push_str("…`");
            } else {
                out.push('…');
            }
            continue;
        }
        if c == '"' {
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    _ => {}
                }
            }
            out.push('…');
            if closed {
                out.push('"');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
    }

    fn problem(text: &str) -> String {
        toml_problem(text, &toml::from_str::<Doc>(text).unwrap_err())
    }

    #[test]
    fn a_huge_line_is_quoted_only_near_the_error() {
        let text = format!("name = \"x\"\nbad = {}@\n", "a".repeat(200_000));
        let shown = problem(&text);
        assert!(shown.starts_with("line 2, column 7: "), "{shown}");
        assert!(shown.len() < 500, "{} bytes", shown.len());
    }

    #[test]
    fn a_line_of_another_file_is_not_echoed_whole() {
        let text = "root:x:0:0:root:/root:/bin/bash-and-a-very-long-tail-of-secret-looking-material-here\n";
        let shown = problem(text);
        assert!(shown.starts_with("line 1"), "{shown}");
        assert!(!shown.contains("secret-looking-material-here"), "{shown}");
    }

    #[test]
    fn nothing_after_the_error_is_quoted() {
        // Found by the config file's fuzz target: a stray quote before a
        // string made the scan pair the quotes the other way round, and the
        // string's content showed as if it were outside one.
        let text = "[mcp.x]\nheadc3\" } xers = { x-api-key = \"sk-secret-7\" } x\n";
        let shown = toml_problem(text, &toml::from_str::<toml::Table>(text).unwrap_err());
        assert!(shown.contains("(at `headc3\"…`)"), "{shown}");
        assert!(!shown.contains("sk-secret"), "{shown}");
    }

    #[test]
    fn strings_are_never_quoted() {
        // Found by the config file's fuzz target: a stray character after a
        // token put the token in the error.
        let text = "[mcp.x]\nheaders = { x-api-key = \"sk-secret-1\" } x\ntoken = 'sk-secret-2' ,\n";
        let shown = toml_problem(text, &toml::from_str::<toml::Table>(text).unwrap_err());
        assert!(shown.starts_with("line 2, column "), "{shown}");
        assert!(shown.contains(r#"= "…" } …`"#), "{shown}");
        assert!(!shown.contains("sk-secret"), "{shown}");
        // A multi-line string is masked on its later lines too, and serde's
        // messages do not quote a mistyped value.
        let text = "name = \"\"\"\nsk-secret-3 \" x\n\"\"\" y\n";
        let shown = toml_problem(text, &toml::from_str::<toml::Table>(text).unwrap_err());
        assert!(!shown.contains("sk-secret"), "{shown}");
        // Nor a token that lost its quotes; the key and the structure still show.
        let text = "[mcp.x]\ntoken = sk-secret-5\n";
        let shown = toml_problem(text, &toml::from_str::<toml::Table>(text).unwrap_err());
        assert!(shown.contains("(at `token = …`)"), "{shown}");
        let shown = problem("name = 1\n");
        assert!(shown.contains("line 1"), "{shown}");
        assert_eq!(
            mask_quoted(r#"invalid type: string "sk-secret-4\"x", expected a map"#),
            r#"invalid type: string "…", expected a map"#
        );
        // An enum's unknown value is a value too; a field's name is a key.
        assert_eq!(
            mask_quoted("unknown variant `sk-secret-6`, expected `auto` or `none`"),
            "unknown variant `…`, expected `auto` or `none`"
        );
        assert_eq!(mask_quoted("unknown field `tokne`, expected `token`"), "unknown field `tokne`, expected `token`");
    }

    #[test]
    fn long_serde_messages_are_cut() {
        let text = format!("name = 1\nother = \"{}\"\n", "v".repeat(10_000));
        assert!(problem(&text).chars().count() < MESSAGE_CHARS + 200);
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("agent.toml");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        let e = read_regular(&fifo, MAX_TOML_BYTES).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), MAX_TOML_BYTES).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        assert!(read_regular(dir.path(), MAX_TOML_BYTES).is_err());
    }

    #[test]
    fn the_cap_counts_bytes_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, vec![b'a'; 11]).unwrap();
        assert_eq!(read_regular(&file, 11).unwrap().len(), 11);
        assert!(read_regular(&file, 10).unwrap_err().to_string().contains("10-byte limit"));
    }
}
