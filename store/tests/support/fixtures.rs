//! The databases real older nexo binaries wrote (`store/tests/fixtures`,
//! made by its `generate.sh`), and the check that today's store, having
//! migrated one, holds everything that nexo reported and can go on with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nexo_store::{
    Batch, Claim, Decision, Entry, JobKind, JobStatus, Lease, NewApiKey, NewEvent, NewJob, NewPlugin, NewRun,
    NewTenant, RunStatus, SignIn, Store, StoreError, Transition, sha256_hex, verify_audit,
};
use serde_json::{Value, json};

/// One fixture: the database and what the old nexo reported writing it.
pub struct Fixture {
    /// The database file (`.db`) or dump (`.sql`).
    pub data: PathBuf,
    /// The commit whose nexo wrote it.
    pub commit: String,
    /// The schema version it has.
    pub schema_version: i64,
    /// Each run, by label (`cli-done`, `serve-approval` …): its id and the
    /// status the old nexo reported.
    pub runs: BTreeMap<String, (String, RunStatus)>,
    /// Keys, session ids and times it reported, by name.
    pub facts: BTreeMap<String, String>,
}

impl Fixture {
    /// The id of the run labelled `label`, if this version made one.
    pub fn run(&self, label: &str) -> Option<&str> {
        self.runs.get(label).map(|(id, _)| id.as_str())
    }

    /// The fact `name`, if this version had it.
    pub fn fact(&self, name: &str) -> Option<&str> {
        self.facts.get(name).map(String::as_str)
    }
}

/// The fixtures of `backend` (`sqlite` or `postgres`), oldest schema first.
pub fn fixtures(backend: &str) -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(backend);
    let extension = if backend == "sqlite" { "db" } else { "sql" };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let runs = doc["runs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(label, run)| {
                let status = RunStatus::parse(run["status"].as_str().unwrap()).unwrap();
                (label.clone(), (run["id"].as_str().unwrap().to_string(), status))
            })
            .collect();
        let facts =
            doc["facts"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().into())).collect();
        out.push(Fixture {
            data: path.with_extension(extension),
            commit: doc["commit"].as_str().unwrap().into(),
            schema_version: doc["schema_version"].as_i64().unwrap(),
            runs,
            facts,
        });
    }
    out.sort_by_key(|f| f.schema_version);
    out
}

const OWNER: &str = "host:1:fixture";

fn lease() -> Lease {
    Lease { owner: OWNER.into(), until_ms: i64::MAX / 2 }
}

/// Everything the old nexo reported is in `store`, which has migrated the
/// fixture, and its runs, sessions, jobs, tenants and audit logs go on.
pub async fn check_migrated(store: &dyn Store, fixture: &Fixture) {
    let name = fixture.data.display().to_string();
    runs_are_kept(store, fixture, &name).await;
    runs_go_on(store, fixture, &name).await;
    sessions_go_on(store, fixture, &name).await;
    queued_jobs_are_claimed(store, fixture, &name).await;
    if fixture.fact("acme-key").is_some() {
        tenants_go_on(store, fixture, &name).await;
    }
    later_tables_work(store, &name).await;
}

