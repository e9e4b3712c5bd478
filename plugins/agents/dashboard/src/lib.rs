//! A durable workflow with parallel steps: three independent prompts run
//! at once through `checkpoint_all`, each stored as it completes, then one
//! last prompt writes the dashboard from them. If a step fails, the ones
//! that completed are kept, and a retry (`nexo runs resume RUN`) runs only
//! the missing one.

use nexo_sdk::agent::durable::{checkpoint_all, from_json_string, prompt_step};
use nexo_sdk::agent::{prompt, Agent, Capability, Manifest, RunError};

struct Dashboard;

impl Agent for Dashboard {
    fn manifest() -> Manifest {
        Manifest::new("dashboard", "Builds a status dashboard from three independent summaries")
            .instructions("You summarize business data in one short line.")
            .capabilities([Capability::Read])
    }

    fn run(account: String) -> Result<String, RunError> {
        let parts = ["revenue", "usage", "support"];
        let steps: Vec<_> =
            parts.iter().map(|p| prompt_step(p, &format!("Summarize the {p} of account {account}"))).collect();
        let data = checkpoint_all(&steps)?;
        let mut lines = Vec::new();
        for p in parts {
            let value = data.get(p).map(String::as_str).unwrap_or("\"\"");
            lines.push(format!("{p}: {}", from_json_string(value).unwrap_or_else(|| value.to_string())));
        }
        let title = prompt(&format!("Give a one-line title for this dashboard:\n{}", lines.join("\n")))?.text;
        Ok(format!("{title}\n{}", lines.join("\n")))
    }
}

nexo_sdk::export_agent!(Dashboard);
