//! What only the SQLite backend promises: the file survives the process,
//! keeps its modes and settings, refuses files that are not its own
//! without touching them, and lets exactly one of two processes claim a
//! run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nexo_store::{
    Approval, AuditBreak, Backend, Batch, Claim, Decision, Entry, Jobs, Lease, Ledger, Location, NewEvent, NewRun,
    NewTenant, RunStatus, Runs, SCHEMA_VERSION, SqliteStore, Store, StoreError, Tenants, Transition, open,
    verify_audit,
};
use serde_json::json;
use sqlx::{ConnectOptions, Connection};

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

fn entry(seq: u64) -> Entry {
    Entry {
        seq,
        end: seq + 1,
        interface: "nexo:plugin/tools".into(),
        function: "read-file".into(),
        args_hash: "00".repeat(32),
        result: "\"ok\"".into(),
        started_ms: None,
        ended_ms: None,
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut side = path.as_os_str().to_owned();
    side.push(suffix);
    PathBuf::from(side)
}

/// A raw connection to the file, as another program would open it.
async fn raw(path: &Path) -> sqlx::SqliteConnection {
    sqlx::sqlite::SqliteConnectOptions::new().filename(path).create_if_missing(true).connect().await.unwrap()
}

/// The file's bytes and whether SQLite's side files exist.
fn snapshot(path: &Path) -> (Vec<u8>, bool, bool) {
    (std::fs::read(path).unwrap(), side_file(path, "-wal").exists(), side_file(path, "-shm").exists())
}

#[tokio::test]
async fn data_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let approval = Approval {
        seq: 1,
        capability: "shell".into(),
        tool: "shell".into(),
        arguments: json!({"command": "make"}),
        args_hash: "cd".repeat(32),
        component_sha256: "ab".repeat(32),
        decision: None,
        created_ms: 2_000,
    };
    let (run, events) = {
        let store = SqliteStore::open(&path).await.unwrap();
        store.create_run(new_run("r1")).await.unwrap();
        let batch = Batch {
            journal: vec![entry(0), entry(1)],
            events: vec![NewEvent { kind: "tool_call".into(), data: json!({"tool": "shell"}), at_ms: 1_500 }],
            checkpoints: vec![("plan".into(), json!([1, 2]))],
            thread: None,
            children: Vec::new(),
        };
        store.commit("r1", OWNER, batch).await.unwrap();
        let to = Transition::Suspend {
            reason: "approval".into(),
            resume_key: None,
            approval: Some(approval.clone()),
            wake: None,
            signal: None,
        };
        let run = store.transition("r1", OWNER, Batch::default(), to).await.unwrap();
        store.decide("r1", &approval.call(), Decision::Approved).await.unwrap();
        let events = store.events("r1", 0, 10).await.unwrap();
        store.close().await;
        (run, events)
    };
    assert!(!side_file(&path, "-wal").exists(), "closing checkpoints the WAL into the file");

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.run("r1").await.unwrap(), Some(run));
    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0), entry(1)]);
    assert_eq!(store.events("r1", 0, 10).await.unwrap(), events);
    assert_eq!(store.checkpoints("r1").await.unwrap(), vec![("plan".to_string(), json!([1, 2]))]);
    assert_eq!(store.approval("r1").await.unwrap(), Some(Approval { decision: Some(Decision::Approved), ..approval }));
    // Event ids go on from where they were.
    store.claim("r1", Claim::Resume, lease(OWNER), None, 3_000).await.unwrap();
    let all = store.events("r1", 0, 10).await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all[1].id > all[0].id);
}

#[tokio::test]
async fn dropping_the_store_without_close_keeps_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.create_run(new_run("r1")).await.unwrap();
        store.commit("r1", OWNER, Batch { journal: vec![entry(0)], ..Batch::default() }).await.unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.journal("r1").await.unwrap(), vec![entry(0)]);
}

#[tokio::test]
async fn files_and_directories_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("nexo.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.create_run(new_run("r1")).await.unwrap();
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    assert_eq!(mode(&path), 0o600);
    for suffix in ["-wal", "-shm"] {
        let side = side_file(&path, suffix);
        assert!(side.exists(), "{} exists while the store is open", side.display());
        assert_eq!(mode(&side), 0o600, "{}", side.display());
    }
    assert_eq!(store.location(), path.display().to_string());
    assert_eq!(store.path(), path);
}

