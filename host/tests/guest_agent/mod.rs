//! The checks both example agents in other languages pass
//! (`examples/python-agent`, `examples/js-agent`), through the real `nexo`
//! binary. Both do the same thing, so they answer the same.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{stderr, stdout};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One example agent.
pub struct Guest {
    /// The built component.
    pub path: &'static Path,
    /// Its manifest name.
    pub name: &'static str,
    /// How its survey names the language.
    pub label: &'static str,
}

/// The compile cache the runs share, kept with the build (see
/// `nexo_tests::guests::compile_cache`): the first caller's `inspect` compiles
/// unless an earlier test run already did; everything after it is a hit.
fn cache(guest: &Guest) -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = nexo_tests::guests::compile_cache(guest.path);
        let started = Instant::now();
        let out = nexo_in(&dir, &["inspect", "--json", path(guest)]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("inspect --json prints JSON");
        let outcome = v["cache"].as_str().unwrap_or_default().to_string();
        assert!(outcome == "miss" || outcome == "hit", "the compile cache is on: {v}");
        eprintln!("{}: first load ({outcome}): {:?}", guest.name, started.elapsed());
        dir
    })
}

fn path(guest: &Guest) -> &'static str {
    guest.path.to_str().expect("a UTF-8 path")
}

fn nexo_in(cache: &Path, args: &[&str]) -> Output {
    crate::common::nexo_command(cache).args(args).output().expect("run nexo")
}

fn nexo(guest: &Guest, args: &[&str]) -> Output {
    nexo_in(cache(guest), args)
}

/// A workspace with two text files and one that is not UTF-8.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("README.md"), "# Demo\n\nA tiny project.\n").expect("write");
    std::fs::create_dir(dir.path().join("notes")).expect("mkdir");
    std::fs::write(dir.path().join("notes/todo.md"), "- ship the python agent\n- and the js one\n").expect("write");
    std::fs::write(dir.path().join("blob.bin"), b"\xff\xfe\x00binary").expect("write");
    dir
}

fn survey(guest: &Guest) -> String {
    format!(
        "3 files, 5 lines, 15 words ({})\n\
         - README.md: 3 lines, 5 words; first line: 'Demo'\n\
         - blob.bin: unreadable (invalid-input: blob.bin is not UTF-8 text)\n\
         - notes/todo.md: 2 lines, 10 words; first line: '- ship the python agent'",
        guest.label
    )
}

