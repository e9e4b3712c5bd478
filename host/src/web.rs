//! Web access: the host's side of the one guarded HTTP client
//! ([`nexo_egress::GuardedClient`]).
//!
//! Every byte that leaves the process on a plugin's behalf goes through it:
//!
//! - the agent's `fetch` tool ([`Fetcher`]): hosts on the agent's
//!   `fetch-allow` list (and within the operator's `fetch-hosts`, if set),
//!   public addresses only, with no way to loosen that;
//! - the `outbound-http` import of search backends and sandbox providers
//!   ([`Egress`]): only the hosts the operator granted to that component
//!   ([`EgressGrant`]), with the operator's API key added by the host.
//!
//! The client resolves each name, refuses any non-public address, connects
//! only to the address it checked, sends GET with a fixed user agent and no
//! cookies, re-checks every redirect hop, and caps time and body size.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nexo_egress::{EgressError, GuardedClient, HostList, Origin, Policy, SecretHeader};

use crate::bindings::search::nexo::plugin::outbound_http;
use crate::truncate::head_bytes;

/// The most a fetched page contributes: 200 KB of its body.
pub const FETCH_MAX_BODY: usize = 200_000;

/// Time limit for one fetch, redirects included per hop. Default: 30 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a backend or provider receives from one response: 2 MiB.
pub const COMPONENT_MAX_BODY: usize = 2 * 1024 * 1024;

