//! What model providers need from the guarded client, against real loopback
//! servers: POST with a JSON body and operator headers, the redirect rule for
//! POST, origin pinning, host exemptions, and streamed bodies with their
//! caps and scrubbing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{FakeResolver, PUBLIC, Reply, Server, hosts, routed_client};
use nexo_egress::{EgressError, GuardedClient, Origin, Policy, Request, SecretHeader, StreamingResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;

const KEY: &str = "sk-test-stream-0123456789abcdef";

fn public_resolver() -> FakeResolver {
    FakeResolver::new(&[
        ("public.test", &["93.184.216.34"]),
        ("www.public.test", &["93.184.216.34"]),
        ("internal.test", &["10.0.0.5"]),
    ])
}

fn key_for(origin: &str) -> SecretHeader {
    SecretHeader::new("x-api-key", KEY).unwrap().for_origins([origin]).unwrap()
}

#[tokio::test]
async fn post_json_sends_its_body_type_and_the_policy_headers() {
    let server = Server::start(|req| Reply::ok("application/json", req.body.clone())).await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).header("Anthropic-Version", "2023-06-01").unwrap();
    let request = Request::post_json("http://public.test/v1/messages", br#"{"model":"m"}"#.to_vec())
        .header("accept", "text/event-stream")
        // The policy's header and the client's content type win over the caller's.
        .header("anthropic-version", "forged")
        .header("content-type", "text/plain");
    assert_eq!(request.method(), "POST");
    assert!(!format!("{request:?}").contains("model"), "Debug shows the body's length only: {request:?}");
    let response = client.send(request, &policy).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, br#"{"model":"m"}"#);
    let seen = &server.requests()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.body, br#"{"model":"m"}"#);
    assert_eq!(seen.all("content-type"), ["application/json"]);
    assert_eq!(seen.all("anthropic-version"), ["2023-06-01"]);
    assert_eq!(seen.all("accept"), ["text/event-stream"]);
    assert_eq!(seen.all("accept-encoding"), ["identity"]);
}

#[tokio::test]
async fn mcp_headers_reach_the_server_only_under_a_policy_that_allows_them() {
    let server = Server::start(|req| Reply::ok("application/json", req.body.clone())).await;
    let client = routed_client(public_resolver(), &server);
    let request = || {
        Request::post_json("http://public.test/mcp", b"{}".to_vec())
            .header("Mcp-Session-Id", "s-1")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Mcp-Param-Region", "eu")
    };
    client.send(request(), &Policy::new(hosts(&["public.test"]))).await.unwrap();
    client.send(request(), &Policy::new(hosts(&["public.test"])).mcp_headers()).await.unwrap();
    let seen = server.requests();
    assert!(seen[0].header("mcp-session-id").is_none(), "dropped by default");
    assert_eq!(seen[1].all("mcp-session-id"), ["s-1"]);
    assert_eq!(seen[1].all("mcp-protocol-version"), ["2025-11-25"]);
    assert_eq!(seen[1].all("mcp-param-region"), ["eu"]);
}

#[test]
fn policy_headers_cannot_be_what_the_client_controls_or_credentials() {
    let policy = || Policy::new(hosts(&["public.test"]));
    for name in
        ["Authorization", "Cookie", "Host", "Content-Type", "Content-Length", "Accept-Encoding", "Range", "Proxy-X"]
    {
        let err = policy().header(name, "v").unwrap_err();
        assert!(matches!(&err, EgressError::Config(m) if m.contains(&name.to_ascii_lowercase())), "{name}: {err}");
    }
    assert!(matches!(policy().header("bad name", "v"), Err(EgressError::Config(_))));
    assert!(matches!(policy().header("x-ok", "a\r\nb"), Err(EgressError::Config(_))));
    assert!(policy().header("x-title", "nexo").is_ok());
}

#[tokio::test]
async fn a_post_follows_307_and_308_with_its_body_and_refuses_other_redirects() {
    let server = Server::start(|req| match req.target.as_str() {
        "/a" => Reply::redirect(307, "/b"),
        "/b" => Reply::redirect(308, "http://www.public.test/c"),
        "/c" => Reply::ok("application/json", req.body.clone()),
        "/moved" => Reply::redirect(301, "/c"),
        "/found" => Reply::redirect(302, "/c"),
        "/see-other" => Reply::redirect(303, "/c"),
        _ => Reply { status: 404, headers: vec![], body: Vec::new() },
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).inject(key_for("http://public.test"));
    let response =
        client.send(Request::post_json("http://public.test/a", b"{\"n\":1}".to_vec()), &policy).await.unwrap();
    assert_eq!(response.body, b"{\"n\":1}");
    assert_eq!(response.url, "http://www.public.test/c");
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    for hop in &seen {
        assert_eq!((hop.method.as_str(), hop.body.as_slice()), ("POST", b"{\"n\":1}".as_slice()), "{hop:?}");
    }
    // The key goes only to its origin, hop by hop.
    assert_eq!(seen[1].header("x-api-key"), Some(KEY));
    assert_eq!(seen[2].header("x-api-key"), None);

    for (path, status) in [("/moved", 301), ("/found", 302), ("/see-other", 303)] {
        let before = server.count();
        let url = format!("http://public.test{path}");
        let err = client.send(Request::post_json(url.as_str(), b"{}".to_vec()), &policy).await.unwrap_err();
        assert!(
            matches!(&err, EgressError::RedirectNotFollowed { status: s, to, .. } if *s == status && to == "http://public.test/c"),
            "{err:?}"
        );
        assert!(err.is_refusal());
        assert!(err.to_string().contains("only on 307 or 308"), "{err}");
        assert_eq!(server.count(), before + 1, "the redirect was not followed");
        // A GET still follows them.
        assert_eq!(client.get(&url, &[], &policy).await.unwrap().status, 200);
    }
}

#[tokio::test]
async fn a_post_redirect_is_checked_like_any_hop() {
    let server = Server::start(|req| match req.target.as_str() {
        "/to-private" => Reply::redirect(307, "http://internal.test/v1"),
        "/to-metadata" => Reply::redirect(308, "http://169.254.169.254/latest/meta-data/"),
        "/to-elsewhere" => Reply::redirect(307, "http://elsewhere.test/v1"),
        _ => Reply::ok("text/plain", "reached"),
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test", "internal.test", "169.254.169.254"]));
    for (path, want) in [("/to-private", "10.0.0.5"), ("/to-metadata", "169.254.169.254")] {
        let url = format!("http://public.test{path}");
        let err = client.send(Request::post_json(url, b"{}".to_vec()), &policy).await.unwrap_err();
        assert!(matches!(&err, EgressError::NonPublicAddress { ip, .. } if ip.to_string() == want), "{path}: {err:?}");
    }
    let err =
        client.send(Request::post_json("http://public.test/to-elsewhere", b"{}".to_vec()), &policy).await.unwrap_err();
    assert!(matches!(&err, EgressError::HostNotAllowed { host, .. } if host == "elsewhere.test"), "{err:?}");
    assert_eq!(server.count(), 3, "only the first hops reached a server");
}

#[tokio::test]
async fn within_origins_pins_scheme_host_and_port() {
    let server = Server::start(|req| match req.target.as_str() {
        "/hop-port" => Reply::redirect(307, "http://public.test:8080/"),
        "/hop-scheme" => Reply::redirect(307, "https://public.test/"),
        _ => Reply::ok("text/plain", "ok"),
    })
    .await;
    let client = routed_client(public_resolver(), &server);
    let policy = Policy::new(hosts(&["public.test"])).within_origins([Origin::parse("http://public.test").unwrap()]);
    assert_eq!(policy.origins_within().map(<[Origin]>::len), Some(1));
    assert_eq!(client.get("http://public.test/", &[], &policy).await.unwrap().status, 200);
    for (url, refused) in [
        ("http://public.test/hop-port", "http://public.test:8080"),
        ("http://public.test/hop-scheme", "https://public.test"),
        ("http://www.public.test/", "http://www.public.test"),
    ] {
        let err = client.get(url, &[], &policy).await.unwrap_err();
        assert!(
            matches!(&err, EgressError::OriginNotAllowed { origin, allowed } if origin == refused && allowed == "http://public.test:80"),
            "{url}: {err:?}"
        );
        assert!(err.is_refusal());
    }
    assert_eq!(server.count(), 3);
    let none = Policy::new(hosts(&["public.test"])).within_origins([]);
    assert!(matches!(client.get("http://public.test/", &[], &none).await, Err(EgressError::OriginNotAllowed { .. })));
    assert_eq!(server.count(), 3);
}

#[tokio::test]
async fn allow_private_host_exempts_exactly_that_host() {
    let server =
        Server::start(|req| Reply::ok("text/plain", req.header("x-api-key").unwrap_or("none").to_string())).await;
    let port = server.port();
    let resolver = FakeResolver::new(&[
        ("model.internal", &["127.0.0.1"]),
        ("sub.model.internal", &["127.0.0.1"]),
        ("other.internal", &["127.0.0.1"]),
        ("meta.internal", &["169.254.169.254"]),
        ("public.internal", &["8.8.8.8"]),
    ]);
    let client = GuardedClient::builder()
        .resolver(Arc::new(resolver))
        .allow_private_host("model.internal")
        .allow_private_host("meta.internal")
        .allow_private_host("public.internal")
        .build()
        .unwrap();
    assert!(client.has_exemptions(), "the fetch tool must refuse this client");
    let policy = Policy::new(hosts(&["model.internal", "other.internal", "meta.internal", "public.internal"]));
    let url = format!("http://model.internal:{port}/v1");
    assert_eq!(client.get(&url, &[], &policy).await.unwrap().body, b"none");
    // A key may go over plain http to the operator's own service on a private address.
    let keyed = policy.clone().inject(key_for(&format!("http://model.internal:{port}")));
    assert_eq!(client.get(&url, &[], &keyed).await.unwrap().body, b"<redacted>", "sent, and scrubbed when echoed");
    assert_eq!(server.requests()[1].header("x-api-key"), Some(KEY));

    for (host, ip) in
        [("other.internal", "127.0.0.1"), ("sub.model.internal", "127.0.0.1"), ("meta.internal", "169.254.169.254")]
    {
        let err = client.get(&format!("http://{host}:{port}/"), &[], &policy).await.unwrap_err();
        assert!(
            matches!(&err, EgressError::NonPublicAddress { ip: got, .. } if got.to_string() == ip),
            "{host}: {err}"
        );
    }
    // An exempted host on a public address gets no key over plain http.
    let keyed = policy.clone().inject(key_for("http://public.internal"));
    match client.get("http://public.internal/", &[], &keyed).await {
        Err(EgressError::BadRequest(m)) => assert!(m.contains("only over https"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(server.count(), 2);

    // IP literals are exact too.
    let literal = GuardedClient::builder().allow_private_host("127.0.0.1").build().unwrap();
    let policy = Policy::new(hosts(&["127.0.0.1", "127.0.0.2"]));
    assert_eq!(literal.get(&format!("http://127.0.0.1:{port}/"), &[], &policy).await.unwrap().status, 200);
    let err = literal.get(&format!("http://127.0.0.2:{port}/"), &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::NonPublicAddress { .. }), "{err}");
}

#[test]
fn allow_private_host_refuses_what_no_exemption_covers() {
    for (host, want) in [("169.254.169.254", "link-local"), ("[fe80::1]", "link-local"), ("0.0.0.0", "unspecified")] {
        let err = GuardedClient::builder().allow_private_host(host).build().unwrap_err();
        assert!(matches!(&err, EgressError::Config(m) if m.contains(want)), "{host}: {err}");
    }
    for bad in ["http://localhost", "localhost:11434", "a b"] {
        let err = GuardedClient::builder().allow_private_host(bad).build().unwrap_err();
        assert!(matches!(&err, EgressError::Config(m) if m.contains(bad)), "{bad}: {err}");
    }
    assert!(GuardedClient::builder().allow_private_host("[::1]").allow_private_host("localhost").build().is_ok());
}

/// One step of a streamed answer.
enum Step {
    Send(Vec<u8>),
    Wait(Arc<Notify>),
    Sleep(Duration),
    Hang,
}

fn send(bytes: impl AsRef<[u8]>) -> Step {
    Step::Send(bytes.as_ref().to_vec())
}

/// Answers one request with a chunked body written step by step.
async fn streaming_server(steps: Vec<Step>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        for step in steps {
            match step {
                Step::Send(bytes) => {
                    let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
                    chunk.extend_from_slice(&bytes);
                    chunk.extend_from_slice(b"\r\n");
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                    let _ = stream.flush().await;
                }
                Step::Wait(go) => go.notified().await,
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
            }
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
    });
    addr
}

fn stream_client(addr: SocketAddr) -> GuardedClient {
    GuardedClient::builder().resolver(Arc::new(public_resolver())).route_for_tests(PUBLIC, addr).build().unwrap()
}

async fn start(steps: Vec<Step>, policy: &Policy) -> StreamingResponse {
    let client = stream_client(streaming_server(steps).await);
    client.stream(Request::get("http://public.test/events"), policy).await.unwrap()
}

async fn next(response: &mut StreamingResponse) -> Result<Option<Vec<u8>>, EgressError> {
    tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.expect("a piece should have arrived")
}

#[tokio::test]
async fn events_arrive_as_they_are_sent_even_with_a_key_to_scrub() {
    let keyed = Policy::new(hosts(&["public.test"])).inject(key_for("http://public.test"));
    let plain = Policy::new(hosts(&["public.test"]));
    for policy in [&plain, &keyed] {
        let go = Arc::new(Notify::new());
        let steps = vec![send("data: one\n\n"), Step::Wait(Arc::clone(&go)), send("data: two\r\n\r\n")];
        let mut response = start(steps, policy).await;
        assert_eq!((response.status, response.content_type.as_deref()), (200, Some("text/event-stream")));
        // The server sends the second event only once the first has been read.
        assert_eq!(next(&mut response).await.unwrap().unwrap(), b"data: one\n\n");
        go.notify_one();
        assert_eq!(next(&mut response).await.unwrap().unwrap(), b"data: two\r\n\r\n");
        assert_eq!(next(&mut response).await.unwrap(), None);
        assert_eq!(response.received(), 24);
    }
}

#[tokio::test]
async fn a_key_split_across_network_chunks_is_scrubbed_from_the_stream() {
    let policy = Policy::new(hosts(&["public.test"])).inject(key_for("http://public.test"));
    let pause = || Step::Sleep(Duration::from_millis(30));
    let steps = vec![
        send("data: your key is "),
        pause(),
        send(&KEY[..9]),
        pause(),
        send(format!("{}\n\ndata: again {}", &KEY[9..], &KEY[..20])),
        pause(),
        send(format!("{}\n\n", &KEY[20..])),
        // No blank line: held back until the end of the body.
        send(format!("tail {KEY}")),
    ];
    let mut response = start(steps, &policy).await;
    let mut pieces = Vec::new();
    while let Some(piece) = next(&mut response).await.unwrap() {
        pieces.push(String::from_utf8(piece).unwrap());
    }
    assert_eq!(pieces.concat(), "data: your key is <redacted>\n\ndata: again <redacted>\n\ntail <redacted>");
    for piece in &pieces[..pieces.len() - 1] {
        assert!(piece.ends_with("\n\n"), "pieces end at event boundaries: {pieces:?}");
    }
}

#[tokio::test]
async fn a_streamed_body_is_capped() {
    let plain = Policy::new(hosts(&["public.test"])).max_body(1000);
    let keyed = plain.clone().inject(key_for("http://public.test"));
    for policy in [&plain, &keyed] {
        let steps = (0..10).flat_map(|_| [send([b'x'; 500]), Step::Sleep(Duration::from_millis(5))]).collect();
        let mut response = start(steps, policy).await;
        let mut delivered = 0;
        let err = loop {
            match next(&mut response).await {
                Ok(Some(piece)) => delivered += piece.len(),
                Ok(None) => panic!("the body ended past its cap"),
                Err(e) => break e,
            }
        };
        assert_eq!(err, EgressError::BodyTooLarge { url: "http://public.test/events".into(), limit: 1000 });
        assert!(!err.is_refusal());
        assert!(delivered <= 1000, "{delivered}");
        assert!(response.received() <= 1500, "reading stopped at the cap: {}", response.received());
        assert_eq!(next(&mut response).await.unwrap_err(), err, "the error stays");
    }
}

#[tokio::test]
async fn a_stalled_stream_times_out() {
    let policy = Policy::new(hosts(&["public.test"])).timeout(Duration::from_millis(300));
    let mut response = start(vec![send("data: one\n\n"), Step::Hang], &policy).await;
    assert_eq!(next(&mut response).await.unwrap().unwrap(), b"data: one\n\n");
    let started = Instant::now();
    let err = next(&mut response).await.unwrap_err();
    assert!(matches!(&err, EgressError::Timeout(m) if m.contains("nothing arrived")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_trickling_stream_is_cut_at_its_time_limit() {
    let policy =
        Policy::new(hosts(&["public.test"])).timeout(Duration::from_secs(2)).stream_timeout(Duration::from_millis(500));
    assert_eq!(policy.stream_time_limit(), Duration::from_millis(500));
    let steps = (0..100).flat_map(|_| [send("x"), Step::Sleep(Duration::from_millis(50))]).collect();
    let started = Instant::now();
    let mut response = start(steps, &policy).await;
    let err = loop {
        match next(&mut response).await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream should have been cut"),
            Err(e) => break e,
        }
    };
    assert!(matches!(&err, EgressError::Timeout(m) if m.contains("did not end")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_stream_is_refused_like_any_request() {
    let trap = Server::trap().await;
    let client = routed_client(public_resolver(), &trap);
    let policy = Policy::new(hosts(&["public.test", "internal.test"]));
    let err = client.stream(Request::post_json("http://internal.test/v1", b"{}".to_vec()), &policy).await.unwrap_err();
    assert!(matches!(&err, EgressError::NonPublicAddress { ip, .. } if *ip == IpAddr::from([10, 0, 0, 5])), "{err}");
    let err = client.stream(Request::get("http://elsewhere.test/"), &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::HostNotAllowed { .. }), "{err}");
    assert_eq!(trap.count(), 0);
}

/// A metered policy counts request and response bodies, refuses a request
/// once the allowance is used up (the server never sees it), and stops a
/// streamed body that passes it.
#[tokio::test]
async fn a_meter_counts_bodies_and_refuses_past_its_allowance() {
    let server = Server::start(|req| Reply::ok("application/json", [req.body.clone(), vec![b'x'; 100]].concat())).await;
    let client = routed_client(public_resolver(), &server);
    let meter = Arc::new(nexo_egress::Meter::new(Some(300)));
    let policy = Policy::new(hosts(&["public.test"])).metered(meter.clone());
    let body = vec![b'{'; 20];
    let response = client.send(Request::post_json("http://public.test/a", body), &policy).await.unwrap();
    assert_eq!(response.body.len(), 120);
    assert_eq!(meter.used(), 140, "20 bytes sent and 120 received");
    client.get("http://public.test/b", &[], &policy).await.unwrap();
    assert_eq!(meter.used(), 240);
    // The third answer passes the allowance while it is read.
    let err = client.get("http://public.test/c", &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::QuotaExhausted { limit: 300, .. }), "{err:?}");
    assert!(err.is_refusal() && err.to_string().contains("egress quota is used up"), "{err}");
    // Now nothing more is sent.
    let err = client.get("http://public.test/d", &[], &policy).await.unwrap_err();
    assert!(matches!(err, EgressError::QuotaExhausted { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 3, "the refused request never reached the server");
    // A policy without a limit only counts.
    let counting = Arc::new(nexo_egress::Meter::new(None));
    client
        .get("http://public.test/e", &[], &Policy::new(hosts(&["public.test"])).metered(counting.clone()))
        .await
        .unwrap();
    assert_eq!(counting.used(), 100);

    let meter = Arc::new(nexo_egress::Meter::new(Some(10)));
    let policy = Policy::new(hosts(&["public.test"])).metered(meter.clone());
    let mut response = start(vec![send("data: 12345\n\n"), send("data: 67890\n\n")], &policy).await;
    let err = loop {
        match next(&mut response).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended past the allowance"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, EgressError::QuotaExhausted { limit: 10, .. }), "{err:?}");
}
