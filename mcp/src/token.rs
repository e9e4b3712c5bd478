//! Bearer tokens: from the config, an environment variable of the host, a
//! file, or a command. Resolved at each connection, so a rotated token takes
//! effect at the next one. Errors name the source, never the value.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::config::TokenSource;
use crate::error::McpError;

/// How long a `token-command` may run.
pub(crate) const TOKEN_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The most bytes read from a token file or command.
const MAX_TOKEN_BYTES: usize = 64 << 10;

/// The token of `source`, trimmed; `None` for no source.
pub(crate) async fn resolve(server: &str, source: &TokenSource) -> Result<Option<String>, McpError> {
    let err = |message: String| McpError::Token { server: server.to_string(), message };
    let token = match source {
        TokenSource::None => return Ok(None),
        TokenSource::Static(t) => t.clone(),
        TokenSource::Env(var) => match std::env::var(var) {
            Ok(v) => v.trim().to_string(),
            Err(std::env::VarError::NotPresent) => {
                return Err(err(format!(
                    "`token-env` names {var}, which is not set in nexo's environment; export it, or fix `token-env` \
                     in [mcp.{server}]"
                )));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(err(format!("the variable {var} of `token-env` is not valid UTF-8; fix its value")));
            }
        },
        TokenSource::File(path) => {
            let bytes = tokio::fs::read(path).await.map_err(|e| {
                err(format!(
                    "cannot read `token-file` {}: {e}; create it or fix `token-file` in [mcp.{server}]",
                    path.display()
                ))
            })?;
            if bytes.len() > MAX_TOKEN_BYTES {
                return Err(err(format!(
                    "`token-file` {} holds more than {MAX_TOKEN_BYTES} bytes; it should hold the token only",
                    path.display()
                )));
            }
            String::from_utf8(bytes)
                .map_err(|_| {
                    err(format!("`token-file` {} is not UTF-8 text; it should hold the token only", path.display()))
                })?
                .trim()
                .to_string()
        }
        TokenSource::Command(command) => run_command(server, command).await?,
    };
    if token.is_empty() {
        return Err(err(format!("the {} is empty; give a token, or remove the token source", source.describe())));
    }
    Ok(Some(token))
}

/// Runs `token-command` with `/bin/sh -c`, with the host's environment (it
/// is the operator's own command), and returns its stdout, trimmed.
async fn run_command(server: &str, command: &str) -> Result<String, McpError> {
    let err = |message: String| McpError::Token { server: server.to_string(), message };
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(command).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    nexo_sandbox::close_inherited_fds(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true).process_group(0);
    let mut child = cmd.spawn().map_err(|e| err(format!("cannot run `token-command` with /bin/sh: {e}")))?;
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(err("the pipes of `token-command` were not set up".into()));
    };
    let work = async {
        let mut out = Vec::new();
        let mut errs = Vec::new();
        let mut out_pipe = (&mut stdout).take(MAX_TOKEN_BYTES as u64 + 1);
        let mut err_pipe = (&mut stderr).take(8192);
        let (r1, r2, status) =
            tokio::join!(out_pipe.read_to_end(&mut out), err_pipe.read_to_end(&mut errs), child.wait());
        r1.and(r2).and(status.map(|s| (s, out, errs)))
    };
    let (status, out, errs) = match tokio::time::timeout(TOKEN_COMMAND_TIMEOUT, work).await {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return Err(err(format!("`token-command` failed: {e}"))),
        Err(_) => {
            return Err(err(format!(
                "`token-command` did not finish within {}s; make it print the token and exit",
                TOKEN_COMMAND_TIMEOUT.as_secs()
            )));
        }
    };
    let token = String::from_utf8_lossy(&out).trim().to_string();
    if !status.success() {
        let mut shown = String::from_utf8_lossy(&errs).trim().to_string();
        // What it printed may hold the token; never show that.
        if !token.is_empty() && shown.contains(&token) {
            shown = "<its stderr repeats its stdout, not shown>".into();
        }
        let shown = if shown.is_empty() { String::new() } else { format!(": {shown}") };
        return Err(err(format!("`token-command` exited with {status}{shown}; fix the command in [mcp.{server}]")));
    }
    if out.len() > MAX_TOKEN_BYTES {
        return Err(err(format!(
            "`token-command` printed more than {MAX_TOKEN_BYTES} bytes; it should print the token only"
        )));
    }
    Ok(token)
}
