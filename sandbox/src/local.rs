//! The local sandbox: a host directory, reached only through a cap-std
//! [`Dir`] handle opened at its root.
//!
//! cap-std resolves every path inside the handle and refuses `..`, absolute
//! paths and symlinks that lead out, by construction. The lexical check in
//! [`normalize`] runs first only to give a clearer message.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::path::{display, normalize};
use crate::shell::{self, ShellPolicy};
use crate::{ExecOutput, FileStat, FileText, MAX_FILE_BYTES, MAX_GLOB_MATCHES, Sandbox, SandboxError, glob_matcher};

/// Most directory entries one glob visits.
const MAX_GLOB_VISITS: usize = 200_000;

/// A sandbox over a host directory.
#[derive(Debug)]
pub struct LocalSandbox {
    root: PathBuf,
    dir: Dir,
    shell: ShellPolicy,
}

impl LocalSandbox {
    /// Opens `root` (which must be an existing directory) with the default
    /// shell policy.
    pub fn open(root: &Path) -> Result<Self, SandboxError> {
        Self::with_shell(root, ShellPolicy::default())
    }

    /// Opens `root` with a shell policy.
    pub fn with_shell(root: &Path, shell: ShellPolicy) -> Result<Self, SandboxError> {
        let root = root
            .canonicalize()
            .map_err(|e| SandboxError::Config(format!("cannot open the sandbox directory {}: {e}", root.display())))?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority())
            .map_err(|e| SandboxError::Config(format!("cannot open the sandbox directory {}: {e}", root.display())))?;
        Ok(LocalSandbox { root, dir, shell })
    }

    /// The host directory, canonicalized.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let rel = normalize(&self.root, path)?;
        if rel.as_os_str().is_empty() {
            return Ok(PathBuf::from("."));
        }
        Ok(rel)
    }

    fn io_error(&self, path: &str, e: io::Error) -> SandboxError {
        let text = e.to_string();
        if text.contains("outside of the filesystem") || text.contains("escape") {
            return SandboxError::Security(format!(
                "{path} leads outside the sandbox {} (through a symlink or `..`)",
                self.root.display()
            ));
        }
        match e.kind() {
            io::ErrorKind::NotFound => SandboxError::NotFound(format!("{path}: no such file")),
            io::ErrorKind::InvalidData => SandboxError::InvalidInput(format!("{path} is not UTF-8 text")),
            _ => SandboxError::Failed(format!("{path}: {e}")),
        }
    }
}

