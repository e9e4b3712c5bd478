//! The cost of the guard in `GuardedClient`: a GET of a small body from a
//! loopback keep-alive server, plain `reqwest` against the guarded client (by
//! IP literal and by host name through a fake resolver), plus the guard's
//! pieces without network. All cases run in one process so the ratios mean
//! something. Run with `cargo bench -p nexo-egress --bench client`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use nexo_egress::{GuardedClient, HostList, Policy, Resolver, SecretHeader, check_address};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BODY: &[u8] = b"hello from the loopback bench server\n";

/// The "public" address the fake resolver answers, routed to the server.
const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));

/// A loopback HTTP/1.1 server on its own thread and runtime, answering every
/// request with `BODY` and keeping connections open. Returns its address and
/// the number of connections it accepted.
fn start_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                count.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(stream));
            }
        });
    });
    (addr, accepted)
}

/// Answers each request head on the connection (bodyless GETs only).
async fn serve(mut stream: tokio::net::TcpStream) {
    let mut response =
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n", BODY.len()).into_bytes();
    response.extend_from_slice(BODY);
    stream.set_nodelay(true).unwrap();
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            if stream.write_all(&response).await.is_err() {
                return;
            }
        }
    }
}

/// Answers `PUBLIC` for every name, without I/O.
struct FakeResolver;

impl Resolver for FakeResolver {
    fn resolve(&self, _host: &str) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        Box::pin(async { Ok(vec![PUBLIC]) })
    }
}

fn get(c: &mut Criterion) {
    let (server, accepted) = start_server();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let by_ip = format!("http://127.0.0.1:{}/small", server.port());
    let by_name = format!("http://bench.test:{}/small", server.port());

    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let guarded_ip = GuardedClient::builder().allow_private([loopback]).build().unwrap();
    let policy_ip = Policy::new(HostList::new(["127.0.0.1"]).unwrap());
    let guarded_name =
        GuardedClient::builder().resolver(Arc::new(FakeResolver)).route_for_tests(PUBLIC, server).build().unwrap();
    let policy_name = Policy::new(HostList::new(["bench.test"]).unwrap());
    // A key for this origin: every response is then scrubbed.
    let key = SecretHeader::with_prefix("Authorization", "Bearer ", "sk-bench-0123456789abcdef")
        .unwrap()
        .for_origins([format!("http://bench.test:{}", server.port())])
        .unwrap();
    let policy_key = policy_name.clone().inject(key);

    // Each client works before measuring: a wrong setup fails here, not as a
    // suspiciously fast benchmark.
    rt.block_on(async {
        let body = plain.get(&by_ip).send().await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], BODY);
        let r = guarded_ip.get(&by_ip, &[], &policy_ip).await.unwrap();
        assert_eq!((r.status, r.body.as_slice(), r.truncated), (200, BODY, false));
        let r = guarded_name.get(&by_name, &[], &policy_name).await.unwrap();
        assert_eq!((r.status, r.body.as_slice(), r.truncated), (200, BODY, false));
        let r = guarded_name.get(&by_name, &[], &policy_key).await.unwrap();
        assert_eq!((r.status, r.body.as_slice(), r.truncated), (200, BODY, false));
    });

    let mut group = c.benchmark_group("get-loopback");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    group.bench_function("plain reqwest, by IP", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = plain.get(black_box(by_ip.as_str())).send().await.unwrap();
                assert_eq!(response.status(), 200);
                black_box(response.bytes().await.unwrap())
            })
        })
    });
    group.bench_function("guarded, by IP (allow_private 127.0.0.1)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = guarded_ip.get(black_box(by_ip.as_str()), &[], &policy_ip).await.unwrap();
                assert_eq!(response.status, 200);
                black_box(response)
            })
        })
    });
    group.bench_function("guarded, by name (fake resolver, routed)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = guarded_name.get(black_box(by_name.as_str()), &[], &policy_name).await.unwrap();
                assert_eq!(response.status, 200);
                black_box(response)
            })
        })
    });
    group.bench_function("guarded, by name, with a key (sent and scrubbed)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = guarded_name.get(black_box(by_name.as_str()), &[], &policy_key).await.unwrap();
                assert_eq!(response.status, 200);
                black_box(response)
            })
        })
    });
    group.finish();
    // Three clients, one pooled connection each: more means keep-alive broke
    // and the numbers include connection setup.
    eprintln!("loopback server accepted {} connections", accepted.load(Ordering::Relaxed));
}

