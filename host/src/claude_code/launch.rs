//! How the Claude Code CLI is started: which binary, with which flags, in
//! which environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nexo_model::ModelError;

use crate::manifest::PermissionMode;

/// The MCP server name nexo's tools have inside the CLI: the model sees
/// them as `mcp__nexo__read_file` and so on.
pub(crate) const SERVER: &str = "nexo";

/// The prefix the CLI gives nexo's tools.
pub(crate) const PREFIX: &str = "mcp__nexo__";

/// The permission-prompt tool, as nexo serves it and the CLI names it.
pub(crate) const APPROVE: &str = "approve";

/// The CLI's name on `PATH`.
const BINARY: &str = "claude";

/// The flag or key an operator sets to point at the CLI.
const WHERE: &str = "`--claude-binary PATH` or `claude-binary` in the config file's [model]";

/// The CLI to run: the configured one, else `claude` on `PATH`. A missing
/// CLI is a configuration error that says how to install it.
pub(crate) fn binary(configured: Option<&Path>) -> Result<PathBuf, ModelError> {
    if let Some(path) = configured {
        return match std::fs::metadata(path) {
            Ok(m) if m.is_file() => Ok(path.to_path_buf()),
            Ok(_) => Err(ModelError::Config(format!(
                "the Claude Code CLI {} is not a file; point {WHERE} at the `claude` executable",
                path.display()
            ))),
            Err(e) => Err(ModelError::Config(format!(
                "the Claude Code CLI {} cannot be used ({e}); install it with `npm install -g \
                 @anthropic-ai/claude-code`, or point {WHERE} at it",
                path.display()
            ))),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(BINARY)).find(|p| is_executable(p)).ok_or_else(|| {
        ModelError::Config(format!(
            "--loop claude-code needs the Claude Code CLI, and `{BINARY}` is not on PATH: install it with `npm \
             install -g @anthropic-ai/claude-code`, or point {WHERE} at it"
        ))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The CLI's permission mode: `default` while nexo's gate must see its own
/// tools' calls ([`Launch::gated`]), when the CLI asks nexo through the
/// permission-prompt tool; else `bypassPermissions`.
pub(crate) fn permission_mode(gated: bool) -> &'static str {
    if gated { "default" } else { "bypassPermissions" }
}

/// Whether nexo's gate must decide each call of the CLI's own tools: under
/// every mode but `auto`, and under `auto` when the operator's command
/// rules judge the CLI's `Bash` commands.
pub(crate) fn gated(mode: PermissionMode, command_rules: bool) -> bool {
    mode != PermissionMode::Auto || command_rules
}

/// What one launch needs.
pub(crate) struct Launch<'a> {
    /// The model id, if one is set.
    pub(crate) model: Option<&'a str>,
    /// The turn cap.
    pub(crate) max_turns: u32,
    /// Whether nexo's gate decides the CLI's own tools' calls ([`gated`]).
    pub(crate) gated: bool,
    /// The system instructions, joined.
    pub(crate) instructions: &'a str,
    /// The MCP configuration file.
    pub(crate) mcp_config: &'a Path,
    /// Whether the CLI's own tools are on.
    pub(crate) builtin_tools: bool,
}

/// The CLI's arguments.
pub(crate) fn args(launch: &Launch<'_>) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        // No hooks, plugins, CLAUDE.md discovery or settings files: a
        // workspace's `.claude/settings.json` could otherwise run commands
        // nexo never sees.
        "--bare",
        "--setting-sources",
        "",
        "--no-session-persistence",
        "--disable-slash-commands",
        "--strict-mcp-config",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.push("--mcp-config".into());
    args.push(launch.mcp_config.into());
    // nexo's gate decides each call of its own tools, inside the call; the
    // CLI need not ask about them first.
    args.extend(["--allowedTools".into(), format!("mcp__{SERVER}").into()]);
    args.extend(["--max-turns".into(), launch.max_turns.to_string().into()]);
    args.extend(["--permission-mode".into(), permission_mode(launch.gated).into()]);
    if launch.gated {
        args.extend(["--permission-prompt-tool".into(), format!("{PREFIX}{APPROVE}").into()]);
    }
    if let Some(model) = launch.model {
        args.extend(["--model".into(), model.into()]);
    }
    let tools = if launch.builtin_tools { "default" } else { "" };
    args.extend(["--tools".into(), tools.into()]);
    if !launch.instructions.is_empty() {
        // Without its own tools the CLI's default prompt describes tools the
        // model does not have; with them, the agent's instructions add to it.
        let flag = if launch.builtin_tools { "--append-system-prompt" } else { "--system-prompt" };
        args.extend([flag.into(), launch.instructions.into()]);
    }
    args
}

/// The CLI's whole environment: nothing of nexo's is inherited. `home` is
/// a scratch directory, so no user settings or credentials are read.
pub(crate) fn env(
    binary: &Path,
    home: &Path,
    api_key: Option<&str>,
    base_url: Option<&str>,
    builtin_tools: bool,
) -> Vec<(OsString, OsString)> {
    // An npm install's wrapper finds `node` next to itself.
    let dirs = binary.parent().filter(|d| !d.as_os_str().is_empty()).map(Path::to_path_buf);
    let dirs = dirs.into_iter().chain(std::env::split_paths(nexo_sandbox::shell::DEFAULT_PATH));
    let path = std::env::join_paths(dirs).unwrap_or_else(|_| nexo_sandbox::shell::DEFAULT_PATH.into());
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), home.into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(), "1".into()),
        ("DISABLE_TELEMETRY".into(), "1".into()),
        ("DISABLE_ERROR_REPORTING".into(), "1".into()),
        // nexo's tools go to the model directly, in every request: the
        // CLI's tool search can defer MCP tools behind a search tool of its
        // own, one of the built-ins `--tools ""` removes.
        ("ENABLE_TOOL_SEARCH".into(), "false".into()),
    ];
    if !builtin_tools {
        // The CLI refuses `bypassPermissions` as root unless told it is
        // sandboxed; without its own tools it acts only through nexo's gate.
        env.push(("IS_SANDBOX".into(), "1".into()));
    }
    if let Some(key) = api_key {
        env.push(("ANTHROPIC_API_KEY".into(), key.into()));
    }
    if let Some(url) = base_url {
        env.push(("ANTHROPIC_BASE_URL".into(), url.into()));
    }
    env
}

