//! Running agent components, and the host side of the agent world's imports.
//!
//! The imports answer within the contract: the tools refuse with a
//! `tool-error` because this host grants agents no tool capabilities yet, and
//! `prompt` answers `model-error::not-configured` because no model provider
//! is wired in. Refusals are values, never traps, so agents can recover.

use std::time::Duration;

use wasmtime::Store;

use crate::bindings::agent::AgentPlugin;
use crate::bindings::agent::nexo::plugin::{log, model, tools, types};
use crate::bindings::{ModelError, RunError, SearchHit, ToolError};
use crate::error::PluginError;
use crate::manifest::Capability;
use crate::plugin::{Plugin, PluginKind, Pre, settle};
use crate::state::{HostState, RunOptions};

/// One live instance of an agent, ready to run.
pub struct AgentInstance {
    store: Store<HostState>,
    bindings: AgentPlugin,
    timeout: Duration,
}

impl Plugin {
    /// Instantiates this agent with a fresh store: the engine's limits, the
    /// run deadline, and the WASI grants in `options`.
    pub async fn instantiate_agent(&self, options: &RunOptions) -> Result<AgentInstance, PluginError> {
        self.expect_kind(PluginKind::Agent)?;
        let Pre::Agent(pre) = self.pre() else { unreachable!("an agent plugin always holds an agent InstancePre") };
        let timeout = options.timeout.unwrap_or(self.engine().limits().run_timeout);
        let mut store = self.store(options, timeout)?;
        let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        Ok(AgentInstance { store, bindings, timeout })
    }

    /// Instantiates this agent and runs it once on `input`.
    pub async fn run_agent(&self, input: &str, options: &RunOptions) -> Result<String, PluginError> {
        self.instantiate_agent(options).await?.run(input).await
    }
}

impl AgentInstance {
    /// Calls the agent's `run` export under the run deadline.
    pub async fn run(&mut self, input: &str) -> Result<String, PluginError> {
        let agent = self.bindings.nexo_plugin_agent();
        let result = tokio::time::timeout(self.timeout, agent.call_run(&mut self.store, input)).await;
        let plugin = self.store.data().plugin.to_string();
        match settle(&self.store, "run", self.timeout, result)? {
            Ok(answer) => Ok(answer),
            Err(RunError::Failed(reason)) => Err(PluginError::AgentFailed { plugin, reason }),
            Err(RunError::Model(err)) => Err(PluginError::AgentFailed { plugin, reason: model_error_text(&err) }),
        }
    }

    /// What the agent wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.store.data().stdout_text()
    }
}

fn model_error_text(err: &ModelError) -> String {
    match err {
        ModelError::NotConfigured(m) => format!("model not configured: {m}"),
        ModelError::Unavailable(m) => format!("model unavailable: {m}"),
        ModelError::Provider(m) => format!("model provider error: {m}"),
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        if self.log_lines >= self.limits.log_lines {
            return Ok(());
        }
        self.log_lines += 1;
        let mut message = message;
        if message.len() > self.limits.log_line_bytes {
            let mut cut = self.limits.log_line_bytes;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" …[cut]");
        }
        let plugin = &*self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(target: "nexo::plugin", plugin, "{message}"),
            log::Level::Debug => tracing::debug!(target: "nexo::plugin", plugin, "{message}"),
            log::Level::Info => tracing::info!(target: "nexo::plugin", plugin, "{message}"),
            log::Level::Warn => tracing::warn!(target: "nexo::plugin", plugin, "{message}"),
            log::Level::Error => tracing::error!(target: "nexo::plugin", plugin, "{message}"),
        }
        if self.log_lines == self.limits.log_lines {
            tracing::warn!(target: "nexo::plugin", plugin, "log line limit reached; dropping further lines");
        }
        Ok(())
    }
}

impl HostState {
    /// The answer to every tool call until capabilities can be granted:
    /// default deny, as a recoverable error.
    fn refuse<T>(&self, tool: &str, capability: Capability, arg: &str) -> Result<T, ToolError> {
        if arg.len() > self.limits.host_arg_bytes {
            return Err(ToolError::InvalidInput(format!(
                "the argument to `{tool}` is {} bytes; the limit is {}",
                arg.len(),
                self.limits.host_arg_bytes
            )));
        }
        let cap = capability.as_str();
        tracing::info!(target: "nexo::gate", plugin = &*self.plugin, tool, capability = cap, verdict = "denied");
        Err(ToolError::Denied(format!(
            "`{tool}` needs the `{cap}` capability, which is not granted to `{}`: this host grants agents no tool capabilities",
            self.plugin
        )))
    }
}

impl tools::Host for HostState {
    async fn read_file(&mut self, path: String) -> wasmtime::Result<Result<String, ToolError>> {
        Ok(self.refuse("read-file", Capability::Read, &path))
    }

    async fn write_file(&mut self, path: String, contents: String) -> wasmtime::Result<Result<(), ToolError>> {
        let size = path.len() + contents.len();
        let arg = if size > self.limits.host_arg_bytes { contents } else { path };
        Ok(self.refuse("write-file", Capability::Write, &arg))
    }

    async fn glob(&mut self, pattern: String) -> wasmtime::Result<Result<Vec<String>, ToolError>> {
        Ok(self.refuse("glob", Capability::Glob, &pattern))
    }

    async fn shell(&mut self, command: String) -> wasmtime::Result<Result<tools::ShellOutput, ToolError>> {
        Ok(self.refuse("shell", Capability::Shell, &command))
    }

    async fn fetch(&mut self, url: String) -> wasmtime::Result<Result<tools::Page, ToolError>> {
        Ok(self.refuse("fetch", Capability::Fetch, &url))
    }

    async fn web_search(&mut self, query: String) -> wasmtime::Result<Result<Vec<SearchHit>, ToolError>> {
        Ok(self.refuse("web-search", Capability::Search, &query))
    }
}

impl model::Host for HostState {
    async fn prompt(&mut self, _input: String) -> wasmtime::Result<Result<model::Reply, ModelError>> {
        Ok(Err(ModelError::NotConfigured(format!(
            "agent `{}` asked the model loop, but this host has no model provider configured",
            self.plugin
        ))))
    }
}
