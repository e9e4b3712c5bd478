//! The in-memory sandbox: files live in a map, nothing touches the host, and
//! there is no shell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::path::{display, normalize};
use crate::{
    ExecOutput, FileStat, FileText, GlobMatches, MAX_FILE_BYTES, MAX_GLOB_MATCHES, Sandbox, SandboxError, glob_matcher,
};

/// The root the model sees.
pub const VIRTUAL_ROOT: &str = "/workspace";

/// Most bytes the in-memory filesystem holds in all.
pub const MAX_TOTAL_BYTES: usize = 64 << 20;

/// An in-memory filesystem with no host access. Shell is unsupported by
/// design: in-memory means no command execution.
#[derive(Debug, Default)]
pub struct VirtualSandbox {
    files: Mutex<BTreeMap<PathBuf, String>>,
}

impl VirtualSandbox {
    /// An empty sandbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// A sandbox holding `files` (relative path, contents) from the start.
    pub fn with_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, SandboxError> {
        let sandbox = Self::new();
        for (path, contents) in files {
            sandbox.write(path, contents)?;
        }
        Ok(sandbox)
    }

    fn files(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, String>> {
        // A panic while holding the lock cannot leave the map half-updated.
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sandbox for VirtualSandbox {
    fn name(&self) -> &'static str {
        "virtual"
    }

    fn supports_shell(&self) -> bool {
        false
    }

    fn instructions(&self, _shell: bool) -> Option<String> {
        None
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let key = normalize(Path::new(VIRTUAL_ROOT), path)?;
        match self.files().get(&key) {
            Some(text) => Ok(FileText { text: text.clone(), mtime: None }),
            None => Err(SandboxError::NotFound(format!("{path}: no such file"))),
        }
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let key = normalize(Path::new(VIRTUAL_ROOT), path)?;
        Ok(self.files().get(&key).map(|_| FileStat { mtime: None }))
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let key = normalize(Path::new(VIRTUAL_ROOT), path)?;
        if key.as_os_str().is_empty() {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        if contents.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path}: {} bytes is over the {MAX_FILE_BYTES}-byte file limit",
                contents.len()
            )));
        }
        let mut files = self.files();
        let used: usize = files.iter().filter(|(k, _)| **k != key).map(|(_, v)| v.len()).sum();
        if used + contents.len() > MAX_TOTAL_BYTES {
            return Err(SandboxError::Failed(format!(
                "the in-memory sandbox is full ({MAX_TOTAL_BYTES} bytes); remove or shorten files"
            )));
        }
        files.insert(key, contents.to_string());
        Ok(())
    }

    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        // One past the cap is enough to know the list was cut.
        let found: Vec<String> = self
            .files()
            .keys()
            .map(|k| display(k))
            .filter(|k| matcher.is_match(k))
            .take(MAX_GLOB_MATCHES + 1)
            .collect();
        Ok(GlobMatches::new(found, false))
    }

    fn exec(&self, _command: &str, _timeout: Duration) -> Result<ExecOutput, SandboxError> {
        Err(SandboxError::Unsupported(
            "the virtual sandbox runs no commands: it is in-memory by design; use a local or container sandbox for shell"
                .into(),
        ))
    }

    fn close(&self) -> Result<(), SandboxError> {
        Ok(())
    }

    fn blocks(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_stay_in_memory() {
        let s = VirtualSandbox::new();
        s.write("src/main.rs", "fn main() {}").unwrap();
        s.write("/workspace/README.md", "hi").unwrap();
        assert_eq!(s.read("./src/main.rs").unwrap().text, "fn main() {}");
        assert_eq!(s.read("README.md").unwrap().mtime, None);
        assert_eq!(s.glob("**/*.rs").unwrap().paths, vec!["src/main.rs"]);
        assert_eq!(s.glob("*").unwrap().paths, vec!["README.md"]);
        assert!(matches!(s.read("missing.txt"), Err(SandboxError::NotFound(_))));
        assert!(matches!(s.read("../etc/passwd"), Err(SandboxError::Security(_))));
        assert!(matches!(s.write("/etc/passwd", "x"), Err(SandboxError::Security(_))));
        assert!(matches!(s.glob("../*"), Err(SandboxError::Security(_))));
        assert!(matches!(s.exec("ls", Duration::from_secs(1)), Err(SandboxError::Unsupported(_))));
        assert!(!s.supports_shell());
        assert_eq!(s.instructions(true), None);
    }
}
