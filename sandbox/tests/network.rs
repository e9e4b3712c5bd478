//! A shell command granted network, under each confinement: everything it
//! reaches goes through the gateway it was given, and nothing else is
//! reachable (no direct connection, no UDP, no DNS). The gateway here is a
//! small HTTP proxy stand-in that answers every request with what it was
//! asked; the host's tests run the same commands through nexo's real
//! egress proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexo_sandbox::{
    Confinement, ExecOutput, Gateway, LocalSandbox, PROXY_ADDR, PrivateNet, ProgramConfinement, Sandbox, Serving,
    ShellPolicy,
};

const LIMIT: Duration = Duration::from_secs(30);

/// Answers each request on the command's listener with its first line.
#[derive(Default)]
struct Echo {
    asked: Arc<Mutex<Vec<String>>>,
    served: Arc<AtomicBool>,
}

/// Stops the gateway's thread when the sandbox drops it.
struct Stop(Arc<AtomicBool>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Serving for Stop {
    fn stop(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async {})
    }
}

impl Gateway for Echo {
    fn serve(&self, listener: TcpListener) -> std::io::Result<Box<dyn Serving>> {
        self.served.store(true, Ordering::SeqCst);
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (asked, stopped) = (Arc::clone(&self.asked), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
                let body = format!("via gateway: {line}\n");
                asked.lock().unwrap().push(line);
                let answer =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        Ok(Box::new(Stop(stop)))
    }

    fn describe(&self) -> String {
        "a test gateway".into()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    sandbox: LocalSandbox,
    gateway: Echo,
}

impl Fixture {
    fn new(confinement: Confinement) -> Fixture {
        for tool in ["curl", "python3"] {
            assert!(
                std::process::Command::new(tool).arg("--version").output().is_ok(),
                "these tests need {tool} (apt-get install curl python3)"
            );
        }
        let dir = tempfile::Builder::new().prefix("net-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let policy = ShellPolicy { confinement, ..ShellPolicy::default() };
        if let Err(e) = policy.effective_confinement() {
            panic!("{confinement:?} confinement is not usable on this machine, so its tests cannot run: {e}");
        }
        let sandbox = LocalSandbox::with_shell(dir.path(), policy).unwrap();
        Fixture { _dir: dir, sandbox, gateway: Echo::default() }
    }

    fn exec(&self, command: &str) -> ExecOutput {
        self.sandbox.exec_with_network(command, LIMIT, &self.gateway).unwrap_or_else(|e| panic!("`{command}`: {e}"))
    }

    fn asked(&self) -> Vec<String> {
        self.gateway.asked.lock().unwrap().clone()
    }
}

fn requests_go_through_the_gateway(c: Confinement) {
    let f = Fixture::new(c);
    let proxy = format!("http://{PROXY_ADDR}");
    let out = f.exec("echo \"$HTTP_PROXY $HTTPS_PROXY $https_proxy\"");
    assert_eq!(out.stdout.trim(), format!("{proxy} {proxy} {proxy}"), "{out:?}");

    let out = f.exec("curl -sS --max-time 10 http://service.test/hello");
    assert_eq!(out.stdout, "via gateway: GET http://service.test/hello HTTP/1.1\n", "under {c:?}: {out:?}");
    // TLS asks for a tunnel; the stand-in answers no TLS, so only the ask is checked.
    let _ = f.exec("curl -sS --max-time 10 https://service.test/");
    assert!(f.asked().iter().any(|l| l.starts_with("CONNECT service.test:443 ")), "{:?}", f.asked());
}

fn nothing_is_reached_around_the_gateway(c: Confinement) {
    let f = Fixture::new(c);
    // A server on the host's loopback, as any host service would be.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let out = f.exec(&format!("curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/"));
    assert!(out.status != 0 && host.accept().is_err(), "a direct connection reached the host under {c:?}: {out:?}");
    let out = f.exec("curl -sS --noproxy '*' --max-time 5 http://192.0.2.1/");
    assert_ne!(out.status, 0, "a direct connection left under {c:?}: {out:?}");

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let out = f.exec(&format!(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", \
         {udp_port}))'"
    ));
    udp.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(
        out.status != 0 && out.stderr.contains("Permission denied") && udp.recv(&mut [0u8; 4]).is_err(),
        "a UDP socket was made under {c:?}: {out:?}"
    );
    let out = f.exec("python3 -c 'import socket; print(socket.getaddrinfo(\"example.com\", 80))'");
    assert!(out.status != 0 && out.stderr.contains("gaierror"), "a name was resolved under {c:?}: {out:?}");
    assert!(f.asked().is_empty(), "nothing was asked of the gateway: {:?}", f.asked());
    assert!(f.gateway.served.load(Ordering::SeqCst), "the gateway was given the command's listener");
}

/// A long-running program confined with [`ProgramConfinement::proxied`]:
/// its listeners come back over the handover, and it reaches the gateway
/// and its forwarded port, and nothing else, whether it uses the proxy or
/// not.
fn a_program_reaches_only_its_gateway(c: Confinement) {
    let dir = tempfile::Builder::new().prefix("net-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    // A host service the program is given, at the same port inside.
    let service = TcpListener::bind("127.0.0.1:0").unwrap();
    let service_port = service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in service.incoming().flatten() {
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nforwarded\n");
        }
    });
    let net = PrivateNet::new().unwrap();
    let confinement = ProgramConfinement {
        confinement: c,
        proxied: Some(net.child_fd()),
        forward_ports: vec![service_port],
        ..ProgramConfinement::new(dir.path())
    };
    let script = format!(
        "curl -sS --max-time 10 http://service.test/program; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{service_port}/; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/ && echo DIRECT"
    );
    let mut command = confinement.command("/bin/sh", ["-c", script.as_str()]).unwrap();
    command.command_mut().env_clear().env("PATH", "/usr/bin:/bin").envs(nexo_sandbox::proxy_env());
    command.command_mut().stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let receiver = net.into_receiver();
    let mut listeners = receiver.try_receive().unwrap().expect("the listeners came back with the spawn");
    assert_eq!(listeners.len(), 2);
    let (listener, forwarded) = (listeners.remove(0), listeners.remove(0));
    let gateway = Echo::default();
    let serving = gateway.serve(listener).unwrap();
    // The forwarded port, relayed to the host's service.
    forwarded.set_nonblocking(false).unwrap();
    std::thread::spawn(move || {
        for mut inside in forwarded.incoming().flatten() {
            let mut outside = std::net::TcpStream::connect(("127.0.0.1", service_port)).unwrap();
            let _ = std::io::copy(&mut outside, &mut inside);
        }
    });
    let out = child.wait_with_output().unwrap();
    drop(serving);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "via gateway: GET http://service.test/program HTTP/1.1\nforwarded\n", "under {c:?}: {out:?}");
    assert!(host.accept().is_err(), "a direct connection reached the host under {c:?}");
    // Everyone holding the child's end is gone: no second handover, and an error rather than a wait.
    assert!(receiver.try_receive().is_err());
}

macro_rules! network_tests {
    ($module:ident, $confinement:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn requests_go_through_the_gateway() {
                super::requests_go_through_the_gateway($confinement);
            }
            #[test]
            fn nothing_is_reached_around_the_gateway() {
                super::nothing_is_reached_around_the_gateway($confinement);
            }
            #[test]
            fn a_program_reaches_only_its_gateway() {
                super::a_program_reaches_only_its_gateway($confinement);
            }
        }
    };
}

network_tests!(bubblewrap, Confinement::Bubblewrap);
network_tests!(landlock, Confinement::Landlock);

/// Sandboxes that cannot confine a command's network that way refuse it.
#[test]
fn the_virtual_sandbox_refuses_network() {
    let sandbox = nexo_sandbox::VirtualSandbox::new();
    let err = sandbox.exec_with_network("true", LIMIT, &Echo::default()).unwrap_err();
    assert!(err.to_string().contains("cannot give a command network"), "{err}");
}
