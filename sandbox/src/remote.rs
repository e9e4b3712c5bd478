//! The remote sandbox: any client that can read, write, exec and close.
//!
//! Vendor adapters (E2B, Daytona, Modal, your own) implement [`RemoteClient`]
//! in Rust, or ship as a `sandbox-provider` component that the host wraps in
//! one. This module holds no vendor code.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::path::{display, normalize};
use crate::{ExecOutput, FileStat, FileText, MAX_GLOB_MATCHES, Sandbox, SandboxError, glob_matcher};

/// What a remote sandbox needs from its client.
///
/// `exec` runs `command` with `sh -c`, with `args` as the positional
/// parameters `$1`, `$2`, …: the sandbox passes untrusted values (paths, glob
/// patterns) only that way, never inside `command`.
pub trait RemoteClient: Send + Sync {
    /// Reads a text file by absolute path.
    fn read(&self, path: &str) -> Result<String, SandboxError>;
    /// Creates or replaces a file by absolute path, creating parents.
    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError>;
    /// Runs `sh -c command sh args…`.
    fn exec(&self, command: &str, args: &[String], timeout: Duration) -> Result<ExecOutput, SandboxError>;
    /// Releases the remote environment. Idempotent.
    fn close(&self) -> Result<(), SandboxError>;
}

/// A sandbox backed by a [`RemoteClient`].
pub struct RemoteSandbox {
    client: Box<dyn RemoteClient>,
    cwd: String,
    label: String,
}

impl std::fmt::Debug for RemoteSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSandbox").field("cwd", &self.cwd).field("label", &self.label).finish_non_exhaustive()
    }
}

/// How long the sandbox's own helper commands (stat, listing) may take.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

impl RemoteSandbox {
    /// Wraps `client`, whose working directory is `cwd` (for example
    /// `/workspace`); `label` names the provider in the model's instructions.
    pub fn new(client: Box<dyn RemoteClient>, cwd: &str, label: &str) -> Result<Self, SandboxError> {
        if !cwd.starts_with('/') {
            return Err(SandboxError::Config(format!("the remote working directory must be absolute, not {cwd:?}")));
        }
        Ok(RemoteSandbox { client, cwd: cwd.trim_end_matches('/').to_string(), label: label.into() })
    }

    fn absolute(&self, path: &str) -> Result<String, SandboxError> {
        let rel = normalize(Path::new(&self.cwd), path)?;
        let rel = display(&rel);
        Ok(if rel.is_empty() { self.cwd.clone() } else { format!("{}/{rel}", self.cwd) })
    }
}

