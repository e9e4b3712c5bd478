//! The container's lifecycle: its hardened `run` flags, starting it on
//! first use, reconnecting to a labeled one, and forgetting one removed
//! behind the sandbox's back.

use super::cli::strings;
use super::config::Runtime;
use super::sandbox::ContainerSandbox;
use super::validate::is_plain_id;
use crate::process::Output as CliOutput;
use crate::{MAX_OUTPUT_BYTES, SandboxError};

/// The label that marks nexo's containers; its value is the sandbox name.
pub const CONTAINER_LABEL: &str = "nexo.sandbox.id";

/// The keep-alive command: present in busybox/alpine and debian-slim alike.
const KEEP_ALIVE: [&str; 3] = ["tail", "-f", "/dev/null"];

impl ContainerSandbox {
    /// The argv (after the binary) that creates the container.
    pub fn run_args(&self) -> Vec<String> {
        let c = &self.config;
        // `--init`: the engine's init is PID 1. It reaps what commands leave in
        // the background (under the keep-alive their zombies would fill the pids
        // limit) and passes SIGTERM on (the keep-alive as PID 1 ignores it, so
        // podman's `rm -f` waited 10 seconds on every close).
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--init".into(),
            "--label".into(),
            format!("{CONTAINER_LABEL}={}", self.name),
        ];
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

    /// The container id, starting the container on first use. The lock is
    /// held while starting so concurrent first calls start one container.
    pub(crate) fn container(&self) -> Result<String, SandboxError> {
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
            self.remove_failed_start();
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

    /// Removes what a failed `run` left: podman creates the container before
    /// starting it, and a start that fails leaves it behind. Best effort: the
    /// start's error is the one to report.
    fn remove_failed_start(&self) {
        if self.config.runtime == Runtime::Apple {
            // Its label filter is unverified: it might match other containers.
            return;
        }
        let filter = format!("label={CONTAINER_LABEL}={}", self.name);
        let Ok(Some(out)) =
            self.cli(&strings(&["ps", "-aq", "--filter", &filter]), None, self.config.op_timeout, 1 << 20)
        else {
            return;
        };
        for id in String::from_utf8_lossy(&out.stdout.bytes).split_whitespace().filter(|id| is_plain_id(id)) {
            let _ = self.op(&strings(&["rm", "-f", id]), None, 1 << 20);
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

    /// Forgets a container removed behind our back, so the next tool call
    /// starts afresh. Not called while starting: the slot is locked then.
    pub(crate) fn forget_if_gone(&self, id: &str, out: &CliOutput) {
        if !out.ok() && is_gone(&String::from_utf8_lossy(&out.stderr.bytes)) {
            let mut slot = self.slot();
            if slot.as_deref() == Some(id) {
                *slot = None;
            }
        }
    }
}

/// Whether the CLI said the container does not exist: Docker writes "No such
/// container", podman "no such container".
pub(crate) fn is_gone(stderr: &str) -> bool {
    stderr.to_lowercase().contains("no such container")
}
