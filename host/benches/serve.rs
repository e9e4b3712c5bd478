//! `nexo serve` under load, through its HTTP API, against a loopback model
//! server (`cargo bench -p nexo --bench serve`, or `make bench-serve`):
//!
//! 1. **load**: TENANTS tenants (default 50), RUNS clients (default 500),
//!    each starting runs of a prompting agent one after another, `POST
//!    /v1/runs` with `"wait": true`, for ROUND_SECS (default 6): RUNS
//!    concurrent runs. The clients' first starts are spread over RAMP_MS
//!    (default 1000), as real clients' would be; all at once, the burst
//!    itself is what the first second measures. While they go, a probe
//!    times `GET /v1/runs` every PROBE_MS (default 5). 2 × ROUNDS rounds
//!    (ROUNDS defaults to 2), so that a p99 rests on thousands of samples.
//!    Reported: p50 and p99 of the API latency (the probe) and of the run
//!    latency (the waiting POSTs), and the server's RSS (peak and after).
//! 2. **noisy**: the same load while one more tenant (quotas: NOISY_CORES
//!    cores, default 0.1, and 512 MiB) keeps two spin (a busy loop until its
//!    deadline) and two hog (allocates until refused) runs going (NOISE=spin
//!    or NOISE=hog: four of one kind).
//!    Reported: the same numbers, and the other tenants' p99 against phase 1.
//!    The rounds go quiet, noisy, noisy, quiet (ROUNDS each), so that the
//!    server's drift as its store grows weighs on both phases alike.
//! 3. **density**: DENSITY runs (default 10,000) in one fresh server, each
//!    waiting on a model response that is held until all have arrived.
//!    Reported: the RSS once every run has waited SETTLE_SECS (default 30,
//!    three lease renewals) after the last arrived, and per waiting run.
//!
//! 4. **fairness** (FAIRNESS=only runs just this; FAIRNESS=0 skips it), in
//!    a fresh server with MAX_IN_FLIGHT slots (default 64):
//!    (a) a quiet tenant's trivial `"wait": true` run (text-stats, no
//!    model), FAIR_SAMPLES times one after another (default 300): alone,
//!    then while a flood tenant has FLOOD runs queued (default 10,000, each
//!    waiting FLOOD_MODEL_MS on its model, default 500). Reported: both
//!    p99s and their ratio (target ≤ 2×).
//!    (b) in a store of its own, the quiet tenant's API p99 (the probe) for
//!    UPLOAD_SECS (default 10) alone, then while UPLOADERS clients (default
//!    8) upload the largest built component again and again, each copy
//!    made unique (a custom section, padded by UPLOAD_PAD_KIB, default
//!    1024) so that each one compiles and is stored anew. Reported: both
//!    p99s, their ratio (target ≤ 2×), and how many uploads were compiled.
//!
//! NEXO_BIN runs another `nexo` binary (the previous commit's, say) under
//! the same bench, so that two builds are compared in one sitting.
//!
//! The model answers after MODEL_MS (default 20) in phases 1 and 2. With
//! PROBE_SLICE=0, the probe's thread keeps the kernel's usual time slice. With
//! SMAPS_OUT=FILE, the dense server's `/proc/PID/smaps` is copied there
//! while every run waits (to see where the memory is). SERVE_ARGS adds
//! arguments to `nexo serve` (`--lease-secs 600`), SERVE_LOG=FILE keeps
//! its log, and BENCH_DIR=DIR keeps the fairness phase's stores there (to
//! look at its runs' timings afterwards).
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The loopback model: answers `ok` after `delay`, or, while `hold` is
/// set, only once it is released; counts the requests that arrived.
struct Model {
    url: String,
    arrived: Arc<AtomicUsize>,
    hold: Arc<AtomicBool>,
    release: Arc<Notify>,
}

