//! Shell commands in the local sandbox, run as real processes under every
//! confinement mechanism. A mechanism missing on the machine makes its tests
//! fail with what to install; they never pass vacuously.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nexo_sandbox::shell::{DEFAULT_PATH, MAX_OUTPUT_BYTES};
use nexo_sandbox::{Confinement, ExecOutput, LocalSandbox, Sandbox, SandboxError, ShellPolicy};

const LIMIT: Duration = Duration::from_secs(30);

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    sandbox: LocalSandbox,
}

impl Fixture {
    fn new(confinement: Confinement) -> Fixture {
        // Under the target directory rather than /tmp: bubblewrap gives commands a
        // private /tmp, where a write to a sibling would vanish instead of failing.
        let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        Fixture::in_dir(dir, confinement)
    }

    fn in_dir(dir: tempfile::TempDir, confinement: Confinement) -> Fixture {
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let policy = require(ShellPolicy { confinement, ..ShellPolicy::default() });
        let sandbox = LocalSandbox::with_shell(&root, policy).unwrap();
        let (root, outside) = (root.canonicalize().unwrap(), outside.canonicalize().unwrap());
        Fixture { _dir: dir, root, outside, sandbox }
    }

    fn exec(&self, command: &str) -> ExecOutput {
        self.sandbox.exec(command, LIMIT).unwrap_or_else(|e| panic!("`{command}` failed to run: {e}"))
    }
}

/// Fails the test, saying what to install, if the mechanism does not work here.
fn require(policy: ShellPolicy) -> ShellPolicy {
    if let Err(e) = policy.effective_confinement() {
        panic!("{:?} confinement is not usable on this machine, so its tests cannot run: {e}", policy.confinement);
    }
    policy
}

fn confinement_named(name: &str) -> Confinement {
    match name {
        "Auto" => Confinement::Auto,
        "Bubblewrap" => Confinement::Bubblewrap,
        "Landlock" => Confinement::Landlock,
        "Unconfined" => Confinement::Unconfined,
        other => panic!("unknown confinement {other}"),
    }
}

fn quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

// ---------------------------------------------------------------------------
// Behaviour shared by every mechanism.

fn writes_inside_the_root(c: Confinement) {
    let f = Fixture::new(c);
    let out = f.exec("mkdir -p sub && echo hello > sub/new.txt && mv sub/new.txt moved.txt && cat moved.txt");
    assert_eq!((out.status, out.stdout.as_str()), (0, "hello\n"), "{out:?}");
    assert_eq!(std::fs::read_to_string(f.root.join("moved.txt")).unwrap(), "hello\n");
    let out = f.exec("pwd; echo $HOME; echo x > /dev/null && echo null-ok");
    let root = f.root.display();
    assert_eq!(out.stdout, format!("{root}\n{root}\nnull-ok\n"), "{out:?}");
}

/// Re-runs this test binary with a secret in its environment (set at birth, so
/// no `set_var` in a threaded process) and has it check the command cannot see it.
fn env_is_narrowed(c: Confinement) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "env_probe_helper", "--nocapture", "--test-threads=1"])
        .env("NEXO_ENV_PROBE", format!("{c:?}"))
        .env("NEXO_TEST_SECRET", "hunter2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("env-probe-ok"), "{stdout}\n{stderr}");
}

/// Runs only when re-executed by `env_is_narrowed`.
#[test]
fn env_probe_helper() {
    let Ok(name) = std::env::var("NEXO_ENV_PROBE") else { return };
    assert_eq!(std::env::var("NEXO_TEST_SECRET").as_deref(), Ok("hunter2"), "the secret must be set in this process");
    let f = Fixture::new(confinement_named(&name));
    let out = f.exec("echo \"secret=[$NEXO_TEST_SECRET]\"; env");
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("secret=[]\n"), "{out:?}");
    assert!(!out.stdout.contains("hunter2"), "{out:?}");
    for line in out.stdout.lines().skip(1) {
        let (name, value) = line.split_once('=').unwrap_or((line, ""));
        match name {
            "PATH" => assert_eq!(value, DEFAULT_PATH),
            "HOME" => assert_eq!(Path::new(value), f.root),
            "LANG" => assert!(!value.is_empty()),
            // Set by the shell itself.
            "PWD" | "OLDPWD" | "SHLVL" | "_" => {}
            _ => panic!("{line:?} leaked into the command's environment:\n{}", out.stdout),
        }
    }
    println!("env-probe-ok");
}

