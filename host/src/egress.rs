//! Web access: the host's side of the one guarded HTTP client
//! ([`nexo_egress::GuardedClient`]).
//!
//! Every byte that leaves the process on a plugin's behalf goes through it:
//!
//! - the agent's `fetch` tool (`capability::fetch`): hosts on the agent's
//!   `fetch-allow` list (and within the operator's `fetch-hosts`, if set),
//!   public addresses only, with no way to loosen that;
//! - the `outbound-http` import of search backends and sandbox providers
//!   ([`Egress`], served by [`EgressState`]): only the hosts the operator
//!   granted to that component ([`EgressGrant`]), with the operator's API
//!   key added by the host.
//!
//! The client resolves each name, refuses any non-public address, connects
//! only to the address it checked, sends GET with a fixed user agent and no
//! cookies, re-checks every redirect hop, and caps time and body size.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nexo_egress::{EgressError, GuardedClient, HostList, Origin, Policy, SecretHeader};

use nexo_model::BoxFuture;
use wasmtime::component::Linker;

use crate::bindings::search::nexo::plugin::outbound_http;
use crate::engine::{Engine, Limits};
use crate::error::{ConfigError, ToolError};
use crate::events::EventSink;
use crate::host_call::{CallContext, HostCall, LogBudget, guest};
use crate::instance::WorldLinker;
use crate::instance::{Host, base_linker};

/// The most a fetched page contributes: 200 KB of its body.
pub const FETCH_MAX_BODY: usize = 200_000;

/// Time limit for one fetch, redirects included per hop. Default: 30 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a backend or provider receives from one response: 2 MiB.
pub const COMPONENT_MAX_BODY: usize = 2 * 1024 * 1024;

/// The client shared by every run that does not bring its own. Building it
/// loads the TLS roots once per process.
pub fn shared_client() -> Result<GuardedClient, ConfigError> {
    static CLIENT: OnceLock<Result<GuardedClient, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| GuardedClient::new().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| ConfigError::invalid("web access", format!("cannot set up the HTTP client: {e}")))
}

fn grant_error(problem: impl Into<String>) -> ConfigError {
    ConfigError::invalid("grant", problem)
}

/// An API key the host adds to a component's requests, as a header. Its
/// value never enters the component, the logs or the events.
#[derive(Clone, Default)]
pub struct ApiKey {
    /// The header, for example `X-Subscription-Token` or `Authorization`.
    pub header: String,
    /// Put before the key in the header, for example `Bearer `.
    pub prefix: String,
    /// The key. At least [`MIN_KEY_LEN`] characters, so that a response
    /// echoing it can be recognized and scrubbed.
    pub value: String,
    /// The exact origins (`scheme://host[:port]`) the key is sent to. Empty,
    /// the default: `https://<host>:443` for each granted host (that host
    /// only, not its subdomains). Each must be on a granted host, and be
    /// https or on an `allow-private` address.
    pub origins: Vec<String>,
}

/// The shortest API key accepted: shorter strings turn up in ordinary
/// responses, so scrubbing them would be unreliable.
pub const MIN_KEY_LEN: usize = 8;

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({}: <redacted>)", self.header)
    }
}

/// What the operator grants one search backend or sandbox provider for its
/// `outbound-http` and `config` imports. The default grants nothing: every
/// request is refused.
#[derive(Debug, Clone, Default)]
pub struct EgressGrant {
    /// Hosts the component may reach; `example.com` covers its subdomains.
    pub hosts: Vec<String>,
    /// Exact private addresses this component may reach, for a service the
    /// operator runs on a private network (a self-hosted SearXNG). Never
    /// applies to the fetch tool.
    pub allow_private: Vec<IpAddr>,
    /// The API key the host adds to requests for its origins (by default
    /// `https://<host>:443` for each of `hosts`).
    pub api_key: Option<ApiKey>,
    /// Plain settings served by the `config` import (never secrets).
    pub settings: BTreeMap<String, String>,
    /// Time limit for one request. Default: 30 s.
    pub timeout: Option<Duration>,
    /// The client to use instead of building one (tests inject a resolver
    /// this way). It replaces the one this grant would build, so its own
    /// private-address exemptions apply instead of `allow_private`.
    pub client: Option<GuardedClient>,
}

