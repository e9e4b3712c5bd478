//! Traces, checked against a real OTLP/HTTP receiver that decodes every
//! export with the official protobuf definitions (`nexo_testkit::otlp`):
//!
//! - a served run with a model turn, an MCP tool call and an approval is one
//!   trace under the caller's `traceparent`: it suspends on one `nexo serve`
//!   and resumes on another over the same store, the resumed pass links to
//!   the first, and the model server and the MCP server got the trace's
//!   context; every span carries the tenant, the run and the component; a
//!   caller's "not sampled" flag does not hide the run from the operator;
//! - no secret (the provider's key, the MCP server's token) and no content
//!   (the prompt, a tool's arguments and result) is in any exported byte,
//!   unless the operator opts in to contents, and then they are there.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_testkit::otlp::Receiver;
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::Node;
use common::scene::{PROVIDER_KEY, Scene};

/// The prompt: content, which must not be exported unless opted in.
const PROMPT: &str = "summarize-the-quarterly-plan-4417";
/// The `write_file` call's argument, content too.
const TOOL_ARG: &str = "write-argument-8a1c";
/// What the MCP `echo` tool answers: a tool result.
const TOOL_RESULT: &str = "tool-result-bytes-2b9e";
/// The MCP server's bearer token: a secret.
const MCP_TOKEN: &str = "mcp-token-secret-5d03";
/// The caller's trace, and the spans it starts and approves the run from.
const TRACE: &str = "5f1e2d3c4b5a69788796a5b4c3d2e1f0";
const STARTED_FROM: &str = "1111222233334444";
const APPROVED_FROM: &str = "5555666677778888";

