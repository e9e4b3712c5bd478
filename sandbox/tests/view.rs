//! What a confined shell command can read of the host: its root and the
//! system view, nothing else. Each attack runs under bubblewrap and under
//! Landlock alone; the host runs as root in CI, so "permission denied" from
//! Unix modes proves nothing and every secret must be absent from the view.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use nexo_sandbox::{Confinement, ExecOutput, LocalSandbox, Sandbox, ShellPolicy, SystemView};

const LIMIT: Duration = Duration::from_secs(30);
const MECHANISMS: [Confinement; 2] = [Confinement::Bubblewrap, Confinement::Landlock];

/// A sandbox root beside a directory standing for the server's data (its
/// store and another tenant's workspace), both under the target directory.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    sandbox: LocalSandbox,
}

impl Fixture {
    /// `view` makes the shell's view from the data directory's path; `None`
    /// keeps the default.
    fn new(confinement: Confinement, view: fn(&Path) -> Option<SystemView>) -> Fixture {
        let dir = tempfile::Builder::new().prefix("view-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = dir.path().join("data/tenants/a/workspace");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(data.join("tenants/b/workspace")).unwrap();
        std::fs::write(data.join("nexo.db"), "SQLite format 3\0 store-marker-7731").unwrap();
        std::fs::write(data.join("tenants/b/workspace/secret.txt"), "tenant-b-marker-5519").unwrap();
        std::fs::write(root.join("mine.txt"), "my own file\n").unwrap();
        let mut policy = ShellPolicy { confinement, ..ShellPolicy::default() };
        if let Some(view) = view(&data.canonicalize().unwrap()) {
            policy.view = view;
        }
        if let Err(e) = policy.effective_confinement() {
            panic!("{confinement:?} confinement is not usable on this machine, so its tests cannot run: {e}");
        }
        let sandbox = LocalSandbox::with_shell(&root, policy).unwrap();
        let (root, data) = (root.canonicalize().unwrap(), data.canonicalize().unwrap());
        Fixture { _dir: dir, root, data, sandbox }
    }

    fn exec(&self, command: &str) -> ExecOutput {
        self.sandbox.exec(command, LIMIT).unwrap_or_else(|e| panic!("`{command}` failed to run: {e}"))
    }

    /// Runs `command`, which must fail or print nothing of `secret`.
    fn refused(&self, c: Confinement, command: &str, secret: &str) {
        let out = self.exec(command);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!secret.is_empty() && !all.contains(secret), "{c}: `{command}` read {secret:?}: {out:?}");
    }
}

/// A host process with a secret in its environment and command line.
struct Neighbour(Child);

