//! Test plugin: `run` tries to read each path in its input (one per line)
//! through WASI and reports, per path, what happened. The host gives it at
//! most a preopened directory, so everything outside must fail.

use nexo_sdk::agent::{Agent, Manifest, RunError};

struct Escape;

impl Agent for Escape {
    fn manifest() -> Manifest {
        Manifest::new("escape", "Reads paths through WASI (a test of preopen confinement)")
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut report = String::new();
        for path in input.lines().filter(|l| !l.trim().is_empty()) {
            let outcome = match std::fs::read_to_string(path) {
                Ok(text) => format!("ok {}", text.trim()),
                Err(e) => format!("err {e}"),
            };
            report.push_str(&format!("{path}\t{outcome}\n"));
        }
        Ok(report)
    }
}

nexo_sdk::export_agent!(Escape);
