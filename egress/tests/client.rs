//! The guarded client against real loopback servers: what it sends, what it
//! returns, limits, redirects, secrets and exemptions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{FakeResolver, Reply, Server, hosts, routed_client};
use nexo_egress::{EgressError, GuardedClient, Policy, SecretHeader, USER_AGENT};

fn public_resolver() -> FakeResolver {
    FakeResolver::new(&[
        ("public.test", &["93.184.216.34"]),
        ("www.public.test", &["93.184.216.34"]),
        ("api.public.test", &["93.184.216.34"]),
        ("other.public.test", &["93.184.216.34"]),
    ])
}

fn header_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

#[tokio::test]
async fn get_returns_status_body_type_and_final_url() {
    let server = Server::start(|_| Reply::ok("text/plain; charset=utf-8", "hello")).await;
    let client = routed_client(public_resolver(), &server);
    let response = client.get("http://public.test/page?q=1", &[], &Policy::new(hosts(&["public.test"]))).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"hello");
    assert!(!response.truncated);
    assert_eq!(response.content_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(response.url, "http://public.test/page?q=1");
    assert!(response.headers.iter().any(|(n, v)| n == "content-length" && v == "5"), "{:?}", response.headers);

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/page?q=1");
    assert_eq!(USER_AGENT, format!("nexo/{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(seen[0].all("user-agent"), [USER_AGENT]);
    assert_eq!(seen[0].header("host"), Some("public.test"));
    assert_eq!(seen[0].header("cookie"), None);
}

#[tokio::test]
async fn caller_credentials_and_controlled_headers_are_dropped() {
    let server = Server::start(|_| Reply::ok("text/plain", "ok")).await;
    let client = routed_client(public_resolver(), &server);
    let headers = header_pairs(&[
        ("Authorization", "Bearer caller-token"),
        ("Cookie", "session=caller"),
        ("Host", "evil.example"),
        ("User-Agent", "curl/8"),
        ("Proxy-Authorization", "Basic eA=="),
        ("X-Forwarded-For", "127.0.0.1"),
        ("Accept", "text/html"),
        ("X-Custom", "kept"),
    ]);
    client.get("http://public.test/", &headers, &Policy::new(hosts(&["public.test"]))).await.unwrap();
    let seen = &server.requests()[0];
    assert_eq!(seen.all("accept"), ["text/html"]);
    assert_eq!(seen.header("x-custom"), Some("kept"));
    assert_eq!(seen.all("host"), ["public.test"]);
    assert_eq!(seen.all("user-agent"), [USER_AGENT]);
    for dropped in ["authorization", "cookie", "proxy-authorization", "x-forwarded-for"] {
        assert_eq!(seen.header(dropped), None, "{dropped} reached the server: {seen:?}");
    }
}

#[tokio::test]
async fn secret_header_is_injected_and_never_shown() {
    const KEY: &str = "sk-test-0123456789abcdef";
    // The server echoes the key back, as some error pages do.
    let server = Server::start(|req| {
        let key = req.header("x-api-key").unwrap_or("none").to_string();
        Reply {
            status: 200,
            headers: vec![("X-Echo".into(), key.clone()), ("Content-Type".into(), "text/plain".into())],
            body: format!("your key is {key}").into_bytes(),
        }
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let secret = SecretHeader::new("X-Api-Key", KEY).unwrap().for_origins(["http://www.public.test"]).unwrap();
    let policy = Policy::new(hosts(&["public.test"])).inject(secret);
    assert!(!format!("{policy:?}").contains(KEY), "{policy:?}");
    assert!(format!("{policy:?}").contains("x-api-key: <redacted>"), "{policy:?}");

    // A caller header of the same name cannot replace or add to the secret.
    let forged = header_pairs(&[("x-api-key", "forged")]);
    let response = client.get("http://www.public.test/data", &forged, &policy).await.unwrap();
    let seen = &server.requests()[0];
    assert_eq!(seen.all("x-api-key"), [KEY], "the granted host gets exactly the secret");
    assert!(!format!("{response:?}").contains(KEY), "{response:?}");
    assert_eq!(response.body, b"your key is <redacted>");
    assert!(response.headers.contains(&("x-echo".into(), "<redacted>".into())), "{:?}", response.headers);

    let err = client.get("http://elsewhere.test/", &[], &policy).await.unwrap_err();
    assert!(!format!("{err:?} {err}").contains(KEY));
}

#[tokio::test]
async fn body_is_capped_and_marked_truncated() {
    let server = Server::start(|_| Reply::ok("application/octet-stream", vec![b'x'; 1_000_000])).await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).max_body(1000);
    let response = client.get("http://public.test/big", &[], &policy).await.unwrap();
    assert_eq!(response.body.len(), 1000);
    assert!(response.truncated);

    let policy = Policy::new(hosts(&["public.test"])).max_body(1_000_000);
    let response = client.get("http://public.test/big", &[], &policy).await.unwrap();
    assert_eq!(response.body.len(), 1_000_000);
    assert!(!response.truncated, "a body of exactly max_body is whole");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let server = Server::silent().await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = client.get("http://public.test/slow?token=hidden", &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::Timeout(_)), "{err}");
    assert!(!err.is_refusal());
    assert!(!err.to_string().contains("hidden"), "query strings stay out of messages: {err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(server.count(), 1, "the request reached the server");
}

#[tokio::test]
async fn redirects_within_the_list_are_followed() {
    let server = Server::start(|req| match req.target.as_str() {
        "/start" => Reply::redirect(302, "http://www.public.test/middle"),
        "/middle" => Reply::redirect(303, "/final?x=1"),
        "/final?x=1" => Reply::ok("text/html", "final"),
        "/no-location" => Reply { status: 302, headers: vec![], body: b"nowhere".to_vec() },
        _ => Reply { status: 404, headers: vec![], body: Vec::new() },
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"]));
    let response = client.get("http://public.test/start", &[], &policy).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"final");
    assert_eq!(response.url, "http://www.public.test/final?x=1");
    let hosts_seen: Vec<_> = server.requests().iter().map(|r| r.header("host").unwrap().to_string()).collect();
    assert_eq!(hosts_seen, ["public.test", "www.public.test", "www.public.test"]);

    // A 3xx without Location is an answer, not a redirect.
    let response = client.get("http://public.test/no-location", &[], &policy).await.unwrap();
    assert_eq!(response.status, 302);
    assert_eq!(response.body, b"nowhere");

    // No redirects allowed: the first one is too many.
    let err = client.get("http://public.test/start", &[], &policy.clone().max_redirects(0)).await.unwrap_err();
    assert!(matches!(err, EgressError::TooManyRedirects { limit: 0, .. }), "{err}");
}

#[tokio::test]
async fn allow_private_exempts_exactly_the_listed_address() {
    let server = Server::start(|_| Reply::ok("application/json", "{}")).await;
    let url = format!("http://127.0.0.1:{}/search", server.port());
    let policy = Policy::new(hosts(&["127.0.0.1"]));

    let exempt = GuardedClient::builder().allow_private([IpAddr::from([127, 0, 0, 1])]).build().unwrap();
    let response = exempt.get(&url, &[], &policy).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"{}");

    let guarded = GuardedClient::new().unwrap();
    let err = guarded.get(&url, &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::NonPublicAddress { .. }), "{err}");

    // Another loopback address is not exempt.
    let other = format!("http://127.0.0.2:{}/", server.port());
    let err = exempt.get(&other, &[], &Policy::new(hosts(&["127.0.0.2"]))).await.unwrap_err();
    assert!(matches!(err, EgressError::NonPublicAddress { .. }), "{err}");
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn allow_private_exempts_resolved_names_too() {
    let server = Server::start(|_| Reply::ok("text/plain", "backend")).await;
    let resolver = FakeResolver::new(&[("backend.internal", &["127.0.0.1"])]);
    let client = GuardedClient::builder()
        .resolver(Arc::new(resolver))
        .allow_private([IpAddr::from([127, 0, 0, 1])])
        .build()
        .unwrap();
    let url = format!("http://backend.internal:{}/", server.port());
    let response = client.get(&url, &[], &Policy::new(hosts(&["backend.internal"]))).await.unwrap();
    assert_eq!(response.body, b"backend");
}

#[test]
fn allow_private_refuses_unspecified_multicast_and_broadcast() {
    for ip in ["0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255", "::ffff:0.0.0.0"] {
        let ip: IpAddr = ip.parse().unwrap();
        let err = GuardedClient::builder().allow_private([ip]).build().unwrap_err();
        assert!(matches!(err, EgressError::Config(_)), "{ip}: {err}");
        assert!(err.to_string().contains(&ip.to_string()), "{err}");
    }
}

#[tokio::test]
async fn also_within_narrows_the_hosts() {
    let server = Server::start(|_| Reply::ok("text/plain", "ok")).await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).also_within(hosts(&["api.public.test"]));

    let response = client.get("http://api.public.test/v1", &[], &policy).await.unwrap();
    assert_eq!(response.status, 200);

    for url in ["http://public.test/", "http://other.public.test/"] {
        let err = client.get(url, &[], &policy).await.unwrap_err();
        assert!(
            matches!(&err, EgressError::HostNotAllowed { allowed, .. } if allowed.contains("api.public.test")),
            "{err}"
        );
        assert!(err.is_refusal());
    }
    // Every narrowing list must match.
    let twice = policy.clone().also_within(hosts(&["www.public.test"]));
    let err = client.get("http://api.public.test/v1", &[], &twice).await.unwrap_err();
    assert!(matches!(err, EgressError::HostNotAllowed { .. }), "{err}");
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn off_list_hosts_are_refused_before_any_lookup() {
    let resolver = public_resolver();
    let calls = resolver.calls.clone();
    let server = Server::trap().await;
    let client = routed_client(resolver, &server);
    let err = client.get("http://notpublic.test/", &[], &Policy::new(hosts(&["public.test"]))).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "host `notpublic.test` is not on the allow-list (allowed: public.test); only listed hosts and their subdomains can be reached"
    );
    let err = client.get("http://public.test/", &[], &Policy::new(Default::default())).await.unwrap_err();
    assert!(matches!(err, EgressError::HostNotAllowed { .. }), "an empty list allows nothing: {err}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(server.count(), 0);
}

#[tokio::test]
async fn clones_share_the_client() {
    let server = Server::start(|_| Reply::ok("text/plain", "ok")).await;
    let client = routed_client(public_resolver(), &server);
    let clone = client.clone();
    let policy = Policy::new(hosts(&["public.test"]));
    let (a, b) =
        tokio::join!(client.get("http://public.test/a", &[], &policy), clone.get("http://public.test/b", &[], &policy));
    assert_eq!(a.unwrap().status, 200);
    assert_eq!(b.unwrap().status, 200);
    assert_eq!(server.count(), 2);
}

#[tokio::test]
async fn bad_caller_headers_are_refused() {
    let server = Server::trap().await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"]));
    let err =
        client.get("http://public.test/", &header_pairs(&[("X-Ok", "a\r\nInjected: 1")]), &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::BadRequest(_)), "{err}");
    let err = client.get("http://public.test/", &header_pairs(&[("Bad Name", "v")]), &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::BadRequest(_)), "{err}");
    assert_eq!(server.count(), 0);
}

/// Collects `nexo::egress` events as text, one line per event.
#[derive(Default, Clone)]
struct Capture(Arc<std::sync::Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(format!("{} {}", event.metadata().target(), event.metadata().level()));
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn one_log_line_per_hop_without_query_or_secrets() {
    const KEY: &str = "sk-log-test-0123456789";
    let server = Server::start(|req| match req.target.as_str() {
        "/start?token=hidden" => Reply::redirect(302, "/final?token=hidden2"),
        _ => Reply::ok("text/plain", "ok"),
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let secret = SecretHeader::new("x-api-key", KEY).unwrap().for_origins(["http://public.test"]).unwrap();
    let policy = Policy::new(hosts(&["public.test"])).inject(secret);
    let capture = Capture::default();
    let guard = tracing::subscriber::set_default(capture.clone());
    client.get("http://public.test/start?token=hidden", &[], &policy).await.unwrap();
    client.get("http://elsewhere.test/x?token=hidden3", &[], &policy).await.unwrap_err();
    drop(guard);

    let lines = capture.0.lock().unwrap().clone();
    let hops: Vec<&String> = lines.iter().filter(|l| l.starts_with("nexo::egress INFO")).collect();
    assert_eq!(hops.len(), 3, "{lines:#?}");
    assert!(hops[0].contains("host=\"public.test\"") && hops[0].contains("verdict=\"redirect\""), "{}", hops[0]);
    assert!(
        hops[0].contains("http://public.test/start") && hops[0].contains("http://public.test/final"),
        "{}",
        hops[0]
    );
    assert!(hops[1].contains("verdict=\"ok\"") && hops[1].contains("status=200"), "{}", hops[1]);
    assert!(hops[2].contains("host=\"elsewhere.test\"") && hops[2].contains("verdict=\"refused\""), "{}", hops[2]);
    for line in &lines {
        assert!(!line.contains("token=") && !line.contains(KEY), "leaked: {line}");
    }
}

#[tokio::test]
async fn caller_headers_are_an_allow_list() {
    let server = Server::start(|_| Reply::ok("text/plain", "ok")).await;
    let client = routed_client(public_resolver(), &server);
    let headers = header_pairs(&[
        // Could read an echoed key in pieces or compressed, past the scrubber.
        ("Range", "bytes=0-9"),
        ("If-Range", "x"),
        ("Accept-Encoding", "gzip"),
        // GET only means GET only.
        ("X-HTTP-Method-Override", "DELETE"),
        ("X-Method-Override", "PUT"),
        ("X-Original-URL", "/admin"),
        ("X-Real-IP", "127.0.0.1"),
        ("Origin", "https://evil.example"),
        ("Accept-Language", "en"),
        ("X-Custom", "kept"),
    ]);
    client.get("http://public.test/", &headers, &Policy::new(hosts(&["public.test"]))).await.unwrap();
    let seen = &server.requests()[0];
    let sent: Vec<&str> = seen.headers.iter().map(|(n, _)| n.as_str()).collect();
    for dropped in ["range", "if-range", "x-http-method-override", "x-method-override", "x-original-url"] {
        assert!(!sent.contains(&dropped), "{dropped} reached the server: {sent:?}");
    }
    assert_eq!(seen.all("accept-encoding"), ["identity"], "the client's own, never the caller's");
    assert!(!sent.contains(&"x-real-ip") && !sent.contains(&"origin"), "{sent:?}");
    assert_eq!(seen.header("accept-language"), Some("en"));
    assert_eq!(seen.header("x-custom"), Some("kept"));
}

#[tokio::test]
async fn keys_travel_only_over_tls_or_to_the_operators_own_service() {
    const KEY: &str = "sk-test-tls-only-0123456789";
    let trap = Server::trap().await;
    // `plain.test` is public and not routed: a real connection would be plain http to the internet.
    let resolver = FakeResolver::new(&[("plain.test", &["8.8.8.8"])]);
    let client = GuardedClient::builder().resolver(Arc::new(resolver)).build().unwrap();
    let secret = SecretHeader::new("x-api-key", KEY).unwrap().for_origins(["http://plain.test"]).unwrap();
    let policy = Policy::new(hosts(&["plain.test"])).inject(secret);
    match client.get("http://plain.test/search", &[], &policy).await {
        Err(EgressError::BadRequest(m)) => assert!(m.contains("only over https"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(trap.count(), 0);
    // The operator's exempted private service may take the key over plain http.
    let server =
        Server::start(|req| Reply::ok("text/plain", req.header("x-api-key").unwrap_or("none").len().to_string())).await;
    let exempt = GuardedClient::builder().allow_private([IpAddr::from([127, 0, 0, 1])]).build().unwrap();
    let origin = format!("http://127.0.0.1:{}", server.port());
    let policy = Policy::new(hosts(&["127.0.0.1"]))
        .inject(SecretHeader::new("x-api-key", KEY).unwrap().for_origins([origin]).unwrap());
    let response = exempt.get(&format!("http://127.0.0.1:{}/", server.port()), &[], &policy).await.unwrap();
    assert_eq!(response.body, KEY.len().to_string().as_bytes());
}

#[tokio::test]
async fn a_prefixed_key_is_scrubbed_with_and_without_its_prefix() {
    const KEY: &str = "sk-test-bare-0123456789";
    let server = Server::start(|req| {
        let auth = req.header("authorization").unwrap_or("").to_string();
        let bare = auth.trim_start_matches("Bearer ").to_string();
        Reply::ok("text/plain", format!("got [{auth}] invalid key {bare}"))
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let secret = SecretHeader::with_prefix("Authorization", "Bearer ", KEY).unwrap();
    let policy = Policy::new(hosts(&["public.test"])).inject(secret.for_origins(["http://public.test"]).unwrap());
    let response = client.get("http://public.test/", &[], &policy).await.unwrap();
    assert_eq!(server.requests()[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    let body = String::from_utf8(response.body).unwrap();
    assert_eq!(body, "got [<redacted>] invalid key <redacted>");
}

#[tokio::test]
async fn a_key_straddling_the_body_cap_is_scrubbed_before_the_cut() {
    const KEY: &str = "sk-test-straddle-0123456789";
    let server = Server::start(|_| {
        let mut body = "a".repeat(995);
        body.push_str(KEY);
        body.push_str(&"b".repeat(100));
        Reply::ok("text/plain", body)
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let policy =
        Policy::new(hosts(&["public.test"])).max_body(1000).inject(SecretHeader::new("x-api-key", KEY).unwrap());
    let response = client.get("http://public.test/", &[], &policy).await.unwrap();
    assert_eq!(response.body.len(), 1000);
    assert!(response.truncated);
    let body = String::from_utf8(response.body).unwrap();
    assert!(!body.contains(&KEY[..5]), "the first bytes of the key survived the cut: {}", &body[990..]);
    assert!(body.ends_with("<reda"), "{}", &body[990..]);
}

#[tokio::test]
async fn a_key_in_a_redirect_location_is_scrubbed_from_errors() {
    const KEY: &str = "sk-test-location-0123456789";
    let server =
        Server::start(|req| Reply::redirect(302, &format!("/next/{}", req.header("x-api-key").unwrap_or("")))).await;
    let client = routed_client(public_resolver(), &server);
    let secret = SecretHeader::new("x-api-key", KEY).unwrap().for_origins(["http://public.test"]).unwrap();
    let policy = Policy::new(hosts(&["public.test"])).max_redirects(0).inject(secret);
    let err = client.get("http://public.test/", &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::TooManyRedirects { .. }), "{err:?}");
    assert_eq!(server.requests()[0].header("x-api-key"), Some(KEY), "the key was sent, and echoed");
    assert!(!format!("{err} {err:?}").contains(KEY), "{err}");
}

#[test]
fn link_local_addresses_cannot_be_exempted() {
    for ip in ["169.254.169.254", "fe80::1"] {
        let err = GuardedClient::builder().allow_private([ip.parse::<IpAddr>().unwrap()]).build().unwrap_err();
        assert!(matches!(&err, EgressError::Config(m) if m.contains("link-local")), "{ip}: {err:?}");
    }
}

/// A loopback server that keeps connections open (HTTP/1.1 keep-alive) and
/// counts how many it accepted.
async fn keep_alive_server() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    if stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn clients_built_alike_share_one_pool_and_others_do_not() {
    use std::sync::atomic::Ordering;
    let (addr, accepted) = keep_alive_server().await;
    let url = format!("http://127.0.0.1:{}/", addr.port());
    let policy = Policy::new(hosts(&["127.0.0.1"]));
    let loopback = IpAddr::from([127, 0, 0, 1]);
    // A connect timeout no other test uses, so that no other test's client is this one.
    let build = |secs: u64| {
        GuardedClient::builder().allow_private([loopback]).connect_timeout(Duration::from_secs(secs)).build().unwrap()
    };
    let first = build(41);
    assert_eq!(first.get(&url, &[], &policy).await.unwrap().body, b"ok");
    let second = build(41);
    assert_eq!(second.get(&url, &[], &policy).await.unwrap().body, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the second client reuses the first one's connection");

    let other = build(42);
    assert_eq!(other.get(&url, &[], &policy).await.unwrap().body, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "other settings, another client");

    // A client with its own resolver is never shared.
    let resolver = FakeResolver::new(&[("backend.internal", &["127.0.0.1"])]);
    let own = GuardedClient::builder()
        .resolver(Arc::new(resolver))
        .allow_private([loopback])
        .connect_timeout(Duration::from_secs(41))
        .build()
        .unwrap();
    assert_eq!(own.get(&url, &[], &policy).await.unwrap().body, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 3);

    // Once every user is gone, the next build starts afresh.
    drop((first, second));
    let fresh = build(41);
    assert_eq!(fresh.get(&url, &[], &policy).await.unwrap().body, b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_request_given_up_lets_go_of_its_connection() {
    use tokio::io::AsyncReadExt;
    // Reads the request, never answers, and reports when the client hangs up.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (hung_up, closed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut chunk = [0u8; 1024];
        while stream.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
        let _ = hung_up.send(());
    });
    let client = GuardedClient::builder().allow_private([IpAddr::from([127, 0, 0, 1])]).build().unwrap();
    // The caller gives up long before the policy's timeout: dropping the
    // request's future must end its work too.
    let policy = Policy::new(hosts(&["127.0.0.1"])).timeout(Duration::from_secs(60));
    let url = format!("http://127.0.0.1:{port}/slow");
    let get = client.get(&url, &[], &policy);
    assert!(tokio::time::timeout(Duration::from_millis(200), get).await.is_err());
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the connection of a request given up is closed")
        .unwrap();
}
