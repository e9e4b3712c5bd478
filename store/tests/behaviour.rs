//! One behavioural suite, run against every backend: `MemoryStore`,
//! `SqliteStore` (on a real file in a temporary directory) and `PgStore`
//! (in a database of its own on the `NEXO_TEST_POSTGRES` server) must agree
//! on every rule and every refusal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::Arc;

mod support;

use nexo_store::{
    AUDIT_GENESIS, ApiKey, Approval, Batch, Claim, Decision, Entry, Job, JobKind, JobLease, JobStatus, Lease,
    MemoryStore, NewApiKey, NewEvent, NewJob, NewPlugin, NewRun, NewTenant, PendingCall, PgStore, PluginAcceptance,
    Retry, RunStatus, RunUsage, Session, SignIn, SqliteStore, Store, StoreError, StoredPlugin, Tenant, ThreadAppend,
    Transition, USAGE_PERIOD_MS, Usage, Waiting, audit_hash, sha256_hex, verify_audit, wake_token,
};
use serde_json::{Value, json};

/// A store and whatever must live as long as it.
struct Fixture {
    store: Arc<dyn Store>,
    _dir: Option<tempfile::TempDir>,
}

async fn memory() -> Fixture {
    Fixture { store: Arc::new(MemoryStore::new()), _dir: None }
}

async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("nexo.db")).await.unwrap();
    Fixture { store: Arc::new(store), _dir: Some(dir) }
}

/// A store in a fresh database, or `None` when there is no server (see
/// `support::server`).
async fn postgres(test: &str) -> Option<(Arc<PgStore>, support::TestDb)> {
    let db = support::fresh(test).await?;
    let store = PgStore::open(&db.url).await.unwrap();
    Some((Arc::new(store), db))
}

/// Each listed `async fn(Arc<dyn Store>)` becomes one test per backend:
/// `memory::NAME`, `sqlite::NAME` and `postgres::NAME`.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    let fixture = super::memory().await;
                    super::$name(fixture.store.clone()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let fixture = super::sqlite().await;
                    super::$name(fixture.store.clone()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let test = concat!("postgres::", stringify!($name));
                    let Some((store, db)) = super::postgres(test).await else { return };
                    super::$name(store.clone()).await;
                    store.close().await;
                    db.drop().await;
                }
            )*
        }
    };
}

suite!(
    create_get_and_list,
    duplicate_run_is_a_conflict,
    commit_reads_back,
    checkpoints_are_written_once,
    a_journal_entry_is_written_once,
    only_the_lease_owner_commits,
    start_claims_a_queued_run,
    recover_needs_an_expired_lease,
    resume_records_input_and_an_event,
    resume_refusals_name_the_state,
    claims_of_a_missing_run,
    renew_only_while_owned,
    suspend_with_approval_decide_and_clear,
    a_decision_and_its_resume_are_one_write,
    a_queued_run_and_its_start_are_one_write,
    a_sleeping_run_is_woken_by_its_job_when_due,
    a_resume_or_a_cancel_before_the_timer_ends_its_wake,
    due_wakes_are_queued_earliest_first_in_turn,
    a_signal_wakes_the_run_waiting_for_it_and_not_another,
    a_signal_sent_before_the_wait_is_kept_for_it,
    signals_are_refused_for_a_finished_run_and_past_their_limits,
    a_child_is_recorded_with_its_parents_batch_and_its_end_wakes_the_parent,
    cancelling_a_run_cancels_its_unfinished_children,
    a_schedule_is_added_listed_paused_and_deleted,
    an_occurrence_fires_once_and_records_its_run_with_its_start,
    concurrent_firings_of_one_occurrence_start_one_run,
    a_newer_suspension_replaces_the_approval,
    a_decision_binds_to_the_call_it_was_shown,
    a_retried_failure_is_queued_not_final,
    finish_ends_the_run,
    finish_needs_a_final_status,
    cancel_rules,
    orphans_are_expired_running_runs,
    reads_of_a_missing_run_are_empty,
    jobs_enqueue_claim_and_complete,
    a_job_not_yet_due_is_not_claimed,
    jobs_are_claimed_in_queue_order,
    tenants_take_turns_at_the_queue,
    a_retry_takes_a_new_turn,
    a_lapsed_job_is_reclaimed_before_the_next_in_turn,
    a_stale_token_is_refused_after_a_reclaim,
    one_heartbeat_renews_many_jobs,
    failures_back_off_then_stay_failed,
    a_reclaimed_job_gets_a_greater_token,
    a_job_whose_lease_lapses_every_attempt_fails,
    a_session_is_opened_once_per_address,
    sessions_are_listed_most_recently_updated_first,
    sessions_are_listed_by_prefix_without_the_others,
    an_append_needs_the_count_it_started_from,
    runs_link_to_their_session,
    deleting_a_session_deletes_its_thread_and_runs_only,
    expiry_deletes_sessions_updated_before_the_cut_only,
    a_prompt_appends_its_exchange_with_its_end,
    a_stale_thread_append_refuses_the_whole_transition,
    a_thread_append_names_the_runs_own_session,
    a_session_has_one_prompt_in_progress_at_a_time,
    a_retry_never_forks_a_thread,
    expiry_passes_over_a_session_with_a_prompt_in_progress,
    concurrent_prompts_of_one_session_admit_one,
    a_concurrent_retry_and_new_prompt_admit_one,
    tenants_are_created_read_listed_and_updated,
    a_tenant_id_or_name_is_taken_once,
    keys_are_created_found_listed_and_revoked,
    a_key_needs_a_hash_a_free_id_and_its_tenant,
    console_sign_ins_open_expire_and_end,
    plugins_are_stored_once_and_listed_newest_first,
    plugins_are_private_to_their_tenant,
    a_plugin_acceptance_is_written_over_only_the_digest_it_was_decided_on,
    tenant_runs_are_only_the_tenants,
    a_run_of_a_missing_tenant_is_refused,
    the_audit_log_is_a_chain_that_verifies,
    concurrent_audit_appends_make_one_chain,
    every_tenants_audit_head_is_listed,
    usage_adds_up_per_hour,
    a_runs_usage_adds_up_over_its_passes_and_goes_with_it,
    a_runs_pass_traces_are_kept_once_in_order_and_go_with_it,
    live_runs_are_those_that_run_or_may_run,
    running_runs_are_those_that_hold_a_worker,
    what_waits_is_counted_per_tenant,
    a_postponed_job_waits_without_using_an_attempt,
);

const OWNER: &str = "host:1:a";
const OTHER: &str = "host:2:b";
const FAR: i64 = i64::MAX / 2;

fn lease(owner: &str, until_ms: i64) -> Lease {
    Lease { owner: owner.into(), until_ms }
}

fn new_run(id: &str, status: RunStatus, created_ms: i64) -> NewRun {
    NewRun {
        id: id.into(),
        agent: "hello".into(),
        kind: "component".into(),
        source: "/agents/hello.wasm".into(),
        component_sha256: "ab".repeat(32),
        input: "What is in this workspace? ✓".into(),
        grant: json!({"allow": ["files", "fetch"], "limits": {"turns": 8, "ratio": 0.25}, "mode": null}),
        status,
        lease: (status == RunStatus::Running).then(|| lease(OWNER, FAR)),
        created_ms,
        session: None,
        tenant: None,
    }
}

async fn running(store: &Arc<dyn Store>, id: &str) {
    store.create_run(new_run(id, RunStatus::Running, 1_000)).await.unwrap();
}

fn entry(seq: u64) -> Entry {
    Entry {
        seq,
        end: seq + 1,
        interface: "nexo:plugin/tools".into(),
        function: "read-file".into(),
        args_hash: format!("{seq:064x}"),
        result: format!(r#"{{"ok":"contents of file {seq}"}}"#),
        // When it ran, which the timeline reads back.
        started_ms: Some(1_000 + seq as i64),
        ended_ms: seq.is_multiple_of(2).then_some(1_001 + seq as i64),
    }
}

fn event(kind: &str, n: i64) -> NewEvent {
    NewEvent { kind: kind.into(), data: json!({"n": n, "text": "é"}), at_ms: 5_000 + n }
}

fn approval(seq: u64, tool: &str) -> Approval {
    Approval {
        seq,
        capability: "shell".into(),
        tool: tool.into(),
        arguments: json!({"command": "rm -rf build"}),
        args_hash: "cd".repeat(32),
        component_sha256: "ab".repeat(32),
        decision: None,
        created_ms: 7_000,
    }
}

fn suspend(reason: &str, approval: Option<Approval>) -> Transition {
    Transition::Suspend { reason: reason.into(), resume_key: Some("key-1".into()), approval, wake: None, signal: None }
}

fn done(result: &str) -> Transition {
    Transition::Finish { status: RunStatus::Done, result: Some(result.into()), error: None }
}

fn failed(error: &str) -> Transition {
    Transition::Finish { status: RunStatus::Failed, result: None, error: Some(error.into()) }
}

#[track_caller]
fn conflict(result: Result<impl std::fmt::Debug, StoreError>, needle: &str) {
    match result {
        Err(StoreError::Conflict(message)) => {
            assert!(message.contains(needle), "expected a conflict mentioning {needle:?}, got {message:?}")
        }
        other => panic!("expected a conflict mentioning {needle:?}, got {other:?}"),
    }
}

/// The call `approval(seq, …)` is for.
fn call(seq: u64) -> PendingCall {
    PendingCall { seq, args_hash: "cd".repeat(32) }
}

#[track_caller]
fn stale(result: Result<impl std::fmt::Debug, StoreError>, needle: &str) {
    match result {
        Err(e @ StoreError::StaleApproval { .. }) => {
            let message = e.to_string();
            assert!(message.contains(needle), "expected a stale approval mentioning {needle:?}, got {message:?}");
            assert!(message.contains("nothing was decided"), "{message}");
        }
        other => panic!("expected a stale approval mentioning {needle:?}, got {other:?}"),
    }
}

#[track_caller]
fn no_run(result: Result<impl std::fmt::Debug, StoreError>, id: &str) {
    match result {
        Err(StoreError::NoRun(missing)) => assert_eq!(missing, id),
        other => panic!("expected NoRun({id}), got {other:?}"),
    }
}

async fn create_get_and_list(store: Arc<dyn Store>) {
    let a = store.create_run(new_run("ra", RunStatus::Queued, 1_000)).await.unwrap();
    let b = store.create_run(new_run("rb", RunStatus::Running, 2_000)).await.unwrap();
    let c = store.create_run(new_run("rc", RunStatus::Queued, 3_000)).await.unwrap();
    // Same creation time as `rc`: the id breaks the tie, newest (largest) first.
    let d = store.create_run(new_run("rd", RunStatus::Queued, 3_000)).await.unwrap();

    assert_eq!(a.status, RunStatus::Queued);
    assert_eq!(a.updated_ms, 1_000);
    assert_eq!(a.lease, None);
    assert_eq!(b.lease, Some(lease(OWNER, FAR)));
    assert_eq!(b.suspend_reason, None);
    assert_eq!(b.resume_input, None);

    // What `create_run` returned is what is stored, JSON grant included.
    assert_eq!(store.run("ra").await.unwrap().as_ref(), Some(&a));
    assert_eq!(store.run("rb").await.unwrap().as_ref(), Some(&b));
    assert_eq!(store.run("nope").await.unwrap(), None);

    let ids = |runs: Vec<nexo_store::Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(store.runs(None, 10).await.unwrap()), ["rd", "rc", "rb", "ra"]);
    assert_eq!(ids(store.runs(Some(RunStatus::Queued), 10).await.unwrap()), ["rd", "rc", "ra"]);
    assert_eq!(ids(store.runs(Some(RunStatus::Running), 10).await.unwrap()), ["rb"]);
    assert!(store.runs(Some(RunStatus::Done), 10).await.unwrap().is_empty());
    assert_eq!(ids(store.runs(None, 2).await.unwrap()), ["rd", "rc"]);
    assert!(store.runs(None, 0).await.unwrap().is_empty());
    assert_eq!(store.runs(None, usize::MAX).await.unwrap().len(), 4);
    assert_eq!(store.runs(None, 10).await.unwrap()[0], d);
    assert_eq!(store.runs(None, 10).await.unwrap()[1], c);
}

async fn duplicate_run_is_a_conflict(store: Arc<dyn Store>) {
    store.create_run(new_run("ra", RunStatus::Queued, 1_000)).await.unwrap();
    let mut again = new_run("ra", RunStatus::Running, 2_000);
    again.agent = "other".into();
    conflict(store.create_run(again).await, "a run `ra` already exists");
    assert_eq!(store.run("ra").await.unwrap().unwrap().agent, "hello");
}

async fn commit_reads_back(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    running(&store, "r2").await;
    let batch = Batch {
        journal: vec![entry(0), entry(1)],
        events: vec![event("tool_call", 1), event("tool_result", 2)],
        checkpoints: vec![("plan".into(), json!({"steps": [1, 2, 3]})), ("draft".into(), json!("text"))],
        thread: None,
        children: Vec::new(),
    };
    store.commit("r1", OWNER, batch).await.unwrap();
    // The one-entry fast path.
    store.commit("r1", OWNER, Batch { journal: vec![entry(2)], ..Batch::default() }).await.unwrap();
    // Another run's writes interleave with r1's events.
    store.commit("r2", OWNER, Batch { events: vec![event("other", 3)], ..Batch::default() }).await.unwrap();
    store.commit("r1", OWNER, Batch { events: vec![event("done", 4)], ..Batch::default() }).await.unwrap();
    store.commit("r1", OWNER, Batch::default()).await.unwrap();

    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0), entry(1), entry(2)]);
    assert!(store.journal("r2").await.unwrap().is_empty());

    let events = store.events("r1", 0, 100).await.unwrap();
    assert_eq!(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["tool_call", "tool_result", "done"]);
    assert!(events.windows(2).all(|w| w[0].id < w[1].id), "ids increase: {events:?}");
    assert!(events.iter().all(|e| e.run == "r1"));
    assert_eq!(events[0].data, json!({"n": 1, "text": "é"}));
    assert_eq!(events[0].at_ms, 5_001);
    let other = store.events("r2", 0, 100).await.unwrap();
    assert_eq!(other.len(), 1);
    assert!(other[0].id > events[1].id && other[0].id < events[2].id, "ids are store-wide");

    let after_first = store.events("r1", events[0].id, 100).await.unwrap();
    assert_eq!(after_first, events[1..].to_vec());
    assert_eq!(store.events("r1", events[0].id, 1).await.unwrap(), events[1..2].to_vec());
    assert!(store.events("r1", events[2].id, 100).await.unwrap().is_empty());
    assert!(store.events("r1", 0, 0).await.unwrap().is_empty());
    assert_eq!(store.events("r1", -5, usize::MAX).await.unwrap(), events);

    assert_eq!(
        store.checkpoints("r1").await.unwrap(),
        vec![("draft".to_string(), json!("text")), ("plan".to_string(), json!({"steps": [1, 2, 3]}))],
        "sorted by name"
    );
}

async fn checkpoints_are_written_once(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let put = |pairs: &[(&str, Value)]| Batch {
        checkpoints: pairs.iter().map(|(n, v)| (n.to_string(), v.clone())).collect(),
        ..Batch::default()
    };
    store.commit("r1", OWNER, put(&[("a", json!(1))])).await.unwrap();
    store.commit("r1", OWNER, put(&[("a", json!(2)), ("b", json!(3)), ("b", json!(4))])).await.unwrap();
    assert_eq!(store.checkpoints("r1").await.unwrap(), vec![("a".to_string(), json!(1)), ("b".to_string(), json!(3))]);
    // In a transition too.
    store.transition("r1", OWNER, put(&[("a", json!(5)), ("c", json!(6))]), suspend("wait", None)).await.unwrap();
    assert_eq!(
        store.checkpoints("r1").await.unwrap(),
        vec![("a".to_string(), json!(1)), ("b".to_string(), json!(3)), ("c".to_string(), json!(6))]
    );
}

async fn a_journal_entry_is_written_once(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.commit("r1", OWNER, Batch { journal: vec![entry(0), entry(1)], ..Batch::default() }).await.unwrap();

    // Alone (one statement) and in a batch (one transaction): refused whole.
    let again = Batch { journal: vec![entry(1)], ..Batch::default() };
    conflict(store.commit("r1", OWNER, again).await, "already has journal entry 1");
    let batch = Batch { journal: vec![entry(2), entry(0)], events: vec![event("tool_call", 1)], ..Batch::default() };
    conflict(store.commit("r1", OWNER, batch).await, "already has journal entry 0");
    let twice = Batch { journal: vec![entry(3), entry(3)], ..Batch::default() };
    conflict(store.commit("r1", OWNER, twice).await, "already has journal entry 3");
    let transition = Batch { journal: vec![entry(1)], events: vec![event("x", 2)], ..Batch::default() };
    conflict(store.transition("r1", OWNER, transition, suspend("wait", None)).await, "already has journal entry 1");

    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0), entry(1)]);
    assert!(store.events("r1", 0, 100).await.unwrap().is_empty());
    assert_eq!(store.run("r1").await.unwrap().unwrap().status, RunStatus::Running);
    // The run goes on.
    store.commit("r1", OWNER, Batch { journal: vec![entry(2)], ..Batch::default() }).await.unwrap();
    assert_eq!(store.journal("r1").await.unwrap().len(), 3);
}

async fn only_the_lease_owner_commits(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let one = Batch { journal: vec![entry(0)], ..Batch::default() };
    let many = Batch { journal: vec![entry(0)], events: vec![event("tool_call", 1)], ..Batch::default() };
    let owned_elsewhere = "is no longer owned by this process (it is running)";
    conflict(store.commit("r1", OTHER, one.clone()).await, owned_elsewhere);
    conflict(store.commit("r1", OTHER, many.clone()).await, owned_elsewhere);
    conflict(store.commit("r1", OTHER, Batch::default()).await, owned_elsewhere);
    conflict(store.transition("r1", OTHER, Batch::default(), suspend("wait", None)).await, owned_elsewhere);
    conflict(store.clear_approval("r1", OTHER).await, owned_elsewhere);
    assert!(store.journal("r1").await.unwrap().is_empty());
    assert!(store.events("r1", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.run("r1").await.unwrap().unwrap().status, RunStatus::Running);

    no_run(store.commit("missing", OWNER, one.clone()).await, "missing");
    no_run(store.commit("missing", OWNER, many.clone()).await, "missing");
    no_run(store.commit("missing", OWNER, Batch::default()).await, "missing");
    no_run(store.transition("missing", OWNER, Batch::default(), suspend("wait", None)).await, "missing");
    no_run(store.clear_approval("missing", OWNER).await, "missing");

    // Once cancelled, the owner's writes are refused.
    store.cancel("r1", "operator").await.unwrap();
    let cancelled = "is no longer owned by this process (it is cancelled)";
    conflict(store.commit("r1", OWNER, one).await, cancelled);
    conflict(store.commit("r1", OWNER, many).await, cancelled);
    conflict(store.transition("r1", OWNER, Batch::default(), suspend("wait", None)).await, cancelled);

    // A queued run has no owner at all.
    store.create_run(new_run("r2", RunStatus::Queued, 1)).await.unwrap();
    conflict(store.commit("r2", OWNER, Batch::default()).await, "(it is queued)");
}

async fn start_claims_a_queued_run(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1_000)).await.unwrap();
    let run = store.claim("r1", Claim::Start, lease(OWNER, 60_000), Some("ignored".into()), 2_000).await.unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.lease, Some(lease(OWNER, 60_000)));
    assert_eq!(run.updated_ms, 2_000);
    assert_eq!(run.resume_input, None, "only a resume records its input");
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert!(store.events("r1", 0, 10).await.unwrap().is_empty(), "a start appends no event");

    conflict(
        store.claim("r1", Claim::Start, lease(OTHER, 60_000), None, 2_000).await,
        "run `r1` is running, not queued",
    );
    store.commit("r1", OWNER, Batch { journal: vec![entry(0)], ..Batch::default() }).await.unwrap();
    store.transition("r1", OWNER, Batch::default(), suspend("wait", None)).await.unwrap();
    conflict(store.claim("r1", Claim::Start, lease(OTHER, 1), None, 2_000).await, "run `r1` is suspended, not queued");
}