#[tokio::test]
async fn an_existing_directory_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
    SqliteStore::open(dir.path().join("nexo.db")).await.unwrap();
    assert_eq!(mode(dir.path()), 0o750);
    assert_eq!(mode(&dir.path().join("nexo.db")), 0o600);
}

#[tokio::test]
async fn connections_run_wal_full_sync_and_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let settings = store.settings().await.unwrap();
    for conn in [&settings.writer, &settings.reader] {
        assert_eq!(conn.journal_mode, "wal");
        assert_eq!(conn.synchronous, 2, "synchronous=FULL");
        assert!(conn.foreign_keys);
        assert_eq!(conn.busy_timeout_ms, 5_000);
    }
    // WAL is the file's own setting: another program sees it too.
    let mut conn = raw(&path).await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.unwrap();
    assert_eq!(mode, "wal");
    // Foreign keys hold: a journal entry needs its run.
    let orphan = store.commit("none", OWNER, Batch { journal: vec![entry(0)], ..Batch::default() }).await;
    assert!(matches!(orphan, Err(StoreError::NoRun(_))), "{orphan:?}");
    let fk = sqlx::query("PRAGMA foreign_keys = ON; INSERT INTO journal VALUES ('none', 0, 1, 'i', 'f', 'h', 'r')")
        .execute(&mut conn)
        .await;
    assert!(fk.is_err(), "the schema declares the foreign key");
}

#[tokio::test]
async fn connect_all_opens_every_reader_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("nexo.db")).await.unwrap();
    assert_eq!(store.open_readers(), 0, "readers connect on first use");
    store.connect_all().await.unwrap();
    let all = store.open_readers();
    assert!(all > 1, "{all} readers");
    // Reads, even at once, use those and open no more.
    let (a, b, c, d, e, f) = tokio::join!(
        store.runs(None, 1),
        store.runs(None, 1),
        store.runs(None, 1),
        store.runs(None, 1),
        store.runs(None, 1),
        store.runs(None, 1)
    );
    for r in [a, b, c, d, e, f] {
        r.unwrap();
    }
    assert_eq!(store.open_readers(), all);
}

#[tokio::test]
async fn a_fresh_file_gets_the_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    // Opening again migrates nothing.
    SqliteStore::open(&path).await.unwrap().close().await;
    let mut conn = raw(&path).await;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM nexo_schema ORDER BY version").fetch_all(&mut conn).await.unwrap();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_empty_existing_file_is_initialised() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    std::fs::write(&path, b"").unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    store.create_run(new_run("r1")).await.unwrap();
    assert!(store.run("r1").await.unwrap().is_some());
}

async fn assert_refused_untouched(path: &Path, what: &str) {
    let before = snapshot(path);
    let refused = SqliteStore::open(path).await;
    match &refused {
        Err(StoreError::Corrupt { location, reason }) => {
            assert_eq!(location, &path.display().to_string());
            assert!(!reason.is_empty());
        }
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
    assert_eq!(snapshot(path), before, "{what}: the file is unchanged");
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("nothing was changed"), "{message}");
}

#[tokio::test]
async fn a_file_that_is_not_sqlite_is_corrupt_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // Random bytes (a fixed xorshift stream, so a failure reproduces).
    let random = dir.path().join("random.db");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&random, &bytes).unwrap();
    assert_refused_untouched(&random, "random bytes").await;

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "these are my notes, not a database\n").unwrap();
    assert_refused_untouched(&text, "a text file").await;

    let short = dir.path().join("short.db");
    std::fs::write(&short, b"SQLite").unwrap();
    assert_refused_untouched(&short, "a file shorter than the header").await;

    // SQLite's header, then garbage: SQLite itself finds the damage.
    let damaged = dir.path().join("damaged.db");
    let mut bytes_with_header = b"SQLite format 3\0".to_vec();
    bytes_with_header.extend(bytes.iter().map(|b| b | 1));
    std::fs::write(&damaged, &bytes_with_header).unwrap();
    assert_refused_untouched(&damaged, "a damaged database").await;
}

#[tokio::test]
async fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let mut conn = raw(&path).await;
        sqlx::query("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)").execute(&mut conn).await.unwrap();
        sqlx::query("INSERT INTO users (name) VALUES ('ada')").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
    assert_refused_untouched(&path, "another program's database").await;
    let message = SqliteStore::open(&path).await.unwrap_err().to_string();
    assert!(message.contains("`users`") && message.contains("another program"), "{message}");
    let mut conn = raw(&path).await;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'").fetch_all(&mut conn).await.unwrap();
    assert_eq!(tables, ["users"]);
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.unwrap();
    assert_eq!(mode, "delete", "the journal mode was not switched either");
}

