//! Test plugin: exports `nexo:plugin/agent` without `manifest` or `run`.

wit_bindgen::generate!({ path: "wit", world: "broken-agent" });

struct NoRun;

impl exports::nexo::plugin::agent::Guest for NoRun {
    fn version() -> String {
        "0.0.0".into()
    }
}

export!(NoRun);
