//! A real llama.cpp `llama-server` with a small real model, for the live
//! tests of the OpenAI-compatible provider. `scripts/llama-deps.sh` builds
//! both into `target/llama` (or `NEXO_LLAMA`).
//!
//! The server runs greedy (`--temp 0`) so a pinned server and model answer
//! the same prompt the same way, and with a chat template that renders tools
//! (`testkit/llama/chatml-tools.jinja`): SmolLM2's own drops them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The model file `scripts/llama-deps.sh` installs.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// How long the server may take to load the model and answer `/health`.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// A running `llama-server` on a loopback port; killed when dropped.
#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

/// Where `scripts/llama-deps.sh` installs: `NEXO_LLAMA`, or `target/llama`.
pub fn dir() -> PathBuf {
    match std::env::var_os("NEXO_LLAMA") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/llama"),
    }
}

impl LlamaServer {
    /// Starts the server with a context of `context` tokens and waits until
    /// it is ready. `None` when it is not built: the skip is reported for
    /// `test`, naming the script that builds it; with `NEXO_LIVE_LLAMA=1`
    /// that panics instead.
    pub fn start(test: &str, context: u32) -> Option<LlamaServer> {
        let dir = dir();
        let server = dir.join("bin/llama-server");
        let model = dir.join(MODEL_FILE);
        if !server.is_file() || !model.is_file() {
            let why = format!("llama-server and its model are not built in {} (scripts/llama-deps.sh)", dir.display());
            assert!(std::env::var("NEXO_LIVE_LLAMA").as_deref() != Ok("1"), "NEXO_LIVE_LLAMA=1, but {why}");
            crate::skipped(test, &why);
            return None;
        }
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("llama/chatml-tools.jinja");
        let port = free_port();
        let log = std::env::temp_dir().join(format!("nexo-llama-{}-{port}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let child = Command::new(&server)
            .arg("-m")
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-c", &context.to_string()])
            .args(["-t", "2", "-np", "1", "--temp", "0", "--seed", "1", "--jinja", "--no-webui"])
            .arg("--chat-template-file")
            .arg(&template)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", server.display()));
        let mut running = LlamaServer { child, port, log };
        running.wait_ready();
        Some(running)
    }

    /// The OpenAI-compatible base URL, `http://127.0.0.1:{port}/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The server's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// POSTs `json` to the server's own `path` (`/apply-template`,
    /// `/tokenize`): its status and body.
    pub fn post(&self, path: &str, json: &str) -> (u16, String) {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
        );
        let request = format!("{head}Content-Length: {}\r\n\r\n{json}", json.len());
        exchange(self.port, &request).unwrap_or_else(|| panic!("POST {path} to llama-server failed:\n{}", self.log()))
    }

    /// Polls `/health` until it answers 200 (503 while the model loads).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("llama-server exited ({status}) before it was ready:\n{}", self.log());
            }
            if health(self.port).is_some_and(|status| status == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "llama-server not ready within {READY_WITHIN:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind a loopback port: {e}"));
    listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
}

/// The status `GET /health` answers with, if anything answers.
fn health(port: u16) -> Option<u16> {
    exchange(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map(|(status, _)| status)
}

/// Sends one HTTP/1.1 request (which asks to close the connection) and
/// reads the status and the body (llama-server sends a length, not chunks).
fn exchange(port: u16, request: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.get(9..12)?.parse().ok()?;
    let (_, body) = answer.split_once("\r\n\r\n")?;
    Some((status, body.to_string()))
}