async fn model(delay: Duration) -> Model {
    let arrived = Arc::new(AtomicUsize::new(0));
    let hold = Arc::new(AtomicBool::new(false));
    let release = Arc::new(Notify::new());
    let (a, h, r) = (arrived.clone(), hold.clone(), release.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let (a, h, r) = (a.clone(), h.clone(), r.clone());
            async move {
                a.fetch_add(1, Ordering::Relaxed);
                if h.load(Ordering::Relaxed) {
                    let released = r.notified();
                    if h.load(Ordering::Relaxed) {
                        released.await;
                    }
                } else {
                    tokio::time::sleep(delay).await;
                }
                let reply = json!({
                    "id": "c", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
                });
                ([(axum::http::header::CONTENT_TYPE, "application/json")], reply.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Model { url, arrived, hold, release }
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn rss_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// The `nexo` binary under test: NEXO_BIN (another build, say the previous
/// commit's, to compare in one run), else this build's.
fn nexo(dir: &std::path::Path) -> Command {
    let bin = std::env::var_os("NEXO_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nexo").into());
    let mut cmd = Command::new(bin);
    cmd.env("NEXO_CACHE_DIR", dir.join("cache"))
        .env("NEXO_STORE", dir.join("nexo.db"))
        .env("NEXO_CONFIG", dir.join("nexo.toml"))
        .env("OPENAI_API_KEY", "sk-bench")
        .env_remove("NEXO_LOG")
        .stdin(Stdio::null());
    cmd
}

fn start(dir: &std::path::Path, max_in_flight: usize) -> Server {
    start_with(dir, max_in_flight, &[])
}

/// [`start`] with more arguments to `nexo serve`.
fn start_with(dir: &std::path::Path, max_in_flight: usize, extra: &[&str]) -> Server {
    let mut child = nexo(dir)
        .args(["serve", "--listen", "127.0.0.1:0", "--max-in-flight", &max_in_flight.to_string()])
        .args(extra)
        .args(
            std::env::var("SERVE_ARGS")
                .map(|a| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default(),
        )
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("nexo serve started").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // With SERVE_LOG=FILE the server's log goes there; otherwise it is drained.
    let mut log = std::env::var("SERVE_LOG").ok().and_then(|f| std::fs::File::create(f).ok());
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Some(file) = log.as_mut() {
                use std::io::Write;
                let _ = writeln!(file, "{line}");
            }
        }
    });
    Server { child, base }
}

fn tenant(dir: &std::path::Path, name: &str, policy: &Value) -> String {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, policy.to_string()).unwrap();
    let out = nexo(dir).args(["tenant", "create", name, "--policy"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

async fn upload(http: &reqwest::Client, server: &Server, key: &str, wasm: &str) -> String {
    let resp = http.post(format!("{}/v1/plugins", server.base)).bearer_auth(key).body(std::fs::read(wasm).unwrap());
    let body: Value = resp.send().await.unwrap().json().await.unwrap();
    body["id"].as_str().unwrap().to_string()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[derive(Default)]
struct Phase {
    api: Vec<Duration>,
    runs: Vec<Duration>,
    failed: usize,
}

/// `n` rounds of [`load`], added to `into`; each round's run p50 is
/// pushed to `p50s` under `label`, to show any drift.
async fn rounds(
    into: &mut Phase,
    p50s: &mut Vec<String>,
    label: &str,
    n: usize,
    (http, server, tenants, runs, secs): (&reqwest::Client, &Server, &[(String, String)], usize, u64),
) {
    for _ in 0..n {
        let one = load(http, server, tenants, runs, secs).await;
        p50s.push(format!("{label} {}", ms(pct(&one.runs, 0.5))));
        into.api.extend(one.api);
        into.runs.extend(one.runs);
        into.failed += one.failed;
    }
    into.api.sort();
    into.runs.sort();
}

/// RUNS clients over the tenants, each starting one waiting run after
/// another for `secs`, and the probe.
async fn load(http: &reqwest::Client, server: &Server, tenants: &[(String, String)], runs: usize, secs: u64) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    // The probe has a thread and a runtime of its own, so that what it
    // times is the server, not this process's queue of 500 waiting POSTs.
    let probe = {
        let (base, key, stop) = (server.base.clone(), tenants[0].0.clone(), stop.clone());
        let every = env_or("PROBE_MS", 5) as u64;
        std::thread::spawn(move || {
            // A real client is on another machine; here it shares the cores
            // with the load, so it asks for the short slice the server's
            // API threads have (PROBE_SLICE=0: not), lest its own wake-ups
            // be what it times.
            if env_or("PROBE_SLICE", 1) == 1 {
                nexo::priority::api_thread();
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let http = reqwest::Client::new();
                let mut api = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let resp = http.get(format!("{base}/v1/runs?limit=1")).bearer_auth(&key).send().await.unwrap();
                    assert!(resp.status().is_success());
                    let _ = resp.bytes().await;
                    api.push(t.elapsed());
                    tokio::time::sleep(Duration::from_millis(every)).await;
                }
                api
            })
        })
    };
    let ramp = Duration::from_millis(env_or("RAMP_MS", 1000) as u64);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..runs {
        let (key, plugin) = tenants[i % tenants.len()].clone();
        let (http, base) = (http.clone(), server.base.clone());
        let first = ramp.mul_f64(i as f64 / runs as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(first).await;
            let mut done = Vec::new();
            let mut n = 0;
            while Instant::now() < until {
                let t = Instant::now();
                let body = json!({"plugin": plugin, "input": format!("prompt hello {i}.{n}"), "wait": true});
                let resp = http.post(format!("{base}/v1/runs")).bearer_auth(&key).json(&body).send().await.unwrap();
                let run: Value = resp.json().await.unwrap();
                done.push((t.elapsed(), run["status"] == "done"));
                n += 1;
            }
            done
        }));
    }
    let mut latencies = Vec::new();
    let mut failed = 0;
    for t in tasks {
        for (d, ok) in t.await.unwrap() {
            latencies.push(d);
            failed += usize::from(!ok);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut api = tokio::task::spawn_blocking(move || probe.join().unwrap()).await.unwrap();
    api.sort();
    latencies.sort();
    Phase { api, runs: latencies, failed }
}

fn report(name: &str, phase: &Phase, peak_kib: u64, after_kib: u64) {
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {:.0} MiB | {:.0} MiB |",
        phase.runs.len(),
        phase.failed,
        ms(pct(&phase.api, 0.5)),
        ms(pct(&phase.api, 0.99)),
        ms(pct(&phase.runs, 0.5)),
        ms(pct(&phase.runs, 0.99)),
        peak_kib as f64 / 1024.0,
        after_kib as f64 / 1024.0,
    );
}