impl Sandbox for RemoteSandbox {
    fn name(&self) -> &'static str {
        "remote"
    }

    fn supports_shell(&self) -> bool {
        true
    }

    fn instructions(&self) -> Option<String> {
        Some(format!(
            "You run in a remote sandbox ({}), working directory {}. Files and commands act there, not on the host.",
            self.label, self.cwd
        ))
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let abs = self.absolute(path)?;
        let text = self.client.read(&abs)?;
        let mtime = self.stat(path)?.and_then(|s| s.mtime);
        Ok(FileText { text, mtime })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let abs = self.absolute(path)?;
        let out = self.client.exec(r#"[ -e "$1" ] || exit 3; stat -c %Y -- "$1""#, &[abs], HELPER_TIMEOUT)?;
        match out.status {
            0 => {
                let secs = out.stdout.trim().parse::<u64>().ok();
                Ok(Some(FileStat { mtime: secs.map(|s| UNIX_EPOCH + Duration::from_secs(s)) }))
            }
            3 => Ok(None),
            _ => Ok(Some(FileStat { mtime: None::<SystemTime> })),
        }
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let abs = self.absolute(path)?;
        if abs == self.cwd {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        self.client.write(&abs, contents)
    }

    fn glob(&self, pattern: &str) -> Result<Vec<String>, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        // The remote side narrows by file name; the exact match happens here.
        // Both the directory and the name pattern travel as positional
        // arguments, never inside the command text.
        let last = pattern.trim().rsplit('/').next().unwrap_or("*");
        let name = if last.contains("**") || last.is_empty() { "*".to_string() } else { last.to_string() };
        let out = self.client.exec(
            r#"cd -- "$1" && find . -type f -name "$2" 2>/dev/null | head -n 100000"#,
            &[self.cwd.clone(), name],
            HELPER_TIMEOUT,
        )?;
        if out.status != 0 {
            return Err(SandboxError::Failed(format!("listing files failed: {}", out.stderr.trim())));
        }
        let mut found: Vec<String> = out
            .stdout
            .lines()
            .map(|l| l.trim_start_matches("./").to_string())
            .filter(|p| !p.is_empty() && matcher.is_match(p))
            .collect();
        found.sort();
        found.truncate(MAX_GLOB_MATCHES);
        Ok(found)
    }

    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError> {
        // The model's command runs in the working directory; it is the one
        // value that is meant to be shell text.
        self.client.exec(r#"cd -- "$1" || exit 1; eval "$2""#, &[self.cwd.clone(), command.to_string()], timeout)
    }

    fn close(&self) -> Result<(), SandboxError> {
        self.client.close()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records every call and answers from a tiny in-memory store.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<(String, Vec<String>)>>,
        files: Mutex<std::collections::BTreeMap<String, String>>,
    }

    impl RemoteClient for &'static Recorder {
        fn read(&self, path: &str) -> Result<String, SandboxError> {
            self.files.lock().unwrap().get(path).cloned().ok_or_else(|| SandboxError::NotFound(path.into()))
        }
        fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
            self.files.lock().unwrap().insert(path.into(), contents.into());
            Ok(())
        }
        fn exec(&self, command: &str, args: &[String], _t: Duration) -> Result<ExecOutput, SandboxError> {
            self.calls.lock().unwrap().push((command.into(), args.to_vec()));
            if command.contains("find") {
                let files = self.files.lock().unwrap();
                let listing: Vec<String> = files.keys().map(|k| k.replacen("/workspace/", "./", 1)).collect();
                return Ok(ExecOutput { status: 0, stdout: listing.join("\n"), stderr: String::new() });
            }
            if command.contains("stat") {
                return Ok(ExecOutput { status: 3, ..ExecOutput::default() });
            }
            Ok(ExecOutput { status: 0, stdout: "ran".into(), stderr: String::new() })
        }
        fn close(&self) -> Result<(), SandboxError> {
            Ok(())
        }
    }

    #[test]
    fn untrusted_values_travel_as_positional_arguments() {
        let rec: &'static Recorder = Box::leak(Box::default());
        let s = RemoteSandbox::new(Box::new(rec), "/workspace", "test").unwrap();
        s.write("src/a.rs", "x").unwrap();
        s.write("b.rs", "y").unwrap();
        s.write("notes.md", "z").unwrap();
        assert_eq!(s.glob("**/*.rs").unwrap(), vec!["b.rs", "src/a.rs"]);
        assert_eq!(s.read("/workspace/src/a.rs").unwrap().text, "x");
        let evil = "*$(touch pwned);`id`.rs";
        s.glob(evil).unwrap();
        assert_eq!(s.exec("echo hi; ls", Duration::from_secs(1)).unwrap().stdout, "ran");
        let calls = rec.calls.lock().unwrap();
        // No command text ever contains a path, a pattern or the model's command.
        for (command, _) in calls.iter() {
            assert!(!command.contains("workspace") && !command.contains("pwned") && !command.contains("echo hi"));
        }
        assert!(calls.iter().any(|(_, args)| args == &vec!["/workspace".to_string(), evil.to_string()]));
        assert!(calls.iter().any(|(_, args)| args.get(1).is_some_and(|a| a == "echo hi; ls")));
        assert!(matches!(s.read("../etc/passwd"), Err(SandboxError::Security(_))));
        assert!(matches!(s.glob("/etc/*"), Err(SandboxError::Security(_))));
    }
}