/// Public, private, loopback, link-local, reserved and IPv4-embedding forms.
const ADDRESSES: &[&str] = &[
    "93.184.216.34",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "127.0.0.1",
    "10.1.2.3",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "192.0.2.1",
    "224.0.0.1",
    "255.255.255.255",
    "240.0.0.1",
    "::1",
    "::ffff:127.0.0.1",
    "fd00::1",
    "fe80::1",
    "64:ff9b::7f00:1",
    "2002:7f00:1::1",
    "ff02::1",
];

const HOSTS: [&str; 20] = [
    "example.com",
    "docs.rs",
    "crates.io",
    "github.com",
    "api.github.com",
    "raw.githubusercontent.com",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "en.wikipedia.org",
    "developer.mozilla.org",
    "doc.rust-lang.org",
    "static.rust-lang.org",
    "search.example.net",
    "news.ycombinator.com",
    "stackoverflow.com",
    "93.184.216.34",
    "[2606:4700:4700::1111]",
    "bücher.example",
    "api.search.brave.com",
];

fn guard_pieces(c: &mut Criterion) {
    let addresses: Vec<IpAddr> = ADDRESSES.iter().map(|a| a.parse().unwrap()).collect();
    let public = addresses.iter().filter(|ip| check_address(**ip).is_ok()).count();
    assert_eq!(public, 5);
    let list = HostList::new(HOSTS).unwrap();
    assert!(list.matches("www.api.search.brave.com"));
    assert!(!list.matches("notexample.com"));

    let mut group = c.benchmark_group("guard");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    group.bench_function(format!("check_address x{} (mixed table)", addresses.len()), |b| {
        b.iter(|| {
            let mut passed = 0usize;
            for ip in black_box(addresses.as_slice()) {
                passed += usize::from(check_address(*ip).is_ok());
            }
            black_box(passed)
        })
    });
    group.bench_function("HostList::matches, 20 entries, hit (subdomain of the last)", |b| {
        b.iter(|| black_box(list.matches(black_box("www.api.search.brave.com"))))
    });
    group.bench_function("HostList::matches, 20 entries, miss", |b| {
        b.iter(|| black_box(list.matches(black_box("notexample.com"))))
    });
    group.bench_function("HostList::new, 20 entries", |b| {
        b.iter(|| black_box(HostList::new(black_box(HOSTS)).unwrap()))
    });
    group.finish();
}

/// The cost of scrubbing a key and its encodings from 2 MiB bodies.
fn scrubbing(c: &mut Criterion) {
    let redactor =
        nexo_egress::Redactor::new([b"Bearer sk-Live/7Gh2Qx9Lm4Tz8Wp3".as_slice(), b"sk-Live/7Gh2Qx9Lm4Tz8Wp3"])
            .expect("a valid secret");
    let mut group = c.benchmark_group("scrub");
    group.sample_size(20);
    for (what, chunk) in [
        (
            "escaped JSON",
            "{\"title\": \"Caf\\u00e9 &amp; bar\", \"url\": \"https://example.com/a%20b?q=1\", \"n\": 12345},\n",
        ),
        ("prose", "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor 2024. "),
    ] {
        let body = chunk.repeat((2 << 20) / chunk.len() + 1);
        group.bench_function(format!("2 MiB of {what}"), |b| {
            b.iter(|| std::hint::black_box(redactor.redact(std::hint::black_box(body.as_bytes().to_vec()))))
        });
    }
    group.finish();
}

criterion_group!(benches, get, guard_pieces, scrubbing);
criterion_main!(benches);
