//! Sandboxes: *where* an agent's tools act.
//!
//! Every sandbox implements [`Sandbox`]: read, write, glob, exec and close,
//! plus what it supports and how it describes itself to the model. The
//! permission gate (in the host) decides *whether* an action may happen; the
//! sandbox decides *where* it happens and refuses anything that would leave
//! it.
//!
//! - [`VirtualSandbox`]: an in-memory filesystem with no host access and no
//!   shell. The default.
//! - [`LocalSandbox`]: a host directory, opened as a cap-std [`Dir`](cap_std::fs::Dir)
//!   so escapes are refused by construction. Its shell commands, and the
//!   programs confined with [`ProgramConfinement`], see besides it only the
//!   read-only [`SystemView`].
//!
//! Paths are relative to the sandbox root; an absolute path is accepted only
//! if it lies inside the root as the sandbox presents it.
//!
//! Host processes a sandbox starts (shell commands, container CLIs) run under
//! one supervisor (the [`process`] module): the same time limit handling, the
//! same output cap ([`MAX_OUTPUT_BYTES`]) and cut note, and none of the host's
//! open descriptors: see [`close_inherited_fds`], which the host can use for
//! its own child processes too.

mod confine;
mod container;
mod landlock_abi;
mod local;
pub mod network;
mod path;
pub mod process;
mod program;
mod remote;
pub mod shell;
mod view;
mod virtual_fs;

use std::time::{Duration, SystemTime};

pub use container::{
    Bind, CONTAINER_LABEL, ContainerConfig, ContainerSandbox, DEFAULT_CWD, DEFAULT_PIDS_LIMIT, Network, Runtime,
    find_on_path,
};
pub use local::LocalSandbox;
pub use network::{Gateway, ListenerReceiver, PROXY_ADDR, PrivateNet, Serving, proxy_env};
pub use path::normalize;
pub use process::{MAX_OUTPUT_BYTES, close_inherited_fds, close_inherited_fds_but};
pub use program::{ConfinedCommand, ProgramConfinement, SpawnResources};
pub use remote::{RemoteClient, RemoteSandbox};
pub use shell::{Confinement, ShellLimits, ShellPolicy};
pub use view::{DEFAULT_SYSTEM_PATHS, SystemView};
pub use virtual_fs::VirtualSandbox;

/// The most bytes of a file a sandbox reads or writes in one call.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// Why a sandbox refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The path or target escapes the sandbox.
    #[error("{0}")]
    Security(String),
    /// The file does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The sandbox cannot do this at all.
    #[error("{0}")]
    Unsupported(String),
    /// The arguments are malformed.
    #[error("{0}")]
    InvalidInput(String),
    /// The operation ran past its time limit.
    #[error("{0}")]
    Timeout(String),
    /// The sandbox is misconfigured (a missing binary, a bad option).
    #[error("{0}")]
    Config(String),
    /// The operation was attempted and failed.
    #[error("{0}")]
    Failed(String),
}

/// A file's contents as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileText {
    /// The text.
    pub text: String,
    /// The modification time, where the sandbox has one (real filesystems).
    pub mtime: Option<SystemTime>,
}

/// What the sandbox knows about an existing regular file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// The modification time, where the sandbox has one.
    pub mtime: Option<SystemTime>,
}

/// What a command printed and how it ended. The local and container
/// sandboxes decode each stream lossily and keep it up to
/// [`MAX_OUTPUT_BYTES`], a cut ending with a note saying so
/// (`[stdout cut at 4194304 bytes]`); a remote sandbox's output is as its
/// client returns it. The host's truncation routine shortens it for the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// Exit status; -1 when killed by a signal.
    pub status: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Where an agent's tools act.
///
/// Methods block; the host calls them off its async threads. Implementations
/// must refuse any path that leaves the sandbox with
/// [`SandboxError::Security`].
pub trait Sandbox: Send + Sync {
    /// A short name: `virtual`, `local`, `container` or `remote`.
    fn name(&self) -> &'static str;

    /// Whether [`Sandbox::exec`] can run commands. When it cannot, the host
    /// does not offer the shell tool at all.
    fn supports_shell(&self) -> bool;

    /// Whether [`Sandbox::exec`]'s commands reach the network: what makes
    /// the shell a way to send data out. Default: whenever it runs commands.
    fn shell_network(&self) -> bool {
        self.supports_shell()
    }

