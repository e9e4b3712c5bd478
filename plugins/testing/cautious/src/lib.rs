//! Test plugin: requests `read` and `write` but declares the `read-only`
//! permission mode, then tries to write the file its input names through
//! WASI, which the gate never sees. Answers `wrote` or `refused: …`.

use nexo_sdk::agent::{Agent, Capability, Manifest, PermissionMode, RunError};

struct Cautious;

impl Agent for Cautious {
    fn manifest() -> Manifest {
        Manifest::new("cautious", "Declares read-only, then tries a WASI write (a test of the mode)")
            .capabilities([Capability::Read, Capability::Write])
            .permissions(PermissionMode::ReadOnly)
    }

    fn run(input: String) -> Result<String, RunError> {
        Ok(match std::fs::write(input.trim(), "written through WASI") {
            Ok(()) => "wrote".into(),
            Err(e) => format!("refused: {e}"),
        })
    }
}

nexo_sdk::export_agent!(Cautious);
