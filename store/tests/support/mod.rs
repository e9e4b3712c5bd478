//! What the tests share: where the PostgreSQL server is (and what to do
//! when there is none), a fresh database per test, and the jobs race that
//! SQLite and PostgreSQL both run.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses part of it

pub mod fixtures;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nexo_store::{
    Batch, Claim, JobKind, Lease, NewJob, NewRun, NewTenant, RunStatus, Store, StoreError, Transition, verify_audit,
};
use sqlx::Connection;

/// The variable naming a server where the tests may create databases.
pub const ENV: &str = "NEXO_TEST_POSTGRES";

/// The server's URL from [`ENV`]. When it is unset: in CI (`CI` set and
/// not empty) the test fails; elsewhere it says it skipped its PostgreSQL
/// half and the caller returns.
pub fn server(test: &str) -> Option<String> {
    match std::env::var(ENV) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            if std::env::var("CI").is_ok_and(|ci| !ci.is_empty()) {
                panic!(
                    "{test}: PostgreSQL is required in CI, but {ENV} is unset; run `./scripts/postgres.sh` and \
                     export {ENV} with the URL it prints (`make test` does)"
                );
            }
            nexo_testkit::skipped(
                test,
                &format!(
                    "{ENV} is unset, so the PostgreSQL half of this test did not run \
                     (NEXO_TEST_POSTGRES=$(./scripts/postgres.sh) runs it)"
                ),
            );
            None
        }
    }
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or("");
    let mut out = format!("{scheme}://{authority}/{name}");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A database of one test's own, dropped by [`TestDb::drop`].
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// The server's URL, for creating and dropping.
    pub admin: String,
    /// Its name.
    pub name: String,
}

/// A new, empty database on the server, or `None` (see [`server`]).
pub async fn fresh(test: &str) -> Option<TestDb> {
    let admin = server(test)?;
    let name = format!("nexo_test_{}", nexo_store::new_run_id());
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("{test}: cannot connect to {ENV} to create a test database: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    conn.close().await.ok();
    Some(TestDb { url: with_database(&admin, &name), admin, name })
}

impl TestDb {
    /// Drops the database (a failed test leaves it, to look at).
    pub async fn drop(self) {
        let mut conn = sqlx::PgConnection::connect(&self.admin).await.unwrap();
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&mut conn).await.unwrap();
        conn.close().await.ok();
    }

    /// A raw connection to it, as another program would open one.
    pub async fn raw(&self) -> sqlx::PgConnection {
        sqlx::PgConnection::connect(&self.url).await.unwrap()
    }
}

/// A queued run for jobs to point at.
pub fn queued_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        agent: "hello".into(),
        kind: "component".into(),
        source: "/agents/hello.wasm".into(),
        component_sha256: "ab".repeat(32),
        input: "hi".into(),
        grant: serde_json::json!({}),
        status: RunStatus::Queued,
        lease: None,
        created_ms: 1,
        session: None,
        tenant: None,
    }
}

/// `jobs` jobs, then `tasks` tasks on each store claiming and completing
/// until nothing is due: every job is completed exactly once, and no two
/// claims get one job (the leases are long, so none lapses).
pub async fn jobs_race(stores: Vec<Arc<dyn Store>>, jobs: usize, tasks: usize) {
    stores[0].create_run(queued_run("r-race")).await.unwrap();
    for i in 0..jobs {
        let job = NewJob {
            id: format!("j{i:04}"),
            run: "r-race".into(),
            kind: JobKind::Start,
            payload: serde_json::json!({"run": "r-race", "n": i}),
            max_attempts: 1,
            backoff_ms: 0,
            not_before_ms: 0,
            created_ms: i as i64,
        };
        stores[i % stores.len()].enqueue(job).await.unwrap();
    }
    let claims: Arc<Mutex<BTreeMap<String, Vec<i64>>>> = Arc::default();
    let mut handles = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..tasks {
            let store = store.clone();
            let claims = claims.clone();
            handles.push(tokio::spawn(async move {
                let worker = format!("host:{s}:{t}");
                let mut done = 0usize;
                while let Some(job) = store.claim_job(&worker, 600_000, nexo_store::now_ms()).await.unwrap() {
                    let lease = job.lease.clone().unwrap();
                    claims.lock().unwrap().entry(job.id.clone()).or_default().push(lease.token);
                    store.complete_job(&job.id, &lease, nexo_store::now_ms()).await.unwrap();
                    done += 1;
                }
                done
            }));
        }
    }
    let mut completed = 0;
    for handle in handles {
        completed += handle.await.unwrap();
    }
    let claims = std::mem::take(&mut *claims.lock().unwrap());
    assert_eq!(completed, jobs, "every claim completed");
    assert_eq!(claims.len(), jobs, "every job was claimed");
    let twice: Vec<_> = claims.iter().filter(|(_, tokens)| tokens.len() != 1).collect();
    assert!(twice.is_empty(), "claimed more than once while its lease was live: {twice:?}");
    let mut tokens: Vec<i64> = claims.values().flatten().copied().collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), jobs, "every claim got its own token");
    let finished = stores[stores.len() - 1].jobs(Some(nexo_store::JobStatus::Done), usize::MAX).await.unwrap();
    assert_eq!(finished.len(), jobs);
    assert!(finished.iter().all(|j| j.attempts == 1 && j.lease.is_none()));
}

