//! The container sandbox against a real engine: Debian's podman, running the
//! image scripts/podman-deps.sh builds from Debian's busybox-static with no
//! registry. The fake CLI in `src/container/tests.rs` checks argv shapes; these
//! check that the engine does what those flags promise: commands and files act
//! inside the container, the root is read-only and a bind is writable only
//! when granted, there is no network unless granted, limits hold, the
//! container goes on close, and a missing image or CLI is a typed error that
//! says what to do. Without podman or the image each test skips, naming the
//! script; in CI (which runs the script) it fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nexo_sandbox::{Bind, ContainerConfig, ContainerSandbox, Network, Runtime, Sandbox, SandboxError};
use nexo_testkit::podman::IMAGE;

/// A generous limit on one command: the engine is real and the machine shared.
const LIMIT: Duration = Duration::from_secs(60);

/// Whether podman and the image are here; without them the test skips (in CI, fails).
fn engine(test: &str) -> bool {
    nexo_testkit::podman::image(test).is_some()
}

fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman").args(args).output().unwrap()
}

/// The hardened defaults with podman and the test image.
fn config() -> ContainerConfig {
    ContainerConfig::podman(IMAGE)
}

/// A sandbox closed when the test ends, passing or not.
struct Boxed(ContainerSandbox);

impl Boxed {
    fn new(config: ContainerConfig) -> Boxed {
        Boxed(ContainerSandbox::new(config).unwrap())
    }

    /// Runs `command` in the container; its status, stdout and stderr.
    fn sh(&self, command: &str) -> (i32, String, String) {
        let out = self.0.exec(command, LIMIT).unwrap();
        (out.status, out.stdout, out.stderr)
    }
}

impl Drop for Boxed {
    fn drop(&mut self) {
        let _ = self.0.close();
    }
}

