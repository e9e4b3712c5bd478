//! The bodies of nexo's fuzz targets: one `pub fn NAME(data: &[u8])` per
//! untrusted input, which panics when a property is violated (a crash, or
//! a check such as "an address the guard accepts is public").
//!
//! Two drivers share them: the cargo-fuzz crate in `fuzz/` (outside the
//! workspace; `make fuzz`), and `tests/smoke.rs`, which `cargo test` runs:
//! each target over its seeds plus a fixed number of deterministic
//! mutations ([`mutate`]). [`TARGETS`] lists them all; [`seeds`] gathers
//! each one's seeds from the repository's fixtures and `fuzz/corpus/NAME`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub mod component;
pub mod config;
pub mod egress;
pub mod manifest;
pub mod model;
pub mod mutate;
pub mod sandbox;
pub mod skills;
pub mod text;

/// A fuzz target: its name (the cargo-fuzz target's and the corpus
/// directory's) and its body.
pub struct Target {
    /// The name, as in `cargo fuzz run NAME`.
    pub name: &'static str,
    /// The body.
    pub run: fn(&[u8]),
    /// Mutations the smoke run tries (a cost budget: loading a component
    /// compiles it, so that target gets fewer).
    pub smoke_mutations: usize,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "skill_md", run: skills::skill_md, smoke_mutations: 3000 },
    Target { name: "agent_toml", run: manifest::agent_toml, smoke_mutations: 3000 },
    Target { name: "config_file", run: config::config_file, smoke_mutations: 3000 },
    Target { name: "agent_manifest", run: manifest::agent_manifest, smoke_mutations: 3000 },
    Target { name: "model_response", run: model::model_response, smoke_mutations: 600 },
    Target { name: "egress_url", run: egress::egress_url, smoke_mutations: 3000 },
    Target { name: "sandbox_paths", run: sandbox::sandbox_paths, smoke_mutations: 800 },
    Target { name: "text_truncate", run: text::text_truncate, smoke_mutations: 3000 },
    Target { name: "component_load", run: component::component_load, smoke_mutations: 150 },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The repository's root (this crate's parent directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The seeds of target `name`: the checked-in corpus and regressions
/// (`fuzz/corpus/NAME`, `fuzz/regressions/NAME`) plus real inputs from the
/// repository's fixtures (skills, agent files, configs).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in [root.join("fuzz/corpus").join(name), root.join("fuzz/regressions").join(name)] {
        files.extend(list(&dir, &|_| true));
    }
    let fixtures: &[(&str, &str)] = match name {
        "skill_md" => {
            &[("plugins/skills", "SKILL.md"), ("skills/tests/fixtures", "SKILL.md"), ("examples", "SKILL.md")]
        }
        "agent_toml" | "agent_manifest" => &[("examples", ".toml"), ("tests/fixtures", ".toml")],
        "config_file" => &[("examples/web", ".toml")],
        _ => &[],
    };
    for (dir, suffix) in fixtures {
        files.extend(walk(&root.join(dir), suffix));
    }
    files.sort();
    files.dedup();
    files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
}

fn list(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file() && keep(p)).collect()
}

fn walk(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(|e| e.ok()) {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && !path.ends_with("target") && !path.ends_with("node_modules") {
                stack.push(path);
            } else if kind.is_file() && path.to_string_lossy().ends_with(suffix) {
                out.push(path);
            }
        }
    }
    out
}

/// The runtime the targets block on: one for the process, two workers.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
    })
}

/// Longest error message a parser may produce, in bytes: an error quotes
/// only a window of the input, never a whole line or file.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Panics if `error`'s message is over [`MAX_ERROR_BYTES`].
pub fn assert_short_error(what: &str, error: &dyn std::fmt::Display) {
    let shown = error.to_string();
    assert!(
        shown.len() <= MAX_ERROR_BYTES,
        "{what}: a {}-byte error: {}…",
        shown.len(),
        nexo_text::head_chars(&shown, 300)
    );
}

/// A plugin or skill name: 1 to `max` lowercase letters, digits and single
/// hyphens, neither first nor last (written without the parsers' code).
pub fn is_plugin_name(name: &str, max: usize) -> bool {
    (1..=max).contains(&name.chars().count())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}
