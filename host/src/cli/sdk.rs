//! The guest SDK (`plugins/sdk`) and the WIT, carried inside the binary so
//! that `nexo new` works anywhere and offline. They are unpacked once per nexo
//! version into a directory that generated crates depend on by path.
//!
//! `include_str!` makes cargo rebuild nexo whenever one of these files changes;
//! a unit test fails if `plugins/sdk/src` gains a file this list lacks.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The SDK's sources, by path inside the SDK directory. `Cargo.toml` is
/// generated from these by [`manifest`].
const SOURCES: &[(&str, &str)] = &[
    ("src/lib.rs", include_str!("../../../plugins/sdk/src/lib.rs")),
    ("src/agent.rs", include_str!("../../../plugins/sdk/src/agent.rs")),
    ("src/durable.rs", include_str!("../../../plugins/sdk/src/durable.rs")),
    ("src/hook.rs", include_str!("../../../plugins/sdk/src/hook.rs")),
    ("src/provider.rs", include_str!("../../../plugins/sdk/src/provider.rs")),
    ("src/search.rs", include_str!("../../../plugins/sdk/src/search.rs")),
    ("src/skill.rs", include_str!("../../../plugins/sdk/src/skill.rs")),
];

/// The SDK's own manifest, which inherits from the plugins workspace.
const SDK_MANIFEST: &str = include_str!("../../../plugins/sdk/Cargo.toml");
/// The plugins workspace: the values the SDK inherits, and the release profile.
const PLUGINS_MANIFEST: &str = include_str!("../../../plugins/Cargo.toml");
/// The plugins workspace's lock file: the versions the first-party plugins build with.
const PLUGINS_LOCK: &str = include_str!("../../../plugins/Cargo.lock");

/// The environment variable that names the SDK directory itself.
pub const SDK_DIR_ENV: &str = "NEXO_SDK_DIR";

/// Where the SDK goes: `$NEXO_SDK_DIR`, else
/// `$XDG_DATA_HOME/nexo/sdk/<version>`, else `~/.local/share/nexo/sdk/<version>`.
pub fn default_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(SDK_DIR_ENV).filter(|d| !d.is_empty()) {
        return absolute(Path::new(&dir));
    }
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local").join("share"),
            None => return Err(format!("neither $HOME nor $XDG_DATA_HOME is set: set ${SDK_DIR_ENV} to a directory")),
        },
    };
    absolute(&data.join("nexo").join("sdk").join(env!("CARGO_PKG_VERSION")))
}

fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("cannot resolve {}: {e}", path.display()))
}

/// Every file of the unpacked SDK, by relative path.
pub fn files() -> Result<Vec<(String, String)>, String> {
    let mut files = vec![("Cargo.toml".to_string(), manifest()?)];
    files.extend(SOURCES.iter().map(|(path, text)| (path.to_string(), (*text).to_string())));
    files.extend(super::wit::FILES.iter().map(|(name, text)| (format!("wit/{name}"), (*text).to_string())));
    Ok(files)
}

/// A SHA-256 over every path and content, so two SDKs compare by one value.
fn digest(files: &[(String, String)]) -> String {
    let mut hash = Sha256::new();
    for (path, text) in files {
        for part in [path.as_bytes(), text.as_bytes()] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
    }
    hex::encode(hash.finalize())
}

/// The SDK's `Cargo.toml`, standalone: every `workspace = true` value is
/// replaced by the plugins workspace's.
fn manifest() -> Result<String, String> {
    let workspace: toml::Table = toml::from_str(PLUGINS_MANIFEST).map_err(|e| format!("plugins/Cargo.toml: {e}"))?;
    let mut sdk: toml::Table = toml::from_str(SDK_MANIFEST).map_err(|e| format!("plugins/sdk/Cargo.toml: {e}"))?;
    let ws = workspace.get("workspace").and_then(toml::Value::as_table);
    for (section, inherited) in [("package", "package"), ("dependencies", "dependencies")] {
        let from = ws.and_then(|w| w.get(inherited)).and_then(toml::Value::as_table);
        let Some(table) = sdk.get_mut(section).and_then(toml::Value::as_table_mut) else { continue };
        for (key, value) in table.iter_mut() {
            let inherits = value.as_table().and_then(|t| t.get("workspace")).and_then(toml::Value::as_bool);
            if inherits == Some(true) {
                *value = from
                    .and_then(|f| f.get(key))
                    .cloned()
                    .ok_or_else(|| format!("the SDK inherits `{key}`, which the plugins workspace lacks"))?;
            }
        }
    }
    // `[package]` first, as people write it; toml's tables are sorted by key.
    let mut body = String::new();
    let mut keys: Vec<String> = sdk.keys().cloned().collect();
    keys.sort_by_key(|k| k != "package");
    for key in keys {
        let mut one = toml::Table::new();
        one.insert(key.clone(), sdk[&key].clone());
        body.push_str(&toml::to_string(&one).map_err(|e| e.to_string())?);
        body.push('\n');
    }
    Ok(format!(
        "# The nexo guest SDK, unpacked by nexo {}. Do not edit: nexo checks this\n\
         # directory by content hash and refuses to use a changed copy.\n\n{}",
        env!("CARGO_PKG_VERSION"),
        body.trim_end()
    ))
}

