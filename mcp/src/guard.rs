//! The orphan guard: `nexo __mcp-guard <host pid> [options] -- <command> <args…>`.
//!
//! The host starts every stdio server through a re-exec of itself in this
//! mode. The guard becomes a child subreaper, so everything the server starts
//! reparents to it however it detached (`&`, `setsid`, double forks), runs the
//! server with the stdio, environment and working directory it was given,
//! and kills every process left (and reaps them) when the server exits, when
//! it is asked to stop (SIGTERM, SIGINT, SIGHUP: rmcp's close sends SIGTERM
//! to the process group), or when the host is gone. The host check polls
//! `getppid()`, which follows the host *process*: a parent-death signal would
//! follow the thread that spawned the guard, and tokio's blocking threads
//! come and go.
//!
//! Options: `--confine bubblewrap|landlock|unconfined --writable DIR`
//! (`--network`, or `--net-fd N` for network only through the host's
//! gateway, the listener sent over the inherited descriptor `N`: see
//! [`nexo_sandbox::ProgramConfinement::proxied`]; `--bwrap PATH`, and `--view PATH…` for a system view other
//! than the default, each path after its own `--view`; `--view-none` for an
//! empty one) run the server under
//! [`nexo_sandbox::ProgramConfinement`]: the guard itself stays outside the
//! confinement, so the server can neither signal it nor escape its cleanup.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nexo_sandbox::{Confinement, ProgramConfinement, SystemView};
use rustix::process::{Pid, Signal, WaitOptions, getpid, getppid, kill_process, set_child_subreaper, waitpid};

/// The hidden subcommand the host dispatches to [`guard_main`].
pub const GUARD_SUBCOMMAND: &str = "__mcp-guard";

/// How often the guard checks the server, the stop flag and the host.
const POLL: Duration = Duration::from_millis(50);

/// Exit code when the guard could not start or check the server.
const FAILED: i32 = 127;

/// What the host asked the guard to run.
#[derive(Debug, PartialEq)]
pub(crate) struct GuardArgs {
    pub(crate) host: i32,
    pub(crate) confine: Option<ProgramOptions>,
    pub(crate) argv: Vec<OsString>,
}

/// Confinement options as passed on the guard's command line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProgramOptions {
    pub(crate) confinement: Confinement,
    pub(crate) writable: PathBuf,
    pub(crate) network: bool,
    /// The inherited child's end of the host's `PrivateNet`.
    pub(crate) net_fd: Option<i32>,
    pub(crate) bwrap: Option<PathBuf>,
    pub(crate) view: SystemView,
}

impl GuardArgs {
    /// The command line after `__mcp-guard`.
    pub(crate) fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![self.host.to_string().into()];
        if let Some(c) = &self.confine {
            out.extend(["--confine".into(), c.confinement.to_string().into(), "--writable".into()]);
            out.push(c.writable.clone().into());
            if c.network {
                out.push("--network".into());
            }
            if let Some(fd) = c.net_fd {
                out.extend(["--net-fd".into(), fd.to_string().into()]);
            }
            if let Some(b) = &c.bwrap {
                out.push("--bwrap".into());
                out.push(b.clone().into());
            }
            if c.view != SystemView::default() {
                if c.view.paths().is_empty() {
                    out.push("--view-none".into());
                }
                for path in c.view.paths() {
                    out.push("--view".into());
                    out.push(path.clone().into());
                }
            }
        }
        out.push("--".into());
        out.extend(self.argv.iter().cloned());
        out
    }

    pub(crate) fn parse(args: &[OsString]) -> Result<GuardArgs, String> {
        let mut it = args.iter();
        let host = it
            .next()
            .and_then(|a| a.to_str())
            .and_then(|a| a.parse::<i32>().ok())
            .filter(|p| *p > 0)
            .ok_or("the first argument must be the host's pid")?;
        let mut confinement = None;
        let mut writable = None;
        let mut network = false;
        let mut net_fd = None;
        let mut bwrap = None;
        let mut view: Option<Vec<PathBuf>> = None;
        loop {
            let arg = it.next().ok_or("missing `--` before the server's command")?;
            match arg.to_str() {
                Some("--") => break,
                Some("--network") => network = true,
                Some("--net-fd") => {
                    net_fd = Some(
                        it.next()
                            .and_then(|a| a.to_str())
                            .and_then(|a| a.parse::<i32>().ok())
                            .filter(|fd| *fd > 2)
                            .ok_or("--net-fd takes a descriptor number above 2")?,
                    )
                }
                Some("--confine") => {
                    confinement = Some(match it.next().and_then(|a| a.to_str()) {
                        Some("bubblewrap") => Confinement::Bubblewrap,
                        Some("landlock") => Confinement::Landlock,
                        Some("unconfined") => Confinement::Unconfined,
                        Some("auto") => Confinement::Auto,
                        _ => return Err("--confine takes bubblewrap, landlock, unconfined or auto".into()),
                    })
                }
                Some("--writable") => writable = Some(PathBuf::from(it.next().ok_or("--writable takes a directory")?)),
                Some("--bwrap") => bwrap = Some(PathBuf::from(it.next().ok_or("--bwrap takes a path")?)),
                Some("--view-none") => view = Some(view.unwrap_or_default()),
                Some("--view") => {
                    view.get_or_insert_default().push(PathBuf::from(it.next().ok_or("--view takes a path")?))
                }
                _ => return Err(format!("unknown option {}", arg.to_string_lossy())),
            }
        }
        let argv: Vec<OsString> = it.cloned().collect();
        if argv.is_empty() {
            return Err("no command after `--`".into());
        }
        let view = match view {
            Some(paths) => SystemView::new(paths).map_err(|e| e.to_string())?,
            None => SystemView::default(),
        };
        let confine = match (confinement, writable) {
            (Some(confinement), Some(writable)) => {
                Some(ProgramOptions { confinement, writable, network, net_fd, bwrap, view })
            }
            (None, None) => None,
            _ => return Err("--confine and --writable go together".into()),
        };
        Ok(GuardArgs { host, confine, argv })
    }
}

