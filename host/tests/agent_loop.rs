//! The host loop against the scripted provider: event order, the hard turn
//! cap, the token budget, denials, approvals and instruction order.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::{Arc, Mutex};

use nexo::agent_loop::{Event, HostLoop, Loop, LoopContext, LoopLimits, Outcome, Status};
use nexo::authority::Permissions;
use nexo::capability::model::Prompting;
use nexo::grant::Grant;
use nexo::host_call::ToolContext;
use nexo::manifest::{AgentManifest, Capability, PermissionMode};
use nexo::settings::{Providers, RunContext, RunOptions};
use nexo_model::scripted::Script;
use nexo_model::{Message, ScriptedProvider};
use nexo_sandbox::{LocalSandbox, Sandbox, VirtualSandbox};
use serde_json::json;

fn script(turns: serde_json::Value) -> ScriptedProvider {
    let script: Script = serde_json::from_value(json!({ "turns": turns })).unwrap();
    ScriptedProvider::new("test", script)
}

/// A run's tools as a real run prepares them, with its events recorded.
struct Toolbox {
    tools: Arc<ToolContext>,
    events: Arc<Mutex<Vec<Event>>>,
}

async fn prepared(manifest: &AgentManifest, options: RunOptions) -> Toolbox {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        move |e: &Event| events.lock().unwrap().push(e.clone())
    };
    let mut options = options;
    options.context.events = Some(Arc::new(sink));
    let tools = nexo::world::agent::prepare(manifest, &options, &[], &nexo::Limits::default()).await.unwrap().tools;
    Toolbox { tools, events }
}

async fn toolbox(sandbox: Arc<dyn Sandbox>, mode: PermissionMode, caps: &[Capability]) -> Toolbox {
    let manifest = AgentManifest { name: "test-agent".into(), capabilities: caps.to_vec(), ..AgentManifest::default() };
    let options = RunOptions {
        permissions: Permissions::new(mode),
        grant: Grant::of(Capability::ALL),
        providers: Providers { sandbox: Some(sandbox), ..Providers::default() },
        ..RunOptions::default()
    };
    prepared(&manifest, options).await
}

async fn run(
    provider: &dyn nexo_model::Provider,
    tb: &Toolbox,
    limits: LoopLimits,
    instructions: &[String],
) -> (Outcome, Vec<Event>) {
    let ctx =
        LoopContext { provider: Some(provider), tools: &tb.tools, instructions, history: &[], limits, spend: None };
    let outcome = HostLoop.run(ctx, "go").await.unwrap();
    let events = tb.events.lock().unwrap().clone();
    (outcome, events)
}

async fn offered(tb: &Toolbox) -> Vec<String> {
    tb.tools.specs().await.into_iter().map(|t| t.name).collect()
}

/// The instructions a run's prompts get.
fn instructions(tb: &Toolbox) -> Vec<String> {
    tb.tools.state::<Prompting>().unwrap().instructions.clone()
}

fn names(events: &[Event]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match e {
            Event::TurnStarted { .. } => "turn",
            Event::Waiting { .. } => "waiting",
            Event::TextDelta { .. } => "delta",
            Event::ToolCall { .. } => "call",
            Event::ToolResult { .. } => "result",
            Event::Hook { .. } => "hook",
            Event::Done { .. } => "done",
        })
        .collect()
}

#[tokio::test]
async fn events_come_in_order_and_tool_results_reach_the_model() {
    let vfs = Arc::new(VirtualSandbox::with_files([("a.txt", "alpha")]).unwrap());
    let tb = toolbox(vfs, PermissionMode::ReadOnly, &[Capability::Read, Capability::Glob]).await;
    let provider = script(json!([
        { "tool_calls": [{ "name": "read_file", "arguments": { "path": "a.txt" } }] },
        { "text": "It says alpha." }
    ]));
    let limits = LoopLimits { stream: true, ..LoopLimits::default() };
    let (outcome, events) = run(&provider, &tb, limits, &["Be brief.".into()]).await;
    assert_eq!(outcome.status, Status::Completed);
    assert_eq!(outcome.text, "It says alpha.");
    assert_eq!(outcome.turns, 2);
    assert_eq!(names(&events), ["turn", "call", "result", "turn", "delta", "done"]);
    let Message::ToolResult { content, is_error, .. } = &outcome.transcript[3] else {
        panic!("{:?}", outcome.transcript)
    };
    assert_eq!((content.as_str(), *is_error), ("alpha", false));
}

