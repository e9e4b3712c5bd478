//! The egress proxy: the one way a confined command reaches the network.
//! It listens on a Unix socket (bound into the command's confinement,
//! which has no network of its own), or on a TCP listener made inside the
//! command's own network namespace ([`EgressProxy::serve`]), and speaks
//! HTTP proxying: `CONNECT
//! host:port` opens a tunnel (TLS goes through it end to end), and a
//! request with an absolute `http://` URL is forwarded. Every connection
//! passes the checks the guarded client's requests do:
//!
//! 1. the grant ([`NetHosts`]): the host, by whole labels, and the port;
//! 2. the address guard, on every address the proxy itself resolves the
//!    name to (the command resolves nothing), and it connects to exactly
//!    the addresses it checked: a rebinding name is checked again;
//! 3. the meter: both directions' bytes count against the run's egress
//!    allowance (a tenant's quota), and a tunnel past it is closed.
//!
//! A forwarded request goes to its URL's host, with that `Host` and
//! `Connection: close`: a redirect to another host is a new request,
//! checked as any other. A tunnel to a name that starts with a TLS
//! handshake must ask for that name (its server name, SNI): one asking for
//! another site served at the same address, as CDNs route by it, is
//! refused before any of it goes up. Beyond that, what a connection
//! carries (a tunnel's bytes, a request pipelined behind the first, a
//! `Host` header inside TLS) goes to the address and port that were
//! checked, whatever name it gives inside: a grant reaches what is served
//! at the address a granted name resolves to, as far as that server lets
//! one name reach another. A tunnel ends when either side fails, when the
//! allowance passes, or when nothing moved either way for five minutes.
//! Each connection whose request could be read, let through or refused,
//! is reported to the proxy's [`ConnectionLog`] with its host, port, bytes
//! and verdict, also when its proxy stops first. At most 64 connections
//! are open through one proxy, as many as its [`ConnectionShare`] allows
//! (a tenant's, with others of its proxies), and 512 through all of a
//! process's.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;
use url::{Host, Url};

use crate::client::GuardedClient;
use crate::connect::Guard;
use crate::error::EgressError;
use crate::meter::Meter;
use crate::net::NetHosts;
use crate::policy::Policy;
use crate::share::{ConnectionShare, Held};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// The most headers a request head may have.
const MAX_HEADERS: usize = 96;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the proxy tries to connect upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long checking and connecting may take in all (a name's addresses
/// tried one by one).
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// A tunnel in which nothing moved either way for this long is closed.
const IDLE: Duration = Duration::from_secs(300);
/// Connections one proxy holds at once; more are answered 503.
const MAX_CONNECTIONS: usize = 64;
/// Connections all the proxies of this process hold at once (each holds
/// two sockets and two pipes); more are answered 503.
const MAX_OPEN: usize = 512;
/// Connections one proxy is turning away at once (each read for its head,
/// then answered 503); more are closed unanswered.
const MAX_TURNING: usize = 16;
/// Connections all the proxies of this process are turning away at once.
const MAX_TURNING_ALL: usize = 128;
/// How long a connection being turned away has to send its head.
const TURN_AWAY_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections open through every proxy of this process.
static OPEN: LazyLock<Arc<ConnectionShare>> = LazyLock::new(|| ConnectionShare::new(MAX_OPEN));
/// Connections every proxy of this process is turning away.
static TURNING: LazyLock<Arc<ConnectionShare>> = LazyLock::new(|| ConnectionShare::new(MAX_TURNING_ALL));
/// The copy buffer of each direction.
const BUFFER: usize = 256 * 1024;

/// What a proxy lets through, and where it reports.
#[derive(Clone, Default)]
pub struct ProxyPolicy {
    /// The hosts and ports granted.
    pub hosts: NetHosts,
    /// Where both directions' bytes are counted, with the allowance.
    pub meter: Option<Arc<Meter>>,
    /// Where each connection is reported.
    pub log: Option<Arc<dyn ConnectionLog>>,
    /// The share of connections this proxy draws on with others (a
    /// tenant's on this node); `None`: only the proxy's own and the
    /// process's caps.
    pub share: Option<Arc<ConnectionShare>>,
}

impl fmt::Debug for ProxyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyPolicy")
            .field("hosts", &self.hosts)
            .field("meter", &self.meter)
            .field("share", &self.share)
            .finish_non_exhaustive()
    }
}

