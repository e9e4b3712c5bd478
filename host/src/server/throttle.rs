//! Failed console sign-ins, counted per client address: past
//! [`MAX_FAILURES`] in [`WINDOW`], an address is refused (429) until its
//! window ends. A key has 256 random bits, so guessing one is hopeless
//! anyway; this spares the store a flood of lookups and the audit log a
//! flood of noise, and shows up in the logs. Kept per node: with several
//! nodes, each counts what it sees.
//!
//! The address is the peer's, unless the peer is one of the reverse
//! proxies the operator names (`[serve] trusted-proxies`): only those may
//! say, in `X-Forwarded-For`, whom they forward for ([`TrustedProxies`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use ipnet::IpNet;

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
    /// The proxies whose `X-Forwarded-For` is believed.
    proxies: TrustedProxies,
}

impl SignInThrottle {
    /// A throttle that reads client addresses through `proxies`.
    pub fn new(proxies: TrustedProxies) -> Self {
        SignInThrottle { windows: Mutex::default(), proxies }
    }

    /// The address a request came from ([`TrustedProxies::client_addr`]).
    pub fn client_addr(&self, peer: Option<&ConnectInfo<SocketAddr>>, headers: &HeaderMap) -> Option<IpAddr> {
        self.proxies.client_addr(peer, headers)
    }

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

/// The reverse proxies the operator trusts to name the client
/// (`[serve] trusted-proxies`: addresses and CIDR blocks). None by default:
/// then the peer is the client, whatever a header says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses the operator's entries: `203.0.113.7`, `10.0.0.0/8`, `::1`,
    /// `fd00::/8`. An entry that is neither an address nor a block is an
    /// error naming it.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<TrustedProxies, String> {
        let mut nets = Vec::new();
        for entry in entries {
            let entry = entry.as_ref().trim();
            let net = match entry.parse::<IpNet>() {
                Ok(net) => net.trunc(),
                Err(_) => entry.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
                    format!(
                        "`{entry}` in [serve] trusted-proxies is not an IP address or CIDR block \
                         (for example `127.0.0.1` or `10.0.0.0/8`)"
                    )
                })?,
            };
            nets.push(net);
        }
        Ok(TrustedProxies(nets))
    }

    /// Whether `addr` is one of the trusted proxies (an IPv4-mapped IPv6
    /// address counts as its IPv4 one).
    pub fn trusts(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// The address a request came from: the peer's, unless the peer is a
    /// trusted proxy. Then `X-Forwarded-For` is read from the right (each
    /// proxy appends the address it was called from): the right-most
    /// address that is not a trusted proxy is the client, since every
    /// entry left of it is that client's to write. An entry that is not an
    /// address stops the walk at the last hop known. `None` without
    /// connection info (in-process tests).
    pub fn client_addr(&self, peer: Option<&ConnectInfo<SocketAddr>>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?.0.ip().to_canonical();
        if !self.trusts(client) {
            return Some(client);
        }
        let forwarded: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        for entry in forwarded.iter().rev() {
            let Some(hop) = hop_addr(entry) else { break };
            client = hop.to_canonical();
            if !self.trusts(client) {
                break;
            }
        }
        Some(client)
    }
}