/// 20 concurrent opens of one address, spread over `stores`, give one
/// session; then, 20 times, two prompts on two stores append to it from
/// the same count: exactly one wins each time, the other is told another
/// prompt finished first, and the thread holds the winners' turns whole and
/// in order.
pub async fn sessions_race(stores: Vec<Arc<dyn Store>>) {
    let mut opens = Vec::new();
    for i in 0..20usize {
        let store = stores[i % stores.len()].clone();
        opens.push(tokio::spawn(async move { store.open_session("hello", "shared", 1_000 + i as i64).await.unwrap() }));
    }
    let mut ids = std::collections::BTreeSet::new();
    for open in opens {
        ids.insert(open.await.unwrap().id);
    }
    assert_eq!(ids.len(), 1, "one session for one address: {ids:?}");
    let id = ids.into_iter().next().unwrap();
    assert_eq!(stores[0].sessions(None, 100).await.unwrap().len(), 1);

    let turn = |round: u64, by: usize| {
        vec![
            serde_json::json!({"round": round, "by": by, "part": 0}),
            serde_json::json!({"round": round, "by": by, "part": 1}),
        ]
    };
    let mut winners = Vec::new();
    for round in 0..20u64 {
        let expected = round * 2;
        let racers: Vec<_> = [round as usize % stores.len(), (round as usize + 1) % stores.len()]
            .into_iter()
            .map(|s| {
                let (store, id, messages) = (stores[s].clone(), id.clone(), turn(round, s));
                tokio::spawn(async move { store.append_thread(&id, expected, messages, 2_000).await })
            })
            .collect();
        let mut results = Vec::new();
        for racer in racers {
            results.push(racer.await.unwrap());
        }
        let (won, lost): (Vec<_>, Vec<_>) = results.into_iter().enumerate().partition(|(_, r)| r.is_ok());
        assert_eq!((won.len(), lost.len()), (1, 1), "round {round}: exactly one append wins: {won:?} / {lost:?}");
        let (winner, session) = &won[0];
        assert_eq!(session.as_ref().unwrap().messages, expected + 2);
        match &lost[0].1 {
            Err(nexo_store::StoreError::Conflict(m)) if m.contains("another prompt of this session finished first") => {
            }
            other => panic!("round {round}: the loser should be told to retry, got {other:?}"),
        }
        winners.push([round as usize % stores.len(), (round as usize + 1) % stores.len()][*winner]);
    }
    let thread = stores[stores.len() - 1].thread(&id).await.unwrap();
    let expected: Vec<serde_json::Value> =
        winners.iter().enumerate().flat_map(|(round, by)| turn(round as u64, *by)).collect();
    assert_eq!(thread, expected, "each round's winner's turn, whole and in order");
    assert_eq!(stores[0].session_by_id(&id).await.unwrap().unwrap().messages, 40);
}

/// `rounds` times, two prompts of one session are created at once, on two
/// of `stores` (the same store twice is fine): exactly one is recorded, and
/// the other is refused naming it. The winner is then cancelled, so the
/// next round starts with no prompt in progress.
pub async fn prompts_race(stores: Vec<Arc<dyn Store>>, rounds: usize) {
    let session = stores[0].open_session("hello", "racing", 1_000).await.unwrap();
    let mut winners = Vec::new();
    for round in 0..rounds {
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|t| {
                let store = stores[(round + t) % stores.len()].clone();
                let id = format!("r{round:03}-{t}");
                let run =
                    NewRun { session: Some(session.id.clone()), created_ms: 1_000 + round as i64, ..queued_run(&id) };
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    (id, store.create_run(run).await)
                })
            })
            .collect();
        let mut results = Vec::new();
        for racer in racers {
            results.push(racer.await.unwrap());
        }
        let (won, lost): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, r)| r.is_ok());
        assert_eq!((won.len(), lost.len()), (1, 1), "round {round}: exactly one prompt is created: {won:?} / {lost:?}");
        let winner = won[0].0.clone();
        match &lost[0].1 {
            Err(nexo_store::StoreError::Conflict(m))
                if m.contains(&format!("has a prompt in progress: run `{winner}` is queued")) => {}
            other => panic!("round {round}: the loser should be told {winner} is in progress, got {other:?}"),
        }
        assert_eq!(stores[0].run(&lost[0].0).await.unwrap(), None, "round {round}: the loser is not recorded");
        stores[round % stores.len()].cancel(&winner, "next round").await.unwrap();
        winners.push(winner);
    }
    let runs: Vec<String> = stores[0].session_runs(&session.id).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(runs, winners, "each round's winner, and nothing else");
}

