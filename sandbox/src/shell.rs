//! Running shell commands for the local sandbox: a narrowed environment, a
//! timeout, capped output, and OS confinement where the kernel allows it.
//!
//! Every command runs as `/bin/sh -c <command>` in the sandbox root, with an
//! environment that holds only `PATH`, `HOME`, `LANG` and the policy's
//! additions, resource limits ([`ShellLimits`]), and no descriptor of the host
//! beyond its stdin (`/dev/null`), stdout and stderr. The command ends when the
//! shell exits or the time limit passes; either way every process it started
//! is killed, including ones that left its process group or session:
//!
//! - under bubblewrap, by its PID namespace: when the namespace's first
//!   process ends, the kernel kills the rest, and `--die-with-parent` ends the
//!   sandbox if the host dies;
//! - otherwise, by a shepherd process (see `confine.rs`): a child subreaper
//!   between the host and the shell, which every orphan reparents to, and
//!   which kills them all when the shell exits, on a timeout, or when the host
//!   dies. A PID namespace would need privileges the host may lack; a process
//!   group or session is left by a plain `setsid`.
//!
//! Confinement is chosen by [`Confinement`]; see there for what each mechanism
//! does and does not cover, and [`ShellPolicy::describe`] for the summary the
//! host shows.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
};
use nexo_text::head_chars;
use rustix::io::Errno;
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::confine::{self, LIMITS_REFUSED, Limits, SECCOMP_REFUSED, SHEPHERD_REFUSED, Sockets};
use crate::landlock_abi::{KernelLandlock, LandlockUnusable, required_abi};
use crate::network::{Enter, Gateway, NETWORK_REFUSED, PROXY_ADDR, PrivateNet, proxy_env};
use crate::process::{AfterExit, Job, OnTimeout, Outcome, cloexec_all_but};
use crate::view::{LANDLOCK_DEVICES, SystemView};
use crate::{ExecOutput, SandboxError};

pub use crate::process::MAX_OUTPUT_BYTES;

/// `PATH` inside the sandbox unless [`ShellPolicy::env`] sets one. A fixed
/// list rather than the host's `PATH`, which may name user-writable or
/// relative directories; add e.g. `~/.cargo/bin` through the policy if the
/// agent needs it.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The shell every command runs under.
const SHELL: &str = "/bin/sh";

/// Time limit for the one-off bubblewrap probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errno the Landlock `pre_exec` hook reports when the ruleset would not be
/// fully enforced. `execve` never returns it, so the parent can tell.
const LANDLOCK_REFUSED: Errno = Errno::NOTRECOVERABLE;

/// Errno the Landlock `pre_exec` hook reports when it cannot drop capabilities.
const CAPS_REFUSED: Errno = Errno::OWNERDEAD;

/// How the local sandbox runs shell commands.
#[derive(Debug, Clone, Default)]
pub struct ShellPolicy {
    /// Variables added to the narrowed environment (`PATH`, `HOME`, `LANG`);
    /// an entry with one of those names replaces the default.
    pub env: Vec<(String, String)>,
    /// How commands are confined.
    pub confinement: Confinement,
    /// The bubblewrap binary. `None` looks for `bwrap` on the host's `PATH`.
    /// Set it when bwrap lives elsewhere (or, in tests, to a bogus path).
    pub bwrap: Option<PathBuf>,
    /// Resource limits for every process of a command.
    pub limits: ShellLimits,
    /// What of the host commands may read besides the sandbox root.
    pub view: SystemView,
}

/// Resource limits for shell commands, set as rlimits (soft and hard alike, so
/// a command cannot raise them) on the shell under every confinement and
/// inherited by everything it starts. `None` keeps the host's limit; a value
/// above the host's hard limit is lowered to it. Core dumps are always off.
///
/// Except for [`ShellLimits::processes`] these are limits *per process*, not
/// for the command as a whole: ten processes may each use the memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellLimits {
    /// `RLIMIT_NPROC`: a process fails to fork once its real user has this
    /// many processes (threads count), host processes of that user included.
    /// The kernel does not enforce it for real uid 0, so a host running as
    /// root gets no process-count limit. Default 4096.
    pub processes: Option<u64>,
    /// `RLIMIT_AS`: address space of each process, in bytes; allocations past
    /// it fail. Runtimes that reserve much more than they use (some JVM and
    /// JavaScript engine settings) may need more. Default 8 GiB.
    pub memory_bytes: Option<u64>,
    /// `RLIMIT_CPU`: CPU seconds of each process, after which it is killed
    /// (SIGXCPU, then SIGKILL). The wall-clock time limit bounds the command
    /// as a whole; this stops one runaway process. Default 1800.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file a process may write, in bytes; a
    /// write past it fails and the writer gets SIGXFSZ. Default 2 GiB.
    pub file_size_bytes: Option<u64>,
}

impl Default for ShellLimits {
    fn default() -> Self {
        ShellLimits {
            processes: Some(4096),
            memory_bytes: Some(8 << 30),
            cpu_seconds: Some(1800),
            file_size_bytes: Some(2 << 30),
        }
    }
}

