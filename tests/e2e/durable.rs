//! Durable runs through the library: real workflow components, a loopback
//! model server, and a store (in memory here; the CLI tests use SQLite
//! files across processes). Each test asserts what was paid for: the model
//! server's request count and the side effects in the workspace.

use std::sync::Arc;

use nexo::authority::Permissions;
use nexo::manifest::PermissionMode;
use nexo::runs::{Runs, Subject};
use nexo::settings::{Providers, RunOptions};
use nexo::{Plugin, grant::Grant, manifest::Capability};
use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_model::{ModelConfig, ProviderKind, resolve};
use nexo_store::Runs as _;
use nexo_store::{
    Backend, Claim, Decision, Jobs, Ledger, MemoryStore, Plugins, RunStatus, Sessions, SignIns, Store, Tenants,
};
use nexo_tests as built;
use serde_json::json;

use crate::engine;

fn provider(server: &MockServer) -> Arc<dyn nexo_model::Provider> {
    let config = ModelConfig {
        model: Some("test-model".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(server.openai_base_url()),
        api_key: Some("sk-durable-secret".into()),
        retry_base_delay: Some(std::time::Duration::from_millis(1)),
        ..ModelConfig::default()
    };
    resolve(&config).unwrap()
}

struct Scene {
    dir: tempfile::TempDir,
    server: MockServer,
    store: Arc<dyn Store>,
}

impl Scene {
    async fn new() -> Scene {
        let dir = tempfile::Builder::new().prefix("durable-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        Scene { dir, server: MockServer::start().await.unwrap(), store: Arc::new(MemoryStore::new()) }
    }

    fn options(&self, mode: PermissionMode, caps: &[Capability]) -> RunOptions {
        let sandbox = Arc::new(nexo_sandbox::LocalSandbox::open(self.dir.path()).unwrap());
        let mut grant = Grant::default();
        grant.capabilities.extend(caps.iter().copied());
        RunOptions {
            permissions: Permissions::new(mode),
            grant,
            providers: Providers {
                model: Some(provider(&self.server)),
                sandbox: Some(sandbox),
                ..Providers::default()
            },
            ..RunOptions::default()
        }
    }

    /// A fresh owner over the same store: what another process would be.
    fn runs(&self) -> Runs {
        Runs::new(self.store.clone(), false)
    }
}

async fn agent(path: &str) -> Plugin {
    Plugin::load(engine(), path).await.unwrap()
}

fn subject<'a>(plugin: &'a Plugin, path: &'a str) -> Subject<'a> {
    Subject::Component { agent: plugin.agent().unwrap(), sha256: plugin.sha256(), path: std::path::Path::new(path) }
}

#[tokio::test]
async fn the_document_approval_suspends_and_an_approval_finishes_it_without_a_second_model_call() {
    let scene = Scene::new().await;
    scene.server.push(Reply::text("Revenue grew."));
    let plugin = agent(built::DOCUMENT_APPROVAL).await;
    let options = scene.options(PermissionMode::Auto, &[Capability::Write]);
    let end = scene
        .runs()
        .start(subject(&plugin, built::DOCUMENT_APPROVAL), "Q3 report", &nexo::runs::RunSpec::default(), &options)
        .await;
    let end = end.unwrap();
    assert_eq!(end.run.status, RunStatus::Suspended, "{:?}", end.run);
    assert_eq!(end.run.suspend_reason.as_deref(), Some("awaiting approval"));
    assert_eq!(end.run.resume_key.as_deref(), Some("q3-report"));
    assert_eq!(scene.server.requests().len(), 1);
    assert!(!scene.dir.path().join("published/q3-report.md").exists());
    let checkpoints = scene.store.checkpoints(&end.run.id).await.unwrap();
    assert_eq!(checkpoints, [("draft".to_string(), json!("Revenue grew."))]);

    let again = scene
        .runs()
        .resume(
            &end.run.id,
            Claim::Resume,
            Some(r#"{"approved": true}"#.into()),
            subject(&plugin, built::DOCUMENT_APPROVAL),
            &options,
            false,
        )
        .await
        .unwrap();
    assert_eq!(again.run.status, RunStatus::Done, "{:?}", again.run);
    assert_eq!(again.run.result.as_deref(), Some("published published/q3-report.md"));
    assert_eq!(scene.server.requests().len(), 1, "the draft is not paid for twice");
    assert!(again.replayed > 0);
    let text = std::fs::read_to_string(scene.dir.path().join("published/q3-report.md")).unwrap();
    assert_eq!(text, "# Q3 report\n\nRevenue grew.\n");
    let kinds: Vec<String> =
        scene.store.events(&end.run.id, 0, 100).await.unwrap().into_iter().map(|e| e.kind).collect();
    for kind in ["checkpoint", "suspended", "resumed"] {
        assert!(kinds.iter().any(|k| k == kind), "{kinds:?}");
    }
}

#[tokio::test]
async fn a_gated_write_suspends_under_approve_and_the_decision_binds_to_that_call() {
    for (decision, status, written) in
        [(Decision::Approved, RunStatus::Done, true), (Decision::Denied, RunStatus::Done, false)]
    {
        let scene = Scene::new().await;
        scene.server.push(Reply::tool_calls(vec![MockToolCall::new(
            "c1",
            "write_file",
            json!({ "path": "notes.txt", "content": "hi" }),
        )]));
        scene.server.push(Reply::text("wrote it"));
        let plugin = agent(built::WORKFLOW_PROBE).await;
        let options = scene.options(PermissionMode::Approve, &[Capability::Write]);
        let path = built::WORKFLOW_PROBE;
        let end = scene
            .runs()
            .start(subject(&plugin, path), "prompt write notes", &nexo::runs::RunSpec::default(), &options)
            .await
            .unwrap();
        assert_eq!(end.run.status, RunStatus::Suspended, "{:?}", end.run);
        let pending = end.approval.clone().unwrap();
        assert_eq!((pending.capability.as_str(), pending.tool.as_str()), ("write", "write-file"));
        assert_eq!(pending.arguments, json!({ "path": "notes.txt", "content": "hi" }));
        assert!(!scene.dir.path().join("notes.txt").exists(), "nothing happens before the decision");

        scene.runs().decide(&end.run.id, &pending.call(), decision).await.unwrap();
        let again =
            scene.runs().resume(&end.run.id, Claim::Resume, None, subject(&plugin, path), &options, false).await;
        let again = again.unwrap();
        assert_eq!(again.run.status, status, "{:?}", again.run);
        assert_eq!(scene.dir.path().join("notes.txt").exists(), written);
        // Two model turns in all: the one that asked for the write is replayed.
        assert_eq!(scene.server.requests().len(), 2);
        let last = scene.server.requests().last().unwrap().body.to_string();
        if written {
            assert!(!last.contains("denied"), "{last}");
        } else {
            assert!(last.contains("the operator denied"), "{last}");
        }
    }
}

#[tokio::test]
async fn a_tampered_approval_fails_closed_and_suspends_again() {
    let scene = Scene::new().await;
    scene.server.push(Reply::tool_calls(vec![MockToolCall::new(
        "c1",
        "write_file",
        json!({ "path": "notes.txt", "content": "hi" }),
    )]));
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Approve, &[Capability::Write]);
    let path = built::WORKFLOW_PROBE;
    let end = scene
        .runs()
        .start(subject(&plugin, path), "prompt write", &nexo::runs::RunSpec::default(), &options)
        .await
        .unwrap();
    assert_eq!(end.run.status, RunStatus::Suspended);
    // The journaled model turn is edited so the replayed call writes elsewhere.
    let tampered = MemoryStore::new();
    let mut journal = scene.store.journal(&end.run.id).await.unwrap();
    for entry in &mut journal {
        entry.result = entry.result.replace("notes.txt", "other.txt");
    }
    let run = scene.store.run(&end.run.id).await.unwrap().unwrap();
    let copy = tamper_copy(&tampered, &run, journal, &*scene.store).await;
    let shown = tampered.approval(&copy).await.unwrap().unwrap().call();
    tampered.decide(&copy, &shown, Decision::Approved).await.unwrap();
    let tampered: Arc<dyn Store> = Arc::new(tampered);
    let runs = Runs::new(tampered.clone(), false);
    let again = runs.resume(&copy, Claim::Resume, None, subject(&plugin, path), &options, false).await.unwrap();
    assert_eq!(again.run.status, RunStatus::Suspended, "the decision was for another call: {:?}", again.run);
    let pending = again.approval.unwrap();
    assert_eq!(pending.arguments["path"], "other.txt");
    assert_eq!(pending.decision, None);
    assert!(!scene.dir.path().join("other.txt").exists() && !scene.dir.path().join("notes.txt").exists());
}

/// Copies `run` into `into` as a suspended run with `journal` and the
/// original's pending approval; returns its id.
async fn tamper_copy(
    into: &MemoryStore,
    run: &nexo_store::Run,
    journal: Vec<nexo_store::Entry>,
    from: &dyn Store,
) -> String {
    let owner = "tamper:1:x";
    let lease = nexo_store::Lease { owner: owner.into(), until_ms: i64::MAX };
    let new = nexo_store::NewRun {
        id: run.id.clone(),
        agent: run.agent.clone(),
        kind: run.kind.clone(),
        source: run.source.clone(),
        component_sha256: run.component_sha256.clone(),
        input: run.input.clone(),
        grant: run.grant.clone(),
        status: RunStatus::Running,
        lease: Some(lease),
        created_ms: run.created_ms,
        session: None,
        tenant: None,
    };
    into.create_run(new).await.unwrap();
    let batch = nexo_store::Batch { journal, ..Default::default() };
    let approval = from.approval(&run.id).await.unwrap();
    let to = nexo_store::Transition::Suspend {
        reason: "approval".into(),
        resume_key: None,
        approval,
        wake: None,
        signal: None,
    };
    into.transition(&run.id, owner, batch, to).await.unwrap();
    run.id.clone()
}

#[tokio::test]
async fn a_different_call_on_replay_is_a_nondeterminism_failure_naming_both_calls() {
    let scene = Scene::new().await;
    std::fs::write(scene.dir.path().join("mode.txt"), "a").unwrap();
    scene.server.push(Reply::text("took branch a"));
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Auto, &[]);
    let path = built::WORKFLOW_PROBE;
    let mode = format!("{}/mode.txt", scene.dir.path().display());
    let script = format!("branch {mode}; suspend wait");
    let end =
        scene.runs().start(subject(&plugin, path), &script, &nexo::runs::RunSpec::default(), &options).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Suspended, "{:?}", end.run);
    // The component reads mode.txt through its preopen, which the journal
    // does not cover: the replay now takes the other branch.
    std::fs::write(scene.dir.path().join("mode.txt"), "b").unwrap();
    let again = scene.runs().resume(&end.run.id, Claim::Resume, None, subject(&plugin, path), &options, false).await;
    let again = again.unwrap();
    assert_eq!(again.run.status, RunStatus::Failed);
    let error = again.run.error.unwrap();
    assert!(error.contains("nondeterminism") && error.contains("read-file") && error.contains("prompt"), "{error}");
    assert_eq!(scene.server.requests().len(), 1);
}

