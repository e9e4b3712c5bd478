//! Name resolution. The guard checks whatever a resolver returns, so any
//! resolver may be plugged in without weakening it.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// Resolves host names to addresses.
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host` (an ASCII name, never an IP literal). The
    /// future must not borrow `self`: clone what it needs.
    fn resolve(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;
}

/// The operating system's resolver (`getaddrinfo`, through Tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|addr| addr.ip()).collect())
        })
    }
}
