//! Shell commands in the local sandbox, run as real processes under every
//! confinement mechanism. A mechanism missing on the machine makes its tests
//! fail with what to install; they never pass vacuously.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nexo_sandbox::shell::{DEFAULT_PATH, MAX_OUTPUT_BYTES};
use nexo_sandbox::{
    Confinement, ExecOutput, LocalSandbox, Sandbox, SandboxError, ShellLimits, ShellPolicy, SystemView,
};
use rustix::process::Signal;

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
        Fixture::with_policy(dir, ShellPolicy { confinement, ..ShellPolicy::default() })
    }

    fn with_policy(dir: tempfile::TempDir, policy: ShellPolicy) -> Fixture {
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let policy = require(policy);
        let sandbox = LocalSandbox::with_shell(&root, policy).unwrap();
        let (root, outside) = (root.canonicalize().unwrap(), outside.canonicalize().unwrap());
        Fixture { _dir: dir, root, outside, sandbox }
    }

    /// A fixture whose commands may read `/proc`, for the tests that look at
    /// the command's own processes and descriptors: Landlock's default view
    /// leaves `/proc` out (bubblewrap gives each command its own anyway).
    fn with_proc(confinement: Confinement) -> Fixture {
        let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mut paths = SystemView::default().paths().to_vec();
        paths.push("/proc".into());
        let view = SystemView::new(paths).unwrap();
        Fixture::with_policy(dir, ShellPolicy { confinement, view, ..ShellPolicy::default() })
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
    let env = [("NEXO_ENV_PROBE", format!("{c:?}")), ("NEXO_TEST_SECRET", "hunter2".into())];
    run_probe(c, "env_is_narrowed", &env, "env-probe-ok");
}

/// Re-runs this binary as `c`'s test `test` alone, with `env` set at birth,
/// and checks that the probe the environment asks for passed (printed `ok`).
fn run_probe(c: Confinement, test: &str, env: &[(&str, String)], ok: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &itself(c, test), "--nocapture", "--test-threads=1"])
        .envs(env.iter().map(|(name, value)| (name, value)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains(ok), "{stdout}\n{stderr}");
}