/// Where a proxy reports each connection (the run's audit, its events).
pub trait ConnectionLog: Send + Sync {
    /// One connection, once it ended or was refused.
    fn connection(&self, connection: &Connection);
}

/// One connection through the proxy, as it is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The host asked for (normalized; an address as written).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// `CONNECT` (a tunnel) or the forwarded request's method.
    pub method: String,
    /// Bytes sent upstream.
    pub sent: u64,
    /// Bytes received from upstream.
    pub received: u64,
    /// Whether it was let through.
    pub allowed: bool,
    /// Why it was refused or cut short; `None` for one that ran its course.
    pub reason: Option<String>,
}

/// A running proxy. Dropped, it stops: the listener and every connection
/// through it close, and a Unix socket's file is removed.
/// [`EgressProxy::stop`] stops it and waits until each connection is
/// reported.
#[derive(Debug)]
pub struct EgressProxy {
    path: Option<PathBuf>,
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl EgressProxy {
    /// Starts a proxy on a new Unix socket at `path` (which must not
    /// exist), checking each connection with `client`'s address guard and
    /// `policy`. Must be called within a Tokio runtime. The guard's
    /// exemptions come with it: give a client with none (as the fetch tool
    /// has) unless the operator exempted an address for these commands.
    pub fn start(client: &GuardedClient, path: &Path, policy: ProxyPolicy) -> std::io::Result<EgressProxy> {
        let listener = Listener::Unix(UnixListener::bind(path)?);
        let shared = Arc::new(Shared { guard: Arc::clone(&client.inner.guard), policy });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(accept(listener, shared, stopped));
        Ok(EgressProxy { path: Some(path.to_path_buf()), task, stop: Some(stop) })
    }

    /// Serves the connections accepted on `listener`, a TCP listener made
    /// elsewhere: in a confined command's own network namespace, where it
    /// is the one thing there is to connect to. Checks as [`EgressProxy::start`]
    /// does. Must be called within a Tokio runtime.
    pub fn serve(
        client: &GuardedClient,
        listener: std::net::TcpListener,
        policy: ProxyPolicy,
    ) -> std::io::Result<EgressProxy> {
        listener.set_nonblocking(true)?;
        let listener = Listener::Tcp(TcpListener::from_std(listener)?);
        let shared = Arc::new(Shared { guard: Arc::clone(&client.inner.guard), policy });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(accept(listener, shared, stopped));
        Ok(EgressProxy { path: None, task, stop: Some(stop) })
    }

    /// Stops the proxy: no connection is accepted any more, each open one
    /// is closed, and this resolves once every one has ended and been
    /// reported to the policy's log (cut short, if it was open).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// The Unix socket's path, for a proxy [`EgressProxy::start`]ed on one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Where clients come from.
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// A client's connection, whichever listener it came on.
#[cfg(target_os = "linux")]
trait Client: AsyncRead + AsyncWrite + crate::splice::Socket + Unpin + Send + 'static {
    /// Reads what is already here, without waiting.
    fn read_now(&self, buffer: &mut [u8]) -> std::io::Result<usize>;
    /// Waits until it may be readable.
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send;
    /// Makes room for a spliced chunk in flight.
    fn widen(&self) {}
}
/// A client's connection, whichever listener it came on.
#[cfg(not(target_os = "linux"))]
trait Client: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Reads what is already here, without waiting.
    fn read_now(&self, buffer: &mut [u8]) -> std::io::Result<usize>;
    /// Waits until it may be readable.
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send;
}
impl Client for UnixStream {
    fn read_now(&self, buffer: &mut [u8]) -> std::io::Result<usize> {
        self.try_read(buffer)
    }
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send {
        UnixStream::readable(self)
    }
    #[cfg(target_os = "linux")]
    fn widen(&self) {
        crate::splice::widen(self);
    }
}
impl Client for TcpStream {
    fn read_now(&self, buffer: &mut [u8]) -> std::io::Result<usize> {
        self.try_read(buffer)
    }
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> + Send {
        TcpStream::readable(self)
    }
}

/// A client just accepted.
enum Accepted {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Listener::Unix(l) => Ok(Accepted::Unix(l.accept().await?.0)),
            Listener::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok(Accepted::Tcp(stream))
            }
        }
    }
}

/// A proxy's tasks: the connections it serves, and those it turns away.
#[derive(Default)]
struct Tasks {
    connections: JoinSet<()>,
    refusals: JoinSet<()>,
}

