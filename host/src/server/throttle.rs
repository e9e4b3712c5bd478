//! Failed console sign-ins, counted per client address: past
//! [`MAX_FAILURES`] in [`WINDOW`], an address is refused (429) until its
//! window ends. A key has 256 random bits, so guessing one is hopeless
//! anyway; this spares the store a flood of lookups and the audit log a
//! flood of noise, and shows up in the logs. Kept per node: with several
//! nodes, each counts what it sees.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;

/// Failed sign-ins an address may make per window.
pub const MAX_FAILURES: u32 = 10;

/// The window failures are counted in, from the first one.
pub const WINDOW: Duration = Duration::from_secs(300);

/// At most this many addresses are tracked; past it, expired windows go
/// first, then new addresses go uncounted rather than evict live ones.
const MAX_ADDRESSES: usize = 100_000;

/// The failed sign-ins per address.
#[derive(Default)]
pub struct SignInThrottle {
    /// The start of each address's window and its failures in it.
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl SignInThrottle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (Instant, u32)>> {
        self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How long `addr` must wait before it may try again, if it used up
    /// its failures.
    pub fn wait(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let windows = self.lock();
        let (start, failures) = windows.get(&bucket(addr))?;
        let ends = *start + WINDOW;
        (*failures >= MAX_FAILURES && ends > now).then(|| ends - now)
    }

    /// Counts a failed sign-in from `addr`.
    pub fn failed(&self, addr: IpAddr, now: Instant) {
        let mut windows = self.lock();
        let key = bucket(addr);
        if !windows.contains_key(&key) && windows.len() >= MAX_ADDRESSES {
            windows.retain(|_, (start, _)| *start + WINDOW > now);
            if windows.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let entry = windows.entry(key).or_insert((now, 0));
        if entry.0 + WINDOW <= now {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// IPv6 addresses count per /64, which one host may hold whole.
fn bucket(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let mut octets = v6.octets();
            octets[8..].fill(0);
            IpAddr::from(octets)
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)),
        v4 => v4,
    }
}

/// The address a request came from: the peer's, or, when the peer is a
/// reverse proxy on this host or a private network, the address that proxy
/// appended to `X-Forwarded-For` (the last entry: earlier ones are the
/// client's to write, so a last entry that is not an address is not
/// skipped but ignored). `None` without connection info (in-process tests).
pub fn client_addr(peer: Option<&ConnectInfo<SocketAddr>>, headers: &HeaderMap) -> Option<IpAddr> {
    let peer = peer?.0.ip();
    let proxied = match peer {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unique_local(),
    };
    if proxied {
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(|a| a.trim().parse::<IpAddr>().ok());
        if let Some(addr) = forwarded {
            return Some(addr);
        }
    }
    Some(peer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_address_is_refused_past_its_failures_until_its_window_ends() {
        let throttle = SignInThrottle::default();
        let (a, b) = ("203.0.113.9".parse().unwrap(), "203.0.113.10".parse().unwrap());
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES {
            assert_eq!(throttle.wait(a, t0), None, "after {i} failures");
            throttle.failed(a, t0 + Duration::from_secs(u64::from(i)));
        }
        assert_eq!(throttle.wait(a, t0 + Duration::from_secs(60)), Some(WINDOW - Duration::from_secs(60)));
        assert_eq!(throttle.wait(b, t0), None, "another address is not refused");
        assert_eq!(throttle.wait(a, t0 + WINDOW), None, "the window ended");
        // A new window starts with the next failure.
        throttle.failed(a, t0 + WINDOW);
        assert_eq!(throttle.wait(a, t0 + WINDOW), None);
    }

    #[test]
    fn ipv6_addresses_count_per_64_and_mapped_ones_as_ipv4() {
        let throttle = SignInThrottle::default();
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES {
            let addr: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            throttle.failed(addr, t0);
        }
        assert!(throttle.wait("2001:db8:1:2:ffff::1".parse().unwrap(), t0).is_some(), "the same /64");
        assert!(throttle.wait("2001:db8:1:3::1".parse().unwrap(), t0).is_none(), "another /64");
        for _ in 0..MAX_FAILURES {
            throttle.failed("::ffff:198.51.100.7".parse().unwrap(), t0);
        }
        assert!(throttle.wait("198.51.100.7".parse().unwrap(), t0).is_some());
    }

    #[test]
    fn a_proxy_on_a_private_address_is_trusted_for_the_client_address() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "198.51.100.1, 203.0.113.9".parse().unwrap());
        let local = ConnectInfo("127.0.0.1:4000".parse::<SocketAddr>().unwrap());
        let public = ConnectInfo("192.0.2.1:4000".parse::<SocketAddr>().unwrap());
        assert_eq!(client_addr(Some(&local), &headers), Some("203.0.113.9".parse().unwrap()), "the proxy's entry");
        assert_eq!(client_addr(Some(&public), &headers), Some("192.0.2.1".parse().unwrap()), "a public peer is itself");
        assert_eq!(client_addr(Some(&local), &HeaderMap::new()), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(client_addr(None, &headers), None);
    }
}
