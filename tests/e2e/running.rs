//! Running agents, skills and search backends.

use std::collections::BTreeMap;

use nexo::egress::EgressGrant;
use nexo::instance::Preopen;
use nexo::settings::{Providers, RunContext, RunLimits, RunOptions};
use nexo::{Plugin, RunError};
use nexo_tests as built;

use crate::engine;

#[tokio::test]
async fn a_custom_run_answers() {
    let plugin = Plugin::load(engine(), built::TEXT_STATS).await.unwrap();
    let answer = plugin.run_agent("alpha beta\ngamma delta epsilon", &RunOptions::default()).await.unwrap();
    assert_eq!(answer, "lines: 2\nwords: 5\ncharacters: 30\nlongest word: epsilon");
    // The agent's own failure is reported as such, with its reason.
    match plugin.run_agent("   ", &RunOptions::default()).await {
        Err(RunError::AgentFailed { plugin, reason }) => {
            assert_eq!(plugin, "text-stats");
            assert!(reason.contains("input is empty"), "{reason}");
        }
        other => panic!("expected AgentFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn the_default_run_prompts_the_model_and_reports_that_none_is_configured() {
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    // No model is the operator's configuration error, not the agent's failure.
    match plugin.run_agent("What is in README.md?", &RunOptions::default()).await {
        Err(RunError::Config(nexo::ConfigError::Invalid { problem, .. })) => {
            assert!(problem.starts_with("`hello` prompts a model, and none is configured"), "{problem}");
            assert!(problem.contains("pass --model"), "the fix is named: {problem}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

/// The probe's report, as a map from tool to outcome.
fn outcomes(report: &str) -> std::collections::BTreeMap<String, String> {
    report
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(tool, outcome)| (tool.to_string(), outcome.to_string()))
        .collect()
}

#[tokio::test]
async fn by_default_tools_act_in_memory_and_everything_beyond_reading_is_refused() {
    let plugin = Plugin::load(engine(), built::TOOL_PROBE).await.unwrap();
    // Defaults: the in-memory sandbox, read-only, a grant of read and glob.
    // The probe asks for read, glob, write and shell, not fetch or search.
    let report = plugin.run_agent("README.md", &RunOptions::default()).await.unwrap();
    let o = outcomes(&report);
    assert!(o["read-file"].starts_with("other: ToolError::NotFound"), "{report}");
    assert_eq!(o["glob"], "ok", "{report}");
    // Requested but not granted: the refusal names the operator's setting,
    // in words with no flag (a tenant of `nexo serve` reads them too).
    for (tool, cap) in [("write-file", "write"), ("shell", "shell")] {
        assert!(o[tool].starts_with("denied: "), "{tool}: {report}");
        assert!(
            o[tool].contains(&format!("the operator did not grant it; grant it with `{cap}` in the grant's `allow`")),
            "{tool}: {report}"
        );
        assert!(!o[tool].contains("--"), "{tool}: {report}");
    }
    // A front end with flags has its operator read the flag.
    let permissions = nexo::authority::Permissions::default().with_vocabulary(nexo::hint::Vocabulary::Flags);
    let report = plugin.run_agent("README.md", &RunOptions { permissions, ..RunOptions::default() }).await.unwrap();
    let o = outcomes(&report);
    for (tool, cap) in [("write-file", "write"), ("shell", "shell")] {
        assert!(
            o[tool].contains(&format!("the operator did not grant it; grant it with `--allow {cap}`")),
            "{tool}: {report}"
        );
    }
    // Not requested: only the plugin's author can change that.
    for tool in ["fetch", "web-search"] {
        assert!(o[tool].starts_with("denied: "), "{tool}: {report}");
        assert!(o[tool].contains("which `tool-probe` does not request"), "{tool}: {report}");
    }
    assert!(o["prompt"].starts_with("ModelError::NotConfigured"), "{report}");
}

#[tokio::test]
async fn a_custom_run_prompts_several_times_and_calls_tools_through_the_same_gate() {
    let plugin = Plugin::load(engine(), built::TOOL_PROBE).await.unwrap();
    let audit = std::sync::Arc::new(Audit::default());
    let options = RunOptions {
        providers: Providers {
            model: Some(scripted(serde_json::json!([
                { "tool_calls": [{ "name": "write_file", "arguments": { "path": "x", "content": "y" } }] },
                { "text": "first" },
                { "text": "second" }
            ]))),
            ..Providers::default()
        },
        context: RunContext { audit: Some(audit.clone()), ..RunContext::default() },
        ..RunOptions::default()
    };
    let mut instance = plugin.instantiate_agent(&options).await.unwrap();
    let run = instance.run("README.md").await.unwrap();
    let o = outcomes(&run.answer);
    // Direct calls and the model's calls meet the same gate: write is not granted either way.
    assert!(o["write-file"].starts_with("denied: "), "{o:?}");
    assert_eq!(o["prompt"], "ok first");
    assert_eq!(o["prompt-again"], "ok second");
    let outcome = run.last_prompt.unwrap();
    assert_eq!(outcome.turns, 1);
    // The gate's decisions reach the audit sink, without arguments.
    let uses = audit.0.lock().unwrap().clone();
    let writes: Vec<(&str, Option<&str>, &str)> =
        uses.iter().filter(|u| u.call == "write-file").map(|u| (u.origin, u.tool.as_deref(), u.verdict)).collect();
    // The model was never offered write_file (write is not granted), so its
    // call ended as an unknown tool before any gate: not a capability use.
    assert_eq!(writes, [("guest", None, "denied")], "{uses:?}");
    assert!(uses.iter().any(|u| (u.call, u.origin, u.verdict) == ("read-file", "guest", "allowed")), "{uses:?}");
    assert!(!format!("{uses:?}").contains("README.md"), "no arguments in the audit: {uses:?}");
}

/// Collects what the gate decided.
#[derive(Default)]
struct Audit(std::sync::Mutex<Vec<nexo::host_call::CapabilityUse>>);

impl nexo::host_call::AuditSink for Audit {
    fn record(&self, used: nexo::host_call::CapabilityUse) {
        self.0.lock().unwrap().push(used);
    }
}

#[tokio::test]
async fn granted_tools_act_in_a_local_sandbox_and_the_mode_still_applies() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# hello").unwrap();
    let plugin = Plugin::load(engine(), built::TOOL_PROBE).await.unwrap();
    let sandbox = std::sync::Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap());
    let grant = nexo::grant::Grant::of(nexo::manifest::Capability::ALL);

    // read-only: the grant covers write, but the mode refuses it.
    let options = RunOptions {
        grant: grant.clone(),
        providers: Providers { sandbox: Some(sandbox.clone()), ..Providers::default() },
        ..RunOptions::default()
    };
    let o = outcomes(&plugin.run_agent("README.md", &options).await.unwrap());
    assert_eq!(o["read-file"], "ok");
    assert!(o["write-file"].contains("read-only mode"), "{o:?}");
    assert!(!dir.path().join("out.txt").exists());

    // auto: the write lands in the sandbox directory.
    let options = RunOptions {
        grant,
        permissions: nexo::authority::Permissions::new(nexo::manifest::PermissionMode::Auto),
        providers: Providers { sandbox: Some(sandbox), ..Providers::default() },
        ..RunOptions::default()
    };
    let o = outcomes(&plugin.run_agent("README.md", &options).await.unwrap());
    assert_eq!(o["write-file"], "ok", "{o:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "x");
    // The shell ran, confined, in the sandbox directory.
    assert_eq!(o["shell"], "ok", "{o:?}");
    // fetch is gated by its own request: the probe lists hosts but does not ask for the capability.
    assert!(o["fetch"].starts_with("denied: "), "{o:?}");
}

#[tokio::test]
async fn a_skill_component_hands_over_its_instructions_and_resources() {
    let plugin = Plugin::load(engine(), built::CODE_REVIEW).await.unwrap();
    let skill = plugin.skill().unwrap();
    let body = skill.instructions().await.unwrap();
    assert!(body.starts_with("# Code review"), "{body}");
    assert!(!body.contains("name: code-review"), "the frontmatter is not part of the body");
    let severity = skill.resource("references/severity.md").await.unwrap().unwrap();
    assert!(severity.contains("**high**"));
    assert_eq!(skill.resource("references/missing.md").await.unwrap(), None);
    assert_eq!(skill.resource("../../etc/passwd").await.unwrap(), None);
}

#[tokio::test]
async fn a_search_backend_gets_no_network_it_was_not_granted() {
    let backend = Plugin::load(engine(), built::SEARXNG).await.unwrap();
    // Without its setting, it says what is missing.
    match backend.search("rust wasm", None, &EgressGrant::default()).await {
        Err(RunError::SearchFailed { reason, .. }) => assert!(reason.contains("base-url"), "{reason}"),
        other => panic!("expected SearchFailed, got {other:?}"),
    }
    // With it, its request reaches the host, which refuses it: no hosts granted.
    let grant = EgressGrant {
        settings: BTreeMap::from([("base-url".to_string(), "http://127.0.0.1:9".to_string())]),
        ..EgressGrant::default()
    };
    match backend.search("rust wasm", Some("en"), &grant).await {
        Err(RunError::SearchFailed { plugin, reason }) => {
            assert_eq!(plugin, "searxng");
            assert!(reason.contains("refused by the host"), "{reason}");
            assert!(reason.contains("no hosts are granted"), "{reason}");
        }
        other => panic!("expected SearchFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn wasi_file_access_is_confined_to_the_preopen() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("inside.txt"), "visible").unwrap();
    std::fs::write(root.path().join("secret.txt"), "hidden").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.path().join("secret.txt"), work.join("link.txt")).unwrap();
    let plugin = Plugin::load(engine(), built::ESCAPE).await.unwrap();
    let probes = "/workspace/inside.txt\n/workspace/../secret.txt\n/workspace/link.txt\n../secret.txt\n/etc/passwd\n";

    let options = RunOptions {
        preopens: vec![Preopen { host: work.clone(), guest: "/workspace".into(), writable: false }],
        ..RunOptions::default()
    };
    let report = plugin.run_agent(probes, &options).await.unwrap();
    let outcome = |path: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{path}\t")))
            .unwrap_or_else(|| panic!("no line for {path} in {report}"))
            .to_string()
    };
    assert_eq!(outcome("/workspace/inside.txt"), "ok visible");
    for escape in ["/workspace/../secret.txt", "/workspace/link.txt", "../secret.txt", "/etc/passwd"] {
        let o = outcome(escape);
        assert!(o.starts_with("err "), "{escape} must fail, got {o}");
        assert!(!o.contains("hidden"), "{escape} leaked the secret");
    }

    // With no preopen at all, even the workspace is invisible.
    let report = plugin.run_agent("/workspace/inside.txt\n", &RunOptions::default()).await.unwrap();
    assert!(report.contains("/workspace/inside.txt\terr "), "{report}");
}

#[tokio::test]
async fn wasi_grants_follow_the_operators_grant() {
    use nexo::authority::Permissions;
    use nexo::grant::Grant;
    use nexo::manifest::{Capability, PermissionMode};

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# readme").unwrap();
    let sandbox = std::sync::Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap());
    let root = sandbox.root().display().to_string();
    // Something to connect to, so a refused connection is the host's doing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probes = format!(
        "read:{root}/README.md\nwrite:{root}/planted.txt\ntcp:127.0.0.1:{port}\ndns:localhost\nenv:\nprint:hi\n"
    );
    let plugin = Plugin::load(engine(), built::ESCAPE).await.unwrap();
    let run = |options: RunOptions| {
        let plugin = plugin.clone();
        let probes = probes.clone();
        async move {
            let report = plugin.run_agent(&probes, &options).await.unwrap();
            report
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .map(|(probe, outcome)| (probe.split(':').next().unwrap().to_string(), outcome.to_string()))
                .collect::<BTreeMap<String, String>>()
        }
    };
    let local = |grant: Grant, mode: PermissionMode| RunOptions {
        grant,
        permissions: Permissions::new(mode),
        providers: Providers { sandbox: Some(sandbox.clone()), ..Providers::default() },
        ..RunOptions::default()
    };

    // Read granted, write not: the directory is there, read-only.
    let o = run(local(Grant::default(), PermissionMode::Auto)).await;
    assert_eq!(o["read"], "ok # readme");
    assert!(o["write"].starts_with("err "), "{o:?}");
    assert!(!dir.path().join("planted.txt").exists());
    // No sockets, no name lookups, no environment, whatever the grant.
    assert!(o["tcp"].starts_with("err "), "{o:?}");
    assert!(o["dns"].starts_with("err "), "{o:?}");
    assert_eq!(o["env"], "ok");
    assert_eq!(o["print"], "ok");

    // Write granted but the mode would ask: WASI writes cannot be asked about, so still read-only.
    let o = run(local(Grant::of([Capability::Read, Capability::Write]), PermissionMode::Ask)).await;
    assert!(o["write"].starts_with("err "), "{o:?}");
    assert!(!dir.path().join("planted.txt").exists());

    // Write granted and auto: the component may write.
    let o = run(local(Grant::of([Capability::Read, Capability::Write]), PermissionMode::Auto)).await;
    assert_eq!(o["write"], "ok", "{o:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("planted.txt")).unwrap(), "written by the plugin");

    // The virtual sandbox preopens nothing.
    let o = run(RunOptions { grant: Grant::of(Capability::ALL), ..RunOptions::default() }).await;
    assert!(o["read"].starts_with("err "), "{o:?}");

    // The environment is exactly what the operator passes.
    let o = run(RunOptions { env: vec![("GREETING".into(), "hi".into())], ..RunOptions::default() }).await;
    assert_eq!(o["env"], "ok GREETING");
    drop(listener);
}

/// Runs a `declares-*` probe (or `cautious`) in a fresh local sandbox with
/// `write` granted, and returns its answer and whether each write landed.
async fn probe(plugin: &str, permissions: nexo::authority::Permissions) -> (String, bool, bool) {
    use nexo::grant::Grant;
    use nexo::manifest::Capability;

    let dir = tempfile::tempdir().unwrap();
    let sandbox = std::sync::Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap());
    let root = sandbox.root().to_path_buf();
    let plugin = Plugin::load(engine(), plugin).await.unwrap();
    let options = RunOptions {
        grant: Grant::of([Capability::Read, Capability::Write]),
        permissions,
        providers: Providers { sandbox: Some(sandbox), ..Providers::default() },
        ..RunOptions::default()
    };
    let answer = plugin.run_agent(&root.display().to_string(), &options).await.unwrap();
    (answer, root.join("tool.txt").exists(), root.join("wasi.txt").exists())
}

#[tokio::test]
async fn a_plugin_that_declares_read_only_cannot_write_through_wasi() {
    use nexo::authority::Permissions;
    use nexo::manifest::PermissionMode;

    let plugin = Plugin::load(engine(), built::CAUTIOUS).await.unwrap();
    assert_eq!(plugin.manifest().unwrap().permissions, Some(PermissionMode::ReadOnly));
    // The operator grants write and runs in auto; the plugin's own read-only narrows that.
    let (answer, tool, wasi) = probe(built::CAUTIOUS, Permissions::new(PermissionMode::Auto)).await;
    assert!(answer.contains("wasi: refused: "), "{answer}");
    assert!(!wasi, "a plugin that declared read-only wrote through its preopen");
    assert!(answer.starts_with("tool: ToolError::Denied(") && !tool, "{answer}");
}

#[tokio::test]
async fn each_declared_mode_narrows_the_gate_and_the_preopen_alike() {
    use nexo::authority::Permissions;
    use nexo::manifest::PermissionMode::{self, *};

    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let yes = {
        let asked = asked.clone();
        move || {
            let asked = asked.clone();
            Permissions::new(Ask).on_ask(move |cap, _| {
                asked.lock().unwrap().push(cap);
                true
            })
        }
    };
    // (plugin, its declared mode, the operator's permissions) →
    // (the tool's outcome, whether the tool wrote, whether WASI wrote)
    let cases: Vec<(&str, PermissionMode, Permissions, &str, bool, bool)> = vec![
        (built::DECLARES_AUTO, Auto, Permissions::new(Auto), "tool: ok", true, true),
        (built::CAUTIOUS, ReadOnly, Permissions::new(Auto), "tool: ToolError::Denied(", false, false),
        (built::DECLARES_ASK, Ask, Permissions::new(Auto), "tool: ToolError::Denied(", false, false),
        (built::DECLARES_ASK, Ask, yes(), "tool: ok", true, false),
        (built::DECLARES_APPROVE, Approve, Permissions::new(Auto), "tool: ToolError::ApprovalRequired(", false, false),
        // A plugin can only narrow: declaring auto widens nothing.
        (built::DECLARES_AUTO, Auto, Permissions::new(ReadOnly), "tool: ToolError::Denied(", false, false),
        (built::DECLARES_AUTO, Auto, yes(), "tool: ok", true, false),
    ];
    for (plugin, declared, permissions, tool_says, tool_wrote, wasi_wrote) in cases {
        let loaded = Plugin::load(engine(), plugin).await.unwrap();
        assert_eq!(loaded.manifest().unwrap().permissions, Some(declared));
        let operator = permissions.mode();
        let (answer, tool, wasi) = probe(plugin, permissions).await;
        let case = format!("declared {declared:?}, operator {operator:?}: {answer}");
        assert!(answer.starts_with(tool_says), "{case}");
        assert_eq!((tool, wasi), (tool_wrote, wasi_wrote), "{case}");
        assert_eq!(answer.contains("wasi: wrote"), wasi_wrote, "{case}");
    }
    // The hook was asked once per ask-mode write, never about WASI.
    assert_eq!(asked.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_provider_component_hosts_an_agents_tools() {
    use nexo::authority::Permissions;
    use nexo::grant::Grant;
    use nexo::manifest::{Capability, PermissionMode};
    use nexo_sandbox::Sandbox;

    let provider = Plugin::load(engine(), built::MEMORY_PROVIDER).await.unwrap();
    assert_eq!(provider.kind(), nexo::PluginKind::SandboxProvider);
    let sandbox =
        std::sync::Arc::new(provider.sandbox_provider().unwrap().start(&Default::default(), None).await.unwrap());
    assert_eq!(sandbox.name(), "remote");
    assert!(sandbox.instructions(true).unwrap().contains("memory-provider"));
    {
        let s = sandbox.clone();
        tokio::task::spawn_blocking(move || s.write("README.md", "# remote")).await.unwrap().unwrap();
    }

    let probe = Plugin::load(engine(), built::TOOL_PROBE).await.unwrap();
    let options = RunOptions {
        grant: Grant::of(Capability::ALL),
        permissions: Permissions::new(PermissionMode::Auto),
        providers: Providers { sandbox: Some(sandbox.clone()), ..Providers::default() },
        ..RunOptions::default()
    };
    let o = outcomes(&probe.run_agent("README.md", &options).await.unwrap());
    assert_eq!(o["read-file"], "ok", "{o:?}");
    // README.md was read, so the new out.txt and the read file may be written.
    assert_eq!(o["write-file"], "ok", "{o:?}");
    assert_eq!(o["glob"], "ok", "{o:?}");
    assert_eq!(o["shell"], "ok", "{o:?}");
    let s = sandbox.clone();
    let (listing, out) = tokio::task::spawn_blocking(move || {
        (s.glob("*").unwrap().paths, s.exec("ls; $(rm -rf /)", std::time::Duration::from_secs(5)).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(listing, vec!["README.md", "out.txt"]);
    // The model's command reached the provider as an argument, not as command text.
    assert!(out.stdout.contains(r#"args=["/workspace", "ls; $(rm -rf /)"]"#), "{}", out.stdout);
    let s = sandbox.clone();
    tokio::task::spawn_blocking(move || s.close()).await.unwrap().unwrap();
}

fn scripted(turns: serde_json::Value) -> std::sync::Arc<dyn nexo_model::Provider> {
    let script: nexo_model::scripted::Script = serde_json::from_value(serde_json::json!({ "turns": turns })).unwrap();
    std::sync::Arc::new(nexo_model::ScriptedProvider::new("e2e", script))
}

#[tokio::test]
async fn an_agent_component_prompts_the_model_loop_with_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# the readme").unwrap();
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        move |e: &nexo::agent_loop::Event| events.lock().unwrap().push(serde_json::to_value(e).unwrap())
    };
    let options = RunOptions {
        providers: Providers {
            sandbox: Some(std::sync::Arc::new(nexo_sandbox::LocalSandbox::open(dir.path()).unwrap())),
            model: Some(scripted(serde_json::json!([
                { "tool_calls": [{ "name": "read_file", "arguments": { "path": "README.md" } }] },
                { "text": "The readme is a heading." }
            ]))),
            ..Providers::default()
        },
        context: RunContext { events: Some(std::sync::Arc::new(sink)), ..RunContext::default() },
        ..RunOptions::default()
    };
    let mut instance = plugin.instantiate_agent(&options).await.unwrap();
    let run = instance.run("What is in the readme?").await.unwrap();
    assert_eq!(run.answer, "The readme is a heading.");
    let outcome = run.last_prompt.unwrap();
    assert_eq!(outcome.status, nexo::agent_loop::Status::Completed);
    // The agent's instructions come first, then the sandbox's.
    let nexo_model::Message::System { text } = &outcome.transcript[0] else { panic!() };
    assert!(text.starts_with("You are a helpful assistant"), "{text}");
    assert!(text.contains("You run on the host machine"), "{text}");
    let kinds: Vec<String> = events.lock().unwrap().iter().map(|e| e["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["turn-started", "tool-call", "tool-result", "turn-started", "done"]);
}

#[tokio::test]
async fn the_agents_turn_cap_and_the_operators_cap_both_hold() {
    let plugin = Plugin::load(engine(), built::HELLO).await.unwrap();
    // hello asks for at most 8 turns; the operator allows 20 by default.
    let forever: Vec<_> = (0..30)
        .map(|_| serde_json::json!({ "tool_calls": [{ "name": "glob", "arguments": { "pattern": "*" } }] }))
        .collect();
    let options = RunOptions {
        providers: Providers { model: Some(scripted(serde_json::json!(forever))), ..Providers::default() },
        ..RunOptions::default()
    };
    let mut instance = plugin.instantiate_agent(&options).await.unwrap();
    let outcome = instance.run("loop").await.unwrap().last_prompt.unwrap();
    assert_eq!((outcome.status.clone(), outcome.turns), (nexo::agent_loop::Status::TurnLimit, 8));
    // An operator cap below the agent's wins.
    let options = RunOptions {
        providers: Providers { model: Some(scripted(serde_json::json!(forever))), ..Providers::default() },
        limits: RunLimits {
            prompt: nexo::agent_loop::LoopLimits { max_turns: 3, ..Default::default() },
            ..RunLimits::default()
        },
        ..RunOptions::default()
    };
    let mut instance = plugin.instantiate_agent(&options).await.unwrap();
    assert_eq!(instance.run("loop").await.unwrap().last_prompt.unwrap().turns, 3);
}

#[tokio::test]
async fn a_skill_component_matches_its_skill_directory_and_serves_an_agent() {
    // plugins/skills/code-review is both a SKILL.md package and the crate that
    // compiles it into a component: the two must say the same thing.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/skills/code-review");
    let package = nexo_skills::load_skill(&dir).unwrap();
    let component = Plugin::load(engine(), built::CODE_REVIEW).await.unwrap();
    let nexo::plugin::Description::Skill(d) = component.description() else { panic!("not a skill") };
    assert_eq!(d.metadata.name, package.metadata.name);
    assert_eq!(d.metadata.description, package.metadata.description);
    assert_eq!(d.resources, package.resources);
    let component = component.skill().unwrap().clone();
    assert_eq!(component.instructions().await.unwrap(), package.instructions);

    // A declarative agent names the skill; the component serves it, with no capabilities of its own.
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("reviewer.toml");
    std::fs::write(
        &file,
        "name = \"reviewer\"\ndescription = \"Reviews\"\ninstructions = \"AGENT\"\nskills = [\"code-review\"]\n",
    )
    .unwrap();
    let agent = nexo::agent_file::AgentFile::load(&file).unwrap();
    let options = RunOptions {
        skills_path: Some(work.path().join("no-such-dir")),
        providers: Providers {
            model: Some(scripted(serde_json::json!([{ "text": "reviewed" }]))),
            skill_components: vec![std::sync::Arc::new(component)],
            ..Providers::default()
        },
        ..RunOptions::default()
    };
    let outcome = agent.run("review", &options).await.unwrap();
    let nexo_model::Message::System { text } = &outcome.transcript[0] else { panic!() };
    assert!(text.starts_with("AGENT"), "{text}");
    assert!(text.contains("# Skill: code-review") && text.contains("Read the changed files"), "{text}");
}

/// A guest's stdout (and stderr, the same kind of pipe) is held in memory up
/// to the engine's `stdio_bytes`: a write past it is refused to the guest, so
/// the host never holds more than the cap whatever the guest prints.
#[tokio::test]
async fn a_guests_stdout_stops_at_the_cap() {
    let cap = engine().limits().stdio_bytes;
    let plugin = Plugin::load(engine(), built::ESCAPE).await.unwrap();
    let mut quiet = plugin.instantiate_agent(&RunOptions::default()).await.unwrap();
    let report = quiet.run("print:under the cap").await.unwrap();
    assert_eq!((report.answer.as_str(), quiet.stdout().as_str()), ("print:under the cap\tok\n", "under the cap"));

    let mut flood = plugin.instantiate_agent(&RunOptions::default()).await.unwrap();
    let result = flood.run(&format!("print:{}", "x".repeat(16 * cap))).await;
    let kept = flood.stdout();
    // The pipe fills to the cap; the write past it fails, and the guest's `println!` panics on that.
    assert!(kept.len() == cap && kept.bytes().all(|b| b == b'x'), "{} bytes of stdout kept", kept.len());
    match result {
        Err(RunError::Trap { stderr, .. }) => assert!(stderr.contains("failed printing to stdout"), "{stderr}"),
        other => panic!("printing past the cap was not refused: {:?}", other.map(|o| o.answer.len())),
    }
}
