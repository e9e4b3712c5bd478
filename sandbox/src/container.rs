//! The container sandbox: an agent's tools run inside a throwaway OCI
//! container, driven through the `docker` CLI (or Apple's `container` CLI).
//!
//! Every call is a separate CLI process built from an argv array; no shell
//! ever sees a string assembled from a tool's arguments. Paths are checked
//! lexically against the working directory before anything runs, and file
//! paths reach the container as single argv elements (the write script takes
//! its path as `$1`).
//!
//! The container starts lazily on the first tool call and is hardened by
//! default: no network, every capability dropped, a read-only root with a
//! tmpfs scratch at the working directory, `no-new-privileges`, and a pids
//! limit. Each default is loosened by one field of [`ContainerConfig`].
//!
//! Apple's `container` CLI is driven with the same Docker-shaped flags; that
//! mapping is unverified, and reconnecting (which needs an exact label
//! filter) is refused for it.
//!
//! Every CLI call runs under the supervisor the local shell uses too
//! (`process.rs`). A command that runs past its timeout has its CLI process
//! (and the CLI's process group) killed; `docker exec` does not forward that,
//! so the process inside the container may go on until the container is
//! removed.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::path::{display, normalize};
use crate::process::{AfterExit, Job, OnTimeout, Outcome, Output as CliOutput, close_inherited_fds};
use crate::{
    ExecOutput, FileStat, FileText, GlobMatches, MAX_FILE_BYTES, MAX_OUTPUT_BYTES, Sandbox, SandboxError, glob_matcher,
    not_regular,
};

/// The label that marks nexo's containers; its value is the sandbox name.
pub const CONTAINER_LABEL: &str = "nexo.sandbox.id";

/// The default working directory inside the container.
pub const DEFAULT_CWD: &str = "/workspace";

/// The default `--pids-limit`.
pub const DEFAULT_PIDS_LIMIT: u32 = 512;

/// The most bytes of file listing one glob reads.
const MAX_LIST_BYTES: usize = 8 << 20;

/// The keep-alive command: present in busybox/alpine and debian-slim alike.
const KEEP_ALIVE: [&str; 3] = ["tail", "-f", "/dev/null"];

/// Prints what kind of special file `$1` is and exits 5 when it is neither a
/// regular file nor a directory: a FIFO blocks `cat`, a device never ends.
const REFUSE_SPECIAL: &str = r#"if [ -e "$1" ] && [ ! -f "$1" ] && [ ! -d "$1" ]; then
  if [ -p "$1" ]; then echo fifo; elif [ -c "$1" ]; then echo char; elif [ -b "$1" ]; then echo block;
  elif [ -S "$1" ]; then echo socket; else echo special; fi
  exit 5
fi
"#;

/// The exit status of [`REFUSE_SPECIAL`].
const SPECIAL_STATUS: i32 = 5;

/// Creates the parent directory, then copies stdin into the file. The path
/// arrives as `$1`, so no part of it is ever parsed by the shell.
const WRITE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")" && cat > "$1""#;

/// Reads at most `$2` bytes of `$1`: `head` stops there, where `cat` on a
/// device would run until the timeout.
const READ_SCRIPT: &str = r#"exec head -c "$2" -- "$1""#;

/// The modification time of `$1`, following a symlink as the file tools do.
const STAT_SCRIPT: &str = r#"exec stat -c %Y -L -- "$1""#;

/// Which container CLI drives the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// The `docker` CLI (or anything argv-compatible with it, such as
    /// `podman` through [`ContainerConfig::binary`]).
    #[default]
    Docker,
    /// Apple's `container` CLI. It is driven with Docker-shaped flags, which
    /// is unverified; reconnecting is refused.
    Apple,
}

impl Runtime {
    /// The executable searched for on `PATH`: `docker` or `container`.
    pub fn binary_name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Apple => "container",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Runtime::Docker => "Docker",
            Runtime::Apple => "Apple container",
        }
    }

    fn with_article(self) -> &'static str {
        match self {
            Runtime::Docker => "a Docker",
            Runtime::Apple => "an Apple",
        }
    }

    fn install_hint(self) -> &'static str {
        match self {
            Runtime::Docker => "install Docker (https://docs.docker.com/engine/install/)",
            Runtime::Apple => "install Apple's container tool (https://github.com/apple/container)",
        }
    }
}

/// The container's network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// No network at all (`--network none`). The default.
    #[default]
    None,
    /// The default bridge: outbound access (`--network bridge`).
    Bridge,
    /// The host's network stack (`--network host`).
    Host,
    /// A network created beforehand, by name.
    Named(String),
}

impl Network {
    fn as_arg(&self) -> &str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
            Network::Named(name) => name,
        }
    }
}

/// A host directory mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The absolute host path.
    pub host: PathBuf,
    /// The absolute path inside the container.
    pub container: String,
    /// Whether the container may write to it. Off by default: `-v host:container:ro`.
    pub writable: bool,
}

impl Bind {
    /// A read-only mount: `-v host:container:ro`.
    pub fn read_only(host: impl Into<PathBuf>, container: impl Into<String>) -> Self {
        Bind { host: host.into(), container: container.into(), writable: false }
    }

    /// A writable mount: `-v host:container:rw`.
    pub fn writable(host: impl Into<PathBuf>, container: impl Into<String>) -> Self {
        Bind { host: host.into(), container: container.into(), writable: true }
    }
}

/// How a [`ContainerSandbox`] runs its container. Plain data; every field
/// has a safe default, and [`ContainerConfig::docker`] or
/// [`ContainerConfig::apple`] set the one field that has none, the image.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerConfig {
    /// Which CLI to drive. Default: Docker.
    pub runtime: Runtime,
    /// The CLI executable. Default: `docker` or `container` found on `PATH`.
    pub binary: Option<PathBuf>,
    /// The image to run. Required: there is no default image.
    pub image: String,
    /// The working directory inside the container, and the root the tools
    /// see. Default: `/workspace`.
    pub cwd: String,
    /// The sandbox name, stored as the `nexo.sandbox.id` label. Default:
    /// `nexo-<unique id>`; required for [`ContainerConfig::reconnect`].
    pub name: Option<String>,
    /// Reuse the container labeled with [`ContainerConfig::name`] and leave it
    /// running on close. Default: off (a fresh container, removed on close).
    pub reconnect: bool,
    /// The network. Default: [`Network::None`].
    pub network: Network,
    /// Capabilities added back after `--cap-drop ALL`. Default: none.
    pub cap_add: Vec<String>,
    /// A read-only root filesystem with a tmpfs scratch at `cwd`. Default: on.
    pub readonly_rootfs: bool,
    /// `--pids-limit`; `None` omits the flag. Default: 512.
    pub pids_limit: Option<u32>,
    /// `--memory` (for example `512m`). Default: unset.
    pub memory: Option<String>,
    /// `--cpus` (for example `1.5`). Default: unset.
    pub cpus: Option<String>,
    /// `--user` (a name or `uid:gid`). Default: unset, the image's user.
    pub user: Option<String>,
    /// Host directories to mount. Default: none.
    pub binds: Vec<Bind>,
    /// Environment variables, passed as one `-e KEY=value` each, in key order.
    pub env: BTreeMap<String, String>,
    /// The limit on starting the container (which may pull the image).
    /// Default: 5 minutes.
    pub start_timeout: Duration,
    /// The limit on each file operation and lookup. Default: 60 seconds.
    pub op_timeout: Duration,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            runtime: Runtime::Docker,
            binary: None,
            image: String::new(),
            cwd: DEFAULT_CWD.to_string(),
            name: None,
            reconnect: false,
            network: Network::None,
            cap_add: Vec::new(),
            readonly_rootfs: true,
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            memory: None,
            cpus: None,
            user: None,
            binds: Vec::new(),
            env: BTreeMap::new(),
            start_timeout: Duration::from_secs(300),
            op_timeout: Duration::from_secs(60),
        }
    }
}