impl EgressGrant {
    /// Builds the egress of a component under this grant, or `None` when no
    /// host is granted (every request is then refused).
    pub fn egress(&self) -> Result<Option<Arc<Egress>>, ConfigError> {
        if self.hosts.is_empty() {
            if !self.allow_private.is_empty() || self.api_key.is_some() {
                return Err(grant_error(
                    "`allow-private` and the API key need `hosts`: list the hosts the component may reach",
                ));
            }
            return Ok(None);
        }
        let hosts = HostList::new(&self.hosts).map_err(|e| grant_error(e.to_string()))?;
        let client = match (&self.client, self.allow_private.is_empty()) {
            (Some(client), _) => client.clone(),
            (None, true) => shared_client()?,
            (None, false) => GuardedClient::builder()
                .allow_private(self.allow_private.iter().copied())
                .build()
                .map_err(|e| grant_error(e.to_string()))?,
        };
        if let Some(key) = &self.api_key {
            self.check_origins(key, &hosts)?;
        }
        let mut policy = Policy::new(hosts).max_body(COMPONENT_MAX_BODY).timeout(self.timeout.unwrap_or(FETCH_TIMEOUT));
        if let Some(key) = &self.api_key {
            if key.value.chars().count() < MIN_KEY_LEN {
                return Err(grant_error(format!(
                    "the API key for `{}` is shorter than {MIN_KEY_LEN} characters; check the variable that holds it",
                    key.header
                )));
            }
            let mut secret = SecretHeader::with_prefix(&key.header, &key.prefix, &key.value)
                .map_err(|e| grant_error(e.to_string()))?;
            if !key.origins.is_empty() {
                secret = secret.for_origins(&key.origins).map_err(|e| grant_error(e.to_string()))?;
            }
            policy = policy.inject(secret);
        }
        Ok(Some(Arc::new(Egress { client, policy })))
    }
}

impl EgressGrant {
    /// The origins the API key goes to, as `scheme://host:port`: the key's
    /// own, or `https://<host>:443` for each granted host. Empty without a
    /// key or with a bad entry ([`EgressGrant::egress`] reports those).
    pub fn key_origins(&self) -> Vec<String> {
        let Some(key) = &self.api_key else { return Vec::new() };
        if !key.origins.is_empty() {
            return key.origins.iter().filter_map(|o| Origin::parse(o).ok()).map(|o| o.to_string()).collect();
        }
        let Ok(hosts) = HostList::new(&self.hosts) else { return Vec::new() };
        hosts
            .entries()
            .iter()
            .map(|h| if h.contains(':') { format!("https://[{h}]:443") } else { format!("https://{h}:443") })
            .collect()
    }

    /// Each origin of `key` parses, is on a granted host, and is https or
    /// on an exempted private address: a key never crosses the internet in
    /// cleartext.
    fn check_origins(&self, key: &ApiKey, hosts: &HostList) -> Result<(), ConfigError> {
        self.check_origins_text(key, hosts).map_err(grant_error)
    }

    fn check_origins_text(&self, key: &ApiKey, hosts: &HostList) -> Result<(), String> {
        let header = &key.header;
        for text in &key.origins {
            let origin = Origin::parse(text)
                .map_err(|e| format!("the API key for `{header}`: {e}; fix the entry in the key's `origins`"))?;
            if !hosts.matches(&origin.host()) {
                return Err(format!(
                    "the API key for `{header}` names the origin `{text}`, whose host is not granted (hosts: {hosts}); \
                     add `{}` to `hosts`, or fix the origin",
                    origin.host()
                ));
            }
            // A name is checked at request time: it must resolve to an exempt address.
            let private_ok = match origin.ip() {
                Some(ip) => self.allow_private.contains(&ip),
                None => !self.allow_private.is_empty(),
            };
            // A caller's own client brings its own exemptions; it still refuses plain http elsewhere.
            if !origin.is_https() && !private_ok && self.client.is_none() {
                return Err(format!(
                    "the API key for `{header}` names the plain-http origin `{text}`; a key is sent only over https, \
                     or over http to an address in `allow-private`: use an https origin, or list the service's \
                     address in `allow-private`"
                ));
            }
        }
        Ok(())
    }
}

/// The per-instance state of a search backend or sandbox provider: its
/// outbound HTTP (`None` refuses every request), its plain settings, and
/// what the host-call path needs. Every import of these worlds goes through
/// the path with this as its context.
#[derive(Debug)]
pub struct EgressState {
    /// The component's outbound HTTP.
    pub egress: Option<Arc<Egress>>,
    /// What the `config` import serves.
    pub settings: BTreeMap<String, String>,
    /// The plugin's name, for logs and refusals.
    pub plugin: Arc<str>,
    arg_limit: usize,
    log: LogBudget,
}

impl EgressState {
    /// The state for `plugin` under `grant` and the run's `limits`.
    pub fn new(plugin: &str, grant: &EgressGrant, limits: &Limits) -> Result<Self, ConfigError> {
        let egress =
            grant.egress().map_err(|e| ConfigError::Egress { plugin: plugin.to_string(), reason: e.to_string() })?;
        Ok(EgressState { egress, settings: grant.settings.clone(), ..EgressState::nothing(plugin, limits) })
    }