#[tokio::test]
async fn checkpoint_all_keeps_the_steps_that_completed_and_a_retry_runs_only_the_missing_one() {
    let scene = Scene::new().await;
    scene.server.push(Reply::text("alpha"));
    scene.server.push(Reply::text("beta"));
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Auto, &[]);
    let path = built::WORKFLOW_PROBE;
    let script = "!all a=prompt:one,b=prompt:two,c=read:missing.txt";
    let end =
        scene.runs().start(subject(&plugin, path), script, &nexo::runs::RunSpec::default(), &options).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Failed, "{:?}", end.run);
    let error = end.run.error.clone().unwrap();
    assert!(error.contains("`c`") && error.contains("missing.txt"), "{error}");
    let names = |store: Arc<dyn Store>, id: String| async move {
        let mut names: Vec<String> = store.checkpoints(&id).await.unwrap().into_iter().map(|(n, _)| n).collect();
        names.sort();
        names
    };
    assert_eq!(names(scene.store.clone(), end.run.id.clone()).await, ["a", "b"]);
    assert_eq!(scene.server.requests().len(), 2);

    std::fs::write(scene.dir.path().join("missing.txt"), "gamma").unwrap();
    let again = scene.runs().resume(&end.run.id, Claim::Retry, None, subject(&plugin, path), &options, false).await;
    let again = again.unwrap();
    assert_eq!(again.run.status, RunStatus::Done, "{:?}", again.run);
    assert_eq!(again.run.result.as_deref(), Some(r#"a="alpha",b="beta",c="gamma""#));
    assert_eq!(scene.server.requests().len(), 2, "the completed steps did not run again");
    assert_eq!(names(scene.store.clone(), end.run.id.clone()).await, ["a", "b", "c"]);
}

#[tokio::test]
async fn reserved_names_and_suspend_inside_a_checkpoint_are_refused_with_clear_errors() {
    let scene = Scene::new().await;
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Auto, &[]);
    let path = built::WORKFLOW_PROBE;
    let script = "reserved __suspend__; reserved __approval__; reserved __buffer_events__; suspend-in-checkpoint";
    let end =
        scene.runs().start(subject(&plugin, path), script, &nexo::runs::RunSpec::default(), &options).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run);
    let answer = end.run.result.unwrap();
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 4, "{answer}");
    for (line, name) in lines.iter().zip(["__suspend__", "__approval__", "__buffer_events__"]) {
        assert!(line.starts_with("error:") && line.contains("reserved") && line.contains(name), "{line}");
    }
    assert!(lines[3].contains("inside the checkpoint `open`"), "{}", lines[3]);
    assert!(scene.store.checkpoints(&end.run.id).await.unwrap().iter().all(|(n, _)| !n.starts_with("__")));
}

