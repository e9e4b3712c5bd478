//! Running shell commands for the local sandbox: a narrowed environment, a
//! timeout, capped output, and OS confinement where the kernel allows it.
//!
//! Every command runs as `/bin/sh -c <command>` in the sandbox root, in its
//! own process group, with an environment that holds only `PATH`, `HOME`,
//! `LANG` and the policy's additions. The command ends when the shell exits or
//! the time limit passes; either way every process still left in its group is
//! killed, so background jobs never outlive the command.
//!
//! Confinement is chosen by [`Confinement`]; see there for what each mechanism
//! does and does not cover.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::{ExecOutput, SandboxError};

/// The most bytes kept from each of stdout and stderr. The rest is read and
/// discarded, so a chatty command never blocks on a full pipe.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// `PATH` inside the sandbox unless [`ShellPolicy::env`] sets one. A fixed
/// list rather than the host's `PATH`, which may name user-writable or
/// relative directories; add e.g. `~/.cargo/bin` through the policy if the
/// agent needs it.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The shell every command runs under.
const SHELL: &str = "/bin/sh";

/// How long output readers may take to finish after the command's processes
/// are gone; only a process that escaped the group (`setsid`) can hold a pipe
/// open that long.
const READER_GRACE: Duration = Duration::from_secs(2);

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
}

/// How shell commands are confined by the operating system.
///
/// Both mechanisms leave the host filesystem readable (the agent can read
/// what the host user can, bar what bubblewrap hides) and make only the
/// sandbox root writable.
/// Both drop every capability, so a host running as root does not hand root's
/// privileges to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Confinement {
    /// Bubblewrap if `bwrap` works here, else Landlock if the kernel supports
    /// it; refuse to run (a [`SandboxError::Config`]) if neither does.
    #[default]
    Auto,
    /// Bubblewrap (`bwrap`, from the `bubblewrap` package): the host
    /// filesystem mounted read-only, the root bound writable, a private empty
    /// `/tmp` and `/run` (hiding host daemons' sockets there), a minimal
    /// `/dev`, a fresh `/proc` with `/proc/sys` read-only, and new network,
    /// PID, IPC, UTS and cgroup namespaces: no network at all, no view of host
    /// processes.
    ///
    /// Under bubblewrap a command killed by signal N reports status 128 + N
    /// (bwrap's own convention), not -1.
    Bubblewrap,
    /// Landlock (Linux 5.13+): execute and read everywhere, write only beneath
    /// the root (and to `/dev/null`); `/tmp` is *not* writable, since it is
    /// shared with the host (point `TMPDIR` inside the root through
    /// [`ShellPolicy::env`] if tools need it). On kernels with Landlock ABI 4+
    /// TCP bind and connect are denied; ABI 6+ also keeps signals and abstract
    /// Unix sockets inside the sandbox.
    ///
    /// Landlock does not cover UDP, raw sockets or pathname Unix sockets (such
    /// as `/run/docker.sock`), and processes stay visible. Prefer
    /// [`Confinement::Bubblewrap`] where it is available.
    Landlock,
    /// No OS confinement: only the narrowed environment, the timeout and the
    /// output cap. Only when the operator explicitly opts in.
    Unconfined,
}

