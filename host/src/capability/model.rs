//! The model unit: the `prompt` import, which runs one prompt through the
//! run's loop with the run's model and tools. The loop's own tool calls
//! come back through the host-call path one by one. Without a model,
//! `prompt` answers `not-configured`, saying how to set one.
//!
//! The manifest's `model` and `provider` are a hint, for a component and a
//! TOML agent alike: the default when the operator configured no model
//! (flags, environment or config file), used if the operator's environment
//! can serve it (its key is set). The operator's choice always wins, and
//! the log says which was used. The hint names a hosted provider (openai,
//! anthropic, openrouter), never an endpoint: a base URL, and any server on
//! the operator's own machine or network (Ollama's `localhost:11434`
//! included), comes only from the operator, so a plugin cannot aim the
//! host's requests at a private address.

use std::sync::Arc;

use nexo_model::{BoxFuture, Provider};
use wasmtime::component::Linker;

use crate::agent_loop::{HostLoop, Loop, LoopContext, LoopLimits, Outcome};
use crate::authority::Gate;
use crate::bindings::agent::nexo::plugin::model as wit;
use crate::error::ToolError;
use crate::events::Status;
use crate::flow::Labels;
use crate::host_call::{CallContext as _, HostCall, ToolContext};
use crate::manifest::Capability;
use crate::unit::{AgentHost, Setup, Step, Unit};

/// What a run's prompts run with.
#[derive(Clone)]
pub struct Prompting {
    /// The model, if one is configured.
    pub model: Option<Arc<dyn Provider>>,
    /// The loop.
    pub agent_loop: Arc<dyn Loop>,
    /// Limits, with the agent's own turn cap applied.
    pub limits: LoopLimits,
    /// System instructions in order: the agent's, the sandbox's, the skills'.
    pub instructions: Vec<String>,
    /// The session's thread, if the run is a session's prompt.
    pub thread: Option<Arc<crate::thread::Thread>>,
    /// The run's token counter, shared by all its prompts
    /// ([`crate::quota::RunBudget::tokens`]).
    pub tokens: Option<Arc<nexo_egress::Meter>>,
    /// The run's money when its model is priced, shared by all its
    /// prompts: made at the first, from what the journal's turns cost.
    pub spend: Arc<std::sync::OnceLock<crate::spend::Spend>>,
    /// What the run's tenant may still spend today
    /// ([`crate::quota::RunBudget::cost`]).
    pub cost: Option<Arc<nexo_egress::Meter>>,
}

