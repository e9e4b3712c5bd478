//! Which hosts and ports a confined command may reach through the egress
//! proxy ([`crate::EgressProxy`]). An entry is `HOST` (ports 80 and 443)
//! or `HOST:PORT` (that port only); `HOST` matches as a [`HostList`] entry
//! does: a name covers its subdomains by whole labels, an address only
//! itself. IPv6 takes brackets with a port (`[2001:db8::1]:8443`).

use std::fmt;

use url::Host;

use crate::allow::{BadHost, HostList};

/// The ports an entry without one allows: HTTP and HTTPS.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// A list of `HOST[:PORT]` grants. The empty list (the default) allows
/// nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NetHosts {
    entries: Vec<(HostList, Option<u16>)>,
    shown: Vec<String>,
}

impl NetHosts {
    /// Builds the list; an entry that is not `HOST` or `HOST:PORT` (a port
    /// from 1 to 65535) is refused, naming the fix.
    pub fn new<I, S>(entries: I) -> Result<NetHosts, BadHost>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list = NetHosts::default();
        for raw in entries {
            let (host, port) = split(raw.as_ref())?;
            list.push(HostList::new([host])?, port);
        }
        Ok(list)
    }

    /// Adds one entry (a list of one host), unless it is there already.
    fn push(&mut self, hosts: HostList, port: Option<u16>) {
        let host = hosts.entries().join("");
        let shown = match port {
            Some(port) if host.contains(':') => format!("[{host}]:{port}"),
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        if !self.shown.contains(&shown) {
            self.shown.push(shown);
            self.entries.push((hosts, port));
        }
    }

    /// Each entry's host, as normalized (an address as written, without
    /// brackets), in order.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().filter_map(|(hosts, _)| hosts.entries().first().map(String::as_str))
    }

    /// What both lists grant: each pair of entries' common hosts (a name
    /// and its subdomain have the subdomain in common) on their common
    /// ports, in `self`'s order.
    pub fn intersection(&self, other: &NetHosts) -> NetHosts {
        let mut list = NetHosts::default();
        for (mine, my_port) in &self.entries {
            for (theirs, their_port) in &other.entries {
                let hosts = mine.intersection(theirs);
                if hosts.entries().is_empty() {
                    continue;
                }
                match (my_port, their_port) {
                    (None, None) => list.push(hosts, None),
                    (Some(p), None) | (None, Some(p)) if DEFAULT_PORTS.contains(p) => list.push(hosts, Some(*p)),
                    (Some(a), Some(b)) if a == b => list.push(hosts, Some(*a)),
                    _ => {}
                }
            }
        }
        list
    }

    /// The first entry of `self` that `other` does not grant in full, as
    /// it is shown; `None` when `self` is within `other`.
    pub fn first_beyond(&self, other: &NetHosts) -> Option<&str> {
        let ports = |port: &Option<u16>| port.map_or(DEFAULT_PORTS.to_vec(), |p| vec![p]);
        self.entries.iter().zip(&self.shown).find_map(|((hosts, port), shown)| {
            let within = ports(port).iter().all(|p| {
                other.entries.iter().any(|(theirs, their_port)| {
                    theirs.covers(hosts) && their_port.map_or(DEFAULT_PORTS.contains(p), |q| q == *p)
                })
            });
            (!within).then_some(shown.as_str())
        })
    }

    /// Whether a connection to `host` (as `url` parsed it) on `port` is
    /// granted.
    pub fn allows(&self, host: &Host<&str>, port: u16) -> bool {
        self.entries.iter().any(|(hosts, granted)| {
            hosts.matches_url_host(host) && granted.map_or(DEFAULT_PORTS.contains(&port), |p| p == port)
        })
    }

    /// The entries, normalized, in the order given (duplicates dropped).
    pub fn entries(&self) -> &[String] {
        &self.shown
    }

    /// Whether nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for NetHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.shown).finish()
    }
}

