//! The `nexo` command-line program.

#[macro_use]
mod cli;

/// jemalloc rather than glibc's malloc: after a burst of work (thousands of
/// runs starting at once) glibc's per-thread arenas keep much of the freed
/// memory resident, and its size classes are looser. With 10,000 runs
/// waiting on their model, the process takes 1.6 GiB with jemalloc and
/// 1.9 GiB with glibc (`make bench-serve`, the density phase). mimalloc
/// was tried too and took 2.2 GiB.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
