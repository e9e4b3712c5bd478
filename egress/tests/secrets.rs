//! API keys against upstreams that misbehave: echoing the key back encoded,
//! answering compressed, or sitting on another port or scheme of a granted
//! host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD, URL_SAFE_NO_PAD};
use common::{FakeResolver, Reply, Server, hosts, routed_client};
use nexo_egress::{EgressError, Policy, SecretHeader};
use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use regex::{Captures, Regex};
use std::sync::LazyLock;

/// Upper- and lower-case letters, digits, `-` and `/`.
const KEY: &str = "sk-Live/7Gh2Qx9Lm4Tz8Wp3";

fn resolver() -> FakeResolver {
    FakeResolver::new(&[("public.test", &["93.184.216.34"]), ("www.public.test", &["93.184.216.34"])])
}

/// The key sent as `Authorization: Bearer <key>` to `origin`.
fn policy(origin: &str) -> Policy {
    let secret = SecretHeader::with_prefix("Authorization", "Bearer ", KEY).unwrap().for_origins([origin]).unwrap();
    Policy::new(hosts(&["public.test"])).inject(secret)
}

/// Each way the echoing upstream below encodes what it received.
const ENCODINGS: &[&str] = &[
    "base64-0",
    "base64-1",
    "base64-2",
    "base64url-0",
    "base64url-1",
    "base64url-2",
    "percent-upper",
    "percent-lower",
    "percent-reserved",
    "form",
    "json-unicode-lower",
    "json-unicode-upper",
    "json-slash",
    "hex-lower",
    "hex-upper",
    "upper",
    "lower",
    "spaced",
    "dashed",
    "mixed",
    "html-entities",
    "html-hex-entities",
    "html-no-semicolon",
    "html-no-semicolon-slash",
    "html-named",
    "html-mixed",
    "js-hex-lower",
    "js-hex-upper",
    "es6-unicode",
    "octal",
    "octal-3",
    "percent-u",
    "percent-u-slash",
    "utf16le-hex",
    "utf16be-hex",
    "utf16le-base64-0",
    "utf16le-base64-1",
    "utf16le-base64-2",
    "utf16be-base64url",
    "base32",
    "base32-nopad-lower",
    "base32-1",
    "base32-2",
    "base32-3",
    "base32-4",
    "glitch-section",
    "glitch-bogus-entity",
    "glitch-bad-percent",
    "glitch-stray-backslash",
];

