//! {{name}}: a nexo agent.
//!
//! `nexo test` builds it and runs it on `tests/input.txt` against
//! `tests/script.json`, a recorded model conversation, so no model is called;
//! the answer must contain `tests/expect.txt`. Run it for real with
//! `nexo run <the .wasm> "question" --model …`.

use nexo_sdk::agent::{Agent, Capability, Manifest, RunError};

struct Plugin;

impl Agent for Plugin {
    fn manifest() -> Manifest {
        // `nexo inspect` reads the manifest, so it must not call the host.
        Manifest::new("{{name}}", "Answers questions about the files in its workspace")
            .instructions(
                "You are a helpful assistant. Look at the files you need before \
                 answering, and cite the paths you used.",
            )
            // A request, not a grant: the operator decides (`--allow`), and the
            // agent gets only what both sides name.
            .capabilities([Capability::Read, Capability::Glob])
            .max_turns(8)
    }

    // Optional: the SDK's default `run` sends the input to the model as one
    // prompt. This one refuses an empty question first; a refusal is a value
    // the host reports, never a panic.
    fn run(input: String) -> Result<String, RunError> {
        if input.trim().is_empty() {
            return Err(RunError::Failed("ask a question".into()));
        }
        let reply = nexo_sdk::agent::prompt(&input)?;
        Ok(reply.text)
    }
}

nexo_sdk::export_agent!(Plugin);