async fn recover_needs_an_expired_lease(store: Arc<dyn Store>) {
    store
        .create_run(NewRun { lease: Some(lease(OWNER, 10_000)), ..new_run("r1", RunStatus::Running, 1) })
        .await
        .unwrap();
    let not_orphan = "its owner's lease has not run out; it is not an orphan";
    conflict(store.claim("r1", Claim::Recover, lease(OTHER, 90_000), None, 9_999).await, not_orphan);
    // The lease ends *before* `now`: at exactly its end it still holds.
    conflict(store.claim("r1", Claim::Recover, lease(OTHER, 90_000), None, 10_000).await, not_orphan);
    let run = store.claim("r1", Claim::Recover, lease(OTHER, 90_000), None, 10_001).await.unwrap();
    assert_eq!(run.lease, Some(lease(OTHER, 90_000)));
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.updated_ms, 10_001);
    assert!(store.events("r1", 0, 10).await.unwrap().is_empty(), "a recovery appends no event");

    // The old owner is out; the new one writes.
    let one = Batch { journal: vec![entry(0)], ..Batch::default() };
    conflict(store.commit("r1", OWNER, one.clone()).await, "no longer owned");
    assert!(store.renew_leases(OWNER, &ids(&["r1"]), 99_000).await.unwrap().is_empty());
    store.commit("r1", OTHER, one).await.unwrap();

    store.create_run(new_run("r2", RunStatus::Queued, 1)).await.unwrap();
    conflict(
        store.claim("r2", Claim::Recover, lease(OTHER, 1), None, FAR).await,
        "run `r2` is queued, not an orphaned running run",
    );
}

async fn resume_records_input_and_an_event(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let suspended = store.transition("r1", OWNER, Batch::default(), suspend("waiting for input", None)).await.unwrap();
    assert_eq!(suspended.status, RunStatus::Suspended);
    assert_eq!(suspended.suspend_reason.as_deref(), Some("waiting for input"));
    assert_eq!(suspended.resume_key.as_deref(), Some("key-1"));
    assert_eq!(suspended.lease, None);

    let input = r#"{"answer": 42}"#.to_string();
    let run = store.claim("r1", Claim::Resume, lease(OTHER, 50_000), Some(input.clone()), 20_000).await.unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.resume_input.as_deref(), Some(input.as_str()));
    assert_eq!(run.suspend_reason, None);
    assert_eq!(run.lease, Some(lease(OTHER, 50_000)));
    assert_eq!(run.updated_ms, 20_000);
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    let events = store.events("r1", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].kind.as_str(), &events[0].data, events[0].at_ms), ("resumed", &json!({}), 20_000));

    // A second resume replaces the input; none clears it.
    store.transition("r1", OTHER, Batch::default(), suspend("again", None)).await.unwrap();
    let run = store.claim("r1", Claim::Resume, lease(OWNER, 50_000), None, 21_000).await.unwrap();
    assert_eq!(run.resume_input, None);
    assert_eq!(store.events("r1", 0, 10).await.unwrap().len(), 2);
}

fn sleep_until(wake: &str, run: &str, until_ms: i64) -> Transition {
    let job = NewJob { run: run.into(), kind: JobKind::Wake, ..new_job(wake, until_ms, 1_000) };
    Transition::Suspend {
        reason: "sleeping".into(),
        resume_key: None,
        approval: None,
        wake: Some(Box::new(job)),
        signal: None,
    }
}

/// A run that sleeps on a timer is suspended with its wake, a job that
/// sleeps (no turn, not due, not live) until its time; then a claim queues
/// it and takes it, and the wake's claim of the run resumes it, keeping its
/// resume input.
async fn a_sleeping_run_is_woken_by_its_job_when_due(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let run = store.transition("r1", OWNER, Batch::default(), sleep_until("w1", "r1", 10_000)).await.unwrap();
    assert_eq!((run.status, run.wake_ms), (RunStatus::Suspended, Some(10_000)));
    assert_eq!(store.run("r1").await.unwrap().unwrap().wake_ms, Some(10_000));
    let wake = store.job("w1").await.unwrap().unwrap();
    assert_eq!(
        (wake.kind, wake.status, wake.turn, wake.not_before_ms),
        (JobKind::Wake, JobStatus::Sleeping, 0, 10_000)
    );
    assert!(!store.has_live_job("r1").await.unwrap(), "a sleeping wake is not a live job");
    assert_eq!(store.next_wake_ms().await.unwrap(), Some(10_000));
    assert_eq!(store.claim_job("worker", 5_000, 9_999).await.unwrap(), None, "not yet due");
    assert_eq!(store.job("w1").await.unwrap().unwrap().status, JobStatus::Sleeping);

    let (job, lease_of_job) = claim(&store, "worker", 5_000, 10_000).await;
    assert_eq!((job.id.as_str(), job.status, job.kind), ("w1", JobStatus::Running, JobKind::Wake));
    assert_eq!(store.next_wake_ms().await.unwrap(), None);
    let run = store
        .claim("r1", Claim::Wake { until_ms: Some(10_000), token: wake_token("w1") }, lease(OTHER, FAR), None, 10_001)
        .await
        .unwrap();
    assert_eq!((run.status, run.wake_ms, run.suspend_reason.as_deref()), (RunStatus::Running, None, None));
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    let events = store.events("r1", 0, 10).await.unwrap();
    assert_eq!(
        events.last().map(|e| (e.kind.as_str(), e.data.clone())),
        Some(("resumed", json!({"woken": true, "wake_ms": 10_000})))
    );
    store.complete_job(&job.id, &lease_of_job, 10_002).await.unwrap();
    // Woken once: the same timer's claim again is refused.
    store.transition("r1", OTHER, Batch::default(), suspend("input", None)).await.unwrap();
    conflict(
        store
            .claim(
                "r1",
                Claim::Wake { until_ms: Some(10_000), token: wake_token("w1") },
                lease(OWNER, FAR),
                None,
                10_003,
            )
            .await,
        "run `r1` no longer sleeps on this timer",
    );
}

/// Resumed before its timer is due, or cancelled, a sleeping run's wake is
/// ended with why, and a wake already taken cannot claim the run.
async fn a_resume_or_a_cancel_before_the_timer_ends_its_wake(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.transition("r1", OWNER, Batch::default(), sleep_until("w1", "r1", 60_000)).await.unwrap();
    let run = store.claim("r1", Claim::Resume, lease(OTHER, FAR), Some("1".into()), 20_000).await.unwrap();
    assert_eq!((run.status, run.wake_ms), (RunStatus::Running, None));
    let wake = store.job("w1").await.unwrap().unwrap();
    assert_eq!(wake.status, JobStatus::Done);
    assert!(wake.error.as_deref().is_some_and(|e| e.contains("resumed before its timer")), "{wake:?}");
    let events = store.events("r1", 0, 10).await.unwrap();
    assert_eq!(events.last().map(|e| e.data.clone()), Some(json!({"early": true, "wake_ms": 60_000})));
    assert_eq!(store.next_wake_ms().await.unwrap(), None);
    assert_eq!(store.claim_job("worker", 5_000, 70_000).await.unwrap(), None, "no wake is left to claim");

    store.transition("r1", OTHER, Batch::default(), sleep_until("w2", "r1", 80_000)).await.unwrap();
    let cancelled = store.cancel("r1", "stop").await.unwrap();
    assert_eq!(cancelled.wake_ms, None);
    let wake = store.job("w2").await.unwrap().unwrap();
    assert_eq!((wake.status, wake.error.as_deref()), (JobStatus::Done, Some("the run was cancelled")));
    assert_eq!(store.next_wake_ms().await.unwrap(), None);
    conflict(
        store
            .claim(
                "r1",
                Claim::Wake { until_ms: Some(80_000), token: wake_token("w2") },
                lease(OWNER, FAR),
                None,
                80_001,
            )
            .await,
        "run `r1` is cancelled, no longer sleeping on this timer",
    );
}

/// Wakes that fell due are queued the earliest first, each at its queue's
/// next turn, behind what was queued before them.
async fn due_wakes_are_queued_earliest_first_in_turn(store: Arc<dyn Store>) {
    for (run, wake, until) in [("r1", "w1", 3_000), ("r2", "w2", 1_000), ("r3", "w3", 2_000)] {
        running(&store, run).await;
        store.transition(run, OWNER, Batch::default(), sleep_until(wake, run, until)).await.unwrap();
    }
    running(&store, "r4").await;
    store.enqueue(NewJob { run: "r4".into(), ..new_job("j4", 0, 1) }).await.unwrap();
    let mut order = Vec::new();
    while let Some(job) = store.claim_job("worker", 5_000, 3_000).await.unwrap() {
        order.push(job.id);
    }
    assert_eq!(order, ["j4", "w2", "w3", "w1"]);
}

fn wait_for_signal(wake: &str, run: &str, name: &str, after: i64, until_ms: Option<i64>) -> Transition {
    let not_before = until_ms.unwrap_or(nexo_store::NEVER_MS);
    let job = NewJob {
        run: run.into(),
        kind: JobKind::Wake,
        payload: json!({"run": run, "wake_ms": until_ms}),
        ..new_job(wake, not_before, 1_000)
    };
    Transition::Suspend {
        reason: format!("waiting for signal `{name}`"),
        resume_key: None,
        approval: None,
        wake: Some(Box::new(job)),
        signal: Some(nexo_store::SignalWait { name: name.into(), after }),
    }
}

