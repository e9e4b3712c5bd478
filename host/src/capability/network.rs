//! Network for confined programs: what a run granted `net-hosts` gives its
//! shell commands, and what an `[mcp.NAME]` server's own `net-hosts` give
//! that confined server. Each command or server runs in a network namespace
//! of its own whose one way out is nexo's egress proxy
//! ([`nexo_egress::EgressProxy`]), served for it alone: its hosts and
//! ports, the address guard on every address (with the operator's
//! `[sandbox] net-allow-private` exemptions, nothing more), the run's
//! egress allowance on both directions' bytes, its tenant's share of the
//! node's connections, and each connection in the tenant's audit log,
//! naming who made it.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use nexo_egress::{
    Connection, ConnectionLog, ConnectionShare, EgressProxy, GuardedClient, Meter, NetHosts, ProxyPolicy,
};
use nexo_mcp::ServerNetwork;
use nexo_sandbox::{Gateway, Serving};

use crate::egress::shared_client;
use crate::error::ConfigError;
use crate::host_call::AuditSink;
use crate::quota::RunBudget;

/// A grant of network to confined programs: hosts, through the proxy.
#[derive(Debug, Clone)]
pub struct ProxiedNetwork {
    client: GuardedClient,
    hosts: NetHosts,
    meter: Option<Arc<Meter>>,
    share: Option<Arc<ConnectionShare>>,
}

impl ProxiedNetwork {
    /// The network `hosts` grant, exempting `private` from the address
    /// guard, counted in the run's `budget` (its egress meter, its
    /// tenant's share of connections); `None` when no host is granted.
    pub fn new(
        hosts: &[String],
        private: &[IpAddr],
        budget: &RunBudget,
    ) -> Result<Option<ProxiedNetwork>, ConfigError> {
        if hosts.is_empty() {
            return Ok(None);
        }
        let hosts = NetHosts::new(hosts).map_err(|e| ConfigError::invalid("net-hosts", format!("net-hosts: {e}")))?;
        ProxiedNetwork::for_hosts(hosts, private, &[], budget).map(Some)
    }

    /// The network `hosts` grant, as [`ProxiedNetwork::new`]; the names
    /// `exempt` (ones the operator gave, such as a model's endpoint) are
    /// also exempt from the address guard.
    pub fn for_hosts(
        hosts: NetHosts,
        private: &[IpAddr],
        exempt: &[String],
        budget: &RunBudget,
    ) -> Result<ProxiedNetwork, ConfigError> {
        let client = match (private, exempt) {
            ([], []) => shared_client()?,
            (private, exempt) => {
                let mut builder = GuardedClient::builder().allow_private(private.iter().copied());
                for host in exempt {
                    builder = builder.allow_private_host(host);
                }
                builder.build().map_err(|e| {
                    ConfigError::invalid("net-allow-private", format!("cannot set up the egress proxy: {e}"))
                })?
            }
        };
        Ok(ProxiedNetwork { client, hosts, meter: budget.egress.clone(), share: budget.connections.clone() })
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
    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<Box<dyn Serving>> {
        let _entered = self.runtime.enter();
        let log = self.audit.clone().map(|audit| Arc::new(Audit(audit, self.by.clone())) as Arc<dyn ConnectionLog>);
        let network = &self.network;
        let policy = ProxyPolicy {
            hosts: network.hosts.clone(),
            meter: network.meter.clone(),
            log,
            share: network.share.clone(),
        };
        Ok(Box::new(Proxy(EgressProxy::serve(&self.network.client, listener, policy)?)))
    }

    fn describe(&self) -> String {
        format!("HTTP(S) to {} through nexo's egress proxy", self.network.hosts)
    }
}

/// nexo's egress proxy on one listener.
struct Proxy(EgressProxy);

impl Serving for Proxy {
    fn stop(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(self.0.stop())
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
/// server's own hosts through its own proxy, with the run's budget and
/// audit.
pub struct McpNetwork {
    /// The run's egress allowance and its tenant's share of connections.
    pub budget: RunBudget,
    /// The run's audit.
    pub audit: Option<Arc<dyn AuditSink>>,
}

impl ServerNetwork for McpNetwork {
    /// With `allow_private` (the server's own `allow-private`), its hosts
    /// are exempt from the address guard; the shell's `net-allow-private`
    /// addresses never are.
    fn gateway(&self, server: &str, hosts: &NetHosts, allow_private: bool) -> Result<Box<dyn Gateway>, String> {
        let (mut private, mut names) = (Vec::new(), Vec::new());
        for host in hosts.hosts().filter(|_| allow_private) {
            match host.parse::<IpAddr>() {
                Ok(ip) => private.push(ip),
                Err(_) => names.push(host.to_string()),
            }
        }
        let network =
            ProxiedNetwork::for_hosts(hosts.clone(), &private, &names, &self.budget).map_err(|e| e.to_string())?;
        Ok(Box::new(network.gateway(self.audit.clone(), &format!("mcp:{server}"))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure should panic

    use std::io::{Read, Write};
    use std::sync::Mutex;

    use super::*;
    use crate::host_call::CapabilityUse;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, Connection)>>);

    impl AuditSink for Seen {
        fn record(&self, _: CapabilityUse) {}

        fn connection(&self, by: &str, connection: &Connection) {
            self.0.lock().unwrap().push((by.to_string(), connection.clone()));
        }
    }

    /// A loopback origin answering `hello` to each request.
    fn origin() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
            }
        });
        port
    }

    /// One GET of `http://127.0.0.1:port/` through `gateway`: the answer's status line.
    async fn get(gateway: Box<dyn Gateway>, port: u16) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = listener.local_addr().unwrap();
        let _serving = gateway.serve(listener).unwrap();
        let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
        let ask =
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        tokio::io::AsyncWriteExt::write_all(&mut stream, ask.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn an_mcp_server_reaches_a_private_host_only_with_its_own_allow_private() {
        let port = origin();
        let seen = Arc::new(Seen::default());
        let network = McpNetwork { budget: RunBudget::default(), audit: Some(seen.clone()) };
        let hosts = NetHosts::new([format!("127.0.0.1:{port}")]).unwrap();
        let refused = get(network.gateway("strict", &hosts, false).unwrap(), port).await;
        assert!(refused.contains("403"), "{refused}");
        let allowed = get(network.gateway("lan", &hosts, true).unwrap(), port).await;
        assert!(allowed.contains("200"), "{allowed}");
        // A connection is reported as its task ends, just after its last byte.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen.0.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let seen: Vec<(String, bool)> = seen.0.lock().unwrap().iter().map(|(by, c)| (by.clone(), c.allowed)).collect();
        assert_eq!(seen, [("mcp:strict".to_string(), false), ("mcp:lan".to_string(), true)]);
    }
}
