//! Plugins written in other languages, built from `examples/` with their
//! language's componentizer against `wit/` alone: `examples/python-agent` and
//! `examples/python-hook` (componentize-py), `examples/js-agent` (ComponentizeJS).
//!
//! Building one takes seconds to tens of seconds, so a build is cached under
//! `target/guests/`, named by a hash of its inputs (the sources, the WIT, the
//! tool's version): a re-run with nothing changed builds nothing. Each build
//! has its own compile cache next to it ([`compile_cache`]).
//!
//! A missing tool is a failure, never a skip: the panic says how to install it
//! (`scripts/python-deps.sh`, `scripts/js-deps.sh`; `make test` runs both).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// One example and how its tool builds it.
struct Guest {
    /// The example's directory under `examples/`.
    example: &'static str,
    /// The output's file name, without `.wasm`.
    output: &'static str,
    /// The tool's command name on PATH.
    tool: &'static str,
    /// The environment variable that may point at the tool.
    tool_env: &'static str,
    /// Where the install script puts the tool, relative to the repository.
    installed: &'static str,
    /// How to install it, for the failure message.
    install: &'static str,
    /// Files the component is built from, relative to the example. The
    /// example's `build.sh <output>` builds it (with `$tool_env` set).
    sources: &'static [&'static str],
}

const PYTHON: Guest = Guest {
    example: "python-agent",
    output: "python_agent",
    tool: "componentize-py",
    tool_env: "NEXO_COMPONENTIZE_PY",
    installed: "target/tools/python/bin/componentize-py",
    install: "run ./scripts/python-deps.sh (`make test` does), or `pip install componentize-py==0.25.1` and \
              put it on PATH or in $NEXO_COMPONENTIZE_PY",
    sources: &["build.sh", "app.py"],
};

const PYTHON_HOOK: Guest =
    Guest { example: "python-hook", output: "python_hook", sources: &["build.sh", "app.py"], ..PYTHON };

const JAVASCRIPT: Guest = Guest {
    example: "js-agent",
    output: "js_agent",
    tool: "componentize-js",
    tool_env: "NEXO_COMPONENTIZE_JS",
    installed: "target/tools/js/node_modules/.bin/componentize-js",
    install: "run ./scripts/js-deps.sh (`make test` does), or `npm install @bytecodealliance/componentize-js@0.23.0 \
              @bytecodealliance/preview2-shim@0.25.0` and put its .bin on PATH or the tool in $NEXO_COMPONENTIZE_JS",
    sources: &["build.sh", "agent.js", "package-lock.json"],
};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// `examples/python-agent`, built with componentize-py (built once per
/// process, and only when its inputs changed). Panics with the install
/// command if componentize-py is missing.
pub fn python_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build(&PYTHON))
}

/// `examples/python-hook`, built with componentize-py, like [`python_agent`].
pub fn python_hook() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build(&PYTHON_HOOK))
}

/// `examples/js-agent`, built with ComponentizeJS, like [`python_agent`].
pub fn js_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build(&JAVASCRIPT))
}

/// A compile cache directory for one built example (`<build>.cache/`, next
/// to it, removed with it), so a re-run of the tests compiles nothing either.
pub fn compile_cache(component: &Path) -> PathBuf {
    component.with_extension("cache")
}

fn build(guest: &Guest) -> PathBuf {
    let root = root();
    let tool = find_tool(guest, &root).and_then(|t| t.canonicalize().ok()).unwrap_or_else(|| {
        panic!("{} is not installed, so examples/{} cannot be built: {}", guest.tool, guest.example, guest.install)
    });
    let version = run_ok(Command::new(&tool).arg("--version"), guest.tool);
    let dir = root.join("examples").join(guest.example);
    let wit = root.join("wit");

    let mut hash = Sha256::new();
    hash.update(version.trim().as_bytes());
    let mut inputs: Vec<PathBuf> = guest.sources.iter().map(|s| dir.join(s)).collect();
    let mut wit_files: Vec<PathBuf> = std::fs::read_dir(&wit)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", wit.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wit"))
        .collect();
    wit_files.sort();
    inputs.extend(wit_files);
    for input in &inputs {
        let bytes = std::fs::read(input).unwrap_or_else(|e| panic!("cannot read {}: {e}", input.display()));
        hash.update(input.strip_prefix(&root).unwrap_or(input).to_string_lossy().as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    let key = hex::encode(&hash.finalize()[..8]);
    let out_dir = root.join("target").join("guests");
    let out = out_dir.join(format!("{}-{key}.wasm", guest.output));
    if out.is_file() {
        return out;
    }
    std::fs::create_dir_all(&out_dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    // Build to a private name, then rename: a concurrent test binary never
    // sees half a component.
    let partial = out_dir.join(format!("{}-{key}.{}.partial.wasm", guest.output, std::process::id()));
    eprintln!("building examples/{} with {} ({})", guest.example, guest.tool, version.trim());
    run_ok(Command::new(dir.join("build.sh")).arg(&partial).env(guest.tool_env, &tool), guest.tool);
    std::fs::rename(&partial, &out).unwrap_or_else(|e| panic!("cannot move {} into place: {e}", partial.display()));
    // Older builds of this example (10 to 20 MB each) and their compile
    // caches (about 35 MB): keep only this one.
    let prefix = format!("{}-", guest.output);
    for entry in std::fs::read_dir(&out_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) || name.contains(".partial.") || path == out || path == compile_cache(&out) {
            continue;
        }
        if name.ends_with(".wasm") {
            let _ = std::fs::remove_file(&path);
        } else if name.ends_with(".cache") {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
    out
}

/// `$tool_env`, else where the install script puts it, else PATH.
fn find_tool(guest: &Guest, root: &Path) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(guest.tool_env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Some(path);
        }
        panic!("${} is {}, which is not a file: {}", guest.tool_env, path.display(), guest.install);
    }
    let installed = root.join(guest.installed);
    if installed.is_file() {
        return Some(installed);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(guest.tool)).find(|p| p.is_file())
}

fn run_ok(command: &mut Command, name: &str) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    if !out.status.success() {
        panic!(
            "{name} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}
