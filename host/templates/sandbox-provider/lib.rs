//! {{name}}: a sandbox provider, the adapter between nexo and a remote
//! sandbox service (E2B, Daytona, your own). The host keeps one instance per
//! sandbox and routes every file and shell tool through it.
//!
//! This starting point keeps files in the component's memory and runs no
//! commands, so it works offline; replace each method with calls to your
//! service through `nexo_sdk::provider::http` (the operator grants its hosts).
//! `nexo test` checks that it loads and starts as a remote sandbox.

use std::cell::RefCell;
use std::collections::BTreeMap;

use nexo_sdk::provider::{ExecOutput, ProviderInfo, SandboxError, SandboxProvider};

/// The remote working directory: every path the host sends is under it.
const WORKDIR: &str = "/workspace";

thread_local! {
    static FILES: RefCell<BTreeMap<String, String>> = const { RefCell::new(BTreeMap::new()) };
}

struct Plugin;

impl SandboxProvider for Plugin {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "{{name}}".into(),
            description: "A remote sandbox kept in the component's memory (replace with your service)".into(),
            hosts: vec![],
            workdir: WORKDIR.into(),
        }
    }

    fn read(path: String) -> Result<String, SandboxError> {
        FILES.with(|f| f.borrow().get(&path).cloned()).ok_or(SandboxError::NotFound(path))
    }

    fn write(path: String, contents: String) -> Result<(), SandboxError> {
        // Check paths on this side too: the remote end is yours to protect.
        if !path.starts_with(&format!("{WORKDIR}/")) {
            return Err(SandboxError::Security(format!("{path} is outside {WORKDIR}")));
        }
        FILES.with(|f| f.borrow_mut().insert(path, contents));
        Ok(())
    }

    // A real provider runs `sh -c command sh args…` remotely: untrusted values
    // arrive only in `args`, so never splice them into `command`.
    fn exec(_command: String, _args: Vec<String>, _timeout_ms: u32) -> Result<ExecOutput, SandboxError> {
        Err(SandboxError::Unsupported("this provider runs no commands yet".into()))
    }

    fn close() -> Result<(), SandboxError> {
        FILES.with(|f| f.borrow_mut().clear());
        Ok(())
    }
}

nexo_sdk::export_sandbox_provider!(Plugin);