/// Serves a client, or answers it 503 past the most. Turning one away is
/// bounded too (a flood of them closed unanswered), so a flood costs the
/// proxy a few descriptors for a short while, whatever its size.
fn admit<C: Client>(mut stream: C, tasks: &mut Tasks, shared: &Arc<Shared>) {
    let held = match hold(tasks.connections.len(), shared.policy.share.as_ref()) {
        Ok(held) => held,
        Err(why) => {
            let Some(turning) = (tasks.refusals.len() < MAX_TURNING).then(|| TURNING.take()).flatten() else {
                return;
            };
            let shared = Arc::clone(shared);
            tasks.refusals.spawn(async move {
                let _ = tokio::time::timeout(TURN_AWAY_TIMEOUT, turn_away(&mut stream, &shared, &why)).await;
                drop(turning);
            });
            return;
        }
    };
    let shared = Arc::clone(shared);
    tasks.connections.spawn(async move {
        serve(stream, shared).await;
        drop(held);
    });
}

/// Answers a client there is no room for 503, its head read first (so the
/// close is not a reset that loses the answer), and reports what it asked
/// for as refused.
async fn turn_away<C: Client>(client: &mut C, shared: &Shared, why: &str) {
    if let Ok(Some((head, _))) = read_head(client).await
        && let Ok(asked) = parse(&head)
    {
        shared.report(&asked.connection(Some(why.to_string())));
    }
    let _ = answer(client, 503, why).await;
}

/// A new connection's places: under this proxy's cap (`open` held now),
/// in its share, and among the process's; why not, for the client.
fn hold(open: usize, share: Option<&Arc<ConnectionShare>>) -> Result<(Option<Held>, Held), String> {
    if open >= MAX_CONNECTIONS {
        return Err(format!(
            "{MAX_CONNECTIONS} connections are open through this proxy, its most; close one and retry"
        ));
    }
    let held = match share.map(|s| (s, s.take())) {
        Some((share, None)) => {
            return Err(format!(
                "{} connections of this tenant's are open through the egress proxy on this node, its most (the \
                 quota `net-connections`); close one and retry",
                share.cap()
            ));
        }
        Some((_, held)) => held,
        None => None,
    };
    let node = OPEN
        .take()
        .ok_or_else(|| format!("{MAX_OPEN} connections are open through this node's egress proxies; retry later"))?;
    Ok((held, node))
}

struct Shared {
    guard: Arc<Guard>,
    policy: ProxyPolicy,
}

