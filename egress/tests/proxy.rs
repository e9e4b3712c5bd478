//! The egress proxy against loopback servers: what a confined command's
//! connections meet. The fake resolver answers a "public" address that the
//! test client routes to the loopback server, so the address guard runs as
//! it does for real hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{FakeResolver, Reply, Server, routed_client};
use nexo_egress::{
    Connection, ConnectionLog, ConnectionShare, EgressProxy, GuardedClient, Meter, NetHosts, ProxyPolicy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Keeps every connection the proxy reports.
#[derive(Default)]
struct Log(Mutex<Vec<Connection>>);

impl ConnectionLog for Log {
    fn connection(&self, connection: &Connection) {
        self.0.lock().unwrap().push(connection.clone());
    }
}

impl Log {
    fn all(&self) -> Vec<Connection> {
        self.0.lock().unwrap().clone()
    }
}

fn resolver() -> FakeResolver {
    FakeResolver::new(&[("api.example", &["93.184.216.34"]), ("inside.example", &["10.0.0.7"])])
}

fn start(client: &GuardedClient, dir: &Path, hosts: &[&str], meter: Option<Arc<Meter>>) -> (EgressProxy, Arc<Log>) {
    let log = Arc::new(Log::default());
    let policy = ProxyPolicy {
        hosts: NetHosts::new(hosts).unwrap(),
        meter,
        log: Some(log.clone() as Arc<dyn ConnectionLog>),
        share: None,
    };
    (EgressProxy::start(client, &dir.join("proxy.sock"), policy).unwrap(), log)
}

/// Sends `request` through the proxy and reads until it closes.
async fn exchange(proxy: &EgressProxy, request: &str) -> String {
    let mut stream = UnixStream::connect(proxy.path().unwrap()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Waits until the proxy has reported `n` connections (a report is made as
/// a connection ends, just after the client read its last byte).
async fn reported(log: &Log, n: usize) -> Vec<Connection> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let all = log.all();
        if all.len() >= n || tokio::time::Instant::now() > deadline {
            return all;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_granted_host_is_forwarded_and_tunnelled_and_each_connection_is_reported() {
    let server = Server::start(|seen| Reply::ok("text/plain", format!("hi {}", seen.target))).await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, log) = start(&client, dir.path(), &["example"], None);

    // A plain request, in the absolute form HTTP_PROXY clients send.
    let answer = exchange(
        &proxy,
        "GET http://api.example/x?y=1 HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n\
         Proxy-Connection: keep-alive\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi /x?y=1"), "{answer}");
    let seen = &server.requests()[0];
    assert_eq!(seen.target, "/x?y=1", "the origin gets the origin's form");
    assert_eq!(seen.header("proxy-authorization"), None, "the proxy's own headers stay with it");
    assert_eq!(seen.header("connection"), Some("close"), "each request is a connection, checked on its own");
    assert_eq!(seen.all("host"), ["api.example"], "the host checked is the host asked for, not another behind it");

    // A tunnel: what goes through it is the client's (TLS for real hosts).
    let mut stream = UnixStream::connect(proxy.path().unwrap()).await.unwrap();
    stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n").await.unwrap();
    let mut opened = [0u8; 39];
    stream.read_exact(&mut opened).await.unwrap();
    assert_eq!(&opened, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    stream.write_all(b"GET /through HTTP/1.1\r\nHost: api.example\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.ends_with("hi /through"), "{answer}");
    // The tunnel ends when both sides have.
    drop(stream);

    let all = reported(&log, 2).await;
    let shown: Vec<(&str, u16, &str, bool)> =
        all.iter().map(|c| (c.host.as_str(), c.port, c.method.as_str(), c.allowed)).collect();
    assert_eq!(shown, [("api.example", 80, "GET", true), ("api.example", 443, "CONNECT", true)]);
    assert!(all.iter().all(|c| c.sent > 0 && c.received > 0 && c.reason.is_none()), "{all:?}");
}

#[tokio::test]
async fn what_the_grant_or_the_address_guard_refuses_never_leaves() {
    let server = Server::trap().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, log) = start(&client, dir.path(), &["api.example:8443", "inside.example", "127.0.0.1", "[::1]"], None);
    let cases = [
        // Not granted: another host, or a granted host on another port.
        ("CONNECT other.example:443 HTTP/1.1\r\n\r\n", "403", "not on the allow-list"),
        ("CONNECT api.example:443 HTTP/1.1\r\n\r\n", "403", "not on the allow-list"),
        ("GET http://api.example/ HTTP/1.1\r\n\r\n", "403", "not on the allow-list"),
        // Granted, but private: by its name's address, or written as one.
        ("CONNECT inside.example:443 HTTP/1.1\r\n\r\n", "403", "10.0.0.7"),
        ("CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n", "403", "127.0.0.1"),
        ("CONNECT 2130706433:80 HTTP/1.1\r\n\r\n", "403", "127.0.0.1"),
        ("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", "403", "::1"),
        ("GET http://inside.example/ HTTP/1.1\r\n\r\n", "403", "10.0.0.7"),
        // Not a proxy request the proxy takes.
        ("GET https://api.example:8443/ HTTP/1.1\r\n\r\n", "400", "use CONNECT"),
        ("GET /relative HTTP/1.1\r\nHost: api.example\r\n\r\n", "400", "absolute http:// URL"),
        ("GET http://user:pw@api.example:8443/ HTTP/1.1\r\n\r\n", "400", "credentials"),
        ("CONNECT api.example HTTP/1.1\r\n\r\n", "400", "host:port"),
        ("\u{1}\u{2} nonsense\r\n\r\n", "400", "cannot be read"),
        // Bare line feeds end a head too.
        ("CONNECT other.example:443 HTTP/1.1\n\n", "403", "not on the allow-list"),
    ];
    for (request, status, needle) in cases {
        let answer = exchange(&proxy, request).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(needle), "{request:?}: {answer}");
    }
    // A head past the limit is refused, not read on.
    let long = format!("GET http://api.example:8443/ HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(20_000));
    let answer = exchange(&proxy, &long).await;
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("longer than"), "{answer}");
    assert_eq!(server.count(), 0, "nothing reached the network");
    let refused = reported(&log, 9).await;
    assert_eq!(refused.len(), 9, "each checked refusal is reported: {refused:?}");
    assert!(refused.iter().all(|c| !c.allowed && c.reason.is_some()), "{refused:?}");
}

#[tokio::test]
async fn an_operator_may_exempt_a_private_test_server_explicitly() {
    let server = Server::start(|_| Reply::ok("text/plain", "local")).await;
    let port = server.addr.port();
    let client = GuardedClient::builder().allow_private([server.addr.ip()]).build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let grant = format!("127.0.0.1:{port}");
    let (proxy, _log) = start(&client, dir.path(), &[grant.as_str()], None);
    let answer = exchange(&proxy, &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("local"), "{answer}");
}

#[tokio::test]
async fn the_meter_closes_a_download_past_the_allowance_and_refuses_the_next() {
    let big = "x".repeat(1_000_000);
    let server = Server::start(move |_| Reply::ok("text/plain", big.clone())).await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let meter = Arc::new(Meter::new(Some(150_000)));
    let (proxy, log) = start(&client, dir.path(), &["api.example"], Some(meter.clone()));

    let answer = exchange(&proxy, "GET http://api.example/big HTTP/1.1\r\n\r\n").await;
    // The allowance exactly: the request's head as sent up, then the answer
    // (its head and the body) up to it.
    let sent_up = "GET /big HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n".len();
    assert!(answer.starts_with("HTTP/1.1 200"), "{}", &answer[..answer.len().min(200)]);
    assert_eq!(answer.len() + sent_up, 150_000, "cut at the allowance");
    let all = reported(&log, 1).await;
    assert!(all[0].allowed && all[0].reason.as_deref().unwrap_or("").contains("quota"), "{all:?}");
    assert!(meter.exhausted());
    let answer = exchange(&proxy, "GET http://api.example/again HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("quota"), "{answer}");
    assert_eq!(server.count(), 1, "the refused request never left");
}

#[tokio::test]
async fn a_dropped_proxy_removes_its_socket_and_closes_its_tunnels() {
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, _log) = start(&client, dir.path(), &["api.example"], None);
    let path = proxy.path().unwrap().to_path_buf();
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
    let mut opened = [0u8; 39];
    stream.read_exact(&mut opened).await.unwrap();
    drop(proxy);
    let mut rest = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "the tunnel is closed: {read:?}");
    assert!(!path.exists(), "the socket file is gone");
}

#[tokio::test]
async fn what_a_command_sends_up_counts_against_the_allowance_too() {
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let meter = Arc::new(Meter::new(Some(100_000)));
    let (proxy, log) = start(&client, dir.path(), &["api.example"], Some(meter.clone()));
    let mut stream = UnixStream::connect(proxy.path().unwrap()).await.unwrap();
    stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
    let mut opened = [0u8; 39];
    stream.read_exact(&mut opened).await.unwrap();
    // The upload may fail part-way once the proxy closes the tunnel.
    let _ = stream.write_all(&vec![b'u'; 300_000]).await;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    let all = reported(&log, 1).await;
    assert!(all[0].reason.as_deref().unwrap_or("").contains("quota"), "{all:?}");
    assert!(all[0].sent <= 100_000 && meter.exhausted(), "{all:?}");
}

/// A proxy serving a listener made elsewhere (a confined command's own
/// network namespace) checks and tunnels as one on a Unix socket does.
#[tokio::test]
async fn a_proxy_on_a_tcp_listener_checks_as_one_on_a_socket_does() {
    let server = Server::start(|seen| Reply::ok("text/plain", format!("hi {}", seen.target))).await;
    let client = routed_client(resolver(), &server);
    let log = Arc::new(Log::default());
    let policy = ProxyPolicy {
        hosts: NetHosts::new(["api.example"]).unwrap(),
        meter: None,
        log: Some(log.clone() as Arc<dyn ConnectionLog>),
        share: None,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let proxy = EgressProxy::serve(&client, listener, policy).unwrap();
    assert_eq!(proxy.path(), None);
    let ask = |request: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(at).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let answer = ask("GET http://api.example/x HTTP/1.1\r\nHost: api.example\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hi /x"), "{answer}");
    let answer = ask("CONNECT inside.example:443 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let all = reported(&log, 2).await;
    assert_eq!(all.iter().map(|c| c.allowed).collect::<Vec<_>>(), [true, false], "{all:?}");
    drop(proxy);
    // Dropped, it serves no one: the listener closes with it.
    let mut closed = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(at).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(closed, "the listener outlived its proxy");
}

/// A tunnel still open when its proxy stops (the command that made it
/// ended) is reported all the same, with what it carried so far.
#[tokio::test]
async fn a_tunnel_cut_by_the_proxy_stopping_is_reported_before_the_stop_is_over() {
    // It reads the request and never answers, so the tunnel stays open.
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, log) = start(&client, dir.path(), &["api.example"], None);
    let mut stream = UnixStream::connect(proxy.path().unwrap()).await.unwrap();
    stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
    let mut opened = [0u8; 39];
    stream.read_exact(&mut opened).await.unwrap();
    let partial = b"GET /slow HTTP/1.1\r\nHost: api.example\r\n\r\n";
    stream.write_all(partial).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.count() == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(log.all().is_empty(), "nothing is reported while the tunnel is open");
    // Stopped, it is reported by the time the stop is over: no waiting for it.
    proxy.stop().await;
    let all = log.all();
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].allowed && all[0].reason.as_deref().unwrap_or("").contains("cut short"), "{all:?}");
    assert_eq!(all[0].sent, partial.len() as u64, "{all:?}");
}