/// A run waiting for a signal with no timeout has a wake that is never due
/// by itself; a signal of another name leaves it so, and one of its name
/// makes it due now, in the same write. Signals are read in the order sent.
async fn a_signal_wakes_the_run_waiting_for_it_and_not_another(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let run =
        store.transition("r1", OWNER, Batch::default(), wait_for_signal("w1", "r1", "go", 0, None)).await.unwrap();
    assert_eq!((run.status, run.wake_ms, run.signal_wait.as_deref()), (RunStatus::Suspended, None, Some("go")));
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    let wake = store.job("w1").await.unwrap().unwrap();
    assert_eq!((wake.status, wake.not_before_ms), (JobStatus::Sleeping, nexo_store::NEVER_MS));
    assert_eq!(store.claim_job("worker", 5_000, 1 << 60).await.unwrap(), None, "never due by itself");

    let other = store.send_signal("r1", "stop", "1").await.unwrap();
    assert_eq!(store.job("w1").await.unwrap().unwrap().not_before_ms, nexo_store::NEVER_MS, "not its signal");
    let first = store.send_signal("r1", "go", r#"{"n":1}"#).await.unwrap();
    let second = store.send_signal("r1", "go", "2").await.unwrap();
    assert!(other.id < first.id && first.id < second.id, "ids follow the order sent");
    let wake = store.job("w1").await.unwrap().unwrap();
    assert_eq!(wake.status, JobStatus::Sleeping);
    assert!(wake.not_before_ms <= nexo_store::now_ms(), "due now: {wake:?}");
    let kinds: Vec<_> = store.events("r1", 0, 10).await.unwrap().into_iter().map(|e| (e.kind, e.data)).collect();
    assert_eq!(kinds[1], ("signal".to_string(), json!({"name": "go", "signal": first.id})));

    let (job, _) = claim(&store, "worker", 5_000, nexo_store::now_ms()).await;
    assert_eq!(job.id, "w1");
    let run = store
        .claim("r1", Claim::Wake { until_ms: None, token: wake_token("w1") }, lease(OTHER, FAR), None, 20_000)
        .await
        .unwrap();
    assert_eq!((run.status, run.signal_wait), (RunStatus::Running, None));
    let taken = store.next_signal("r1", "go", 0).await.unwrap().unwrap();
    assert_eq!((taken.id, taken.name.as_str(), taken.data.as_str()), (first.id, "go", r#"{"n":1}"#));
    assert_eq!(store.next_signal("r1", "go", first.id).await.unwrap().map(|s| s.data), Some("2".into()));
    assert_eq!(store.next_signal("r1", "go", second.id).await.unwrap(), None);
    // A wait with no timeout is woken by its own wake only: after the run
    // moved on to another such wait, the first's wake is refused.
    let to = wait_for_signal("w2", "r1", "go", second.id, None);
    store.transition("r1", OTHER, Batch::default(), to).await.unwrap();
    let stale = Claim::Wake { until_ms: None, token: wake_token("w1") };
    conflict(store.claim("r1", stale, lease(OWNER, FAR), None, 20_001).await, "no longer sleeps on this timer");
    store
        .claim("r1", Claim::Wake { until_ms: None, token: wake_token("w2") }, lease(OTHER, FAR), None, 20_002)
        .await
        .unwrap();
    conflict(
        store
            .claim("r1", Claim::Wake { until_ms: None, token: wake_token("w1") }, lease(OWNER, FAR), None, 20_001)
            .await,
        "run `r1` is running, no longer sleeping on this timer",
    );
}

/// A signal sent before the run waits is kept: the suspension that waits
/// for it finds it and is due at once; and a cancel ends the wait's wake.
async fn a_signal_sent_before_the_wait_is_kept_for_it(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let sent = store.send_signal("r1", "go", "null").await.unwrap();
    let to = wait_for_signal("w1", "r1", "go", 0, Some(90_000_000_000_000));
    let run = store.transition("r1", OWNER, Batch::default(), to).await.unwrap();
    assert_eq!(run.wake_ms, Some(90_000_000_000_000), "the run keeps its timeout");
    let wake = store.job("w1").await.unwrap().unwrap();
    assert!(wake.not_before_ms <= nexo_store::now_ms(), "due at once: {wake:?}");
    let (job, _) = claim(&store, "worker", 5_000, nexo_store::now_ms()).await;
    assert_eq!(job.id, "w1");
    store
        .claim(
            "r1",
            Claim::Wake { until_ms: Some(90_000_000_000_000), token: wake_token("w1") },
            lease(OTHER, FAR),
            None,
            1,
        )
        .await
        .unwrap();

    // Taken already (after its id), it wakes nothing.
    let to = wait_for_signal("w2", "r1", "go", sent.id, None);
    store.transition("r1", OTHER, Batch::default(), to).await.unwrap();
    assert_eq!(store.job("w2").await.unwrap().unwrap().not_before_ms, nexo_store::NEVER_MS);
    let cancelled = store.cancel("r1", "stop").await.unwrap();
    assert_eq!(cancelled.signal_wait, None);
    let wake = store.job("w2").await.unwrap().unwrap();
    assert_eq!((wake.status, wake.error.as_deref()), (JobStatus::Done, Some("the run was cancelled")));
}

/// A child run `id` of whichever run records it, queued with its start job `start`.
fn child(id: &str, start: &str) -> nexo_store::NewChild {
    let start = NewJob { run: id.into(), kind: JobKind::Start, payload: json!({"run": id}), ..new_job(start, 0, 1) };
    nexo_store::NewChild { run: new_run(id, RunStatus::Queued, 2_000), start }
}

/// A child exists exactly when its parent's batch does: recorded with it,
/// linked to the parent, queued with its start job. Its end is the
/// parent's signal (only the host sends one), which wakes the parent
/// waiting for it in the same write.
async fn a_child_is_recorded_with_its_parents_batch_and_its_end_wakes_the_parent(store: Arc<dyn Store>) {
    running(&store, "p1").await;
    // A batch refused (its entry is a duplicate) records no child.
    store.commit("p1", OWNER, Batch { journal: vec![entry(0)], ..Batch::default() }).await.unwrap();
    let refused = Batch { journal: vec![entry(0)], children: vec![child("c0", "s0")], ..Batch::default() };
    conflict(store.commit("p1", OWNER, refused).await, "");
    assert_eq!(store.run("c0").await.unwrap(), None, "no child without its entry");
    assert_eq!(store.job("s0").await.unwrap(), None);

    let name = nexo_store::child_signal("c1");
    let wait = wait_for_signal("w1", "p1", &name, 0, None);
    let batch = Batch { journal: vec![entry(1)], children: vec![child("c1", "s1")], ..Batch::default() };
    store.transition("p1", OWNER, batch, wait).await.unwrap();
    let c1 = store.run("c1").await.unwrap().unwrap();
    assert_eq!((c1.parent.as_deref(), c1.status), (Some("p1"), RunStatus::Queued));
    assert_eq!(store.job("s1").await.unwrap().unwrap().status, JobStatus::Queued);
    assert_eq!(store.children("p1").await.unwrap(), vec![c1]);
    assert_eq!(store.children("c1").await.unwrap(), vec![]);
    match store.send_signal("p1", &name, r#"{"status":"done"}"#).await {
        Err(StoreError::Invalid(m)) => assert!(m.contains("are the host's own"), "{m}"),
        other => panic!("a forged end: {other:?}"),
    }

    store.claim("c1", Claim::Start, lease(OTHER, FAR), None, 3_000).await.unwrap();
    assert_eq!(store.job("w1").await.unwrap().unwrap().not_before_ms, nexo_store::NEVER_MS, "not ended yet");
    store.transition("c1", OTHER, Batch::default(), done("the answer")).await.unwrap();
    let wake = store.job("w1").await.unwrap().unwrap();
    assert!(wake.not_before_ms <= nexo_store::now_ms(), "the parent is due now: {wake:?}");
    let end = store.next_signal("p1", &name, 0).await.unwrap().expect("the child's end");
    let end: serde_json::Value = serde_json::from_str(&end.data).unwrap();
    assert_eq!(end, json!({"run": "c1", "status": "done", "result": "the answer", "error": null}));
}

/// Cancelling a run cancels its unfinished children and theirs, in the
/// same write, each with why; a finished child stays as it ended.
async fn cancelling_a_run_cancels_its_unfinished_children(store: Arc<dyn Store>) {
    running(&store, "p1").await;
    let batch = Batch { children: vec![child("c1", "s1"), child("c2", "s2")], ..Batch::default() };
    store.commit("p1", OWNER, batch).await.unwrap();
    store.claim("c1", Claim::Start, lease(OTHER, FAR), None, 3_000).await.unwrap();
    store.commit("c1", OTHER, Batch { children: vec![child("g1", "s3")], ..Batch::default() }).await.unwrap();
    store.claim("c2", Claim::Start, lease(OTHER, FAR), None, 3_000).await.unwrap();
    store.transition("c2", OTHER, Batch::default(), done("ok")).await.unwrap();

    let parent = store.cancel("p1", "stop").await.unwrap();
    assert_eq!(parent.status, RunStatus::Cancelled);
    for (id, why) in [("c1", "its parent run `p1` was cancelled"), ("g1", "its parent run `c1` was cancelled")] {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!((run.status, run.error.as_deref()), (RunStatus::Cancelled, Some(why)), "{id}");
    }
    assert_eq!(store.run("c2").await.unwrap().unwrap().status, RunStatus::Done);
    let end = store.next_signal("p1", &nexo_store::child_signal("c1"), 0).await.unwrap().expect("c1's end");
    assert!(end.data.contains(r#""status":"cancelled""#), "{}", end.data);
    // The cancelled child's owner learns at its next renewal.
    assert_eq!(store.renew_leases(OTHER, &["c1".into()], FAR).await.unwrap(), Vec::<String>::new());
}

/// A finished run takes no signal; a name or data that cannot be sent is
/// refused with why; and one run takes at most so many.
async fn signals_are_refused_for_a_finished_run_and_past_their_limits(store: Arc<dyn Store>) {
    assert!(matches!(store.send_signal("nope", "go", "1").await, Err(StoreError::NoRun(_))));
    running(&store, "r1").await;
    for (name, data, why) in
        [("", "1", "a signal needs a name"), ("go", "not json", "must be JSON"), ("a\nb", "1", "control characters")]
    {
        match store.send_signal("r1", name, data).await {
            Err(StoreError::Invalid(m)) => assert!(m.contains(why), "{m}"),
            other => panic!("{name:?} {data:?}: {other:?}"),
        }
    }
    let big = format!("\"{}\"", "x".repeat(nexo_store::MAX_SIGNAL_DATA_BYTES));
    assert!(matches!(store.send_signal("r1", "go", &big).await, Err(StoreError::Invalid(_))));
    for n in 0..nexo_store::MAX_SIGNALS_PER_RUN {
        store.send_signal("r1", "go", &n.to_string()).await.unwrap();
    }
    conflict(store.send_signal("r1", "go", "1").await, "the most one run may be sent");
    assert!(store.events("r1", 0, 2_000).await.unwrap().iter().filter(|e| e.kind == "signal").count() == 1_000);

    running(&store, "r2").await;
    store.transition("r2", OWNER, Batch::default(), done("ok")).await.unwrap();
    conflict(store.send_signal("r2", "go", "1").await, "run `r2` has finished (done)");
    assert_eq!(store.next_signal("r2", "go", 0).await.unwrap(), None, "nothing was written");
}

fn new_schedule(id: &str, tenant: Option<&str>, next_ms: i64, created_ms: i64) -> nexo_store::NewSchedule {
    let run = new_run("template", RunStatus::Queued, 0);
    nexo_store::NewSchedule {
        id: id.into(),
        tenant: tenant.map(str::to_string),
        cron: "*/5 * * * *".into(),
        timezone: "Europe/Paris".into(),
        missed: nexo_store::Missed::RunOnce,
        next_ms,
        template: nexo_store::RunTemplate {
            agent: run.agent,
            kind: run.kind,
            source: run.source,
            component_sha256: run.component_sha256,
            input: run.input,
            grant: run.grant,
        },
        created_ms,
    }
}

/// The run an occurrence of `schedule` at `due` starts, with its start job.
fn firing(schedule: &str, run: &str, due: i64, next: i64, tenant: Option<&str>) -> nexo_store::Firing {
    let new = NewRun { id: run.into(), tenant: tenant.map(str::to_string), ..new_run(run, RunStatus::Queued, due) };
    let start = NewJob { run: run.into(), kind: JobKind::Start, ..new_job(&format!("j-{run}"), due, due) };
    nexo_store::Firing {
        due_ms: due,
        next_ms: next,
        run: Some((new, start)),
        skipped: 0,
        note: format!("{schedule} fired"),
    }
}

async fn a_schedule_is_added_listed_paused_and_deleted(store: Arc<dyn Store>) {
    tenant(&store, "t1", "acme").await;
    let added = store.add_schedule(new_schedule("s1", Some("t1"), 60_000, 1_000)).await.unwrap();
    assert_eq!((added.paused, added.next_ms, added.started, added.skipped), (false, 60_000, 0, 0));
    assert_eq!(added.template.grant, new_run("x", RunStatus::Queued, 0).grant);
    assert_eq!(store.schedule("s1").await.unwrap(), Some(added.clone()));
    store.add_schedule(new_schedule("s2", None, 30_000, 2_000)).await.unwrap();
    conflict(store.add_schedule(new_schedule("s2", None, 30_000, 2_000)).await, "exists already");
    no_tenant(store.add_schedule(new_schedule("s3", Some("nobody"), 1, 1)).await, "nobody");
    let ids = |v: Vec<nexo_store::Schedule>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(store.schedules(None, 10).await.unwrap()), ["s1", "s2"]);
    assert_eq!(ids(store.schedules(Some("t1"), 10).await.unwrap()), ["s1"]);
    assert_eq!(store.next_schedule_ms().await.unwrap(), Some(30_000));
    assert_eq!(ids(store.due_schedules(60_000, 10).await.unwrap()), ["s2", "s1"], "the earliest first");

    let paused = store.set_schedule_paused("s2", true, 0).await.unwrap();
    assert!(paused.paused);
    assert_eq!(store.next_schedule_ms().await.unwrap(), Some(60_000));
    assert_eq!(ids(store.due_schedules(60_000, 10).await.unwrap()), ["s1"], "a paused schedule is never due");
    let resumed = store.set_schedule_paused("s2", false, 90_000).await.unwrap();
    assert_eq!((resumed.paused, resumed.next_ms), (false, 90_000));
    store.delete_schedule("s2").await.unwrap();
    assert!(matches!(store.delete_schedule("s2").await, Err(StoreError::NoSchedule(_))));
    assert!(matches!(store.set_schedule_paused("s2", true, 0).await, Err(StoreError::NoSchedule(_))));
    assert_eq!(store.schedule("s2").await.unwrap(), None);
}

/// Firing an occurrence moves the schedule on and records its run, queued
/// with its start job, in one write; the same occurrence again, or one of
/// a paused schedule, writes nothing; a firing that starts no run (missed,
/// or refused) is counted as skipped.
async fn an_occurrence_fires_once_and_records_its_run_with_its_start(store: Arc<dyn Store>) {
    tenant(&store, "t1", "acme").await;
    store.add_schedule(new_schedule("s1", Some("t1"), 60_000, 1_000)).await.unwrap();
    let fired = store.fire_schedule("s1", firing("s1", "r1", 60_000, 120_000, Some("t1"))).await.unwrap();
    let nexo_store::FireOutcome::Fired(Some(run)) = fired else { panic!("{fired:?}") };
    assert_eq!((run.id.as_str(), run.status, run.tenant.as_deref()), ("r1", RunStatus::Queued, Some("t1")));
    assert_eq!(store.job("j-r1").await.unwrap().map(|j| (j.kind, j.status)), Some((JobKind::Start, JobStatus::Queued)));
    let s = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!(
        (s.next_ms, s.started, s.last_run.as_deref(), s.note.as_deref()),
        (120_000, 1, Some("r1"), Some("s1 fired"))
    );

    let again = store.fire_schedule("s1", firing("s1", "r2", 60_000, 120_000, Some("t1"))).await.unwrap();
    assert_eq!(again, nexo_store::FireOutcome::Passed);
    assert_eq!(store.run("r2").await.unwrap(), None, "nothing written");

    let skip = nexo_store::Firing { due_ms: 120_000, next_ms: 600_000, run: None, skipped: 8, note: "missed".into() };
    assert_eq!(store.fire_schedule("s1", skip).await.unwrap(), nexo_store::FireOutcome::Fired(None));
    let s = store.schedule("s1").await.unwrap().unwrap();
    assert_eq!((s.next_ms, s.started, s.skipped, s.last_run.as_deref()), (600_000, 1, 8, Some("r1")));

    store.set_schedule_paused("s1", true, 0).await.unwrap();
    let paused = store.fire_schedule("s1", firing("s1", "r3", 600_000, 660_000, Some("t1"))).await.unwrap();
    assert_eq!(paused, nexo_store::FireOutcome::Passed);
    assert_eq!(store.run("r3").await.unwrap(), None);
    // A run the store refuses refuses the firing: the schedule stays on it.
    store.set_schedule_paused("s1", false, 600_000).await.unwrap();
    conflict(store.fire_schedule("s1", firing("s1", "r1", 600_000, 660_000, Some("t1"))).await, "r1");
    assert_eq!(store.schedule("s1").await.unwrap().unwrap().next_ms, 600_000);
}

/// Many firings of one occurrence at once (many nodes' ticks) start one run.
async fn concurrent_firings_of_one_occurrence_start_one_run(store: Arc<dyn Store>) {
    store.add_schedule(new_schedule("s1", None, 60_000, 1_000)).await.unwrap();
    let mut tries = tokio::task::JoinSet::new();
    for n in 0..8 {
        let store = store.clone();
        tries.spawn(async move {
            store.fire_schedule("s1", firing("s1", &format!("r{n}"), 60_000, 120_000, None)).await.unwrap()
        });
    }
    let outcomes = tries.join_all().await;
    let fired = outcomes.iter().filter(|o| matches!(o, nexo_store::FireOutcome::Fired(Some(_)))).count();
    assert_eq!(fired, 1, "{outcomes:?}");
    assert_eq!(store.runs(None, 20).await.unwrap().len(), 1);
    assert_eq!(store.schedule("s1").await.unwrap().unwrap().started, 1);
}

async fn resume_refusals_name_the_state(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    conflict(
        store.claim("r1", Claim::Resume, lease(OTHER, 1), None, 1).await,
        "run `r1` is already being resumed (it is running in another process or worker); only a suspended run \
         can be resumed",
    );
    store.create_run(new_run("r2", RunStatus::Queued, 1)).await.unwrap();
    conflict(
        store.claim("r2", Claim::Resume, lease(OTHER, 1), None, 1).await,
        "run `r2` is queued; only a suspended run can be resumed",
    );
    let finish = Transition::Finish { status: RunStatus::Done, result: Some("ok".into()), error: None };
    store.transition("r1", OWNER, Batch::default(), finish).await.unwrap();
    conflict(
        store.claim("r1", Claim::Resume, lease(OTHER, 1), None, 1).await,
        "run `r1` is done; only a suspended run can be resumed",
    );
    // A refused claim changes nothing.
    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease), (RunStatus::Done, None));
    assert!(store.events("r1", 0, 10).await.unwrap().is_empty());
}

async fn claims_of_a_missing_run(store: Arc<dyn Store>) {
    for how in [Claim::Resume, Claim::Start, Claim::Recover] {
        no_run(store.claim("missing", how, lease(OWNER, 1), None, 1).await, "missing");
    }
}

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

async fn renew_only_while_owned(store: Arc<dyn Store>) {
    for id in ["r1", "r2", "cancelled", "done"] {
        running(&store, id).await;
    }
    let elsewhere = NewRun { lease: Some(lease(OTHER, 5_000)), ..new_run("r3", RunStatus::Running, 1_000) };
    store.create_run(elsewhere).await.unwrap();
    store.cancel("cancelled", "operator").await.unwrap();
    let finish = Transition::Finish { status: RunStatus::Done, result: None, error: None };
    store.transition("done", OWNER, Batch::default(), finish).await.unwrap();

    let asked = ids(&["r1", "r2", "r3", "cancelled", "done", "missing"]);
    let mut renewed = store.renew_leases(OWNER, &asked, 123_456).await.unwrap();
    renewed.sort();
    assert_eq!(renewed, ["r1", "r2"], "only the running runs this owner holds");
    for id in ["r1", "r2"] {
        assert_eq!(store.run(id).await.unwrap().unwrap().lease, Some(lease(OWNER, 123_456)));
    }
    assert_eq!(store.run("r3").await.unwrap().unwrap().lease, Some(lease(OTHER, 5_000)), "another owner's stands");
    assert_eq!(store.run("cancelled").await.unwrap().unwrap().lease, None);
    assert_eq!(store.run("done").await.unwrap().unwrap().lease, None);

    assert_eq!(store.renew_leases(OWNER, &ids(&["r2"]), 200_000).await.unwrap(), ["r2"], "only the ids asked");
    assert_eq!(store.run("r1").await.unwrap().unwrap().lease, Some(lease(OWNER, 123_456)));
    assert!(store.renew_leases(OTHER, &ids(&["r1"]), 999_999).await.unwrap().is_empty());
    assert!(store.renew_leases(OWNER, &[], 1).await.unwrap().is_empty());

    // One write covers a node's worth of runs.
    let many: Vec<String> = (0..2_500).map(|i| format!("many-{i:05}")).collect();
    for id in &many {
        running(&store, id).await;
    }
    let mut renewed = store.renew_leases(OWNER, &many, 300_000).await.unwrap();
    renewed.sort();
    assert_eq!(renewed, many);
    assert_eq!(store.run("many-02499").await.unwrap().unwrap().lease, Some(lease(OWNER, 300_000)));
}

async fn suspend_with_approval_decide_and_clear(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let batch = Batch { journal: vec![entry(0)], events: vec![event("approval_requested", 1)], ..Batch::default() };
    let run = store.transition("r1", OWNER, batch, suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    assert_eq!(run.status, RunStatus::Suspended);
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0)], "the batch commits with the transition");
    assert_eq!(store.events("r1", 0, 10).await.unwrap().len(), 1);
    assert_eq!(store.approval("r1").await.unwrap(), Some(approval(1, "shell")));

    let decided = store.decide("r1", &call(1), Decision::Denied).await.unwrap();
    assert_eq!(decided, Approval { decision: Some(Decision::Denied), ..approval(1, "shell") });
    // A second decider (on a stale page) cannot overturn the first decision.
    match store.decide("r1", &call(1), Decision::Approved).await {
        Err(StoreError::AlreadyDecided { seq: 1, decided: Decision::Denied, .. }) => {}
        other => panic!("expected already decided, got {other:?}"),
    }
    assert_eq!(store.approval("r1").await.unwrap(), Some(decided.clone()), "the refusal decided nothing");
    // The same decision again is answered as the first was.
    assert_eq!(store.decide("r1", &call(1), Decision::Denied).await.unwrap(), decided);

    store.claim("r1", Claim::Resume, lease(OWNER, FAR), None, 30_000).await.unwrap();
    // Resumed: the approval stays for the replayed call, but is no longer decidable.
    assert_eq!(store.approval("r1").await.unwrap(), Some(decided.clone()));
    stale(store.decide("r1", &call(1), Decision::Denied).await, "run `r1` has no pending approval (it is running)");
    assert_eq!(store.approval("r1").await.unwrap(), Some(decided), "the refusal decided nothing");
    conflict(store.clear_approval("r1", OTHER).await, "no longer owned");
    store.clear_approval("r1", OWNER).await.unwrap();
    assert_eq!(store.approval("r1").await.unwrap(), None);
    store.clear_approval("r1", OWNER).await.unwrap();

    // Suspended without an approval: nothing to decide.
    store.transition("r1", OWNER, Batch::default(), suspend("input", None)).await.unwrap();
    stale(store.decide("r1", &call(1), Decision::Approved).await, "run `r1` has no pending approval (it is suspended)");
    no_run(store.decide("missing", &call(1), Decision::Approved).await, "missing");
}

/// A queued run and the job that starts it are written together: whatever
/// refuses either writes neither (a run left `queued` without its job would
/// never start).
async fn a_queued_run_and_its_start_are_one_write(store: Arc<dyn Store>) {
    let start = |id: &str, run: &str| NewJob { run: run.into(), kind: JobKind::Start, ..new_job(id, 0, 1) };
    let (run, job) = store.create_run_and_start(new_run("q1", RunStatus::Queued, 1), start("j1", "q1")).await.unwrap();
    assert_eq!((run.id.as_str(), run.status), ("q1", RunStatus::Queued));
    assert_eq!(
        (job.id.as_str(), job.run.as_str(), job.kind, job.status),
        ("j1", "q1", JobKind::Start, JobStatus::Queued)
    );
    let jobs = store.jobs(None, 10).await.unwrap();
    assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j1"]);

    // The job's id is taken: the run is not written either.
    match store.create_run_and_start(new_run("q2", RunStatus::Queued, 2), start("j1", "q2")).await {
        Err(StoreError::Conflict(reason)) => assert!(reason.contains("j1"), "{reason}"),
        other => panic!("expected a conflict on the job's id, got {other:?}"),
    }
    assert_eq!(store.run("q2").await.unwrap(), None, "no run without its start");
    // The run is refused (a taken id, a missing tenant, a missing session): no job.
    match store.create_run_and_start(new_run("q1", RunStatus::Queued, 3), start("j2", "q1")).await {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("expected a conflict on the run's id, got {other:?}"),
    }
    let of_tenant = NewRun { tenant: Some("nobody".into()), ..new_run("q3", RunStatus::Queued, 4) };
    assert!(matches!(store.create_run_and_start(of_tenant, start("j3", "q3")).await, Err(StoreError::NoTenant(_))));
    let of_session = NewRun { session: Some("nowhere".into()), ..new_run("q4", RunStatus::Queued, 5) };
    assert!(matches!(store.create_run_and_start(of_session, start("j4", "q4")).await, Err(StoreError::NoSession(_))));
    let jobs = store.jobs(None, 10).await.unwrap();
    assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j1"], "nothing refused was queued");
    for id in ["q3", "q4"] {
        assert_eq!(store.run(id).await.unwrap(), None);
    }
}

/// A decision and the job that resumes its run are written together; the
/// same decision again queues a resume only if none is live (it heals a run
/// left decided with nothing to take it on), and a refused decision queues
/// nothing.
async fn a_decision_and_its_resume_are_one_write(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    let jobs = |store: Arc<dyn Store>| async move { store.jobs(None, 10).await.unwrap() };

    let decided = store.decide_and_resume("r1", &call(1), Decision::Approved, new_job("j1", 0, 1)).await.unwrap();
    assert_eq!(decided.decision, Some(Decision::Approved));
    let queued = jobs(store.clone()).await;
    assert_eq!(queued.iter().map(|j| (j.id.as_str(), j.status)).collect::<Vec<_>>(), [("j1", JobStatus::Queued)]);
    // Again, with its resume still queued: no second one.
    store.decide_and_resume("r1", &call(1), Decision::Approved, new_job("j2", 0, 2)).await.unwrap();
    assert_eq!(jobs(store.clone()).await.len(), 1, "one resume for one decision");
    // The other decision is refused, and queues nothing.
    match store.decide_and_resume("r1", &call(1), Decision::Denied, new_job("j3", 0, 3)).await {
        Err(StoreError::AlreadyDecided { .. }) => {}
        other => panic!("expected already decided, got {other:?}"),
    }
    assert_eq!(jobs(store.clone()).await.len(), 1);
    // Its resume gone (it failed for good) while the run still waits: the
    // same decision again queues another.
    let (job, lease) = claim(&store, "w1", 10_000, 5).await;
    store.fail_job(&job.id, &lease, "gone", Retry::Never, 6).await.unwrap();
    store.decide_and_resume("r1", &call(1), Decision::Approved, new_job("j4", 0, 7)).await.unwrap();
    let live: Vec<_> = jobs(store.clone()).await.into_iter().filter(|j| j.status == JobStatus::Queued).collect();
    assert_eq!(live.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j4"]);
    // A stale call decides nothing and queues nothing.
    stale(
        store.decide_and_resume("r1", &call(2), Decision::Approved, new_job("j5", 0, 8)).await,
        "run `r1` now waits on call 1",
    );
    assert!(!jobs(store.clone()).await.iter().any(|j| j.id == "j5"));
}

async fn a_newer_suspension_replaces_the_approval(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    let first = Approval { decision: Some(Decision::Approved), ..approval(1, "shell") };
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(first))).await.unwrap();
    store.claim("r1", Claim::Resume, lease(OWNER, FAR), None, 1).await.unwrap();
    store
        .transition("r1", OWNER, Batch::default(), suspend("approval", Some(approval(4, "write_file"))))
        .await
        .unwrap();
    assert_eq!(store.approval("r1").await.unwrap(), Some(approval(4, "write_file")));
}

async fn a_decision_binds_to_the_call_it_was_shown(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    // Two approvers saw call 1; the first approves it and the run moves on to call 4.
    store.decide("r1", &call(1), Decision::Approved).await.unwrap();
    store.claim("r1", Claim::Resume, lease(OWNER, FAR), None, 1).await.unwrap();
    let dangerous = Approval {
        arguments: json!({"command": "echo DANGEROUS > dangerous.txt"}),
        args_hash: "ef".repeat(32),
        ..approval(4, "shell")
    };
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(dangerous.clone()))).await.unwrap();
    // The second approver's decision names call 1: refused, naming call 4, and call 4 stays undecided.
    stale(store.decide("r1", &call(1), Decision::Approved).await, "now waits on call 4 (args-hash efefefefefef)");
    assert_eq!(store.approval("r1").await.unwrap(), Some(dangerous.clone()));
    // The same sequence number with other arguments is another call.
    let other_args = PendingCall { seq: 4, args_hash: "cd".repeat(32) };
    stale(store.decide("r1", &other_args, Decision::Approved).await, "`shell` (shell)");
    assert_eq!(store.approval("r1").await.unwrap().unwrap().decision, None);
    // So are the same arguments at another position: the same command asked
    // again later (or earlier) is another call.
    for seq in [3, 5] {
        let elsewhere = PendingCall { seq, ..dangerous.call() };
        stale(store.decide("r1", &elsewhere, Decision::Approved).await, "now waits on call 4");
        assert_eq!(store.approval("r1").await.unwrap().unwrap().decision, None);
    }
    // Named exactly, call 4 is decided.
    let decided = store.decide("r1", &dangerous.call(), Decision::Denied).await.unwrap();
    assert_eq!(decided, Approval { decision: Some(Decision::Denied), ..dangerous.clone() });
    // A decided call is still the one the run waits on: a late decision names it as decided.
    stale(store.decide("r1", &call(1), Decision::Approved).await, "already denied");
    assert_eq!(store.approval("r1").await.unwrap().unwrap().decision, Some(Decision::Denied));
}

