//! `nexo new` (a plugin crate that builds anywhere) and `nexo init` (an
//! operator project). Templates live in `host/templates/` and are compiled in.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// What `nexo new` can make.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewKind {
    /// An agent (`agent-plugin` world).
    Agent,
    /// A skill shipped as a component (`skill-plugin` world).
    SkillComponent,
    /// A web-search backend (`search-backend-plugin` world).
    SearchBackend,
    /// A remote-sandbox adapter (`sandbox-provider-plugin` world).
    SandboxProvider,
    /// A durable workflow: not available yet.
    Workflow,
}

impl NewKind {
    /// The kind as written on the command line.
    pub fn label(self) -> &'static str {
        match self {
            NewKind::Agent => "agent",
            NewKind::SkillComponent => "skill-component",
            NewKind::SearchBackend => "search-backend",
            NewKind::SandboxProvider => "sandbox-provider",
            NewKind::Workflow => "workflow",
        }
    }

    /// The SDK feature of this kind's world.
    fn feature(self) -> &'static str {
        match self {
            NewKind::Agent => "agent",
            NewKind::SkillComponent => "skill",
            NewKind::SearchBackend => "search-backend",
            NewKind::SandboxProvider => "sandbox-provider",
            NewKind::Workflow => unreachable!("workflows have no template"),
        }
    }

    /// The template's files other than `Cargo.toml`, `Cargo.lock` and `.gitignore`.
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            NewKind::Agent => &[
                ("src/lib.rs", include_str!("../../templates/agent/lib.rs")),
                ("tests/script.json", include_str!("../../templates/agent/script.json")),
                ("tests/input.txt", include_str!("../../templates/agent/input.txt")),
                ("tests/expect.txt", include_str!("../../templates/agent/expect.txt")),
            ],
            NewKind::SkillComponent => &[
                ("src/lib.rs", include_str!("../../templates/skill-component/lib.rs")),
                ("SKILL.md", include_str!("../../templates/skill-component/SKILL.md")),
                ("references/checklist.md", include_str!("../../templates/skill-component/references/checklist.md")),
            ],
            NewKind::SearchBackend => &[
                ("src/lib.rs", include_str!("../../templates/search-backend/lib.rs")),
                ("tests/query.txt", include_str!("../../templates/search-backend/tests/query.txt")),
                ("tests/response.txt", include_str!("../../templates/search-backend/tests/response.txt")),
                ("tests/expect.txt", include_str!("../../templates/search-backend/tests/expect.txt")),
            ],
            NewKind::SandboxProvider => &[("src/lib.rs", include_str!("../../templates/sandbox-provider/lib.rs"))],
            NewKind::Workflow => &[],
        }
    }
}

/// Why `nexo new` or `nexo init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The `workflow` kind has no world yet.
    #[error(
        "`nexo new workflow` is not available yet: workflows need a durable-execution interface that \
         the nexo:plugin contract does not have yet. Use `nexo new agent NAME` for now"
    )]
    WorkflowUnavailable,
    /// The name breaks the plugin naming rule.
    #[error("invalid plugin name: {0}")]
    BadName(String),
    /// The destination exists and would be overwritten.
    #[error("{0} already exists and is not empty: choose another name or remove it")]
    Exists(PathBuf),
    /// A file `nexo init` would write is already there.
    #[error("{0} already exists: nexo init never overwrites a file; move it away or init another directory")]
    FileExists(PathBuf),
    /// The SDK could not be unpacked.
    #[error("{0}")]
    Sdk(String),
    /// Writing failed.
    #[error("cannot write {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Writes a plugin crate `dir` (named after its last component) of `kind`,
/// unpacking the SDK into `sdk_dir` first. Returns the files written.
pub fn new_plugin(kind: NewKind, dir: &Path, sdk_dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
    if kind == NewKind::Workflow {
        return Err(ScaffoldError::WorkflowUnavailable);
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    nexo::plugin::validate::name(&name).map_err(|p| ScaffoldError::BadName(p.problem))?;
    let non_empty = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(dir.exists());
    if non_empty {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    super::sdk::install(sdk_dir).map_err(ScaffoldError::Sdk)?;
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo_toml(&name, kind.feature(), sdk_dir)),
        ("Cargo.lock".to_string(), super::sdk::lock_for(&name)),
        (".gitignore".to_string(), "target/\n".to_string()),
    ];
    files.extend(kind.files().iter().map(|(path, text)| (path.to_string(), text.replace("{{name}}", &name))));
    write_all(dir, &files)
}

fn cargo_toml(name: &str, feature: &str, sdk_dir: &Path) -> String {
    // A TOML basic string: escape what would end or break it.
    let sdk = sdk_dir.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "# A nexo plugin. Build it with `nexo build`, test it with `nexo test`.\n\
         [package]\n\
         name = \"{name}\"\n\
         version = \"0.1.0\"\n\
         edition = \"2021\"\n\
         publish = false\n\
         \n\
         # A component is a C-style dynamic library for wasm32-wasip2.\n\
         [lib]\n\
         crate-type = [\"cdylib\"]\n\
         \n\
         [dependencies]\n\
         # The SDK that nexo {version} unpacked (`nexo new` writes it; set NEXO_SDK_DIR to move it).\n\
         # Exactly one world feature: a component carries the types of every world built into it.\n\
         nexo-sdk = {{ path = \"{sdk}\", features = [\"{feature}\"] }}\n\
         \n\
         # Its own workspace, so a parent directory's workspace does not capture it.\n\
         [workspace]\n\
         \n\
         {profile}",
        version = env!("CARGO_PKG_VERSION"),
        profile = super::sdk::release_profile(),
    )
}

