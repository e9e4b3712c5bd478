//! The Claude Code loop (`--loop claude-code`): one prompt driven by the
//! Claude Code CLI in headless mode, with nexo's gate still deciding every
//! effect.
//!
//! By default the CLI gets none of its own tools. Its tools are the run's:
//! this loop serves them over MCP from inside the process, on a loopback
//! port with a one-time bearer token (`--mcp-config`,
//! `--strict-mcp-config`). Each call the CLI makes comes back here and
//! takes the run's host-call path, so the gate, the sandbox, the
//! truncation and the events are the host loop's. `ask` and `approve` are
//! never delegated: the gate asks inside each call, and the CLI's
//! permission prompts (`--permission-prompt-tool`) reach the same
//! authority. An operator may opt in to the CLI's built-in tools
//! ([`ClaudeCode::builtin_tools`]); the CLI then runs confined to the
//! sandbox's directory, with network to its model alone, through nexo's
//! egress proxy (see [`network`]).
//!
//! Durability: nexo does not see the CLI's model turns, so the calls inside
//! one prompt cannot be lined up by a replay and are not journaled one by
//! one; the prompt's own entry is. A crash in mid-prompt runs the prompt
//! again, and an approval binds to the call itself
//! ([`crate::journal::UNPOSITIONED`]).

mod launch;
mod network;
mod stream;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;

use nexo_model::{BoxFuture, Message, ModelError, ToolCall, ToolSpec, Usage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::agent_loop::{Event, Loop, LoopContext, Outcome, Status};
use crate::authority::Gate;
use crate::error::ToolError;
use crate::flow::Labels;
use crate::grant::FlowAction;
use crate::host_call::{CallContext, ModelReply, ToolContext};
use crate::manifest::Capability;
use crate::mcp_server::{Bridged, McpServer};
use crate::task::AbortOnDrop;
use stream::{Ending, Line};

/// The provider name in this loop's errors.
const PROVIDER: &str = "claude-code";

/// The longest line the CLI may write (a tool result is one line).
const MAX_LINE: usize = 16 << 20;

/// How long the CLI may take to exit once its result is out.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the CLI sends its requests without `--base-url`.
const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// How much of the CLI's stderr an error quotes.
const STDERR_TAIL: usize = 2048;

/// The Claude Code loop's settings. The API key comes from the operator's
/// environment and reaches only the CLI's environment.
#[derive(Clone, Default)]
pub struct ClaudeCode {
    /// The CLI; `None` looks for `claude` on `PATH`.
    pub binary: Option<PathBuf>,
    /// The model id (`--model`); `None` uses the run's Anthropic model if it
    /// has one, else the CLI's default.
    pub model: Option<String>,
    /// The API's base URL (`ANTHROPIC_BASE_URL`).
    pub base_url: Option<String>,
    /// The CLI's own tools (Read, Edit, Bash, WebFetch, …), confined to
    /// [`ClaudeCode::cwd`]. Off by default: every effect then passes nexo's
    /// gate.
    pub builtin_tools: bool,
    /// Where the CLI works: the local sandbox's directory. `None` is a
    /// scratch directory (the tools then act in nexo's sandbox only).
    pub cwd: Option<PathBuf>,
    /// What a confined CLI may read of the host besides [`ClaudeCode::cwd`],
    /// its own package and the directory it is in (which is on its `PATH`).
    pub view: nexo_sandbox::SystemView,
    api_key: Option<String>,
}

impl std::fmt::Debug for ClaudeCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaudeCode")
            .field("binary", &self.binary)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("builtin_tools", &self.builtin_tools)
            .field("cwd", &self.cwd)
            .field("view", &self.view)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl ClaudeCode {
    /// Checks what can be checked before a run: the CLI is there, and a key
    /// is set. Each error says what to do.
    pub fn check(&self) -> Result<PathBuf, ModelError> {
        let binary = launch::binary(self.binary.as_deref())?;
        if self.api_key.is_none() {
            return Err(ModelError::Config(
                "--loop claude-code needs ANTHROPIC_API_KEY in nexo's environment: nexo passes it to the CLI (and \
                 nowhere else)"
                    .into(),
            ));
        }
        Ok(binary)
    }

    /// The key the CLI authenticates with (`ANTHROPIC_API_KEY` in its
    /// environment only).
    pub fn with_api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|k| !k.trim().is_empty());
        self
    }
}