fn policy_env_is_added(c: Confinement) {
    let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let policy = require(ShellPolicy {
        confinement: c,
        env: vec![("NEXO_EXTRA".into(), "on".into()), ("PATH".into(), "/usr/bin:/bin".into())],
        ..ShellPolicy::default()
    });
    let s = LocalSandbox::with_shell(&root, policy).unwrap();
    let out = s.exec("echo $NEXO_EXTRA $PATH", LIMIT).unwrap();
    assert_eq!(out.stdout, "on /usr/bin:/bin\n", "{out:?}");
}

fn timeout_kills_the_command(c: Confinement) {
    let f = Fixture::new(c);
    let started = Instant::now();
    let err = f.sandbox.exec("sleep 30", Duration::from_millis(300)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    match err {
        SandboxError::Timeout(msg) => assert!(msg.contains("sleep 30") && msg.contains("300ms"), "{msg}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

fn timeout_kills_grandchildren(c: Confinement) {
    let f = Fixture::new(c);
    let started = Instant::now();
    let err = f.sandbox.exec("(sleep 1; touch late) & sleep 30 & wait", Duration::from_millis(300)).unwrap_err();
    assert!(matches!(err, SandboxError::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!f.root.join("late").exists(), "a background process survived the timeout");
}

fn background_jobs_end_with_the_shell(c: Confinement) {
    let f = Fixture::new(c);
    let started = Instant::now();
    // The first job keeps the output pipes open; the command must not wait for it.
    let out = f.exec("(sleep 2; touch late1) & (sleep 2; touch late2) >/dev/null 2>&1 & echo started");
    assert_eq!((out.status, out.stdout.as_str()), (0, "started\n"), "{out:?}");
    assert!(started.elapsed() < Duration::from_millis(1800), "took {:?}", started.elapsed());
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
    assert!(!f.root.join("late1").exists() && !f.root.join("late2").exists(), "a background job survived");
}

fn exit_status_and_stderr_pass_through(c: Confinement) {
    let f = Fixture::new(c);
    let out = f.exec("echo out; echo err >&2; exit 7");
    assert_eq!(out, ExecOutput { status: 7, stdout: "out\n".into(), stderr: "err\n".into() });
    let out = f.exec("ls does-not-exist");
    assert_ne!(out.status, 0);
    assert!(out.stderr.contains("does-not-exist"), "{out:?}");
    assert!(out.stdout.is_empty());
}

fn output_is_capped_without_deadlock(c: Confinement) {
    let f = Fixture::new(c);
    let started = Instant::now();
    // stderr first and over the pipe size: a reader that waits on stdout alone would deadlock.
    let out = f.exec("head -c 5000000 /dev/zero | tr '\\0' e >&2; head -c 5000000 /dev/zero | tr '\\0' o; echo");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(out.status, 0);
    assert_eq!(out.stdout.len(), MAX_OUTPUT_BYTES);
    assert_eq!(out.stderr.len(), MAX_OUTPUT_BYTES);
    assert!(out.stdout.bytes().all(|b| b == b'o') && out.stderr.bytes().all(|b| b == b'e'));
    // Invalid UTF-8 is decoded lossily, not refused.
    let out = f.exec("printf 'a\\377b'");
    assert_eq!(out.stdout, "a\u{fffd}b");
}

// ---------------------------------------------------------------------------
// What confinement must refuse, and the unconfined control showing the
// same commands do work without it.

fn tcp_connect(f: &Fixture) -> (ExecOutput, bool) {
    assert!(Path::new("/bin/bash").exists(), "these tests need bash (apt-get install bash)");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = f.exec(&format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo connected"));
    // A completed connect waits in the backlog even though nobody accepted it yet.
    let connected = listener.accept().is_ok();
    (out, connected)
}

fn writes_outside_the_root_fail(c: Confinement) {
    let f = Fixture::new(c);
    std::fs::write(f.outside.join("keep.txt"), "keep").unwrap();
    let etc = PathBuf::from(format!("/etc/nexo-test-{}", std::process::id()));
    for command in [
        format!("echo x > {}", quote(&f.outside.join("planted.txt"))),
        format!("echo x > {}", quote(&f.root.join("../outside/planted.txt"))),
        format!("mkdir {}", quote(&f.outside.join("dir"))),
        // Not `rm -f`: where the outside is invisible (bwrap hides /tmp), `-f` would succeed on nothing.
        format!("rm {}", quote(&f.outside.join("keep.txt"))),
        format!("echo x > {}", quote(&etc)),
        format!("ln -s {} link && echo x >> link", quote(&f.outside.join("keep.txt"))),
    ] {
        let out = f.exec(&command);
        if etc.exists() {
            let _ = std::fs::remove_file(&etc);
            panic!("`{command}` wrote into /etc");
        }
        assert_ne!(out.status, 0, "`{command}` succeeded: {out:?}");
    }
    assert!(!f.outside.join("planted.txt").exists() && !f.outside.join("dir").exists());
    assert_eq!(std::fs::read_to_string(f.outside.join("keep.txt")).unwrap(), "keep");
}

fn network_is_refused(c: Confinement) {
    let f = Fixture::new(c);
    let (out, connected) = tcp_connect(&f);
    assert!(
        out.status != 0 && !connected,
        "a TCP connection to the host was made under {c:?} (Landlock needs ABI 4, Linux 6.7+): {out:?}"
    );
}

#[test]
fn unconfined_commands_reach_outside_and_the_network() {
    let f = Fixture::new(Confinement::Unconfined);
    let planted = f.outside.join("planted.txt");
    let out = f.exec(&format!("echo x > {}", quote(&planted)));
    assert_eq!(out.status, 0, "{out:?}");
    assert!(planted.exists());
    let (out, connected) = tcp_connect(&f);
    assert!(out.status == 0 && out.stdout == "connected\n" && connected, "{out:?}");
}

macro_rules! mechanism_tests {
    ($module:ident, $confinement:expr, confined: $confined:tt) => {
        mod $module {
            use super::*;

            #[test]
            fn writes_inside_the_root() {
                super::writes_inside_the_root($confinement);
            }
            #[test]
            fn env_is_narrowed() {
                super::env_is_narrowed($confinement);
            }
            #[test]
            fn policy_env_is_added() {
                super::policy_env_is_added($confinement);
            }
            #[test]
            fn timeout_kills_the_command() {
                super::timeout_kills_the_command($confinement);
            }
            #[test]
            fn timeout_kills_grandchildren() {
                super::timeout_kills_grandchildren($confinement);
            }
            #[test]
            fn background_jobs_end_with_the_shell() {
                super::background_jobs_end_with_the_shell($confinement);
            }
            #[test]
            fn exit_status_and_stderr_pass_through() {
                super::exit_status_and_stderr_pass_through($confinement);
            }
            #[test]
            fn output_is_capped_without_deadlock() {
                super::output_is_capped_without_deadlock($confinement);
            }
            mechanism_tests!(@confined $confinement, $confined);
        }
    };
    (@confined $confinement:expr, true) => {
        #[test]
        fn writes_outside_the_root_fail() {
            super::writes_outside_the_root_fail($confinement);
        }
        #[test]
        fn network_is_refused() {
            super::network_is_refused($confinement);
        }
    };
    (@confined $confinement:expr, false) => {};
}

mechanism_tests!(bubblewrap, Confinement::Bubblewrap, confined: true);
mechanism_tests!(landlock, Confinement::Landlock, confined: true);
mechanism_tests!(auto, Confinement::Auto, confined: true);
mechanism_tests!(unconfined, Confinement::Unconfined, confined: false);

// ---------------------------------------------------------------------------
// Mechanism-specific behaviour.

#[test]
fn bubblewrap_gives_a_private_tmp_and_no_privileges() {
    let f = Fixture::new(Confinement::Bubblewrap);
    let name = format!("/tmp/nexo-private-{}", std::process::id());
    let out = f.exec(&format!("echo x > {name} && cat {name}"));
    assert_eq!((out.status, out.stdout.as_str()), (0, "x\n"), "{out:?}");
    assert!(!Path::new(&name).exists(), "the command's /tmp is the host's");
    // As root, bwrap would otherwise keep the capabilities to undo its own mounts.
    let etc = format!("/etc/nexo-test-remount-{}", std::process::id());
    let out = f.exec(&format!("mount -o remount,rw,bind / ; touch {etc}"));
    let escaped = Path::new(&etc).exists();
    let _ = std::fs::remove_file(&etc);
    assert!(out.status != 0 && !escaped, "the command remounted / writable: {out:?}");
    let out = f.exec("grep CapEff /proc/self/status; echo 1 > /proc/sys/vm/drop_caches");
    assert_ne!(out.status, 0, "/proc/sys is writable: {out:?}");
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{out:?}");
    // Host processes are invisible.
    let out = f.exec(&format!("test -e /proc/{}", std::process::id()));
    assert_ne!(out.status, 0, "the host's processes are visible");
    // bwrap reports a signal as 128 + N.
    assert_eq!(f.exec("kill -9 $$").status, 137);
}

#[test]
fn bubblewrap_works_with_a_root_under_tmp() {
    let f = Fixture::in_dir(tempfile::tempdir().unwrap(), Confinement::Bubblewrap);
    assert!(f.root.starts_with("/tmp"));
    let out = f.exec("echo x > made.txt && ls");
    assert_eq!((out.status, out.stdout.as_str()), (0, "made.txt\n"), "{out:?}");
    assert_eq!(std::fs::read_to_string(f.root.join("made.txt")).unwrap(), "x\n");
}

#[test]
fn landlock_keeps_tmp_read_only_and_drops_capabilities() {
    let f = Fixture::new(Confinement::Landlock);
    let name = format!("/tmp/nexo-landlock-{}", std::process::id());
    let out = f.exec(&format!("echo x > {name}"));
    let written = Path::new(&name).exists();
    let _ = std::fs::remove_file(&name);
    assert!(out.status != 0 && !written, "the host's /tmp is writable: {out:?}");
    let out = f.exec("grep -E 'CapEff|CapBnd|NoNewPrivs' /proc/self/status");
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{out:?}");
    assert!(out.stdout.contains("CapBnd:\t0000000000000000"), "{out:?}");
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{out:?}");
    // Pipes stay usable through their /dev and /proc names.
    let out = f.exec("echo to-stderr > /dev/stderr");
    assert_eq!((out.status, out.stderr.as_str()), (0, "to-stderr\n"), "{out:?}");
    assert_eq!(f.exec("kill -9 $$").status, -1);
}

#[test]
fn unconfined_reports_signals_as_minus_one() {
    let f = Fixture::new(Confinement::Unconfined);
    assert_eq!(f.exec("kill -9 $$").status, -1);
}

#[test]
fn auto_picks_a_working_mechanism() {
    let policy = ShellPolicy::default();
    assert_eq!(policy.confinement, Confinement::Auto);
    let picked = require(policy).effective_confinement().unwrap();
    assert!(matches!(picked, Confinement::Bubblewrap | Confinement::Landlock), "{picked:?}");
    // bwrap is expected on this machine (and in CI): Auto prefers it.
    assert_eq!(picked, Confinement::Bubblewrap, "install bubblewrap (apt-get install bubblewrap)");
    // Without a working bwrap, Auto falls back to Landlock.
    let policy = ShellPolicy { bwrap: Some("/nonexistent/bwrap".into()), ..ShellPolicy::default() };
    assert_eq!(policy.effective_confinement(), Ok(Confinement::Landlock), "Landlock needs Linux 5.13+ with it enabled");
}

#[test]
fn an_unavailable_bubblewrap_is_a_config_error() {
    for (bwrap, why) in [("/nonexistent/bwrap", "not found"), ("/bin/false", "does not work")] {
        let policy =
            ShellPolicy { confinement: Confinement::Bubblewrap, bwrap: Some(bwrap.into()), ..ShellPolicy::default() };
        let dir = tempfile::tempdir().unwrap();
        let s = LocalSandbox::with_shell(dir.path(), policy).unwrap();
        match s.exec("true", LIMIT) {
            Err(SandboxError::Config(msg)) => {
                assert!(msg.contains(bwrap) && msg.contains(why) && msg.contains("apt-get install bubblewrap"), "{msg}")
            }
            other => panic!("{bwrap}: expected a config error, got {other:?}"),
        }
    }
}

#[test]
fn instructions_say_how_commands_are_confined() {
    let text = |c| Fixture::new(c).sandbox.instructions().unwrap();
    assert!(text(Confinement::Bubblewrap).contains("no network access"));
    assert!(text(Confinement::Landlock).contains("cannot open TCP connections"));
    assert!(text(Confinement::Unconfined).contains("unconfined"));
}