async fn a_retried_failure_is_queued_not_final(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    store.decide("r1", &call(1), Decision::Approved).await.unwrap();
    store.claim("r1", Claim::Resume, lease(OWNER, FAR), None, 1).await.unwrap();
    let batch = Batch { journal: vec![entry(0)], events: vec![event("retrying", 1)], ..Batch::default() };
    let to = Transition::Requeue { error: "the model could not be reached".into() };
    let run = store.transition("r1", OWNER, batch, to).await.unwrap();
    assert_eq!((run.status, run.lease.as_ref()), (RunStatus::Queued, None));
    assert!(!run.status.is_final());
    assert_eq!(run.error.as_deref(), Some("the model could not be reached"));
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run);
    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0)], "the batch commits with it");
    assert_eq!(store.approval("r1").await.unwrap(), None, "a requeued run waits on no call");
    conflict(store.commit("r1", OWNER, Batch::default()).await, "(it is queued)");
    // The retry starts it like a queued run, and its end clears the error.
    store.claim("r1", Claim::Start, lease(OTHER, FAR), None, 2).await.unwrap();
    let run = store.transition("r1", OTHER, Batch::default(), done("ok")).await.unwrap();
    assert_eq!((run.status, run.error), (RunStatus::Done, None));
}

async fn finish_ends_the_run(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    store.transition("r1", OWNER, Batch::default(), suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    store.claim("r1", Claim::Resume, lease(OWNER, FAR), Some("{}".into()), 1).await.unwrap();
    let batch = Batch { journal: vec![entry(0)], events: vec![event("done", 1)], ..Batch::default() };
    let finish = Transition::Finish { status: RunStatus::Done, result: Some("the answer".into()), error: None };
    let run = store.transition("r1", OWNER, batch, finish).await.unwrap();
    assert_eq!(run.status, RunStatus::Done);
    assert_eq!(run.result.as_deref(), Some("the answer"));
    assert_eq!((&run.error, &run.lease, &run.suspend_reason, &run.resume_key), (&None, &None, &None, &None));
    assert_eq!(run.resume_input.as_deref(), Some("{}"));
    assert_eq!(store.run("r1").await.unwrap().unwrap(), run.clone());
    assert_eq!(store.approval("r1").await.unwrap(), None, "a finished run waits for nothing");
    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0)]);
    conflict(store.commit("r1", OWNER, Batch::default()).await, "(it is done)");

    running(&store, "r2").await;
    let fail = Transition::Finish { status: RunStatus::Failed, result: None, error: Some("trap".into()) };
    let run = store.transition("r2", OWNER, Batch::default(), fail).await.unwrap();
    assert_eq!((run.status, run.error.as_deref()), (RunStatus::Failed, Some("trap")));
}

async fn finish_needs_a_final_status(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    for status in [RunStatus::Queued, RunStatus::Running, RunStatus::Suspended] {
        let batch = Batch { journal: vec![entry(0)], ..Batch::default() };
        let to = Transition::Finish { status, result: None, error: None };
        conflict(store.transition("r1", OWNER, batch, to).await, "a run finishes done, failed or cancelled");
    }
    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease), (RunStatus::Running, Some(lease(OWNER, FAR))));
    assert!(store.journal("r1").await.unwrap().is_empty(), "nothing of the batch was written");
}

async fn cancel_rules(store: Arc<dyn Store>) {
    store.create_run(new_run("queued", RunStatus::Queued, 1)).await.unwrap();
    let run = store.cancel("queued", "not needed").await.unwrap();
    assert_eq!((run.status, run.error.as_deref()), (RunStatus::Cancelled, Some("not needed")));
    assert_eq!(store.run("queued").await.unwrap().unwrap(), run);

    running(&store, "suspended").await;
    store
        .transition("suspended", OWNER, Batch::default(), suspend("approval", Some(approval(1, "shell"))))
        .await
        .unwrap();
    let run = store.cancel("suspended", "denied by policy").await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(store.approval("suspended").await.unwrap(), None, "cancel removes the pending approval");
    stale(store.decide("suspended", &call(1), Decision::Approved).await, "has no pending approval (it is cancelled)");
    conflict(store.claim("suspended", Claim::Resume, lease(OWNER, 1), None, 1).await, "is cancelled");

    running(&store, "running").await;
    let run = store.cancel("running", "operator").await.unwrap();
    assert_eq!((run.status, run.lease), (RunStatus::Cancelled, None));
    let renewed = store.renew_leases(OWNER, &ids(&["running"]), FAR).await.unwrap();
    assert!(renewed.is_empty(), "the owner notices at its next renewal");

    conflict(store.cancel("running", "again").await, "run `running` is already cancelled; there is nothing to cancel");
    running(&store, "done").await;
    let finish = Transition::Finish { status: RunStatus::Done, result: None, error: None };
    store.transition("done", OWNER, Batch::default(), finish).await.unwrap();
    conflict(store.cancel("done", "late").await, "run `done` is already done; there is nothing to cancel");
    assert_eq!(store.run("done").await.unwrap().unwrap().error, None, "a refused cancel changes nothing");
    no_run(store.cancel("missing", "x").await, "missing");
}

async fn orphans_are_expired_running_runs(store: Arc<dyn Store>) {
    for (id, until) in [("r3", 5_000), ("r1", 1_000), ("r2", 9_000)] {
        store
            .create_run(NewRun { lease: Some(lease(OWNER, until)), ..new_run(id, RunStatus::Running, 1) })
            .await
            .unwrap();
    }
    store.create_run(new_run("q", RunStatus::Queued, 1)).await.unwrap();
    let ids = |runs: Vec<nexo_store::Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert!(store.orphans(1_000).await.unwrap().is_empty());
    assert_eq!(ids(store.orphans(5_001).await.unwrap()), ["r1", "r3"]);
    assert_eq!(ids(store.orphans(FAR).await.unwrap()), ["r1", "r2", "r3"]);
    store.claim("r1", Claim::Recover, lease(OTHER, FAR), None, 5_001).await.unwrap();
    assert_eq!(ids(store.orphans(5_001).await.unwrap()), ["r3"]);
}

async fn reads_of_a_missing_run_are_empty(store: Arc<dyn Store>) {
    assert!(store.journal("missing").await.unwrap().is_empty());
    assert!(store.events("missing", 0, 10).await.unwrap().is_empty());
    assert!(store.checkpoints("missing").await.unwrap().is_empty());
    assert_eq!(store.approval("missing").await.unwrap(), None);
}

fn new_job(id: &str, not_before_ms: i64, created_ms: i64) -> NewJob {
    NewJob {
        id: id.into(),
        run: "r1".into(),
        kind: JobKind::Resume,
        payload: json!({"run": "r1", "input": {"answer": 42}}),
        max_attempts: 3,
        backoff_ms: 1_000,
        not_before_ms,
        created_ms,
    }
}

async fn claim(store: &Arc<dyn Store>, worker: &str, lease_ms: i64, now: i64) -> (Job, JobLease) {
    let job = store.claim_job(worker, lease_ms, now).await.unwrap().expect("a job is due");
    let lease = job.lease.clone().unwrap();
    (job, lease)
}

#[track_caller]
fn no_job(result: Result<impl std::fmt::Debug, StoreError>, id: &str) {
    match result {
        Err(StoreError::NoJob(missing)) => assert_eq!(missing, id),
        other => panic!("expected NoJob({id}), got {other:?}"),
    }
}

const LOST: &str = "is no longer this worker's: its lease (token";

async fn jobs_enqueue_claim_and_complete(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    let job = store.enqueue(new_job("j1", 100, 50)).await.unwrap();
    assert_eq!((job.status, job.attempts, job.lease.as_ref(), job.error.as_ref()), (JobStatus::Queued, 0, None, None));
    assert_eq!((job.created_ms, job.updated_ms, job.not_before_ms), (50, 50, 100));
    assert_eq!(store.job("j1").await.unwrap(), Some(job.clone()), "the payload and every field read back");

    conflict(store.enqueue(new_job("j1", 0, 1)).await, "a job `j1` already exists");
    no_run(store.enqueue(NewJob { run: "missing".into(), ..new_job("j2", 0, 1) }).await, "missing");
    conflict(store.enqueue(NewJob { max_attempts: 0, ..new_job("j3", 0, 1) }).await, "max_attempts of at least 1");
    assert_eq!(store.jobs(None, 10).await.unwrap(), vec![job], "refused jobs are not recorded");

    let (claimed, lease) = claim(&store, "w1", 30_000, 200).await;
    assert_eq!((claimed.status, claimed.attempts, claimed.updated_ms), (JobStatus::Running, 1, 200));
    assert_eq!((lease.worker.as_str(), lease.until_ms), ("w1", 30_200));
    assert!(lease.token > 0);
    assert_eq!(store.job("j1").await.unwrap(), Some(claimed.clone()));
    assert_eq!(store.claim_job("w2", 30_000, 30_200).await.unwrap(), None, "a live lease is not claimed");

    assert_eq!(store.heartbeat_jobs(&[lease.token, lease.token + 1_000], 60_000, 1_000).await.unwrap(), [lease.token]);
    let renewed = store.job("j1").await.unwrap().unwrap();
    assert_eq!((renewed.lease.unwrap().until_ms, renewed.updated_ms), (61_000, 1_000));
    assert_eq!(store.claim_job("w2", 30_000, 60_000).await.unwrap(), None, "the heartbeat extended the lease");

    let done = store.complete_job("j1", &lease, 2_000).await.unwrap();
    assert_eq!((done.status, done.lease.as_ref(), done.updated_ms, done.attempts), (JobStatus::Done, None, 2_000, 1));
    assert_eq!(store.job("j1").await.unwrap(), Some(done));
    conflict(store.complete_job("j1", &lease, 3_000).await, "(it is done)");
    assert!(store.heartbeat_jobs(&[lease.token], 1, 3_000).await.unwrap().is_empty(), "a done job is not renewed");
    assert_eq!(store.claim_job("w2", 1, FAR).await.unwrap(), None, "a done job is never claimed");

    no_job(store.complete_job("nope", &lease, 1).await, "nope");
    no_job(store.fail_job("nope", &lease, "x", Retry::IfAttemptsLeft, 1).await, "nope");
    assert!(store.heartbeat_jobs(&[], 1, 1).await.unwrap().is_empty());
    assert_eq!(store.job("nope").await.unwrap(), None);
}

async fn a_job_not_yet_due_is_not_claimed(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 5_000, 1)).await.unwrap();
    assert_eq!(store.claim_job("w1", 1_000, 4_999).await.unwrap(), None);
    assert_eq!(store.job("j1").await.unwrap().unwrap().attempts, 0, "a claim that found nothing changed nothing");
    let (job, _) = claim(&store, "w1", 1_000, 5_000).await;
    assert_eq!(job.id, "j1", "due at exactly not_before_ms");
}

async fn jobs_are_claimed_in_queue_order(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    for (id, not_before, created) in [("ja", 300, 1), ("jb", 100, 3), ("jd", 100, 2), ("jc", 100, 2), ("je", 9_000, 5)]
    {
        store.enqueue(new_job(id, not_before, created)).await.unwrap();
    }
    let mut order = Vec::new();
    while let Some(job) = store.claim_job("w1", FAR, 1_000).await.unwrap() {
        order.push(job.id);
    }
    assert_eq!(order, ["ja", "jb", "jd", "jc"], "one queue's due jobs in the order they were queued");

    let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert_eq!(ids(store.jobs(None, 10).await.unwrap()), ["je", "jb", "jd", "jc", "ja"], "newest first");
    assert_eq!(ids(store.jobs(Some(JobStatus::Queued), 10).await.unwrap()), ["je"]);
    assert_eq!(ids(store.jobs(Some(JobStatus::Running), 2).await.unwrap()), ["jb", "jd"]);
    assert!(store.jobs(Some(JobStatus::Failed), 10).await.unwrap().is_empty());
    assert!(store.jobs(None, 0).await.unwrap().is_empty());
}

async fn tenants_take_turns_at_the_queue(store: Arc<dyn Store>) {
    tenant(&store, "t-busy", "busy").await;
    tenant(&store, "t-quiet", "quiet").await;
    store.create_run(tenant_run("busy", "t-busy", RunStatus::Queued, 1)).await.unwrap();
    store.create_run(tenant_run("quiet", "t-quiet", RunStatus::Queued, 1)).await.unwrap();
    store.create_run(new_run("cli", RunStatus::Queued, 1)).await.unwrap();
    let job = |id: String, run: &str, at: i64| NewJob { id, run: run.into(), ..new_job("x", at, at) };
    for i in 0..200 {
        let queued = store.enqueue(job(format!("b{i:03}"), "busy", i)).await.unwrap();
        assert_eq!((queued.tenant.as_deref(), queued.turn), (Some("t-busy"), i), "the busy tenant's turns follow on");
    }
    // The busy tenant's first jobs are under way when the quiet one queues.
    for i in 0..3 {
        assert_eq!(claim(&store, "w1", FAR, 1_000).await.0.id, format!("b{i:03}"));
    }
    let quiet = store.enqueue(job("q1".into(), "quiet", 1_000)).await.unwrap();
    assert_eq!((quiet.tenant.as_deref(), quiet.turn), (Some("t-quiet"), 2), "it joins the round under way");
    assert_eq!(store.job("q1").await.unwrap(), Some(quiet), "the queue and turn read back");
    let next: Vec<String> =
        [claim(&store, "w1", FAR, 1_001).await.0.id, claim(&store, "w1", FAR, 1_001).await.0.id].into_iter().collect();
    assert_eq!(next, ["q1", "b003"], "the quiet tenant's job is next, not after 197 others");
    // The operator's own runs are one more queue; and a tenant that queues
    // many at once gets every other claim, not all of them.
    let cli = store.enqueue(job("c1".into(), "cli", 1_002)).await.unwrap();
    assert_eq!((cli.tenant, cli.turn), (None, 3));
    for i in 0..3 {
        store.enqueue(job(format!("q2{i}"), "quiet", 1_003 + i)).await.unwrap();
    }
    let order: Vec<String> = {
        let mut order = Vec::new();
        for _ in 0..8 {
            order.push(claim(&store, "w1", FAR, 2_000).await.0.id);
        }
        order
    };
    assert_eq!(order, ["c1", "q20", "b004", "q21", "b005", "q22", "b006", "b007"]);
}

async fn a_retry_takes_a_new_turn(store: Arc<dyn Store>) {
    tenant(&store, "t-a", "a").await;
    tenant(&store, "t-b", "b").await;
    store.create_run(tenant_run("a", "t-a", RunStatus::Queued, 1)).await.unwrap();
    store.create_run(tenant_run("b", "t-b", RunStatus::Queued, 1)).await.unwrap();
    let job = |id: &str, run: &str, at: i64| NewJob { id: id.into(), run: run.into(), ..new_job("x", at, at) };
    store.enqueue(job("a0", "a", 1)).await.unwrap();
    store.enqueue(job("a1", "a", 2)).await.unwrap();
    let (first, lease) = claim(&store, "w1", FAR, 10).await;
    assert_eq!((first.id.as_str(), first.turn), ("a0", 0));
    let b0 = store.enqueue(job("b0", "b", 11)).await.unwrap();
    assert_eq!(b0.turn, 0);
    let retried = store.fail_job("a0", &lease, "boom", Retry::IfAttemptsLeft, 20).await.unwrap();
    assert_eq!((retried.status, retried.turn), (JobStatus::Queued, 2), "after its tenant's last queued job");
    assert_eq!(store.job("a0").await.unwrap().map(|j| j.turn), Some(2), "the new turn is stored");
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(claim(&store, "w1", FAR, 100_000).await.0.id);
    }
    assert_eq!(order, ["b0", "a1", "a0"], "the retry does not jump ahead of newer turns");
}

async fn a_lapsed_job_is_reclaimed_before_the_next_in_turn(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 0, 1)).await.unwrap();
    claim(&store, "w1", 100, 10).await;
    store.enqueue(new_job("j2", 0, 2)).await.unwrap();
    assert_eq!(claim(&store, "w2", 100, 111).await.0.id, "j1", "its worker died: it is taken first");
    assert_eq!(claim(&store, "w2", 100, 112).await.0.id, "j2");
}

async fn a_stale_token_is_refused_after_a_reclaim(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 0, 1)).await.unwrap();
    let (_, old) = claim(&store, "w1", 1_000, 0).await;
    // The lease ends *before* `now`: at exactly its end it still holds.
    assert_eq!(store.claim_job("w2", 1_000, 1_000).await.unwrap(), None);
    let (job, new) = claim(&store, "w2", 1_000, 1_001).await;
    assert_eq!((job.attempts, new.worker.as_str()), (2, "w2"));

    let beat = store.heartbeat_jobs(&[old.token], 1_000, 1_002).await.unwrap();
    assert!(beat.is_empty(), "the old worker's heartbeat is refused");
    conflict(store.complete_job("j1", &old, 1_002).await, LOST);
    conflict(store.fail_job("j1", &old, "late", Retry::IfAttemptsLeft, 1_002).await, LOST);
    assert_eq!(store.job("j1").await.unwrap(), Some(job), "refused writes change nothing");

    assert_eq!(store.heartbeat_jobs(&[old.token, new.token], 1_000, 1_500).await.unwrap(), [new.token]);
    assert_eq!(store.job("j1").await.unwrap().unwrap().lease.unwrap().until_ms, 2_500);
    let done = store.complete_job("j1", &new, 1_600).await.unwrap();
    assert_eq!(done.status, JobStatus::Done);
}

async fn one_heartbeat_renews_many_jobs(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    for (i, id) in ["ja", "jb", "jc", "jd"].into_iter().enumerate() {
        store.enqueue(new_job(id, 0, i as i64)).await.unwrap();
    }
    let mut tokens = Vec::new();
    for worker in ["w1", "w1", "w1", "w2"] {
        tokens.push(claim(&store, worker, 1_000, 10).await.1.token);
    }
    let lease = store.job("jb").await.unwrap().unwrap().lease.unwrap();
    store.complete_job("jb", &lease, 20).await.unwrap();

    // A worker names its own claims; a token is one claim of one job.
    let mut beat = store.heartbeat_jobs(&tokens[..3], 5_000, 100).await.unwrap();
    beat.sort();
    assert_eq!(beat, [tokens[0], tokens[2]], "the done job is left out");
    for (id, until) in [("ja", 5_100), ("jb", -1), ("jc", 5_100), ("jd", 1_010)] {
        let job = store.job(id).await.unwrap().unwrap();
        assert_eq!(job.lease.map_or(-1, |l| l.until_ms), until, "job {id}");
    }
    assert_eq!(store.job("ja").await.unwrap().unwrap().updated_ms, 100);
}

async fn failures_back_off_then_stay_failed(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 0, 1)).await.unwrap();
    let (_, lease) = claim(&store, "w1", 60_000, 10).await;
    let job = store.fail_job("j1", &lease, "boom 1", Retry::IfAttemptsLeft, 100).await.unwrap();
    assert_eq!((job.status, job.attempts, job.not_before_ms), (JobStatus::Queued, 1, 1_100), "waits backoff_ms");
    assert_eq!((job.error.as_deref(), job.lease.as_ref(), job.updated_ms), (Some("boom 1"), None, 100));
    conflict(store.fail_job("j1", &lease, "again", Retry::IfAttemptsLeft, 101).await, "(it is queued)");

    assert_eq!(store.claim_job("w1", 60_000, 1_099).await.unwrap(), None);
    let (job, lease) = claim(&store, "w1", 60_000, 1_100).await;
    assert_eq!(job.attempts, 2);
    let job = store.fail_job("j1", &lease, "boom 2", Retry::IfAttemptsLeft, 2_000).await.unwrap();
    assert_eq!((job.status, job.not_before_ms), (JobStatus::Queued, 4_000), "the second retry waits twice as long");

    let (job, lease) = claim(&store, "w1", 60_000, 4_000).await;
    assert_eq!(job.attempts, 3);
    let job = store.fail_job("j1", &lease, "boom 3", Retry::IfAttemptsLeft, 5_000).await.unwrap();
    assert_eq!((job.status, job.error.as_deref(), job.lease.as_ref()), (JobStatus::Failed, Some("boom 3"), None));
    assert_eq!(store.claim_job("w1", 60_000, FAR).await.unwrap(), None, "a failed job stays failed");
    assert_eq!(store.job("j1").await.unwrap(), Some(job));

    // A failure that would recur is not retried, attempts left or not.
    store.enqueue(new_job("j2", 0, 2)).await.unwrap();
    let (_, lease) = claim(&store, "w1", 60_000, 6_000).await;
    let job = store.fail_job("j2", &lease, "trapped", Retry::Never, 6_100).await.unwrap();
    assert_eq!((job.status, job.attempts, job.error.as_deref()), (JobStatus::Failed, 1, Some("trapped")));
    assert_eq!(store.claim_job("w1", 60_000, FAR).await.unwrap(), None);
    assert_eq!(store.job("j2").await.unwrap(), Some(job));
}