/// An `X-Forwarded-For` entry's address: bare (`1.2.3.4`, `2001:db8::1`),
/// with a port (`1.2.3.4:5678`, `[2001:db8::1]:443`) or bracketed
/// (`[2001:db8::1]`), as proxies write them.
fn hop_addr(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    entry.strip_prefix('[')?.strip_suffix(']')?.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
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

    fn forwarded(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", value.parse().unwrap());
        headers
    }

    fn peer(addr: &str) -> ConnectInfo<SocketAddr> {
        ConnectInfo(format!("{addr}:4000").parse::<SocketAddr>().unwrap())
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let none = TrustedProxies::default();
        let headers = forwarded("198.51.100.1, 203.0.113.9");
        // Not even loopback or a private network is trusted unless listed.
        for p in ["127.0.0.1", "10.1.2.3", "192.168.0.5", "[::1]", "192.0.2.1"] {
            let ip = peer(p).0.ip();
            assert_eq!(none.client_addr(Some(&peer(p)), &headers), Some(ip), "{p} is its own client");
        }
        assert_eq!(none.client_addr(None, &headers), None);
        let proxies = TrustedProxies::parse(&["127.0.0.1", "10.0.0.0/8"]).unwrap();
        let local = peer("127.0.0.1");
        assert_eq!(proxies.client_addr(Some(&local), &headers), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(proxies.client_addr(Some(&peer("192.0.2.1")), &headers), Some("192.0.2.1".parse().unwrap()));
        assert_eq!(proxies.client_addr(Some(&local), &HeaderMap::new()), Some("127.0.0.1".parse().unwrap()));
        // Two proxies in a row: the right-most untrusted address is the client.
        let chained = forwarded("198.51.100.1, 203.0.113.9, 10.0.0.2");
        assert_eq!(proxies.client_addr(Some(&local), &chained), Some("203.0.113.9".parse().unwrap()));
        // An entry that is not an address stops at the last hop known.
        let garbage = forwarded("203.0.113.9, not-an-address, 10.0.0.2");
        assert_eq!(proxies.client_addr(Some(&local), &garbage), Some("10.0.0.2".parse().unwrap()));
        // Several headers are one list, in order.
        let mut two = forwarded("198.51.100.1");
        two.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
        assert_eq!(proxies.client_addr(Some(&local), &two), Some("203.0.113.9".parse().unwrap()));
        // An IPv4-mapped peer is its IPv4 address.
        assert!(proxies.trusts("::ffff:10.9.9.9".parse().unwrap()));
        let err = TrustedProxies::parse(&["localhost"]).unwrap_err();
        assert!(err.contains("`localhost`") && err.contains("CIDR"), "{err}");
    }

    #[test]
    fn a_forwarded_entry_with_a_port_or_brackets_names_the_client() {
        let proxies = TrustedProxies::parse(&["127.0.0.1"]).unwrap();
        let local = peer("127.0.0.1");
        for (entry, client) in [
            ("203.0.113.9:5678", "203.0.113.9"),
            ("[2001:db8::1]:443", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("2001:db8::1", "2001:db8::1"),
        ] {
            let got = proxies.client_addr(Some(&local), &forwarded(entry));
            assert_eq!(got, Some(client.parse().unwrap()), "{entry}");
        }
        for garbage in ["[203.0.113.9]", "203.0.113.9:port", "[2001:db8::1"] {
            let got = proxies.client_addr(Some(&local), &forwarded(garbage));
            assert_eq!(got, Some("127.0.0.1".parse().unwrap()), "{garbage} names no client");
        }
    }

    #[test]
    fn a_forged_header_neither_bypasses_nor_locks_out() {
        let throttle = SignInThrottle::new(TrustedProxies::parse(&["10.0.0.1"]).unwrap());
        let t0 = Instant::now();
        let attacker = peer("192.0.2.66");
        let victim: IpAddr = "203.0.113.9".parse().unwrap();
        // The attacker writes a new address into each attempt, then the victim's.
        for i in 0..MAX_FAILURES {
            let headers = forwarded(&format!("198.51.100.{i}, {victim}"));
            let client = throttle.client_addr(Some(&attacker), &headers).unwrap();
            assert_eq!(client, attacker.0.ip(), "an untrusted peer is its own address");
            throttle.failed(client, t0);
        }
        let next = throttle.client_addr(Some(&attacker), &forwarded("198.51.100.200")).unwrap();
        assert!(throttle.wait(next, t0).is_some(), "rotating the header does not escape the count");
        assert_eq!(throttle.wait(victim, t0), None, "the forged victim is not locked out");
        // Through the trusted proxy, the victim is counted as itself.
        let via_proxy = throttle.client_addr(Some(&peer("10.0.0.1")), &forwarded(&victim.to_string())).unwrap();
        assert_eq!((via_proxy, throttle.wait(via_proxy, t0)), (victim, None));
    }
}
