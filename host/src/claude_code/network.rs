//! The CLI's network when it runs its own tools. It runs in a network
//! namespace of its own ([`nexo_sandbox::network`]) whose ways out are:
//! - nexo's egress proxy, at `HTTP(S)_PROXY`, which lets through the
//!   model's endpoint alone, under the address guard, each connection
//!   audited as `claude-code`'s. Not the run's `net-hosts`: the CLI holds
//!   the operator's API key in its environment, where its own `Bash` can
//!   read it, so its tools reach only where that key goes anyway;
//! - at the same loopback ports as on the host, relays to nexo's MCP server
//!   for the CLI and to a model served on this machine.
//!
//! Nothing else is reachable: no other port, no UDP, no name resolved
//! inside. nexo's own `shell` and `fetch` tools, which the CLI calls over
//! MCP, have the run's `net-hosts`.

use std::net::TcpListener;
use std::sync::Arc;

use nexo_egress::{ConnectionShare, NetHosts};
use nexo_model::ModelError;
use nexo_sandbox::{Gateway, PROXY_ADDR};

use crate::capability::network::ProxiedNetwork;
use crate::host_call::AuditSink;
use crate::quota::RunBudget;
use crate::task::AbortOnDrop;

/// The model's endpoint, from its base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The host, as the URL names it (brackets removed).
    pub(crate) host: String,
    /// The port, the scheme's default if the URL names none.
    pub(crate) port: u16,
}