impl ShellLimits {
    /// No limits beyond the host's own (core dumps still off).
    pub const NONE: ShellLimits =
        ShellLimits { processes: None, memory_bytes: None, cpu_seconds: None, file_size_bytes: None };

    pub(crate) fn resolve(&self) -> Limits {
        Limits::new(self.processes, self.memory_bytes, self.cpu_seconds, self.file_size_bytes)
    }
}

impl fmt::Display for ShellLimits {
    /// One line, e.g. `processes 4096 (not enforced for root), memory 8 GiB per process, ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn bytes(n: u64) -> String {
            match n {
                n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
                n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
                n => format!("{n} bytes"),
            }
        }
        let or_host = |v: Option<String>| v.unwrap_or_else(|| "host's".into());
        let root = rustix::process::getuid().is_root();
        write!(
            f,
            "processes {}{}, memory {} per process, CPU time {} per process, file size {}",
            or_host(self.processes.map(|n| n.to_string())),
            if root && self.processes.is_some() { " (not enforced: the host runs as root)" } else { "" },
            or_host(self.memory_bytes.map(bytes)),
            or_host(self.cpu_seconds.map(|s| format!("{s} s"))),
            or_host(self.file_size_bytes.map(bytes)),
        )
    }
}

/// How shell commands are confined by the operating system.
///
/// Both mechanisms promise the same: of the host filesystem only the
/// [`SystemView`] readable (programs and libraries; no home directory, no
/// `/root`, no `/etc/shadow`, no server data), only the sandbox root
/// writable, no sockets at all except connected Unix stream
/// pairs (`socketpair`), so no network and no host daemon's Unix socket
/// (a command run with a [`crate::Gateway`] gets TCP in a network namespace
/// of its own, whose one way out is that gateway: see [`crate::network`]); no
/// capabilities, so a host running as root does not hand root's privileges to
/// the command; and no process outliving the command. Under every mechanism,
/// Unconfined included, commands get [`ShellLimits`], none of the host's open
/// descriptors, and the process cleanup (under Unconfined the command could
/// still kill the process that does it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confinement {
    /// Bubblewrap if `bwrap` works here, else Landlock if the kernel supports
    /// it; refuse to run (a [`SandboxError::Config`]) if neither does.
    #[default]
    Auto,
    /// Bubblewrap (`bwrap`, from the `bubblewrap` package): an empty
    /// read-only root holding the [`SystemView`]'s paths bound read-only, the
    /// sandbox root bound writable, a private empty `/tmp`, a minimal `/dev`,
    /// a fresh `/proc` with `/proc/sys` read-only, and new network,
    /// PID, IPC, UTS and cgroup namespaces: no network at all, no view of host
    /// processes. The socket filter Landlock uses is loaded too
    /// (`--seccomp`), since a network namespace does not cover pathname Unix
    /// sockets in bound paths; so servers on the sandbox's own loopback do
    /// not work either.
    ///
    /// Under bubblewrap a command killed by signal N reports status 128 + N
    /// (bwrap's own convention), not -1.
    Bubblewrap,
    /// Landlock, ABI 6 or newer (Linux 6.12+), with a seccomp filter:
    /// read and execute only beneath the [`SystemView`]'s paths (and
    /// `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom`), everything
    /// beneath the root, and `/dev/null`; `/tmp` is neither readable nor
    /// writable, since it is shared with the host (point `TMPDIR` inside the
    /// root through [`ShellPolicy::env`] if tools need it), and neither is
    /// `/proc` unless the view adds it. Landlock denies TCP bind and connect and keeps signals
    /// and abstract Unix sockets inside the sandbox; the seccomp filter
    /// refuses `socket(2)` for every family (MPTCP, UDP, raw, netlink and
    /// pathname Unix sockets all included), datagram socket pairs, io_uring
    /// and `pidfd_getfd`. A shepherd process outside the Landlock domain
    /// ends every process the command started.
    ///
    /// Host processes cannot be signalled or traced, and `/proc` is out of
    /// the default view; a view that adds `/proc` shows them (`ps`, their
    /// command lines), though Landlock still refuses their environment,
    /// memory, descriptors and root. Older kernels are refused rather than
    /// given weaker confinement.
    Landlock,
    /// No OS confinement: only the narrowed environment, the timeout, the
    /// output cap, [`ShellLimits`], descriptor closing and the shepherd (which
    /// the command, running as the host user, could kill). Only when the
    /// operator explicitly opts in.
    Unconfined,
}

