//! Test plugin: `run` panics, which aborts and traps the instance.

use nexo_sdk::agent::{Agent, Manifest, RunError};

struct Trap;

impl Agent for Trap {
    fn manifest() -> Manifest {
        Manifest::new("trap", "Panics in run (a test of trap reporting)")
    }

    fn run(input: String) -> Result<String, RunError> {
        panic!("deliberate failure while handling {input:?}");
    }
}

nexo_sdk::export_agent!(Trap);