impl Loop for ClaudeCode {
    fn run<'a>(&'a self, ctx: LoopContext<'a>, input: &'a str) -> BoxFuture<'a, Result<Outcome, ModelError>> {
        Box::pin(crate::journal::unjournaled(self.drive(ctx, input)))
    }

    /// The CLI calls the model itself: no turn reaches the host's provider.
    fn turns_through_provider(&self) -> bool {
        false
    }
}

fn unavailable(message: impl Into<String>) -> ModelError {
    ModelError::Unavailable { provider: PROVIDER.into(), message: message.into() }
}

impl ClaudeCode {
    async fn drive(&self, ctx: LoopContext<'_>, input: &str) -> Result<Outcome, ModelError> {
        let binary = launch::binary(self.binary.as_deref())?;
        let authority = ctx.tools.authority();
        let mode = authority.mode();
        // The CLI's own tools' results never reach nexo, and it reads files
        // without asking: the run holds at once what they could bring in,
        // so the data-flow guard judges nexo's tools (served to the CLI) as
        // if they had.
        let mut guarded = false;
        if self.builtin_tools {
            let could = [Capability::Read, Capability::Fetch, Capability::Search, Capability::Shell]
                .into_iter()
                .filter(|c| authority.offers(*c))
                .fold(Labels::NONE, |all, c| all.with(authority.source(&Gate::Capability(c, ""))));
            ctx.tools.taint().mark(could, || "the CLI's built-in tools".into());
            guarded = could.holds(Labels::UNTRUSTED)
                && authority.data_flow().action(could.holds(Labels::PRIVATE)) != FlowAction::Allow;
        }
        // The CLI's `Bash` meets the command rules in nexo's gate, and its
        // sends the data-flow guard, so it must ask.
        let gated = launch::gated(mode, self.builtin_tools && (!authority.command_rules().is_empty() || guarded));
        if self.builtin_tools && self.cwd.is_none() {
            return Err(ModelError::Config(
                "--claude-builtin-tools needs the local sandbox (`--sandbox local --cwd DIR`): the CLI's own tools \
                 act on real files, and only there can nexo confine them"
                    .into(),
            ));
        }
        let model = self
            .model
            .clone()
            .or_else(|| ctx.provider.filter(|p| p.name() == "anthropic").map(|p| p.model().to_string()));
        // A confined CLI sees only its directory, so its scratch home (and
        // the MCP configuration in it) lives there for the prompt.
        let mut scratch = tempfile::Builder::new();
        scratch.prefix(".nexo-claude-");
        let home = match (&self.cwd, self.builtin_tools) {
            (Some(cwd), true) => scratch.tempdir_in(cwd),
            _ => scratch.tempdir(),
        }
        .map_err(|e| unavailable(format!("cannot make a scratch directory for the CLI: {e}")))?;

        // nexo's tools, served to the CLI alone.
        let mut specs = ctx.tools.specs().await;
        if gated {
            specs.push(approve_spec());
        }
        let (sender, mut calls) = tokio::sync::mpsc::channel::<Bridged>(8);
        let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| unavailable(format!("cannot listen on loopback for the CLI's tools: {e}")))?;
        let port = listener.local_addr().map_err(|e| unavailable(e.to_string()))?.port();
        let token = random_token();
        let _server =
            AbortOnDrop(tokio::spawn(McpServer::bridge(specs, sender).serve_http(listener, Some(token.clone()))));
        let config = json!({"mcpServers": {launch::SERVER: {
            "type": "http",
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": {"Authorization": format!("Bearer {token}")},
        }}});
        let mcp_config = home.path().join("mcp.json");
        write_private(&mcp_config, config.to_string().as_bytes())
            .map_err(|e| unavailable(format!("cannot write the CLI's MCP configuration: {e}")))?;