impl Sandbox for LocalSandbox {
    fn name(&self) -> &'static str {
        "local"
    }

    fn supports_shell(&self) -> bool {
        true
    }

    fn instructions(&self) -> Option<String> {
        Some(shell::instructions(&self.root, &self.shell))
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let rel = self.resolve(path)?;
        let meta = self.dir.metadata(&rel).map_err(|e| self.io_error(path, e))?;
        if meta.is_dir() {
            return Err(SandboxError::InvalidInput(format!("{path} is a directory; use glob to list it")));
        }
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Err(SandboxError::InvalidInput(format!(
                "{path} is {} bytes, over the {MAX_FILE_BYTES}-byte read limit",
                meta.len()
            )));
        }
        let text = self.dir.read_to_string(&rel).map_err(|e| self.io_error(path, e))?;
        Ok(FileText { text, mtime: meta.modified().ok().map(|t| t.into_std()) })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let rel = self.resolve(path)?;
        match self.dir.metadata(&rel) {
            Ok(meta) => Ok(Some(FileStat { mtime: meta.modified().ok().map(|t| t.into_std()) })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io_error(path, e)),
        }
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let rel = self.resolve(path)?;
        if rel == Path::new(".") {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        if contents.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path}: {} bytes is over the {MAX_FILE_BYTES}-byte file limit",
                contents.len()
            )));
        }
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty())
            && let Err(e) = self.dir.create_dir_all(parent)
        {
            // A symlink that leads out makes creation fail with "exists";
            // following it names the real cause.
            return Err(match self.dir.metadata(parent) {
                Err(follow) => self.io_error(path, follow),
                Ok(_) => self.io_error(path, e),
            });
        }
        self.dir.write(&rel, contents).map_err(|e| self.io_error(path, e))
    }

    fn glob(&self, pattern: &str) -> Result<Vec<String>, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        let mut found = Vec::new();
        let mut visits = 0usize;
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let entries = if rel.as_os_str().is_empty() { self.dir.entries() } else { self.dir.read_dir(&rel) };
            let Ok(entries) = entries else { continue };
            for entry in entries.flatten() {
                visits += 1;
                if visits > MAX_GLOB_VISITS {
                    break;
                }
                let path = rel.join(entry.file_name());
                // Symlinks are listed but never followed, so a walk cannot leave the root.
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_dir() {
                    stack.push(path);
                } else {
                    let shown = display(&path);
                    if matcher.is_match(&shown) {
                        found.push(shown);
                    }
                }
            }
        }
        found.sort();
        found.truncate(MAX_GLOB_MATCHES);
        Ok(found)
    }

    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError> {
        shell::run(&self.root, command, timeout, &self.shell)
    }

    fn close(&self) -> Result<(), SandboxError> {
        Ok(())
    }

    fn host_root(&self) -> Option<&Path> {
        Some(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> (tempfile::TempDir, LocalSandbox) {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("repo");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "pub fn f() {}").unwrap();
        std::fs::write(outer.path().join("secret.txt"), "hidden").unwrap();
        let s = LocalSandbox::open(&root).unwrap();
        (outer, s)
    }

    #[test]
    fn reads_writes_and_globs_inside_the_root() {
        let (_t, s) = sandbox();
        assert_eq!(s.read("src/lib.rs").unwrap().text, "pub fn f() {}");
        assert!(s.read("src/lib.rs").unwrap().mtime.is_some());
        let abs = format!("{}/src/lib.rs", s.root().display());
        assert_eq!(s.read(&abs).unwrap().text, "pub fn f() {}");
        s.write("out/new.txt", "x").unwrap();
        assert_eq!(std::fs::read_to_string(s.root().join("out/new.txt")).unwrap(), "x");
        assert_eq!(s.glob("**/*.rs").unwrap(), vec!["src/lib.rs"]);
        assert_eq!(s.glob("**/*").unwrap(), vec!["out/new.txt", "src/lib.rs"]);
        assert!(s.stat("nope").unwrap().is_none());
        assert!(matches!(s.read("nope"), Err(SandboxError::NotFound(_))));
    }

    #[test]
    fn escapes_are_refused() {
        let (t, s) = sandbox();
        for p in ["../secret.txt", "src/../../secret.txt", "/etc/passwd"] {
            assert!(matches!(s.read(p), Err(SandboxError::Security(_))), "{p}");
            assert!(matches!(s.write(p, "x"), Err(SandboxError::Security(_))), "{p}");
        }
        let outside = t.path().join("secret.txt");
        assert!(matches!(s.read(outside.to_str().unwrap()), Err(SandboxError::Security(_))));
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "hidden");
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_cannot_lead_out() {
        let (t, s) = sandbox();
        std::os::unix::fs::symlink(t.path().join("secret.txt"), s.root().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(t.path(), s.root().join("up")).unwrap();
        std::os::unix::fs::symlink("/etc", s.root().join("etc")).unwrap();
        for p in ["link.txt", "up/secret.txt", "etc/passwd"] {
            match s.read(p) {
                Err(SandboxError::Security(_)) => {}
                other => panic!("{p}: expected a security error, got {other:?}"),
            }
        }
        let planted = s.write("up/planted.txt", "x");
        assert!(matches!(planted, Err(SandboxError::Security(_))), "{planted:?}");
        assert!(!t.path().join("planted.txt").exists());
        // Symlinked directories are not walked.
        assert!(!s.glob("**/*").unwrap().iter().any(|p| p.contains("secret") || p.contains("passwd")));
    }
}
