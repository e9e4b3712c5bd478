//! The agent tools: read-file, write-file, glob, shell, fetch and
//! web-search, behind the one permission gate.
//!
//! `fetch` and `web-search` run in the host process, not the sandbox: a
//! container with no network does not constrain them. Their bounds are the
//! gate, the agent's `fetch-allow` list (and the operator's `fetch-hosts`),
//! the configured backend, and the guarded client's address rules.
//!
//! A [`Toolbox`] belongs to one run. It holds the sandbox (*where*), the
//! permissions and the effective grant (*what*), and the read tracker for the
//! read-before-write guard. The WIT `tools` import and the model loop both
//! call it, so every call passes the same sequence: granted? → supported by
//! the sandbox? → the mode's verdict → act in the sandbox → truncate.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nexo_sandbox::{GlobMatches, MAX_GLOB_MATCHES, Sandbox, SandboxError};

use nexo_egress::EgressError;

use crate::manifest::Capability;
use crate::permissions::{Permissions, Verdict};
use crate::search::{SearchBackend, SearchFailure, SearchHit, normalize};
use crate::truncate::{Truncation, truncate};
use crate::web::{Fetcher, Page};

/// Why a tool call did not succeed; mirrors the WIT `tool-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolFailure {
    /// Not granted, or refused by the mode.
    #[error("denied: {0}")]
    Denied(String),
    /// Waits for a human's approval.
    #[error("approval required: {0}")]
    ApprovalRequired(String),
    /// Escapes the sandbox.
    #[error("security: {0}")]
    Security(String),
    /// The sandbox cannot do this.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// No such file.
    #[error("not found: {0}")]
    NotFound(String),
    /// Malformed arguments, or a guard such as read-before-write.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Ran past its time limit.
    #[error("timeout: {0}")]
    Timeout(String),
    /// Attempted and failed.
    #[error("failed: {0}")]
    Failed(String),
}

impl From<SandboxError> for ToolFailure {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::Security(m) => ToolFailure::Security(m),
            SandboxError::NotFound(m) => ToolFailure::NotFound(m),
            SandboxError::Unsupported(m) => ToolFailure::Unsupported(m),
            SandboxError::InvalidInput(m) => ToolFailure::InvalidInput(m),
            SandboxError::Timeout(m) => ToolFailure::Timeout(m),
            SandboxError::Config(m) | SandboxError::Failed(m) => ToolFailure::Failed(m),
        }
    }
}

/// What a shell command returned, after truncation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellResult {
    /// Exit status.
    pub status: i32,
    /// Standard output, truncated.
    pub stdout: String,
    /// Standard error, truncated.
    pub stderr: String,
}

/// Per-run tool settings.
#[derive(Debug, Clone, Copy)]
pub struct ToolLimits {
    /// Time limit for one shell command. Default: 120 s.
    pub shell_timeout: Duration,
    /// Truncation of shell output.
    pub shell_output: Truncation,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits { shell_timeout: Duration::from_secs(120), shell_output: Truncation::default() }
    }
}

/// The tools of one run.
pub struct Toolbox {
    agent: String,
    sandbox: Arc<dyn Sandbox>,
    permissions: Permissions,
    effective: BTreeSet<Capability>,
    limits: ToolLimits,
    /// Paths read in this run, with the modification time seen.
    reads: Mutex<HashMap<String, Option<SystemTime>>>,
    /// The fetch tool's access; `None` when the agent lists no hosts.
    fetch: Option<Result<Fetcher, String>>,
    /// The backend behind `web_search`.
    search: Option<Arc<dyn SearchBackend>>,
    /// What the agent requested, when known, so a refusal can say which
    /// side is missing: the plugin's request or the operator's grant.
    requested: Option<BTreeSet<Capability>>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("agent", &self.agent)
            .field("sandbox", &self.sandbox.name())
            .field("permissions", &self.permissions)
            .field("effective", &self.effective)
            .finish_non_exhaustive()
    }
}