    /// A state that grants nothing: no host, no settings.
    pub fn nothing(plugin: &str, limits: &Limits) -> Self {
        EgressState {
            egress: None,
            settings: BTreeMap::new(),
            plugin: Arc::from(plugin),
            arg_limit: limits.host_arg_bytes,
            log: LogBudget::new(limits),
        }
    }

    /// The linker of the worlds whose only way out is `outbound-http` (search
    /// backends and sandbox providers): WASI, `types`, `log`,
    /// `outbound-http` and `config`. Built once per engine.
    pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Arc<WorldLinker<Host<EgressState>>>> {
        engine.shared(|engine| {
            let mut linker: Linker<Host<EgressState>> = base_linker::<EgressState>(engine)?;
            crate::log::link::<EgressState, EgressState>(&mut linker, |w| w)?;
            linker.instance(crate::manifest::interface::OUTBOUND_HTTP)?.func_wrap_async(
                "send",
                |store, (request,): (outbound_http::Request,)| {
                    Box::new(async move { Ok((guest(&store.data().world, &Send, request).await,)) })
                },
            )?;
            linker.instance(crate::manifest::interface::CONFIG)?.func_wrap_async(
                "get",
                |store, (key,): (String,)| {
                    Box::new(async move { Ok((guest(&store.data().world, &Get, key).await.unwrap_or(None),)) })
                },
            )?;
            Ok(WorldLinker(linker))
        })
    }
}

impl CallContext for EgressState {
    fn plugin(&self) -> &str {
        &self.plugin
    }

    /// These worlds name no capability: their authority is the egress grant,
    /// which the guarded client enforces on every request.
    fn authorize(&self, _gate: &crate::authority::Gate<'_>, _call: &str, _ask: Option<&str>) -> Result<(), ToolError> {
        Ok(())
    }

    fn arg_limit(&self) -> usize {
        self.arg_limit
    }

    fn events(&self) -> &dyn EventSink {
        crate::events::SILENT
    }

    fn log(&self) -> &LogBudget {
        &self.log
    }
}

/// `outbound-http.send`: one GET through the guarded client, under the
/// component's grant, with the host's key added.
#[derive(Debug, Clone, Copy)]
pub struct Send;

impl HostCall<EgressState> for Send {
    type Args = outbound_http::Request;
    type Output = outbound_http::Response;
    type Error = outbound_http::HttpError;

    fn name(&self) -> &'static str {
        "send"
    }

    fn detail<'a>(&self, request: &'a outbound_http::Request) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(&request.url)
    }

    fn arg_bytes(&self, request: &outbound_http::Request) -> usize {
        request.url.len() + request.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }

    fn execute<'a>(
        &'a self,
        cx: &'a EgressState,
        request: outbound_http::Request,
    ) -> BoxFuture<'a, Result<outbound_http::Response, outbound_http::HttpError>> {
        Box::pin(async move {
            let Some(egress) = cx.egress.clone() else {
                let host = crate::truncate::head_chars(request.url.split('/').nth(2).unwrap_or(""), 100);
                tracing::info!(target: "nexo::egress", plugin = &*cx.plugin, host, verdict = "denied");
                return Err(outbound_http::HttpError::Denied(format!(
                    "no hosts are granted to `{}`: the operator lists the hosts a component may reach \
                     (`hosts` in its section of the config file)",
                    cx.plugin
                )));
            };
            egress.send(&cx.plugin, request).await
        })
    }
}

/// `config.get`: one of the operator's plain settings.
#[derive(Debug, Clone, Copy)]
pub struct Get;

impl HostCall<EgressState> for Get {
    type Args = String;
    type Output = Option<String>;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "get"
    }

    fn arg_bytes(&self, key: &String) -> usize {
        key.len()
    }

    fn execute<'a>(&'a self, cx: &'a EgressState, key: String) -> BoxFuture<'a, Result<Option<String>, ToolError>> {
        Box::pin(async move { Ok(cx.settings.get(&key).cloned()) })
    }
}

/// `denied` is the egress grant's refusal (a host, an address, a URL).
impl crate::host_call::Refusal for outbound_http::HttpError {
    fn refusal(&self) -> Option<&'static str> {
        match self {
            outbound_http::HttpError::Denied(_) => Some("denied"),
            _ => None,
        }
    }
}

impl From<ToolError> for outbound_http::HttpError {
    fn from(e: ToolError) -> Self {
        outbound_http::HttpError::Denied(e.message().to_string())
    }
}

crate::guest_only!(Send, EgressState);
crate::guest_only!(Get, EgressState);

