//! The local sandbox: a host directory, reached only through a cap-std
//! [`Dir`] handle opened at its root.
//!
//! cap-std resolves every path inside the handle and refuses `..`, absolute
//! paths and symlinks that lead out, by construction. The lexical check in
//! [`normalize`] runs first only to give a clearer message.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, FileType, FileTypeExt, Metadata, OpenOptions, OpenOptionsExt};
use rustix::fs::OFlags;

use crate::path::{display, normalize};
use crate::shell::{self, ShellPolicy};
use crate::{
    ExecOutput, FileStat, FileText, GlobMatches, MAX_FILE_BYTES, Sandbox, SandboxError, glob_matcher, not_regular,
};

/// Most directory entries one glob visits.
const MAX_GLOB_VISITS: usize = 200_000;

/// How the file tools open a file: never blocking on a FIFO with no peer,
/// never taking a terminal as the controlling one.
const OPEN_FLAGS: i32 = OFlags::NONBLOCK.bits() as i32 | OFlags::NOCTTY.bits() as i32;

/// The kind of a file the file tools refuse, or `None` for a regular file,
/// a directory or a symlink (which cap-std resolves inside the root).
fn special_kind(kind: FileType) -> Option<&'static str> {
    if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

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
        if root.parent().is_none() {
            // Everything is beneath `/`: the root would confine nothing.
            return Err(SandboxError::Config(
                "the sandbox directory is the filesystem root `/`, which would make the whole host writable to the \
                 agent; give it a project directory (--cwd DIR)"
                    .into(),
            ));
        }
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

    /// Refuses a FIFO, device or socket before opening it: opening one can
    /// block, or act (a tape rewinds, a terminal becomes ours).
    fn refuse_special(&self, path: &str, rel: &Path) -> Result<(), SandboxError> {
        match self.dir.metadata(rel) {
            Ok(meta) => special_kind(meta.file_type()).map_or(Ok(()), |kind| Err(not_regular(path, kind))),
            // Opening reports the real error, or creates the file.
            Err(_) => Ok(()),
        }
    }

    /// The type of the file actually opened (fstat on the handle), so a
    /// FIFO or device swapped in after [`Self::refuse_special`] is still
    /// refused; then clears `O_NONBLOCK` for ordinary blocking I/O.
    fn check_opened(&self, path: &str, file: &File) -> Result<Metadata, SandboxError> {
        let meta = file.metadata().map_err(|e| self.io_error(path, e))?;
        if let Some(kind) = special_kind(meta.file_type()) {
            return Err(not_regular(path, kind));
        }
        rustix::fs::fcntl_setfl(file, OFlags::empty())
            .map_err(|e| self.io_error(path, io::Error::from_raw_os_error(e.raw_os_error())))?;
        Ok(meta)
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

    fn shell_network(&self) -> bool {
        // Both confinements give commands no sockets but Unix socket pairs.
        !matches!(self.shell.effective_confinement(), Ok(shell::Confinement::Bubblewrap | shell::Confinement::Landlock))
    }

    fn instructions(&self, shell: bool) -> Option<String> {
        Some(shell::instructions(&self.root, &self.shell, shell))
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let rel = self.resolve(path)?;
        self.refuse_special(path, &rel)?;
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(OPEN_FLAGS);
        let file = self.dir.open_with(&rel, &options).map_err(|e| self.io_error(path, e))?;
        let meta = self.check_opened(path, &file)?;
        if meta.is_dir() {
            return Err(SandboxError::InvalidInput(format!("{path} is a directory; use glob to list it")));
        }
        // The cap counts bytes read, not the reported size, which a growing
        // file (or a filesystem that reports 0, like /proc) makes wrong.
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(|e| self.io_error(path, e))?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path} is over the {MAX_FILE_BYTES}-byte read limit; read a part of it with the shell"
            )));
        }
        let text =
            String::from_utf8(bytes).map_err(|_| SandboxError::InvalidInput(format!("{path} is not UTF-8 text")))?;
        Ok(FileText { text, mtime: meta.modified().ok().map(|t| t.into_std()) })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let rel = self.resolve(path)?;
        match self.dir.metadata(&rel) {
            Ok(meta) => match special_kind(meta.file_type()) {
                Some(kind) => Err(not_regular(path, kind)),
                None => Ok(Some(FileStat { mtime: meta.modified().ok().map(|t| t.into_std()) })),
            },
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
        self.refuse_special(path, &rel)?;
        // No O_TRUNC: nothing is cut before the opened file is known to be regular.
        let mut options = OpenOptions::new();
        options.write(true).create(true).custom_flags(OPEN_FLAGS);
        let mut file = match self.dir.open_with(&rel, &options) {
            Ok(file) => file,
            // A FIFO with no reader, or a device with no driver, swapped in after the check above.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {
                return Err(not_regular(path, "a FIFO or a device"));
            }
            Err(e) => return Err(self.io_error(path, e)),
        };
        let meta = self.check_opened(path, &file)?;
        if meta.is_dir() {
            return Err(SandboxError::InvalidInput(format!("{path} is a directory, not a file")));
        }
        file.set_len(0).map_err(|e| self.io_error(path, e))?;
        file.write_all(contents.as_bytes()).map_err(|e| self.io_error(path, e))
    }

    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        let mut found = Vec::new();
        let mut visits = 0usize;
        let mut stack = vec![PathBuf::new()];
        'walk: while let Some(rel) = stack.pop() {
            let entries = if rel.as_os_str().is_empty() { self.dir.entries() } else { self.dir.read_dir(&rel) };
            let Ok(entries) = entries else { continue };
            for entry in entries.flatten() {
                visits += 1;
                if visits > MAX_GLOB_VISITS {
                    break 'walk;
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
        Ok(GlobMatches::new(found, visits > MAX_GLOB_VISITS))
    }

    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError> {
        shell::run(&self.root, command, timeout, &self.shell, None)
    }

    fn exec_with_network(
        &self,
        command: &str,
        timeout: Duration,
        gateway: &dyn crate::Gateway,
    ) -> Result<ExecOutput, SandboxError> {
        shell::run(&self.root, command, timeout, &self.shell, Some(gateway))
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
        assert_eq!(s.glob("**/*.rs").unwrap().paths, vec!["src/lib.rs"]);
        assert_eq!(s.glob("**/*").unwrap().paths, vec!["out/new.txt", "src/lib.rs"]);
        assert!(s.stat("nope").unwrap().is_none());
        assert!(matches!(s.read("nope"), Err(SandboxError::NotFound(_))));
    }

    #[test]
    fn the_filesystem_root_is_not_a_sandbox() {
        for root in ["/", "/.", "/tmp/.."] {
            match LocalSandbox::open(Path::new(root)) {
                Err(SandboxError::Config(m)) => assert!(m.contains("whole host writable"), "{m}"),
                other => panic!("{root}: {other:?}"),
            }
        }
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

    /// The check on the opened handle, which catches a FIFO swapped in
    /// between the path check and the open.
    #[test]
    fn an_opened_fifo_is_refused_on_its_handle() {
        let (_t, s) = sandbox();
        let fifo = s.root().join("pipe");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        use std::os::unix::fs::OpenOptionsExt as _;
        let opened = std::fs::OpenOptions::new().read(true).custom_flags(OPEN_FLAGS).open(&fifo).unwrap();
        match s.check_opened("pipe", &File::from_std(opened)) {
            Err(SandboxError::InvalidInput(m)) => assert!(m.contains("pipe is a FIFO"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let plain = std::fs::File::open(s.root().join("src/lib.rs")).unwrap();
        assert!(s.check_opened("src/lib.rs", &File::from_std(plain)).unwrap().is_file());
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
        assert!(!s.glob("**/*").unwrap().paths.iter().any(|p| p.contains("secret") || p.contains("passwd")));
    }
}