        let instructions: Vec<&str> = ctx.instructions.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        let instructions = instructions.join("\n\n");
        let args = launch::args(&launch::Launch {
            model: model.as_deref(),
            max_turns: ctx.limits.max_turns,
            gated,
            instructions: &instructions,
            mcp_config: &mcp_config,
            builtin_tools: self.builtin_tools,
        });
        let mut env =
            launch::env(&binary, home.path(), self.api_key.as_deref(), self.base_url.as_deref(), self.builtin_tools);
        let cwd = self.cwd.clone().unwrap_or_else(|| home.path().to_path_buf());
        // With its own tools the CLI runs in a network namespace of its
        // own: nexo's MCP server and a local model at their loopback ports,
        // a remote model through the egress proxy, nothing else.
        let network = match self.builtin_tools {
            true => {
                let base_url = self.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
                // The tenant's share of the node's proxy connections; its model's bytes are not web bytes.
                let connections = ctx.tools.state::<crate::quota::RunBudget>().ok().and_then(|b| b.connections.clone());
                Some(network::CliNetwork::new(base_url, self.base_url.is_some(), port, connections)?)
            }
            false => None,
        };
        if network.is_some() {
            env.extend(nexo_sandbox::proxy_env().map(|(name, value)| (name.into(), value.into())));
            // Loopback is nexo's relays inside: reached directly.
            for name in ["NO_PROXY", "no_proxy"] {
                env.push((name.into(), "127.0.0.1,localhost".into()));
            }
        }
        let (mut child, served) = self.spawn(&binary, &args, env, &cwd, network.as_ref(), ctx.tools.audit_sink())?;
        let process = ProcessGroup(child.id());

        // The prompt, as one stream-json user message; then end of input. A
        // session's history goes first in the same message: stdin has no
        // size limit, where one argv string has 128 KiB.
        let mut content = Vec::new();
        if let Some(history) = launch::history_text(ctx.history) {
            content.push(json!({"type": "text", "text": history}));
        }
        content.push(json!({"type": "text", "text": input}));
        let message = json!({"type": "user", "message": {"role": "user", "content": content}});
        let prompted = match child.stdin.take() {
            Some(mut stdin) => {
                let line = format!("{message}\n");
                stdin.write_all(line.as_bytes()).await.map_err(|e| unavailable(format!("cannot write the prompt: {e}")))
            }
            None => Ok(()),
        };
        let stderr = child.stderr.take().map(|s| tokio::spawn(tail(s)));
        let stdout = prompted
            .and_then(|()| child.stdout.take().ok_or_else(|| unavailable("the CLI's output pipe was not set up")));
        let stdout = match stdout {
            Ok(stdout) => stdout,
            Err(e) => {
                if let Some(served) = served {
                    served.stop().await;
                }
                return Err(e);
            }
        };
        let mut reader = BufReader::new(stdout);

        let events = ctx.tools.events();
        let mut state = State::new(&instructions, input);
        let mut line_no = 0usize;
        let mut buf = Vec::new();
        let failure = loop {
            if state.stop.is_some() || state.ending.is_some() {
                break None;
            }
            tokio::select! {
                biased;
                read = read_line(&mut reader, &mut buf) => match read {
                    Ok(false) => break None,
                    Ok(true) => {
                        line_no += 1;
                        let line = std::mem::take(&mut buf);
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim();
                        if text.is_empty() {
                            continue;
                        }
                        match stream::parse(text) {
                            Ok(line) => state.line(line, &ctx, events),
                            Err(why) => break Some(ModelError::Protocol {
                                provider: PROVIDER.into(),
                                message: format!(
                                    "line {line_no} of the CLI's stream-json output cannot be read: {why}: `{}`",
                                    crate::truncate::head_chars(text, 120)
                                ),
                            }),
                        }
                    }
                    Err(why) => break Some(unavailable(format!("cannot read the CLI's output: {why}"))),
                },
                Some(bridged) = calls.recv() => state.call(bridged, &ctx).await,
            }
        };
        // Done with the CLI: it exits on its own after its result (its
        // input is closed); anything else is stopped.
        let status = if failure.is_none() && state.stop.is_none() && state.ending.is_some() {
            tokio::time::timeout(EXIT_GRACE, child.wait()).await.ok().and_then(Result::ok)
        } else {
            None
        };
        process.kill();
        let status = match status {
            Some(s) => Some(s),
            None => child.wait().await.ok(),
        };
        // Its connections are in the audit before the prompt's outcome is.
        if let Some(served) = served {
            served.stop().await;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let stderr = match stderr {
            Some(task) => task.await.unwrap_or_default(),
            None => String::new(),
        };
        state.finish(ctx.limits.max_turns, events, status, &stderr)
    }

