//! Sandbox-provider components as remote sandboxes.
//!
//! A provider component implements `nexo:plugin/sandbox-provider`. The host
//! keeps one long-lived instance per sandbox and adapts it to
//! [`RemoteClient`], so [`RemoteSandbox`] (and through it the permission gate
//! and every tool) works the same for a Rust client and a `.wasm` adapter.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexo_sandbox::{ExecOutput, RemoteClient, RemoteSandbox, SandboxError};
use wasmtime::Store;
use wasmtime::component::Component;

use super::{LinkFailure, Meta};
use crate::bindings::provider::exports::nexo::plugin::sandbox_provider::SandboxError as WitError;
use crate::bindings::provider::{SandboxProviderPlugin as Bindings, SandboxProviderPluginPre};
use crate::egress::{EgressGrant, EgressState};
use crate::engine::Engine;
use crate::error::RunError;
use crate::instance::{Host, Wasi, new_store, settle};
use crate::manifest::ProviderInfo;

type Pre = SandboxProviderPluginPre<Host<EgressState>>;

/// Links `component` as a sandbox provider.
pub(crate) fn link(engine: &Engine, component: &Component) -> Result<Pre, LinkFailure> {
    super::link(EgressState::linker(engine), component, Pre::new)
}

/// Reads a provider's info under the short call deadline, with no egress.
pub(crate) async fn describe(engine: &Engine, pre: &Pre, label: Arc<str>) -> Result<ProviderInfo, RunError> {
    let timeout = engine.limits().call_timeout;
    let mut store =
        new_store(engine, label.clone(), &Wasi::default(), timeout, EgressState::nothing(&label, engine.limits()))?;
    let result = tokio::time::timeout(timeout, async {
        let bindings = pre.instantiate_async(&mut store).await?;
        bindings.nexo_plugin_sandbox_provider().call_info(&mut store).await
    })
    .await;
    settle(&store, "describe", timeout, result).map(ProviderInfo::from)
}

/// A loaded sandbox-provider component.
#[derive(Clone)]
pub struct SandboxProviderPlugin {
    meta: Arc<Meta>,
    pre: Pre,
    info: ProviderInfo,
}

impl std::fmt::Debug for SandboxProviderPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxProviderPlugin").field("name", &self.meta.name).finish_non_exhaustive()
    }
}

/// A provider instance behind the [`RemoteClient`] calls.
struct ComponentClient {
    instance: Mutex<(Store<Host<EgressState>>, Bindings)>,
    runtime: tokio::runtime::Handle,
    call_timeout: Duration,
}

impl SandboxProviderPlugin {
    pub(crate) fn new(meta: Arc<Meta>, pre: Pre, info: ProviderInfo) -> Self {
        SandboxProviderPlugin { meta, pre, info }
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// What it says about itself.
    pub fn info(&self) -> &ProviderInfo {
        &self.info
    }

    /// Starts the provider under `grant` (the hosts it may reach through
    /// `outbound-http`, its API key, added by the host, and its settings)
    /// and wraps it as a remote sandbox. Each call gets `timeout` (default:
    /// the engine's run timeout). Call from within a tokio runtime; the
    /// sandbox's blocking methods must then run off the runtime's async
    /// threads (as the tools do).
    pub async fn start(&self, grant: &EgressGrant, timeout: Option<Duration>) -> Result<RemoteSandbox, RunError> {
        let engine = &self.meta.engine;
        let state = EgressState::new(self.name(), grant, engine.limits())?;
        let call_timeout = timeout.unwrap_or(engine.limits().run_timeout);
        let mut store = new_store(engine, self.meta.name.clone(), &Wasi::default(), call_timeout, state)?;
        let result = tokio::time::timeout(call_timeout, self.pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", call_timeout, result)?;
        let client = ComponentClient {
            instance: Mutex::new((store, bindings)),
            runtime: tokio::runtime::Handle::current(),
            call_timeout,
        };
        RemoteSandbox::new(Box::new(client), &self.info.workdir, &self.info.name)
            .map_err(|e| RunError::Instantiate { plugin: self.name().to_string(), reason: e.to_string() })
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
            &'a mut Store<Host<EgressState>>,
            &'a Bindings,
        )
            -> std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<Result<T, WitError>>> + Send + 'a>>,
    ) -> Result<T, SandboxError> {
        let mut guard = self.instance.lock().unwrap_or_else(|e| e.into_inner());
        let (store, bindings) = &mut *guard;
        crate::instance::arm_deadline(store, timeout);
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