#[tokio::test]
async fn a_newer_schema_is_too_new_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.create_run(new_run("r1")).await.unwrap();
        store.close().await;
        let mut conn = raw(&path).await;
        sqlx::query("INSERT INTO nexo_schema (version, applied_ms) VALUES ($1, 0)")
            .bind(SCHEMA_VERSION + 1)
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }
    let before = snapshot(&path);
    match SqliteStore::open(&path).await {
        Err(e @ StoreError::TooNew { .. }) => {
            assert!(e.to_string().contains("upgrade nexo"), "the error names the fix: {e}");
            let StoreError::TooNew { location, found, supported } = e else { unreachable!() };
            assert_eq!(location, path.display().to_string());
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    assert_eq!(snapshot(&path), before, "nothing was written");
    let mut conn = raw(&path).await;
    let newest: i64 = sqlx::query_scalar("SELECT MAX(version) FROM nexo_schema").fetch_one(&mut conn).await.unwrap();
    assert_eq!(newest, SCHEMA_VERSION + 1);
    let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs").fetch_one(&mut conn).await.unwrap();
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn an_empty_schema_table_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    let mut conn = raw(&path).await;
    sqlx::query("DELETE FROM nexo_schema").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    assert_refused_untouched(&path, "no schema version").await;
}

#[tokio::test]
async fn a_directory_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    match SqliteStore::open(dir.path()).await {
        Err(StoreError::Open { reason, .. }) => assert!(reason.contains("directory"), "{reason}"),
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_never_both_claim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    // Two processes' worth of stores, opened at once on a new file: both
    // migrations race, one creates the schema.
    let (a, b) = tokio::join!(SqliteStore::open(&path), SqliteStore::open(&path));
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) = (Arc::new(a.unwrap()), Arc::new(b.unwrap()));
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
}

#[tokio::test]
async fn open_by_location() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = open(&Location::Sqlite(path.clone())).await.unwrap();
    assert_eq!(store.location(), path.display().to_string());
    store.create_run(new_run("r1")).await.unwrap();
    let url = format!("sqlite://{}", path.display());
    let again = open(&Location::parse(&url).unwrap()).await.unwrap();
    assert!(again.run("r1").await.unwrap().is_some());

    let memory = open(&Location::Memory).await.unwrap();
    assert_eq!(memory.location(), "(memory)");
    // A PostgreSQL URL opens a PgStore; with no server there, the error
    // says so and keeps the password out.
    match open(&Location::Postgres("postgres://u:secret-pw@127.0.0.1:1/nexo".into())).await {
        Err(StoreError::Open { location, reason }) => {
            assert_eq!(location, "postgres://u@127.0.0.1:1/nexo");
            assert!(reason.contains("nothing accepts connections at 127.0.0.1:1"), "{reason}");
            assert!(!format!("{location} {reason}").contains("secret-pw"), "{reason}");
        }
        other => panic!("expected Open, got {other:?}"),
    }
}

/// Takes a file back from version 13 to what version 5 wrote: version 6
/// only added the jobs' queue and turn (and their indexes, in place of
/// `jobs_by_due`) and the sessions' index by instance.
const UNDO_VERSION_6: &[&str] = &[
    "ALTER TABLE run_usage DROP COLUMN cost_nanos",
    "ALTER TABLE tenant_usage DROP COLUMN cost_nanos",
    "DELETE FROM nexo_schema WHERE version = 13",
    "DROP INDEX runs_by_parent",
    "ALTER TABLE runs DROP COLUMN parent",
    "DELETE FROM nexo_schema WHERE version = 12",
    "DROP INDEX schedules_by_tenant",
    "DROP INDEX schedules_by_next",
    "DROP TABLE schedules",
    "ALTER TABLE runs DROP COLUMN wake_job",
    "ALTER TABLE runs DROP COLUMN signal_wait",
    "DROP INDEX signals_by_run",
    "DROP TABLE signals",
    "DELETE FROM nexo_schema WHERE version = 11",
    "DROP INDEX jobs_by_wake",
    "ALTER TABLE runs DROP COLUMN wake_ms",
    "DELETE FROM nexo_schema WHERE version = 10",
    "ALTER TABLE plugins DROP COLUMN origin",
    "DROP TABLE plugin_acceptances",
    "DELETE FROM nexo_schema WHERE version = 9",
    "DROP TABLE run_traces",
    "ALTER TABLE journal DROP COLUMN ended_ms",
    "ALTER TABLE journal DROP COLUMN started_ms",
    "DELETE FROM nexo_schema WHERE version = 8",
    "DROP INDEX runs_by_tenant_status",
    "DROP TABLE run_usage",
    "DELETE FROM nexo_schema WHERE version = 7",
    "DROP INDEX sessions_by_instance",
    "DROP INDEX jobs_by_queue",
    "DROP INDEX jobs_by_turn",
    "CREATE INDEX jobs_by_due ON jobs (status, not_before_ms, created_ms, id)",
    "ALTER TABLE jobs DROP COLUMN turn",
    "ALTER TABLE jobs DROP COLUMN queue",
    "DELETE FROM nexo_schema WHERE version = 6",
];

