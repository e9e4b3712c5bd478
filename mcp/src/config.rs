//! `[mcp.NAME]` tables: the operator's config as written ([`ServerConfig`]),
//! and validated ([`Server`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Seconds per tool call unless `timeout` says otherwise.
pub const DEFAULT_CALL_TIMEOUT: u64 = 60;
/// Seconds for spawn or connect, initialize and the tool list unless `connect-timeout` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: u64 = 30;

/// One `[mcp.NAME]` table of the operator's config file, as written.
///
/// A stdio server has `command` (and maybe `args`, `env`, `cwd`, `confine`,
/// `network` or `net-hosts`); an HTTP server has `url` (and maybe `headers`, one token
/// source, `allow-private`). [`Server::new`] checks the combination. `Debug`
/// shows no token and no `env` or `headers` values.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServerConfig {
    /// stdio: the program to start (looked up on `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: its whole environment (plus the host's `PATH` unless this sets one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: its working directory; with `confine`, the one directory it may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// http: the streamable-HTTP endpoint, `http(s)://host[:port]/path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: headers sent with every request (an `authorization` here is sent as a secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// http: a bearer token, as written in the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// http: the environment variable of the host holding the bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// http: a file holding the bearer token (surrounding whitespace trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// http: a command (run by `/bin/sh -c` at each connection) printing the bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_command: Option<String>,
    /// http: the URL's host may be a private or loopback address; stdio
    /// with `net-hosts`: so may those hosts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_private: bool,
    /// stdio: run under OS confinement (only the system view and its own program readable, only `cwd` writable,
    /// no network).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confine: bool,
    /// Confined stdio: keep network access.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Confined stdio: network to these hosts only (`HOST[:PORT]`, as the
    /// shell's `net-hosts`), through nexo's egress proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_hosts: Vec<String>,
    /// Seconds per tool call (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Seconds for spawn or connect, initialize and the tool list (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<u64>,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values of env, headers and the token can be credentials: names only.
        f.debug_struct("ServerConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("url", &self.url.as_deref().map(strip_query))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_env", &self.token_env)
            .field("token_file", &self.token_file)
            .field("token_command", &self.token_command.as_ref().map(|_| "<command>"))
            .field("allow_private", &self.allow_private)
            .field("confine", &self.confine)
            .field("network", &self.network)
            .field("net_hosts", &self.net_hosts)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ServerConfig {
    /// Whether it is a confined server the operator gave network
    /// (`network`, or `net-hosts`): it can send what it is given, though
    /// it is confined otherwise.
    pub fn confined_with_network(&self) -> bool {
        self.confine && (self.network || !self.net_hosts.is_empty())
    }
}

fn strip_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or_default()
}

/// Why a `[mcp.NAME]` table was refused: names the server, the key and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[mcp.{server}]: {message}")]
pub struct ConfigError {
    server: String,
    message: String,
}

impl ConfigError {
    fn new(server: &str, message: impl Into<String>) -> Self {
        ConfigError { server: server.to_string(), message: message.into() }
    }

    /// The server's name, as written.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The message without the `[mcp.NAME]` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Where a bearer token comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum TokenSource {
    None,
    Static(String),
    Env(String),
    File(PathBuf),
    Command(String),
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl TokenSource {
    /// Which source, never its value.
    pub(crate) fn describe(&self) -> String {
        match self {
            TokenSource::None => "no token".into(),
            TokenSource::Static(_) => "token from the config".into(),
            TokenSource::Env(var) => format!("token from env {var}"),
            TokenSource::File(path) => format!("token from file {}", path.display()),
            TokenSource::Command(_) => "token from token-command".into(),
        }
    }
}

/// A stdio server's launch.
#[derive(Debug, Clone)]
pub(crate) struct StdioSpec {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    /// Values may be secrets: never shown.
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    /// `Some(network)` when confined.
    pub(crate) confine: Option<ServerNet>,
}

/// A confined stdio server's network.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ServerNet {
    /// None at all.
    None,
    /// The host's (`network = true`).
    Host,
    /// These hosts only, through the egress proxy (`net-hosts`); with
    /// `allow-private`, they may be private or loopback addresses.
    Proxied(nexo_egress::NetHosts, bool),
}

/// An HTTP server's endpoint.
#[derive(Debug, Clone)]
pub(crate) struct HttpSpec {
    pub(crate) url: url::Url,
    /// `scheme://host[:port]`, as [`nexo_egress::Origin::parse`] reads it.
    pub(crate) origin: String,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) token: TokenSource,
    pub(crate) allow_private: bool,
}

