//! Model flags: which model, which provider, and the loop's limits. Flags win
//! over `NEXO_*` variables, which win over the config file's `[model]`.

use std::path::{Path, PathBuf};

use clap::Args;
use nexo::ConfigError;
use nexo::config::ModelTable;
use nexo::manifest::LoopKind;
use nexo_model::{ProviderKind, ToolChoice};

/// Model flags of `nexo run`.
#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// The model id, e.g. `gpt-4o-mini`, `claude-sonnet-4-5` or `gemma3:12b`. There is no default.
    #[arg(long, env = "NEXO_MODEL")]
    model: Option<String>,
    /// The provider: openai, openai-compatible, ollama, openrouter, anthropic, scripted.
    #[arg(long, env = "NEXO_PROVIDER")]
    provider: Option<String>,
    /// The API base URL (OpenAI-compatible servers).
    #[arg(long, env = "NEXO_BASE_URL", hide_env_values = true)]
    base_url: Option<String>,
    /// Use a model id the provider is not known to serve; needs --provider.
    #[arg(long)]
    assume_model_exists: bool,
    /// Replay a recorded conversation instead of calling a model (the scripted provider). It
    /// replaces the model: no --model, --provider or --base-url with it, and the config file's are ignored.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The most model turns for one prompt, 1 or more (the agent may ask for fewer) [default: 20].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_turns: Option<u32>,
    /// The most tokens (input + output) for one prompt.
    #[arg(long, value_name = "N")]
    token_budget: Option<u64>,
    /// The most output tokens for one model turn [default: 4096].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: Option<u32>,
    /// The time limit for one model request, in seconds; streamed, for each wait between its
    /// events [default: 120].
    #[arg(long = "model-timeout", value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    model_timeout: Option<u64>,
    /// The sampling temperature, 0 to 2 [default: the server's].
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Whether the model may (`auto`), must (`required`: each turn that answers the prompt calls a
    /// tool first) or must not (`none`) call a tool [default: the server's].
    #[arg(long, value_name = "CHOICE", value_parser = parse_tool_choice)]
    tool_choice: Option<ToolChoice>,
    /// The run's budget in US dollars, over all its prompts and passes (needs `[model] price`): a
    /// model turn that may pass it suspends the run with a `budget` approval.
    #[arg(long, value_name = "USD")]
    budget_usd: Option<f64>,
    /// Stream the model's text (emits text-delta events with --json).
    #[arg(long)]
    stream: bool,
    /// The directory of skill packages the agent may name, relative to the current directory (not to the agent file).
    #[arg(long, value_name = "DIR", default_value = "skills")]
    pub skills_path: PathBuf,
    /// A skill component the agent may name: a `.wasm` file or a registry reference (repeatable;
    /// replaces the config file's `[skills] components`).
    #[arg(long = "skill-component", value_name = "FILE|REF")]
    skill_components: Vec<PathBuf>,
    /// Load skills progressively: only names and descriptions up front, the
    /// model activates one with a tool (default: eagerly, in the instructions).
    #[arg(long)]
    pub progressive_skills: bool,
    /// The loop that drives each prompt: `host` (nexo's own, any provider) or `claude-code`
    /// (the Claude Code CLI, with nexo's tools and gate) [default: the TOML agent's `loop`, else host].
    #[arg(long = "loop", value_name = "LOOP", value_parser = LoopKind::parse)]
    agent_loop: Option<LoopKind>,
    /// The Claude Code CLI for --loop claude-code [default: `claude` on PATH].
    #[arg(long, value_name = "PATH")]
    claude_binary: Option<PathBuf>,
    /// With --loop claude-code, also give the CLI its own tools (Read, Edit, Bash, WebFetch…),
    /// confined to the local sandbox's directory; each is checked against the grant first.
    #[arg(long)]
    claude_builtin_tools: bool,
}

fn parse_tool_choice(name: &str) -> Result<ToolChoice, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| format!("`{name}` is not a tool choice: use auto, required or none"))
}