impl Prompting {
    /// Runs one prompt with the run's tools. The host loop without a model
    /// answers with the configuration error that says how to set one.
    ///
    /// With a token counter, the prompt's budget is at most what is left of
    /// the run's: every prompt of the run draws on the one counter, so a
    /// component cannot get a fresh budget by prompting again. Once it is
    /// used up a prompt ends with `token-budget` and calls no model.
    pub async fn run(&self, tools: &ToolContext, input: &str) -> Result<Outcome, nexo_model::ModelError> {
        let mut limits = self.limits;
        // A loop whose turns bypass the provider cannot be capped turn by
        // turn: with a token quota it is refused, not run past the quota.
        let outside = !self.agent_loop.turns_through_provider();
        if outside && let Some(limit) = self.tokens.as_ref().and_then(|m| m.limit()) {
            return Err(nexo_model::ModelError::Config(format!(
                "this run has a model-token quota ({limit} tokens left), which the claude-code loop cannot keep: \
                 its CLI calls the model itself, past the host's meter; use the host loop for this tenant's runs, \
                 or ask the operator to lift the tenant's `tokens-per-hour` quota"
            )));
        }
        let day_limited = self.cost.as_ref().is_some_and(|m| m.limit().is_some());
        if outside && (limits.budget_usd.is_some() || day_limited) {
            return Err(nexo_model::ModelError::Config(
                "this run has a budget in money (`budget-usd`, or its tenant's `usd-per-run` or `usd-per-day`), \
                 which the claude-code loop cannot keep: its CLI calls the model itself, past the host's gate; use \
                 the host loop, or drop the budget"
                    .into(),
            ));
        }
        // A model without a price cannot be held to a day in dollars (an
        // agent's hinted model, or a price the operator took away).
        if day_limited && limits.price.is_none() && !outside {
            return Err(nexo_model::ModelError::Config(
                "this run's tenant has a budget in dollars (`usd-per-day`), and its model has no price: the \
                 operator adds `price` to the model's `[serve.models.NAME]` and names it in the tenant's policy"
                    .into(),
            ));
        }
        let spend = limits.price.map(|price| {
            self.spend.get_or_init(|| {
                let recorded = tools.journal().map(|j| j.recorded_usage()).unwrap_or_default();
                crate::spend::Spend::new(price, limits.budget_usd, recorded).with_pool(self.cost.clone())
            })
        });
        let metered;
        let provider: Option<&dyn Provider> = match (&self.tokens, self.model.as_deref()) {
            (Some(meter), Some(model)) => {
                if let Some(limit) = meter.limit() {
                    let left = limit.saturating_sub(meter.used());
                    if left == 0 {
                        return Ok(budget_spent(tools));
                    }
                    // The loop stops once a prompt's usage passes its budget: at `left`, not past it.
                    let budget = left - 1;
                    limits.token_budget = Some(limits.token_budget.map_or(budget, |b| b.min(budget)));
                }
                metered = Metered { inner: model, meter };
                Some(&metered)
            }
            (_, model) => model,
        };
        // Held only for the prompt, so the thread can take its exchange in place afterwards.
        let history: Arc<Vec<nexo_model::Message>> = match &self.thread {
            Some(thread) => thread.history(),
            None => Arc::default(),
        };
        // The session's earlier messages are in this prompt's context: what
        // their tool results brought in, this run holds.
        let earlier = Self::history_labels(tools.authority(), &history);
        tools.taint().mark(earlier, || "the session's earlier messages".into());
        let ctx = LoopContext { provider, tools, instructions: &self.instructions, history: &history, limits, spend };
        let outcome = self.agent_loop.run(ctx, input).await;
        // Without a quota its usage is still the tenant's: counted once, live.
        if outside && let (Some(meter), Ok(done)) = (&self.tokens, &outcome) {
            let tokens = done.usage.input_tokens.saturating_add(done.usage.output_tokens);
            meter.add(usize::try_from(tokens).unwrap_or(usize::MAX));
            if let (Some(cost), Some(price)) = (&self.cost, limits.price) {
                let nanos = price.cost(done.usage.input_tokens, done.usage.output_tokens);
                cost.add(usize::try_from(nanos).unwrap_or(usize::MAX));
            }
        }
        outcome
    }

    /// The labels a context holding `history` holds, by the tool calls in it:
    /// what their results brought in, as the authority reads each call (an
    /// agent's answer may carry anything its child read).
    fn history_labels(authority: &crate::authority::Authority, history: &[nexo_model::Message]) -> Labels {
        let mut held = Labels::NONE;
        for message in history {
            let nexo_model::Message::Assistant { tool_calls, .. } = message else { continue };
            for call in tool_calls {
                let arg = |key: &str| call.arguments.get(key).and_then(serde_json::Value::as_str).unwrap_or("");
                let cap = |cap: Capability, detail: &str| authority.source(&Gate::Capability(cap, detail));
                let labels = match call.name.as_str() {
                    "read_file" => cap(Capability::Read, arg("path")),
                    "glob" => cap(Capability::Glob, arg("pattern")),
                    "shell" => cap(Capability::Shell, ""),
                    "fetch" => cap(Capability::Fetch, ""),
                    "web_search" => cap(Capability::Search, ""),
                    name if name.starts_with(crate::children::TOOL_PREFIX) => Labels::UNTRUSTED.with(Labels::PRIVATE),
                    name => match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
                        Some((server, tool)) => authority.source(&Gate::Mcp {
                            server,
                            tool: Some(tool),
                            arguments: &serde_json::Value::Null,
                        }),
                        None => Labels::NONE,
                    },
                };
                held = held.with(labels);
            }
        }
        held
    }

    /// Adds a finished prompt's exchange to the session's thread. Called
    /// where the prompt's outcome comes back, live or replayed from the
    /// journal, so a replayed prompt is remembered too.
    pub fn remember(&self, outcome: &Outcome) {
        if let Some(thread) = &self.thread {
            thread.remember(&outcome.transcript);
        }
    }
}