/// A model that answers "done" after `.0`.
struct Slow(std::time::Duration);

impl nexo_model::Provider for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn model(&self) -> &str {
        "slow-1"
    }
    fn complete<'a>(
        &'a self,
        _: &'a nexo_model::Request,
        _: Option<nexo_model::DeltaSink<'a>>,
    ) -> nexo_model::BoxFuture<'a, Result<nexo_model::Response, nexo_model::ModelError>> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(nexo_model::Response {
                text: "done".into(),
                tool_calls: vec![],
                stop: nexo_model::StopReason::EndTurn,
                usage: nexo_model::Usage::default(),
                answered: Default::default(),
            })
        })
    }
}

/// A slow model is said to be working every 15 s of its turn, in the
/// events (`--json` off a terminal shows them), and not once it answered.
#[tokio::test(start_paused = true)]
async fn a_slow_turn_is_said_to_be_working_every_fifteen_seconds() {
    let tb = toolbox(Arc::new(VirtualSandbox::new()), PermissionMode::ReadOnly, &[]).await;
    let (outcome, events) = run(&Slow(std::time::Duration::from_secs(40)), &tb, LoopLimits::default(), &[]).await;
    assert_eq!(outcome.text, "done");
    let waited: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Waiting { turn, seconds } => Some((*turn, *seconds)),
            _ => None,
        })
        .collect();
    assert_eq!(waited, [(1, 15), (1, 30)]);
    assert_eq!(names(&events), ["turn", "waiting", "waiting", "done"]);
    assert_eq!(serde_json::to_value(&events[1]).unwrap(), json!({"event": "waiting", "turn": 1, "seconds": 15}));
}

#[tokio::test]
async fn the_turn_cap_is_hard() {
    let tb = toolbox(Arc::new(VirtualSandbox::new()), PermissionMode::ReadOnly, &[Capability::Glob]).await;
    // A model that would call tools forever.
    let forever: Vec<_> =
        (0..10).map(|_| json!({ "tool_calls": [{ "name": "glob", "arguments": { "pattern": "*" } }] })).collect();
    let provider = script(json!(forever));
    let limits = LoopLimits { max_turns: 3, ..LoopLimits::default() };
    let (outcome, events) = run(&provider, &tb, limits, &[]).await;
    assert_eq!(outcome.status, Status::TurnLimit);
    assert_eq!(outcome.turns, 3);
    // Tools ran for two turns; the third turn's calls were not run.
    assert_eq!(events.iter().filter(|e| matches!(e, Event::ToolResult { .. })).count(), 2);
    let Some(Message::ToolResult { content, is_error: true, .. }) = outcome.transcript.last() else { panic!() };
    assert_eq!(content, "error: not run: turn limit reached");
    assert!(matches!(events.last(), Some(Event::Done { status: Status::TurnLimit, turns: 3, .. })));
}

#[tokio::test]
async fn the_token_budget_stops_the_loop() {
    let tb = toolbox(Arc::new(VirtualSandbox::new()), PermissionMode::ReadOnly, &[Capability::Glob]).await;
    let many: Vec<_> = (0..10)
        .map(
            |_| json!({ "text": "x".repeat(400), "tool_calls": [{ "name": "glob", "arguments": { "pattern": "*" } }] }),
        )
        .collect();
    let provider = script(json!(many));
    let limits = LoopLimits { token_budget: Some(300), ..LoopLimits::default() };
    let (outcome, _) = run(&provider, &tb, limits, &[]).await;
    assert_eq!(outcome.status, Status::TokenBudget);
    assert!(outcome.turns < 10);
    assert!(outcome.usage.input_tokens + outcome.usage.output_tokens > 300);
}