impl ContainerConfig {
    /// The hardened defaults with the Docker CLI and `image`.
    pub fn docker(image: impl Into<String>) -> Self {
        ContainerConfig { image: image.into(), ..Self::default() }
    }

    /// The hardened defaults with Apple's `container` CLI and `image`.
    pub fn apple(image: impl Into<String>) -> Self {
        ContainerConfig { runtime: Runtime::Apple, image: image.into(), ..Self::default() }
    }
}

/// A sandbox inside a container, started on the first tool call.
///
/// [`Sandbox::close`] removes an ephemeral container; dropping the sandbox
/// does not, so call it. A reconnecting sandbox reuses whatever container
/// carries its label, whatever options that container was created with.
#[derive(Debug)]
pub struct ContainerSandbox {
    config: ContainerConfig,
    binary: PathBuf,
    name: String,
    /// The running container's id, once started.
    id: Mutex<Option<String>>,
}

impl ContainerSandbox {
    /// Checks `config` and finds the CLI; starts nothing.
    ///
    /// A missing image or CLI, or a malformed option, is a
    /// [`SandboxError::Config`].
    pub fn new(config: ContainerConfig) -> Result<Self, SandboxError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        Self::with_search_path(config, &path)
    }

    /// Like [`ContainerSandbox::new`], searching `path` (a `PATH`-style list)
    /// for the CLI instead of the process's `PATH`.
    pub fn with_search_path(mut config: ContainerConfig, path: &OsStr) -> Result<Self, SandboxError> {
        validate(&mut config)?;
        let binary = match &config.binary {
            Some(binary) => resolve_override(binary, path).ok_or_else(|| {
                SandboxError::Config(format!(
                    "the container CLI {} does not exist; fix `binary` or unset it to search PATH for `{}`",
                    binary.display(),
                    config.runtime.binary_name()
                ))
            })?,
            None => find_on_path(config.runtime.binary_name(), path).ok_or_else(|| {
                SandboxError::Config(format!(
                    "the `{}` CLI was not found on PATH; {}, or put the directory that holds it on PATH",
                    config.runtime.binary_name(),
                    config.runtime.install_hint()
                ))
            })?,
        };
        let name = config.name.clone().unwrap_or_else(unique_name);
        Ok(ContainerSandbox { config, binary, name, id: Mutex::new(None) })
    }

    /// The configuration, with `cwd` normalized.
    pub fn config(&self) -> &ContainerConfig {
        &self.config
    }

    /// The CLI executable in use.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The sandbox name: the value of the `nexo.sandbox.id` label.
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// The running container's id, or `None` before the first tool call and
    /// after close.
    pub fn container_id(&self) -> Option<String> {
        self.slot().clone()
    }

    /// The argv (after the binary) that creates the container.
    pub fn run_args(&self) -> Vec<String> {
        let c = &self.config;
        let mut args: Vec<String> =
            vec!["run".into(), "-d".into(), "--label".into(), format!("{CONTAINER_LABEL}={}", self.name)];
        let mut flag = |name: &str, value: &str| {
            args.push(name.to_string());
            args.push(value.to_string());
        };
        flag("--network", c.network.as_arg());
        flag("--cap-drop", "ALL");
        for cap in &c.cap_add {
            flag("--cap-add", cap);
        }
        flag("--security-opt", "no-new-privileges");
        if let Some(limit) = c.pids_limit {
            flag("--pids-limit", &limit.to_string());
        }
        if let Some(memory) = &c.memory {
            flag("--memory", memory);
        }
        if let Some(cpus) = &c.cpus {
            flag("--cpus", cpus);
        }
        if let Some(user) = &c.user {
            flag("--user", user);
        }
        for bind in &c.binds {
            let mode = if bind.writable { "rw" } else { "ro" };
            flag("-v", &format!("{}:{}:{mode}", bind.host.display(), bind.container));
        }
        for (key, value) in &c.env {
            flag("-e", &format!("{key}={value}"));
        }
        if c.readonly_rootfs {
            args.push("--read-only".into());
            // The only writable place is the working directory, and it goes with the container.
            args.push("--tmpfs".into());
            args.push(format!("{}:rw", c.cwd));
        }
        args.extend(["-w".to_string(), c.cwd.clone(), c.image.clone()]);
        args.extend(KEEP_ALIVE.iter().map(|s| s.to_string()));
        args
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // The slot holds a plain id; a panic elsewhere cannot leave it half-written.
        self.id.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The container id, starting the container on first use. The lock is
    /// held while starting so concurrent first calls start one container.
    fn container(&self) -> Result<String, SandboxError> {
        let mut slot = self.slot();
        if let Some(id) = slot.as_ref() {
            return Ok(id.clone());
        }
        let id = if self.config.reconnect { self.reconnect()? } else { self.create()? };
        *slot = Some(id.clone());
        Ok(id)
    }

    fn create(&self) -> Result<String, SandboxError> {
        let image = &self.config.image;
        let args = self.run_args();
        let out = self.cli(&args, None, self.config.start_timeout, MAX_OUTPUT_BYTES)?.ok_or_else(|| {
            SandboxError::Timeout(format!(
                "starting a container from {image} took longer than {:?}; pull the image beforehand or raise \
                 `start_timeout`",
                self.config.start_timeout
            ))
        })?;
        if !out.ok() {
            return Err(SandboxError::Failed(format!(
                "cannot start a container from {image}: {}; check that the {} engine runs and the image exists",
                out.stderr_text(),
                self.config.runtime.title()
            )));
        }
        let stdout = String::from_utf8_lossy(&out.stdout.bytes);
        match stdout.lines().map(str::trim).rfind(|l| !l.is_empty()) {
            Some(id) if is_plain_id(id) => Ok(id.to_string()),
            _ => Err(SandboxError::Failed(format!(
                "`{} run` printed no container id (stdout: {:?}); check that `binary` is a Docker-compatible CLI",
                self.config.runtime.binary_name(),
                stdout.trim()
            ))),
        }
    }

    fn reconnect(&self) -> Result<String, SandboxError> {
        if self.config.runtime == Runtime::Apple {
            return Err(SandboxError::Config(
                "reconnect is not supported with Apple's container CLI: it has no verified exact label filter; \
                 set `reconnect: false` or use Docker"
                    .into(),
            ));
        }
        let filter = format!("label={CONTAINER_LABEL}={}", self.name);
        let lookup = self.cli(&strings(&["ps", "-aq", "--filter", &filter]), None, self.config.op_timeout, 1 << 20);
        let out = match lookup {
            Ok(Some(out)) if out.ok() => out,
            // A failed lookup is not fatal: a fresh container is still a working sandbox.
            _ => return self.create(),
        };
        let mut ids: Vec<String> = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout.bytes).lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !ids.iter().any(|id| id == line) {
                ids.push(line.to_string());
            }
        }
        match ids.as_slice() {
            [] => self.create(),
            [id] if is_plain_id(id) => {
                let started = self.op(&strings(&["start", id]), None, 1 << 20)?;
                if !started.ok() && !started.stderr_text().to_lowercase().contains("already running") {
                    return Err(SandboxError::Failed(format!(
                        "cannot restart container {id} labeled {}: {}; remove it with `{} rm -f {id}`",
                        self.name,
                        started.stderr_text(),
                        self.config.runtime.binary_name()
                    )));
                }
                Ok(id.clone())
            }
            [id] => Err(SandboxError::Failed(format!("the container lookup printed a malformed id {id:?}"))),
            many => Err(SandboxError::Failed(format!(
                "ambiguous reconnect: {} containers labeled {}; remove the extras with `{} rm -f <id>`",
                many.len(),
                self.name,
                self.config.runtime.binary_name()
            ))),
        }
    }

    /// Runs the CLI with `stdin` fed in, output capped at `cap` bytes per
    /// stream; `Ok(None)` means it ran past `timeout` and was killed with its
    /// process group.
    fn cli(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Duration,
        cap: usize,
    ) -> Result<Option<CliOutput>, SandboxError> {
        let mut command = Command::new(&self.binary);
        command.args(args);
        // The CLI gets none of the host's descriptors beyond its stdio.
        close_inherited_fds(&mut command);
        let job =
            Job { stdin, timeout, cap, on_timeout: OnTimeout::KillGroup, after_exit: AfterExit::KillGroupIfPipesHeld };
        let child = job
            .spawn(&mut command)
            .map_err(|e| SandboxError::Failed(format!("cannot run {}: {e}; check `binary`", self.binary.display())))?;
        match job.supervise(child)? {
            Outcome::Exited(out) => Ok(Some(out)),
            Outcome::TimedOut => Ok(None),
        }
    }

    /// Runs a bookkeeping or file command under `op_timeout`.
    fn op(&self, args: &[String], stdin: Option<&[u8]>, cap: usize) -> Result<CliOutput, SandboxError> {
        let out = self.cli(args, stdin, self.config.op_timeout, cap)?.ok_or_else(|| {
            SandboxError::Timeout(format!(
                "`{} {}` did not finish within {:?}; check that the container engine responds or raise `op_timeout`",
                self.config.runtime.binary_name(),
                args.first().map_or("", String::as_str),
                self.config.op_timeout
            ))
        })?;
        Ok(out)
    }

    /// Forgets a container removed behind our back, so the next tool call
    /// starts afresh. Not called while starting: the slot is locked then.
    fn forget_if_gone(&self, id: &str, out: &CliOutput) {
        if !out.ok() && String::from_utf8_lossy(&out.stderr.bytes).contains("No such container") {
            let mut slot = self.slot();
            if slot.as_deref() == Some(id) {
                *slot = None;
            }
        }
    }

    /// The absolute container path of a tool's path argument, and whether it
    /// names the working directory itself.
    fn container_path(&self, path: &str) -> Result<(String, bool), SandboxError> {
        let rel = display(&normalize(Path::new(&self.config.cwd), path)?);
        let cwd = self.config.cwd.trim_end_matches('/');
        if rel.is_empty() { Ok((self.config.cwd.clone(), true)) } else { Ok((format!("{cwd}/{rel}"), false)) }
    }

    fn file_error(&self, path: &str, out: &CliOutput) -> SandboxError {
        if let Some(refused) = special_refusal(path, out) {
            return refused;
        }
        let message = out.stderr_text();
        let lower = message.to_lowercase();
        if lower.contains("no such file") || lower.contains("not a directory") {
            SandboxError::NotFound(format!("{path}: no such file"))
        } else if lower.contains("is a directory") {
            SandboxError::InvalidInput(format!("{path} is a directory; use glob to list it"))
        } else {
            SandboxError::Failed(format!("{path}: {message}"))
        }
    }

    fn stat_at(&self, id: &str, path: &str, abs: &str) -> Result<Option<FileStat>, SandboxError> {
        let script = format!("{REFUSE_SPECIAL}{STAT_SCRIPT}");
        let out = self.op(&strings(&["exec", id, "sh", "-c", &script, "sh", abs]), None, 4096)?;
        self.forget_if_gone(id, &out);
        if !out.ok() {
            return match self.file_error(path, &out) {
                SandboxError::NotFound(_) => Ok(None),
                other => Err(other),
            };
        }
        let secs = String::from_utf8_lossy(&out.stdout.bytes).trim().parse::<u64>().ok();
        Ok(Some(FileStat { mtime: secs.map(|s| UNIX_EPOCH + Duration::from_secs(s)) }))
    }
}

