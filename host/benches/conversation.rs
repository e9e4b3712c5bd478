//! The model loop at scale: a conversation of 100 turns, each one user
//! prompt and one text answer, against the loopback fake server
//! ([`MockServer`], OpenAI-compatible, not streamed). A turn's cost to the
//! client is its wall time minus the time the server itself took (from
//! receiving the request to handing over the reply: the server is "the
//! model"). It should stay flat from turn 1 to turn 100, growing with the
//! history only by what serializing it costs, which the request's size
//! shows.
//!
//! Rows:
//! - nexo's model loop with a session's thread in memory: one prompt after
//!   another through `Prompting` (what a session's run does for each prompt:
//!   the thread's history, the host loop, the OpenAI-compatible provider),
//!   the exchange remembered after each;
//! - nexo's sessions: each prompt a recorded run of a TOML agent in a
//!   session, in a SQLite store (the thread loaded, the turn journaled, the
//!   exchange appended), as `nexo chat` does;
//! - the Python peer: the OpenAI Agents SDK (`openai-agents`) on the same
//!   server in the same run, keeping the history its own way
//!   (`bench/conversation/openai_agents_peer.py`; install it with
//!   `scripts/openai-agents-deps.sh`). Without it its row is skipped, saying
//!   why.
//!
//! Each conversation runs `NEXO_BENCH_REPEATS` times (default 11). A
//! window of turns (1, 2–4, 98–100) counts its median turn, and every figure
//! is the median of that over the conversations. Run with
//! `cargo bench -p nexo --bench conversation` (or `make bench-conversation`).
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexo::agent_file::AgentFile;
use nexo::agent_loop::{HostLoop, LoopLimits, Status};
use nexo::authority::Permissions;
use nexo::capability::model::Prompting;
use nexo::grant::Grant;
use nexo::host_call::ToolContext;
use nexo::manifest::{AgentManifest, PermissionMode};
use nexo::runs::{Runs, Subject};
use nexo::session::Thread;
use nexo::settings::{Providers, RunOptions};
use nexo_model::mock::{MockServer, RecordedRequest, Reply};
use nexo_model::{ModelConfig, Provider, ProviderKind};
use nexo_store::RunStatus;
use serde_json::json;

/// Turns in one conversation.
const TURNS: usize = 100;
const MODEL: &str = "bench-model";
const INSTRUCTIONS: &str = "You are a patient assistant. Answer in two or three sentences.";

/// The user's prompt at `turn` (from 1): about 130 bytes.
fn prompt(turn: usize) -> String {
    format!(
        "Question {turn}: what should I keep in mind when I plan the next step of this project, and why does it matter?"
    )
}

/// The model's answer at `turn`: about 420 bytes, so turn 100's request
/// carries some 55 KB of history.
fn answer(turn: usize) -> String {
    format!(
        "Answer {turn}: keep the scope small and the feedback loop short. Write down what done means before \
         you start, check it against what you measured rather than what you expected, and keep a note of \
         every decision with the reason behind it, so that whoever picks the work up next can follow it. \
         When something surprises you, stop and find out why before you build on top of it; a surprise \
         is the cheapest bug you will ever get."
    )
}

/// One conversation as the server saw it: per turn, the client's own time
/// (wall time minus the server's) and the request body's size.
struct Conversation {
    host: Vec<Duration>,
    bytes: Vec<usize>,
}

impl Conversation {
    /// Pairs each turn's wall time with its request; checks that every
    /// turn made exactly one request carrying the whole history.
    fn new(who: &str, wall: &[Duration], requests: &[RecordedRequest]) -> Conversation {
        assert_eq!(requests.len(), wall.len(), "{who}: one request per turn");
        let mut host = Vec::with_capacity(wall.len());
        let mut bytes = Vec::with_capacity(wall.len());
        for (turn, (wall, request)) in wall.iter().zip(requests).enumerate() {
            // The instructions, then turn + 1 prompts and turn answers.
            let messages = request.body["messages"].as_array().map_or(0, Vec::len);
            assert_eq!(messages, 2 * turn + 2, "{who}: turn {} does not carry the whole history", turn + 1);
            let server = request.server_time().expect("the server replied");
            host.push(wall.saturating_sub(server));
            bytes.push(request.body_bytes);
        }
        Conversation { host, bytes }
    }
}

