//! The system view: what of the host a confined process may read besides its
//! own directory. Programs and their libraries, and the few `/etc` files they
//! need; no home directory, no `/root`, no `/etc/shadow`, no server data, no
//! other process's `/proc`.
//!
//! One list serves every mechanism: bubblewrap binds each path read-only
//! into an otherwise empty root; Landlock allows reading beneath each path
//! and nothing else. The operator replaces the list (nexo's config file:
//! `[sandbox] system-paths`); [`SystemView::default`] is
//! [`DEFAULT_SYSTEM_PATHS`].

use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// The default view: programs, libraries and the `/etc` files that name
/// resolution, TLS and the dynamic loader read. Paths missing on a host are
/// skipped.
pub const DEFAULT_SYSTEM_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/ssl",
];

/// Device files a Landlock-confined process may read (bubblewrap gives it
/// its own minimal `/dev`); `/dev/null` is writable too.
pub(crate) const LANDLOCK_DEVICES: &[&str] = &["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// Paths bubblewrap always sets up itself: a view entry at or beneath one of
/// them is left to bubblewrap's own mount (a path beneath its private `/tmp`
/// is bound over it, though).
const BWRAP_OWN: &[&str] = &["/proc", "/dev"];

/// What of the host a confined process may read, read-only: absolute paths,
/// each with everything beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemView {
    paths: Vec<PathBuf>,
}

impl Default for SystemView {
    fn default() -> Self {
        SystemView { paths: DEFAULT_SYSTEM_PATHS.iter().map(PathBuf::from).collect() }
    }
}

impl SystemView {
    /// A view of exactly `paths`. Each must be absolute with no `..` (a `.`
    /// or trailing `/` is dropped); `/` gives the whole host filesystem (as
    /// nexo did before views).
    pub fn new<I, P>(paths: I) -> Result<SystemView, SandboxError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut out = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let plain = path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if !path.is_absolute() || !plain {
                return Err(SandboxError::Config(format!(
                    "system path {} must be absolute, without `..` (say `/usr/local`)",
                    path.display()
                )));
            }
            out.push(path.components().collect::<PathBuf>());
        }
        out.sort();
        out.dedup();
        Ok(SystemView { paths: out })
    }

    /// The paths, sorted.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Whether the view is the whole host filesystem.
    pub fn is_whole_host(&self) -> bool {
        self.paths.iter().any(|p| p.parent().is_none())
    }

    /// The same view with `extra` paths added (absolute paths a program
    /// needs, found by [`program_paths`]).
    pub(crate) fn with(&self, extra: impl IntoIterator<Item = PathBuf>) -> SystemView {
        let mut paths = self.paths.clone();
        paths.extend(extra.into_iter().filter(|p| p.is_absolute()));
        paths.sort();
        paths.dedup();
        SystemView { paths }
    }

    /// Whether `path` lies at or beneath a path of the view.
    #[cfg(test)]
    pub(crate) fn covers(&self, path: &Path) -> bool {
        self.paths.iter().any(|p| path.starts_with(p))
    }

    /// One line for logs: the paths, comma-separated.
    pub fn describe(&self) -> String {
        if self.is_whole_host() {
            return "the whole host filesystem".into();
        }
        self.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    /// bubblewrap's arguments that build the view in its empty root, after
    /// its `/dev`, `/proc` and `/tmp` are made (none for the whole host,
    /// which the caller binds first): each
    /// existing path bound read-only, or, for a symlink whose target the
    /// view holds anyway (`/bin` to `usr/bin`), the same symlink.
    pub(crate) fn bwrap_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if self.is_whole_host() {
            return args;
        }
        for path in &self.paths {
            if path == Path::new("/tmp") || BWRAP_OWN.iter().any(|own| path.starts_with(own)) {
                continue;
            }
            // Bound with its ancestor already (and through a symlinked one, such as
            // `/bin`, it could not be made at all).
            if self.paths.iter().any(|p| p != path && path.starts_with(p)) {
                continue;
            }
            let Ok(meta) = path.symlink_metadata() else { continue };
            if meta.file_type().is_symlink()
                && let (Ok(target), Ok(resolved)) = (std::fs::read_link(path), path.canonicalize())
                && resolved != *path
                && self.paths.iter().any(|p| p != path && resolved.starts_with(p))
            {
                args.extend(["--symlink".into(), target.into_os_string(), path.clone().into_os_string()]);
                continue;
            }
            args.extend(["--ro-bind-try".into(), path.clone().into_os_string(), path.clone().into_os_string()]);
        }
        args
    }

    /// The existing paths Landlock allows reading beneath (symlinks are
    /// followed when the rule is made, so a rule holds their target).
    pub(crate) fn landlock_paths(&self) -> Vec<PathBuf> {
        self.paths.iter().filter(|p| p.exists()).cloned().collect()
    }
}

