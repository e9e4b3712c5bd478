//! Test plugin: `run` never returns. The host must stop it at the deadline.

use nexo_sdk::agent::{Agent, Manifest, RunError};

struct Spin;

impl Agent for Spin {
    fn manifest() -> Manifest {
        Manifest::new("spin", "Loops forever (a test of the run deadline)")
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut n: u64 = input.len() as u64;
        loop {
            n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

nexo_sdk::export_agent!(Spin);
