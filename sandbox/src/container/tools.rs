//! The [`Sandbox`] tools inside the container: files, glob, exec, and
//! removing it on close.

use std::time::Duration;

use super::cli::strings;
use super::config::Network;
use super::files::{DRAIN_STDIN, READ_SCRIPT, REFUSE_SPECIAL, WRITE_SCRIPT, special_refusal};
use super::lifecycle::is_gone;
use super::sandbox::ContainerSandbox;
use crate::{
    ExecOutput, FileStat, FileText, GlobMatches, MAX_FILE_BYTES, MAX_OUTPUT_BYTES, Sandbox, SandboxError, glob_matcher,
};

/// The most bytes of file listing one glob reads.
const MAX_LIST_BYTES: usize = 8 << 20;

impl Sandbox for ContainerSandbox {
    fn name(&self) -> &'static str {
        "container"
    }

    fn supports_shell(&self) -> bool {
        true
    }

    fn shell_network(&self) -> bool {
        !matches!(self.config.network, Network::None)
    }

    fn instructions(&self, shell: bool) -> Option<String> {
        let c = &self.config;
        let network = match &c.network {
            Network::None => "network none (no network access)".to_string(),
            Network::Bridge => "network bridge (outbound network access)".to_string(),
            Network::Host => "network host (the host's network)".to_string(),
            Network::Named(name) => format!("network {name}"),
        };
        let mut text = format!(
            "You run inside {} container (image {}), working directory {}, {network}.",
            c.runtime.with_article(),
            c.image,
            c.cwd
        );
        if c.readonly_rootfs {
            text.push_str(&format!(
                " The root filesystem is read-only; {} is a writable scratch directory whose contents are lost when \
                 the container is removed.",
                c.cwd
            ));
        } else {
            text.push_str(" The container's filesystem is writable.");
        }
        if !c.binds.is_empty() {
            let mounts: Vec<String> = c
                .binds
                .iter()
                .map(|b| format!("{} ({})", b.container, if b.writable { "writable" } else { "read-only" }))
                .collect();
            text.push_str(&format!(" Host directories are mounted at {}.", mounts.join(", ")));
        }
        if let Some(user) = &c.user {
            text.push_str(&format!(" Commands run as user {user}."));
        }
        text.push_str(if c.reconnect {
            " The container persists between sessions."
        } else {
            " The container is removed when the session ends."
        });
        text.push_str(if shell {
            " File tools and the shell act inside the container, not on the host."
        } else {
            " File tools act inside the container, not on the host."
        });
        Some(text)
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let (abs, _) = self.container_path(path)?;
        let id = self.container()?;
        let limit = (MAX_FILE_BYTES + 1).to_string();
        let script = format!("{REFUSE_SPECIAL}{READ_SCRIPT}");
        let out =
            self.op(&strings(&["exec", &id, "sh", "-c", &script, "sh", &abs, &limit]), None, MAX_FILE_BYTES + 1)?;
        self.forget_if_gone(&id, &out);
        if !out.ok() {
            return Err(self.file_error(path, &out));
        }
        if out.stdout.cut || out.stdout.bytes.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path} is over the {MAX_FILE_BYTES}-byte read limit; read a part of it with the shell"
            )));
        }
        let text = String::from_utf8(out.stdout.bytes)
            .map_err(|_| SandboxError::InvalidInput(format!("{path} is not UTF-8 text")))?;
        // The text is what matters; a failed stat only loses the time.
        let mtime = self.stat_at(&id, path, &abs).ok().flatten().and_then(|s| s.mtime);
        Ok(FileText { text, mtime })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let (abs, _) = self.container_path(path)?;
        let id = self.container()?;
        self.stat_at(&id, path, &abs)
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let (abs, is_root) = self.container_path(path)?;
        if is_root {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        if contents.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path}: {} bytes is over the {MAX_FILE_BYTES}-byte file limit",
                contents.len()
            )));
        }
        let id = self.container()?;
        let script = format!("{DRAIN_STDIN}{REFUSE_SPECIAL}{WRITE_SCRIPT}");
        let args = strings(&["exec", "-i", &id, "sh", "-c", &script, "sh", &abs]);
        let out = self.op(&args, Some(contents.as_bytes()), 1 << 20)?;
        self.forget_if_gone(&id, &out);
        if let Some(refused) = special_refusal(path, &out) {
            return Err(refused);
        }
        if !out.ok() {
            return Err(SandboxError::Failed(format!("cannot write {path}: {}", out.stderr_text())));
        }
        Ok(())
    }

    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        let id = self.container()?;
        // NUL-separated so a file name with a newline stays one entry.
        let args = strings(&["exec", "-w", &self.config.cwd, &id, "find", ".", "-type", "f", "-print0"]);
        let out = self.op(&args, None, MAX_LIST_BYTES)?;
        self.forget_if_gone(&id, &out);
        // find exits non-zero on one unreadable directory; what it listed still counts.
        if !out.ok() && out.stdout.bytes.is_empty() {
            return Err(SandboxError::Failed(format!(
                "cannot list files in {}: {}",
                self.config.cwd,
                out.stderr_text()
            )));
        }
        let mut entries: Vec<&[u8]> = out.stdout.bytes.split(|b| *b == 0).collect();
        if out.stdout.cut {
            // The last entry may be a fragment.
            entries.pop();
        }
        let found: Vec<String> = entries
            .into_iter()
            .filter_map(|e| std::str::from_utf8(e).ok())
            .map(|e| e.trim_start_matches("./"))
            .filter(|e| !e.is_empty() && *e != "." && matcher.is_match(e))
            .map(str::to_string)
            .collect();
        Ok(GlobMatches::new(found, out.stdout.cut))
    }

    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError> {
        let id = self.container()?;
        let args = strings(&["exec", "-w", &self.config.cwd, &id, "sh", "-c", command]);
        let Some(out) = self.cli(&args, None, timeout, MAX_OUTPUT_BYTES)? else {
            return Err(SandboxError::Timeout(format!(
                "the command ran past its {timeout:?} limit and its CLI was killed; the process may go on inside \
                 the container until it is closed. Raise the timeout or run long jobs in the background"
            )));
        };
        self.forget_if_gone(&id, &out);
        Ok(out.into())
    }

    fn close(&self) -> Result<(), SandboxError> {
        let mut slot = self.slot();
        let Some(id) = slot.take() else {
            return Ok(());
        };
        if self.config.reconnect {
            // Left running so the next session can reconnect to it.
            return Ok(());
        }
        let out = match self.op(&strings(&["rm", "-f", &id]), None, 1 << 20) {
            Ok(out) => out,
            Err(e) => {
                *slot = Some(id);
                return Err(e);
            }
        };
        if out.ok() || is_gone(&out.stderr_text()) {
            if let Some(tether) = self.tether_slot().take() {
                self.untie(tether);
            }
            return Ok(());
        }
        let message = out.stderr_text();
        *slot = Some(id.clone());
        Err(SandboxError::Failed(format!(
            "cannot remove container {id}: {message}; remove it with `{} rm -f {id}`",
            self.config.runtime.binary_name()
        )))
    }
}
