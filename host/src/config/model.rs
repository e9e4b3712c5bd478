//! `[model]` resolved: the provider a run's model table names, the loop's
//! limits, and the Claude Code loop's settings when that loop is chosen.

use std::path::PathBuf;
use std::sync::Arc;

use nexo_model::{ModelConfig, Provider, ProviderKind, ToolChoice};

use crate::ConfigError;
use crate::agent_loop::LoopLimits;
use crate::manifest::LoopKind;
use serde::{Deserialize, Serialize};

/// `[model]`: which model, which provider, and the loop's limits. A
/// recorded run keeps the merged settings (no key: keys come from the
/// environment at each resume).
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModelTable {
    /// The model id.
    pub model: Option<String>,
    /// The provider.
    pub provider: Option<ProviderKind>,
    /// The API base URL (OpenAI-compatible servers).
    pub base_url: Option<String>,
    /// Use a model id the provider is not known to serve.
    #[serde(default)]
    pub assume_model_exists: bool,
    /// A recorded conversation to replay instead of a model.
    pub script: Option<PathBuf>,
    /// The most model turns for one prompt.
    pub max_turns: Option<u32>,
    /// The most tokens (input + output) for one prompt.
    pub token_budget: Option<u64>,
    /// The most output tokens for one model turn (default 4096): a small
    /// local model that rambles stops here, with `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The time limit for one model request, in seconds (default 120;
    /// streamed, for each wait between events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The sampling temperature, 0 to 2; unset: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Whether the model may (`auto`), must (`required`: a turn that
    /// answers the user's message calls a tool) or must not (`none`) call
    /// a tool; unset: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The model's price, in US dollars per million input and output
    /// tokens: `{ input = 3.0, output = 15.0 }`. Turns are then counted in
    /// money, and a budget can be kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<crate::spend::Price>,
    /// The run's budget in US dollars, over all its prompts and passes
    /// (needs `price`): a turn that may pass it suspends the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Stream the model's text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The loop that drives each prompt.
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub agent_loop: Option<LoopKind>,
    /// The Claude Code CLI, for the `claude-code` loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_binary: Option<PathBuf>,
    /// Give the Claude Code CLI its own tools too (each checked against the grant).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claude_builtin_tools: bool,
}

impl ModelTable {
    /// The agent file's `loop`, where neither a flag nor the config file set one.
    pub fn or_agent_loop(mut self, hint: Option<LoopKind>) -> ModelTable {
        self.agent_loop = self.agent_loop.or(hint);
        self
    }
}

/// The model and loop settings, resolved.
pub struct ModelSetup {
    /// The provider, or `None` when no model is configured (agents that never
    /// prompt still run).
    pub provider: Option<Arc<dyn Provider>>,
    /// The loop's limits.
    pub limits: LoopLimits,
    /// The Claude Code loop, when chosen (its working directory is the
    /// grant's, set by the caller).
    pub agent_loop: Option<crate::claude_code::ClaudeCode>,
}

