//! Dependency-free timing loop shared by both host binaries (`#[path]`-included).
//!
//! One measurement = warm-up, then `BATCHES` batches of `iters` calls each, where
//! `iters` is calibrated so one batch takes about `BATCH_MS`. Each batch yields
//! one sample (batch time / iters / units); we report the median sample and its
//! spread (quartiles, min, max) over the batches.
use std::time::{Duration, Instant};

/// Input of every `run` call: 64 ASCII bytes.
pub const INPUT: &str = "The quick brown fox jumps over the lazy dog; peer baseline 0123.";
/// Host-function calls per `run-n` / `run_n` call (metric c divides by this).
/// 1000 unless `N_HOST_CALLS` (env) says otherwise.
pub fn n_host_calls() -> u32 {
    env_u64("N_HOST_CALLS", 1000).clamp(1, u32::MAX as u64) as u32
}

pub struct Cfg {
    pub batches: usize,
    pub batch: Duration,
    pub warmup: Duration,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

impl Cfg {
    pub fn from_env() -> Self {
        Cfg {
            batches: env_u64("BATCHES", 15).max(3) as usize,
            batch: Duration::from_millis(env_u64("BATCH_MS", 100)),
            warmup: Duration::from_millis(env_u64("WARMUP_MS", 300)),
        }
    }
}

/// `METRICS=a,c` (env) limits a run to those metric keys (the text before ':');
/// handy for profiling one loop. Default: all.
pub fn wanted(metric: &str) -> bool {
    let key = metric.split(':').next().unwrap_or(metric).trim();
    match std::env::var("METRICS") {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|k| k.trim() == key),
        _ => true,
    }
}

/// `PERFMAP=1` (env): the hosts ask wasmtime for /tmp/perf-<pid>.map so that
/// `perf report` can name JIT-compiled wasm functions.
pub fn perfmap() -> bool {
    std::env::var("PERFMAP").is_ok_and(|v| v == "1")
}

pub struct Stats {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    pub batches: usize,
    pub iters: u64,
}

/// Time `f`; one call of `f` counts as `units` units (ns per unit are reported).
pub fn measure(cfg: &Cfg, units: f64, mut f: impl FnMut()) -> Stats {
    // Warm-up (also calibrates the batch size).
    let t = Instant::now();
    let mut n = 0u64;
    while n < 3 || t.elapsed() < cfg.warmup {
        f();
        n += 1;
    }
    let per_call = t.elapsed().as_secs_f64() / n as f64;
    let iters = ((cfg.batch.as_secs_f64() / per_call).ceil() as u64).max(1);

    let mut samples: Vec<f64> = (0..cfg.batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64 / units
        })
        .collect();
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    Stats {
        median: q(0.5),
        q1: q(0.25),
        q3: q(0.75),
        min: samples[0],
        max: samples[samples.len() - 1],
        batches: samples.len(),
        iters,
    }
}

/// One machine-readable line on stdout (run.sh turns these into the table),
/// one human-readable line on stderr.
pub fn report(host: &str, config: &str, metric: &str, s: &Stats) {
    println!(
        "RESULT\t{host}\t{config}\t{metric}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{}x{}",
        s.median, s.q1, s.q3, s.min, s.max, s.batches, s.iters
    );
    eprintln!(
        "{host:28} {config:36} {metric:44} median {:>10.1} ns  IQR {:.1}..{:.1}  min..max {:.1}..{:.1}  ({}x{})",
        s.median, s.q1, s.q3, s.min, s.max, s.batches, s.iters
    );
}

/// Measure and report `metric` unless `METRICS` excludes it.
pub fn bench(cfg: &Cfg, host: &str, config: &str, metric: &str, units: f64, f: impl FnMut()) {
    if wanted(metric) {
        let s = measure(cfg, units, f);
        report(host, config, metric, &s);
    }
}