#[tokio::test]
async fn a_version_5_file_is_migrated_in_place_its_queued_jobs_in_their_tenants_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        let tenant = NewTenant { id: "t1".into(), name: "acme".into(), policy: json!({}), created_ms: 1 };
        store.create_tenant(tenant).await.unwrap();
        let other = NewTenant { id: "t2".into(), name: "other".into(), policy: json!({}), created_ms: 1 };
        store.create_tenant(other).await.unwrap();
        store.create_run(NewRun { tenant: Some("t1".into()), ..new_run("r1") }).await.unwrap();
        store.create_run(NewRun { tenant: Some("t2".into()), ..new_run("r2") }).await.unwrap();
        let job = |id: &str, run: &str, created_ms: i64| nexo_store::NewJob {
            id: id.into(),
            run: run.into(),
            kind: nexo_store::JobKind::Start,
            payload: json!({"run": run}),
            max_attempts: 1,
            backoff_ms: 0,
            not_before_ms: 0,
            created_ms,
        };
        for (id, run, at) in [("j1", "r1", 1), ("j2", "r1", 2), ("j3", "r1", 3), ("k1", "r2", 4)] {
            store.enqueue(job(id, run, at)).await.unwrap();
        }
        store.close().await;
        let mut conn = raw(&path).await;
        for undo in UNDO_VERSION_6 {
            sqlx::query(*undo).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let job = store.job("j1").await.unwrap().unwrap();
    assert_eq!((job.tenant.as_deref(), job.turn), (Some("t1"), 0), "in its run's tenant's queue, at the first turn");
    let turns: Vec<i64> = {
        let mut turns = Vec::new();
        for id in ["j2", "j3", "k1"] {
            turns.push(store.job(id).await.unwrap().unwrap().turn);
        }
        turns
    };
    assert_eq!(turns, [1, 2, 0], "each queue's jobs take turns in their old order");
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(store.claim_job("w", 1_000, 10).await.unwrap().unwrap().id);
    }
    assert_eq!(order, ["j1", "k1", "j2", "j3"], "the other tenant's job is not behind the first one's backlog");
    store.close().await;
}

/// The file's `nexo_schema` rows: each version and when it was applied.
async fn schema_rows(path: &Path) -> Vec<(i64, i64)> {
    let mut conn = raw(path).await;
    let rows = sqlx::query_as("SELECT version, applied_ms FROM nexo_schema ORDER BY version")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    rows
}

/// Every file a real older nexo wrote (store/tests/fixtures/sqlite, one per
/// older schema version, each from the last commit that wrote that version)
/// is migrated in place with everything that nexo reported writing, which
/// goes on working; a second open changes nothing.
#[tokio::test]
async fn files_older_nexos_wrote_are_migrated_with_everything_in_them() {
    let fixtures = support::fixtures::fixtures("sqlite");
    for fixture in &fixtures {
        let name = format!("{} (nexo {})", fixture.data.display(), fixture.commit);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nexo.db");
        std::fs::copy(&fixture.data, &path).unwrap();
        let written = schema_rows(&path).await;
        assert_eq!(written.last().map(|r| r.0), Some(fixture.schema_version), "{name}");

        let store = SqliteStore::open(&path).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        support::fixtures::check_migrated(&store, fixture).await;
        let runs = store.runs(None, 1_000).await.unwrap();
        store.close().await;
        let migrated = schema_rows(&path).await;
        let now: Vec<i64> = migrated.iter().map(|r| r.0).collect();
        assert_eq!(now, (1..=SCHEMA_VERSION).collect::<Vec<_>>(), "{name}");
        assert_eq!(migrated[..written.len()], written[..], "{name}: the old versions' rows are kept");

        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(store.runs(None, 1_000).await.unwrap(), runs, "{name}: a second open changes no run");
        store.close().await;
        assert_eq!(schema_rows(&path).await, migrated, "{name}: a second open migrates nothing");
    }
    let versions: Vec<i64> = fixtures.iter().map(|f| f.schema_version).collect();
    assert!((1..SCHEMA_VERSION).all(|v| versions.contains(&v)), "a file from every older schema version: {versions:?}");
}