    /// Starts the CLI; with `network` (its own tools), confined, its
    /// network served (the connections audited to `audit`) until the
    /// second value is dropped.
    fn spawn(
        &self,
        binary: &std::path::Path,
        args: &[std::ffi::OsString],
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
        cwd: &std::path::Path,
        network: Option<&network::CliNetwork>,
        audit: Option<std::sync::Arc<dyn crate::host_call::AuditSink>>,
    ) -> Result<(tokio::process::Child, Option<network::Serving>), ModelError> {
        let mut private_net = None;
        let (mut command, resources) = if let Some(network) = network {
            // The CLI's own tools write only in the sandbox's directory, read
            // only the view, the CLI's package and its `PATH` directory, and
            // reach the network through `network` only.
            let on_path = binary.parent().filter(|d| d.is_absolute()).map(std::path::Path::to_path_buf);
            let mut view = self.view.paths().to_vec();
            view.extend(on_path);
            let view = nexo_sandbox::SystemView::new(view)
                .map_err(|e| ModelError::Config(format!("--claude-builtin-tools: {e}")))?;
            let net = nexo_sandbox::PrivateNet::new()
                .map_err(|e| unavailable(format!("cannot set up the CLI's network: {e}")))?;
            let confinement = nexo_sandbox::ProgramConfinement {
                proxied: Some(net.child_fd()),
                forward_ports: network.forwards().to_vec(),
                view,
                ..nexo_sandbox::ProgramConfinement::new(cwd)
            };
            private_net = Some(net);
            let confined = confinement.command(binary, args).map_err(|e| {
                ModelError::Config(format!("--claude-builtin-tools: the CLI cannot be confined here: {e}"))
            })?;
            let (command, resources) = confined.into_parts();
            (command, Some(resources))
        } else {
            let mut command = std::process::Command::new(binary);
            command.args(args).current_dir(cwd);
            nexo_sandbox::close_inherited_fds(&mut command);
            (command, None)
        };
        command.env_clear().envs(env);
        let mut command = tokio::process::Command::from(command);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
        let child = command.spawn().map_err(|e| match &resources {
            Some(r) => ModelError::Config(r.explain(command.as_std(), e).to_string()),
            None => ModelError::Config(format!("cannot start the Claude Code CLI {}: {e}", binary.display())),
        })?;
        drop(resources);
        // Its namespace was made before it ran: the listeners are there, or it never will be.
        let serving = match (private_net, network) {
            (Some(net), Some(network)) => {
                let listeners = net.into_receiver().try_receive().and_then(|l| {
                    l.ok_or_else(|| std::io::Error::other("its namespace's listeners did not come with its start"))
                });
                match listeners.and_then(|l| network.serve(l, audit)) {
                    Ok(serving) => Some(serving),
                    Err(e) => {
                        return Err(unavailable(format!("cannot serve the CLI's network, so it was stopped: {e}")));
                    }
                }
            }
            _ => None,
        };
        Ok((child, serving))
    }
}

/// Reads on until `buf` holds one whole line (its newline removed; the
/// caller clears `buf` after using it). `false` at the end of the stream; a
/// line longer than [`MAX_LINE`] is an error. Cancel-safe: a line cut short
/// by another `select!` branch stays in `buf` and is completed next time.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<bool, String> {
    loop {
        let room = (MAX_LINE + 1).saturating_sub(buf.len());
        if room == 0 {
            return Err(format!("a line is longer than {} MiB", MAX_LINE >> 20));
        }
        let limit = u64::try_from(room).unwrap_or(u64::MAX);
        let n = reader.take(limit).read_until(b'\n', buf).await.map_err(|e| e.to_string())?;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            return Ok(true);
        }
        if n == 0 {
            // The end: a last line without its newline still counts.
            return Ok(!buf.is_empty());
        }
    }
}

/// The last [`STDERR_TAIL`] bytes of the CLI's stderr.
async fn tail(mut stderr: tokio::process::ChildStderr) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > STDERR_TAIL {
            kept.drain(..kept.len() - STDERR_TAIL);
        }
    }
    String::from_utf8_lossy(&kept).trim().to_string()
}

