//! The host processes a sandbox starts (shell commands, container CLIs), and
//! whatever else the host runs on an agent's behalf: closing inherited
//! descriptors ([`close_inherited_fds`]), and the one supervisor that spawns a
//! child, feeds its stdin, reads its stdout and stderr up to
//! [`MAX_OUTPUT_BYTES`] (or a smaller cap), enforces its time limit, kills its
//! process group (or asks its shepherd) and reaps it.
//!
//! The child leads a process group of its own, so one signal reaches
//! everything it started that did not leave the group. It is left unreaped
//! (`waitid` with `WNOWAIT`) until the group has been killed, so its pid, the
//! group id, cannot be reused by an unrelated process in between.

use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::SandboxError;

/// The most bytes kept of each of a command's stdout and stderr, for shell
/// commands and container CLIs alike. The rest is read and discarded, so a
/// chatty command never blocks on a full pipe, and the text ends with a note
/// saying where it was cut ([`nexo_text::cut_note`]).
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// How long output readers may take to finish after the child's processes
/// are gone; only a process that left the group could hold a pipe open that
/// long.
const READER_GRACE: Duration = Duration::from_secs(2);

/// How long a shepherd may take to kill what a timed-out command left, before
/// the supervisor kills the shepherd's process group itself.
const SHEPHERD_GRACE: Duration = Duration::from_secs(5);

/// Under [`AfterExit::KillGroupIfPipesHeld`], how long what a child left
/// behind may keep its output pipes open after it exits before its group is
/// killed.
const PIPE_LINGER: Duration = Duration::from_secs(1);

/// How a child that runs past its time limit is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnTimeout {
    /// SIGKILL to its process group.
    KillGroup,
    /// SIGTERM to the child, a shepherd (see `confine.rs`) that kills every
    /// process of the command, detached ones included (a group kill would
    /// kill the shepherd first and orphan them); SIGKILL to the group if it
    /// has not exited after [`SHEPHERD_GRACE`].
    AskShepherd,
}

/// What happens to the child's process group when the child exits by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterExit {
    /// Killed at once: a shell command's background jobs end with it.
    KillGroup,
    /// Left alone unless something in it still holds the output pipes after
    /// [`PIPE_LINGER`]: a container CLI may start helpers meant to outlive it
    /// (podman's rootless helpers, say), but none that keep its output open.
    KillGroupIfPipesHeld,
}

/// How one child is run: what it reads, how long it may take, how much of its
/// output is kept, and how it is ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job<'a> {
    /// Fed to the child's stdin, which is then closed; `None` gives it
    /// `/dev/null`.
    pub(crate) stdin: Option<&'a [u8]>,
    /// The time limit, from the start of supervision.
    pub(crate) timeout: Duration,
    /// The most bytes kept of each of stdout and stderr.
    pub(crate) cap: usize,
    /// How the child is ended on a timeout.
    pub(crate) on_timeout: OnTimeout,
    /// What happens to its group when it exits.
    pub(crate) after_exit: AfterExit,
}

/// How a supervised child ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// It exited (or was killed by a signal not sent by the supervisor).
    Exited(Output),
    /// It ran past its time limit and was killed; its output is dropped.
    TimedOut,
}

/// What a child printed and how it ended.
#[derive(Debug)]
pub(crate) struct Output {
    /// The exit code; `None` when killed by a signal.
    pub(crate) status: Option<i32>,
    /// Standard output.
    pub(crate) stdout: Captured,
    /// Standard error.
    pub(crate) stderr: Captured,
}

impl Output {
    /// Whether the child exited with status 0.
    pub(crate) fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// Standard error, trimmed, or a note naming the exit status if it is empty.
    pub(crate) fn stderr_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr.bytes).trim().to_string();
        if text.is_empty() { format!("exit status {:?} with no message", self.status) } else { text }
    }
}

impl From<Output> for crate::ExecOutput {
    /// The tools' view: -1 for a signal, text decoded with the cut marked.
    fn from(out: Output) -> Self {
        crate::ExecOutput { status: out.status.unwrap_or(-1), stdout: out.stdout.text(), stderr: out.stderr.text() }
    }
}

/// One output stream as kept: its first bytes up to the job's cap.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// `stdout` or `stderr`.
    pub(crate) stream: &'static str,
    /// The bytes kept, at most `cap`.
    pub(crate) bytes: Vec<u8>,
    /// Whether more came than was kept.
    pub(crate) cut: bool,
    /// The job's cap.
    pub(crate) cap: usize,
}

impl Captured {
    /// The bytes as text, ending with a note if they were cut.
    pub(crate) fn text(&self) -> String {
        nexo_text::capped_output(&self.bytes, self.cut, self.cap, self.stream)
    }
}

