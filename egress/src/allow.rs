//! Host allow-lists: which hosts a request may reach.
//!
//! An entry is a bare host name or IP literal. A name entry covers the name
//! and its subdomains, by whole labels (`example.com` covers
//! `news.example.com`, never `notexample.com` or `example.com.evil.org`); an
//! IP entry covers exactly that address. A name is letters, digits, `-`,
//! `_` and dots (after IDNA), whether it is an entry or the host of a
//! request. There are no globs: `*` is refused
//! with advice, since `example.com` already covers every subdomain.

use std::fmt;
use std::net::IpAddr;

use url::Host;

/// An allow-list entry that is not a bare host name or IP literal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}` is not a valid host allow-list entry: {reason}")]
pub struct BadHost {
    /// The entry as given, cut to its first [`QUOTED_CHARS`] characters:
    /// an error must not grow with the input it quotes.
    pub entry: String,
    /// What is wrong with it and how to fix it.
    pub reason: String,
}

/// A normalized entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Lowercase ASCII (punycode), no trailing dot.
    Name(String),
    Ip(IpAddr),
}

/// A host allow-list. The empty list (the default) matches nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostList {
    entries: Vec<Entry>,
    shown: Vec<String>,
}

impl HostList {
    /// Builds a list from bare host names and IP literals (IPv6 with or
    /// without brackets). Names are lowercased, a trailing dot is dropped and
    /// Unicode is converted to punycode.
    pub fn new<I, S>(entries: I) -> Result<HostList, BadHost>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list = HostList::default();
        for raw in entries {
            let raw = raw.as_ref();
            let entry = parse_entry(raw)?;
            if !list.entries.contains(&entry) {
                list.shown.push(show(&entry));
                list.entries.push(entry);
            }
        }
        Ok(list)
    }

    /// Whether `host` (a name, an IPv4 literal, or an IPv6 literal with or
    /// without brackets) is on the list. A host that does not parse matches
    /// nothing.
    pub fn matches(&self, host: &str) -> bool {
        match normalize(host) {
            Ok(entry) => self.matches_entry(&entry),
            Err(_) => false,
        }
    }

    /// Whether a host parsed by `url` is on the list.
    pub(crate) fn matches_url_host(&self, host: &Host<&str>) -> bool {
        url_entry(host).is_some_and(|entry| self.matches_entry(&entry))
    }

    /// Whether a host parsed by `url` is one of the entries itself, not a
    /// subdomain of one.
    pub(crate) fn is_entry(&self, host: &Host<&str>) -> bool {
        url_entry(host).is_some_and(|entry| self.entries.contains(&entry))
    }

    fn matches_entry(&self, host: &Entry) -> bool {
        self.entries.iter().any(|allowed| match (allowed, host) {
            (Entry::Ip(a), Entry::Ip(h)) => a == h,
            (Entry::Name(a), Entry::Name(h)) => {
                h == a || (h.len() > a.len() && h.ends_with(a.as_str()) && h[..h.len() - a.len()].ends_with('.'))
            }
            _ => false,
        })
    }

    /// The hosts both lists match, as a list: an entry of one that the
    /// other matches (a name and its subdomains, or the same address) is
    /// kept, so the result never matches a host either list refuses. The
    /// order is `self`'s.
    pub fn intersection(&self, other: &HostList) -> HostList {
        let mut list = HostList::default();
        for mine in &self.entries {
            for theirs in &other.entries {
                let common = if other.matches_entry(mine) {
                    Some(mine)
                } else if self.matches_entry(theirs) {
                    Some(theirs)
                } else {
                    None
                };
                if let Some(entry) = common
                    && !list.entries.contains(entry)
                {
                    list.shown.push(show(entry));
                    list.entries.push(entry.clone());
                }
            }
        }
        list
    }

    /// Whether every host `other` matches, `self` matches too: `other` is
    /// no wider than `self`.
    pub fn covers(&self, other: &HostList) -> bool {
        other.entries.iter().all(|entry| self.matches_entry(entry))
    }

    /// The normalized entries, in the order given (duplicates dropped).
    pub fn entries(&self) -> &[String] {
        &self.shown
    }

    /// Whether the list has no entries (and so matches nothing).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for HostList {
    /// The entries separated by ", ", or "(none)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shown.is_empty() { f.write_str("(none)") } else { f.write_str(&self.shown.join(", ")) }
    }
}

impl fmt::Debug for HostList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HostList").field(&self.shown).finish()
    }
}

fn show(entry: &Entry) -> String {
    match entry {
        Entry::Name(name) => name.clone(),
        Entry::Ip(ip) => ip.to_string(),
    }
}

/// How much of a refused entry [`BadHost`] keeps, in characters.
pub const QUOTED_CHARS: usize = 120;

fn bad(entry: &str, reason: impl Into<String>) -> BadHost {
    BadHost { entry: nexo_text::head_chars(entry, QUOTED_CHARS), reason: reason.into() }
}

