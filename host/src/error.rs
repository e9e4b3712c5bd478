//! The host's errors, one type per layer: [`LoadError`] (reading, checking
//! and linking a component), [`RunError`] (running one), [`ConfigError`]
//! (the operator's settings), and the tool layer's [`ToolError`], which is
//! the WIT `tool-error` itself. Each message names the cause and, where
//! there is one, the fix. The host keeps running after any of them.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::bindings::ToolError;
use crate::manifest::PluginKind;

/// Why a component could not be loaded: its file, its format, its world,
/// its imports or its self-description.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read plugin {}: {source}", path.display())]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The file is not WebAssembly at all.
    #[error(
        "{} is not a WebAssembly file: it does not start with the `\\0asm` magic bytes. \
         Pass the `.wasm` component that `nexo build` (or `cargo build --target wasm32-wasip2`) produced",
        path.display()
    )]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
    },

    /// The file is a core module, not a component.
    #[error(
        "{} is a core WebAssembly module, not a component. Build the plugin for the \
         wasm32-wasip2 target (`nexo build`), or wrap the module with `wasm-tools component new`",
        path.display()
    )]
    CoreModule {
        /// The plugin file.
        path: PathBuf,
    },

    /// The file is a precompiled artifact, which nexo never loads from a
    /// plugin path because it is native code.
    #[error(
        "{} is a precompiled wasmtime artifact; nexo loads only `.wasm` components \
         and compiles them itself. Pass the original `.wasm` file",
        path.display()
    )]
    Precompiled {
        /// The plugin file.
        path: PathBuf,
    },

    /// The component failed validation or compilation.
    #[error("{} is not a valid WebAssembly component: {reason}", path.display())]
    Invalid {
        /// The plugin file.
        path: PathBuf,
        /// What the validator said.
        reason: String,
    },

    /// The component exports none of the nexo worlds' interfaces.
    #[error(
        "{} is a component of a world nexo does not host: it exports [{}], but a nexo plugin \
         exports exactly one of `nexo:plugin/agent`, `nexo:plugin/skill`, \
         `nexo:plugin/search-backend` or `nexo:plugin/sandbox-provider` (version 0.1.x). Build it against the WIT files in `wit/`",
        path.display(),
        exports.join(", ")
    )]
    UnknownWorld {
        /// The plugin file.
        path: PathBuf,
        /// What it does export.
        exports: Vec<String>,
    },

    /// The component exports more than one nexo world's interface.
    #[error(
        "{} exports the interfaces of several nexo worlds ({}); a plugin implements exactly one. \
         With nexo-sdk, enable only one of the features `agent`, `skill` and `search-backend`",
        path.display(),
        found.join(", ")
    )]
    SeveralWorlds {
        /// The plugin file.
        path: PathBuf,
        /// The nexo interfaces it exports.
        found: Vec<String>,
    },

    /// The component targets a version of the contract this host lacks.
    #[error("{}", unsupported_version(path, found))]
    UnsupportedVersion {
        /// The plugin file.
        path: PathBuf,
        /// The interface and version it exports.
        found: String,
    },

    /// The component imports something its world does not offer.
    #[error("the {kind} in {} imports `{import}`, which {why}", path.display())]
    ForbiddenImport {
        /// The plugin file.
        path: PathBuf,
        /// The detected kind.
        kind: PluginKind,
        /// The import's name.
        import: String,
        /// Why it is refused and what to do.
        why: String,
    },

    /// The component's imports do not match what this host provides, for
    /// example because it was built against another version of the WIT.
    #[error(
        "the {kind} in {} cannot be linked: {reason}. It was probably built against a different \
         version of the nexo WIT; rebuild it against this host's (`nexo wit` prints it)",
        path.display()
    )]
    Link {
        /// The plugin file.
        path: PathBuf,
        /// The detected kind.
        kind: PluginKind,
        /// What wasmtime found.
        reason: String,
    },

    /// The component lacks an export its world requires, or has it with the
    /// wrong type.
    #[error(
        "the {kind} in {} does not match the `{world}` world: {detail}. \
         Build it against the WIT files in `wit/` (nexo-sdk does this for you)",
        path.display()
    )]
    MissingExport {
        /// The plugin file.
        path: PathBuf,
        /// The detected kind.
        kind: PluginKind,
        /// The world it should implement.
        world: &'static str,
        /// What wasmtime found missing or mistyped.
        detail: String,
    },

    /// The component declares more minimum memory than the memory cap
    /// allows: it is valid, and would run under a higher cap.
    #[error(
        "{} needs at least {} MiB of memory (the minimum its linear memory declares), more than the cap of {} MiB: \
         raise the run's memory cap to at least {} MiB",
        path.display(),
        mib_up(*minimum),
        *cap >> 20,
        mib_up(*minimum)
    )]
    MemoryTooSmall {
        /// The plugin file.
        path: PathBuf,
        /// The declared minimum, in bytes.
        minimum: u64,
        /// The cap, in bytes.
        cap: usize,
    },

    /// The plugin's self-description breaks a rule.
    #[error("the {kind} in {} has an invalid {field}: {problem}", path.display())]
    BadManifest {
        /// The plugin file.
        path: PathBuf,
        /// The detected kind.
        kind: PluginKind,
        /// The field that is wrong.
        field: &'static str,
        /// The rule it breaks, and the value.
        problem: String,
    },

    /// The plugin is of another kind than the operation needs.
    #[error("{} is {}, not {}{hint}", path.display(), found.with_article(), expected.with_article())]
    WrongKind {
        /// The plugin file.
        path: PathBuf,
        /// The kind the operation needs.
        expected: PluginKind,
        /// The kind the plugin is.
        found: PluginKind,
        /// A pointer to what to do instead.
        hint: &'static str,
    },

    /// Describing the plugin (its manifest, metadata or info export) failed.
    #[error(transparent)]
    Describe(Box<RunError>),
}