/// `value` encoded the way `/echo/<how>` asks.
fn encode(how: &str, auth: &str) -> String {
    let key = auth.strip_prefix("Bearer ").unwrap_or(auth);
    let blob = |offset: usize| format!("{}{key}:and-some-more-data", &"ab"[..offset]);
    let each = |f: &dyn Fn(char) -> String| key.chars().map(f).collect::<String>();
    match how {
        "base64-0" | "base64-1" | "base64-2" => STANDARD.encode(blob(how[7..].parse().unwrap())),
        "base64url-0" | "base64url-1" | "base64url-2" => URL_SAFE_NO_PAD.encode(blob(how[10..].parse().unwrap())),
        "percent-upper" => each(&|c| format!("%{:02X}", c as u32)),
        "percent-lower" => each(&|c| format!("%{:02x}", c as u32)),
        "percent-reserved" => utf8_percent_encode(key, NON_ALPHANUMERIC).to_string(),
        // The whole header value, form-encoded: `Bearer+sk-…`.
        "form" => auth.replace(' ', "+").replace('/', "%2F"),
        "json-unicode-lower" => each(&|c| format!("\\u{:04x}", c as u32)),
        "json-unicode-upper" => each(&|c| format!("\\u{:04X}", c as u32)),
        "json-slash" => key.replace('/', "\\/"),
        "hex-lower" => hex::encode(key),
        "hex-upper" => hex::encode_upper(key),
        "upper" => key.to_uppercase(),
        "lower" => key.to_lowercase(),
        "spaced" => key.chars().map(String::from).collect::<Vec<_>>().join(" "),
        "dashed" => key.chars().map(String::from).collect::<Vec<_>>().join("-"),
        "mixed" => key
            .chars()
            .enumerate()
            .map(|(i, c)| match i % 3 {
                0 => format!("%{:02x}", c as u32),
                1 => format!("\\u{:04X}", c as u32),
                _ => c.to_string(),
            })
            .collect(),
        "html-entities" => each(&|c| format!("&#{};", c as u32)),
        "html-hex-entities" => each(&|c| format!("&#x{:X};", c as u32)),
        "html-no-semicolon" => each(&|c| format!("&#{}", c as u32)),
        // `&#477` decodes as U+01DD: the `7` after the slash is lost, the rest must go.
        "html-no-semicolon-slash" => key.replace('-', "&#45").replace('/', "&#47"),
        "html-named" => key.replace('-', "&hyphen;").replace('/', "&sol;"),
        "html-mixed" => key.replace('-', "&#x2d").replace('/', "&sol;").replace('L', "&#76;"),
        "js-hex-lower" => each(&|c| format!("\\x{:02x}", c as u32)),
        "js-hex-upper" => each(&|c| format!("\\x{:02X}", c as u32)),
        "es6-unicode" => each(&|c| format!("\\u{{{:x}}}", c as u32)),
        "octal" => each(&|c| format!("\\{:o}", c as u32)),
        "octal-3" => key.replace('-', "\\055").replace('/', "\\057"),
        "percent-u" => each(&|c| format!("%u{:04X}", c as u32)),
        "percent-u-slash" => key.replace('/', "%u002F"),
        "utf16le-hex" => hex::encode(utf16(key, true)),
        "utf16be-hex" => hex::encode_upper(utf16(key, false)),
        "utf16le-base64-0" | "utf16le-base64-1" | "utf16le-base64-2" => {
            let prefix = utf16(&"ab"[..how[15..].parse().unwrap()], true);
            STANDARD.encode([prefix, utf16(key, true)].concat())
        }
        "utf16be-base64url" => URL_SAFE_NO_PAD.encode(utf16(key, false)),
        "base32" => data_encoding::BASE32.encode(key.as_bytes()),
        "base32-nopad-lower" => data_encoding::BASE32_NOPAD.encode(key.as_bytes()).to_lowercase(),
        "base32-1" | "base32-2" | "base32-3" | "base32-4" => {
            let offset: usize = how[7..].parse().unwrap();
            data_encoding::BASE32.encode(format!("{}{key}:and-some-more-data", &"abcd"[..offset]).as_bytes())
        }
        // One separator or escape the scrubber does not know, in the middle of the key.
        "glitch-section" => key.replace('/', "\u{a7}"),
        "glitch-bogus-entity" => key.replace('/', "&bogus;"),
        "glitch-bad-percent" => key.replace('/', "%zz"),
        "glitch-stray-backslash" => key.replace('/', "\\q"),
        other => panic!("unknown encoding {other}"),
    }
}

/// The UTF-16 bytes of `text`, little- or big-endian.
fn utf16(text: &str, little_endian: bool) -> Vec<u8> {
    text.encode_utf16().flat_map(|u| if little_endian { u.to_le_bytes() } else { u.to_be_bytes() }).collect()
}

