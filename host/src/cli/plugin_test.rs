//! `nexo test`: checks a built plugin in an in-process host, by kind.
//!
//! - agent: runs `tests/input.txt` against the scripted model conversation
//!   `tests/script.json` with the default grant (read and glob, read-only,
//!   the in-memory sandbox); passes if the run ends normally and the answer
//!   contains `tests/expect.txt` (trimmed).
//! - skill: the instructions are not empty and every listed resource reads.
//! - search backend: the hosts its `info` names are valid grant entries, and
//!   `tests/query.txt` run against a loopback upstream that serves
//!   `tests/response.txt` (at the `base-url` setting) returns a hit whose
//!   title or URL contains `tests/expect.txt`.
//! - sandbox provider: it starts as a remote sandbox (instantiated, no
//!   network granted) and closes.
//!
//! Every kind first passes loading: world detection, import checks, and a
//! valid name and description.

use std::path::Path;

use nexo::agent_loop::Status;
use nexo::plugin::Description;
use nexo::settings::{Providers, RunOptions};
use nexo::{Plugin, PluginKind};

/// One check's outcome: what was checked, and the problem if it failed.
pub struct Check {
    /// What was checked.
    pub what: String,
    /// `Err(reason)` when it failed.
    pub result: Result<(), String>,
}

fn check(what: impl Into<String>, result: Result<(), String>) -> Check {
    Check { what: what.into(), result }
}

/// Runs the checks for `plugin`, whose crate is at `crate_dir`.
pub async fn run(plugin: &Plugin, crate_dir: &Path) -> Vec<Check> {
    let mut checks = vec![check(format!("loads as {} `{}`", plugin.kind().with_article(), plugin.name()), Ok(()))];
    match plugin.kind() {
        PluginKind::Agent => checks.push(agent(plugin, &crate_dir.join("tests")).await),
        PluginKind::Skill => checks.extend(skill(plugin).await),
        PluginKind::SearchBackend => {
            let Description::SearchBackend(info) = plugin.description() else { unreachable!("kind is search backend") };
            let grant = nexo::egress::EgressGrant { hosts: info.hosts.clone(), ..Default::default() };
            let hosts = if info.hosts.is_empty() { "(none)".to_string() } else { info.hosts.join(", ") };
            checks.push(check(
                format!("its hosts are valid grant entries: {hosts}"),
                grant.egress().map(|_| ()).map_err(|e| e.to_string()),
            ));
            checks.push(search(plugin, &crate_dir.join("tests")).await);
        }
        PluginKind::SandboxProvider => {
            let provider = plugin.sandbox_provider().map_err(nexo::RunError::from);
            let started = match async { provider?.start(&Default::default(), None).await }.await {
                Ok(sandbox) => tokio::task::spawn_blocking(move || nexo_sandbox::Sandbox::close(&sandbox))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| format!("close failed: {e}"))),
                Err(e) => Err(e.to_string()),
            };
            checks.push(check("starts as a remote sandbox and closes", started));
        }
        PluginKind::Hook => checks.push(hook(plugin).await),
    }
    checks
}

/// Asks a hook about a sample call for each moment it wants: it must
/// answer, without a trap and within its deadline.
async fn hook(plugin: &Plugin) -> Check {
    let answered = async {
        let hook = plugin.hook().map_err(|e| e.to_string())?;
        hook.sample().await.map_err(|e| e.to_string())
    };
    check("answers a sample call at each moment it asks for", answered.await)
}