impl Confinement {
    /// What commands run under this mechanism can and cannot do, as one
    /// sentence; written from what this module enforces.
    pub fn guarantees(self) -> &'static str {
        match self {
            Confinement::Bubblewrap => {
                "bubblewrap: only the sandbox root is writable, of the rest of the host filesystem only the system \
                 view is visible, read-only; /tmp is private and empty; no network and no sockets except connected Unix socket pairs \
                 (granted network: TCP in a namespace of its own, whose one way out is nexo's egress proxy); no \
                 SysV IPC or keyrings; no capabilities; host processes invisible; none of the host's open descriptors; every process ends \
                 with the command, on a timeout, or when the host dies"
            }
            Confinement::Landlock => {
                "Landlock and seccomp: only the sandbox root (and /dev/null) is writable, of the rest of the host \
                 filesystem only the system view is readable, /tmp is neither; no network and no sockets except connected Unix \
                 socket pairs (granted network: TCP to nexo's egress proxy alone, in a namespace of its own); no \
                 SysV IPC or keyrings; no capabilities; host processes not signallable, their /proc \
                 unreadable unless the view adds /proc; none of the host's open descriptors; every process ends with the command, on a timeout, or when the host dies"
            }
            Confinement::Unconfined => {
                "unconfined: commands run as the host user with its filesystem, network and processes; only the \
                 environment, the time limit, resource limits and descriptor closing apply, and processes are ended \
                 with the command unless the command kills the process that does it"
            }
            Confinement::Auto => "auto: bubblewrap if it works here, else Landlock, else refuse to run",
        }
    }
}

impl fmt::Display for Confinement {
    /// The mechanism's name as the operator writes it: `auto`, `bubblewrap`, `landlock` or `unconfined`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Confinement::Auto => "auto",
            Confinement::Bubblewrap => "bubblewrap",
            Confinement::Landlock => "landlock",
            Confinement::Unconfined => "unconfined",
        })
    }
}

impl ShellPolicy {
    /// One line for logs and `nexo inspect`: the mechanism commands actually
    /// run under, what it guarantees, and the resource limits; or why
    /// commands cannot run. Probes as [`ShellPolicy::effective_confinement`].
    pub fn describe(&self) -> String {
        match self.effective_confinement() {
            Ok(Confinement::Unconfined) => {
                format!("shell confinement {}; limits: {}", Confinement::Unconfined.guarantees(), self.limits)
            }
            Ok(c) => format!(
                "shell confinement {}; system view: {}; limits: {}",
                c.guarantees(),
                self.view.describe(),
                self.limits
            ),
            Err(e) => format!("shell commands cannot run: {e}"),
        }
    }

    /// The mechanism commands will actually run under: [`Confinement::Auto`]
    /// resolved, and a requested mechanism checked to work here. Probes run
    /// once per process and are cached.
    pub fn effective_confinement(&self) -> Result<Confinement, SandboxError> {
        match self.confinement {
            Confinement::Unconfined => match confine::shepherd_supported() {
                Ok(()) => Ok(Confinement::Unconfined),
                Err(why) => Err(SandboxError::Config(format!("shell commands cannot run: {why}"))),
            },
            Confinement::Bubblewrap => match self.bwrap_binary().and_then(|b| probe_bwrap(&b)) {
                Ok(()) => Ok(Confinement::Bubblewrap),
                Err(why) => Err(SandboxError::Config(format!(
                    "shell confinement Bubblewrap was requested, but {why}. Install bubblewrap (e.g. `apt-get \
                     install bubblewrap`), point ShellPolicy::bwrap at a working bwrap, or choose another \
                     confinement"
                ))),
            },
            Confinement::Landlock => match landlock_usable() {
                Ok(_) => Ok(Confinement::Landlock),
                Err(why) => Err(SandboxError::Config(format!("shell confinement Landlock was requested, but {why}"))),
            },
            Confinement::Auto => {
                let bwrap = match self.bwrap_binary().and_then(|b| probe_bwrap(&b)) {
                    Ok(()) => return Ok(Confinement::Bubblewrap),
                    Err(why) => why,
                };
                let landlock = match landlock_usable() {
                    Ok(_) => return Ok(Confinement::Landlock),
                    Err(why) => why,
                };
                Err(SandboxError::Config(format!(
                    "no OS confinement is available for shell commands ({bwrap}; {landlock}). Install bubblewrap \
                     (e.g. `apt-get install bubblewrap`), enable Landlock in the kernel, or explicitly opt in to \
                     running commands unconfined with Confinement::Unconfined"
                )))
            }
        }
    }

    pub(crate) fn bwrap_binary(&self) -> Result<PathBuf, String> {
        if let Some(path) = &self.bwrap {
            return Ok(path.clone());
        }
        static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                let path = std::env::var_os("PATH")?;
                // Relative PATH entries would depend on the working directory.
                std::env::split_paths(&path)
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join("bwrap"))
                    .find(|candidate| candidate.is_file())
            })
            .clone()
            .ok_or_else(|| "bubblewrap (`bwrap`) was not found on PATH".to_string())
    }
}