/// The probe `env_is_narrowed` re-runs this binary for.
fn env_probe(name: &str) {
    assert_eq!(std::env::var("NEXO_TEST_SECRET").as_deref(), Ok("hunter2"), "the secret must be set in this process");
    let f = Fixture::new(confinement_named(name));
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
    // Exactly the cap of each stream is kept, then a last line says where it was cut.
    let kept = |text: &str, stream: &str| {
        let note = format!("\n[{stream} cut at {MAX_OUTPUT_BYTES} bytes]");
        text.strip_suffix(&note).unwrap_or_else(|| panic!("{stream} does not end with {note:?}")).to_string()
    };
    let (stdout, stderr) = (kept(&out.stdout, "stdout"), kept(&out.stderr, "stderr"));
    assert_eq!(stdout.len(), MAX_OUTPUT_BYTES);
    assert_eq!(stderr.len(), MAX_OUTPUT_BYTES);
    assert!(stdout.bytes().all(|b| b == b'o') && stderr.bytes().all(|b| b == b'e'));
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

/// Runs this test binary inside the sandbox as a socket probe, re-running
/// `test` (which calls [`probe_if_asked`] first): it prints what it got, or
/// exits 3 when refused.
fn socket_probe(f: &Fixture, test: &str, kind: &str, arg: &str) -> ExecOutput {
    // The probe runs from a link in the root: the sandbox may hide the target
    // directory (bubblewrap's private /tmp hides a checkout under /tmp).
    let probe = f.root.join(".socket-probe");
    if !probe.exists() {
        let exe = std::env::current_exe().unwrap();
        if std::fs::hard_link(&exe, &probe).is_err() {
            std::fs::copy(&exe, &probe).unwrap();
        }
    }
    f.exec(&format!(
        "NEXO_SOCKET_PROBE='{kind}' NEXO_SOCKET_ARG='{arg}' {} --exact {test} --nocapture --test-threads=1",
        quote(&probe)
    ))
}

/// The probe `socket_probe` runs inside the sandbox; ends the process.
fn socket_probe_run(kind: &str) -> ! {
    let arg = std::env::var("NEXO_SOCKET_ARG").unwrap_or_default();
    let refused = |what: &str, e: std::io::Error| -> ! {
        eprintln!("refused: {what}: {e}");
        std::process::exit(3)
    };
    match kind {
        "mptcp" => {
            // std has no MPTCP: make the socket by hand, then let std drive it.
            #[allow(unsafe_code)]
            // SAFETY: plain socket/connect calls on a local address; the fd is owned by the stream after.
            let mut stream = unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP);
                if fd < 0 {
                    refused("socket", std::io::Error::last_os_error());
                }
                let port: u16 = arg.parse().unwrap();
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: port.to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be() },
                    sin_zero: [0; 8],
                };
                let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                if libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                    refused("connect", std::io::Error::last_os_error());
                }
                <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd)
            };
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            println!("{}", response.lines().next().unwrap_or(""));
        }
        "udp" | "udp6" => {
            let (bind, to) = if kind == "udp" { ("127.0.0.1:0", "127.0.0.1") } else { ("[::1]:0", "::1") };
            let socket = UdpSocket::bind(bind).unwrap_or_else(|e| refused("socket", e));
            let port: u16 = arg.parse().unwrap();
            socket.send_to(b"hi", (to, port)).unwrap_or_else(|e| refused("send", e));
            println!("sent");
        }
        "unix" => {
            let mut stream = std::os::unix::net::UnixStream::connect(&arg).unwrap_or_else(|e| refused("connect", e));
            stream.write_all(b"hi").unwrap();
            println!("connected");
        }
        "unix-dgram-pair" => {
            let (a, _b) = UnixDatagram::pair().unwrap_or_else(|e| refused("socketpair", e));
            a.send_to(b"hi", &arg).unwrap_or_else(|e| refused("send", e));
            println!("sent");
        }
        "unix-raw-pair" => {
            // The kernel makes a Unix SOCK_RAW pair a datagram pair.
            let mut fds = [0; 2];
            #[allow(unsafe_code)]
            // SAFETY: socketpair into a local array; the fd is owned by the datagram socket after.
            let a = unsafe {
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_RAW, 0, fds.as_mut_ptr()) != 0 {
                    refused("socketpair", std::io::Error::last_os_error());
                }
                <UnixDatagram as std::os::fd::FromRawFd>::from_raw_fd(fds[0])
            };
            a.send_to(b"hi", &arg).unwrap_or_else(|e| refused("send", e));
            println!("sent");
        }
        "netlink" => {
            #[allow(unsafe_code)]
            // SAFETY: a plain socket call.
            let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0) };
            if fd < 0 {
                refused("socket", std::io::Error::last_os_error());
            }
            println!("opened");
        }
        "pair" => {
            let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| refused("socketpair", e));
            a.write_all(b"x").unwrap();
            let mut got = [0u8; 1];
            b.read_exact(&mut got).unwrap();
            println!("pair {}", got[0] as char);
        }
        other => panic!("unknown probe {other}"),
    }
    std::process::exit(0)
}

