//! # nexo-sdk
//!
//! Write [nexo](https://github.com/nexo-rt/nexo) plugins in Rust. A plugin is a
//! WebAssembly component that implements one world of the `nexo:plugin` WIT
//! package, one of five: an **agent**, a **skill**, a **search backend**, a
//! **sandbox provider** or a **hook**.
//!
//! Turn on the feature for the one world your plugin implements (`agent`,
//! `skill`, `search-backend`, `sandbox-provider` or `hook`), implement its
//! trait, and export your type:
//!
//! ```ignore
//! use nexo_sdk::agent::{Agent, Capability, Manifest};
//!
//! struct Reviewer;
//!
//! impl Agent for Reviewer {
//!     fn manifest() -> Manifest {
//!         Manifest::new("reviewer", "Reviews code for bugs")
//!             .instructions("You are a careful code reviewer.")
//!             .capabilities([Capability::Read, Capability::Glob])
//!     }
//!     // `run` defaults to one prompt through the host's model loop.
//! }
//!
//! nexo_sdk::export_agent!(Reviewer);
//! ```
//!
//! Build with `nexo build` or `cargo build --release --target wasm32-wasip2`.
//! A plugin must enable exactly one world feature: a component carries the type
//! information of every world compiled into it.

extern crate alloc;
// The generated bindings name their runtime as `nexo_sdk::…`, in this crate too.
extern crate self as nexo_sdk;

#[cfg(any(
    all(
        feature = "agent",
        any(feature = "skill", feature = "search-backend", feature = "sandbox-provider", feature = "hook")
    ),
    all(feature = "skill", any(feature = "search-backend", feature = "sandbox-provider", feature = "hook")),
    all(feature = "search-backend", any(feature = "sandbox-provider", feature = "hook")),
    all(feature = "sandbox-provider", feature = "hook"),
))]
compile_error!(
    "enable exactly one of the nexo-sdk features `agent`, `skill`, `search-backend`, `sandbox-provider` and `hook`"
);

#[cfg(feature = "agent")]
pub mod agent;
#[cfg(feature = "agent")]
pub mod durable;
#[cfg(feature = "hook")]
pub mod hook;
#[cfg(feature = "sandbox-provider")]
pub mod provider;
#[cfg(feature = "search-backend")]
pub mod search;
#[cfg(feature = "skill")]
pub mod skill;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;
