//! Starting stdio servers, keeping their stderr tail, and ending them with
//! everything they started.
//!
//! The child is ours, not rmcp's: rmcp's `TokioChildProcess` SIGKILLs the
//! whole process group when dropped, which would kill the orphan guard before
//! it could end what the server detached. Here the guard is asked to stop
//! (SIGTERM) and does the killing itself; without a guard the process group
//! is killed.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nexo_sandbox::{Confinement, PrivateNet, ProgramConfinement, SystemView};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::config::{ServerNet, StdioSpec};
use crate::error::McpError;
use crate::guard::{GUARD_SUBCOMMAND, GuardArgs, ProgramOptions, spawn_message};
use crate::network::{Served, ServerNetwork, serve};

/// The most stderr bytes kept; older bytes are dropped.
const STDERR_KEEP: usize = 16 << 10;
/// The most stderr characters shown in an error.
const STDERR_SHOWN: usize = 2000;
/// How long a guard may take to end everything after SIGTERM before the
/// process group is killed.
const GUARD_GRACE: Duration = Duration::from_secs(2);

/// The last bytes a server wrote to stderr, drained on a task so a chatty
/// server never blocks on a full pipe.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.extend(bytes);
        let excess = kept.len().saturating_sub(STDERR_KEEP);
        kept.drain(..excess);
    }

    /// The tail as text: at most [`STDERR_SHOWN`] characters, from a line start where possible.
    pub(crate) fn text(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes: Vec<u8> = kept.iter().copied().collect();
        drop(kept);
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim_end();
        let count = text.chars().count();
        if count <= STDERR_SHOWN {
            return text.to_string();
        }
        let tail: String = text.chars().skip(count - STDERR_SHOWN).collect();
        match tail.split_once('\n') {
            Some((_, rest)) if !rest.is_empty() => format!("…\n{rest}"),
            _ => format!("…{tail}"),
        }
    }

    fn drain(&self, mut pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static) {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                tail.push(&buf[..n]);
            }
        });
    }
}

/// A started server: its pipes for rmcp, and the process to end.
pub(crate) struct Started {
    pub(crate) stdout: ChildStdout,
    pub(crate) stdin: ChildStdin,
    pub(crate) process: ServerProcess,
    pub(crate) stderr: StderrTail,
}

/// The server's process (or its guard), ended on drop.
pub(crate) struct ServerProcess {
    child: Child,
    /// Leader of the process group it was started in.
    pid: Option<Pid>,
    guarded: bool,
    ended: bool,
    /// Its network through the host's gateway, served while it lives.
    network: Option<Served>,
}

impl ServerProcess {
    /// Waits up to `grace` for it to exit by itself (rmcp has closed its
    /// stdin), then ends it and everything it started.
    pub(crate) async fn shutdown(mut self, grace: Duration) {
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            self.terminate();
            if tokio::time::timeout(GUARD_GRACE, self.child.wait()).await.is_err() {
                self.kill_group();
                let _ = self.child.wait().await;
            }
        }
        // Unguarded, what the server left in its group outlives it otherwise.
        if !self.guarded {
            self.kill_group();
        }
        // Its connections are reported before the close is over.
        if let Some(network) = self.network.take() {
            network.stop().await;
        }
        self.ended = true;
    }

    /// Waits until its network through the host's gateway is served (at
    /// once without `net-hosts`), or says why it never will be.
    pub(crate) async fn network_ready(&mut self) -> Result<(), String> {
        match &mut self.network {
            Some(served) => served.ready().await,
            None => Ok(()),
        }
    }

    /// How it exited, if it has (reaping it).
    pub(crate) fn exit_status(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        // A guard reports the server's status as its own, or 137 when it killed it.
        Some(match status.code() {
            Some(code) => format!("status {code}"),
            None => status.to_string(),
        })
    }

    /// Asks the guard to end everything (it kills and reaps the lot), or,
    /// without a guard, kills the process group.
    fn terminate(&self) {
        match (self.pid, self.guarded) {
            (Some(pid), true) => {
                let _ = kill_process(pid, Signal::TERM);
            }
            _ => self.kill_group(),
        }
    }

    fn kill_group(&self) {
        if let Some(pid) = self.pid {
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if !self.ended {
            // Synchronous: works without a runtime too. tokio reaps the child later.
            self.terminate();
        }
    }
}