/// A loopback HTTP server answering `200 OK`; `hit` turns true once someone connects.
struct HttpServer {
    port: u16,
    hit: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl HttpServer {
    fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hit, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (h, st) = (Arc::clone(&hit), Arc::clone(&stop));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !st.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        h.store(true, Ordering::SeqCst);
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                        let _ = conn.read(&mut [0u8; 512]);
                        let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HttpServer { port, hit, stop }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn received(socket: &UdpSocket) -> bool {
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    socket.recv(&mut [0u8; 16]).is_ok()
}

/// MPTCP, UDP (v4 and v6), netlink and Unix sockets outside the root: all
/// refused, while a connected Unix socket pair still works.
fn sockets_are_refused(c: Confinement) {
    let f = Fixture::new(c);
    let test = itself(c, "sockets_are_refused");
    let server = HttpServer::start();
    let out = socket_probe(&f, &test, "mptcp", &server.port.to_string());
    assert!(out.status != 0 && !out.stdout.contains("200"), "MPTCP reached the host under {c:?}: {out:?}");
    assert!(!server.hit.load(Ordering::SeqCst), "MPTCP connected to the host under {c:?}");

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = socket_probe(&f, &test, "udp", &udp.local_addr().unwrap().port().to_string());
    assert!(out.status != 0 && !received(&udp), "a UDP datagram reached the host under {c:?}: {out:?}");
    if let Ok(udp6) = UdpSocket::bind("[::1]:0") {
        let out = socket_probe(&f, &test, "udp6", &udp6.local_addr().unwrap().port().to_string());
        assert!(out.status != 0 && !received(&udp6), "a UDP6 datagram reached the host under {c:?}: {out:?}");
    }

    let path = f.outside.join("daemon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = socket_probe(&f, &test, "unix", path.to_str().unwrap());
    assert!(
        out.status != 0 && listener.accept().is_err(),
        "a Unix socket outside the root was reached under {c:?}: {out:?}"
    );
    let dgram_path = f.outside.join("log.sock");
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let out = socket_probe(&f, &test, "unix-dgram-pair", dgram_path.to_str().unwrap());
    assert!(
        out.status != 0 && dgram.recv(&mut [0u8; 16]).is_err(),
        "a datagram reached a Unix socket outside the root under {c:?}: {out:?}"
    );
    let out = socket_probe(&f, &test, "unix-raw-pair", dgram_path.to_str().unwrap());
    assert!(
        out.status != 0 && dgram.recv(&mut [0u8; 16]).is_err(),
        "a raw Unix pair sent a datagram outside the root under {c:?}: {out:?}"
    );
    let out = socket_probe(&f, &test, "netlink", "");
    assert!(out.status != 0, "a netlink socket was opened under {c:?}: {out:?}");

    let out = socket_probe(&f, &test, "pair", "");
    assert!(out.status == 0 && out.stdout.contains("pair x\n"), "socket pairs must keep working: {out:?}");
}

/// Processes that leave the group (`setsid`) or reparent (double fork) still
/// end with the command, whether it exits or times out.
fn detached_processes_end_with_the_command(c: Confinement) {
    let f = Fixture::new(c);
    let started = Instant::now();
    let out = f.exec(
        "setsid sh -c 'sleep 2; touch late-setsid' </dev/null >/dev/null 2>&1 & \
         (sh -c 'sleep 2; touch late-daemon' </dev/null >/dev/null 2>&1 &); echo started",
    );
    assert_eq!((out.status, out.stdout.as_str()), (0, "started\n"), "{out:?}");
    assert!(started.elapsed() < Duration::from_millis(1800), "the command waited for its children: {out:?}");
    let err = f
        .sandbox
        .exec(
            "setsid sh -c 'sleep 2; touch late-timeout' </dev/null >/dev/null 2>&1 & sleep 30",
            Duration::from_millis(300),
        )
        .unwrap_err();
    assert!(matches!(err, SandboxError::Timeout(_)), "{err:?}");
    std::thread::sleep(Duration::from_millis(3000).saturating_sub(started.elapsed()));
    for name in ["late-setsid", "late-daemon", "late-timeout"] {
        assert!(!f.root.join(name).exists(), "{name}: a detached process outlived its command under {c:?}");
    }
}

/// Runs a long command from a helper process, kills the helper with `signal`
/// mid-command, and checks nothing the command started lives on.
fn supervisor_death_ends_the_command(c: Confinement, signal: &str) {
    let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &itself(c, &format!("supervisor_sig{}_ends_the_command", signal.to_lowercase())),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("NEXO_ORPHAN_PROBE", format!("{c:?}"))
        .env("NEXO_ORPHAN_ROOT", &root)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !root.join("started").exists() {
        assert!(Instant::now() < deadline, "the helper never started its command");
        assert!(helper.try_wait().unwrap().is_none(), "the helper ended early");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sig = if signal == "KILL" { Signal::KILL } else { Signal::TERM };
    rustix::process::kill_process(rustix::process::Pid::from_child(&helper), sig).unwrap();
    helper.wait().unwrap();
    // Every process the command started is gone (none works in the root any more)...
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = processes_in(&root);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes {left:?} outlived their host (SIG{signal}) under {c:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...and none wrote anything later.
    std::thread::sleep(Duration::from_millis(3500));
    for name in ["marker-setsid", "marker-daemon", "marker-shell"] {
        assert!(!root.join(name).exists(), "{name}: the command outlived its host (SIG{signal}) under {c:?}");
    }
}

/// Live processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

/// The probe `supervisor_death_ends_the_command` re-runs this binary for:
/// a long command in `root`, which the test kills this process during.
fn orphan_probe(name: &str, root: &std::ffi::OsStr) {
    let policy = require(ShellPolicy { confinement: confinement_named(name), ..ShellPolicy::default() });
    let s = LocalSandbox::with_shell(Path::new(&root), policy).unwrap();
    let _ = s.exec(
        "setsid sh -c 'sleep 3; touch marker-setsid' </dev/null >/dev/null 2>&1 & \
         (sh -c 'sleep 3; touch marker-daemon' </dev/null >/dev/null 2>&1 &); touch started; sleep 3; \
         touch marker-shell",
        LIMIT,
    );
}

fn supervisor_sigterm_ends_the_command(c: Confinement) {
    supervisor_death_ends_the_command(c, "TERM");
}

fn supervisor_sigkill_ends_the_command(c: Confinement) {
    supervisor_death_ends_the_command(c, "KILL");
}

/// Re-runs this test binary to open descriptors without close-on-exec (the
/// way a parent shell's `exec 7<dir` would), isolated from other tests.
fn inherited_descriptors_are_closed(c: Confinement) {
    run_probe(c, "inherited_descriptors_are_closed", &[("NEXO_FD_PROBE", format!("{c:?}"))], "fd-probe-ok");
}

/// The probe `inherited_descriptors_are_closed` re-runs this binary for.
fn fd_probe(name: &str) {
    let f = Fixture::with_proc(confinement_named(name));
    let dir = std::fs::File::open(&f.outside).unwrap();
    let log_path = f.outside.join("log.txt");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
    for fd in [&dir, &log] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).unwrap();
    }
    let (dir_fd, log_fd) = (dir.as_raw_fd(), log.as_raw_fd());
    // The control: without the helper, a child does inherit them.
    let leaked = Command::new("/bin/bash").arg("-c").arg(format!("echo control >&{log_fd}")).status().unwrap();
    assert!(leaked.success() && std::fs::read_to_string(&log_path).unwrap() == "control\n");
    std::fs::write(&log_path, "").unwrap();
    let mut closed = Command::new("/bin/bash");
    closed.arg("-c").arg(format!("echo helper >&{log_fd}"));
    nexo_sandbox::close_inherited_fds(&mut closed);
    assert!(!closed.status().unwrap().success(), "close_inherited_fds left descriptor {log_fd} open");

    let out = f.exec(&format!("echo x > /proc/self/fd/{dir_fd}/planted.txt; ls /proc/self/fd/{dir_fd}/"));
    assert!(!f.outside.join("planted.txt").exists(), "wrote outside through /proc/self/fd/{dir_fd}: {out:?}");
    assert_ne!(out.status, 0, "descriptor {dir_fd} is still open in the command: {out:?}");
    let out = f.exec(&format!("bash -c 'echo x >&{log_fd}'"));
    assert_ne!(out.status, 0, "descriptor {log_fd} is still open in the command: {out:?}");
    assert_eq!(std::fs::read_to_string(&log_path).unwrap(), "", "wrote outside through >&{log_fd}");
    // Nothing but stdio (and ls's own directory handle) is open.
    let out = f.exec("ls /proc/self/fd");
    assert_eq!(out.stdout, "0\n1\n2\n3\n", "{out:?}");
    println!("fd-probe-ok");
}

fn limited(c: Confinement, limits: ShellLimits) -> Fixture {
    let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    Fixture::with_policy(dir, ShellPolicy { confinement: c, limits, ..ShellPolicy::default() })
}

fn file_size_is_limited(c: Confinement) {
    let f = limited(c, ShellLimits { file_size_bytes: Some(1 << 20), ..ShellLimits::default() });
    let out = f.exec("head -c 3000000 /dev/zero > big; echo status=$?");
    assert!(!out.stdout.contains("status=0"), "{out:?}");
    let len = std::fs::metadata(f.root.join("big")).unwrap().len();
    assert!(len <= 1 << 20, "a {len}-byte file was written past the 1 MiB limit");
    // The default allows it.
    let f = limited(c, ShellLimits::default());
    assert_eq!(f.exec("head -c 3000000 /dev/zero > big && wc -c < big").stdout.trim(), "3000000");
}

fn memory_is_limited(c: Confinement) {
    // dd allocates its whole 1 GiB block up front.
    let probe = "dd if=/dev/zero of=/dev/null bs=1G count=1 2>/dev/null && echo allocated";
    let f = limited(c, ShellLimits { memory_bytes: Some(512 << 20), ..ShellLimits::default() });
    let out = f.exec(probe);
    assert!(out.status != 0 && !out.stdout.contains("allocated"), "1 GiB was allocated under a 512 MiB limit: {out:?}");
    let f = limited(c, ShellLimits::default());
    let out = f.exec(probe);
    assert_eq!((out.status, out.stdout.as_str()), (0, "allocated\n"), "the default refused 1 GiB: {out:?}");
}

fn cpu_time_is_limited(c: Confinement) {
    let f = limited(c, ShellLimits { cpu_seconds: Some(1), ..ShellLimits::default() });
    let started = Instant::now();
    let out = f.exec("sh -c 'while :; do :; done'; echo status=$?");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(out.stdout.starts_with("status=") && !out.stdout.contains("status=0"), "{out:?}");
}

/// The uid the process-limit probe runs as: one per mechanism and unused on
/// the machine, so no other process counts against its limit.
fn probe_uid(c: Confinement) -> u32 {
    64_000
        + match c {
            Confinement::Auto => 0,
            Confinement::Bubblewrap => 1,
            Confinement::Landlock => 2,
            Confinement::Unconfined => 3,
        }
}

/// The kernel does not apply RLIMIT_NPROC to root, so as root this runs the
/// probe in a copy of this binary (somewhere any user can read) as an
/// unprivileged uid; it says it was skipped if that cannot be done here.
fn processes_are_limited(c: Confinement) {
    let test = itself(c, "processes_are_limited");
    if !rustix::process::getuid().is_root() {
        let dir = tempfile::Builder::new().prefix("shell-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        return nproc_probe(&format!("{c:?}"), dir.path());
    }
    let uid = probe_uid(c);
    let copy = tempfile::Builder::new().prefix("nexo-nproc-").tempdir().unwrap();
    let (exe, work) = (copy.path().join("shell-test"), copy.path().join("work"));
    let setup = (|| {
        std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o755))?;
        std::fs::copy(std::env::current_exe()?, &exe)?;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
        std::fs::create_dir(&work)?;
        std::os::unix::fs::chown(&work, Some(uid), Some(uid))
    })();
    let run = setup.and_then(|()| {
        Command::new(&exe)
            .args(["--exact", &test, "--nocapture", "--test-threads=1"])
            .env("NEXO_NPROC_PROBE", format!("{c:?}"))
            .env("NEXO_NPROC_DIR", &work)
            .current_dir(&work)
            .uid(uid)
            .gid(uid)
            .output()
    });
    let out = match run {
        Ok(out) => out,
        Err(e) => {
            return nexo_testkit::skipped(&test, &format!("cannot run this test's probe as uid {uid} here: {e}"));
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("nproc-probe-ok"), "as uid {uid}:\n{stdout}\n{stderr}");
}

/// Tasks (threads included) whose real uid is this process's: what
/// RLIMIT_NPROC counts.
fn tasks_of_this_user() -> usize {
    let uid = rustix::process::getuid().as_raw();
    let mine = |status: &str| {
        status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().next())
            == Some(uid.to_string().as_str())
    };
    let tasks = |pid: &str| std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().filter(|n| n.parse::<u32>().is_ok()).map(String::from))
        .flat_map(|pid| tasks(&pid).map(move |t| format!("/proc/{pid}/task/{}/status", t.file_name().display())))
        .filter(|path| std::fs::read_to_string(path).is_ok_and(|s| mine(&s)))
        .count()
}

/// The probe `processes_are_limited` runs as an unprivileged user: 64
/// background forks fail under a limit a few processes above what this user
/// already runs, and all succeed without it.
fn nproc_probe(name: &str, dir: &Path) {
    assert!(!rustix::process::getuid().is_root(), "the process limit cannot be tested as root");
    let c = confinement_named(name);
    let forks = "i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); echo $i; done; echo all";
    let sandbox = |processes: Option<u64>| {
        let root = tempfile::Builder::new().prefix("root-").tempdir_in(dir).unwrap();
        let limits = ShellLimits { processes, ..ShellLimits::default() };
        let policy = require(ShellPolicy { confinement: c, limits, ..ShellPolicy::default() });
        (LocalSandbox::with_shell(root.path(), policy).unwrap(), root)
    };
    // Room for the supervisor's threads, bwrap or the shepherd, and the shell.
    let limit = tasks_of_this_user() as u64 + 12;
    let (limited, _root) = sandbox(Some(limit));
    let out = limited.exec(forks, LIMIT).unwrap();
    let started = out.stdout.lines().filter(|l| l.parse::<u32>().is_ok()).count();
    assert!(
        (1..64).contains(&started) && !out.stdout.contains("all") && out.stderr.to_lowercase().contains("fork"),
        "{started} forks under a limit of {limit} processes under {c:?}: {out:?}"
    );
    let (unlimited, _root) = sandbox(None);
    let out = unlimited.exec(forks, LIMIT).unwrap();
    assert!(out.status == 0 && out.stdout.ends_with("64\nall\n"), "without the limit under {c:?}: {out:?}");
    println!("nproc-probe-ok");
}

/// Re-runs this binary to raise its own soft core limit (so a crash would
/// dump, as the control shows) without touching the other tests.
fn core_dumps_are_off(c: Confinement) {
    run_probe(c, "core_dumps_are_off", &[("NEXO_CORE_PROBE", format!("{c:?}"))], "core-probe-ok");
}

/// The probe `core_dumps_are_off` re-runs this binary for.
fn core_probe(name: &str) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let test = itself(confinement_named(name), "core_dumps_are_off");
    let hard = getrlimit(Resource::Core).maximum;
    setrlimit(Resource::Core, Rlimit { current: hard, maximum: hard }).unwrap();
    let f = Fixture::with_proc(confinement_named(name));
    let out = f.exec("grep 'Max core file size' /proc/self/limits");
    let fields: Vec<&str> = out.stdout.split_whitespace().skip(4).collect();
    assert_eq!(fields, ["0", "0", "bytes"], "core dumps are not off inside: {out:?}");
    let out = f.exec("sh -c 'kill -SEGV $$'; sh -c 'kill -ABRT $$'; echo crashed");
    assert_eq!(out.stdout, "crashed\n", "{out:?}");
    // A core pattern that is a pipe or an absolute path would not write to the command's directory.
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if pattern.starts_with(['|', '/']) || hard == Some(0) {
        nexo_testkit::skipped(
            &test,
            &format!(
                "no core file would be written to the working directory (core_pattern {pattern:?}, hard limit {hard:?}), so only the limit was checked"
            ),
        );
        return println!("core-probe-ok");
    }
    // The control: outside the sandbox, the same crash does leave a core file.
    let status = Command::new("/bin/sh").args(["-c", "kill -SEGV $$"]).current_dir(&f.outside).status().unwrap();
    assert!(!status.success());
    let entries = |dir: &Path| std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>();
    assert!(!entries(&f.outside).is_empty(), "the control crash left no core file (core_pattern {pattern:?})");
    assert!(entries(&f.root).is_empty(), "a crash in the sandbox left {:?} under {name}", entries(&f.root));
    println!("core-probe-ok");
}

