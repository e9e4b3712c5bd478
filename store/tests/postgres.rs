//! What only the PostgreSQL backend promises: a newer schema and another
//! program's tables are refused untouched, processes that open one new
//! database at once migrate it once, exactly one of two stores claims a
//! run, three stores split a jobs queue, and a failed login is a clear
//! error without the password. Each test has a database of its own on the
//! `NEXO_TEST_POSTGRES` server, and skips (outside CI) without one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod support;

use std::sync::Arc;

use nexo_store::{
    Backend, Batch, Claim, Lease, Location, NewJob, NewRun, PgStore, RunStatus, Runs, SCHEMA_VERSION, Store,
    StoreError, Transition, open,
};
use serde_json::json;
use sqlx::Connection;

const OWNER: &str = "host:1:a";

fn lease(owner: &str) -> Lease {
    Lease { owner: owner.into(), until_ms: i64::MAX / 2 }
}

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        agent: "hello".into(),
        kind: "component".into(),
        source: "/agents/hello.wasm".into(),
        component_sha256: "ab".repeat(32),
        input: "hi".into(),
        grant: json!({"allow": ["files"]}),
        status: RunStatus::Running,
        lease: Some(lease(OWNER)),
        created_ms: 1_000,
        session: None,
        tenant: None,
    }
}

