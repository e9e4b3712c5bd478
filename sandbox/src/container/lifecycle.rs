//! The container's lifecycle: its hardened `run` flags, starting it on
//! first use, tying an ephemeral one to this process, reconnecting to a
//! labeled one, and forgetting one removed behind the sandbox's back.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::strings;
use super::config::Runtime;
use super::sandbox::ContainerSandbox;
use super::validate::is_plain_id;
use crate::process::{Output as CliOutput, close_inherited_fds};
use crate::{MAX_OUTPUT_BYTES, SandboxError};

/// The label that marks nexo's containers; its value is the sandbox name.
pub const CONTAINER_LABEL: &str = "nexo.sandbox.id";

/// The keep-alive command: present in busybox/alpine and debian-slim alike.
const KEEP_ALIVE: [&str; 3] = ["tail", "-f", "/dev/null"];

/// The tether's command: waits for its stdin to close, then stops the
/// container (the engine's init passes SIGTERM on to the keep-alive).
const TETHER: &str = "cat > /dev/null; kill -TERM 1";

impl ContainerSandbox {
    /// The argv (after the binary) that creates the container.
    pub fn run_args(&self) -> Vec<String> {
        let c = &self.config;
        // `--init`: the engine's init is PID 1. It reaps what commands leave in
        // the background (under the keep-alive their zombies would fill the pids
        // limit) and passes SIGTERM on (the keep-alive as PID 1 ignores it, so
        // podman's `rm -f` waited 10 seconds on every close).
        let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--init".into()];
        if !c.reconnect {
            // Stopped, it goes: what stops it when nexo cannot close it is the tether.
            args.push("--rm".into());
        }
        args.extend(["--label".into(), format!("{CONTAINER_LABEL}={}", self.name)]);
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
        if !self.config.reconnect
            && let Err(e) = self.tie(&id)
        {
            let _ = self.op(&strings(&["rm", "-f", &id]), None, 1 << 20);
            return Err(e);
        }
        *slot = Some(id.clone());
        Ok(id)
    }

    /// Ties an ephemeral container to this process: an `exec` whose stdin is a
    /// pipe only this process holds (close-on-exec, so no child inherits it).
    /// However the process ends, even SIGKILL, the pipe closes, the command
    /// inside stops the container, and `--rm` removes it. Not for Apple's CLI,
    /// whose `exec -i` and init are unverified.
    fn tie(&self, id: &str) -> Result<(), SandboxError> {
        if self.config.runtime == Runtime::Apple {
            return Ok(());
        }
        let mut command = Command::new(&self.binary);
        command.args(["exec", "-i", id, "sh", "-c", TETHER]);
        command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        // Its own group: a terminal's Ctrl-C reaches nexo, and the pipe does the rest.
        command.process_group(0);
        close_inherited_fds(&mut command);
        let child = command
            .spawn()
            .map_err(|e| SandboxError::Failed(format!("cannot run {}: {e}; check `binary`", self.binary.display())))?;
        if let Some(old) = self.tether_slot().replace(child) {
            self.untie(old);
        }
        Ok(())
    }

    /// Ends a tether and reaps it: its stdin closes, and a container already
    /// removed has ended its `exec`; one that lingers past `op_timeout` is killed.
    pub(crate) fn untie(&self, mut tether: Child) {
        drop(tether.stdin.take());
        let deadline = Instant::now() + self.config.op_timeout;
        while matches!(tether.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = tether.kill();
        let _ = tether.wait();
    }

    pub(crate) fn tether_slot(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        // The slot holds a child handle; a panic elsewhere cannot leave it half-written.
        self.tether.lock().unwrap_or_else(|e| e.into_inner())
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
                if let Some(tether) = self.tether_slot().take() {
                    self.untie(tether);
                }
            }
        }
    }
}

/// Whether the CLI said the container does not exist: Docker writes "No such
/// container", podman "no such container".
pub(crate) fn is_gone(stderr: &str) -> bool {
    stderr.to_lowercase().contains("no such container")
}