/// What one prompt has seen so far.
struct State {
    turn: u32,
    last_message: Option<String>,
    text: String,
    transcript: Vec<Message>,
    /// Tool names by call id, for the results.
    names: HashMap<String, String>,
    /// nexo's tool calls the stream announced, not yet served: the served
    /// call takes the model's id.
    announced: Vec<(String, String, Value)>,
    /// The ids of the CLI's own tool calls, which nexo reports from the stream.
    builtin: HashSet<String>,
    ending: Option<Ending>,
    /// How nexo itself ended the prompt (turn cap, approval).
    stop: Option<Status>,
}

impl State {
    /// `system`: the instructions, joined as the CLI gets them.
    fn new(system: &str, input: &str) -> Self {
        let mut transcript = Vec::new();
        if !system.is_empty() {
            transcript.push(Message::System { text: system.to_string() });
        }
        transcript.push(Message::User { text: input.to_string() });
        State {
            turn: 0,
            last_message: None,
            text: String::new(),
            transcript,
            names: HashMap::new(),
            announced: Vec::new(),
            builtin: HashSet::new(),
            ending: None,
            stop: None,
        }
    }

    fn line(&mut self, line: Line, ctx: &LoopContext<'_>, events: &dyn crate::events::EventSink) {
        match line {
            Line::Init { model, tools } => {
                tracing::debug!(%model, ?tools, "the Claude Code CLI started");
            }
            Line::Assistant { id, text, tool_uses } => {
                // The CLI writes one line per content block; a new message
                // id, or the first line after tool results, is a new turn.
                if self.last_message.as_deref() != Some(id.as_str()) || id.is_empty() {
                    self.turn += 1;
                    self.last_message = Some(id);
                    if self.turn > ctx.limits.max_turns {
                        // The CLI should have stopped at --max-turns; nexo's
                        // cap holds either way.
                        self.stop = Some(Status::TurnLimit);
                        return;
                    }
                    events.emit(&Event::TurnStarted { turn: self.turn });
                    self.transcript.push(Message::Assistant { text: String::new(), tool_calls: Vec::new() });
                }
                let Some(Message::Assistant { text: said, tool_calls }) = self.transcript.last_mut() else {
                    return;
                };
                for piece in text {
                    if ctx.limits.stream {
                        events.emit(&Event::TextDelta { text: piece.clone() });
                    }
                    said.push_str(&piece);
                    self.text = said.clone();
                }
                for call in tool_uses {
                    let nexo = call.name.strip_prefix(launch::PREFIX).map(str::to_string);
                    let name = nexo.clone().unwrap_or_else(|| call.name.clone());
                    self.names.insert(call.id.clone(), name.clone());
                    match nexo {
                        // Its events come from the host-call path when it is served.
                        Some(tool) => self.announced.push((tool, call.id.clone(), call.input.clone())),
                        // The CLI's own tool: nexo reports it, as it cannot run it.
                        None => {
                            self.builtin.insert(call.id.clone());
                            events.emit(&Event::ToolCall {
                                turn: self.turn,
                                id: call.id.clone(),
                                name: name.clone(),
                                arguments: call.input.clone(),
                            });
                        }
                    }
                    tool_calls.push(ToolCall { id: call.id, name, arguments: call.input });
                }
            }
            Line::ToolResults(results) => {
                self.last_message = None;
                for r in results {
                    let name = self.names.get(&r.id).cloned().unwrap_or_default();
                    if self.builtin.contains(&r.id) {
                        events.emit(&Event::ToolResult {
                            turn: self.turn,
                            id: r.id.clone(),
                            name: name.clone(),
                            verdict: if r.is_error { "failed" } else { "allowed" }.to_string(),
                            summary: crate::truncate::first_line(&r.content, 120),
                        });
                    }
                    self.transcript.push(Message::ToolResult {
                        call_id: r.id,
                        name,
                        content: r.content,
                        is_error: r.is_error,
                    });
                }
            }
            Line::Result(ending) => self.ending = Some(ending),
            Line::Other => {}
        }
    }