/// The `__mcp-guard` subcommand's body, called by the host's CLI before any
/// runtime or tracing starts: `args` are what follows `__mcp-guard`. Returns
/// the exit code: the server's, or 137 if it was killed or the guard was told
/// to stop, or 127 if the server could not be started.
pub fn guard_main(args: &[OsString]) -> i32 {
    let args = match GuardArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "nexo {GUARD_SUBCOMMAND}: {e}; usage: {GUARD_SUBCOMMAND} <host pid> [options] -- <command> <args…>"
            );
            return FAILED;
        }
    };
    if let Err(e) = set_child_subreaper(Some(getpid())) {
        eprintln!("nexo {GUARD_SUBCOMMAND}: cannot become a child subreaper ({e}), so the server was not started");
        return FAILED;
    }
    // The host may have died between spawning the guard and now.
    if host_gone(args.host) {
        return FAILED;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("nexo {GUARD_SUBCOMMAND}: cannot handle signal {sig} ({e}), so the server was not started");
            return FAILED;
        }
    }
    let mut child = match spawn(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nexo {GUARD_SUBCOMMAND}: {e}");
            return FAILED;
        }
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        if stop.load(Ordering::Relaxed) || host_gone(args.host) {
            break None;
        }
        std::thread::sleep(POLL);
    };
    kill_all();
    status.and_then(|s| s.code()).unwrap_or(137)
}

fn host_gone(host: i32) -> bool {
    getppid().map(|p| p.as_raw_nonzero().get()) != Some(host)
}

fn spawn(args: &GuardArgs) -> Result<Child, String> {
    let (program, rest) = args.argv.split_first().ok_or("no command")?;
    let shown = program.to_string_lossy();
    match &args.confine {
        Some(o) => {
            let confine = ProgramConfinement {
                confinement: o.confinement,
                writable: o.writable.clone(),
                network: o.network,
                proxied: o.net_fd,
                bwrap: o.bwrap.clone(),
                view: o.view.clone(),
                ..ProgramConfinement::new(&o.writable)
            };
            let command = confine.command(program, rest).map_err(|e| format!("cannot confine {shown}: {e}"))?;
            command.spawn().map_err(|e| format!("cannot start {shown}: {e}"))
        }
        None => {
            let mut cmd = Command::new(program);
            cmd.args(rest);
            nexo_sandbox::close_inherited_fds(&mut cmd);
            cmd.spawn().map_err(|e| spawn_message(program, &e))
        }
    }
}

pub(crate) fn spawn_message(program: &OsStr, e: &std::io::Error) -> String {
    let shown = program.to_string_lossy();
    if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "cannot start `{shown}`: not found; install it, give its absolute path as `command`, or set `PATH` in \
             `env`"
        )
    } else {
        format!("cannot start `{shown}`: {e}")
    }
}

fn children() -> Vec<Pid> {
    std::fs::read_to_string("/proc/thread-self/children")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse::<i32>().ok())
        .filter_map(Pid::from_raw)
        .collect()
}

/// SIGKILLs every child, reaps, and repeats until none is left: orphans of
/// a dying child reparent here and are caught on the next round.
fn kill_all() {
    loop {
        for pid in children() {
            let _ = kill_process(pid, Signal::KILL);
        }
        loop {
            match waitpid(None, WaitOptions::NOHANG) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                // ECHILD: nobody is left.
                Err(_) => return,
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let plain = GuardArgs { host: 42, confine: None, argv: vec!["node".into(), "x.js".into()] };
        assert_eq!(GuardArgs::parse(&plain.to_args()).unwrap(), plain);
        let confined = GuardArgs {
            host: 7,
            confine: Some(ProgramOptions {
                confinement: Confinement::Landlock,
                writable: "/srv/data".into(),
                network: true,
                net_fd: Some(5),
                bwrap: Some("/opt/bwrap".into()),
                view: SystemView::new(["/usr", "/opt/node"]).unwrap(),
            }),
            argv: vec!["server".into(), "--".into(), "--network".into()],
        };
        assert_eq!(GuardArgs::parse(&confined.to_args()).unwrap(), confined);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let parse = |args: &[&str]| GuardArgs::parse(&args.iter().map(OsString::from).collect::<Vec<_>>());
        assert!(parse(&[]).is_err());
        assert!(parse(&["x", "--", "a"]).is_err());
        assert!(parse(&["1", "a"]).unwrap_err().contains("unknown option"));
        assert!(parse(&["1", "--"]).unwrap_err().contains("no command"));
        assert!(parse(&["1", "--confine", "landlock", "--", "a"]).is_err());
        assert!(parse(&["1", "--net-fd", "2", "--confine", "landlock", "--writable", "/x", "--", "a"]).is_err());
        assert_eq!(guard_main(&[]), FAILED);
    }
}