/// What the local sandbox tells the model about itself and, when the run
/// offers the `shell` tool, its shell, from what is enforced.
pub(crate) fn instructions(root: &Path, policy: &ShellPolicy, shell: bool) -> String {
    let root = root.display();
    if !shell {
        return format!(
            "You run on the host machine, in the directory {root}. The real host filesystem is reachable through \
             your file tools; file access is confined to {root}."
        );
    }
    let no_network = "Commands have no direct network access: they cannot open TCP connections of their own or \
                      create any other socket (UDP, raw or Unix), only connected socket pairs.";
    let Ok(confinement) = policy.effective_confinement() else {
        return format!(
            "You run on the host machine, in the directory {root}. File access is confined to {root}. Shell \
             commands cannot run: no OS confinement is available."
        );
    };
    let shell = match confinement {
        Confinement::Bubblewrap => format!(
            "Shell commands run in a sandbox: only {root} is writable, /tmp is private and starts empty, of the rest \
             of the filesystem only system programs and libraries are visible, read-only ({}), and host processes \
             are invisible. {no_network}",
            policy.view.describe()
        ),
        Confinement::Landlock => format!(
            "Shell commands can write only inside {root} (not /tmp: put temporary files under {root}); of the rest \
             of the filesystem only system programs and libraries are readable ({}). {no_network}",
            policy.view.describe()
        ),
        _ => "Shell commands run unconfined, as the host user, with the host's network.".to_string(),
    };
    let limits = &policy.limits;
    format!(
        "You run on the host machine, in the directory {root}. The real host filesystem and a shell are reachable; \
         file access is confined to {root}. {shell} Every process a command starts, background and detached ones \
         included, is killed when the command ends. Resource limits: {limits}."
    )
}

/// Runs `command` with `sh -c` in `root`; with a `gateway`, in a network
/// namespace of its own whose one way out is that gateway (see
/// [`crate::network`]), unless it runs unconfined, on the host's network.
pub(crate) fn run(
    root: &Path,
    command: &str,
    timeout: Duration,
    policy: &ShellPolicy,
    gateway: Option<&dyn Gateway>,
) -> Result<ExecOutput, SandboxError> {
    if command.contains('\0') {
        return Err(SandboxError::InvalidInput("the command contains a NUL byte".into()));
    }
    if timeout.is_zero() {
        return Err(SandboxError::InvalidInput("the command's time limit is zero; give it a positive limit".into()));
    }
    let confinement = policy.effective_confinement()?;
    let net = match gateway {
        Some(_) if confinement != Confinement::Unconfined => Some(
            PrivateNet::new().map_err(|e| SandboxError::Failed(format!("cannot set up the command's network: {e}")))?,
        ),
        _ => None,
    };
    let env = child_env(root, policy, net.is_some())?;
    let limits = policy.limits.resolve();
    let enter = net.as_ref().map(PrivateNet::enter);
    // `filter_fd` stays open until the spawn: bwrap reads the seccomp filter from it.
    let (mut cmd, filter_fd) = match confinement {
        Confinement::Bubblewrap => {
            let bwrap = policy.bwrap_binary().map_err(SandboxError::Config)?;
            let sockets = if enter.is_some() { Sockets::Tcp } else { Sockets::None };
            let (mut cmd, fd) = bwrap_command(&bwrap, Some(root), limits, sockets, &policy.view, enter)
                .map_err(SandboxError::Config)?;
            cmd.args(["--", SHELL, "-c", command]);
            (cmd, Some(fd))
        }
        Confinement::Landlock => {
            let mut cmd = shell_command(root, command);
            let how = match &enter {
                Some(enter) => Landlocked {
                    sockets: Sockets::Tcp,
                    connect_ports: &[PROXY_ADDR.port()],
                    private_net: Some(enter),
                    ..Landlocked::SHELL
                },
                None => Landlocked::SHELL,
            };
            confine_with_landlock(&mut cmd, root, limits, how, &policy.view)?;
            (cmd, None)
        }
        Confinement::Unconfined => {
            let mut cmd = shell_command(root, command);
            let hook = move || {
                cloexec_all_but(None)?;
                confine::fork_shepherd()?;
                limits.apply()
            };
            // SAFETY: the hook runs between fork and exec and is async-signal-safe
            // (see `confine`): raw syscalls on memory prepared before the fork.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(hook);
            }
            (cmd, None)
        }
        // effective_confinement never returns Auto; fail closed if it ever did.
        Confinement::Auto => {
            return Err(SandboxError::Config("shell confinement Auto was not resolved to a mechanism".into()));
        }
    };
    cmd.env_clear().envs(env);
    // Bubblewrap's PID namespace ends the command's processes; otherwise its shepherd does.
    let on_timeout = if confinement == Confinement::Bubblewrap { OnTimeout::KillGroup } else { OnTimeout::AskShepherd };
    let job = Job { stdin: None, timeout, cap: MAX_OUTPUT_BYTES, on_timeout, after_exit: AfterExit::KillGroup };
    let mut child = job.spawn(&mut cmd).map_err(|e| spawn_error(confinement, &cmd, e))?;
    drop(filter_fd);
    // Served until the command has ended: its connections end with it.
    let serving = match (net, gateway) {
        (Some(net), Some(gateway)) => match net.listener().and_then(|l| gateway.serve(l)) {
            Ok(serving) => Some(serving),
            Err(e) => {
                let _ = rustix::process::kill_process_group(
                    rustix::process::Pid::from_child(&child),
                    rustix::process::Signal::KILL,
                );
                let _ = child.kill();
                let _ = child.wait();
                return Err(SandboxError::Failed(format!(
                    "cannot serve the command's network, so it was stopped: {e}"
                )));
            }
        },
        _ => None,
    };
    let outcome = job.supervise(child);
    // Its connections are reported before its result is.
    if let Some(serving) = serving {
        crate::network::wait(serving.stop());
    }
    match outcome? {
        Outcome::Exited(output) => Ok(output.into()),
        Outcome::TimedOut => Err(SandboxError::Timeout(format!(
            "the command `{}` ran past its {timeout:?} limit and was killed, with every process it started. Split \
             the work into shorter steps or give it a longer limit",
            head_chars(command, 200)
        ))),
    }
}

