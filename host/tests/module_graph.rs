//! The module graph of every crate of the workspace has no cycle, and its
//! edges go down the crate's layers. In the host: the front ends, the run
//! lifecycle, what a run is granted, the worlds, the capabilities, the
//! host-call path, and the engine and plain data beneath them all.
//!
//! The test reads every source file of a crate's library and binary (found
//! from `Cargo.toml` and the `mod` declarations, as rustc finds them), takes
//! each path it names (`crate::a::b`, `super::c`, `super::super::d`, an item
//! the crate root re-exports, a child module by name) as an edge to the
//! module that path lands in, and checks:
//!
//! - **files:** no cycle between files;
//! - **folders:** no cycle once each folder counts as one module, its files'
//!   edges merged, at every depth (the crate's top level, then inside each
//!   folder);
//! - **layers:** each crate lists its top-level modules in layers ([`CRATES`]),
//!   and an edge from a lower layer to a higher one fails, naming it.
//!
//! `mod` declarations are not edges; comments and unit tests (`#[cfg(test)]`
//! and modules named `tests`) are skipped. Cycles and layer violations that
//! exist today are listed in [`KNOWN_CYCLES`] and [`KNOWN_LAYER_EDGES`], which
//! must match what is found exactly: a new one fails, and so does one that
//! is gone until its entry is deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's layers, top first: a module may use its own layer and those
/// below it. Every top-level module (a file or a folder) of the crate's
/// library and binary must be in one.
struct Layers {
    /// The crate's directory in the workspace.
    dir: &'static str,
    layers: &'static [&'static [&'static str]],
}

const CRATES: &[Layers] = &[
    Layers {
        dir: "host",
        layers: &[
            // Front ends: the `nexo` binary's commands (`cli/`, `main.rs`) and `nexo serve`.
            &["cli", "server"],
            // The run lifecycle: runs, sessions, leases, declarative agents, accepted plugins.
            &["runs", "session", "lease", "agent_file", "data_dir", "acceptance"],
            // What produces a run's grant: the config file and the tenant's policy.
            &["policy", "config"],
            // A run put together: the worlds with their instances, and plugins (from files
            // or from registries).
            &["world", "plugin", "registry"],
            // Capabilities (a unit each, and components' egress) and the other agent
            // runtimes. They implement the host-call path's traits (`Unit`, `HostCall`,
            // `Tool`, `Loop`), so they sit above it.
            &["capability", "unit", "egress", "claude_code", "mcp_server"],
            // The host-call path: the one path, the authority, the journal, the loop, and
            // the quotas and metering a run's instance and calls draw on.
            &[
                "agent_loop",
                "model_turn",
                "host_call",
                "hooks",
                "journal",
                "children",
                "authority",
                "instance",
                "settings",
                "quota",
                "log",
            ],
            // The engine and plain data beneath everything, the grant among it.
            &[
                "grant",
                "engine",
                "bindings",
                "manifest",
                "error",
                "events",
                "stop",
                "task",
                "terminal",
                "truncate",
                "files",
                "search",
                "priority",
                "spend",
                "flow",
                "thread",
                "hint",
                "telemetry",
            ],
        ],
    },
    Layers {
        dir: "egress",
        layers: &[
            &["builder", "proxy"],
            &["client"],
            &["follow", "response"],
            &["connect", "policy"],
            &["secret", "request", "net"],
            &[
                "headers", "shown", "scrub", "origin", "allow", "address", "resolver", "meter", "share", "trace",
                "splice", "sni",
            ],
            &["error"],
        ],
    },
    Layers {
        dir: "mcp",
        layers: &[
            &["client"],
            &["http", "stdio", "token", "content"],
            &["guard", "config", "name", "network"],
            &["error"],
        ],
    },
    Layers {
        dir: "sandbox",
        layers: &[
            &["local", "container", "remote", "virtual_fs"],
            &["shell", "program"],
            &["confine", "view", "landlock_abi", "network"],
            &["process", "path"],
        ],
    },
    Layers {
        dir: "store",
        layers: &[
            &["postgres", "sqlite", "memory"],
            &["relational"],
            &["writer", "sql", "rows", "latency"],
            &["traits"],
            &["anchor"],
            &["transition", "schedules"],
            &["jobs", "sessions", "signals", "tenants", "batch"],
            &["refusal"],
            &["location"],
            &["error"],
            &["runs"],
            &["approvals", "journal", "events", "ids"],
        ],
    },
    Layers {
        dir: "model",
        layers: &[
            // `resolve` builds every provider from the plain `ModelConfig`.
            &["config"],
            &["mock", "scripted"],
            &["anthropic", "openai"],
            &["http", "endpoint", "wire"],
            &["settings"],
        ],
    },
    Layers { dir: "skills", layers: &[&["parse"], &["error"]] },
    Layers { dir: "testkit", layers: &[&["llama", "podman", "otlp", "registry"]] },
    Layers { dir: "text", layers: &[] },
    Layers { dir: "toolchain", layers: &[] },
    Layers { dir: "tests", layers: &[&["guests", "loopback"]] },
    Layers {
        dir: "fuzz-targets",
        layers: &[&["component", "config", "egress", "manifest", "model", "sandbox", "skills", "text"], &["mutate"]],
    },
];

/// Cycles (between files or folders) that exist today, as (target, the
/// modules of one strongly connected set). To be removed by issue 37:
/// whoever breaks one deletes its entry.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// Edges from a lower layer to a higher one that exist today, as (target,
/// from, to). To be removed by issue 37: whoever removes one deletes its
/// entry.
const KNOWN_LAYER_EDGES: &[(&str, &str, &str)] = &[];

type Module = Vec<String>;
type Edges = BTreeMap<Module, BTreeSet<Module>>;

/// One compiled target: a library or a binary.
struct Target {
    /// `nexo-egress lib`, `nexo bin`.
    name: String,
    /// The crate's directory in the workspace.
    dir: String,
    edges: Edges,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The workspace's members, from its `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest.lines().find(|l| l.starts_with("members")).expect("a members list");
    line.split('"').skip(1).step_by(2).map(String::from).collect()
}

/// The value of `key = "..."` in the `[section]` of a manifest.
fn manifest_value(manifest: &str, section: &str, key: &str) -> Option<String> {
    let manifest = format!("\n{manifest}");
    let start = manifest.find(&format!("\n{section}\n"))?;
    let body = &manifest[start + section.len() + 2..];
    let body = &body[..body.find("\n[").unwrap_or(body.len())];
    let line = body.lines().find(|l| l.split('=').next().is_some_and(|k| k.trim() == key))?;
    Some(line.split('"').nth(1)?.to_string())
}

/// A crate's library and binary roots.
fn roots(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let name = manifest_value(&manifest, "[package]", "name").unwrap();
    let mut found = Vec::new();
    let lib = manifest_value(&manifest, "[lib]", "path").unwrap_or_else(|| "src/lib.rs".into());
    if dir.join(&lib).is_file() {
        found.push(("lib", dir.join(lib)));
    }
    if dir.join("src/main.rs").is_file() {
        found.push(("bin", dir.join("src/main.rs")));
    }
    assert!(!found.is_empty(), "{name}: no library or binary root found");
    found
}

/// Code without comments, and without the unit tests at the end of a file
/// (their `super::` is the file itself): an inline `#[cfg(test)] mod … {`
/// ends the code.
fn code(text: &str) -> String {
    let text = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let mut end = text.len();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let next = text[at + "#[cfg(test)]".len()..].trim_start();
        let line = next.lines().next().unwrap_or("");
        if line.starts_with("mod ") && line.trim_end().ends_with('{') {
            end = at;
            break;
        }
        from = at + 1;
    }
    text[..end].to_string()
}