/// A tunnel granted for a name carries a TLS handshake for that name only:
/// one asking for another site at the same address (a CDN routes by it),
/// or for none, is refused before any of it goes up. A protocol that is
/// not TLS passes, and so does a handshake sent in pieces.
#[tokio::test]
async fn a_tunnel_carries_a_tls_handshake_for_its_own_host_only() {
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, log) = start(&client, dir.path(), &["api.example"], None);
    // Sends `first` (in two pieces) through a tunnel; true when the tunnel stayed open.
    let through = |first: Vec<u8>| {
        let path = proxy.path().unwrap().to_path_buf();
        async move {
            let mut stream = UnixStream::connect(path).await.unwrap();
            stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
            let mut opened = [0u8; 39];
            stream.read_exact(&mut opened).await.unwrap();
            let (a, b) = first.split_at(first.len() / 2);
            stream.write_all(a).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            stream.write_all(b).await.unwrap();
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(std::time::Duration::from_millis(300), stream.read(&mut byte)).await;
            // Refused: closed (0 bytes). Let through: the silent origin keeps it open.
            read.is_err()
        }
    };
    assert!(through(common::client_hello(Some("API.example."))).await, "its own name");
    assert!(!through(common::client_hello(Some("evil.example"))).await, "another name");
    assert!(!through(common::client_hello(None)).await, "no name");
    assert!(through(b"SSH-2.0-test\r\n".to_vec()).await, "not TLS");
    // Encrypted Client Hello hides the name a CDN routes by; two names leave a router to pick.
    let ech = common::client_hello_with(vec!["api.example"], &[0xfe0d]);
    assert!(!through(ech).await, "encrypted client hello");
    assert!(!through(common::client_hello_with(vec!["api.example", "evil.example"], &[])).await, "two names");
    assert!(!through(common::client_hello_with(vec!["api.example"], &[0x0017])).await, "an extension twice");
    drop(proxy);
    let all = reported(&log, 7).await;
    let verdicts: Vec<bool> = all.iter().map(|c| c.allowed).collect();
    assert_eq!(verdicts.iter().filter(|a| !**a).count(), 5, "{all:?}");
    assert!(all.iter().any(|c| c.reason.as_deref().unwrap_or("").contains("Encrypted Client Hello")), "{all:?}");
    assert!(all.iter().any(|c| c.reason.as_deref().unwrap_or("").contains("asks for `evil.example`")), "{all:?}");
    // Nothing of a refused handshake went up; all of one let through did.
    assert!(all.iter().all(|c| (c.sent == 0) != c.allowed), "{all:?}");
}

