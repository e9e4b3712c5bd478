//! SSRF vectors through `GuardedClient::get`: every one is refused, with the
//! right error, and no loopback server is ever reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FakeResolver, RebindingResolver, Reply, Server, hosts, routed_client};
use nexo_egress::{EgressError, GuardedClient, Policy};

fn variant(e: &EgressError) -> &'static str {
    match e {
        EgressError::BadUrl(_) => "BadUrl",
        EgressError::BadRequest(_) => "BadRequest",
        EgressError::HostNotAllowed { .. } => "HostNotAllowed",
        EgressError::NonPublicAddress { .. } => "NonPublicAddress",
        EgressError::Resolve { .. } => "Resolve",
        EgressError::TooManyRedirects { .. } => "TooManyRedirects",
        EgressError::Timeout(_) => "Timeout",
        EgressError::Connect { .. } => "Connect",
        EgressError::Failed(_) => "Failed",
        EgressError::RedirectNotFollowed { .. } => "RedirectNotFollowed",
        EgressError::OriginNotAllowed { .. } => "OriginNotAllowed",
        EgressError::BodyTooLarge { .. } => "BodyTooLarge",
        EgressError::UnrequestedEncoding { .. } => "UnrequestedEncoding",
        EgressError::QuotaExhausted { .. } => "QuotaExhausted",
        EgressError::Config(_) => "Config",
    }
}

fn policy(entries: &[&str]) -> Policy {
    Policy::new(hosts(entries)).timeout(Duration::from_secs(5))
}

/// Each URL has the trap server's port, so an unguarded client would reach it
/// (`0.0.0.0` and `::ffff:127.0.0.1` reach loopback on Linux). The allow-list
/// holds the host, so the refusal comes from the address guard.
#[tokio::test]
async fn literal_and_local_vectors_are_refused() {
    let trap = Server::trap().await;
    let port = trap.port();
    // (URL, allow-list entry, expected variant, refused address)
    let table: &[(&str, &str, &str, Option<&str>)] = &[
        ("http://127.0.0.1:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://localhost:{port}/", "localhost", "NonPublicAddress", None),
        ("http://2130706433:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://0177.0.0.1:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://0x7f000001:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://0x7f.1:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://127.1:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://127.0.0.1.:{port}/", "127.0.0.1", "NonPublicAddress", Some("127.0.0.1")),
        ("http://LOCALHOST:{port}/", "localhost", "NonPublicAddress", None),
        ("http://0:{port}/", "0.0.0.0", "NonPublicAddress", Some("0.0.0.0")),
        ("http://[0:0:0:0:0:ffff:7f00:1]:{port}/", "::ffff:127.0.0.1", "NonPublicAddress", Some("::ffff:127.0.0.1")),
        ("http://[::]:{port}/", "::", "NonPublicAddress", Some("::")),
        ("http://[::1]:{port}/", "::1", "NonPublicAddress", Some("::1")),
        ("http://[::ffff:127.0.0.1]:{port}/", "::ffff:127.0.0.1", "NonPublicAddress", Some("::ffff:127.0.0.1")),
        ("http://[::ffff:7f00:1]:{port}/", "::ffff:127.0.0.1", "NonPublicAddress", Some("::ffff:127.0.0.1")),
        ("http://[::ffff:8.8.8.8]/", "::ffff:8.8.8.8", "NonPublicAddress", Some("::ffff:8.8.8.8")),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "NonPublicAddress", Some("169.254.169.254")),
        ("http://10.0.0.1:{port}/", "10.0.0.1", "NonPublicAddress", Some("10.0.0.1")),
        ("http://192.168.1.1:{port}/", "192.168.1.1", "NonPublicAddress", Some("192.168.1.1")),
        ("http://172.16.0.1/", "172.16.0.1", "NonPublicAddress", Some("172.16.0.1")),
        ("http://100.64.0.1:{port}/", "100.64.0.1", "NonPublicAddress", Some("100.64.0.1")),
        ("http://0.0.0.0:{port}/", "0.0.0.0", "NonPublicAddress", Some("0.0.0.0")),
        ("http://[fd00::1]:{port}/", "fd00::1", "NonPublicAddress", Some("fd00::1")),
        ("http://[fe80::1]/", "fe80::1", "NonPublicAddress", Some("fe80::1")),
        ("ftp://example.com/", "example.com", "BadUrl", None),
        ("file:///etc/passwd", "example.com", "BadUrl", None),
        ("http://user:pw@example.com/", "example.com", "BadUrl", None),
        ("http://user@example.com/", "example.com", "BadUrl", None),
        ("not a url", "example.com", "BadUrl", None),
        ("http://127.0.0.1:{port}/", "localhost", "HostNotAllowed", None),
        ("http://example.com.evil.org/", "example.com", "HostNotAllowed", None),
    ];
    let client = GuardedClient::new().unwrap();
    for (url, allow, want, ip) in table {
        let url = url.replace("{port}", &port.to_string());
        let err = client.get(&url, &[], &policy(&[allow])).await.expect_err(&url);
        assert_eq!(variant(&err), *want, "{url}: {err}");
        assert!(err.is_refusal(), "{url}: {err}");
        if let (Some(ip), EgressError::NonPublicAddress { ip: got, .. }) = (ip, &err) {
            assert_eq!(got, &ip.parse::<IpAddr>().unwrap(), "{url}: {err}");
        }
    }
    assert_eq!(trap.count(), 0, "the trap server was reached: {:?}", trap.requests());
}