#[tokio::test]
async fn a_denied_tool_is_an_error_the_model_sees_and_the_loop_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // Read-only offers only what a call could pass: reading and listing.
    let strict =
        toolbox(Arc::new(LocalSandbox::open(dir.path()).unwrap()), PermissionMode::ReadOnly, &Capability::ALL).await;
    assert_eq!(offered(&strict).await, ["read_file", "glob"]);
    // Ask mode offers what it would ask about; with nobody to ask, each call is denied, saying so.
    let tb = toolbox(Arc::new(LocalSandbox::open(dir.path()).unwrap()), PermissionMode::Ask, &Capability::ALL).await;
    assert_eq!(offered(&tb).await, ["read_file", "glob", "write_file", "shell"]);
    let provider = script(json!([
        { "tool_calls": [
            { "name": "write_file", "arguments": { "path": "x.txt", "content": "x" } },
            { "name": "no_such_tool", "arguments": {} },
            { "name": "read_file", "arguments": {} }
        ] },
        { "text": "I could not write." }
    ]));
    let (outcome, events) = run(&provider, &tb, LoopLimits::default(), &[]).await;
    assert_eq!(outcome.status, Status::Completed);
    assert!(!dir.path().join("x.txt").exists());
    let results: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { name, verdict, .. } => Some((name.as_str(), verdict.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results, [("write_file", "denied"), ("no_such_tool", "invalid-input"), ("read_file", "invalid-input")]);
    let errors: Vec<&str> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, is_error: true, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    // The fix in the settings' words: these options are no command line's.
    assert!(
        errors[0].contains("no terminal was available to ask on")
            && errors[0].contains("choose the mode `approve`")
            && !errors[0].contains("--"),
        "{errors:?}"
    );
    assert!(errors[1].contains("there is no tool `no_such_tool`"), "{errors:?}");
    assert!(errors[2].contains("needs a string argument `path`"), "{errors:?}");
}

