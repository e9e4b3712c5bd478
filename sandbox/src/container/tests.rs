use super::cli::strings;
use super::files::{DRAIN_STDIN, READ_SCRIPT, REFUSE_SPECIAL, STAT_SCRIPT, WRITE_SCRIPT};
use super::*;
use crate::{ExecOutput, MAX_FILE_BYTES, MAX_OUTPUT_BYTES, Sandbox, SandboxError};
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;
use std::thread;
use std::time::Instant;
use std::time::{Duration, UNIX_EPOCH};

/// A stand-in for the docker CLI: it logs each argv (every argument as
/// `A<arg>\0`, then `E\0`, under a lock), keeps a fake filesystem under `fs/`, and
/// reads its canned answers from files beside it.
const FAKE: &str = r#"#!/bin/sh
dir='@DIR@'
# One record at a time: the tether runs beside other calls, and its
# arguments must not land between theirs.
{
    flock 9
    { for a in "$@"; do printf 'A%s\0' "$a"; done; printf 'E\0'; } >> "$dir/log"
} 9>> "$dir/log.lock"
sub=$1
shift
case "$sub" in
version) echo fake ;;
run)
    if [ -f "$dir/run_fail" ]; then cat "$dir/run_fail" >&2; exit 125; fi
    n=$(cat "$dir/runs" 2>/dev/null || echo 0)
    n=$((n + 1))
    echo "$n" > "$dir/runs"
    echo "c0ffee$n" ;;
ps)
    if [ -f "$dir/ps_fail" ]; then echo 'Cannot connect to the Docker daemon' >&2; exit 1; fi
    cat "$dir/ps_ids" 2>/dev/null
    exit 0 ;;
start)
    if [ -f "$dir/start_fail" ]; then cat "$dir/start_fail" >&2; exit 1; fi ;;
rm) ;;
exec)
    wd=/
    while :; do
        case "$1" in
        -i) shift ;;
        -w) wd=$2; shift 2 ;;
        *) break ;;
        esac
    done
    if [ -f "$dir/gone" ]; then echo "Error response from daemon: No such container: $1" >&2; exit 1; fi
    shift
    fs="$dir/fs"
    # The tether: hold until stdin closes, and never signal the host's PID 1.
    case "$3" in *'kill -TERM 1'*) cat > /dev/null; echo closed >> "$dir/tether"; exit 0 ;; esac
    case "$1" in
    find) cd "$fs$wd" && exec "$@" ;;
    sh)
        if [ $# -ge 5 ]; then s=$3; p=$5; shift 5; exec sh -c "$s" sh "$fs$p" "$@"; fi
        cd "$fs$wd" && exec sh -c "$3" ;;
    *) echo "fake: cannot exec $1" >&2; exit 127 ;;
    esac ;;
*) echo "fake docker: unknown command $sub" >&2; exit 1 ;;
esac
"#;

struct Fake {
    dir: tempfile::TempDir,
    config: ContainerConfig,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("docker");
        fs::write(&bin, FAKE.replace("@DIR@", dir.path().to_str().unwrap())).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::create_dir_all(dir.path().join("fs/workspace")).unwrap();
        // Another test thread forking while the script was open for writing
        // makes exec fail with "text file busy" for a moment; wait it out.
        for _ in 0..100 {
            match Command::new(&bin).arg("version").stdout(Stdio::null()).status() {
                Err(e) if e.raw_os_error() == Some(26) => thread::sleep(Duration::from_millis(10)),
                other => {
                    other.unwrap();
                    break;
                }
            }
        }
        let _ = fs::remove_file(dir.path().join("log"));
        let config = ContainerConfig {
            binary: Some(bin),
            name: Some("test-box".into()),
            ..ContainerConfig::docker("alpine:3.20")
        };
        Fake { dir, config }
    }

    fn sandbox(&self) -> ContainerSandbox {
        ContainerSandbox::new(self.config.clone()).unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn set(&self, file: &str, contents: &str) {
        fs::write(self.path(file), contents).unwrap();
    }

    /// Every argv the fake saw, in order, but the tether's (which starts
    /// beside the next call, in either order).
    fn calls(&self) -> Vec<Vec<String>> {
        self.all_calls().into_iter().filter(|c| !is_tether(c)).collect()
    }

    /// The tethers' argvs.
    fn tethers(&self) -> Vec<Vec<String>> {
        self.all_calls().into_iter().filter(|c| is_tether(c)).collect()
    }

    fn all_calls(&self) -> Vec<Vec<String>> {
        let Ok(log) = fs::read(self.path("log")) else { return Vec::new() };
        let mut calls = vec![];
        let mut current = vec![];
        for token in log.split(|b| *b == 0).filter(|t| !t.is_empty()) {
            match token[0] {
                b'A' => current.push(String::from_utf8(token[1..].to_vec()).unwrap()),
                b'E' => calls.push(std::mem::take(&mut current)),
                _ => panic!("bad log token {token:?}"),
            }
        }
        calls
    }

    fn subcommands(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c[0].clone()).collect()
    }
}

