//! Long-running programs the host starts for an agent, such as MCP servers,
//! under the same OS confinement as the local sandbox's shell commands: of
//! the host filesystem only the [`SystemView`] and what the program itself
//! needs (see [`ProgramConfinement::command`]) readable, one writable
//! directory, no network unless granted (the host's, or only through the
//! host's gateway: see [`ProgramConfinement::proxied`]), none of the host's
//! descriptors.
//!
//! Unlike a shell command, the program's lifetime and stdio are the caller's:
//! [`ProgramConfinement::command`] only builds the [`Command`], and the caller
//! sets its environment and stdio and spawns it (directly with
//! [`ConfinedCommand::spawn`], or through another API with
//! [`ConfinedCommand::into_parts`]). No shepherd is forked under Landlock:
//! the caller ends the program and what it started (nexo's MCP client does
//! that with its orphan guard, which runs outside the confinement). Under
//! bubblewrap the PID namespace ends the program's descendants with it.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::SandboxError;
use crate::confine::Sockets;
use crate::network::{Enter, MAX_FORWARDS, PROXY_ADDR};
use crate::process::close_inherited_fds;
use crate::shell::{
    Confinement, Landlocked, ShellLimits, ShellPolicy, bwrap_command, confine_with_landlock, spawn_error,
};
use crate::view::{SystemView, program_paths};

/// How one program is confined.
#[derive(Debug, Clone)]
pub struct ProgramConfinement {
    /// The mechanism; [`Confinement::Auto`] picks bubblewrap, else Landlock.
    /// [`Confinement::Unconfined`] only closes inherited descriptors.
    pub confinement: Confinement,
    /// The one directory the program may write; also its working directory.
    pub writable: PathBuf,
    /// Keep network access: the host's network namespace under bubblewrap,
    /// TCP and sockets allowed under Landlock.
    pub network: bool,
    /// With [`ProgramConfinement::network`]: TCP may connect to these ports
    /// only, and bind to none, and no other socket may be made (no UDP, no
    /// Unix socket: only stream and seqpacket Unix pairs). Empty: any port,
    /// any socket. Only Landlock can narrow the network this way, so
    /// [`Confinement::Auto`] then picks Landlock.
    pub connect_ports: Vec<u16>,
    /// Network only through the host's gateway, in place of `network` and
    /// `connect_ports`: the program runs in a network namespace of its own
    /// whose one way out is a listener at [`crate::PROXY_ADDR`] (see
    /// [`crate::network`]), sent over this descriptor, the child's end of
    /// a [`crate::PrivateNet`] ([`crate::PrivateNet::child_fd`]), open until
    /// the spawn. The caller adds [`crate::proxy_env`] to the environment.
    /// Unconfined, the program has the host's network instead, and the
    /// listener never comes.
    pub proxied: Option<RawFd>,
    /// With [`ProgramConfinement::proxied`]: loopback ports that, inside
    /// the program's namespace, lead to the same ports of the host's
    /// loopback (nexo's own servers for it), at most
    /// [`crate::network::MAX_FORWARDS`]; their listeners come after the
    /// proxy's, for the caller to serve.
    pub forward_ports: Vec<u16>,
    /// The bubblewrap binary; `None` looks for `bwrap` on `PATH`.
    pub bwrap: Option<PathBuf>,
    /// Resource limits, per process as for shell commands. A long-running
    /// server would hit the shell's CPU-time default, so
    /// [`ProgramConfinement::new`] sets none.
    pub limits: ShellLimits,
    /// What of the host the program may read besides its writable
    /// directory and its own files.
    pub view: SystemView,
}

impl ProgramConfinement {
    /// Auto confinement writing only `writable`, reading the default
    /// system view, no network, no resource limits.
    pub fn new(writable: impl Into<PathBuf>) -> Self {
        ProgramConfinement {
            confinement: Confinement::Auto,
            writable: writable.into(),
            network: false,
            connect_ports: Vec::new(),
            proxied: None,
            forward_ports: Vec::new(),
            bwrap: None,
            limits: ShellLimits::NONE,
            view: SystemView::default(),
        }
    }

    fn policy(&self) -> ShellPolicy {
        ShellPolicy {
            env: Vec::new(),
            confinement: self.confinement,
            bwrap: self.bwrap.clone(),
            limits: self.limits,
            view: self.view.clone(),
        }
    }