/// The modules a file declares with `mod name;`, except unit tests.
fn declared(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let text = text.split("\n#[cfg(test)]\nmod tests {").next().unwrap_or("");
    let lines: Vec<&str> = text.lines().map(|l| l.split("//").next().unwrap_or("").trim()).collect();
    for (i, line) in lines.iter().enumerate() {
        let rest = match line.strip_prefix("pub") {
            Some(after) if after.starts_with('(') => after.split_once(") ").map_or(*line, |(_, rest)| rest),
            Some(after) => after.trim_start(),
            None => line,
        };
        let Some(name) = rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) else { continue };
        let test_only = i > 0 && lines[i - 1].starts_with("#[cfg(test)]");
        if !test_only && name != "tests" {
            names.push(name.trim().to_string());
        }
    }
    names
}

/// Every module of the target whose root is `root`, as (module path, file),
/// following `mod` declarations as rustc does.
fn modules(root: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(file: &Path, module: Module, out: &mut BTreeMap<Module, PathBuf>) {
        let text = std::fs::read_to_string(file).unwrap();
        let is_dir_owner = module.is_empty() || file.ends_with("mod.rs");
        let dir = if is_dir_owner { file.parent().unwrap().to_path_buf() } else { file.with_extension("") };
        out.insert(module.clone(), file.to_path_buf());
        for name in declared(&text) {
            let mut child = module.clone();
            child.push(name.clone());
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            let path = if flat.is_file() { flat } else { nested };
            assert!(path.is_file(), "{}: `mod {name};` has no file", file.display());
            walk(&path, child, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, Vec::new(), &mut out);
    out
}

/// The longest prefix of `path` that is a module.
fn land(path: &[String], known: &BTreeSet<Module>) -> Option<Module> {
    (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p))
}

/// Paths such as `a::b::c` starting at `lead` in `text`, one per match, with
/// `{x, y}` groups expanded one level.
fn paths_after(text: &str, lead: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(lead) {
        let before = rest[..i].chars().last();
        rest = &rest[i + lead.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut segments = Vec::new();
        let mut cursor = rest;
        loop {
            let ident: String = cursor.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if ident.is_empty() {
                if let Some(group) = cursor.strip_prefix('{') {
                    let inner = &group[..group.find('}').unwrap_or(group.len())];
                    for item in inner.split(',') {
                        let head = item.trim().split("::").next().unwrap_or("").trim().to_string();
                        if !head.is_empty() {
                            let mut p = segments.clone();
                            p.push(head);
                            found.push(p);
                        }
                    }
                }
                break;
            }
            segments.push(ident.clone());
            cursor = &cursor[ident.len()..];
            match cursor.strip_prefix("::") {
                Some(next) => cursor = next,
                None => break,
            }
        }
        if !segments.is_empty() {
            found.push(segments);
        }
    }
    found
}

/// The items a crate root re-exports (`pub use a::{B, C}`), by name, with
/// the module they come from: `crate::B` is an edge to `a`.
fn reexports(root_code: &str, known: &BTreeSet<Module>) -> BTreeMap<String, Module> {
    let mut out = BTreeMap::new();
    let mut rest = root_code;
    while let Some(i) = rest.find("pub use ") {
        rest = &rest[i + "pub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let statement: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        let (base, items) = match statement.split_once("::{") {
            Some((base, items)) => (base.to_string(), items.trim_end_matches('}').to_string()),
            None => match statement.rsplit_once("::") {
                Some((base, item)) => (base.to_string(), item.to_string()),
                None => continue,
            },
        };
        let base: Vec<String> = base.split("::").map(String::from).collect();
        let Some(module) = land(&base, known) else { continue };
        for item in items.split(',') {
            let name = item.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() && name != "self" {
                out.insert(name.to_string(), module.clone());
            }
        }
    }
    out
}

/// The file-level edges of the target whose root is `root`.
fn graph(root: &Path) -> Edges {
    let files = modules(root);
    let known: BTreeSet<Module> = files.keys().cloned().collect();
    let root_code = code(&std::fs::read_to_string(root).unwrap());
    let exported = reexports(&root_code, &known);
    let mut edges = Edges::new();
    for (module, file) in &files {
        if module.is_empty() {
            continue;
        }
        let text = code(&std::fs::read_to_string(file).unwrap());
        let mut targets = Vec::new();
        for p in paths_after(&text, "crate::") {
            match land(&p, &known) {
                Some(m) => targets.push(m),
                None => targets.extend(p.first().and_then(|item| exported.get(item)).cloned()),
            }
        }
        for p in paths_after(&text, "super::") {
            // `super::super::x` climbs once per `super`.
            let ups = 1 + p.iter().take_while(|s| *s == "super").count();
            let Some(base) = module.len().checked_sub(ups) else { continue };
            let parent = module[..base].to_vec();
            let mut full = parent.clone();
            full.extend(p.into_iter().skip(ups - 1));
            targets.extend(land(&full, &known).or_else(|| known.contains(&parent).then(|| parent.clone())));
        }
        // A module with children names them by their bare names (`files::ReadFile`).
        for child in known.iter().filter(|k| k.len() == module.len() + 1 && k.starts_with(module)) {
            let name = child.last().unwrap();
            let uses =
                paths_after(&text, &format!("{name}::")).len() + paths_after(&text, &format!("self::{name}")).len();
            if uses > 0 {
                targets.push(child.clone());
            }
        }
        let own = edges.entry(module.clone()).or_default();
        own.extend(targets.into_iter().filter(|t| t != module && !t.is_empty()));
    }
    edges
}

/// `edges` with every module cut to its first `depth` segments: each folder
/// at that depth counts as one module, its files' edges merged.
fn folded(edges: &Edges, depth: usize) -> Edges {
    let cut = |m: &Module| m[..m.len().min(depth)].to_vec();
    let mut out = Edges::new();
    for (from, tos) in edges {
        let from = cut(from);
        let own = out.entry(from.clone()).or_default();
        own.extend(tos.iter().map(cut).filter(|t| *t != from));
    }
    out
}

/// The strongly connected sets of more than one module (Tarjan's algorithm):
/// every cycle lies within one.
fn cyclic_sets(edges: &Edges) -> Vec<BTreeSet<Module>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<BTreeSet<Module>>,
    }
    fn visit<'a>(node: &'a Module, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for next in s.edges.get(node).into_iter().flatten() {
            if !s.index.contains_key(next) {
                visit(next, s);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut set = BTreeSet::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                set.insert(top.clone());
                if top == node {
                    break;
                }
            }
            if set.len() > 1 {
                s.found.push(set);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    let nodes: Vec<&Module> = edges.keys().chain(edges.values().flatten()).collect();
    for node in nodes {
        if !s.index.contains_key(node) {
            visit(node, &mut s);
        }
    }
    s.found
}

/// One cycle through the modules of `set`, for the message.
fn a_cycle(edges: &Edges, set: &BTreeSet<Module>) -> String {
    let start = set.iter().next().unwrap();
    // Breadth-first from `start` back to itself, inside the set.
    let mut previous: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(node).into_iter().flatten().filter(|n| set.contains(*n)) {
            if next == start {
                let mut path = vec![start, node];
                let mut at = node;
                while at != start {
                    at = previous[at];
                    path.push(at);
                }
                path.reverse();
                return path.iter().map(|m| name(m)).collect::<Vec<_>>().join(" -> ");
            }
            if !previous.contains_key(next) && next != start {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    String::new()
}

fn name(m: &Module) -> String {
    m.join("::")
}

/// Every library and binary of the workspace's crates.
fn targets(root: &Path) -> Vec<Target> {
    let mut out = Vec::new();
    for member in members(root) {
        let dir = root.join(&member);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let package = manifest_value(&manifest, "[package]", "name").unwrap();
        for (kind, file) in roots(&dir) {
            out.push(Target { name: format!("{package} {kind}"), dir: member.clone(), edges: graph(&file) });
        }
    }
    out
}

/// What is wrong with `target`'s graph: file cycles, folder cycles and
/// layer violations, each message naming the modules. Folder cycles and
/// layer violations listed in `known_cycles` and `known_edges` are expected
/// instead: each must still be found.
fn problems(
    target: &Target,
    layers: &[&[&str]],
    known_cycles: &[(&str, &[&str])],
    known_edges: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    let edges = &target.edges;
    // Every strongly connected set, between files and then between the
    // folders of each depth; one named by the same modules at several
    // depths is one cycle.
    let mut found: BTreeMap<BTreeSet<String>, String> = BTreeMap::new();
    let depth = edges.keys().map(Vec::len).max().unwrap_or(0);
    for d in (1..depth).rev() {
        let folders = folded(edges, d);
        for set in cyclic_sets(&folders) {
            let names = set.iter().map(name).collect();
            found.insert(names, format!("a cycle between folders: {}", a_cycle(&folders, &set)));
        }
    }
    for set in cyclic_sets(edges) {
        let names = set.iter().map(name).collect();
        found.insert(names, format!("a cycle between files: {}", a_cycle(edges, &set)));
    }
    let expected: BTreeSet<BTreeSet<String>> = known_cycles
        .iter()
        .filter(|(t, _)| *t == target.name)
        .map(|(_, set)| set.iter().map(|s| s.to_string()).collect())
        .collect();
    for (set, message) in &found {
        if !expected.contains(set) {
            out.push(format!("{}: {message}", target.name));
        }
    }
    for set in expected.iter().filter(|set| !found.contains_key(*set)) {
        out.push(format!("{}: the known cycle between {set:?} is gone; delete it from KNOWN_CYCLES", target.name));
    }
    // Layers, over the top-level modules.
    let top = folded(edges, 1);
    let layer_of = |m: &str| layers.iter().position(|l| l.contains(&m));
    let modules: BTreeSet<&Module> = top.keys().chain(top.values().flatten()).collect();
    for module in modules {
        if layer_of(&module[0]).is_none() {
            out.push(format!(
                "{}: the module `{}` is in no layer; add it to the crate's layers in this test",
                target.name, module[0]
            ));
        }
    }
    let mut upward = BTreeSet::new();
    for (from, tos) in &top {
        for to in tos {
            if let (Some(a), Some(b)) = (layer_of(&from[0]), layer_of(&to[0]))
                && b < a
            {
                upward.insert((from[0].clone(), to[0].clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = known_edges
        .iter()
        .filter(|(t, _, _)| *t == target.name)
        .map(|(_, a, b)| (a.to_string(), b.to_string()))
        .collect();
    for (from, to) in upward.difference(&expected) {
        out.push(format!(
            "{}: `{from}` uses `{to}`, a higher layer; move the code it needs down, or `{from}` up",
            target.name
        ));
    }
    for (from, to) in expected.difference(&upward) {
        out.push(format!(
            "{}: the known layer violation `{from}` -> `{to}` is gone; delete it from KNOWN_LAYER_EDGES",
            target.name
        ));
    }
    out
}

fn layers_of(dir: &str) -> &'static [&'static [&'static str]] {
    CRATES
        .iter()
        .find(|c| c.dir == dir)
        .unwrap_or_else(|| panic!("the crate `{dir}` has no layers in this test; add it to CRATES"))
        .layers
}

#[test]
fn every_crate_s_module_graph_has_no_cycle_and_follows_its_layers() {
    let all = targets(&workspace());
    assert!(all.len() >= 11, "too few crates found: {}", all.len());
    let mut failures = Vec::new();
    for target in &all {
        failures.extend(problems(target, layers_of(&target.dir), KNOWN_CYCLES, KNOWN_LAYER_EDGES));
    }
    for (t, _) in KNOWN_CYCLES {
        assert!(all.iter().any(|a| a.name == *t), "KNOWN_CYCLES names no target `{t}`");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_checker_sees_edges_and_cycles() {
    // The check must be able to fail: the graph it builds has the edges the
    // code has, and a cycle added to it is found.
    let root = workspace();
    let host = targets(&root).into_iter().find(|t| t.name == "nexo lib").unwrap();
    let mut edges = host.edges;
    let key = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert!(edges[&key("capability::files")].contains(&key("host_call")), "{:?}", edges[&key("capability::files")]);
    assert!(edges[&key("world::agent")].contains(&key("capability::files")));
    assert!(edges[&key("world::agent")].contains(&key("world")), "a child naming `super::` items");
    let login = &edges[&key("server::console::login")];
    assert!(login.contains(&key("server::signin")) && login.contains(&key("server::console::html")), "{login:?}");
    assert!(edges[&key("server::console")].contains(&key("server::console::runs")), "a parent naming its child");
    edges.get_mut(&key("host_call")).unwrap().insert(key("world::agent"));
    let sets = cyclic_sets(&edges);
    let set = sets.iter().find(|s| s.contains(&key("host_call"))).expect("the added edge closes a cycle");
    let cycle = a_cycle(&edges, set);
    assert!(cycle.contains("host_call") && cycle.contains("world::agent"), "{cycle}");
}

#[test]
fn a_cycle_planted_in_a_scratch_copy_fails_at_file_and_folder_level() {
    // A copy of the egress crate with one import added that closes a cycle:
    // `error` (which depends on nothing) now uses `client`.
    let scratch = tempfile::tempdir().unwrap();
    let from = workspace().join("egress");
    copy_dir(&from.join("src"), &scratch.path().join("src"));
    std::fs::copy(from.join("Cargo.toml"), scratch.path().join("Cargo.toml")).unwrap();
    let target = |dir: &Path| Target { edges: graph(&dir.join("src/lib.rs")), ..target_named("nexo-egress lib") };
    let clean = problems(&target(scratch.path()), layers_of("egress"), &[], &[]);
    assert!(clean.is_empty(), "the copy as it is passes: {clean:?}");

    let error = scratch.path().join("src/error.rs");
    let text = std::fs::read_to_string(&error).unwrap();
    std::fs::write(
        &error,
        text.replacen("use std::net::IpAddr;", "use std::net::IpAddr;\nuse crate::client::GuardedClient;", 1),
    )
    .unwrap();
    let found = problems(&target(scratch.path()), layers_of("egress"), &[], &[]);
    let text = found.join("\n");
    assert!(text.contains("a cycle between files: ") && text.contains("error"), "{text}");
    assert!(text.contains("`error` uses `client`, a higher layer"), "{text}");

    // A folder-level cycle: two folders whose files use each other, while
    // no two files do.
    let sandbox = workspace().join("sandbox");
    let scratch = tempfile::tempdir().unwrap();
    copy_dir(&sandbox.join("src"), &scratch.path().join("src"));
    let planted = scratch.path().join("src/process.rs");
    let text = std::fs::read_to_string(&planted).unwrap();
    std::fs::write(&planted, format!("use crate::container::config::Runtime as _Planted;\n{text}")).unwrap();
    let planted = Target { edges: graph(&scratch.path().join("src/lib.rs")), ..target_named("nexo-sandbox lib") };
    let found = problems(&planted, layers_of("sandbox"), &[], &[]);
    let text = found.join("\n");
    assert!(text.contains("a cycle between folders: ") && text.contains("container"), "{text}");
    assert!(!text.contains("a cycle between files"), "no two files use each other: {text}");
    // Listed as known, the same cycle is expected, and it must still be there.
    let sets = cyclic_sets(&folded(&planted.edges, 1));
    let names: Vec<String> = sets[0].iter().map(name).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let known = [("nexo-sandbox lib", names.as_slice())];
    let expected = problems(&planted, layers_of("sandbox"), &known, &[]).join("\n");
    assert!(!expected.contains("cycle"), "{expected}");
    let target = Target { edges: graph(&sandbox.join("src/lib.rs")), ..target_named("nexo-sandbox lib") };
    let gone = problems(&target, layers_of("sandbox"), &known, &[]).join("\n");
    assert!(gone.contains("is gone; delete it from KNOWN_CYCLES"), "{gone}");

    // `super::super::` climbs two levels: a file cycle through it is found.
    let scratch = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a/mod.rs", "mod x;\n"),
        ("a/x.rs", "use super::super::b::Y;\n"),
        ("b.rs", "pub struct Y;\nuse crate::a::x as _;\n"),
    ] {
        let path = scratch.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let edges = graph(&scratch.path().join("lib.rs"));
    let key = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert!(edges[&key("a::x")].contains(&key("b")), "{edges:?}");
    assert_eq!(cyclic_sets(&edges), [BTreeSet::from([key("a::x"), key("b")])]);
}

fn target_named(name: &str) -> Target {
    let dir = name.split(' ').next().unwrap().trim_start_matches("nexo-").to_string();
    Target { name: name.into(), dir, edges: Edges::new() }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}