/// The tool names, as the WIT and the model see them.
pub fn tool_name(cap: Capability) -> &'static str {
    match cap {
        Capability::Read => "read-file",
        Capability::Glob => "glob",
        Capability::Write => "write-file",
        Capability::Shell => "shell",
        Capability::Fetch => "fetch",
        Capability::Search => "web-search",
    }
}

impl Toolbox {
    /// A toolbox for `agent` acting in `sandbox`, with the effective
    /// capabilities (requested ∩ granted) and the permissions.
    pub fn new(
        agent: &str,
        sandbox: Arc<dyn Sandbox>,
        permissions: Permissions,
        effective: BTreeSet<Capability>,
        limits: ToolLimits,
    ) -> Self {
        Toolbox {
            agent: agent.into(),
            sandbox,
            permissions,
            effective,
            limits,
            reads: Mutex::new(HashMap::new()),
            fetch: None,
            search: None,
            requested: None,
        }
    }

    /// Records what the agent requested, for refusals that name the side
    /// that refused.
    pub fn with_requested(mut self, requested: impl IntoIterator<Item = Capability>) -> Self {
        self.requested = Some(requested.into_iter().collect());
        self
    }

    /// Adds web access: the fetch tool's (or why it could not be set up) and
    /// the search backend. Without them, `fetch` and `web_search` are not
    /// offered, whatever the grant says.
    pub fn with_web(mut self, fetch: Option<Result<Fetcher, String>>, search: Option<Arc<dyn SearchBackend>>) -> Self {
        self.fetch = fetch;
        self.search = search;
        self
    }

    /// The sandbox.
    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// The effective capabilities.
    pub fn effective(&self) -> &BTreeSet<Capability> {
        &self.effective
    }

    /// Whether `cap` is effective and the (narrowed) mode allows it without
    /// asking: the test for authority that bypasses the gate, such as a
    /// writable WASI preopen, which nobody can be asked about.
    pub fn allows_unasked(&self, cap: Capability) -> bool {
        self.effective.contains(&cap) && self.permissions.auto_allows(cap)
    }

    /// The capabilities whose tools are offered to the model: granted, and
    /// usable: a shell in the sandbox, a `fetch-allow` list for `fetch`, a
    /// configured backend for `search`.
    pub fn offered(&self) -> Vec<Capability> {
        self.effective.iter().copied().filter(|c| self.unavailable(*c).is_none()).collect()
    }

    /// Why `cap` cannot run in this toolbox at all, whatever the mode says:
    /// one place for both what is offered and what the gate refuses.
    fn unavailable(&self, cap: Capability) -> Option<ToolFailure> {
        match cap {
            Capability::Shell if !self.sandbox.supports_shell() => {
                Some(ToolFailure::Unsupported(format!("the {} sandbox runs no shell commands", self.sandbox.name())))
            }
            Capability::Fetch if self.fetch.is_none() => Some(ToolFailure::Denied(format!(
                "`{}` lists no hosts in `fetch-allow`, so it may fetch nothing",
                self.agent
            ))),
            Capability::Search if self.search.is_none() => Some(ToolFailure::Unsupported(
                "no search backend is configured; the operator sets one in the `[search]` section of the config file"
                    .into(),
            )),
            _ => None,
        }
    }

    /// The hosts the fetch tool may reach, for its description.
    pub fn fetch_hosts(&self) -> Option<Vec<String>> {
        match &self.fetch {
            Some(Ok(f)) => Some(f.hosts().entries().to_vec()),
            _ => None,
        }
    }

    /// Runs the gate for one action, in the fixed order: granted → supported
    /// → the mode's verdict.
    pub fn authorize(&self, cap: Capability, detail: &str) -> Result<(), ToolFailure> {
        let tool = tool_name(cap);
        let outcome = self.decide(cap, detail);
        let verdict = match &outcome {
            Ok(()) => "allowed",
            Err(ToolFailure::ApprovalRequired(_)) => "approval-required",
            Err(ToolFailure::Unsupported(_)) => "unsupported",
            Err(_) => "denied",
        };
        // A URL's query string can carry tokens: the log keeps what comes before it.
        let detail = if cap == Capability::Fetch { detail.split(['?', '#']).next().unwrap_or("") } else { detail };
        tracing::info!(target: "nexo::gate", agent = %self.agent, tool, detail, verdict);
        outcome
    }

