//! The parts of shell confinement that run between fork and exec besides
//! Landlock itself: the seccomp socket filter, the shepherd, and resource
//! limits. Everything here that runs in the child is async-signal-safe: raw
//! syscalls on memory prepared before the fork, no allocation, no locks.
//!
//! # Sockets
//!
//! Landlock (up to ABI 8) only rules on TCP bind and connect: MPTCP, UDP,
//! raw and netlink sockets, and connecting to pathname Unix sockets anywhere
//! on the host, all pass it. A seccomp filter closes that: `socket(2)` fails
//! for every family, Unix included, because seccomp cannot see the address a
//! Unix socket would connect or send to. `socketpair(2)` stays allowed for
//! stream and seqpacket Unix pairs (pipelines, git, language runtimes use
//! them); any other pair type is refused (a datagram pair's `sendto` with an
//! address would reach any datagram socket on the host, and a Unix `SOCK_RAW`
//! pair is a datagram pair). io_uring is refused too, as its socket and
//! connect operations never pass through the filter, and so are
//! `pidfd_getfd`, SysV IPC and the kernel keyrings (see [`REFUSED_SYSCALLS`]). Bubblewrap gets the same filter through `--seccomp`, since
//! its network namespace does not cover pathname Unix sockets either.
//!
//! # The shepherd
//!
//! A process group does not hold a command: `setsid` leaves it, and a
//! double fork reparents to init. Without a PID namespace (which needs
//! privileges), the shell's parent becomes a *shepherd*: the child Rust's
//! `Command` forks turns into a child subreaper, forks once more for the
//! shell, and never execs. Every orphan the command leaves reparents to it,
//! however it detached. When the shell exits, when the host asks (SIGTERM,
//! on a timeout), or when the host dies (its parent-death signal, backed by
//! polling `getppid`), it kills every child it has, reaps, and repeats until
//! none are left, then exits with the shell's status. It forks before
//! Landlock is applied, so it is outside the command's domain, and Landlock
//! ABI 6 signal scoping keeps the command from killing it. Signals to it are
//! blocked and taken with `sigtimedwait`, so none of them kills it before it
//! has cleaned up; only SIGKILL from outside the sandbox does, and then the
//! shell gets SIGKILL too (its own parent-death signal), though what it had
//! already started is left to init.
//!
//! Why this rather than the alternatives: a PID namespace needs privileges
//! (bubblewrap is that path); cgroups need a delegated hierarchy; a process
//! group or session is left by a plain `setsid`; a subreaper catches every
//! orphan without any of those. The cost: the shepherd is a fork of the host
//! that never execs, so pages the host writes while a command runs are copied
//! once (page tables are already copied by every fork). A command forking
//! faster than the shepherd kills is still ended, a generation per round,
//! because each killed process's children reparent to the shepherd; the
//! host gives it five seconds (`SHEPHERD_GRACE`) on a timeout before killing
//! the process group itself.

#![allow(unsafe_code)] // raw syscalls between fork and exec

use std::io;
use std::mem::MaybeUninit;

use rustix::process::{Resource, Rlimit};

/// Errno the hooks report when the seccomp filter cannot be installed.
/// `execve` never returns it, so the parent can tell.
pub(crate) const SECCOMP_REFUSED: i32 = libc::ERFKILL;
/// Errno the hooks report when the shepherd cannot be set up.
pub(crate) const SHEPHERD_REFUSED: i32 = libc::EHWPOISON;
/// Errno the hooks report when a resource limit cannot be set.
pub(crate) const LIMITS_REFUSED: i32 = libc::EKEYREVOKED;

// ---------------------------------------------------------------------------
// Seccomp.

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: Option<u32> = None;

const BPF_K: u32 = 0x00;
const BPF_JGE: u32 = 0x30;
const SOCK_TYPE_MASK: u32 = 0xf;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

/// A conditional jump on the accumulator: `op` (JEQ or JGE) against `k`.
fn jump_if(op: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: (libc::BPF_JMP | op | BPF_K) as u16, jt, jf, k }
}

fn jump(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    jump_if(libc::BPF_JEQ, k, jt, jf)
}

