//! URLs, host allow-lists and addresses for the guarded client
//! (`nexo-egress`). No request ever leaves the process: the resolver
//! answers the client's early lookup with the input's addresses and fails
//! the connect-time lookup that would precede a connection, and URLs with
//! an IP literal are only checked, never sent.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nexo_egress::{
    EgressError, GuardedClient, HostList, Policy, Redactor, Request, Resolver, SecretHeader, check_address,
};

use crate::runtime;

/// The key the policy injects; no error may show it.
pub const SECRET: &str = "sk-fuzz-4f1c2a9e7b3d5068";
/// What the connect-time lookup fails with: the guard let the request through.
const PASSED: &str = "fuzz: the guard passed this request";

/// The resolver's answers for the current input, and how often it was asked.
#[derive(Default)]
struct Answers {
    addrs: Vec<IpAddr>,
    calls: usize,
}

struct FuzzResolver(Arc<Mutex<Answers>>);

impl Resolver for FuzzResolver {
    fn resolve(&self, _host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let mut answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        answers.calls += 1;
        let result = if answers.calls == 1 { Ok(answers.addrs.clone()) } else { Err(io::Error::other(PASSED)) };
        Box::pin(async move { result })
    }
}

/// The scrubber of [`SECRET`] and the header that carries it, built once:
/// their automata cover every encoding of the key, which takes a while.
fn secrets() -> &'static (Redactor, SecretHeader) {
    static SECRETS: OnceLock<(Redactor, SecretHeader)> = OnceLock::new();
    SECRETS.get_or_init(|| {
        let redactor = Redactor::new([SECRET.as_bytes()]).unwrap_or_else(|e| panic!("{e}"));
        let header = SecretHeader::with_prefix("authorization", "Bearer ", SECRET).unwrap_or_else(|e| panic!("{e}"));
        (redactor, header)
    })
}

fn client() -> &'static (GuardedClient, Arc<Mutex<Answers>>) {
    static CLIENT: OnceLock<(GuardedClient, Arc<Mutex<Answers>>)> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let answers = Arc::new(Mutex::new(Answers::default()));
        let Ok(client) = GuardedClient::builder().resolver(Arc::new(FuzzResolver(answers.clone()))).build() else {
            panic!("cannot build the guarded client")
        };
        (client, answers)
    })
}

