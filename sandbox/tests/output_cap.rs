//! The local shell and the container CLI runner are one supervisor: the same
//! command printing past the cap is cut at the same constant, never inside a
//! character, and ends with the same note, whichever sandbox runs it. The
//! container side runs a fake CLI (a script that runs `exec`'s command with
//! `sh` on the host), so no container engine is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nexo_sandbox::{
    ContainerConfig, ContainerSandbox, ExecOutput, LocalSandbox, MAX_OUTPUT_BYTES, Sandbox, SandboxError,
};

const LIMIT: Duration = Duration::from_secs(60);

/// Starts a "container" (prints an id) and runs `exec … sh -c <command>` with
/// the host's `sh`.
const FAKE_CLI: &str = r#"#!/bin/sh
case "$1" in
run) echo c0ffee1 ;;
exec) while [ "$1" != sh ]; do shift; done; exec sh -c "$3" ;;
rm) ;;
*) echo "fake: unknown command $1" >&2; exit 1 ;;
esac
"#;

/// `a`, then two-byte characters well past the cap, on both streams: the cap
/// (even) falls inside a character, whose first byte must be dropped.
const NOISY: &str = "noise() { printf a; yes 'éé' | tr -d '\\n' | head -c 5000000; }; noise; noise >&2";

fn container(dir: &Path) -> ContainerSandbox {
    let bin = dir.join("docker");
    std::fs::write(&bin, FAKE_CLI).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    ContainerSandbox::new(ContainerConfig { binary: Some(bin), ..ContainerConfig::docker("alpine:3.20") }).unwrap()
}

fn expected(stream: &str) -> String {
    let whole_chars = (MAX_OUTPUT_BYTES - 1) / 2;
    format!("a{}\n[{stream} cut at {MAX_OUTPUT_BYTES} bytes]", "é".repeat(whole_chars))
}

fn assert_cut(out: &ExecOutput, runner: &str) {
    assert_eq!(out.status, 0, "{runner}");
    for (text, stream) in [(&out.stdout, "stdout"), (&out.stderr, "stderr")] {
        let want = expected(stream);
        let end: String = text.chars().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        assert!(text == &want, "{runner} {stream}: {} bytes, ending {end:?}", text.len());
    }
}