/// A prompt that found the run's tokens used up: it ends at once, as the
/// loop ends one that reaches its budget.
fn budget_spent(tools: &ToolContext) -> Outcome {
    let status = Status::TokenBudget;
    tools.events().emit(&crate::events::Event::Done {
        status: status.clone(),
        turns: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: None,
        transcript: Some(Vec::new()),
    });
    Outcome { text: String::new(), status, turns: 0, usage: nexo_model::Usage::default(), transcript: Vec::new() }
}

/// The run's model, counting the tokens of each live turn on the run's
/// meter. A replayed turn never reaches it: it was paid for by the pass
/// that journaled it.
struct Metered<'a> {
    inner: &'a dyn Provider,
    meter: &'a nexo_egress::Meter,
}

impl Provider for Metered<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn complete<'b>(
        &'b self,
        request: &'b nexo_model::Request,
        deltas: Option<nexo_model::DeltaSink<'b>>,
    ) -> BoxFuture<'b, Result<nexo_model::Response, nexo_model::ModelError>> {
        Box::pin(async move {
            // The prompt's budget stops the loop first; this only guards it.
            if self.meter.exhausted() {
                return Err(nexo_model::ModelError::Unavailable {
                    provider: self.inner.name().to_string(),
                    message: "the run's model tokens are used up; a later pass may go on".into(),
                });
            }
            let response = self.inner.complete(request, deltas).await?;
            let tokens = response.usage.input_tokens.saturating_add(response.usage.output_tokens);
            self.meter.add(usize::try_from(tokens).unwrap_or(usize::MAX));
            Ok(response)
        })
    }
}

/// Adds the outcome of a [`Prompt`] call (live, or replayed from the
/// journal) to the run's session thread, if it has one.
pub fn remember(cx: &ToolContext, outcome: &Outcome) {
    if let Ok(prompting) = cx.state::<Prompting>() {
        prompting.remember(outcome);
    }
}

/// The model unit. It comes last: its instructions are everyone's.
#[derive(Debug, Default, Clone, Copy)]
pub struct ModelUnit;

impl Unit for ModelUnit {
    fn name(&self) -> &'static str {
        "model"
    }

    fn link(&self, linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        linker.instance(crate::manifest::interface::MODEL)?.func_wrap_async(
            "prompt",
            |mut store, (input,): (String,)| {
                let cx = store.data().world.tools.clone();
                Box::new(async move {
                    let reply = match cx.guest_call(&Prompt, input).await? {
                        Ok(outcome) => {
                            remember(&cx, &outcome);
                            let reply = reply(&outcome);
                            store.data_mut().world.last_prompt = Some(outcome);
                            Ok(reply)
                        }
                        Err(e) => Err(e),
                    };
                    Ok((reply,))
                })
            },
        )
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        let options = setup.options;
        let mut limits = options.limits.prompt;
        if let Some(cap) = setup.manifest.max_turns {
            limits.max_turns = limits.max_turns.min(cap);
        }
        let model = match (&options.providers.model, &setup.manifest.model) {
            (Some(model), Some(hint)) => {
                tracing::info!(target: "nexo::model", agent = %setup.manifest.name,
                    "using the operator's model `{}` ({}), not the agent's hint `{hint}`", model.model(), model.name());
                Some(model.clone())
            }
            (Some(model), None) => Some(model.clone()),
            (None, _) => hinted_model(setup.manifest),
        };
        // What a loop that runs a program (the claude-code CLI) draws on for its network.
        setup.state.insert(options.budget.clone());
        setup.state.insert(Prompting {
            model,
            agent_loop: options.providers.agent_loop.clone().unwrap_or_else(host_loop),
            limits,
            // The model unit is last: nobody reads the list after it.
            instructions: std::mem::take(setup.instructions),
            thread: options.context.thread.clone(),
            tokens: options.budget.tokens.clone(),
            spend: Arc::default(),
            cost: options.budget.cost.clone(),
        });
        Step::ready(Ok(()))
    }
}