fn shell_command(root: &Path, command: &str) -> Command {
    let mut cmd = Command::new(SHELL);
    cmd.arg("-c").arg(command).current_dir(root);
    cmd
}

pub(crate) fn spawn_error(confinement: Confinement, cmd: &Command, e: io::Error) -> SandboxError {
    let program = Path::new(cmd.get_program()).display().to_string();
    match e.raw_os_error() {
        Some(SECCOMP_REFUSED) => SandboxError::Config(
            "the seccomp socket filter could not be installed for this command, so it was not run with weaker \
             confinement than promised. The kernel needs seccomp filters (CONFIG_SECCOMP_FILTER)"
                .into(),
        ),
        Some(SHEPHERD_REFUSED) => SandboxError::Config(
            "the process that ends every process of a command could not be started (it needs \
             PR_SET_CHILD_SUBREAPER and a free process slot), so the command was not run"
                .into(),
        ),
        Some(NETWORK_REFUSED) => SandboxError::Config(
            "the command's own network namespace could not be made (it needs user namespaces, which the kernel or \
             a security module may forbid: check kernel.unprivileged_userns_clone and \
             kernel.apparmor_restrict_unprivileged_userns), so it was not run with the host's network"
                .into(),
        ),
        Some(LIMITS_REFUSED) => SandboxError::Config(
            "the shell's resource limits could not be set, so the command was not run. Check ShellPolicy::limits"
                .into(),
        ),
        Some(code) if confinement == Confinement::Landlock && code == LANDLOCK_REFUSED.raw_os_error() => {
            SandboxError::Config(
                "Landlock could not be fully enforced for this command, so it was not run with weaker confinement \
                 than promised. Use Confinement::Bubblewrap, or a kernel with full Landlock support"
                    .into(),
            )
        }
        Some(code) if confinement == Confinement::Landlock && code == CAPS_REFUSED.raw_os_error() => {
            SandboxError::Config(
                "could not drop capabilities before running the command under Landlock, so it was not run. Run the \
                 host without extra capabilities, or use Confinement::Bubblewrap"
                    .into(),
            )
        }
        _ if e.kind() == io::ErrorKind::NotFound && confinement == Confinement::Bubblewrap => SandboxError::Config(
            format!("cannot run {program}: {e}. Install bubblewrap (e.g. `apt-get install bubblewrap`)"),
        ),
        _ if e.kind() == io::ErrorKind::NotFound => {
            SandboxError::Config(format!("cannot run {program}: {e}. The host needs a POSIX shell at {SHELL}"))
        }
        _ => SandboxError::Failed(format!("cannot start {program}: {e}")),
    }
}

/// The whole environment of the command; with `proxied`, the variables
/// that name its proxy too.
fn child_env(root: &Path, policy: &ShellPolicy, proxied: bool) -> Result<Vec<(OsString, OsString)>, SandboxError> {
    let lang = std::env::var_os("LANG").filter(|v| !v.is_empty()).unwrap_or_else(|| "C.UTF-8".into());
    let mut env: Vec<(OsString, OsString)> =
        vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), root.into()), ("LANG".into(), lang)];
    if proxied {
        env.extend(proxy_env().map(|(name, value)| (name.into(), value.into())));
    }
    for (name, value) in &policy.env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(SandboxError::Config(format!(
                "shell environment variable {name:?} is malformed: names must be non-empty without `=` or NUL, \
                 values without NUL"
            )));
        }
        env.retain(|(n, _)| n.as_os_str() != name.as_str());
        env.push((name.into(), value.into()));
    }
    Ok(env)
}

// ---------------------------------------------------------------------------
// Bubblewrap.