/// `rounds` times, a failed prompt, the session's latest, is retried on one
/// of `stores` while a new prompt of the session is created on another:
/// exactly one of the two goes through (a retry behind a later prompt would
/// fork the thread; a new prompt beside a retried one would race it).
pub async fn retry_race(stores: Vec<Arc<dyn Store>>, rounds: usize) {
    let session = stores[0].open_session("hello", "retrying", 1_000).await.unwrap();
    let owner = "host:9:retry";
    let failed = || Transition::Finish { status: RunStatus::Failed, result: None, error: Some("trap".into()) };
    let (mut retried, mut created) = (0, 0);
    for round in 0..rounds {
        let (old, new) = (format!("p{round:03}"), format!("q{round:03}"));
        let created_ms = 1_000 + 2 * round as i64;
        let running = NewRun {
            session: Some(session.id.clone()),
            status: RunStatus::Running,
            lease: Some(Lease { owner: owner.into(), until_ms: i64::MAX / 2 }),
            created_ms,
            ..queued_run(&old)
        };
        stores[0].create_run(running).await.unwrap();
        stores[0].transition(&old, owner, Batch::default(), failed()).await.unwrap();

        let start = Arc::new(tokio::sync::Barrier::new(2));
        let retry = {
            let (store, start, old) = (stores[round % stores.len()].clone(), start.clone(), old.clone());
            tokio::spawn(async move {
                start.wait().await;
                let lease = Lease { owner: owner.into(), until_ms: i64::MAX / 2 };
                store.claim(&old, Claim::Retry, lease, None, 5_000).await
            })
        };
        let create = {
            let (store, start) = (stores[(round + 1) % stores.len()].clone(), start.clone());
            let run = NewRun { session: Some(session.id.clone()), created_ms: created_ms + 1, ..queued_run(&new) };
            tokio::spawn(async move {
                start.wait().await;
                store.create_run(run).await
            })
        };
        let (retry, create) = (retry.await.unwrap(), create.await.unwrap());
        match (&retry, &create) {
            (Ok(_), Err(StoreError::Conflict(m))) if m.contains(&format!("run `{old}` is running")) => {
                retried += 1;
                stores[0].transition(&old, owner, Batch::default(), failed()).await.unwrap();
            }
            (Err(StoreError::Conflict(m)), Ok(_)) if m.contains(&format!("later prompt (run `{new}`)")) => {
                created += 1;
                stores[0].cancel(&new, "next round").await.unwrap();
            }
            other => panic!("round {round}: exactly one of the retry and the new prompt should win, got {other:?}"),
        }
    }
    assert_eq!(retried + created, rounds);
    let runs = stores[0].session_runs(&session.id).await.unwrap();
    assert!(runs.iter().all(|r| r.status.is_final()), "{runs:?}");
    assert_eq!(runs.len(), rounds + created);
}

/// `tasks` tasks spread over `stores` each append `appends` entries to one
/// tenant's audit log at once: every append gets its own sequence number,
/// 1 to `tasks * appends` without a gap, each task's in the order it made
/// them, and the log is one chain that verifies against the head.
pub async fn audit_race(stores: Vec<Arc<dyn Store>>, tasks: usize, appends: usize) {
    let tenant = NewTenant { id: "t-race".into(), name: "race".into(), policy: serde_json::json!({}), created_ms: 1 };
    stores[0].create_tenant(tenant).await.unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(tasks));
    let racers: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, start) = (stores[t % stores.len()].clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut seqs = Vec::new();
                for n in 0..appends {
                    let data = serde_json::json!({"task": t, "n": n});
                    let entry = store.append_audit("t-race", "race", &data, 1_000 + n as i64).await.unwrap();
                    seqs.push(entry.seq);
                }
                seqs
            })
        })
        .collect();
    let mut all = Vec::new();
    for racer in racers {
        let seqs = racer.await.unwrap();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "a task's appends come in its order: {seqs:?}");
        all.extend(seqs);
    }
    all.sort();
    let total = (tasks * appends) as u64;
    assert_eq!(all, (1..=total).collect::<Vec<_>>(), "one number per append, without gaps or repeats");

    let entries = stores[stores.len() - 1].audit("t-race", 0, usize::MAX).await.unwrap();
    let head = stores[0].audit_head("t-race").await.unwrap().expect("a head");
    assert_eq!(head.0, total);
    assert_eq!(verify_audit(&entries, Some((head.0, head.1.as_str()))), Ok(total), "one chain");
    for t in 0..tasks {
        let ns: Vec<u64> = entries
            .iter()
            .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap())
            .filter(|d| d["task"] == t)
            .map(|d| d["n"].as_u64().unwrap())
            .collect();
        assert_eq!(ns, (0..appends as u64).collect::<Vec<_>>(), "task {t}'s entries, in its order");
    }
}