#[tokio::test]
async fn an_action_needing_approval_stops_the_run_with_its_own_status() {
    let dir = tempfile::tempdir().unwrap();
    let tb =
        toolbox(Arc::new(LocalSandbox::open(dir.path()).unwrap()), PermissionMode::Approve, &Capability::ALL).await;
    let provider = script(json!([
        { "tool_calls": [{ "name": "shell", "arguments": { "command": "touch made" } }] },
        { "text": "never reached" }
    ]));
    let (outcome, _) = run(&provider, &tb, LoopLimits::default(), &[]).await;
    match &outcome.status {
        Status::ApprovalRequired { tool, detail } => {
            assert_eq!(tool, "shell");
            assert!(detail.contains("touch made"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join("made").exists());
}

#[tokio::test]
async fn instructions_come_in_order_and_tools_match_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn Sandbox> = Arc::new(LocalSandbox::open(dir.path()).unwrap());
    let tb = toolbox(local.clone(), PermissionMode::Auto, &Capability::ALL).await;
    let provider = script(json!([{ "text": "done" }]));
    let instructions = vec!["AGENT".to_string(), local.instructions(true).unwrap(), "SKILL".to_string()];
    let (outcome, _) = run(&provider, &tb, LoopLimits::default(), &instructions).await;
    let Message::System { text } = &outcome.transcript[0] else { panic!() };
    let (a, s, k) = (text.find("AGENT").unwrap(), text.find("host machine").unwrap(), text.find("SKILL").unwrap());
    assert!(a < s && s < k, "{text}");
    // Fetch and search wait for their configuration; shell is offered only where it can run.
    assert_eq!(offered(&tb).await, ["read_file", "glob", "write_file", "shell"]);
    let virt = toolbox(Arc::new(VirtualSandbox::new()), PermissionMode::Auto, &Capability::ALL).await;
    assert_eq!(offered(&virt).await, ["read_file", "glob", "write_file"]);
}

#[tokio::test]
async fn skills_come_last_in_the_instructions() {
    let dir = tempfile::tempdir().unwrap();
    nexo_skills::scaffold(&dir.path().join("skills"), "triage").unwrap();
    let manifest = nexo::manifest::AgentManifest {
        name: "a".into(),
        description: "d".into(),
        instructions: "AGENT".into(),
        skills: vec!["triage".into()],
        ..Default::default()
    };
    let local: Arc<dyn Sandbox> = Arc::new(LocalSandbox::open(dir.path()).unwrap());
    let options = RunOptions {
        skills_path: Some(dir.path().join("skills")),
        providers: Providers { sandbox: Some(local.clone()), ..Providers::default() },
        ..Default::default()
    };
    let p = instructions(&prepared(&manifest, options.clone()).await);
    assert_eq!(p.len(), 3);
    // The agent requests no shell: the sandbox's description speaks of none.
    assert_eq!((p[0].as_str(), p[1].as_str()), ("AGENT", local.instructions(false).unwrap().as_str()));
    assert!(!p[1].to_lowercase().contains("shell"), "{}", p[1]);
    let shelled = nexo::manifest::AgentManifest { capabilities: vec![Capability::Shell], ..manifest.clone() };
    let granted = RunOptions {
        grant: nexo::grant::Grant::of([Capability::Shell]),
        permissions: nexo::authority::Permissions::new(PermissionMode::Auto),
        ..options.clone()
    };
    let p = instructions(&prepared(&shelled, granted).await);
    assert!(p[1].contains("Shell commands"), "{}", p[1]);
    assert!(p[2].starts_with("# Skill: triage"), "{}", p[2]);
    let missing = nexo::manifest::AgentManifest { skills: vec!["nope".into()], ..manifest };
    let err = nexo::capability::skills::resolve(&missing, &options).await.err().unwrap();
    assert!(err.to_string().contains("nope/SKILL.md does not exist"), "{err}");
}

#[tokio::test]
async fn progressive_skills_offer_names_and_load_bodies_on_activation() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(skills.join("triage")).unwrap();
    std::fs::write(
        skills.join("triage/SKILL.md"),
        "---\nname: triage\ndescription: Rank issues by severity.\n---\nSECRET-BODY: rank high, medium, low.\n",
    )
    .unwrap();
    let manifest = nexo::manifest::AgentManifest {
        name: "a".into(),
        description: "d".into(),
        instructions: "AGENT".into(),
        skills: vec!["triage".into()],
        ..Default::default()
    };
    let options = RunOptions {
        skills_path: Some(skills),
        skill_mode: nexo::settings::SkillMode::Progressive,
        ..Default::default()
    };
    let manifest = AgentManifest { capabilities: vec![Capability::Read], ..manifest };
    let tb = prepared(&manifest, options).await;
    let p = instructions(&tb);
    let system = p.join("\n");
    assert!(system.contains("- triage: Rank issues by severity."), "{system}");
    assert!(!system.contains("SECRET-BODY"), "only the name and description go up front");
    assert_eq!(offered(&tb).await, ["read_file", "activate_skill"]);

    let provider = script(json!([
        { "tool_calls": [{ "name": "activate_skill", "arguments": { "name": "triage" } },
                         { "name": "activate_skill", "arguments": { "name": "nope" } }] },
        { "text": "ranked" }
    ]));
    let ctx = LoopContext {
        provider: Some(&provider),
        tools: &tb.tools,
        instructions: &p,
        history: &[],
        limits: LoopLimits::default(),
        spend: None,
    };
    let outcome = HostLoop.run(ctx, "triage this").await.unwrap();
    let results: Vec<(&str, bool)> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, is_error, .. } => Some((content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("SECRET-BODY: rank high, medium, low.", false));
    assert!(results[1].1 && results[1].0.contains("there is no skill `nope`"), "{results:?}");
}

#[tokio::test]
async fn a_cut_glob_tells_the_model_it_was_cut() {
    let vfs = VirtualSandbox::new();
    for i in 0..=nexo_sandbox::MAX_GLOB_MATCHES {
        vfs.write(&format!("f{i:04}.txt"), "").unwrap();
    }
    let tb = toolbox(Arc::new(vfs), PermissionMode::ReadOnly, &[Capability::Glob]).await;
    let provider = script(json!([
        { "tool_calls": [{ "name": "glob", "arguments": { "pattern": "*.txt" } }] },
        { "tool_calls": [{ "name": "glob", "arguments": { "pattern": "f000*.txt" } }] },
        { "text": "done" }
    ]));
    let (outcome, _) = run(&provider, &tb, LoopLimits::default(), &[]).await;
    let results: Vec<&str> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let lines: Vec<&str> = results[0].lines().collect();
    assert_eq!(lines.len(), nexo_sandbox::MAX_GLOB_MATCHES + 1, "{:?}", &lines[lines.len() - 2..]);
    assert_eq!(lines[999], "f0999.txt");
    assert_eq!(lines[1000], "(first 1000 matches shown; more exist: narrow the pattern)");
    // A whole list says nothing more.
    assert_eq!(results[1], (0..10).map(|i| format!("f000{i}.txt")).collect::<Vec<_>>().join("\n"));
}

#[tokio::test]
async fn a_skill_with_an_over_long_description_loads_and_is_cut_in_the_listing() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills/tests/fixtures/long-description");
    let manifest = nexo::manifest::AgentManifest {
        name: "a".into(),
        description: "d".into(),
        skills: vec!["api-guide".into()],
        ..Default::default()
    };
    let options = RunOptions {
        skills_path: Some(fixtures),
        skill_mode: nexo::settings::SkillMode::Progressive,
        ..Default::default()
    };
    let skills = nexo::capability::skills::resolve(&manifest, &options).await.unwrap();
    assert_eq!(skills[0].description.chars().count(), nexo_skills::MAX_DESCRIPTION_LEN);
    assert!(skills[0].description.ends_with('…'));
    let p = instructions(&prepared(&manifest, options).await);
    assert!(p.join("\n").contains("- api-guide: Guides work with a hosted model API"));
}

