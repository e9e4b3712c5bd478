//! The sandbox-provider world: implement [`SandboxProvider`] and export it
//! with [`export_sandbox_provider!`](crate::export_sandbox_provider).
//!
//! A provider adapts a remote sandbox service. The host passes untrusted
//! values to [`SandboxProvider::exec`] only in `args`: hand them to the remote
//! shell as positional parameters (`sh -c command sh args…`), never splice
//! them into the command text.

use alloc::string::String;
use alloc::vec::Vec;

/// Raw bindings generated from `wit/` for the
/// `sandbox-provider-plugin` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "nexo:plugin/sandbox-provider-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_sandbox_provider_plugin",
        default_bindings_module: "nexo_sdk::provider::bindings",
        runtime_path: "nexo_sdk::__wit_bindgen::rt",
    });
}

pub use bindings::exports::nexo::plugin::sandbox_provider::{ExecOutput, ProviderInfo, SandboxError};
pub use bindings::nexo::plugin::config::get as setting;
pub use bindings::nexo::plugin::outbound_http as http;

/// A remote-sandbox adapter.
pub trait SandboxProvider {
    /// The provider's name, description, hosts and working directory.
    fn info() -> ProviderInfo;
    /// Reads a text file by absolute path.
    fn read(path: String) -> Result<String, SandboxError>;
    /// Creates or replaces a file by absolute path.
    fn write(path: String, contents: String) -> Result<(), SandboxError>;
    /// Runs `sh -c command sh args…` within `timeout_ms`.
    fn exec(command: String, args: Vec<String>, timeout_ms: u32) -> Result<ExecOutput, SandboxError>;
    /// Releases the remote environment; safe to call twice.
    fn close() -> Result<(), SandboxError>;
}

impl<T: SandboxProvider> bindings::exports::nexo::plugin::sandbox_provider::Guest for T {
    fn info() -> ProviderInfo {
        <T as SandboxProvider>::info()
    }
    fn read(path: String) -> Result<String, SandboxError> {
        <T as SandboxProvider>::read(path)
    }
    fn write(path: String, contents: String) -> Result<(), SandboxError> {
        <T as SandboxProvider>::write(path, contents)
    }
    fn exec(command: String, args: Vec<String>, timeout_ms: u32) -> Result<ExecOutput, SandboxError> {
        <T as SandboxProvider>::exec(command, args, timeout_ms)
    }
    fn close() -> Result<(), SandboxError> {
        <T as SandboxProvider>::close()
    }
}

/// Exports a type that implements [`SandboxProvider`].
#[macro_export]
macro_rules! export_sandbox_provider {
    ($ty:ident) => {
        $crate::provider::bindings::__export_sandbox_provider_plugin!($ty);
    };
}
