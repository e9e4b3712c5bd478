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
/// most a few dozen characters of the line around it.
pub fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let message = crate::truncate::head_chars(error.message().trim(), MESSAGE_CHARS);
    let Some(span) = error.span() else { return message };
    let start = text.floor_char_boundary(span.start);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    // A window of the line that starts a little before the error.
    let line = &text[line_start..line_end];
    let skip = column.saturating_sub(EXCERPT_CHARS / 3 + 1);
    let window: String = line.chars().skip(skip).take(EXCERPT_CHARS).collect();
    let cut_left = if skip > 0 { "…" } else { "" };
    let cut_right = if line.chars().count() > skip + EXCERPT_CHARS { "…" } else { "" };
    format!("line {line_no}, column {column}: {message} (at `{cut_left}{}{cut_right}`)", window.trim_end_matches('\r'))
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