/// Accepts until the proxy is stopped or dropped; the connections are
/// tasks of one set, so they end with it.
async fn accept(listener: Listener, shared: Arc<Shared>, mut stopped: tokio::sync::oneshot::Receiver<()>) {
    let mut tasks = Tasks::default();
    loop {
        tokio::select! {
            // Asked to stop (or dropped): each connection ends, and is reported, before this returns.
            _ = &mut stopped => {
                drop(listener);
                tasks.refusals.shutdown().await;
                tasks.connections.shutdown().await;
                return;
            }
            accepted = listener.accept() => match accepted {
                Ok(Accepted::Unix(stream)) => admit(stream, &mut tasks, &shared),
                Ok(Accepted::Tcp(stream)) => admit(stream, &mut tasks, &shared),
                Err(e) => {
                    tracing::warn!(target: "nexo::egress", "the egress proxy cannot accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.connections.join_next(), if !tasks.connections.is_empty() => {}
            Some(_) = tasks.refusals.join_next(), if !tasks.refusals.is_empty() => {}
        }
    }
}

/// What a client asked for.
struct Asked {
    method: String,
    host: String,
    port: u16,
    /// A forwarded request's head, rewritten for the origin; `None` for a tunnel.
    head: Option<Vec<u8>>,
}

impl Asked {
    /// Its report before anything moved: not (yet) let through, for
    /// `reason` if refused.
    fn connection(&self, reason: Option<String>) -> Connection {
        Connection {
            host: shown(&self.host, 253),
            port: self.port,
            method: shown(&self.method, 32),
            sent: 0,
            received: 0,
            allowed: false,
            reason,
        }
    }
}

/// Serves one client connection: its request read, checked, and then
/// tunnelled or forwarded.
async fn serve<C: Client>(mut client: C, shared: Arc<Shared>) {
    let (asked, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some((head, rest)))) => match parse(&head) {
            Ok(asked) => (asked, rest),
            Err(why) => {
                let _ = answer(&mut client, 400, &why).await;
                return;
            }
        },
        Ok(Ok(None)) => return,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            // What is already here is dropped, so the close is not a reset
            // that loses the answer.
            let mut discard = [0u8; 4096];
            while matches!(client.read_now(&mut discard), Ok(n) if n > 0) {}
            let why = format!("the request head is longer than {MAX_HEAD} bytes");
            let _ = answer(&mut client, 400, &why).await;
            return;
        }
        Ok(Err(_)) => return,
        Err(_) => {
            let _ = answer(&mut client, 408, "the request head did not arrive in time").await;
            return;
        }
    };
    let mut report = Report {
        connection: asked.connection(None),
        shared: Arc::clone(&shared),
        head: 0,
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
        ended: false,
    };
    let meter = shared.policy.meter.as_deref();
    let opened = tokio::time::timeout(OPEN_TIMEOUT, shared.open(&asked)).await.unwrap_or_else(|_| {
        let message = format!("no address answered within {} s", OPEN_TIMEOUT.as_secs());
        Err((504, EgressError::Connect { url: format!("{}:{}", asked.host, asked.port), message }))
    });
    // A forwarded head is sent up as it is: it counts as a tunnel's bytes do.
    let opened = match (opened, &asked.head, meter) {
        (Ok(_), Some(head), Some(meter)) if !meter.add(head.len()) => Err((403, Policy::quota_error(meter))),
        (opened, ..) => opened,
    };
    let upstream = match opened {
        Ok(upstream) => upstream,
        Err((status, error)) => {
            report.connection.reason = Some(error.to_string());
            report.ended = true;
            let _ = answer(&mut client, status, &error.to_string()).await;
            return;
        }
    };
    report.connection.allowed = true;
    let mut upstream = upstream;
    let opened = match &asked.head {
        None => client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await,
        Some(head) => upstream.write_all(head).await,
    };
    report.head = asked.head.as_ref().map_or(0, |h| h.len() as u64);
    if opened.is_err() {
        report.ended = true;
        return;
    }
    // A tunnel to a name carries a handshake for that name only; an address's grant is the address's.
    let named = match (&asked.head, Host::parse(&asked.host)) {
        (None, Ok(Host::Domain(_))) => Some(asked.host.as_str()),
        _ => None,
    };
    let counts = (&report.sent, &report.received);
    let (why, refused) = tunnel(client, upstream, &rest, meter, counts, named).await;
    report.connection.reason = why;
    report.connection.allowed = !refused;
    report.ended = true;
}

/// A connection's report, made once, when it is dropped: at its end, or
/// unfinished when its proxy stops (the program that made it ended), with
/// the bytes carried so far either way.
struct Report {
    connection: Connection,
    shared: Arc<Shared>,
    /// The forwarded head's bytes, sent before the tunnel's.
    head: u64,
    sent: AtomicU64,
    received: AtomicU64,
    /// Whether the connection ran its course (or was refused).
    ended: bool,
}

impl Drop for Report {
    fn drop(&mut self) {
        let c = &mut self.connection;
        c.sent = self.head + self.sent.load(Ordering::Relaxed);
        c.received = self.received.load(Ordering::Relaxed);
        if !self.ended && c.reason.is_none() {
            c.reason = Some("cut short: the proxy stopped (the program that made it ended)".into());
        }
        self.shared.report(c);
    }
}

impl Shared {
    fn report(&self, connection: &Connection) {
        // The audit keeps every connection; the log only when asked.
        tracing::debug!(
            target: "nexo::egress",
            host = %connection.host,
            port = connection.port,
            method = %connection.method,
            sent = connection.sent,
            received = connection.received,
            allowed = connection.allowed,
            reason = connection.reason.as_deref().unwrap_or(""),
            "proxied connection"
        );
        if let Some(log) = &self.policy.log {
            log.connection(connection);
        }
    }