/// Turn windows, by turn number (from 1).
const FIRST: (usize, usize) = (1, 1);
const EARLY: (usize, usize) = (2, 4);
const LATE: (usize, usize) = (TURNS - 2, TURNS);

/// A conversation's cost over a window of turns: their median, so one
/// turn preempted by the machine's other work does not move it.
fn window_ns(values: &[Duration], (from, to): (usize, usize)) -> f64 {
    median(values[from - 1..to].iter().map(|d| d.as_nanos() as f64).collect())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) { (values[mid - 1] + values[mid]) / 2.0 } else { values[mid] }
}

/// One row of the table: medians over the conversations. Request sizes are
/// the same in every conversation; each window's is its mean.
struct Row {
    name: String,
    first_us: f64,
    early_us: f64,
    late_us: f64,
    bytes: (usize, usize, usize),
    runs: usize,
}

impl Row {
    fn new(name: impl Into<String>, runs: &[Conversation]) -> Row {
        let at = |window| median(runs.iter().map(|c| window_ns(&c.host, window) / 1e3).collect());
        let bytes = |(from, to): (usize, usize)| {
            let c = &runs[0];
            c.bytes[from - 1..to].iter().sum::<usize>() / (to - from + 1)
        };
        Row {
            name: name.into(),
            first_us: at(FIRST),
            early_us: at(EARLY),
            late_us: at(LATE),
            bytes: (bytes(FIRST), bytes(EARLY), bytes(LATE)),
            runs: runs.len(),
        }
    }

    fn print(&self) {
        let (first, early, late) = self.bytes;
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.2} | {first} / {early} / {late} | {:.1} | {} |",
            self.name,
            self.first_us,
            self.early_us,
            self.late_us,
            self.late_us / self.early_us,
            late as f64 / early as f64,
            self.runs
        );
    }
}

fn provider(server: &MockServer) -> Arc<dyn Provider> {
    let config = ModelConfig {
        model: Some(MODEL.into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(server.openai_base_url()),
        api_key: Some("bench-key".into()),
        max_retries: Some(0),
        ..ModelConfig::default()
    };
    nexo_model::resolve(&config).unwrap()
}

fn queue(server: &MockServer, conversations: usize) {
    for _ in 0..conversations {
        for turn in 1..=TURNS {
            server.push(Reply::text(answer(turn)));
        }
    }
}

/// The run's tools as a run prepares them for an agent with no capability.
async fn tools() -> Arc<ToolContext> {
    let manifest = AgentManifest { name: "bench".into(), ..AgentManifest::default() };
    let options = RunOptions {
        permissions: Permissions::new(PermissionMode::ReadOnly),
        grant: Grant::default(),
        ..RunOptions::default()
    };
    nexo::world::agent::prepare(&manifest, &options, &[], &nexo::Limits::default()).await.unwrap().tools
}

/// nexo's model loop: a session's thread in memory, one prompt after another.
async fn model_loop(server: &MockServer, tools: &ToolContext) -> Conversation {
    queue(server, 1);
    let thread = Arc::new(Thread::new("bench", Vec::new()));
    let prompting = Prompting {
        model: Some(provider(server)),
        agent_loop: Arc::new(HostLoop),
        limits: LoopLimits::default(),
        instructions: vec![INSTRUCTIONS.to_string()],
        thread: Some(thread.clone()),
        tokens: None,
        spend: Arc::default(),
        cost: None,
    };
    let mut wall = Vec::with_capacity(TURNS);
    for turn in 1..=TURNS {
        let input = prompt(turn);
        let start = Instant::now();
        let outcome = prompting.run(tools, &input).await.unwrap();
        prompting.remember(&outcome);
        wall.push(start.elapsed());
        assert_eq!(outcome.status, Status::Completed);
    }
    assert_eq!(thread.len(), 2 * TURNS);
    Conversation::new("nexo model loop", &wall, &server.take_requests())
}

/// nexo's sessions: each prompt a recorded run in a SQLite store.
async fn session(server: &MockServer, runs: &Runs, agent: &AgentFile) -> Conversation {
    queue(server, 1);
    let options = RunOptions {
        providers: Providers { model: Some(provider(server)), ..Providers::default() },
        ..RunOptions::default()
    };
    let instance = nexo_store::new_run_id();
    let session = runs.store().open_session("bench", &instance, nexo_store::now_ms()).await.unwrap().id;
    let mut wall = Vec::with_capacity(TURNS);
    for turn in 1..=TURNS {
        let input = prompt(turn);
        let start = Instant::now();
        let end = runs
            .start_in(Some(&session), Subject::File(agent), &input, &nexo::runs::RunSpec::default(), &options)
            .await
            .unwrap();
        wall.push(start.elapsed());
        assert_eq!(end.run.status, RunStatus::Done, "{:?}", end.run.error);
    }
    Conversation::new("nexo session", &wall, &server.take_requests())
}

/// The Python peer's conversations, or why they did not run.
async fn peer(server: &MockServer, repeats: usize) -> Result<(String, Vec<Conversation>), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = std::env::var_os("NEXO_OPENAI_AGENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/tools/openai-agents"));
    let python = venv.join("bin/python");
    if !python.exists() {
        return Err(format!(
            "openai-agents is not installed ({} is missing); run scripts/openai-agents-deps.sh",
            python.display()
        ));
    }
    let script = root.join("bench/conversation/openai_agents_peer.py");
    let job = json!({
        "base_url": server.openai_base_url(),
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "prompts": (1..=TURNS).map(prompt).collect::<Vec<_>>(),
        "repeats": repeats,
    });
    queue(server, repeats);
    // The server answers on this runtime while a blocking thread waits for Python.
    let output = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = std::process::Command::new(&python)
            .arg(&script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{} could not start: {e}", python.display()))?;
        child.stdin.take().unwrap().write_all(job.to_string().as_bytes()).map_err(|e| e.to_string())?;
        child.wait_with_output().map_err(|e| e.to_string())
    })
    .await
    .unwrap()?;
    let requests = server.take_requests();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "the peer failed ({}): {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("the peer's report: {e}"))?;
    let sdk = report["sdk"].as_str().unwrap_or("openai-agents").to_string();
    let turn_ns = report["turn_ns"].as_array().ok_or("the peer's report has no turn_ns")?;
    if turn_ns.len() != repeats || requests.len() != repeats * TURNS {
        return Err(format!("the peer ran {} conversations with {} requests", turn_ns.len(), requests.len()));
    }
    let conversations = turn_ns
        .iter()
        .zip(requests.chunks(TURNS))
        .map(|(times, requests)| {
            let wall: Vec<Duration> =
                times.as_array().into_iter().flatten().map(|t| Duration::from_nanos(t.as_u64().unwrap_or(0))).collect();
            Conversation::new(&sdk, &wall, requests)
        })
        .collect();
    Ok((sdk, conversations))
}

