//! Chaos: `nexo serve` nodes killed, paused and restarted at random under
//! load, and the store's server restarted, while tenants' agents make tool
//! calls that a loopback witness counts. At the end every run has ended, no
//! journaled effect happened twice, no run was driven by two nodes at once,
//! no event was lost and the audit chains verify.
//!
//! - three nodes over one PostgreSQL of the test's own (so it can restart
//!   it), with SIGKILLs, SIGSTOPs longer than a lease (a node that wakes up
//!   believing it still drives its runs) and one PostgreSQL restart;
//! - one node over SQLite under SIGKILL.
//!
//! The agent is the `mcp-probe` plugin running a prompt through the host's
//! model loop. The model is a function of the conversation (a replayed turn
//! gets the answer the first one got): while the run has made fewer than
//! its steps' tool calls, it calls `mcp__tests__echo` with `TAG/N`. The
//! MCP server is nexo's test server over HTTP, which appends each call to a
//! witness file with the caller's bearer token, which names the node and
//! its incarnation. One tenant runs with `mode = "approve"`, so each of its
//! calls waits for an approval the test gives over the API.
//!
//! `NEXO_CHAOS_SECS` (default 30) is how long the faults go on,
//! `NEXO_CHAOS_SEED` makes a run repeatable (the seed is printed), and
//! `NEXO_BIN` runs another `nexo` binary (a mutant: see
//! `scripts/chaos-mutants.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::{Node, stderr, stdout};

/// How long a node's leases last: a paused node loses its runs after this.
const LEASE_SECS: u64 = 2;

/// One scene at a time: on two cores, scenes side by side could starve a
/// node of the CPU for longer than its lease, an unrecorded pause.
static ONE_SCENE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The provider key the nodes get.
const PROVIDER_KEY: &str = "sk-chaos-provider-secret-5521";

/// A small deterministic generator (xorshift64*): the seed repeats a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// The test's settings, from the environment.
struct Settings {
    secs: u64,
    seed: u64,
}

impl Settings {
    fn from_env(test: &str) -> Settings {
        let secs = std::env::var("NEXO_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
        let seed = std::env::var("NEXO_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
        });
        eprintln!("{test}: NEXO_CHAOS_SECS={secs} NEXO_CHAOS_SEED={seed}");
        Settings { secs, seed }
    }
}

/// The `nexo` binary under test.
fn nexo_bin() -> PathBuf {
    std::env::var_os("NEXO_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nexo")))
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A PostgreSQL cluster of the test's own, made and restarted by
/// `scripts/postgres.sh`.
struct Postgres {
    dir: PathBuf,
    port: u16,
    url: String,
}