/// The client shared by every run that does not bring its own. Building it
/// loads the TLS roots once per process.
pub fn shared_client() -> Result<GuardedClient, String> {
    static CLIENT: OnceLock<Result<GuardedClient, String>> = OnceLock::new();
    CLIENT.get_or_init(|| GuardedClient::new().map_err(|e| e.to_string())).clone()
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
    pub fn egress(&self) -> Result<Option<Arc<Egress>>, String> {
        if self.hosts.is_empty() {
            if !self.allow_private.is_empty() || self.api_key.is_some() {
                return Err(
                    "`allow-private` and the API key need `hosts`: list the hosts the component may reach".into()
                );
            }
            return Ok(None);
        }
        let hosts = HostList::new(&self.hosts).map_err(|e| e.to_string())?;
        let client = match (&self.client, self.allow_private.is_empty()) {
            (Some(client), _) => client.clone(),
            (None, true) => shared_client()?,
            (None, false) => GuardedClient::builder()
                .allow_private(self.allow_private.iter().copied())
                .build()
                .map_err(|e| e.to_string())?,
        };
        if let Some(key) = &self.api_key {
            self.check_origins(key, &hosts)?;
        }
        let mut policy = Policy::new(hosts).max_body(COMPONENT_MAX_BODY).timeout(self.timeout.unwrap_or(FETCH_TIMEOUT));
        if let Some(key) = &self.api_key {
            if key.value.chars().count() < MIN_KEY_LEN {
                return Err(format!(
                    "the API key for `{}` is shorter than {MIN_KEY_LEN} characters; check the variable that holds it",
                    key.header
                ));
            }
            let mut secret =
                SecretHeader::with_prefix(&key.header, &key.prefix, &key.value).map_err(|e| e.to_string())?;
            if !key.origins.is_empty() {
                secret = secret.for_origins(&key.origins).map_err(|e| e.to_string())?;
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
    fn check_origins(&self, key: &ApiKey, hosts: &HostList) -> Result<(), String> {
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
    pub(crate) async fn send(
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

/// A fetched page, as the tools return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The final URL, after redirects.
    pub url: String,
    /// The HTTP status.
    pub status: u16,
    /// The `content-type` header.
    pub content_type: Option<String>,
    /// The body, raw, cut at [`FETCH_MAX_BODY`]. Untrusted input.
    pub body: String,
    /// Whether the body was cut.
    pub truncated: bool,
}

/// The fetch tool's access: the agent's allow-list, narrowed by the
/// operator's, through the guarded client with no private-address exemption.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: GuardedClient,
    policy: Policy,
}

impl Fetcher {
    /// The fetch access for an agent that lists `fetch_allow`, narrowed to
    /// `within` when the operator set it. `None` when the agent lists no
    /// hosts: it then gets no fetch tool at all.
    pub fn new(
        fetch_allow: &[String],
        within: Option<&[String]>,
        client: Option<GuardedClient>,
    ) -> Result<Option<Fetcher>, String> {
        if fetch_allow.is_empty() {
            return Ok(None);
        }
        // Three bytes over, so the cut below can end on a character boundary.
        let mut policy = Policy::new(HostList::new(fetch_allow).map_err(|e| format!("fetch-allow: {e}"))?)
            .max_body(FETCH_MAX_BODY + 3)
            .timeout(FETCH_TIMEOUT);
        if let Some(within) = within {
            policy = policy.also_within(HostList::new(within).map_err(|e| format!("fetch-hosts: {e}"))?);
        }
        let client = match client {
            Some(c) if c.has_exemptions() => {
                return Err("the fetch tool cannot use a client that exempts private addresses; \
                            exemptions are for search backends and model servers only"
                    .into());
            }
            Some(c) => c,
            None => shared_client()?,
        };
        Ok(Some(Fetcher { client, policy }))
    }

    /// The hosts the agent may fetch from.
    pub fn hosts(&self) -> &HostList {
        self.policy.hosts()
    }

    /// GETs `url`. Any refusal or failure is an error naming its cause.
    pub async fn fetch(&self, url: &str) -> Result<Page, EgressError> {
        let response = self.client.get(url, &[], &self.policy).await?;
        let (body, cut) = head_bytes(&response.body, FETCH_MAX_BODY);
        Ok(Page {
            url: response.url,
            status: response.status,
            content_type: response.content_type,
            body,
            truncated: cut || response.truncated,
        })
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
        assert!(grant.egress().unwrap_err().contains("need `hosts`"));
        assert!(EgressGrant::default().egress().unwrap().is_none());
    }

    #[test]
    fn short_keys_are_refused_and_fetch_never_takes_an_exempting_client() {
        let grant = EgressGrant {
            hosts: vec!["api.example.com".into()],
            api_key: Some(ApiKey { header: "X-Token".into(), value: "abc".into(), ..ApiKey::default() }),
            ..EgressGrant::default()
        };
        assert!(grant.egress().unwrap_err().contains("shorter than 8"));
        let exempting = GuardedClient::builder().allow_private(["10.0.0.5".parse().unwrap()]).build().unwrap();
        let err = Fetcher::new(&["example.com".into()], None, Some(exempting)).unwrap_err();
        assert!(err.contains("search backends and model servers only"), "{err}");
        // Nor a model provider's, which exempts its base URL's host.
        let exempting = GuardedClient::builder().allow_private_host("localhost").build().unwrap();
        let err = Fetcher::new(&["example.com".into()], None, Some(exempting)).unwrap_err();
        assert!(err.contains("exempts private addresses"), "{err}");
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
        let err = keyed(&["api.example.com"], &["api.example.com"], &[]).egress().unwrap_err();
        assert!(err.contains("`X-Token`") && err.contains("scheme://host[:port]"), "{err}");
        let err = keyed(&["api.example.com"], &["https://other.example.com"], &[]).egress().unwrap_err();
        assert!(err.contains("`X-Token`") && err.contains("add `other.example.com` to `hosts`"), "{err}");
        let err = keyed(&["api.example.com"], &["http://api.example.com:8080"], &[]).egress().unwrap_err();
        assert!(err.contains("plain-http") && err.contains("allow-private"), "{err}");
        let err = keyed(&["10.0.0.5"], &["http://10.0.0.5:8888"], &["10.0.0.6"]).egress().unwrap_err();
        assert!(err.contains("plain-http"), "{err}");
    }

    #[test]
    fn no_allow_list_means_no_fetcher() {
        assert!(Fetcher::new(&[], None, None).unwrap().is_none());
        assert!(Fetcher::new(&["*.example.com".into()], None, None).unwrap_err().contains("fetch-allow"));
    }
}