async fn a_reclaimed_job_gets_a_greater_token(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 0, 1)).await.unwrap();
    store.enqueue(new_job("j2", 0, 2)).await.unwrap();
    let (first, a) = claim(&store, "w1", 100, 0).await;
    let (second, b) = claim(&store, "w1", FAR, 0).await;
    assert_eq!((first.id.as_str(), second.id.as_str()), ("j1", "j2"));
    assert!(b.token > a.token, "{b:?} after {a:?}");
    let (again, c) = claim(&store, "w2", 100, 101).await;
    assert_eq!(again.id, "j1");
    assert!(c.token > b.token, "greater than every earlier claim's token, of any job: {c:?} after {b:?}");
}

async fn a_job_whose_lease_lapses_every_attempt_fails(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(NewJob { max_attempts: 2, ..new_job("j1", 0, 1) }).await.unwrap();
    store.enqueue(new_job("j2", 150, 2)).await.unwrap();
    let (job, _) = claim(&store, "w1", 100, 0).await;
    assert_eq!((job.id.as_str(), job.attempts), ("j1", 1));
    let (job, last) = claim(&store, "w2", 100, 101).await;
    assert_eq!((job.id.as_str(), job.attempts), ("j1", 2), "reclaimed after its worker died");
    // Its last lease lapses too: the claim fails it and goes on to the next due job.
    let (next, _) = claim(&store, "w3", 100, 202).await;
    assert_eq!(next.id, "j2");
    let failed = store.job("j1").await.unwrap().unwrap();
    assert_eq!((failed.status, failed.attempts, failed.lease.as_ref()), (JobStatus::Failed, 2, None));
    let error = failed.error.unwrap();
    assert!(
        error.contains("gave up after 2 attempt(s): its worker stopped renewing the lease")
            && error.contains("last worker `w2`"),
        "{error}"
    );
    conflict(store.complete_job("j1", &last, 203).await, "(it is failed)");
    assert_eq!(store.claim_job("w3", 100, FAR).await.unwrap().map(|j| j.id), Some("j2".to_string()));
    assert_eq!(store.job("j1").await.unwrap().unwrap().status, JobStatus::Failed);
}

#[track_caller]
fn no_session(result: Result<impl std::fmt::Debug, StoreError>, id: &str) {
    match result {
        Err(StoreError::NoSession(missing)) => assert_eq!(missing, id),
        other => panic!("expected NoSession({id}), got {other:?}"),
    }
}

/// What a stale append is refused with.
const MOVED_ON: &str = "another prompt of this session finished first; nothing was appended";

/// A model message as the host stores it: any JSON.
fn message(n: u64) -> Value {
    let role = if n.is_multiple_of(2) { "user" } else { "assistant" };
    json!({"role": role, "content": [{"text": format!("turn {n} ✓")}], "n": n})
}

async fn a_session_is_opened_once_per_address(store: Arc<dyn Store>) {
    let first = store.open_session("hello", "alice", 1_000).await.unwrap();
    assert!(first.id.starts_with('s') && first.id.len() == 27, "{}", first.id);
    assert_eq!((first.agent.as_str(), first.instance.as_str()), ("hello", "alice"));
    assert_eq!((first.messages, first.created_ms, first.updated_ms), (0, 1_000, 1_000));
    assert!(store.thread(&first.id).await.unwrap().is_empty());

    // Opening again finds it and touches it.
    let again = store.open_session("hello", "alice", 2_000).await.unwrap();
    assert_eq!(again, Session { updated_ms: 2_000, ..first.clone() });
    // A process whose clock is behind does not make it look older.
    let behind = store.open_session("hello", "alice", 1_500).await.unwrap();
    assert_eq!(behind, again);

    // The address is the pair: the same instance of another agent, or
    // another instance of this one, is another session.
    let bob = store.open_session("hello", "bob", 3_000).await.unwrap();
    let other = store.open_session("other", "alice", 3_000).await.unwrap();
    let ids: std::collections::BTreeSet<&str> = [&first.id, &bob.id, &other.id].map(String::as_str).into();
    assert_eq!(ids.len(), 3);

    // Reads do not touch.
    assert_eq!(store.session("hello", "alice").await.unwrap(), Some(again.clone()));
    assert_eq!(store.session_by_id(&first.id).await.unwrap(), Some(again.clone()));
    assert_eq!(store.session("other", "alice").await.unwrap(), Some(other.clone()));
    assert_eq!(store.session_by_id(&other.id).await.unwrap(), Some(other));
    assert_eq!(store.session("hello", "carol").await.unwrap(), None);
    assert_eq!(store.session("nobody", "alice").await.unwrap(), None);
    assert_eq!(store.session_by_id("s-missing").await.unwrap(), None);
    // An id is not an address.
    assert_eq!(store.session("hello", &first.id).await.unwrap(), None);
    assert_eq!(store.session_by_id(&first.id).await.unwrap().unwrap().updated_ms, 2_000);
}

async fn sessions_are_listed_most_recently_updated_first(store: Arc<dyn Store>) {
    let a = store.open_session("hello", "a", 1_000).await.unwrap();
    let b = store.open_session("hello", "b", 3_000).await.unwrap();
    let c = store.open_session("other", "c", 2_000).await.unwrap();
    // Two updated at the same moment: the id breaks the tie, largest first.
    let d = store.open_session("hello", "d", 4_000).await.unwrap();
    let e = store.open_session("other", "e", 4_000).await.unwrap();
    let (tie_first, tie_second) = if d.id > e.id { (&d, &e) } else { (&e, &d) };
    // An append moves a session up, as an open does.
    let a = store.append_thread(&a.id, 0, vec![message(0)], 5_000).await.unwrap();

    let ids = |sessions: Vec<Session>| sessions.into_iter().map(|s| s.id).collect::<Vec<_>>();
    let want = |sessions: &[&Session]| sessions.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
    let all = store.sessions(None, 10).await.unwrap();
    assert_eq!(ids(all.clone()), want(&[&a, tie_first, tie_second, &b, &c]));
    assert_eq!(all[0], a, "every field reads back");
    assert_eq!(ids(store.sessions(Some("hello"), 10).await.unwrap()), want(&[&a, &d, &b]));
    assert_eq!(ids(store.sessions(Some("other"), 10).await.unwrap()), want(&[&e, &c]));
    assert_eq!(ids(store.sessions(None, 2).await.unwrap()), want(&[&a, tie_first]));
    assert_eq!(ids(store.sessions(Some("hello"), 1).await.unwrap()), want(&[&a]));
    assert!(store.sessions(None, 0).await.unwrap().is_empty());
    assert!(store.sessions(Some("nobody"), 10).await.unwrap().is_empty());
    assert_eq!(store.sessions(None, usize::MAX).await.unwrap().len(), 5);
}

async fn sessions_are_listed_by_prefix_without_the_others(store: Arc<dyn Store>) {
    // The newest sessions are all another tenant's.
    let mine = store.open_session("hello", "t1/a", 1_000).await.unwrap();
    let later = store.open_session("other", "t1/b", 2_000).await.unwrap();
    for i in 0..50 {
        store.open_session("hello", &format!("t2/s{i}"), 10_000 + i).await.unwrap();
    }
    store.open_session("hello", "t10/x", 20_000).await.unwrap();
    store.open_session("hello", "t1", 20_000).await.unwrap();
    store.open_session("hello", "t1✓/y", 20_000).await.unwrap();
    let ids = |sessions: Vec<Session>| sessions.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(store.sessions_with_prefix("t1/", 10).await.unwrap()), [later.id.clone(), mine.id.clone()]);
    assert_eq!(ids(store.sessions_with_prefix("t1/", 1).await.unwrap()), [later.id]);
    assert_eq!(store.sessions_with_prefix("t2/", 100).await.unwrap().len(), 50);
    assert!(store.sessions_with_prefix("t3/", 10).await.unwrap().is_empty());
    assert_eq!(store.sessions_with_prefix("", 100).await.unwrap().len(), 55, "an empty prefix is every session");
}

async fn an_append_needs_the_count_it_started_from(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let id = session.id.clone();
    let bystander = store.open_session("hello", "bob", 1_000).await.unwrap();

    let after = store.append_thread(&id, 0, vec![message(0), message(1)], 2_000).await.unwrap();
    assert_eq!(after, Session { messages: 2, updated_ms: 2_000, ..session.clone() });
    assert_eq!(store.session_by_id(&id).await.unwrap(), Some(after.clone()));
    let after = store.append_thread(&id, 2, vec![message(2)], 3_000).await.unwrap();
    assert_eq!((after.messages, after.updated_ms), (3, 3_000));

    // A prompt that started from 2 messages lost the race: refused, and
    // nothing changes.
    for stale in [2, 0, 4] {
        conflict(store.append_thread(&id, stale, vec![json!("late")], 9_000).await, MOVED_ON);
    }
    let refused = store.append_thread(&id, 2, vec![json!("late")], 9_000).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!("session `{id}`"))
            && refused.contains("holds 3 message(s), not the 2 this prompt started from")
            && refused.contains("load the thread again and retry"),
        "{refused}"
    );
    assert_eq!(store.session_by_id(&id).await.unwrap(), Some(after.clone()));
    assert_eq!(store.thread(&id).await.unwrap(), vec![message(0), message(1), message(2)]);

    // Order holds over several appends, whatever the messages are.
    let odd = json!({"nested": {"list": [1, 2.5, null, true], "text": "line\nbreak \"quoted\" é"}});
    store.append_thread(&id, 3, vec![message(3), odd.clone(), message(5)], 4_000).await.unwrap();
    // An empty append checks and touches; a clock behind does not move it back.
    let touched = store.append_thread(&id, 6, Vec::new(), 5_000).await.unwrap();
    assert_eq!((touched.messages, touched.updated_ms), (6, 5_000));
    let behind = store.append_thread(&id, 6, vec![message(6)], 4_500).await.unwrap();
    assert_eq!((behind.messages, behind.updated_ms), (7, 5_000));
    let thread = store.thread(&id).await.unwrap();
    assert_eq!(thread, vec![message(0), message(1), message(2), message(3), odd, message(5), message(6)]);

    // Another session's thread is its own.
    assert!(store.thread(&bystander.id).await.unwrap().is_empty());
    assert_eq!(store.session_by_id(&bystander.id).await.unwrap(), Some(bystander));

    no_session(store.append_thread("s-missing", 0, vec![message(0)], 1).await, "s-missing");
    assert!(store.thread("s-missing").await.unwrap().is_empty());
}

fn session_run(id: &str, session: Option<&str>, status: RunStatus, created_ms: i64) -> NewRun {
    NewRun { session: session.map(str::to_string), ..new_run(id, status, created_ms) }
}

async fn runs_link_to_their_session(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let other = store.open_session("hello", "bob", 1_000).await.unwrap();
    let later = store.create_run(session_run("r2", Some(&session.id), RunStatus::Running, 3_000)).await.unwrap();
    assert_eq!(store.run("r2").await.unwrap(), Some(later.clone()), "the link reads back");
    // One prompt at a time: r2 ends before the next is created.
    let later = store.transition("r2", OWNER, Batch::default(), done("ok")).await.unwrap();
    let first = store.create_run(session_run("r1", Some(&session.id), RunStatus::Queued, 2_000)).await.unwrap();
    store.create_run(session_run("r3", Some(&other.id), RunStatus::Queued, 2_500)).await.unwrap();
    let plain = store.create_run(new_run("plain", RunStatus::Queued, 2_000)).await.unwrap();
    assert_eq!(later.session.as_deref(), Some(session.id.as_str()));
    assert_eq!(plain.session, None);
    assert_eq!(store.run("plain").await.unwrap().unwrap().session, None);

    assert_eq!(store.session_runs(&session.id).await.unwrap(), vec![first, later], "oldest first");
    assert_eq!(store.session_runs(&other.id).await.unwrap().len(), 1);
    assert!(store.session_runs("s-missing").await.unwrap().is_empty());

    no_session(store.create_run(session_run("r4", Some("s-missing"), RunStatus::Queued, 1)).await, "s-missing");
    assert_eq!(store.run("r4").await.unwrap(), None, "a refused run is not recorded");
    // A taken id is still the conflict it was, session or not.
    conflict(store.create_run(session_run("r1", Some(&session.id), RunStatus::Queued, 1)).await, "already exists");
}

/// A session with a two-message thread and two runs, each with a job: an
/// ended (cancelled) one, and then the latest prompt, which has a journal,
/// events and checkpoints and is, if `live`, suspended with a pending
/// approval, else done. Returns the session and `[latest, ended]`.
async fn busy_session(
    store: &Arc<dyn Store>,
    agent: &str,
    instance: &str,
    now: i64,
    live: bool,
) -> (Session, [String; 2]) {
    let session = store.open_session(agent, instance, now).await.unwrap();
    store.append_thread(&session.id, 0, vec![message(0), message(1)], now).await.unwrap();
    let (latest, ended) = (format!("{instance}-run"), format!("{instance}-ended"));
    store.create_run(session_run(&ended, Some(&session.id), RunStatus::Queued, 1)).await.unwrap();
    store.cancel(&ended, "changed my mind").await.unwrap();
    store.create_run(session_run(&latest, Some(&session.id), RunStatus::Running, 2)).await.unwrap();
    let batch = Batch {
        journal: vec![entry(0)],
        events: vec![event("tool_call", 1)],
        checkpoints: vec![("plan".into(), json!(1))],
        thread: None,
        children: Vec::new(),
    };
    let to = if live { suspend("approval", Some(approval(1, "shell"))) } else { done("ok") };
    store.transition(&latest, OWNER, batch, to).await.unwrap();
    for run in [&latest, &ended] {
        store.enqueue(NewJob { run: run.clone(), ..new_job(&format!("{run}-job"), 0, 1) }).await.unwrap();
    }
    (session, [latest, ended])
}

/// Asserts that run `id` and everything of its are gone.
async fn run_is_gone(store: &Arc<dyn Store>, id: &str) {
    assert_eq!(store.run(id).await.unwrap(), None, "{id}");
    assert!(store.journal(id).await.unwrap().is_empty(), "{id}");
    assert!(store.events(id, 0, 100).await.unwrap().is_empty(), "{id}");
    assert!(store.checkpoints(id).await.unwrap().is_empty(), "{id}");
    assert_eq!(store.approval(id).await.unwrap(), None, "{id}");
    assert_eq!(store.job(&format!("{id}-job")).await.unwrap(), None, "{id}");
}

/// Asserts that run `id` and everything of its that [`busy_session`] wrote
/// are there; `latest` for a latest prompt, with its journal, events,
/// checkpoints and, while it is suspended, its approval.
async fn run_is_whole(store: &Arc<dyn Store>, id: &str, latest: bool) {
    let run = store.run(id).await.unwrap();
    assert!(run.is_some(), "{id}");
    assert!(store.job(&format!("{id}-job")).await.unwrap().is_some(), "{id}");
    if latest {
        assert_eq!(store.journal(id).await.unwrap(), vec![entry(0)], "{id}");
        assert_eq!(store.events(id, 0, 100).await.unwrap().len(), 1, "{id}");
        assert_eq!(store.checkpoints(id).await.unwrap().len(), 1, "{id}");
        let suspended = run.is_some_and(|r| r.status == RunStatus::Suspended);
        assert_eq!(store.approval(id).await.unwrap().is_some(), suspended, "{id}");
    }
}

/// A run linked to no session, with what [`busy_session`]'s running run has.
async fn plain_run(store: &Arc<dyn Store>, id: &str) {
    running(store, id).await;
    let batch = Batch {
        journal: vec![entry(0)],
        events: vec![event("tool_call", 1)],
        checkpoints: vec![("plan".into(), json!(1))],
        thread: None,
        children: Vec::new(),
    };
    store.transition(id, OWNER, batch, suspend("approval", Some(approval(1, "shell")))).await.unwrap();
    store.enqueue(NewJob { run: id.into(), ..new_job(&format!("{id}-job"), 0, 1) }).await.unwrap();
}

async fn deleting_a_session_deletes_its_thread_and_runs_only(store: Arc<dyn Store>) {
    // Deleting is the operator's call: it takes a prompt in progress too.
    let (doomed, [d_run, d_queued]) = busy_session(&store, "hello", "alice", 1_000, true).await;
    let (kept, [k_run, k_queued]) = busy_session(&store, "hello", "bob", 1_000, true).await;
    plain_run(&store, "plain").await;

    assert!(store.delete_session(&doomed.id).await.unwrap());
    assert_eq!(store.session_by_id(&doomed.id).await.unwrap(), None);
    assert_eq!(store.session("hello", "alice").await.unwrap(), None);
    assert!(store.thread(&doomed.id).await.unwrap().is_empty());
    assert!(store.session_runs(&doomed.id).await.unwrap().is_empty());
    run_is_gone(&store, &d_run).await;
    run_is_gone(&store, &d_queued).await;
    no_session(store.append_thread(&doomed.id, 2, vec![message(2)], 2_000).await, &doomed.id);
    no_session(store.create_run(session_run("late", Some(&doomed.id), RunStatus::Queued, 1)).await, &doomed.id);

    // The other session and the unlinked run are untouched.
    assert_eq!(store.session_by_id(&kept.id).await.unwrap().unwrap().messages, 2);
    assert_eq!(store.thread(&kept.id).await.unwrap(), vec![message(0), message(1)]);
    assert_eq!(store.session_runs(&kept.id).await.unwrap().len(), 2);
    run_is_whole(&store, &k_run, true).await;
    run_is_whole(&store, &k_queued, false).await;
    run_is_whole(&store, "plain", true).await;
    let runs: Vec<String> = store.runs(None, 100).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(store.jobs(None, 100).await.unwrap().len(), 3);

    assert!(!store.delete_session(&doomed.id).await.unwrap(), "deleting twice");
    assert!(!store.delete_session("s-missing").await.unwrap());

    // The address is free again: opening it starts a new, empty session.
    let fresh = store.open_session("hello", "alice", 3_000).await.unwrap();
    assert_ne!(fresh.id, doomed.id);
    assert_eq!((fresh.messages, fresh.created_ms), (0, 3_000));
    assert!(store.thread(&fresh.id).await.unwrap().is_empty());
}

async fn expiry_deletes_sessions_updated_before_the_cut_only(store: Arc<dyn Store>) {
    let (old, [o_run, o_queued]) = busy_session(&store, "hello", "old", 1_000, false).await;
    let (older, [oo_run, _]) = busy_session(&store, "other", "older", 1_999, false).await;
    let (at_cut, [c_run, c_queued]) = busy_session(&store, "hello", "at-cut", 2_000, false).await;
    let (recent, [r_run, _]) = busy_session(&store, "hello", "recent", 3_000, false).await;
    // Opened long ago, touched since: it is as recent as its last touch.
    let (touched, [t_run, _]) = busy_session(&store, "hello", "touched", 500, false).await;
    store.open_session("hello", "touched", 2_500).await.unwrap();
    // A run linked to no session is older than every cut.
    plain_run(&store, "plain").await;

    let mut expected = vec![old.id.clone(), older.id.clone()];
    expected.sort();
    assert_eq!(store.expire_sessions(2_000).await.unwrap(), expected);
    for gone in [&old, &older] {
        assert_eq!(store.session_by_id(&gone.id).await.unwrap(), None);
        assert!(store.thread(&gone.id).await.unwrap().is_empty());
    }
    for run in [&o_run, &o_queued, &oo_run] {
        run_is_gone(&store, run).await;
    }
    for kept in [&at_cut, &recent, &touched] {
        assert_eq!(store.thread(&kept.id).await.unwrap().len(), 2);
        assert_eq!(store.session_runs(&kept.id).await.unwrap().len(), 2);
    }
    run_is_whole(&store, &c_run, true).await;
    run_is_whole(&store, &c_queued, false).await;
    run_is_whole(&store, &r_run, true).await;
    run_is_whole(&store, &t_run, true).await;
    run_is_whole(&store, "plain", true).await;
    assert_eq!(store.sessions(None, 100).await.unwrap().len(), 3);

    assert!(store.expire_sessions(2_000).await.unwrap().is_empty(), "nothing more to expire");
    assert_eq!(store.expire_sessions(i64::MIN).await.unwrap(), Vec::<String>::new());
    let mut rest = vec![at_cut.id.clone(), recent.id.clone(), touched.id.clone()];
    rest.sort();
    assert_eq!(store.expire_sessions(i64::MAX).await.unwrap(), rest);
    assert!(store.sessions(None, 100).await.unwrap().is_empty());
    run_is_whole(&store, "plain", true).await;
    assert_eq!(store.runs(None, 100).await.unwrap().len(), 1);
}