/// `PATH` for the server: the configured one, else the host's.
fn server_path(env: &BTreeMap<String, String>) -> Option<OsString> {
    match env.get("PATH") {
        Some(p) => Some(p.into()),
        None => std::env::var_os("PATH"),
    }
}

/// `command` as found on `path` (or as given, if it has a `/`).
fn find_program(command: &str, path: Option<&OsString>, cwd: Option<&Path>) -> Option<PathBuf> {
    if command.contains('/') {
        let p = Path::new(command);
        let p = match cwd {
            Some(cwd) if p.is_relative() => cwd.join(p),
            _ => p.to_path_buf(),
        };
        return p.is_file().then_some(p);
    }
    std::env::split_paths(path?).filter(|d| d.is_absolute()).map(|d| d.join(command)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The mechanism a confined server runs under, probed (and cached) here so a
/// missing one fails before anything starts.
fn resolve_confinement(
    server: &str,
    writable: &Path,
    network: bool,
    mechanism: Confinement,
    view: &SystemView,
) -> Result<ProgramOptions, McpError> {
    let mut probe = ProgramConfinement::new(writable);
    probe.network = network;
    probe.confinement = mechanism;
    let confinement = probe.effective().map_err(|e| McpError::Spawn {
        server: server.to_string(),
        message: format!(
            "`confine = true`, but no OS confinement works here: {e}; or remove `confine` from [mcp.{server}]"
        ),
    })?;
    // Found on the host's PATH here: the guard runs with the server's environment.
    let bwrap = match confinement {
        Confinement::Bubblewrap => std::env::var_os("PATH").and_then(|path| nexo_sandbox::find_on_path("bwrap", &path)),
        _ => None,
    };
    Ok(ProgramOptions {
        confinement,
        writable: writable.to_path_buf(),
        network,
        net_fd: None,
        bwrap,
        view: view.clone(),
    })
}

/// Starts the server (through the guard when `guard` is given), with piped
/// stdio and only its configured environment.
///
/// Call it from async code on a runtime worker, never inside
/// `spawn_blocking`: without a guard, bubblewrap's `--die-with-parent` is a
/// parent-death signal, which fires when the *thread* that spawned it exits
/// (blocking-pool threads come and go). The guard polls its parent process
/// instead, so it has no such trap.
pub(crate) fn start(
    server: &str,
    spec: &StdioSpec,
    guard: Option<&Path>,
    mechanism: Confinement,
    view: &SystemView,
    network: Option<&dyn ServerNetwork>,
) -> Result<Started, McpError> {
    let spawn_err = |message: String| McpError::Spawn { server: server.to_string(), message };
    let path = server_path(&spec.env);
    if let Some(cwd) = &spec.cwd
        && !cwd.is_dir()
    {
        return Err(spawn_err(format!(
            "its `cwd` {} is not a directory; create it or fix `cwd` in [mcp.{server}]",
            cwd.display()
        )));
    }
    let Some(program) = find_program(&spec.command, path.as_ref(), spec.cwd.as_deref()) else {
        return Err(spawn_err(format!(
            "`{}` was not found{}; install it, give its absolute path as `command`, or set `PATH` in `env` of \
             [mcp.{server}]",
            spec.command,
            if spec.command.contains('/') { String::new() } else { " on PATH".to_string() }
        )));
    };
    let mut confine = match (&spec.confine, &spec.cwd) {
        (Some(net), Some(cwd)) => Some(resolve_confinement(server, cwd, *net == ServerNet::Host, mechanism, view)?),
        _ => None,
    };
    // `net-hosts`: a namespace of its own, its listener served by the host's gateway.
    let proxied = match (&spec.confine, &confine) {
        (Some(ServerNet::Proxied(..)), Some(o)) if o.confinement == Confinement::Unconfined => {
            return Err(spawn_err(format!(
                "its `net-hosts` grant network only through nexo's egress proxy, which needs OS confinement, and \
                 confinement is turned off here (`--shell-confinement none`); turn it on, or remove `net-hosts` from \
                 [mcp.{server}]"
            )));
        }
        (Some(ServerNet::Proxied(hosts, private)), Some(_)) => {
            let Some(network) = network else {
                return Err(spawn_err(format!(
                    "its `net-hosts` need nexo's egress proxy, which this embedding of nexo's MCP client does not \
                     give (Clients::with_network); remove `net-hosts` from [mcp.{server}]"
                )));
            };
            let gateway = network
                .gateway(server, hosts, *private)
                .map_err(|e| spawn_err(format!("cannot give it network: {e}")))?;
            let net = PrivateNet::new().map_err(|e| spawn_err(format!("cannot set up its network: {e}")))?;
            Some((net, gateway))
        }
        _ => None,
    };
    let net_fd = proxied.as_ref().map(|(net, _)| net.child_fd());
    if let Some(o) = &mut confine {
        o.net_fd = net_fd;
    }
    let argv: Vec<OsString> =
        std::iter::once(program.clone().into_os_string()).chain(spec.args.iter().map(OsString::from)).collect();

    // The std command, confined unless the guard confines it.
    let (mut command, resources) = match (guard, &confine) {
        (Some(exe), _) => {
            let args = GuardArgs { host: std::process::id() as i32, confine: confine.clone(), argv };
            let mut cmd = std::process::Command::new(exe);
            cmd.arg(GUARD_SUBCOMMAND).args(args.to_args());
            match net_fd {
                Some(fd) => nexo_sandbox::close_inherited_fds_but(&mut cmd, fd),
                None => nexo_sandbox::close_inherited_fds(&mut cmd),
            }
            (cmd, None)
        }
        (None, Some(o)) => {
            let confined = ProgramConfinement {
                confinement: o.confinement,
                network: o.network,
                proxied: o.net_fd,
                bwrap: o.bwrap.clone(),
                view: o.view.clone(),
                ..ProgramConfinement::new(&o.writable)
            }
            .command(&argv[0], &argv[1..])
            .map_err(|e| spawn_err(format!("cannot confine it: {e}")))?;
            let (cmd, resources) = confined.into_parts();
            (cmd, Some(resources))
        }
        (None, None) => {
            let mut cmd = std::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            nexo_sandbox::close_inherited_fds(&mut cmd);
            (cmd, None)
        }
    };
    // Only the configured environment: the host's (model API keys) never reaches a server.
    command.env_clear().envs(&spec.env);
    if let (false, Some(p)) = (spec.env.contains_key("PATH"), &path) {
        command.env("PATH", p);
    }
    if proxied.is_some() {
        command.envs(nexo_sandbox::proxy_env());
    }
    if let Some(cwd) = &spec.cwd
        && !matches!(resources.as_ref().map(|r| r.confinement()), Some(Confinement::Bubblewrap))
    {
        command.current_dir(cwd);
    }
    let mut command = tokio::process::Command::from(command);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let message = match &resources {
                Some(r) => r.explain(command.as_std(), e).to_string(),
                None => match guard {
                    Some(exe) => format!("cannot start the orphan guard {}: {e}", exe.display()),
                    None => spawn_message(program.as_os_str(), &e),
                },
            };
            return Err(spawn_err(message));
        }
    };
    drop(resources);
    let network = proxied.map(|(net, gateway)| serve(net.into_receiver(), gateway));
    let pid = child.id().and_then(|id| Pid::from_raw(id as i32));
    let pipes = (child.stdout.take(), child.stdin.take(), child.stderr.take());
    let process = ServerProcess { child, pid, guarded: guard.is_some(), ended: false, network };
    let (Some(stdout), Some(stdin), Some(stderr)) = pipes else {
        return Err(spawn_err("its stdio pipes were not set up".into()));
    };
    let tail = StderrTail::default();
    tail.drain(stderr);
    Ok(Started { stdout, stdin, process, stderr: tail })
}
