//! A real `nexo serve` scene for the tests that drive the server: a
//! temporary directory with a config file naming a loopback model server,
//! a SQLite store (or one given), `nexo` commands against them, nodes, and
//! the API's calls.
#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nexo_model::mock::MockServer;
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{self, Node, stderr, stdout};

/// The provider key the nodes get: it must never reach a tenant.
pub const PROVIDER_KEY: &str = "sk-serve-provider-secret-7319";

/// A test's server scene.
pub struct Scene {
    /// Its temporary directory (config, store, data directories).
    pub dir: tempfile::TempDir,
    /// The store's location.
    pub store: String,
    /// The loopback model server.
    pub model: MockServer,
    /// The HTTP client.
    pub http: reqwest::Client,
}

impl Scene {
    pub async fn new(store: Option<String>) -> Scene {
        // Under the target directory: bubblewrap gives commands a private /tmp.
        let dir = tempfile::Builder::new().prefix("serve-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let model = MockServer::start().await.unwrap();
        let config = format!(
            "[serve.models.test]\nprovider = \"openai-compatible\"\nbase-url = \"{}\"\nmodel = \"test-model\"\n",
            model.openai_base_url()
        );
        std::fs::write(dir.path().join("nexo.toml"), config).unwrap();
        let store = store.unwrap_or_else(|| dir.path().join("nexo.db").display().to_string());
        Scene { dir, store, model, http: reqwest::Client::new() }
    }

    pub fn config(&self) -> String {
        self.dir.path().join("nexo.toml").display().to_string()
    }

    /// Adds `toml` to the config file (before a node starts, which reads it).
    pub fn configure(&self, toml: &str) {
        let path = self.dir.path().join("nexo.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}\n{toml}\n")).unwrap();
    }

    /// The tenant's audit entries of `kind`, each entry's data parsed.
    pub async fn audit(&self, node: &Node, key: &str, kind: &str) -> Vec<Value> {
        let (status, log) = self.get(&node.url("/v1/audit"), key).await;
        assert_eq!(status, StatusCode::OK, "{log}");
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| serde_json::from_str(e["data"].as_str().unwrap()).unwrap())
            .collect()
    }

    pub fn nexo(&self, args: &[&str]) -> Output {
        let mut cmd = common::nexo_command(&self.dir.path().join("cache"));
        cmd.env("NEXO_STORE", &self.store).env("NEXO_CONFIG", self.config()).args(args).stdin(Stdio::null());
        cmd.output().expect("run nexo")
    }

    /// `nexo tenant create NAME`, with `policy` as its policy file: its key.
    pub fn tenant(&self, name: &str, policy: Option<Value>) -> String {
        let mut args = vec!["tenant", "create", name];
        let path = self.dir.path().join(format!("{name}-policy.json"));
        let shown;
        if let Some(p) = policy {
            std::fs::write(&path, p.to_string()).unwrap();
            shown = path.display().to_string();
            args.extend(["--policy", shown.as_str()]);
        }
        let out = self.nexo(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let key = stdout(&out).trim().to_string();
        assert!(key.starts_with("nexo_sk_"), "{key}");
        key
    }

    /// Starts a node with its own data directory.
    pub fn node(&self, name: &str) -> Node {
        self.start_node(name, &[], &[])
    }

    /// Starts a node with its own data directory and `extra` flags of
    /// `nexo serve` (`--max-in-flight 1`, say).
    pub fn node_with(&self, name: &str, extra: &[&str]) -> Node {
        self.start_node(name, extra, &[])
    }

    /// Starts a node with its own data directory and `env` added to its
    /// environment.
    pub fn node_with_env(&self, name: &str, env: &[(&str, &str)]) -> Node {
        self.start_node(name, &[], env)
    }

    fn start_node(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let mut cmd = common::nexo_command(&self.dir.path().join(format!("cache-{name}")));
        let data = self.dir.path().join(format!("data-{name}"));
        cmd.envs(env.iter().copied());
        cmd.env("NEXO_STORE", &self.store)
            .env("OPENAI_API_KEY", PROVIDER_KEY)
            .env("NEXO_LOG", "info")
            .args(["serve", "--listen", "127.0.0.1:0", "--config", &self.config(), "--grace-secs", "5"])
            .arg("--data-dir")
            .arg(&data)
            .args(extra);
        Node::start(cmd)
    }

    pub fn data(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("data-{name}"))
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, url);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn get(&self, url: &str, key: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, url, Some(key), None).await
    }

    pub async fn post(&self, url: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, url, Some(key), Some(body)).await
    }

    pub async fn upload(&self, node: &Node, key: &str, wasm: &str) -> (StatusCode, Value) {
        let bytes = std::fs::read(wasm).unwrap();
        let resp = self.http.post(node.url("/v1/plugins")).bearer_auth(key).body(bytes).send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap())
    }

    /// Polls the run until it leaves `queued` and `running`.
    pub async fn settle(&self, node: &Node, key: &str, id: &str) -> Value {
        self.until(node, key, id, &["suspended", "done", "failed", "cancelled"]).await
    }

    /// Polls the run until it ends (a queued resume leaves it suspended a moment).
    pub async fn finish(&self, node: &Node, key: &str, id: &str) -> Value {
        self.until(node, key, id, &["done", "failed", "cancelled"]).await
    }

    pub async fn until(&self, node: &Node, key: &str, id: &str, states: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, run) = self.get(&node.url(&format!("/v1/runs/{id}")), key).await;
            assert_eq!(status, StatusCode::OK, "{run}");
            if states.contains(&run["status"].as_str().unwrap_or("")) {
                return run;
            }
            assert!(Instant::now() < deadline, "the run did not settle: {run}\n{}", node.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The run's SSE stream, read to its end: (id, event, data) of each event.
    pub async fn events(&self, node: &Node, key: &str, id: &str, last: Option<&str>) -> Vec<(String, String, Value)> {
        let mut req = self.http.get(node.url(&format!("/v1/runs/{id}/events"))).bearer_auth(key);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l);
        }
        let mut resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut text = String::new();
        let read = async {
            while let Some(chunk) = resp.chunk().await.unwrap() {
                text.push_str(&String::from_utf8_lossy(&chunk));
                if text.contains("event: end") && text.ends_with("\n\n") {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the stream ends with the run");
        text.split("\n\n")
            .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
            .map(|block| {
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
                        .unwrap_or_default()
                };
                (field("id"), field("event"), serde_json::from_str(&field("data")).unwrap_or(Value::Null))
            })
            .collect()
    }
}