impl Sandbox for ContainerSandbox {
    fn name(&self) -> &'static str {
        "container"
    }

    fn supports_shell(&self) -> bool {
        true
    }

    fn instructions(&self, shell: bool) -> Option<String> {
        let c = &self.config;
        let network = match &c.network {
            Network::None => "network none (no network access)".to_string(),
            Network::Bridge => "network bridge (outbound network access)".to_string(),
            Network::Host => "network host (the host's network)".to_string(),
            Network::Named(name) => format!("network {name}"),
        };
        let mut text = format!(
            "You run inside {} container (image {}), working directory {}, {network}.",
            c.runtime.with_article(),
            c.image,
            c.cwd
        );
        if c.readonly_rootfs {
            text.push_str(&format!(
                " The root filesystem is read-only; {} is a writable scratch directory whose contents are lost when \
                 the container is removed.",
                c.cwd
            ));
        } else {
            text.push_str(" The container's filesystem is writable.");
        }
        if !c.binds.is_empty() {
            let mounts: Vec<String> = c
                .binds
                .iter()
                .map(|b| format!("{} ({})", b.container, if b.writable { "writable" } else { "read-only" }))
                .collect();
            text.push_str(&format!(" Host directories are mounted at {}.", mounts.join(", ")));
        }
        if let Some(user) = &c.user {
            text.push_str(&format!(" Commands run as user {user}."));
        }
        text.push_str(if c.reconnect {
            " The container persists between sessions."
        } else {
            " The container is removed when the session ends."
        });
        text.push_str(if shell {
            " File tools and the shell act inside the container, not on the host."
        } else {
            " File tools act inside the container, not on the host."
        });
        Some(text)
    }

    fn read(&self, path: &str) -> Result<FileText, SandboxError> {
        let (abs, _) = self.container_path(path)?;
        let id = self.container()?;
        let limit = (MAX_FILE_BYTES + 1).to_string();
        let script = format!("{REFUSE_SPECIAL}{READ_SCRIPT}");
        let out =
            self.op(&strings(&["exec", &id, "sh", "-c", &script, "sh", &abs, &limit]), None, MAX_FILE_BYTES + 1)?;
        self.forget_if_gone(&id, &out);
        if !out.ok() {
            return Err(self.file_error(path, &out));
        }
        if out.stdout.cut || out.stdout.bytes.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path} is over the {MAX_FILE_BYTES}-byte read limit; read a part of it with the shell"
            )));
        }
        let text = String::from_utf8(out.stdout.bytes)
            .map_err(|_| SandboxError::InvalidInput(format!("{path} is not UTF-8 text")))?;
        // The text is what matters; a failed stat only loses the time.
        let mtime = self.stat_at(&id, path, &abs).ok().flatten().and_then(|s| s.mtime);
        Ok(FileText { text, mtime })
    }

    fn stat(&self, path: &str) -> Result<Option<FileStat>, SandboxError> {
        let (abs, _) = self.container_path(path)?;
        let id = self.container()?;
        self.stat_at(&id, path, &abs)
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let (abs, is_root) = self.container_path(path)?;
        if is_root {
            return Err(SandboxError::InvalidInput(format!("{path} names the sandbox root, not a file")));
        }
        if contents.len() > MAX_FILE_BYTES {
            return Err(SandboxError::InvalidInput(format!(
                "{path}: {} bytes is over the {MAX_FILE_BYTES}-byte file limit",
                contents.len()
            )));
        }
        let id = self.container()?;
        let script = format!("{REFUSE_SPECIAL}{WRITE_SCRIPT}");
        let args = strings(&["exec", "-i", &id, "sh", "-c", &script, "sh", &abs]);
        let out = self.op(&args, Some(contents.as_bytes()), 1 << 20)?;
        self.forget_if_gone(&id, &out);
        if let Some(refused) = special_refusal(path, &out) {
            return Err(refused);
        }
        if !out.ok() {
            return Err(SandboxError::Failed(format!("cannot write {path}: {}", out.stderr_text())));
        }
        Ok(())
    }

    fn glob(&self, pattern: &str) -> Result<GlobMatches, SandboxError> {
        let matcher = glob_matcher(pattern)?;
        let id = self.container()?;
        // NUL-separated so a file name with a newline stays one entry.
        let args = strings(&["exec", "-w", &self.config.cwd, &id, "find", ".", "-type", "f", "-print0"]);
        let out = self.op(&args, None, MAX_LIST_BYTES)?;
        self.forget_if_gone(&id, &out);
        // find exits non-zero on one unreadable directory; what it listed still counts.
        if !out.ok() && out.stdout.bytes.is_empty() {
            return Err(SandboxError::Failed(format!(
                "cannot list files in {}: {}",
                self.config.cwd,
                out.stderr_text()
            )));
        }
        let mut entries: Vec<&[u8]> = out.stdout.bytes.split(|b| *b == 0).collect();
        if out.stdout.cut {
            // The last entry may be a fragment.
            entries.pop();
        }
        let found: Vec<String> = entries
            .into_iter()
            .filter_map(|e| std::str::from_utf8(e).ok())
            .map(|e| e.trim_start_matches("./"))
            .filter(|e| !e.is_empty() && *e != "." && matcher.is_match(e))
            .map(str::to_string)
            .collect();
        Ok(GlobMatches::new(found, out.stdout.cut))
    }

    fn exec(&self, command: &str, timeout: Duration) -> Result<ExecOutput, SandboxError> {
        let id = self.container()?;
        let args = strings(&["exec", "-w", &self.config.cwd, &id, "sh", "-c", command]);
        let Some(out) = self.cli(&args, None, timeout, MAX_OUTPUT_BYTES)? else {
            return Err(SandboxError::Timeout(format!(
                "the command ran past its {timeout:?} limit and its CLI was killed; the process may go on inside \
                 the container until it is closed. Raise the timeout or run long jobs in the background"
            )));
        };
        self.forget_if_gone(&id, &out);
        Ok(out.into())
    }

    fn close(&self) -> Result<(), SandboxError> {
        let mut slot = self.slot();
        let Some(id) = slot.take() else {
            return Ok(());
        };
        if self.config.reconnect {
            // Left running so the next session can reconnect to it.
            return Ok(());
        }
        let out = match self.op(&strings(&["rm", "-f", &id]), None, 1 << 20) {
            Ok(out) => out,
            Err(e) => {
                *slot = Some(id);
                return Err(e);
            }
        };
        if out.ok() || out.stderr_text().contains("No such container") {
            return Ok(());
        }
        let message = out.stderr_text();
        *slot = Some(id.clone());
        Err(SandboxError::Failed(format!(
            "cannot remove container {id}: {message}; remove it with `{} rm -f {id}`",
            self.config.runtime.binary_name()
        )))
    }
}