/// The input: text lines (the first is the URL; `h…` lines are host-list
/// entries, `q…` lines hosts to match), then after a NUL byte the
/// addresses the resolver returns (a tag byte, then 4 or 16 bytes).
///
/// Checks: an address the guard accepts is public by an independent list
/// of special ranges; a host the list matches is an entry or a subdomain of
/// one; a request the client lets through has an http(s) URL without
/// credentials on the list, whose every address is public; no error shows
/// the injected key; the scrubber removes the key from any text.
pub fn egress_url(data: &[u8]) {
    let (text, addr_bytes) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut lines = text.split('\n');
    let url = lines.next().unwrap_or_default().to_string();
    let mut entries = Vec::new();
    let mut queries = Vec::new();
    for line in lines {
        if let Some(entry) = line.strip_prefix('h') {
            entries.push(entry.to_string());
        } else if let Some(query) = line.strip_prefix('q') {
            queries.push(query.to_string());
        }
    }
    let addrs = addresses(addr_bytes);
    for ip in &addrs {
        if check_address(*ip).is_ok() {
            assert!(!surely_not_public(*ip), "the address guard accepted {ip}");
        }
    }

    // The scrubber, on the input with the key placed inside it.
    let (redactor, secret) = secrets();
    let cut = text.char_indices().map(|(i, _)| i).nth(addr_bytes.len() % 64).unwrap_or(text.len());
    let planted = format!("{}{SECRET}{}", &text[..cut], &text[cut..]);
    assert!(!redactor.redact_str(&planted).contains(SECRET), "the scrubber left the key in {planted:?}");

    let Ok(hosts) = HostList::new(&entries) else { return };
    for query in &queries {
        if hosts.matches(query) {
            let Ok(parsed) = HostList::new([query]) else { panic!("{query:?} matched but is not a host") };
            let host = parsed.entries()[0].as_str();
            assert!(on_list(&hosts, host), "{query:?} matched {hosts} but is on no entry");
        }
    }

    let policy = Policy::new(hosts.clone()).inject(secret.clone()).timeout(Duration::from_secs(5));
    let parsed = url::Url::parse(&url).ok();
    if let Some(parsed) = &parsed {
        match parsed.host() {
            // Sent as is, an IP literal would be connected to: only checked.
            Some(url::Host::Ipv4(ip)) => return check_literal(IpAddr::V4(ip), &hosts),
            Some(url::Host::Ipv6(ip)) => return check_literal(IpAddr::V6(ip), &hosts),
            _ => {}
        }
    }
    let (client, answers) = client();
    *answers.lock().unwrap_or_else(|e| e.into_inner()) = Answers { addrs: addrs.clone(), calls: 0 };
    let result = runtime().block_on(client.send(Request::get(url.clone()), &policy));
    let calls = answers.lock().unwrap_or_else(|e| e.into_inner()).calls;
    let err = match result {
        Ok(response) => panic!("a request reached a server: {url} → {}", response.status),
        Err(e) => e,
    };
    let shown = format!("{err} {err:?}");
    // Errors show the caller's URL and the operator's host list, so the key
    // may appear only if the input holds it (hosts are lowercased and
    // percent-decoded when parsed).
    let in_input = text.to_ascii_lowercase().contains(SECRET)
        || parsed.as_ref().is_some_and(|u| u.as_str().to_ascii_lowercase().contains(SECRET));
    if !in_input {
        assert!(!shown.contains(SECRET), "the key leaked into an error: {shown}");
    }
    let passed = matches!(&err, EgressError::Resolve { message, .. } if message.contains(PASSED));
    assert_eq!(passed, calls >= 2, "the connect-time lookup happened without its error reaching the caller: {err}");
    if passed {
        let Some(parsed) = parsed else { panic!("the client passed {url:?}, which does not parse") };
        assert!(matches!(parsed.scheme(), "http" | "https"), "passed the scheme of {url}");
        assert!(parsed.username().is_empty() && parsed.password().is_none(), "passed credentials in {url}");
        let host = parsed.host_str().unwrap_or_default();
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        assert!(on_list(&hosts, &host), "passed {host}, which is not on {hosts}");
        assert!(!addrs.is_empty(), "passed {url} without an address");
        for ip in &addrs {
            assert!(!surely_not_public(*ip), "passed {url} resolving to {ip}");
        }
    }
}

fn check_literal(ip: IpAddr, hosts: &HostList) {
    if check_address(ip).is_ok() {
        assert!(!surely_not_public(ip), "the address guard accepted {ip}");
    }
    if hosts.matches(&ip.to_string()) {
        assert!(hosts.entries().iter().any(|e| e.parse::<IpAddr>() == Ok(ip)), "{ip} matched {hosts}");
    }
}

/// Whether `host` (normalized) is an entry of `hosts` or a subdomain of one, by whole labels.
fn on_list(hosts: &HostList, host: &str) -> bool {
    hosts.entries().iter().any(|e| host == e || host.ends_with(&format!(".{e}")))
}

fn addresses(mut bytes: &[u8]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        if tag % 2 == 0 && rest.len() >= 4 {
            out.push(IpAddr::V4(Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3])));
            bytes = &rest[4..];
        } else if rest.len() >= 16 {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&rest[..16]);
            out.push(IpAddr::V6(Ipv6Addr::from(octets)));
            bytes = &rest[16..];
        } else {
            break;
        }
    }
    out.truncate(8);
    out
}

/// Ranges that are not public, written from the IANA special-purpose
/// registries with the standard library's predicates: a second opinion on
/// the guard's own table.
fn surely_not_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_not_public(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_not_public(v4);
            }
            let bits = u128::from(v6);
            let seg = v6.segments();
            let embedded = Ipv4Addr::from(bits as u32);
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (seg[0] & 0xe000) != 0x2000 // outside global unicast 2000::/3
                || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
                || (seg[0] == 0x2002 && v4_not_public(Ipv4Addr::new((seg[1] >> 8) as u8, seg[1] as u8, (seg[2] >> 8) as u8, seg[2] as u8)))
                || (bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 && v4_not_public(embedded))
        }
    }
}

fn v4_not_public(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || ip.is_unspecified()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (18..20).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
}