/// How a server is reached.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    Stdio(StdioSpec),
    Http(HttpSpec),
}

/// A validated `[mcp.NAME]` server. `Debug` shows no secret.
#[derive(Clone)]
pub struct Server {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("transport", &self.describe())
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

const STDIO_KEYS: &str = "`args`, `env`, `cwd`, `confine`, `network` and `net-hosts`";
const HTTP_KEYS: &str = "`headers`, `token`, `token-env`, `token-file`, `token-command` and `allow-private`";

impl Server {
    /// Validates one `[mcp.NAME]` table.
    pub fn new(name: &str, config: ServerConfig) -> Result<Server, ConfigError> {
        check_name(name)?;
        let err = |message: String| ConfigError::new(name, message);
        let call_timeout = seconds(name, "timeout", config.timeout, DEFAULT_CALL_TIMEOUT)?;
        let connect_timeout = seconds(name, "connect-timeout", config.connect_timeout, DEFAULT_CONNECT_TIMEOUT)?;
        let transport = match (&config.command, &config.url) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "has both `command` and `url`; a server is either a program nexo starts (`command`) or an HTTP \
                     endpoint (`url`): remove one"
                        .into(),
                ));
            }
            (None, None) => {
                return Err(err(
                    "has neither `command` nor `url`; set `command` (and `args`) for a server nexo starts, or `url` \
                     for a streamable-HTTP server"
                        .into(),
                ));
            }
            (Some(command), None) => Transport::Stdio(stdio_spec(name, command, &config)?),
            (None, Some(url)) => Transport::Http(http_spec(name, url, &config)?),
        };
        Ok(Server { name: name.to_string(), transport, call_timeout, connect_timeout })
    }

    /// The server's name, the `NAME` of `[mcp.NAME]`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The time limit of one tool call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The time limit for spawn or connect, initialize and the tool list.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// One line for `nexo inspect`, e.g. `stdio: node …/index.js (confined, no network)` or
    /// `http: https://host/mcp (token from env FOO)`; never a token or env value.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio(s) => {
                let mut line = format!("stdio: {}", shorten(&s.command));
                for arg in &s.args {
                    line.push(' ');
                    line.push_str(&shorten(arg));
                }
                let mut notes = Vec::new();
                match &s.confine {
                    Some(ServerNet::None) => notes.push("confined, no network".to_string()),
                    Some(ServerNet::Host) => notes.push("confined, with network".to_string()),
                    Some(ServerNet::Proxied(hosts, private)) => notes.push(format!(
                        "confined, network to {hosts}{} through nexo's egress proxy",
                        if *private { " (private addresses allowed)" } else { "" }
                    )),
                    None => {}
                }
                if let Some(cwd) = &s.cwd {
                    notes.push(format!("cwd {}", cwd.display()));
                }
                if !s.env.is_empty() {
                    notes.push(format!("env {}", s.env.keys().cloned().collect::<Vec<_>>().join(", ")));
                }
                if !notes.is_empty() {
                    line.push_str(&format!(" ({})", notes.join("; ")));
                }
                line
            }
            Transport::Http(h) => {
                let mut notes = vec![h.token.describe()];
                if h.allow_private {
                    notes.push("private address allowed".into());
                }
                if !h.headers.is_empty() {
                    notes.push(format!("headers {}", h.headers.keys().cloned().collect::<Vec<_>>().join(", ")));
                }
                format!("http: {} ({})", shown_url(&h.url), notes.join("; "))
            }
        }
    }

    /// Whether it is a confined stdio server with `net-hosts`.
    pub fn has_net_hosts(&self) -> bool {
        matches!(&self.transport, Transport::Stdio(StdioSpec { confine: Some(ServerNet::Proxied(..)), .. }))
    }

    /// Whether the server is a local process speaking over its stdio (not
    /// a streamable-HTTP server).
    pub fn is_stdio(&self) -> bool {
        matches!(self.transport, Transport::Stdio(_))
    }
}

/// Scheme, host, port and path: never a query.
pub(crate) fn shown_url(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
        None => format!("{}://{host}{}", url.scheme(), url.path()),
    }
}

/// A long path argument as `…/file`, so the line stays readable.
fn shorten(arg: &str) -> String {
    if arg.chars().count() > 40
        && let Some((_, last)) = arg.rsplit_once('/')
        && !last.is_empty()
    {
        return format!("…/{last}");
    }
    arg.to_string()
}