    fn decide(&self, cap: Capability, detail: &str) -> Result<(), ToolFailure> {
        let name = cap.as_str();
        if !self.effective.contains(&cap) {
            let (tool, agent) = (tool_name(cap), &self.agent);
            return Err(ToolFailure::Denied(match &self.requested {
                Some(requested) if !requested.contains(&cap) => format!(
                    "`{tool}` needs the `{name}` capability, which `{agent}` does not request: the plugin's author \
                     adds `{name}` to the manifest's `capabilities`; the operator cannot grant what was not requested"
                ),
                Some(_) => format!(
                    "`{tool}` needs the `{name}` capability: `{agent}` requests it, but the operator did not grant \
                     it; grant it with `--allow {name}` (or `allow = [\"{name}\"]` in the config file's `[grant]`)"
                ),
                None => format!(
                    "`{tool}` needs the `{name}` capability, which `{agent}` did not request or the operator did not \
                     grant"
                ),
            }));
        }
        if let Some(refusal) = self.unavailable(cap) {
            return Err(refusal);
        }
        match self.permissions.check(cap, detail) {
            Verdict::Allow => Ok(()),
            Verdict::Deny(m) => Err(ToolFailure::Denied(m)),
            Verdict::ApprovalRequired(m) => Err(ToolFailure::ApprovalRequired(m)),
        }
    }

    /// Reads a file and records it for the read-before-write guard.
    pub async fn read_file(&self, path: &str) -> Result<String, ToolFailure> {
        self.authorize(Capability::Read, path)?;
        let sandbox = self.sandbox.clone();
        let p = path.to_string();
        let file = blocking(move || sandbox.read(&p)).await?;
        self.remember(path, file.mtime);
        Ok(file.text)
    }

    /// Writes a file. On a real filesystem, an existing file must have been
    /// read in this run, and must not have changed since.
    pub async fn write_file(&self, path: &str, contents: &str) -> Result<(), ToolFailure> {
        self.authorize(Capability::Write, path)?;
        let sandbox = self.sandbox.clone();
        let p = path.to_string();
        let existing = blocking(move || sandbox.stat(&p)).await?;
        if let Some(stat) = existing
            && let Some(now) = stat.mtime
        {
            match self.reads().get(&key(path)) {
                None => return Err(ToolFailure::InvalidInput(format!("read {path} before overwriting it"))),
                Some(seen) if *seen != Some(now) => {
                    return Err(ToolFailure::InvalidInput(format!("stale: {path} changed since you read it")));
                }
                Some(_) => {}
            }
        }
        let sandbox = self.sandbox.clone();
        let (p, c) = (path.to_string(), contents.to_string());
        blocking(move || sandbox.write(&p, &c)).await?;
        // Our own write must not make the next write look stale.
        let sandbox = self.sandbox.clone();
        let p = path.to_string();
        if let Ok(Some(stat)) = blocking(move || sandbox.stat(&p)).await {
            self.remember(path, stat.mtime);
        }
        Ok(())
    }

    /// Lists files matching a pattern: at most
    /// [`MAX_GLOB_MATCHES`](nexo_sandbox::MAX_GLOB_MATCHES), flagged when cut.
    pub async fn glob(&self, pattern: &str) -> Result<GlobMatches, ToolFailure> {
        self.authorize(Capability::Glob, pattern)?;
        let sandbox = self.sandbox.clone();
        let p = pattern.to_string();
        blocking(move || sandbox.glob(&p)).await
    }

    /// Runs a shell command; output is truncated for the model.
    pub async fn shell(&self, command: &str) -> Result<ShellResult, ToolFailure> {
        self.authorize(Capability::Shell, command)?;
        let sandbox = self.sandbox.clone();
        let c = command.to_string();
        let timeout = self.limits.shell_timeout;
        let out = blocking(move || sandbox.exec(&c, timeout)).await?;
        Ok(ShellResult {
            status: out.status,
            stdout: truncate(&out.stdout, self.limits.shell_output),
            stderr: truncate(&out.stderr, self.limits.shell_output),
        })
    }

