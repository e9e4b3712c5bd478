//! `nexo new`, `nexo build`, `nexo test` and `nexo init` outside the
//! repository: in a temporary directory, with the SDK unpacked from the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

/// Runs `nexo` in `cwd`, with the SDK unpacked into `sdk` and the compile
/// cache kept in the temporary directory.
fn nexo_in(cwd: &Path, sdk: &Path, envs: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.args(args)
        .current_dir(cwd)
        .env("NEXO_SDK_DIR", sdk)
        .env("NEXO_CACHE_DIR", sdk.with_file_name("cache"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("NEXO_LOG")
        .env_remove("NEXO_MODEL")
        .env_remove("NEXO_PROVIDER")
        .env_remove("NEXO_CONFIG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run nexo")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_code(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
}

/// The issue's three commands, then `nexo test` for every kind. Slow: the
/// first build compiles the standard library from source, and the later
/// ones share its target directory.
#[test]
fn three_commands_from_nothing_to_a_running_agent_and_every_kind_tests() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap();
    assert!(!work.canonicalize().unwrap().starts_with(&repo), "the test must run outside the repository");
    let sdk = work.join("sdk");

    let out = nexo_in(work, &sdk, &[], &["new", "agent", "hello"]);
    assert_code(&out, 0);
    let out = nexo_in(work, &sdk, &[], &["build", "hello"]);
    assert_code(&out, 0);
    let wasm = "hello/target/wasm32-wasip2/release/hello.wasm";
    assert_eq!(text(&out.stdout).trim(), wasm, "`nexo build` prints the component's path");
    let out = nexo_in(work, &sdk, &[], &["run", wasm, "hi", "--script", "hello/tests/script.json"]);
    assert_code(&out, 0);
    assert_eq!(text(&out.stdout).trim(), "Hello from hello! The workspace is empty, so there is nothing to read yet.");
    assert!(text(&out.stderr).contains("glob: allowed"), "{}", text(&out.stderr));
    eprintln!("three commands: {:.1?}", started.elapsed());

    // Every later build reuses hello's target directory (and its std).
    let shared = work.join("hello/target");
    let target: &[(&str, &Path)] = &[("CARGO_TARGET_DIR", &shared)];
    let out = nexo_in(work, &sdk, target, &["test", "hello"]);
    assert_code(&out, 0);
    let report = text(&out.stdout);
    assert!(report.contains("ok    answers") && report.contains("test result: ok"), "{report}");

    // A changed expectation fails the test with exit code 1.
    std::fs::write(work.join("hello/tests/expect.txt"), "Goodbye\n").unwrap();
    let out = nexo_in(work, &sdk, target, &["test", "hello"]);
    assert_code(&out, 1);
    assert!(text(&out.stdout).contains("FAIL  answers") && text(&out.stdout).contains("lacks \"Goodbye\""));

    let kinds = [
        ("skill-component", "my-skill", "resource references/checklist.md reads"),
        ("search-backend", "my-search", "its hosts are valid grant entries: api.example.com"),
        ("sandbox-provider", "my-sandbox", "starts as a remote sandbox and closes"),
    ];
    for (kind, name, expected) in kinds {
        let out = nexo_in(work, &sdk, &[], &["new", kind, name]);
        assert_code(&out, 0);
        let out = nexo_in(work, &sdk, target, &["test", name]);
        assert_code(&out, 0);
        let report = text(&out.stdout);
        assert!(report.contains(&format!("ok    {expected}")) && report.contains("test result: ok"), "{report}");
    }
    eprintln!("three commands and four kinds tested: {:.1?}", started.elapsed());
}

#[test]
fn new_refuses_workflows_bad_names_and_busy_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let sdk = tmp.path().join("sdk");
    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "workflow", "flow"]);
    assert_code(&out, 2);
    assert!(text(&out.stderr).contains("`nexo new workflow` is not available yet"), "{}", text(&out.stderr));
    assert!(!tmp.path().join("flow").exists());

    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "agent", "Hello--World"]);
    assert_code(&out, 2);
    assert!(text(&out.stderr).contains("invalid plugin name"), "{}", text(&out.stderr));

    std::fs::create_dir(tmp.path().join("taken")).unwrap();
    std::fs::write(tmp.path().join("taken/notes.txt"), "mine").unwrap();
    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "agent", "taken"]);
    assert_code(&out, 2);
    assert!(text(&out.stderr).contains("already exists and is not empty"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(tmp.path().join("taken/notes.txt")).unwrap(), "mine");
}