    /// One plain-text paragraph telling the model where it runs, or `None`
    /// (the virtual sandbox says nothing). It speaks of the shell only when
    /// `shell` says the run offers the shell tool: the model is told only
    /// of tools it has.
    fn instructions(&self, shell: bool) -> Option<String>;

    /// Reads a UTF-8 text file: a regular file of at most
    /// [`MAX_FILE_BYTES`], counted as read. A FIFO, device or socket is
    /// refused with [`SandboxError::InvalidInput`] without being read.
    fn read(&self, path: &str) -> Result<FileText, SandboxError>;

    /// Says whether a file exists, and its modification time. A FIFO,
    /// device or socket is refused with [`SandboxError::InvalidInput`].
    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError>;

    /// Creates or replaces a file, creating parent directories. An existing
    /// FIFO, device or socket is refused with [`SandboxError::InvalidInput`]
    /// and left untouched.
    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError>;

    /// Lists files matching a glob pattern, relative to the root, sorted;
    /// at most [`MAX_GLOB_MATCHES`], and says when it cut the list.
    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError>;

    /// Runs a shell command with a time limit.
    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError>;

    /// Runs a shell command whose only network is `gateway`: what it
    /// connects to at [`PROXY_ADDR`] (named in its `HTTP_PROXY` and
    /// `HTTPS_PROXY`) is the gateway's to serve, and nothing else is
    /// reachable. Default: refused, for a sandbox that cannot confine a
    /// command's network that way.
    fn exec_with_network(
        &self,
        command: &str,
        timeout: Duration,
        gateway: &dyn Gateway,
    ) -> Result<ExecOutput, SandboxError> {
        let _ = (command, timeout, gateway);
        Err(SandboxError::Unsupported(format!(
            "the {} sandbox cannot give a command network through nexo's proxy; run it in the local sandbox",
            self.name()
        )))
    }

    /// Releases what the sandbox holds (a container, a connection).
    /// Idempotent.
    fn close(&self) -> Result<(), SandboxError>;

    /// The host directory behind the sandbox, if it is one. The host preopens
    /// it into the agent component so WASI file access sees the same files.
    fn host_root(&self) -> Option<&std::path::Path> {
        None
    }

    /// Whether an operation may block its thread (on a disk, a process or a
    /// connection). The host moves such operations off its async threads;
    /// one that never blocks is called in place, which saves a thread hop
    /// per tool call. Default: it may block.
    fn blocks(&self) -> bool {
        true
    }
}

/// Compiles a glob pattern the way every sandbox matches it: `*` stays within
/// one path segment, `**` crosses segments, and matching is on `/`-separated
/// paths relative to the root.
pub fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher, SandboxError> {
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Err(SandboxError::InvalidInput("the glob pattern is empty".into()));
    }
    let pattern = pattern.trim_start_matches("./");
    if pattern.starts_with('/') || pattern.split('/').any(|s| s == "..") {
        return Err(SandboxError::Security(format!(
            "glob pattern {pattern:?} reaches outside the sandbox; use a pattern relative to its root"
        )));
    }
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| SandboxError::InvalidInput(format!("bad glob pattern {pattern:?}: {e}")))
}

/// The most matches a glob returns; past it, the list is cut.
pub const MAX_GLOB_MATCHES: usize = 1000;

/// What a glob found: the first [`MAX_GLOB_MATCHES`] paths, sorted, and
/// whether more exist.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct GlobMatches {
    /// The matching paths, relative to the root, sorted.
    pub paths: Vec<String>,
    /// More files matched than `paths` holds, or the walk stopped before it
    /// saw every file: the model must narrow the pattern to see the rest.
    pub truncated: bool,
}

impl GlobMatches {
    /// Sorts and dedups `paths` and cuts them at [`MAX_GLOB_MATCHES`];
    /// `walk_cut` says the listing behind them was already incomplete.
    pub fn new(mut paths: Vec<String>, walk_cut: bool) -> Self {
        paths.sort();
        paths.dedup();
        let truncated = walk_cut || paths.len() > MAX_GLOB_MATCHES;
        paths.truncate(MAX_GLOB_MATCHES);
        GlobMatches { paths, truncated }
    }
}

/// The refusal for a path that is not a regular file or a directory.
pub(crate) fn not_regular(path: &str, kind: &str) -> SandboxError {
    SandboxError::InvalidInput(format!("{path} is {kind}; the file tools read and write only regular files"))
}