#[tokio::test]
async fn a_tampered_audit_log_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let tenant = NewTenant { id: "t1".into(), name: "acme".into(), policy: json!({}), created_ms: 1 };
    store.create_tenant(tenant).await.unwrap();
    for n in 0..5 {
        store.append_audit("t1", "run.start", &json!({"run": format!("r{n}")}), 100 + n).await.unwrap();
    }
    store.close().await;
    let verify = || async {
        let store = SqliteStore::open(&path).await.unwrap();
        let entries = store.audit("t1", 0, usize::MAX).await.unwrap();
        let head = store.audit_head("t1").await.unwrap();
        store.close().await;
        verify_audit(&entries, head.as_ref().map(|(seq, hash)| (*seq, hash.as_str())))
    };
    assert_eq!(verify().await, Ok(5));

    // Another program with the file edits an entry, then removes the last.
    let mut conn = raw(&path).await;
    let edit = "UPDATE audit_log SET data = '{\"run\":\"r9\"}' WHERE tenant = 't1' AND seq = 2";
    sqlx::query(edit).execute(&mut conn).await.unwrap();
    let caught = verify().await;
    assert_eq!(caught, Err(AuditBreak::Edited { seq: 2 }));
    assert!(caught.unwrap_err().to_string().contains("audit entry 2 was changed"));
    let restore = "UPDATE audit_log SET data = '{\"run\":\"r1\"}' WHERE tenant = 't1' AND seq = 2";
    sqlx::query(restore).execute(&mut conn).await.unwrap();
    assert_eq!(verify().await, Ok(5));
    sqlx::query("DELETE FROM audit_log WHERE tenant = 't1' AND seq = 5").execute(&mut conn).await.unwrap();
    assert_eq!(verify().await, Err(AuditBreak::Truncated { head_seq: 5, last_seq: 4 }));
    sqlx::query("DELETE FROM audit_log WHERE tenant = 't1' AND seq = 3").execute(&mut conn).await.unwrap();
    assert_eq!(verify().await, Err(AuditBreak::Removed { expected: 3, found: 4 }));
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_make_one_audit_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
    }
    support::audit_race(stores, 8, 25).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_admit_one_prompt_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
    }
    support::prompts_race(stores, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_never_retry_behind_a_new_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
    }
    support::retry_race(stores, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stores_on_one_file_agree_on_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
    }
    support::sessions_race(stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stores_on_one_file_complete_every_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(SqliteStore::open(&path).await.unwrap()));
    }
    support::jobs_race(stores, 300, 4).await;
}