impl ModelTable {
    /// Resolves the table (and the environment) into a provider and the loop's settings.
    pub fn resolve(&self) -> Result<ModelSetup, ConfigError> {
        let table = self;
        let cfg = ModelConfig {
            model: table.model.clone(),
            provider: table.provider,
            assume_model_exists: table.assume_model_exists,
            base_url: table.base_url.clone(),
            script: table.script.clone(),
            timeout: table.timeout_secs.map(std::time::Duration::from_secs),
            temperature: table.temperature,
            tool_choice: table.tool_choice,
            ..ModelConfig::default()
        };
        let mut limits = LoopLimits::default();
        if table.timeout_secs == Some(0) {
            return Err(ConfigError::invalid(
                "timeout-secs",
                "the model's timeout must be at least 1 second (`--model-timeout 300`, `timeout-secs` in `[model]`)",
            ));
        }
        match table.max_tokens {
            Some(0) => {
                return Err(ConfigError::invalid(
                    "max-tokens",
                    "max-tokens must be at least 1 (`--max-tokens 1024`, `max-tokens` in `[model]`)",
                ));
            }
            Some(n) => limits.max_tokens_per_turn = n,
            None => {}
        }
        if let Some(n) = table.max_turns {
            if n == 0 {
                return Err(ConfigError::invalid(
                    "max-turns",
                    "max-turns must be at least 1 (`[model] max-turns` in the config file)",
                ));
            }
            limits.max_turns = n;
        }
        limits.token_budget = table.token_budget;
        if let Some(price) = &table.price {
            price.check("[model] price").map_err(|why| ConfigError::invalid("price", why))?;
        }
        if let Some(budget) = table.budget_usd {
            // Zero is a budget: every turn waits for a decision.
            if !budget.is_finite() || budget < 0.0 {
                return Err(ConfigError::invalid(
                    "budget-usd",
                    format!("the budget is {budget}: it is US dollars, zero or more (`--budget-usd 0.50`)"),
                ));
            }
            if table.price.is_none() {
                return Err(ConfigError::invalid(
                    "budget-usd",
                    "a budget in dollars needs the model's price: add `price = { input = …, output = … }` (dollars \
                     per million tokens) to `[model]` (for `nexo serve`, to `[serve.models.NAME]`)",
                ));
            }
        }
        limits.price = table.price;
        limits.budget_usd = table.budget_usd;
        limits.stream = table.stream;
        if table.agent_loop == Some(LoopKind::ClaudeCode) {
            cli_requests(table)?;
            return claude_code(&cfg, table.claude_binary.clone(), table.claude_builtin_tools, limits);
        }
        if table.claude_builtin_tools {
            return Err(ConfigError::invalid(
                "--claude-builtin-tools",
                "it applies to --loop claude-code only (`loop = \"claude-code\"` in [model] or the agent file)",
            ));
        }
        let nothing_set = cfg.model.is_none() && cfg.provider.is_none() && cfg.script.is_none();
        let provider = if nothing_set {
            // Not an error yet: an agent that never prompts needs no model. One
            // that does gets the configuration error at its first prompt.
            None
        } else {
            Some(nexo_model::resolve(&cfg).map_err(|e| ConfigError::invalid("[model]", e.to_string()))?)
        };
        Ok(ModelSetup { provider, limits, agent_loop: None })
    }
}

/// Refuses the request settings the Claude Code CLI would not see: it
/// makes its own model requests, so they would do nothing, unseen.
fn cli_requests(table: &ModelTable) -> Result<(), ConfigError> {
    let set: Vec<&str> = [
        (table.timeout_secs.is_some(), "--model-timeout (`timeout-secs`)"),
        (table.max_tokens.is_some(), "--max-tokens (`max-tokens`)"),
        (table.temperature.is_some(), "--temperature (`temperature`)"),
        (table.tool_choice.is_some(), "--tool-choice (`tool-choice`)"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "--loop",
        format!(
            "with --loop claude-code the CLI makes its own model requests, so {} cannot apply: drop it, or use the \
             host loop (`--loop host`)",
            set.join(" and ")
        ),
    ))
}

/// The Claude Code loop's settings. The CLI talks to Anthropic's API
/// itself, so no nexo provider is resolved: the key is read from
/// `ANTHROPIC_API_KEY` here and goes only into the CLI's environment.
fn claude_code(
    cfg: &ModelConfig,
    binary: Option<PathBuf>,
    builtin_tools: bool,
    limits: LoopLimits,
) -> Result<ModelSetup, ConfigError> {
    if cfg.script.is_some() {
        return Err(ConfigError::invalid(
            "--script",
            "a script replays nexo's own loop; with --loop claude-code the CLI calls the model itself (drop one of them)",
        ));
    }
    if let Some(p) = cfg.provider.filter(|p| *p != ProviderKind::Anthropic) {
        return Err(ConfigError::invalid(
            "--provider",
            format!(
                "--loop claude-code talks to Anthropic's Messages API, so the provider cannot be `{}`: drop \
                 --provider, or use the host loop (`--loop host`)",
                serde_json::to_value(p).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
            ),
        ));
    }
    let mut settings = crate::claude_code::ClaudeCode::default().with_api_key(std::env::var("ANTHROPIC_API_KEY").ok());
    settings.binary = binary;
    settings.model = cfg.model.clone();
    // As the CLI would read it from nexo's environment, had nexo passed that on.
    settings.base_url = cfg.base_url.clone().or_else(|| std::env::var("ANTHROPIC_BASE_URL").ok());
    settings.builtin_tools = builtin_tools;
    Ok(ModelSetup { provider: None, limits, agent_loop: Some(settings) })
}