/// Refuses options that would not parse as one flag value or would let a
/// value be read as a flag, and normalizes `cwd`.
fn validate(config: &mut ContainerConfig) -> Result<(), SandboxError> {
    let image = config.image.trim();
    if image.is_empty() {
        return Err(SandboxError::Config(
            "no container image is set; set `image` (for example \"alpine:3.20\")".into(),
        ));
    }
    config.image = image.to_string();
    flag_value("image", &config.image)?;

    let cwd = config.cwd.trim();
    let cwd = if cwd.len() > 1 { cwd.trim_end_matches('/') } else { cwd };
    container_dir("cwd", cwd)?;
    if cwd == "/" && config.readonly_rootfs {
        return Err(SandboxError::Config(
            "cwd `/` cannot be a tmpfs scratch over a read-only root; choose a directory such as /workspace or set \
             `readonly_rootfs: false`"
                .into(),
        ));
    }
    config.cwd = cwd.to_string();

    match &config.name {
        Some(name) => plain_name("name", name)?,
        None if config.reconnect => {
            return Err(SandboxError::Config(
                "reconnect needs a stable `name` to find the container again; set `name`".into(),
            ));
        }
        None => {}
    }
    if let Network::Named(name) = &config.network {
        plain_name("network", name)?;
    }
    for cap in &config.cap_add {
        if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(SandboxError::Config(format!(
                "cap_add entry {cap:?} is not a capability name; use names such as NET_BIND_SERVICE"
            )));
        }
    }
    for (what, value) in [("memory", &config.memory), ("cpus", &config.cpus), ("user", &config.user)] {
        if let Some(value) = value {
            flag_value(what, value)?;
        }
    }
    for bind in &config.binds {
        let host = bind.host.to_str().ok_or_else(|| {
            SandboxError::Config(format!("bind source {} is not UTF-8; use a UTF-8 path", bind.host.display()))
        })?;
        if !bind.host.is_absolute() || host.contains([':', '\0']) {
            return Err(SandboxError::Config(format!(
                "bind source {host:?} must be an absolute host path without `:`; use a full path"
            )));
        }
        container_dir("bind target", &bind.container)?;
    }
    for (key, value) in &config.env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(SandboxError::Config(format!(
                "env entry {key:?} is malformed; keys need a name without `=` and no NUL bytes"
            )));
        }
    }
    Ok(())
}

/// A value passed after a flag or as the image: not empty, no whitespace or
/// control characters, and not starting with `-` (it would read as a flag).
fn flag_value(what: &str, value: &str) -> Result<(), SandboxError> {
    if value.is_empty() || value.starts_with('-') || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SandboxError::Config(format!(
            "`{what}` {value:?} is malformed; it may not be empty, start with `-`, or contain spaces"
        )));
    }
    Ok(())
}

/// A container path: absolute, no `..`, nothing that would split a `-v` or
/// `--tmpfs` spec.
fn container_dir(what: &str, path: &str) -> Result<(), SandboxError> {
    if !path.starts_with('/') || path.contains([':', ',', '\0']) || path.split('/').any(|s| s == "..") {
        return Err(SandboxError::Config(format!(
            "`{what}` {path:?} must be an absolute container path without `..`, `:` or `,`; for example /workspace"
        )));
    }
    Ok(())
}

/// A Docker object name: `[A-Za-z0-9][A-Za-z0-9_.-]*`.
fn plain_name(what: &str, name: &str) -> Result<(), SandboxError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return Err(SandboxError::Config(format!(
            "`{what}` {name:?} is malformed; use letters, digits, `_`, `.` and `-`, starting with a letter or digit"
        )));
    }
    Ok(())
}

/// Whether a container id printed by the CLI is safe to pass back as an argument.
fn is_plain_id(id: &str) -> bool {
    plain_name("id", id).is_ok()
}

/// A fresh sandbox name: the process id, the time and a counter.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("nexo-{:x}-{:x}-{n}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// Finds an executable named `name` in a `PATH`-style list. Empty entries
/// (the current directory) are skipped.
pub fn find_on_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).filter(|dir| !dir.as_os_str().is_empty()).map(|dir| dir.join(name)).find(|p| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            p.is_file()
        }
    })
}

/// An explicit `binary`: a path to a file, or a bare name (such as
/// `podman`) looked up in `path`.
fn resolve_override(binary: &Path, path: &OsStr) -> Option<PathBuf> {
    if binary.is_file() {
        return Some(binary.to_path_buf());
    }
    match binary.to_str() {
        Some(name) if binary.components().count() == 1 && !name.contains('/') => find_on_path(name, path),
        _ => None,
    }
}

