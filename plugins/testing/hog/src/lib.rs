//! Test plugin: `run` allocates and touches memory until the host refuses.

use nexo_sdk::agent::{Agent, Manifest, RunError};

struct Hog;

impl Agent for Hog {
    fn manifest() -> Manifest {
        Manifest::new("hog", "Allocates without bound (a test of the memory cap)")
    }

    fn run(_input: String) -> Result<String, RunError> {
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        loop {
            chunks.push(vec![0xA5; 4 << 20]);
            std::hint::black_box(&chunks);
        }
    }
}

nexo_sdk::export_agent!(Hog);
