//! # nexo
//!
//! A runtime that hosts AI agents as WebAssembly components.
//!
//! Agents, skills, web-search backends and sandbox providers are components
//! that implement the worlds of the `nexo:plugin` WIT package (see `wit/` in
//! the repository). The host loads them ([`plugin`]), runs them on one shared
//! [`engine`] with a deadline and memory cap per run, and gives them only the
//! authority the operator granted.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nexo::{Engine, EngineConfig, Plugin};
//!
//! let engine = Engine::new(EngineConfig::default())?;
//! let plugin = Plugin::load(&engine, "hello.wasm").await?;
//! println!("{} is a {}", plugin.name(), plugin.kind());
//! # Ok(()) }
//! ```
//!
//! Data flows one way: manifest ([`manifest`]) → the operator's settings
//! ([`settings`]) → [`authority`] → instance ([`world`], [`instance`]) → the
//! host-call path ([`host_call`]) into the capability units ([`unit`],
//! [`capability`]) → model loop ([`agent_loop`], providers from `nexo-model`)
//! → [`events`]. Every web request (the `fetch` tool, search backends' and
//! sandbox providers' HTTP) goes through one guarded client ([`egress`]).

/// Prints a diagnostic line for the operator to stderr through
/// [`terminal::eprint_line`]: always escaped, since diagnostics quote paths,
/// tool arguments and server bodies.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::terminal::eprint_line(&format!($($arg)*)) };
}

pub mod acceptance;
pub mod agent_file;
pub mod agent_loop;
pub mod authority;
pub mod bindings;
pub mod capability;
pub mod children;
pub mod claude_code;
pub mod config;
pub mod data_dir;
pub mod egress;
pub mod engine;
pub mod error;
pub mod events;
pub mod files;
pub mod flow;
pub mod grant;
pub mod hint;
pub mod hooks;
pub mod host_call;
pub mod instance;
pub mod journal;
pub mod lease;
pub mod log;
pub mod manifest;
pub mod mcp_server;
pub mod model_turn;
pub mod plugin;
pub mod policy;
pub mod priority;
pub mod quota;
pub mod registry;
pub mod runs;
pub mod search;
pub mod server;
pub mod session;
pub mod settings;
pub mod spend;
pub mod stop;
mod task;
pub mod telemetry;
pub mod terminal;
pub mod thread;
pub mod truncate;
pub mod unit;
pub mod world;

pub use engine::{Engine, EngineConfig, Limits};
pub use error::{ConfigError, LoadError, RunError, ToolError};
pub use plugin::{Plugin, PluginKind};

/// The `anyhow` crate, re-exported for the same reason.
pub use anyhow;
/// The `wasmtime` crate nexo is built on, so that code extending the host uses
/// the same version.
pub use wasmtime;

/// The complete program in `docs/engine.md`, compiled as a doctest so the
/// Rust-API-only example there cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/engine.md")]
pub struct EngineDocs;