/// System calls the filter refuses outright (EACCES), besides the socket
/// rules: sockets of any family; io_uring, whose operations bypass syscall
/// filters; taking another process's descriptors; SysV IPC, which Landlock
/// does not confine (host shared memory, queues and semaphores of the same
/// user are otherwise readable, writable and removable, and what a command
/// creates outlives it); and the kernel keyrings, shared with the host user's
/// session (Kerberos caches, cached passphrases).
const REFUSED_SYSCALLS: [libc::c_long; 20] = [
    libc::SYS_socket,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_pidfd_getfd,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_shmdt,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
];

/// Which sockets a confined process may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sockets {
    /// None: only stream and seqpacket Unix socket pairs (a shell command).
    None,
    /// Besides those pairs, TCP over IPv4 or IPv6 and nothing else: no UDP,
    /// no MPTCP, no Unix, raw or netlink socket. Landlock then rules on the
    /// ports (a program allowed a few loopback ports).
    Tcp,
    /// Any socket and socket pair (a program granted the network).
    All,
}

/// The socket filter described in the module comment, as a classic BPF
/// program; an error on architectures it is not written for.
pub(crate) fn socket_filter() -> Result<Vec<libc::sock_filter>, String> {
    syscall_filter(Sockets::None)
}

/// The filter of [`socket_filter`], letting `sockets` through; the rest of
/// [`REFUSED_SYSCALLS`] is refused whatever `sockets` says.
pub(crate) fn syscall_filter(sockets: Sockets) -> Result<Vec<libc::sock_filter>, String> {
    let arch = AUDIT_ARCH.ok_or("the seccomp socket filter is only built for x86_64 and aarch64")?;
    let load = |offset: u32| stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset);
    let ret = |action: u32| stmt(libc::BPF_RET | BPF_K, action);
    let deny = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    let foreign = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    // seccomp_data: nr at 0, arch at 4, args from 16 (low words first on these little-endian targets).
    let mut prog = vec![load(4), jump(arch, 1, 0), ret(foreign), load(0)];
    if cfg!(target_arch = "x86_64") {
        // x32 system calls carry this bit and other numbers; refuse them all.
        prog.extend([jump_if(BPF_JGE, 0x4000_0000, 0, 1), ret(foreign)]);
    }
    for nr in REFUSED_SYSCALLS {
        if sockets != Sockets::None && nr == libc::SYS_socket {
            continue;
        }
        prog.extend([jump(nr as u32, 0, 1), ret(deny)]);
    }
    if sockets == Sockets::All {
        prog.push(ret(libc::SECCOMP_RET_ALLOW));
        return Ok(prog);
    }
    if sockets == Sockets::Tcp {
        // socket(family, type, protocol): AF_INET or AF_INET6, SOCK_STREAM
        // (flags masked off), protocol 0 or IPPROTO_TCP; anything else refused.
        prog.extend([
            jump(libc::SYS_socket as u32, 0, 11),
            load(16),
            jump(libc::AF_INET as u32, 1, 0),
            jump(libc::AF_INET6 as u32, 0, 7),
            load(24),
            stmt(libc::BPF_ALU | libc::BPF_AND | BPF_K, SOCK_TYPE_MASK),
            jump(libc::SOCK_STREAM as u32, 0, 4),
            load(32),
            jump(0, 1, 0),
            jump(libc::IPPROTO_TCP as u32, 0, 1),
            ret(libc::SECCOMP_RET_ALLOW),
            ret(deny),
        ]);
    }
    prog.extend([
        jump(libc::SYS_socketpair as u32, 1, 0),
        ret(libc::SECCOMP_RET_ALLOW),
        load(16),
        jump(libc::AF_UNIX as u32, 1, 0),
        ret(deny),
        load(24),
        stmt(libc::BPF_ALU | libc::BPF_AND | BPF_K, SOCK_TYPE_MASK),
        // An allow-list: the kernel turns a Unix SOCK_RAW pair into a datagram one.
        jump(libc::SOCK_STREAM as u32, 2, 0),
        jump(libc::SOCK_SEQPACKET as u32, 1, 0),
        ret(deny),
        ret(libc::SECCOMP_RET_ALLOW),
    ]);
    Ok(prog)
}

