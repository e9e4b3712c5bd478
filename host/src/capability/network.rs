//! The shell's network: what a run granted `net-hosts` gives its shell
//! commands. Each command runs in a network namespace of its own whose one
//! way out is nexo's egress proxy ([`nexo_egress::EgressProxy`]), served
//! for that command alone: the grant's hosts and ports, the address guard
//! on every address (with the operator's `[sandbox] net-allow-private`
//! exemptions, nothing more), the run's egress allowance on both
//! directions' bytes, and each connection in the tenant's audit log.

use std::net::IpAddr;
use std::sync::Arc;

use nexo_egress::{Connection, ConnectionLog, EgressProxy, GuardedClient, Meter, NetHosts, ProxyPolicy};
use nexo_sandbox::Gateway;

use crate::egress::shared_client;
use crate::error::ConfigError;
use crate::host_call::AuditSink;

/// A run's grant of network to its shell commands.
#[derive(Debug, Clone)]
pub struct ShellNetwork {
    client: GuardedClient,
    hosts: NetHosts,
    meter: Option<Arc<Meter>>,
}

impl ShellNetwork {
    /// The network `hosts` grant, exempting `private` from the address
    /// guard, counted in `meter`; `None` when no host is granted.
    pub fn new(
        hosts: &[String],
        private: &[IpAddr],
        meter: Option<Arc<Meter>>,
    ) -> Result<Option<ShellNetwork>, ConfigError> {
        if hosts.is_empty() {
            return Ok(None);
        }
        let hosts = NetHosts::new(hosts).map_err(|e| ConfigError::invalid("net-hosts", format!("net-hosts: {e}")))?;
        let client = match private {
            [] => shared_client()?,
            private => GuardedClient::builder().allow_private(private.iter().copied()).build().map_err(|e| {
                ConfigError::invalid("net-allow-private", format!("cannot set up the shell's egress proxy: {e}"))
            })?,
        };
        Ok(Some(ShellNetwork { client, hosts, meter }))
    }

    /// The hosts granted.
    pub fn hosts(&self) -> &NetHosts {
        &self.hosts
    }

    /// The gateway for one command, reporting its connections to `audit`.
    /// Made on the runtime its proxy will run on.
    pub fn gateway(&self, audit: Option<Arc<dyn AuditSink>>) -> ProxyGateway {
        ProxyGateway { network: self.clone(), audit, runtime: tokio::runtime::Handle::current() }
    }

    /// What the model is told of its commands' network.
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

/// One command's gateway: nexo's egress proxy on the listener made in the
/// command's namespace.
pub struct ProxyGateway {
    network: ShellNetwork,
    audit: Option<Arc<dyn AuditSink>>,
    runtime: tokio::runtime::Handle,
}

impl Gateway for ProxyGateway {
    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<Box<dyn Send>> {
        let _entered = self.runtime.enter();
        let log = self.audit.clone().map(|audit| Arc::new(Audit(audit)) as Arc<dyn ConnectionLog>);
        let policy = ProxyPolicy { hosts: self.network.hosts.clone(), meter: self.network.meter.clone(), log };
        Ok(Box::new(EgressProxy::serve(&self.network.client, listener, policy)?))
    }

    fn describe(&self) -> String {
        format!("HTTP(S) to {} through nexo's egress proxy", self.network.hosts)
    }
}

/// The proxy's connections, into the run's audit.
struct Audit(Arc<dyn AuditSink>);

impl ConnectionLog for Audit {
    fn connection(&self, connection: &Connection) {
        self.0.connection(connection);
    }
}