#[test]
fn new_refuses_an_sdk_directory_with_other_content() {
    let tmp = tempfile::tempdir().unwrap();
    let sdk = tmp.path().join("sdk");
    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "agent", "first"]);
    assert_code(&out, 0);
    // Unpacking again is a no-op when the content is the same.
    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "skill-component", "second"]);
    assert_code(&out, 0);
    std::fs::write(sdk.join("wit/worlds.wit"), "package other:thing;\n").unwrap();
    let out = nexo_in(tmp.path(), &sdk, &[], &["new", "agent", "third"]);
    assert_code(&out, 2);
    assert!(text(&out.stderr).contains("is not the SDK of nexo"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(sdk.join("wit/worlds.wit")).unwrap(), "package other:thing;\n");
    assert!(!tmp.path().join("third").exists());
}

#[test]
fn init_writes_a_project_whose_config_inspect_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let sdk = tmp.path().join("sdk");
    let out = nexo_in(tmp.path(), &sdk, &[], &["init", "ops"]);
    assert_code(&out, 0);
    for path in ["nexo.toml", "agents/example.toml", ".gitignore"] {
        assert!(tmp.path().join("ops").join(path).is_file(), "{path} missing");
    }
    assert!(tmp.path().join("ops/skills").is_dir());
    let out = nexo_in(tmp.path(), &sdk, &[], &["inspect", "ops/agents/example.toml", "--config", "ops/nexo.toml"]);
    assert_code(&out, 0);
    assert!(text(&out.stdout).contains("example"), "{}", text(&out.stdout));
    // A second init overwrites nothing.
    let out = nexo_in(tmp.path(), &sdk, &[], &["init", "ops"]);
    assert_code(&out, 2);
    assert!(text(&out.stderr).contains("never overwrites"), "{}", text(&out.stderr));
}

/// The Rust example of each world in docs/plugins.md is the template that
/// `nexo new` writes, which the test above builds and checks with `nexo test`:
/// so every such example is compiled and run, and cannot drift.
#[test]
fn the_docs_show_the_templates_the_tests_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("../docs/plugins.md")).unwrap();
    for (heading, kind, name) in [
        ("### An agent", "agent", "my-agent"),
        ("### A skill", "skill-component", "my-skill"),
        ("### A search backend", "search-backend", "my-search"),
        ("### A sandbox provider", "sandbox-provider", "my-sandbox"),
    ] {
        let section = docs.split(&format!("{heading}\n")).nth(1).unwrap_or_else(|| panic!("no {heading} section"));
        let intro = format!("`nexo new {kind} {name}` writes this `src/lib.rs`");
        assert!(section.contains(&intro), "{heading}: the example must say it is the template");
        let code = section.split("```rust\n").nth(1).and_then(|c| c.split("\n```").next()).unwrap();
        let template = std::fs::read_to_string(root.join("templates").join(kind).join("lib.rs")).unwrap();
        assert_eq!(
            code,
            template.replace("{{name}}", name).trim_end(),
            "{heading} differs from templates/{kind}/lib.rs"
        );
    }
    // The Python example quotes the agent the Python test builds and runs.
    let app = std::fs::read_to_string(root.join("../examples/python-agent/app.py")).unwrap();
    let python: Vec<&str> = docs.split("```python\n").skip(1).filter_map(|c| c.split("\n```").next()).collect();
    assert!(!python.is_empty(), "docs/plugins.md shows no Python");
    for block in python {
        for piece in block.split("\n\n\n") {
            assert!(
                app.contains(piece),
                "this Python in docs/plugins.md is not in examples/python-agent/app.py:\n{piece}"
            );
        }
    }
}