/// What the migrations added after the fixture's version works: a session
/// with a prompt, a tenant with a key, a plugin, usage and an audit log, a
/// run of both with a job in the tenant's queue, a console sign-in; and
/// deleting the session deletes its run.
async fn later_tables_work(store: &dyn Store, name: &str) {
    let now = nexo_store::now_ms();
    let session = store.open_session("hello", "after-upgrade", now).await.unwrap();
    store.append_thread(&session.id, 0, vec![json!({"role": "user", "content": "hi"})], now).await.unwrap();
    let tenant = NewTenant { id: "t-after".into(), name: "after-upgrade".into(), policy: json!({}), created_ms: now };
    store.create_tenant(tenant).await.unwrap();
    let key =
        NewApiKey { id: "k-after".into(), tenant: Some("t-after".into()), hash: sha256_hex("k"), created_ms: now };
    store.create_key(key).await.unwrap();
    assert_eq!(store.key_by_hash(&sha256_hex("k")).await.unwrap().unwrap().tenant.as_deref(), Some("t-after"));
    let run = NewRun {
        id: "r-after-upgrade".into(),
        agent: "hello".into(),
        kind: "component".into(),
        source: "/agents/hello.wasm".into(),
        component_sha256: "ab".repeat(32),
        input: "hi".into(),
        grant: json!({}),
        status: RunStatus::Queued,
        lease: None,
        created_ms: now,
        session: Some(session.id.clone()),
        tenant: Some("t-after".into()),
    };
    store.create_run(run).await.unwrap();
    let job = NewJob {
        id: "j-after-upgrade".into(),
        run: "r-after-upgrade".into(),
        kind: JobKind::Start,
        payload: json!({"run": "r-after-upgrade"}),
        max_attempts: 1,
        backoff_ms: 0,
        not_before_ms: 0,
        created_ms: now,
    };
    store.enqueue(job).await.unwrap();
    let claimed = store.claim_job("w:fixture", 60_000, now).await.unwrap().unwrap();
    assert_eq!((claimed.id.as_str(), claimed.tenant.as_deref()), ("j-after-upgrade", Some("t-after")), "{name}");
    assert_eq!(store.session_runs(&session.id).await.unwrap().len(), 1, "{name}");
    let bytes = b"\0asm after the upgrade".to_vec();
    let plugin = NewPlugin {
        tenant: "t-after".into(),
        sha256: sha256_hex(&bytes),
        name: "p".into(),
        world: "agent".into(),
        bytes: bytes.clone(),
        created_ms: now,
        origin: None,
    };
    store.put_plugin(plugin).await.unwrap();
    assert_eq!(store.plugin_bytes("t-after", &sha256_hex(&bytes)).await.unwrap(), Some(bytes), "{name}");
    store
        .add_usage("t-after", now, 1, nexo_store::RunUsage { tokens: 10, cpu_ticks: 2, egress_bytes: 0, cost_nanos: 0 })
        .await
        .unwrap();
    assert_eq!(store.usage("t-after", 0).await.unwrap().len(), 1, "{name}");
    store.append_audit("t-after", "tenant.created", &json!({}), now).await.unwrap();
    let entries = store.audit("t-after", 0, 10).await.unwrap();
    let head = store.audit_head("t-after").await.unwrap();
    assert_eq!(verify_audit(&entries, head.as_ref().map(|(s, h)| (*s, h.as_str()))), Ok(1), "{name}");
    let sign_in = SignIn {
        id_hash: sha256_hex("c"),
        tenant: "t-after".into(),
        key_hash: sha256_hex("k"),
        created_ms: now,
        expires_ms: now + 1_000,
    };
    store.open_sign_in(sign_in.clone()).await.unwrap();
    assert_eq!(store.sign_in(&sign_in.id_hash, now).await.unwrap(), Some(sign_in), "{name}");
    assert!(store.delete_session(&session.id).await.unwrap(), "{name}");
    assert_eq!(store.run("r-after-upgrade").await.unwrap(), None, "{name}: the session's run goes with it");
}

