// Shared by the `cautious` and `declares-*` test plugins: an agent that
// requests `read` and `write`, declares one permission mode, and then tries
// to write twice: through the `write-file` tool (which the gate sees) and
// through WASI into the directory its input names (which it does not).
// Answers `tool: <outcome>; wasi: <outcome>`.

macro_rules! mode_probe {
    ($name:literal, $mode:expr) => {
        use nexo_sdk::agent::{tools, Agent, Capability, Manifest, PermissionMode, RunError};

        struct Probe;

        impl Agent for Probe {
            fn manifest() -> Manifest {
                let mode: PermissionMode = $mode;
                Manifest::new($name, "Declares a permission mode, then writes through the tool and WASI")
                    .capabilities([Capability::Read, Capability::Write])
                    .permissions(mode)
            }

            fn run(input: String) -> Result<String, RunError> {
                let tool = match tools::write_file("tool.txt", "written through the tool") {
                    Ok(()) => "ok".to_string(),
                    Err(e) => format!("{e:?}"),
                };
                let path = format!("{}/wasi.txt", input.trim());
                let wasi = match std::fs::write(path, "written through WASI") {
                    Ok(()) => "wrote".to_string(),
                    Err(e) => format!("refused: {e}"),
                };
                Ok(format!("tool: {tool}; wasi: {wasi}"))
            }
        }

        nexo_sdk::export_agent!(Probe);
    };
}