#[tokio::test]
async fn messages_name_host_address_and_reason() {
    let client = GuardedClient::new().unwrap();
    let err = client.get("http://localhost/", &[], &policy(&["localhost"])).await.unwrap_err();
    let EgressError::NonPublicAddress { host, ip, .. } = &err else { panic!("{err}") };
    assert_eq!(host, "localhost");
    assert!(ip.is_loopback(), "{err}");
    assert!(err.to_string().starts_with(&format!("`localhost` resolves to {ip}, a loopback address")), "{err}");

    let err = client.get("http://169.254.169.254/", &[], &policy(&["169.254.169.254"])).await.unwrap_err();
    assert!(err.to_string().contains("cloud metadata"), "{err}");

    let err = client.get("http://[::ffff:7f00:1]/", &[], &policy(&["::ffff:7f00:1"])).await.unwrap_err();
    assert!(err.to_string().contains("IPv4-mapped") && err.to_string().contains("embeds 127.0.0.1"), "{err}");
}

#[tokio::test]
async fn names_resolving_to_private_addresses_are_refused() {
    let trap = Server::trap().await;
    let resolver = FakeResolver::new(&[
        ("private.test", &["10.0.0.5"]),
        ("mixed.test", &["93.184.216.34", "127.0.0.1"]),
        ("mapped.test", &["::ffff:127.0.0.1"]),
        ("empty.test", &[]),
    ]);
    let client = routed_client(resolver, &trap);
    let allow = policy(&["private.test", "mixed.test", "mapped.test", "empty.test"]);

    let err = client.get("http://private.test/", &[], &allow).await.unwrap_err();
    assert!(
        matches!(&err, EgressError::NonPublicAddress { host, ip, .. } if host == "private.test" && ip.to_string() == "10.0.0.5"),
        "{err}"
    );
    assert!(err.to_string().contains("`private.test` resolves to 10.0.0.5, a private address"), "{err}");

    // One private answer refuses the whole name, even though the public one
    // would reach the (routed) trap server.
    let err = client.get("http://mixed.test/", &[], &allow).await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { ip, .. } if ip.to_string() == "127.0.0.1"), "{err}");

    let err = client.get("http://mapped.test/", &[], &allow).await.unwrap_err();
    assert_eq!(variant(&err), "NonPublicAddress", "{err}");

    let err = client.get("http://empty.test/", &[], &allow).await.unwrap_err();
    assert!(matches!(&err, EgressError::Resolve { host, .. } if host == "empty.test"), "{err}");
    assert!(!err.is_refusal());

    let err = client.get("http://unknown.test/", &[], &policy(&["unknown.test"])).await.unwrap_err();
    assert_eq!(variant(&err), "Resolve", "{err}");

    assert_eq!(trap.count(), 0, "{:?}", trap.requests());
}

