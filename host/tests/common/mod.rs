//! What every test of the `nexo` binary shares: the binary with an
//! environment that no outside `NEXO_*` setting leaks into, and its output
//! as text.
#![allow(dead_code)] // each test binary uses a different part

pub mod scene;

use std::path::Path;
use std::process::{Command, Output};

/// The `nexo` binary with its compile cache in `cache`, runs recorded in a
/// store beside it and plugins accepted in a file beside it (never the
/// user's), and no model, provider, base URL,
/// config file or log filter from the environment.
pub fn nexo_command(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.env("NEXO_CACHE_DIR", cache)
        .env("NEXO_STORE", cache.with_extension("store.db"))
        .env("NEXO_ACCEPTED_PLUGINS", cache.with_extension("accepted.json"))
        .env_remove("NEXO_LOG")
        .env_remove("NEXO_MODEL")
        .env_remove("NEXO_PROVIDER")
        .env_remove("NEXO_BASE_URL")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("NEXO_CONFIG");
    cmd
}

/// The last user message of each request the mock model received, in order:
/// the prompt each model turn answered.
pub fn prompts(model: &nexo_model::mock::MockServer) -> Vec<String> {
    model
        .requests()
        .iter()
        .filter_map(|r| {
            let messages = r.body["messages"].as_array()?;
            messages.iter().rev().find(|m| m["role"] == "user")?["content"].as_str().map(String::from)
        })
        .collect()
}

/// nexo's rmcp test server, next to the `nexo` binary.
pub fn mcp_test_server() -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_nexo")).with_file_name("nexo-mcp-test-server");
    assert!(path.is_file(), "{} is missing: build it with `cargo build -p nexo-mcp`", path.display());
    path
}

/// nexo's MCP test server over streamable HTTP on a free loopback port,
/// with `args` after `http --port 0`: the process and the address it
/// announced (`127.0.0.1:PORT`).
pub fn mcp_http_server(args: &[&std::ffi::OsStr]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(mcp_test_server())
        .args(["http", "--port", "0"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().to_string())
}

/// A process's stdout, decoded lossily.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A process's stderr, decoded lossily.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh PostgreSQL database for one test, from `NEXO_TEST_POSTGRES`; or
/// `None` (and the test says it skipped) outside CI.
pub async fn postgres_database(test: &str) -> Option<String> {
    let Some(admin) = std::env::var("NEXO_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) else {
        assert!(
            std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true),
            "{test}: CI is set but NEXO_TEST_POSTGRES is not: PostgreSQL is required in CI (scripts/postgres.sh)"
        );
        nexo_testkit::skipped(test, "NEXO_TEST_POSTGRES is unset, so its PostgreSQL half did not run");
        return None;
    };
    use sqlx::Connection;
    let name = format!("nexo_test_{}_{}", std::process::id(), nexo_store::new_run_id());
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}

/// A pseudo-terminal for a `nexo` process: the master end for the test,
/// and a thread that reads everything nexo writes to it.
pub struct Terminal {
    /// The master end: what the test types goes here.
    pub master: std::fs::File,
    /// The slave end, for the child's stdin, stdout and stderr.
    pub slave: std::fs::File,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    /// Everything read so far.
    pub screen: Vec<u8>,
}

impl Terminal {
    /// Opens a pseudo-terminal pair and starts reading it.
    pub fn open() -> Terminal {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        use std::io::Read;
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
        let master = std::fs::File::from(master);
        let (tx, output) = std::sync::mpsc::channel::<Vec<u8>>();
        let mut reader = master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once nexo has exited and the slave side is closed.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Terminal { master, slave, output, screen: Vec::new() }
    }

    /// Reads until the screen shows `text` `count` times, failing after 60 s;
    /// the screen so far.
    pub fn wait_for(&mut self, text: &str, count: usize) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while String::from_utf8_lossy(&self.screen).matches(text).count() < count {
            match self.output.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                Ok(chunk) => self.screen.extend(chunk),
                Err(_) => {
                    panic!("no {text:?} within 60 s; the terminal showed {:?}", String::from_utf8_lossy(&self.screen))
                }
            }
        }
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// Reads what is left once nexo has exited; the whole screen.
    pub fn drain(&mut self) -> String {
        while let Ok(chunk) = self.output.recv_timeout(std::time::Duration::from_millis(500)) {
            self.screen.extend(chunk);
        }
        String::from_utf8_lossy(&self.screen).into_owned()
    }
}

/// A `nexo serve` process, killed when dropped, with everything it wrote
/// to stderr.
pub struct Node {
    /// The process.
    pub child: std::process::Child,
    /// `http://ADDR`, as it announced.
    pub base: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Starts `nexo serve` as `cmd` says (its stderr is taken here) and
    /// waits for it to announce its address.
    pub fn start(mut cmd: Command) -> Node {
        use std::io::{BufRead, BufReader};
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("start nexo serve");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().expect("piped stderr"));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
                let mut log = kept.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        let base = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("nexo serve did not start: {}", log.lock().unwrap_or_else(|p| p.into_inner())));
        Node { child, base, log }
    }

    /// The URL of `path` on this node.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
