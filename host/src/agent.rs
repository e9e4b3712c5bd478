//! Running agent components, and the host side of the agent world's imports.
//!
//! Each agent instance gets a [`Toolbox`]: its sandbox, the permission gate
//! and its effective grant (requested ∩ granted). The `tools` import calls
//! it; refusals come back as `tool-error` values, never traps. `prompt` runs
//! the run's loop with its model (and answers `model-error::not-configured`,
//! saying how to set one, when there is none).

use std::sync::Arc;
use std::time::Duration;

use nexo_sandbox::{Sandbox, VirtualSandbox};
use wasmtime::Store;

use crate::agent_loop::{Outcome, Status};
use crate::bindings::agent::AgentPlugin;
use crate::bindings::agent::nexo::plugin::{log, model, tools, types};
use crate::bindings::{ModelError, RunError, SearchHit, ToolError};
use crate::error::PluginError;
use crate::manifest::{AgentManifest, Capability};
use crate::plugin::{Plugin, PluginKind, Pre, settle};
use crate::state::{HostState, Preopen, Prompting, RunOptions};
use crate::tools::{ToolFailure, Toolbox};

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
        let Some(manifest) = self.manifest() else { unreachable!("an agent plugin always has a manifest") };
        let toolbox = toolbox_for(manifest, options);
        // WASI writes bypass the gate, so the sandbox directory's preopen is
        // writable only when writes would pass it without asking, under the
        // mode as the plugin's own declaration narrows it.
        let sandbox_dir = toolbox.sandbox().host_root().map(|root| Preopen {
            host: root.to_path_buf(),
            guest: root.to_string_lossy().into_owned(),
            writable: toolbox.allows_unasked(Capability::Write),
        });
        let skills = crate::state::resolve_skills(manifest, options).await?;
        let prompting = Prompting::new(manifest, toolbox.sandbox().instructions(), skills, options);
        let mut store = self.store_with(options, sandbox_dir.as_ref(), timeout)?;
        store.data_mut().toolbox = Some(Arc::new(toolbox));
        store.data_mut().prompting = Some(prompting);
        let result = tokio::time::timeout(timeout, pre.instantiate_async(&mut store)).await;
        let bindings = settle(&store, "instantiate", timeout, result)?;
        Ok(AgentInstance { store, bindings, timeout })
    }

    /// Instantiates this agent and runs it once on `input`.
    pub async fn run_agent(&self, input: &str, options: &RunOptions) -> Result<String, PluginError> {
        self.instantiate_agent(options).await?.run(input).await
    }
}

/// Builds the toolbox of one run: the operator's sandbox (in-memory by
/// default), the permissions narrowed by the agent's own request, and the
/// grant intersected with what the agent asked for.
fn toolbox_for(manifest: &AgentManifest, options: &RunOptions) -> Toolbox {
    let sandbox: Arc<dyn Sandbox> = options.sandbox.clone().unwrap_or_else(|| Arc::new(VirtualSandbox::new()));
    toolbox_with(manifest, sandbox, options)
}

/// The toolbox for `manifest` acting in `sandbox` under `options`.
pub(crate) fn toolbox_with(manifest: &AgentManifest, sandbox: Arc<dyn Sandbox>, options: &RunOptions) -> Toolbox {
    let mut permissions = options.permissions.clone();
    if let Some(requested) = manifest.permissions {
        permissions = permissions.narrowed_to(requested);
    }
    let effective = options.grant.effective(&manifest.capabilities);
    let fetch =
        crate::web::Fetcher::new(&manifest.fetch_allow, options.grant.fetch_hosts.as_deref(), options.http.clone())
            .transpose();
    Toolbox::new(&manifest.name, sandbox, permissions, effective, options.tool_limits)
        .with_requested(manifest.capabilities.iter().copied())
        .with_web(fetch, options.search.clone())
}

impl AgentInstance {
    /// Calls the agent's `run` export under the run deadline.
    pub async fn run(&mut self, input: &str) -> Result<String, PluginError> {
        let agent = self.bindings.nexo_plugin_agent();
        let result = tokio::time::timeout(self.timeout, agent.call_run(&mut self.store, input)).await;
        let plugin = self.store.data().plugin.to_string();
        self.log_stdio();
        match settle(&self.store, "run", self.timeout, result)? {
            Ok(answer) => Ok(answer),
            Err(RunError::Failed(reason)) => Err(PluginError::AgentFailed { plugin, reason }),
            Err(RunError::Model(err)) => Err(PluginError::AgentFailed { plugin, reason: model_error_text(&err) }),
        }
    }

    /// Sends what the plugin printed to the log; the pipes are already bounded.
    fn log_stdio(&self) {
        let state = self.store.data();
        let plugin = &*state.plugin;
        let (out, err) = (state.stdout_text(), state.stderr_text());
        if !out.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin, stream = "stdout", "{out}");
        }
        if !err.is_empty() {
            tracing::info!(target: "nexo::plugin", plugin, stream = "stderr", "{err}");
        }
    }

    /// How the agent's latest `prompt` ended, if it prompted.
    pub fn last_outcome(&self) -> Option<&Outcome> {
        self.store.data().last_outcome.as_ref()
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
    /// The run's toolbox, after checking the size of the argument.
    fn toolbox(&self, tool: &str, args: &[&str]) -> Result<Arc<Toolbox>, ToolError> {
        let size: usize = args.iter().map(|a| a.len()).sum();
        if size > self.limits.host_arg_bytes {
            return Err(ToolError::InvalidInput(format!(
                "the arguments to `{tool}` are {size} bytes; the limit is {}",
                self.limits.host_arg_bytes
            )));
        }
        self.toolbox.clone().ok_or_else(|| ToolError::Denied(format!("`{tool}` is not available to this plugin")))
    }
}

