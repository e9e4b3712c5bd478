//! The remote sandbox: any client that can read, write, exec and close.
//!
//! Vendor adapters (E2B, Daytona, Modal, your own) implement [`RemoteClient`]
//! in Rust, or ship as a `sandbox-provider` component that the host wraps in
//! one. This module holds no vendor code.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::path::{display, normalize};
use crate::{
    ExecOutput, FileStat, FileText, GlobMatches, MAX_FILE_BYTES, Sandbox, SandboxError, glob_matcher, not_regular,
};

/// What a remote sandbox needs from its client.
///
/// `exec` runs `command` with `sh -c`, with `args` as the positional
/// parameters `$1`, `$2`, …: the sandbox passes untrusted values (paths, glob
/// patterns) only that way, never inside `command`.
pub trait RemoteClient: Send + Sync {
    /// Reads a text file by absolute path. The sandbox has checked that it
    /// is a regular file just before; an implementation should still read
    /// at most [`MAX_FILE_BYTES`] + 1 bytes, since the host holds what it
    /// returns in memory.
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

/// The most file names one glob takes from the remote listing; `head`
/// passes one more, so a cut listing is known to be cut.
const MAX_LISTED: usize = 100_000;

/// The modification time of `$1` (exit 0), or exit 3 when it does not
/// exist, or exit 4 with its kind when it is neither a regular file nor a
/// directory. Symlinks are followed, as reading them does.
const STAT_SCRIPT: &str = r#"[ -e "$1" ] || exit 3
if [ ! -f "$1" ] && [ ! -d "$1" ]; then
  if [ -p "$1" ]; then echo 'a FIFO (named pipe)'; elif [ -c "$1" ]; then echo 'a character device';
  elif [ -b "$1" ]; then echo 'a block device'; elif [ -S "$1" ]; then echo 'a socket'; else echo 'not a regular file'; fi
  exit 4
fi
stat -c %Y -L -- "$1""#;

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

