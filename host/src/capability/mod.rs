//! The capability units of the agent world, one module each (see
//! [`crate::unit`]). Each module holds the unit, its per-instance state and
//! its tools; each tool's spec, argument parsing, handler and WIT adapter
//! sit together in its unit's file.

pub mod agents;
pub mod durable;
pub mod fetch;
pub mod files;
pub mod mcp;
pub mod model;
pub mod network;
pub mod sandbox;
pub mod search;
pub mod shell;
pub mod skills;
