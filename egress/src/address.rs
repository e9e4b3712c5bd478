//! The address guard: which IP addresses nexo may connect to.
//!
//! Only globally routable unicast addresses pass. Everything else — loopback,
//! private, link-local (cloud metadata at 169.254.169.254), shared CGNAT,
//! documentation, multicast, reserved — is refused with a reason. IPv6 forms
//! that embed an IPv4 address (mapped, translated, compatible, NAT64, 6to4)
//! are refused outright, even when the embedded address is public: which IPv4
//! host they reach depends on the network, not on the address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address the guard refuses, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonPublic {
    /// The refused address.
    pub ip: IpAddr,
    /// What kind of address it is, e.g. "a loopback address".
    pub reason: &'static str,
}

impl NonPublic {
    /// The IPv4 address embedded in a refused IPv6 address (mapped, translated,
    /// compatible, NAT64 or 6to4), if there is one.
    pub fn embedded_ipv4(&self) -> Option<Ipv4Addr> {
        match self.ip {
            IpAddr::V4(_) => None,
            IpAddr::V6(v6) => embedded_ipv4(v6),
        }
    }

    /// The reason, naming the embedded IPv4 address where there is one:
    /// "an IPv4-mapped IPv6 address (embeds 127.0.0.1)".
    pub fn explanation(&self) -> String {
        match self.embedded_ipv4() {
            Some(v4) => format!("{} (embeds {v4})", self.reason),
            None => self.reason.to_string(),
        }
    }
}

impl fmt::Display for NonPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {}", self.ip, self.explanation())
    }
}

impl std::error::Error for NonPublic {}

/// Accepts `ip` only if it is a public (globally routable unicast) address.
pub fn check_address(ip: IpAddr) -> Result<(), NonPublic> {
    let reason = match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    };
    match reason {
        Some(reason) => Err(NonPublic { ip, reason }),
        None => Ok(()),
    }
}

/// `(network, prefix length, reason)`; the first match wins.
const V4_RANGES: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 8, "a \"this network\" address (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "a private address (10.0.0.0/8)"),
    ([100, 64, 0, 0], 10, "a shared carrier-grade NAT address (100.64.0.0/10)"),
    ([127, 0, 0, 0], 8, "a loopback address"),
    (
        [169, 254, 0, 0],
        16,
        "a link-local address (169.254.0.0/16, which holds the 169.254.169.254 cloud metadata endpoint)",
    ),
    ([172, 16, 0, 0], 12, "a private address (172.16.0.0/12)"),
    ([192, 0, 0, 0], 24, "an IETF protocol assignment address (192.0.0.0/24)"),
    ([192, 0, 2, 0], 24, "a documentation address (192.0.2.0/24)"),
    ([192, 88, 99, 0], 24, "a 6to4 relay anycast address (192.88.99.0/24)"),
    ([192, 168, 0, 0], 16, "a private address (192.168.0.0/16)"),
    ([198, 18, 0, 0], 15, "a benchmarking address (198.18.0.0/15)"),
    ([198, 51, 100, 0], 24, "a documentation address (198.51.100.0/24)"),
    ([203, 0, 113, 0], 24, "a documentation address (203.0.113.0/24)"),
    ([224, 0, 0, 0], 4, "a multicast address"),
    ([255, 255, 255, 255], 32, "the broadcast address"),
    ([240, 0, 0, 0], 4, "a reserved address (240.0.0.0/4)"),
];

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    V4_RANGES.iter().find(|(net, len, _)| prefix_match32(bits, u32::from_be_bytes(*net), *len)).map(|(_, _, r)| *r)
}

fn prefix_match32(bits: u32, net: u32, len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    bits & mask == net & mask
}

fn prefix_match128(bits: u128, net: u128, len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    bits & mask == net & mask
}

const MAPPED: &str = "an IPv4-mapped IPv6 address";
const TRANSLATED: &str = "an IPv4-translated IPv6 address";
const COMPATIBLE: &str = "an IPv4-compatible IPv6 address";
const NAT64: &str = "a NAT64 address (IPv4-translated)";
const SIX_TO_FOUR: &str = "a 6to4 address";

/// Outside 2000::/3 (global unicast); the first match wins.
const V6_SPECIAL: &[(u128, u32, &str)] = &[
    (0, 128, "the unspecified address"),
    (1, 128, "a loopback address"),
    (0xffff_0000_0000, 96, MAPPED),
    (0xffff_0000_0000_0000, 96, TRANSLATED),
    (0, 96, COMPATIBLE),
    (0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96, NAT64),
    (0x0064_ff9b_0001_0000_0000_0000_0000_0000, 48, NAT64),
    (0x0100_0000_0000_0000_0000_0000_0000_0000, 64, "a discard-only address (100::/64)"),
    (0xfc00_0000_0000_0000_0000_0000_0000_0000, 7, "a unique-local address (fc00::/7)"),
    (0xfe80_0000_0000_0000_0000_0000_0000_0000, 10, "a link-local address (fe80::/10)"),
    (0xfec0_0000_0000_0000_0000_0000_0000_0000, 10, "a site-local address (fec0::/10)"),
    (0xff00_0000_0000_0000_0000_0000_0000_0000, 8, "a multicast address"),
];

