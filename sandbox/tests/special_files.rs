//! The local sandbox's file tools refuse FIFOs, devices and sockets inside
//! the root, promptly and without reading them; the read cap counts bytes;
//! a glob says when it cut its list. Device nodes need root (as in CI): a
//! test that cannot make one fails saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nexo_sandbox::{LocalSandbox, MAX_FILE_BYTES, MAX_GLOB_MATCHES, Sandbox, SandboxError};
use rustix::fs::{CWD, FileType, Mode, makedev, mkfifoat, mknodat};

/// How long a refusal may take; the attacks block or run forever.
const PROMPT: Duration = Duration::from_secs(5);

struct Root {
    _dir: tempfile::TempDir,
    path: PathBuf,
    sandbox: &'static LocalSandbox,
}

fn root() -> Root {
    let dir = tempfile::Builder::new().prefix("special-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().canonicalize().unwrap();
    // Leaked so a call that blocks (the bug) can outlive the test in its thread.
    let sandbox = Box::leak(Box::new(LocalSandbox::open(&path).unwrap()));
    Root { _dir: dir, path, sandbox }
}

fn fifo(path: &Path) {
    mkfifoat(CWD, path, Mode::from_raw_mode(0o666)).unwrap();
}

/// A character device 1,5: what `/dev/zero` is.
fn dev_zero(path: &Path) {
    if let Err(e) = mknodat(CWD, path, FileType::CharacterDevice, Mode::from_raw_mode(0o666), makedev(1, 5)) {
        panic!("this test needs root to make a device node with mknod (as in CI), and mknod failed: {e}");
    }
}

/// Runs `f` in a thread; fails the test if it does not return within [`PROMPT`].
fn promptly<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || drop(tx.send(f())));
    rx.recv_timeout(PROMPT).unwrap_or_else(|_| panic!("{what} did not return within {PROMPT:?}: it blocked"))
}

fn assert_refused<T: std::fmt::Debug>(result: Result<T, SandboxError>, path: &str, kind: &str) {
    match result {
        Err(SandboxError::InvalidInput(m)) => {
            assert!(m.contains(&format!("{path} is {kind}")), "{m}");
            assert!(m.contains("only regular files"), "{m}");
        }
        other => panic!("{path}: expected a refusal naming {kind}, got {other:?}"),
    }
}

/// A child process, killed when dropped.
struct Running(Child);

impl Running {
    /// Runs `script` with `exec`, so the process killed is the one holding the FIFO.
    fn sh(script: &str, dir: &Path) -> Running {
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {script}"))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Running(child)
    }