/// bwrap with every option except the command, and the pipe it reads the
/// seccomp filter from (to be closed once it is spawned). `view` is bound
/// read-only into an empty root; `root` is bound writable and made the
/// working directory; without it (the probe) nothing is writable but the
/// private `/tmp`. Any `sockets` but [`Sockets::None`] keeps the network
/// namespace bwrap starts in: the host's, or with `private_net` the one
/// made for the command before bwrap runs.
pub(crate) fn bwrap_command(
    bwrap: &Path,
    root: Option<&Path>,
    limits: Limits,
    sockets: Sockets,
    view: &SystemView,
    private_net: Option<Enter>,
) -> Result<(Command, OwnedFd), String> {
    let network = sockets != Sockets::None;
    let filter = confine::filter_bytes(&confine::syscall_filter(sockets)?);
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot make a pipe for the seccomp filter: {e}"))?;
    // A few hundred bytes: far below the pipe buffer, so this never blocks.
    std::fs::File::from(write).write_all(&filter).map_err(|e| format!("cannot write the seccomp filter: {e}"))?;
    // Above stdio, which the child's std replaces before the hook runs.
    let read = rustix::io::fcntl_dupfd_cloexec(&read, 3).map_err(|e| format!("cannot move the filter pipe: {e}"))?;
    let filter_fd = read.as_raw_fd();
    let mut cmd = Command::new(bwrap);
    let hook = move || {
        if let Some(net) = &private_net {
            net.enter()?;
        }
        cloexec_all_but(Some(filter_fd))?;
        limits.apply()
    };
    // SAFETY: the hook runs between fork and exec and only makes syscalls
    // (close_range, fcntl, prlimit, and those of `Enter::enter`) on values
    // prepared before the fork.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    cmd.arg("--seccomp").arg(filter_fd.to_string());
    let own = ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"];
    if view.is_whole_host() {
        cmd.args(["--ro-bind", "/", "/"]).args(own);
        // Only over directories that exist: bwrap would otherwise create them on the host's root.
        for dir in ["/tmp", "/run"] {
            if Path::new(dir).is_dir() {
                cmd.args(["--tmpfs", dir]);
            }
        }
    } else {
        // The view after the private /tmp, so a path beneath /tmp is bound over it.
        cmd.args(own).args(["--tmpfs", "/tmp"]).args(view.bwrap_args());
    }
    if !network {
        cmd.arg("--unshare-net");
    }
    cmd.args([
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        // As root bwrap keeps every capability, enough to remount `/` writable.
        "--cap-drop",
        "ALL",
    ]);
    // Bound after the tmpfs mounts, so a root under /tmp or /run stays visible.
    match root {
        Some(root) => cmd.arg("--bind").arg(root).arg(root).arg("--chdir").arg(root),
        None => cmd.args(["--chdir", "/"]),
    };
    if !view.is_whole_host() {
        // The empty root bwrap made the view in: nothing may be added to it.
        cmd.args(["--remount-ro", "/"]);
    }
    Ok((cmd, read))
}

/// Whether `bwrap` runs a trivial command with the options real commands get;
/// cached per binary.
fn probe_bwrap(bwrap: &Path) -> Result<(), String> {
    static PROBES: OnceLock<Mutex<HashMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    let mut probes = PROBES.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    probes.entry(bwrap.to_path_buf()).or_insert_with(|| run_bwrap_probe(bwrap)).clone()
}