impl ShellPolicy {
    /// The mechanism commands will actually run under: [`Confinement::Auto`]
    /// resolved, and a requested mechanism checked to work here. Probes run
    /// once per process and are cached.
    pub fn effective_confinement(&self) -> Result<Confinement, SandboxError> {
        match self.confinement {
            Confinement::Unconfined => Ok(Confinement::Unconfined),
            Confinement::Bubblewrap => match self.bwrap_binary().and_then(|b| probe_bwrap(&b)) {
                Ok(()) => Ok(Confinement::Bubblewrap),
                Err(why) => Err(SandboxError::Config(format!(
                    "shell confinement Bubblewrap was requested, but {why}. Install bubblewrap (e.g. `apt-get \
                     install bubblewrap`), point ShellPolicy::bwrap at a working bwrap, or choose another \
                     confinement"
                ))),
            },
            Confinement::Landlock => match landlock_abi() {
                Ok(_) => Ok(Confinement::Landlock),
                Err(why) => Err(SandboxError::Config(format!(
                    "shell confinement Landlock was requested, but {why}. Run on Linux 5.13+ with Landlock enabled \
                     (the `lsm=` boot parameter must include `landlock`), or choose Bubblewrap"
                ))),
            },
            Confinement::Auto => {
                let bwrap = match self.bwrap_binary().and_then(|b| probe_bwrap(&b)) {
                    Ok(()) => return Ok(Confinement::Bubblewrap),
                    Err(why) => why,
                };
                let landlock = match landlock_abi() {
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

    fn bwrap_binary(&self) -> Result<PathBuf, String> {
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

/// Runs `command` with `sh -c` in `root`.
pub(crate) fn run(
    root: &Path,
    command: &str,
    timeout: Duration,
    policy: &ShellPolicy,
) -> Result<ExecOutput, SandboxError> {
    if command.contains('\0') {
        return Err(SandboxError::InvalidInput("the command contains a NUL byte".into()));
    }
    if timeout.is_zero() {
        return Err(SandboxError::InvalidInput("the command's time limit is zero; give it a positive limit".into()));
    }
    let env = child_env(root, policy)?;
    let confinement = policy.effective_confinement()?;
    let mut cmd = match confinement {
        Confinement::Bubblewrap => {
            let bwrap = policy.bwrap_binary().map_err(SandboxError::Config)?;
            let mut cmd = bwrap_command(&bwrap, Some(root));
            cmd.args(["--", SHELL, "-c", command]);
            cmd
        }
        Confinement::Landlock => {
            let mut cmd = shell_command(root, command);
            confine_with_landlock(&mut cmd, root)?;
            cmd
        }
        Confinement::Unconfined => shell_command(root, command),
        // effective_confinement never returns Auto; fail closed if it ever did.
        Confinement::Auto => {
            return Err(SandboxError::Config("shell confinement Auto was not resolved to a mechanism".into()));
        }
    };
    cmd.env_clear().envs(env);
    let child = spawn(&mut cmd).map_err(|e| spawn_error(confinement, &cmd, e))?;
    match supervise(child, timeout)? {
        Finished::Exited(output) => Ok(output),
        Finished::TimedOut => Err(SandboxError::Timeout(format!(
            "the command `{}` ran past its {timeout:?} limit and was killed, with every process it started. Split \
             the work into shorter steps or give it a longer limit",
            shorten(command, 200)
        ))),
    }
}

fn shell_command(root: &Path, command: &str) -> Command {
    let mut cmd = Command::new(SHELL);
    cmd.arg("-c").arg(command).current_dir(root);
    cmd
}

fn spawn(cmd: &mut Command) -> io::Result<Child> {
    // Its own group, so a timeout can kill everything the command started.
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn()
}

fn spawn_error(confinement: Confinement, cmd: &Command, e: io::Error) -> SandboxError {
    let program = Path::new(cmd.get_program()).display().to_string();
    match e.raw_os_error() {
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

/// The whole environment of the command.
fn child_env(root: &Path, policy: &ShellPolicy) -> Result<Vec<(OsString, OsString)>, SandboxError> {
    let lang = std::env::var_os("LANG").filter(|v| !v.is_empty()).unwrap_or_else(|| "C.UTF-8".into());
    let mut env: Vec<(OsString, OsString)> =
        vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), root.into()), ("LANG".into(), lang)];
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

fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Running and supervising the child.

enum Finished {
    Exited(ExecOutput),
    TimedOut,
}

/// One output pipe, drained on its own thread into a capped buffer.
struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    reader: JoinHandle<()>,
}

impl Capture {
    fn start(mut pipe: impl Read + Send + 'static, name: &str) -> Result<Capture, SandboxError> {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let reader = thread::Builder::new()
            .name(format!("nexo-shell-{name}"))
            .spawn(move || {
                let mut chunk = vec![0u8; 64 << 10];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut kept = sink.lock().unwrap_or_else(PoisonError::into_inner);
                            let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                            kept.extend_from_slice(&chunk[..n.min(room)]);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })
            .map_err(|e| SandboxError::Failed(format!("cannot start a thread to read the command's {name}: {e}")))?;
        Ok(Capture { buf, reader })
    }

    /// What was read so far, decoded lossily.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// Waits for the shell to exit or the deadline to pass, then kills what is left
/// of its process group and collects the output.
fn supervise(mut child: Child, timeout: Duration) -> Result<Finished, SandboxError> {
    let pid = Pid::from_child(&child);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(SandboxError::Failed("the command's output pipes were not set up".into()));
    };
    let captures = match (Capture::start(stdout, "stdout"), Capture::start(stderr, "stderr")) {
        (Ok(out), Ok(err)) => [out, err],
        (Err(e), _) | (_, Err(e)) => {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            let _ = child.wait();
            return Err(e);
        }
    };

    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    let timed_out = loop {
        // WNOWAIT leaves the shell unreaped, so its pid (the group id) cannot
        // be reused before the group is killed below.
        match rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        ) {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => break false,
        }
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            break true;
        }
        thread::sleep(nap.min(timeout - elapsed));
        nap = (nap * 2).min(Duration::from_millis(20));
    };

    // Whatever the shell left running dies with it; ESRCH just means nothing was left.
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    let status = child.wait().map_err(|e| SandboxError::Failed(format!("cannot wait for the command: {e}")))?;

    let grace = Instant::now() + READER_GRACE;
    while captures.iter().any(|c| !c.reader.is_finished()) && Instant::now() < grace {
        thread::sleep(Duration::from_millis(2));
    }
    let [out, err] = captures;
    let output = ExecOutput { status: status.code().unwrap_or(-1), stdout: out.text(), stderr: err.text() };
    // A reader still running belongs to an escaped process; it ends with the pipe.
    for capture in [out, err] {
        if capture.reader.is_finished() {
            let _ = capture.reader.join();
        }
    }
    Ok(if timed_out { Finished::TimedOut } else { Finished::Exited(output) })
}

// ---------------------------------------------------------------------------
// Bubblewrap.

/// bwrap with every option except the command. `root` is bound writable and
/// made the working directory; without it (the probe) nothing is writable.
fn bwrap_command(bwrap: &Path, root: Option<&Path>) -> Command {
    let mut cmd = Command::new(bwrap);
    cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]);
    // Only over directories that exist: bwrap would otherwise create them on the host's root.
    for dir in ["/tmp", "/run"] {
        if Path::new(dir).is_dir() {
            cmd.args(["--tmpfs", dir]);
        }
    }
    cmd.args([
        "--unshare-net",
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
    cmd
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
    let mut cmd = bwrap_command(bwrap, None);
    cmd.args(["--", SHELL, "-c", "true"]).env_clear().env("PATH", DEFAULT_PATH);
    let child = spawn(&mut cmd).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("bubblewrap was not found at {shown}"),
        _ => format!("bubblewrap at {shown} cannot be started: {e}"),
    })?;
    match supervise(child, PROBE_TIMEOUT) {
        Ok(Finished::Exited(out)) if out.status == 0 => Ok(()),
        Ok(Finished::Exited(out)) => Err(format!(
            "bubblewrap at {shown} does not work here (status {}: {})",
            out.status,
            shorten(out.stderr.trim(), 300)
        )),
        Ok(Finished::TimedOut) => {
            Err(format!("bubblewrap at {shown} did not finish a trivial command in {PROBE_TIMEOUT:?}"))
        }
        Err(e) => Err(format!("bubblewrap at {shown} could not be checked: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Landlock.

/// The Landlock ABIs this module knows how to use, newest first. Newer kernels
/// are used at the newest of these (ABI 9 adds pathname Unix sockets and ABI 10
/// UDP, not yet requested here).
const LANDLOCK_ABIS: [ABI; 6] = [ABI::V6, ABI::V5, ABI::V4, ABI::V3, ABI::V2, ABI::V1];

/// The newest ABI in [`LANDLOCK_ABIS`] the kernel fully supports; probed once.
fn landlock_abi() -> Result<ABI, String> {
    static ABI_FOUND: OnceLock<Result<ABI, String>> = OnceLock::new();
    ABI_FOUND
        .get_or_init(|| {
            let mut last = None;
            for abi in LANDLOCK_ABIS {
                match landlock_ruleset(abi) {
                    Ok(_) => return Ok(abi),
                    Err(e) => last = Some(e),
                }
            }
            Err(match last {
                Some(e) => format!("the kernel does not support Landlock ({e})"),
                None => "the kernel does not support Landlock".into(),
            })
        })
        .clone()
}

/// Whether Landlock here denies TCP (ABI 4+).
pub(crate) fn landlock_denies_tcp() -> bool {
    landlock_abi().is_ok_and(|abi| abi >= ABI::V4)
}

/// A ruleset handling everything `abi` offers, refusing to build if the kernel
/// supports less: what is built is then enforced in full.
fn landlock_ruleset(abi: ABI) -> Result<RulesetCreated, RulesetError> {
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(AccessFs::from_all(abi))?;
    if abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    ruleset.create()
}

/// Makes `cmd` restrict itself with Landlock between fork and exec.
fn confine_with_landlock(cmd: &mut Command, root: &Path) -> Result<(), SandboxError> {
    let abi = landlock_abi().map_err(SandboxError::Config)?;
    let failed = |e: &dyn std::fmt::Display| SandboxError::Config(format!("cannot set up Landlock rules: {e}"));
    let path = |p: &Path| PathFd::new(p).map_err(|e| failed(&e));
    // All allocation (ruleset, rules, path fds) happens here, before the fork.
    let (everything, writable, dev_null) = (path(Path::new("/"))?, path(root)?, path(Path::new("/dev/null"))?);
    let ruleset = landlock_ruleset(abi)
        .and_then(|r| r.add_rule(PathBeneath::new(everything, AccessFs::from_read(abi))))
        .and_then(|r| r.add_rule(PathBeneath::new(writable, AccessFs::from_all(abi))))
        .and_then(|r| r.add_rule(PathBeneath::new(dev_null, AccessFs::from_file(abi) & !AccessFs::Execute)))
        .map_err(|e| failed(&e))?;
    let drop_caps = rustix::thread::capabilities(None).map(|c| !c.permitted.is_empty()).unwrap_or(true);
    let mut ruleset = Some(ruleset);
    let hook = move || -> io::Result<()> {
        if drop_caps {
            drop_capabilities().map_err(|_| io::Error::from(CAPS_REFUSED))?;
        }
        let ruleset = ruleset.take().ok_or(io::Error::from(LANDLOCK_REFUSED))?;
        match ruleset.restrict_self() {
            Ok(status) if status.ruleset == RulesetStatus::FullyEnforced => Ok(()),
            _ => Err(io::Error::from(LANDLOCK_REFUSED)),
        }
    };
    // SAFETY: the hook runs in the forked child before exec. It only makes
    // syscalls (prctl, capset, landlock_restrict_self, close) and allocates
    // nothing: the ruleset and its path fds were prepared above, and its
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
        let env = child_env(Path::new("/work/root"), &policy).unwrap();
        let names: Vec<_> = env.iter().map(|(n, _)| n.to_str().unwrap()).collect();
        assert_eq!(names, ["HOME", "LANG", "PATH", "EXTRA"]);
        assert_eq!(env[0].1, "/work/root");
        assert_eq!(env[2].1, "/opt/bin");
    }

    #[test]
    fn malformed_env_is_a_config_error() {
        for (name, value) in [("", "x"), ("A=B", "x"), ("A", "x\0y")] {
            let policy = ShellPolicy { env: vec![(name.into(), value.into())], ..ShellPolicy::default() };
            assert!(matches!(child_env(Path::new("/"), &policy), Err(SandboxError::Config(_))), "{name:?}");
        }
    }

    #[test]
    fn bad_arguments_are_refused_before_running() {
        let policy = ShellPolicy { confinement: Confinement::Unconfined, ..ShellPolicy::default() };
        let root = Path::new("/");
        assert!(matches!(run(root, "echo \0", Duration::from_secs(1), &policy), Err(SandboxError::InvalidInput(_))));
        assert!(matches!(run(root, "true", Duration::ZERO, &policy), Err(SandboxError::InvalidInput(_))));
    }

    #[test]
    fn long_commands_are_shortened_in_messages() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("ééé", 2), "éé…");
    }
}