async fn runs_are_kept(store: &dyn Store, fixture: &Fixture, name: &str) {
    let listed: BTreeMap<String, RunStatus> =
        store.runs(None, 1_000).await.unwrap().into_iter().map(|r| (r.id, r.status)).collect();
    let reported: BTreeMap<String, RunStatus> = fixture.runs.values().cloned().collect();
    assert_eq!(listed, reported, "{name}: the runs list, with the statuses the old nexo reported");
    for status in [RunStatus::Done, RunStatus::Suspended, RunStatus::Failed, RunStatus::Cancelled] {
        let ids: BTreeSet<String> = store.runs(Some(status), 1_000).await.unwrap().into_iter().map(|r| r.id).collect();
        let want: BTreeSet<String> = reported.iter().filter(|(_, s)| **s == status).map(|(id, _)| id.clone()).collect();
        assert_eq!(ids, want, "{name}: the runs listed as {status:?}");
    }
    for (label, (id, status)) in &fixture.runs {
        let run = store.run(id).await.unwrap().unwrap_or_else(|| panic!("{name}: {label} is gone"));
        let events = store.events(id, 0, 1_000).await.unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert!(events.windows(2).all(|w| w[0].id < w[1].id), "{name}: {label}'s events in order");
        match status {
            RunStatus::Done => {
                assert!(run.result.as_deref().is_some_and(|r| !r.is_empty()), "{name}: {label}'s answer: {run:?}");
                assert!(!store.journal(id).await.unwrap().is_empty(), "{name}: {label}'s journal");
            }
            RunStatus::Failed => {
                assert!(run.error.as_deref().is_some_and(|e| e.contains("missing.txt")), "{name}: {label}: {run:?}");
                assert!(kinds.contains(&"failed") || kinds.contains(&"retrying"), "{name}: {label}: {kinds:?}");
            }
            RunStatus::Suspended => assert!(kinds.contains(&"suspended"), "{name}: {label}: {kinds:?}"),
            RunStatus::Cancelled => assert!(kinds.contains(&"cancelled"), "{name}: {label}: {kinds:?}"),
            RunStatus::Queued | RunStatus::Running => {}
        }
        if label.ends_with("-done") || label.ends_with("-approval") {
            let journal = store.journal(id).await.unwrap();
            let ordered = journal.windows(2).all(|w| w[0].seq < w[1].seq) && journal.iter().all(|e| e.end > e.seq);
            assert!(ordered, "{name}: {label}'s journal in order: {journal:?}");
            let checkpoints = store.checkpoints(id).await.unwrap();
            assert_eq!(checkpoints.len(), 1, "{name}: {label}'s checkpoint c1: {checkpoints:?}");
            assert_eq!(checkpoints[0].0, "c1", "{name}: {label}");
            assert!(kinds.contains(&"checkpoint"), "{name}: {label}: {kinds:?}");
        }
    }
}

/// The next free sequence number of the run's journal.
async fn next_seq(store: &dyn Store, id: &str) -> u64 {
    store.journal(id).await.unwrap().iter().map(|e| e.end).max().unwrap_or(0)
}

/// Claims the suspended or failed run `id` as `how`, journals one more
/// call, and finishes it.
async fn resume_and_finish(store: &dyn Store, id: &str, how: Claim, input: Option<&str>, name: &str) {
    let claimed = store.claim(id, how, lease(), input.map(String::from), nexo_store::now_ms()).await.unwrap();
    assert_eq!(claimed.status, RunStatus::Running, "{name}: {id}");
    assert_eq!(claimed.resume_input.as_deref(), input, "{name}: {id}");
    let seq = next_seq(store, id).await;
    let entry = Entry {
        seq,
        end: seq + 1,
        interface: "nexo:plugin/tools".into(),
        function: "write-file".into(),
        args_hash: sha256_hex("after the upgrade"),
        result: "\"ok\"".into(),
        started_ms: Some(nexo_store::now_ms()),
        ended_ms: Some(nexo_store::now_ms()),
    };
    let event = NewEvent { kind: "tool_result".into(), data: json!({"ok": true}), at_ms: nexo_store::now_ms() };
    let batch = Batch { journal: vec![entry.clone()], events: vec![event], ..Batch::default() };
    store.commit(id, OWNER, batch).await.unwrap();
    let done = Transition::Finish { status: RunStatus::Done, result: Some("resumed".into()), error: None };
    let before = store.run_usage(id).await.unwrap();
    store
        .add_run_usage(id, nexo_store::RunUsage { tokens: 15, cpu_ticks: 2, egress_bytes: 0, cost_nanos: 0 })
        .await
        .unwrap();
    let after = nexo_store::RunUsage { tokens: before.tokens + 15, cpu_ticks: before.cpu_ticks + 2, ..before };
    assert_eq!(store.run_usage(id).await.unwrap(), after, "{name}: {id}'s usage over its passes");
    let finished = store.transition(id, OWNER, Batch::default(), done).await.unwrap();
    assert_eq!(finished.status, RunStatus::Done, "{name}: {id}");
    assert_eq!(store.journal(id).await.unwrap().last(), Some(&entry), "{name}: {id}'s journal goes on");
}