    /// The mechanism the program will actually run under, checked to work
    /// here (probes are cached per process), or why none can be used.
    pub fn effective(&self) -> Result<Confinement, SandboxError> {
        self.policy().effective_confinement()
    }

    /// `program args…` set up to confine itself, with its working directory
    /// set to [`ProgramConfinement::writable`]. Besides the view it may read
    /// the program, and each argument that is an absolute path to a file,
    /// with the interpreter of a `#!` script and the project each belongs to
    /// (the directory holding its outermost `node_modules`, or a Python
    /// virtual environment); other directories it needs are the operator's
    /// to add to the view. An explicit mechanism is
    /// used without probing it (the spawn fails if it does not work);
    /// [`Confinement::Auto`] is resolved first. The caller adds the
    /// environment (which the program inherits through bubblewrap) and stdio.
    pub fn command<S: AsRef<OsStr>>(
        &self,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Result<ConfinedCommand, SandboxError> {
        let root = &self.writable;
        if !root.is_absolute() || !root.is_dir() {
            return Err(SandboxError::Config(format!(
                "the writable directory {} of a confined program must be an existing absolute directory; create it \
                 or give another",
                root.display()
            )));
        }
        let narrowed = self.proxied.is_none() && self.network && !self.connect_ports.is_empty();
        let confinement = match self.confinement {
            Confinement::Auto if narrowed => Confinement::Landlock,
            Confinement::Auto => self.effective()?,
            Confinement::Bubblewrap if narrowed => {
                return Err(SandboxError::Config(
                    "bubblewrap cannot limit a program's connections to some ports; use Landlock (or Auto)".into(),
                ));
            }
            explicit => explicit,
        };
        let limits = self.limits.resolve();
        let args: Vec<S> = args.into_iter().collect();
        let arg_strs: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        let view = self.view.with(program_paths(Path::new(program.as_ref()), &arg_strs));
        if self.forward_ports.len() > MAX_FORWARDS
            || self.forward_ports.contains(&PROXY_ADDR.port())
            || (self.proxied.is_none() && !self.forward_ports.is_empty())
        {
            return Err(SandboxError::Config(format!(
                "a confined program may have at most {MAX_FORWARDS} forwarded ports, none of them {} (its proxy's), \
                 and only with network through the host's gateway",
                PROXY_ADDR.port()
            )));
        }
        let enter = self
            .proxied
            .filter(|_| confinement != Confinement::Unconfined)
            .map(|fd| Enter::new(fd, &self.forward_ports));
        let sockets = match (self.network, narrowed) {
            _ if enter.is_some() => Sockets::Tcp,
            (false, _) => Sockets::None,
            (true, true) => Sockets::Tcp,
            (true, false) => Sockets::All,
        };
        let proxy_ports: Vec<u16> =
            std::iter::once(PROXY_ADDR.port()).chain(self.forward_ports.iter().copied()).collect();
        let connect_ports = if enter.is_some() { &proxy_ports[..] } else { &self.connect_ports[..] };
        let (mut command, filter_fd) = match confinement {
            Confinement::Bubblewrap => {
                let bwrap = self.policy().bwrap_binary().map_err(SandboxError::Config)?;
                let (mut cmd, fd) =
                    bwrap_command(&bwrap, Some(root), limits, sockets, &view, enter).map_err(SandboxError::Config)?;
                cmd.arg("--").arg(program.as_ref()).args(&arg_strs);
                (cmd, Some(fd))
            }
            Confinement::Landlock => {
                let mut cmd = Command::new(program.as_ref());
                cmd.args(&arg_strs).current_dir(root);
                let how = Landlocked { shepherd: false, sockets, connect_ports, private_net: enter.as_ref() };
                confine_with_landlock(&mut cmd, root, limits, how, &view)?;
                (cmd, None)
            }
            Confinement::Unconfined => {
                let mut cmd = Command::new(program.as_ref());
                cmd.args(&arg_strs).current_dir(root);
                close_inherited_fds(&mut cmd);
                (cmd, None)
            }
            Confinement::Auto => {
                return Err(SandboxError::Config("confinement Auto was not resolved to a mechanism".into()));
            }
        };
        // bwrap's own working directory does not matter; the program's is --chdir.
        if confinement == Confinement::Bubblewrap {
            command.current_dir("/");
        }
        Ok(ConfinedCommand { command, resources: SpawnResources { filter_fd, confinement } })
    }
}

/// A command that confines itself when spawned, with what must stay open
/// until then.
#[derive(Debug)]
pub struct ConfinedCommand {
    command: Command,
    resources: SpawnResources,
}

/// What a [`ConfinedCommand`] needs until its child is spawned (the pipe
/// bubblewrap reads its seccomp filter from); drop it right after the spawn.
#[derive(Debug)]
pub struct SpawnResources {
    filter_fd: Option<OwnedFd>,
    confinement: Confinement,
}

impl SpawnResources {
    /// The mechanism the command runs under.
    pub fn confinement(&self) -> Confinement {
        self.confinement
    }

