//! Metrics against real receivers (issue 38): Debian's `prometheus`
//! scrapes a real `nexo serve`'s `/metrics` on the operator's own address,
//! with the bearer token the config names, and a PromQL query through its
//! HTTP API sees what the test's runs did: the runs ended, the tokens the
//! model server reported, the quota refusal, the model calls and the
//! store's writes. The tenants' API does not serve `/metrics`, and the
//! metrics address refuses a scraper without the token. No secret and no
//! content is in what is served.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::Node;
use common::scene::{PROVIDER_KEY, Scene};

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The token Prometheus sends; the node reads it from `NEXO_METRICS_TOKEN`.
const TOKEN: &str = "metrics-token-5e1f09b2c7";

/// What the runs send and the model answers: none of it may be served.
const INPUT: &str = "prompt confidential-question-4471";
const ANSWER: &str = "confidential-answer-9902";
const WRITTEN: &str = "confidential-file-content-3318";

/// Whether Debian's prometheus is there; without it the test is skipped,
/// and fails in CI, which installs it (scripts/prometheus-deps.sh).
fn prometheus_present(test: &str) -> bool {
    if Path::new(PROMETHEUS).exists() {
        return true;
    }
    let why = "no /usr/bin/prometheus; run scripts/prometheus-deps.sh";
    assert!(std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true), "CI installs prometheus, but {why}");
    nexo_testkit::skipped(test, why);
    false
}

/// The address the node announced for `/metrics`.
fn metrics_address(node: &Node) -> String {
    let log = node.log();
    let at = log.split("metrics on http://").nth(1).unwrap_or_else(|| panic!("no metrics address announced:\n{log}"));
    at.split("/metrics").next().unwrap().to_string()
}

