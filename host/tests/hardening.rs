//! Regression tests for the attacks of the adversarial review, each run
//! against the real `nexo` binary: terminal escapes, deadlines, FIFOs,
//! closed pipes, base URLs, TOML excerpts and the limit flags.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_tests as built;

mod common;

use common::{stderr, stdout};

fn nexo_cmd(args: &[&str]) -> Command {
    let cache = std::env::temp_dir().join(format!("nexo-hardening-cache-{}", std::process::id()));
    let mut cmd = common::nexo_command(&cache);
    cmd.args(args);
    cmd
}

fn nexo(args: &[&str]) -> Output {
    nexo_cmd(args).stdin(Stdio::null()).output().expect("run nexo")
}

/// A directory holding a TOML agent, its script and a workspace.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new(capabilities: &str, script: serde_json::Value) -> Scene {
        // Under the target directory: bubblewrap gives commands a private /tmp.
        let dir = tempfile::Builder::new().prefix("hardening-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(
            dir.path().join("agent.toml"),
            format!("name = \"probe\"\ndescription = \"Probes\"\ncapabilities = [{capabilities}]\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
        Scene { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ws(&self) -> PathBuf {
        self.path("ws")
    }

    /// `nexo run agent.toml` on the script in the local sandbox, plus `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "run".into(),
            self.path("agent.toml").display().to_string(),
            "go".into(),
            "--script".into(),
            self.path("script.json").display().to_string(),
            "--sandbox".into(),
            "local".into(),
            "--cwd".into(),
            self.ws().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn run(&self, extra: &[&str]) -> Output {
        let args = self.args(extra);
        nexo(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

fn shell_script(command: &str) -> serde_json::Value {
    serde_json::json!({ "turns": [
        { "tool_calls": [{ "name": "shell", "arguments": { "command": command } }] },
        { "text": "done" }
    ] })
}

// ---------------------------------------------------------------------------
// Terminal escapes.

#[test]
fn the_ask_prompt_cannot_be_redrawn_by_the_command_it_shows() {
    let attack = "touch PWNED #\r\x1b[2K\x1b[1A\x1b[2KAllow `shell` ls";
    let scene = Scene::new("\"shell\"", shell_script(attack));
    let mut terminal = common::Terminal::open();
    let slave = terminal.slave.try_clone().unwrap();
    let args = scene.args(&["--allow", "shell", "--mode", "ask"]);
    let mut child = nexo_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();

    // Read the terminal until the question appears, answer no, read the rest.
    terminal.wait_for("[y/N]", 1);
    terminal.master.write_all(b"n\n").unwrap();
    let status = child.wait().unwrap();
    let screen = terminal.drain();

    // The whole action is shown, with its controls visible, on the question's line.
    assert!(
        screen.contains("Allow `shell` touch PWNED #\\r\\x1b[2K\\x1b[1A\\x1b[2KAllow `shell` ls? [y/N]"),
        "{screen:?}"
    );
    // None of the command's own sequences reached the terminal raw.
    assert!(!screen.contains("\x1b[1A\x1b[2KAllow"), "{screen:?}");
    assert!(!screen.contains("#\r"), "{screen:?}");
    assert!(status.success(), "{status:?}: {screen:?}");
    assert!(!scene.ws().join("PWNED").exists(), "the denied command ran");
}

#[test]
fn tool_lines_and_answers_show_controls_escaped() {
    let scene = Scene::new(
        "\"read\"",
        serde_json::json!({ "turns": [
            { "tool_calls": [{ "name": "read_file", "arguments": { "path": "evil\u{1b}]0;owned\u{7}.txt" } }] },
            { "tool_calls": [{ "name": "read_file", "arguments": { "path": "notes.txt" } }] },
            { "text": "answer \u{1b}[2J\u{202e}cleared" }
        ] }),
    );
    std::fs::write(scene.ws().join("notes.txt"), "line \u{1b}[1A\u{1b}[2Kspoofed\r\n").unwrap();
    let out = scene.run(&[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}') && !err.contains('\r'), "{err:?}");
    assert!(err.contains("evil\\x1b]0;owned\\x07.txt"), "{err}");
    assert!(err.contains("line \\x1b[1A\\x1b[2Kspoofed"), "{err}");
    // Into a pipe the answer stays byte-exact, for programs.
    assert_eq!(stdout(&out), "answer \u{1b}[2J\u{202e}cleared\n");
}

/// `nexo run` of `agent` against an OpenAI-compatible server at `base`.
fn ask_model(agent: &std::path::Path, base: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        agent.to_str().unwrap(),
        "hi",
        "--provider",
        "openai-compatible",
        "--model",
        "m",
        "--base-url",
        base,
    ];
    args.extend_from_slice(extra);
    nexo(&args)
}

#[test]
fn model_server_errors_are_escaped_and_base_url_queries_are_joined_and_hidden() {
    let body = serde_json::json!({ "error": { "message": "bad \u{1b}[2K\u{1b}[1Aerror: all fine\u{9b}" } }).to_string();
    let (port, seen) = built::loopback::json_server("400 Bad Request", body);
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("a.toml");
    std::fs::write(&agent, "name = \"asker\"\ndescription = \"Asks\"\n").unwrap();
    let base = format!("http://127.0.0.1:{port}/v1?key=q-s3cret-value");
    let out = ask_model(&agent, &base, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The query goes after the API path, where the gateway expects it.
    assert_eq!(
        seen.recv_timeout(Duration::from_secs(10)).unwrap(),
        "POST /v1/chat/completions?key=q-s3cret-value HTTP/1.1"
    );
    assert!(!err.contains('\u{1b}') && !err.contains('\u{9b}'), "{err:?}");
    assert!(err.contains("bad \\x1b[2K\\x1b[1Aerror: all fine\\x9b"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    // Unreachable: the message names the endpoint without its query.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let base = format!("http://127.0.0.1:{dead}/v1?key=q-s3cret-value");
    let out = ask_model(&agent, &base, &["-v"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{dead}/v1/chat/completions?<redacted>")), "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    // Credentials in the URL are refused, and not echoed.
    let base = format!("http://user:pw-s3cret@127.0.0.1:{port}/v1");
    let out = ask_model(&agent, &base, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("carries credentials"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    // --help never shows the value of NEXO_BASE_URL.
    let help = nexo_cmd(&["run", "--help"]).env("NEXO_BASE_URL", "http://h/v1?key=env-s3cret").output().unwrap();
    assert!(help.status.success());
    assert!(!stdout(&help).contains("s3cret"), "{}", stdout(&help));
}

// ---------------------------------------------------------------------------
// Closed pipes.

#[test]
fn a_closed_stdout_or_stderr_is_not_a_panic() {
    for (args, close_stdout) in [(&["wit"][..], true), (&["run", "/nonexistent/agent.wasm", "x"][..], false)] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = nexo_cmd(args);
        cmd.stdin(Stdio::null());
        let out = if close_stdout {
            cmd.stdout(Stdio::from(writer)).stderr(Stdio::piped()).output().unwrap()
        } else {
            cmd.stderr(Stdio::from(writer)).stdout(Stdio::piped()).output().unwrap()
        };
        assert_ne!(out.status.code(), Some(101), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}: {}", stderr(&out));
    }
}

// ---------------------------------------------------------------------------
// Deadlines.

fn assert_deadline(out: &Output, started: Instant, limit_secs: u64) {
    let took = started.elapsed();
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("deadline") || err.contains("time limit"), "{err}");
    // Generous: the point is that it ends near the limit, not minutes later.
    assert!(took < Duration::from_secs(limit_secs + 20), "ran {took:?} with --timeout {limit_secs}: {err}");
}

#[test]
fn timeout_bounds_a_toml_agent_blocked_in_a_shell_command() {
    let scene = Scene::new("\"shell\"", shell_script("sleep 300"));
    let started = Instant::now();
    let out = scene.run(&["--allow", "shell", "--mode", "auto", "--timeout", "3"]);
    assert_deadline(&out, started, 3);
}

#[test]
fn timeout_ends_the_process_when_a_component_blocks_reading_a_fifo() {
    let scene = Scene::new("\"read\"", serde_json::json!({ "turns": [] }));
    let fifo = scene.ws().join("pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let started = Instant::now();
    let out = nexo(&[
        "run",
        built::ESCAPE,
        &format!("read:{}", fifo.display()),
        "--sandbox",
        "local",
        "--cwd",
        scene.ws().to_str().unwrap(),
        "--timeout",
        "3",
    ]);
    assert_deadline(&out, started, 3);
}

// ---------------------------------------------------------------------------
// Files nexo itself reads.

#[test]
fn a_fifo_as_the_agent_or_config_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["agent.toml", "agent.wasm", "config.toml"] {
        assert!(Command::new("mkfifo").arg(dir.path().join(name)).status().unwrap().success());
    }
    let agent_toml = dir.path().join("agent.toml");
    let agent_wasm = dir.path().join("agent.wasm");
    let config = dir.path().join("config.toml");
    let cases: [&[&str]; 4] = [
        &["run", agent_toml.to_str().unwrap(), "x"],
        &["run", agent_wasm.to_str().unwrap(), "x"],
        &["inspect", agent_wasm.to_str().unwrap()],
        &["inspect", built::HELLO, "--config", config.to_str().unwrap()],
    ];
    for args in cases {
        let out = nexo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("FIFO"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn toml_errors_quote_a_short_excerpt_only() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(&agent, format!("name = \"x\"\ndescription = \"{}\n", "d".repeat(200_000))).unwrap();
    let out = nexo(&["inspect", agent.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 2, column"), "{}", &stderr(&out)[..stderr(&out).len().min(500)]);
    assert!(out.stderr.len() < 1000, "{} bytes of error", out.stderr.len());

    // A config file that is a symlink to another file quotes none of its lines whole.
    let config = dir.path().join("nexo.toml");
    let target = dir.path().join("passwd");
    std::fs::write(&target, "root:x:0:0:root:/root:/bin/bash:and-a-long-private-tail-that-must-not-be-shown\n")
        .unwrap();
    std::os::unix::fs::symlink(&target, &config).unwrap();
    let out = nexo(&["inspect", built::HELLO, "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("root:x:0:0:root:/root:/bin/bash"), "{}", stderr(&out));
    assert!(stderr(&out).len() < 400, "{}", stderr(&out));
}

#[test]
fn inspect_describes_a_toml_agent() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("reviewer.toml");
    std::fs::write(&agent, "name = \"reviewer\"\ndescription = \"Reviews\"\ncapabilities = [\"read\", \"shell\"]\n")
        .unwrap();
    let out = nexo(&["inspect", agent.to_str().unwrap(), "--allow", "shell", "--sandbox", "local"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.starts_with("reviewer  (agent, declarative TOML"), "{text}");
    assert!(text.contains("requested      read, shell"), "{text}");
    assert!(text.contains("\n  shell "), "{text}");
    let out = nexo(&["inspect", "--json", agent.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["format"], "toml");
    assert_eq!(v["name"], "reviewer");
}

// ---------------------------------------------------------------------------
// Limit flags.

#[test]
fn limit_flags_are_validated_with_clear_ranges() {
    for (flag, value) in [("--memory", "0"), ("--memory", "100000000"), ("--timeout", "0"), ("--max-turns", "0")] {
        let out = nexo(&["run", built::HELLO, "x", flag, value]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!err.contains("wasmtime") && !err.contains("invalid component"), "{flag} {value}: {err}");
    }
    // The smallest cap still runs a real component, and its cache entry survives.
    let out = nexo(&["run", built::TEXT_STATS, "two words", "--memory", "16"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn the_engine_refuses_impossible_limits() {
    let mut config = nexo::EngineConfig { cache_dir: None, ..nexo::EngineConfig::default() };
    config.limits.memory_bytes = 0;
    let e = nexo::Engine::new(config.clone()).unwrap_err().to_string();
    assert!(e.contains("16 to 4096 MiB"), "{e}");
    config.limits.memory_bytes = 64 << 20;
    config.limits.run_timeout = Duration::ZERO;
    assert!(nexo::Engine::new(config).is_err());
}

// ---------------------------------------------------------------------------
// Inherited descriptors.

/// Opens `path` (a directory, or a file for appending) as a descriptor that
/// children inherit, like `exec 7</dir` in nexo's parent shell would.
fn inheritable(file: std::fs::File) -> (std::fs::File, i32) {
    use std::os::fd::AsRawFd;
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).unwrap();
    let fd = file.as_raw_fd();
    (file, fd)
}

#[test]
fn descriptors_inherited_by_nexo_do_not_reach_shell_commands() {
    for confinement in ["bubblewrap", "landlock"] {
        let scene = Scene::new("\"shell\"", serde_json::json!({ "turns": [] }));
        let outside = scene.path("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("log"), "").unwrap();
        let (_dir, dir_fd) = inheritable(std::fs::File::open(&outside).unwrap());
        let (_log, log_fd) = inheritable(std::fs::OpenOptions::new().append(true).open(outside.join("log")).unwrap());
        // The positive control: a child of this process, not confined by
        // nexo, does inherit both descriptors and writes through them.
        let control = format!("echo control > /proc/self/fd/{dir_fd}/control; echo control >&{log_fd}");
        assert!(Command::new("/bin/sh").args(["-c", &control]).status().unwrap().success());
        assert_eq!(std::fs::read_to_string(outside.join("log")).unwrap(), "control\n", "{confinement}: control");
        assert!(outside.join("control").exists(), "{confinement}: the directory's descriptor reached the control");
        std::fs::write(outside.join("log"), "").unwrap();
        let command =
            format!("echo via-proc > /proc/self/fd/{dir_fd}/pwned; echo via-fd >&{log_fd}; ls /proc/self/fd; true");
        std::fs::write(scene.path("script.json"), shell_script(&command).to_string()).unwrap();
        let out = scene.run(&["--allow", "shell", "--mode", "auto", "--shell-confinement", confinement, "--json"]);
        assert!(out.status.success(), "{confinement}: {}", stderr(&out));
        assert!(!outside.join("pwned").exists(), "{confinement}: wrote through /proc/self/fd/{dir_fd}");
        assert_eq!(
            std::fs::read_to_string(outside.join("log")).unwrap(),
            "",
            "{confinement}: wrote through fd {log_fd}"
        );
    }
}

// ---------------------------------------------------------------------------
// No process outlives nexo.

#[test]
fn no_shell_process_outlives_nexo_killed_mid_command() {
    for (n, confinement) in ["bubblewrap", "landlock"].into_iter().enumerate() {
        for (m, signal) in [rustix::process::Signal::TERM, rustix::process::Signal::KILL].into_iter().enumerate() {
            // A session leader of its own and a double fork: both escape a
            // process-group kill. Each says it started, then waits on a
            // `sleep` this case alone runs, so the test can see when none
            // of them is left.
            let nap = format!("3.{}{n}{m}", std::process::id());
            let command = format!(
                "setsid sh -c 'touch started-setsid; sleep {nap}; touch escaped-setsid' & \
                 (sh -c 'touch started-daemon; sleep {nap}; touch escaped-daemon' &) ; sleep 60"
            );
            let scene = Scene::new("\"shell\"", shell_script(&command));
            let args = scene.args(&["--allow", "shell", "--mode", "auto", "--shell-confinement", confinement]);
            let mut child = nexo_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let started = ["started-setsid", "started-daemon"];
            let up = until(Duration::from_secs(30), || started.iter().all(|m| scene.ws().join(m).exists()));
            assert!(up, "{confinement}: the command's children never started");
            // The positive control: their sleeps are seen from here while they run.
            assert!(until(Duration::from_secs(30), || running_with_arg(&nap)), "{confinement}: no `sleep {nap}` seen");
            let pid = rustix::process::Pid::from_child(&child);
            rustix::process::kill_process(pid, signal).unwrap();
            child.wait().unwrap();
            // Had a child outlived nexo, it would touch its marker before its
            // `sleep` ends: once no such `sleep` is left, the markers tell.
            let gone = until(Duration::from_secs(30), || !running_with_arg(&nap));
            assert!(gone, "{confinement}, {signal:?}: a `sleep {nap}` still runs");
            for marker in ["escaped-setsid", "escaped-daemon"] {
                assert!(!scene.ws().join(marker).exists(), "{confinement}, {signal:?}: {marker} ran after nexo died");
            }
        }
    }
}

/// Polls `done` until it holds or `limit` passes; whether it held.
fn until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process on this host has `arg` among its arguments.
fn running_with_arg(arg: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
    })
}

// ---------------------------------------------------------------------------
// Stating the confinement.

#[test]
fn a_fallback_to_landlock_is_stated_not_silent() {
    // A `bwrap` on PATH that fails, as on hosts that restrict user namespaces.
    let scene = Scene::new("\"shell\"", shell_script("true"));
    let bin = scene.path("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("bwrap"), "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        .unwrap();
    std::fs::set_permissions(bin.join("bwrap"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());

    let args = scene.args(&["--allow", "shell", "--mode", "auto"]);
    let out = nexo_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>()).env("PATH", &path).output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // Without -v: a warning that names the fallback and why.
    assert!(err.contains("fall back to Landlock") && err.contains("Permission denied"), "{err}");

    // With -v, the info line says what is actually in force; inspect says the same.
    let mut verbose = args.clone();
    verbose.push("-v".into());
    let out = nexo_cmd(&verbose.iter().map(String::as_str).collect::<Vec<_>>()).env("PATH", &path).output().unwrap();
    assert!(stderr(&out).contains("shell confinement Landlock and seccomp"), "{}", stderr(&out));
    let out =
        nexo_cmd(&["inspect", scene.path("agent.toml").to_str().unwrap(), "--sandbox", "local", "--allow", "shell"])
            .env("PATH", &path)
            .output()
            .unwrap();
    assert!(stdout(&out).contains("shell          shell confinement Landlock and seccomp"), "{}", stdout(&out));
}