/// The refusal [`REFUSE_SPECIAL`] asked for, if it did.
fn special_refusal(path: &str, out: &CliOutput) -> Option<SandboxError> {
    if out.status != Some(SPECIAL_STATUS) {
        return None;
    }
    let kind = match String::from_utf8_lossy(&out.stdout.bytes).trim() {
        "fifo" => "a FIFO (named pipe)",
        "char" => "a character device",
        "block" => "a block device",
        "socket" => "a socket",
        _ => "not a regular file",
    };
    Some(not_regular(path, kind))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::FileTypeExt;
    use std::process::Stdio;
    use std::thread;
    use std::time::Instant;

    /// A stand-in for the docker CLI: it logs each argv (every argument as
    /// `A<arg>\0`, then `E\0`), keeps a fake filesystem under `fs/`, and
    /// reads its canned answers from files beside it.
    const FAKE: &str = r#"#!/bin/sh
dir='@DIR@'
{ for a in "$@"; do printf 'A%s\0' "$a"; done; printf 'E\0'; } >> "$dir/log"
sub=$1
shift
case "$sub" in
version) echo fake ;;
run)
    if [ -f "$dir/run_fail" ]; then cat "$dir/run_fail" >&2; exit 125; fi
    n=$(cat "$dir/runs" 2>/dev/null || echo 0)
    n=$((n + 1))
    echo "$n" > "$dir/runs"
    echo "c0ffee$n" ;;
ps)
    if [ -f "$dir/ps_fail" ]; then echo 'Cannot connect to the Docker daemon' >&2; exit 1; fi
    cat "$dir/ps_ids" 2>/dev/null
    exit 0 ;;
start)
    if [ -f "$dir/start_fail" ]; then cat "$dir/start_fail" >&2; exit 1; fi ;;
rm) ;;
exec)
    wd=/
    while :; do
        case "$1" in
        -i) shift ;;
        -w) wd=$2; shift 2 ;;
        *) break ;;
        esac
    done
    if [ -f "$dir/gone" ]; then echo "Error response from daemon: No such container: $1" >&2; exit 1; fi
    shift
    fs="$dir/fs"
    case "$1" in
    find) cd "$fs$wd" && exec "$@" ;;
    sh)
        if [ $# -ge 5 ]; then s=$3; p=$5; shift 5; exec sh -c "$s" sh "$fs$p" "$@"; fi
        cd "$fs$wd" && exec sh -c "$3" ;;
    *) echo "fake: cannot exec $1" >&2; exit 127 ;;
    esac ;;