/// `bytes` (a component) with a custom section of `tag` and `pad` zero
/// bytes appended: the same component to every reader, but new bytes, so it
/// compiles anew, and as large as wanted.
fn unique_copy(bytes: &[u8], tag: usize, pad: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"nexo-bench";
    let mut payload = tag.to_le_bytes().to_vec();
    payload.resize(payload.len() + pad, 0);
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// Times `GET /v1/runs?limit=1` as `key` every PROBE_MS until `stop`, on a
/// thread and runtime of its own (as [`load`]'s probe).
fn probe(base: String, key: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    let every = env_or("PROBE_MS", 5) as u64;
    std::thread::spawn(move || {
        if env_or("PROBE_SLICE", 1) == 1 {
            nexo::priority::api_thread();
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let http = reqwest::Client::new();
            let mut api = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let resp = http.get(format!("{base}/v1/runs?limit=1")).bearer_auth(&key).send().await.unwrap();
                assert!(resp.status().is_success());
                let _ = resp.bytes().await;
                api.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(every)).await;
            }
            api.sort();
            api
        })
    })
}

/// The quiet tenant's trivial waiting runs, one after another, `n` of them
/// or until `until` says stop: their latencies, sorted.
async fn trivial_runs(
    http: &reqwest::Client,
    server: &Server,
    (key, plugin): (&str, &str),
    n: usize,
    mut until: impl FnMut(usize) -> bool,
) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..n {
        if until(i) {
            break;
        }
        let t = Instant::now();
        let body = json!({"plugin": plugin, "input": format!("a b c {i}"), "wait": true});
        let resp = http.post(format!("{}/v1/runs", server.base)).bearer_auth(key).json(&body).send().await.unwrap();
        let run: Value = resp.json().await.unwrap();
        assert_eq!(run["status"], "done", "{run}");
        times.push(t.elapsed());
    }
    times.sort();
    times
}