impl Neighbour {
    fn start(marker: &str) -> Neighbour {
        let child = Command::new("/bin/sh")
            .args(["-c", &format!("sleep 60 # cmdline-{marker}")])
            .env("NEXO_NEIGHBOUR_SECRET", format!("environ-{marker}"))
            .spawn()
            .unwrap();
        Neighbour(child)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A regular file in the host user's home the test process can read, and
/// its first bytes: the secret a command must not see.
fn home_file() -> (PathBuf, String) {
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    for entry in std::fs::read_dir(&home).expect("the home directory is readable").flatten() {
        let path = entry.path();
        if let Ok(text) = std::fs::read_to_string(&path)
            && path.is_file()
            && text.trim().len() >= 8
        {
            let head: String = text.trim().chars().take(24).collect();
            return (path, head);
        }
    }
    panic!("no readable text file in {} to stand for the operator's secrets", home.display());
}

#[test]
fn a_confined_shell_cannot_read_the_hosts_secrets() {
    let shadow = std::fs::read_to_string("/etc/shadow").expect("the test runs as root, as CI does");
    let shadow_head: String = shadow.lines().next().unwrap().chars().take(12).collect();
    let (home, home_secret) = home_file();
    let marker = format!("{}", std::process::id());
    let neighbour = Neighbour::start(&marker);
    let pid = neighbour.0.id();
    // Wait until its /proc entry shows the command line (the exec has happened).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("cmdline-"))
    {
        assert!(std::time::Instant::now() < deadline, "the neighbour did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    for c in MECHANISMS {
        let f = Fixture::new(c, |_| None);
        let data = f.data.display();
        f.refused(c, "cat /etc/shadow; head -c 200 /etc/shadow", &shadow_head);
        f.refused(c, "cat /etc/gshadow", "root:");
        f.refused(c, &format!("cat '{}'", home.display()), &home_secret);
        let home_name = home.file_name().unwrap().to_string_lossy().into_owned();
        f.refused(c, &format!("ls -A '{}'", home.parent().unwrap().display()), &home_name);
        f.refused(c, "ls -A /root", &home_name);
        f.refused(c, "cat /root/.bashrc /root/.profile", &home_secret);
        f.refused(c, &format!("ls {data}; cat {data}/nexo.db"), "store-marker");
        f.refused(c, &format!("ls {data}"), "nexo.db");
        f.refused(c, &format!("cat {data}/tenants/b/workspace/secret.txt"), "tenant-b-marker");
        f.refused(c, &format!("find / -name secret.txt 2>/dev/null; grep -rs tenant-b-marker {data}"), "tenant-b");
        f.refused(c, &format!("cat /proc/{pid}/environ"), &format!("environ-{marker}"));
        f.refused(c, &format!("cat /proc/{pid}/cmdline"), &format!("cmdline-{marker}"));
        f.refused(c, &format!("ls /proc/{pid}/root/"), "etc");
        f.refused(c, "cat /proc/1/environ /proc/1/cmdline | tr '\\0' ' '", &format!("environ-{marker}"));
        f.refused(c, "ps -ef 2>&1; ls /proc", &format!("cmdline-{marker}"));
        // Nor can it hard-link a host file into its root, where the file tools
        // (which run outside the confinement) would read it.
        f.exec(&format!("ln {data}/nexo.db stolen.db; ln {data}/tenants/b/workspace/secret.txt stolen.txt"));
        f.exec("ln /etc/shadow shadow; ln /etc/passwd passwd");
        for stolen in ["stolen.db", "stolen.txt", "shadow"] {
            assert!(!f.root.join(stolen).exists(), "{c}: the shell linked {stolen} into its root");
        }
    }
    drop(neighbour);
}

#[test]
fn ordinary_programs_still_run_in_the_workspace() {
    for c in MECHANISMS {
        let f = Fixture::new(c, |_| None);
        let out = f.exec("ls; cat mine.txt; echo made > new.txt && cat new.txt; sh -c 'echo nested'; id -un; date +%Y");
        assert_eq!(out.status, 0, "{c}: {out:?}");
        for want in ["mine.txt", "my own file", "made", "nested", "root"] {
            assert!(out.stdout.contains(want), "{c}: no {want:?} in {out:?}");
        }
        let out = f.exec("printf 'b\\na\\n' | sort | head -1; grep -c own mine.txt; awk 'BEGIN{print 6*7}'");
        assert_eq!((out.status, out.stdout.as_str()), (0, "a\n1\n42\n"), "{c}: {out:?}");
        if Path::new("/usr/bin/python3").exists() {
            let out = f.exec("/usr/bin/python3 -c 'import json, ssl; print(json.dumps(6*7))'");
            assert_eq!((out.status, out.stdout.as_str()), (0, "42\n"), "{c}: {out:?}");
        } else {
            eprintln!("SKIPPED ({c}): /usr/bin/python3 is not installed, so the view's Python check did not run");
        }
        assert_eq!(std::fs::read_to_string(f.root.join("new.txt")).unwrap(), "made\n");
    }
}

#[test]
fn the_operator_can_widen_the_view() {
    for c in MECHANISMS {
        // The data directory added by the operator: readable, still not writable.
        let f = Fixture::new(c, |data| {
            let mut paths: Vec<PathBuf> = SystemView::default().paths().to_vec();
            paths.push(data.to_path_buf());
            Some(SystemView::new(paths).unwrap())
        });
        let widened = f.data.display();
        let out = f.exec(&format!("ls {widened}"));
        assert!(out.status == 0 && out.stdout.contains("nexo.db"), "{c}: {out:?}");
        let out = f.exec(&format!("echo x > {widened}/planted.txt"));
        assert!(out.status != 0 && !f.data.join("planted.txt").exists(), "{c}: {out:?}");
        // The whole host, as before views: the old behaviour is one line away.
        let f = Fixture::new(c, |_| Some(SystemView::new(["/"]).unwrap()));
        let out = f.exec("cat /etc/passwd; ls /root");
        assert!(out.status == 0 && out.stdout.contains("root:x:0"), "{c}: {out:?}");
    }
}

/// What Landlock alone shows of other processes when the operator adds
/// `/proc` to the view: their command lines, as docs/sandboxes.md says, but
/// not their environment, memory map, working directory or root (Landlock's
/// ptrace scoping refuses those).
#[test]
fn landlock_with_proc_in_view_still_hides_other_processes_secrets() {
    let marker = format!("proc-{}", std::process::id());
    let neighbour = Neighbour::start(&marker);
    let pid = neighbour.0.id();
    let f = Fixture::new(Confinement::Landlock, |_| {
        let mut paths = SystemView::default().paths().to_vec();
        paths.push("/proc".into());
        Some(SystemView::new(paths).unwrap())
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = f.exec(&format!("cat /proc/{pid}/cmdline"));
        if out.stdout.contains(&format!("cmdline-{marker}")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "another process's command line is not shown: {out:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    f.refused(Confinement::Landlock, &format!("cat /proc/{pid}/environ"), &format!("environ-{marker}"));
    for command in ["head -c 1 maps", "ls root/", "ls cwd/", "cat root/etc/passwd"] {
        let out = f.exec(&format!("cd /proc/{pid} && {command}"));
        assert_ne!(out.status, 0, "`{command}` in /proc/{pid} worked: {out:?}");
    }
    let out = f.exec("cat /proc/self/status");
    assert!(out.status == 0 && out.stdout.contains("NoNewPrivs:\t1"), "its own /proc: {out:?}");
}