fn wit_error(e: ToolFailure) -> ToolError {
    match e {
        ToolFailure::Denied(m) => ToolError::Denied(m),
        ToolFailure::ApprovalRequired(m) => ToolError::ApprovalRequired(m),
        ToolFailure::Security(m) => ToolError::Security(m),
        ToolFailure::Unsupported(m) => ToolError::Unsupported(m),
        ToolFailure::NotFound(m) => ToolError::NotFound(m),
        ToolFailure::InvalidInput(m) => ToolError::InvalidInput(m),
        ToolFailure::Timeout(m) => ToolError::Timeout(m),
        ToolFailure::Failed(m) => ToolError::Failed(m),
    }
}

impl tools::Host for HostState {
    async fn read_file(&mut self, path: String) -> wasmtime::Result<Result<String, ToolError>> {
        let result = match self.toolbox("read-file", &[&path]) {
            Ok(tb) => tb.read_file(&path).await.map_err(wit_error),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    async fn write_file(&mut self, path: String, contents: String) -> wasmtime::Result<Result<(), ToolError>> {
        let result = match self.toolbox("write-file", &[&path, &contents]) {
            Ok(tb) => tb.write_file(&path, &contents).await.map_err(wit_error),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    async fn glob(&mut self, pattern: String) -> wasmtime::Result<Result<Vec<String>, ToolError>> {
        let result = match self.toolbox("glob", &[&pattern]) {
            // The WIT list carries paths only: a guest sees at most MAX_GLOB_MATCHES and no flag.
            Ok(tb) => tb.glob(&pattern).await.map(|m| m.paths).map_err(wit_error),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    async fn shell(&mut self, command: String) -> wasmtime::Result<Result<tools::ShellOutput, ToolError>> {
        let result = match self.toolbox("shell", &[&command]) {
            Ok(tb) => tb
                .shell(&command)
                .await
                .map(|o| tools::ShellOutput { status: o.status, stdout: o.stdout, stderr: o.stderr })
                .map_err(wit_error),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    async fn fetch(&mut self, url: String) -> wasmtime::Result<Result<tools::Page, ToolError>> {
        let result = match self.toolbox("fetch", &[&url]) {
            Ok(tb) => tb
                .fetch(&url)
                .await
                .map(|p| tools::Page {
                    url: p.url,
                    status: p.status,
                    content_type: p.content_type,
                    body: p.body,
                    truncated: p.truncated,
                })
                .map_err(wit_error),
            Err(e) => Err(e),
        };
        Ok(result)
    }

    async fn web_search(&mut self, query: String) -> wasmtime::Result<Result<Vec<SearchHit>, ToolError>> {
        let result = match self.toolbox("web-search", &[&query]) {
            Ok(tb) => {
                tb.web_search(&query).await.map(|hits| hits.into_iter().map(Into::into).collect()).map_err(wit_error)
            }
            Err(e) => Err(e),
        };
        Ok(result)
    }
}

impl model::Host for HostState {
    async fn prompt(&mut self, input: String) -> wasmtime::Result<Result<model::Reply, ModelError>> {
        if input.len() > self.limits.host_arg_bytes {
            return Ok(Err(ModelError::Provider(format!(
                "the prompt is {} bytes; the limit is {}",
                input.len(),
                self.limits.host_arg_bytes
            ))));
        }
        let (Some(prompting), Some(toolbox)) = (self.prompting.clone(), self.toolbox.clone()) else {
            return Ok(Err(ModelError::NotConfigured(format!(
                "`{}` cannot prompt: it is not an agent run",
                self.plugin
            ))));
        };
        Ok(match prompting.run(&toolbox, &input).await {
            Ok(outcome) => {
                let reply = model::Reply {
                    text: outcome.text.clone(),
                    stop: match outcome.status {
                        Status::Completed => model::StopReason::Completed,
                        Status::TurnLimit => model::StopReason::TurnLimit,
                        Status::TokenBudget => model::StopReason::TokenBudget,
                        Status::ApprovalRequired { .. } => model::StopReason::ApprovalRequired,
                    },
                    turns: outcome.turns,
                    input_tokens: outcome.usage.input_tokens,
                    output_tokens: outcome.usage.output_tokens,
                };
                self.last_outcome = Some(outcome);
                Ok(reply)
            }
            Err(nexo_model::ModelError::Config(m)) => Err(ModelError::NotConfigured(m)),
            Err(e @ nexo_model::ModelError::Unavailable { .. }) => Err(ModelError::Unavailable(e.to_string())),
            Err(e) => Err(ModelError::Provider(e.to_string())),
        })
    }
}
