//! What every libFuzzer driver does first.

/// Ignores SIGPIPE, as the Rust runtime does before `main` in every Rust
/// program (the `nexo` binary included). libFuzzer's C `main` does not, so
/// a write to a socket the peer closed (a cut model stream) would kill
/// the fuzzer instead of failing with `EPIPE`.
pub fn init() {
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread
    // that could rely on another disposition exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