#[test]
fn unconfined_commands_reach_outside_and_the_network() {
    probe_if_asked();
    let f = Fixture::new(Confinement::Unconfined);
    let planted = f.outside.join("planted.txt");
    let out = f.exec(&format!("echo x > {}", quote(&planted)));
    assert_eq!(out.status, 0, "{out:?}");
    assert!(planted.exists());
    let (out, connected) = tcp_connect(&f);
    assert!(out.status == 0 && out.stdout == "connected\n" && connected, "{out:?}");
    // The probes the confined mechanisms must refuse do work here.
    let server = HttpServer::start();
    let out = socket_probe(&f, "unconfined_commands_reach_outside_and_the_network", "mptcp", &server.port.to_string());
    assert!(out.stdout.contains("HTTP/1.0 200 OK\n"), "{out:?}");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = socket_probe(
        &f,
        "unconfined_commands_reach_outside_and_the_network",
        "udp",
        &udp.local_addr().unwrap().port().to_string(),
    );
    assert!(out.status == 0 && received(&udp), "{out:?}");
    let path = f.outside.join("daemon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let out = socket_probe(&f, "unconfined_commands_reach_outside_and_the_network", "unix", path.to_str().unwrap());
    assert!(out.stdout.contains("connected\n"), "{out:?}");
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok());
}

