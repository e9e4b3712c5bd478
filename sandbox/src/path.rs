//! Lexical path checks shared by the sandboxes.

use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// Turns a tool's path argument into a normalized path relative to the
/// sandbox root, or refuses it.
///
/// `root` is the root as the model sees it (for example `/workspace` or the
/// host directory of a local sandbox). Absolute paths must lie under it.
/// `.` segments are dropped; `..` may not climb above the root. This check is
/// lexical: the local sandbox also opens files through a capability handle,
/// so symlinks cannot lead out either.
pub fn normalize(root: &Path, path: &str) -> Result<PathBuf, SandboxError> {
    if path.is_empty() {
        return Err(SandboxError::InvalidInput("the path is empty".into()));
    }
    if path.contains('\0') {
        return Err(SandboxError::InvalidInput("the path contains a NUL byte".into()));
    }
    let given = Path::new(path);
    let relative = if given.is_absolute() {
        given.strip_prefix(root).map_err(|_| {
            SandboxError::Security(format!(
                "{path} is outside the sandbox root {}; use a path inside it",
                root.display()
            ))
        })?
    } else {
        given
    };
    let mut out = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(SandboxError::Security(format!(
                        "{path} escapes the sandbox root {} through `..`",
                        root.display()
                    )));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(SandboxError::Security(format!("{path} is not a path inside the sandbox")));
            }
        }
    }
    Ok(out)
}

/// A relative path as `/`-separated text.
pub(crate) fn display(path: &Path) -> String {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(path: &str) -> String {
        display(&normalize(Path::new("/workspace"), path).unwrap())
    }

    fn security(path: &str) {
        match normalize(Path::new("/workspace"), path) {
            Err(SandboxError::Security(_)) => {}
            other => panic!("{path:?} should be a security error, got {other:?}"),
        }
    }

    #[test]
    fn relative_and_rooted_paths_normalize() {
        assert_eq!(ok("a/b.txt"), "a/b.txt");
        assert_eq!(ok("./a/./b.txt"), "a/b.txt");
        assert_eq!(ok("a/../b.txt"), "b.txt");
        assert_eq!(ok("/workspace/src/lib.rs"), "src/lib.rs");
        assert_eq!(ok("/workspace"), "");
    }

    #[test]
    fn escapes_are_security_errors() {
        for p in ["..", "../x", "a/../../x", "/etc/passwd", "/workspacex/a", "/workspace/../etc", "a/b/../../../c"] {
            security(p);
        }
    }

    #[test]
    fn tricky_unicode_is_just_a_name() {
        // Fullwidth dots, a one-dot leader and a right-to-left override are
        // ordinary file names, not parent references.
        assert_eq!(ok("\u{ff0e}\u{ff0e}/x"), "\u{ff0e}\u{ff0e}/x");
        assert_eq!(ok("\u{2024}\u{2024}/x"), "\u{2024}\u{2024}/x");
        assert_eq!(ok("a\u{202e}txt.exe"), "a\u{202e}txt.exe");
        assert!(matches!(normalize(Path::new("/w"), "a\0b"), Err(SandboxError::InvalidInput(_))));
        assert!(matches!(normalize(Path::new("/w"), ""), Err(SandboxError::InvalidInput(_))));
    }
}
