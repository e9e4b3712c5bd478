//! The module graph of `host/src` has no cycle: data flows one way, from
//! the manifest to the grant, the authority, the instance, the host-call
//! path and the loop. The test reads every source file, takes each path it
//! names (`crate::a::b`, `super::c`, a child module by name) as an edge to
//! the module that path lands in, and fails naming the cycle it finds.
//! `mod` declarations are not edges; comments and unit tests are skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate of the package: its root file and where its modules live.
struct Crate {
    name: &'static str,
    root: &'static str,
}

const CRATES: [Crate; 2] = [Crate { name: "nexo", root: "lib.rs" }, Crate { name: "bin", root: "main.rs" }];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as (module path, file).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut p = prefix.to_vec();
            if name != "mod" {
                p.push(name);
            }
            out.insert(p, path);
        }
    }
}

/// Code without comments, and without the unit tests at the end of a file
/// (their `super::` is the file itself).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The longest prefix of `path` that is a module.
fn land(path: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p))
}

/// Paths such as `a::b::c` starting at `at` in `text`, one per match, with
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

fn graph(krate: &Crate) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = BTreeMap::new();
    modules(&src(), &[], &mut files);
    // The binary's modules are `main.rs` and `cli/`; the library's the rest.
    let in_crate = |m: &Vec<String>| {
        let is_bin = m.first().is_some_and(|s| s == "cli" || s == "main");
        (krate.name == "bin") == is_bin
    };
    let files: BTreeMap<_, _> = files.into_iter().filter(|(m, _)| in_crate(m)).collect();
    let known: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &files {
        if file.ends_with(krate.root) {
            continue;
        }
        let text = code(&std::fs::read_to_string(file).unwrap());
        let is_mod_rs = file.ends_with("mod.rs");
        let parent = module[..module.len().saturating_sub(1)].to_vec();
        let mut targets = Vec::new();
        for p in paths_after(&text, "crate::") {
            targets.extend(land(&p, &known));
        }
        for p in paths_after(&text, "super::") {
            let mut full = parent.clone();
            full.extend(p);
            targets.extend(land(&full, &known).or_else(|| known.contains(&parent).then(|| parent.clone())));
        }
        // A `mod.rs` names its children by their bare names (`files::ReadFile`).
        if is_mod_rs {
            for child in known.iter().filter(|k| k.len() == module.len() + 1 && k.starts_with(module)) {
                let name = child.last().unwrap();
                let uses =
                    paths_after(&text, &format!("{name}::")).len() + paths_after(&text, &format!("self::{name}")).len();
                if uses > 0 {
                    targets.push(child.clone());
                }
            }
        }
        let own = edges.entry(module.clone()).or_default();
        own.extend(targets.into_iter().filter(|t| t != module && !t.is_empty()));
    }
    edges
}

/// A cycle in `edges`, if there is one.
fn cycle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(1) => {
                    let start = stack.iter().position(|n| n == next).unwrap();
                    let mut names: Vec<String> = stack[start..].iter().map(|n| n.join("::")).collect();
                    names.push(next.join("::"));
                    return Some(names);
                }
                Some(_) => {}
                None => {
                    if let Some(found) = visit(next, edges, state, stack) {
                        return Some(found);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node)
            && let Some(found) = visit(node, edges, &mut state, &mut Vec::new())
        {
            return Some(found);
        }
    }
    None
}

#[test]
fn the_host_s_module_graph_has_no_cycle() {
    for krate in &CRATES {
        let edges = graph(krate);
        assert!(edges.len() > 3, "{}: too few modules found; is the path right?", krate.name);
        if let Some(found) = cycle(&edges) {
            panic!("a module cycle in the {} crate: {}", krate.name, found.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_edges_and_cycles() {
    // The check must be able to fail: the graph it builds has the edges the
    // code has, and a cycle added to it is found.
    let mut edges = graph(&CRATES[0]);
    let key = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert!(edges[&key("capability::files")].contains(&key("host_call")), "{:?}", edges[&key("capability::files")]);
    assert!(edges[&key("world::agent")].contains(&key("capability::files")));
    assert!(edges[&key("world::agent")].contains(&key("world")), "a child naming `super::` items");
    edges.get_mut(&key("host_call")).unwrap().insert(key("world::agent"));
    let found = cycle(&edges).expect("the added edge closes a cycle");
    assert!(found.contains(&"host_call".to_string()), "{found:?}");
}