/// A tenant's share caps the connections all its proxies hold open at once
/// (one run's shell and another's MCP server alike): idle tunnels of one
/// cannot take the node's from the others, and a closed one is given back.
#[tokio::test]
async fn a_share_caps_the_connections_of_all_the_proxies_that_draw_on_it() {
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let share = ConnectionShare::new(2);
    let log = Arc::new(Log::default());
    let proxy = |name: &str| {
        let policy = ProxyPolicy {
            hosts: NetHosts::new(["api.example"]).unwrap(),
            share: Some(share.clone()),
            log: Some(log.clone() as Arc<dyn ConnectionLog>),
            ..Default::default()
        };
        EgressProxy::start(&client, &dir.path().join(name), policy).unwrap()
    };
    let (first, second) = (proxy("a.sock"), proxy("b.sock"));
    let open = |proxy: &EgressProxy| {
        let path = proxy.path().unwrap().to_path_buf();
        async move {
            let mut stream = UnixStream::connect(path).await.unwrap();
            stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.unwrap();
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).await.unwrap();
            (stream, String::from_utf8_lossy(&head).into_owned())
        }
    };
    let (held, answer) = open(&first).await;
    assert_eq!(answer, "HTTP/1.1 200");
    let (_kept, answer) = open(&second).await;
    assert_eq!(answer, "HTTP/1.1 200");
    assert_eq!(share.open(), 2);
    // A third, through either proxy, is refused and told why.
    let refused = exchange(&first, "CONNECT api.example:443 HTTP/1.1\r\n\r\n").await;
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("net-connections"), "{refused}");
    // Reported as refused, with what it asked for; the open two are not reported until they end.
    let all = reported(&log, 1).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!((all[0].host.as_str(), all[0].port, all[0].allowed), ("api.example", 443, false), "{all:?}");
    assert!(all[0].reason.as_deref().unwrap_or("").contains("net-connections"), "{all:?}");
    drop(held);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while share.open() > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (_again, answer) = open(&second).await;
    assert_eq!(answer, "HTTP/1.1 200", "the closed tunnel's place is given back");
}