/// The plugins workspace's release profile, for generated crates.
pub fn release_profile() -> String {
    let profile = toml::from_str::<toml::Table>(PLUGINS_MANIFEST)
        .ok()
        .and_then(|t| t.get("profile")?.get("release").cloned())
        .and_then(|p| p.as_table().cloned())
        .unwrap_or_default();
    let mut wrapper = toml::Table::new();
    let mut release = toml::Table::new();
    release.insert("release".into(), toml::Value::Table(profile));
    wrapper.insert("profile".into(), toml::Value::Table(release));
    toml::to_string(&wrapper).unwrap_or_default()
}

/// A `Cargo.lock` for a crate `package` that depends only on the SDK: the
/// plugins workspace's lock without its other members, so the generated crate
/// builds with exactly the registry versions nexo's own plugins use. Cargo
/// drops the entries the crate does not need on its first build.
pub fn lock_for(package: &str) -> String {
    let mut blocks = PLUGINS_LOCK.split("\n[[package]]\n");
    let header = blocks.next().unwrap_or_default().trim_end();
    let mut out = format!("{header}\n");
    for block in blocks {
        let is_member = !block.contains("\nsource = ");
        if is_member && !block.starts_with("name = \"nexo-sdk\"\n") {
            continue;
        }
        out.push_str("\n[[package]]\n");
        out.push_str(block.trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\n[[package]]\nname = \"{package}\"\nversion = \"0.1.0\"\ndependencies = [\n \"nexo-sdk\",\n]\n"
    ));
    out
}

/// Makes sure `dir` holds exactly this nexo's SDK, unpacking it if absent.
/// A directory with other content is an error, never overwritten: the user
/// may have edited it, or another nexo version wrote it.
pub fn install(dir: &Path) -> Result<(), String> {
    let files = files()?;
    let want = digest(&files);
    if dir.exists() {
        return verify(dir, &files, &want);
    }
    let parent = dir.parent().ok_or_else(|| format!("{} has no parent directory", dir.display()))?;
    std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Unpack beside the final place and rename: a reader sees all or nothing.
    let staging = tempfile::Builder::new()
        .prefix(".nexo-sdk-")
        .tempdir_in(parent)
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    for (path, text) in &files {
        let dest = staging.path().join(path);
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        }
        std::fs::write(&dest, text).map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
    }
    match std::fs::rename(staging.path(), dir) {
        Ok(()) => {
            // The rename moved the directory; nothing is left to clean up.
            let _ = staging.keep();
            Ok(())
        }
        // Another nexo unpacked it first; its copy must be the same.
        Err(_) if dir.exists() => verify(dir, &files, &want),
        Err(e) => Err(format!("cannot move the SDK into {}: {e}", dir.display())),
    }
}

fn verify(dir: &Path, files: &[(String, String)], want: &str) -> Result<(), String> {
    let on_disk: Vec<(String, String)> = files
        .iter()
        .map(|(path, _)| (path.clone(), std::fs::read_to_string(dir.join(path)).unwrap_or_default()))
        .collect();
    if digest(&on_disk) == want {
        return Ok(());
    }
    let changed: Vec<&str> =
        files.iter().zip(&on_disk).filter(|(a, b)| a.1 != b.1).map(|(a, _)| a.0.as_str()).collect();
    Err(format!(
        "{} exists but is not the SDK of nexo {} (it differs in {}): remove the directory so nexo can unpack \
         it again, or set ${SDK_DIR_ENV} to another directory",
        dir.display(),
        env!("CARGO_PKG_VERSION"),
        changed.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sdk_source_file_is_embedded() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk/src");
        let mut on_disk: Vec<String> = std::fs::read_dir(src)
            .unwrap()
            .map(|e| format!("src/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> =
            SOURCES.iter().map(|(p, _)| p.to_string()).filter(|p| p.starts_with("src/")).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "add the new SDK file to SOURCES in host/src/cli/sdk.rs");
    }

    #[test]
    fn the_manifest_is_standalone() {
        let text = manifest().unwrap();
        assert!(!text.contains("workspace"), "{text}");
        let table: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(table["package"]["name"].as_str(), Some("nexo-sdk"));
        assert_eq!(table["package"]["version"].as_str(), Some("0.1.0"));
        assert!(table["dependencies"]["wit-bindgen"]["version"].as_str().is_some());
        assert!(table["features"].get("search-backend").is_some());
    }

    #[test]
    fn the_lock_keeps_registry_packages_and_the_sdk_only() {
        let lock = lock_for("my-agent");
        let parsed: toml::Table = toml::from_str(&lock).unwrap();
        let names: Vec<&str> =
            parsed["package"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"nexo-sdk") && names.contains(&"wit-bindgen") && names.contains(&"my-agent"));
        assert!(!names.contains(&"hello") && !names.contains(&"searxng"), "{names:?}");
    }

    #[test]
    fn install_unpacks_once_and_refuses_a_changed_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sdk").join("0.1.0");
        install(&dir).unwrap();
        for (name, text) in super::super::wit::FILES {
            assert_eq!(std::fs::read_to_string(dir.join("wit").join(name)).unwrap(), *text);
        }
        install(&dir).unwrap();
        std::fs::write(dir.join("src/agent.rs"), "// edited\n").unwrap();
        let err = install(&dir).unwrap_err();
        assert!(err.contains("differs in src/agent.rs"), "{err}");
        assert_eq!(std::fs::read_to_string(dir.join("src/agent.rs")).unwrap(), "// edited\n");
    }
}
