//! The address guard, checked before a hop and again by reqwest's resolver
//! at connect time, and the HTTP stack built around it.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use url::Host;

use crate::address::check_address;
use crate::allow::HostList;
use crate::error::EgressError;
use crate::request::{Method, USER_AGENT};
use crate::resolver::Resolver;

/// The checks shared by the pre-flight and the connect-time resolver.
pub(crate) struct Guard {
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) exempt: Vec<IpAddr>,
    /// Hosts whose addresses are all exempt (matched exactly, not their
    /// subdomains).
    pub(crate) exempt_hosts: HostList,
    /// Test routes (feature `testing`); always empty otherwise.
    pub(crate) routes: HashMap<IpAddr, SocketAddr>,
}

impl Guard {
    /// Whether `host` is one of the exempted hosts itself.
    pub(crate) fn host_exempt(&self, host: &Host<&str>) -> bool {
        self.exempt_hosts.is_entry(host)
    }

    pub(crate) fn check(&self, host: &str, host_exempt: bool, ip: IpAddr) -> Result<(), EgressError> {
        // An exempted host still never reaches what no exemption may cover
        // (the metadata service among them): `check_address` refuses those.
        if self.exempt.contains(&ip) || (host_exempt && never_exempt(ip).is_none()) {
            return Ok(());
        }
        check_address(ip).map_err(|refused| EgressError::NonPublicAddress {
            host: host.to_string(),
            ip,
            reason: refused.explanation(),
        })
    }

    /// `ip` itself, if it passes [`Guard::check`].
    pub(crate) fn checked(&self, host: &str, host_exempt: bool, ip: IpAddr) -> Result<IpAddr, EgressError> {
        self.check(host, host_exempt, ip).map(|()| ip)
    }

    /// Resolves `name`; every address must pass, or the whole name is refused.
    pub(crate) async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, EgressError> {
        let addrs = self
            .resolver
            .resolve(name)
            .await
            .map_err(|e| EgressError::Resolve { host: name.to_string(), message: e.to_string() })?;
        if addrs.is_empty() {
            return Err(EgressError::Resolve { host: name.to_string(), message: "no addresses".into() });
        }
        let host_exempt = self.host_exempt(&Host::Domain(name));
        for ip in &addrs {
            self.check(name, host_exempt, *ip)?;
        }
        Ok(addrs)
    }

    /// Whether `ip` is the operator's exempted private service (or, in tests,
    /// a routed address), where plain http may carry a key. A public address
    /// of an exempted host is not: a key crosses the internet only in TLS.
    pub(crate) fn private_ok(&self, host_exempt: bool, ip: IpAddr) -> bool {
        self.exempt.contains(&ip) || self.routes.contains_key(&ip) || (host_exempt && check_address(ip).is_err())
    }

    pub(crate) fn connect_addr(&self, ip: IpAddr) -> SocketAddr {
        // Port 0: hyper fills in the URL's port.
        self.routes.get(&ip).copied().unwrap_or(SocketAddr::new(ip, 0))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A guard refusal travelling through reqwest's error chain.
#[derive(Debug)]
pub(crate) struct Refused(EgressError);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Refused {}

/// reqwest resolves every new connection's host through this, so the guard
/// checks exactly the addresses it connects to: a name that resolves
/// differently at connect time (DNS rebinding) is checked again.
struct ConnectGuard(Arc<Guard>);

impl reqwest::dns::Resolve for ConnectGuard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = Arc::clone(&self.0);
        let name = name.as_str().to_owned();
        Box::pin(async move {
            // Boxed as the trait object directly: `?` on a `Box<Refused>` would box
            // it again and hide it from the downcast in `send_error`.
            let addrs = guard.resolve_checked(&name).await.map_err(|e| -> BoxError { Box::new(Refused(e)) })?;
            let addrs: Vec<SocketAddr> = addrs.into_iter().map(|ip| guard.connect_addr(ip)).collect();
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The HTTP stack and the guard its resolver checks with; what clients built
/// with the same settings share.
pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) guard: Arc<Guard>,
}

impl Inner {
    pub(crate) fn new(guard: Guard, connect_timeout: Duration) -> Result<Arc<Inner>, EgressError> {
        let guard = Arc::new(guard);
        let http = reqwest::Client::builder()
            // Shared clients outlive runs: bound the idle connections they keep.
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .user_agent(USER_AGENT)
            .connect_timeout(connect_timeout)
            .https_only(false)
            .http1_only()
            .dns_resolver(Arc::new(ConnectGuard(Arc::clone(&guard))))
            .build()
            .map_err(|e| EgressError::Config(format!("cannot set up the HTTP client: {}", chain(&e))))?;
        Ok(Arc::new(Inner { http, guard }))
    }
}

/// How many idle connections a client keeps to one host.
const MAX_IDLE_PER_HOST: usize = 32;

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// What no exemption may cover, and why: `None` for an address an operator
/// may exempt.
pub(crate) fn never_exempt(ip: IpAddr) -> Option<&'static str> {
    let canonical = ip.to_canonical();
    if canonical.is_unspecified() {
        Some("the unspecified address")
    } else if canonical.is_multicast() {
        Some("a multicast address")
    } else if canonical == IpAddr::from([255, 255, 255, 255]) {
        Some("the broadcast address")
    } else if is_link_local(canonical) {
        Some("a link-local address (the range of cloud metadata services such as 169.254.169.254)")
    } else {
        None
    }
}

/// A reqwest error as an [`EgressError`], keeping a guard refusal from the
/// connect-time resolver as it was.
pub(crate) fn send_error(error: reqwest::Error, method: Method, url_shown: &str) -> EgressError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(err) = source {
        if let Some(Refused(refusal)) = err.downcast_ref::<Refused>() {
            return refusal.clone();
        }
        source = err.source();
    }
    let error = error.without_url();
    let method = method.as_str();
    if error.is_timeout() {
        EgressError::Timeout(format!("{method} {url_shown}: {}; the server is slow or unreachable", chain(&error)))
    } else if error.is_connect() {
        // reqwest's own message ("error sending request") says nothing; its sources hold the cause.
        let message = std::error::Error::source(&error).map_or_else(|| chain(&error), chain);
        EgressError::Connect { url: url_shown.to_string(), message }
    } else {
        EgressError::Failed(format!("{method} {url_shown}: {}", chain(&error)))
    }
}

/// An error and its sources, joined with ": ".
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(err) = source {
        let next = err.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = err.source();
    }
    text
}