/// The MCP test server, killed when dropped.
struct McpServer {
    child: Child,
    addr: String,
    traces: std::path::PathBuf,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpServer {
    fn start(dir: &Path) -> McpServer {
        let traces = dir.join("mcp-traceparents.log");
        let args = ["--token".as_ref(), MCP_TOKEN.as_ref(), "--trace-log".as_ref(), traces.as_os_str()];
        let (child, addr) = common::mcp_http_server(&args);
        McpServer { child, addr, traces }
    }

    /// The `traceparent` of each request it got that had one.
    fn traceparents(&self) -> Vec<String> {
        std::fs::read_to_string(&self.traces).unwrap_or_default().lines().map(str::to_string).collect()
    }
}

/// The model: echo `TOOL_RESULT` (the agent lists `echo`, so it passes),
/// then write `TOOL_ARG` to a file (under `approve` that waits for a
/// decision), then answer.
fn answer(body: &Value) -> Reply {
    let made = body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    match made {
        0 => Reply::tool_calls(vec![MockToolCall::new("c0", "mcp__tests__echo", json!({"text": TOOL_RESULT}))]),
        1 => Reply::tool_calls(vec![MockToolCall::new(
            "c1",
            "write_file",
            json!({"path": "notes.txt", "content": TOOL_ARG}),
        )]),
        _ => Reply::text("all done"),
    }
    .with_usage(10, 5)
}

/// A scene with the MCP server configured, a tenant in `mode`, and the
/// `mcp-probe` plugin uploaded through `node`: the tenant's key and plugin id.
async fn setup(scene: &Scene, mcp: &McpServer, mode: &str, telemetry: &str) -> String {
    scene.model.respond_with(answer);
    scene.configure(&format!(
        "[mcp.tests]\nurl = \"http://{}/mcp\"\nallow-private = true\ntoken-env = \"TELEMETRY_MCP_TOKEN\"\n\n{telemetry}",
        mcp.addr
    ));
    let policy = json!({
        "allow": ["write"],
        "sandboxes": ["virtual"],
        "mcp-servers": ["tests"],
        "mcp-allow": ["tests/echo"],
        "models": ["test"],
        "mode": mode,
    });
    scene.tenant("acme", Some(policy))
}

fn node(scene: &Scene, name: &str, env: &[(&str, &str)]) -> Node {
    let mut all = vec![("TELEMETRY_MCP_TOKEN", MCP_TOKEN)];
    all.extend_from_slice(env);
    scene.node_with_env(name, &all)
}

async fn upload(scene: &Scene, node: &Node, key: &str) -> String {
    let (status, plugin) = scene.upload(node, key, built::MCP_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    plugin["id"].as_str().unwrap().to_string()
}

/// The header `name` of each request the model server got that had one.
fn model_headers(scene: &Scene, name: &str) -> Vec<String> {
    scene
        .model
        .requests()
        .iter()
        .filter_map(|r| r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()))
        .collect()
}

/// A member of `tracestate` 248 bytes long.
fn long_member(n: usize) -> String {
    format!("k{n}={}", "v".repeat(245))
}

/// The caller's `tracestate`: more than the 512 bytes W3C lets travel.
fn tracestate_given() -> String {
    format!("vendor=kept,{},{},{}", long_member(0), long_member(1), long_member(2))
}

/// A POST with the caller's trace context. The caller's flags say "not
/// sampled": a tenant's header must not turn the operator's tracing of its
/// runs off.
async fn traced_post(scene: &Scene, url: &str, key: &str, parent: &str, body: Value) -> (StatusCode, Value) {
    let response = scene
        .http
        .post(url)
        .bearer_auth(key)
        .header("traceparent", format!("00-{TRACE}-{parent}-00"))
        .header("tracestate", tracestate_given())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// SIGTERM, and the wait for a clean exit: the shutdown flushes the spans.
fn stop(node: &mut Node) {
    let pid = rustix::process::Pid::from_raw(node.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            assert!(status.success(), "{}", node.log());
            return;
        }
        assert!(Instant::now() < deadline, "nexo serve did not stop: {}", node.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_is_one_trace_across_processes_with_the_genai_spans_and_nothing_secret() {
    let test = "a_served_run_is_one_trace_across_processes_with_the_genai_spans_and_nothing_secret";
    let Some(receiver) = Receiver::start(test) else { return };
    let scene = Scene::new(None).await;
    let mcp = McpServer::start(scene.dir.path());
    let key = setup(&scene, &mcp, "approve", "").await;
    let endpoint = receiver.endpoint();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_SERVICE_NAME", "nexo-under-test")];

    // The first process: the run starts, calls the model twice and `echo`
    // once, then suspends at the write.
    let mut first = node(&scene, "a", &env);
    let plugin = upload(&scene, &first, &key).await;
    let body = json!({"plugin": plugin, "input": format!("prompt {PROMPT}")});
    let (status, run) = traced_post(&scene, &first.url("/v1/runs"), &key, STARTED_FROM, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let run = scene.settle(&first, &key, &id).await;
    assert_eq!(run["status"], "suspended", "{run}\n{}", first.log());
    stop(&mut first);
    let first_pass =
        receiver.wait_for_spans(Duration::from_secs(10), |s| !named(s, "invoke_agent mcp-probe").is_empty());
    assert_eq!(named(&first_pass, "invoke_agent mcp-probe").len(), 1, "{first_pass:#?}");

    // Another process approves it and runs the rest.
    let mut second = node(&scene, "b", &env);
    let shown = json!({"seq": run["approval"]["seq"], "args-hash": run["approval"]["args_hash"]});
    let url = second.url(&format!("/v1/runs/{id}/approve"));
    let (status, decided) = traced_post(&scene, &url, &key, APPROVED_FROM, shown).await;
    assert!(status.is_success(), "{decided}");
    let run = scene.finish(&second, &key, &id).await;
    assert_eq!(run["status"], "done", "{run}\n{}", second.log());
    stop(&mut second);
    let spans = receiver.wait_for_spans(Duration::from_secs(10), |s| named(s, "invoke_agent mcp-probe").len() == 2);

    // One trace, the caller's; each pass under the request that queued it.
    assert!(spans.iter().all(|s| s["trace_id"] == TRACE), "{spans:#?}");
    let passes = named(&spans, "invoke_agent mcp-probe");
    let (pass1, pass2) = (passes[0], passes[1]);
    let (pass1, pass2) =
        if pass1["start_ns"].as_u64() < pass2["start_ns"].as_u64() { (pass1, pass2) } else { (pass2, pass1) };
    assert_eq!(pass1["parent_span_id"], STARTED_FROM, "{pass1:#}");
    assert_eq!(pass2["parent_span_id"], APPROVED_FROM, "{pass2:#}");
    assert_eq!(attr(pass1, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(pass1, "gen_ai.agent.name"), "mcp-probe");
    // The resumed pass links to the first.
    let links: Vec<&Value> = pass2["links"].as_array().unwrap().iter().collect();
    assert!(links.iter().any(|l| l["span_id"] == pass1["span_id"] && l["trace_id"] == TRACE), "{pass2:#}");
    assert_eq!(pass1["resource"]["service.name"], "nexo-under-test");

    // Every span names the tenant, the run and the component.
    let tenant = attr(pass1, "nexo.tenant").clone();
    assert!(tenant.as_str().is_some_and(|t| !t.is_empty()), "{pass1:#}");
    for span in &spans {
        assert_eq!(attr(span, "nexo.tenant"), &tenant, "{span:#}");
        assert_eq!(attr(span, "nexo.run.id"), id.as_str(), "{span:#}");
        assert_eq!(attr(span, "nexo.component.digest").as_str().map(str::len), Some(64), "{span:#}");
    }

    // The model calls: two in the first pass, the last in the second (the
    // replay answers the first two from the journal, calling nothing).
    let chats = named(&spans, "chat test-model");
    assert_eq!(chats.len(), 3, "{spans:#?}");
    let under = |span: &Value, parent: &Value| span["parent_span_id"] == parent["span_id"];
    assert_eq!(chats.iter().filter(|c| under(c, pass1)).count(), 2);
    assert_eq!(chats.iter().filter(|c| under(c, pass2)).count(), 1);
    for chat in &chats {
        assert_eq!(chat["kind"], 3, "a client span: {chat:#}");
        assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(chat, "gen_ai.request.model"), "test-model");
        assert_eq!(attr(chat, "gen_ai.response.model"), "test-model");
        assert_eq!(attr(chat, "gen_ai.response.id"), "chatcmpl-mock", "the provider's id: {chat:#}");
        assert!(attr(chat, "gen_ai.provider.name").as_str().is_some_and(|p| !p.is_empty()), "{chat:#}");
        assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), 10);
        assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), 5);
        assert!(attr(chat, "gen_ai.response.finish_reasons").is_array(), "{chat:#}");
        assert!(attr(chat, "gen_ai.input.messages").is_null(), "no content: {chat:#}");
    }

    // The tool calls and their verdicts, with the MCP request under each.
    let echo = named(&spans, "execute_tool mcp__tests__echo");
    let live_echo: Vec<_> = echo.iter().filter(|s| attr(s, "nexo.replayed").is_null()).collect();
    assert_eq!(live_echo.len(), 1, "{echo:#?}");
    let echo = live_echo[0];
    assert!(under(echo, pass1));
    assert_eq!(attr(echo, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(echo, "gen_ai.tool.name"), "mcp__tests__echo");
    assert_eq!(attr(echo, "gen_ai.tool.call.id"), "c0");
    assert_eq!(attr(echo, "gen_ai.tool.type"), "function");
    assert_eq!(attr(echo, "nexo.tool.verdict"), "allowed");
    let mcp_calls = named(&spans, "tools/call echo");
    assert_eq!(mcp_calls.len(), 1, "{spans:#?}");
    assert!(under(mcp_calls[0], echo));
    assert_eq!(attr(mcp_calls[0], "mcp.method.name"), "tools/call");
    assert_eq!(attr(mcp_calls[0], "network.transport"), "tcp");
    let writes = named(&spans, "execute_tool write_file");
    let waited = writes.iter().find(|s| under(s, pass1)).expect("the call that waited");
    assert_eq!(attr(waited, "nexo.tool.verdict"), "approval-required");
    assert_eq!(attr(waited, "error.type"), "approval-required");
    assert_eq!(attr(waited, "gen_ai.tool.call.id"), "c1");
    let ran = writes.iter().find(|s| under(s, pass2)).expect("the approved call");
    assert_eq!(attr(ran, "nexo.tool.verdict"), "allowed");
    // The resumed pass's replay answers `echo` from the journal: marked,
    // and no MCP request.
    let replayed = named(&spans, "execute_tool mcp__tests__echo");
    assert!(replayed.iter().any(|s| under(s, pass2) && attr(s, "nexo.replayed") == true), "{replayed:#?}");

    // The wait: from the suspension to the resumed pass, under it, linked
    // to the pass that asked.
    let waits: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().unwrap().starts_with("await_approval ")).collect();
    assert_eq!(waits.len(), 1, "{spans:#?}");
    let wait = waits[0];
    assert!(under(wait, pass2), "{wait:#}");
    assert_eq!(attr(wait, "nexo.approval.decision"), "approved");
    assert!(wait["start_ns"].as_u64() < pass1["end_ns"].as_u64(), "it starts in the first pass: {wait:#}");
    assert!(wait["links"].as_array().unwrap().iter().any(|l| l["span_id"] == pass1["span_id"]), "{wait:#}");

    // The model server and the MCP server were called in the trace.
    let model_parents = model_headers(&scene, "traceparent");
    assert_eq!(model_parents.len(), 3, "each model call carried the trace: {model_parents:?}");
    assert!(model_parents.iter().all(|p| p.starts_with(&format!("00-{TRACE}-"))), "{model_parents:?}");
    let chat_ids: Vec<&str> = chats.iter().map(|c| c["span_id"].as_str().unwrap()).collect();
    assert!(model_parents.iter().all(|p| chat_ids.iter().any(|id| p.contains(id))), "{model_parents:?} {chat_ids:?}");
    // The tenant's tracestate went on cut to 512 bytes, as W3C says.
    let states = model_headers(&scene, "tracestate");
    let bounded = format!("vendor=kept,{},{}", long_member(0), long_member(1));
    assert_eq!(states, vec![bounded; 3], "the model server got the caller's tracestate, bounded");
    let mcp_parents = mcp.traceparents();
    assert_eq!(mcp_parents.len(), 1, "the tool call carried the trace: {mcp_parents:?}");
    let mcp_span = mcp_calls[0]["span_id"].as_str().unwrap();
    assert!(mcp_parents[0].contains(mcp_span), "the MCP server's parent is the call's span: {mcp_parents:?}");
    assert!(mcp_parents.iter().all(|p| p.starts_with(&format!("00-{TRACE}-"))), "{mcp_parents:?}");

    // Byte for byte: no secret and no content left the process.
    let raw = receiver.raw_bytes();
    assert!(contains(&raw, "invoke_agent mcp-probe"), "the check reads the real exports");
    for forbidden in [PROVIDER_KEY, MCP_TOKEN, PROMPT, TOOL_ARG, TOOL_RESULT] {
        assert!(!contains(&raw, forbidden), "`{forbidden}` was exported");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contents_are_exported_only_when_the_operator_opts_in_and_secrets_never() {
    let test = "contents_are_exported_only_when_the_operator_opts_in_and_secrets_never";
    let Some(receiver) = Receiver::start(test) else { return };
    let scene = Scene::new(None).await;
    let mcp = McpServer::start(scene.dir.path());
    // The table this time, not the variables.
    let table = format!("[telemetry]\nendpoint = \"{}\"\ncapture-content = true\n", receiver.endpoint());
    let key = setup(&scene, &mcp, "auto", &table).await;
    let mut node = node(&scene, "a", &[]);
    let plugin = upload(&scene, &node, &key).await;
    let body = json!({"plugin": plugin, "input": format!("prompt {PROMPT}")});
    let (status, run) = traced_post(&scene, &node.url("/v1/runs"), &key, STARTED_FROM, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let run = scene.settle(&node, &key, run["id"].as_str().unwrap()).await;
    assert_eq!(run["status"], "done", "{run}\n{}", node.log());
    stop(&mut node);
    let spans = receiver.wait_for_spans(Duration::from_secs(10), |s| !named(s, "invoke_agent mcp-probe").is_empty());
    let chats = named(&spans, "chat test-model");
    assert!(chats.iter().any(|c| attr(c, "gen_ai.input.messages").as_str().is_some_and(|m| m.contains(PROMPT))));
    let raw = receiver.raw_bytes();
    for wanted in [PROMPT, TOOL_ARG, TOOL_RESULT] {
        assert!(contains(&raw, wanted), "`{wanted}` was not exported although the operator opted in");
    }
    for secret in [PROVIDER_KEY, MCP_TOKEN] {
        assert!(!contains(&raw, secret), "the secret `{secret}` was exported");
    }
}
