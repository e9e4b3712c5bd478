//! The smallest useful agent: a manifest, and the SDK's default `run`, which
//! sends the input to the host's model loop.

use nexo_sdk::agent::{Agent, Capability, Manifest};

struct Hello;

impl Agent for Hello {
    fn manifest() -> Manifest {
        Manifest::new("hello", "Answers questions about the files in its workspace")
            .instructions(
                "You are a helpful assistant. Read files when you need them; \
                 cite the paths you used.",
            )
            .capabilities([Capability::Read, Capability::Glob])
            .max_turns(8)
    }
}

nexo_sdk::export_agent!(Hello);