fn main() {
    let repeats: usize = std::env::var("NEXO_BENCH_REPEATS").ok().and_then(|r| r.parse().ok()).unwrap_or(11).max(1);
    // One thread: the server and the client take turns on it, so the
    // server's time is its own work, and nothing else runs meanwhile.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rows = rt.block_on(async {
        let server = MockServer::start().await.unwrap();
        let tools = tools().await;
        let agent = AgentFile::parse(
            &format!("name = \"bench\"\ndescription = \"d\"\ninstructions = \"{INSTRUCTIONS}\"\n"),
            dir.path().join("bench.toml"),
        )
        .unwrap();
        let store = nexo_store::open(&nexo_store::Location::Sqlite(dir.path().join("nexo.db"))).await.unwrap();
        let runs = Runs::new(store, false);
        // Interleaved, so the machine's drift touches every row alike.
        let (mut looped, mut sessions) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            looped.push(model_loop(&server, &tools).await);
            sessions.push(session(&server, &runs, &agent).await);
        }
        let mut rows = vec![
            Row::new("nexo, model loop (a session's thread in memory)", &looped),
            Row::new("nexo, session prompts (a recorded run each, SQLite)", &sessions),
        ];
        let peer = peer(&server, repeats).await;
        match peer {
            Ok((sdk, conversations)) => rows.push(Row::new(format!("Python, {sdk} (to_input_list)"), &conversations)),
            Err(why) => println!("peer row skipped: {why}"),
        }
        rows
    });
    println!();
    println!("Conversation of {TURNS} turns against the loopback fake server (OpenAI chat completions, not streamed).");
    println!(
        "Per-turn cost to the client, µs: wall time minus the server's own time; a window's median turn, \
         median of {repeats} conversations."
    );
    println!();
    println!(
        "| client | turn 1 | turns 2–4 | turns 98–100 | late / early | request bytes (1 / 2–4 / 98–100) | bytes late / early | runs |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        row.print();
    }
}
