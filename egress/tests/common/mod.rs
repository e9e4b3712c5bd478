//! Loopback HTTP/1.1 servers and fake resolvers for the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexo_egress::{GuardedClient, HostList, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The "public" address fake resolvers answer; tests route it to a loopback server.
pub const PUBLIC: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(93, 184, 216, 34));

/// A request a server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (by `Content-Length`).
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// What a server answers.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply { status: 200, headers: vec![("Content-Type".into(), content_type.into())], body: body.into() }
    }

    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply { status, headers: vec![("Location".into(), location.into())], body: Vec::new() }
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A loopback server recording every request.
pub struct Server {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Answers each request with `handler`, one request per connection.
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Server {
        Self::spawn(Some(Arc::new(handler))).await
    }

    /// Reads requests and never answers.
    pub async fn silent() -> Server {
        Self::spawn(None).await
    }

    /// Answers every request with 200 "trap"; tests assert it sees nothing.
    pub async fn trap() -> Server {
        Self::start(|_| Reply::ok("text/plain", "trap")).await
    }

    async fn spawn(handler: Option<Handler>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let handler = handler.clone();
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let Some(request) = read_head(&mut stream).await else { return };
                    log.lock().unwrap().push(request.clone());
                    let Some(handler) = handler else {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    };
                    let reply = handler(&request);
                    let mut head = format!("HTTP/1.1 {} X\r\n", reply.status);
                    for (name, value) in &reply.headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", reply.body.len()));
                    // The client may stop reading early (body cap): ignore write errors.
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&reply.body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Server { addr, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let target = request_line.next()?.to_string();
    let headers = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect::<Vec<_>>();
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Seen { method, target, headers, body })
}

/// Answers fixed addresses per name and counts calls.
#[derive(Clone, Default)]
pub struct FakeResolver {
    names: Arc<HashMap<String, Vec<IpAddr>>>,
    pub calls: Arc<AtomicUsize>,
}

impl FakeResolver {
    pub fn new(names: &[(&str, &[&str])]) -> FakeResolver {
        let names = names
            .iter()
            .map(|(name, addrs)| (name.to_string(), addrs.iter().map(|a| a.parse().unwrap()).collect()))
            .collect();
        FakeResolver { names: Arc::new(names), calls: Arc::default() }
    }
}

impl Resolver for FakeResolver {
    fn resolve(&self, host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.names.get(host).cloned();
        let host = host.to_string();
        Box::pin(async move {
            answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no such host {host}")))
        })
    }
}

/// DNS rebinding: a public address on the first call, loopback after.
#[derive(Clone, Default)]
pub struct RebindingResolver {
    pub calls: Arc<AtomicUsize>,
}

impl Resolver for RebindingResolver {
    fn resolve(&self, _host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let ip = if call == 0 { PUBLIC } else { IpAddr::from([127, 0, 0, 1]) };
        Box::pin(async move { Ok(vec![ip]) })
    }
}

/// A client resolving with `resolver`, with [`PUBLIC`] routed to `server`.
pub fn routed_client(resolver: impl Resolver, server: &Server) -> GuardedClient {
    GuardedClient::builder().resolver(Arc::new(resolver)).route_for_tests(PUBLIC, server.addr).build().unwrap()
}

pub fn hosts(entries: &[&str]) -> HostList {
    HostList::new(entries).unwrap()
}

/// A minimal TLS ClientHello record asking for `name` (none for `None`),
/// with another extension after it, as real clients send many.
pub fn client_hello(name: Option<&str>) -> Vec<u8> {
    client_hello_with(name.into_iter().collect(), &[])
}

/// A ClientHello with a server name extension listing `names` (none when
/// empty), and after it `extra` extensions (type, empty data).
pub fn client_hello_with(names: Vec<&str>, extra: &[u16]) -> Vec<u8> {
    let mut extensions = Vec::new();
    if !names.is_empty() {
        let mut list = Vec::new();
        for name in &names {
            list.push(0);
            list.extend((name.len() as u16).to_be_bytes());
            list.extend(name.as_bytes());
        }
        let mut sni = Vec::new();
        sni.extend((list.len() as u16).to_be_bytes());
        sni.extend(list);
        extensions.extend(0u16.to_be_bytes());
        extensions.extend((sni.len() as u16).to_be_bytes());
        extensions.extend(sni);
    }
    extensions.extend([0x00, 0x17, 0x00, 0x00]);
    for kind in extra {
        extensions.extend(kind.to_be_bytes());
        extensions.extend([0, 0]);
    }
    let mut body = vec![0x03, 0x03];
    body.extend([7u8; 32]);
    body.push(0);
    body.extend([0x00, 0x02, 0x13, 0x01, 0x01, 0x00]);
    body.extend((extensions.len() as u16).to_be_bytes());
    body.extend(extensions);
    let mut handshake = vec![1];
    handshake.extend(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend((handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}
