//! Sandbox-provider components as remote sandboxes.
//!
//! A provider component implements `nexo:plugin/sandbox-provider`. The host
//! keeps one long-lived instance per sandbox and adapts it to
//! [`RemoteClient`], so [`RemoteSandbox`] (and through it the permission gate
//! and every tool) works the same for a Rust client and a `.wasm` adapter.

use std::sync::Mutex;
use std::time::Duration;

use nexo_sandbox::{ExecOutput, RemoteClient, RemoteSandbox, SandboxError};
use wasmtime::Store;

use crate::bindings::provider::SandboxProviderPlugin;
use crate::bindings::provider::exports::nexo::plugin::sandbox_provider::SandboxError as WitError;
use crate::error::PluginError;
use crate::plugin::{Description, Plugin, PluginKind, Pre, settle};
use crate::state::{HostState, RunOptions};
use crate::web::EgressGrant;

/// A provider instance behind the [`RemoteClient`] calls.
struct ComponentClient {
    plugin: Plugin,
    instance: Mutex<(Store<HostState>, SandboxProviderPlugin)>,
    runtime: tokio::runtime::Handle,
    call_timeout: Duration,
}

impl Plugin {
    /// Starts this sandbox provider and wraps it as a remote sandbox. Call
    /// from within a tokio runtime; the sandbox's blocking methods must then
    /// run off the runtime's async threads (as the tools do).
    pub async fn sandbox_provider(&self, options: &RunOptions) -> Result<RemoteSandbox, PluginError> {
        self.sandbox_provider_with(options, &EgressGrant::default()).await
    }

    /// [`Plugin::sandbox_provider`] with a network grant: the hosts the
    /// provider may reach through `outbound-http`, its API key (added by the
    /// host) and its settings.
    pub async fn sandbox_provider_with(
        &self,
        options: &RunOptions,
        grant: &EgressGrant,
    ) -> Result<RemoteSandbox, PluginError> {
        self.expect_kind(PluginKind::SandboxProvider)?;
        let egress =
            grant.egress().map_err(|reason| PluginError::Egress { plugin: self.name().to_string(), reason })?;
        let (Pre::SandboxProvider(pre), Description::SandboxProvider(info)) = (self.pre(), self.description()) else {
            unreachable!("a sandbox provider holds a provider InstancePre and description")
        };
        let call_timeout = options.timeout.unwrap_or(self.engine().limits().run_timeout);
        let mut store = self.store(options, call_timeout)?;
        store.data_mut().settings = grant.settings.clone();
        store.data_mut().egress = egress;
        let result = tokio::time::timeout(call_timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", call_timeout, result)?;
        let client = ComponentClient {
            plugin: self.clone(),
            instance: Mutex::new((store, bindings)),
            runtime: tokio::runtime::Handle::current(),
            call_timeout,
        };
        RemoteSandbox::new(Box::new(client), &info.workdir, &info.name)
            .map_err(|e| PluginError::Instantiate { plugin: self.name().to_string(), reason: e.to_string() })
    }
}

fn from_wit(e: WitError) -> SandboxError {
    match e {
        WitError::Security(m) => SandboxError::Security(m),
        WitError::NotFound(m) => SandboxError::NotFound(m),
        WitError::Unsupported(m) => SandboxError::Unsupported(m),
        WitError::Timeout(m) => SandboxError::Timeout(m),
        WitError::Failed(m) => SandboxError::Failed(m),
    }
}

impl ComponentClient {
    /// Runs one export call with a fresh deadline. A trap or deadline ends
    /// the sandbox's usefulness, and is reported as a failure of the tool.
    fn call<T>(
        &self,
        function: &str,
        timeout: Duration,
        f: impl for<'a> FnOnce(
            &'a mut Store<HostState>,
            &'a SandboxProviderPlugin,
        )
            -> std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<Result<T, WitError>>> + Send + 'a>>,
    ) -> Result<T, SandboxError> {
        let mut guard = self.instance.lock().unwrap_or_else(|e| e.into_inner());
        let (store, bindings) = &mut *guard;
        let ticks = self.plugin.engine().ticks_for(timeout);
        store.set_epoch_deadline(ticks);
        let result = self.runtime.block_on(async { tokio::time::timeout(timeout, f(store, bindings)).await });
        match settle(store, function, timeout, result) {
            Ok(inner) => inner.map_err(from_wit),
            Err(e) => Err(SandboxError::Failed(format!("sandbox provider: {e}"))),
        }
    }
}

impl RemoteClient for ComponentClient {
    fn read(&self, path: &str) -> Result<String, SandboxError> {
        let path = path.to_string();
        self.call("read", self.call_timeout, move |store, b| {
            Box::pin(async move { b.nexo_plugin_sandbox_provider().call_read(store, &path).await })
        })
    }

    fn write(&self, path: &str, contents: &str) -> Result<(), SandboxError> {
        let (path, contents) = (path.to_string(), contents.to_string());
        self.call("write", self.call_timeout, move |store, b| {
            Box::pin(async move { b.nexo_plugin_sandbox_provider().call_write(store, &path, &contents).await })
        })
    }

    fn exec(&self, command: &str, args: &[String], timeout: Duration) -> Result<ExecOutput, SandboxError> {
        let (command, args) = (command.to_string(), args.to_vec());
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        // The provider enforces `timeout`; the host allows a little more for the call itself.
        let limit = timeout + Duration::from_secs(5);
        let out = self.call("exec", limit, move |store, b| {
            Box::pin(async move { b.nexo_plugin_sandbox_provider().call_exec(store, &command, &args, ms).await })
        })?;
        Ok(ExecOutput { status: out.status, stdout: out.stdout, stderr: out.stderr })
    }

    fn close(&self) -> Result<(), SandboxError> {
        self.call("close", self.call_timeout, |store, b| {
            Box::pin(async move { b.nexo_plugin_sandbox_provider().call_close(store).await })
        })
    }
}