async fn runs_go_on(store: &dyn Store, fixture: &Fixture, name: &str) {
    for label in ["cli-approval", "serve-approval"] {
        let Some(id) = fixture.run(label) else { continue };
        let pending = store.approval(id).await.unwrap().unwrap_or_else(|| panic!("{name}: {label}'s approval"));
        assert_eq!((pending.capability.as_str(), pending.decision), ("write", None), "{name}: {label}: {pending:?}");
        assert_eq!(pending.arguments, json!(["notes.txt", "hello"]), "{name}: {label}");
        let stale = nexo_store::PendingCall { seq: pending.seq + 1, args_hash: pending.args_hash.clone() };
        let refused = store.decide(id, &stale, Decision::Approved).await;
        assert!(matches!(refused, Err(StoreError::StaleApproval { .. })), "{name}: {label}: {refused:?}");
        let decided = store.decide(id, &pending.call(), Decision::Approved).await.unwrap();
        assert_eq!(decided.decision, Some(Decision::Approved), "{name}: {label}");
        resume_and_finish(store, id, Claim::Resume, None, name).await;
    }
    for label in ["cli-input", "serve-input"] {
        let Some(id) = fixture.run(label) else { continue };
        let run = store.run(id).await.unwrap().unwrap();
        assert!(run.suspend_reason.as_deref().is_some_and(|r| r.contains("need-input")), "{name}: {label}: {run:?}");
        resume_and_finish(store, id, Claim::Resume, Some("{\"ok\":true}"), name).await;
    }
    if let Some(id) = fixture.run("cli-failed") {
        resume_and_finish(store, id, Claim::Retry, None, name).await;
    }
    for label in ["cli-cancelled", "serve-cancelled"] {
        let Some(id) = fixture.run(label) else { continue };
        let again = store.cancel(id, "again").await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{name}: {label} stays cancelled: {again:?}");
    }
}

async fn sessions_go_on(store: &dyn Store, fixture: &Fixture, name: &str) {
    for (session, prompt) in [("session", "cli-chat"), ("serve-session", "serve-chat")] {
        let Some(id) = fixture.fact(session) else { continue };
        let found = store.session_by_id(id).await.unwrap().unwrap_or_else(|| panic!("{name}: {session}"));
        let thread = store.thread(id).await.unwrap();
        assert_eq!(thread.len() as u64, found.messages, "{name}: {session}'s thread");
        assert!(thread.len() >= 2, "{name}: {session}: a prompt and its answer: {thread:?}");
        let runs: Vec<String> = store.session_runs(id).await.unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(runs, [fixture.run(prompt).unwrap()], "{name}: {session}'s prompt");
        let next = vec![json!({"role": "user", "content": "after the upgrade"})];
        let appended = store.append_thread(id, found.messages, next, nexo_store::now_ms()).await.unwrap();
        assert_eq!(appended.messages, found.messages + 1, "{name}: {session} goes on");
    }
}

async fn queued_jobs_are_claimed(store: &dyn Store, fixture: &Fixture, name: &str) {
    let jobs = store.jobs(Some(JobStatus::Queued), 1_000).await.unwrap();
    for job in &jobs {
        let run = store.run(&job.run).await.unwrap().unwrap();
        assert_eq!(job.tenant, run.tenant, "{name}: job {} is in its run's tenant's queue", job.id);
    }
    let queued: BTreeSet<String> = jobs.into_iter().map(|j| j.run).collect();
    let mut claimed = BTreeSet::new();
    while let Some(job) = store.claim_job("w:fixture", 60_000, i64::MAX / 4).await.unwrap() {
        claimed.insert(job.run);
    }
    assert_eq!(claimed, queued, "{name}: every queued job is claimed");
    if let Some(id) = fixture.run("cli-queued") {
        assert!(claimed.contains(id), "{name}: the queued run's job: {claimed:?}");
        let started = store.claim(id, Claim::Start, lease(), None, nexo_store::now_ms()).await.unwrap();
        assert_eq!(started.status, RunStatus::Running, "{name}");
    }
}