    /// Checks what was asked for and connects to the first of its checked
    /// addresses that answers; the status to answer with otherwise.
    async fn open(&self, asked: &Asked) -> Result<TcpStream, (u16, EgressError)> {
        if let Some(meter) = self.policy.meter.as_deref().filter(|m| m.exhausted()) {
            return Err((403, Policy::quota_error(meter)));
        }
        let parsed =
            Host::parse(&asked.host).map_err(|e| (400, EgressError::BadUrl(format!("{}: {e}", asked.host))))?;
        let host = match &parsed {
            Host::Domain(name) => Host::Domain(name.as_str()),
            Host::Ipv4(ip) => Host::Ipv4(*ip),
            Host::Ipv6(ip) => Host::Ipv6(*ip),
        };
        if !self.policy.hosts.allows(&host, asked.port) {
            let error = EgressError::HostNotAllowed {
                host: format!("{}:{}", asked.host, asked.port),
                allowed: self.policy.hosts.to_string(),
            };
            return Err((403, error));
        }
        let exempt = self.guard.host_exempt(&host);
        let addresses: Vec<IpAddr> = match &host {
            Host::Domain(name) => self.guard.resolve_checked(name).await.map_err(|e| (403, e))?,
            Host::Ipv4(ip) => vec![self.guard.checked(&asked.host, exempt, IpAddr::V4(*ip)).map_err(|e| (403, e))?],
            Host::Ipv6(ip) => vec![self.guard.checked(&asked.host, exempt, IpAddr::V6(*ip)).map_err(|e| (403, e))?],
        };
        let mut last = String::from("no address");
        for ip in addresses {
            let routed = self.guard.connect_addr(ip);
            let to = if routed.port() == 0 { SocketAddr::new(ip, asked.port) } else { routed };
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            }
        }
        let url = format!("{}:{}", asked.host, asked.port);
        Err((502, EgressError::Connect { url, message: last }))
    }
}

/// Reads up to the end of the request head (as httparse finds it, bare
/// line feeds too): the head, and what came after it; `None` for a client
/// that closed first.
async fn read_head<C: Client>(client: &mut C) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match httparse::Request::new(&mut headers).parse(&buffer) {
            Ok(httparse::Status::Complete(end)) => {
                let rest = buffer.split_off(end);
                return Ok(Some((buffer, rest)));
            }
            // What cannot be read is the parser's to say, with its reason.
            Err(_) => return Ok(Some((buffer, Vec::new()))),
            Ok(httparse::Status::Partial) if buffer.len() > MAX_HEAD => {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "head too long"));
            }
            Ok(httparse::Status::Partial) => {}
        }
    }
}

