//! Host-side bindings for the `nexo:plugin` worlds, generated from `wit/`.
//!
//! Every nexo import is `async` (tools and the model loop do I/O) and
//! `trappable` (the host can end a run it must stop, such as one that
//! overran a host-side limit). The skill and search-backend worlds reuse the
//! agent world's shared interfaces so each WIT type has one Rust type.
#![allow(missing_docs)]

/// The `agent-plugin` world.
pub mod agent {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/agent-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

/// The `skill-plugin` world.
pub mod skill {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

/// The `search-backend-plugin` world.
pub mod search {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/search-backend-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize],
        with: {
            "nexo:plugin/types": crate::bindings::agent::nexo::plugin::types,
            "nexo:plugin/log": crate::bindings::agent::nexo::plugin::log,
        },
    });
}

pub use agent::exports::nexo::plugin::agent::{AgentManifest, PermissionMode, RunError, SandboxKind};
pub use agent::nexo::plugin::model::{ModelError, Reply, StopReason};
pub use agent::nexo::plugin::types::{Capability, SearchHit, ToolError};
pub use search::exports::nexo::plugin::search_backend::{BackendInfo, SearchError, SearchOptions};
pub use skill::exports::nexo::plugin::skill::SkillMetadata;

impl Capability {
    /// Every capability, in the contract's order.
    pub const ALL: [Capability; 6] = [
        Capability::Read,
        Capability::Glob,
        Capability::Write,
        Capability::Shell,
        Capability::Fetch,
        Capability::Search,
    ];

    /// The name used in the WIT, in grants and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::Glob => "glob",
            Capability::Write => "write",
            Capability::Shell => "shell",
            Capability::Fetch => "fetch",
            Capability::Search => "search",
        }
    }
}

impl SandboxKind {
    /// The name used in the WIT and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::Virtual => "virtual",
            SandboxKind::Local => "local",
            SandboxKind::Container => "container",
            SandboxKind::Remote => "remote",
        }
    }
}

impl PermissionMode {
    /// The name used in the WIT and in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ReadOnly => "read-only",
            PermissionMode::Auto => "auto",
            PermissionMode::Ask => "ask",
            PermissionMode::Approve => "approve",
        }
    }
}
