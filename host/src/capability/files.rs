//! The files unit: the `read-file`, `write-file` and `glob` tools, acting in
//! the run's sandbox (`capability::sandbox`), with the read-before-write
//! guard: on a real filesystem an existing file must have been read in this
//! run, and not changed since, before it is overwritten.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use nexo_model::{BoxFuture, ToolSpec};
use nexo_sandbox::{GlobMatches, MAX_GLOB_MATCHES};
use serde_json::{Value, json};
use wasmtime::component::Linker;

use super::sandbox::{Workspace, blocking};
use crate::error::ToolError;
use crate::host_call::{DynTool, HostCall, Tool, ToolContext, string_arg};
use crate::manifest::Capability;
use crate::manifest::interface::TOOLS;
use crate::unit::{AgentHost, Setup, Step, Unit};

/// The files unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct FilesUnit;

/// Paths read in this run, with the modification time seen.
#[derive(Debug, Default)]
pub struct Reads(Mutex<HashMap<String, Option<SystemTime>>>);

impl Reads {
    fn seen(&self, path: &str) -> Option<Option<SystemTime>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&key(path)).copied()
    }

    fn remember(&self, path: &str, mtime: Option<SystemTime>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(key(path), mtime);
    }
}

fn key(path: &str) -> String {
    path.trim_start_matches("./").to_string()
}

impl Unit for FilesUnit {
    fn name(&self) -> &'static str {
        "files"
    }

    fn link(&self, linker: &mut Linker<AgentHost>) -> wasmtime::Result<()> {
        let mut tools = linker.instance(TOOLS)?;
        tools.func_wrap_async("read-file", |store, (path,): (String,)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move { Ok((cx.guest_call(&ReadFile, path).await?,)) })
        })?;
        tools.func_wrap_async("write-file", |store, (path, contents): (String, String)| {
            let cx = store.data().world.tools.clone();
            Box::new(async move { Ok((cx.guest_call(&WriteFile, (path, contents)).await?.map(|_| ()),)) })
        })?;
        tools.func_wrap_async("glob", |store, (pattern,): (String,)| {
            let cx = store.data().world.tools.clone();
            // The WIT list carries paths only: a guest sees at most MAX_GLOB_MATCHES and no flag.
            Box::new(async move { Ok((cx.guest_call(&Glob, pattern).await?.map(|m| m.paths),)) })
        })
    }

    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[&ReadFile, &Glob, &WriteFile]
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        setup.state.insert(Reads::default());
        Step::ready(Ok(()))
    }
}

fn spec(name: &str, description: &str, properties: Value, required: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        parameters: json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false}),
    }
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// `read-file`: a UTF-8 text file in the sandbox.
#[derive(Debug, Clone, Copy)]
pub struct ReadFile;

impl HostCall for ReadFile {
    type Args = String;
    type Output = String;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "read-file"
    }

    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn capability(&self) -> Option<Capability> {
        Some(Capability::Read)
    }

    fn detail<'a>(&self, path: &'a String) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(path)
    }

    fn arg_bytes(&self, path: &String) -> usize {
        path.len()
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, path: String) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let sandbox = &cx.state::<Workspace>()?.sandbox;
            let p = path.clone();
            let file = blocking(sandbox, move |s| s.read(&p)).await?;
            cx.state::<Reads>()?.remember(&path, file.mtime);
            Ok(file.text)
        })
    }
}

impl Tool for ReadFile {
    fn model_name(&self) -> &'static str {
        "read_file"
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        spec(
            "read_file",
            "Read a UTF-8 text file in the workspace.",
            json!({"path": string("Path relative to the workspace")}),
            &["path"],
        )
    }

    fn decode(&self, arguments: &Value) -> Result<String, ToolError> {
        Ok(string_arg("read_file", arguments, "path")?.to_string())
    }

    fn render(&self, text: &String) -> String {
        text.clone()
    }
}

/// `write-file`: creates or overwrites a file, after the read-before-write
/// guard.
#[derive(Debug, Clone, Copy)]
pub struct WriteFile;