/// Turning connections away is bounded too: past 16 at once, a proxy
/// closes more unanswered, so a flood of silent ones past the cap holds a
/// few descriptors for a short while, and once they are gone the next is
/// answered and told why.
#[tokio::test]
async fn a_flood_past_the_cap_is_closed_unanswered_beyond_a_few() {
    let server = Server::silent().await;
    let client = routed_client(resolver(), &server);
    let dir = tempfile::tempdir().unwrap();
    let policy = ProxyPolicy {
        hosts: NetHosts::new(["api.example"]).unwrap(),
        share: Some(ConnectionShare::new(0)),
        ..Default::default()
    };
    let proxy = EgressProxy::start(&client, &dir.path().join("proxy.sock"), policy).unwrap();
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(UnixStream::connect(proxy.path().unwrap()).await.unwrap());
    }
    // Those past the first 16 are closed at once, unanswered.
    let mut closed = 0;
    for stream in &mut flood {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(std::time::Duration::from_millis(500), stream.read(&mut byte)).await {
            closed += 1;
        }
    }
    assert!(closed >= 24, "{closed} of 40 were closed at once");
    drop(flood);
    // Once the held ones are gone (they had 2 s to send a head), one is answered again.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut stream = UnixStream::connect(proxy.path().unwrap()).await.unwrap();
        let mut answer = Vec::new();
        // Closed unanswered, the write or the read may fail: that is the answer "none".
        if stream.write_all(b"CONNECT api.example:443 HTTP/1.1\r\n\r\n").await.is_ok() {
            let _ = stream.read_to_end(&mut answer).await;
        }
        let answer = String::from_utf8_lossy(&answer).into_owned();
        if answer.starts_with("HTTP/1.1 503") {
            assert!(answer.contains("net-connections"), "{answer}");
            break;
        }
        assert!(answer.is_empty() && tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