*) echo "fake docker: unknown command $sub" >&2; exit 1 ;;
esac
"#;

    struct Fake {
        dir: tempfile::TempDir,
        config: ContainerConfig,
    }

    impl Fake {
        fn new() -> Fake {
            let dir = tempfile::tempdir().unwrap();
            let bin = dir.path().join("docker");
            fs::write(&bin, FAKE.replace("@DIR@", dir.path().to_str().unwrap())).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
            }
            fs::create_dir_all(dir.path().join("fs/workspace")).unwrap();
            // Another test thread forking while the script was open for writing
            // makes exec fail with "text file busy" for a moment; wait it out.
            for _ in 0..100 {
                match Command::new(&bin).arg("version").stdout(Stdio::null()).status() {
                    Err(e) if e.raw_os_error() == Some(26) => thread::sleep(Duration::from_millis(10)),
                    other => {
                        other.unwrap();
                        break;
                    }
                }
            }
            let _ = fs::remove_file(dir.path().join("log"));
            let config = ContainerConfig {
                binary: Some(bin),
                name: Some("test-box".into()),
                ..ContainerConfig::docker("alpine:3.20")
            };
            Fake { dir, config }
        }

        fn sandbox(&self) -> ContainerSandbox {
            ContainerSandbox::new(self.config.clone()).unwrap()
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn set(&self, file: &str, contents: &str) {
            fs::write(self.path(file), contents).unwrap();
        }

        /// Every argv the fake saw, in order.
        fn calls(&self) -> Vec<Vec<String>> {
            let Ok(log) = fs::read(self.path("log")) else { return Vec::new() };
            let mut calls = vec![];
            let mut current = vec![];
            for token in log.split(|b| *b == 0).filter(|t| !t.is_empty()) {
                match token[0] {
                    b'A' => current.push(String::from_utf8(token[1..].to_vec()).unwrap()),
                    b'E' => calls.push(std::mem::take(&mut current)),
                    _ => panic!("bad log token {token:?}"),
                }
            }
            calls
        }

        fn subcommands(&self) -> Vec<String> {
            self.calls().into_iter().map(|c| c[0].clone()).collect()
        }
    }

    fn v(args: &[&str]) -> Vec<String> {
        strings(args)
    }

    fn hardened() -> Vec<String> {
        v(&[
            "run",
            "-d",
            "--label",
            "nexo.sandbox.id=test-box",
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            "512",
            "--read-only",
            "--tmpfs",
            "/workspace:rw",
            "-w",
            "/workspace",
            "alpine:3.20",
            "tail",
            "-f",
            "/dev/null",
        ])
    }

    /// `hardened()` with `extra` inserted before the position of `before`.
    fn with_inserted(before: &str, extra: &[&str]) -> Vec<String> {
        let mut args = hardened();
        let at = args.iter().position(|a| a == before).unwrap();
        args.splice(at..at, v(extra));
        args
    }

    #[test]
    fn run_argv_has_every_hardening_default() {
        let fake = Fake::new();
        let s = fake.sandbox();
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(fake.calls()[0], hardened());
        assert_eq!(s.run_args(), hardened());
    }

    #[test]
    fn each_loosening_changes_exactly_its_flag() {
        let fake = Fake::new();
        let args = |edit: &dyn Fn(&mut ContainerConfig)| {
            let mut config = fake.config.clone();
            edit(&mut config);
            ContainerSandbox::new(config).unwrap().run_args()
        };
        let swapped = |from: &str, to: &str| {
            hardened().into_iter().map(|a| if a == from { to.to_string() } else { a }).collect::<Vec<_>>()
        };
        assert_eq!(args(&|c| c.network = Network::Bridge), swapped("none", "bridge"));
        assert_eq!(args(&|c| c.network = Network::Host), swapped("none", "host"));
        assert_eq!(args(&|c| c.network = Network::Named("agents".into())), swapped("none", "agents"));
        assert_eq!(
            args(&|c| c.cap_add = vec!["NET_BIND_SERVICE".into(), "CHOWN".into()]),
            with_inserted("--security-opt", &["--cap-add", "NET_BIND_SERVICE", "--cap-add", "CHOWN"])
        );
        let mut writable = hardened();
        writable.retain(|a| !["--read-only", "--tmpfs", "/workspace:rw"].contains(&a.as_str()));
        assert_eq!(args(&|c| c.readonly_rootfs = false), writable);
        let mut no_pids = hardened();
        no_pids.retain(|a| a != "--pids-limit" && a != "512");
        assert_eq!(args(&|c| c.pids_limit = None), no_pids);
        assert_eq!(args(&|c| c.pids_limit = Some(64)), swapped("512", "64"));
        assert_eq!(args(&|c| c.memory = Some("512m".into())), with_inserted("--read-only", &["--memory", "512m"]));
        assert_eq!(args(&|c| c.cpus = Some("1.5".into())), with_inserted("--read-only", &["--cpus", "1.5"]));
        assert_eq!(
            args(&|c| c.user = Some("1000:1000".into())),
            with_inserted("--read-only", &["--user", "1000:1000"])
        );
        assert_eq!(
            args(&|c| c.cwd = "/src/".into()),
            swapped("/workspace:rw", "/src:rw")
                .into_iter()
                .map(|a| if a == "/workspace" { "/src".into() } else { a })
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn binds_default_read_only_and_env_is_one_flag_per_entry_in_order() {
        let fake = Fake::new();
        let mut config = fake.config.clone();
        config.binds = vec![Bind::read_only("/srv/data", "/data"), Bind::writable("/srv/out", "/out")];
        config.env = [("ZED", "last"), ("ALPHA", "a b $(x)")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let args = ContainerSandbox::new(config).unwrap().run_args();
        assert_eq!(
            args,
            with_inserted(
                "--read-only",
                &["-v", "/srv/data:/data:ro", "-v", "/srv/out:/out:rw", "-e", "ALPHA=a b $(x)", "-e", "ZED=last"]
            )
        );
        assert_eq!(Bind::read_only("/a", "/b"), Bind { host: "/a".into(), container: "/b".into(), writable: false });
    }

    #[test]
    fn starts_lazily_once_and_removes_on_close() {
        let fake = Fake::new();
        fake.set("fs/workspace/a.txt", "alpha");
        let s = fake.sandbox();
        assert!(s.instructions(true).is_some());
        assert!(fake.calls().is_empty(), "nothing runs before the first tool call");
        assert_eq!(s.container_id(), None);
        assert_eq!(s.read("a.txt").unwrap().text, "alpha");
        s.write("b.txt", "beta").unwrap();
        assert_eq!(s.glob("*.txt").unwrap().paths, vec!["a.txt", "b.txt"]);
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(s.container_id().as_deref(), Some("c0ffee1"));
        assert_eq!(fake.subcommands().iter().filter(|c| *c == "run").count(), 1);
        s.close().unwrap();
        s.close().unwrap();
        let calls = fake.calls();
        assert_eq!(calls.last().unwrap(), &v(&["rm", "-f", "c0ffee1"]));
        assert_eq!(calls.iter().filter(|c| c[0] == "rm").count(), 1, "a second close is a no-op");
        assert_eq!(s.container_id(), None);
        // A tool call after close starts a fresh container.
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(s.container_id().as_deref(), Some("c0ffee2"));
    }

    #[test]
    fn close_without_start_calls_nothing() {
        let fake = Fake::new();
        let s = fake.sandbox();
        s.close().unwrap();
        s.close().unwrap();
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn tool_argv_shapes() {
        let fake = Fake::new();
        fake.set("fs/workspace/a.txt", "alpha");
        let s = fake.sandbox();
        s.read("/workspace/./a.txt").unwrap();
        s.stat("a.txt").unwrap();
        s.write("dir/b.txt", "beta").unwrap();
        s.glob("**/*").unwrap();
        s.exec("ls -la", Duration::from_secs(10)).unwrap();
        let calls = fake.calls();
        let script = |s: &str| format!("{REFUSE_SPECIAL}{s}");
        let limit = (MAX_FILE_BYTES + 1).to_string();
        let read = script(READ_SCRIPT);
        assert_eq!(calls[1], v(&["exec", "c0ffee1", "sh", "-c", &read, "sh", "/workspace/a.txt", &limit]));
        let stat = script(STAT_SCRIPT);
        assert_eq!(calls[2], v(&["exec", "c0ffee1", "sh", "-c", &stat, "sh", "/workspace/a.txt"]));
        assert_eq!(calls[3], v(&["exec", "c0ffee1", "sh", "-c", &stat, "sh", "/workspace/a.txt"]));
        let write = script(WRITE_SCRIPT);
        assert_eq!(calls[4], v(&["exec", "-i", "c0ffee1", "sh", "-c", &write, "sh", "/workspace/dir/b.txt"]));
        assert_eq!(calls[5], v(&["exec", "-w", "/workspace", "c0ffee1", "find", ".", "-type", "f", "-print0"]));
        assert_eq!(calls[6], v(&["exec", "-w", "/workspace", "c0ffee1", "sh", "-c", "ls -la"]));
        assert_eq!(calls.len(), 7);
    }

    #[test]
    fn files_read_write_stat_and_glob_through_the_cli() {
        let fake = Fake::new();
        fs::create_dir_all(fake.path("fs/workspace/src/deep")).unwrap();
        fake.set("fs/workspace/src/lib.rs", "pub fn f() {}");
        fake.set("fs/workspace/src/deep/mod.rs", "");
        fake.set("fs/workspace/README.md", "hi");
        let s = fake.sandbox();
        let text = s.read("src/lib.rs").unwrap();
        assert_eq!(text.text, "pub fn f() {}");
        assert!(text.mtime.is_some_and(|t| t > UNIX_EPOCH));
        assert!(s.stat("src/lib.rs").unwrap().unwrap().mtime.is_some());
        assert_eq!(s.stat("missing.txt").unwrap(), None);
        assert!(matches!(s.read("missing.txt"), Err(SandboxError::NotFound(_))));
        assert!(matches!(s.read("src"), Err(SandboxError::InvalidInput(_))));
        s.write("out/new/file.txt", "line 1\nline 2\n").unwrap();
        assert_eq!(fs::read_to_string(fake.path("fs/workspace/out/new/file.txt")).unwrap(), "line 1\nline 2\n");
        assert_eq!(s.read("out/new/file.txt").unwrap().text, "line 1\nline 2\n");
        assert_eq!(s.glob("**/*.rs").unwrap().paths, vec!["src/deep/mod.rs", "src/lib.rs"]);
        assert_eq!(s.glob("*").unwrap().paths, vec!["README.md"]);
        assert_eq!(s.glob("./src/*.rs").unwrap().paths, vec!["src/lib.rs"]);
        assert!(matches!(s.write("", "x"), Err(SandboxError::InvalidInput(_))));
        assert!(matches!(s.write("/workspace", "x"), Err(SandboxError::InvalidInput(_))));
        let big = "x".repeat(MAX_FILE_BYTES + 1);
        assert!(matches!(s.write("big.txt", &big), Err(SandboxError::InvalidInput(_))));
    }

    /// The scripts run for real (the fake runs them on a directory of its
    /// own), so a FIFO and a mknod'ed /dev/zero (needs root, as in CI) are
    /// real too.
    #[test]
    fn special_files_are_refused_and_reads_are_bounded() {
        use rustix::fs::{CWD, FileType, Mode, makedev, mkfifoat, mknodat};
        let fake = Fake::new();
        mkfifoat(CWD, fake.path("fs/workspace/pipe"), Mode::from_raw_mode(0o666)).unwrap();
        let zero = fake.path("fs/workspace/zero");
        if let Err(e) = mknodat(CWD, &zero, FileType::CharacterDevice, Mode::from_raw_mode(0o666), makedev(1, 5)) {
            panic!("this test needs root to make a device node with mknod (as in CI), and mknod failed: {e}");
        }
        let s = fake.sandbox();
        let started = Instant::now();
        for (path, kind) in [("pipe", "a FIFO"), ("zero", "a character device")] {
            let results = [s.read(path).map(|_| ()), s.write(path, "x"), s.stat(path).map(|_| ())];
            for result in results {
                match result {
                    Err(SandboxError::InvalidInput(m)) => assert!(m.contains(&format!("{path} is {kind}")), "{m}"),
                    other => panic!("{path}: expected a refusal, got {other:?}"),
                }
            }
        }
        // The op timeout is 30 s by default: a blocked FIFO or an endless cat would show.
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert!(fs::symlink_metadata(&zero).unwrap().file_type().is_char_device());
        fake.set("fs/workspace/cap", &"x".repeat(MAX_FILE_BYTES));
        fake.set("fs/workspace/over", &"x".repeat(MAX_FILE_BYTES + 1));
        assert_eq!(s.read("cap").unwrap().text.len(), MAX_FILE_BYTES);
        assert!(matches!(s.read("over"), Err(SandboxError::InvalidInput(m)) if m.contains("read limit")));
    }

    #[test]
    fn glob_says_when_it_cut_the_matches() {
        let fake = Fake::new();
        for i in 0..=crate::MAX_GLOB_MATCHES {
            fake.set(&format!("fs/workspace/f{i:04}.txt"), "");
        }
        let s = fake.sandbox();
        let cut = s.glob("*.txt").unwrap();
        assert!(cut.truncated);
        assert_eq!(cut.paths.len(), crate::MAX_GLOB_MATCHES);
        fs::remove_file(fake.path("fs/workspace/f0000.txt")).unwrap();
        let whole = s.glob("*.txt").unwrap();
        assert!(!whole.truncated);
        assert_eq!(whole.paths.len(), crate::MAX_GLOB_MATCHES);
    }

    #[test]
    fn exec_passes_output_and_status_through() {
        let fake = Fake::new();
        let s = fake.sandbox();
        let out = s.exec("echo out; echo err >&2; exit 3", Duration::from_secs(10)).unwrap();
        assert_eq!(out, ExecOutput { status: 3, stdout: "out\n".into(), stderr: "err\n".into() });
        let out = s.exec("pwd", Duration::from_secs(10)).unwrap();
        assert!(out.stdout.trim_end().ends_with("fs/workspace"), "{out:?}");
    }

    #[test]
    fn exec_output_is_capped() {
        let fake = Fake::new();
        let s = fake.sandbox();
        let out = s.exec("head -c 5000000 /dev/zero | tr '\\0' x", Duration::from_secs(30)).unwrap();
        assert_eq!(out.status, 0);
        assert!(out.stdout.starts_with(&"x".repeat(1000)));
        assert!(out.stdout.ends_with(&format!("[stdout cut at {MAX_OUTPUT_BYTES} bytes]")));
        assert!(out.stdout.len() < MAX_OUTPUT_BYTES + 100);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_cli_gets_no_inherited_descriptors() {
        let fake = Fake::new();
        let s = fake.sandbox();
        let outside = tempfile::tempdir().unwrap();
        let log_path = outside.path().join("log.txt");
        let log = fs::OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
        // As a parent's `exec 8>>file` would leave it: inheritable.
        rustix::io::fcntl_setfd(&log, rustix::io::FdFlags::empty()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&log);
        let out = s.exec(&format!("bash -c 'echo leaked >&{fd}'"), Duration::from_secs(10));
        rustix::io::fcntl_setfd(&log, rustix::io::FdFlags::CLOEXEC).unwrap();
        let out = out.unwrap();
        assert_ne!(out.status, 0, "descriptor {fd} reached the container CLI: {out:?}");
        assert_eq!(fs::read_to_string(&log_path).unwrap(), "");
    }

    #[test]
    fn exec_timeout_kills_the_cli_and_its_children() {
        let fake = Fake::new();
        let s = fake.sandbox();
        let pid_file = fake.path("fs/workspace/sleeper.pid");
        let started = Instant::now();
        let result = s.exec("sleep 30 & echo $! > sleeper.pid; wait", Duration::from_millis(500));
        assert!(matches!(result, Err(SandboxError::Timeout(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(pid_file.exists());
        #[cfg(target_os = "linux")]
        {
            let pid = fs::read_to_string(&pid_file).unwrap().trim().to_string();
            // Gone, or a zombie waiting to be reaped by init.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let alive = stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z'));
                if !alive {
                    break;
                }
                assert!(Instant::now() < deadline, "the sleeper {pid} outlived the timeout");
                thread::sleep(Duration::from_millis(20));
            }
        }
    }

    #[test]
    fn escapes_are_security_errors_that_never_reach_the_cli() {
        let fake = Fake::new();
        let s = fake.sandbox();
        for p in ["../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", "/workspacex/a"] {
            assert!(matches!(s.read(p), Err(SandboxError::Security(_))), "{p}");
            assert!(matches!(s.stat(p), Err(SandboxError::Security(_))), "{p}");
            assert!(matches!(s.write(p, "x"), Err(SandboxError::Security(_))), "{p}");
        }
        for pattern in ["../*", "/etc/*", "a/../../*"] {
            assert!(matches!(s.glob(pattern), Err(SandboxError::Security(_))), "{pattern}");
        }
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    }

    #[test]
    fn shell_metacharacters_stay_one_argument() {
        let fake = Fake::new();
        let marker = fake.path("pwned");
        let m = marker.display();
        let s = fake.sandbox();
        let name = format!("a $(touch {m}) `touch {m}` ;touch {m}; 'q' \"d\"\nline.txt");
        let contents = format!("$(touch {m})\n'\"`x`\n; rm -rf /\n");
        s.write(&name, &contents).unwrap();
        assert_eq!(s.read(&name).unwrap().text, contents);
        assert!(!marker.exists(), "a path or its contents reached a shell");
        let written = fake.path("fs/workspace").join(&name);
        assert_eq!(fs::read_to_string(written).unwrap(), contents);
        let abs = format!("/workspace/{name}");
        let calls = fake.calls();
        assert!(calls.iter().any(|c| c.last() == Some(&abs) && c[0] == "exec" && c[1] == "-i"));
        assert!(calls.iter().any(|c| c[..4] == v(&["exec", "c0ffee1", "sh", "-c"]) && c[6] == abs));
        // A glob pattern is matched here, never handed to a shell or to find.
        s.glob(&format!("*$(touch {m})*")).unwrap();
        assert!(!marker.exists());
        assert!(!fake.calls().iter().flatten().any(|a| a.starts_with('*')));
    }

    #[test]
    fn reconnect_reuses_the_single_labeled_container() {
        let fake = Fake::new();
        fake.set("ps_ids", "abc123\n");
        let mut config = fake.config.clone();
        config.reconnect = true;
        let s = ContainerSandbox::new(config).unwrap();
        s.exec("true", Duration::from_secs(10)).unwrap();
        let calls = fake.calls();
        assert_eq!(calls[0], v(&["ps", "-aq", "--filter", "label=nexo.sandbox.id=test-box"]));
        assert_eq!(calls[1], v(&["start", "abc123"]));
        assert_eq!(calls[2][..4], v(&["exec", "-w", "/workspace", "abc123"]));
        assert!(!fake.subcommands().contains(&"run".to_string()));
        s.close().unwrap();
        assert!(!fake.subcommands().contains(&"rm".to_string()), "close leaves a reconnectable container");
        assert_eq!(s.container_id(), None);
    }

    #[test]
    fn reconnect_ignores_already_running() {
        let fake = Fake::new();
        fake.set("ps_ids", "abc123\n");
        fake.set("start_fail", "Error: container abc123 is already running");
        let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
        let s = ContainerSandbox::new(config).unwrap();
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(s.container_id().as_deref(), Some("abc123"));
        fake.set("start_fail", "Error: no such image");
        let other = ContainerSandbox::new(ContainerConfig { reconnect: true, ..fake.config.clone() }).unwrap();
        assert!(matches!(other.exec("true", Duration::from_secs(10)), Err(SandboxError::Failed(_))));
    }

    #[test]
    fn reconnect_creates_on_zero_and_on_a_failed_lookup() {
        for failing in [false, true] {
            let fake = Fake::new();
            if failing {
                fake.set("ps_fail", "");
            }
            let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
            let s = ContainerSandbox::new(config).unwrap();
            s.exec("true", Duration::from_secs(10)).unwrap();
            assert_eq!(fake.subcommands(), v(&["ps", "run", "exec"]), "failing lookup: {failing}");
            assert_eq!(fake.calls()[1], hardened());
        }
    }

    #[test]
    fn reconnect_with_two_matches_is_ambiguous() {
        let fake = Fake::new();
        fake.set("ps_ids", "abc123\ndef456\n");
        let config = ContainerConfig { reconnect: true, ..fake.config.clone() };
        let s = ContainerSandbox::new(config).unwrap();
        match s.exec("true", Duration::from_secs(10)) {
            Err(SandboxError::Failed(m)) => {
                assert!(m.starts_with("ambiguous reconnect: 2 containers labeled test-box"), "{m}")
            }
            other => panic!("expected an ambiguity error, got {other:?}"),
        }
        assert_eq!(fake.subcommands(), v(&["ps"]));
        assert_eq!(s.container_id(), None);
    }

    #[test]
    fn apple_reconnect_is_a_config_error_when_it_would_run() {
        let fake = Fake::new();
        let config = ContainerConfig { runtime: Runtime::Apple, reconnect: true, ..fake.config.clone() };
        let s = ContainerSandbox::new(config).unwrap();
        assert!(matches!(s.read("a.txt"), Err(SandboxError::Config(_))));
        assert!(fake.calls().is_empty());
        // Ephemeral Apple runs with the Docker-shaped flags.
        let config = ContainerConfig { runtime: Runtime::Apple, ..fake.config.clone() };
        let s = ContainerSandbox::new(config).unwrap();
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(fake.calls()[0], hardened());
        assert!(s.instructions(true).unwrap().starts_with("You run inside an Apple container"));
    }

    #[test]
    fn start_failure_carries_the_cli_message() {
        let fake = Fake::new();
        fake.set("run_fail", "Unable to find image 'nope:latest' locally");
        let s = fake.sandbox();
        match s.read("a.txt") {
            Err(SandboxError::Failed(m)) => assert!(m.contains("Unable to find image 'nope:latest'"), "{m}"),
            other => panic!("expected a start failure, got {other:?}"),
        }
        assert_eq!(s.container_id(), None);
    }

    #[test]
    fn missing_binary_and_bad_config_are_config_errors() {
        let empty = tempfile::tempdir().unwrap();
        let search = empty.path().as_os_str();
        match ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), search) {
            Err(SandboxError::Config(m)) => assert!(m.contains("`docker`") && m.contains("install Docker"), "{m}"),
            other => panic!("expected a config error, got {other:?}"),
        }
        match ContainerSandbox::with_search_path(ContainerConfig::apple("alpine"), search) {
            Err(SandboxError::Config(m)) => assert!(m.contains("`container`"), "{m}"),
            other => panic!("expected a config error, got {other:?}"),
        }
        let gone = ContainerConfig { binary: Some("/nonexistent/docker".into()), ..ContainerConfig::docker("alpine") };
        match ContainerSandbox::new(gone) {
            Err(SandboxError::Config(m)) => assert!(m.contains("/nonexistent/docker"), "{m}"),
            other => panic!("expected a config error, got {other:?}"),
        }

        let fake = Fake::new();
        let bad = |edit: &dyn Fn(&mut ContainerConfig)| {
            let mut config = fake.config.clone();
            edit(&mut config);
            ContainerSandbox::new(config).map(|_| ())
        };
        assert!(matches!(bad(&|_| {}), Ok(())));
        type Edit = Box<dyn Fn(&mut ContainerConfig)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("no image", Box::new(|c| c.image = "  ".into())),
            ("flag image", Box::new(|c| c.image = "--privileged".into())),
            ("relative cwd", Box::new(|c| c.cwd = "work".into())),
            ("cwd with ..", Box::new(|c| c.cwd = "/a/../b".into())),
            ("cwd with :", Box::new(|c| c.cwd = "/a:b".into())),
            ("tmpfs over /", Box::new(|c| c.cwd = "/".into())),
            ("reconnect without name", Box::new(|c| (c.reconnect, c.name) = (true, None))),
            ("bad name", Box::new(|c| c.name = Some("-x".into()))),
            ("bad network", Box::new(|c| c.network = Network::Named("a b".into()))),
            ("bad cap", Box::new(|c| c.cap_add = vec!["ALL --privileged".into()])),
            ("flag memory", Box::new(|c| c.memory = Some("--privileged".into()))),
            ("relative bind", Box::new(|c| c.binds = vec![Bind::read_only("data", "/data")])),
            ("colon bind", Box::new(|c| c.binds = vec![Bind::read_only("/a:/etc", "/data")])),
            ("env key", Box::new(|c| c.env = [("A=B".to_string(), "c".to_string())].into())),
        ];
        for (what, edit) in cases {
            assert!(matches!(bad(&*edit), Err(SandboxError::Config(_))), "{what}");
        }
    }

    #[test]
    fn path_search_finds_executables_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        fs::write(a.join("docker"), "not executable").unwrap();
        fs::write(b.join("docker"), "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(b.join("docker"), fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([a.clone(), b.clone()]).unwrap();
        #[cfg(unix)]
        assert_eq!(find_on_path("docker", &path), Some(b.join("docker")));
        assert_eq!(find_on_path("container", &path), None);
        let s = ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), &path).unwrap();
        assert!(s.binary().ends_with("docker"));
        assert!(s.container_name().starts_with("nexo-"));
        let t = ContainerSandbox::with_search_path(ContainerConfig::docker("alpine"), &path).unwrap();
        assert_ne!(s.container_name(), t.container_name());
    }

    #[test]
    fn instructions_reflect_the_config() {
        let fake = Fake::new();
        let s = fake.sandbox();
        let text = s.instructions(true).unwrap();
        assert!(
            text.starts_with(
                "You run inside a Docker container (image alpine:3.20), working directory /workspace, network none"
            ),
            "{text}"
        );
        assert!(text.contains("read-only") && !text.contains('\n'), "{text}");
        let config = ContainerConfig {
            network: Network::Bridge,
            readonly_rootfs: false,
            binds: vec![Bind::read_only("/srv", "/workspace/srv")],
            user: Some("1000".into()),
            ..fake.config.clone()
        };
        let text = ContainerSandbox::new(config).unwrap().instructions(true).unwrap();
        for part in ["network bridge", "filesystem is writable", "/workspace/srv (read-only)", "user 1000"] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert_eq!(s.name(), "container");
        assert!(s.supports_shell());
    }

    #[test]
    fn a_removed_container_is_forgotten() {
        let fake = Fake::new();
        let s = fake.sandbox();
        s.exec("true", Duration::from_secs(10)).unwrap();
        fake.set("gone", "");
        match s.read("a.txt") {
            Err(SandboxError::Failed(m)) => assert!(m.contains("No such container"), "{m}"),
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(s.container_id(), None);
        fs::remove_file(fake.path("gone")).unwrap();
        s.exec("true", Duration::from_secs(10)).unwrap();
        assert_eq!(s.container_id().as_deref(), Some("c0ffee2"));
    }

    /// Runs a real alpine container; needs a Docker engine and
    /// `NEXO_LIVE_DOCKER=1`.
    #[test]
    fn live_docker_round_trip() {
        if std::env::var("NEXO_LIVE_DOCKER").as_deref() != Ok("1") {
            eprintln!("live_docker_round_trip skipped: set NEXO_LIVE_DOCKER=1 with a running Docker engine");
            return;
        }
        let s = ContainerSandbox::new(ContainerConfig::docker("alpine:3.20")).unwrap();
        let contents = "hello $(touch /tmp/pwned) 'q'\nsecond line\n";
        s.write("src/a b.txt", contents).unwrap();
        let text = s.read("src/a b.txt").unwrap();
        assert_eq!(text.text, contents);
        assert!(text.mtime.is_some());
        assert!(s.stat("src/a b.txt").unwrap().is_some());
        assert_eq!(s.stat("missing").unwrap(), None);
        assert!(matches!(s.read("missing"), Err(SandboxError::NotFound(_))));
        assert_eq!(s.glob("**/*.txt").unwrap().paths, vec!["src/a b.txt"]);
        let out = s.exec("cat 'src/a b.txt'; echo err >&2; exit 3", Duration::from_secs(30)).unwrap();
        assert_eq!((out.status, out.stdout.as_str(), out.stderr.as_str()), (3, contents, "err\n"));
        assert_ne!(s.exec("touch /etc/x", Duration::from_secs(30)).unwrap().status, 0, "the root is read-only");
        assert_ne!(s.exec("test -e /tmp/pwned", Duration::from_secs(30)).unwrap().status, 0);
        let offline = s.exec("wget -q -T 3 -O /dev/null http://example.com", Duration::from_secs(30)).unwrap();
        assert_ne!(offline.status, 0, "the network is off");
        assert!(matches!(s.exec("sleep 20", Duration::from_secs(1)), Err(SandboxError::Timeout(_))));
        let id = s.container_id().unwrap();
        s.close().unwrap();
        s.close().unwrap();
        let left = Command::new(s.binary()).args(["ps", "-aq", "--filter", &format!("id={id}")]).output().unwrap();
        assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the container was removed");
    }
}