    fn still_running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn reading_a_fifo_with_no_writer_is_refused_without_blocking() {
    let r = root();
    fifo(&r.path.join("pipe"));
    let s = r.sandbox;
    assert_refused(promptly("read of a FIFO", move || s.read("pipe")), "pipe", "a FIFO");
}

#[test]
fn reading_a_fifo_fed_by_a_writer_is_refused_and_reads_nothing() {
    let r = root();
    fifo(&r.path.join("pipe"));
    let mut writer = Running::sh("yes > pipe", &r.path);
    let s = r.sandbox;
    assert_refused(promptly("read of a fed FIFO", move || s.read("pipe")), "pipe", "a FIFO");
    // `yes` still waits for a reader: the sandbox never opened the FIFO.
    assert!(writer.still_running());
}

#[test]
fn reading_a_character_device_is_refused_without_reading_it() {
    let r = root();
    dev_zero(&r.path.join("zero"));
    std::os::unix::fs::symlink("zero", r.path.join("link")).unwrap();
    let s = r.sandbox;
    assert_refused(promptly("read of /dev/zero", move || s.read("zero")), "zero", "a character device");
    // A symlink inside the root is followed to what it names, and refused the same.
    assert_refused(promptly("read through a symlink", move || s.read("link")), "link", "a character device");
}

#[test]
fn reading_a_unix_socket_is_refused() {
    let r = root();
    let _listener = std::os::unix::net::UnixListener::bind(r.path.join("sock")).unwrap();
    let s = r.sandbox;
    assert_refused(promptly("read of a socket", move || s.read("sock")), "sock", "a socket");
    assert_refused(promptly("write onto a socket", move || s.write("sock", "x")), "sock", "a socket");
}

#[test]
fn stat_refuses_special_files_so_write_file_stops_early() {
    let r = root();
    fifo(&r.path.join("pipe"));
    dev_zero(&r.path.join("zero"));
    assert_refused(r.sandbox.stat("pipe"), "pipe", "a FIFO");
    assert_refused(r.sandbox.stat("zero"), "zero", "a character device");
    std::fs::write(r.path.join("plain"), "x").unwrap();
    assert!(r.sandbox.stat("plain").unwrap().unwrap().mtime.is_some());
    assert!(r.sandbox.stat(".").unwrap().is_some(), "a directory is still reported");
}

#[test]
fn the_read_cap_is_exact() {
    let r = root();
    std::fs::write(r.path.join("cap"), "x".repeat(MAX_FILE_BYTES)).unwrap();
    std::fs::write(r.path.join("over"), "x".repeat(MAX_FILE_BYTES + 1)).unwrap();
    assert_eq!(r.sandbox.read("cap").unwrap().text.len(), MAX_FILE_BYTES);
    match r.sandbox.read("over") {
        Err(SandboxError::InvalidInput(m)) => assert!(m.contains("over the") && m.contains("read limit"), "{m}"),
        other => panic!("expected the read limit, got {other:?}"),
    }
}

#[test]
fn writing_onto_a_fifo_is_refused_and_does_not_block() {
    let r = root();
    fifo(&r.path.join("pipe"));
    let s = r.sandbox;
    // No reader: an ordinary open for writing blocks.
    assert_refused(promptly("write onto a FIFO", move || s.write("pipe", "lonely")), "pipe", "a FIFO");
    // A reader: an ordinary write would feed it.
    let mut reader = Running::sh("cat pipe > got", &r.path);
    assert_refused(promptly("write onto a read FIFO", move || s.write("pipe", "fed")), "pipe", "a FIFO");
    thread::sleep(Duration::from_millis(100));
    assert!(reader.still_running(), "the reader got an end of file: the sandbox opened the FIFO");
    drop(reader);
    assert_eq!(std::fs::read_to_string(r.path.join("got")).unwrap(), "");
}

#[test]
fn writing_onto_a_device_is_refused_and_leaves_the_node() {
    let r = root();
    dev_zero(&r.path.join("zero"));
    std::os::unix::fs::symlink("zero", r.path.join("link")).unwrap();
    let s = r.sandbox;
    assert_refused(promptly("write onto a device", move || s.write("zero", "x")), "zero", "a character device");
    assert_refused(promptly("write through a symlink", move || s.write("link", "x")), "link", "a character device");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(r.path.join("zero")).unwrap().file_type().is_char_device());
}

#[test]
fn writing_a_regular_file_still_replaces_it() {
    let r = root();
    std::fs::write(r.path.join("a.txt"), "a much longer old text").unwrap();
    r.sandbox.write("a.txt", "new").unwrap();
    assert_eq!(std::fs::read_to_string(r.path.join("a.txt")).unwrap(), "new");
    r.sandbox.write("d/b.txt", "made").unwrap();
    assert_eq!(r.sandbox.read("d/b.txt").unwrap().text, "made");
    assert!(matches!(r.sandbox.read("d"), Err(SandboxError::InvalidInput(m)) if m.contains("is a directory")));
}

#[test]
fn glob_says_when_it_cut_the_matches() {
    let r = root();
    std::fs::create_dir(r.path.join("many")).unwrap();
    for i in 0..=MAX_GLOB_MATCHES {
        std::fs::write(r.path.join(format!("many/f{i:04}.txt")), "").unwrap();
    }
    let cut = r.sandbox.glob("many/*.txt").unwrap();
    assert!(cut.truncated, "{} matches exist, {MAX_GLOB_MATCHES} shown", MAX_GLOB_MATCHES + 1);
    assert_eq!(cut.paths.len(), MAX_GLOB_MATCHES);
    assert_eq!((cut.paths[0].as_str(), cut.paths[MAX_GLOB_MATCHES - 1].as_str()), ("many/f0000.txt", "many/f0999.txt"));
    std::fs::remove_file(r.path.join("many/f1000.txt")).unwrap();
    let whole = r.sandbox.glob("many/*.txt").unwrap();
    assert!(!whole.truncated, "exactly {MAX_GLOB_MATCHES} matches is the whole list");
    assert_eq!(whole.paths.len(), MAX_GLOB_MATCHES);
}
