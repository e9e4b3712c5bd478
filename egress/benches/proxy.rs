//! The egress proxy against a direct connection, in one process: a 100 MB
//! download from a loopback server (throughput) and a one-request
//! connection with a small answer (what the proxy adds to each connection:
//! the Unix socket, the request head read and checked, the upstream
//! connect). `proxied_tcp` is the shell's way in: a TCP listener served by
//! [`EgressProxy::serve`], as a confined command's namespace has.
//! `relay_floor` is the least any relay costs (blocking `splice(2)`, nothing
//! checked): on loopback, where the bytes cost CPU and not the wire, a relay
//! adds a second TCP connection, and the floor shows what that alone takes.
//! Run with `cargo bench -p nexo-egress --bench proxy`; the targets are ≥ 80%
//! of direct throughput and ≤ 1 ms added per connection.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nexo_egress::{EgressProxy, GuardedClient, NetHosts, ProxyPolicy};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const BIG: usize = 100 * 1024 * 1024;

/// A loopback server on its own thread: each connection's request head is
/// answered with `BIG` bytes for `/big`, a short body otherwise, then closed.
fn start_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                tokio::spawn(serve(stream));
            }
        });
    });
    addr
}

async fn serve(mut stream: TcpStream) {
    stream.set_nodelay(true).unwrap();
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let Ok(n) = stream.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let big = head.windows(4).any(|w| w == b"/big");
    let length = if big { BIG } else { 2 };
    let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
    if stream.write_all(response.as_bytes()).await.is_err() {
        return;
    }
    if big {
        let block = vec![b'x'; 256 * 1024];
        let mut left = BIG;
        while left > 0 {
            let n = left.min(block.len());
            if stream.write_all(&block[..n]).await.is_err() {
                return;
            }
            left -= n;
        }
    } else {
        let _ = stream.write_all(b"ok").await;
    }
    let _ = stream.shutdown().await;
}

/// The least a relay can cost, to measure the proxy against: a thread per
/// connection that reads the request head, connects to `server`, and moves
/// the answer with blocking `splice(2)` through a pipe; no check, no count.
/// The client side is TCP, as the shell's is.
#[cfg(target_os = "linux")]
fn start_floor(server: SocketAddr) -> SocketAddr {
    use rustix::pipe::{PipeFlags, SpliceFlags};
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let mut client = client.unwrap();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut chunk = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = client.read(&mut chunk).unwrap();
                    assert!(n > 0, "the client closed before its request head");
                    head.extend_from_slice(&chunk[..n]);
                }
                let mut upstream = std::net::TcpStream::connect(server).unwrap();
                upstream.write_all(&head).unwrap();
                let (out, into) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).unwrap();
                let _ = rustix::pipe::fcntl_setpipe_size(&into, 256 * 1024);
                loop {
                    let n = rustix::pipe::splice(&upstream, None, &into, None, 256 * 1024, SpliceFlags::MOVE).unwrap();
                    if n == 0 {
                        return;
                    }
                    let mut left = n;
                    while left > 0 {
                        left -= rustix::pipe::splice(&out, None, &client, None, left, SpliceFlags::MOVE).unwrap();
                    }
                }
            });
        }
    });
    addr
}

/// Sends the request and reads the answer to its end: the bytes read.
async fn fetch(mut stream: impl AsyncRead + AsyncWrite + Unpin, request: &[u8]) -> usize {
    stream.write_all(request).await.unwrap();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = start_server();
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let on_tcp = listener.local_addr().unwrap();
    let (proxy, _tcp_proxy) = rt.block_on(async {
        // The test server is on loopback: the operator's explicit exemption.
        let client = GuardedClient::builder().allow_private([server.ip()]).build().unwrap();
        let hosts = NetHosts::new([format!("127.0.0.1:{}", server.port())]).unwrap();
        let policy = ProxyPolicy { hosts, ..Default::default() };
        let proxy = EgressProxy::start(&client, &dir.path().join("proxy.sock"), policy.clone()).unwrap();
        (proxy, EgressProxy::serve(&client, listener, policy).unwrap())
    });
    let direct = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes();
    let proxied = |path: &str| format!("GET http://{server}{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes();

    let mut group = c.benchmark_group("proxy_download_100mb");
    group.sample_size(10).measurement_time(Duration::from_secs(20)).throughput(Throughput::Bytes(BIG as u64));
    let request = direct("/big");
    group.bench_function("direct", |b| {
        b.iter(|| {
            rt.block_on(async { assert!(fetch(TcpStream::connect(server).await.unwrap(), &request).await > BIG) })
        })
    });
    let request = proxied("/big");
    group.bench_function("proxied", |b| {
        b.iter(|| {
            rt.block_on(async {
                assert!(fetch(UnixStream::connect(proxy.path().unwrap()).await.unwrap(), &request).await > BIG)
            })
        })
    });
    group.bench_function("proxied_tcp", |b| {
        b.iter(|| {
            rt.block_on(async { assert!(fetch(TcpStream::connect(on_tcp).await.unwrap(), &request).await > BIG) })
        })
    });
    #[cfg(target_os = "linux")]
    {
        let floor = start_floor(server);
        let request = direct("/big");
        group.bench_function("relay_floor", |b| {
            b.iter(|| {
                rt.block_on(async { assert!(fetch(TcpStream::connect(floor).await.unwrap(), &request).await > BIG) })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("proxy_connection");
    let request = direct("/small");
    group.bench_function("direct", |b| {
        b.iter(|| rt.block_on(async { assert!(fetch(TcpStream::connect(server).await.unwrap(), &request).await > 2) }))
    });
    let request = proxied("/small");
    group.bench_function("proxied", |b| {
        b.iter(|| {
            rt.block_on(async {
                assert!(fetch(UnixStream::connect(proxy.path().unwrap()).await.unwrap(), &request).await > 2)
            })
        })
    });
    group.bench_function("proxied_tcp", |b| {
        b.iter(|| rt.block_on(async { assert!(fetch(TcpStream::connect(on_tcp).await.unwrap(), &request).await > 2) }))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