/// The 8-character pieces of `text`, lowercased.
fn windows(text: &str) -> Vec<Vec<u8>> {
    text.to_ascii_lowercase().as_bytes().windows(8).map(<[u8]>::to_vec).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// Tries to get 8 consecutive characters of the key back out of `body` the
/// ways a reader could: as is, JSON-decoded, percent-decoded, with
/// JavaScript, C, IIS and HTML escapes decoded, hex-, base64- and
/// base32-decoded (also read as UTF-16), and with every separator removed.
/// Returns how it did. Eight is stricter than the scrubber's fragment rule
/// (twelve): the echoes below leave at most the six characters of `sk-Live`.
fn recover(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body).into_owned();
    let mut texts = vec![text.clone()];
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(&text) {
        texts.extend(map.values().filter_map(|v| v.as_str().map(String::from)));
    } else if let Ok(unescaped) = serde_json::from_str::<String>(&format!("\"{text}\"")) {
        texts.push(unescaped);
    }
    texts.extend(texts.clone().iter().map(|t| percent_decode_str(t).decode_utf8_lossy().into_owned()));
    texts.extend(texts.clone().iter().map(|t| unescape(t)));
    texts.extend(texts.clone().iter().map(|t| html_escape::decode_html_entities(t).into_owned()));
    let key_windows = windows(KEY);
    let key_alnum: String = KEY.chars().filter(char::is_ascii_alphanumeric).collect();
    let alnum_windows = windows(&key_alnum);
    let lenient = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let base32 = {
        let mut spec = data_encoding::Specification::new();
        spec.symbols.push_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567");
        spec.check_trailing_bits = false;
        spec.encoding().unwrap()
    };
    for t in &texts {
        let mut decoded: Vec<(String, Vec<u8>)> = vec![("plain".into(), t.as_bytes().to_vec())];
        for run in t.split(|c: char| !c.is_ascii_hexdigit()).filter(|r| r.len() >= 16) {
            for skip in 0..2 {
                let even = &run[skip..run.len() - (run.len() - skip) % 2];
                if let Ok(bytes) = hex::decode(even) {
                    decoded.push(("hex".into(), bytes));
                }
            }
        }
        let b64 = |c: char| c.is_ascii_alphanumeric() || "+/-_".contains(c);
        for run in t.split(|c: char| !b64(c)).filter(|r| r.len() >= 11) {
            let std: String = run
                .chars()
                .map(|c| {
                    if c == '-' {
                        '+'
                    } else if c == '_' {
                        '/'
                    } else {
                        c
                    }
                })
                .collect();
            for skip in 0..4.min(std.len()) {
                let part = &std[skip..];
                if let Ok(bytes) = lenient.decode(&part[..part.len() - part.len() % 4]) {
                    decoded.push((format!("base64 from char {skip}"), bytes));
                }
            }
        }
        let b32 = |c: char| c.is_ascii_alphabetic() || ('2'..='7').contains(&c);
        for run in t.split(|c: char| !b32(c)).filter(|r| r.len() >= 13) {
            let upper = run.to_ascii_uppercase();
            for skip in 0..8.min(upper.len()) {
                let part = &upper[skip..];
                if let Ok(bytes) = base32.decode(&part.as_bytes()[..part.len() - part.len() % 8]) {
                    decoded.push((format!("base32 from char {skip}"), bytes));
                }
            }
        }
        // UTF-16 of ASCII: every other byte is zero.
        let utf16: Vec<(String, Vec<u8>)> = decoded
            .iter()
            .map(|(how, bytes)| (format!("{how}, as UTF-16"), bytes.iter().copied().filter(|b| *b != 0).collect()))
            .collect();
        decoded.extend(utf16);
        for (how, bytes) in &decoded {
            if let Some(w) = key_windows.iter().find(|w| contains(bytes, w)) {
                return Some(format!("{how}: {}", String::from_utf8_lossy(w)));
            }
        }
        let alnum: String = t.chars().filter(char::is_ascii_alphanumeric).collect();
        if let Some(w) = alnum_windows.iter().find(|w| contains(alnum.as_bytes(), w)) {
            return Some(format!("separators removed: {}", String::from_utf8_lossy(w)));
        }
    }
    None
}

/// JavaScript and C escapes (`\xNN`, `\uNNNN`, `\u{N}`, octal `\NNN`),
/// `%uNNNN` and HTML numeric entities with or without `;`, decoded.
fn unescape(text: &str) -> String {
    // Groups 1 to 5 are hex, 6 octal, 7 decimal.
    static ESCAPE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"\\x([0-9a-fA-F]{2})|\\u\{([0-9a-fA-F]{1,6})\}|\\u([0-9a-fA-F]{4})|%[uU]([0-9a-fA-F]{4})",
            r"|&#[xX]([0-9a-fA-F]{1,6});?|\\([0-7]{1,3})|&#([0-9]{1,7});?",
        ))
        .unwrap()
    });
    ESCAPE
        .replace_all(text, |caps: &Captures<'_>| {
            let group = (1..=7).find(|&i| caps.get(i).is_some()).unwrap();
            let radix = match group {
                6 => 8,
                7 => 10,
                _ => 16,
            };
            let decoded = u32::from_str_radix(&caps[group], radix).ok().and_then(char::from_u32);
            decoded.map_or_else(|| caps[0].to_string(), String::from)
        })
        .into_owned()
}

#[test]
fn the_oracle_recovers_every_encoding() {
    // Without scrubbing, every encoding the upstream uses gives the key back.
    for how in ENCODINGS {
        let body = format!("{{\"echo\":\"{}\"}}", encode(how, &format!("Bearer {KEY}")));
        assert!(recover(body.as_bytes()).is_some(), "{how}: {body}");
    }
    assert_eq!(recover(b"{\"echo\":\"<redacted>\"}"), None);
}