#[test]
fn both_runners_cut_output_at_the_one_cap_with_the_one_note() {
    assert_eq!(nexo_sandbox::shell::MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES);
    let dir = tempfile::Builder::new().prefix("cap-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();

    let shell = LocalSandbox::open(&root).unwrap();
    let local = shell.exec(NOISY, LIMIT).unwrap();
    assert_cut(&local, "local shell");

    let container = container(dir.path());
    let cli = container.exec(NOISY, LIMIT).unwrap();
    assert_cut(&cli, "container CLI");
    container.close().unwrap();

    assert_eq!(local, cli);
}

#[test]
fn output_under_the_cap_is_passed_through_whole_by_both() {
    let dir = tempfile::Builder::new().prefix("cap-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    // Exactly the cap is not cut.
    let command = format!("head -c {MAX_OUTPUT_BYTES} /dev/zero | tr '\\0' x; printf 'é' >&2");
    let local = LocalSandbox::open(&root).unwrap().exec(&command, LIMIT).unwrap();
    let container = container(dir.path());
    let cli = container.exec(&command, LIMIT).unwrap();
    container.close().unwrap();
    for out in [&local, &cli] {
        assert_eq!(out.stdout, "x".repeat(MAX_OUTPUT_BYTES));
        assert_eq!(out.stderr, "é");
    }
}

/// Re-runs this binary as this test alone, so the peak memory it measures is
/// its own and no other test's.
#[test]
fn a_flood_is_cut_and_stopped_without_growing_the_host() {
    if std::env::var_os("NEXO_FLOOD_PROBE").is_some() {
        flood_probe();
        std::process::exit(0);
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_flood_is_cut_and_stopped_without_growing_the_host", "--nocapture", "--test-threads=1"])
        .env("NEXO_FLOOD_PROBE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(out.status.success() && stdout.contains("flood-probe-ok"), "{stdout}\n{stderr}");
}

/// The most this process's peak memory may grow by while a command floods
/// it: both streams' caps, their copies as text, and the readers' buffers,
/// with room to spare; far below any of the floods.
const GROWTH_ALLOWED: u64 = 48 << 20;

/// This process's peak resident memory since the last [`reset_peak`], in bytes.
fn peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB");
    kb.trim().parse::<u64>().unwrap() * 1024
}

/// Makes the peak the current resident memory (`clear_refs` 5).
fn reset_peak() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    peak()
}

/// Runs `command`, returning its result, how long it took and how much the
/// peak memory grew.
fn measured(
    sandbox: &LocalSandbox,
    command: &str,
    limit: Duration,
) -> (Result<ExecOutput, SandboxError>, Duration, u64) {
    let before = reset_peak();
    let started = Instant::now();
    let result = sandbox.exec(command, limit);
    (result, started.elapsed(), peak().saturating_sub(before))
}

/// Live processes whose working directory is beneath `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
        .collect()
}

fn flood_probe() {
    let dir = tempfile::Builder::new().prefix("cap-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let shell = LocalSandbox::open(&root).unwrap();
    let cut = |stream: &str| format!("\n[{stream} cut at {MAX_OUTPUT_BYTES} bytes]");

    // A command that writes forever on both streams is stopped at its time
    // limit. First, while the heap is fresh, so its growth is all this command's.
    let limit = Duration::from_secs(2);
    let (result, took, grew) = measured(&shell, "yes & yes >&2", limit);
    println!("an endless writer timed out: {took:?}, peak memory +{} MiB", grew >> 20);
    match result {
        Err(SandboxError::Timeout(msg)) => assert!(msg.contains("`yes & yes >&2` ran past its 2s limit"), "{msg}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(took >= limit && took < limit + Duration::from_secs(5), "the timeout took {took:?}");
    assert!(grew < GROWTH_ALLOWED, "an endless writer grew the host's peak memory by {} MiB", grew >> 20);
    assert_no_process_left(&root);

    // 256 MiB on each stream: cut at the cap, the rest read and dropped as it comes.
    let (out, took, grew) =
        measured(&shell, "head -c 256M /dev/zero | tr '\\0' o; head -c 256M /dev/zero | tr '\\0' e >&2", LIMIT);
    let out = out.unwrap();
    println!("256 MiB per stream: {took:?}, peak memory +{} MiB", grew >> 20);
    assert_eq!(out.status, 0);
    assert_eq!(out.stdout, format!("{}{}", "o".repeat(MAX_OUTPUT_BYTES), cut("stdout")));
    assert_eq!(out.stderr, format!("{}{}", "e".repeat(MAX_OUTPUT_BYTES), cut("stderr")));
    assert!(grew < GROWTH_ALLOWED, "512 MiB of output grew the host's peak memory by {} MiB", grew >> 20);

    // A writer that never stops, detached from a shell that ends: it holds the
    // pipe, yet the command ends with the shell, the writer with it, cut at the cap.
    let (out, took, grew) = measured(&shell, "(yes &); yes | head -c 8M; echo done >&2", LIMIT);
    let out = out.unwrap();
    println!("a detached endless writer: {took:?}, peak memory +{} MiB", grew >> 20);
    assert!(out.stdout.ends_with(&cut("stdout")) && out.stdout.starts_with("y\ny\n"), "{}", &out.stdout[..40]);
    assert_eq!(out.stdout.len(), MAX_OUTPUT_BYTES + cut("stdout").len());
    assert_eq!((out.status, out.stderr.as_str()), (0, "done\n"));
    assert!(took < Duration::from_secs(10), "the command took {took:?} after its shell ended");
    assert!(grew < GROWTH_ALLOWED, "an endless writer grew the host's peak memory by {} MiB", grew >> 20);
    assert_no_process_left(&root);

    println!("flood-probe-ok");
}

/// Nothing of the command still runs in its root, waiting up to two seconds
/// for the killed processes to be reaped.
fn assert_no_process_left(root: &Path) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = processes_in(root);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes {left:?} outlived the command");
        std::thread::sleep(Duration::from_millis(20));
    }
}