    /// Serves one call the CLI made to nexo's tools.
    async fn call(&mut self, bridged: Bridged, ctx: &LoopContext<'_>) {
        let Bridged { call, reply } = bridged;
        if call.name == launch::APPROVE {
            let decision = decide(ctx.tools, &call.arguments);
            let _ = reply.send(ModelReply {
                content: decision.to_string(),
                is_error: false,
                verdict: "allowed",
                approval: None,
            });
            return;
        }
        if let Some(stop) = &self.stop {
            let why = format!("error: not run: the prompt has ended ({stop:?})");
            let _ = reply.send(ModelReply { content: why, is_error: true, verdict: "failed", approval: None });
            return;
        }
        // The model's id for the call, when the stream announced it.
        let at = self.announced.iter().position(|(name, _, input)| *name == call.name && *input == call.arguments);
        let id = match at {
            Some(i) => self.announced.remove(i).1,
            None => call.id.clone(),
        };
        let call = ToolCall { id, ..call };
        let out = ctx.tools.call_model(self.turn.max(1), &call).await;
        if let Some(detail) = &out.approval {
            // As on the host loop: the prompt ends here, waiting for the
            // operator; the CLI is stopped.
            self.stop = Some(Status::ApprovalRequired { tool: call.name.clone(), detail: detail.clone() });
        }
        let _ = reply.send(out);
    }

    fn finish(
        mut self,
        max_turns: u32,
        events: &dyn crate::events::EventSink,
        exit: Option<std::process::ExitStatus>,
        stderr: &str,
    ) -> Result<Outcome, ModelError> {
        let mut usage = Usage::default();
        let mut turns = self.turn.min(max_turns);
        let status = match (self.stop.take(), &self.ending) {
            (Some(status), _) => status,
            (None, Some(end)) => {
                usage = Usage { input_tokens: end.input_tokens, output_tokens: end.output_tokens };
                if end.num_turns > 0 {
                    turns = end.num_turns.min(max_turns);
                }
                match end.subtype.as_str() {
                    "success" if !end.is_error => {
                        if let Some(answer) = &end.result {
                            self.text = answer.clone();
                        }
                        Status::Completed
                    }
                    "error_max_turns" => Status::TurnLimit,
                    "error_max_budget_usd" => Status::TokenBudget,
                    _ => return Err(failure(end)),
                }
            }
            (None, None) => {
                let exit = exit.map_or_else(|| "was stopped".to_string(), |s| format!("exited with {s}"));
                let said =
                    if stderr.is_empty() { "nothing on stderr".to_string() } else { format!("stderr: {stderr}") };
                return Err(unavailable(format!("the Claude Code CLI {exit} before it reported a result ({said})")));
            }
        };
        events.emit(&Event::Done {
            status: status.clone(),
            turns,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd: self.ending.as_ref().and_then(|e| e.cost_usd),
            transcript: crate::agent_loop::cut_short(&status).then(|| self.transcript.clone()),
        });
        Ok(Outcome { text: self.text, status, turns, usage, transcript: self.transcript })
    }
}

/// The error for a session the CLI ended with an error.
fn failure(end: &Ending) -> ModelError {
    let message = if !end.errors.is_empty() {
        end.errors.join("; ")
    } else {
        end.result.clone().unwrap_or_else(|| format!("the session ended with `{}`", end.subtype))
    };
    match end.api_error_status {
        Some(status) => ModelError::Provider { provider: PROVIDER.into(), status, message },
        None => unavailable(format!("the session ended with `{}`: {message}", end.subtype)),
    }
}

/// The permission-prompt tool's spec.
fn approve_spec() -> ToolSpec {
    ToolSpec {
        name: launch::APPROVE.into(),
        description: "nexo's permission decision for one tool call (called by Claude Code, not by the model)".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "tool_name": {"type": "string"},
                "input": {"type": "object"},
                "tool_use_id": {"type": "string"}
            },
            "required": ["tool_name", "input"]
        }),
    }
}