    /// Fetches a page with GET through the guarded client: only hosts on the
    /// agent's allow-list, never a private address, the body cut at 200 KB.
    /// An HTTP error status is a tool error; the page is untrusted input.
    pub async fn fetch(&self, url: &str) -> Result<Page, ToolFailure> {
        self.authorize(Capability::Fetch, url)?;
        let fetcher = match &self.fetch {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(ToolFailure::Failed(format!("web access is not available: {e}"))),
            None => unreachable!("authorize refuses fetch without an allow-list"),
        };
        let page = fetcher.fetch(url).await.map_err(fetch_failure)?;
        if page.status >= 400 {
            return Err(ToolFailure::Failed(format!("{} answered HTTP {}", page.url, page.status)));
        }
        if let Some(ct) = page.content_type.as_deref().filter(|ct| is_binary(ct)) {
            return Err(ToolFailure::Unsupported(format!(
                "{} is `{ct}`, not text; fetch returns text pages only",
                page.url
            )));
        }
        Ok(page)
    }

    /// Searches the web through the configured backend: at most 8 rows,
    /// snippets cut to 300 characters. Rows are untrusted input.
    pub async fn web_search(&self, query: &str) -> Result<Vec<SearchHit>, ToolFailure> {
        self.authorize(Capability::Search, query)?;
        let Some(backend) = &self.search else { unreachable!("authorize refuses search without a backend") };
        if query.trim().is_empty() {
            return Err(ToolFailure::InvalidInput("the query is empty".into()));
        }
        match backend.search(query).await {
            Ok(hits) => Ok(normalize(hits)),
            Err(SearchFailure::InvalidQuery(m)) => Err(ToolFailure::InvalidInput(format!("{}: {m}", backend.name()))),
            Err(e) => Err(ToolFailure::Failed(format!("{}: {e}", backend.name()))),
        }
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<SystemTime>>> {
        self.reads.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, path: &str, mtime: Option<SystemTime>) {
        self.reads().insert(key(path), mtime);
    }
}

/// The glob tool's text for the model: one path a line, and a last line
/// saying so when the list was cut, so the model does not take it as whole.
pub fn glob_text(matches: &GlobMatches) -> String {
    let mut text = if matches.paths.is_empty() { "(no matching files)".to_string() } else { matches.paths.join("\n") };
    if matches.truncated && matches.paths.len() >= MAX_GLOB_MATCHES {
        text.push_str(&format!("\n(first {MAX_GLOB_MATCHES} matches shown; more exist: narrow the pattern)"));
    } else if matches.truncated {
        // The walk hit its own limit before the match cap: the rest is unknown, not known to exist.
        text.push_str("\n(the file listing stopped early, so more files may match: narrow the pattern)");
    }
    text
}

/// Media types that decode to noise as text (and would fill a context window
/// with replacement characters).
fn is_binary(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    ["image/", "audio/", "video/", "font/"].iter().any(|p| mime.starts_with(p))
        || matches!(
            mime.as_str(),
            "application/octet-stream"
                | "application/pdf"
                | "application/zip"
                | "application/gzip"
                | "application/x-tar"
                | "application/wasm"
        )
}

/// Maps the guarded client's refusals onto tool errors: a private address is
/// a security refusal, an off-list host a denial.
fn fetch_failure(e: EgressError) -> ToolFailure {
    match e {
        EgressError::NonPublicAddress { .. } => ToolFailure::Security(e.to_string()),
        EgressError::HostNotAllowed { .. } | EgressError::TooManyRedirects { .. } => ToolFailure::Denied(e.to_string()),
        EgressError::BadUrl(_) | EgressError::BadRequest(_) => ToolFailure::InvalidInput(e.to_string()),
        EgressError::Timeout(_) => ToolFailure::Timeout(e.to_string()),
        e => ToolFailure::Failed(e.to_string()),
    }
}

fn key(path: &str) -> String {
    path.trim_start_matches("./").to_string()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, ToolFailure> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(ToolFailure::from),
        Err(e) => Err(ToolFailure::Failed(format!("the sandbox operation stopped unexpectedly: {e}"))),
    }
}