/// The pre-flight check sees a public address (call 1); reqwest resolves
/// again when it connects (call 2) and gets loopback. The URL carries the
/// loopback server's port, so an unguarded connect would reach it.
#[tokio::test]
async fn dns_rebinding_is_refused_at_connect_time() {
    let trap = Server::trap().await;
    let resolver = RebindingResolver::default();
    let calls = resolver.calls.clone();
    let client = GuardedClient::builder().resolver(std::sync::Arc::new(resolver)).build().unwrap();
    let url = format!("http://rebind.test:{}/", trap.port());
    let err = client.get(&url, &[], &policy(&["rebind.test"])).await.unwrap_err();
    assert!(
        matches!(&err, EgressError::NonPublicAddress { host, ip, .. } if host == "rebind.test" && ip.is_loopback()),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the connect-time resolution did not happen");
    assert_eq!(trap.count(), 0, "{:?}", trap.requests());
}

#[tokio::test]
async fn redirects_to_forbidden_places_are_refused() {
    let trap = Server::trap().await;
    let trap_port = trap.port();
    let public = Server::start(move |req| match req.target.as_str() {
        "/to-loopback" => Reply::redirect(302, &format!("http://127.0.0.1:{trap_port}/")),
        "/to-decimal-loopback" => Reply::redirect(301, &format!("http://2130706433:{trap_port}/")),
        "/to-metadata" => Reply::redirect(302, "http://169.254.169.254/latest/meta-data/"),
        "/to-private-name" => Reply::redirect(307, "http://private.test/"),
        "/to-offlist" => Reply::redirect(303, "http://elsewhere.test/"),
        "/to-ftp" => Reply::redirect(308, "ftp://public.test/file"),
        "/to-userinfo" => Reply::redirect(302, "http://user:pw@public.test/"),
        "/loop" => Reply::redirect(302, "/loop"),
        _ => Reply::ok("text/plain", "ok"),
    })
    .await;
    let resolver = FakeResolver::new(&[
        ("public.test", &["93.184.216.34"]),
        ("private.test", &["192.168.0.10"]),
        ("elsewhere.test", &["93.184.216.34"]),
    ]);
    let client = routed_client(resolver, &public);
    let allow = policy(&["public.test", "private.test", "127.0.0.1", "169.254.169.254"]);
    let get = |path: &str| {
        let client = client.clone();
        let allow = allow.clone();
        let url = format!("http://public.test{path}");
        async move { client.get(&url, &[], &allow).await }
    };

    let err = get("/to-loopback").await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { ip, .. } if ip.is_loopback()), "{err}");
    let err = get("/to-decimal-loopback").await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { ip, .. } if ip.is_loopback()), "{err}");
    let err = get("/to-metadata").await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { host, .. } if host == "169.254.169.254"), "{err}");
    let err = get("/to-private-name").await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { host, .. } if host == "private.test"), "{err}");
    let err = get("/to-offlist").await.unwrap_err();
    assert!(matches!(&err, EgressError::HostNotAllowed { host, .. } if host == "elsewhere.test"), "{err}");
    assert!(err.to_string().contains("elsewhere.test"), "{err}");
    let err = get("/to-ftp").await.unwrap_err();
    assert_eq!(variant(&err), "BadUrl", "{err}");
    let err = get("/to-userinfo").await.unwrap_err();
    assert_eq!(variant(&err), "BadUrl", "{err}");

    let before = public.count();
    let err = get("/loop").await.unwrap_err();
    assert!(
        matches!(&err, EgressError::TooManyRedirects { limit: 5, last } if last == "http://public.test/loop"),
        "{err}"
    );
    assert_eq!(public.count() - before, 6, "the first request and five redirects");

    assert_eq!(trap.count(), 0, "{:?}", trap.requests());
    // The public server was reached only through the route for the checked address.
    assert!(public.requests().iter().all(|r| r.header("host") == Some("public.test")));
}