    /// A spawn error of `command` explained: confinement that could not be
    /// set up is a [`SandboxError::Config`] naming what is missing.
    pub fn explain(&self, command: &Command, error: io::Error) -> SandboxError {
        spawn_error(self.confinement, command, error)
    }
}

impl ConfinedCommand {
    /// The command, to set its environment and stdio.
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.command
    }

    /// The mechanism the command runs under.
    pub fn confinement(&self) -> Confinement {
        self.resources.confinement
    }

    /// Spawns it.
    pub fn spawn(mut self) -> Result<Child, SandboxError> {
        let child = self.command.spawn().map_err(|e| self.resources.explain(&self.command, e));
        drop(self.resources.filter_fd.take());
        child
    }

    /// The command and what must stay open until it is spawned, to spawn it
    /// through another API (say `tokio::process::Command::from`).
    pub fn into_parts(self) -> (Command, SpawnResources) {
        (self.command, self.resources)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::process::Stdio;

    use super::*;

    fn run_in(dir: &std::path::Path, confinement: Confinement, network: bool, script: &str) -> (bool, String) {
        let mut conf = ProgramConfinement::new(dir);
        conf.confinement = confinement;
        conf.network = network;
        let mut cmd = conf.command("/bin/sh", ["-c", script]).unwrap();
        cmd.command_mut().env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = cmd.spawn().unwrap().wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    fn run(confinement: Confinement, network: bool, script: &str) -> (bool, String) {
        let dir = tempfile::tempdir().unwrap();
        run_in(dir.path(), confinement, network, script)
    }

    #[test]
    fn a_confined_program_writes_only_its_directory() {
        for c in [Confinement::Bubblewrap, Confinement::Landlock] {
            let outer = tempfile::tempdir().unwrap();
            let inner = outer.path().join("inner");
            std::fs::create_dir(&inner).unwrap();
            let escape = outer.path().join("escape.txt");
            // The outer directory is in the program's view, so it sees the
            // real one (not a private /tmp where a write would land unseen):
            // it can read there, and must not write.
            std::fs::write(outer.path().join("seen.txt"), "seen\n").unwrap();
            let mut conf = ProgramConfinement::new(&inner);
            conf.confinement = c;
            let mut paths = conf.view.paths().to_vec();
            paths.push(outer.path().to_path_buf());
            conf.view = SystemView::new(paths).unwrap();
            let script =
                format!("echo in > inside.txt; cat {}/seen.txt; echo x > {}", outer.path().display(), escape.display());
            let mut cmd = conf.command("/bin/sh", ["-c", script.as_str()]).unwrap();
            cmd.command_mut().env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::piped()).stderr(Stdio::piped());
            let o = cmd.spawn().unwrap().wait_with_output().unwrap();
            let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert_eq!(std::fs::read_to_string(inner.join("inside.txt")).unwrap(), "in\n", "{c}: {out}");
            assert!(out.contains("seen"), "{c}: the outer directory is the real one, readable: {out}");
            assert!(!escape.exists(), "{c} let the program write {}: {out}", escape.display());
            assert!(!o.status.success(), "{c}: the write outside should have failed: {out}");
        }
    }

    #[test]
    fn connections_can_be_narrowed_to_some_ports() {
        let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, o) = (allowed.local_addr().unwrap().port(), other.local_addr().unwrap().port());
        let dir = tempfile::tempdir().unwrap();
        let probe = |port: u16| {
            let mut conf = ProgramConfinement::new(dir.path());
            conf.network = true;
            conf.connect_ports = vec![a];
            let script = format!("exec /bin/bash -c 'echo > /dev/tcp/127.0.0.1/{port}'");
            let mut cmd = conf.command("/bin/sh", ["-c", script.as_str()]).unwrap();
            assert_eq!(cmd.confinement(), Confinement::Landlock, "only Landlock narrows by port");
            cmd.command_mut().env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::null()).stderr(Stdio::null());
            cmd.spawn().unwrap().wait().unwrap().success()
        };
        assert!(probe(a), "the allowed port was refused");
        assert!(!probe(o), "another port was reached");
        let mut bwrap = ProgramConfinement::new(dir.path());
        (bwrap.network, bwrap.connect_ports, bwrap.confinement) = (true, vec![a], Confinement::Bubblewrap);
        let e = bwrap.command("/bin/true", [] as [&str; 0]).unwrap_err().to_string();
        assert!(e.contains("bubblewrap cannot limit"), "{e}");
    }

    #[test]
    fn network_is_off_unless_granted() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // bash's /dev/tcp opens a TCP socket; plain sh may lack it, so use bash if present.
        if !std::path::Path::new("/bin/bash").exists() {
            return;
        }
        let probe = format!("exec /bin/bash -c 'echo > /dev/tcp/127.0.0.1/{port}'");
        for c in [Confinement::Bubblewrap, Confinement::Landlock] {
            let (ok, out) = run(c, false, &probe);
            assert!(!ok, "{c} without network connected: {out}");
        }
        // Bubblewrap with the network keeps the host's namespace, so loopback is reachable.
        for c in [Confinement::Bubblewrap, Confinement::Landlock] {
            let (ok, out) = run(c, true, &probe);
            assert!(ok, "{c} with network could not connect: {out}");
        }
    }

    #[test]
    fn a_program_kept_under_tmp_still_runs_under_bubblewrap() {
        // bwrap mounts an empty /tmp over the host's; the program is bound back.
        let bin = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let program = bin.path().join("say-hello");
        std::fs::write(&program, "#!/bin/sh\necho hello from $0\n").unwrap();
        std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut conf = ProgramConfinement::new(dir.path());
        conf.confinement = Confinement::Bubblewrap;
        let mut cmd = conf.command(&program, [""; 0]).unwrap();
        cmd.command_mut().env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = cmd.spawn().unwrap().wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("hello from"), "{text}");
        // Nothing else of the host's /tmp is there.
        let (_, listing) = run(Confinement::Bubblewrap, false, &format!("ls {} 2>&1", bin.path().display()));
        assert!(!listing.contains("say-hello"), "{listing}");
    }

    /// An MCP server kept in an npm project outside the view: it runs and
    /// reads its own package, but nothing else beyond the view.
    #[test]
    fn a_confined_program_sees_the_view_and_its_own_project_only() {
        let shadow = std::fs::read_to_string("/etc/shadow").unwrap();
        let shadow_head: String = shadow.chars().take(12).collect();
        for c in [Confinement::Bubblewrap, Confinement::Landlock] {
            let outer = tempfile::tempdir().unwrap();
            let package = outer.path().join("app/node_modules/server");
            std::fs::create_dir_all(&package).unwrap();
            std::fs::write(package.join("data.txt"), "package-data\n").unwrap();
            std::fs::write(outer.path().join("secret.txt"), "outside-secret\n").unwrap();
            let program = package.join("server.sh");
            let secret = outer.path().join("secret.txt");
            let script = format!(
                "#!/bin/sh\ncat \"$(dirname \"$0\")/data.txt\"; cat {} /etc/shadow /root/.profile; ls /home /var\n",
                secret.display()
            );
            std::fs::write(&program, script).unwrap();
            std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let work = outer.path().join("work");
            std::fs::create_dir(&work).unwrap();
            let mut conf = ProgramConfinement::new(&work);
            conf.confinement = c;
            let mut cmd = conf.command(&program, [""; 0]).unwrap();
            cmd.command_mut().env_clear().env("PATH", "/usr/bin:/bin").stdout(Stdio::piped()).stderr(Stdio::piped());
            let out = cmd.spawn().unwrap().wait_with_output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(text.contains("package-data"), "{c}: the program could not read its own package: {text}");
            for hidden in ["outside-secret", shadow_head.as_str(), "# ~/.profile"] {
                assert!(!text.contains(hidden), "{c}: the program read {hidden:?}: {text}");
            }
        }
    }

    #[test]
    fn a_relative_or_missing_directory_is_refused() {
        let conf = ProgramConfinement::new("relative/dir");
        assert!(matches!(conf.command("/bin/true", [""; 0]), Err(SandboxError::Config(_))));
        let conf = ProgramConfinement::new("/nonexistent/nexo/dir");
        assert!(matches!(conf.command("/bin/true", [""; 0]), Err(SandboxError::Config(_))));
    }
}
