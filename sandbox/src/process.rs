//! Helpers for the host processes a sandbox starts: shell commands, container
//! CLIs, and whatever else the host runs on an agent's behalf.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd` close, when it execs, every descriptor it inherits above
/// stderr, so descriptors the host (or whatever started the host) left open
/// never reach the program: a directory descriptor would otherwise let it
/// write outside its root through `/proc/self/fd/N/...`, an open file through
/// `>&N`.
///
/// The descriptors are marked close-on-exec rather than closed, because the
/// standard library reports a failed exec through a close-on-exec pipe of its
/// own. Descriptors the command is given explicitly (its stdin, stdout and
/// stderr) are unaffected.
pub fn close_inherited_fds(cmd: &mut Command) {
    // SAFETY: the hook runs between fork and exec; it only makes the
    // close_range, getrlimit and fcntl syscalls and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| cloexec_all_but(None));
    }
}

/// Marks every descriptor from 3 up close-on-exec, except `keep`, which is
/// made inheritable. Async-signal-safe: for use between fork and exec.
pub(crate) fn cloexec_all_but(keep: Option<RawFd>) -> io::Result<()> {
    match keep {
        Some(fd) if fd >= 3 => {
            let fd = fd as u32;
            if fd > 3 {
                cloexec_range(3, fd - 1)?;
            }
            cloexec_range(fd + 1, u32::MAX)?;
            // SAFETY: plain fcntl on a descriptor number; no memory is touched.
            #[allow(unsafe_code)]
            if unsafe { libc::fcntl(fd as RawFd, libc::F_SETFD, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        _ => cloexec_range(3, u32::MAX),
    }
}

fn cloexec_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags; no memory is passed.
    #[allow(unsafe_code)]
    let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, libc::CLOSE_RANGE_CLOEXEC) } == 0;
    if done {
        return Ok(());
    }
    // Before Linux 5.11: mark each open descriptor up to the descriptor limit.
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the local struct; fcntl takes numbers only.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        let end = limit.rlim_cur.min(1 << 20).min(u64::from(last).saturating_add(1));
        for fd in u64::from(first)..end {
            let flags = libc::fcntl(fd as RawFd, libc::F_GETFD);
            if flags >= 0
                && flags & libc::FD_CLOEXEC == 0
                && libc::fcntl(fd as RawFd, libc::F_SETFD, flags | libc::FD_CLOEXEC) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}