/// The containers, running or not, that carry `name` as their sandbox label.
fn labeled(name: &str) -> Vec<String> {
    let out = podman(&["ps", "-aq", "--filter", &format!("label=nexo.sandbox.id={name}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}

/// A fresh host directory under the target directory (not /tmp, which a
/// mistake could confuse with the container's).
fn host_dir(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

#[test]
fn commands_and_file_tools_act_inside_the_container() {
    if !engine("commands_and_file_tools_act_inside_the_container") {
        return;
    }
    let s = Boxed::new(config());
    assert_eq!(s.0.container_id(), None, "nothing starts before the first tool call");
    // Shell syntax in contents and paths is data: the write script takes the path as $1.
    let contents = "hello $(touch /workspace/pwned) 'q'\nsecond line\n";
    s.0.write("src/a b.txt", contents).unwrap();
    let text = s.0.read("src/a b.txt").unwrap();
    assert_eq!(text.text, contents);
    assert!(text.mtime.is_some());
    assert_eq!(s.0.stat("missing").unwrap(), None);
    assert!(matches!(s.0.read("missing"), Err(SandboxError::NotFound(_))));
    assert_eq!(s.0.glob("**/*.txt").unwrap().paths, vec!["src/a b.txt"]);

    // The command sees what the file tools wrote, in the container's own
    // process tree: PID 1 is the engine's init over the keep-alive, and the
    // root is the image's.
    let (status, stdout, stderr) = s.sh("cat 'src/a b.txt'; echo err >&2; exit 3");
    assert_eq!((status, stdout.as_str(), stderr.as_str()), (3, contents, "err\n"));
    let (_, init, _) = s.sh("tr '\\0' ' ' < /proc/1/cmdline");
    assert!(init.trim().ends_with("-- tail -f /dev/null"), "{init}");
    let (_, sh, _) = s.sh("readlink /bin/sh; pwd");
    assert_eq!(sh, "busybox\n/workspace\n", "the image's busybox, in the working directory");
    assert_eq!(s.sh("test -e /workspace/pwned").0, 1, "the contents ran as a command");
    assert!(matches!(s.0.read("../etc/passwd"), Err(SandboxError::Security(_))));
}

#[test]
fn the_root_is_read_only_and_binds_are_writable_only_when_granted() {
    if !engine("the_root_is_read_only_and_binds_are_writable_only_when_granted") {
        return;
    }
    let (_ro_dir, ro) = host_dir("podman-ro-");
    let (_rw_dir, rw) = host_dir("podman-rw-");
    fs::write(ro.join("given.txt"), "from the host\n").unwrap();
    let s = Boxed::new(ContainerConfig {
        binds: vec![Bind::read_only(&ro, "/workspace/ro"), Bind::writable(&rw, "/workspace/rw")],
        ..config()
    });
    assert_eq!(s.0.read("ro/given.txt").unwrap().text, "from the host\n");
    match s.0.write("ro/new.txt", "x") {
        Err(SandboxError::Failed(m)) => assert!(m.to_lowercase().contains("read-only"), "{m}"),
        other => panic!("a read-only bind took a write: {other:?}"),
    }
    assert_ne!(s.sh("echo x > ro/given.txt").0, 0);
    assert_eq!(fs::read_to_string(ro.join("given.txt")).unwrap(), "from the host\n");
    assert!(!ro.join("new.txt").exists());

    // The granted bind takes writes from both the file tools and the shell.
    s.0.write("rw/tool.txt", "tool\n").unwrap();
    assert_eq!(s.sh("echo shell > rw/shell.txt").0, 0);
    assert_eq!(fs::read_to_string(rw.join("tool.txt")).unwrap(), "tool\n");
    assert_eq!(fs::read_to_string(rw.join("shell.txt")).unwrap(), "shell\n");

    // Outside the working directory the root is read-only; the scratch is writable.
    let (status, _, stderr) = s.sh("touch /etc/x");
    assert_ne!(status, 0);
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert_eq!(s.sh("touch /workspace/scratch").0, 0);

    // The same write succeeds with the root left writable: the flag, not the
    // image, refused it. (Without the scratch, podman wants `cwd` in the image.)
    let open = Boxed::new(ContainerConfig { readonly_rootfs: false, cwd: "/tmp".into(), ..config() });
    assert_eq!(open.sh("touch /etc/x").0, 0);
}

#[test]
fn there_is_no_network_unless_granted() {
    if !engine("there_is_no_network_unless_granted") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (seen, connections) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let mut line = String::new();
            let _ = stream.unwrap().read_to_string(&mut line);
            if seen.send(line).is_err() {
                return;
            }
        }
    });
    let connect = format!("echo hello | nc -w 5 127.0.0.1 {port}");

    let offline = Boxed::new(config());
    let (status, _, stderr) = offline.sh(&connect);
    assert_ne!(status, 0, "the default network reached the host: {stderr}");
    let (_, links, _) = offline.sh("ls /sys/class/net");
    assert_eq!(links.split_whitespace().collect::<Vec<_>>(), ["lo"], "only a loopback interface");
    assert!(connections.try_recv().is_err(), "the listener saw a connection from the offline container");

    // Granted the host's network, the same command reaches the listener.
    let online = Boxed::new(ContainerConfig { network: Network::Host, ..config() });
    let (status, _, stderr) = online.sh(&connect);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(connections.recv_timeout(LIMIT).unwrap(), "hello\n");
}

#[test]
fn limits_and_dropped_capabilities_hold() {
    if !engine("limits_and_dropped_capabilities_hold") {
        return;
    }
    // Forty sleeps at once, counting each one started: the shell dies at
    // the first fork the pids limit refuses.
    let fork = "i=0; while [ $i -lt 40 ]; do sleep 2 & i=$((i+1)); echo $i > started; done; wait";
    let few = Boxed::new(ContainerConfig { pids_limit: Some(16), ..config() });
    let (status, _, stderr) = few.sh(fork);
    assert_ne!(status, 0);
    assert!(stderr.contains("can't fork"), "{stderr}");
    let started: u32 = eventually(|| few.0.read("started").ok()).text.trim().parse().unwrap();
    assert!(started < 16, "{started} sleeps ran under a pids limit of 16");
    let many = Boxed::new(config());
    assert_eq!(many.sh(fork).0, 0);
    assert_eq!(many.0.read("started").unwrap().text, "40\n", "the default limit of 512 allows forty");

    // A 128 MiB buffer under a 32 MiB memory limit is killed; without the limit it is not.
    let allocate = "dd if=/dev/zero of=/dev/null bs=128M count=1 2>/dev/null";
    let small = Boxed::new(ContainerConfig { memory: Some("32m".into()), ..config() });
    assert_eq!(small.sh(allocate).0, 137, "killed by the memory limit");
    assert_eq!(many.sh(allocate).0, 0);

    // Every capability is dropped (root cannot chown), new privileges are
    // off, and cap_add gives back exactly what it names.
    let chown = "touch f && chown 65534 f";
    let (status, _, stderr) = many.sh(chown);
    assert_ne!(status, 0);
    assert!(stderr.contains("Operation not permitted"), "{stderr}");
    assert_eq!(many.sh("grep NoNewPrivs /proc/self/status").1.split_whitespace().last(), Some("1"));
    let chowner = Boxed::new(ContainerConfig { cap_add: vec!["CHOWN".into()], ..config() });
    assert_eq!(chowner.sh(chown).0, 0);

    let nobody = Boxed::new(ContainerConfig { user: Some("65534".into()), ..config() });
    assert_eq!(nobody.sh("id -u").1, "65534\n");
}

#[test]
fn what_commands_leave_in_the_background_is_reaped() {
    if !engine("what_commands_leave_in_the_background_is_reaped") {
        return;
    }
    // Each round leaves ten orphans that end a moment later: zombies, unless
    // PID 1 reaps them, and four rounds' worth would fill a pids limit of 24.
    let s = Boxed::new(ContainerConfig { pids_limit: Some(24), ..config() });
    for round in 0..4 {
        let (status, _, stderr) = s.sh("for i in $(seq 10); do sleep 0.2 >/dev/null 2>&1 & done");
        assert_eq!(status, 0, "round {round}: {stderr}");
        eventually(|| s.0.exec("ps -o comm | grep -c '^sleep'", LIMIT).ok().filter(|o| o.stdout == "0\n"));
    }
    assert_eq!(s.sh("ps -o stat | grep -c Z").1, "0\n", "no zombies");
}

/// Polls `check` until it gives a value, for up to [`LIMIT`].
fn eventually<T>(check: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {LIMIT:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_container_goes_on_close_with_a_command_that_outran_its_limit() {
    if !engine("the_container_goes_on_close_with_a_command_that_outran_its_limit") {
        return;
    }
    let s = Boxed::new(config());
    let name = s.0.container_name().to_string();
    assert_eq!(s.sh("true").0, 0);
    let id = s.0.container_id().unwrap();
    assert_eq!(labeled(&name).len(), 1);

    // A command past its limit: the CLI is killed, and the process inside
    // goes on (docker and podman exec forward no kill) until the container goes.
    let started = Instant::now();
    match s.0.exec("sleep 300", Duration::from_secs(2)) {
        Err(SandboxError::Timeout(m)) => assert!(m.contains("until it is closed"), "{m}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30), "the timeout took {:?}", started.elapsed());
    let (_, sleeping, _) = s.sh("ps -o comm | grep -c '^sleep'");
    assert_eq!(sleeping.trim(), "1", "the timed-out command runs on inside");

    // Removal is prompt: the keep-alive would hold podman's rm for 10 seconds on SIGTERM.
    let started = Instant::now();
    s.0.close().unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "close took {:?}", started.elapsed());
    assert_eq!(labeled(&name), Vec::<String>::new(), "the container outlived close");
    assert!(!podman(&["container", "exists", &id]).status.success());
    assert_eq!(s.0.container_id(), None);
    s.0.close().unwrap();
}

#[test]
fn a_container_never_closed_goes_when_its_sandbox_does() {
    if !engine("a_container_never_closed_goes_when_its_sandbox_does") {
        return;
    }
    // Dropping the sandbox closes the tether's pipe as a process's death
    // would (host/tests/container.rs kills nexo itself).
    let s = ContainerSandbox::new(config()).unwrap();
    let name = s.container_name().to_string();
    assert_eq!(s.exec("true", LIMIT).unwrap().status, 0);
    assert_eq!(labeled(&name).len(), 1);
    drop(s);
    eventually(|| labeled(&name).is_empty().then_some(()));
}

#[test]
fn a_container_removed_behind_its_back_is_replaced() {
    if !engine("a_container_removed_behind_its_back_is_replaced") {
        return;
    }
    let s = Boxed::new(config());
    s.0.write("a.txt", "first").unwrap();
    let first = s.0.container_id().unwrap();
    assert!(podman(&["rm", "-f", &first]).status.success());
    match s.0.read("a.txt") {
        Err(SandboxError::Failed(m)) => assert!(m.contains("no such container"), "{m}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(s.0.container_id(), None, "the removed container is forgotten");
    assert_eq!(s.sh("test -e a.txt").0, 1, "a fresh container, with a fresh scratch");
    let second = s.0.container_id().unwrap();
    assert_ne!(first, second);
}

#[test]
fn reconnect_finds_the_container_by_its_exact_label() {
    if !engine("reconnect_finds_the_container_by_its_exact_label") {
        return;
    }
    let name = format!("nexo-podman-test-{}", std::process::id());
    let kept = |name: &str| ContainerConfig { name: Some(name.into()), reconnect: true, ..config() };
    // A container whose label only starts with the name must not be taken for it.
    let longer = Boxed::new(ContainerConfig { name: Some(format!("{name}x")), ..config() });
    longer.0.write("which", "longer").unwrap();

    let first = ContainerSandbox::new(kept(&name)).unwrap();
    first.write("which", "kept").unwrap();
    let id = first.container_id().unwrap();
    first.close().unwrap();
    assert_eq!(labeled(&name).len(), 1, "a reconnecting sandbox leaves its container on close");

    let second = ContainerSandbox::new(kept(&name)).unwrap();
    let found = second.read("which");
    let again = second.container_id();
    assert!(podman(&["rm", "-f", &id]).status.success());
    assert_eq!(found.unwrap().text, "kept");
    // The lookup prints the short id.
    let again = again.unwrap();
    assert!(again.len() >= 12 && id.starts_with(&again), "{again} is not {id}");
}

#[test]
fn a_missing_image_or_cli_is_an_error_that_says_what_to_do() {
    if !engine("a_missing_image_or_cli_is_an_error_that_says_what_to_do") {
        return;
    }
    let name = format!("nexo-podman-missing-{}", std::process::id());
    let s =
        Boxed::new(ContainerConfig { name: Some(name.clone()), ..ContainerConfig::podman("localhost/nexo-absent:1") });
    match s.0.exec("true", LIMIT) {
        Err(SandboxError::Failed(m)) => {
            assert!(m.contains("cannot start a container from localhost/nexo-absent:1"), "{m}");
            assert!(m.contains("check that the Podman engine runs and the image exists"), "{m}");
        }
        other => panic!("expected a start failure, got {other:?}"),
    }
    assert_eq!(s.0.container_id(), None);
    assert_eq!(labeled(&name), Vec::<String>::new());

    // A start that fails after podman created the container (a working
    // directory the image lacks) leaves nothing behind either.
    let name = format!("{name}-cwd");
    let s = Boxed::new(ContainerConfig {
        name: Some(name.clone()),
        readonly_rootfs: false,
        cwd: "/absent".into(),
        ..config()
    });
    match s.0.exec("true", LIMIT) {
        Err(SandboxError::Failed(m)) => assert!(m.contains("/absent"), "{m}"),
        other => panic!("expected a start failure, got {other:?}"),
    }
    assert_eq!(labeled(&name), Vec::<String>::new(), "the failed start left its container");

    let empty = tempfile::tempdir().unwrap();
    match ContainerSandbox::with_search_path(config(), empty.path().as_os_str()) {
        Err(SandboxError::Config(m)) => {
            assert!(m.contains("`podman` CLI was not found on PATH") && m.contains("apt-get install podman"), "{m}")
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    assert_eq!(config().runtime, Runtime::Podman);
}