/// A prometheus of the test's own, scraping `target` every second with
/// the token, killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start(target: &str, http: &reqwest::Client) -> Prometheus {
        let dir = tempfile::Builder::new().prefix("prometheus-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: nexo\n    \
             authorization:\n      credentials: {TOKEN}\n    static_configs:\n      - targets: ['{target}']\n"
        );
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        // A free port, taken back just before prometheus binds it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { child, base, _dir: dir };
        let ready = format!("{}/-/ready", prometheus.base);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http.get(&ready).send().await.is_ok_and(|r| r.status() == StatusCode::OK) {
                return prometheus;
            }
            assert!(Instant::now() < deadline, "prometheus did not start:\n{}", prometheus.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The value of the instant query `promql`, once it equals `expected`;
    /// fails with the last answer at the deadline.
    async fn until(&self, http: &reqwest::Client, promql: &str, expected: f64) {
        let url = format!("{}/api/v1/query", self.base);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer: Value = http.get(&url).query(&[("query", promql)]).send().await.unwrap().json().await.unwrap();
            assert_eq!(answer["status"], "success", "{promql}: {answer}");
            let value = answer["data"]["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
            if value == Some(expected) {
                return;
            }
            assert!(Instant::now() < deadline, "{promql}: wanted {expected}, got {answer}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Starts a run of `plugin` on `input` and waits until it ends.
async fn run(scene: &Scene, node: &Node, key: &str, plugin: &str) -> (StatusCode, Value) {
    let body = json!({"plugin": plugin, "input": INPUT, "sandbox": "local", "wait": true});
    scene.post(&node.url("/v1/runs"), key, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_what_the_runs_did_on_the_operators_address_only() {
    let test = "prometheus_scrapes_what_the_runs_did_on_the_operators_address_only";
    if !prometheus_present(test) {
        return;
    }
    let scene = Scene::new(None).await;
    scene.configure("[telemetry.prometheus]\nlisten = \"127.0.0.1:0\"\ntoken-env = \"NEXO_METRICS_TOKEN\"\n");
    // Writes wait for an approval; four runs an hour.
    let policy = json!({
        "allow": ["write"], "mode": "approve", "sandboxes": ["local"], "models": ["test"],
        "quotas": {"runs-per-hour": 4},
    });
    let key = scene.tenant("ivy", Some(policy));
    let node = scene.node_with_env("a", &[("NEXO_METRICS_TOKEN", TOKEN)]);
    let metrics = metrics_address(&node);
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();

    // Three runs of one model turn each, then a fourth over the hour's quota.
    for _ in 0..3 {
        scene.model.push(Reply::text(ANSWER).with_usage(37, 11));
        let (status, started) = run(&scene, &node, &key, sha).await;
        assert_eq!(status, StatusCode::OK, "{started}\n{}", node.log());
        let ended = scene.finish(&node, &key, started["id"].as_str().unwrap()).await;
        assert_eq!(ended["status"], "done", "{ended}");
    }
    // A fourth waits for an approval of its write, and a fifth is over the quota.
    let write = MockToolCall::new("c1", "write_file", json!({"path": "notes.txt", "content": WRITTEN}));
    scene.model.push(Reply::tool_calls(vec![write]).with_usage(37, 11));
    let (status, waiting) = run(&scene, &node, &key, sha).await;
    assert_eq!((status, &waiting["status"]), (StatusCode::OK, &json!("suspended")), "{waiting}\n{}", node.log());
    let (status, refused) = run(&scene, &node, &key, sha).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");

    // The tenants' address does not serve the metrics; the operator's
    // wants the token.
    let tenants = scene.http.get(node.url("/metrics")).send().await.unwrap();
    assert_eq!(tenants.status(), StatusCode::NOT_FOUND);
    let url = format!("http://{metrics}/metrics");
    let bare = scene.http.get(&url).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let wrong = scene.http.get(&url).bearer_auth(&key).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "a tenant's key is not the metrics token");
    let served = scene.http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    let text = served.text().await.unwrap();
    for secret in [PROVIDER_KEY, TOKEN, key.as_str(), INPUT, ANSWER, WRITTEN, "confidential", "notes.txt"] {
        assert!(!text.contains(secret), "/metrics shows {secret:?}:\n{text}");
    }

    let prometheus = Prometheus::start(&metrics, &scene.http).await;
    prometheus.until(&scene.http, "up{job=\"nexo\"}", 1.0).await;
    prometheus.until(&scene.http, "sum(nexo_runs_ended_total{nexo_run_status=\"done\"})", 3.0).await;
    let tokens = "sum by (gen_ai_token_type) (gen_ai_client_token_usage_sum{gen_ai_operation_name=\"chat\", \
                  gen_ai_request_model=\"test-model\", gen_ai_token_type=\"{kind}\"})";
    prometheus.until(&scene.http, &tokens.replace("{kind}", "input"), 4.0 * 37.0).await;
    prometheus.until(&scene.http, &tokens.replace("{kind}", "output"), 4.0 * 11.0).await;
    prometheus.until(&scene.http, "sum(gen_ai_client_operation_duration_seconds_count)", 4.0).await;
    let refusals = "sum(nexo_quota_refusals_total{nexo_quota=\"runs-per-hour\", nexo_quota_step=\"start\"})";
    prometheus.until(&scene.http, refusals, 1.0).await;
    prometheus.until(&scene.http, "sum(nexo_pass_duration_seconds_count{nexo_run_status=\"done\"})", 3.0).await;
    prometheus.until(&scene.http, "sum(nexo_pass_duration_seconds_count{nexo_run_status=\"suspended\"})", 1.0).await;
    prometheus.until(&scene.http, "sum(nexo_approvals_pending)", 1.0).await;
    prometheus.until(&scene.http, "sum(nexo_instances_running)", 0.0).await;
    // The tenant has a series with nothing queued.
    prometheus.until(&scene.http, "count(nexo_queue_depth)", 1.0).await;
    prometheus.until(&scene.http, "sum(nexo_queue_depth)", 0.0).await;
    // Each run was created, claimed and ended through the store.
    let writes = "sum(nexo_store_duration_seconds_count{nexo_store_operation=\"transition\"}) >= bool 3";
    prometheus.until(&scene.http, writes, 1.0).await;
}

/// A metric's points of `name` whose attributes include `with`.
fn points<'a>(all: &'a [Value], name: &str, with: &[(&str, &str)]) -> Vec<&'a Value> {
    all.iter().filter(|p| p["name"] == name && with.iter().all(|(k, v)| p["attributes"][*k] == *v)).collect()
}

/// The largest `field` of `points` (cumulative: the latest export's).
fn largest(points: &[&Value], field: &str) -> f64 {
    points.iter().filter_map(|p| p[field].as_f64()).fold(0.0, f64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_genai_metrics_arrive_over_otlp_without_a_secret_or_content() {
    let test = "the_genai_metrics_arrive_over_otlp_without_a_secret_or_content";
    let Some(receiver) = nexo_testkit::otlp::Receiver::start(test) else { return };
    let scene = Scene::new(None).await;
    scene.configure(&format!("[telemetry]\nendpoint = \"{}\"\n", receiver.endpoint()));
    let key = scene.tenant("ivy", Some(json!({"models": ["test"], "sandboxes": ["local"]})));
    let node = scene.node_with_env("a", &[("OTEL_METRIC_EXPORT_INTERVAL", "300")]);
    let (_, plugin) = scene.upload(&node, &key, built::WORKFLOW_PROBE).await;
    let sha = plugin["id"].as_str().unwrap();
    for _ in 0..2 {
        scene.model.push(Reply::text(ANSWER).with_usage(23, 7));
        let (status, started) = run(&scene, &node, &key, sha).await;
        assert_eq!(status, StatusCode::OK, "{started}\n{}", node.log());
        let ended = scene.finish(&node, &key, started["id"].as_str().unwrap()).await;
        assert_eq!(ended["status"], "done", "{ended}");
    }

    let usage = "gen_ai.client.token.usage";
    let input = [("gen_ai.token.type", "input")];
    let all = receiver.wait_for_metric_points(Duration::from_secs(30), |all| {
        largest(&points(all, usage, &input), "sum") == 46.0
            && largest(&points(all, "nexo.runs.ended", &[("nexo.run.status", "done")]), "value") == 2.0
    });
    let tokens = points(&all, usage, &[]);
    let last = tokens.last().unwrap();
    assert_eq!((&last["type"], &last["unit"]), (&json!("histogram"), &json!("{token}")), "{last}");
    assert_eq!(last["resource"]["service.name"], "nexo", "{last}");
    for point in &tokens {
        let attributes = &point["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "chat", "{point}");
        assert_eq!(attributes["gen_ai.request.model"], "test-model", "{point}");
        assert_eq!(attributes["gen_ai.response.model"], "test-model", "the model that answered: {point}");
        // The served model's provider, as its table names it.
        assert_eq!(attributes["gen_ai.provider.name"], "openai-compatible", "{point}");
    }
    let output = points(&all, usage, &[("gen_ai.token.type", "output")]);
    assert_eq!((largest(&output, "sum"), largest(&output, "count")), (14.0, 2.0));
    let duration = points(&all, "gen_ai.client.operation.duration", &[("gen_ai.operation.name", "chat")]);
    assert_eq!(largest(&duration, "count"), 2.0, "{duration:?}");
    assert!(duration.iter().all(|p| p["unit"] == "s" && p["attributes"].get("error.type").is_none()), "{duration:?}");

    // Byte for byte: no secret and no content in what was exported.
    let raw = receiver.raw_bytes();
    assert!(!raw.is_empty());
    for secret in [PROVIDER_KEY, key.as_str(), INPUT, ANSWER, "confidential"] {
        let found = raw.windows(secret.len()).any(|w| w == secret.as_bytes());
        assert!(!found, "the OTLP export holds {secret:?}");
    }
}

/// `nexo worker` serves `/metrics` on the operator's address as `nexo
/// serve` does (`--metrics-listen` when the config file's is another
/// node's): the runs it ran are counted there, with the queue's gauges,
/// and Ctrl-C stops it cleanly, the metrics listener with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_its_metrics_on_the_operators_address() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    // The config file's address is taken (by a `nexo serve` on this host, say).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = dir.path().join("nexo.toml");
    let table = format!("[telemetry.prometheus]\nlisten = \"{}\"\n", taken.local_addr().unwrap());
    std::fs::write(&config, table).unwrap();
    let config = config.to_str().unwrap();
    let nexo = || {
        let mut cmd = common::nexo_command(&dir.path().join("cache"));
        cmd.env("NO_PROXY", "127.0.0.1").env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").stdin(Stdio::null());
        cmd
    };
    for words in ["one two", "three four five"] {
        let out = nexo().args(["run", built::TEXT_STATS, words, "--later", "--config", config]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = nexo().args(["worker", "--config", config]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot listen on") && err.contains("/metrics"), "the cause and the fix: {err}");
    let args = ["worker", "--config", config, "--metrics-listen", "127.0.0.1:0"];
    let mut worker = nexo().args(args).stderr(Stdio::piped()).spawn().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stderr = BufReader::new(worker.stderr.take().unwrap());
    std::thread::spawn(move || stderr.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    let mut seen = Vec::new();
    let at = loop {
        let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) else {
            let _ = worker.kill();
            panic!("the worker announced no metrics address:\n{}", seen.join("\n"));
        };
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            break rest.split("/metrics").next().unwrap().to_string();
        }
        seen.push(line);
    };
    let http = reqwest::Client::new();
    let url = format!("http://{at}/metrics");
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = http.get(&url).send().await.unwrap().text().await.unwrap();
        let done = text.lines().find(|l| l.starts_with("nexo_runs_ended_total") && l.contains("\"done\""));
        if done.is_some_and(|l| l.ends_with(" 2")) {
            break text;
        }
        assert!(Instant::now() < deadline, "the worker's two runs were never counted:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(text.contains("nexo_pass_duration_seconds_count"), "{text}");
    rustix::process::kill_process(rustix::process::Pid::from_child(&worker), rustix::process::Signal::INT).unwrap();
    let status = worker.wait().unwrap();
    let log = lines.iter().collect::<Vec<_>>().join("\n");
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(http.get(&url).send().await.is_err(), "the metrics listener stopped with the worker");
}