/// Writes `nexo init`'s operator project into `dir`. Nothing is written if
/// any of its files exists.
pub fn init(dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
    let files = [
        ("nexo.toml".to_string(), include_str!("../../templates/init/nexo.toml").to_string()),
        ("agents/example.toml".to_string(), include_str!("../../templates/init/example.toml").to_string()),
        (".gitignore".to_string(), include_str!("../../templates/init/gitignore").to_string()),
    ];
    if let Some((path, _)) = files.iter().find(|(path, _)| dir.join(path).symlink_metadata().is_ok()) {
        return Err(ScaffoldError::FileExists(dir.join(path)));
    }
    let skills = dir.join("skills");
    std::fs::create_dir_all(&skills).map_err(|e| ScaffoldError::Io(skills.clone(), e))?;
    let mut written = write_all(dir, &files)?;
    written.push(skills);
    Ok(written)
}

fn write_all(dir: &Path, files: &[(String, String)]) -> Result<Vec<PathBuf>, ScaffoldError> {
    let mut written = Vec::new();
    for (path, text) in files {
        let dest = dir.join(path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| ScaffoldError::Io(parent.to_path_buf(), e))?;
        }
        // `create_new`: a file that appeared since the check is not overwritten.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&dest)
            .map_err(|e| ScaffoldError::Io(dest.clone(), e))?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(|e| ScaffoldError::Io(dest.clone(), e))?;
        written.push(dest);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config file with every setting uncommented.
    fn uncommented(text: &str) -> String {
        text.lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest)
                    if rest.starts_with('[') || rest.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')) =>
                {
                    rest
                }
                _ => line,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_init_config_parses_commented_and_uncommented() {
        let text = include_str!("../../templates/init/nexo.toml");
        toml::from_str::<nexo::config::ConfigFile>(text).unwrap();
        let all = uncommented(text);
        let parsed = toml::from_str::<nexo::config::ConfigFile>(&all);
        assert!(parsed.is_ok(), "{parsed:?}\n{all}");
        // Every key of every table appears, so none was forgotten.
        let keys = [
            "allow",
            "mode",
            "sandbox",
            "cwd",
            "image",
            "container-runtime",
            "shell-confinement",
            "fetch-hosts",
            "command-rules",
            "model",
            "provider",
            "base-url",
            "assume-model-exists",
            "script",
            "max-turns",
            "token-budget",
            "price",
            "budget-usd",
            "loop",
            "claude-binary",
            "claude-builtin-tools",
            "max-in-flight",
            "retain",
            "backend",
            "hosts",
            "allow-private",
            "settings",
            "api-key",
            "timeout-secs",
            "mcp-allow",
            "command",
            "args",
            "env",
            "confine",
            "network",
            "timeout",
            "connect-timeout",
            "url",
            "headers",
            "token-env",
            "token-file",
            "token-command",
            "token",
            "insecure",
        ];
        for key in keys {
            assert!(all.lines().any(|l| l.starts_with(&format!("{key} = "))), "missing `{key}`");
        }
    }

    #[test]
    fn new_checks_the_name_and_the_destination() {
        let tmp = tempfile::tempdir().unwrap();
        let sdk = tmp.path().join("sdk");
        let err = new_plugin(NewKind::Agent, &tmp.path().join("Bad_Name"), &sdk).unwrap_err();
        assert!(matches!(err, ScaffoldError::BadName(_)), "{err}");
        let busy = tmp.path().join("busy");
        std::fs::create_dir(&busy).unwrap();
        std::fs::write(busy.join("keep.txt"), "mine").unwrap();
        let err = new_plugin(NewKind::Agent, &busy, &sdk).unwrap_err();
        assert!(matches!(err, ScaffoldError::Exists(_)), "{err}");
        assert!(!sdk.exists(), "a refused `new` unpacks nothing");
        let err = new_plugin(NewKind::Workflow, &tmp.path().join("flow"), &sdk).unwrap_err();
        assert!(err.to_string().contains("not available yet"), "{err}");
    }

    #[test]
    fn new_writes_a_standalone_crate_on_the_unpacked_sdk() {
        let tmp = tempfile::tempdir().unwrap();
        let sdk = tmp.path().join("sdk dir \"quoted\"");
        let dir = tmp.path().join("my-search");
        new_plugin(NewKind::SearchBackend, &dir, &sdk).unwrap();
        let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap()).unwrap();
        let dep = &manifest["dependencies"]["nexo-sdk"];
        assert_eq!(dep["path"].as_str(), Some(sdk.to_str().unwrap()));
        assert_eq!(dep["features"].as_array().unwrap()[0].as_str(), Some("search-backend"));
        assert!(manifest.contains_key("workspace"));
        assert!(sdk.join("Cargo.toml").is_file());
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("name: \"my-search\".into()") && !lib.contains("{{"), "{lib}");
        // An empty directory is fine to fill.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        new_plugin(NewKind::Agent, &empty, &sdk).unwrap();
    }

    #[test]
    fn init_refuses_to_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        init(tmp.path()).unwrap();
        assert!(tmp.path().join("skills").is_dir() && tmp.path().join("agents/example.toml").is_file());
        std::fs::write(tmp.path().join("nexo.toml"), "# mine\n").unwrap();
        let err = init(tmp.path()).unwrap_err();
        assert!(matches!(err, ScaffoldError::FileExists(_)), "{err}");
        assert_eq!(std::fs::read_to_string(tmp.path().join("nexo.toml")).unwrap(), "# mine\n");
    }
}
