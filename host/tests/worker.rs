//! Background runs through the `nexo` binary: `run --later` queues,
//! `nexo worker` runs, bounded by `max-in-flight`; a killed worker's run is
//! reclaimed by another and finishes by replay; several workers over one
//! PostgreSQL split 300 jobs with each run exactly once; and two resumers of
//! one run never both proceed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockServer, MockToolCall, Reply};
use serde_json::{Value, json};

mod common;

use common::{postgres_database, stderr, stdout};

/// Kills a child process when dropped, so a failing test leaves no worker.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Scene {
    dir: tempfile::TempDir,
    store: String,
}

impl Scene {
    fn new(store: Option<String>) -> Scene {
        let dir = tempfile::Builder::new().prefix("worker-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(
            dir.path().join("agent.toml"),
            "name = \"bg\"\ndescription = \"A background agent\"\ninstructions = \"Answer.\"\n\
             capabilities = [\"read\", \"write\"]\n",
        )
        .unwrap();
        let store = store.unwrap_or_else(|| dir.path().join("nexo.db").display().to_string());
        Scene { dir, store }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::nexo_command(&self.path("cache"));
        cmd.env("NEXO_STORE", &self.store)
            .env("OPENAI_API_KEY", "sk-worker-test")
            .env_remove("NEXO_MAX_IN_FLIGHT")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nexo")
    }

    /// `nexo run … --later` of the test agent against `base_url`.
    fn queue(&self, base_url: &str, input: &str, extra: &[&str]) -> String {
        let mut args = vec!["--later"];
        args.extend_from_slice(extra);
        self.record(&["run"], base_url, input, &args)
    }

    /// `nexo schedule add CRON …` of the test agent against `base_url`.
    fn schedule(&self, cron: &str, base_url: &str, input: &str) -> String {
        self.record(&["schedule", "add", cron], base_url, input, &[])
    }

    /// `COMMAND… AGENT INPUT` of the test agent against `base_url`, with
    /// `extra`: what it printed.
    fn record(&self, command: &[&str], base_url: &str, input: &str, extra: &[&str]) -> String {
        let agent = self.path("agent.toml").display().to_string();
        let ws = self.path("ws").display().to_string();
        let mut args = command.to_vec();
        args.extend_from_slice(&[
            &agent,
            input,
            "--provider",
            "openai-compatible",
            "--base-url",
            base_url,
            "--model",
            "m",
            "--sandbox",
            "local",
            "--cwd",
            &ws,
        ]);
        args.extend_from_slice(extra);
        let o = self.nexo(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).trim().to_string()
    }

    fn worker(&self, extra: &[&str]) -> Command {
        let mut args = vec!["worker", "--poll-ms", "20"];
        args.extend_from_slice(extra);
        let mut cmd = self.command(&args);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        cmd
    }