#[tokio::test]
async fn an_echoed_key_is_unrecoverable_in_every_encoding() {
    let server = Server::start(|req| {
        let auth = req.header("authorization").unwrap_or("none").to_string();
        let how = req.target.trim_start_matches("/echo/");
        let echoed = encode(how, &auth);
        Reply {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("X-Echo".into(), echoed.clone()),
                // Header names are tokens: the key's hex fits.
                (format!("X-Key-{}", hex::encode(auth.trim_start_matches("Bearer "))), "1".into()),
            ],
            body: format!("{{\"echo\":\"{echoed}\",\"note\":\"invalid key\"}}").into_bytes(),
        }
    })
    .await;
    let client = routed_client(resolver(), &server);
    let policy = policy("http://public.test");
    for how in ENCODINGS {
        let response = client.get(&format!("http://public.test/echo/{how}"), &[], &policy).await.unwrap();
        let body = String::from_utf8(response.body.clone()).unwrap();
        assert!(body.contains("<redacted>") && body.contains("\"note\":\"invalid key\""), "{how}: {body}");
        assert_eq!(recover(&response.body), None, "{how}: {body}");
        let echo = &response.headers.iter().find(|(n, _)| n == "x-echo").unwrap().1;
        assert_eq!(recover(echo.as_bytes()), None, "{how} in a header: {echo}");
        let names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"x-key-<redacted>"), "{names:?}");
        assert_eq!(recover(names.join(" ").as_bytes()), None, "in a header name: {names:?}");
    }
    // The key did go out, exactly: the upstream really echoed it.
    assert!(server.requests().iter().all(|r| r.header("authorization") == Some(format!("Bearer {KEY}").as_str())));
}

#[tokio::test]
async fn an_encoded_key_straddling_the_body_cap_is_scrubbed_before_the_cut() {
    for how in ["hex-upper", "spaced", "json-unicode-lower"] {
        let server = Server::start(move |req| {
            let mut body = "a".repeat(990);
            body.push_str(&encode(how, req.header("authorization").unwrap_or("")));
            body.push_str(&"b".repeat(500));
            Reply::ok("text/plain", body)
        })
        .await;
        let client = routed_client(resolver(), &server);
        let response =
            client.get("http://public.test/", &[], &policy("http://public.test").max_body(1000)).await.unwrap();
        assert_eq!(response.body.len(), 1000, "{how}");
        let tail = String::from_utf8_lossy(&response.body[980..]).into_owned();
        assert!(tail.ends_with("<redacted>"), "{how}: {tail}");
    }
}

#[tokio::test]
async fn a_compressed_body_is_refused_and_identity_is_asked_for() {
    let server = Server::start(|req| match req.target.split('?').next().unwrap_or_default() {
        "/gzip" => Reply {
            status: 200,
            headers: vec![("Content-Encoding".into(), "gzip".into())],
            body: vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3],
        },
        "/stacked" => Reply {
            status: 200,
            headers: vec![("Content-Encoding".into(), "identity, br".into())],
            body: b"x".to_vec(),
        },
        "/named-after-the-key" => Reply {
            status: 200,
            headers: vec![("Content-Encoding".into(), req.header("authorization").unwrap_or("").into())],
            body: b"x".to_vec(),
        },
        _ => Reply {
            status: 200,
            headers: vec![("Content-Encoding".into(), "Identity".into())],
            body: b"plain".to_vec(),
        },
    })
    .await;
    let client = routed_client(resolver(), &server);
    let policy = policy("http://public.test");
    for (path, encoding) in [("/gzip", "gzip"), ("/stacked", "identity, br")] {
        match client.get(&format!("http://public.test{path}?q=1"), &[], &policy).await {
            Err(err @ EgressError::UnrequestedEncoding { .. }) => {
                let text = err.to_string();
                assert!(text.contains(&format!("content-encoding: {encoding}")), "{text}");
                assert!(text.contains("did not ask for") && text.contains("http://public.test"), "{text}");
                assert!(!err.is_refusal(), "the upstream misbehaved; the request was allowed");
            }
            other => panic!("{path}: expected a refusal, got {other:?}"),
        }
    }
    let err = client.get("http://public.test/named-after-the-key", &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::UnrequestedEncoding { .. }), "{err}");
    assert!(recover(format!("{err} {err:?}").as_bytes()).is_none(), "{err}");
    // `identity`, in any case, is what was asked for.
    let response = client.get("http://public.test/plain", &[], &policy).await.unwrap();
    assert_eq!(response.body, b"plain");
    let caller = [("Accept-Encoding".to_string(), "gzip, br".to_string())];
    client.get("http://public.test/plain", &caller, &policy).await.unwrap();
    for seen in server.requests() {
        assert_eq!(seen.all("accept-encoding"), ["identity"], "{seen:?}");
    }
}

