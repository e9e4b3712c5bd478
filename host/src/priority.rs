//! How the kernel weighs a host's threads: those that serve requests
//! against those that drive runs (`nexo serve` uses both). A tenant's busy
//! guest runs for a whole epoch tick between yields; these settings keep it
//! from delaying another tenant's request.
//!
//! - The threads that serve HTTP ask for a short time slice
//!   ([`API_SLICE`]). On Linux 6.12 and later, a waking thread whose slice
//!   is shorter than the running thread's may preempt it at once, rather
//!   than wait for that thread's slice to end. Older kernels ignore it.
//! - The threads that drive runs are [`RUN_NICENESS`] steps nicer than the
//!   process, so that the API comes first when both wait for a core.
//!
//! Neither needs a privilege, and neither is a hard priority: the runs
//! still get their fair share of a busy machine, only later. Elsewhere than
//! on Linux, where a niceness is the whole process's, nothing is changed.

use std::time::Duration;

/// The time slice the API's threads ask for: short enough to preempt a
/// guest at once on wake-up, long enough that a request is rarely cut.
pub const API_SLICE: Duration = Duration::from_micros(100);

/// How many steps nicer than the process the threads that drive runs are.
pub const RUN_NICENESS: i32 = 5;

/// Marks the calling thread as one that serves the API.
pub fn api_thread() {
    if let Err(e) = set(process_niceness(), Some(API_SLICE)) {
        tracing::debug!(error = %e, "cannot shorten the API thread's time slice");
    }
}

/// Marks the calling thread as one that drives runs: nicer, and with the
/// kernel's usual slice (a new thread inherits its creator's).
pub fn run_thread() {
    if let Err(e) = set(process_niceness().saturating_add(RUN_NICENESS).min(19), None) {
        tracing::debug!(error = %e, "cannot lower the run thread's priority");
    }
}

/// The niceness the operator started the process with: its main thread's.
fn process_niceness() -> i32 {
    rustix::process::getpriority_process(Some(rustix::process::getpid())).unwrap_or(0)
}

/// Sets the calling thread's niceness and its time slice (`None`: the
/// kernel's default), in the normal policy.
#[cfg(target_os = "linux")]
fn set(nice: i32, slice: Option<Duration>) -> std::io::Result<()> {
    sched_setattr(nice, slice).or_else(|e| {
        // A seccomp filter may refuse the call; the niceness is still ours to set.
        tracing::debug!(error = %e, "sched_setattr refused; setting the niceness alone");
        rustix::process::setpriority_process(None, nice).map_err(std::io::Error::from)
    })
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn sched_setattr(nice: i32, slice: Option<Duration>) -> std::io::Result<()> {
    let attr = libc::sched_attr {
        size: u32::try_from(std::mem::size_of::<libc::sched_attr>()).unwrap_or(u32::MAX),
        sched_policy: u32::try_from(libc::SCHED_OTHER).unwrap_or(0),
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        // Kernels before 6.12 ignore this; zero is their default slice.
        sched_runtime: slice.map_or(0, |s| u64::try_from(s.as_nanos()).unwrap_or(u64::MAX)),
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid `sched_attr` whose `size` is its own, it
    // outlives the call, and the kernel only reads it; pid 0 is this thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0u32) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
fn set(_nice: i32, _slice: Option<Duration>) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The slice the kernel holds for this thread, in nanoseconds, from `/proc`.
    fn slice_ns() -> Option<u64> {
        let tid = rustix::thread::gettid().as_raw_nonzero();
        let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    /// The calling thread's niceness.
    fn own_niceness() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[test]
    fn an_api_thread_asks_for_a_short_slice_and_a_run_thread_is_nicer_with_the_usual_one() {
        std::thread::spawn(|| {
            let (nice, usual) = (process_niceness(), slice_ns());
            api_thread();
            assert_eq!(own_niceness(), nice);
            let api = u64::try_from(API_SLICE.as_nanos()).unwrap();
            match slice_ns() {
                Some(ns) => assert_eq!(ns, api),
                None => eprintln!("this kernel does not show se.slice; only the niceness is checked"),
            }
            // A thread the API thread starts inherits its slice; a run
            // thread puts the usual one back.
            std::thread::spawn(move || {
                run_thread();
                assert_eq!(own_niceness(), (nice + RUN_NICENESS).min(19));
                if let (Some(ns), Some(usual)) = (slice_ns(), usual) {
                    assert_eq!(ns, usual);
                    assert!(ns > api);
                }
                // Its own threads do not get nicer again.
                std::thread::spawn(move || {
                    run_thread();
                    assert_eq!(own_niceness(), (nice + RUN_NICENESS).min(19));
                })
                .join()
                .unwrap();
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }
}
