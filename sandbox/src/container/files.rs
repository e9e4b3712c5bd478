//! File operations inside the container: the scripts `sh` runs with the
//! path as `$1`, container paths, and the errors the CLI's output means.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::cli::strings;
use super::sandbox::ContainerSandbox;
use crate::path::{display, normalize};
use crate::process::Output as CliOutput;
use crate::{FileStat, SandboxError, not_regular};

/// Prints what kind of special file `$1` is and exits 5 when it is neither a
/// regular file nor a directory: a FIFO blocks `cat`, a device never ends.
pub(crate) const REFUSE_SPECIAL: &str = r#"if [ -e "$1" ] && [ ! -f "$1" ] && [ ! -d "$1" ]; then
  if [ -p "$1" ]; then echo fifo; elif [ -c "$1" ]; then echo char; elif [ -b "$1" ]; then echo block;
  elif [ -S "$1" ]; then echo socket; else echo special; fi
  exit 5
fi
"#;

/// The exit status of [`REFUSE_SPECIAL`].
const SPECIAL_STATUS: i32 = 5;

/// Reads the rest of stdin on the way out of a script that takes it: podman
/// loses the output of an `exec -i` that exits before its input ends (the
/// write's error message, the special-file refusal's kind).
pub(crate) const DRAIN_STDIN: &str = "trap 'cat > /dev/null' EXIT\n";

/// Creates the parent directory, then copies stdin into the file. The path
/// arrives as `$1`, so no part of it is ever parsed by the shell.
pub(crate) const WRITE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")" && cat > "$1""#;

/// Reads at most `$2` bytes of `$1`: `head` stops there, where `cat` on a
/// device would run until the timeout.
pub(crate) const READ_SCRIPT: &str = r#"exec head -c "$2" -- "$1""#;

/// The modification time of `$1`, following a symlink as the file tools do.
pub(crate) const STAT_SCRIPT: &str = r#"exec stat -c %Y -L -- "$1""#;

impl ContainerSandbox {
    /// The absolute container path of a tool's path argument, and whether it
    /// names the working directory itself.
    pub(crate) fn container_path(&self, path: &str) -> Result<(String, bool), SandboxError> {
        let rel = display(&normalize(Path::new(&self.config.cwd), path)?);
        let cwd = self.config.cwd.trim_end_matches('/');
        if rel.is_empty() { Ok((self.config.cwd.clone(), true)) } else { Ok((format!("{cwd}/{rel}"), false)) }
    }

    pub(crate) fn file_error(&self, path: &str, out: &CliOutput) -> SandboxError {
        if let Some(refused) = special_refusal(path, out) {
            return refused;
        }
        let message = out.stderr_text();
        let lower = message.to_lowercase();
        if lower.contains("no such file") || lower.contains("not a directory") {
            SandboxError::NotFound(format!("{path}: no such file"))
        } else if lower.contains("is a directory") {
            SandboxError::InvalidInput(format!("{path} is a directory; use glob to list it"))
        } else {
            SandboxError::Failed(format!("{path}: {message}"))
        }
    }

    pub(crate) fn stat_at(&self, id: &str, path: &str, abs: &str) -> Result<Option<FileStat>, SandboxError> {
        let script = format!("{REFUSE_SPECIAL}{STAT_SCRIPT}");
        let out = self.op(&strings(&["exec", id, "sh", "-c", &script, "sh", abs]), None, 4096)?;
        self.forget_if_gone(id, &out);
        if !out.ok() {
            return match self.file_error(path, &out) {
                SandboxError::NotFound(_) => Ok(None),
                other => Err(other),
            };
        }
        let secs = String::from_utf8_lossy(&out.stdout.bytes).trim().parse::<u64>().ok();
        Ok(Some(FileStat { mtime: secs.map(|s| UNIX_EPOCH + Duration::from_secs(s)) }))
    }
}

/// The refusal [`REFUSE_SPECIAL`] asked for, if it did.
pub(crate) fn special_refusal(path: &str, out: &CliOutput) -> Option<SandboxError> {
    if out.status != Some(SPECIAL_STATUS) {
        return None;
    }
    let kind = match String::from_utf8_lossy(&out.stdout.bytes).trim() {
        "fifo" => "a FIFO (named pipe)",
        "char" => "a character device",
        "block" => "a block device",
        "socket" => "a socket",
        _ => "not a regular file",
    };
    Some(not_regular(path, kind))
}