/// The model the manifest hints at, if it names a hosted provider's model
/// and the operator's environment has its key.
fn hinted_model(manifest: &crate::manifest::AgentManifest) -> Option<Arc<dyn Provider>> {
    use nexo_model::ProviderKind;
    let id = manifest.model.clone()?;
    let provider = match manifest.provider.as_deref() {
        None => None,
        Some("openai") => Some(ProviderKind::Openai),
        Some("anthropic") => Some(ProviderKind::Anthropic),
        Some("openrouter") => Some(ProviderKind::Openrouter),
        Some(other) => {
            tracing::warn!(target: "nexo::model", agent = %manifest.name, "ignoring the agent's provider hint \
                `{other}`: an agent may hint only at a hosted provider (openai, anthropic, openrouter), since a \
                server on this machine or network is the operator's to choose (`--provider {other}`, with \
                `--base-url` where it needs one)");
            return None;
        }
    };
    let config = nexo_model::ModelConfig { model: Some(id.clone()), provider, ..nexo_model::ModelConfig::default() };
    match nexo_model::resolve(&config) {
        Ok(p) if matches!(p.name(), "openai" | "anthropic" | "openrouter") => {
            tracing::info!(target: "nexo::model", agent = %manifest.name,
                "using the agent's model hint `{id}` ({}): the operator set no model", p.name());
            Some(p)
        }
        Ok(p) => {
            tracing::warn!(target: "nexo::model", agent = %manifest.name,
                "ignoring the agent's model hint `{id}`: it resolves to {}", p.name());
            None
        }
        Err(e) => {
            tracing::warn!(target: "nexo::model", agent = %manifest.name,
                "the agent's model hint `{id}` cannot be used: {e}");
            None
        }
    }
}

/// The default loop, shared: a run without its own allocates none.
fn host_loop() -> Arc<dyn Loop> {
    static LOOP: std::sync::OnceLock<Arc<dyn Loop>> = std::sync::OnceLock::new();
    LOOP.get_or_init(|| Arc::new(HostLoop)).clone()
}

fn reply(outcome: &Outcome) -> wit::Reply {
    wit::Reply {
        text: outcome.text.clone(),
        stop: match outcome.status {
            Status::Completed => wit::StopReason::Completed,
            Status::TurnLimit => wit::StopReason::TurnLimit,
            Status::TokenBudget => wit::StopReason::TokenBudget,
            Status::ApprovalRequired { .. } => wit::StopReason::ApprovalRequired,
        },
        turns: outcome.turns,
        input_tokens: outcome.usage.input_tokens,
        output_tokens: outcome.usage.output_tokens,
    }
}

/// Model errors are failures of the provider, never refusals of the call.
impl crate::host_call::Refusal for wit::ModelError {
    fn refusal(&self) -> Option<&'static str> {
        None
    }
}

impl From<ToolError> for wit::ModelError {
    fn from(e: ToolError) -> Self {
        wit::ModelError::Provider(e.message().to_string())
    }
}

/// The WIT `model-error` for a provider's error.
pub fn model_error(e: nexo_model::ModelError) -> wit::ModelError {
    match e {
        nexo_model::ModelError::Config(m) => wit::ModelError::NotConfigured(m),
        e @ nexo_model::ModelError::Unavailable { .. } => wit::ModelError::Unavailable(e.to_string()),
        e => wit::ModelError::Provider(e.to_string()),
    }
}

/// A `model-error` as a run's failure reads.
pub fn model_error_text(err: &wit::ModelError) -> String {
    match err {
        wit::ModelError::NotConfigured(m) => format!("model not configured: {m}"),
        wit::ModelError::Unavailable(m) => format!("model unavailable: {m}"),
        wit::ModelError::Provider(m) => format!("model provider error: {m}"),
    }
}

