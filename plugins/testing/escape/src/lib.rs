//! Test plugin: probes its own WASI authority and reports, per line of input,
//! what happened. Lines are `op:argument`:
//!
//! - `read:<path>` (or a bare path): read a file
//! - `write:<path>`: create a file
//! - `tcp:<host:port>`: open a TCP connection
//! - `dns:<host>`: resolve a name
//! - `env:`: list the environment variable names it can see
//! - `print:<text>`: write to stdout and stderr

use std::io::Write as _;

use nexo_sdk::agent::{Agent, Manifest, RunError};

struct Escape;

fn probe(line: &str) -> String {
    let (op, arg) = line.split_once(':').filter(|(op, _)| !op.starts_with('/')).unwrap_or(("read", line));
    let result = match op {
        "read" => std::fs::read_to_string(arg).map(|t| t.trim().to_string()).map_err(|e| e.to_string()),
        "write" => std::fs::write(arg, "written by the plugin").map(|()| String::new()).map_err(|e| e.to_string()),
        "tcp" => tcp_connect(arg),
        "dns" => resolve(arg),
        "env" => Ok(std::env::vars().map(|(k, _)| k).collect::<Vec<_>>().join(",")),
        "print" => {
            println!("{arg}");
            let _ = std::io::stdout().flush();
            let _ = writeln!(std::io::stderr(), "{arg}");
            Ok(String::new())
        }
        other => Err(format!("unknown probe {other}")),
    };
    match result {
        Ok(text) if text.is_empty() => "ok".to_string(),
        Ok(text) => format!("ok {text}"),
        Err(e) => format!("err {e}"),
    }
}

/// Connects through `wasi:sockets` directly (the Debian wasi-libc has no
/// socket functions for std::net to link against).
fn tcp_connect(addr: &str) -> Result<String, String> {
    use wasi::sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    let (ip, port) = addr.split_once(':').ok_or("expected host:port")?;
    let octets: Vec<u8> = ip.split('.').filter_map(|o| o.parse().ok()).collect();
    let [a, b, c, d] = octets[..] else { return Err("expected an IPv4 address".into()) };
    let port: u16 = port.parse().map_err(|_| "bad port".to_string())?;
    let network = wasi::sockets::instance_network::instance_network();
    let socket = wasi::sockets::tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
        .map_err(|e| format!("create: {e:?}"))?;
    let target = IpSocketAddress::Ipv4(Ipv4SocketAddress { port, address: (a, b, c, d) });
    socket.start_connect(&network, target).map_err(|e| format!("connect: {e:?}"))?;
    socket.subscribe().block();
    socket.finish_connect().map(|_| String::new()).map_err(|e| format!("connect: {e:?}"))
}

fn resolve(host: &str) -> Result<String, String> {
    let network = wasi::sockets::instance_network::instance_network();
    let stream = wasi::sockets::ip_name_lookup::resolve_addresses(&network, host).map_err(|e| format!("{e:?}"))?;
    stream.subscribe().block();
    match stream.resolve_next_address() {
        Ok(Some(addr)) => Ok(format!("{addr:?}")),
        Ok(None) => Ok("no addresses".into()),
        Err(e) => Err(format!("{e:?}")),
    }
}

impl Agent for Escape {
    fn manifest() -> Manifest {
        Manifest::new("escape", "Probes its WASI authority (a test of the grants)")
            .capabilities([nexo_sdk::agent::Capability::Read, nexo_sdk::agent::Capability::Write])
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut report = String::new();
        for line in input.lines().filter(|l| !l.trim().is_empty()) {
            report.push_str(&format!("{line}\t{}\n", probe(line)));
        }
        Ok(report)
    }
}

nexo_sdk::export_agent!(Escape);