impl Job<'_> {
    /// Spawns `cmd` as the leader of a new process group, with stdout and
    /// stderr piped and stdin piped or `/dev/null`. The caller sets up
    /// everything else, descriptors included ([`close_inherited_fds`], or its
    /// own `pre_exec` hook).
    pub(crate) fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        let stdin = if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() };
        cmd.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn()
    }

    /// Feeds, reads, waits for `child` (spawned by [`Job::spawn`]) to exit
    /// or the time limit to pass, ends it as the job says, and reaps it.
    pub(crate) fn supervise(&self, mut child: Child) -> Result<Outcome, SandboxError> {
        let pid = Pid::from_child(&child);
        let abandon = |child: &mut Child, error: SandboxError| {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            let _ = child.wait();
            Err(error)
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return abandon(&mut child, SandboxError::Failed("the command's output pipes were not set up".into()));
        };
        let writer = match (self.stdin, child.stdin.take()) {
            (Some(data), Some(pipe)) => match feed(pipe, data.to_vec()) {
                Ok(writer) => Some(writer),
                Err(e) => return abandon(&mut child, e),
            },
            (Some(_), None) => {
                return abandon(&mut child, SandboxError::Failed("the command's stdin pipe was not set up".into()));
            }
            _ => None,
        };
        let captures = match (Capture::start(stdout, "stdout", self.cap), Capture::start(stderr, "stderr", self.cap)) {
            (Ok(out), Ok(err)) => [out, err],
            (Err(e), _) | (_, Err(e)) => return abandon(&mut child, e),
        };

        let timed_out = !wait_for_exit(pid, self.timeout);
        if timed_out && self.on_timeout == OnTimeout::AskShepherd {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
            wait_for_exit(pid, SHEPHERD_GRACE);
        }
        let pipes_done = || captures.iter().all(|c| c.reader.is_finished());
        let kill_group = match (timed_out, self.after_exit) {
            (true, _) | (false, AfterExit::KillGroup) => true,
            (false, AfterExit::KillGroupIfPipesHeld) => !wait_until(pipes_done, PIPE_LINGER),
        };
        if kill_group {
            // Whatever is left in the group dies now (a shepherd has already
            // ended everything); ESRCH just means nothing was left.
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
        let status = child.wait().map_err(|e| SandboxError::Failed(format!("cannot wait for the command: {e}")))?;

        let all_done = || pipes_done() && writer.as_ref().is_none_or(|w| w.is_finished());
        wait_until(all_done, READER_GRACE);
        let [stdout, stderr] = captures.map(Capture::finish);
        // A thread still running belongs to a process that escaped; it ends with the pipe.
        if let Some(writer) = writer.filter(|w| w.is_finished()) {
            let _ = writer.join();
        }
        Ok(if timed_out {
            Outcome::TimedOut
        } else {
            Outcome::Exited(Output { status: status.code(), stdout, stderr })
        })
    }
}

/// Polls until `pid` has exited (leaving it unreaped) or `limit` has passed;
/// says whether it exited. A failed wait counts as exited: the reaping wait
/// that follows reports the error.
fn wait_for_exit(pid: Pid, limit: Duration) -> bool {
    wait_until(
        || {
            !matches!(
                rustix::process::waitid(
                    WaitId::Pid(pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                ),
                Ok(None)
            )
        },
        limit,
    )
}

/// Polls `done`, backing off from 1 to 20 ms, until it holds or `limit` has
/// passed; says whether it held.
fn wait_until(mut done: impl FnMut() -> bool, limit: Duration) -> bool {
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        if done() {
            return true;
        }
        let elapsed = start.elapsed();
        if elapsed >= limit {
            return false;
        }
        thread::sleep(nap.min(limit - elapsed));
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Writes `data` to the child's stdin on a thread of its own, then closes it.
fn feed(mut pipe: impl Write + Send + 'static, data: Vec<u8>) -> Result<JoinHandle<()>, SandboxError> {
    thread::Builder::new()
        .name("nexo-child-stdin".into())
        // A child that exits early closes the pipe; its status tells what went wrong.
        .spawn(move || drop(pipe.write_all(&data)))
        .map_err(|e| SandboxError::Failed(format!("cannot start a thread to feed the command's stdin: {e}")))
}

/// One output pipe, drained on its own thread into a capped buffer that the
/// supervisor can read without joining the thread.
struct Capture {
    kept: Arc<Mutex<Captured>>,
    reader: JoinHandle<()>,
}

impl Capture {
    fn start(mut pipe: impl Read + Send + 'static, stream: &'static str, cap: usize) -> Result<Capture, SandboxError> {
        let kept = Arc::new(Mutex::new(Captured { stream, cap, ..Captured::default() }));
        let sink = Arc::clone(&kept);
        let reader = thread::Builder::new()
            .name(format!("nexo-child-{stream}"))
            .spawn(move || {
                let mut chunk = vec![0u8; 64 << 10];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut kept = sink.lock().unwrap_or_else(PoisonError::into_inner);
                            let room = kept.cap.saturating_sub(kept.bytes.len());
                            kept.bytes.extend_from_slice(&chunk[..n.min(room)]);
                            kept.cut |= n > room;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })
            .map_err(|e| SandboxError::Failed(format!("cannot start a thread to read the command's {stream}: {e}")))?;
        Ok(Capture { kept, reader })
    }

    /// What was read so far; joins the reader if it is done.
    fn finish(self) -> Captured {
        let captured = std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner));
        if self.reader.is_finished() {
            let _ = self.reader.join();
        }
        captured
    }
}

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