/// Why a run failed: a trap, a deadline, the memory cap, the agent's own
/// error, or something it needs that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plugin trapped (a panic, an out-of-bounds access, `unreachable`).
    #[error("plugin `{plugin}` trapped in `{function}`: {trap}{}{}", wasm_backtrace(backtrace), guest_output(stderr))]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// The export that was running.
        function: String,
        /// What trapped, for example "wasm `unreachable` instruction executed".
        trap: String,
        /// The wasm backtrace, when there is one: one frame a line, with
        /// the function's name where the component's name section has it.
        backtrace: String,
        /// What the plugin wrote to stderr, such as its panic message.
        stderr: String,
    },

    /// The plugin ran past its deadline and was stopped. A recorded run
    /// names the setting to raise in its front end's words
    /// ([`crate::hint::Fix::TimeLimit`]); the command line adds its flag.
    #[error(
        "plugin `{plugin}` was stopped in `{function}` after its {} s deadline. \
         If the work is legitimate, raise the run's time limit",
        limit.as_secs_f64()
    )]
    Deadline {
        /// The plugin's name.
        plugin: String,
        /// The export that was running.
        function: String,
        /// The deadline.
        limit: Duration,
    },

    /// The plugin asked for more memory than its cap.
    #[error(
        "plugin `{plugin}` was stopped in `{function}`: it tried to grow its memory to {requested} bytes, \
         past the cap of {cap} bytes. If it needs more, raise the run's memory cap"
    )]
    MemoryLimit {
        /// The plugin's name.
        plugin: String,
        /// The export that was running.
        function: String,
        /// The size it asked for.
        requested: usize,
        /// The cap.
        cap: usize,
    },

    /// The plugin's memory would take its tenant's instances, together,
    /// past the tenant's total memory quota (`nexo serve`).
    #[error(
        "plugin `{plugin}` was stopped in `{function}`: growing its memory by {requested} bytes would take its \
         tenant's instances past their total of {cap} bytes ({in_use} in use). Wait for other runs to end, or ask \
         the operator for a higher `memory-mib` quota"
    )]
    SharedMemoryLimit {
        /// The plugin's name.
        plugin: String,
        /// The export that was running.
        function: String,
        /// The growth it asked for.
        requested: usize,
        /// What the tenant's instances held then.
        in_use: usize,
        /// The tenant's total.
        cap: usize,
    },

    /// The guest used up its CPU allowance: in `nexo serve`, what was left
    /// of its tenant's CPU-tick quotas for the run and the hour.
    #[error(
        "plugin `{plugin}` was stopped in `{function}`: it ran for {used} CPU ticks, its allowance of {limit} \
         (what was left of the tenant's `cpu-ticks-per-run` and `cpu-ticks-per-hour` quotas). Start it again when \
         the hour's quota renews, or ask the operator for higher quotas"
    )]
    CpuQuota {
        /// The plugin's name.
        plugin: String,
        /// The export that was running.
        function: String,
        /// The ticks it ran for.
        used: u64,
        /// Its allowance.
        limit: u64,
    },

    /// The store of recorded runs failed: the run could not be recorded,
    /// or its record could not be read or updated.
    #[error("{0}")]
    Store(#[from] nexo_store::StoreError),

    /// A skill the agent names could not be loaded.
    #[error("agent `{agent}` names a skill that cannot be loaded: {reason}")]
    Skill {
        /// The agent's name.
        agent: String,
        /// What is wrong, naming the file and the rule (or the path looked for).
        reason: String,
    },

    /// The plugin could not be instantiated, for example because the
    /// instance pool is full.
    #[error("cannot start an instance of plugin `{plugin}`: {reason}")]
    Instantiate {
        /// The plugin's name.
        plugin: String,
        /// What failed.
        reason: String,
    },

    /// The agent ran and reported that it failed.
    #[error("agent `{plugin}` failed: {reason}")]
    AgentFailed {
        /// The plugin's name.
        plugin: String,
        /// The agent's own explanation.
        reason: String,
    },

    /// The search backend ran and reported an error.
    #[error("search backend `{plugin}` failed: {reason}")]
    SearchFailed {
        /// The plugin's name.
        plugin: String,
        /// The backend's explanation.
        reason: String,
    },

    /// The plugin cannot serve this run, for example because it is of
    /// another kind.
    #[error(transparent)]
    Load(Box<LoadError>),

    /// The operator's settings for this run cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl LoadError {
    /// The memory cap, in MiB, under which the component would load, when
    /// the cap is why it did not.
    pub fn memory_needed_mib(&self) -> Option<u64> {
        match self {
            LoadError::MemoryTooSmall { minimum, .. } => Some(mib_up(*minimum)),
            _ => None,
        }
    }
}

