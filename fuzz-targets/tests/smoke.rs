//! The fuzz targets under `cargo test`: each over its seeds, then over a
//! fixed number of deterministic mutations of them (`NEXO_FUZZ_SEED`
//! changes the seed, `NEXO_FUZZ_SMOKE` multiplies the count). A failing
//! input is written to `target/fuzz-smoke/NAME-N` to replay with
//! `cargo fuzz run NAME FILE` or with [`replay`]'s test below.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use nexo_fuzz_targets::mutate::{Rng, mutate};
use nexo_fuzz_targets::{repo_root, seeds, target};

/// Inputs stay below this many bytes (components excepted).
const MAX_LEN: usize = 16 << 10;
/// An input slower than this is reported (a hang in the making).
const SLOW: std::time::Duration = std::time::Duration::from_millis(500);

fn run_one(name: &str, input: &[u8], index: usize) {
    let t = target(name).unwrap();
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| (t.run)(input)));
    if started.elapsed() > SLOW {
        eprintln!(
            "{name}: input {index} took {:.1?}: {:?}",
            started.elapsed(),
            String::from_utf8_lossy(&input[..input.len().min(200)])
        );
    }
    if outcome.is_err() {
        let dir: std::path::PathBuf =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), Into::into);
        let dir = dir.join("fuzz-smoke");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{name}-{index}"));
        std::fs::write(&file, input).unwrap();
        panic!("{name} failed on input {index}, written to {}", file.display());
    }
}

fn smoke(name: &str, mut pool: Vec<Vec<u8>>, max_len: usize) {
    let started = Instant::now();
    assert!(!pool.is_empty(), "{name} has no seeds");
    for (i, seed) in pool.iter().enumerate() {
        run_one(name, seed, i);
    }
    let factor: usize = std::env::var("NEXO_FUZZ_SMOKE").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let base: u64 = std::env::var("NEXO_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut rng = Rng::new(
        base ^ name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)),
    );
    let count = target(name).unwrap().smoke_mutations * factor;
    let seeds = pool.len();
    for i in 0..count {
        let parent = pool[rng.below(pool.len())].clone();
        let input = mutate(&mut rng, &parent, &pool, max_len);
        run_one(name, &input, seeds + i);
        // Mutants of mutants reach deeper; the pool stays small.
        if pool.len() < 256 && rng.below(8) == 0 {
            pool.push(input);
        }
    }
    eprintln!("{name}: {} inputs in {:.1?}", seeds + count, started.elapsed());
}

#[test]
fn skill_md() {
    smoke("skill_md", seeds("skill_md"), MAX_LEN);
}

#[test]
fn agent_toml() {
    smoke("agent_toml", seeds("agent_toml"), MAX_LEN);
}

#[test]
fn config_file() {
    smoke("config_file", seeds("config_file"), MAX_LEN);
}

#[test]
fn agent_manifest() {
    smoke("agent_manifest", seeds("agent_manifest"), MAX_LEN);
}

#[test]
fn model_response() {
    smoke("model_response", seeds("model_response"), MAX_LEN);
}

#[test]
fn egress_url() {
    smoke("egress_url", seeds("egress_url"), MAX_LEN);
}

#[test]
fn sandbox_paths() {
    smoke("sandbox_paths", seeds("sandbox_paths"), 256);
}

#[test]
fn text_truncate() {
    smoke("text_truncate", seeds("text_truncate"), MAX_LEN);
}

/// Mutated first-party components (each mutant is parsed, and compiled if
/// it still validates), plus the checked-in seeds (odd paths, `wasm-smith`).
#[test]
fn component_load() {
    let mut pool = seeds("component_load");
    for path in [nexo_tests::TEXT_STATS, nexo_tests::HELLO] {
        pool.push(std::fs::read(path).unwrap());
    }
    let components: Vec<Vec<u8>> = pool[pool.len() - 2..].to_vec();
    smoke("component_load", pool, usize::MAX);
    // In-place byte edits past the header keep every section's length, so
    // more mutants get past parsing into validation, compilation and the
    // self-description call.
    let mut rng = Rng::new(0xc0de);
    for i in 0..150 {
        let mut mutant = components[i % components.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let at = 8 + rng.below(mutant.len() - 8);
            mutant[at] ^= 1 << rng.below(8);
        }
        run_one("component_load", &mutant, 100_000 + i);
    }
}