impl HostCall for WriteFile {
    /// The path and the new contents.
    type Args = (String, String);
    /// The path and the bytes written.
    type Output = (String, usize);
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "write-file"
    }

    fn capability(&self) -> Option<Capability> {
        Some(Capability::Write)
    }

    fn detail<'a>(&self, (path, _): &'a (String, String)) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(path)
    }

    fn arg_bytes(&self, (path, contents): &(String, String)) -> usize {
        path.len() + contents.len()
    }

    fn execute<'a>(
        &'a self,
        cx: &'a ToolContext,
        (path, contents): (String, String),
    ) -> BoxFuture<'a, Result<(String, usize), ToolError>> {
        Box::pin(async move {
            let sandbox = &cx.state::<Workspace>()?.sandbox;
            let reads = cx.state::<Reads>()?;
            let p = path.clone();
            let existing = blocking(sandbox, move |s| s.stat(&p)).await?;
            if let Some(stat) = existing
                && let Some(now) = stat.mtime
            {
                match reads.seen(&path) {
                    None => return Err(ToolError::InvalidInput(format!("read {path} before overwriting it"))),
                    Some(seen) if seen != Some(now) => {
                        return Err(ToolError::InvalidInput(format!("stale: {path} changed since you read it")));
                    }
                    Some(_) => {}
                }
            }
            let bytes = contents.len();
            let p = path.clone();
            blocking(sandbox, move |s| s.write(&p, &contents)).await?;
            // Our own write must not make the next write look stale.
            let p = path.clone();
            if let Ok(Some(stat)) = blocking(sandbox, move |s| s.stat(&p)).await {
                reads.remember(&path, stat.mtime);
            }
            Ok((path, bytes))
        })
    }
}

impl Tool for WriteFile {
    fn model_name(&self) -> &'static str {
        "write_file"
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        spec(
            "write_file",
            "Create or overwrite a file in the workspace. Read an existing file before overwriting it.",
            json!({"path": string("Path relative to the workspace"), "content": string("The complete new contents")}),
            &["path", "content"],
        )
    }

    fn decode(&self, arguments: &Value) -> Result<(String, String), ToolError> {
        let path = string_arg("write_file", arguments, "path")?;
        let content = string_arg("write_file", arguments, "content")?;
        Ok((path.to_string(), content.to_string()))
    }

    fn render(&self, (path, bytes): &(String, usize)) -> String {
        format!("wrote {bytes} bytes to {path}")
    }
}

/// `glob`: files matching a pattern, at most
/// [`MAX_GLOB_MATCHES`](nexo_sandbox::MAX_GLOB_MATCHES), flagged when cut.
#[derive(Debug, Clone, Copy)]
pub struct Glob;

impl HostCall for Glob {
    type Args = String;
    type Output = GlobMatches;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "glob"
    }

    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn capability(&self) -> Option<Capability> {
        Some(Capability::Glob)
    }

    fn detail<'a>(&self, pattern: &'a String) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(pattern)
    }

    fn arg_bytes(&self, pattern: &String) -> usize {
        pattern.len()
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, pattern: String) -> BoxFuture<'a, Result<GlobMatches, ToolError>> {
        Box::pin(async move {
            let sandbox = &cx.state::<Workspace>()?.sandbox;
            blocking(sandbox, move |s| s.glob(&pattern)).await
        })
    }
}

impl Tool for Glob {
    fn model_name(&self) -> &'static str {
        "glob"
    }

    fn spec(&self, _cx: &ToolContext) -> ToolSpec {
        spec(
            "glob",
            "List workspace files matching a glob pattern such as `src/**/*.rs`.",
            json!({"pattern": string("Glob pattern relative to the workspace")}),
            &["pattern"],
        )
    }

    fn decode(&self, arguments: &Value) -> Result<String, ToolError> {
        Ok(string_arg("glob", arguments, "pattern")?.to_string())
    }

    fn render(&self, matches: &GlobMatches) -> String {
        glob_text(matches)
    }
}

/// The glob tool's text for the model: one path a line, and a last line
/// saying so when the list was cut, so the model does not take it as whole.
pub fn glob_text(matches: &GlobMatches) -> String {
    let mut text = if matches.paths.is_empty() { "(no matching files)".to_string() } else { matches.paths.join("\n") };
    if matches.truncated && matches.paths.len() >= MAX_GLOB_MATCHES {
        text.push_str(&format!("\n(first {MAX_GLOB_MATCHES} matches shown; more exist: narrow the pattern)"));
    } else if matches.truncated {
        // The walk hit its own limit before the match cap: the rest is unknown, not known to exist.
        text.push_str("\n(the file listing stopped early, so more files may match: narrow the pattern)");
    }
    text
}