impl Postgres {
    fn script(&self, args: &[&str]) -> std::process::Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh");
        Command::new(script)
            .args(args)
            .env("NEXO_PG_DIR", &self.dir)
            .env("NEXO_PG_PORT", self.port.to_string())
            .output()
            .unwrap()
    }

    /// Makes and starts a cluster in `dir`, or `None` where PostgreSQL's
    /// programs are missing outside CI.
    fn start(test: &str, dir: PathBuf) -> Option<Postgres> {
        let port = free_port();
        let mut pg = Postgres { dir, port, url: String::new() };
        let out = pg.script(&[]);
        if !out.status.success() {
            assert!(
                std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true),
                "{test}: scripts/postgres.sh failed in CI: {}",
                stderr(&out)
            );
            nexo_testkit::skipped(test, &format!("scripts/postgres.sh could not start a cluster: {}", stderr(&out)));
            return None;
        }
        pg.url = stdout(&out).trim().to_string();
        Some(pg)
    }

    /// Stops the server as a crash would.
    fn crash(&self) {
        let out = self.script(&["stop"]);
        assert!(out.status.success(), "stopping PostgreSQL: {}", stderr(&out));
    }

    fn restart(&self) {
        let out = self.script(&[]);
        assert!(out.status.success(), "restarting PostgreSQL: {}", stderr(&out));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.script(&["stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A small filesystem of the test's own: a tmpfs mounted in a private
/// mount namespace (a user namespace's, so no privilege is needed), kept
/// alive by a holder process. Commands run inside it through `nsenter`;
/// the test reaches its files through the holder's `/proc/PID/root`.
struct Volume {
    holder: Killed,
    /// Where it is mounted, inside the namespace.
    dir: PathBuf,
}

impl Volume {
    /// Mounts `mib` MiB at `dir`, or `None` (skipped, visibly) where this
    /// machine cannot make one outside CI.
    fn make(test: &str, dir: PathBuf, mib: u64) -> Option<Volume> {
        use std::io::BufRead;
        std::fs::create_dir_all(&dir).unwrap();
        let script =
            format!("mount -t tmpfs -o size={mib}m nexo-chaos '{}' && echo ready && exec sleep 100000", dir.display());
        let mut child = Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            assert!(
                std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true),
                "{test}: cannot mount a small filesystem in a private namespace in CI: {}",
                stderr(&out)
            );
            nexo_testkit::skipped(test, &format!("no private mount namespace here: {}", stderr(&out).trim()));
            return None;
        }
        Some(Volume { holder: Killed(child), dir })
    }

    fn pid(&self) -> String {
        self.holder.0.id().to_string()
    }

    /// `cmd`, run inside the volume's namespace.
    fn inside(&self, cmd: Command) -> Command {
        let mut out = Command::new("nsenter");
        out.args(["--target", &self.pid(), "--user", "--mount", "--preserve-credentials", "--"]);
        out.arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => out.env(k, v),
                None => out.env_remove(k),
            };
        }
        out
    }

    /// A path on the volume, as the test reaches it.
    fn outside(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{}", self.pid(), self.dir.join(name).display()))
    }

    /// Fills what is left of it with one file; answers how many bytes it took.
    fn fill(&self) -> u64 {
        use std::io::Write;
        let mut file = std::fs::File::create(self.outside("filler")).unwrap();
        let chunk = vec![0u8; 1 << 16];
        let mut written = 0;
        while let Ok(n) = file.write(&chunk) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        written
    }

    fn free(&self) {
        std::fs::remove_file(self.outside("filler")).unwrap();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The tool the runs call: the agent's own `mcp-allow` lists it.
const ECHO: &str = "mcp__tests__echo";

/// What the model answers: the next call while the run has made fewer than
/// its steps' calls, then the final answer. The run's input is
/// `chaos TAG STEPS`.
fn answer(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let asked = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .find_map(|t| t.split("chaos ").nth(1).map(str::to_string))
        .unwrap_or_default();
    let mut words = asked.split_whitespace();
    let (tag, steps) =
        (words.next().unwrap_or("?").to_string(), words.next().and_then(|s| s.parse().ok()).unwrap_or(1));
    let made = messages.iter().filter(|m| m["role"] == "tool").count();
    if made < steps {
        let text = format!("{tag}/{made}");
        let call = MockToolCall::new(format!("c{made}"), ECHO, json!({"text": text}));
        Reply::tool_calls(vec![call]).with_usage(10, 5)
    } else {
        Reply::text(format!("finished {tag}")).with_usage(10, 5)
    }
}

/// One node's slot: its name, its current process and how many times it
/// was started.
struct Slot {
    name: String,
    generation: u32,
    node: Option<Node>,
    paused: bool,
}

impl Slot {
    fn incarnation(&self) -> String {
        format!("{}-{}-chaos-witness", self.name, self.generation)
    }
}

/// A fault the test made, for the report and for telling an allowed
/// repeat (the call a dead or paused node had in flight) from a violation.
#[derive(Debug, Clone)]
struct Fault {
    at: Instant,
    what: &'static str,
    incarnation: String,
}

/// The scene: a store, a model, the witness, the nodes and the tenants.
struct Chaos {
    dir: PathBuf,
    store: String,
    model: MockServer,
    witness_file: PathBuf,
    _witness: Killed,
    slots: Vec<Slot>,
    /// The base URLs of the nodes that answer now.
    live: Arc<Mutex<Vec<String>>>,
    faults: Vec<Fault>,
    http: reqwest::Client,
    /// The volume the store and the data directories are on, if they are
    /// on one: every `nexo` runs in its namespace.
    volume: Option<Arc<Volume>>,
    /// What killed nodes logged, for the report.
    dead_logs: Vec<String>,
}

/// A tenant of the test: its name, key and whether its calls wait for approvals.
#[derive(Clone)]
struct Tenant {
    name: String,
    key: String,
    /// Whether its runs wait for approvals (the `workflow-probe` agent's
    /// writes under `approve`), or call the witness (`mcp-probe`'s prompt).
    approves: bool,
}

impl Tenant {
    /// The input of the run tagged `tag` with `steps` steps.
    fn input(&self, tag: &str, steps: usize) -> String {
        if self.approves {
            (0..steps).map(|n| format!("write {tag}-{n}.txt {n}")).collect::<Vec<_>>().join(";")
                + &format!(";time;# chaos {tag} {steps}")
        } else {
            format!("prompt chaos {tag} {steps}")
        }
    }
}

impl Chaos {
    async fn new(dir: PathBuf, store: String, nodes: usize) -> Chaos {
        let model = MockServer::start().await.unwrap();
        model.respond_with(answer);
        let witness_file = dir.join("witness.log");
        let (child, addr) = common::mcp_http_server(&["--witness".as_ref(), witness_file.as_os_str()]);
        let config = format!(
            "[serve.models.test]\nprovider = \"openai-compatible\"\nbase-url = \"{}\"\nmodel = \"test-model\"\n\n\
             [mcp.tests]\nurl = \"http://{addr}/mcp\"\nallow-private = true\ntoken-env = \"CHAOS_WITNESS_TOKEN\"\ntimeout = 20\n",
            model.openai_base_url()
        );
        std::fs::write(dir.join("nexo.toml"), config).unwrap();
        let slots =
            (0..nodes).map(|i| Slot { name: format!("n{i}"), generation: 0, node: None, paused: false }).collect();
        Chaos {
            dir,
            store,
            model,
            witness_file,
            _witness: Killed(child),
            slots,
            live: Arc::new(Mutex::new(Vec::new())),
            faults: Vec::new(),
            http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
            volume: None,
            dead_logs: Vec::new(),
        }
    }

    fn nexo(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = common::nexo_command(&self.dir.join("cache"));
        cmd.env("NEXO_STORE", &self.store).env("NEXO_CONFIG", self.dir.join("nexo.toml"));
        let mut cmd = self.placed(rebinned(cmd).args(args));
        cmd.stdin(Stdio::null()).output().unwrap()
    }

    fn tenant(&self, name: &str, approves: bool) -> Tenant {
        let policy = if approves {
            json!({"allow": ["write"], "mode": "approve", "sandboxes": ["virtual"], "models": ["test"]})
        } else {
            json!({"mcp-servers": ["tests"], "mcp-allow": ["tests/echo"], "models": ["test"], "mode": "auto"})
        };
        let path = self.dir.join(format!("{name}-policy.json"));
        std::fs::write(&path, policy.to_string()).unwrap();
        let out = self.nexo(&["tenant", "create", name, "--policy", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        Tenant { name: name.into(), key: stdout(&out).trim().to_string(), approves }
    }

    /// Starts slot `i`'s next incarnation (in a blocking task: a node takes
    /// a moment to announce itself).
    async fn start(&mut self, i: usize) {
        self.slots[i].generation += 1;
        let (name, incarnation) = (self.slots[i].name.clone(), self.slots[i].incarnation());
        let mut cmd = common::nexo_command(&self.dir.join(format!("cache-{name}")));
        cmd.env("NEXO_STORE", &self.store)
            .env("OPENAI_API_KEY", PROVIDER_KEY)
            .env("CHAOS_WITNESS_TOKEN", incarnation)
            .env("NEXO_LOG", "info")
            .args(["serve", "--listen", "127.0.0.1:0", "--grace-secs", "1", "--lease-secs"])
            .arg(LEASE_SECS.to_string())
            .arg("--config")
            .arg(self.dir.join("nexo.toml"))
            .arg("--data-dir")
            .arg(self.data(&name));
        let cmd = self.placed(&mut rebinned(cmd));
        let node = tokio::task::spawn_blocking(move || Node::start(cmd)).await.unwrap();
        self.slots[i].node = Some(node);
        self.slots[i].paused = false;
        self.publish();
    }

    /// `cmd`, inside the volume's namespace if there is a volume.
    fn placed(&self, cmd: &mut Command) -> Command {
        let mut copy = Command::new(cmd.get_program());
        copy.args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => copy.env(k, v),
                None => copy.env_remove(k),
            };
        }
        match &self.volume {
            Some(volume) => volume.inside(copy),
            None => copy,
        }
    }

    /// A copy of the store's files on the volume, as they are now (what a
    /// crash would leave), in `name` under the scene's directory: the volume
    /// goes with its namespace, so a failed test keeps this one.
    fn copy_store(&self, name: &str) -> Option<PathBuf> {
        let volume = self.volume.as_ref()?;
        let copy = self.dir.join(name);
        std::fs::create_dir_all(&copy).unwrap();
        for file in ["nexo.db", "nexo.db-wal"] {
            if volume.outside(file).exists() {
                std::fs::copy(volume.outside(file), copy.join(file)).unwrap();
            }
        }
        Some(copy.join("nexo.db"))
    }

    /// What the live nodes logged as warnings and errors (the first 40 lines of each).
    fn warnings(&self) -> String {
        // The agent asks for a second MCP server the scene does not configure.
        let noted = |log: String| {
            let worth = |l: &&str| (l.contains("WARN") || l.contains("ERROR")) && !l.contains("not configured");
            log.lines().filter(worth).take(40).collect::<Vec<_>>().join("\n")
        };
        let live = self.slots.iter().filter_map(|s| s.node.as_ref()).map(Node::log);
        self.dead_logs.iter().cloned().chain(live).map(noted).collect::<Vec<_>>().join("\n---\n")
    }

    /// Where slot `name`'s data directory is.
    fn data(&self, name: &str) -> PathBuf {
        match &self.volume {
            Some(volume) => volume.dir.join(format!("data-{name}")),
            None => self.dir.join(format!("data-{name}")),
        }
    }

    fn publish(&self) {
        let live = self.slots.iter().filter(|s| !s.paused).filter_map(|s| s.node.as_ref()).map(|n| n.base.clone());
        *self.live.lock().unwrap() = live.collect();
    }

    fn fault(&mut self, what: &'static str, i: usize) {
        self.faults.push(Fault { at: Instant::now(), what, incarnation: self.slots[i].incarnation() });
    }

    /// SIGKILL: no chance to clean up.
    fn kill(&mut self, i: usize) {
        self.fault("kill", i);
        if let Some(mut node) = self.slots[i].node.take() {
            node.child.kill().unwrap();
            node.child.wait().unwrap();
            self.dead_logs.push(node.log());
        }
        self.slots[i].paused = false;
        self.publish();
    }

    fn signal(&mut self, i: usize, signal: rustix::process::Signal) {
        let node = self.slots[i].node.as_ref().unwrap();
        let pid = rustix::process::Pid::from_child(&node.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    fn pause(&mut self, i: usize) {
        self.fault("pause", i);
        self.signal(i, rustix::process::Signal::STOP);
        self.slots[i].paused = true;
        self.publish();
    }

    fn wake(&mut self, i: usize) {
        self.signal(i, rustix::process::Signal::CONT);
        self.slots[i].paused = false;
        self.publish();
    }

    /// Some node that answers now.
    fn any_node(&self, pick: u64) -> Option<String> {
        let live = self.live.lock().unwrap();
        (!live.is_empty()).then(|| live[pick as usize % live.len()].clone())
    }

    async fn get(&self, base: &str, path: &str, key: &str) -> (StatusCode, Value) {
        let resp = self.http.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

/// `cmd` with the binary under test in place of the built one.
fn rebinned(cmd: Command) -> Command {
    let mut out = Command::new(nexo_bin());
    out.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    out
}

/// What the load generator started: the run's tag, and its id if the node
/// answered.
#[derive(Debug, Clone)]
struct Launched {
    tag: String,
    id: Option<String>,
}

/// Starts runs at a steady pace on whichever nodes answer, until `stop`.
async fn load(
    live: Arc<Mutex<Vec<String>>>,
    tenants: Vec<Tenant>,
    plugins: (String, String),
    stop: Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
) -> Vec<Launched> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut launched = Vec::new();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let tenant = &tenants[n % tenants.len()];
        let steps = 2 + rng.below(3) as usize;
        let tag = format!("t{n:04}");
        n += 1;
        let base = {
            let live = live.lock().unwrap();
            (!live.is_empty()).then(|| live[rng.below(live.len() as u64) as usize].clone())
        };
        let mut run = Launched { tag: tag.clone(), id: None };
        if let Some(base) = base {
            let plugin = if tenant.approves { &plugins.1 } else { &plugins.0 };
            let body = json!({"plugin": plugin, "input": tenant.input(&tag, steps)});
            if let Ok(resp) = http.post(format!("{base}/v1/runs")).bearer_auth(&tenant.key).json(&body).send().await
                && resp.status() == StatusCode::ACCEPTED
                && let Ok(v) = resp.json::<Value>().await
            {
                run.id = v["id"].as_str().map(str::to_string);
            }
        }
        launched.push(run);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    launched
}

/// Approves the pending calls of `tenant`'s suspended runs, on whichever
/// node answers, until `stop`.
async fn approve(live: Arc<Mutex<Vec<String>>>, tenant: Tenant, stop: Arc<std::sync::atomic::AtomicBool>) -> usize {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut approved = 0;
    let mut turn = 0usize;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        turn += 1;
        let Some(base) = ({
            let live = live.lock().unwrap();
            (!live.is_empty()).then(|| live[turn % live.len()].clone())
        }) else {
            continue;
        };
        let Ok(resp) =
            http.get(format!("{base}/v1/runs?status=suspended&limit=200")).bearer_auth(&tenant.key).send().await
        else {
            continue;
        };
        let Ok(list) = resp.json::<Value>().await else { continue };
        for run in list["runs"].as_array().cloned().unwrap_or_default() {
            let id = run["id"].as_str().unwrap_or_default();
            let Ok(resp) = http.get(format!("{base}/v1/runs/{id}")).bearer_auth(&tenant.key).send().await else {
                continue;
            };
            let Ok(run) = resp.json::<Value>().await else { continue };
            let approval = &run["approval"];
            if approval.is_null() || !approval["decision"].is_null() {
                continue;
            }
            let body = json!({"seq": approval["seq"], "args-hash": approval["args_hash"]});
            if let Ok(resp) =
                http.post(format!("{base}/v1/runs/{id}/approve")).bearer_auth(&tenant.key).json(&body).send().await
                && resp.status().is_success()
            {
                approved += 1;
            }
        }
    }
    approved
}

/// Incarnations whose writes failed, with the window (wall-clock
/// nanoseconds, as the witness records) in which a call of theirs may have
/// gone unjournaled.
type Starved = BTreeMap<String, (u128, u128)>;

/// How far around a fault's window a call may still have lost its result:
/// the call in flight when the writes began to fail, and the writes that
/// fail until the node's connections recover.
const STARVED_SLACK: Duration = Duration::from_secs(3);

/// The wall clock as the witness records it.
fn unix_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

/// One call at the witness.
#[derive(Debug, Clone)]
struct Call {
    nanos: u128,
    caller: String,
    step: usize,
}

fn witnessed(path: &Path) -> BTreeMap<String, Vec<Call>> {
    let mut by_tag: BTreeMap<String, Vec<Call>> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(nanos), Some(caller), Some(text)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Some((tag, step)) = text.split_once('/') else { continue };
        by_tag.entry(tag.to_string()).or_default().push(Call {
            nanos: nanos.parse().unwrap(),
            caller: caller.to_string(),
            step: step.parse().unwrap(),
        });
    }
    for calls in by_tag.values_mut() {
        calls.sort_by_key(|c| c.nanos);
    }
    by_tag
}

/// The exactly-once and one-driver checks of one run's calls at the
/// witness. Each step's call must be there. A step made again is allowed
/// only as the call a node had in flight when it died or was paused (each
/// call but the last, when a restarted node is killed again before it
/// journals the call): the node that made it never made another call of
/// the run before the next, and was killed or paused. A node that made calls of
/// the run, lost it and made more (beyond that one in-flight call) drove it
/// at the same time as another: a fencing violation. A call a node made
/// while its writes failed for want of space or of its database (`starved`)
/// may be made again, by that node or by the one that took the run over once
/// its lease ran out: its result could not be made durable, so the run,
/// tried again, makes the call again.
fn check_calls(
    tag: &str,
    steps: usize,
    calls: &[Call],
    faulted: &BTreeSet<String>,
    starved: &Starved,
    violations: &mut Vec<String>,
) {
    let unjournaled =
        |call: &Call| starved.get(&call.caller).is_some_and(|(from, to)| (*from..=*to).contains(&call.nanos));
    let mut by_step: BTreeMap<usize, Vec<&Call>> = BTreeMap::new();
    for call in calls {
        by_step.entry(call.step).or_default().push(call);
    }
    for step in 0..steps {
        if !by_step.contains_key(&step) {
            violations.push(format!("{tag}: step {step} never reached the witness"));
        }
    }
    for (step, made) in &by_step {
        if *step >= steps {
            violations.push(format!("{tag}: step {step} is past the run's {steps} steps"));
        }
        // Made again after being made again: each call but the last must be
        // one a node had in flight when it was killed or paused (a node
        // restarted and killed again before it journaled the call, say).
        let lost = |c: &Call| faulted.contains(&c.caller) || unjournaled(c);
        if made.len() > 2 && !made[..made.len() - 1].iter().all(|c| lost(c)) {
            let callers: Vec<&str> = made.iter().map(|c| c.caller.as_str()).collect();
            violations.push(format!(
                "{tag}: step {step} happened {} times ({callers:?}), not each but the last a faulted node's call in flight",
                made.len()
            ));
        }
        for pair in made.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            if first.caller == second.caller && !unjournaled(first) {
                violations.push(format!("{tag}: step {step} happened twice on one node ({})", first.caller));
            } else if !faulted.contains(&first.caller) && !faulted.contains(&second.caller) && !unjournaled(first) {
                violations.push(format!(
                    "{tag}: step {step} happened on {} and on {} and neither was killed or paused",
                    first.caller, second.caller
                ));
            }
        }
    }
    // Drivers in order: a node's calls of the run come in one block, but for
    // one last in-flight call of a node that was faulted.
    let mut blocks: Vec<(&str, usize)> = Vec::new();
    for call in calls {
        match blocks.last_mut() {
            Some((caller, n)) if *caller == call.caller => *n += 1,
            _ => blocks.push((&call.caller, 1)),
        }
    }
    let mut seen = BTreeSet::new();
    for (i, (caller, n)) in blocks.iter().enumerate() {
        if !seen.insert(*caller) {
            // The one call a faulted node had in flight, and nothing after it.
            let stray = *n == 1 && faulted.contains(*caller) && blocks[i + 1..].iter().all(|(c, _)| c != caller);
            if !stray {
                violations.push(format!("{tag}: {caller} drove the run again after another node had it: {blocks:?}"));
            }
        }
    }
}

/// What goes wrong in a scene.
enum Faults<'a> {
    /// Nodes are killed and paused; PostgreSQL, if given, restarts once.
    Nodes(Option<&'a Postgres>),
    /// The store's volume fills up for a third of the time (the node is
    /// killed once meanwhile), then space returns.
    DiskFull,
}

/// Runs the scene's faults for `settings.secs`, then lets every run end,
/// and checks. Answers the report.
async fn chaos(mut scene: Chaos, settings: &Settings, faults: Faults<'_>) -> String {
    let _alone = ONE_SCENE.lock().await;
    let started = Instant::now();
    for i in 0..scene.slots.len() {
        scene.start(i).await;
    }
    let tenants = vec![scene.tenant("auto-a", false), scene.tenant("auto-b", false), scene.tenant("approver", true)];
    let base = scene.any_node(0).unwrap();
    let mut ids = Vec::new();
    for (t, wasm) in tenants.iter().zip([built::MCP_PROBE, built::MCP_PROBE, built::WORKFLOW_PROBE]) {
        let bytes = std::fs::read(wasm).unwrap();
        let resp = scene.http.post(format!("{base}/v1/plugins")).bearer_auth(&t.key).body(bytes).send().await.unwrap();
        assert!(resp.status().is_success(), "{:?}", resp.text().await);
        ids.push(resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string());
    }
    let plugins = (ids[0].clone(), ids[2].clone());
    let disk_plugin = plugins.0.clone();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = tokio::spawn(load(scene.live.clone(), tenants.clone(), plugins, stop.clone(), settings.seed));
    let approver_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let approver = tokio::spawn(approve(scene.live.clone(), tenants[2].clone(), approver_stop.clone()));

    let mut rng = Rng(settings.seed);
    let (mut kills, mut pauses, mut pg_restarts) = (0, 0, 0);
    let mut violations = Vec::new();
    // Nodes whose writes failed for want of space or of their database, and
    // when: a call whose result could not be made durable runs again.
    let mut starved = Starved::new();
    let mut refused_full = 0;
    let disk = matches!(faults, Faults::DiskFull);
    let postgres = match faults {
        Faults::Nodes(postgres) => postgres,
        Faults::DiskFull => {
            disk_full(
                &mut scene,
                settings.secs,
                &tenants[0],
                &disk_plugin,
                &mut starved,
                &mut refused_full,
                &mut violations,
            )
            .await;
            kills += 1;
            None
        }
    };
    // The node faults, for as long as the disk faults did not take.
    let faults_end = if disk { Instant::now() } else { Instant::now() + Duration::from_secs(settings.secs) };
    let pg_at = Instant::now() + Duration::from_secs(settings.secs / 2);
    let nodes = scene.slots.len();
    while Instant::now() < faults_end {
        tokio::time::sleep(rng.millis(1_000, 3_000)).await;
        if let Some(pg) = postgres
            && pg_restarts == 0
            && Instant::now() >= pg_at
        {
            // Every node's writes fail while it is down: as on a full disk,
            // a call whose result could not be journaled runs again.
            let from = unix_nanos() - STARVED_SLACK.as_nanos();
            pg.crash();
            tokio::time::sleep(rng.millis(500, 2_000)).await;
            pg.restart();
            let to = unix_nanos() + STARVED_SLACK.as_nanos();
            starved.extend(scene.slots.iter().filter(|s| s.node.is_some()).map(|s| (s.incarnation(), (from, to))));
            pg_restarts += 1;
            continue;
        }
        let i = rng.below(nodes as u64) as usize;
        // Pauses need another node to take the runs over.
        if nodes > 1 && rng.below(3) == 0 {
            scene.pause(i);
            pauses += 1;
            tokio::time::sleep(Duration::from_secs(LEASE_SECS) + rng.millis(500, 2_500)).await;
            scene.wake(i);
        } else {
            scene.kill(i);
            kills += 1;
            tokio::time::sleep(rng.millis(0, 2_000)).await;
            scene.start(i).await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let launched = loader.await.unwrap();

    // Every run ends, on nodes left alone. A run that failed for want of
    // space is resumed once: nothing it did may be lost.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut runs: Vec<(Tenant, Value)>;
    let mut resumed = BTreeSet::new();
    loop {
        runs = Vec::new();
        let base = scene.any_node(0).unwrap();
        for t in &tenants {
            let (status, list) = scene.get(&base, "/v1/runs?limit=10000", &t.key).await;
            assert_eq!(status, StatusCode::OK, "{list}");
            runs.extend(list["runs"].as_array().unwrap().iter().map(|r| (t.clone(), r.clone())));
        }
        let mut open = runs
            .iter()
            .filter(|(_, r)| !["done", "failed", "cancelled"].contains(&r["status"].as_str().unwrap()))
            .count();
        for (t, r) in &runs {
            let id = r["id"].as_str().unwrap().to_string();
            if r["status"] == "failed" && !starved.is_empty() && !resumed.contains(&id) {
                let url = format!("{base}/v1/runs/{id}/resume");
                let resp = scene.http.post(url).bearer_auth(&t.key).json(&json!({})).send().await.unwrap();
                assert!(resp.status().is_success(), "resuming {id} ({r}): {:?}", resp.text().await);
                resumed.insert(id);
                open += 1;
            }
        }
        if open == 0 {
            break;
        }
        if Instant::now() >= deadline {
            scene.copy_store("evidence");
        }
        assert!(
            Instant::now() < deadline,
            "{open} runs did not end within 180 s of the last fault: {:?}\n{}",
            runs.iter()
                .filter(|(_, r)| !["done", "failed", "cancelled"].contains(&r["status"].as_str().unwrap()))
                .map(|(_, r)| r.to_string())
                .collect::<Vec<_>>(),
            scene.slots.iter().filter_map(|s| s.node.as_ref()).map(|n| n.log()).collect::<Vec<_>>().join("\n---\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    approver_stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let approved = approver.await.unwrap();

    let faulted: BTreeSet<String> = scene.faults.iter().map(|f| f.incarnation.clone()).collect();
    let by_tag = witnessed(&scene.witness_file);
    let ids: HashMap<&str, &Value> = runs.iter().map(|(_, r)| (r["id"].as_str().unwrap(), r)).collect();
    // The model's turns, by run and step: a turn asked again is allowed only
    // as a faulted node's turn in flight.
    let mut turns: HashMap<(String, usize), usize> = HashMap::new();
    for request in scene.model.requests() {
        let reply_to = request.body["messages"].as_array().cloned().unwrap_or_default();
        let tag = reply_to
            .iter()
            .filter_map(|m| m["content"].as_str())
            .find_map(|t| t.split("chaos ").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_string));
        let made = reply_to.iter().filter(|m| m["role"] == "tool").count();
        if let Some(tag) = tag {
            *turns.entry((tag, made)).or_default() += 1;
        }
    }
    let mut acknowledged = 0;
    let mut repeated_calls = 0;
    let mut repeated_turns = 0;
    let mut checked = 0;
    let mut approvals_asked = 0;
    for run in &launched {
        let Some(id) = &run.id else {
            // No answer: the run may or may not exist; if it does, it is checked below by its tag.
            continue;
        };
        acknowledged += 1;
        if !ids.contains_key(id.as_str()) {
            violations.push(format!("{}: the run {id} was acknowledged (202) and is gone", run.tag));
        }
    }
    let mut by_id_tag = HashMap::new();
    for (tenant, listed) in &runs {
        let id = listed["id"].as_str().unwrap();
        let (status, full) = scene.get(&scene.any_node(0).unwrap(), &format!("/v1/runs/{id}"), &tenant.key).await;
        assert_eq!(status, StatusCode::OK);
        let input = full["input"].as_str().unwrap_or_default().to_string();
        let mut words = input.split("chaos ").nth(1).unwrap_or_default().split_whitespace();
        let (tag, steps) =
            (words.next().unwrap_or_default().to_string(), words.next().and_then(|s| s.parse().ok()).unwrap_or(0));
        by_id_tag.insert(id.to_string(), tag.clone());
        checked += 1;
        let result = full["result"].as_str().unwrap_or_default();
        if full["status"] != "done" {
            violations.push(format!("{tag}: ended {} ({}): {}", full["status"], tenant.name, full["error"]));
            continue;
        }
        if tenant.approves {
            // Every write was approved once and happened, in order: no
            // approval was lost or decided twice.
            let wrote: Vec<String> = (0..steps).map(|n| format!("wrote {tag}-{n}.txt")).collect();
            let lines: Vec<&str> = result.lines().take(steps).collect();
            if lines != wrote {
                violations.push(format!("{tag}: the writes' results are {lines:?}"));
            }
            let events = sse(&scene.http, &scene.any_node(0).unwrap(), &tenant.key, id).await;
            let asked = events
                .iter()
                .filter(|(_, kind, data)| kind == "suspended" && !data["data"]["approval"].is_null())
                .count();
            approvals_asked += asked;
            if asked < steps {
                violations.push(format!("{tag}: {asked} approvals asked for {steps} writes"));
            }
            continue;
        }
        if !result.contains(&format!("finished {tag}")) {
            violations.push(format!("{tag}: the answer is {result:?}"));
            continue;
        }
        let calls = by_tag.get(&tag).cloned().unwrap_or_default();
        check_calls(&tag, steps, &calls, &faulted, &starved, &mut violations);
        repeated_calls += calls.len().saturating_sub(steps);
        let drivers = calls.iter().map(|c| c.caller.as_str()).collect::<BTreeSet<_>>().len().max(1);
        for step in 0..=steps {
            let asked = turns.get(&(tag.clone(), step)).copied().unwrap_or(0);
            if asked == 0 {
                violations.push(format!("{tag}: turn {step} never reached the model"));
            }
            repeated_turns += asked.saturating_sub(1);
            if asked > drivers + 1 {
                violations.push(format!("{tag}: turn {step} was asked {asked} times by {drivers} drivers"));
            }
        }
        // Events: each step's call reported once, in order, and the end.
        let events = sse(&scene.http, &scene.any_node(0).unwrap(), &tenant.key, id).await;
        let mut last = 0u64;
        for (eid, _, _) in &events {
            if let Ok(n) = eid.parse::<u64>() {
                if n <= last {
                    violations.push(format!("{tag}: event ids out of order ({n} after {last})"));
                }
                last = n;
            }
        }
        let results: Vec<String> = events
            .iter()
            .filter(|(_, kind, data)| kind == "tool_result" && data["data"]["name"] == ECHO)
            .map(|(_, _, data)| data["data"]["verdict"].as_str().unwrap_or_default().to_string())
            .collect();
        let allowed = results.iter().filter(|v| *v == "allowed").count();
        if allowed != steps {
            violations.push(format!("{tag}: {allowed} tool results reported for {steps} calls: {results:?}"));
        }
        if events.last().map(|(_, kind, data)| (kind.as_str(), data["status"].as_str())) != Some(("end", Some("done")))
        {
            violations.push(format!("{tag}: the events do not end with `end` done: {:?}", events.last()));
        }
    }
    for tag in by_tag.keys() {
        if !by_id_tag.values().any(|t| t == tag) {
            violations.push(format!("{tag}: calls reached the witness for a run that is not listed"));
        }
    }
    // Nothing in the store is damaged.
    if let Some(path) = scene.copy_store("integrity") {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        let (check,): (String,) = sqlx::query_as("PRAGMA integrity_check").fetch_one(&mut conn).await.unwrap();
        if check != "ok" {
            violations.push(format!("the store's integrity check says: {check}"));
        }
    }
    // The audit chains verify.
    let out = scene.nexo(&["audit", "verify"]);
    if !out.status.success() {
        violations.push(format!("nexo audit verify failed: {}{}", stdout(&out), stderr(&out)));
    }
    let report = format!(
        "{} nodes, {} s of faults ({} s in all): {} runs started ({} acknowledged, {} listed and checked), {} calls at the witness, \
         {approvals_asked} approvals asked, {} given; {refused_full} requests refused on a full disk; {} runs resumed; {kills} kills, {pauses} pauses, {pg_restarts} PostgreSQL restarts; {repeated_calls} calls and \
         {repeated_turns} model turns repeated (each a faulted node's call in flight); {} violations",
        scene.slots.len(),
        settings.secs,
        started.elapsed().as_secs(),
        launched.len(),
        acknowledged,
        checked,
        by_tag.values().map(Vec::len).sum::<usize>(),
        approved,
        resumed.len(),
        violations.len()
    );
    eprintln!("chaos: {report}");
    assert!(
        violations.is_empty(),
        "chaos (seed {}): {report}\n{}\nfaults: {:?}\nthe nodes' warnings and errors:\n{}",
        settings.seed,
        violations.join("\n"),
        scene
            .faults
            .iter()
            .map(|f| (f.at.duration_since(started).as_millis(), f.what, &f.incarnation))
            .collect::<Vec<_>>(),
        scene.warnings()
    );
    report
}

/// The disk-full faults on slot 0's node: a third of the time as usual;
/// then the volume is full: a run request is stored or refused with the
/// typed error (507 `store_full`), never anything else, and the node is
/// killed (kill -9) half-way; then space returns and the node starts again.
async fn disk_full(
    scene: &mut Chaos,
    secs: u64,
    tenant: &Tenant,
    plugin: &str,
    starved: &mut Starved,
    refused: &mut usize,
    violations: &mut Vec<String>,
) {
    let third = Duration::from_secs(secs.max(3) / 3);
    tokio::time::sleep(third).await;
    let volume = scene.volume.clone().unwrap();
    let took = volume.fill();
    eprintln!("disk full: the filler took the last {took} bytes");
    let starved_from = unix_nanos() - STARVED_SLACK.as_nanos();
    let full_until = Instant::now() + third / 2;
    while Instant::now() < full_until {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let base = scene.any_node(0).unwrap();
        let body = json!({"plugin": plugin, "input": "prompt chaos full 1"});
        let resp =
            scene.http.post(format!("{base}/v1/runs")).bearer_auth(&tenant.key).json(&body).send().await.unwrap();
        let status = resp.status();
        let answer: Value = resp.json().await.unwrap_or(Value::Null);
        match status {
            StatusCode::ACCEPTED => {}
            StatusCode::INSUFFICIENT_STORAGE
                if answer["error"]["code"] == "store_full"
                    && answer["error"]["message"].as_str().is_some_and(|m| m.contains("space")) =>
            {
                *refused += 1
            }
            other => violations.push(format!("a run request on a full disk got {other}: {answer}")),
        }
    }
    starved.insert(scene.slots[0].incarnation(), (starved_from, unix_nanos() + STARVED_SLACK.as_nanos()));
    scene.kill(0);
    volume.free();
    scene.start(0).await;
    tokio::time::sleep(third).await;
}

/// The run's SSE stream, read to its end: (id, event, data) of each event.
async fn sse(http: &reqwest::Client, base: &str, key: &str, id: &str) -> Vec<(String, String, Value)> {
    let mut resp = http.get(format!("{base}/v1/runs/{id}/events")).bearer_auth(key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut text = String::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains("event: end") && text.ends_with("\n\n") {
            break;
        }
    }
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let field = |name: &str| {
                block.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string)).unwrap_or_default()
            };
            (field("id"), field("event"), serde_json::from_str(&field("data")).unwrap_or(Value::Null))
        })
        .collect()
}

/// A directory the PostgreSQL server's owner can reach (a temporary
/// directory is private to its creator).
fn scene_dir(prefix: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        nexo_store::new_run_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_postgres_survive_kills_pauses_and_a_database_restart() {
    let test = "three_nodes_over_postgres_survive_kills_pauses_and_a_database_restart";
    let settings = Settings::from_env(test);
    let dir = scene_dir("chaos-pg");
    let Some(pg) = Postgres::start(test, dir.join("postgres")) else { return };
    let scene = Chaos::new(dir.clone(), pg.url.clone(), 3).await;
    chaos(scene, &settings, Faults::Nodes(Some(&pg))).await;
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_over_sqlite_on_a_disk_that_fills_up_refuses_then_recovers_intact() {
    let test = "one_node_over_sqlite_on_a_disk_that_fills_up_refuses_then_recovers_intact";
    let settings = Settings::from_env(test);
    let dir = scene_dir("chaos-full");
    let Some(volume) = Volume::make(test, dir.join("volume"), 48) else { return };
    let volume = Arc::new(volume);
    let store = volume.dir.join("nexo.db").display().to_string();
    let mut scene = Chaos::new(dir.clone(), store, 1).await;
    scene.volume = Some(volume);
    chaos(scene, &settings, Faults::DiskFull).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_over_sqlite_survives_kill_9() {
    let settings = Settings::from_env("one_node_over_sqlite_survives_kill_9");
    let dir = scene_dir("chaos-sqlite");
    let scene = Chaos::new(dir.clone(), dir.join("nexo.db").display().to_string(), 1).await;
    chaos(scene, &settings, Faults::Nodes(None)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