async fn agent(plugin: &Plugin, tests: &Path) -> Check {
    let (script, input, expect) = (tests.join("script.json"), tests.join("input.txt"), tests.join("expect.txt"));
    let what = format!("answers {} against {}", input.display(), script.display());
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let (input_text, expected) = match (read(&input), read(&expect)) {
        (Ok(i), Ok(e)) => (i, e.trim().to_string()),
        (Err(e), _) | (_, Err(e)) => return check(what, Err(e)),
    };
    let config = nexo_model::ModelConfig { script: Some(script.clone()), ..Default::default() };
    let provider = match nexo_model::resolve(&config) {
        Ok(p) => p,
        Err(e) => return check(what, Err(e.to_string())),
    };
    let options =
        RunOptions { providers: Providers { model: Some(provider), ..Providers::default() }, ..RunOptions::default() };
    let result = async {
        let outcome = plugin.agent()?.run(input_text.trim_end_matches('\n'), &options).await?;
        Ok::<_, nexo::RunError>((outcome.answer, outcome.last_prompt.map(|o| o.status)))
    }
    .await;
    let verdict = match result {
        Err(e) => Err(e.to_string()),
        Ok((_, Some(Status::TurnLimit | Status::TokenBudget))) => {
            Err("the turn cap or token budget cut it short".into())
        }
        Ok((_, Some(Status::ApprovalRequired { tool, .. }))) => Err(format!("stopped: `{tool}` needs approval")),
        Ok((answer, _)) if answer.contains(&expected) => Ok(()),
        Ok((answer, _)) => Err(format!("the answer lacks {expected:?}; it was {answer:?}")),
    };
    check(format!("{what}; the answer contains {}", expect.display()), verdict)
}

/// Runs `tests/query.txt` through the backend against a loopback upstream
/// that answers every GET with `tests/response.txt`, reached at the
/// `base-url` setting, and looks for `tests/expect.txt` in the hits.
async fn search(plugin: &Plugin, tests: &Path) -> Check {
    let (query, response, expect) = (tests.join("query.txt"), tests.join("response.txt"), tests.join("expect.txt"));
    let what = format!("answers {} from a loopback upstream serving {}", query.display(), response.display());
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let (query, body, expected) = match (read(&query), read(&response), read(&expect)) {
        (Ok(q), Ok(b), Ok(e)) => (q.trim().to_string(), b, e.trim().to_string()),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return check(what, Err(e)),
    };
    let result = async {
        let port = serve_forever(body).await?;
        let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
        let grant = nexo::egress::EgressGrant {
            hosts: vec!["127.0.0.1".into()],
            allow_private: vec![loopback],
            settings: [("base-url".to_string(), format!("http://127.0.0.1:{port}"))].into(),
            ..Default::default()
        };
        let handle = plugin.search_backend().map_err(|e| e.to_string())?.clone();
        let backend = nexo::world::search_backend::ComponentBackend::new(handle, &grant).map_err(|e| e.to_string())?;
        let hits = nexo::search::SearchBackend::search(&backend, &query).await.map_err(|e| e.to_string())?;
        let found = hits.iter().any(|h| h.title.contains(&expected) || h.url.contains(&expected));
        if found { Ok(()) } else { Err(format!("no hit has {expected:?} in its title or URL; the hits were {hits:?}")) }
    }
    .await;
    check(format!("{what}; a hit contains {}", expect.display()), result)
}

/// A loopback HTTP/1.1 server answering every request with `body` as text.
async fn serve_forever(body: String) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            });
        }
    });
    Ok(port)
}

async fn skill(plugin: &Plugin) -> Vec<Check> {
    let mut checks = Vec::new();
    let skill = match plugin.skill() {
        Ok(skill) => skill,
        Err(e) => return vec![check("is a skill", Err(e.to_string()))],
    };
    let instructions =
        skill.instructions().await.map_err(|e| e.to_string()).and_then(|text| {
            if text.trim().is_empty() { Err("the instructions are empty".to_string()) } else { Ok(()) }
        });
    checks.push(check("has instructions", instructions));
    let Description::Skill(description) = plugin.description() else { unreachable!("kind is skill") };
    for path in &description.resources {
        let read = match skill.resource(path).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("it is listed but read-resource returns nothing".to_string()),
            Err(e) => Err(e.to_string()),
        };
        checks.push(check(format!("resource {path} reads"), read));
    }
    checks
}
