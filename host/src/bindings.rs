//! Host-side bindings for the `nexo:plugin` worlds, generated from `wit/`.
//!
//! Every nexo import is `async` (tools and the model loop do I/O) and
//! `trappable` (the host can end a run it must stop, such as one that
//! overran a host-side limit). The skill and search-backend worlds reuse the
//! agent world's shared interfaces so each WIT type has one Rust type, and
//! the host uses the WIT error types (`tool-error`, `search-error`) as its
//! own: there is no hand-written mirror to keep in step.
#![allow(missing_docs)]

/// The `agent-plugin` world.
pub mod agent {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/agent-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
    });
}

/// The `skill-plugin` world.
pub mod skill {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
    });
}

/// The `hook-plugin` world.
pub mod hook {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/hook-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
    });
}

/// The `search-backend-plugin` world.
pub mod search {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/search-backend-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
        with: {
            "nexo:plugin/types": crate::bindings::agent::nexo::plugin::types,
            "nexo:plugin/log": crate::bindings::agent::nexo::plugin::log,
        },
    });
}

/// The `sandbox-provider-plugin` world.
pub mod provider {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "nexo:plugin/sandbox-provider-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [PartialEq, Eq, serde::Serialize, serde::Deserialize],
        with: {
            "nexo:plugin/log": crate::bindings::agent::nexo::plugin::log,
            "nexo:plugin/outbound-http": crate::bindings::search::nexo::plugin::outbound_http,
            "nexo:plugin/config": crate::bindings::search::nexo::plugin::config,
        },
    });
}

pub use agent::exports::nexo::plugin::agent::{AgentManifest, PermissionMode, RunError, SandboxKind};
pub use agent::nexo::plugin::model::{ModelError, Reply, StopReason};
pub use agent::nexo::plugin::tools::{Page, ShellOutput};
pub use agent::nexo::plugin::types::{Capability, SearchHit, ToolError};
pub use search::exports::nexo::plugin::search_backend::{BackendInfo, SearchError, SearchOptions};
pub use skill::exports::nexo::plugin::skill::SkillMetadata;