/// The program as the bytes `bwrap --seccomp` reads.
pub(crate) fn filter_bytes(prog: &[libc::sock_filter]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(prog.len() * 8);
    for insn in prog {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.extend([insn.jt, insn.jf]);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    bytes
}

/// Installs `prog` on the calling thread, with no_new_privs. Async-signal-safe.
pub(crate) fn install_filter(prog: &[libc::sock_filter]) -> io::Result<()> {
    let refused = || io::Error::from_raw_os_error(SECCOMP_REFUSED);
    let len = u16::try_from(prog.len()).map_err(|_| refused())?;
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr().cast_mut() };
    // SAFETY: prctl takes numbers; seccomp reads `fprog`, which points at `prog`, alive for the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(refused());
        }
        if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &fprog as *const libc::sock_fprog) != 0 {
            return Err(refused());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Resource limits.

/// Limits resolved before the fork: each at most the host's hard limit, since
/// an unprivileged process can only lower them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    entries: [(Resource, Option<u64>); 5],
}

impl Limits {
    /// `None` leaves that resource as the host has it. Core dumps are always off.
    pub(crate) fn new(processes: Option<u64>, memory: Option<u64>, cpu: Option<u64>, file_size: Option<u64>) -> Self {
        let entries = [
            (Resource::Nproc, processes),
            (Resource::As, memory),
            (Resource::Cpu, cpu),
            (Resource::Fsize, file_size),
            (Resource::Core, Some(0)),
        ]
        .map(|(resource, value)| {
            let hard = rustix::process::getrlimit(resource).maximum;
            (resource, value.map(|v| hard.map_or(v, |h| v.min(h))))
        });
        Limits { entries }
    }

    /// Sets soft and hard limits alike, so the command cannot raise them again.
    /// Async-signal-safe.
    pub(crate) fn apply(&self) -> io::Result<()> {
        for (resource, value) in self.entries {
            if let Some(v) = value {
                rustix::process::setrlimit(resource, Rlimit { current: Some(v), maximum: Some(v) })
                    .map_err(|_| io::Error::from_raw_os_error(LIMITS_REFUSED))?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The shepherd.

/// How often the shepherd checks that the host is still alive, besides its
/// parent-death signal.
const SHEPHERD_POLL_NS: libc::c_long = 50_000_000;

/// Proves, before the fork, that the shepherd will be able to list its
/// children; without that it could not clean up, so the command must not run.
pub(crate) fn shepherd_supported() -> Result<(), String> {
    std::fs::read_to_string("/proc/thread-self/children").map(drop).map_err(|e| {
        format!("cannot read /proc/thread-self/children ({e}), which ending every process of a command needs")
    })
}

/// Splits the calling process (the child `Command` forked) into the shepherd,
/// which never returns, and the shell, which returns `Ok` and goes on to exec.
/// Async-signal-safe.
pub(crate) fn fork_shepherd() -> io::Result<()> {
    let refused = || io::Error::from_raw_os_error(SHEPHERD_REFUSED);
    // SAFETY: only raw syscalls and libc's fork on locals; the process is
    // single-threaded here (a fresh child), so fork is safe to call.
    unsafe {
        let host = libc::getppid();
        // A host that ignores SIGCHLD would have children reaped unseen, the shell's status lost.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        // Blocked before the fork, so no signal can kill the shepherd before it waits for them.
        if libc::sigprocmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr()) != 0 {
            return Err(refused());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            libc::sigprocmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
            return Err(refused());
        }
        let shepherd = libc::getpid();
        match libc::fork() {
            -1 => {
                libc::sigprocmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
                Err(refused())
            }
            0 => {
                // The shell: dies if the shepherd does, then gets its signals back.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 || libc::getppid() != shepherd {
                    libc::_exit(127);
                }
                libc::sigprocmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
                Ok(())
            }
            shell => shepherd_loop(shell, host),
        }
    }
}

/// The shepherd's whole life. Never returns.
unsafe fn shepherd_loop(shell: libc::pid_t, host: libc::pid_t) -> ! {
    // SAFETY: raw syscalls on locals only.
    unsafe {
        // Drop every descriptor, above all std's exec-error pipe and the
        // output pipes: the host must see them close when the shell's do.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..4096 {
                libc::close(fd);
            }
        }
        let mut status: Option<libc::c_int> = None;
        let mut stop = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0;
        let mut wanted = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(wanted.as_mut_ptr());
        for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaddset(wanted.as_mut_ptr(), sig);
        }
        let poll = libc::timespec { tv_sec: 0, tv_nsec: SHEPHERD_POLL_NS };
        while !stop && status.is_none() {
            if libc::getppid() != host {
                break;
            }
            if reap(shell, &mut status) {
                break;
            }
            if status.is_some() {
                break;
            }
            let sig = libc::sigtimedwait(wanted.as_ptr(), std::ptr::null_mut(), &poll);
            stop = matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGQUIT);
        }
        kill_all_children(shell, &mut status);
        match status {
            Some(st) if libc::WIFEXITED(st) => libc::_exit(libc::WEXITSTATUS(st)),
            // Killed by a signal, or stopped early: end by a signal too, so the
            // host reports it the same way it would for an unshepherded shell.
            _ => {
                libc::signal(libc::SIGKILL, libc::SIG_DFL);
                libc::kill(libc::getpid(), libc::SIGKILL);
                libc::_exit(137)
            }
        }
    }
}