async fn tenants_go_on(store: &dyn Store, fixture: &Fixture, name: &str) {
    let acme = store.tenant_by_name("acme").await.unwrap().unwrap_or_else(|| panic!("{name}: tenant acme"));
    let other = store.tenant_by_name("other").await.unwrap().unwrap_or_else(|| panic!("{name}: tenant other"));
    assert_eq!(acme.policy["mode"], "approve", "{name}: acme's policy: {:?}", acme.policy);
    let key = |fact: &str| sha256_hex(fixture.fact(fact).unwrap_or_else(|| panic!("{name}: {fact}")));
    for (fact, tenant, revoked) in [
        ("acme-key", Some(&acme.id), false),
        ("acme-spare-key", Some(&acme.id), false),
        ("other-key", Some(&other.id), false),
        ("other-revoked-key", Some(&other.id), true),
        ("admin-key", None, false),
    ] {
        let found = store.key_by_hash(&key(fact)).await.unwrap().unwrap_or_else(|| panic!("{name}: {fact}"));
        assert_eq!(found.tenant.as_ref(), tenant, "{name}: {fact}'s tenant");
        assert_eq!(found.revoked_ms.is_some(), revoked, "{name}: {fact}: {found:?}");
    }
    assert!(store.key_by_hash(&sha256_hex("nexo_sk_never_made")).await.unwrap().is_none(), "{name}");

    let served: BTreeSet<String> =
        fixture.runs.iter().filter(|(l, _)| l.starts_with("serve-")).map(|(_, r)| r.0.clone()).collect();
    let listed: BTreeSet<String> =
        store.tenant_runs(&acme.id, None, 1_000).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(listed, served, "{name}: acme's runs");
    let plugins = store.plugins(&acme.id).await.unwrap();
    assert_eq!(plugins.len(), 1, "{name}: acme's plugin");
    let bytes = store.plugin_bytes(&acme.id, &plugins[0].sha256).await.unwrap().unwrap();
    assert_eq!((sha256_hex(&bytes), bytes.len() as u64), (plugins[0].sha256.clone(), plugins[0].size), "{name}");
    assert!(!store.usage(&acme.id, 0).await.unwrap().is_empty(), "{name}: acme's usage");

    for tenant in [&acme, &other] {
        let entries = store.audit(&tenant.id, 0, 10_000).await.unwrap();
        let head = store.audit_head(&tenant.id).await.unwrap();
        let verified = verify_audit(&entries, head.as_ref().map(|(s, h)| (*s, h.as_str())));
        assert_eq!(verified, Ok(entries.len() as u64), "{name}: {}'s audit chain", tenant.name);
        assert!(entries.iter().any(|e| e.kind == "tenant.created"), "{name}: {}", tenant.name);
        store.append_audit(&tenant.id, "fixture.checked", &json!({"by": "test"}), nexo_store::now_ms()).await.unwrap();
        let entries = store.audit(&tenant.id, 0, 10_000).await.unwrap();
        let head = store.audit_head(&tenant.id).await.unwrap();
        let verified = verify_audit(&entries, head.as_ref().map(|(s, h)| (*s, h.as_str())));
        assert_eq!(verified, Ok(entries.len() as u64), "{name}: {}'s chain goes on", tenant.name);
    }

    if let Some(cookie) = fixture.fact("sign-in-cookie") {
        let at: i64 = fixture.fact("written-ms").unwrap().parse().unwrap();
        let sign_in = store.sign_in(&sha256_hex(cookie), at).await.unwrap();
        let sign_in = sign_in.unwrap_or_else(|| panic!("{name}: the console sign-in"));
        assert_eq!((sign_in.tenant, sign_in.key_hash), (acme.id.clone(), key("acme-key")), "{name}");
    }
}