/// A capability unit of the test's own: one module's worth of code and one
/// registration (the `extra` units of `prepare`). Its tool goes through the
/// same host-call path as the built-in ones: events, the gate, truncation.
mod echo_unit {
    use nexo::error::ToolError;
    use nexo::host_call::{DynTool, HostCall, Tool, ToolContext, string_arg};
    use nexo::manifest::Capability;
    use nexo::unit::{Setup, Step, Unit};
    use nexo_model::{BoxFuture, ToolSpec};

    pub struct EchoUnit;

    /// The unit's per-instance state: a prefix the operator chose.
    struct Prefix(String);

    impl Unit for EchoUnit {
        fn name(&self) -> &'static str {
            "echo"
        }
        fn tools(&self) -> &'static [&'static dyn DynTool] {
            &[&Echo]
        }
        fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
            setup.state.insert(Prefix(format!("{} says", setup.manifest.name)));
            Step::ready(Ok(()))
        }
    }

    /// `echo`: needs `read`, so the gate decides like for any tool.
    struct Echo;

    impl HostCall for Echo {
        type Args = String;
        type Output = String;
        type Error = ToolError;
        fn name(&self) -> &'static str {
            "echo"
        }
        fn capability(&self) -> Option<Capability> {
            Some(Capability::Read)
        }
        fn detail<'a>(&self, text: &'a String) -> std::borrow::Cow<'a, str> {
            text.into()
        }
        fn execute<'a>(&'a self, cx: &'a ToolContext, text: String) -> BoxFuture<'a, Result<String, ToolError>> {
            Box::pin(async move { Ok(format!("{} {text}", cx.state::<Prefix>()?.0)) })
        }
        fn truncate(&self, _cx: &ToolContext, out: String) -> String {
            nexo::truncate::head_chars(&out, 20)
        }
    }

    impl Tool for Echo {
        fn model_name(&self) -> &'static str {
            "echo"
        }
        fn spec(&self, _cx: &ToolContext) -> ToolSpec {
            ToolSpec { name: "echo".into(), description: "Echo a text".into(), parameters: serde_json::json!({}) }
        }
        fn decode(&self, arguments: &serde_json::Value) -> Result<String, ToolError> {
            Ok(string_arg("echo", arguments, "text")?.to_string())
        }
        fn render(&self, out: &String) -> String {
            out.clone()
        }
    }
}

