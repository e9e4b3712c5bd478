//! A real OTLP/HTTP receiver for the telemetry tests: `otlp_receiver.py`,
//! which decodes every export with the official protobuf definitions (PyPI's
//! opentelemetry-proto, installed by `scripts/otel-deps.sh` into
//! `target/tools/otel`, or `NEXO_OTEL_TOOLS`). It keeps each request's raw
//! bytes, so a test can check that no secret or content left the process,
//! and the decoded spans and metric points as JSON.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long the receiver may take to start listening.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Where `scripts/otel-deps.sh` installs: `NEXO_OTEL_TOOLS`, or `target/tools/otel`.
pub fn dir() -> PathBuf {
    match std::env::var_os("NEXO_OTEL_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/otel"),
    }
}

/// A running receiver on a loopback port; killed (and its files removed)
/// when dropped.
#[derive(Debug)]
pub struct Receiver {
    child: Child,
    port: u16,
    out: tempfile::TempDir,
}

impl Receiver {
    /// Starts the receiver and waits until it listens. `None` when
    /// opentelemetry-proto is not installed: the skip is reported for
    /// `test`, naming the script; with `CI` set (whose `.ci/run` runs the
    /// script) that panics instead.
    pub fn start(test: &str) -> Option<Receiver> {
        let python = dir().join("bin/python");
        if !python.is_file() {
            let why = format!("opentelemetry-proto is not installed in {}; run scripts/otel-deps.sh", dir().display());
            assert!(std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true), "CI runs the real receiver, but {why}");
            crate::skipped(test, &why);
            return None;
        }
        let out =
            tempfile::Builder::new().prefix("nexo-otlp-").tempdir().unwrap_or_else(|e| panic!("receiver dir: {e}"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("otlp_receiver.py");
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(out.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
        let port_file = out.path().join("port");
        let deadline = Instant::now() + READY_WITHIN;
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse::<u16>().unwrap_or_else(|e| panic!("receiver port {text:?}: {e}"));
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the OTLP receiver exited before listening: {status}");
            }
            assert!(Instant::now() < deadline, "the OTLP receiver did not listen within {READY_WITHIN:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Some(Receiver { child, port, out })
    }

    /// The base URL to export to, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far, flattened: `name`, `trace_id`, `span_id`,
    /// `parent_span_id` (hex; empty for a root), `kind`, `start_ns`, `end_ns`,
    /// `attributes` (a map), `events`, `links`, `status`, `scope`, `resource`.
    pub fn spans(&self) -> Vec<Value> {
        self.lines("spans.jsonl")
    }

    /// Every metric data point received so far, flattened: `name`, `unit`,
    /// `type` (`sum`, `gauge`, `histogram`, …), `attributes`, `resource`,
    /// and `value` (sums and gauges, with `monotonic` for sums) or `count`,
    /// `sum`, `bounds` and `buckets` (histograms).
    pub fn metric_points(&self) -> Vec<Value> {
        self.lines("metrics.jsonl")
    }

    /// Each request's path and headers (names lower-cased).
    pub fn requests(&self) -> Vec<Value> {
        self.lines("requests.jsonl")
    }

    /// Every request body received, concatenated, after any gzip.
    pub fn raw_bytes(&self) -> Vec<u8> {
        std::fs::read(self.out.path().join("raw.bin")).unwrap_or_default()
    }

    /// Waits until `done` holds for the spans received, up to `within`; the
    /// spans then. Panics naming what arrived if it never holds.
    pub fn wait_for_spans(&self, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.wait_for(within, "spans", || self.spans(), done)
    }

    /// As [`Receiver::wait_for_spans`], for metric points.
    pub fn wait_for_metric_points(&self, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.wait_for(within, "metric points", || self.metric_points(), done)
    }

    fn wait_for(
        &self,
        within: Duration,
        what: &str,
        read: impl Fn() -> Vec<Value>,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let got = read();
            if done(&got) {
                return got;
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = got.iter().filter_map(|v| v["name"].as_str()).collect();
                let errors = self.lines("errors.jsonl");
                panic!(
                    "the OTLP receiver did not get the expected {what} within {within:?}; got {names:?}; decode errors: {errors:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn lines(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out.path().join(name)).unwrap_or_default();
        // A line still being written has no newline yet: take whole lines only.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("receiver {name} line {line:?}: {e}")))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
