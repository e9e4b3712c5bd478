//! [`GuardedClientBuilder`]: exemptions, the resolver, and the clients
//! shared between builds of the same settings.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use crate::allow::HostList;
use crate::client::GuardedClient;
use crate::connect::{Guard, Inner, never_exempt};
use crate::error::EgressError;
use crate::resolver::{Resolver, SystemResolver};

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a [`GuardedClient`].
pub struct GuardedClientBuilder {
    pub(crate) resolver: Arc<dyn Resolver>,
    /// Set by [`GuardedClientBuilder::resolver`]: such a client is never shared.
    own_resolver: bool,
    pub(crate) exempt: Vec<IpAddr>,
    pub(crate) exempt_hosts: Vec<String>,
    connect_timeout: Duration,
    pub(crate) routes: HashMap<IpAddr, SocketAddr>,
}

impl Default for GuardedClientBuilder {
    fn default() -> Self {
        GuardedClientBuilder {
            resolver: Arc::new(SystemResolver),
            own_resolver: false,
            exempt: Vec::new(),
            exempt_hosts: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            routes: HashMap::new(),
        }
    }
}

impl fmt::Debug for GuardedClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClientBuilder")
            .field("allow_private", &self.exempt)
            .field("allow_private_host", &self.exempt_hosts)
            .field("connect_timeout", &self.connect_timeout)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl GuardedClientBuilder {
    /// Resolves host names with `resolver` instead of the system resolver.
    /// The guard checks whatever it returns.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self.own_resolver = true;
        self
    }

    /// Exempts exactly these addresses from the address guard, for an
    /// operator's self-hosted backend on a private address. Never for the
    /// fetch tool. [`build`](Self::build) refuses unspecified, multicast and
    /// broadcast addresses.
    pub fn allow_private(mut self, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        self.exempt.extend(addrs);
        self
    }

    /// Exempts whatever `host` resolves to from the address guard, for
    /// requests to exactly that host (a name or an IP literal; not its
    /// subdomains): for a service the operator named, such as a model server
    /// on `localhost` or a private network, whose addresses the operator
    /// does not list. Never for the fetch tool, and never from a plugin:
    /// the host must come from the operator. Loopback and private addresses
    /// pass; unspecified, multicast, broadcast and link-local ones (the
    /// cloud metadata service) are still refused. Plain http may carry a key
    /// to such a host only on a non-public address. [`build`](Self::build)
    /// refuses a malformed host or such an IP literal.
    pub fn allow_private_host(mut self, host: impl Into<String>) -> Self {
        self.exempt_hosts.push(host.into());
        self
    }

    /// How long to wait for a TCP (and TLS) connection; 10 seconds by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Tests only: after `checked` has passed the guard, connect to `to`
    /// instead. The guard still runs on `checked`; a route exempts nothing.
    /// Only names resolved at connect time are routed (IP-literal URLs
    /// connect directly), and a port in the URL replaces `to`'s port.
    #[cfg(feature = "testing")]
    pub fn route_for_tests(mut self, checked: IpAddr, to: SocketAddr) -> Self {
        self.routes.insert(checked, to);
        self
    }

    /// Builds the client. Clients built with the same settings (and the
    /// system resolver) share one: one connection pool, one TLS
    /// configuration and session cache, for as long as any of them is alive.
    /// A host that starts one agent run after another, each with its own
    /// model client, then keeps a few kilobytes per run instead of a whole
    /// client, and reuses its connections.
    pub fn build(self) -> Result<GuardedClient, EgressError> {
        for ip in &self.exempt {
            if let Some(what) = never_exempt(*ip) {
                return Err(EgressError::Config(format!(
                    "cannot exempt {ip} from the address guard: it is {what}; give the backend's own unicast address"
                )));
            }
        }
        let exempt_hosts = HostList::new(&self.exempt_hosts).map_err(|e| {
            EgressError::Config(format!("cannot exempt `{}` from the address guard: {}", e.entry, e.reason))
        })?;
        for entry in exempt_hosts.entries() {
            if let Some(what) = entry.parse::<IpAddr>().ok().and_then(never_exempt) {
                return Err(EgressError::Config(format!(
                    "cannot exempt the host {entry} from the address guard: it is {what}; give the service's own \
                     unicast address or name"
                )));
            }
        }
        let mut exempt = self.exempt;
        exempt.sort();
        exempt.dedup();
        let connect_timeout = self.connect_timeout;
        if self.own_resolver || !self.routes.is_empty() {
            let guard = Guard { resolver: self.resolver, exempt, exempt_hosts, routes: self.routes };
            return Ok(GuardedClient { inner: Inner::new(guard, connect_timeout)? });
        }
        let mut hosts = exempt_hosts.entries().to_vec();
        hosts.sort();
        let key = SharedKey { exempt: exempt.clone(), hosts, connect_timeout };
        // Held while building, so that two builds of one key make one client.
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inner) = shared.get(&key).and_then(Weak::upgrade) {
            return Ok(GuardedClient { inner });
        }
        let guard = Guard { resolver: self.resolver, exempt, exempt_hosts, routes: self.routes };
        let inner = Inner::new(guard, connect_timeout)?;
        shared.retain(|_, client| client.strong_count() > 0);
        shared.insert(key, Arc::downgrade(&inner));
        Ok(GuardedClient { inner })
    }
}

/// The settings that make two guarded clients interchangeable.
#[derive(PartialEq, Eq, Hash)]
struct SharedKey {
    pub(crate) exempt: Vec<IpAddr>,
    pub(crate) hosts: Vec<String>,
    connect_timeout: Duration,
}

/// The live shared clients; an entry goes once its last user drops it.
static SHARED: LazyLock<Mutex<HashMap<SharedKey, Weak<Inner>>>> = LazyLock::new(Default::default);

impl GuardedClient {
    /// A client with the system resolver and no exemptions.
    pub fn new() -> Result<Self, EgressError> {
        Self::builder().build()
    }

    /// A builder with the defaults of [`GuardedClient::new`].
    pub fn builder() -> GuardedClientBuilder {
        GuardedClientBuilder::default()
    }
}