impl RunError {
    /// The memory cap, in MiB, under which the component would load, when
    /// the cap is why it did not.
    pub fn memory_needed_mib(&self) -> Option<u64> {
        match self {
            RunError::Load(e) => e.memory_needed_mib(),
            _ => None,
        }
    }

    /// Whether the same run may pass if it is tried again. A trap, the
    /// memory cap, a CPU quota, a skill, plugin or setting that cannot be
    /// used will fail the same way (and cost again), and a retry after the
    /// deadline would stretch the operator's limit to several times its
    /// length. A store error, a full pool or the tenant's other instances
    /// may be gone the next time, and an agent's or backend's own failure
    /// (often a model or a service that could not be reached) may not recur.
    pub fn may_pass_on_retry(&self) -> bool {
        match self {
            RunError::Trap { .. }
            | RunError::Deadline { .. }
            | RunError::MemoryLimit { .. }
            | RunError::CpuQuota { .. }
            | RunError::Skill { .. }
            | RunError::Load(_)
            | RunError::Config(_) => false,
            RunError::SharedMemoryLimit { .. }
            | RunError::Store(_)
            | RunError::Instantiate { .. }
            | RunError::AgentFailed { .. }
            | RunError::SearchFailed { .. } => true,
        }
    }
}

impl From<LoadError> for RunError {
    fn from(e: LoadError) -> Self {
        RunError::Load(Box::new(e))
    }
}

impl From<RunError> for LoadError {
    fn from(e: RunError) -> Self {
        LoadError::Describe(Box::new(e))
    }
}

/// What is wrong with the operator's settings: the config file, a flag, a
/// grant. Nothing has run when one of these is reported.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML, or has unknown or mistyped keys.
    #[error("the config file {} is invalid: {problem}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, column and rule, with a short excerpt.
        problem: String,
    },
    /// One setting cannot be used; the message names it and the fix.
    #[error("{problem}")]
    Invalid {
        /// The setting, as the operator writes it (`--image`, `[search]`, `fetch-hosts`).
        setting: &'static str,
        /// What is wrong, and how to fix it.
        problem: String,
    },
    /// The operator's network grant for a component cannot be used.
    #[error("the network grant for `{plugin}` is invalid: {reason}")]
    Egress {
        /// The plugin's name.
        plugin: String,
        /// What is wrong, and how to fix it.
        reason: String,
    },
}