fn append(session: &str, expected: u64, messages: Vec<Value>) -> Option<ThreadAppend> {
    Some(ThreadAppend { session: session.into(), expected, messages })
}

async fn a_prompt_appends_its_exchange_with_its_end(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let id = session.id.clone();
    store.append_thread(&id, 0, vec![message(0)], 1_000).await.unwrap();
    store.create_run(session_run("p1", Some(&id), RunStatus::Running, 1_000)).await.unwrap();

    // A commit may carry part of the exchange.
    let before = nexo_store::now_ms();
    let batch =
        Batch { events: vec![event("tool_call", 1)], thread: append(&id, 1, vec![message(1)]), ..Batch::default() };
    store.commit("p1", OWNER, batch).await.unwrap();
    let now = store.session_by_id(&id).await.unwrap().unwrap();
    assert_eq!(now.messages, 2);
    assert!(now.updated_ms >= before, "the append touches the session: {now:?}");

    // The rest lands with the run's end, in order.
    let batch = Batch {
        journal: vec![entry(0)],
        events: vec![event("done", 2)],
        thread: append(&id, 2, vec![message(2), message(3)]),
        ..Batch::default()
    };
    let run = store.transition("p1", OWNER, batch, done("hi")).await.unwrap();
    assert_eq!(run.status, RunStatus::Done);
    assert_eq!(store.run("p1").await.unwrap(), Some(run));
    assert_eq!(store.thread(&id).await.unwrap(), vec![message(0), message(1), message(2), message(3)]);
    let after = store.session_by_id(&id).await.unwrap().unwrap();
    assert_eq!(after.messages, 4);
    assert_eq!(store.session("hello", "alice").await.unwrap(), Some(after.clone()));
    assert!(after.updated_ms >= now.updated_ms);
    assert_eq!(store.journal("p1").await.unwrap(), vec![entry(0)]);
    assert_eq!(store.events("p1", 0, 100).await.unwrap().len(), 2);

    // A suspension may carry it too, and so may a batch of nothing else.
    store.create_run(session_run("p2", Some(&id), RunStatus::Running, 2_000)).await.unwrap();
    let batch = Batch { thread: append(&id, 4, vec![message(4)]), ..Batch::default() };
    store.transition("p2", OWNER, batch, suspend("approval", Some(approval(0, "shell")))).await.unwrap();
    store.claim("p2", Claim::Resume, lease(OWNER, FAR), None, 3_000).await.unwrap();
    store.commit("p2", OWNER, Batch { thread: append(&id, 5, vec![message(5)]), ..Batch::default() }).await.unwrap();
    assert_eq!(store.session_by_id(&id).await.unwrap().unwrap().messages, 6);
    assert_eq!(store.thread(&id).await.unwrap().last(), Some(&message(5)));
}

async fn a_stale_thread_append_refuses_the_whole_transition(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let id = session.id.clone();
    store.append_thread(&id, 0, vec![message(0), message(1)], 1_000).await.unwrap();
    store.create_run(session_run("p1", Some(&id), RunStatus::Running, 1_000)).await.unwrap();
    // Something else moved the thread on after the prompt read it.
    let moved = store.append_thread(&id, 2, vec![message(2)], 2_000).await.unwrap();

    let batch = |thread| Batch {
        journal: vec![entry(0)],
        events: vec![event("done", 1)],
        checkpoints: vec![("plan".into(), json!(1))],
        thread,
        children: Vec::new(),
    };
    let stale = append(&id, 2, vec![json!("late")]);
    conflict(store.transition("p1", OWNER, batch(stale.clone()), done("hi")).await, MOVED_ON);
    conflict(store.commit("p1", OWNER, batch(stale)).await, MOVED_ON);
    let refused = store.commit("p1", OWNER, Batch { thread: append(&id, 0, vec![]), ..Batch::default() }).await;
    conflict(refused, "holds 3 message(s), not the 0 this prompt started from");

    // Nothing of those batches was written, and the run is as it was.
    let run = store.run("p1").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease.as_ref().map(|l| l.owner.as_str())), (RunStatus::Running, Some(OWNER)));
    assert!(store.journal("p1").await.unwrap().is_empty());
    assert!(store.events("p1", 0, 100).await.unwrap().is_empty());
    assert!(store.checkpoints("p1").await.unwrap().is_empty());
    assert_eq!(store.thread(&id).await.unwrap(), vec![message(0), message(1), message(2)]);
    assert_eq!(store.session_by_id(&id).await.unwrap(), Some(moved));

    // The owner still holds it: the same transition without the append goes through.
    let run = store.transition("p1", OWNER, batch(None), done("hi")).await.unwrap();
    assert_eq!(run.status, RunStatus::Done);
    assert_eq!(store.journal("p1").await.unwrap(), vec![entry(0)]);
    assert_eq!(store.events("p1", 0, 100).await.unwrap().len(), 1);
    assert_eq!(store.thread(&id).await.unwrap().len(), 3);
}

async fn a_thread_append_names_the_runs_own_session(store: Arc<dyn Store>) {
    let alice = store.open_session("hello", "alice", 1_000).await.unwrap();
    let bob = store.open_session("hello", "bob", 1_000).await.unwrap();
    store.create_run(session_run("p1", Some(&alice.id), RunStatus::Running, 1_000)).await.unwrap();
    running(&store, "plain").await;

    let into = |session: &str| Batch {
        events: vec![event("done", 1)],
        thread: append(session, 0, vec![message(0)]),
        ..Batch::default()
    };
    let refused = store.transition("p1", OWNER, into(&bob.id), done("hi")).await;
    conflict(refused, &format!("run `p1` is not a prompt of session `{}`", bob.id));
    let refused = store.commit("p1", OWNER, into(&bob.id)).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("it is a prompt of session `{}`", alice.id)), "{refused}");
    let refused = store.transition("plain", OWNER, into(&alice.id), done("hi")).await;
    conflict(refused, "(it is a prompt of no session)");
    // A session that is not there (deleted, say) is named as such.
    no_session(store.transition("p1", OWNER, into("s-missing"), done("hi")).await, "s-missing");
    no_session(store.commit("plain", OWNER, into("s-missing")).await, "s-missing");

    for (run, session) in [("p1", &alice), ("plain", &alice), ("p1", &bob)] {
        let now = store.run(run).await.unwrap().unwrap();
        assert_eq!(now.status, RunStatus::Running, "{run}");
        assert!(store.events(run, 0, 100).await.unwrap().is_empty(), "{run}");
        assert!(store.thread(&session.id).await.unwrap().is_empty());
        assert_eq!(store.session_by_id(&session.id).await.unwrap().as_ref(), Some(session));
    }
    // Its own session takes it.
    store.transition("p1", OWNER, into(&alice.id), done("hi")).await.unwrap();
    assert_eq!(store.thread(&alice.id).await.unwrap(), vec![message(0)]);
}

async fn a_session_has_one_prompt_in_progress_at_a_time(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let id = session.id.clone();
    let other = store.open_session("hello", "bob", 1_000).await.unwrap();
    let prompt = |run: &str, status, created_ms| session_run(run, Some(&id), status, created_ms);

    // Running.
    store.create_run(prompt("p1", RunStatus::Running, 1_000)).await.unwrap();
    let refused = store.create_run(prompt("p2", RunStatus::Queued, 2_000)).await;
    conflict(refused, &format!("session `{id}` has a prompt in progress: run `p1` is running"));
    conflict(store.create_run(prompt("p2", RunStatus::Running, 2_000)).await, "`nexo runs recover` replays it");
    assert_eq!(store.run("p2").await.unwrap(), None, "a refused run is not recorded");
    // Another session, and a run of no session, are not held up.
    store.create_run(session_run("b1", Some(&other.id), RunStatus::Queued, 2_000)).await.unwrap();
    store.create_run(new_run("plain", RunStatus::Queued, 2_000)).await.unwrap();
    // Still a missing session first, and a taken id.
    no_session(store.create_run(session_run("p2", Some("s-missing"), RunStatus::Queued, 1)).await, "s-missing");
    conflict(store.create_run(prompt("p1", RunStatus::Queued, 2_000)).await, "a run `p1` already exists");
    store.transition("p1", OWNER, Batch::default(), done("hi")).await.unwrap();

    // Queued, after a done one.
    store.create_run(prompt("p2", RunStatus::Queued, 2_000)).await.unwrap();
    let refused = store.create_run(prompt("p3", RunStatus::Queued, 3_000)).await;
    conflict(refused, &format!("session `{id}` has a prompt in progress: run `p2` is queued for a worker"));

    // Suspended.
    store.claim("p2", Claim::Start, lease(OWNER, FAR), None, 2_500).await.unwrap();
    store.transition("p2", OWNER, Batch::default(), suspend("approval", Some(approval(0, "shell")))).await.unwrap();
    let refused = store.create_run(prompt("p3", RunStatus::Running, 3_000)).await.unwrap_err().to_string();
    assert_eq!(
        refused,
        format!(
            "session `{id}` has a prompt in progress: run `p2` is suspended; decide it first (`nexo runs approve \
             p2`, `nexo runs deny p2`, `nexo runs resume p2`) or cancel it (`nexo runs cancel p2`)"
        )
    );

    // Cancelled, then failed: each lets the next one in.
    store.cancel("p2", "no").await.unwrap();
    store.create_run(prompt("p3", RunStatus::Running, 3_000)).await.unwrap();
    conflict(store.create_run(prompt("p4", RunStatus::Queued, 4_000)).await, "run `p3` is running");
    store.transition("p3", OWNER, Batch::default(), failed("trap")).await.unwrap();
    store.create_run(prompt("p4", RunStatus::Queued, 4_000)).await.unwrap();
    let ids: Vec<String> = store.session_runs(&id).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["p1", "p2", "p3", "p4"]);
}

async fn a_retry_never_forks_a_thread(store: Arc<dyn Store>) {
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let id = session.id.clone();
    let prompt = |run: &str, created_ms| session_run(run, Some(&id), RunStatus::Running, created_ms);
    let retry = |run: &'static str| {
        let store = store.clone();
        async move { store.claim(run, Claim::Retry, lease(OWNER, FAR), Some("{}".into()), 5_000).await }
    };

    // The latest prompt may be retried, as often as it fails.
    store.create_run(prompt("p1", 1_000)).await.unwrap();
    store.transition("p1", OWNER, Batch::default(), failed("trap")).await.unwrap();
    assert_eq!(retry("p1").await.unwrap().status, RunStatus::Running);
    store.transition("p1", OWNER, Batch::default(), failed("trap")).await.unwrap();

    // Not once a later prompt exists, whatever became of it.
    store.create_run(prompt("p2", 2_000)).await.unwrap();
    store.transition("p2", OWNER, Batch::default(), done("hi")).await.unwrap();
    let refused = retry("p1").await.unwrap_err().to_string();
    assert_eq!(
        refused,
        format!(
            "run `p1` is a prompt of session `{id}`, which has had a later prompt (run `p2`); retrying it would fork \
             the thread: send the prompt again instead"
        )
    );
    let run = store.run("p1").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease), (RunStatus::Failed, None), "a refused retry changes nothing");
    assert_eq!(store.events("p1", 0, 100).await.unwrap().len(), 1, "one `resumed`, from the first retry");

    // Created in the same millisecond: the id orders them, as `session_runs` does.
    store.create_run(prompt("p3", 3_000)).await.unwrap();
    store.transition("p3", OWNER, Batch::default(), failed("trap")).await.unwrap();
    store.create_run(prompt("p4", 3_000)).await.unwrap();
    store.transition("p4", OWNER, Batch::default(), failed("trap")).await.unwrap();
    conflict(retry("p3").await, "later prompt (run `p4`)");
    conflict(retry("p2").await, "only a failed run can be retried");
    assert_eq!(retry("p4").await.unwrap().status, RunStatus::Running);
    // A retried prompt is in progress again.
    conflict(store.create_run(prompt("p5", 9_000)).await, "run `p4` is running");

    // A run of no session has no thread to fork.
    running(&store, "plain").await;
    store.transition("plain", OWNER, Batch::default(), failed("trap")).await.unwrap();
    assert_eq!(retry("plain").await.unwrap().status, RunStatus::Running);
}

async fn expiry_passes_over_a_session_with_a_prompt_in_progress(store: Arc<dyn Store>) {
    let (idle, [i_run, i_ended]) = busy_session(&store, "hello", "idle", 1_000, false).await;
    let (stuck, [s_run, s_ended]) = busy_session(&store, "hello", "stuck", 1_000, true).await;
    let waiting = store.open_session("hello", "waiting", 500).await.unwrap();
    store.create_run(session_run("w1", Some(&waiting.id), RunStatus::Queued, 1)).await.unwrap();
    let working = store.open_session("hello", "working", 500).await.unwrap();
    store.create_run(session_run("k1", Some(&working.id), RunStatus::Running, 1)).await.unwrap();
    let (recent, _) = busy_session(&store, "hello", "recent", 3_000, false).await;

    assert_eq!(store.expire_sessions(2_000).await.unwrap(), vec![idle.id.clone()]);
    run_is_gone(&store, &i_run).await;
    run_is_gone(&store, &i_ended).await;
    // Older than the cut, but with live work: kept whole.
    assert_eq!(store.thread(&stuck.id).await.unwrap().len(), 2);
    run_is_whole(&store, &s_run, true).await;
    run_is_whole(&store, &s_ended, false).await;
    assert_eq!(store.run("w1").await.unwrap().unwrap().status, RunStatus::Queued);
    assert_eq!(store.run("k1").await.unwrap().unwrap().status, RunStatus::Running);
    assert_eq!(store.sessions(None, 100).await.unwrap().len(), 4);

    // Once their prompts end, they go at the next expiry (the recent one stays).
    store.cancel(&s_run, "no").await.unwrap();
    store.claim("w1", Claim::Start, lease(OWNER, FAR), None, 2_500).await.unwrap();
    store.transition("w1", OWNER, Batch::default(), done("hi")).await.unwrap();
    assert_eq!(store.expire_sessions(2_000).await.unwrap().len(), 2, "stuck and waiting");
    store.transition("k1", OWNER, Batch::default(), failed("trap")).await.unwrap();
    assert_eq!(store.expire_sessions(2_000).await.unwrap(), vec![working.id.clone()]);
    let left: Vec<String> = store.sessions(None, 100).await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(left, [recent.id]);
    for run in [s_run.as_str(), "w1", "k1"] {
        run_is_gone(&store, run).await;
    }
}

async fn concurrent_prompts_of_one_session_admit_one(store: Arc<dyn Store>) {
    support::prompts_race(vec![store.clone(), store], 20).await;
}

async fn a_concurrent_retry_and_new_prompt_admit_one(store: Arc<dyn Store>) {
    support::retry_race(vec![store.clone(), store], 20).await;
}

fn new_tenant(id: &str, name: &str, created_ms: i64) -> NewTenant {
    NewTenant {
        id: id.into(),
        name: name.into(),
        policy: json!({"allow": ["files", "fetch"], "limits": {"runs_per_hour": 10, "ratio": 0.5}, "models": ["m✓"]}),
        created_ms,
    }
}

async fn tenant(store: &Arc<dyn Store>, id: &str, name: &str) -> Tenant {
    store.create_tenant(new_tenant(id, name, 1_000)).await.unwrap()
}

#[track_caller]
fn no_tenant(result: Result<impl std::fmt::Debug, StoreError>, id: &str) {
    match result {
        Err(e @ StoreError::NoTenant(_)) => {
            assert!(matches!(&e, StoreError::NoTenant(missing) if missing == id), "expected NoTenant({id}), got {e:?}");
            let message = e.to_string();
            assert!(message.contains(&format!("there is no tenant `{id}`")) && message.contains("nexo tenant list"));
        }
        other => panic!("expected NoTenant({id}), got {other:?}"),
    }
}

async fn tenants_are_created_read_listed_and_updated(store: Arc<dyn Store>) {
    let acme = store.create_tenant(new_tenant("t-acme", "acme", 1_000)).await.unwrap();
    assert_eq!(
        acme,
        Tenant {
            id: "t-acme".into(),
            name: "acme".into(),
            policy: new_tenant("t-acme", "acme", 1_000).policy,
            disabled: false,
            created_ms: 1_000,
            updated_ms: 1_000,
        }
    );
    let beta = store.create_tenant(new_tenant("t-beta", "Beta", 2_000)).await.unwrap();
    store.create_tenant(new_tenant("t-0", "zed", 500)).await.unwrap();

    assert_eq!(store.tenant("t-acme").await.unwrap().as_ref(), Some(&acme));
    assert_eq!(store.tenant_by_name("acme").await.unwrap().as_ref(), Some(&acme));
    assert_eq!(store.tenant_by_name("Beta").await.unwrap().as_ref(), Some(&beta));
    assert_eq!(store.tenant("acme").await.unwrap(), None, "by id only");
    assert_eq!(store.tenant_by_name("t-acme").await.unwrap(), None, "by name only");
    assert_eq!(store.tenant_by_name("ACME").await.unwrap(), None, "names compare exactly");
    let names: Vec<String> = store.tenants().await.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["Beta", "acme", "zed"], "by name, in byte order");

    // The policy alone.
    let policy = json!({"allow": [], "note": "tightened"});
    let updated = store.update_tenant("t-acme", Some(policy.clone()), None, 3_000).await.unwrap();
    assert_eq!((&updated.policy, updated.disabled, updated.updated_ms), (&policy, false, 3_000));
    assert_eq!(updated.created_ms, 1_000);
    // The flag alone, from a process whose clock is behind: `updated_ms` stays.
    let disabled = store.update_tenant("t-acme", None, Some(true), 2_500).await.unwrap();
    assert_eq!((&disabled.policy, disabled.disabled, disabled.updated_ms), (&policy, true, 3_000));
    // Neither: a touch.
    let touched = store.update_tenant("t-acme", None, None, 4_000).await.unwrap();
    assert_eq!((touched.disabled, touched.updated_ms), (true, 4_000));
    let enabled = store.update_tenant("t-acme", None, Some(false), 5_000).await.unwrap();
    assert!(!enabled.disabled);
    assert_eq!(store.tenant("t-acme").await.unwrap(), Some(enabled.clone()));
    assert_eq!(store.tenant_by_name("acme").await.unwrap(), Some(enabled));
    assert_eq!(store.tenant("t-beta").await.unwrap(), Some(beta), "another tenant is untouched");

    no_tenant(store.update_tenant("t-missing", Some(json!({})), Some(true), 1).await, "t-missing");
    assert_eq!(store.tenant("t-missing").await.unwrap(), None);
    assert_eq!(store.tenants().await.unwrap().len(), 3);
}