/// Checks the shape of an allow-list entry first, for messages that say how
/// to fix it, then normalizes it.
fn parse_entry(raw: &str) -> Result<Entry, BadHost> {
    if raw.is_empty() {
        return Err(bad(raw, "it is empty; remove it"));
    }
    if raw.chars().any(char::is_whitespace) {
        return Err(bad(raw, "it contains whitespace; give one bare host name per entry"));
    }
    if raw.contains("://") {
        return Err(bad(
            raw,
            "it has a scheme; give the bare host, e.g. `example.com` instead of `https://example.com`",
        ));
    }
    if raw.contains('*') || raw.contains('?') || raw.contains('{') || raw.contains('}') || raw.contains('!') {
        return Err(bad(raw, "wildcards and globs are not supported; `example.com` already covers all its subdomains"));
    }
    if raw.contains('@') {
        return Err(bad(raw, "it has user info (`user@`); give the bare host"));
    }
    if raw.contains('/') || raw.contains('#') || raw.contains('\\') {
        return Err(bad(raw, "it has a path; give the bare host, e.g. `example.com` instead of `example.com/docs`"));
    }
    let bracketed = raw.starts_with('[') && raw.ends_with(']');
    if !bracketed && (raw.contains('[') || raw.contains(']')) {
        return Err(bad(raw, "brackets are only allowed around a whole IPv6 address, e.g. `[2001:db8::1]`"));
    }
    if raw.contains(':') && !bracketed && raw.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad(raw, "it has a port; give the bare host, any port is allowed"));
    }
    normalize(raw).map_err(|reason| bad(raw, reason))
}

/// Normalizes a host the same way for entries and for hosts being checked.
/// A host parsed by `url` as a list entry; `None` if the name is not valid.
fn url_entry(host: &Host<&str>) -> Option<Entry> {
    match host {
        // The URL parser has already read every address form; a name it
        // kept (`93.184.216.34..`) that reads as one only once a trailing
        // dot is dropped is still a name, and must not match an IP entry.
        Host::Domain(name) => match normalize(name) {
            Ok(Entry::Name(name)) => Some(Entry::Name(name)),
            _ => None,
        },
        Host::Ipv4(ip) => Some(Entry::Ip(IpAddr::V4(*ip))),
        Host::Ipv6(ip) => Some(Entry::Ip(IpAddr::V6(*ip))),
    }
}