impl fmt::Display for NetHosts {
    /// The entries separated by ", ", or "(none)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shown.is_empty() { f.write_str("(none)") } else { f.write_str(&self.shown.join(", ")) }
    }
}

/// `HOST[:PORT]` as its host and port.
fn split(raw: &str) -> Result<(&str, Option<u16>), BadHost> {
    let bad = |reason: &str| BadHost {
        entry: raw.chars().take(crate::allow::QUOTED_CHARS).collect(),
        reason: reason.to_string(),
    };
    let port = |text: &str| match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad("the port must be a number from 1 to 65535 (`HOST:PORT`)")),
        Ok(port) => Ok(Some(port)),
    };
    if let Some(rest) = raw.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((host, "")) => Ok((host, None)),
            Some((host, tail)) => match tail.strip_prefix(':') {
                Some(p) => Ok((host, port(p)?)),
                None => Err(bad("after `]` only `:PORT` may follow")),
            },
            None => Err(bad("an IPv6 address opened with `[` must close with `]`")),
        };
    }
    match raw.matches(':').count() {
        0 => Ok((raw, None)),
        1 => {
            let (host, p) = raw.split_once(':').unwrap_or((raw, ""));
            Ok((host, port(p)?))
        }
        // A bare IPv6 address: no port.
        _ => Ok((raw, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host<&str> {
        match text.parse() {
            Ok(std::net::IpAddr::V4(v4)) => Host::Ipv4(v4),
            Ok(std::net::IpAddr::V6(v6)) => Host::Ipv6(v6),
            Err(_) => Host::Domain(text),
        }
    }

    #[test]
    fn an_entry_grants_its_host_and_subdomains_on_its_port_or_on_http_and_https() {
        let list = NetHosts::new(["example.com", "api.test:8443", "[::1]:9000", "10.0.0.5"]).unwrap_or_default();
        assert_eq!(list.entries(), ["example.com", "api.test:8443", "[::1]:9000", "10.0.0.5"]);
        assert!(list.allows(&host("example.com"), 443) && list.allows(&host("news.example.com"), 80));
        assert!(!list.allows(&host("example.com"), 22), "a bare host is 80 and 443 only");
        assert!(!list.allows(&host("notexample.com"), 443));
        assert!(list.allows(&host("api.test"), 8443) && !list.allows(&host("api.test"), 443));
        assert!(list.allows(&host("::1"), 9000) && !list.allows(&host("::1"), 80));
        assert!(list.allows(&host("10.0.0.5"), 80) && !list.allows(&host("10.0.0.6"), 80));
        assert!(!NetHosts::default().allows(&host("example.com"), 443), "the empty list allows nothing");
    }

    #[test]
    fn an_intersection_keeps_common_hosts_on_common_ports() {
        let policy = NetHosts::new(["example.com", "api.test:8443", "pypi.org:443"]).unwrap_or_default();
        let asked = NetHosts::new(["files.example.com", "api.test", "pypi.org", "other.test"]).unwrap_or_default();
        let both = policy.intersection(&asked);
        assert_eq!(both.entries(), ["files.example.com", "pypi.org:443"]);
        assert_eq!(asked.first_beyond(&policy), Some("api.test"), "80 and 443 are beyond api.test:8443");
        assert_eq!(both.first_beyond(&policy), None);
        assert_eq!(NetHosts::new(["example.com:80"]).unwrap_or_default().first_beyond(&policy), None);
        assert!(policy.intersection(&NetHosts::default()).is_empty());
    }

    #[test]
    fn a_bad_entry_is_refused_naming_the_fix() {
        for (entry, needle) in [
            ("example.com:0", "1 to 65535"),
            ("example.com:http", "1 to 65535"),
            ("[::1", "must close"),
            ("[::1]x", "only `:PORT`"),
            ("*.example.com", "already covers all its subdomains"),
        ] {
            let e = NetHosts::new([entry]).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(needle), "{entry}: {e}");
        }
    }
}