/// Phase 4: a quiet tenant's service while another floods the queue, and
/// while others upload large components.
async fn fairness(root: &std::path::Path, http: &reqwest::Client, m: &Model) {
    let dir = root.join("fairness");
    // A kept BENCH_DIR's last stores go first.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let flood_model = model(Duration::from_millis(env_or("FLOOD_MODEL_MS", 500) as u64)).await;
    std::fs::write(
        dir.join("nexo.toml"),
        format!(
            "[serve]\nrun-timeout-secs = 60\n[serve.models.test]\nprovider = \"openai-compatible\"\n\
             base-url = \"{}\"\nmodel = \"m\"\nassume-model-exists = true\n\
             [serve.models.slow]\nprovider = \"openai-compatible\"\nbase-url = \"{}\"\nmodel = \"m\"\n\
             assume-model-exists = true\n",
            m.url, flood_model.url
        ),
    )
    .unwrap();
    let quiet = tenant(&dir, "quiet", &json!({"models": ["test"]}));
    let flood = tenant(&dir, "flood", &json!({"models": ["slow"]}));
    let server = start(&dir, env_or("MAX_IN_FLIGHT", 64));
    let stats = upload(http, &server, &quiet, nexo_tests::TEXT_STATS).await;
    let probe_plugin = upload(http, &server, &flood, nexo_tests::WORKFLOW_PROBE).await;
    let samples = env_or("FAIR_SAMPLES", 300);
    let quiet_key = (quiet.as_str(), stats.as_str());
    // Warm: the plugin compiled and cached.
    let _ = trivial_runs(http, &server, quiet_key, 10, |_| false).await;

    // (a) Alone, then behind the flood.
    let alone = trivial_runs(http, &server, quiet_key, samples, |_| false).await;
    let flood_n = env_or("FLOOD", 10_000);
    let mut posts = Vec::new();
    for i in 0..flood_n {
        let (http, base, key, plugin) = (http.clone(), server.base.clone(), flood.clone(), probe_plugin.clone());
        posts.push(tokio::spawn(async move {
            let body = json!({"plugin": plugin, "input": format!("prompt flood {i}")});
            let resp = http.post(format!("{base}/v1/runs")).bearer_auth(&key).json(&body).send().await.unwrap();
            assert_eq!(resp.status(), reqwest::StatusCode::ACCEPTED, "{}", resp.text().await.unwrap_or_default());
        }));
        if posts.len() >= 64 {
            for p in posts.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in posts {
        p.await.unwrap();
    }
    let flood_left = |http: reqwest::Client, base: String, key: String| async move {
        let resp = http.get(format!("{base}/v1/runs?status=queued&limit=1")).bearer_auth(&key).send().await.unwrap();
        let body: Value = resp.json().await.unwrap();
        !body["runs"].as_array().unwrap().is_empty()
    };
    let behind = {
        let mut times = Vec::new();
        for i in 0..samples {
            if i % 10 == 0 && !flood_left(http.clone(), server.base.clone(), flood.clone()).await {
                break;
            }
            let one = trivial_runs(http, &server, quiet_key, 1, |_| false).await;
            times.extend(one);
        }
        times.sort();
        times
    };
    println!(
        "
fairness (a): a quiet tenant's trivial run, p99 alone {} ({} runs), behind {flood_n} queued runs of \
         another tenant {} ({} runs while its queue lasted): {:.2}x (target ≤ 2x)",
        ms(pct(&alone, 0.99)),
        alone.len(),
        ms(pct(&behind, 0.99)),
        behind.len(),
        pct(&behind, 0.99).as_secs_f64() / pct(&alone, 0.99).as_secs_f64().max(1e-9),
    );
    // The flood is cancelled rather than waited for.
    drop(server);

    // (b) The quiet tenant's API alone, then during parallel uploads, in a
    // store of its own (the flood's runs stay queued in the first).
    let dir = root.join("fairness-uploads");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("fairness").join("nexo.toml"), dir.join("nexo.toml")).unwrap();
    let quiet = tenant(&dir, "quiet", &json!({"models": ["test"]}));
    let roomy = json!({"quotas": {"plugins": 1_000_000, "plugin-bytes": 1u64 << 40}});
    let uploaders_key = tenant(&dir, "uploader", &roomy);
    let server = start(&dir, env_or("MAX_IN_FLIGHT", 64));
    let secs = Duration::from_secs(env_or("UPLOAD_SECS", 10) as u64);
    let stop = Arc::new(AtomicBool::new(false));
    let watch = probe(server.base.clone(), quiet.clone(), stop.clone());
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    let alone = watch.join().unwrap();
    let (largest, size) = nexo_tests::ALL
        .iter()
        .map(|(_, path)| (*path, std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)))
        .max_by_key(|(_, size)| *size)
        .unwrap();
    let bytes = Arc::new(std::fs::read(largest).unwrap());
    let pad = env_or("UPLOAD_PAD_KIB", 1024) * 1024;
    let stop = Arc::new(AtomicBool::new(false));
    let compiled = Arc::new(AtomicUsize::new(0));
    let tag = Arc::new(AtomicUsize::new(0));
    let mut uploaders = Vec::new();
    for _ in 0..env_or("UPLOADERS", 8) {
        let (http, base, key, bytes, stop, compiled, tag) = (
            http.clone(),
            server.base.clone(),
            uploaders_key.clone(),
            bytes.clone(),
            stop.clone(),
            compiled.clone(),
            tag.clone(),
        );
        uploaders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let body = unique_copy(&bytes, tag.fetch_add(1, Ordering::Relaxed), pad);
                let resp = http.post(format!("{base}/v1/plugins")).bearer_auth(&key).body(body).send().await.unwrap();
                if resp.status().is_success() {
                    compiled.fetch_add(1, Ordering::Relaxed);
                }
                let _ = resp.bytes().await;
            }
        }));
    }
    let stop_probe = Arc::new(AtomicBool::new(false));
    let watch = probe(server.base.clone(), quiet.clone(), stop_probe.clone());
    tokio::time::sleep(secs).await;
    stop_probe.store(true, Ordering::Relaxed);
    let during = watch.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for u in uploaders {
        let _ = u.await;
    }
    println!(
        "fairness (b): the quiet tenant's API p99 alone {} ({} samples), during uploads of {} ({:.0} KiB, padded \
         to {:.1} MiB) by {} clients {} ({} samples, {} uploads compiled): {:.2}x (target ≤ 2x)",
        ms(pct(&alone, 0.99)),
        alone.len(),
        std::path::Path::new(largest).file_name().unwrap().to_string_lossy(),
        size as f64 / 1024.0,
        (size as usize + pad) as f64 / (1024.0 * 1024.0),
        env_or("UPLOADERS", 8),
        ms(pct(&during, 0.99)),
        during.len(),
        compiled.load(Ordering::Relaxed),
        pct(&during, 0.99).as_secs_f64() / pct(&alone, 0.99).as_secs_f64().max(1e-9),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let fairness_only = std::env::var("FAIRNESS").as_deref() == Ok("only");
    let with_fairness = std::env::var("FAIRNESS").as_deref() != Ok("0");
    let tenants_n = env_or("TENANTS", 50);
    let runs = env_or("RUNS", 500);
    let density = env_or("DENSITY", 10_000);
    let model_ms = env_or("MODEL_MS", 20) as u64;
    let http = reqwest::Client::builder().pool_max_idle_per_host(1024).build().unwrap();

    let dir = tempfile::tempdir().unwrap();
    // BENCH_DIR keeps the stores and logs for a look afterwards.
    let kept = std::env::var_os("BENCH_DIR").map(std::path::PathBuf::from);
    let root = kept.as_deref().unwrap_or(dir.path());
    std::fs::create_dir_all(root).unwrap();
    let m = model(Duration::from_millis(model_ms)).await;
    if fairness_only {
        fairness(root, &http, &m).await;
        return;
    }
    std::fs::write(
        dir.path().join("nexo.toml"),
        format!(
            "[serve]\nrun-timeout-secs = 10\n[serve.models.test]\nprovider = \"openai-compatible\"\n\
             base-url = \"{}\"\nmodel = \"m\"\nassume-model-exists = true\n",
            m.url
        ),
    )
    .unwrap();
    let policy = json!({"models": ["test"]});
    let mut tenants = Vec::new();
    for i in 0..tenants_n {
        tenants.push(tenant(dir.path(), &format!("t{i:03}"), &policy));
    }
    // The noisy tenant's quotas: NOISY_CORES (default 0.1) and 512 MiB,
    // whatever it runs. On a saturated node the others lose up to its share
    // of the cores, so the share must be under the 10% the target allows:
    // 0.25 of these 2 cores would be 12.5%.
    let noisy_cores = std::env::var("NOISY_CORES").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1);
    let quotas = json!({"quotas": {"memory-mib": 512, "cpu-cores": noisy_cores}});
    let noisy = tenant(dir.path(), "noisy", &quotas);
    let server = start(dir.path(), runs + 16);
    let mut keyed = Vec::new();
    for key in &tenants {
        let plugin = upload(&http, &server, key, nexo_tests::WORKFLOW_PROBE).await;
        keyed.push((key.clone(), plugin));
    }
    let spin = upload(&http, &server, &noisy, nexo_tests::SPIN).await;
    let hog = upload(&http, &server, &noisy, nexo_tests::HOG).await;
    // Warm: the plugin is compiled and cached before anything is timed.
    let _ = load(&http, &server, &keyed, tenants_n, 1).await;

    let rounds_n = env_or("ROUNDS", 2).max(1);
    let round_secs = env_or("ROUND_SECS", 6) as u64;
    println!(
        "\nnexo serve: {tenants_n} tenants, {runs} concurrent runs, model {model_ms} ms, {} rounds of {} s a phase, \
         noisy tenant {noisy_cores} cores\n",
        2 * rounds_n,
        round_secs
    );
    // Quiet, noisy, noisy, quiet: the server drifts as its store grows with
    // every run, and this order weighs the drift on both phases alike.
    let with = (&http, &server, keyed.as_slice(), runs, round_secs);
    let mut p50s = Vec::new();
    let (mut quiet, mut loud) = (Phase::default(), Phase::default());
    rounds(&mut quiet, &mut p50s, "quiet", rounds_n, with).await;
    let quiet_peak = server.rss_kib("VmHWM:");

    let busy = Arc::new(AtomicBool::new(true));
    let mut noise = Vec::new();
    // NOISE=spin or NOISE=hog runs one kind only (four runs of it), to
    // tell their effects apart.
    let kinds = match std::env::var("NOISE").as_deref() {
        Ok("spin") => vec![spin.clone(), spin],
        Ok("hog") => vec![hog.clone(), hog],
        _ => vec![spin, hog],
    };
    for plugin in kinds {
        for _ in 0..2 {
            let (http, base, key, plugin, busy) =
                (http.clone(), server.base.clone(), noisy.clone(), plugin.clone(), busy.clone());
            noise.push(tokio::spawn(async move {
                while busy.load(Ordering::Relaxed) {
                    let body = json!({"plugin": plugin, "input": "go", "wait": true});
                    let _ = http.post(format!("{base}/v1/runs")).bearer_auth(&key).json(&body).send().await;
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    rounds(&mut loud, &mut p50s, "noisy", 2 * rounds_n, with).await;
    let (loud_peak, loud_after) = (server.rss_kib("VmHWM:"), server.rss_kib("VmRSS:"));
    // Each noise loop ends with its run (a spin run at its deadline).
    busy.store(false, Ordering::Relaxed);
    for n in noise {
        let _ = n.await;
    }
    rounds(&mut quiet, &mut p50s, "quiet", rounds_n, with).await;

    println!("| phase | runs | not done | API p50 | API p99 | run p50 | run p99 | RSS peak | RSS after |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    report("load", &quiet, quiet_peak, server.rss_kib("VmRSS:"));
    report("noisy neighbour", &loud, loud_peak, loud_after);
    println!("\nrun p50 by round: {}", p50s.join(", "));
    for (name, phase) in [("load", &quiet), ("noisy neighbour", &loud)] {
        let at = |p| ms(pct(&phase.api, p));
        println!(
            "API latency, {name}: p90 {}, p99 {}, p99.9 {}, max {} ({} samples)",
            at(0.9),
            at(0.99),
            at(0.999),
            at(1.0),
            phase.api.len()
        );
    }
    println!(
        "\nother tenants' p99 with the noisy tenant / without: API {:.2}x, run {:.2}x",
        pct(&loud.api, 0.99).as_secs_f64() / pct(&quiet.api, 0.99).as_secs_f64().max(1e-9),
        pct(&loud.runs, 0.99).as_secs_f64() / pct(&quiet.runs, 0.99).as_secs_f64().max(1e-9),
    );
    drop(server);

    if density > 0 {
        density_phase(dir.path(), &http, &m, &keyed[0], density).await;
    }
    if with_fairness {
        fairness(root, &http, &m).await;
    }
}

/// Phase 3: `density` runs waiting on the model in a fresh server.
async fn density_phase(
    root: &std::path::Path,
    http: &reqwest::Client,
    m: &Model,
    key: &(String, String),
    density: usize,
) {
    // Density: a fresh server, each run's model call held until all are in.
    let dense = start_dense(root, m, density);
    let idle_kib = dense.rss_kib("VmRSS:");
    m.hold.store(true, Ordering::Relaxed);
    let before = m.arrived.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut posts = Vec::new();
    for i in 0..density {
        let (http, base, key, plugin) = (http.clone(), dense.base.clone(), key.0.clone(), key.1.clone());
        posts.push(tokio::spawn(async move {
            let body = json!({"plugin": plugin, "input": format!("prompt wait {i}")});
            http.post(format!("{base}/v1/runs")).bearer_auth(&key).json(&body).send().await.map(|r| r.status())
        }));
        if posts.len() >= 256 {
            for p in posts.drain(..) {
                let _ = p.await;
            }
        }
    }
    for p in posts {
        let _ = p.await;
    }
    let deadline = Instant::now() + Duration::from_secs(110);
    while m.arrived.load(Ordering::Relaxed) - before < density && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let waiting = m.arrived.load(Ordering::Relaxed) - before;
    let rss_arrived = dense.rss_kib("VmRSS:");
    // The runs keep waiting SETTLE_SECS before the RSS is taken: a run's
    // memory must not grow while it waits, its lease renewals included.
    let settle = env_or("SETTLE_SECS", 30);
    if settle > 0 {
        tokio::time::sleep(Duration::from_secs(settle as u64)).await;
        println!("\nRSS when the last run arrived: {:.0} MiB; {settle} s later:", rss_arrived as f64 / 1024.0);
    }
    let rss = dense.rss_kib("VmRSS:");
    // For profiling: where the waiting runs' memory is, mapping by mapping.
    if let Ok(out) = std::env::var("SMAPS_OUT") {
        let _ = std::fs::copy(format!("/proc/{}/smaps", dense.child.id()), out);
    }
    println!(
        "\ndensity: {waiting} of {density} runs waiting on the model after {:.1} s; RSS {:.0} MiB ({:.0} MiB idle), \
         {:.1} KiB per waiting run",
        started.elapsed().as_secs_f64(),
        rss as f64 / 1024.0,
        idle_kib as f64 / 1024.0,
        (rss.saturating_sub(idle_kib)) as f64 / waiting.max(1) as f64,
    );
    m.hold.store(false, Ordering::Relaxed);
    m.release.notify_waiters();
}

fn start_dense(dir: &std::path::Path, m: &Model, runs: usize) -> Server {
    // Many slots: allocate on demand rather than reserve a pool slot per run.
    std::fs::write(
        dir.join("nexo.toml"),
        format!(
            "[serve]\npooling = false\nrun-timeout-secs = 600\n[serve.models.test]\nprovider = \"openai-compatible\"\n\
             base-url = \"{}\"\nmodel = \"m\"\nassume-model-exists = true\n",
            m.url
        ),
    )
    .unwrap();
    // One tenant's capacity: no slots kept for others (a binary from
    // before reserved slots has no such flag, and keeps none).
    let help = nexo(dir).args(["serve", "--help"]).output().unwrap();
    let extra: &[&str] = if String::from_utf8_lossy(&help.stdout).contains("--reserved-slots") {
        &["--reserved-slots", "0"]
    } else {
        &[]
    };
    start_with(dir, runs + 16, extra)
}