/// The request head as what was asked for: a `CONNECT host:port`, or a
/// request for an absolute `http://` URL (rewritten to the origin's form).
fn parse(head: &[u8]) -> Result<Asked, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("the request head is incomplete".into()),
        Err(e) => return Err(format!("the request head cannot be read: {e}")),
    }
    let method = request.method.unwrap_or_default().to_string();
    let target = request.path.unwrap_or_default();
    if method == "CONNECT" {
        // `host:port`, the port required; the host as a URL would read it.
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(h, p)| p.parse::<u16>().ok().filter(|p| *p != 0).map(|p| (h, p)))
            .ok_or_else(|| format!("CONNECT needs `host:port`, not `{}`", shown(target, 120)))?;
        let url = Url::parse(&format!("http://{host}/"))
            .map_err(|e| format!("CONNECT names a host that cannot be read (`{}`): {e}", shown(host, 120)))?;
        let host = url.host_str().unwrap_or_default().to_string();
        return Ok(Asked { method, host, port, head: None });
    }
    let url = Url::parse(target).map_err(|_| {
        format!(
            "the proxy takes `CONNECT host:port` or a request for an absolute http:// URL, not `{}`",
            shown(target, 120)
        )
    })?;
    if url.scheme() != "http" {
        return Err(format!("only http:// is forwarded; for {}:// use CONNECT (HTTPS_PROXY)", url.scheme()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a URL with credentials (`user:pass@`) is not forwarded".into());
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let mut out = Vec::with_capacity(head.len());
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    out.extend_from_slice(format!("{method} {path} HTTP/1.1\r\n").as_bytes());
    // The host checked is the host asked for: a `Host` of the client's own
    // would reach another site behind the same address (domain fronting).
    let authority = if url.port().is_some() { format!("{host}:{port}") } else { host.clone() };
    out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if name.starts_with("proxy-") || matches!(name.as_str(), "connection" | "keep-alive" | "host") {
            continue;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Asked { method, host, port, head: Some(out) })
}

/// Text a client sent, cut to `most` characters for an answer or a report.
fn shown(text: &str, most: usize) -> String {
    text.chars().take(most).collect()
}

/// Answers a client with `status` and `why`, and closes.
async fn answer<C: Client>(client: &mut C, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        504 => "Gateway Timeout",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("nexo egress proxy: {why}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

/// Carries both ways until both sides are done, `rest` (what the client
/// sent after its head) first, counting the bytes sent and received as
/// they go: why it was cut short, if it was, and whether that was a
/// refusal. With `named` (a tunnel granted for a host name), the client's
/// first bytes, if they are a TLS handshake, must ask for that name
/// ([`crate::sni`]): a handshake for another site served at the same
/// address is refused before any of it goes up. What the server sends
/// first flows meanwhile. The kernel moves the bytes where it can
/// ([`crate::splice`]); a copy through a buffer otherwise.
async fn tunnel<C: Client>(
    client: C,
    mut upstream: TcpStream,
    rest: &[u8],
    meter: Option<&Meter>,
    (sent, received): (&AtomicU64, &AtomicU64),
    named: Option<&str>,
) -> (Option<String>, bool) {
    let stop = Stop::default();
    #[cfg(target_os = "linux")]
    if let (Ok(up), Ok(down)) = (crate::splice::Pipe::new(), crate::splice::Pipe::new()) {
        client.widen();
        let (client, upstream) = (&client, &upstream);
        let up = async {
            let first = match named {
                Some(host) => {
                    let mut ended = stop.ended.subscribe();
                    let checked = tokio::select! {
                        checked = gate(host, rest, client) => checked,
                        _ = ended.wait_for(|ended| *ended) => return,
                        () = stop.idle() => return,
                    };
                    match checked {
                        Ok(first) => first,
                        Err(why) => return stop.refuse(why),
                    }
                }
                None => rest.to_vec(),
            };
            if !send(upstream, &first, meter, &stop).await {
                return;
            }
            sent.fetch_add(first.len() as u64, Ordering::Relaxed);
            carry(Spliced { pipe: up, from: client, to: upstream }, meter, &stop, sent).await;
        };
        tokio::join!(up, carry(Spliced { pipe: down, from: upstream, to: client }, meter, &stop, received));
        return stop.why(meter);
    }
    // Through buffers, the check reads the client's first bytes before
    // anything flows either way: a protocol whose server speaks first
    // waits until the client does.
    let first = match named {
        Some(host) => match tokio::time::timeout(IDLE, gate(host, rest, &client)).await {
            Ok(Ok(first)) => first,
            Ok(Err(why)) => return (Some(why), true),
            Err(_) => return (Some(format!("the client sent nothing for {} s", IDLE.as_secs())), false),
        },
        None => rest.to_vec(),
    };
    if !first.is_empty() {
        if !count(meter, first.len()) {
            return (meter.map(|m| Policy::quota_error(m).to_string()), false);
        }
        if upstream.write_all(&first).await.is_err() {
            return (None, false);
        }
        sent.fetch_add(first.len() as u64, Ordering::Relaxed);
    }
    let (client_read, client_write) = tokio::io::split(client);
    let (upstream_read, upstream_write) = upstream.into_split();
    tokio::join!(
        carry(Copied { from: client_read, to: upstream_write, buffer: vec![0; BUFFER] }, meter, &stop, sent),
        carry(Copied { from: upstream_read, to: client_write, buffer: vec![0; BUFFER] }, meter, &stop, received)
    );
    stop.why(meter)
}

/// Sends `rest` up through a shared reference, counted: false when it
/// could not be (the allowance, or a failed write), the tunnel ended.
#[cfg(target_os = "linux")]
async fn send(upstream: &TcpStream, mut rest: &[u8], meter: Option<&Meter>, stop: &Stop) -> bool {
    if rest.is_empty() {
        return true;
    }
    if !count(meter, rest.len()) {
        stop.over();
        return false;
    }
    while !rest.is_empty() {
        let written = match upstream.writable().await {
            Ok(()) => upstream.try_write(rest),
            Err(e) => Err(e),
        };
        match written {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                stop.end();
                return false;
            }
        }
    }
    true
}

/// Reads what the client sends next onto `seen`; nothing once it has
/// closed.
async fn read_more<C: Client>(client: &C, seen: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 4096];
    loop {
        client.readable().await?;
        match client.read_now(&mut chunk) {
            Ok(n) => {
                seen.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// The check of a tunnel's first bytes, `rest` and what the client sends
/// after it: they must show a ClientHello asking for `host`, or no TLS at
/// all. Waits for the client's first bytes as long as its caller lets it
/// (a server may speak first), then gives a handshake [`HEAD_TIMEOUT`] to
/// complete. The bytes read, `rest` first, to be sent up.
async fn gate<C: Client>(host: &str, rest: &[u8], client: &C) -> Result<Vec<u8>, String> {
    let unread = |e: std::io::Error| format!("the client's first bytes could not be read: {e}");
    let mut seen = rest.to_vec();
    if seen.is_empty() {
        read_more(client, &mut seen).await.map_err(unread)?;
        if seen.is_empty() {
            return Ok(seen);
        }
    }
    let checked = async {
        loop {
            match crate::sni::client_hello(&seen) {
                crate::sni::Hello::NotTls => return Ok(()),
                crate::sni::Hello::Tls(Some(name)) if same_name(&name, host) => return Ok(()),
                crate::sni::Hello::Tls(Some(name)) => {
                    return Err(format!(
                        "the TLS handshake asks for `{}`, not `{host}`, the host this tunnel was granted for",
                        shown(&name, 253)
                    ));
                }
                crate::sni::Hello::Tls(None) => {
                    return Err(format!("the TLS handshake names no server: a tunnel to `{host}` must ask for it"));
                }
                crate::sni::Hello::Malformed => return Err("the TLS handshake cannot be read".into()),
                crate::sni::Hello::Encrypted => {
                    return Err(format!(
                        "the TLS handshake hides the server it asks for (Encrypted Client Hello): a tunnel to \
                         `{host}` must ask for it openly"
                    ));
                }
                crate::sni::Hello::Incomplete if seen.len() >= crate::sni::MAX_HELLO => {
                    return Err("the TLS handshake is longer than one record".into());
                }
                crate::sni::Hello::Incomplete => {
                    let before = seen.len();
                    read_more(client, &mut seen).await.map_err(unread)?;
                    if seen.len() == before {
                        return Err("the client closed before its TLS handshake was complete".into());
                    }
                }
            }
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, checked).await {
        Ok(Ok(())) => Ok(seen),
        Ok(Err(why)) => Err(why),
        Err(_) => Err("the TLS handshake did not arrive in time".into()),
    }
}

/// Whether a server name is `host` (case and a trailing dot aside).
fn same_name(name: &str, host: &str) -> bool {
    name.trim_end_matches('.').eq_ignore_ascii_case(host.trim_end_matches('.'))
}

/// One direction's way of moving bytes: what its source has is taken into
/// a holding place, then given to its destination.
trait Carry {
    /// Takes up to `most` bytes: how many, 0 at the source's end.
    async fn take(&mut self, most: usize) -> std::io::Result<usize>;
    /// Gives the `n` bytes taken to the destination.
    async fn give(&mut self, n: usize) -> std::io::Result<()>;
    /// Tells the destination nothing more comes.
    async fn finish(self);
}

/// Through a buffer of the proxy's.
struct Copied<R, W> {
    from: R,
    to: W,
    buffer: Vec<u8>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Carry for Copied<R, W> {
    async fn take(&mut self, most: usize) -> std::io::Result<usize> {
        let most = most.clamp(1, self.buffer.len());
        self.from.read(&mut self.buffer[..most]).await
    }
    async fn give(&mut self, n: usize) -> std::io::Result<()> {
        self.to.write_all(&self.buffer[..n]).await
    }
    async fn finish(mut self) {
        let _ = self.to.shutdown().await;
    }
}

/// Through a pipe, in the kernel.
#[cfg(target_os = "linux")]
struct Spliced<'a, F, T> {
    pipe: crate::splice::Pipe,
    from: &'a F,
    to: &'a T,
}

#[cfg(target_os = "linux")]
impl<F: crate::splice::Socket, T: crate::splice::Socket> Carry for Spliced<'_, F, T> {
    async fn take(&mut self, most: usize) -> std::io::Result<usize> {
        self.pipe.fill(self.from, most).await
    }
    async fn give(&mut self, n: usize) -> std::io::Result<()> {
        self.pipe.drain(self.to, n).await
    }
    async fn finish(self) {
        crate::splice::shut_write(self.to);
    }
}

/// One direction, until its source ends (then its destination is shut for
/// writing), a side fails, the allowance passes, or the tunnel idles (then
/// both end), adding the bytes it carries to `carried`.
async fn carry(mut way: impl Carry, meter: Option<&Meter>, stop: &Stop, carried: &AtomicU64) {
    let mut ended = stop.ended.subscribe();
    loop {
        let taken = tokio::select! {
            taken = way.take(allowance(meter, usize::MAX)) => taken,
            _ = ended.wait_for(|ended| *ended) => break,
            () = stop.idle() => break,
        };
        let n = match taken {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => {
                stop.end();
                break;
            }
        };
        if !count(meter, n) {
            stop.over();
            break;
        }
        stop.touch();
        let given = tokio::select! {
            given = way.give(n) => given,
            _ = ended.wait_for(|ended| *ended) => break,
            () = stop.idle() => break,
        };
        if given.is_err() {
            stop.end();
            break;
        }
        stop.touch();
        carried.fetch_add(n as u64, Ordering::Relaxed);
    }
    way.finish().await;
}

/// Both directions' signal to end: set when one passes the allowance or
/// fails, or when nothing moved either way for [`IDLE`].
struct Stop {
    quota: AtomicBool,
    /// Why the tunnel was refused once open (its first bytes).
    refused: std::sync::Mutex<Option<String>>,
    /// Set once; a direction waiting to read sees it at once, and one busy
    /// writing sees it before its next read.
    ended: tokio::sync::watch::Sender<bool>,
    started: tokio::time::Instant,
    /// When bytes last moved, in milliseconds since `started`.
    moved: AtomicU64,
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            quota: AtomicBool::new(false),
            refused: std::sync::Mutex::new(None),
            ended: tokio::sync::watch::Sender::new(false),
            started: tokio::time::Instant::now(),
            moved: AtomicU64::new(0),
        }
    }
}

impl Stop {
    /// The allowance passed: both directions end.
    fn over(&self) {
        self.quota.store(true, Ordering::Relaxed);
        self.end();
    }

    /// The tunnel is refused for `why`: both directions end.
    fn refuse(&self, why: String) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.end();
    }

    /// Why the tunnel was cut short, if it was, and whether that was a
    /// refusal.
    fn why(&self, meter: Option<&Meter>) -> (Option<String>, bool) {
        if let Some(why) = self.refused.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return (Some(why), true);
        }
        let quota = self.quota.load(Ordering::Relaxed).then(|| meter.map(|m| Policy::quota_error(m).to_string()));
        (quota.flatten(), false)
    }

    /// Both directions end.
    fn end(&self) {
        self.ended.send_replace(true);
    }

    /// Bytes moved now.
    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.moved.store(now, Ordering::Relaxed);
    }

    /// Returns once nothing has moved either way for [`IDLE`], having
    /// ended the tunnel.
    async fn idle(&self) {
        loop {
            let moved = self.moved.load(Ordering::Relaxed);
            tokio::time::sleep_until(self.started + Duration::from_millis(moved) + IDLE).await;
            if self.moved.load(Ordering::Relaxed) == moved {
                self.end();
                return;
            }
        }
    }
}

fn count(meter: Option<&Meter>, n: usize) -> bool {
    meter.is_none_or(|m| m.add(n))
}

/// The most the next read may take: up to `most`, and no more than is left
/// of the allowance (at least 1: a read past it ends the tunnel), so a
/// tunnel carries exactly up to its allowance.
fn allowance(meter: Option<&Meter>, most: usize) -> usize {
    let left = meter.and_then(|m| m.limit().map(|limit| limit.saturating_sub(m.used())));
    left.map_or(most, |left| usize::try_from(left).unwrap_or(usize::MAX).clamp(1, most))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffered way (where the kernel's is not to be had) carries what
    /// the spliced one does: up to the allowance, then both directions end.
    #[tokio::test]
    async fn a_buffered_copy_carries_up_to_the_allowance_and_to_the_end() {
        for (limit, expected) in [(Some(4_000), 4_000), (None, 10_000)] {
            let (mut source, from) = tokio::io::duplex(1 << 16);
            let (to, mut destination) = tokio::io::duplex(1 << 16);
            source.write_all(&[7; 10_000]).await.unwrap_or_default();
            drop(source);
            let meter = Meter::new(limit);
            let stop = Stop::default();
            let way = Copied { from, to, buffer: vec![0; 1_000] };
            let counted = AtomicU64::new(0);
            carry(way, Some(&meter), &stop, &counted).await;
            let carried = counted.load(Ordering::Relaxed);
            let mut got = Vec::new();
            destination.read_to_end(&mut got).await.unwrap_or_default();
            assert_eq!((carried, got.len()), (expected, expected as usize));
            assert_eq!(stop.quota.load(Ordering::Relaxed), limit.is_some());
        }
    }
}