#[test]
fn location_parse() {
    assert_eq!(Location::parse("nexo.db").unwrap(), Location::Sqlite("nexo.db".into()));
    assert_eq!(Location::parse("/var/lib/nexo/nexo.db").unwrap(), Location::Sqlite("/var/lib/nexo/nexo.db".into()));
    assert_eq!(Location::parse("sqlite:///var/lib/n.db").unwrap(), Location::Sqlite("/var/lib/n.db".into()));
    assert_eq!(Location::parse("sqlite://rel/n.db").unwrap(), Location::Sqlite("rel/n.db".into()));
    for url in ["postgres://u:p@host/db", "postgresql://host/db"] {
        assert_eq!(Location::parse(url).unwrap(), Location::Postgres(url.into()));
    }
    for bad in ["", "   ", "sqlite://", "mysql://host/db", "s3://bucket/key"] {
        match Location::parse(bad) {
            Err(StoreError::BadLocation { location, reason }) => {
                assert_eq!(location, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: expected BadLocation, got {other:?}"),
        }
    }
    let message = Location::parse("mysql://host/db").unwrap_err().to_string();
    assert!(message.contains("`mysql`"), "{message}");
    // A password never reaches a message.
    let shown = Location::parse("postgres://u:secret@db.example:5432/nexo").unwrap().to_string();
    assert_eq!(shown, "postgres://…@db.example:5432/nexo");
    assert_eq!(Location::Memory.to_string(), "(memory)");
    assert_eq!(Location::Sqlite("/x/n.db".into()).to_string(), "/x/n.db");
}

#[test]
fn run_ids_are_unique_and_sortable() {
    let ids: Vec<String> = (0..1000).map(|_| nexo_store::new_run_id()).collect();
    for id in &ids {
        assert_eq!(id.len(), 27);
        assert!(id.starts_with('r'));
        assert!(id[1..].chars().all(|c| "0123456789abcdefghjkmnpqrstvwxyz".contains(c)), "{id}");
    }
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    let earlier = nexo_store::new_run_id();
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(nexo_store::new_run_id()[..11] > earlier[..11], "the time prefix sorts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("nexo.db")).await.unwrap();
    store.create_run(new_run("r1")).await.unwrap();
    // Futures dropped at every point of a transaction: after BEGIN, between
    // inserts, around COMMIT.
    for i in 0..300u64 {
        let batch = Batch {
            journal: vec![entry(i)],
            events: vec![NewEvent { kind: "tool_call".into(), data: json!(i), at_ms: 1 }],
            checkpoints: vec![(format!("c{i:03}"), json!(i))],
            thread: None,
            children: Vec::new(),
        };
        if i % 10 == 9 {
            store.commit("r1", OWNER, batch).await.unwrap();
            continue;
        }
        // Drop the commit after 0 to 380 µs, spinning on the clock (a timer
        // is too coarse: its 1 ms tick lets every commit finish). At 0 it
        // was polled once: it has sent BEGIN, and usually nothing more.
        let deadline = std::time::Instant::now() + std::time::Duration::from_micros(i % 20 * 20);
        let give_up = async {
            if i % 20 > 0 {
                while std::time::Instant::now() < deadline {
                    tokio::task::yield_now().await;
                }
            }
        };
        tokio::select! {
            biased;
            done = store.commit("r1", OWNER, batch) => done.unwrap(),
            () = give_up => {}
        }
    }
    // The write connection is not left inside a transaction.
    store.commit("r1", OWNER, Batch { journal: vec![entry(1_000)], ..Batch::default() }).await.unwrap();
    let to = Transition::Suspend { reason: "wait".into(), resume_key: None, approval: None, wake: None, signal: None };
    store.transition("r1", OWNER, Batch::default(), to).await.unwrap();
    store.claim("r1", Claim::Resume, lease(OWNER), None, 1).await.unwrap();

    let seqs: Vec<u64> = store.journal("r1").await.unwrap().iter().map(|e| e.seq).filter(|s| *s < 1_000).collect();
    let events: Vec<u64> = store
        .events("r1", 0, 1_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "tool_call")
        .map(|e| e.data.as_u64().unwrap())
        .collect();
    let checkpoints: Vec<u64> =
        store.checkpoints("r1").await.unwrap().iter().map(|(_, v)| v.as_u64().unwrap()).collect();
    assert_eq!(seqs, events, "each batch is whole or absent");
    assert_eq!(seqs, checkpoints, "each batch is whole or absent");
    assert!((9..300).step_by(10).all(|s| seqs.contains(&s)), "the commits let finish are there");
    // Each cancelled commit is there or not depending on whether its COMMIT
    // was sent before it was dropped, but some were dropped well before.
    assert!(seqs.len() < 300, "some commits were cancelled");
}

/// Writes at once from many tasks: each returns only once it is durable,
/// and under load they share commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_commits_and_each_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..400 {
        let store = store.clone();
        tasks.spawn(async move { store.create_run(new_run(&format!("r{i:03}"))).await.map(|r| r.id) });
    }
    let mut created = Vec::new();
    while let Some(done) = tasks.join_next().await {
        created.push(done.unwrap().unwrap());
    }
    assert_eq!(created.len(), 400);
    let counts = store.write_counts();
    assert_eq!(counts.writes, 400, "each write counted once (the migration's are not): {counts:?}");
    assert!(counts.commits < counts.writes, "writes queued at once share commits: {counts:?}");
    // Another connection, as another process, sees every one: they are
    // committed, not held in an open transaction.
    let mut other = raw(&path).await;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM runs").fetch_one(&mut other).await.unwrap();
    assert_eq!(n, 400);
}

/// One write of a group fails (its run's id is taken): it alone is rolled
/// back, and the others of its group are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_write_in_a_group_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    store.create_run(new_run("taken")).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300 {
        let store = store.clone();
        let id = if i % 3 == 0 { "taken".to_string() } else { format!("r{i:03}") };
        // A batch of several statements: a run's journal, event and checkpoint.
        tasks.spawn(async move {
            let created = store.create_run(new_run(&id)).await;
            let batch = Batch {
                journal: vec![entry(i)],
                events: vec![NewEvent { kind: "tool_call".into(), data: json!(i), at_ms: 1 }],
                checkpoints: vec![(format!("c{i:03}"), json!(i))],
                thread: None,
                children: Vec::new(),
            };
            let committed = store.commit("taken", OWNER, batch).await;
            (i, created.is_ok(), committed.is_ok())
        });
    }
    let mut refused = 0;
    while let Some(done) = tasks.join_next().await {
        let (i, created, committed) = done.unwrap();
        assert!(committed, "commit {i} failed");
        if i % 3 == 0 {
            assert!(!created, "run {i} reused a taken id");
            refused += 1;
        } else {
            assert!(created, "run {i} was not created");
        }
    }
    assert_eq!(refused, 100);
    let counts = store.write_counts();
    assert!(counts.commits < counts.writes, "writes shared commits: {counts:?}");
    let mut other = raw(&path).await;
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs").fetch_one(&mut other).await.unwrap();
    assert_eq!(runs, 201);
    for table in ["journal", "events", "checkpoints"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&mut other)
            .await
            .unwrap();
        assert_eq!(n, 300, "{table}: every commit whole");
    }
}