/// The tables in the database's public schema, sorted.
async fn tables(conn: &mut sqlx::PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        .fetch_all(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_newer_schema_is_too_new_and_untouched() {
    let Some(db) = support::fresh("postgres::a_newer_schema_is_too_new_and_untouched").await else { return };
    let store = PgStore::open(&db.url).await.unwrap();
    store.create_run(new_run("r1")).await.unwrap();
    store.close().await;
    let mut conn = db.raw().await;
    sqlx::query("INSERT INTO nexo_schema (version, applied_ms) VALUES ($1, 0)")
        .bind(SCHEMA_VERSION + 1)
        .execute(&mut conn)
        .await
        .unwrap();
    let before = tables(&mut conn).await;
    match PgStore::open(&db.url).await {
        Err(e @ StoreError::TooNew { .. }) => {
            assert!(e.to_string().contains("upgrade nexo"), "the error names the fix: {e}");
            let StoreError::TooNew { location, found, supported } = e else { unreachable!() };
            assert!(location.starts_with("postgres://nexo@") || !location.contains(':'), "{location}");
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    assert_eq!(tables(&mut conn).await, before, "nothing was created or dropped");
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM nexo_schema ORDER BY version").fetch_all(&mut conn).await.unwrap();
    assert_eq!(versions.last(), Some(&(SCHEMA_VERSION + 1)));
    let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs").fetch_one(&mut conn).await.unwrap();
    assert_eq!(runs, 1);
    conn.close().await.ok();
    db.drop().await;
}

#[tokio::test]
async fn other_programs_tables_are_fine_but_nexo_names_without_a_schema_table_are_refused() {
    let test = "postgres::other_programs_tables_are_fine_but_nexo_names_without_a_schema_table_are_refused";
    let Some(db) = support::fresh(test).await else { return };
    let mut conn = db.raw().await;
    sqlx::query("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT)").execute(&mut conn).await.unwrap();
    // Unrelated tables are normal in a shared database.
    let store = PgStore::open(&db.url).await.unwrap();
    store.create_run(new_run("r1")).await.unwrap();
    store.close().await;
    assert!(tables(&mut conn).await.contains(&"users".to_string()));

    // nexo's table names but no nexo_schema: someone else's `runs`.
    let other = support::fresh(test).await.unwrap();
    let mut raw = other.raw().await;
    sqlx::query("CREATE TABLE runs (id TEXT PRIMARY KEY)").execute(&mut raw).await.unwrap();
    match PgStore::open(&other.url).await {
        Err(e @ StoreError::Corrupt { .. }) => {
            let message = e.to_string();
            assert!(message.contains("`runs`") && message.contains("no `nexo_schema`"), "{message}");
            assert!(message.contains("nothing was changed"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(tables(&mut raw).await, ["runs"], "nothing was created");

    // An empty nexo_schema.
    sqlx::query("DROP TABLE runs").execute(&mut raw).await.unwrap();
    PgStore::open(&other.url).await.unwrap().close().await;
    sqlx::query("DELETE FROM nexo_schema").execute(&mut raw).await.unwrap();
    match PgStore::open(&other.url).await {
        Err(StoreError::Corrupt { reason, .. }) => assert!(reason.contains("records no schema version"), "{reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    raw.close().await.ok();
    conn.close().await.ok();
    other.drop().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_a_new_database_at_once_migrate_it_once() {
    let Some(db) = support::fresh("postgres::stores_opening_a_new_database_at_once_migrate_it_once").await else {
        return;
    };
    let (a, b, c) = tokio::join!(PgStore::open(&db.url), PgStore::open(&db.url), PgStore::open(&db.url));
    for store in [a.unwrap(), b.unwrap(), c.unwrap()] {
        store.close().await;
    }
    let mut conn = db.raw().await;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM nexo_schema ORDER BY version").fetch_all(&mut conn).await.unwrap();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    conn.close().await.ok();
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_never_both_claim() {
    let Some(db) = support::fresh("postgres::two_stores_never_both_claim").await else { return };
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) =
        (Arc::new(PgStore::open(&db.url).await.unwrap()), Arc::new(PgStore::open(&db.url).await.unwrap()));
    for i in 0..20 {
        let id = format!("r{i}");
        a.create_run(new_run(&id)).await.unwrap();
        a.transition(
            &id,
            OWNER,
            Batch::default(),
            Transition::Suspend { reason: "input".into(), resume_key: None, approval: None, wake: None, signal: None },
        )
        .await
        .unwrap();
        let (ra, rb) = tokio::join!(
            a.claim(&id, Claim::Resume, lease("host:a:1"), Some("\"a\"".into()), 5_000),
            b.claim(&id, Claim::Resume, lease("host:b:1"), Some("\"b\"".into()), 5_000),
        );
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            (ra, rb) => panic!("exactly one claim wins: {ra:?} / {rb:?}"),
        };
        assert!(matches!(&loser, StoreError::Conflict(m) if m.contains("is running in another process")), "{loser:?}");
        let stored = b.run(&id).await.unwrap().unwrap();
        assert_eq!(stored.lease, winner.lease);
        assert_eq!(stored.resume_input, winner.resume_input);
        assert_eq!(a.events(&id, 0, 10).await.unwrap().len(), 1, "one resumed event");
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stores_complete_every_job_once() {
    let Some(db) = support::fresh("postgres::three_stores_complete_every_job_once").await else { return };
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
    }
    support::jobs_race(stores, 300, 4).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stores_agree_on_sessions() {
    let Some(db) = support::fresh("postgres::three_stores_agree_on_sessions").await else { return };
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
    }
    support::sessions_race(stores).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_admit_one_prompt_per_session() {
    let Some(db) = support::fresh("postgres::two_stores_admit_one_prompt_per_session").await else { return };
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
    }
    support::prompts_race(stores, 20).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_never_retry_behind_a_new_prompt() {
    let Some(db) = support::fresh("postgres::two_stores_never_retry_behind_a_new_prompt").await else { return };
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
    }
    support::retry_race(stores, 20).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_give_one_tenants_jobs_distinct_turns() {
    let Some(db) = support::fresh("postgres::two_stores_give_one_tenants_jobs_distinct_turns").await else { return };
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) =
        (Arc::new(PgStore::open(&db.url).await.unwrap()), Arc::new(PgStore::open(&db.url).await.unwrap()));
    let tenant = nexo_store::NewTenant { id: "t1".into(), name: "acme".into(), policy: json!({}), created_ms: 1 };
    a.create_tenant(tenant).await.unwrap();
    a.create_run(NewRun { tenant: Some("t1".into()), status: RunStatus::Queued, lease: None, ..new_run("r1") })
        .await
        .unwrap();
    let job = |id: String| nexo_store::NewJob {
        id,
        run: "r1".into(),
        kind: nexo_store::JobKind::Start,
        payload: json!({"run": "r1"}),
        max_attempts: 1,
        backoff_ms: 0,
        not_before_ms: 0,
        created_ms: 1,
    };
    let mut tasks = Vec::new();
    for (n, store) in [a.clone(), b.clone(), a.clone(), b.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut turns = Vec::new();
            for i in 0..25 {
                turns.push(store.enqueue(job(format!("j{n}-{i}"))).await.unwrap().turn);
            }
            turns
        }));
    }
    let mut turns = Vec::new();
    for task in tasks {
        turns.extend(task.await.unwrap());
    }
    turns.sort_unstable();
    assert_eq!(turns, (0..100).collect::<Vec<i64>>(), "jobs queued at once each take a turn of their own");
    db.drop().await;
}

/// The database's `nexo_schema` rows: each version and when it was applied.
async fn schema_rows(conn: &mut sqlx::PgConnection) -> Vec<(i64, i64)> {
    sqlx::query_as("SELECT version, applied_ms FROM nexo_schema ORDER BY version").fetch_all(conn).await.unwrap()
}

/// Every database a real older nexo wrote (store/tests/fixtures/postgres,
/// `pg_dump`s, one per older schema version that had PostgreSQL, each from
/// the last commit that wrote that version), restored into a fresh
/// database, is migrated in place with everything that nexo reported
/// writing, which goes on working; a second open changes nothing.
#[tokio::test]
async fn databases_older_nexos_wrote_are_migrated_with_everything_in_them() {
    let test = "postgres::databases_older_nexos_wrote_are_migrated_with_everything_in_them";
    let fixtures = support::fixtures::fixtures("postgres");
    for fixture in &fixtures {
        let name = format!("{} (nexo {})", fixture.data.display(), fixture.commit);
        let Some(db) = support::fresh(test).await else { return };
        let mut conn = db.raw().await;
        let dump = std::fs::read_to_string(&fixture.data).unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(dump)).execute(&mut conn).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        conn.close().await.ok();
        let mut conn = db.raw().await;
        let written = schema_rows(&mut conn).await;
        assert_eq!(written.last().map(|r| r.0), Some(fixture.schema_version), "{name}");

        let store = PgStore::open(&db.url).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        support::fixtures::check_migrated(&store, fixture).await;
        let runs = store.runs(None, 1_000).await.unwrap();
        store.close().await;
        let migrated = schema_rows(&mut conn).await;
        let now: Vec<i64> = migrated.iter().map(|r| r.0).collect();
        assert_eq!(now, (1..=SCHEMA_VERSION).collect::<Vec<_>>(), "{name}");
        assert_eq!(migrated[..written.len()], written[..], "{name}: the old versions' rows are kept");

        let store = PgStore::open(&db.url).await.unwrap();
        assert_eq!(store.runs(None, 1_000).await.unwrap(), runs, "{name}: a second open changes no run");
        store.close().await;
        assert_eq!(schema_rows(&mut conn).await, migrated, "{name}: a second open migrates nothing");
        conn.close().await.ok();
        db.drop().await;
    }
    let versions: Vec<i64> = fixtures.iter().map(|f| f.schema_version).collect();
    assert!((2..SCHEMA_VERSION).all(|v| versions.contains(&v)), "a dump from every older schema version: {versions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_make_one_audit_chain() {
    let Some(db) = support::fresh("postgres::two_stores_make_one_audit_chain").await else { return };
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(PgStore::open(&db.url).await.unwrap()));
    }
    support::audit_race(stores, 8, 25).await;
    db.drop().await;
}

#[tokio::test]
async fn a_bad_password_is_a_clear_open_error_without_the_password() {
    let Some(admin) = support::server("postgres::a_bad_password_is_a_clear_open_error_without_the_password") else {
        return;
    };
    let options: sqlx::postgres::PgConnectOptions = admin.parse().unwrap();
    let url = format!(
        "postgres://{}:wrong-Secret-9f3@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username())
    );
    let refused = PgStore::open(&url).await;
    let Err(error) = refused else {
        panic!(
            "the server at {} took a wrong password: it must ask for passwords (scripts/postgres.sh does)",
            support::ENV
        )
    };
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("wrong-Secret-9f3"), "{shown}");
    match &error {
        StoreError::Open { location, reason } => {
            assert!(location.starts_with(&format!("postgres://{}@", options.get_username())), "{location}");
            assert!(reason.contains("refused the login"), "{reason}");
            assert!(reason.contains("check the user name and password"), "{reason}");
        }
        other => panic!("expected Open, got {other:?}"),
    }
    // Through `open` too, and for a missing database.
    let missing = support::with_database(&admin, "nexo_no_such_database");
    match open(&Location::parse(&missing).unwrap()).await {
        Err(StoreError::Open { reason, .. }) => {
            assert!(
                reason.contains("`nexo_no_such_database` does not exist") && reason.contains("createdb"),
                "{reason}"
            )
        }
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_connection_names_the_server_and_the_fix() {
    // No server needed: nothing listens on port 1.
    match PgStore::open("postgres://nexo:hunter2-xyz@127.0.0.1:1/nexo").await {
        Err(e @ StoreError::Open { .. }) => {
            let shown = format!("{e} {e:?}");
            assert!(shown.contains("nothing accepts connections at 127.0.0.1:1"), "{shown}");
            assert!(shown.contains("start PostgreSQL there"), "{shown}");
            assert!(!shown.contains("hunter2-xyz"), "{shown}");
        }
        other => panic!("expected Open, got {other:?}"),
    }
    match PgStore::open("postgres://nexo:hunter2-xyz@127.0.0.1:notaport/nexo").await {
        Err(e @ StoreError::Open { .. }) => assert!(!format!("{e} {e:?}").contains("hunter2-xyz"), "{e}"),
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn debug_output_has_no_password() {
    let Some(db) = support::fresh("postgres::debug_output_has_no_password").await else { return };
    let store = PgStore::open(&db.url).await.unwrap();
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let shown = format!("{store:?} {}", store.location());
    assert!(shown.contains(&db.name), "{shown}");
    if let Some(password) = db
        .url
        .split_once("://")
        .and_then(|(_, r)| r.split_once('@'))
        .and_then(|(u, _)| u.split_once(':'))
        .map(|(_, p)| p.to_string())
    {
        assert!(!shown.contains(&password), "{shown}");
    }
    assert!(!shown.contains(&format!("{}:", options.get_username())), "{shown}");
    store.close().await;
    db.drop().await;
}

/// A decision made while the worker that drove the run's pass is completing
/// its job (the completion begun, not committed) waits for that completion,
/// then queues the resume: counted before the completion committed, the job
/// would still be live, and with the worker's look at the approval made
/// before the decision committed, nothing would take the run on.
#[tokio::test]
async fn a_decision_waits_for_a_completing_job_and_queues_the_resume() {
    use nexo_store::{Approval, Decision, JobKind, JobStatus, Jobs, NewJob, PendingCall};
    let test = "postgres::a_decision_waits_for_a_completing_job_and_queues_the_resume";
    let Some(db) = support::fresh(test).await else { return };
    let store = Arc::new(PgStore::open(&db.url).await.unwrap());
    store.create_run(new_run("r1")).await.unwrap();
    let job = |id: &str, kind: JobKind| NewJob {
        id: id.into(),
        run: "r1".into(),
        kind,
        payload: json!({"run": "r1"}),
        max_attempts: 3,
        backoff_ms: 1_000,
        not_before_ms: 0,
        created_ms: 1_000,
    };
    store.enqueue(job("j1", JobKind::Start)).await.unwrap();
    let claimed = store.claim_job_unless("w1", 60_000, 2_000, &[]).await.unwrap().expect("j1 is due");
    assert_eq!(claimed.id, "j1");
    let approval = Approval {
        seq: 1,
        capability: "shell".into(),
        tool: "shell".into(),
        arguments: json!({"command": "make"}),
        args_hash: "cd".repeat(32),
        component_sha256: "ab".repeat(32),
        decision: None,
        created_ms: 3_000,
    };
    let suspend = Transition::Suspend {
        reason: "approval".into(),
        resume_key: None,
        approval: Some(approval),
        wake: None,
        signal: None,
    };
    store.transition("r1", OWNER, Batch::default(), suspend).await.unwrap();

    // The worker's completion of j1: its row changed, not yet committed.
    let mut worker = db.raw().await;
    let mut completing = worker.begin().await.unwrap();
    sqlx::query("UPDATE jobs SET status = 'done' WHERE id = 'j1'").execute(&mut *completing).await.unwrap();
    let call = PendingCall { seq: 1, args_hash: "cd".repeat(32) };
    let deciding = tokio::spawn({
        let store = store.clone();
        async move { store.decide_and_resume("r1", &call, Decision::Approved, job("j2", JobKind::Resume)).await }
    });
    // The decision waits on the job's row, as the server shows it.
    let mut watch = db.raw().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(!deciding.is_finished(), "the decision went ahead without waiting for the job's completion");
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the decision neither waited nor finished");
        tokio::task::yield_now().await;
    }
    completing.commit().await.unwrap();
    let decided = deciding.await.unwrap().unwrap();
    assert_eq!(decided.decision, Some(Decision::Approved));
    let jobs = store.jobs(None, 10).await.unwrap();
    let resume = jobs.iter().find(|j| j.id == "j2").expect("the resume is queued");
    assert_eq!(resume.status, JobStatus::Queued);
    worker.close().await.ok();
    watch.close().await.ok();
    store.close().await;
    db.drop().await;
}

/// A job queued through one store, and a signal's wake made due, reach a
/// worker watching through another at once (PostgreSQL's `NOTIFY`, sent
/// when the write commits); a job not yet due, or a refused write, sends
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_of_each_job_another_store_makes_due() {
    let Some(db) = support::fresh("postgres::a_watch_hears_of_each_job_another_store_makes_due").await else { return };
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) =
        (Arc::new(PgStore::open(&db.url).await.unwrap()), Arc::new(PgStore::open(&db.url).await.unwrap()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = b
        .watch_jobs(Arc::new(move || {
            let _ = tx.send(());
        }))
        .await
        .unwrap()
        .expect("PostgreSQL notifies");
    let heard = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>| {
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        n
    };
    // Each step's notification, if any, arrives before the next write's
    // (one connection delivers them in commit order); a marker job due
    // now ends each step.
    let marker = |i: u32| NewJob {
        id: format!("m{i}"),
        run: "r1".into(),
        kind: nexo_store::JobKind::Start,
        payload: json!({}),
        max_attempts: 1,
        backoff_ms: 1,
        not_before_ms: 0,
        created_ms: 0,
    };
    a.create_run(new_run("r1")).await.unwrap();
    a.enqueue(marker(0)).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv()).await.expect("heard in time").unwrap();
    // Not due for an hour: no notification, so the marker's is the next.
    let later = NewJob { not_before_ms: nexo_store::now_ms() + 3_600_000, ..marker(1) };
    a.enqueue(NewJob { id: "later".into(), ..later }).await.unwrap();
    assert!(a.enqueue(marker(0)).await.is_err(), "a refused write");
    a.enqueue(marker(2)).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv()).await.expect("heard in time").unwrap();
    assert_eq!(heard(&mut rx), 0, "one notification for the one due job");
    drop(watch);
    db.drop().await;
}
