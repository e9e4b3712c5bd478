//! # nexo
//!
//! A runtime that hosts AI agents as WebAssembly components.
//!
//! Agents, skills and web-search backends are components that implement the
//! worlds of the `nexo:plugin` WIT package (see `wit/` in the repository).
//! The host loads them ([`plugin`]), runs them on one shared [`engine`] with a
//! deadline and memory cap per run, and gives them only the authority the
//! operator granted.
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
//! Data flows one way: manifest ([`manifest`]) → grant ([`permissions`]) →
//! instance ([`plugin`], [`state`]) → tools ([`tools`], in a sandbox from
//! `nexo-sandbox`) → model loop ([`agent_loop`], providers from `nexo-model`)
//! → events. Every web request (the `fetch` tool, search backends' and
//! sandbox providers' HTTP) goes through one guarded client ([`web`]).

pub mod agent;
pub mod agent_file;
pub mod agent_loop;
pub mod bindings;
pub mod engine;
pub mod error;
pub mod files;
pub mod manifest;
pub mod permissions;
pub mod plugin;
pub mod provider;
pub mod search;
pub mod skill;
pub mod state;
pub mod terminal;
pub mod tools;
pub mod truncate;
pub mod web;

pub use engine::{Engine, EngineConfig, Limits};
pub use error::PluginError;
pub use plugin::{Plugin, PluginKind};

/// The `anyhow` crate, re-exported for the same reason.
pub use anyhow;
/// The `wasmtime` crate nexo is built on, so that code extending the host uses
/// the same version.
pub use wasmtime;