#[tokio::test]
async fn a_key_goes_only_to_its_exact_origin() {
    let granted = Server::start(|req| match req.target.as_str() {
        "/to-other-port" => Reply::redirect(302, req.header("x-other").unwrap_or("")),
        _ => Reply::ok("text/plain", "granted"),
    })
    .await;
    let other = Server::start(|_| Reply::ok("text/plain", "other")).await;
    let (port, other_port) = (granted.port(), other.port());
    // Both servers answer for public.test: only the port tells them apart.
    let client = routed_client(resolver(), &granted);
    let policy = policy(&format!("http://public.test:{port}"));
    let auth =
        |s: &Server| s.requests().iter().map(|r| r.header("authorization").map(String::from)).collect::<Vec<_>>();

    client.get(&format!("http://public.test:{port}/"), &[], &policy).await.unwrap();
    assert_eq!(auth(&granted), [Some(format!("Bearer {KEY}"))], "the exact origin gets the key");

    // Another port of the same host, directly and through a redirect.
    let response = client.get(&format!("http://public.test:{other_port}/"), &[], &policy).await.unwrap();
    assert_eq!(response.body, b"other");
    let redirect = [("X-Other".to_string(), format!("http://public.test:{other_port}/after"))];
    let response = client.get(&format!("http://public.test:{port}/to-other-port"), &redirect, &policy).await.unwrap();
    assert_eq!((response.body.as_slice(), response.url.as_str()), (b"other".as_slice(), &*redirect[0].1));
    assert_eq!(auth(&other), [None, None], "another port never gets the key");
    // A subdomain of the granted host, on the granted port.
    client.get(&format!("http://www.public.test:{port}/"), &[], &policy).await.unwrap();
    // The same host and port under another scheme.
    let https_only = self::policy(&format!("https://public.test:{port}"));
    client.get(&format!("http://public.test:{port}/"), &[], &https_only).await.unwrap();
    assert_eq!(auth(&granted)[1..], [Some(format!("Bearer {KEY}")), None, None], "the redirect's first hop had it");
}

#[tokio::test]
async fn by_default_a_key_goes_only_to_https_on_port_443_of_a_host_entry() {
    let server = Server::start(|_| Reply::ok("text/plain", "ok")).await;
    let client = routed_client(resolver(), &server);
    let secret = SecretHeader::new("x-api-key", KEY).unwrap();
    assert!(secret.origins().is_none());
    let policy = Policy::new(hosts(&["public.test"])).inject(secret);
    assert_eq!(policy.secrets_for("https://public.test/v1?q=1"), ["x-api-key"]);
    assert_eq!(policy.secrets_for("https://PUBLIC.test:443/"), ["x-api-key"]);
    for url in ["http://public.test/", "https://public.test:8443/", "https://www.public.test/", "https://other.test/"] {
        assert!(policy.secrets_for(url).is_empty(), "{url}");
    }
    // Plain http to the granted host: the request goes out, without the key.
    client.get(&format!("http://public.test:{}/", server.port()), &[], &policy).await.unwrap();
    assert_eq!(server.requests()[0].header("x-api-key"), None);

    // An explicit https origin: the same host over http, or on 443, does not match.
    let policy = Policy::new(hosts(&["public.test"]))
        .inject(SecretHeader::new("x-api-key", KEY).unwrap().for_origins(["https://public.test:8443"]).unwrap());
    assert_eq!(policy.secrets_for("https://public.test:8443/"), ["x-api-key"]);
    assert!(policy.secrets_for("http://public.test:8443/").is_empty());
    assert!(policy.secrets_for("https://public.test/").is_empty());
}

#[test]
fn origins_must_be_origins() {
    let secret = || SecretHeader::new("x-api-key", KEY).unwrap();
    for bad in ["public.test", "https://public.test/v1", "ftp://public.test"] {
        let err = secret().for_origins([bad]).unwrap_err();
        assert!(matches!(&err, EgressError::Config(m) if m.contains(bad)), "{err}");
    }
    let err = secret().for_origins(Vec::<String>::new()).unwrap_err();
    assert!(matches!(&err, EgressError::Config(m) if m.contains("x-api-key")), "{err}");
}
