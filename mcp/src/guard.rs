//! The orphan guard: `nexo __mcp-guard <host pid> [options] -- <command> <args…>`.

use std::ffi::OsString;

/// The hidden subcommand the host dispatches to [`guard_main`].
pub const GUARD_SUBCOMMAND: &str = "__mcp-guard";

/// The `__mcp-guard` subcommand's body, called by the host's CLI before any
/// runtime or tracing starts: `args` are what follows `__mcp-guard`. Returns
/// the exit code.
pub fn guard_main(args: &[OsString]) -> i32 {
    let _ = args;
    127
}