/// Writes of a group dropped at every point (their callers went away):
/// each batch is whole or absent, every write that returned is durable,
/// and the file's write lock is not left held once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_dropped_in_a_group_leave_the_file_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nexo.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    store.create_run(new_run("r1")).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..400u64 {
        let store = store.clone();
        tasks.spawn(async move {
            let batch = Batch {
                journal: vec![entry(i)],
                events: vec![NewEvent { kind: "tool_call".into(), data: json!(i), at_ms: 1 }],
                checkpoints: vec![(format!("c{i:03}"), json!(i))],
                thread: None,
                children: Vec::new(),
            };
            // Half are dropped after 0 to 950 µs, spinning on the clock.
            let deadline = std::time::Instant::now() + std::time::Duration::from_micros(i % 20 * 50);
            let give_up = async {
                if i % 2 == 0 {
                    std::future::pending::<()>().await;
                }
                while std::time::Instant::now() < deadline {
                    tokio::task::yield_now().await;
                }
            };
            tokio::select! {
                biased;
                done = store.commit("r1", OWNER, batch) => { done.unwrap(); Some(i) }
                () = give_up => None,
            }
        });
    }
    let mut returned = Vec::new();
    while let Some(done) = tasks.join_next().await {
        returned.extend(done.unwrap());
    }
    assert!(returned.len() >= 200, "every write not dropped returned: {}", returned.len());
    // Another connection takes the write lock: SQLite's busy handler waits
    // up to 5 s for it, and fails if a dropped write left it held.
    let mut other = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .busy_timeout(std::time::Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut tx = other.begin_with("BEGIN IMMEDIATE").await.expect("the write lock is free");
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM journal ORDER BY seq").fetch_all(&mut *tx).await.unwrap();
    let events: Vec<String> =
        sqlx::query_scalar("SELECT data FROM events WHERE kind = 'tool_call' ORDER BY CAST(data AS INTEGER)")
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    let checkpoints: i64 = sqlx::query_scalar("SELECT count(*) FROM checkpoints").fetch_one(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    let events: Vec<i64> = events.iter().map(|e| e.parse().unwrap()).collect();
    assert_eq!(seqs, events, "each batch is whole or absent");
    assert_eq!(i64::try_from(seqs.len()).unwrap(), checkpoints, "each batch is whole or absent");
    for i in &returned {
        assert!(seqs.contains(&i64::try_from(*i).unwrap()), "write {i} returned but is not in the file");
    }
    // The store goes on writing.
    store.commit("r1", OWNER, Batch { journal: vec![entry(10_000)], ..Batch::default() }).await.unwrap();
}