/// The name a test of the `mechanism_tests!` module for `c` runs under, for
/// re-running this binary as that test alone.
fn itself(c: Confinement, test: &str) -> String {
    format!("{}::{test}", format!("{c:?}").to_lowercase())
}

/// In a copy of this binary that a test re-ran as itself (to set an
/// environment at birth, to be killed, or to run inside the sandbox), does
/// the probe its environment asks for and ends the process. Otherwise (the
/// test itself) returns at once.
fn probe_if_asked() {
    if let Ok(name) = std::env::var("NEXO_ENV_PROBE") {
        env_probe(&name);
    } else if let Ok(kind) = std::env::var("NEXO_SOCKET_PROBE") {
        socket_probe_run(&kind);
    } else if let (Ok(name), Some(root)) = (std::env::var("NEXO_ORPHAN_PROBE"), std::env::var_os("NEXO_ORPHAN_ROOT")) {
        orphan_probe(&name, &root);
    } else if let Ok(name) = std::env::var("NEXO_FD_PROBE") {
        fd_probe(&name);
    } else if let (Ok(name), Some(dir)) = (std::env::var("NEXO_NPROC_PROBE"), std::env::var_os("NEXO_NPROC_DIR")) {
        nproc_probe(&name, Path::new(&dir));
    } else if let Ok(name) = std::env::var("NEXO_CORE_PROBE") {
        core_probe(&name);
    } else {
        return;
    }
    std::process::exit(0)
}