fn parse_provider(name: &str) -> Result<ProviderKind, ConfigError> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
        ConfigError::invalid(
            "--provider",
            format!(
                "unknown provider `{name}`: use openai, openai-compatible, ollama, openrouter, anthropic or scripted"
            ),
        )
    })
}

impl ModelArgs {
    /// The skill components: the flags', else the config file's (`config`
    /// is its path).
    pub fn skill_components(&self, file: &nexo::config::ConfigFile, config: Option<&Path>) -> Vec<PathBuf> {
        if self.skill_components.is_empty() { file.skills.components(config) } else { self.skill_components.clone() }
    }

    /// The skill components as a run records them: each file, absolute,
    /// loaded and named by its SHA-256 (a bad one stops the command before
    /// anything is recorded or queued).
    pub async fn recorded_skill_components(
        &self,
        engine: &nexo::Engine,
        file: &nexo::config::ConfigFile,
        config: Option<&Path>,
    ) -> Result<Vec<nexo::runs::SkillFile>, nexo::RunError> {
        let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        let paths: Vec<PathBuf> = self.skill_components(file, config).into_iter().map(absolute).collect();
        nexo::runs::prepare::skill_files(engine, &paths).await
    }

    /// Sets the skill components: registry references' cached files, which
    /// stand in for the flags and the config file's alike.
    pub fn set_skill_components(&mut self, files: Vec<PathBuf>) {
        self.skill_components = files;
    }

    /// The flags laid over `[model]`: what a recorded run keeps.
    ///
    /// A script replaces the model: with `--script` the file's `model`,
    /// `provider` and `base-url` are ignored, and the same settings given as
    /// flags (or their variables) are a usage error;
    /// the file's own `script` gives way to a model chosen by flag, and
    /// replaces the file's model otherwise.
    pub fn merged(&self, table: &ModelTable) -> Result<ModelTable, ConfigError> {
        if self.script.is_some() {
            let given: Vec<&str> = [
                (self.model.is_some(), "--model (NEXO_MODEL)"),
                (self.provider.is_some(), "--provider (NEXO_PROVIDER)"),
                (self.base_url.is_some(), "--base-url (NEXO_BASE_URL)"),
            ]
            .into_iter()
            .filter_map(|(set, name)| set.then_some(name))
            .collect();
            if !given.is_empty() {
                return Err(ConfigError::invalid(
                    "--script",
                    format!(
                        "--script replaces the model, so it cannot be combined with {}: drop one of them",
                        given.join(" or ")
                    ),
                ));
            }
        }
        let mut t = table.clone();
        let flag_model = self.model.is_some() || self.provider.is_some() || self.base_url.is_some();
        if self.script.is_some() || (t.script.is_some() && !flag_model) {
            (t.model, t.provider, t.base_url, t.assume_model_exists) = (None, None, None, false);
        } else if flag_model {
            t.script = None;
        }
        let provider = match &self.provider {
            Some(p) => Some(parse_provider(p)?),
            None => t.provider,
        };
        let script = self.script.clone().or(t.script).map(|p| std::path::absolute(&p).unwrap_or(p));
        Ok(ModelTable {
            model: self.model.clone().or(t.model),
            provider,
            base_url: self.base_url.clone().or(t.base_url),
            assume_model_exists: (self.assume_model_exists || t.assume_model_exists) && script.is_none(),
            script,
            max_turns: self.max_turns.or(t.max_turns),
            token_budget: self.token_budget.or(t.token_budget),
            max_tokens: self.max_tokens.or(t.max_tokens),
            timeout_secs: self.model_timeout.or(t.timeout_secs),
            temperature: self.temperature.or(t.temperature),
            tool_choice: self.tool_choice.or(t.tool_choice),
            price: t.price,
            budget_usd: self.budget_usd.or(t.budget_usd),
            stream: self.stream || t.stream,
            agent_loop: self.agent_loop.or(t.agent_loop),
            claude_binary: self.claude_binary.clone().or(t.claude_binary).map(|p| std::path::absolute(&p).unwrap_or(p)),
            claude_builtin_tools: self.claude_builtin_tools || t.claude_builtin_tools,
        })
    }
}