fn run_bwrap_probe(bwrap: &Path) -> Result<(), String> {
    let shown = bwrap.display();
    let (mut cmd, filter_fd) =
        bwrap_command(bwrap, None, ShellLimits::NONE.resolve(), Sockets::None, &SystemView::default(), None)?;
    cmd.args(["--", SHELL, "-c", "true"]).env_clear().env("PATH", DEFAULT_PATH);
    let job = Job {
        stdin: None,
        timeout: PROBE_TIMEOUT,
        cap: MAX_OUTPUT_BYTES,
        on_timeout: OnTimeout::KillGroup,
        after_exit: AfterExit::KillGroup,
    };
    let child = job.spawn(&mut cmd).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("bubblewrap was not found at {shown}"),
        _ => format!("bubblewrap at {shown} cannot be started: {e}"),
    })?;
    drop(filter_fd);
    match job.supervise(child) {
        Ok(Outcome::Exited(out)) if out.ok() => Ok(()),
        Ok(Outcome::Exited(out)) => Err(format!(
            "bubblewrap at {shown} does not work here (status {}: {})",
            out.status.unwrap_or(-1),
            head_chars(out.stderr.text().trim(), 300)
        )),
        Ok(Outcome::TimedOut) => {
            Err(format!("bubblewrap at {shown} did not finish a trivial command in {PROBE_TIMEOUT:?}"))
        }
        Err(e) => Err(format!("bubblewrap at {shown} could not be checked: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Landlock.

/// The Landlock ABI the kernel supports as [`required_abi`] decides, and
/// fully enforces; probed once.
fn landlock_abi() -> Result<ABI, LandlockUnusable> {
    static ABI_FOUND: OnceLock<Result<ABI, LandlockUnusable>> = OnceLock::new();
    ABI_FOUND
        .get_or_init(|| {
            let kernel = KernelLandlock::probe();
            let abi = required_abi(kernel)?;
            match landlock_ruleset(abi, false, &[]) {
                Ok(_) => Ok(abi),
                Err(e) => {
                    let found = if let KernelLandlock::Abi(n) = kernel { n } else { 0 };
                    Err(LandlockUnusable::Refused { found, why: e.to_string() })
                }
            }
        })
        .clone()
}

/// Whether Landlock confinement as a whole works here: the ABI, the seccomp
/// filter and the shepherd.
fn landlock_usable() -> Result<ABI, String> {
    let abi = landlock_abi().map_err(|e| e.to_string())?;
    let or_bubblewrap = |why: String| format!("{why}. Use bubblewrap (Confinement::Bubblewrap)");
    confine::socket_filter().map_err(or_bubblewrap)?;
    confine::shepherd_supported().map_err(or_bubblewrap)?;
    Ok(abi)
}

/// A ruleset handling everything `abi` offers (but network access, with
/// `network`), refusing to build if the kernel supports less: what is built is
/// then enforced in full.
fn landlock_ruleset(abi: ABI, network: bool, connect_ports: &[u16]) -> Result<RulesetCreated, RulesetError> {
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(AccessFs::from_all(abi))?;
    if abi >= ABI::V4 && (!network || !connect_ports.is_empty()) {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    ruleset.create()
}

/// What [`confine_with_landlock`] sets up besides the filesystem rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Landlocked<'a> {
    /// Fork a shepherd first (outside the domain).
    pub(crate) shepherd: bool,
    /// Which sockets the seccomp filter lets it create. Any but
    /// [`Sockets::None`] leaves TCP to Landlock's rules.
    pub(crate) sockets: Sockets,
    /// With sockets: TCP may connect to these ports only (and bind
    /// nowhere). Empty: any port.
    pub(crate) connect_ports: &'a [u16],
    /// A network namespace of its own, made first ([`crate::network`]).
    pub(crate) private_net: Option<&'a Enter>,
}

impl Landlocked<'_> {
    /// A shell command: shepherded, no network.
    pub(crate) const SHELL: Landlocked<'static> =
        Landlocked { shepherd: true, sockets: Sockets::None, connect_ports: &[], private_net: None };
}

/// Makes `cmd` confine itself between fork and exec: descriptors, shepherd,
/// limits, capabilities, Landlock, and last the seccomp filter.
pub(crate) fn confine_with_landlock(
    cmd: &mut Command,
    root: &Path,
    limits: Limits,
    how: Landlocked<'_>,
    view: &SystemView,
) -> Result<(), SandboxError> {
    let abi = landlock_abi().map_err(|e| SandboxError::Config(e.to_string()))?;
    // At least ABI 6 (`required_abi`): the ports below are always limited.
    let network = how.sockets != Sockets::None;
    let filter = confine::syscall_filter(how.sockets).map_err(SandboxError::Config)?;
    let failed = |e: &dyn std::fmt::Display| SandboxError::Config(format!("cannot set up Landlock rules: {e}"));
    let path = |p: &Path| PathFd::new(p).map_err(|e| failed(&e));
    // All allocation (ruleset, rules, path fds) happens here, before the fork.
    let (writable, dev_null) = (path(root)?, path(Path::new("/dev/null"))?);
    let mut ruleset = landlock_ruleset(abi, network, how.connect_ports)
        .and_then(|r| r.add_rule(PathBeneath::new(writable, AccessFs::from_all(abi))))
        .and_then(|r| r.add_rule(PathBeneath::new(dev_null, AccessFs::from_file(abi) & !AccessFs::Execute)))
        .map_err(|e| failed(&e))?;
    for readable in view.landlock_paths() {
        // Gone since it was listed: nothing to allow.
        let Ok(fd) = PathFd::new(&readable) else { continue };
        // A rule on a file may only name file rights.
        let read = match readable.is_dir() {
            true => AccessFs::from_read(abi),
            false => AccessFs::from_read(abi) & AccessFs::from_file(abi),
        };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(|e| failed(&e))?;
    }
    for device in LANDLOCK_DEVICES.iter().map(Path::new).filter(|d| d.exists()) {
        let Ok(fd) = PathFd::new(device) else { continue };
        let read = AccessFs::from_read(abi) & AccessFs::from_file(abi) & !AccessFs::Execute;
        ruleset = ruleset.add_rule(PathBeneath::new(fd, read)).map_err(|e| failed(&e))?;
    }
    if network {
        for port in how.connect_ports {
            ruleset = ruleset.add_rule(NetPort::new(*port, AccessNet::ConnectTcp)).map_err(|e| failed(&e))?;
        }
    }
    // A new user namespace gives every capability within it.
    let drop_caps = how.private_net.is_some()
        || rustix::thread::capabilities(None).map(|c| !c.permitted.is_empty()).unwrap_or(true);
    let private_net = how.private_net.cloned();
    let mut ruleset = Some(ruleset);
    let hook = move || -> io::Result<()> {
        cloexec_all_but(None)?;
        // First: the shepherd lives in it too, outside nothing it could reach.
        if let Some(net) = &private_net {
            net.enter()?;
        }
        // Before Landlock, so the shepherd stays outside the command's domain.
        if how.shepherd {
            confine::fork_shepherd()?;
        }
        limits.apply()?;
        if drop_caps {
            drop_capabilities().map_err(|_| io::Error::from(CAPS_REFUSED))?;
        }
        let ruleset = ruleset.take().ok_or(io::Error::from(LANDLOCK_REFUSED))?;
        match ruleset.restrict_self() {
            Ok(status) if status.ruleset == RulesetStatus::FullyEnforced => {}
            _ => return Err(io::Error::from(LANDLOCK_REFUSED)),
        }
        confine::install_filter(&filter)
    };
    // SAFETY: the hook runs in the forked child before exec. It only makes
    // syscalls (close_range, fork, prctl, prlimit, capset,
    // landlock_restrict_self, seccomp, close, and those of `Enter::enter`)
    // and allocates nothing: the
    // ruleset, its path fds and the filter were prepared above, and its
    // errors are plain errnos.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(hook);
    }
    Ok(())
}

/// Empties the bounding, ambient and thread capability sets, so that exec
/// grants nothing back even to uid 0.
fn drop_capabilities() -> rustix::io::Result<()> {
    for bit in 0..64u32 {
        match rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << bit)) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(Errno::INVAL) => break,
            Err(e) => return Err(e),
        }
    }
    match rustix::thread::clear_ambient_capability_set() {
        Ok(()) | Err(Errno::INVAL) => {}
        Err(e) => return Err(e),
    }
    let empty = CapabilitySet::empty();
    rustix::thread::set_capabilities(None, CapabilitySets { effective: empty, permitted: empty, inheritable: empty })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_holds_only_the_defaults_and_the_policy() {
        let policy = ShellPolicy {
            env: vec![("PATH".into(), "/opt/bin".into()), ("EXTRA".into(), "1".into())],
            ..ShellPolicy::default()
        };
        let env = child_env(Path::new("/work/root"), &policy, false).unwrap();
        let names: Vec<_> = env.iter().map(|(n, _)| n.to_str().unwrap()).collect();
        assert_eq!(names, ["HOME", "LANG", "PATH", "EXTRA"]);
        assert_eq!(env[0].1, "/work/root");
        assert_eq!(env[2].1, "/opt/bin");
    }

    #[test]
    fn malformed_env_is_a_config_error() {
        for (name, value) in [("", "x"), ("A=B", "x"), ("A", "x\0y")] {
            let policy = ShellPolicy { env: vec![(name.into(), value.into())], ..ShellPolicy::default() };
            assert!(matches!(child_env(Path::new("/"), &policy, false), Err(SandboxError::Config(_))), "{name:?}");
        }
    }

    #[test]
    fn bad_arguments_are_refused_before_running() {
        let policy = ShellPolicy { confinement: Confinement::Unconfined, ..ShellPolicy::default() };
        let root = Path::new("/");
        assert!(matches!(
            run(root, "echo \0", Duration::from_secs(1), &policy, None),
            Err(SandboxError::InvalidInput(_))
        ));
        assert!(matches!(run(root, "true", Duration::ZERO, &policy, None), Err(SandboxError::InvalidInput(_))));
    }

    #[test]
    fn confinement_that_cannot_be_set_up_is_a_config_error() {
        let cmd = Command::new(SHELL);
        for (errno, says) in [
            (SECCOMP_REFUSED, "seccomp socket filter could not be installed"),
            (SHEPHERD_REFUSED, "could not be started"),
            (LIMITS_REFUSED, "resource limits could not be set"),
            (NETWORK_REFUSED, "own network namespace could not be made"),
        ] {
            for c in [Confinement::Landlock, Confinement::Bubblewrap, Confinement::Unconfined] {
                match spawn_error(c, &cmd, io::Error::from_raw_os_error(errno)) {
                    SandboxError::Config(msg) => assert!(msg.contains(says) && msg.contains("not run"), "{msg}"),
                    other => panic!("{errno} under {c:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn limits_never_exceed_the_hosts_hard_limit() {
        let hard = rustix::process::getrlimit(rustix::process::Resource::Fsize).maximum;
        let limits = ShellLimits { file_size_bytes: Some(u64::MAX - 1), ..ShellLimits::NONE };
        let shown = format!("{limits}");
        assert!(shown.contains("processes host's") && shown.contains("memory host's per process"), "{shown}");
        // Resolving clamps, so applying can only lower a limit, never fail for being too high.
        let resolved = format!("{:?}", limits.resolve());
        assert!(
            resolved.contains(&format!("{:?}", Some(hard.map_or(u64::MAX - 1, |h| h.min(u64::MAX - 1))))),
            "{resolved}"
        );
    }

    #[test]
    fn long_commands_are_shortened_in_messages() {
        let root = tempfile::tempdir().unwrap();
        let policy = ShellPolicy { confinement: Confinement::Unconfined, ..ShellPolicy::default() };
        let command = format!("sleep 30 # {}", "é".repeat(500));
        match run(root.path(), &command, Duration::from_millis(100), &policy, None) {
            Err(SandboxError::Timeout(msg)) => {
                let shown = head_chars(&command, 200);
                assert!(shown.chars().count() == 200 && shown.ends_with('…'), "{shown}");
                assert!(msg.contains(&format!("`{shown}`")) && !msg.contains(&command), "{msg}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
