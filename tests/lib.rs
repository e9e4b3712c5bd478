//! Paths to the plugin components built from `plugins/`, for tests and
//! benchmarks (the build script builds them; see `build.rs`), the Python and
//! JavaScript example agents (built on demand; see [`guests`]), and a plain
//! loopback HTTP server for tests of the CLI.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

pub mod guests;
pub mod loopback;