async fn a_tenant_id_or_name_is_taken_once(store: Arc<dyn Store>) {
    let acme = tenant(&store, "t-acme", "acme").await;
    conflict(
        store.create_tenant(new_tenant("t-other", "acme", 2)).await,
        "a tenant named `acme` already exists; choose another name",
    );
    conflict(store.create_tenant(new_tenant("t-acme", "other", 2)).await, "a tenant `t-acme` already exists");
    // Both taken: the id is named.
    conflict(store.create_tenant(new_tenant("t-acme", "acme", 2)).await, "a tenant `t-acme` already exists");
    assert_eq!(store.tenants().await.unwrap(), vec![acme.clone()], "a refused tenant is not recorded");
    assert_eq!(store.tenant("t-other").await.unwrap(), None);
    assert_eq!(store.tenant_by_name("other").await.unwrap(), None);
    // Another spelling is another name.
    store.create_tenant(new_tenant("t-2", "Acme", 2)).await.unwrap();
    assert_eq!(store.tenant_by_name("acme").await.unwrap(), Some(acme));
}

fn new_key(id: &str, tenant: Option<&str>, secret: &str, created_ms: i64) -> NewApiKey {
    NewApiKey { id: id.into(), tenant: tenant.map(str::to_string), hash: sha256_hex(secret), created_ms }
}

async fn keys_are_created_found_listed_and_revoked(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let k1 = store.create_key(new_key("k1", Some("t-acme"), "secret-1", 1_000)).await.unwrap();
    assert_eq!(
        k1,
        ApiKey {
            id: "k1".into(),
            tenant: Some("t-acme".into()),
            hash: sha256_hex("secret-1"),
            created_ms: 1_000,
            revoked_ms: None,
        }
    );
    store.create_key(new_key("k2", Some("t-acme"), "secret-2", 3_000)).await.unwrap();
    store.create_key(new_key("k0", Some("t-acme"), "secret-0", 2_000)).await.unwrap();
    let kb = store.create_key(new_key("kb", Some("t-beta"), "secret-b", 1_000)).await.unwrap();
    // Admin keys; the same time, so the id orders them.
    store.create_key(new_key("ka2", None, "admin-2", 500)).await.unwrap();
    let ka1 = store.create_key(new_key("ka1", None, "admin-1", 500)).await.unwrap();
    assert_eq!(ka1.tenant, None);

    assert_eq!(store.key_by_hash(&sha256_hex("secret-1")).await.unwrap(), Some(k1.clone()));
    assert_eq!(store.key_by_hash(&sha256_hex("admin-1")).await.unwrap(), Some(ka1.clone()));
    assert_eq!(store.key_by_hash("secret-1").await.unwrap(), None, "never by the key itself");
    assert_eq!(store.key_by_hash(&sha256_hex("nope")).await.unwrap(), None);

    let ids = |keys: Vec<ApiKey>| keys.into_iter().map(|k| k.id).collect::<Vec<_>>();
    assert_eq!(ids(store.keys(Some("t-acme")).await.unwrap()), ["k1", "k0", "k2"], "oldest first");
    assert_eq!(store.keys(Some("t-beta")).await.unwrap(), vec![kb]);
    assert_eq!(ids(store.keys(None).await.unwrap()), ["ka1", "ka2"], "the admin keys");
    assert!(store.keys(Some("t-missing")).await.unwrap().is_empty());

    let revoked = store.revoke_key("k1", 5_000).await.unwrap();
    assert_eq!(revoked, ApiKey { revoked_ms: Some(5_000), ..k1.clone() });
    // Twice: the first revocation stands.
    assert_eq!(store.revoke_key("k1", 6_000).await.unwrap().revoked_ms, Some(5_000));
    // A revoked key is still found; the caller refuses it.
    assert_eq!(store.key_by_hash(&sha256_hex("secret-1")).await.unwrap(), Some(revoked.clone()));
    let acme = store.keys(Some("t-acme")).await.unwrap();
    assert_eq!(acme.len(), 3);
    assert_eq!(acme[0], revoked);
    assert!(acme[1..].iter().all(|k| k.revoked_ms.is_none()));
    assert_eq!(store.revoke_key("ka1", 7_000).await.unwrap().revoked_ms, Some(7_000));

    match store.revoke_key("k-missing", 1).await {
        Err(e @ StoreError::NoKey(_)) => {
            assert!(matches!(&e, StoreError::NoKey(id) if id == "k-missing"));
            assert!(e.to_string().contains("there is no API key `k-missing`"), "{e}");
        }
        other => panic!("expected NoKey, got {other:?}"),
    }
}

async fn a_key_needs_a_hash_a_free_id_and_its_tenant(store: Arc<dyn Store>) {
    no_tenant(store.create_key(new_key("k1", Some("t-missing"), "secret-1", 1)).await, "t-missing");
    tenant(&store, "t-acme", "acme").await;
    let k1 = store.create_key(new_key("k1", Some("t-acme"), "secret-1", 1)).await.unwrap();
    conflict(store.create_key(new_key("k1", Some("t-acme"), "other", 2)).await, "an API key `k1` already exists");
    conflict(store.create_key(new_key("k2", None, "secret-1", 2)).await, "API key `k2` has the same hash as a key");
    // A taken id, then a taken hash, are named before a missing tenant.
    conflict(store.create_key(new_key("k1", Some("t-missing"), "secret-1", 2)).await, "an API key `k1` already");
    conflict(store.create_key(new_key("k3", Some("t-missing"), "secret-1", 2)).await, "has the same hash");
    // The key itself, or anything else that is not a SHA-256 in lowercase
    // hex, is refused before anything else.
    for hash in ["nexo_live_0123456789".to_string(), sha256_hex("secret-4").to_uppercase(), "ab".repeat(31)] {
        let key = NewApiKey { hash, ..new_key("k4", Some("t-missing"), "", 3) };
        conflict(store.create_key(key).await, "API key `k4` is not given as the SHA-256 of the key");
    }
    assert_eq!(store.keys(Some("t-acme")).await.unwrap(), vec![k1]);
    assert!(store.keys(None).await.unwrap().is_empty());
    assert!(store.keys(Some("t-missing")).await.unwrap().is_empty());
}

fn sign_in(session_id: &str, tenant: &str, created_ms: i64, expires_ms: i64) -> SignIn {
    SignIn {
        id_hash: sha256_hex(session_id),
        tenant: tenant.into(),
        key_hash: sha256_hex("secret-1"),
        created_ms,
        expires_ms,
    }
}

async fn console_sign_ins_open_expire_and_end(store: Arc<dyn Store>) {
    no_tenant(store.open_sign_in(sign_in("s0", "t-missing", 1_000, 9_000)).await, "t-missing");
    tenant(&store, "t-acme", "acme").await;
    let first = sign_in("s1", "t-acme", 1_000, 5_000);
    store.open_sign_in(first.clone()).await.unwrap();
    assert_eq!(store.sign_in(&first.id_hash, 4_999).await.unwrap(), Some(first.clone()));
    assert_eq!(store.sign_in(&first.id_hash, 5_000).await.unwrap(), None, "expired");
    assert_eq!(store.sign_in(&sha256_hex("other"), 2_000).await.unwrap(), None);
    conflict(store.open_sign_in(first.clone()).await, "a console sign-in with this session id is recorded already");

    let second = sign_in("s2", "t-acme", 2_000, 9_000);
    store.open_sign_in(second.clone()).await.unwrap();
    store.end_sign_in(&second.id_hash).await.unwrap();
    assert_eq!(store.sign_in(&second.id_hash, 2_001).await.unwrap(), None, "ended");
    store.end_sign_in(&second.id_hash).await.unwrap();

    // Opening one forgets those expired by then: the first sign-in's id
    // can then be recorded again.
    store.open_sign_in(sign_in("s3", "t-acme", 6_000, 9_000)).await.unwrap();
    store.open_sign_in(sign_in("s1", "t-acme", 6_000, 9_000)).await.unwrap();
    assert_eq!(store.sign_in(&first.id_hash, 6_001).await.unwrap().map(|s| s.expires_ms), Some(9_000));
}

/// A plugin of `tenant` with these bytes, addressed by their hash.
fn new_plugin(tenant: &str, name: &str, bytes: Vec<u8>, created_ms: i64) -> NewPlugin {
    NewPlugin {
        tenant: tenant.into(),
        sha256: sha256_hex(&bytes),
        name: name.into(),
        world: "nexo:plugin/agent".into(),
        bytes,
        created_ms,
        origin: None,
    }
}

/// A component's magic, then bytes that are not UTF-8, then every byte.
fn component_bytes(tag: u8) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend([0xff, 0xfe, 0xc3, 0x28, 0x80, 0x00, tag]);
    bytes.extend(0..=255u8);
    bytes
}

async fn plugins_are_stored_once_and_listed_newest_first(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    let bytes = component_bytes(1);
    assert!(String::from_utf8(bytes.clone()).is_err(), "the bytes are not text");
    let first = new_plugin("t-acme", "hello", bytes.clone(), 1_000);
    let sha = first.sha256.clone();
    let (stored, new) = store.put_plugin(first.clone()).await.unwrap();
    assert!(new);
    assert_eq!(
        stored,
        StoredPlugin {
            tenant: "t-acme".into(),
            sha256: sha.clone(),
            name: "hello".into(),
            world: "nexo:plugin/agent".into(),
            size: bytes.len() as u64,
            created_ms: 1_000,
            origin: None,
        }
    );
    // Again, under another name and later: the first upload stands.
    let renamed = NewPlugin { name: "renamed".into(), world: "other".into(), created_ms: 2_000, ..first.clone() };
    assert_eq!(store.put_plugin(renamed).await.unwrap(), (stored.clone(), false));
    assert_eq!(store.put_plugin(first.clone()).await.unwrap(), (stored.clone(), false));
    // A pull of the same bytes says where they came from; the first pull's stands.
    let pulled = NewPlugin { origin: Some("{\"reference\":\"a\"}".into()), ..first.clone() };
    let (with_origin, new) = store.put_plugin(pulled).await.unwrap();
    assert!(!new);
    assert_eq!(with_origin, StoredPlugin { origin: Some("{\"reference\":\"a\"}".into()), ..stored.clone() });
    let again = NewPlugin { origin: Some("{\"reference\":\"b\"}".into()), ..first.clone() };
    assert_eq!(store.put_plugin(again).await.unwrap().0.origin, with_origin.origin);
    assert_eq!(store.put_plugin(first.clone()).await.unwrap().0, with_origin, "an upload does not clear it");
    let stored = with_origin;
    assert_eq!(store.plugins("t-acme").await.unwrap(), vec![stored.clone()], "stored once");
    assert_eq!(store.plugin("t-acme", &sha).await.unwrap(), Some(stored.clone()));
    assert_eq!(store.plugin_bytes("t-acme", &sha).await.unwrap(), Some(bytes.clone()), "byte for byte");

    // Newest first; the same time, by hash, largest first.
    let (b, _) = store.put_plugin(new_plugin("t-acme", "b", component_bytes(2), 3_000)).await.unwrap();
    let (c, _) = store.put_plugin(new_plugin("t-acme", "c", component_bytes(3), 3_000)).await.unwrap();
    let (same_time_high, same_time_low) = if b.sha256 > c.sha256 { (b, c) } else { (c, b) };
    assert_eq!(store.plugins("t-acme").await.unwrap(), vec![same_time_high, same_time_low, stored.clone()]);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let (large, _) = store.put_plugin(new_plugin("t-acme", "large", big.clone(), 4_000)).await.unwrap();
    assert_eq!(large.size, 300_000);
    assert_eq!(store.plugin_bytes("t-acme", &large.sha256).await.unwrap(), Some(big));

    // Bytes that are not what the address says, and a missing tenant.
    let damaged = NewPlugin { bytes: bytes[..bytes.len() - 1].to_vec(), ..first.clone() };
    conflict(store.put_plugin(damaged).await, &format!("not {sha}: it was damaged or truncated on the way"));
    no_tenant(store.put_plugin(new_plugin("t-missing", "x", component_bytes(9), 1)).await, "t-missing");
    assert_eq!(store.plugins("t-acme").await.unwrap().len(), 4);
    assert_eq!(store.plugin("t-acme", &sha256_hex("nothing")).await.unwrap(), None);
    assert_eq!(store.plugin_bytes("t-acme", &sha256_hex("nothing")).await.unwrap(), None);
    assert!(store.plugins("t-missing").await.unwrap().is_empty());
}

async fn plugins_are_private_to_their_tenant(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let bytes = component_bytes(1);
    let (acme, _) = store.put_plugin(new_plugin("t-acme", "hello", bytes.clone(), 1_000)).await.unwrap();
    let sha = acme.sha256.clone();
    // Knowing the hash is not enough.
    assert_eq!(store.plugin("t-beta", &sha).await.unwrap(), None);
    assert_eq!(store.plugin_bytes("t-beta", &sha).await.unwrap(), None);
    assert!(store.plugins("t-beta").await.unwrap().is_empty());
    // The same bytes uploaded by another tenant are a plugin of its own.
    let (beta, new) = store.put_plugin(new_plugin("t-beta", "mine", bytes.clone(), 5_000)).await.unwrap();
    assert!(new, "stored for this tenant");
    assert_eq!((beta.tenant.as_str(), beta.name.as_str(), beta.created_ms), ("t-beta", "mine", 5_000));
    assert_eq!(store.plugin("t-beta", &sha).await.unwrap(), Some(beta.clone()));
    assert_eq!(store.plugin_bytes("t-beta", &sha).await.unwrap(), Some(bytes));
    assert_eq!(store.plugins("t-acme").await.unwrap(), vec![acme]);
    assert_eq!(store.plugins("t-beta").await.unwrap(), vec![beta]);
}

fn acceptance(tenant: &str, digest: &str, by: &str) -> PluginAcceptance {
    PluginAcceptance {
        tenant: tenant.into(),
        reference: "registry.test/acme/agent".into(),
        digest: digest.into(),
        authority: format!("{{\"asks\":\"{digest}\"}}"),
        accepted_ms: 1_000,
        accepted_by: by.into(),
    }
}

/// What a test records with each acceptance.
const AUDITED: (&str, &serde_json::Value) = ("plugin.accepted", &serde_json::Value::Null);

async fn a_plugin_acceptance_is_written_over_only_the_digest_it_was_decided_on(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let reference = "registry.test/acme/agent";
    assert_eq!(store.plugin_acceptance("t-acme", reference).await.unwrap(), None);
    let first = acceptance("t-acme", "sha256:aa", "first-use");
    assert!(store.record_plugin_acceptance(first.clone(), None, AUDITED).await.unwrap());
    assert_eq!(store.plugin_acceptance("t-acme", reference).await.unwrap(), Some(first.clone()));
    // A second "first" decision, taken on the same empty record, loses.
    assert!(
        !store.record_plugin_acceptance(acceptance("t-acme", "sha256:bb", "first-use"), None, AUDITED).await.unwrap()
    );
    // A decision taken on a record another one replaced loses too.
    let next = acceptance("t-acme", "sha256:cc", "operator");
    assert!(store.record_plugin_acceptance(next.clone(), Some("sha256:aa"), AUDITED).await.unwrap());
    assert!(
        !store
            .record_plugin_acceptance(acceptance("t-acme", "sha256:dd", "tenant"), Some("sha256:aa"), AUDITED)
            .await
            .unwrap()
    );
    assert_eq!(store.plugin_acceptance("t-acme", reference).await.unwrap(), Some(next));
    // Each acceptance recorded is in the audit log, written with it; a lost decision wrote nothing.
    let audited = store.audit("t-acme", 0, 10).await.unwrap();
    assert_eq!(audited.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["plugin.accepted", "plugin.accepted"]);
    assert_eq!(audited[0].at_ms, 1_000);
    // Another tenant's record is its own.
    assert_eq!(store.plugin_acceptance("t-beta", reference).await.unwrap(), None);
    assert!(
        !store
            .record_plugin_acceptance(acceptance("t-beta", "sha256:ee", "tenant"), Some("sha256:cc"), AUDITED)
            .await
            .unwrap()
    );
    assert!(store.audit("t-beta", 0, 10).await.unwrap().is_empty());
    no_tenant(
        store.record_plugin_acceptance(acceptance("t-missing", "sha256:aa", "tenant"), None, AUDITED).await,
        "t-missing",
    );
}

fn tenant_run(id: &str, tenant: &str, status: RunStatus, created_ms: i64) -> NewRun {
    NewRun { tenant: Some(tenant.into()), ..new_run(id, status, created_ms) }
}

async fn tenant_runs_are_only_the_tenants(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let a1 = store.create_run(tenant_run("a1", "t-acme", RunStatus::Queued, 1_000)).await.unwrap();
    store.create_run(tenant_run("a2", "t-acme", RunStatus::Running, 2_000)).await.unwrap();
    store.create_run(tenant_run("a3", "t-acme", RunStatus::Queued, 3_000)).await.unwrap();
    store.create_run(tenant_run("b1", "t-beta", RunStatus::Queued, 2_500)).await.unwrap();
    let plain = store.create_run(new_run("plain", RunStatus::Queued, 2_600)).await.unwrap();
    assert_eq!(a1.tenant.as_deref(), Some("t-acme"));
    assert_eq!(store.run("a1").await.unwrap(), Some(a1));
    assert_eq!(plain.tenant, None);
    assert_eq!(store.run("plain").await.unwrap().unwrap().tenant, None);

    let ids = |runs: Vec<nexo_store::Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(store.tenant_runs("t-acme", None, 10).await.unwrap()), ["a3", "a2", "a1"]);
    assert_eq!(ids(store.tenant_runs("t-acme", Some(RunStatus::Queued), 10).await.unwrap()), ["a3", "a1"]);
    assert_eq!(ids(store.tenant_runs("t-acme", Some(RunStatus::Running), 10).await.unwrap()), ["a2"]);
    assert_eq!(ids(store.tenant_runs("t-acme", None, 2).await.unwrap()), ["a3", "a2"]);
    assert!(store.tenant_runs("t-acme", None, 0).await.unwrap().is_empty());
    assert!(store.tenant_runs("t-acme", Some(RunStatus::Done), 10).await.unwrap().is_empty());
    assert_eq!(ids(store.tenant_runs("t-beta", None, usize::MAX).await.unwrap()), ["b1"]);
    assert!(store.tenant_runs("t-missing", None, 10).await.unwrap().is_empty());
    assert_eq!(ids(store.runs(None, 10).await.unwrap()), ["a3", "plain", "b1", "a2", "a1"], "every run");

    // A run keeps its tenant through its life.
    store.claim("a1", Claim::Start, lease(OWNER, FAR), None, 4_000).await.unwrap();
    let ended = store.transition("a1", OWNER, Batch::default(), done("hi")).await.unwrap();
    assert_eq!(ended.tenant.as_deref(), Some("t-acme"));
    assert_eq!(store.run("a1").await.unwrap(), Some(ended));
    assert_eq!(ids(store.tenant_runs("t-acme", Some(RunStatus::Done), 10).await.unwrap()), ["a1"]);

    // A tenant's prompt of a session is both.
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let prompt = NewRun { session: Some(session.id.clone()), ..tenant_run("p1", "t-beta", RunStatus::Queued, 5_000) };
    let prompt = store.create_run(prompt).await.unwrap();
    assert_eq!(store.session_runs(&session.id).await.unwrap(), vec![prompt.clone()]);
    assert_eq!(store.tenant_runs("t-beta", None, 10).await.unwrap()[0], prompt);
}

async fn a_run_of_a_missing_tenant_is_refused(store: Arc<dyn Store>) {
    no_tenant(store.create_run(tenant_run("r1", "t-missing", RunStatus::Queued, 1)).await, "t-missing");
    no_tenant(store.create_run(tenant_run("r1", "t-missing", RunStatus::Running, 1)).await, "t-missing");
    assert_eq!(store.run("r1").await.unwrap(), None, "a refused run is not recorded");

    // With a session too: the tenant is named first, whatever the session.
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    let prompt = |id: &str, tenant: &str, session: &str| NewRun {
        session: Some(session.to_string()),
        ..tenant_run(id, tenant, RunStatus::Queued, 2)
    };
    no_tenant(store.create_run(prompt("r2", "t-missing", &session.id)).await, "t-missing");
    no_tenant(store.create_run(prompt("r2", "t-missing", "s-missing")).await, "t-missing");
    store.create_run(session_run("p1", Some(&session.id), RunStatus::Running, 2)).await.unwrap();
    no_tenant(store.create_run(prompt("r2", "t-missing", &session.id)).await, "t-missing");

    // A taken id is named before the tenant.
    conflict(store.create_run(tenant_run("p1", "t-missing", RunStatus::Queued, 3)).await, "a run `p1` already exists");
    conflict(store.create_run(prompt("p1", "t-missing", &session.id)).await, "a run `p1` already exists");

    // With the tenant there, the session's rules apply as ever.
    tenant(&store, "t-acme", "acme").await;
    no_session(store.create_run(prompt("r3", "t-acme", "s-missing")).await, "s-missing");
    conflict(store.create_run(prompt("r3", "t-acme", &session.id)).await, "has a prompt in progress: run `p1`");
    assert!(store.tenant_runs("t-acme", None, 10).await.unwrap().is_empty());
    assert_eq!(store.runs(None, 10).await.unwrap().len(), 1);
}

