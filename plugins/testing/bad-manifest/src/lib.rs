//! Test plugin: a manifest the host must reject (an invalid name).

use nexo_sdk::agent::{Agent, Manifest};

struct Bad;

impl Agent for Bad {
    fn manifest() -> Manifest {
        Manifest::new("Not A Valid Name!", "")
    }
}

nexo_sdk::export_agent!(Bad);