fn normalize(raw: &str) -> Result<Entry, String> {
    if let Ok(ip) = raw.parse::<IpAddr>() {
        return Ok(Entry::Ip(ip));
    }
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if trimmed.is_empty() {
        return Err("it has no host name".into());
    }
    // WHATWG host parsing: IDNA to ASCII, lowercase, and the numeric IPv4
    // forms (`2130706433`, `0x7f.1`) read as addresses, as in URLs.
    match Host::parse(trimmed) {
        Ok(Host::Ipv4(ip)) => Ok(Entry::Ip(IpAddr::V4(ip))),
        Ok(Host::Ipv6(ip)) => Ok(Entry::Ip(IpAddr::V6(ip))),
        Ok(Host::Domain(name)) => {
            let name = name.to_ascii_lowercase();
            if name.split('.').any(str::is_empty) {
                return Err("it has an empty label (`..` or a leading or second trailing dot)".into());
            }
            // WHATWG hosts admit `!`, `$`, `~` and more, which no DNS host
            // name has: such a host matches nothing, as an entry or a request.
            if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
                return Err(format!(
                    "`{c}` is not allowed in a host name (letters, digits, `-`, `_` and `.` are); \
                     give a bare host name such as `example.com`"
                ));
            }
            Ok(Entry::Name(name))
        }
        Err(e) => Err(format!("{e}; give a bare host name such as `example.com` or an IP address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> HostList {
        HostList::new(entries).unwrap()
    }

    #[test]
    fn name_entry_covers_subdomains_by_whole_labels() {
        let l = list(&["example.com"]);
        for host in
            ["example.com", "news.example.com", "a.b.example.com", "EXAMPLE.COM", "News.Example.Com.", "example.com."]
        {
            assert!(l.matches(host), "{host} should match");
        }
        for host in [
            "notexample.com",
            "evil-example.com",
            "example.com.evil.org",
            "example.co",
            "com",
            "xexample.com",
            "",
            "example.com..",
            ".example.com",
            // Hosts a URL may carry but no DNS name has (found by the fuzzer).
            "ne!s.example.com",
            "a$b.example.com",
            "x~y.example.com",
            "{a}.example.com",
        ] {
            assert!(!l.matches(host), "{host} should not match");
        }
    }

    #[test]
    fn entries_are_normalized() {
        let l = list(&["Example.COM.", "BÜCHER.example", "[2001:DB8::1]", "2606:4700::1", "1.2.3.4"]);
        assert_eq!(l.entries(), ["example.com", "xn--bcher-kva.example", "2001:db8::1", "2606:4700::1", "1.2.3.4"]);
        assert!(l.matches("example.com"));
        assert!(l.matches("www.bücher.example"));
        assert!(l.matches("www.xn--bcher-kva.example"));
        assert!(l.matches("[2001:db8::1]"));
        assert!(l.matches("2001:db8::1"));
        assert_eq!(list(&["example.com.", "example.com"]).entries(), ["example.com"]);
        assert_eq!(list(&["xn--bcher-kva.example"]), list(&["bücher.example"]));
    }

    #[test]
    fn ip_entry_matches_only_that_address() {
        let l = list(&["93.184.216.34", "::1"]);
        assert!(l.matches("93.184.216.34"));
        assert!(l.matches("[::1]"));
        assert!(l.matches("::1"));
        assert!(!l.matches("93.184.216.35"));
        assert!(!l.matches("x.93.184.216.34"));
        assert!(!l.matches("::2"));
        // Numeric IPv4 forms read as the address they denote, as in URLs.
        assert!(list(&["127.0.0.1"]).matches("2130706433"));
        assert_eq!(list(&["0x7f.1"]).entries(), ["127.0.0.1"]);
    }

    #[test]
    fn a_url_name_never_matches_an_ip_entry() {
        // Found by the egress_url fuzzer: `http:01..` carries the name `01..`,
        // which read as 0.0.0.1 once a trailing dot was dropped.
        let l = list(&["1", "93.184.216.34"]);
        for name in ["01..", "93.184.216.34..", "1.."] {
            assert!(!l.matches_url_host(&Host::Domain(name)), "{name} should not match");
        }
        assert!(l.matches_url_host(&Host::Ipv4(std::net::Ipv4Addr::new(93, 184, 216, 34))));
    }

    #[test]
    fn name_entry_never_matches_an_ip() {
        let l = list(&["example.com", "localhost"]);
        assert!(!l.matches("127.0.0.1"));
        assert!(!l.matches("[::1]"));
        assert!(!l.matches("93.184.216.34"));
    }

    #[test]
    fn empty_list_matches_nothing() {
        let l = HostList::default();
        assert!(l.is_empty());
        assert!(!l.matches("example.com"));
        assert_eq!(l.to_string(), "(none)");
        assert!(list(&[]).is_empty());
    }

    #[test]
    fn an_intersection_matches_only_what_both_lists_match() {
        let policy = list(&["docs.rs", "example.com", "10.0.0.1"]);
        let request = list(&["API.Docs.RS.", "crates.io", "example.com", "0xa.0.0.1"]);
        let both = policy.intersection(&request);
        assert_eq!(both.entries(), ["api.docs.rs", "example.com", "10.0.0.1"]);
        assert!(both.matches("v1.api.docs.rs") && !both.matches("docs.rs") && !both.matches("crates.io"));
        assert_eq!(request.intersection(&policy).entries(), ["api.docs.rs", "example.com", "10.0.0.1"]);
        assert!(policy.intersection(&HostList::default()).is_empty(), "an empty list is nothing");
        assert!(HostList::default().intersection(&policy).is_empty());
        assert!(list(&["bücher.example"]).intersection(&list(&["xn--bcher-kva.example"])).matches("bücher.example"));
        assert!(policy.covers(&both) && request.covers(&both));
        assert!(!both.covers(&policy));
        assert!(policy.covers(&HostList::default()));
    }

    #[test]
    fn display_and_debug() {
        let l = list(&["a.example", "b.example"]);
        assert_eq!(l.to_string(), "a.example, b.example");
        assert_eq!(format!("{l:?}"), r#"HostList(["a.example", "b.example"])"#);
    }

    #[test]
    fn refuses_malformed_entries() {
        let table = [
            ("", "empty"),
            ("*.example.com", "wildcard"),
            ("example.*", "wildcard"),
            ("ex?mple.com", "wildcard"),
            ("https://example.com", "scheme"),
            ("example.com:443", "port"),
            ("[::1]:443", "brackets"),
            ("example.com/path", "path"),
            ("user@example.com", "user info"),
            ("exa mple.com", "whitespace"),
            (" example.com", "whitespace"),
            ("a..example.com", "empty label"),
            ("example.com..", "empty label"),
            (".", "no host"),
            ("exa%mple.com", "bare host name"),
            ("exa<mple.com", "bare host name"),
            ("exa$mple.com", "not allowed in a host name"),
            ("exa~mple.com", "not allowed in a host name"),
        ];
        for (entry, want) in table {
            let err = HostList::new([entry]).unwrap_err();
            assert_eq!(err.entry, entry);
            assert!(err.reason.contains(want), "{entry:?}: {err}");
        }
        let err = HostList::new(["*.example.com"]).unwrap_err();
        assert!(err.to_string().contains("already covers all its subdomains"), "{err}");
    }

    #[test]
    fn a_refused_entry_is_quoted_by_its_head_only() {
        let long = "a/".repeat(2000);
        let err = HostList::new([long.as_str()]).unwrap_err();
        assert_eq!(err.entry.chars().count(), QUOTED_CHARS, "{}", err.entry);
        assert!(err.entry.ends_with('…') && long.starts_with(err.entry.trim_end_matches('…')));
        assert!(err.reason.contains("path"), "{err}");
        assert!(err.to_string().len() < 400, "{err}");
    }
}