/// The answer to one permission prompt, in the CLI's format. nexo's own
/// tools are allowed here because the gate decides inside each call; the
/// CLI's built-in tools are checked against the run's authority now.
fn decide(tools: &ToolContext, arguments: &Value) -> Value {
    let name = arguments.get("tool_name").and_then(Value::as_str).unwrap_or_default();
    let input = arguments.get("input").cloned().unwrap_or_else(|| json!({}));
    let allow = |input: Value| json!({"behavior": "allow", "updatedInput": input});
    let deny = |message: String| json!({"behavior": "deny", "message": message});
    if name.starts_with(launch::PREFIX) {
        return allow(input);
    }
    let Some((capability, detail)) = builtin_gate(name, &input) else {
        return deny(format!("nexo does not know the built-in tool `{name}`, so it is refused"));
    };
    let gate = Gate::Capability(capability, &detail);
    match tools.authority().gate_in(&gate, tools.taint(), None, name) {
        Ok(()) => {
            // The CLI runs the tool and nexo never sees its result: what it
            // brings into the context is marked as it is allowed.
            let labels = tools.authority().source(&gate);
            tools.taint().mark(labels, || crate::authority::Authority::source_name(&gate));
            allow(input)
        }
        Err(ToolError::ApprovalRequired(m)) => deny(format!(
            "{m}; the CLI's built-in tools cannot wait for an operator's approval (nexo's own tools can: run \
             without --claude-builtin-tools)"
        )),
        Err(e) => deny(e.message().to_string()),
    }
}

/// The capability one of the CLI's built-in tools needs, and the detail the
/// gate shows.
fn builtin_gate(name: &str, input: &Value) -> Option<(Capability, String)> {
    let field =
        |keys: &[&str]| keys.iter().find_map(|k| input.get(*k).and_then(Value::as_str)).unwrap_or_default().to_string();
    Some(match name {
        "Read" | "NotebookRead" => (Capability::Read, field(&["file_path", "notebook_path"])),
        "Grep" => (Capability::Read, field(&["path", "pattern"])),
        "Glob" | "LS" => (Capability::Glob, field(&["pattern", "path"])),
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => (Capability::Write, field(&["file_path", "notebook_path"])),
        "Bash" => (Capability::Shell, field(&["command"])),
        "WebFetch" => (Capability::Fetch, field(&["url"])),
        "WebSearch" => (Capability::Search, field(&["query"])),
        _ => return None,
    })
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::fill(&mut bytes);
    hex::encode(bytes)
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

/// The CLI's process group, killed when the prompt ends or is dropped (a
/// deadline, a cancelled run), so nothing it started outlives it.
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn kill(&self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()).and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_cut_short_is_completed_and_an_endless_one_refused() {
        let (mut writer, reader) = tokio::io::duplex(64);
        let mut reader = tokio::io::BufReader::new(reader);
        let mut buf = Vec::new();
        writer.write_all(b"{\"type\":").await.unwrap_or_default();
        // Cancelled half-way, as a select! branch would be.
        let cut = tokio::time::timeout(std::time::Duration::from_millis(50), read_line(&mut reader, &mut buf)).await;
        assert!(cut.is_err(), "no whole line yet");
        writer.write_all(b"\"x\"}\nlast").await.unwrap_or_default();
        drop(writer);
        assert_eq!(read_line(&mut reader, &mut buf).await, Ok(true));
        assert_eq!(buf, b"{\"type\":\"x\"}");
        buf.clear();
        assert_eq!(read_line(&mut reader, &mut buf).await, Ok(true), "a last line without a newline");
        assert_eq!(buf, b"last");
        buf.clear();
        assert_eq!(read_line(&mut reader, &mut buf).await, Ok(false));
        let mut long = tokio::io::BufReader::new(std::io::Cursor::new(vec![b'a'; MAX_LINE + 10]));
        let mut buf = Vec::new();
        assert!(read_line(&mut long, &mut buf).await.unwrap_err().contains("longer than"));
    }

    #[test]
    fn builtin_tools_map_onto_capabilities() {
        let gate = |name: &str, input: Value| builtin_gate(name, &input);
        assert_eq!(gate("Bash", json!({"command": "ls"})), Some((Capability::Shell, "ls".into())));
        assert_eq!(gate("Edit", json!({"file_path": "a.rs"})), Some((Capability::Write, "a.rs".into())));
        assert_eq!(gate("WebFetch", json!({"url": "https://x"})), Some((Capability::Fetch, "https://x".into())));
        assert_eq!(gate("Task", json!({})), None, "an unknown tool is refused");
    }
}