/// A session's history as text for the CLI, which takes no prior turns: each
/// message tagged by who said it. `None` for a new conversation.
pub(crate) fn history_text(history: &[nexo_model::Message]) -> Option<String> {
    use nexo_model::Message;
    if history.is_empty() {
        return None;
    }
    let mut text = String::from(
        "The conversation so far in this session, oldest first. Continue it: the request after this block is the \
         user's next message.\n<conversation>\n",
    );
    for message in history {
        match message {
            Message::System { .. } => {}
            Message::User { text: said } => text.push_str(&format!("<user>\n{said}\n</user>\n")),
            Message::Assistant { text: said, tool_calls } => {
                text.push_str(&format!("<assistant>\n{said}\n"));
                for call in tool_calls {
                    text.push_str(&format!("<tool-call name=\"{}\">{}</tool-call>\n", call.name, call.arguments));
                }
                text.push_str("</assistant>\n");
            }
            Message::ToolResult { name, content, is_error, .. } => {
                let kind = if *is_error { "tool-error" } else { "tool-result" };
                text.push_str(&format!("<{kind} name=\"{name}\">\n{content}\n</{kind}>\n"));
            }
        }
    }
    text.push_str("</conversation>");
    Some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic

    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    fn value_of<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
    }

    #[test]
    fn modes_and_tools_map_onto_flags() {
        let base = Launch {
            model: Some("claude-sonnet-4-5"),
            max_turns: 7,
            gated: true,
            instructions: "Be brief.",
            mcp_config: Path::new("/tmp/x/mcp.json"),
            builtin_tools: false,
        };
        let a = strings(&args(&base));
        assert_eq!(value_of(&a, "--permission-mode"), Some("default"));
        assert_eq!(value_of(&a, "--permission-prompt-tool"), Some("mcp__nexo__approve"));
        assert_eq!(value_of(&a, "--tools"), Some(""));
        assert_eq!(value_of(&a, "--system-prompt"), Some("Be brief."));
        assert_eq!(value_of(&a, "--max-turns"), Some("7"));
        assert_eq!(value_of(&a, "--model"), Some("claude-sonnet-4-5"));
        assert_eq!(value_of(&a, "--allowedTools"), Some("mcp__nexo"));
        assert!(a.contains(&"--strict-mcp-config".to_string()) && a.contains(&"--bare".to_string()));
        let auto = strings(&args(&Launch { gated: false, builtin_tools: true, ..base }));
        assert_eq!(value_of(&auto, "--permission-mode"), Some("bypassPermissions"));
        assert_eq!(value_of(&auto, "--permission-prompt-tool"), None);
        assert_eq!(value_of(&auto, "--tools"), Some("default"));
        assert_eq!(value_of(&auto, "--append-system-prompt"), Some("Be brief."));
        for mode in [PermissionMode::Ask, PermissionMode::Approve, PermissionMode::ReadOnly] {
            assert!(gated(mode, false), "{mode:?} stays in nexo's gate");
        }
        // Command rules keep even `auto`'s Bash in nexo's gate.
        assert!(!gated(PermissionMode::Auto, false) && gated(PermissionMode::Auto, true));
        let ruled = strings(&args(&Launch { gated: gated(PermissionMode::Auto, true), builtin_tools: true, ..base }));
        assert_eq!(value_of(&ruled, "--permission-mode"), Some("default"));
        assert_eq!(value_of(&ruled, "--permission-prompt-tool"), Some("mcp__nexo__approve"));
    }

    #[test]
    fn the_environment_is_narrow() {
        let env = env(Path::new("/opt/claude/bin/claude"), Path::new("/tmp/h"), Some("k"), None, false);
        let names: Vec<String> = env.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"ANTHROPIC_API_KEY".to_string()));
        assert!(!names.contains(&"ANTHROPIC_BASE_URL".to_string()));
        let path = &env.iter().find(|(k, _)| k == "PATH").unwrap().1;
        assert!(path.to_string_lossy().starts_with("/opt/claude/bin:"));
        assert!(!names.iter().any(|n| n.starts_with("OPENAI") || n == "USER"));
    }

    #[test]
    fn a_missing_binary_says_how_to_install_it() {
        let e = binary(Some(Path::new("/nonexistent/claude"))).unwrap_err().to_string();
        assert!(e.contains("npm install -g @anthropic-ai/claude-code") && e.contains("--claude-binary"), "{e}");
    }

    #[test]
    fn a_sessions_history_is_one_text_block_in_order_without_instructions() {
        use nexo_model::{Message, ToolCall};
        assert_eq!(history_text(&[]), None, "a new conversation sends no block");
        let history = [
            Message::System { text: "never repeated".into() },
            Message::User { text: "My name is Mac.".into() },
            Message::Assistant {
                text: "Let me note it.".into(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "write_file".into(),
                    arguments: serde_json::json!({"path": "name.txt"}),
                }],
            },
            Message::ToolResult {
                call_id: "c1".into(),
                name: "write_file".into(),
                content: "ok".into(),
                is_error: false,
            },
            Message::Assistant { text: "Hello, Mac.".into(), tool_calls: Vec::new() },
        ];
        let text = history_text(&history).unwrap();
        assert!(!text.contains("never repeated"));
        let order = [
            "<user>\nMy name is Mac.",
            "<tool-call name=\"write_file\">",
            "<tool-result name=\"write_file\">\nok",
            "Hello, Mac.",
        ];
        let at: Vec<usize> = order.iter().map(|needle| text.find(needle).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(text.ends_with("</conversation>"));
    }
}