/// Whether `name` is a valid server name: 1 to 32 characters of a-z, 0-9
/// and `-`, starting with a letter or digit. No `_`, so the model's tool
/// names `mcp__NAME__TOOL` stay unambiguous.
pub fn is_server_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

fn check_name(name: &str) -> Result<(), ConfigError> {
    if is_server_name(name) {
        return Ok(());
    }
    Err(ConfigError::new(
        name,
        "is not a valid server name: use 1 to 32 characters of a-z, 0-9 and `-`, starting with a letter or digit \
         (no `_`, so the model's tool names `mcp__NAME__TOOL` stay unambiguous)",
    ))
}

fn seconds(name: &str, key: &str, value: Option<u64>, default: u64) -> Result<Duration, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::new(name, format!("`{key}` is 0; give a number of seconds above 0"))),
        Some(s) if s > 24 * 3600 => {
            Err(ConfigError::new(name, format!("`{key}` is {s} seconds, more than a day; give at most 86400")))
        }
        Some(s) => Ok(Duration::from_secs(s)),
        None => Ok(Duration::from_secs(default)),
    }
}

fn stdio_spec(name: &str, command: &str, config: &ServerConfig) -> Result<StdioSpec, ConfigError> {
    let err = |message: String| ConfigError::new(name, message);
    let mut http_keys = Vec::new();
    if !config.headers.is_empty() {
        http_keys.push("headers");
    }
    for (key, set) in [
        ("token", config.token.is_some()),
        ("token-env", config.token_env.is_some()),
        ("token-file", config.token_file.is_some()),
        ("token-command", config.token_command.is_some()),
        ("allow-private", config.allow_private && config.net_hosts.is_empty()),
    ] {
        if set {
            http_keys.push(key);
        }
    }
    if let Some(key) = http_keys.first() {
        return Err(err(format!(
            "sets `{key}`, which applies only to HTTP servers (`url`){}, but this server has `command`; remove it \
             (an HTTP server takes {HTTP_KEYS})",
            if *key == "allow-private" { " and to servers with `net-hosts`" } else { "" }
        )));
    }
    if command.trim().is_empty() || command.contains('\0') {
        return Err(err("`command` is empty; name the program to start, e.g. `command = \"node\"`".into()));
    }
    if config.args.iter().any(|a| a.contains('\0')) {
        return Err(err("an entry of `args` contains a NUL byte; remove it".into()));
    }
    for (key, value) in &config.env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(err(format!(
                "`env` has a malformed variable {key:?}: names must be non-empty without `=` or NUL, values \
                 without NUL"
            )));
        }
    }
    if config.network && !config.confine {
        return Err(err(
            "sets `network` without `confine = true`; an unconfined server always has the network, so remove \
             `network`, or add `confine = true`"
                .into(),
        ));
    }
    if !config.net_hosts.is_empty() && !config.confine {
        return Err(err(
            "sets `net-hosts` without `confine = true`; an unconfined server always has the whole network, so add \
             `confine = true` (or remove `net-hosts`)"
                .into(),
        ));
    }
    if !config.net_hosts.is_empty() && config.network {
        return Err(err(
            "sets both `network = true` (the host's whole network) and `net-hosts` (only these hosts, through \
             nexo's egress proxy); keep one"
                .into(),
        ));
    }
    let net = match (config.network, config.net_hosts.is_empty()) {
        (true, _) => ServerNet::Host,
        (false, true) => ServerNet::None,
        (false, false) => ServerNet::Proxied(
            nexo_egress::NetHosts::new(&config.net_hosts).map_err(|e| err(format!("`net-hosts`: {e}")))?,
            config.allow_private,
        ),
    };
    if config.confine {
        match &config.cwd {
            None => {
                return Err(err(
                    "sets `confine = true` without `cwd`; a confined server may write only its working directory, \
                     so set `cwd` to that directory (an absolute path)"
                        .into(),
                ));
            }
            Some(cwd) if !cwd.is_absolute() => {
                return Err(err(format!(
                    "`cwd` is {}, a relative path; with `confine = true` it is the one writable directory, so \
                     give an absolute path",
                    cwd.display()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(StdioSpec {
        command: command.to_string(),
        args: config.args.clone(),
        env: config.env.clone(),
        cwd: config.cwd.clone(),
        confine: config.confine.then_some(net),
    })
}

/// Query parameter names that carry credentials; refused in a `url`.
fn credential_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["token", "key", "secret", "auth", "pass", "sig", "credential", "session", "code"].iter().any(|w| lower.contains(w))
}

fn http_spec(name: &str, raw: &str, config: &ServerConfig) -> Result<HttpSpec, ConfigError> {
    let err = |message: String| ConfigError::new(name, message);
    let mut stdio_keys = Vec::new();
    if !config.args.is_empty() {
        stdio_keys.push("args");
    }
    if !config.env.is_empty() {
        stdio_keys.push("env");
    }
    for (key, set) in [
        ("cwd", config.cwd.is_some()),
        ("confine", config.confine),
        ("network", config.network),
        ("net-hosts", !config.net_hosts.is_empty()),
    ] {
        if set {
            stdio_keys.push(key);
        }
    }
    if let Some(key) = stdio_keys.first() {
        return Err(err(format!(
            "sets `{key}`, which applies only to servers nexo starts (`command`), but this server has `url`; \
             remove it (a stdio server takes {STDIO_KEYS})"
        )));
    }
    let url = url::Url::parse(raw)
        .map_err(|e| err(format!("`url` is not a valid URL ({e}); write it like `https://example.com/mcp`",)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(err(format!("`url` uses the scheme `{}`; use an http or https URL", url.scheme())));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(err(
            "`url` carries credentials (`user:password@`); remove them and give the token with `token-env`, \
             `token-file` or `token-command`"
                .into(),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(err("`url` has no host; write it like `https://example.com/mcp`".into()));
    }
    if let Some((param, _)) = url.query_pairs().find(|(k, _)| credential_like(k)) {
        return Err(err(format!(
            "`url` carries a credential in its query (`{param}=`); URLs end up in logs, so remove it and give the \
             token with `token-env`, `token-file` or `token-command` (sent as `Authorization: Bearer`)"
        )));
    }
    let sources: Vec<&str> = [
        ("token", config.token.is_some()),
        ("token-env", config.token_env.is_some()),
        ("token-file", config.token_file.is_some()),
        ("token-command", config.token_command.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(key, _)| key)
    .collect();
    if sources.len() > 1 {
        return Err(err(format!(
            "sets {}; give the token one way only: keep one of them",
            sources.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" and ")
        )));
    }
    let token = if let Some(t) = &config.token {
        if t.trim().is_empty() {
            return Err(err("`token` is empty; give the token, or remove the key".into()));
        }
        TokenSource::Static(t.trim().to_string())
    } else if let Some(var) = &config.token_env {
        if var.is_empty() || var.contains(['=', '\0']) {
            return Err(err(format!("`token-env` {var:?} is not a valid variable name; name the variable")));
        }
        TokenSource::Env(var.clone())
    } else if let Some(path) = &config.token_file {
        if path.as_os_str().is_empty() {
            return Err(err("`token-file` is empty; give the path of the file holding the token".into()));
        }
        TokenSource::File(path.clone())
    } else if let Some(cmd) = &config.token_command {
        if cmd.trim().is_empty() || cmd.contains('\0') {
            return Err(err("`token-command` is empty; give a shell command that prints the token".into()));
        }
        TokenSource::Command(cmd.clone())
    } else {
        TokenSource::None
    };
    let mut headers = BTreeMap::new();
    for (key, value) in &config.headers {
        let lower = key.to_ascii_lowercase();
        if lower == "authorization" {
            if value.trim().is_empty() || http::HeaderValue::from_str(value).is_err() {
                return Err(err("`headers.authorization` is not a valid header value; fix or remove it".into()));
            }
            headers.insert(lower, value.clone());
            continue;
        }
        nexo_egress::Policy::new(nexo_egress::HostList::default())
            .header(key, value)
            .map_err(|e| err(format!("`headers.{key}` cannot be sent: {e}; remove it")))?;
        if headers.insert(lower, value.clone()).is_some() {
            return Err(err(format!("`headers` names `{key}` twice (header names ignore case); keep one")));
        }
    }
    let has_secret = token != TokenSource::None || headers.contains_key("authorization");
    if has_secret && url.scheme() == "http" && !config.allow_private {
        return Err(err(
            "`url` is plain http, and nexo sends a token only over https (or to a private address the operator \
             allowed); use an https URL, or set `allow-private = true` for a server on your own machine or network"
                .into(),
        ));
    }
    let origin = url.origin().ascii_serialization();
    Ok(HttpSpec { url, origin, headers, token, allow_private: config.allow_private })
}
