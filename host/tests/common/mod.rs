//! What every test of the `nexo` binary shares: the binary with an
//! environment that no outside `NEXO_*` setting leaks into, and its output
//! as text.
#![allow(dead_code)] // each test binary uses a different part

use std::path::Path;
use std::process::{Command, Output};

/// The `nexo` binary with its compile cache in `cache`, runs recorded in a
/// store beside it (never the user's), and no model, provider, base URL,
/// config file or log filter from the environment.
pub fn nexo_command(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.env("NEXO_CACHE_DIR", cache)
        .env("NEXO_STORE", cache.with_extension("store.db"))
        .env_remove("NEXO_LOG")
        .env_remove("NEXO_MODEL")
        .env_remove("NEXO_PROVIDER")
        .env_remove("NEXO_BASE_URL")
        .env_remove("NEXO_CONFIG");
    cmd
}

/// A process's stdout, decoded lossily.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A process's stderr, decoded lossily.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