#[tokio::test]
async fn clocks_and_randomness_replay_as_the_first_pass_saw_them() {
    let scene = Scene::new().await;
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Auto, &[]);
    let path = built::WORKFLOW_PROBE;
    let runs = scene.runs();
    let spec = nexo::runs::RunSpec::default();
    let end = runs.start(subject(&plugin, path), "time; random; suspend pause; time", &spec, &options);
    let end = end.await.unwrap();
    assert_eq!(end.run.status, RunStatus::Suspended);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let runs = scene.runs();
    let again = runs.resume(&end.run.id, Claim::Resume, Some("1".into()), subject(&plugin, path), &options, false);
    let again = again.await.unwrap();
    assert_eq!(again.run.status, RunStatus::Done, "{:?}", again.run);
    let answer = again.run.result.unwrap();
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines[2], "resumed with 1");
    // The first line is the time the first pass read, from the journal.
    let journal = scene.store.journal(&end.run.id).await.unwrap();
    assert!(journal.iter().any(|e| e.function == "seed"), "{journal:?}");
    let first = journal.iter().find(|e| e.function == "wall-clock.now").unwrap();
    let nanos: u64 = serde_json::from_str(&first.result).unwrap();
    assert_eq!(lines[0], format!("{:?}", std::time::Duration::from_nanos(nanos)));
    assert!(lines[3] > lines[0], "the clock goes on after the pause: {answer}");
}

