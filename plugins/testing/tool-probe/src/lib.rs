//! Test plugin: calls every host tool and the model, and reports what each
//! returned. Refusals must come back as values the agent can read.

use nexo_sdk::agent::{info, model, tools, Agent, Capability, Manifest, RunError, ToolError};

struct ToolProbe;

fn describe<T>(name: &str, result: Result<T, ToolError>) -> String {
    match result {
        Ok(_) => format!("{name}: ok"),
        Err(ToolError::Denied(m)) => format!("{name}: denied: {m}"),
        Err(e) => format!("{name}: other: {e:?}"),
    }
}

impl Agent for ToolProbe {
    fn manifest() -> Manifest {
        Manifest::new("tool-probe", "Calls every host tool and reports the outcome (a test plugin)")
            .capabilities([Capability::Read, Capability::Glob, Capability::Write, Capability::Shell])
            .fetch_allow(["example.com"])
    }

    fn run(input: String) -> Result<String, RunError> {
        info("probing the host tools");
        let lines = [
            describe("read-file", tools::read_file(&input)),
            describe("write-file", tools::write_file("out.txt", "x")),
            describe("glob", tools::glob("**/*")),
            describe("shell", tools::shell("ls")),
            describe("fetch", tools::fetch("https://example.com/")),
            describe("web-search", tools::web_search("nexo")),
            match model::prompt("hi") {
                Ok(reply) => format!("prompt: ok {}", reply.text),
                Err(e) => format!("prompt: {e:?}"),
            },
            // A custom run may prompt as often as it likes; each prompt is a full loop.
            match model::prompt("again") {
                Ok(reply) => format!("prompt-again: ok {}", reply.text),
                Err(e) => format!("prompt-again: {e:?}"),
            },
        ];
        Ok(lines.join("\n"))
    }
}

nexo_sdk::export_agent!(ToolProbe);