/// Reaps every exited child, noting the shell's status. True when no child is left.
unsafe fn reap(shell: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes into a local.
        match unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) } {
            0 => return false,
            pid if pid < 0 => return true,
            pid => {
                if pid == shell {
                    *status = Some(st);
                }
            }
        }
    }
}

/// SIGKILLs every child, reaps, and repeats until there are none: orphans of
/// a dying child reparent here and are caught on the next round.
unsafe fn kill_all_children(shell: libc::pid_t, status: &mut Option<libc::c_int>) {
    let nap = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    // SAFETY: raw syscalls on locals only.
    unsafe {
        loop {
            kill_listed_children();
            if reap(shell, status) {
                return;
            }
            libc::nanosleep(&nap, std::ptr::null_mut());
        }
    }
}

/// Sends SIGKILL to each pid in /proc/thread-self/children.
unsafe fn kill_listed_children() {
    // SAFETY: open/read/close/kill on a static path and a stack buffer.
    unsafe {
        let fd = libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut pid: libc::pid_t = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add(libc::pid_t::from(b - b'0'));
                } else {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use super::*;

    /// Runs `probe` in a child after installing the filter; the child execs
    /// `/bin/true` only if the probe returned true.
    fn filtered(probe: fn() -> bool) -> bool {
        let prog = socket_filter().unwrap();
        let mut cmd = Command::new("/bin/true");
        // SAFETY: the hook installs the prepared filter and makes raw syscalls only.
        unsafe {
            cmd.pre_exec(move || {
                install_filter(&prog)?;
                if probe() { Ok(()) } else { Err(io::Error::from_raw_os_error(libc::EPROTO)) }
            });
        }
        match cmd.status() {
            Ok(status) => status.success(),
            Err(e) if e.raw_os_error() == Some(libc::EPROTO) => false,
            Err(e) => panic!("the probe could not run: {e}"),
        }
    }

    fn refused(ret: libc::c_long) -> bool {
        ret == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EACCES)
    }

    #[test]
    fn the_filter_refuses_sockets_and_io_uring_but_not_stream_pairs() {
        // SAFETY (all probes): raw syscalls on locals in the forked child.
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0) })));
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET6, libc::SOCK_DGRAM, 0) })));
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_STREAM, 0) })));
        assert!(filtered(|| {
            let mut params = [0u8; 120];
            refused(unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) })
        }));
        assert!(filtered(|| {
            let mut fds = [0; 2];
            let flags = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC;
            refused(unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) })
        }));
        assert!(filtered(|| {
            let mut fds = [0; 2];
            let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
            unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) == 0 }
        }));
        // A Unix SOCK_RAW pair is a datagram pair in disguise.
        assert!(filtered(|| {
            let mut fds = [0; 2];
            refused(unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, libc::SOCK_RAW, 0, fds.as_mut_ptr()) })
        }));
        assert!(filtered(|| {
            let mut fds = [0; 2];
            let flags = libc::SOCK_SEQPACKET;
            unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) == 0 }
        }));
        // A control: the probe does fail where a syscall is allowed.
        assert!(!filtered(|| refused(unsafe { libc::syscall(libc::SYS_getpid) })));
    }

    /// Runs `probe` in a child under `prog`, as [`filtered`] does.
    fn under(prog: &[libc::sock_filter], probe: fn() -> bool) -> bool {
        let prog = prog.to_vec();
        let mut cmd = Command::new("/bin/true");
        // SAFETY: the hook installs the prepared filter and makes raw syscalls only.
        unsafe {
            cmd.pre_exec(move || {
                install_filter(&prog)?;
                if probe() { Ok(()) } else { Err(io::Error::from_raw_os_error(libc::EPROTO)) }
            });
        }
        cmd.status().map(|s| s.success()).unwrap_or(false)
    }

    #[test]
    fn the_network_filter_allows_sockets_but_not_the_rest() {
        let prog = syscall_filter(Sockets::All).unwrap();
        let run = |probe: fn() -> bool| under(&prog, probe);
        // SAFETY (all probes): raw syscalls on locals in the forked child.
        assert!(run(|| unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0) } >= 0));
        assert!(run(|| {
            let mut fds = [0; 2];
            let flags = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC;
            unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) == 0 }
        }));
        assert!(run(|| refused(unsafe { libc::syscall(libc::SYS_msgget, libc::IPC_PRIVATE, 0o600) })));
        assert!(!run(|| refused(unsafe { libc::syscall(libc::SYS_getpid) })));
    }

    /// What the Claude Code CLI gets: TCP alone, so no Unix socket of the
    /// host, no UDP and no MPTCP (Landlock rules on TCP ports only).
    #[test]
    fn the_tcp_filter_allows_tcp_and_nothing_else() {
        let prog = syscall_filter(Sockets::Tcp).unwrap();
        let run = |probe: fn() -> bool| under(&prog, probe);
        // SAFETY (all probes): raw syscalls on locals in the forked child.
        assert!(run(|| unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0) } >= 0));
        assert!(run(|| {
            let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
            unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET6, flags, libc::IPPROTO_TCP) >= 0 }
        }));
        let refusals: [fn() -> bool; 8] = [
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_STREAM, 0) }),
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_DGRAM, 0) }),
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_DGRAM, 0) }),
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET6, libc::SOCK_DGRAM, 0) }),
            || {
                refused(unsafe {
                    libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP)
                })
            },
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_NETLINK, libc::SOCK_RAW, 0) }),
            || refused(unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) }),
            || {
                let mut fds = [0; 2];
                refused(unsafe {
                    libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, libc::SOCK_DGRAM, 0, fds.as_mut_ptr())
                })
            },
        ];
        for (n, refusal) in refusals.into_iter().enumerate() {
            assert!(run(refusal), "socket probe {n} was not refused");
        }
        assert!(run(|| {
            let mut fds = [0; 2];
            unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) == 0 }
        }));
        assert!(run(|| refused(unsafe { libc::syscall(libc::SYS_msgget, libc::IPC_PRIVATE, 0o600) })));
        assert!(!run(|| refused(unsafe { libc::syscall(libc::SYS_getpid) })));
    }

    #[test]
    fn the_filter_refuses_sysv_ipc_and_keyrings() {
        // SAFETY (all probes): raw syscalls on locals in the forked child.
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_shmget, libc::IPC_PRIVATE, 4096, 0o600) })));
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_shmctl, 0, libc::IPC_INFO, 0) })));
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_msgget, libc::IPC_PRIVATE, 0o600) })));
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_semget, libc::IPC_PRIVATE, 1, 0o600) })));
        // KEYCTL_GET_KEYRING_ID (0) of the user keyring (-4).
        assert!(filtered(|| refused(unsafe { libc::syscall(libc::SYS_keyctl, 0, -4, 0) })));
        assert!(filtered(|| {
            let (kind, desc, data) = (c"user".as_ptr(), c"nexo-probe".as_ptr(), b"x".as_ptr());
            refused(unsafe { libc::syscall(libc::SYS_add_key, kind, desc, data, 1, -4) })
        }));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_filter_refuses_x32_system_calls() {
        // SAFETY: a raw syscall in the forked child. x32 socket is 0x40000000 + 41.
        assert!(filtered(|| {
            let ret = unsafe { libc::syscall(0x4000_0000 + libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0) };
            ret == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS)
        }));
    }

    #[test]
    fn bwrap_bytes_are_eight_per_instruction() {
        let prog = socket_filter().unwrap();
        let bytes = filter_bytes(&prog);
        assert_eq!(bytes.len(), prog.len() * 8);
        assert_eq!(&bytes[4..8], &4u32.to_ne_bytes(), "the first instruction loads the arch at offset 4");
    }
}