/// A store that notes which writes carried events.
#[derive(Debug)]
struct Counting {
    inner: MemoryStore,
    commits_with_events: std::sync::atomic::AtomicUsize,
    final_events: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Backend for Counting {
    fn location(&self) -> String {
        self.inner.location()
    }
}

#[async_trait::async_trait]
impl nexo_store::Runs for Counting {
    async fn create_run(&self, run: nexo_store::NewRun) -> nexo_store::StoreResult<nexo_store::Run> {
        self.inner.create_run(run).await
    }

    async fn create_run_and_start(
        &self,
        run: nexo_store::NewRun,
        start: nexo_store::NewJob,
    ) -> nexo_store::StoreResult<(nexo_store::Run, nexo_store::Job)> {
        self.inner.create_run_and_start(run, start).await
    }

    async fn run(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Run>> {
        self.inner.run(id).await
    }

    async fn children(&self, id: &str) -> nexo_store::StoreResult<Vec<nexo_store::Run>> {
        self.inner.children(id).await
    }

    async fn runs(&self, status: Option<RunStatus>, limit: usize) -> nexo_store::StoreResult<Vec<nexo_store::Run>> {
        self.inner.runs(status, limit).await
    }

    async fn commit(&self, id: &str, owner: &str, batch: nexo_store::Batch) -> nexo_store::StoreResult<()> {
        if !batch.events.is_empty() {
            self.commits_with_events.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.commit(id, owner, batch).await
    }

    async fn transition(
        &self,
        id: &str,
        owner: &str,
        batch: nexo_store::Batch,
        to: nexo_store::Transition,
    ) -> nexo_store::StoreResult<nexo_store::Run> {
        self.final_events.fetch_add(batch.events.len(), std::sync::atomic::Ordering::Relaxed);
        self.inner.transition(id, owner, batch, to).await
    }

    async fn claim(
        &self,
        id: &str,
        how: Claim,
        lease: nexo_store::Lease,
        input: Option<String>,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Run> {
        self.inner.claim(id, how, lease, input, now).await
    }

    async fn renew_leases(&self, owner: &str, ids: &[String], until_ms: i64) -> nexo_store::StoreResult<Vec<String>> {
        self.inner.renew_leases(owner, ids, until_ms).await
    }

    async fn orphans(&self, now: i64) -> nexo_store::StoreResult<Vec<nexo_store::Run>> {
        self.inner.orphans(now).await
    }

    async fn cancel(&self, id: &str, reason: &str) -> nexo_store::StoreResult<nexo_store::Run> {
        self.inner.cancel(id, reason).await
    }

    async fn send_signal(&self, id: &str, name: &str, data: &str) -> nexo_store::StoreResult<nexo_store::Signal> {
        self.inner.send_signal(id, name, data).await
    }

    async fn next_signal(
        &self,
        id: &str,
        name: &str,
        after: i64,
    ) -> nexo_store::StoreResult<Option<nexo_store::Signal>> {
        self.inner.next_signal(id, name, after).await
    }

    async fn journal(&self, id: &str) -> nexo_store::StoreResult<Vec<nexo_store::Entry>> {
        self.inner.journal(id).await
    }

    async fn events(
        &self,
        id: &str,
        after: i64,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::StoredEvent>> {
        self.inner.events(id, after, limit).await
    }

    async fn checkpoints(&self, id: &str) -> nexo_store::StoreResult<Vec<(String, serde_json::Value)>> {
        self.inner.checkpoints(id).await
    }

    async fn approval(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Approval>> {
        self.inner.approval(id).await
    }

    async fn decide(
        &self,
        id: &str,
        call: &nexo_store::PendingCall,
        decision: Decision,
    ) -> nexo_store::StoreResult<nexo_store::Approval> {
        self.inner.decide(id, call, decision).await
    }

    async fn decide_and_resume(
        &self,
        id: &str,
        call: &nexo_store::PendingCall,
        decision: Decision,
        resume: nexo_store::NewJob,
    ) -> nexo_store::StoreResult<nexo_store::Approval> {
        self.inner.decide_and_resume(id, call, decision, resume).await
    }

    async fn clear_approval(&self, id: &str, owner: &str) -> nexo_store::StoreResult<()> {
        self.inner.clear_approval(id, owner).await
    }

    async fn add_pass_trace(&self, id: &str, context: &str, at_ms: i64) -> nexo_store::StoreResult<()> {
        self.inner.add_pass_trace(id, context, at_ms).await
    }

    async fn pass_traces(&self, id: &str, limit: usize) -> nexo_store::StoreResult<Vec<String>> {
        self.inner.pass_traces(id, limit).await
    }
}

#[async_trait::async_trait]
impl Jobs for Counting {
    async fn enqueue(&self, job: nexo_store::NewJob) -> nexo_store::StoreResult<nexo_store::Job> {
        self.inner.enqueue(job).await
    }

    async fn claim_job_unless(
        &self,
        worker: &str,
        lease_ms: i64,
        now: i64,
        held_back: &[String],
    ) -> nexo_store::StoreResult<Option<nexo_store::Job>> {
        self.inner.claim_job_unless(worker, lease_ms, now, held_back).await
    }

    async fn heartbeat_jobs(&self, tokens: &[i64], lease_ms: i64, now: i64) -> nexo_store::StoreResult<Vec<i64>> {
        self.inner.heartbeat_jobs(tokens, lease_ms, now).await
    }

    async fn complete_job(
        &self,
        id: &str,
        lease: &nexo_store::JobLease,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Job> {
        self.inner.complete_job(id, lease, now).await
    }

    async fn fail_job(
        &self,
        id: &str,
        lease: &nexo_store::JobLease,
        error: &str,
        retry: nexo_store::Retry,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Job> {
        self.inner.fail_job(id, lease, error, retry, now).await
    }

    async fn job(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Job>> {
        self.inner.job(id).await
    }

    async fn jobs(
        &self,
        status: Option<nexo_store::JobStatus>,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::Job>> {
        self.inner.jobs(status, limit).await
    }

    async fn has_live_job(&self, run: &str) -> nexo_store::StoreResult<bool> {
        self.inner.has_live_job(run).await
    }

    async fn next_wake_ms(&self) -> nexo_store::StoreResult<Option<i64>> {
        self.inner.next_wake_ms().await
    }

    async fn postpone_job(
        &self,
        id: &str,
        lease: &nexo_store::JobLease,
        reason: &str,
        not_before_ms: i64,
        now_ms: i64,
    ) -> nexo_store::StoreResult<nexo_store::Job> {
        self.inner.postpone_job(id, lease, reason, not_before_ms, now_ms).await
    }
}

#[async_trait::async_trait]
impl Sessions for Counting {
    async fn open_session(
        &self,
        agent: &str,
        instance: &str,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Session> {
        self.inner.open_session(agent, instance, now).await
    }

    async fn session(&self, agent: &str, instance: &str) -> nexo_store::StoreResult<Option<nexo_store::Session>> {
        self.inner.session(agent, instance).await
    }

    async fn session_by_id(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Session>> {
        self.inner.session_by_id(id).await
    }

    async fn sessions(&self, agent: Option<&str>, limit: usize) -> nexo_store::StoreResult<Vec<nexo_store::Session>> {
        self.inner.sessions(agent, limit).await
    }

    async fn sessions_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::Session>> {
        self.inner.sessions_with_prefix(prefix, limit).await
    }

    async fn thread(&self, id: &str) -> nexo_store::StoreResult<Vec<serde_json::Value>> {
        self.inner.thread(id).await
    }

    async fn append_thread(
        &self,
        id: &str,
        expected: u64,
        messages: Vec<serde_json::Value>,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Session> {
        self.inner.append_thread(id, expected, messages, now).await
    }

    async fn session_runs(&self, id: &str) -> nexo_store::StoreResult<Vec<nexo_store::Run>> {
        self.inner.session_runs(id).await
    }

    async fn delete_session(&self, id: &str) -> nexo_store::StoreResult<bool> {
        self.inner.delete_session(id).await
    }

    async fn expire_sessions(&self, updated_before_ms: i64) -> nexo_store::StoreResult<Vec<String>> {
        self.inner.expire_sessions(updated_before_ms).await
    }
}

#[async_trait::async_trait]
impl Tenants for Counting {
    async fn create_tenant(&self, tenant: nexo_store::NewTenant) -> nexo_store::StoreResult<nexo_store::Tenant> {
        self.inner.create_tenant(tenant).await
    }

    async fn tenant(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Tenant>> {
        self.inner.tenant(id).await
    }

    async fn tenant_by_name(&self, name: &str) -> nexo_store::StoreResult<Option<nexo_store::Tenant>> {
        self.inner.tenant_by_name(name).await
    }

    async fn tenants(&self) -> nexo_store::StoreResult<Vec<nexo_store::Tenant>> {
        self.inner.tenants().await
    }

    async fn update_tenant(
        &self,
        id: &str,
        policy: Option<serde_json::Value>,
        disabled: Option<bool>,
        now: i64,
    ) -> nexo_store::StoreResult<nexo_store::Tenant> {
        self.inner.update_tenant(id, policy, disabled, now).await
    }

    async fn create_key(&self, key: nexo_store::NewApiKey) -> nexo_store::StoreResult<nexo_store::ApiKey> {
        self.inner.create_key(key).await
    }

    async fn key_by_hash(&self, hash: &str) -> nexo_store::StoreResult<Option<nexo_store::ApiKey>> {
        self.inner.key_by_hash(hash).await
    }

    async fn keys(&self, tenant: Option<&str>) -> nexo_store::StoreResult<Vec<nexo_store::ApiKey>> {
        self.inner.keys(tenant).await
    }

    async fn revoke_key(&self, id: &str, now: i64) -> nexo_store::StoreResult<nexo_store::ApiKey> {
        self.inner.revoke_key(id, now).await
    }

    async fn tenant_runs(
        &self,
        tenant: &str,
        status: Option<RunStatus>,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::Run>> {
        self.inner.tenant_runs(tenant, status, limit).await
    }

    async fn live_runs(&self, tenant: &str) -> nexo_store::StoreResult<u64> {
        self.inner.live_runs(tenant).await
    }

    async fn running_runs(&self, tenant: &str) -> nexo_store::StoreResult<u64> {
        self.inner.running_runs(tenant).await
    }

    async fn waiting(&self) -> nexo_store::StoreResult<Vec<nexo_store::Waiting>> {
        self.inner.waiting().await
    }
}

#[async_trait::async_trait]
impl Plugins for Counting {
    async fn put_plugin(
        &self,
        plugin: nexo_store::NewPlugin,
    ) -> nexo_store::StoreResult<(nexo_store::StoredPlugin, bool)> {
        self.inner.put_plugin(plugin).await
    }

    async fn plugin(&self, tenant: &str, sha256: &str) -> nexo_store::StoreResult<Option<nexo_store::StoredPlugin>> {
        self.inner.plugin(tenant, sha256).await
    }

    async fn plugin_bytes(&self, tenant: &str, sha256: &str) -> nexo_store::StoreResult<Option<Vec<u8>>> {
        self.inner.plugin_bytes(tenant, sha256).await
    }

    async fn plugins(&self, tenant: &str) -> nexo_store::StoreResult<Vec<nexo_store::StoredPlugin>> {
        self.inner.plugins(tenant).await
    }

    async fn plugin_acceptance(
        &self,
        tenant: &str,
        reference: &str,
    ) -> nexo_store::StoreResult<Option<nexo_store::PluginAcceptance>> {
        self.inner.plugin_acceptance(tenant, reference).await
    }

    async fn record_plugin_acceptance(
        &self,
        acceptance: nexo_store::PluginAcceptance,
        was: Option<&str>,
        audit: (&str, &serde_json::Value),
    ) -> nexo_store::StoreResult<bool> {
        self.inner.record_plugin_acceptance(acceptance, was, audit).await
    }
}

#[async_trait::async_trait]
impl Ledger for Counting {
    async fn append_audit(
        &self,
        tenant: &str,
        kind: &str,
        data: &serde_json::Value,
        at_ms: i64,
    ) -> nexo_store::StoreResult<nexo_store::AuditEntry> {
        self.inner.append_audit(tenant, kind, data, at_ms).await
    }

    async fn audit(
        &self,
        tenant: &str,
        after_seq: u64,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::AuditEntry>> {
        self.inner.audit(tenant, after_seq, limit).await
    }

    async fn audit_head(&self, tenant: &str) -> nexo_store::StoreResult<Option<(u64, String)>> {
        self.inner.audit_head(tenant).await
    }

    async fn audit_heads(&self) -> nexo_store::StoreResult<Vec<(String, u64, String)>> {
        self.inner.audit_heads().await
    }

    async fn add_usage(
        &self,
        tenant: &str,
        at_ms: i64,
        runs: u64,
        used: nexo_store::RunUsage,
    ) -> nexo_store::StoreResult<()> {
        self.inner.add_usage(tenant, at_ms, runs, used).await
    }

    async fn usage(&self, tenant: &str, since_ms: i64) -> nexo_store::StoreResult<Vec<nexo_store::Usage>> {
        self.inner.usage(tenant, since_ms).await
    }

    async fn add_run_usage(&self, run: &str, used: nexo_store::RunUsage) -> nexo_store::StoreResult<()> {
        self.inner.add_run_usage(run, used).await
    }

    async fn run_usage(&self, run: &str) -> nexo_store::StoreResult<nexo_store::RunUsage> {
        self.inner.run_usage(run).await
    }
}

#[async_trait::async_trait]
impl SignIns for Counting {
    async fn open_sign_in(&self, sign_in: nexo_store::SignIn) -> nexo_store::StoreResult<()> {
        self.inner.open_sign_in(sign_in).await
    }

    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> nexo_store::StoreResult<Option<nexo_store::SignIn>> {
        self.inner.sign_in(id_hash, now_ms).await
    }

    async fn end_sign_in(&self, id_hash: &str) -> nexo_store::StoreResult<()> {
        self.inner.end_sign_in(id_hash).await
    }
}

#[async_trait::async_trait]
impl nexo_store::Schedules for Counting {
    async fn add_schedule(&self, new: nexo_store::NewSchedule) -> nexo_store::StoreResult<nexo_store::Schedule> {
        self.inner.add_schedule(new).await
    }

    async fn schedule(&self, id: &str) -> nexo_store::StoreResult<Option<nexo_store::Schedule>> {
        self.inner.schedule(id).await
    }

    async fn schedules(
        &self,
        tenant: Option<&str>,
        limit: usize,
    ) -> nexo_store::StoreResult<Vec<nexo_store::Schedule>> {
        self.inner.schedules(tenant, limit).await
    }

    async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        next_ms: i64,
    ) -> nexo_store::StoreResult<nexo_store::Schedule> {
        self.inner.set_schedule_paused(id, paused, next_ms).await
    }

    async fn delete_schedule(&self, id: &str) -> nexo_store::StoreResult<()> {
        self.inner.delete_schedule(id).await
    }

    async fn due_schedules(&self, now_ms: i64, limit: usize) -> nexo_store::StoreResult<Vec<nexo_store::Schedule>> {
        self.inner.due_schedules(now_ms, limit).await
    }

    async fn next_schedule_ms(&self) -> nexo_store::StoreResult<Option<i64>> {
        self.inner.next_schedule_ms().await
    }

    async fn fire_schedule(
        &self,
        id: &str,
        firing: nexo_store::Firing,
    ) -> nexo_store::StoreResult<nexo_store::FireOutcome> {
        self.inner.fire_schedule(id, firing).await
    }
}

#[tokio::test]
async fn buffer_events_writes_the_events_once_when_the_run_suspends_and_never_holds_back_the_journal() {
    for buffered in [false, true] {
        let mut scene = Scene::new().await;
        let counting = Arc::new(Counting {
            inner: MemoryStore::new(),
            commits_with_events: Default::default(),
            final_events: Default::default(),
        });
        scene.store = counting.clone();
        for text in ["one", "two"] {
            scene.server.push(Reply::text(text));
        }
        let plugin = agent(built::WORKFLOW_PROBE).await;
        let options = scene.options(PermissionMode::Auto, &[]);
        let runs = Runs::new(scene.store.clone(), buffered);
        let script = "checkpoint a first; checkpoint b second; suspend wait";
        let end = runs
            .start(subject(&plugin, built::WORKFLOW_PROBE), script, &nexo::runs::RunSpec::default(), &options)
            .await
            .unwrap();
        assert_eq!(end.run.status, RunStatus::Suspended);
        let with_events = counting.commits_with_events.load(std::sync::atomic::Ordering::Relaxed);
        let at_end = counting.final_events.load(std::sync::atomic::Ordering::Relaxed);
        if buffered {
            assert_eq!(with_events, 0, "no event is written before the run suspends");
        } else {
            assert!(with_events >= 2, "events go out with the journal's commits ({with_events})");
        }
        let events = scene.store.events(&end.run.id, 0, 100).await.unwrap();
        let checkpoints = events.iter().filter(|e| e.kind == "checkpoint").count();
        assert_eq!(checkpoints, 2, "{events:?}");
        assert!(at_end >= if buffered { 3 } else { 1 }, "{at_end}");
        // The journal was written as the run went, either way.
        assert!(scene.store.journal(&end.run.id).await.unwrap().len() >= 5);
    }
}

#[tokio::test]
async fn the_dashboard_runs_its_three_steps_concurrently_and_stores_each() {
    let scene = Scene::new().await;
    // Each step's reply takes a second: three in a row would take three.
    for text in ["rev ok", "usage ok", "support ok"] {
        scene.server.push(Reply::text(text).with_delay(std::time::Duration::from_secs(1)));
    }
    scene.server.push(Reply::text("All green"));
    let plugin = agent(built::DASHBOARD).await;
    let options = scene.options(PermissionMode::ReadOnly, &[]);
    let started = std::time::Instant::now();
    let end = scene
        .runs()
        .start(subject(&plugin, built::DASHBOARD), "acme", &nexo::runs::RunSpec::default(), &options)
        .await
        .unwrap();
    assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run);
    let answer = end.run.result.unwrap();
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 4, "{answer}");
    assert_eq!(lines[0], "All green", "the summary prompt comes last: {answer}");
    // Which reply each step got depends on arrival order; each got one.
    let mut values: Vec<&str> = lines[1..].iter().map(|l| l.split_once(": ").unwrap().1).collect();
    values.sort();
    assert_eq!(values, ["rev ok", "support ok", "usage ok"]);
    let mut names: Vec<String> =
        scene.store.checkpoints(&end.run.id).await.unwrap().into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names, ["revenue", "support", "usage"]);
    assert_eq!(scene.server.requests().len(), 4);
    // The three steps overlapped: well under the three seconds of a sequence.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_millis(2500), "the steps ran one after another: {took:?}");
}

/// An interrupt that found no run to cancel (Ctrl-C in the instant between
/// a run's creation and its pass) is not lost: the run cancels itself as it
/// starts being driven, and is never left `running`. Once the interrupt is
/// over, the next run goes on.
#[tokio::test]
async fn a_run_started_after_an_interrupt_cancels_itself() {
    let scene = Scene::new().await;
    let plugin = agent(built::WORKFLOW_PROBE).await;
    let options = scene.options(PermissionMode::Auto, &[]);
    let runs = scene.runs();
    assert!(runs.interrupt("interrupted with Ctrl-C").is_empty(), "nothing was driven");
    let script = "checkpoint a first; checkpoint b second";
    let spec = nexo::runs::RunSpec::default();
    let end = runs.start(subject(&plugin, built::WORKFLOW_PROBE), script, &spec, &options).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Cancelled, "{:?}", end.run);
    let stored = scene.store.run(&end.run.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.error.as_deref()), (RunStatus::Cancelled, Some("interrupted with Ctrl-C")));
    assert!(runs.driven().is_empty());
    runs.resume_taking();
    let end = runs.start(subject(&plugin, built::WORKFLOW_PROBE), script, &spec, &options).await.unwrap();
    assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run);
}

/// A run records each skill component with its SHA-256: a pass loads that
/// content or refuses, naming the file that changed; a file that is not a
/// skill component is refused before anything is recorded.
#[tokio::test]
async fn a_skill_component_changed_since_the_run_was_recorded_is_refused() {
    use nexo::runs::prepare;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("review.wasm");
    std::fs::copy(built::CODE_REVIEW, &path).unwrap();
    let files = prepare::skill_files(engine(), std::slice::from_ref(&path)).await.unwrap();
    assert_eq!(files.len(), 1);
    let spec = nexo::runs::RunSpec { skill_components: files, ..nexo::runs::RunSpec::default() };
    let options = prepare::options(engine(), &spec, Default::default()).await.unwrap();
    assert_eq!(options.providers.skill_components.iter().map(|s| s.name()).collect::<Vec<_>>(), ["code-review"]);
    // The same component with a custom section more: another SHA-256.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend([0, 4, 3, b'n', b'e', b'w']);
    std::fs::write(&path, bytes).unwrap();
    let err = prepare::options(engine(), &spec, Default::default()).await.unwrap_err().to_string();
    assert!(err.contains("changed since the run was recorded") && err.contains("review.wasm"), "{err}");
    let err = prepare::skill_files(engine(), &[std::path::PathBuf::from(built::HELLO)]).await.unwrap_err();
    assert!(err.to_string().contains("not a skill"), "{err}");
}