impl ConfigError {
    /// A problem with `setting`.
    pub fn invalid(setting: &'static str, problem: impl Into<String>) -> Self {
        ConfigError::Invalid { setting, problem: problem.into() }
    }
}

impl ToolError {
    /// The error's kind as events and logs name it: `denied`,
    /// `approval-required`, `security`, `unsupported`, `not-found`,
    /// `invalid-input`, `timeout` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Denied(_) => "denied",
            ToolError::ApprovalRequired(_) => "approval-required",
            ToolError::Security(_) => "security",
            ToolError::Unsupported(_) => "unsupported",
            ToolError::NotFound(_) => "not-found",
            ToolError::InvalidInput(_) => "invalid-input",
            ToolError::Timeout(_) => "timeout",
            ToolError::Failed(_) => "failed",
        }
    }

    /// The message, which names the cause and the fix.
    pub fn message(&self) -> &str {
        match self {
            ToolError::Denied(m)
            | ToolError::ApprovalRequired(m)
            | ToolError::Security(m)
            | ToolError::Unsupported(m)
            | ToolError::NotFound(m)
            | ToolError::InvalidInput(m)
            | ToolError::Timeout(m)
            | ToolError::Failed(m) => m,
        }
    }

    /// `kind: message`, as the model reads it. (The generated `Display`
    /// prints the variant's debug form.)
    pub fn text(&self) -> String {
        let kind = match self {
            ToolError::ApprovalRequired(_) => "approval required",
            ToolError::InvalidInput(_) => "invalid input",
            ToolError::NotFound(_) => "not found",
            other => other.kind(),
        };
        format!("{kind}: {}", self.message())
    }
}

impl From<nexo_sandbox::SandboxError> for ToolError {
    fn from(e: nexo_sandbox::SandboxError) -> Self {
        use nexo_sandbox::SandboxError as S;
        match e {
            S::Security(m) => ToolError::Security(m),
            S::NotFound(m) => ToolError::NotFound(m),
            S::Unsupported(m) => ToolError::Unsupported(m),
            S::InvalidInput(m) => ToolError::InvalidInput(m),
            S::Timeout(m) => ToolError::Timeout(m),
            S::Config(m) | S::Failed(m) => ToolError::Failed(m),
        }
    }
}

/// Bytes in MiB, rounded up.
fn mib_up(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

fn wasm_backtrace(frames: &str) -> String {
    if frames.trim().is_empty() { String::new() } else { format!("\nwasm backtrace:\n{frames}") }
}

fn guest_output(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!("\nplugin stderr:\n{stderr}") }
}

/// Says whether an unsupported contract version is newer or older than the
/// host's, since the fixes differ: upgrade nexo, or rebuild the plugin.
fn unsupported_version(path: &std::path::Path, found: &str) -> String {
    let host = crate::manifest::CONTRACT_VERSION;
    let version = found.split_once('@').map_or("", |(_, v)| v);
    let key = |v: &str| v.split('.').map(|n| n.parse::<u64>().unwrap_or(0)).collect::<Vec<_>>();
    let (path, newer) = (path.display(), key(version) > key(host));
    if version.is_empty() {
        format!(
            "{path} exports `{found}` without a version, but this host supports `nexo:plugin@0.1.x`. Rebuild the \
             plugin with the WIT files this nexo ships (`nexo wit`)"
        )
    } else if newer {
        format!(
            "{path} was built against `{found}`, a newer contract than this host knows (`nexo:plugin@{host}`, \
             accepting 0.1.x). Upgrade nexo, or rebuild the plugin against the WIT this nexo ships (`nexo wit`)"
        )
    } else {
        format!(
            "{path} was built against `{found}`, an older contract than this host supports (`nexo:plugin@0.1.x`). \
             Rebuild the plugin with the WIT files this nexo ships (`nexo wit`)"
        )
    }
}
