//! A first nexo agent: it asks for read access and lets the host's model loop
//! do the work. Build it with `nexo build examples/first-agent`.

use nexo_sdk::agent::{Agent, Capability, Manifest, RunError};

struct Greeter;

impl Agent for Greeter {
    fn manifest() -> Manifest {
        Manifest::new("first-agent", "Greets the user and summarises a file on request")
            .instructions("Greet the user by name. If they name a file, read it and summarise it in one line.")
            .capabilities([Capability::Read])
            .max_turns(4)
    }

    // Optional: the default `run` sends the input to the model as one prompt.
    // This one checks its input first.
    fn run(input: String) -> Result<String, RunError> {
        if input.trim().is_empty() {
            return Err(RunError::Failed("say who to greet".into()));
        }
        nexo_sdk::agent::prompt(&input).map(|reply| reply.text)
    }
}

nexo_sdk::export_agent!(Greeter);
