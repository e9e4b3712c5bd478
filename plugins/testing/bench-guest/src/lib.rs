//! Benchmark plugin: the guest work of the peer harness (`bench/peers/`) as a
//! nexo agent, so nexo's host is timed on the same work as raw wasmtime and
//! Extism.
//!
//! - any input: reverse it (by chars) and log once, like the peers' `run`;
//! - `log N`: log `"ping"` N times, like the peers' `run-n`; returns N;
//! - `read N PATH`: read PATH through the gated `read-file` tool N times;
//!   returns the bytes read in all.

use nexo_sdk::agent::{log, tools, Agent, Capability, Manifest, RunError};

struct BenchGuest;

fn count(n: &str) -> Result<u32, RunError> {
    n.parse().map_err(|_| RunError::Failed(format!("not a count: {n:?}")))
}

impl Agent for BenchGuest {
    fn manifest() -> Manifest {
        Manifest::new("bench-guest", "The peer harness's guest work (a benchmark plugin)")
            .capabilities([Capability::Read])
    }

    fn run(input: String) -> Result<String, RunError> {
        if let Some(n) = input.strip_prefix("log ") {
            let n = count(n)?;
            for _ in 0..n {
                log::log(log::Level::Info, "ping");
            }
            return Ok(n.to_string());
        }
        if let Some(rest) = input.strip_prefix("read ") {
            let (n, path) = rest.split_once(' ').ok_or_else(|| RunError::Failed("usage: read N PATH".into()))?;
            let mut bytes = 0;
            for _ in 0..count(n)? {
                bytes += tools::read_file(path).map_err(|e| RunError::Failed(format!("{e:?}")))?.len();
            }
            return Ok(bytes.to_string());
        }
        let out: String = input.chars().rev().collect();
        log::log(log::Level::Info, "run");
        Ok(out)
    }
}

nexo_sdk::export_agent!(BenchGuest);