/// `nexo inspect` names the world and shows the manifest the agent returned;
/// a second load comes from the compile cache.
pub fn inspect_shows_world_and_manifest(guest: &Guest) {
    let out = nexo(guest, &["inspect", path(guest)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with(&format!("{}  (agent, nexo:plugin/agent@0.1.4)", guest.name)), "{text}");
    for line in [
        "description    Surveys its workspace with glob and read-file, then answers with the model",
        "requested      read, glob",
        "max turns      4",
        "permissions    read-only",
        "nexo:plugin/tools@0.1.4",
        "nexo:plugin/model@0.1.4",
        "nexo:plugin/log@0.1.4",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let out = nexo(guest, &["inspect", "--json", path(guest)]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("inspect --json prints JSON");
    assert_eq!(v["world"], "nexo:plugin/agent-plugin");
    assert_eq!(v["cache"], "hit", "the second load comes from the compile cache");
    assert_eq!(v["description"]["description"]["capabilities"], serde_json::json!(["read", "glob"]));
    assert_eq!(v["description"]["description"]["max-turns"], 4);
    // componentize-py also exports its runtime's own `exports` instance; the
    // host ignores exports outside `nexo:plugin`.
    let exports: Vec<&str> = v["exports"].as_array().unwrap().iter().filter_map(|e| e.as_str()).collect();
    let nexo_exports: Vec<&str> = exports.iter().copied().filter(|e| e.starts_with("nexo:")).collect();
    assert_eq!(nexo_exports, ["nexo:plugin/agent@0.1.4"], "{exports:?}");
}

/// With no model, `run` calls `glob` and `read-file` through the WIT imports
/// (a non-UTF-8 file comes back as a typed error value, not a trap), logs,
/// sees `model-error::not-configured`, and answers with the survey.
pub fn run_without_a_model_surveys_the_workspace(guest: &Guest) {
    let ws = workspace();
    let cwd = ws.path().to_str().expect("UTF-8");
    let started = Instant::now();
    let out = nexo(guest, &["run", path(guest), "What is here?", "--sandbox", "local", "--cwd", cwd]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), format!("Workspace survey:\n{}", survey(guest)));
    let err = stderr(&out);
    assert!(
        err.contains("surveyed 3 paths, read 2 files") && err.contains(&format!("plugin=\"{}\"", guest.name)),
        "{err}"
    );
    assert!(err.contains("no model configured; answering with the survey alone"), "{err}");
    eprintln!("{}: nexo run, cache hit, no model: {took:?}", guest.name);

    // In the default, virtual sandbox the agent sees an empty workspace.
    let out = nexo(guest, &["run", path(guest), "What is here?"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("0 files, 0 lines, 0 words ({})", guest.label)), "{}", stdout(&out));
}

/// With the scripted provider, `run` calls the model's `prompt` import; the
/// model loop runs a tool call through the host's gate and the agent gets the
/// final reply and its turn count.
pub fn run_with_a_scripted_model_answers(guest: &Guest) {
    let ws = workspace();
    let script = ws.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"turns": [
            {"text": "Checking the todo list.", "tool_calls": [{"name": "read_file", "arguments": {"path": "notes/todo.md"}}]},
            {"text": "Two things are left: ship the python agent and the js one (notes/todo.md)."}
        ]}"#,
    )
    .expect("write script");
    // The script is in the workspace too: the survey counts it.
    let cwd = ws.path().to_str().expect("UTF-8");
    let out = nexo(
        guest,
        &[
            "run",
            path(guest),
            "What is left to do?",
            "--sandbox",
            "local",
            "--cwd",
            cwd,
            "--script",
            script.to_str().expect("UTF-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "Two things are left: ship the python agent and the js one (notes/todo.md).\n\n\
             Workspace survey (2 model turns):\n4 files, "
        ),
        "{text}"
    );
    assert!(text.contains("- script.json: "), "{text}");
    let err = stderr(&out);
    assert!(err.contains("scripted provider"), "{err}");
    assert!(err.contains("read_file: allowed"), "the model's tool call passed the gate: {err}");
    assert!(!err.contains("no model configured"), "{err}");
}

/// A `run-error` comes back as a failure with the agent's message, and the
/// smallest memory cap nexo accepts (16 MiB) is enough for the runtime.
pub fn errors_and_the_memory_floor(guest: &Guest) {
    let out = nexo(guest, &["run", path(guest), "   "]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains(&format!("agent `{}` failed: the input is empty: say what to do with the workspace", guest.name)),
        "{}",
        stderr(&out)
    );
    let ws = workspace();
    let cwd = ws.path().to_str().expect("UTF-8");
    let out = nexo(guest, &["run", "--memory", "16", path(guest), "x", "--sandbox", "local", "--cwd", cwd]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&survey(guest)), "{}", stdout(&out));
}

/// Loads the agent through the library next to the Rust `text-stats` agent,
/// instantiates each a few times from one pool (the slots are reused), and
/// prints what each step costs. Run with `--nocapture` to see the table.
pub fn costs_next_to_rust(guest: &Guest) {
    use nexo::settings::RunOptions;
    use nexo::{Engine, EngineConfig, Plugin};

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let cache = cache(guest).to_path_buf();
    let engine = Engine::new(EngineConfig { cache_dir: Some(cache), ..EngineConfig::default() }).expect("engine");
    let options = RunOptions::default();
    let mut rows = Vec::new();
    // What each answers, in an empty in-memory workspace with no model.
    let survey = format!("Workspace survey:\n0 files, 0 lines, 0 words ({})", guest.label);
    for (label, file, expected) in [
        (guest.name, PathBuf::from(guest.path), survey.as_str()),
        ("text-stats (Rust)", PathBuf::from(nexo_tests::TEXT_STATS), "words: 3"),
    ] {
        let size = std::fs::metadata(&file).expect("stat").len();
        let started = Instant::now();
        let plugin = rt.block_on(Plugin::load(&engine, &file)).expect("load");
        let load = started.elapsed();
        let mut instantiate = Duration::MAX;
        let mut run = Duration::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let mut instance = rt.block_on(plugin.instantiate_agent(&options)).expect("instantiate");
            instantiate = instantiate.min(started.elapsed());
            let started = Instant::now();
            let answer = rt.block_on(instance.run("one two three")).expect("run").answer;
            run = run.min(started.elapsed());
            assert!(answer.contains(expected), "{label} answered {answer:?}, not {expected:?}");
        }
        rows.push(format!(
            "{label:<20} {:>9} KiB  load {:>10?} ({:?})  instantiate {:>10?}  run {:>10?}",
            size / 1024,
            load,
            plugin.cache_outcome(),
            instantiate,
            run
        ));
    }
    eprintln!("costs (this build of nexo; best of 5 for instantiate and run):\n{}", rows.join("\n"));
}