fn is_tether(call: &[String]) -> bool {
    call.last().is_some_and(|a| a.contains("kill -TERM 1"))
}

fn v(args: &[&str]) -> Vec<String> {
    strings(args)
}

fn hardened() -> Vec<String> {
    v(&[
        "run",
        "-d",
        "--init",
        "--rm",
        "--label",
        "nexo.sandbox.id=test-box",
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "512",
        "--read-only",
        "--tmpfs",
        "/workspace:rw",
        "-w",
        "/workspace",
        "alpine:3.20",
        "tail",
        "-f",
        "/dev/null",
    ])
}

/// `hardened()` with `extra` inserted before the position of `before`.
fn with_inserted(before: &str, extra: &[&str]) -> Vec<String> {
    let mut args = hardened();
    let at = args.iter().position(|a| a == before).unwrap();
    args.splice(at..at, v(extra));
    args
}

#[test]
fn run_argv_has_every_hardening_default() {
    let fake = Fake::new();
    let s = fake.sandbox();
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(fake.calls()[0], hardened());
    assert_eq!(s.run_args(), hardened());
}

#[test]
fn each_loosening_changes_exactly_its_flag() {
    let fake = Fake::new();
    let args = |edit: &dyn Fn(&mut ContainerConfig)| {
        let mut config = fake.config.clone();
        edit(&mut config);
        ContainerSandbox::new(config).unwrap().run_args()
    };
    let swapped = |from: &str, to: &str| {
        hardened().into_iter().map(|a| if a == from { to.to_string() } else { a }).collect::<Vec<_>>()
    };
    assert_eq!(args(&|c| c.network = Network::Bridge), swapped("none", "bridge"));
    assert_eq!(args(&|c| c.network = Network::Host), swapped("none", "host"));
    assert_eq!(args(&|c| c.network = Network::Named("agents".into())), swapped("none", "agents"));
    assert_eq!(
        args(&|c| c.cap_add = vec!["NET_BIND_SERVICE".into(), "CHOWN".into()]),
        with_inserted("--security-opt", &["--cap-add", "NET_BIND_SERVICE", "--cap-add", "CHOWN"])
    );
    let mut writable = hardened();
    writable.retain(|a| !["--read-only", "--tmpfs", "/workspace:rw"].contains(&a.as_str()));
    assert_eq!(args(&|c| c.readonly_rootfs = false), writable);
    let mut no_pids = hardened();
    no_pids.retain(|a| a != "--pids-limit" && a != "512");
    assert_eq!(args(&|c| c.pids_limit = None), no_pids);
    assert_eq!(args(&|c| c.pids_limit = Some(64)), swapped("512", "64"));
    assert_eq!(args(&|c| c.memory = Some("512m".into())), with_inserted("--read-only", &["--memory", "512m"]));
    assert_eq!(args(&|c| c.cpus = Some("1.5".into())), with_inserted("--read-only", &["--cpus", "1.5"]));
    assert_eq!(args(&|c| c.user = Some("1000:1000".into())), with_inserted("--read-only", &["--user", "1000:1000"]));
    assert_eq!(
        args(&|c| c.cwd = "/src/".into()),
        swapped("/workspace:rw", "/src:rw")
            .into_iter()
            .map(|a| if a == "/workspace" { "/src".into() } else { a })
            .collect::<Vec<_>>()
    );
}