macro_rules! mechanism_tests {
    ($module:ident, $confinement:expr, confined: $confined:tt) => {
        mod $module {
            use super::*;

            #[test]
            fn writes_inside_the_root() {
                super::probe_if_asked();
                super::writes_inside_the_root($confinement);
            }
            #[test]
            fn env_is_narrowed() {
                super::probe_if_asked();
                super::env_is_narrowed($confinement);
            }
            #[test]
            fn policy_env_is_added() {
                super::probe_if_asked();
                super::policy_env_is_added($confinement);
            }
            #[test]
            fn timeout_kills_the_command() {
                super::probe_if_asked();
                super::timeout_kills_the_command($confinement);
            }
            #[test]
            fn timeout_kills_grandchildren() {
                super::probe_if_asked();
                super::timeout_kills_grandchildren($confinement);
            }
            #[test]
            fn background_jobs_end_with_the_shell() {
                super::probe_if_asked();
                super::background_jobs_end_with_the_shell($confinement);
            }
            #[test]
            fn exit_status_and_stderr_pass_through() {
                super::probe_if_asked();
                super::exit_status_and_stderr_pass_through($confinement);
            }
            #[test]
            fn output_is_capped_without_deadlock() {
                super::probe_if_asked();
                super::output_is_capped_without_deadlock($confinement);
            }
            #[test]
            fn detached_processes_end_with_the_command() {
                super::probe_if_asked();
                super::detached_processes_end_with_the_command($confinement);
            }
            #[test]
            fn supervisor_sigterm_ends_the_command() {
                super::probe_if_asked();
                super::supervisor_sigterm_ends_the_command($confinement);
            }
            #[test]
            fn supervisor_sigkill_ends_the_command() {
                super::probe_if_asked();
                super::supervisor_sigkill_ends_the_command($confinement);
            }
            #[test]
            fn inherited_descriptors_are_closed() {
                super::probe_if_asked();
                super::inherited_descriptors_are_closed($confinement);
            }
            #[test]
            fn file_size_is_limited() {
                super::probe_if_asked();
                super::file_size_is_limited($confinement);
            }
            #[test]
            fn memory_is_limited() {
                super::probe_if_asked();
                super::memory_is_limited($confinement);
            }
            #[test]
            fn cpu_time_is_limited() {
                super::probe_if_asked();
                super::cpu_time_is_limited($confinement);
            }
            #[test]
            fn processes_are_limited() {
                super::probe_if_asked();
                super::processes_are_limited($confinement);
            }
            #[test]
            fn core_dumps_are_off() {
                super::probe_if_asked();
                super::core_dumps_are_off($confinement);
            }
            mechanism_tests!(@confined $confinement, $confined);
        }
    };
    (@confined $confinement:expr, true) => {
        #[test]
        fn writes_outside_the_root_fail() {
            super::probe_if_asked();
            super::writes_outside_the_root_fail($confinement);
        }
        #[test]
        fn network_is_refused() {
            super::probe_if_asked();
            super::network_is_refused($confinement);
        }
        #[test]
        fn sockets_are_refused() {
            super::probe_if_asked();
            super::sockets_are_refused($confinement);
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
    assert_ne!(out.status, 0, "/proc is out of the default view: {out:?}");
    let f = Fixture::with_proc(Confinement::Landlock);
    let out = f.exec("grep -E 'CapEff|CapBnd|NoNewPrivs' /proc/self/status");
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{out:?}");
    assert!(out.stdout.contains("CapBnd:\t0000000000000000"), "{out:?}");
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{out:?}");
    // Pipes stay usable through their /dev and /proc names.
    let out = f.exec("echo to-stderr > /dev/stderr");
    assert_eq!((out.status, out.stderr.as_str()), (0, "to-stderr\n"), "{out:?}");
    assert_eq!(f.exec("kill -9 $$").status, -1);
}

/// The shepherd is outside the Landlock domain, so the command cannot kill it
/// to orphan what it started.
#[test]
fn landlock_command_cannot_kill_its_shepherd() {
    let f = Fixture::new(Confinement::Landlock);
    let started = Instant::now();
    let out = f.exec(
        "setsid sh -c 'sleep 2; touch late' </dev/null >/dev/null 2>&1 & \
         kill -KILL $PPID; echo kill=$?; kill -TERM 0; echo done",
    );
    assert!(out.stdout.contains("kill=1"), "the command killed its shepherd: {out:?}");
    std::thread::sleep(Duration::from_millis(3000).saturating_sub(started.elapsed()));
    assert!(!f.root.join("late").exists(), "a detached process outlived its command");
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
    let text = |c| Fixture::new(c).sandbox.instructions(true).unwrap();
    assert!(text(Confinement::Bubblewrap).contains("no direct network access"));
    assert!(text(Confinement::Landlock).contains("cannot open TCP connections of their own"));
    assert!(text(Confinement::Unconfined).contains("unconfined"));
    for c in [Confinement::Bubblewrap, Confinement::Landlock] {
        let text = text(c);
        assert!(text.contains("UDP") && text.contains("only connected socket pairs"), "{text}");
        assert!(text.contains("detached ones included, is killed when the command ends"), "{text}");
        assert!(text.contains("memory 8 GiB per process"), "{text}");
    }
}

#[test]
fn describe_states_what_the_active_confinement_guarantees() {
    let describe = |c| require(ShellPolicy { confinement: c, ..ShellPolicy::default() }).describe();
    let bwrap = describe(Confinement::Bubblewrap);
    assert!(bwrap.starts_with("shell confinement bubblewrap: "), "{bwrap}");
    assert_eq!(describe(Confinement::Auto), bwrap);
    let landlock = describe(Confinement::Landlock);
    println!("{bwrap}\n{landlock}\n{}", Fixture::new(Confinement::Landlock).sandbox.instructions(true).unwrap());
    assert!(landlock.starts_with("shell confinement Landlock and seccomp: "), "{landlock}");
    for text in [&bwrap, &landlock] {
        assert!(text.contains("no network and no sockets except connected Unix socket pairs"), "{text}");
        assert!(text.contains("granted network: TCP") && text.contains("nexo's egress proxy"), "{text}");
        assert!(text.contains("every process ends with the command"), "{text}");
        assert!(text.contains("none of the host's open descriptors"), "{text}");
        assert!(text.contains("file size 2 GiB"), "{text}");
    }
    // Root is exempt from RLIMIT_NPROC, and the summary says so.
    let root = rustix::process::getuid().is_root();
    assert_eq!(bwrap.contains("processes 4096 (not enforced: the host runs as root)"), root, "{bwrap}");
    assert!(describe(Confinement::Unconfined).starts_with("shell confinement unconfined: "));
    let broken = ShellPolicy {
        confinement: Confinement::Bubblewrap,
        bwrap: Some("/nonexistent/bwrap".into()),
        ..ShellPolicy::default()
    };
    assert!(broken.describe().starts_with("shell commands cannot run: "), "{}", broken.describe());
    assert_eq!(Confinement::Landlock.to_string(), "landlock");
}
