//! Paths to the plugin components built from `plugins/`, for tests and
//! benchmarks. The build script builds them; see `build.rs`.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