/// Inside 2000::/3 but not globally reachable.
const V6_GLOBAL_EXCEPTIONS: &[(u128, u32, &str)] = &[
    (0x2001_0db8_0000_0000_0000_0000_0000_0000, 32, "a documentation address (2001:db8::/32)"),
    (0x2001_0000_0000_0000_0000_0000_0000_0000, 32, "a Teredo address (2001::/32)"),
    (0x2001_0002_0000_0000_0000_0000_0000_0000, 48, "a benchmarking address (2001:2::/48)"),
    (0x2001_0010_0000_0000_0000_0000_0000_0000, 28, "an ORCHID address (2001:10::/28)"),
    (0x2001_0020_0000_0000_0000_0000_0000_0000, 28, "an ORCHIDv2 address (2001:20::/28)"),
    (0x2002_0000_0000_0000_0000_0000_0000_0000, 16, SIX_TO_FOUR),
    (0x3fff_0000_0000_0000_0000_0000_0000_0000, 20, "a documentation address (3fff::/20)"),
];

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    let global_unicast = prefix_match128(bits, 0x2000 << 112, 3);
    let table = if global_unicast { V6_GLOBAL_EXCEPTIONS } else { V6_SPECIAL };
    match table.iter().find(|(net, len, _)| prefix_match128(bits, *net, *len)) {
        Some((_, _, reason)) => Some(reason),
        None if global_unicast => None,
        None => Some("not a global unicast address"),
    }
}

fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    match v6_reason(ip)? {
        MAPPED | TRANSLATED | COMPATIBLE => Some(low32),
        NAT64 if prefix_match128(bits, 0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) => Some(low32),
        SIX_TO_FOUR => Some(Ipv4Addr::from((bits >> 80) as u32)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ip: &str) -> Option<&'static str> {
        let ip: IpAddr = ip.parse().unwrap();
        check_address(ip).err().map(|e| e.reason)
    }

    #[test]
    fn refuses_every_non_global_range() {
        let table: &[(&str, &str)] = &[
            ("0.0.0.0", "this network"),
            ("0.1.2.3", "this network"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.0.1", "link-local"),
            ("192.0.0.8", "IETF protocol assignment"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("192.88.99.1", "6to4 relay"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.254", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:8.8.8.8", "IPv4-mapped"),
            ("::ffff:0:7f00:1", "IPv4-translated"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::8.8.8.8", "IPv4-compatible"),
            ("64:ff9b::a00:1", "NAT64"),
            ("64:ff9b::808:808", "NAT64"),
            ("64:ff9b:1::1", "NAT64"),
            ("100::1", "discard"),
            ("fd00::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001::1", "Teredo"),
            ("2001:10::1", "ORCHID"),
            ("2001:20::1", "ORCHIDv2"),
            ("2001:2::1", "benchmarking"),
            ("2002:7f00:1::1", "6to4"),
            ("2002:808:808::1", "6to4"),
            ("3fff::1", "documentation"),
            ("4000::1", "not a global unicast"),
            ("1::1", "not a global unicast"),
        ];
        for (ip, want) in table {
            let got = reason(ip).unwrap_or_else(|| panic!("{ip} was accepted"));
            assert!(got.contains(want), "{ip}: reason {got:?} does not mention {want:?}");
        }
    }

    #[test]
    fn accepts_public_addresses() {
        for ip in [
            "8.8.8.8",
            "93.184.216.34",
            "1.1.1.1",
            "100.128.0.1",
            "100.63.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "2001:4860::8888",
            "2001:3::1",
        ] {
            assert_eq!(check_address(ip.parse().unwrap()), Ok(()), "{ip} was refused");
        }
    }

    #[test]
    fn display_names_the_address_and_reason() {
        let err = check_address("127.0.0.1".parse().unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "127.0.0.1 is a loopback address");
        let err = check_address("169.254.169.254".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("169.254.169.254 cloud metadata"), "{err}");
    }

    #[test]
    fn embedded_ipv4_is_named() {
        let table = [
            ("::ffff:127.0.0.1", "127.0.0.1"),
            ("::ffff:8.8.8.8", "8.8.8.8"),
            ("::ffff:0:7f00:1", "127.0.0.1"),
            ("::127.0.0.1", "127.0.0.1"),
            ("64:ff9b::a00:1", "10.0.0.1"),
            ("2002:7f00:1::1", "127.0.0.1"),
        ];
        for (ip, v4) in table {
            let err = check_address(ip.parse().unwrap()).unwrap_err();
            assert_eq!(err.embedded_ipv4(), Some(v4.parse().unwrap()), "{ip}");
            assert!(err.to_string().contains(&format!("embeds {v4}")), "{ip}: {err}");
        }
        assert_eq!(check_address("fd00::1".parse().unwrap()).unwrap_err().embedded_ipv4(), None);
    }
}