    fn run(&self, id: &str) -> Value {
        let o = self.nexo(&["runs", "show", id, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    }
}

/// Waits for `child`, killing it past `limit`; its stderr.
fn wait(child: Child, limit: Duration) -> (bool, String) {
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            if let Some(mut e) = child.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.success(), err);
        }
        assert!(Instant::now() < deadline, "a worker took longer than {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An OpenAI-format model server that answers every request after `delay`
/// and counts the requests in flight at once.
struct CountingModel {
    base_url: String,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    total: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl CountingModel {
    async fn start(delay: Duration) -> CountingModel {
        let (now, most, total) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, m, t) = (now.clone(), most.clone(), total.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move || {
                let (n, m, t) = (n.clone(), m.clone(), t.clone());
                async move {
                    let inside = n.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(inside, Ordering::SeqCst);
                    t.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    let body = json!({
                        "id": "c", "object": "chat.completion", "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                    });
                    ([(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        CountingModel { base_url, now, most, total, _task: task }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_wait_for_a_worker_and_max_in_flight_is_never_exceeded() {
    let model = CountingModel::start(Duration::from_millis(300)).await;
    let scene = Scene::new(None);
    let ids: Vec<String> = (0..6).map(|i| scene.queue(&model.base_url, &format!("job {i}"), &[])).collect();
    for id in &ids {
        assert_eq!(scene.run(id)["run"]["status"], "queued", "nothing runs before a worker does");
    }
    assert_eq!(model.total.load(Ordering::SeqCst), 0);
    let (ok, err) =
        wait(scene.worker(&["--max-in-flight", "2", "--until-idle"]).spawn().unwrap(), Duration::from_secs(60));
    assert!(ok, "{err}");
    for id in &ids {
        let run = scene.run(id);
        assert_eq!(run["run"]["status"], "done", "{run}");
        assert_eq!(run["run"]["result"], "ok");
    }
    assert_eq!(model.total.load(Ordering::SeqCst), 6, "each run called the model once");
    assert_eq!(model.most.load(Ordering::SeqCst), 2, "two at once, never more");
    assert_eq!(model.now.load(Ordering::SeqCst), 0);

    // The environment variable sets it too.
    model.most.store(0, Ordering::SeqCst);
    for i in 0..6 {
        scene.queue(&model.base_url, &format!("more {i}"), &[]);
    }
    let mut worker = scene.worker(&["--until-idle"]);
    worker.env("NEXO_MAX_IN_FLIGHT", "3");
    let (ok, err) = wait(worker.spawn().unwrap(), Duration::from_secs(60));
    assert!(ok, "{err}");
    assert_eq!(model.most.load(Ordering::SeqCst), 3, "NEXO_MAX_IN_FLIGHT=3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_run_is_reclaimed_and_finishes_without_repeating_a_paid_call_or_an_effect() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None);
    // Turn 1 writes a file; turn 2 hangs until the worker is killed; the
    // new worker's turn 2 answers.
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("w", "write_file", json!({"path": "a.txt", "content": "x"}))]))
        .push(Reply::text("too late").with_delay(Duration::from_secs(120)))
        .push(Reply::text("done"));
    let id = scene.queue(&model.openai_base_url(), "write", &["--allow", "write", "--mode", "auto"]);
    let mut first = KillOnDrop(scene.worker(&["--lease-secs", "2"]).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the first worker never reached turn 2");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_to_string(scene.path("ws/a.txt")).unwrap(), "x");
    // kill -9: no chance to clean up.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert_eq!(scene.run(&id)["run"]["status"], "running", "left running by a dead worker");
    let started = Instant::now();
    let (ok, err) =
        wait(scene.worker(&["--lease-secs", "2", "--until-idle"]).spawn().unwrap(), Duration::from_secs(60));
    assert!(ok, "{err}");
    let run = scene.run(&id);
    assert_eq!(run["run"]["status"], "done", "{run}\n{err}");
    assert_eq!(run["run"]["result"], "done");
    assert!(started.elapsed() >= Duration::from_millis(1500), "the job was taken over only once its lease ran out");
    // Turn 1 was answered from the journal: three requests in all, and only
    // one without a tool result in it.
    let sent = model.requests();
    assert_eq!(sent.len(), 3, "no paid turn was repeated");
    let fresh = sent.iter().filter(|r| !r.body.to_string().contains("\"role\":\"tool\"")).count();
    assert_eq!(fresh, 1, "turn 1 was asked once");
    let events = scene.nexo(&["runs", "events", &id]);
    let writes = stdout(&events).lines().filter(|l| l.contains("tool_call") && l.contains("write_file")).count();
    assert_eq!(writes, 1, "the write ran once:\n{}", stdout(&events));
    // Its result's event committed with its entry: the kill, after the
    // entry and before the next turn's commit, did not lose it.
    let results = stdout(&events).lines().filter(|l| l.contains("tool_result") && l.contains("write_file")).count();
    assert_eq!(results, 1, "the write's result was reported once:\n{}", stdout(&events));
}

/// Two `nexo runs resume` of one suspended run at once: exactly one goes on.
async fn two_resumers_race(store: Option<String>) {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(store);
    model
        .push(Reply::tool_calls(vec![MockToolCall::new("w", "write_file", json!({"path": "a.txt", "content": "x"}))]))
        // The resumed pass asks again after the denial; the answer takes a
        // while, so the winner still holds the run when the loser tries.
        .push(Reply::text("denied, fine").with_delay(Duration::from_secs(2)));
    let id = scene.queue(&model.openai_base_url(), "write", &["--allow", "write", "--mode", "approve"]);
    let (ok, err) = wait(scene.worker(&["--until-idle"]).spawn().unwrap(), Duration::from_secs(60));
    assert!(ok, "{err}");
    assert_eq!(scene.run(&id)["run"]["status"], "suspended");
    // Record the decision; resume in two processes at once.
    let o = scene.nexo(&["runs", "deny", &id, "--later"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spawn = || {
        let mut cmd = scene.command(&["runs", "resume", &id]);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (wait(a, Duration::from_secs(60)), wait(b, Duration::from_secs(60)));
    let winners = [&a, &b].iter().filter(|(ok, _)| *ok).count();
    assert_eq!(winners, 1, "exactly one resumer proceeds:\n{}\n---\n{}", a.1, b.1);
    let loser = if a.0 { &b.1 } else { &a.1 };
    assert!(loser.contains("already being resumed"), "{loser}");
    assert_eq!(scene.run(&id)["run"]["status"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumers_of_one_run_on_sqlite_exactly_one_proceeds() {
    two_resumers_race(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumers_of_one_run_on_postgres_exactly_one_proceeds() {
    if let Some(url) = postgres_database("two_resumers_of_one_run_on_postgres").await {
        two_resumers_race(Some(url)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_over_one_postgres_run_300_jobs_each_exactly_once() {
    let Some(url) = postgres_database("three_workers_over_one_postgres").await else { return };
    let model = CountingModel::start(Duration::from_millis(5)).await;
    let scene = Scene::new(Some(url.clone()));
    // One run queued through the CLI; 299 more recorded like it, straight
    // into the store (300 processes would only measure process start-up).
    let first = scene.queue(&model.base_url, "job 0", &[]);
    let store = nexo_store::open(&nexo_store::Location::Postgres(url.clone())).await.unwrap();
    let template = store.run(&first).await.unwrap().unwrap();
    for i in 1..300 {
        let now = nexo_store::now_ms();
        let run = store
            .create_run(nexo_store::NewRun {
                id: nexo_store::new_run_id(),
                agent: template.agent.clone(),
                kind: template.kind.clone(),
                source: template.source.clone(),
                component_sha256: template.component_sha256.clone(),
                input: format!("job {i}"),
                grant: template.grant.clone(),
                status: nexo_store::RunStatus::Queued,
                lease: None,
                created_ms: now,
                session: None,
                tenant: None,
            })
            .await
            .unwrap();
        store
            .enqueue(nexo_store::NewJob {
                id: nexo_store::new_run_id(),
                run: run.id,
                kind: nexo_store::JobKind::Start,
                payload: json!({}),
                max_attempts: 3,
                backoff_ms: 100,
                not_before_ms: now,
                created_ms: now,
            })
            .await
            .unwrap();
    }
    let workers: Vec<Child> =
        (0..3).map(|_| scene.worker(&["--max-in-flight", "4", "--until-idle"]).spawn().unwrap()).collect();
    let mut logs = Vec::new();
    for w in workers {
        let (ok, err) = wait(w, Duration::from_secs(300));
        assert!(ok, "{err}");
        logs.push(err);
    }
    let runs = store.runs(None, 1000).await.unwrap();
    assert_eq!(runs.len(), 300);
    assert!(runs.iter().all(|r| r.status == nexo_store::RunStatus::Done), "every run is done");
    assert_eq!(model.total.load(Ordering::SeqCst), 300, "each job ran exactly once");
    let took: Vec<usize> = logs.iter().map(|l| l.lines().filter(|l| l.ends_with("is done")).count()).collect();
    assert_eq!(took.iter().sum::<usize>(), 300, "{took:?}");
    assert!(took.iter().all(|n| *n > 0), "all three workers took jobs: {took:?}");
}

/// A schedule firing every second, with three workers over one PostgreSQL
/// and one of them killed midway, starts exactly one run for each
/// occurrence: at least 30 of them, none twice, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_over_three_workers_one_killed_starts_one_run_per_occurrence() {
    let Some(url) = postgres_database("a_schedule_over_three_workers").await else { return };
    let model = CountingModel::start(Duration::from_millis(5)).await;
    let scene = Scene::new(Some(url.clone()));
    let id = scene.schedule("* * * * * *", &model.base_url, "tick");
    let store = nexo_store::open(&nexo_store::Location::Postgres(url.clone())).await.unwrap();
    let mut workers: Vec<KillOnDrop> = (0..3).map(|_| KillOnDrop(scene.worker(&[]).spawn().unwrap())).collect();
    let started = |n: i64| {
        let store = store.clone();
        let id = id.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let s = store.schedule(&id).await.unwrap().unwrap();
                if s.started >= n || Instant::now() > deadline {
                    return s.started;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(started(12).await >= 12, "the schedule never got going");
    // `kill -9`, whatever it was doing (a tick among them).
    drop(workers.remove(0));
    assert!(started(32).await >= 32, "the schedule stopped after a worker died");
    let o = scene.nexo(&["schedule", "pause", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let schedule = store.schedule(&id).await.unwrap().unwrap();

    let jobs = store.jobs(None, 10_000).await.unwrap();
    let mut occurrences: Vec<i64> = jobs
        .iter()
        .filter(|j| j.payload["schedule"] == json!(id))
        .map(|j| j.payload["occurrence"].as_i64().unwrap())
        .collect();
    occurrences.sort_unstable();
    assert_eq!(occurrences.len() as i64, schedule.started, "one run per occurrence fired");
    let first = occurrences[0];
    let expected: Vec<i64> = (0..occurrences.len() as i64).map(|n| first + n * 1000).collect();
    assert_eq!(occurrences, expected, "each second once: none twice, none skipped");
    assert_eq!(schedule.skipped, 0);
    let runs = store.runs(None, 10_000).await.unwrap();
    assert_eq!(runs.len(), occurrences.len(), "no other run was started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lease_drops_the_run_and_another_finishes_it() {
    let model = MockServer::start().await.unwrap();
    let scene = Scene::new(None);
    // The first worker's turn is slow; the one that takes over answers.
    model.push(Reply::text("never seen").with_delay(Duration::from_secs(30))).push(Reply::text("done"));
    let id = scene.queue(&model.openai_base_url(), "slow", &[]);
    let mut first = scene.worker(&["--lease-secs", "2", "--until-idle"]);
    let first = first.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().is_empty() {
        assert!(Instant::now() < deadline, "the first worker never called the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another claim takes the job from under it, as one would after a stall:
    // a new token and holder, in one statement, with a lease of a second.
    let path = scene.store.clone();
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{path}")).await.unwrap();
        let stolen = sqlx::query(
            "UPDATE jobs SET lease_token = lease_token + 1000000, lease_worker = 'thief', lease_until_ms = $1",
        )
        .bind(nexo_store::now_ms() + 1000)
        .execute(&mut conn)
        .await
        .unwrap();
        assert_eq!(stolen.rows_affected(), 1);
    }
    let (ok, first_log) = {
        let second = scene.worker(&["--lease-secs", "2", "--until-idle"]).spawn().unwrap();
        let (ok, second_log) = wait(second, Duration::from_secs(90));
        assert!(ok, "{second_log}");
        wait(first, Duration::from_secs(60))
    };
    assert!(ok, "{first_log}");
    assert!(first_log.contains("lost its lease"), "the first worker stopped: {first_log}");
    let run = scene.run(&id);
    assert_eq!(run["run"]["status"], "done", "{run}");
    assert_eq!(run["run"]["result"], "done", "the answer is the new holder's");
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_would_recur_is_not_retried_and_one_that_may_pass_is() {
    let scene = Scene::new(None);
    // The trap plugin traps on every try: its job fails for good at once.
    let o = scene.nexo(&["run", nexo_tests::TRAP, "x", "--later"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let trapped = stdout(&o).trim().to_string();
    let (ok, log) = wait(scene.worker(&["--until-idle"]).spawn().unwrap(), Duration::from_secs(60));
    assert!(ok, "{log}");
    assert!(log.contains("it would fail the same way again, so it is not retried"), "{log}");
    assert_eq!(log.matches("(attempt ").count(), 1, "one attempt: {log}");
    let run = scene.run(&trapped);
    assert_eq!(run["run"]["status"], "failed", "{run}");
    let store = nexo_store::open(&nexo_store::Location::Sqlite(scene.store.clone().into())).await.unwrap();
    let jobs = store.jobs(None, 10).await.unwrap();
    assert_eq!((jobs.len(), jobs[0].status, jobs[0].attempts), (1, nexo_store::JobStatus::Failed, 1), "{jobs:?}");

    // A model that cannot be reached may be back the next time: retried.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let unreachable = scene.queue(&closed, "hello", &[]);
    let worker = KillOnDrop(scene.worker(&[]).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let job = loop {
        let job = store.jobs(None, 10).await.unwrap().into_iter().find(|j| j.run == unreachable);
        if let Some(job) = job.as_ref().filter(|j| j.attempts >= 1 && j.status == nexo_store::JobStatus::Queued) {
            break job.clone();
        }
        assert!(Instant::now() < deadline, "the job was never retried: {job:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(worker);
    assert!(job.error.is_some(), "{job:?}");
    assert!(job.not_before_ms > job.updated_ms, "it waits its backoff: {job:?}");
}