/// A component's outbound HTTP: the guarded client and the policy of its
/// grant. The client adds the key and scrubs it from any response that
/// echoes it, so it never reaches the component.
pub struct Egress {
    client: GuardedClient,
    policy: Policy,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl Egress {
    /// Sends a component's request.
    pub async fn send(
        &self,
        plugin: &str,
        request: outbound_http::Request,
    ) -> Result<outbound_http::Response, outbound_http::HttpError> {
        match self.client.get(&request.url, &request.headers, &self.policy).await {
            Ok(response) => Ok(outbound_http::Response {
                status: response.status,
                headers: response.headers,
                body: response.body,
                truncated: response.truncated,
            }),
            Err(e) => {
                tracing::info!(target: "nexo::egress", plugin, error = %e, "request refused or failed");
                Err(match e {
                    e if e.is_refusal() => outbound_http::HttpError::Denied(e.to_string()),
                    EgressError::Timeout(m) => outbound_http::HttpError::Timeout(m),
                    e => outbound_http::HttpError::Failed(e.to_string()),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_key_never_shows_in_debug_output() {
        let grant = EgressGrant {
            hosts: vec!["api.example.com".into()],
            api_key: Some(ApiKey { header: "X-Token".into(), value: "sk-very-secret".into(), ..ApiKey::default() }),
            ..EgressGrant::default()
        };
        assert!(!format!("{grant:?}").contains("sk-very-secret"));
    }

    #[test]
    fn a_key_or_private_address_without_hosts_is_a_configuration_error() {
        let grant = EgressGrant { allow_private: vec!["10.0.0.5".parse().unwrap()], ..EgressGrant::default() };
        assert!(grant.egress().unwrap_err().to_string().contains("need `hosts`"));
        assert!(EgressGrant::default().egress().unwrap().is_none());
    }

    #[test]
    fn short_keys_are_refused() {
        let grant = EgressGrant {
            hosts: vec!["api.example.com".into()],
            api_key: Some(ApiKey { header: "X-Token".into(), value: "abc".into(), ..ApiKey::default() }),
            ..EgressGrant::default()
        };
        assert!(grant.egress().unwrap_err().to_string().contains("shorter than 8"));
    }

    fn keyed(hosts: &[&str], origins: &[&str], allow_private: &[&str]) -> EgressGrant {
        EgressGrant {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allow_private: allow_private.iter().map(|a| a.parse().unwrap()).collect(),
            api_key: Some(ApiKey {
                header: "X-Token".into(),
                value: "sk-long-enough-key".into(),
                origins: origins.iter().map(|o| o.to_string()).collect(),
                ..ApiKey::default()
            }),
            ..EgressGrant::default()
        }
    }

    #[test]
    fn the_key_goes_to_https_443_of_each_granted_host_by_default() {
        let grant = keyed(&["api.example.com", "2001:db8::1"], &[], &[]);
        assert_eq!(grant.key_origins(), ["https://api.example.com:443", "https://[2001:db8::1]:443"]);
        let egress = grant.egress().unwrap().unwrap();
        assert_eq!(egress.policy.secrets_for("https://api.example.com/v1"), ["x-token"]);
        for url in ["http://api.example.com/", "https://api.example.com:8443/", "https://eu.api.example.com/"] {
            assert!(egress.policy.secrets_for(url).is_empty(), "{url}");
        }
    }

    #[test]
    fn explicit_origins_replace_the_default() {
        let grant = keyed(
            &["search.internal", "10.0.0.5"],
            &["https://search.internal:8443", "http://10.0.0.5:8888"],
            &["10.0.0.5"],
        );
        assert_eq!(grant.key_origins(), ["https://search.internal:8443", "http://10.0.0.5:8888"]);
        let egress = grant.egress().unwrap().unwrap();
        assert_eq!(egress.policy.secrets_for("https://search.internal:8443/q"), ["x-token"]);
        assert_eq!(egress.policy.secrets_for("http://10.0.0.5:8888/search"), ["x-token"]);
        for url in ["https://search.internal/", "http://10.0.0.5/", "https://10.0.0.5:8888/"] {
            assert!(egress.policy.secrets_for(url).is_empty(), "{url}");
        }
    }

    #[test]
    fn bad_key_origins_are_configuration_errors_that_name_the_key_and_the_fix() {
        let err = keyed(&["api.example.com"], &["api.example.com"], &[]).egress().unwrap_err().to_string();
        assert!(err.contains("`X-Token`") && err.contains("scheme://host[:port]"), "{err}");
        let err = keyed(&["api.example.com"], &["https://other.example.com"], &[]).egress().unwrap_err().to_string();
        assert!(err.contains("`X-Token`") && err.contains("add `other.example.com` to `hosts`"), "{err}");
        let err = keyed(&["api.example.com"], &["http://api.example.com:8080"], &[]).egress().unwrap_err().to_string();
        assert!(err.contains("plain-http") && err.contains("allow-private"), "{err}");
        let err = keyed(&["10.0.0.5"], &["http://10.0.0.5:8888"], &["10.0.0.6"]).egress().unwrap_err().to_string();
        assert!(err.contains("plain-http"), "{err}");
    }
}