#[tokio::test]
async fn a_unit_added_by_the_embedder_serves_tools_through_the_same_path() {
    let manifest = AgentManifest { name: "parrot".into(), capabilities: vec![Capability::Read], ..Default::default() };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        move |e: &Event| events.lock().unwrap().push(e.clone())
    };
    let unit: Arc<dyn nexo::unit::Unit> = Arc::new(echo_unit::EchoUnit);
    let run = |permissions: Permissions| {
        let options = RunOptions {
            permissions,
            grant: Grant::default(),
            providers: Providers { sandbox: Some(Arc::new(VirtualSandbox::new())), ..Providers::default() },
            context: RunContext { events: Some(Arc::new(sink.clone())), ..RunContext::default() },
            ..RunOptions::default()
        };
        let (manifest, unit) = (manifest.clone(), unit.clone());
        async move {
            nexo::world::agent::prepare(&manifest, &options, &[unit], &nexo::Limits::default()).await.unwrap().tools
        }
    };
    let tools = run(Permissions::new(PermissionMode::ReadOnly)).await;
    let offered: Vec<String> = tools.specs().await.into_iter().map(|t| t.name).collect();
    assert_eq!(offered, ["read_file", "echo"]);
    let provider = script(json!([
        { "tool_calls": [{ "name": "echo", "arguments": { "text": "hello there, general" } }] },
        { "text": "done" }
    ]));
    let ctx = LoopContext {
        provider: Some(&provider),
        tools: &tools,
        instructions: &[],
        history: &[],
        limits: LoopLimits::default(),
        spend: None,
    };
    let outcome = HostLoop.run(ctx, "go").await.unwrap();
    let Message::ToolResult { content, is_error: false, .. } = &outcome.transcript[2] else {
        panic!("{:?}", outcome.transcript)
    };
    // Executed with the unit's own state, then cut by its truncate step.
    assert_eq!(content, "parrot says hello t…");
    let seen = names(&events.lock().unwrap());
    assert_eq!(seen, ["turn", "call", "result", "turn", "done"]);
    // The gate decides for it as for any tool: read is not allowed without read-only's allow list.
    let strict = run(Permissions::new(PermissionMode::ReadOnly).with_allow([])).await;
    let provider = script(json!([
        { "tool_calls": [{ "name": "echo", "arguments": { "text": "x" } }] },
        { "text": "done" }
    ]));
    let ctx = LoopContext {
        provider: Some(&provider),
        tools: &strict,
        instructions: &[],
        history: &[],
        limits: LoopLimits::default(),
        spend: None,
    };
    let outcome = HostLoop.run(ctx, "go").await.unwrap();
    // A tool every call of which the gate refuses is not offered at all.
    assert!(strict.specs().await.iter().all(|t| t.name != "echo"));
    let Message::ToolResult { content, is_error: true, .. } = &outcome.transcript[2] else { panic!() };
    assert!(content.starts_with("error: there is no tool `echo`"), "{content}");
}
