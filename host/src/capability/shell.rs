//! The shell unit: the `shell` tool, which runs a command in the run's
//! sandbox under the sandbox's own confinement, with a time limit, and cuts
//! its output for the model (the end of a log is where the error is). A
//! run granted `net-hosts` gives its commands network through the egress
//! proxy alone ([`super::network`]).

use nexo_model::{BoxFuture, ToolSpec};
use serde_json::{Value, json};
use wasmtime::component::Linker;

use super::network::ProxiedNetwork;
use super::sandbox::{Workspace, blocking};
use crate::authority::Refusal;
use crate::bindings::ShellOutput;
use crate::error::{ConfigError, ToolError};
use crate::host_call::{DynTool, HostCall, Tool, ToolContext, string_arg};
use crate::manifest::Capability;
use crate::manifest::interface::TOOLS;
use crate::settings::ToolLimits;
use crate::truncate::truncate;
use crate::unit::{AgentHost, Setup, Step, Unit};

/// What a shell command returned; truncated before anyone sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShellResult {
    /// Exit status.
    pub status: i32,
    /// Standard output, truncated.
    pub stdout: String,
    /// Standard error, truncated.
    pub stderr: String,
}

/// The shell unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShellUnit;

/// The shell unit's per-instance state.
#[derive(Debug)]
struct ShellState {
    limits: ToolLimits,
    /// The network the grant gives commands, or why it could not be set up
    /// (said when a command runs, so a run that runs none still does).
    network: Result<Option<ProxiedNetwork>, ConfigError>,
}

impl Unit for ShellUnit {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn link(&self, linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        linker.instance(TOOLS)?.func_wrap_async("shell", |store, (command,): (String,)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move {
                let out = cx.guest_call(&Shell, command).await?;
                Ok((out.map(|o| ShellOutput { status: o.status, stdout: o.stdout, stderr: o.stderr }),))
            })
        })
    }

    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[&Shell]
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        let sandbox = setup.state.get::<Workspace>().map(|w| w.sandbox.clone());
        let grant = &setup.options.grant;
        let network = ProxiedNetwork::new(&grant.net_hosts, &grant.sandbox.net_private, &setup.options.budget);
        if let Some(sandbox) = &sandbox {
            // What the data-flow guard counts as a send.
            let granted = matches!(network, Ok(Some(_)) | Err(_));
            setup.authority.set_shell_network(sandbox.shell_network() || granted);
            // Commands that have a network of their own (unconfined) are not told of the proxy's.
            if let Ok(Some(network)) = &network
                && sandbox.supports_shell()
                && !sandbox.shell_network()
                && setup.authority.effective().contains(&Capability::Shell)
            {
                setup.instructions.push(network.instructions());
            }
        }
        if let Some(why) = sandbox.and_then(|s| refusal(s.name(), s.supports_shell())) {
            setup.authority.set_unavailable(Capability::Shell, why);
        }
        setup.state.insert(ShellState { limits: setup.options.limits.tools, network });
        Step::ready(Ok(()))
    }
}

/// Why a run in the sandbox named `sandbox` gets no shell tool, or `None`
/// when the sandbox runs commands: the run's test and `nexo inspect`'s.
pub fn refusal(sandbox: &'static str, supports_shell: bool) -> Option<Refusal> {
    let make =
        |_: &str, name: &'static str| ToolError::Unsupported(format!("the {name} sandbox runs no shell commands"));
    (!supports_shell).then_some(Refusal { make, detail: sandbox })
}

/// `shell`: one command line in the sandbox.
#[derive(Debug, Clone, Copy)]
pub struct Shell;

impl HostCall for Shell {
    type Args = String;
    type Output = ShellResult;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "shell"
    }

    fn capability(&self) -> Option<Capability> {
        Some(Capability::Shell)
    }

    fn detail<'a>(&self, command: &'a String) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(command)
    }

    fn arg_bytes(&self, command: &String) -> usize {
        command.len()
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, command: String) -> BoxFuture<'a, Result<ShellResult, ToolError>> {
        Box::pin(async move {
            let sandbox = &cx.state::<Workspace>()?.sandbox;
            let state = cx.state::<ShellState>()?;
            let timeout = state.limits.shell_timeout;
            let out = match &state.network {
                Ok(None) => blocking(sandbox, move |s| s.exec(&command, timeout)).await?,
                Ok(Some(network)) => {
                    let gateway = network.gateway(cx.audit_sink(), "shell");
                    blocking(sandbox, move |s| s.exec_with_network(&command, timeout, &gateway)).await?
                }
                Err(e) => return Err(ToolError::Unsupported(e.to_string())),
            };
            Ok(ShellResult { status: out.status, stdout: out.stdout, stderr: out.stderr })
        })
    }

    fn truncate(&self, cx: &ToolContext, out: ShellResult) -> ShellResult {
        let Ok(state) = cx.state::<ShellState>() else { return out };
        let limits = state.limits.shell_output;
        ShellResult { status: out.status, stdout: truncate(&out.stdout, limits), stderr: truncate(&out.stderr, limits) }
    }
}

impl Tool for Shell {
    fn model_name(&self) -> &'static str {
        "shell"
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "Run a shell command in the workspace and return its exit status and output.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command line"}},
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn decode(&self, arguments: &Value) -> Result<String, ToolError> {
        Ok(string_arg("shell", arguments, "command")?.to_string())
    }

    fn render(&self, o: &ShellResult) -> String {
        format!("exit status: {}\nstdout:\n{}\nstderr:\n{}", o.status, o.stdout, o.stderr)
    }
}