    fn instructions(&self, shell: bool) -> Option<String> {
        Some(format!(
            "You run in a remote sandbox ({}), working directory {}. {} act there, not on the host.",
            self.label,
            self.cwd,
            if shell { "Files and commands" } else { "Files" }
        ))
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let abs = self.absolute(path)?;
        // Checked first: a client's plain read of a FIFO blocks, of a device never ends.
        let Some(stat) = self.stat(path)? else {
            return Err(SandboxError::NotFound(format!("{path}: no such file")));
        };
        let text = self.client.read(&abs)?;
        if text.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path} is over the {MAX_FILE_BYTES}-byte read limit; read a part of it with the shell"
            )));
        }
        Ok(FileText { text, mtime: stat.mtime })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let abs = self.absolute(path)?;
        let out = self.client.exec(STAT_SCRIPT, &[abs], HELPER_TIMEOUT)?;
        match out.status {
            0 => {
                let secs = out.stdout.trim().parse::<u64>().ok();
                Ok(Some(FileStat { mtime: secs.map(|s| UNIX_EPOCH + Duration::from_secs(s)) }))
            }
            3 => Ok(None),
            4 => Err(not_regular(path, out.stdout.trim())),
            _ => Ok(Some(FileStat { mtime: None::<SystemTime> })),
        }
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let abs = self.absolute(path)?;
        if abs == self.cwd {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        if contents.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path}: {} bytes is over the {MAX_FILE_BYTES}-byte file limit",
                contents.len()
            )));
        }
        // Writing into a FIFO blocks or feeds its reader; into a device, worse.
        self.stat(path)?;
        self.client.write(&abs, contents)
    }

    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        // The remote side narrows by file name; the exact match happens here.
        // Both the directory and the name pattern travel as positional
        // arguments, never inside the command text.
        let last = pattern.trim().rsplit('/').next().unwrap_or("*");
        let name = if last.contains("**") || last.is_empty() { "*".to_string() } else { last.to_string() };
        let out = self.client.exec(
            r#"cd -- "$1" && find . -type f -name "$2" 2>/dev/null | head -n 100001"#,
            &[self.cwd.clone(), name],
            HELPER_TIMEOUT,
        )?;
        if out.status != 0 {
            return Err(SandboxError::Failed(format!("listing files failed: {}", out.stderr.trim())));
        }
        let listed = out.stdout.lines().count();
        let found: Vec<String> = out
            .stdout
            .lines()
            .take(MAX_LISTED)
            .map(|l| l.trim_start_matches("./").to_string())
            .filter(|p| !p.is_empty() && matcher.is_match(p))
            .collect();
        Ok(GlobMatches::new(found, listed > MAX_LISTED))
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
    use crate::MAX_GLOB_MATCHES;

    /// Records every call and answers from a tiny in-memory store.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<(String, Vec<String>)>>,
        files: Mutex<std::collections::BTreeMap<String, String>>,
        /// Paths the stat script reports as special files, with their kind.
        special: Mutex<std::collections::BTreeMap<String, String>>,
    }

    impl RemoteClient for &'static Recorder {
        fn read(&self, path: &str) -> Result<String, SandboxError> {
            self.calls.lock().unwrap().push(("read".into(), vec![path.into()]));
            self.files.lock().unwrap().get(path).cloned().ok_or_else(|| SandboxError::NotFound(path.into()))
        }
        fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
            self.calls.lock().unwrap().push(("write".into(), vec![path.into()]));
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
                let path = &args[0];
                if let Some(kind) = self.special.lock().unwrap().get(path) {
                    return Ok(ExecOutput { status: 4, stdout: format!("{kind}\n"), stderr: String::new() });
                }
                let status = if self.files.lock().unwrap().contains_key(path) { 0 } else { 3 };
                return Ok(ExecOutput { status, stdout: "1700000000\n".into(), stderr: String::new() });
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
        assert_eq!(s.glob("**/*.rs").unwrap().paths, vec!["b.rs", "src/a.rs"]);
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

    #[test]
    fn special_files_are_refused_before_the_client_reads_or_writes() {
        let rec: &'static Recorder = Box::leak(Box::default());
        let s = RemoteSandbox::new(Box::new(rec), "/workspace", "test").unwrap();
        rec.special.lock().unwrap().insert("/workspace/pipe".into(), "a FIFO (named pipe)".into());
        rec.files.lock().unwrap().insert("/workspace/pipe".into(), "never read".into());
        for result in [s.read("pipe").map(|_| ()), s.write("pipe", "x"), s.stat("pipe").map(|_| ())] {
            match result {
                Err(SandboxError::InvalidInput(m)) => assert!(m.contains("pipe is a FIFO"), "{m}"),
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        let calls = rec.calls.lock().unwrap();
        assert!(!calls.iter().any(|(c, _)| c == "read" || c == "write"), "{calls:?}");
        assert_eq!(rec.files.lock().unwrap()["/workspace/pipe"], "never read");
    }

    #[test]
    fn an_oversized_read_is_refused_and_a_missing_file_is_not_read() {
        let rec: &'static Recorder = Box::leak(Box::default());
        let s = RemoteSandbox::new(Box::new(rec), "/workspace", "test").unwrap();
        rec.files.lock().unwrap().insert("/workspace/big".into(), "x".repeat(MAX_FILE_BYTES + 1));
        rec.files.lock().unwrap().insert("/workspace/cap".into(), "x".repeat(MAX_FILE_BYTES));
        assert!(matches!(s.read("big"), Err(SandboxError::InvalidInput(m)) if m.contains("read limit")));
        assert_eq!(s.read("cap").unwrap().text.len(), MAX_FILE_BYTES);
        assert!(matches!(s.write("big2", &"x".repeat(MAX_FILE_BYTES + 1)), Err(SandboxError::InvalidInput(_))));
        assert!(matches!(s.read("missing"), Err(SandboxError::NotFound(_))));
    }

    #[test]
    fn glob_says_when_it_cut_the_matches() {
        let rec: &'static Recorder = Box::leak(Box::default());
        let s = RemoteSandbox::new(Box::new(rec), "/workspace", "test").unwrap();
        for i in 0..=MAX_GLOB_MATCHES {
            rec.files.lock().unwrap().insert(format!("/workspace/f{i:04}.txt"), String::new());
        }
        let all = s.glob("*.txt").unwrap();
        assert!(all.truncated);
        assert_eq!(all.paths.len(), MAX_GLOB_MATCHES);
        assert_eq!(all.paths[0], "f0000.txt");
        rec.files.lock().unwrap().remove("/workspace/f0000.txt");
        let exact = s.glob("*.txt").unwrap();
        assert!(!exact.truncated);
        assert_eq!(exact.paths.len(), MAX_GLOB_MATCHES);
    }
}
