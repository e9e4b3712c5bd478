//! Test plugin: a sandbox provider whose "remote" is its own memory. It
//! answers the helper commands the host sends (file listing, stat) and echoes
//! any other command with its positional arguments, so tests can see exactly
//! what crossed the boundary.

use std::cell::RefCell;
use std::collections::BTreeMap;

use nexo_sdk::provider::{ExecOutput, ProviderInfo, SandboxError, SandboxProvider};

thread_local! {
    static FILES: RefCell<BTreeMap<String, String>> = const { RefCell::new(BTreeMap::new()) };
}

const WORKDIR: &str = "/workspace";

struct Memory;

fn output(status: i32, stdout: String) -> ExecOutput {
    ExecOutput { status, stdout, stderr: String::new() }
}

impl SandboxProvider for Memory {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "memory-provider".into(),
            description: "A remote sandbox that lives in the component's memory (a test plugin)".into(),
            hosts: vec![],
            workdir: WORKDIR.into(),
        }
    }

    fn read(path: String) -> Result<String, SandboxError> {
        FILES.with(|f| f.borrow().get(&path).cloned()).ok_or(SandboxError::NotFound(path))
    }

    fn write(path: String, contents: String) -> Result<(), SandboxError> {
        if !path.starts_with("/workspace/") {
            return Err(SandboxError::Security(format!("{path} is outside /workspace")));
        }
        FILES.with(|f| f.borrow_mut().insert(path, contents));
        Ok(())
    }

    fn exec(command: String, args: Vec<String>, _timeout_ms: u32) -> Result<ExecOutput, SandboxError> {
        if command.contains("find . -type f") {
            let listing = FILES
                .with(|f| f.borrow().keys().map(|k| k.replacen("/workspace/", "./", 1)).collect::<Vec<_>>().join("\n"));
            return Ok(output(0, listing));
        }
        if command.contains("stat -c %Y") {
            let exists = args.first().is_some_and(|p| FILES.with(|f| f.borrow().contains_key(p)));
            return Ok(if exists { output(0, "1700000000".into()) } else { output(3, String::new()) });
        }
        Ok(output(0, format!("command={command}\nargs={args:?}")))
    }

    fn close() -> Result<(), SandboxError> {
        FILES.with(|f| f.borrow_mut().clear());
        Ok(())
    }
}

nexo_sdk::export_sandbox_provider!(Memory);