/// The failure of a run that a `model-error` ended: a missing model is the
/// operator's configuration ([`RunError::Config`](crate::RunError::Config),
/// exit code 2, as for any other setting), any other error the agent's.
pub fn model_run_error(plugin: &str, err: &wit::ModelError) -> crate::RunError {
    match err {
        wit::ModelError::NotConfigured(m) => crate::RunError::Config(crate::ConfigError::invalid(
            "--model",
            // The provider's message already says that none is configured; keep only its fix.
            format!(
                "`{plugin}` prompts a model, and none is configured: {}",
                m.strip_prefix("no model is configured, and ").unwrap_or(m)
            ),
        )),
        other => crate::RunError::AgentFailed { plugin: plugin.to_string(), reason: model_error_text(other) },
    }
}

/// `prompt`: one prompt, driven to its end by the run's loop.
#[derive(Debug, Clone, Copy)]
pub struct Prompt;

impl HostCall for Prompt {
    type Args = String;
    type Output = Outcome;
    type Error = wit::ModelError;

    fn name(&self) -> &'static str {
        "prompt"
    }

    fn interface(&self) -> &'static str {
        crate::manifest::interface::MODEL
    }

    // Its turns and tool calls are journaled one by one; the prompt's own
    // entry lets a replay skip the whole stretch at once.
    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn spans_calls(&self) -> bool {
        true
    }

    fn journal_error(&self, error: &wit::ModelError) -> bool {
        // An unreachable provider recorded nothing; a resume tries again.
        !matches!(error, wit::ModelError::Unavailable(_))
    }

    fn arg_bytes(&self, input: &String) -> usize {
        input.len()
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, input: String) -> BoxFuture<'a, Result<Outcome, wit::ModelError>> {
        Box::pin(async move {
            let prompting = cx.state::<Prompting>()?;
            prompting.run(cx, &input).await.map_err(model_error)
        })
    }
}

// The model does not call `prompt`; the guest does.
crate::guest_only!(Prompt, ToolContext);

#[cfg(test)]
mod tests {
    use nexo_model::{Message, ToolCall};
    use serde_json::json;

    use super::*;
    use crate::authority::{Authority, Permissions};
    use crate::grant::Grant;
    use crate::manifest::AgentManifest;

    /// A session's next prompt holds what the earlier messages' tool results
    /// brought in, as the authority reads each call.
    #[test]
    fn a_sessions_history_holds_what_its_tool_results_brought_in() {
        let mut grant = Grant::default();
        grant.data_flow.private_paths = Some(vec!["secrets".into()]);
        grant.data_flow.untrusted_mcp = vec!["web".into()];
        let manifest = AgentManifest { name: "a".into(), ..AgentManifest::default() };
        let authority = Authority::new(&manifest, &grant, &Permissions::default());
        let held = |name: &str, arguments: serde_json::Value| {
            let call = ToolCall { id: "c".into(), name: name.into(), arguments };
            let history = [
                Message::User { text: "hi".into() },
                Message::Assistant { text: String::new(), tool_calls: vec![call] },
            ];
            Prompting::history_labels(&authority, &history)
        };
        let both = Labels::UNTRUSTED.with(Labels::PRIVATE);
        assert_eq!(held("read_file", json!({"path": "docs/a.md"})), Labels::NONE);
        assert_eq!(held("read_file", json!({"path": "secrets/key"})), Labels::PRIVATE);
        assert_eq!(held("fetch", json!({"url": "https://a.example/"})), Labels::UNTRUSTED);
        assert_eq!(held("web_search", json!({"query": "q"})), Labels::UNTRUSTED);
        assert_eq!(held("mcp__web__get", json!({})), Labels::UNTRUSTED);
        assert_eq!(held("mcp__fs__read", json!({})), Labels::NONE);
        assert_eq!(held("agent__helper", json!({"input": "x"})), both);
        assert_eq!(held("write_file", json!({"path": "secrets/k", "content": "x"})), Labels::NONE);
    }
}