#[test]
fn binds_default_read_only_and_env_is_one_flag_per_entry_in_order() {
    let fake = Fake::new();
    let mut config = fake.config.clone();
    config.binds = vec![Bind::read_only("/srv/data", "/data"), Bind::writable("/srv/out", "/out")];
    config.env = [("ZED", "last"), ("ALPHA", "a b $(x)")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let args = ContainerSandbox::new(config).unwrap().run_args();
    assert_eq!(
        args,
        with_inserted(
            "--read-only",
            &["-v", "/srv/data:/data:ro", "-v", "/srv/out:/out:rw", "-e", "ALPHA=a b $(x)", "-e", "ZED=last"]
        )
    );
    assert_eq!(Bind::read_only("/a", "/b"), Bind { host: "/a".into(), container: "/b".into(), writable: false });
}

#[test]
fn starts_lazily_once_and_removes_on_close() {
    let fake = Fake::new();
    fake.set("fs/workspace/a.txt", "alpha");
    let s = fake.sandbox();
    assert!(s.instructions(true).is_some());
    assert!(fake.calls().is_empty(), "nothing runs before the first tool call");
    assert_eq!(s.container_id(), None);
    assert_eq!(s.read("a.txt").unwrap().text, "alpha");
    s.write("b.txt", "beta").unwrap();
    assert_eq!(s.glob("*.txt").unwrap().paths, vec!["a.txt", "b.txt"]);
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(s.container_id().as_deref(), Some("c0ffee1"));
    assert_eq!(fake.subcommands().iter().filter(|c| *c == "run").count(), 1);
    // The tether starts beside the calls after it; wait for its argv.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.tethers().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fake.tethers(), [v(&["exec", "-i", "c0ffee1", "sh", "-c", "cat > /dev/null; kill -TERM 1"])]);
    assert!(!fake.path("tether").exists(), "the tether holds while the container runs");
    s.close().unwrap();
    assert_eq!(fs::read_to_string(fake.path("tether")).unwrap(), "closed\n", "close ends the tether");
    s.close().unwrap();
    let calls = fake.calls();
    assert_eq!(calls.last().unwrap(), &v(&["rm", "-f", "c0ffee1"]));
    assert_eq!(calls.iter().filter(|c| c[0] == "rm").count(), 1, "a second close is a no-op");
    assert_eq!(s.container_id(), None);
    // A tool call after close starts a fresh container.
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(s.container_id().as_deref(), Some("c0ffee2"));
}

#[test]
fn close_without_start_calls_nothing() {
    let fake = Fake::new();
    let s = fake.sandbox();
    s.close().unwrap();
    s.close().unwrap();
    assert!(fake.calls().is_empty());
}

#[test]
fn tool_argv_shapes() {
    let fake = Fake::new();
    fake.set("fs/workspace/a.txt", "alpha");
    let s = fake.sandbox();
    s.read("/workspace/./a.txt").unwrap();
    s.stat("a.txt").unwrap();
    s.write("dir/b.txt", "beta").unwrap();
    s.glob("**/*").unwrap();
    s.exec("ls -la", Duration::from_secs(10)).unwrap();
    let calls = fake.calls();
    let script = |s: &str| format!("{REFUSE_SPECIAL}{s}");
    let limit = (MAX_FILE_BYTES + 1).to_string();
    let read = script(READ_SCRIPT);
    assert_eq!(calls[1], v(&["exec", "c0ffee1", "sh", "-c", &read, "sh", "/workspace/a.txt", &limit]));
    let stat = script(STAT_SCRIPT);
    assert_eq!(calls[2], v(&["exec", "c0ffee1", "sh", "-c", &stat, "sh", "/workspace/a.txt"]));
    assert_eq!(calls[3], v(&["exec", "c0ffee1", "sh", "-c", &stat, "sh", "/workspace/a.txt"]));
    let write = format!("{DRAIN_STDIN}{}", script(WRITE_SCRIPT));
    assert_eq!(calls[4], v(&["exec", "-i", "c0ffee1", "sh", "-c", &write, "sh", "/workspace/dir/b.txt"]));
    assert_eq!(calls[5], v(&["exec", "-w", "/workspace", "c0ffee1", "find", ".", "-type", "f", "-print0"]));
    assert_eq!(calls[6], v(&["exec", "-w", "/workspace", "c0ffee1", "sh", "-c", "ls -la"]));
    assert_eq!(calls.len(), 7);
}

#[test]
fn files_read_write_stat_and_glob_through_the_cli() {
    let fake = Fake::new();
    fs::create_dir_all(fake.path("fs/workspace/src/deep")).unwrap();
    fake.set("fs/workspace/src/lib.rs", "pub fn f() {}");
    fake.set("fs/workspace/src/deep/mod.rs", "");
    fake.set("fs/workspace/README.md", "hi");
    let s = fake.sandbox();
    let text = s.read("src/lib.rs").unwrap();
    assert_eq!(text.text, "pub fn f() {}");
    assert!(text.mtime.is_some_and(|t| t > UNIX_EPOCH));
    assert!(s.stat("src/lib.rs").unwrap().unwrap().mtime.is_some());
    assert_eq!(s.stat("missing.txt").unwrap(), None);
    assert!(matches!(s.read("missing.txt"), Err(SandboxError::NotFound(_))));
    assert!(matches!(s.read("src"), Err(SandboxError::InvalidInput(_))));
    s.write("out/new/file.txt", "line 1\nline 2\n").unwrap();
    assert_eq!(fs::read_to_string(fake.path("fs/workspace/out/new/file.txt")).unwrap(), "line 1\nline 2\n");
    assert_eq!(s.read("out/new/file.txt").unwrap().text, "line 1\nline 2\n");
    assert_eq!(s.glob("**/*.rs").unwrap().paths, vec!["src/deep/mod.rs", "src/lib.rs"]);
    assert_eq!(s.glob("*").unwrap().paths, vec!["README.md"]);
    assert_eq!(s.glob("./src/*.rs").unwrap().paths, vec!["src/lib.rs"]);
    assert!(matches!(s.write("", "x"), Err(SandboxError::InvalidInput(_))));
    assert!(matches!(s.write("/workspace", "x"), Err(SandboxError::InvalidInput(_))));
    let big = "x".repeat(MAX_FILE_BYTES + 1);
    assert!(matches!(s.write("big.txt", &big), Err(SandboxError::InvalidInput(_))));
}

/// The scripts run for real (the fake runs them on a directory of its
/// own), so a FIFO and a mknod'ed /dev/zero (needs root, as in CI) are
/// real too.
#[test]
fn special_files_are_refused_and_reads_are_bounded() {
    use rustix::fs::{CWD, FileType, Mode, makedev, mkfifoat, mknodat};
    let fake = Fake::new();
    mkfifoat(CWD, fake.path("fs/workspace/pipe"), Mode::from_raw_mode(0o666)).unwrap();
    let zero = fake.path("fs/workspace/zero");
    if let Err(e) = mknodat(CWD, &zero, FileType::CharacterDevice, Mode::from_raw_mode(0o666), makedev(1, 5)) {
        panic!("this test needs root to make a device node with mknod (as in CI), and mknod failed: {e}");
    }
    let s = fake.sandbox();
    let started = Instant::now();
    for (path, kind) in [("pipe", "a FIFO"), ("zero", "a character device")] {
        let results = [s.read(path).map(|_| ()), s.write(path, "x"), s.stat(path).map(|_| ())];
        for result in results {
            match result {
                Err(SandboxError::InvalidInput(m)) => assert!(m.contains(&format!("{path} is {kind}")), "{m}"),
                other => panic!("{path}: expected a refusal, got {other:?}"),
            }
        }
    }
    // The op timeout is 30 s by default: a blocked FIFO or an endless cat would show.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(fs::symlink_metadata(&zero).unwrap().file_type().is_char_device());
    fake.set("fs/workspace/cap", &"x".repeat(MAX_FILE_BYTES));
    fake.set("fs/workspace/over", &"x".repeat(MAX_FILE_BYTES + 1));
    assert_eq!(s.read("cap").unwrap().text.len(), MAX_FILE_BYTES);
    assert!(matches!(s.read("over"), Err(SandboxError::InvalidInput(m)) if m.contains("read limit")));
}

#[test]
fn glob_says_when_it_cut_the_matches() {
    let fake = Fake::new();
    for i in 0..=crate::MAX_GLOB_MATCHES {
        fake.set(&format!("fs/workspace/f{i:04}.txt"), "");
    }
    let s = fake.sandbox();
    let cut = s.glob("*.txt").unwrap();
    assert!(cut.truncated);
    assert_eq!(cut.paths.len(), crate::MAX_GLOB_MATCHES);
    fs::remove_file(fake.path("fs/workspace/f0000.txt")).unwrap();
    let whole = s.glob("*.txt").unwrap();
    assert!(!whole.truncated);
    assert_eq!(whole.paths.len(), crate::MAX_GLOB_MATCHES);
}

#[test]
fn exec_passes_output_and_status_through() {
    let fake = Fake::new();
    let s = fake.sandbox();
    let out = s.exec("echo out; echo err >&2; exit 3", Duration::from_secs(10)).unwrap();
    assert_eq!(out, ExecOutput { status: 3, stdout: "out\n".into(), stderr: "err\n".into() });
    let out = s.exec("pwd", Duration::from_secs(10)).unwrap();
    assert!(out.stdout.trim_end().ends_with("fs/workspace"), "{out:?}");
}

#[test]
fn exec_output_is_capped() {
    let fake = Fake::new();
    let s = fake.sandbox();
    let out = s.exec("head -c 5000000 /dev/zero | tr '\\0' x", Duration::from_secs(30)).unwrap();
    assert_eq!(out.status, 0);
    assert!(out.stdout.starts_with(&"x".repeat(1000)));
    assert!(out.stdout.ends_with(&format!("[stdout cut at {MAX_OUTPUT_BYTES} bytes]")));
    assert!(out.stdout.len() < MAX_OUTPUT_BYTES + 100);
}

#[cfg(target_os = "linux")]
#[test]
fn the_cli_gets_no_inherited_descriptors() {
    let fake = Fake::new();
    let s = fake.sandbox();
    let outside = tempfile::tempdir().unwrap();
    let log_path = outside.path().join("log.txt");
    let log = fs::OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
    // As a parent's `exec 8>>file` would leave it: inheritable.
    rustix::io::fcntl_setfd(&log, rustix::io::FdFlags::empty()).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&log);
    let out = s.exec(&format!("bash -c 'echo leaked >&{fd}'"), Duration::from_secs(10));
    rustix::io::fcntl_setfd(&log, rustix::io::FdFlags::CLOEXEC).unwrap();
    let out = out.unwrap();
    assert_ne!(out.status, 0, "descriptor {fd} reached the container CLI: {out:?}");
    assert_eq!(fs::read_to_string(&log_path).unwrap(), "");
}

