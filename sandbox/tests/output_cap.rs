//! The local shell and the container CLI runner are one supervisor: the same
//! command printing past the cap is cut at the same constant, never inside a
//! character, and ends with the same note, whichever sandbox runs it. The
//! container side runs a fake CLI (a script that runs `exec`'s command with
//! `sh` on the host), so no container engine is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use nexo_sandbox::{ContainerConfig, ContainerSandbox, ExecOutput, LocalSandbox, MAX_OUTPUT_BYTES, Sandbox};

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