async fn the_audit_log_is_a_chain_that_verifies(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    assert_eq!(store.audit_head("t-acme").await.unwrap(), None);
    assert!(store.audit("t-acme", 0, 100).await.unwrap().is_empty());

    let created = json!({"by": "operator", "name": "acme ✓", "quote": "\"x\"\n"});
    let e1 = store.append_audit("t-acme", "tenant.create", &created, 1_000).await.unwrap();
    assert_eq!((e1.tenant.as_str(), e1.seq, e1.kind.as_str(), e1.at_ms), ("t-acme", 1, "tenant.create", 1_000));
    assert_eq!(e1.prev, AUDIT_GENESIS);
    assert_eq!(e1.data, serde_json::to_string(&created).unwrap(), "the JSON text as serde_json writes it");
    assert_eq!(e1.hash, audit_hash(AUDIT_GENESIS, 1, 1_000, "t-acme", "tenant.create", &e1.data));
    let e2 = store.append_audit("t-acme", "key.create", &json!({"key": "k1"}), 2_000).await.unwrap();
    assert_eq!((e2.seq, &e2.prev), (2, &e1.hash));
    // The time is recorded as given, even from a clock that is behind.
    let started = json!({"run": "r1", "limits": {"turns": 8, "ratio": 0.25, "big": 12345678901234i64}, "z": null});
    let e3 = store.append_audit("t-acme", "run.start", &started, 1_500).await.unwrap();
    assert_eq!((e3.seq, &e3.prev, e3.at_ms), (3, &e2.hash, 1_500));
    assert_eq!(serde_json::from_str::<Value>(&e3.data).unwrap(), started);
    // Each tenant's log is numbered on its own.
    let b1 = store.append_audit("t-beta", "tenant.create", &json!({}), 1_200).await.unwrap();
    assert_eq!((b1.seq, b1.prev.as_str()), (1, AUDIT_GENESIS));

    let entries = store.audit("t-acme", 0, 100).await.unwrap();
    assert_eq!(entries, vec![e1.clone(), e2.clone(), e3.clone()], "exactly as appended");
    assert_eq!(store.audit("t-acme", 1, 100).await.unwrap(), vec![e2.clone(), e3.clone()]);
    assert_eq!(store.audit("t-acme", 0, 2).await.unwrap(), vec![e1, e2]);
    assert!(store.audit("t-acme", 3, 100).await.unwrap().is_empty());
    assert!(store.audit("t-acme", 0, 0).await.unwrap().is_empty());
    assert!(store.audit("t-acme", u64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(store.audit("t-beta", 0, usize::MAX).await.unwrap(), vec![b1.clone()]);

    let head = store.audit_head("t-acme").await.unwrap();
    assert_eq!(head, Some((3, e3.hash.clone())));
    let head = head.as_ref().map(|(seq, hash)| (*seq, hash.as_str()));
    assert_eq!(verify_audit(&entries, head), Ok(3));
    // Without its last entry the log is short of the head.
    assert!(verify_audit(&entries[..2], head).is_err());
    assert_eq!(store.audit_head("t-beta").await.unwrap(), Some((1, b1.hash)));

    // A disabled tenant's log goes on: the store records, the host judges.
    store.update_tenant("t-acme", None, Some(true), 3_000).await.unwrap();
    let e4 = store.append_audit("t-acme", "tenant.disable", &json!({}), 3_000).await.unwrap();
    assert_eq!((e4.seq, &e4.prev), (4, &e3.hash));

    no_tenant(store.append_audit("t-missing", "x", &json!({}), 1).await, "t-missing");
    assert_eq!(store.audit_head("t-missing").await.unwrap(), None);
    assert!(store.audit("t-missing", 0, 10).await.unwrap().is_empty());
}

async fn every_tenants_audit_head_is_listed(store: Arc<dyn Store>) {
    assert!(store.audit_heads().await.unwrap().is_empty());
    tenant(&store, "t-beta", "beta").await;
    tenant(&store, "t-acme", "acme").await;
    let e1 = store.append_audit("t-acme", "a", &json!({}), 1_000).await.unwrap();
    let e2 = store.append_audit("t-acme", "b", &json!({}), 1_001).await.unwrap();
    assert_ne!(e1.hash, e2.hash);
    let heads = store.audit_heads().await.unwrap();
    assert_eq!(
        heads,
        vec![("t-acme".to_string(), 2, e2.hash.clone()), ("t-beta".to_string(), 0, AUDIT_GENESIS.to_string())],
        "by tenant, an empty log at 0 and the genesis hash"
    );
    // What an anchor records: a log cut back to entry 1 fails it.
    let anchored = [(heads[0].1, heads[0].2.as_str())];
    let entries = store.audit("t-acme", 0, 100).await.unwrap();
    assert_eq!(nexo_store::verify_anchored(&entries, &anchored), Ok(()));
    assert!(nexo_store::verify_anchored(&entries[..1], &anchored).is_err());
}

async fn concurrent_audit_appends_make_one_chain(store: Arc<dyn Store>) {
    support::audit_race(vec![store.clone(), store], 8, 25).await;
}

async fn usage_adds_up_per_hour(store: Arc<dyn Store>) {
    const HOUR: i64 = USAGE_PERIOD_MS;
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let base = 480_000 * HOUR;
    let usage = |tenant: &str, period_ms: i64, [runs, tokens, cpu_ticks, egress_bytes]: [u64; 4]| Usage {
        tenant: tenant.into(),
        period_ms,
        runs,
        tokens,
        cpu_ticks,
        egress_bytes,
        // Each add below costs a thousand nano-dollars per egress byte.
        cost_nanos: egress_bytes * 1_000,
    };
    store
        .add_usage(
            "t-acme",
            base + 10,
            1,
            nexo_store::RunUsage { tokens: 100, cpu_ticks: 5, egress_bytes: 1_000, cost_nanos: 1000000 },
        )
        .await
        .unwrap();
    // The same hour, to its last millisecond.
    store
        .add_usage(
            "t-acme",
            base + HOUR - 1,
            2,
            nexo_store::RunUsage { tokens: 50, cpu_ticks: 0, egress_bytes: 24, cost_nanos: 24000 },
        )
        .await
        .unwrap();
    store
        .add_usage(
            "t-acme",
            base + HOUR,
            1,
            nexo_store::RunUsage { tokens: 1, cpu_ticks: 1, egress_bytes: 1, cost_nanos: 1000 },
        )
        .await
        .unwrap();
    // An hour with nothing, then one more.
    store
        .add_usage(
            "t-acme",
            base + 3 * HOUR + 5,
            0,
            nexo_store::RunUsage { tokens: 7, cpu_ticks: 0, egress_bytes: 0, cost_nanos: 0 },
        )
        .await
        .unwrap();
    store
        .add_usage(
            "t-beta",
            base + 20,
            9,
            nexo_store::RunUsage { tokens: 9, cpu_ticks: 9, egress_bytes: 9, cost_nanos: 9000 },
        )
        .await
        .unwrap();

    let acme = vec![
        usage("t-acme", base, [3, 150, 5, 1_024]),
        usage("t-acme", base + HOUR, [1, 1, 1, 1]),
        usage("t-acme", base + 3 * HOUR, [0, 7, 0, 0]),
    ];
    assert_eq!(store.usage("t-acme", 0).await.unwrap(), acme);
    assert_eq!(store.usage("t-acme", base).await.unwrap(), acme);
    // From the hour that holds `since`.
    assert_eq!(store.usage("t-acme", base + HOUR + 59).await.unwrap(), acme[1..].to_vec());
    assert_eq!(store.usage("t-acme", base + HOUR * 2).await.unwrap(), acme[2..].to_vec());
    assert!(store.usage("t-acme", base + 4 * HOUR).await.unwrap().is_empty());
    assert_eq!(store.usage("t-beta", i64::MIN / 2).await.unwrap(), vec![usage("t-beta", base, [9, 9, 9, 9])]);

    // Concurrent adds all count.
    let adds: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .add_usage(
                        "t-beta",
                        base + 30,
                        1,
                        nexo_store::RunUsage { tokens: 2, cpu_ticks: 3, egress_bytes: 4, cost_nanos: 4000 },
                    )
                    .await
            })
        })
        .collect();
    for add in adds {
        add.await.unwrap().unwrap();
    }
    assert_eq!(store.usage("t-beta", base).await.unwrap(), vec![usage("t-beta", base, [29, 49, 69, 89])]);

    no_tenant(
        store
            .add_usage(
                "t-missing",
                base,
                1,
                nexo_store::RunUsage { tokens: 1, cpu_ticks: 1, egress_bytes: 1, cost_nanos: 1000 },
            )
            .await,
        "t-missing",
    );
    assert!(store.usage("t-missing", 0).await.unwrap().is_empty());
}

async fn a_runs_usage_adds_up_over_its_passes_and_goes_with_it(store: Arc<dyn Store>) {
    let used = |tokens, cpu_ticks, egress_bytes| RunUsage { tokens, cpu_ticks, egress_bytes, cost_nanos: tokens * 10 };
    running(&store, "r1").await;
    assert_eq!(store.run_usage("r1").await.unwrap(), RunUsage::default(), "nothing yet");
    store.add_run_usage("r1", used(40, 3, 0)).await.unwrap();
    store.add_run_usage("r1", used(15, 0, 1_024)).await.unwrap();
    assert_eq!(store.run_usage("r1").await.unwrap(), used(55, 3, 1_024));
    no_run(store.add_run_usage("missing", used(1, 1, 1)).await, "missing");
    assert_eq!(store.run_usage("missing").await.unwrap(), RunUsage::default());

    // Concurrent adds all count.
    let adds: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.add_run_usage("r1", used(1, 2, 3)).await })
        })
        .collect();
    for add in adds {
        add.await.unwrap().unwrap();
    }
    assert_eq!(store.run_usage("r1").await.unwrap(), used(75, 43, 1_084));

    // The counters go with their run.
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    store.create_run(session_run("r2", Some(&session.id), RunStatus::Done, 1_000)).await.unwrap();
    store.add_run_usage("r2", used(9, 9, 9)).await.unwrap();
    assert!(store.delete_session(&session.id).await.unwrap());
    assert_eq!(store.run_usage("r2").await.unwrap(), RunUsage::default());
    assert_eq!(store.run_usage("r1").await.unwrap(), used(75, 43, 1_084), "another run's are kept");
}

async fn a_runs_pass_traces_are_kept_once_in_order_and_go_with_it(store: Arc<dyn Store>) {
    running(&store, "r1").await;
    assert!(store.pass_traces("r1", 8).await.unwrap().is_empty(), "nothing yet");
    store.add_pass_trace("r1", "second", 2_000).await.unwrap();
    store.add_pass_trace("r1", "first", 1_000).await.unwrap();
    store.add_pass_trace("r1", "third", 3_000).await.unwrap();
    store.add_pass_trace("r1", "first", 4_000).await.unwrap();
    assert_eq!(store.pass_traces("r1", 8).await.unwrap(), ["first", "second", "third"], "oldest first, each once");
    assert_eq!(store.pass_traces("r1", 2).await.unwrap(), ["second", "third"], "the latest ones");
    no_run(store.add_pass_trace("missing", "x", 1).await, "missing");

    // They go with their run.
    let session = store.open_session("hello", "alice", 1_000).await.unwrap();
    store.create_run(session_run("r2", Some(&session.id), RunStatus::Done, 1_000)).await.unwrap();
    store.add_pass_trace("r2", "gone", 1_000).await.unwrap();
    assert!(store.delete_session(&session.id).await.unwrap());
    assert!(store.pass_traces("r2", 8).await.unwrap().is_empty());
    assert_eq!(store.pass_traces("r1", 8).await.unwrap().len(), 3, "another run's are kept");
}

async fn live_runs_are_those_that_run_or_may_run(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    let of =
        |id: &str, tenant: &str, status: RunStatus| NewRun { tenant: Some(tenant.into()), ..new_run(id, status, 1) };
    for (id, status) in [
        ("queued", RunStatus::Queued),
        ("running", RunStatus::Running),
        ("waiting", RunStatus::Suspended),
        ("resuming", RunStatus::Suspended),
        ("retrying", RunStatus::Failed),
        ("given-up", RunStatus::Failed),
        ("done", RunStatus::Done),
        ("cancelled", RunStatus::Cancelled),
    ] {
        store.create_run(of(id, "t-acme", status)).await.unwrap();
    }
    store.create_run(of("other", "t-beta", RunStatus::Queued)).await.unwrap();
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 2, "queued and running");
    // A suspended or failed run whose resume (or retry) is queued may run.
    store.enqueue(NewJob { run: "resuming".into(), ..new_job("j1", 0, 1) }).await.unwrap();
    store.enqueue(NewJob { run: "retrying".into(), ..new_job("j2", 0, 2) }).await.unwrap();
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 4);
    // Claimed, its job still counts; done, it does not.
    let (job, lease) = claim(&store, "w1", 30_000, 10).await;
    assert_eq!(job.id, "j1");
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 4);
    store.complete_job("j1", &lease, 20).await.unwrap();
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 3);
    // A cancelled run's queued job will not run its guest; a running one
    // holds its slot until the guest stops.
    store.enqueue(NewJob { run: "cancelled".into(), ..new_job("j3", 0, 30) }).await.unwrap();
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 3, "a cancelled run's queued job");
    let (job, _) = claim(&store, "w1", 30_000, 40).await;
    assert_eq!(job.id, "j2");
    let (job, lease) = claim(&store, "w1", 30_000, 41).await;
    assert_eq!(job.id, "j3");
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 4, "a cancelled run whose guest still runs");
    store.complete_job("j3", &lease, 50).await.unwrap();
    assert_eq!(store.live_runs("t-acme").await.unwrap(), 3);
    assert_eq!(store.live_runs("t-beta").await.unwrap(), 1);
    assert_eq!(store.live_runs("t-missing").await.unwrap(), 0);
}

async fn a_postponed_job_waits_without_using_an_attempt(store: Arc<dyn Store>) {
    store.create_run(new_run("r1", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(new_job("j1", 0, 1)).await.unwrap();
    let (job, lease) = claim(&store, "w1", 30_000, 10).await;
    assert_eq!(job.attempts, 1);
    let why = "the tenant used 45 model tokens this hour, its quota (40)";
    let held = store.postpone_job("j1", &lease, why, 5_000, 20).await.unwrap();
    assert_eq!((held.status, held.attempts, held.not_before_ms, held.updated_ms), (JobStatus::Queued, 0, 5_000, 20));
    assert_eq!((held.lease.as_ref(), held.error.as_deref()), (None, Some(why)));
    assert_eq!(store.job("j1").await.unwrap(), Some(held));
    let events = store.events("r1", 0, 10).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!((last.kind.as_str(), &last.data), ("held", &json!({"reason": why, "until_ms": 5_000})));
    conflict(store.postpone_job("j1", &lease, "again", 1, 30).await, LOST);
    assert!(store.claim_job("w2", 30_000, 4_999).await.unwrap().is_none(), "not due yet");
    let (again, lease) = claim(&store, "w2", 30_000, 5_000).await;
    assert_eq!((again.id.as_str(), again.attempts), ("j1", 1), "the postponed claim used no attempt");
    // Held again for the same reason: the job waits, and no new event says
    // it again; for another reason, one does.
    let held = store.postpone_job("j1", &lease, why, 9_000, 5_010).await.unwrap();
    assert_eq!((held.status, held.not_before_ms), (JobStatus::Queued, 9_000));
    assert_eq!(store.events("r1", 0, 10).await.unwrap().len(), events.len(), "the same reason is not repeated");
    let (_, lease) = claim(&store, "w2", 30_000, 9_000).await;
    store.postpone_job("j1", &lease, "another reason", 12_000, 9_010).await.unwrap();
    let later = store.events("r1", 0, 10).await.unwrap();
    assert_eq!(
        (later.len(), later.last().unwrap().data["reason"].as_str()),
        (events.len() + 1, Some("another reason"))
    );
}

async fn running_runs_are_those_that_hold_a_worker(store: Arc<dyn Store>) {
    tenant(&store, "t-acme", "acme").await;
    let of = |id: &str, status: RunStatus| NewRun { tenant: Some("t-acme".into()), ..new_run(id, status, 1) };
    for (id, status) in
        [("queued", RunStatus::Queued), ("running", RunStatus::Running), ("cancelled", RunStatus::Cancelled)]
    {
        store.create_run(of(id, status)).await.unwrap();
    }
    store.enqueue(NewJob { run: "queued".into(), ..new_job("j1", 0, 1) }).await.unwrap();
    store.enqueue(NewJob { run: "cancelled".into(), ..new_job("j2", 0, 2) }).await.unwrap();
    assert_eq!(store.running_runs("t-acme").await.unwrap(), 1, "queued jobs hold no worker");
    assert!(store.has_live_job("queued").await.unwrap(), "queued");
    assert!(!store.has_live_job("running").await.unwrap(), "no job");
    claim(&store, "w1", 30_000, 10).await;
    claim(&store, "w1", 30_000, 11).await;
    assert_eq!(store.running_runs("t-acme").await.unwrap(), 3, "claimed, a queued or cancelled run runs");
    assert!(store.has_live_job("cancelled").await.unwrap(), "running");
    assert_eq!(store.running_runs("t-missing").await.unwrap(), 0);
}

/// The operator's gauges: queued jobs per queue (`""` for no tenant's),
/// and runs suspended on an approval no one has decided, per tenant.
async fn what_waits_is_counted_per_tenant(store: Arc<dyn Store>) {
    assert_eq!(store.waiting().await.unwrap(), vec![]);
    tenant(&store, "t-acme", "acme").await;
    tenant(&store, "t-beta", "beta").await;
    for (id, of) in [("a1", "t-acme"), ("a2", "t-acme"), ("b1", "t-beta")] {
        store.create_run(tenant_run(id, of, RunStatus::Queued, 1)).await.unwrap();
        store
            .enqueue(NewJob { run: id.into(), kind: JobKind::Start, ..new_job(&format!("j-{id}"), 0, 1) })
            .await
            .unwrap();
    }
    store.create_run(new_run("cli", RunStatus::Queued, 1)).await.unwrap();
    store.enqueue(NewJob { run: "cli".into(), kind: JobKind::Start, ..new_job("j-cli", 0, 2) }).await.unwrap();
    // Two of acme's runs wait on approvals: one undecided, one decided.
    for (id, seq) in [("a3", 1), ("a4", 2)] {
        store
            .create_run(NewRun { lease: Some(lease(OWNER, FAR)), ..tenant_run(id, "t-acme", RunStatus::Running, 1) })
            .await
            .unwrap();
        store.transition(id, OWNER, Batch::default(), suspend("approval", Some(approval(seq, "shell")))).await.unwrap();
    }
    store.decide("a4", &call(2), Decision::Approved).await.unwrap();
    let waiting = |tenant: &str, queued_jobs, pending_approvals| Waiting {
        tenant: tenant.into(),
        queued_jobs,
        pending_approvals,
    };
    let expected = vec![waiting("", 1, 0), waiting("t-acme", 2, 1), waiting("t-beta", 1, 0)];
    assert_eq!(store.waiting().await.unwrap(), expected);
    // A claimed job no longer waits.
    let (job, _) = claim(&store, "w1", 30_000, 10).await;
    let after = store.waiting().await.unwrap();
    let queued: u64 = after.iter().map(|w| w.queued_jobs).sum();
    assert_eq!(queued, 3, "{job:?} was claimed: {after:?}");
}