/// What running `program` with `args` needs to read besides the system
/// view: for the program and each argument that is an absolute path to a
/// file, the file itself (as named and resolved), its interpreter when it is
/// a `#!` script, and the project it belongs to: the directory holding its
/// outermost `node_modules`, or a Python virtual environment (`pyvenv.cfg`).
/// Other directories a program needs are the operator's to add.
pub(crate) fn program_paths(program: &Path, args: &[&std::ffi::OsStr]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = vec![program.to_path_buf()];
    files.extend(args.iter().map(Path::new).filter(|p| p.is_absolute() && p.is_file()).map(Path::to_path_buf));
    let interpreters: Vec<PathBuf> = files.iter().filter_map(|f| interpreter(f)).collect();
    files.extend(interpreters);
    for file in files {
        if !file.is_absolute() || !file.is_file() {
            continue;
        }
        let resolved = file.canonicalize().unwrap_or_else(|_| file.clone());
        for path in [&file, &resolved] {
            found.push(path.clone());
            if let Some(project) = project_root(path) {
                found.push(project);
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The interpreter a `#!` line names, if it is an absolute path.
fn interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let first = std::str::from_utf8(line).ok()?.split_whitespace().next()?;
    Some(PathBuf::from(first)).filter(|p| p.is_absolute())
}

/// The project a file belongs to: the directory that holds the outermost
/// `node_modules` above it, else the nearest directory with a `pyvenv.cfg`.
/// Never `/` or a directory just beneath it (`/home`, `/tmp`).
fn project_root(file: &Path) -> Option<PathBuf> {
    let deep_enough = |d: &Path| d.components().count() > 2;
    let node = file
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .and_then(Path::parent)
        .filter(|d| deep_enough(d));
    node.or_else(|| file.ancestors().skip(1).find(|d| deep_enough(d) && d.join("pyvenv.cfg").is_file()))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_plain() {
        for bad in ["usr", "/usr/../etc", "./usr", ""] {
            assert!(matches!(SystemView::new([bad]), Err(SandboxError::Config(_))), "{bad:?}");
        }
        let view = SystemView::new(["/usr/", "/opt/./tools", "/usr"]).unwrap();
        assert_eq!(view.paths(), [PathBuf::from("/opt/tools"), PathBuf::from("/usr")]);
        assert!(!view.is_whole_host());
        assert!(SystemView::new(["/"]).unwrap().is_whole_host());
    }

    #[test]
    fn the_default_holds_no_home_secret_or_proc() {
        let view = SystemView::default();
        for hidden in ["/root", "/home", "/etc/shadow", "/etc/gshadow", "/proc/1", "/var/lib", "/tmp", "/sys"] {
            assert!(!view.covers(Path::new(hidden)), "{hidden}");
        }
        assert!(view.covers(Path::new("/usr/bin/env")) && view.covers(Path::new("/etc/ssl/certs")));
    }

    #[test]
    fn a_program_brings_its_project() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("app/node_modules/@scope/server");
        std::fs::create_dir_all(&package).unwrap();
        let script = package.join("index.js");
        std::fs::write(&script, "#!/usr/bin/env node\n").unwrap();
        let paths = program_paths(Path::new("/usr/bin/node"), &[script.as_os_str()]);
        let app = dir.path().join("app").canonicalize().unwrap();
        assert!(paths.contains(&app), "{paths:?}");
        assert!(paths.contains(&PathBuf::from("/usr/bin/env")), "the interpreter is missing: {paths:?}");
        let lone = dir.path().join("lone.sh");
        std::fs::write(&lone, "#!/bin/sh\n").unwrap();
        let paths = program_paths(&lone, &[]);
        assert!(paths.contains(&lone) && !paths.contains(&dir.path().to_path_buf()), "{paths:?}");
    }
}
