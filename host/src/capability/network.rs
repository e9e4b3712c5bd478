//! Network for confined programs: what a run granted `net-hosts` gives its
//! shell commands, and what an `[mcp.NAME]` server's own `net-hosts` give
//! that confined server. Each command or server runs in a network namespace
//! of its own whose one way out is nexo's egress proxy
//! ([`nexo_egress::EgressProxy`]), served for it alone: its hosts and
//! ports, the address guard on every address (with the operator's
//! `[sandbox] net-allow-private` exemptions, nothing more), the run's
//! egress allowance on both directions' bytes, and each connection in the
//! tenant's audit log, naming who made it.

use std::net::IpAddr;
use std::sync::Arc;

use nexo_egress::{Connection, ConnectionLog, EgressProxy, GuardedClient, Meter, NetHosts, ProxyPolicy};
use nexo_mcp::ServerNetwork;
use nexo_sandbox::Gateway;

use crate::egress::shared_client;
use crate::error::ConfigError;
use crate::host_call::AuditSink;

/// A grant of network to confined programs: hosts, through the proxy.
#[derive(Debug, Clone)]
pub struct ProxiedNetwork {
    client: GuardedClient,
    hosts: NetHosts,
    meter: Option<Arc<Meter>>,
}

impl ProxiedNetwork {
    /// The network `hosts` grant, exempting `private` from the address
    /// guard, counted in `meter`; `None` when no host is granted.
    pub fn new(
        hosts: &[String],
        private: &[IpAddr],
        meter: Option<Arc<Meter>>,
    ) -> Result<Option<ProxiedNetwork>, ConfigError> {
        if hosts.is_empty() {
            return Ok(None);
        }
        let hosts = NetHosts::new(hosts).map_err(|e| ConfigError::invalid("net-hosts", format!("net-hosts: {e}")))?;
        ProxiedNetwork::for_hosts(hosts, private, None, meter).map(Some)
    }

    /// The network `hosts` grant, as [`ProxiedNetwork::new`]; the name
    /// `exempt` (one the operator gave, such as a model's endpoint) is also
    /// exempt from the address guard.
    pub fn for_hosts(
        hosts: NetHosts,
        private: &[IpAddr],
        exempt: Option<&str>,
        meter: Option<Arc<Meter>>,
    ) -> Result<ProxiedNetwork, ConfigError> {
        let client = match (private, exempt) {
            ([], None) => shared_client()?,
            (private, exempt) => {
                let mut builder = GuardedClient::builder().allow_private(private.iter().copied());
                if let Some(host) = exempt {
                    builder = builder.allow_private_host(host);
                }
                builder.build().map_err(|e| {
                    ConfigError::invalid("net-allow-private", format!("cannot set up the egress proxy: {e}"))
                })?
            }
        };
        Ok(ProxiedNetwork { client, hosts, meter })
    }

    /// The hosts granted.
    pub fn hosts(&self) -> &NetHosts {
        &self.hosts
    }

    /// The gateway for one command or server, reporting its connections
    /// to `audit` as made `by` it (`shell`, `mcp:NAME`). Made on the
    /// runtime its proxy will run on.
    pub fn gateway(&self, audit: Option<Arc<dyn AuditSink>>, by: &str) -> ProxyGateway {
        ProxyGateway { network: self.clone(), audit, by: by.to_string(), runtime: tokio::runtime::Handle::current() }
    }

    /// What the model is told of its shell commands' network.
    pub fn instructions(&self) -> String {
        format!(
            "Shell commands may reach only these hosts, over HTTP and HTTPS through the proxy named in HTTP_PROXY \
             and HTTPS_PROXY (curl, git, pip and most tools use it; give other programs the proxy yourself): {}. \
             A host without a port is reachable on ports 80 and 443 only. Nothing else is reachable, and names \
             are not resolved inside the sandbox.",
            self.hosts
        )
    }
}

/// One command's or server's gateway: nexo's egress proxy on the listener
/// made in its namespace.
pub struct ProxyGateway {
    network: ProxiedNetwork,
    audit: Option<Arc<dyn AuditSink>>,
    by: String,
    runtime: tokio::runtime::Handle,
}

impl Gateway for ProxyGateway {
    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<Box<dyn Send>> {
        let _entered = self.runtime.enter();
        let log = self.audit.clone().map(|audit| Arc::new(Audit(audit, self.by.clone())) as Arc<dyn ConnectionLog>);
        let policy = ProxyPolicy { hosts: self.network.hosts.clone(), meter: self.network.meter.clone(), log };
        Ok(Box::new(EgressProxy::serve(&self.network.client, listener, policy)?))
    }

    fn describe(&self) -> String {
        format!("HTTP(S) to {} through nexo's egress proxy", self.network.hosts)
    }
}

/// The proxy's connections, into the run's audit, and who made them.
struct Audit(Arc<dyn AuditSink>, String);

impl ConnectionLog for Audit {
    fn connection(&self, connection: &Connection) {
        self.0.connection(&self.1, connection);
    }
}

/// The network of a run's confined MCP servers with `net-hosts`: each
/// server's own hosts through its own proxy, with the run's private-address
/// exemptions, meter and audit.
pub struct McpNetwork {
    /// `[sandbox] net-allow-private`, as the run's grant has it.
    pub private: Vec<IpAddr>,
    /// The run's egress allowance.
    pub meter: Option<Arc<Meter>>,
    /// The run's audit.
    pub audit: Option<Arc<dyn AuditSink>>,
}

impl ServerNetwork for McpNetwork {
    fn gateway(&self, server: &str, hosts: &NetHosts) -> Result<Box<dyn Gateway>, String> {
        let network = ProxiedNetwork::for_hosts(hosts.clone(), &self.private, None, self.meter.clone())
            .map_err(|e| e.to_string())?;
        Ok(Box::new(network.gateway(self.audit.clone(), &format!("mcp:{server}"))))
    }
}