impl Endpoint {
    /// Reads `scheme://host[:port]/…`.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("the base URL `{url}` cannot be read: {e}"))?;
        let default = match uri.scheme_str() {
            Some("https") => 443,
            Some("http") => 80,
            _ => return Err(format!("the base URL `{url}` must start with http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| format!("the base URL `{url}` names no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(Endpoint { host, port: uri.port_u16().unwrap_or(default) })
    }

    /// Whether it is on this machine, where the CLI may connect to it
    /// directly.
    pub(crate) fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// The CLI's network for one prompt, before it starts.
pub(crate) struct CliNetwork {
    network: ProxiedNetwork,
    /// nexo's MCP server's port, and a loopback model's.
    forwards: Vec<u16>,
}

impl CliNetwork {
    /// The network for a CLI reaching the model at `base_url` (`named`:
    /// the operator gave it, rather than the default) and nexo's tools at
    /// `mcp_port`, its proxy's connections drawn from `connections` (the
    /// tenant's share). Nothing else: the CLI holds the operator's API key
    /// in its environment, where its own tools can read it, so they reach
    /// only where that key goes.
    pub(crate) fn new(
        base_url: &str,
        named: bool,
        mcp_port: u16,
        connections: Option<Arc<ConnectionShare>>,
    ) -> Result<CliNetwork, ModelError> {
        let config = |e: String| ModelError::Config(format!("--claude-builtin-tools: {e}"));
        let endpoint = Endpoint::parse(base_url).map_err(config)?;
        let mut forwards = vec![mcp_port];
        let mut granted = Vec::new();
        let mut exempt = Vec::new();
        if endpoint.is_loopback() {
            // Relayed in at the same address and port, which must be one the relay can take.
            if !matches!(endpoint.host.as_str(), "127.0.0.1" | "localhost") || endpoint.port == PROXY_ADDR.port() {
                return Err(config(format!(
                    "a model on this machine must be at http://127.0.0.1:PORT (or localhost), on a port other than \
                     {}, for the confined CLI to reach it; `{base_url}` is not",
                    PROXY_ADDR.port()
                )));
            }
            if endpoint.port != mcp_port {
                forwards.push(endpoint.port);
            }
        } else {
            granted.push(match endpoint.host.contains(':') {
                true => format!("[{}]:{}", endpoint.host, endpoint.port),
                false => format!("{}:{}", endpoint.host, endpoint.port),
            });
            // A model on the LAN the operator named is theirs to reach; the default never is.
            if named {
                exempt.push(endpoint.host.clone());
            }
        }
        let hosts = NetHosts::new(&granted).map_err(|e| config(format!("the model's endpoint: {e}")))?;
        let network =
            ProxiedNetwork::for_hosts(hosts, &[], &exempt, &RunBudget { connections, ..RunBudget::default() })
                .map_err(|e| config(e.to_string()))?;
        Ok(CliNetwork { network, forwards })
    }

    /// The loopback ports relayed into the CLI's namespace.
    pub(crate) fn forwards(&self) -> &[u16] {
        &self.forwards
    }

    /// Serves the listeners the CLI's namespace handed over (the proxy's,
    /// then one per forwarded port) until the returned value is dropped;
    /// the proxy's connections go to `audit`.
    pub(crate) fn serve(
        &self,
        listeners: Vec<TcpListener>,
        audit: Option<Arc<dyn AuditSink>>,
    ) -> std::io::Result<Serving> {
        if listeners.len() != 1 + self.forwards.len() {
            return Err(std::io::Error::other(format!(
                "{} listeners came from the CLI's namespace, where {} were made",
                listeners.len(),
                1 + self.forwards.len()
            )));
        }
        let mut listeners = listeners.into_iter();
        let proxy = listeners.next().ok_or_else(|| std::io::Error::other("no proxy listener came"))?;
        let proxy = self.network.gateway(audit, "claude-code").serve(proxy)?;
        let mut relays = Vec::new();
        for (listener, port) in listeners.zip(&self.forwards) {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            relays.push(AbortOnDrop(tokio::spawn(relay(listener, *port))));
        }
        Ok(Serving { proxy, _relays: relays })
    }
}

/// The CLI's network being served; dropped, it stops at once.
pub(crate) struct Serving {
    proxy: Box<dyn nexo_sandbox::Serving>,
    _relays: Vec<AbortOnDrop<()>>,
}

impl Serving {
    /// Stops, once the CLI has ended: resolves when each of the proxy's
    /// connections has been reported.
    pub(crate) async fn stop(self) {
        self.proxy.stop().await;
    }
}

/// Each connection on `listener` (inside the CLI's namespace) joined to
/// the same `port` on the host's loopback, until aborted. The connections
/// end with the task.
async fn relay(listener: tokio::net::TcpListener, port: u16) {
    let mut open = tokio::task::JoinSet::new();
    loop {
        let Ok((mut inside, _)) = listener.accept().await else {
            // Out of descriptors, say: try again shortly rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        open.spawn(async move {
            if let Ok(mut outside) = tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        });
        while open.try_join_next().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic

    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("https://api.anthropic.com").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.is_loopback()), ("api.anthropic.com", 443, false));
        let e = Endpoint::parse("http://127.0.0.1:8080/v1").unwrap();
        assert_eq!((e.port, e.is_loopback()), (8080, true));
        assert!(Endpoint::parse("http://[::1]:9/").unwrap().is_loopback());
        assert!(Endpoint::parse("ftp://x").is_err());
    }

    #[tokio::test]
    async fn the_cli_reaches_its_model_alone_through_the_proxy_or_a_relay() {
        let remote = CliNetwork::new("https://api.anthropic.com", false, 4000, None).unwrap();
        assert_eq!(remote.network.hosts().to_string(), "api.anthropic.com:443");
        assert_eq!(remote.forwards(), [4000]);
        let local = CliNetwork::new("http://127.0.0.1:8080", true, 4000, None).unwrap();
        assert_eq!(local.network.hosts(), &NetHosts::default());
        assert_eq!(local.forwards(), [4000, 8080]);
        for unrelayable in ["http://[::1]:8080", "http://127.0.0.2:8080", "http://127.0.0.1:3128"] {
            let err = CliNetwork::new(unrelayable, true, 4000, None).err().unwrap().to_string();
            assert!(err.contains("http://127.0.0.1:PORT"), "{unrelayable}: {err}");
        }
    }
}