/// [`close_inherited_fds`], but `keep` is inherited, at its number (made so
/// if it is close-on-exec): to hand the program one descriptor, such as the
/// child's end of a [`crate::PrivateNet`] for a program that spawns the
/// confined one.
pub fn close_inherited_fds_but(cmd: &mut Command, keep: RawFd) {
    // SAFETY: as close_inherited_fds's hook.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || cloexec_all_but(Some(keep)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(after_exit: AfterExit) -> Job<'static> {
        Job {
            stdin: None,
            timeout: Duration::from_secs(30),
            cap: MAX_OUTPUT_BYTES,
            on_timeout: OnTimeout::KillGroup,
            after_exit,
        }
    }

    fn run(job: &Job<'_>, script: &str) -> Outcome {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        close_inherited_fds(&mut cmd);
        job.supervise(job.spawn(&mut cmd).unwrap()).unwrap()
    }

    fn exited(outcome: Outcome) -> Output {
        match outcome {
            Outcome::Exited(out) => out,
            Outcome::TimedOut => panic!("timed out"),
        }
    }

    /// Gone, or a zombie waiting for init.
    fn ended(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    }

    fn ends_soon(pid: &str) -> bool {
        wait_until(|| ended(pid), Duration::from_secs(5))
    }

    #[test]
    fn stdin_is_fed_and_a_child_that_ignores_it_does_not_hang() {
        let data = b"hello\n".repeat(1 << 16);
        let feeding = Job { stdin: Some(&data), ..job(AfterExit::KillGroup) };
        let out = exited(run(&feeding, "cat"));
        assert_eq!((out.status, out.stdout.bytes.len(), out.stdout.cut), (Some(0), data.len(), false));
        // Far more than a pipe holds, never read: the writer gets EPIPE once the child is gone.
        let started = Instant::now();
        let out = exited(run(&feeding, "exit 3"));
        assert_eq!(out.status, Some(3));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[test]
    fn output_past_the_cap_is_drained_and_marked_as_cut() {
        let small = Job { cap: 10, ..job(AfterExit::KillGroup) };
        let out = exited(run(&small, "head -c 1000000 /dev/zero | tr '\\0' x; echo short >&2"));
        assert_eq!((out.stdout.bytes.len(), out.stdout.cut), (10, true));
        assert_eq!(out.stdout.text(), format!("{}\n[stdout cut at 10 bytes]", "x".repeat(10)));
        assert_eq!((out.stderr.text().as_str(), out.stderr.cut), ("short\n", false));
    }

    #[test]
    fn kill_group_ends_background_jobs_when_the_child_exits() {
        let out = exited(run(&job(AfterExit::KillGroup), "sleep 30 >/dev/null 2>&1 & echo $!"));
        let pid = out.stdout.text().trim().to_string();
        assert!(ends_soon(&pid), "the background job {pid} outlived its shell");
    }

    #[test]
    fn kill_group_if_pipes_held_spares_a_helper_that_let_go_of_them() {
        let started = Instant::now();
        let out = exited(run(&job(AfterExit::KillGroupIfPipesHeld), "sleep 30 >/dev/null 2>&1 & echo $!"));
        assert!(started.elapsed() < PIPE_LINGER, "{:?}", started.elapsed());
        let pid = out.stdout.text().trim().to_string();
        let alive = !ended(&pid);
        if let Ok(n) = pid.parse::<i32>()
            && let Some(pid) = Pid::from_raw(n)
        {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        assert!(alive, "a helper that closed the CLI's pipes was killed with it");
    }

    #[test]
    fn kill_group_if_pipes_held_kills_a_helper_still_holding_them() {
        let started = Instant::now();
        let out = exited(run(&job(AfterExit::KillGroupIfPipesHeld), "sleep 30 & echo $!"));
        let took = started.elapsed();
        assert!(took >= PIPE_LINGER && took < PIPE_LINGER + READER_GRACE, "{took:?}");
        let pid = out.stdout.text().trim().to_string();
        assert!(ends_soon(&pid), "the helper {pid} holding the pipes outlived the linger");
    }

    #[test]
    fn a_timeout_kills_the_group_and_drops_the_output() {
        let quick = Job { timeout: Duration::from_millis(200), ..job(AfterExit::KillGroupIfPipesHeld) };
        let started = Instant::now();
        assert!(matches!(run(&quick, "echo early; sleep 30"), Outcome::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