#[test]
fn exec_timeout_kills_the_cli_and_its_children() {
    let fake = Fake::new();
    let s = fake.sandbox();
    let pid_file = fake.path("fs/workspace/sleeper.pid");
    let started = Instant::now();
    let result = s.exec("sleep 30 & echo $! > sleeper.pid; wait", Duration::from_millis(500));
    assert!(matches!(result, Err(SandboxError::Timeout(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(pid_file.exists());
    #[cfg(target_os = "linux")]
    {
        let pid = fs::read_to_string(&pid_file).unwrap().trim().to_string();
        // Gone, or a zombie waiting to be reaped by init.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let alive = stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z'));
            if !alive {
                break;
            }
            assert!(Instant::now() < deadline, "the sleeper {pid} outlived the timeout");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn escapes_are_security_errors_that_never_reach_the_cli() {
    let fake = Fake::new();
    let s = fake.sandbox();
    for p in ["../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", "/workspacex/a"] {
        assert!(matches!(s.read(p), Err(SandboxError::Security(_))), "{p}");
        assert!(matches!(s.stat(p), Err(SandboxError::Security(_))), "{p}");
        assert!(matches!(s.write(p, "x"), Err(SandboxError::Security(_))), "{p}");
    }
    for pattern in ["../*", "/etc/*", "a/../../*"] {
        assert!(matches!(s.glob(pattern), Err(SandboxError::Security(_))), "{pattern}");
    }
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

#[test]
fn shell_metacharacters_stay_one_argument() {
    let fake = Fake::new();
    let marker = fake.path("pwned");
    let m = marker.display();
    let s = fake.sandbox();
    let name = format!("a $(touch {m}) `touch {m}` ;touch {m}; 'q' \"d\"\nline.txt");
    let contents = format!("$(touch {m})\n'\"`x`\n; rm -rf /\n");
    s.write(&name, &contents).unwrap();
    assert_eq!(s.read(&name).unwrap().text, contents);
    assert!(!marker.exists(), "a path or its contents reached a shell");
    let written = fake.path("fs/workspace").join(&name);
    assert_eq!(fs::read_to_string(written).unwrap(), contents);
    let abs = format!("/workspace/{name}");
    let calls = fake.calls();
    assert!(calls.iter().any(|c| c.last() == Some(&abs) && c[0] == "exec" && c[1] == "-i"));
    assert!(calls.iter().any(|c| c[..4] == v(&["exec", "c0ffee1", "sh", "-c"]) && c[6] == abs));
    // A glob pattern is matched here, never handed to a shell or to find.
    s.glob(&format!("*$(touch {m})*")).unwrap();
    assert!(!marker.exists());
    assert!(!fake.calls().iter().flatten().any(|a| a.starts_with('*')));
}

#[test]
fn reconnect_reuses_the_single_labeled_container() {
    let fake = Fake::new();
    fake.set("ps_ids", "abc123\n");
    let mut config = fake.config.clone();
    config.reconnect = true;
    let s = ContainerSandbox::new(config).unwrap();
    s.exec("true", Duration::from_secs(10)).unwrap();
    let calls = fake.calls();
    assert_eq!(calls[0], v(&["ps", "-aq", "--filter", "label=nexo.sandbox.id=test-box"]));
    assert_eq!(calls[1], v(&["start", "abc123"]));
    assert_eq!(calls[2][..4], v(&["exec", "-w", "/workspace", "abc123"]));
    assert!(!fake.subcommands().contains(&"run".to_string()));
    s.close().unwrap();
    assert!(!fake.subcommands().contains(&"rm".to_string()), "close leaves a reconnectable container");
    assert_eq!(s.container_id(), None);
}

#[test]
fn reconnect_ignores_already_running() {
    let fake = Fake::new();
    fake.set("ps_ids", "abc123\n");
    fake.set("start_fail", "Error: container abc123 is already running");
    let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
    let s = ContainerSandbox::new(config).unwrap();
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(s.container_id().as_deref(), Some("abc123"));
    fake.set("start_fail", "Error: no such image");
    let other = ContainerSandbox::new(ContainerConfig { reconnect: true, ..fake.config.clone() }).unwrap();
    assert!(matches!(other.exec("true", Duration::from_secs(10)), Err(SandboxError::Failed(_))));
}

#[test]
fn reconnect_creates_on_zero_and_on_a_failed_lookup() {
    for failing in [false, true] {
        let fake = Fake::new();
        if failing {
            fake.set("ps_fail", "");
        }
        let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
        let s = ContainerSandbox::new(config).unwrap();
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(fake.subcommands(), v(&["ps", "run", "exec"]), "failing lookup: {failing}");
        // Kept: no --rm, and no tether.
        assert_eq!(fake.calls()[1], hardened().into_iter().filter(|a| a != "--rm").collect::<Vec<_>>());
        assert!(fake.tethers().is_empty());
    }
}

#[test]
fn reconnect_with_two_matches_is_ambiguous() {
    let fake = Fake::new();
    fake.set("ps_ids", "abc123\ndef456\n");
    let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
    let s = ContainerSandbox::new(config).unwrap();
    match s.exec("true", Duration::from_secs(10)) {
        Err(SandboxError::Failed(m)) => {
            assert!(m.starts_with("ambiguous reconnect: 2 containers labeled test-box"), "{m}")
        }
        other => panic!("expected an ambiguity error, got {other:?}"),
    }
    assert_eq!(fake.subcommands(), v(&["ps"]));
    assert_eq!(s.container_id(), None);
}

#[test]
fn apple_reconnect_is_a_config_error_when_it_would_run() {
    let fake = Fake::new();
    let config = ContainerConfig { runtime: Runtime::Apple, reconnect: true, ..fake.config.clone() };
    let s = ContainerSandbox::new(config).unwrap();
    assert!(matches!(s.read("a.txt"), Err(SandboxError::Config(_))));
    assert!(fake.calls().is_empty());
    // Ephemeral Apple runs with the Docker-shaped flags.
    let config = ContainerConfig { runtime: Runtime::Apple, ..fake.config.clone() };
    let s = ContainerSandbox::new(config).unwrap();
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(fake.calls()[0], hardened());
    assert!(s.instructions(true).unwrap().starts_with("You run inside an Apple container"));
}

#[test]
fn start_failure_carries_the_cli_message() {
    let fake = Fake::new();
    fake.set("run_fail", "Unable to find image 'nope:latest' locally");
    // What the failed start left (podman creates before it starts).
    fake.set("ps_ids", "left1\n");
    let s = fake.sandbox();
    match s.read("a.txt") {
        Err(SandboxError::Failed(m)) => assert!(m.contains("Unable to find image 'nope:latest'"), "{m}"),
        other => panic!("expected a start failure, got {other:?}"),
    }
    assert_eq!(s.container_id(), None);
    let calls = fake.calls();
    assert_eq!(calls[1], v(&["ps", "-aq", "--filter", "label=nexo.sandbox.id=test-box"]));
    assert_eq!(calls[2], v(&["rm", "-f", "left1"]));
    assert_eq!(calls.len(), 3);
}

#[test]
fn missing_binary_and_bad_config_are_config_errors() {
    let empty = tempfile::tempdir().unwrap();
    let search = empty.path().as_os_str();
    match ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), search) {
        Err(SandboxError::Config(m)) => assert!(m.contains("`docker`") && m.contains("install Docker"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    match ContainerSandbox::with_search_path(ContainerConfig::apple("alpine"), search) {
        Err(SandboxError::Config(m)) => assert!(m.contains("`container`"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    let gone = ContainerConfig { binary: Some("/nonexistent/docker".into()), ..ContainerConfig::docker("alpine") };
    match ContainerSandbox::new(gone) {
        Err(SandboxError::Config(m)) => assert!(m.contains("/nonexistent/docker"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }

    let fake = Fake::new();
    let bad = |edit: &dyn Fn(&mut ContainerConfig)| {
        let mut config = fake.config.clone();
        edit(&mut config);
        ContainerSandbox::new(config).map(|_| ())
    };
    assert!(matches!(bad(&|_| {}), Ok(())));
    type Edit = Box<dyn Fn(&mut ContainerConfig)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("no image", Box::new(|c| c.image = "  ".into())),
        ("flag image", Box::new(|c| c.image = "--privileged".into())),
        ("relative cwd", Box::new(|c| c.cwd = "work".into())),
        ("cwd with ..", Box::new(|c| c.cwd = "/a/../b".into())),
        ("cwd with :", Box::new(|c| c.cwd = "/a:b".into())),
        ("tmpfs over /", Box::new(|c| c.cwd = "/".into())),
        ("reconnect without name", Box::new(|c| (c.reconnect, c.name) = (true, None))),
        ("bad name", Box::new(|c| c.name = Some("-x".into()))),
        ("bad network", Box::new(|c| c.network = Network::Named("a b".into()))),
        ("bad cap", Box::new(|c| c.cap_add = vec!["ALL --privileged".into()])),
        ("flag memory", Box::new(|c| c.memory = Some("--privileged".into()))),
        ("relative bind", Box::new(|c| c.binds = vec![Bind::read_only("data", "/data")])),
        ("colon bind", Box::new(|c| c.binds = vec![Bind::read_only("/a:/etc", "/data")])),
        ("env key", Box::new(|c| c.env = [("A=B".to_string(), "c".to_string())].into())),
    ];
    for (what, edit) in cases {
        assert!(matches!(bad(&*edit), Err(SandboxError::Config(_))), "{what}");
    }
}

#[test]
fn path_search_finds_executables_only() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    fs::write(a.join("docker"), "not executable").unwrap();
    fs::write(b.join("docker"), "#!/bin/sh\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(b.join("docker"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = std::env::join_paths([a.clone(), b.clone()]).unwrap();
    #[cfg(unix)]
    assert_eq!(find_on_path("docker", &path), Some(b.join("docker")));
    assert_eq!(find_on_path("container", &path), None);
    let s = ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), &path).unwrap();
    assert!(s.binary().ends_with("docker"));
    assert!(s.container_name().starts_with("nexo-"));
    let t = ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), &path).unwrap();
    assert_ne!(s.container_name(), t.container_name());
}

#[test]
fn instructions_reflect_the_config() {
    let fake = Fake::new();
    let s = fake.sandbox();
    let text = s.instructions(true).unwrap();
    assert!(
        text.starts_with(
            "You run inside a Docker container (image alpine:3.20), working directory /workspace, network none"
        ),
        "{text}"
    );
    assert!(text.contains("read-only") && !text.contains('\n'), "{text}");
    let config = ContainerConfig {
        network: Network::Bridge,
        readonly_rootfs: false,
        binds: vec![Bind::read_only("/srv", "/workspace/srv")],
        user: Some("1000".into()),
        ..fake.config.clone()
    };
    let text = ContainerSandbox::new(config).unwrap().instructions(true).unwrap();
    for part in ["network bridge", "filesystem is writable", "/workspace/srv (read-only)", "user 1000"] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert_eq!(s.name(), "container");
    assert!(s.supports_shell());
}

#[test]
fn a_removed_container_is_forgotten() {
    let fake = Fake::new();
    let s = fake.sandbox();
    s.exec("true", Duration::from_secs(10)).unwrap();
    fake.set("gone", "");
    match s.read("a.txt") {
        Err(SandboxError::Failed(m)) => assert!(m.contains("No such container"), "{m}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(s.container_id(), None);
    fs::remove_file(fake.path("gone")).unwrap();
    s.exec("true", Duration::from_secs(10)).unwrap();
    assert_eq!(s.container_id().as_deref(), Some("c0ffee2"));
}

/// Runs a real alpine container; needs a Docker engine and
/// `NEXO_LIVE_DOCKER=1`.
#[test]
fn live_docker_round_trip() {
    if std::env::var("NEXO_LIVE_DOCKER").as_deref() != Ok("1") {
        nexo_testkit::skipped("live_docker_round_trip", "set NEXO_LIVE_DOCKER=1 with a running Docker engine");
        return;
    }
    let s = ContainerSandbox::new(ContainerConfig::docker("alpine:3.20")).unwrap();
    let contents = "hello $(touch /tmp/pwned) 'q'\nsecond line\n";
    s.write("src/a b.txt", contents).unwrap();
    let text = s.read("src/a b.txt").unwrap();
    assert_eq!(text.text, contents);
    assert!(text.mtime.is_some());
    assert!(s.stat("src/a b.txt").unwrap().is_some());
    assert_eq!(s.stat("missing").unwrap(), None);
    assert!(matches!(s.read("missing"), Err(SandboxError::NotFound(_))));
    assert_eq!(s.glob("**/*.txt").unwrap().paths, vec!["src/a b.txt"]);
    let out = s.exec("cat 'src/a b.txt'; echo err >&2; exit 3", Duration::from_secs(30)).unwrap();
    assert_eq!((out.status, out.stdout.as_str(), out.stderr.as_str()), (3, contents, "err\n"));
    assert_ne!(s.exec("touch /etc/x", Duration::from_secs(30)).unwrap().status, 0, "the root is read-only");
    assert_ne!(s.exec("test -e /tmp/pwned", Duration::from_secs(30)).unwrap().status, 0);
    let offline = s.exec("wget -q -T 3 -O /dev/null http://example.com", Duration::from_secs(30)).unwrap();
    assert_ne!(offline.status, 0, "the network is off");
    assert!(matches!(s.exec("sleep 20", Duration::from_secs(1)), Err(SandboxError::Timeout(_))));
    let id = s.container_id().unwrap();
    s.close().unwrap();
    s.close().unwrap();
    let left = Command::new(s.binary()).args(["ps", "-aq", "--filter", &format!("id={id}")]).output().unwrap();
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the container was removed");
}
