//! The local sandbox's path handling (`nexo-sandbox`, `LocalSandbox`):
//! random paths and symlink layouts in a temporary tree.

use std::path::Path;

use nexo_sandbox::{LocalSandbox, Sandbox};

/// What the file beside the root holds; no read may return it.
const OUTSIDE: &str = "OUTSIDE-THE-SANDBOX";

/// Path pieces: names in the tree, climbs, and the names of what lies outside.
const PIECES: &[&str] = &["a.txt", "sub", "b.txt", "..", ".", "l1", "l2", "l3", "secret.txt", "root", "", "new", "x/y"];

/// Builds a tree (`outer/secret.txt` beside the sandbox root `outer/root`,
/// which holds `a.txt` and `sub/b.txt`), then runs the input as up to 24
/// operations: make a symlink inside the root pointing anywhere in or out of
/// it, read, stat, write, glob. Checks: a read never returns the outside
/// file, nothing outside the root is created or changed, and every glob
/// match is a relative path inside the root.
pub fn sandbox_paths(data: &[u8]) {
    let Ok(outer) = tempfile::tempdir() else { panic!("no temporary directory") };
    let outer_path = outer.path();
    let root = outer_path.join("root");
    let setup = std::fs::create_dir_all(root.join("sub"))
        .and_then(|()| std::fs::write(outer_path.join("secret.txt"), OUTSIDE))
        .and_then(|()| std::fs::write(root.join("a.txt"), "inside a"))
        .and_then(|()| std::fs::write(root.join("sub/b.txt"), "inside b"));
    if let Err(e) = setup {
        panic!("cannot build the tree: {e}");
    }
    let sandbox = LocalSandbox::open(&root).unwrap_or_else(|e| panic!("cannot open the sandbox: {e}"));
    let root_shown = sandbox.root().to_path_buf();
    let mut bytes = data.iter().copied();
    for _ in 0..24 {
        let Some(op) = bytes.next() else { break };
        let path = path(&mut bytes, &root_shown, outer_path);
        // Should the sandbox have a hole, a symlink or write would act where
        // it points: keep those within the temporary directory's parent.
        let acts = matches!(op % 6, 0 | 3);
        if acts && (path.starts_with("/nonexistent") || path.split('/').filter(|s| *s == "..").count() > 2) {
            continue;
        }
        match op % 6 {
            0 => {
                let names = ["l1", "l2", "sub/l3", "l3"];
                let name = names[usize::from(op / 6) % names.len()];
                #[cfg(unix)]
                let _ = std::os::unix::fs::symlink(&path, root.join(name));
            }
            1 | 5 => {
                if let Ok(file) = sandbox.read(&path) {
                    assert!(!file.text.contains(OUTSIDE), "read {path:?} returned the file outside the root");
                }
            }
            2 => {
                let _ = sandbox.stat(&path);
            }
            3 => {
                let _ = sandbox.write(&path, "written by the fuzzer");
            }
            _ => {
                if let Ok(matches) = sandbox.glob(&path) {
                    for m in &matches.paths {
                        assert!(
                            !m.starts_with('/') && !m.split('/').any(|s| s == ".."),
                            "glob {path:?} matched {m:?}, which is not inside the root"
                        );
                    }
                }
            }
        }
    }
    // Nothing outside the root was created or changed.
    let mut outside: Vec<String> = std::fs::read_dir(outer_path)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    outside.sort();
    assert_eq!(outside, ["root", "secret.txt"], "a file appeared outside the root");
    let secret = std::fs::read_to_string(outer_path.join("secret.txt")).unwrap_or_default();
    assert_eq!(secret, OUTSIDE, "the file outside the root changed");
}

/// A path of up to five pieces, relative or under the root, the outer
/// directory or a directory that does not exist.
fn path(bytes: &mut impl Iterator<Item = u8>, root: &Path, outer: &Path) -> String {
    let head = bytes.next().unwrap_or(0);
    let n = usize::from(head % 6);
    let pieces: Vec<&str> = (0..n).map(|_| PIECES[usize::from(bytes.next().unwrap_or(0)) % PIECES.len()]).collect();
    let tail = pieces.join("/");
    match head / 6 % 4 {
        0 => format!("{}/{tail}", root.display()),
        1 => format!("{}/{tail}", outer.display()),
        2 if !tail.is_empty() => format!("/nonexistent-nexo-fuzz/{tail}"),
        _ => tail,
    }
}
