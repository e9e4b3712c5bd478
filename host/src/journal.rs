//! The journal of a recorded run: every host call's result, in order, so a
//! resume or a recovery can replay the run instead of re-running it.
//!
//! A component is deterministic given the results of its host calls. The
//! host-call path ([`crate::host_call`]) asks the journal before it runs a
//! call ([`Journal::begin`]): while the journal holds the call's sequence
//! number, the recorded result is the answer, and nothing runs again (no
//! model call, no write, no shell command, no fetch). Past the journal's
//! end, calls run live and their results are appended
//! ([`Journal::finish`]) before the guest sees them.
//!
//! - A call's [`Effect`] says how soon its entry must be durable: a `Write`
//!   (model turns, writes, shell, fetch, search, checkpoints) commits with
//!   every entry before it, before the guest continues; a `Read` (file
//!   reads, clocks, randomness) waits in memory for the next commit.
//! - A call that was in flight when the process died has no entry, so it
//!   runs again: at-least-once for that one call.
//! - A different call at a recorded sequence number stops the run with a
//!   `nondeterminism` failure that names both calls.
//! - Once the run halts (it suspends, or fails), nothing more is recorded,
//!   so the calls that unwind after a halt leave no trace to replay.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nexo_store::{Approval, Batch, Decision, Entry, NewEvent, Run, Signal, SignalWait, Store, StoreError};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::ToolError;
use crate::events::{Event, EventSink};

/// Where a pass resumed by checkpoints only starts numbering its calls.
pub const CHECKPOINTS_ONLY_BASE: u64 = 1 << 40;

/// The journaled function of `wait-signal`'s second step, which takes a
/// signal: its entries say which signals a run took.
pub const TAKE_SIGNAL: &str = "take-signal";

/// Checkpoint names the host keeps for itself.
pub const RESERVED: [&str; 3] = ["__suspend__", "__approval__", "__buffer_events__"];

/// How a call's entry is journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Not journaled: the call has no result a guest could act on (`log`).
    Skip,
    /// Journaled, and committed with the next write: re-running it costs
    /// nothing and changes nothing.
    Read,
    /// Journaled and durable before the guest sees the result: it costs
    /// money or changes the world.
    Write,
}

/// Why a run stopped making progress.
#[derive(Debug, Clone, PartialEq)]
pub enum Halt {
    /// It paused: the guest suspended, or a gate waits for a decision.
    Suspend {
        /// Why.
        reason: String,
        /// The guest's resume key.
        resume_key: Option<String>,
        /// The pending approval.
        approval: Option<Approval>,
        /// When it wakes, for a durable timer's sleep or a wait's timeout.
        wake_ms: Option<i64>,
        /// The signal it waits for, for `wait-signal`.
        signal: Option<Box<SignalWait>>,
    },
    /// It cannot go on: a nondeterministic replay, or a store failure.
    Failed(String),
}

impl Halt {
    /// One line for a trap message.
    pub fn summary(&self) -> String {
        match self {
            Halt::Suspend { reason, .. } => format!("the run suspended: {reason}"),
            Halt::Failed(why) => why.clone(),
        }
    }
}

/// The trap a guest's call unwinds with once its run halted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Halted(pub String);

/// What [`Journal::begin`] decided for one call.
#[derive(Debug)]
pub enum Begin {
    /// The journal holds the call: here is its result, as JSON text.
    Replay(String),
    /// Run it live; its entry takes this sequence number.
    Live(u64),
    /// Run it live and journal nothing: a step of `checkpoint-all`, whose
    /// checkpoint is its record.
    Unjournaled,
    /// The run halted; the call must not run.
    Halted(String),
}

tokio::task_local! {
    static UNJOURNALED: ();
}

/// Runs `work` with journaling off: its host calls run live and leave no
/// entries. For concurrent steps, whose order is not deterministic.
pub async fn unjournaled<F: std::future::Future>(work: F) -> F::Output {
    UNJOURNALED.scope((), work).await
}

/// Whether the calls made here run under [`unjournaled`]: a step of
/// `checkpoint-all`, which can neither suspend nor wait.
pub fn is_unjournaled() -> bool {
    UNJOURNALED.try_with(|_| ()).is_ok()
}

/// The SHA-256 of a call's arguments serialized as compact JSON, as hex,
/// written straight into the hash (no text of it is kept). A type that
/// writes object keys in sorted order hashes as its `serde_json::Value`.
pub fn hash_json<T: serde::Serialize + ?Sized>(args: &T) -> String {
    /// Feeds the serializer's output to the hash.
    struct Hasher(Sha256);
    impl std::io::Write for Hasher {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = Hasher(Sha256::new());
    // Writing to the hash cannot fail, and neither can serializing plain data.
    let _ = serde_json::to_writer(&mut hasher, args);
    hex::encode(hasher.0.finalize())
}

/// A recorded run's journal, shared by everything that serves its calls.
pub struct Journal {
    store: Arc<dyn Store>,
    run: String,
    owner: String,
    component: String,
    recorded: BTreeMap<u64, Entry>,
    replay_end: u64,
    buffer_events: bool,
    /// Whether live calls are appended; not when resuming by checkpoints
    /// only, whose passes re-enter rather than replay.
    recording: bool,
    resume_input: Option<String>,
    state: Mutex<State>,
    commits: tokio::sync::Mutex<()>,
    /// Set by [`Journal::halt`]: the guest stops at its next epoch tick.
    stop: Arc<crate::stop::Stop>,
    /// Told after each commit that wrote events: a watcher of the run (a
    /// server's event stream) reads them now rather than at its next poll.
    on_events: Option<Arc<dyn Fn() + Send + Sync>>,
}

#[derive(Default)]
struct State {
    next: u64,
    pending: Batch,
    held: Vec<NewEvent>,
    halt: Option<Halt>,
    halt_after: Option<Halt>,
    checkpoints: BTreeMap<String, Value>,
    decided: Option<Approval>,
    replayed: u64,
    /// When each live call in flight started, for its entry's timing.
    started: BTreeMap<u64, i64>,
    /// The entry of each model's tool call in flight, by turn and call id,
    /// which its stored events name (`entry`) for the run's timeline.
    linked: BTreeMap<(u32, String), u64>,
    /// The last signal of each name a live call of this pass took.
    taken: BTreeMap<String, i64>,
}

impl State {
    /// Appends the entry of call `seq`, which ends where numbering is now.
    fn record(&mut self, seq: u64, interface: &str, function: &str, args_hash: String, result: String) {
        let end = self.next;
        let ended_ms = nexo_store::now_ms();
        let started_ms = self.started.remove(&seq).unwrap_or(ended_ms);
        let entry = Entry {
            seq,
            end,
            interface: interface.to_string(),
            function: function.to_string(),
            args_hash,
            result,
            started_ms: Some(started_ms),
            ended_ms: Some(ended_ms),
        };
        self.pending.journal.push(entry);
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("run", &self.run)
            .field("recorded", &self.recorded.len())
            .finish_non_exhaustive()
    }
}

/// The position of an approval for a call that takes none in the journal
/// (under [`unjournaled`]): its decision binds to the call's capability,
/// tool, arguments and component wherever the call comes again.
pub const UNPOSITIONED: u64 = i64::MAX as u64;

/// How a journal replays what the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// A run created just now that has never started: the store holds no
    /// journal, checkpoint or approval for it, so none is read.
    New,
    /// Answer recorded calls from the journal (the same component).
    Journal,
    /// Ignore the journal: the component changed, so only checkpoints,
    /// looked up by name, carry over.
    CheckpointsOnly,
}

impl Journal {
    /// The journal of `run`, owned by `owner`, loaded from `store`.
    /// `component` is the SHA-256 of what runs now; `buffer_events` holds
    /// events until the run ends or suspends.
    pub async fn open(
        store: Arc<dyn Store>,
        run: &Run,
        owner: &str,
        replay: Replay,
        buffer_events: bool,
    ) -> Result<Journal, StoreError> {
        let recorded: BTreeMap<u64, Entry> = match replay {
            Replay::Journal => store.journal(&run.id).await?.into_iter().map(|e| (e.seq, e)).collect(),
            Replay::New | Replay::CheckpointsOnly => BTreeMap::new(),
        };
        let replay_end = recorded.values().map(|e| e.end).max().unwrap_or(0);
        let (checkpoints, decided) = match replay {
            Replay::New => (BTreeMap::new(), None),
            Replay::Journal | Replay::CheckpointsOnly => (
                store.checkpoints(&run.id).await?.into_iter().collect(),
                store.approval(&run.id).await?.filter(|a| a.decision.is_some()),
            ),
        };
        // By checkpoints only, every pass numbers its calls the same way
        // (from a base no journal reaches), so an approval still binds to
        // one call of one pass; nothing is appended to the old journal.
        let next = match replay {
            Replay::New | Replay::Journal => 0,
            Replay::CheckpointsOnly => CHECKPOINTS_ONLY_BASE,
        };
        Ok(Journal {
            store,
            run: run.id.clone(),
            owner: owner.to_string(),
            component: run.component_sha256.clone(),
            recorded,
            replay_end,
            buffer_events,
            recording: replay != Replay::CheckpointsOnly,
            resume_input: run.resume_input.clone(),
            state: Mutex::new(State { next, checkpoints, decided, ..State::default() }),
            commits: tokio::sync::Mutex::new(()),
            stop: Arc::default(),
            on_events: None,
        })
    }

    /// The same, calling `on_events` after each commit that wrote events.
    pub fn with_event_watch(mut self, on_events: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.on_events = Some(on_events);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// Whether the next call is still answered from the journal (events
    /// of a replayed stretch were recorded the first time).
    pub fn replaying(&self) -> bool {
        self.lock().next < self.replay_end
    }

    /// How many calls the journal answered so far.
    pub fn replayed(&self) -> u64 {
        self.lock().replayed
    }

    /// How many model turns (`nexo:model` `complete`, see
    /// `model_turn::ModelTurn`) the journal holds: a replay answers them all
    /// before the run asks a model anything live.
    pub fn recorded_turns(&self) -> u64 {
        let turn = |e: &&Entry| e.interface == crate::manifest::interface::MODEL_TURN && e.function == "complete";
        self.recorded.values().filter(turn).count() as u64
    }

    /// The tokens the model turns the journal holds used, as their
    /// providers reported them: what the run paid for before this pass.
    pub fn recorded_usage(&self) -> nexo_model::Usage {
        let mut usage = nexo_model::Usage::default();
        let turns = self
            .recorded
            .values()
            .filter(|e| e.interface == crate::manifest::interface::MODEL_TURN && e.function == "complete");
        for entry in turns {
            if let Ok(Ok(response)) =
                serde_json::from_str::<Result<nexo_model::Response, nexo_model::ModelError>>(&entry.result)
            {
                usage.input_tokens = usage.input_tokens.saturating_add(response.usage.input_tokens);
                usage.output_tokens = usage.output_tokens.saturating_add(response.usage.output_tokens);
            }
        }
        usage
    }

    /// Whether the journal holds an entry of `interface` (any version of
    /// its line) at the next call's position: a hook decision to replay.
    pub fn recorded_next(&self, interface: &str) -> bool {
        if self.recorded.is_empty() || is_unjournaled() {
            return false;
        }
        let next = self.lock().next;
        self.recorded.get(&next).is_some_and(|e| same_interface(&e.interface, interface))
    }

    /// Whether the journal holds any entry at the next call's position.
    pub fn replaying_next(&self) -> bool {
        if self.recorded.is_empty() || is_unjournaled() {
            return false;
        }
        let next = self.lock().next;
        self.recorded.contains_key(&next)
    }

    /// Decides how one call runs: from the journal, or live.
    pub fn begin(&self, interface: &str, function: &str, args_hash: &str) -> Begin {
        if is_unjournaled() {
            return Begin::Unjournaled;
        }
        let mut state = self.lock();
        if let Some(halt) = &state.halt {
            return Begin::Halted(halt.summary());
        }
        let seq = state.next;
        state.next += 1;
        let Some(entry) = self.recorded.get(&seq) else {
            state.started.insert(seq, nexo_store::now_ms());
            return Begin::Live(seq);
        };
        if !same_interface(&entry.interface, interface) || entry.function != function || entry.args_hash != args_hash {
            let why = format!(
                "nondeterminism: at call {seq} the journal holds `{}` {} (arguments {}), but the component now \
                 calls `{interface}` {function} (arguments {}); the component does not behave as it did when the \
                 run was recorded, so the run cannot be replayed",
                entry.interface,
                entry.function,
                short(&entry.args_hash),
                short(args_hash)
            );
            state.halt = Some(Halt::Failed(why.clone()));
            return Begin::Halted(why);
        }
        state.next = entry.end.max(seq + 1);
        state.replayed += 1;
        Begin::Replay(entry.result.clone())
    }

    /// Records a live call's result. A `Write` commits it, and everything
    /// pending before it, before returning.
    pub async fn finish(
        &self,
        seq: u64,
        interface: &str,
        function: &str,
        args_hash: &str,
        result: String,
        effect: Effect,
    ) {
        {
            let mut state = self.lock();
            if state.halt.is_some() {
                return;
            }
            if self.recording {
                state.record(seq, interface, function, args_hash.to_string(), result);
            }
            if let Some(halt) = state.halt_after.take() {
                // The suspending call is recorded (a resume replays it, and it
                // returns); the transition commits it.
                state.halt = Some(halt);
                return;
            }
        }
        if effect == Effect::Write {
            self.flush().await;
        }
    }

    /// Answers a read the host makes for the guest synchronously (a clock,
    /// a random seed): from the journal when it holds it, else `live()`'s
    /// value, journaled with the next commit.
    pub fn read_sync<T>(&self, interface: &str, function: &str, live: impl FnOnce() -> T) -> T
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let hash = hash_json(&Value::Null);
        match self.begin(interface, function, &hash) {
            Begin::Replay(text) => match serde_json::from_str(&text) {
                Ok(value) => value,
                Err(e) => {
                    self.halt(Halt::Failed(format!("the journal's entry for {function} cannot be read: {e}")));
                    live()
                }
            },
            Begin::Live(seq) => {
                let value = live();
                let mut state = self.lock();
                if state.halt.is_none() && self.recording {
                    state.record(seq, interface, function, hash, serde_json::to_string(&value).unwrap_or_default());
                }
                value
            }
            Begin::Unjournaled | Begin::Halted(_) => live(),
        }
    }

    /// Commits everything pending, durably. A failure halts the run: a
    /// result that cannot be made durable must not reach the guest.
    pub async fn flush(&self) {
        let _order = self.commits.lock().await;
        let batch = std::mem::take(&mut self.lock().pending);
        if batch.is_empty() {
            return;
        }
        let events = !batch.events.is_empty();
        match self.store.commit(&self.run, &self.owner, batch).await {
            Ok(_) if events => {
                if let Some(told) = &self.on_events {
                    told();
                }
            }
            Ok(_) => {}
            Err(e) => self.halt(Halt::Failed(format!("the run's journal could not be written: {e}"))),
        }
    }

    /// Stops the run; the first halt wins. A guest running Wasm is
    /// interrupted at its next epoch tick ([`Journal::stop_signal`]): a
    /// cancelled run does not spin on until its deadline.
    pub fn halt(&self, halt: Halt) {
        self.lock().halt.get_or_insert(halt);
        self.stop.stop();
    }

    /// What the run's store watches at every epoch tick: set once the run
    /// is halted by [`Journal::halt`] (a cancel, a lost lease, a failed
    /// write). A suspension is not a stop: its guest unwinds by itself.
    pub fn stop_signal(&self) -> &Arc<crate::stop::Stop> {
        &self.stop
    }

    /// Stops the run once the current call's entry is recorded.
    pub fn halt_after_this_call(&self, halt: Halt) {
        self.lock().halt_after = Some(halt);
    }

    /// Why the run halted, if it did.
    pub fn halted(&self) -> Option<Halt> {
        self.lock().halt.clone()
    }

    /// Whether this pass journals its calls: a pass that re-enters by
    /// checkpoints only (a changed component) records none.
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Records the child run `child` with the next write, which carries
    /// the entry of the call that started it.
    pub fn start_child(&self, child: nexo_store::NewChild) {
        self.lock().pending.children.push(child);
    }

    /// What a run's end writes: everything pending, with held events.
    pub fn take_final_batch(&self) -> Batch {
        let mut state = self.lock();
        let mut batch = std::mem::take(&mut state.pending);
        let held = std::mem::take(&mut state.held);
        batch.events.splice(0..0, held);
        batch
    }

    /// Records one event for the run's log, unless it belongs to a stretch
    /// being replayed (recorded the first time).
    pub fn record_event(&self, kind: &str, data: Value) {
        if self.replaying() {
            return;
        }
        let event = NewEvent { kind: kind.to_string(), data, at_ms: nexo_store::now_ms() };
        let mut state = self.lock();
        if state.halt.is_some() {
            return;
        }
        if self.buffer_events { state.held.push(event) } else { state.pending.events.push(event) }
    }

    /// Marks the start of a pass by `owner` in the run's log (a `pass`
    /// event), replaying or not: the run's timeline begins each pass here.
    /// It names the decision the pass goes on with, if any, which the
    /// store forgets once the run ends.
    pub fn record_pass(&self, owner: &str) {
        let mut state = self.lock();
        let decided = state.decided.as_ref().map(|a| {
            serde_json::json!({
                "seq": a.seq,
                "args_hash": a.args_hash,
                "tool": a.tool,
                "decision": a.decision.map(Decision::as_str),
            })
        });
        let event = NewEvent {
            kind: "pass".into(),
            data: serde_json::json!({ "owner": owner, "decided": decided }),
            at_ms: nexo_store::now_ms(),
        };
        if self.buffer_events { state.held.push(event) } else { state.pending.events.push(event) }
    }

    /// Links the model's tool call `id` of `turn` to its live entry `seq`:
    /// its `tool_call` and `tool_result` events name the entry (`entry`), whose
    /// result the run's timeline shows in full.
    pub fn link_call(&self, turn: u32, id: &str, seq: u64) {
        self.lock().linked.insert((turn, id.to_string()), seq);
    }

    /// The entry linked to the model's tool call `id` of `turn`; `done`
    /// forgets the link (the call's result is out).
    fn linked(&self, turn: u32, id: &str, done: bool) -> Option<u64> {
        let mut state = self.lock();
        let key = (turn, id.to_string());
        if done { state.linked.remove(&key) } else { state.linked.get(&key).copied() }
    }

    /// The id of the last signal of `name` the run took (0 for none): what
    /// its journal's `take-signal` entries and this pass's live ones say,
    /// so a replay takes the same signals and a later wait the next one.
    pub fn last_signal_taken(&self, name: &str) -> i64 {
        let hash = hash_json(&name);
        let took = |e: &&Entry| e.function == TAKE_SIGNAL && e.args_hash == hash;
        let id = |e: &Entry| serde_json::from_str::<Value>(&e.result).ok()?.get("Ok")?.get("id")?.as_i64();
        let recorded = self.recorded.values().filter(took).filter_map(id).max().unwrap_or(0);
        recorded.max(self.lock().taken.get(name).copied().unwrap_or(0))
    }

    /// The first signal of `name` sent to the run after the last it took.
    pub async fn next_signal(&self, name: &str) -> Result<Option<Signal>, StoreError> {
        self.store.next_signal(&self.run, name, self.last_signal_taken(name)).await
    }

    /// Notes that a live call took `signal`: the next wait for its name
    /// takes a later one.
    pub fn took_signal(&self, signal: &Signal) {
        self.lock().taken.insert(signal.name.clone(), signal.id);
    }

    /// What a wait for `name` waits for now.
    pub fn signal_wait(&self, name: &str) -> SignalWait {
        SignalWait { name: name.to_string(), after: self.last_signal_taken(name) }
    }

    /// The JSON given at the latest resume.
    pub fn resume_input(&self) -> Option<String> {
        self.resume_input.clone()
    }

    /// A stored checkpoint's value.
    pub fn checkpoint(&self, name: &str) -> Option<Value> {
        self.lock().checkpoints.get(name).cloned()
    }

    /// Stores a checkpoint with the next commit (write-once: a stored one
    /// is kept), with a `checkpoint` event that carries the name only.
    pub fn put_checkpoint(&self, name: &str, value: Value) {
        let mut state = self.lock();
        if state.halt.is_some() || state.checkpoints.contains_key(name) {
            return;
        }
        state.checkpoints.insert(name.to_string(), value.clone());
        state.pending.checkpoints.push((name.to_string(), value));
        let event = NewEvent {
            kind: "checkpoint".into(),
            data: serde_json::json!({ "name": name }),
            at_ms: nexo_store::now_ms(),
        };
        if self.buffer_events { state.held.push(event) } else { state.pending.events.push(event) }
    }

    /// The gate's `approve` verdict for the live call `seq`: a decision the
    /// operator made for exactly this call applies; anything else suspends
    /// the run with a new pending approval (fail closed). The approval's
    /// `args_hash` is the hash of the whole call (capability, tool and the
    /// arguments' hash `args_hash`), so a decision that names it names the
    /// tool too.
    pub fn approval(
        &self,
        seq: u64,
        subject: &str,
        tool: &str,
        arguments: &Value,
        args_hash: &str,
        message: String,
    ) -> Result<(), ToolError> {
        // The hash a decision names covers the whole call, not its arguments
        // alone: two tools given the same arguments at one position (an
        // unjournaled call, or a checkpoints-only pass) are two calls.
        let call_hash = hash_json(&(subject, tool, args_hash));
        let mut state = self.lock();
        // An approval an older nexo recorded names the arguments' hash alone;
        // its capability and tool, compared here too, bind it to the call
        // all the same, so a decision made on it after an upgrade applies.
        let matches = state.decided.as_ref().is_some_and(|a| {
            a.seq == seq
                && a.capability == subject
                && a.tool == tool
                && (a.args_hash == call_hash || a.args_hash == args_hash)
                && a.component_sha256 == self.component
        });
        if matches && let Some(decided) = state.decided.take() {
            return match decided.decision {
                Some(Decision::Approved) => Ok(()),
                _ => Err(ToolError::Denied(format!("the operator denied `{tool}`"))),
            };
        }
        let approval = Approval {
            seq,
            capability: subject.to_string(),
            tool: tool.to_string(),
            arguments: arguments.clone(),
            args_hash: call_hash,
            component_sha256: self.component.clone(),
            decision: None,
            created_ms: nexo_store::now_ms(),
        };
        let reason = format!("approval: {message}");
        state.halt.get_or_insert(Halt::Suspend {
            reason,
            resume_key: None,
            approval: Some(approval),
            wake_ms: None,
            signal: None,
        });
        Err(ToolError::ApprovalRequired(message))
    }
}

/// Whether the interface a journal entry `recorded` is the one `called`
/// now: the same name, at a version of the same compatible line. A run
/// recorded before nexo moved to a newer minor version of its contract
/// (`nexo:plugin/durable@0.1.2`, replayed by a host of 0.1.3) replays as it
/// would have; another name or an incompatible version does not.
fn same_interface(recorded: &str, called: &str) -> bool {
    match (recorded.split_once('@'), called.split_once('@')) {
        (Some((name, old)), Some((now_name, now))) => name == now_name && version_line(old) == version_line(now),
        _ => recorded == called,
    }
}

/// A version's compatible line, as semver reads it: its major number, and
/// its minor number too before 1.0.
fn version_line(version: &str) -> (&str, Option<&str>) {
    let mut numbers = version.split('.');
    let major = numbers.next().unwrap_or_default();
    (major, if major == "0" { numbers.next() } else { None })
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The run's event sink: events reach the display (`inner`) and the run's
/// log, except while a stretch already recorded is being replayed.
pub struct JournalSink {
    /// The journal.
    pub journal: Arc<Journal>,
    /// Where events are shown.
    pub inner: Arc<dyn EventSink>,
}

impl EventSink for JournalSink {
    fn emit(&self, event: &Event) {
        if self.journal.replaying() {
            return;
        }
        self.inner.emit(event);
        let (kind, seq) = match event {
            // Kept, so a stream of the run (the server's, `nexo runs events
            // --follow`) shows that the model works; a replayed turn's start
            // was recorded the first time and is not recorded again.
            Event::TurnStarted { .. } => ("turn_started", None),
            Event::ToolCall { turn, id, .. } => ("tool_call", self.journal.linked(*turn, id, false)),
            Event::ToolResult { turn, id, .. } => ("tool_result", self.journal.linked(*turn, id, true)),
            Event::Done { .. } => ("done", None),
            Event::Hook { .. } => ("hook", None),
            // Streamed text and the wait for the model are for the display only.
            Event::TextDelta { .. } | Event::Waiting { .. } => return,
        };
        if let Ok(mut data) = serde_json::to_value(event) {
            // The entry holding the call's full result, for the timeline.
            if let (Some(seq), Some(fields)) = (seq, data.as_object_mut()) {
                fields.insert("entry".into(), seq.into());
            }
            self.journal.record_event(kind, data);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use nexo_store::{Lease, MemoryStore, NewRun, RunStatus};
    use serde_json::json;

    use super::*;

    /// Records run `r1` in `store` as `status`; a running one is owned by `o`.
    pub(crate) async fn run_r1(store: &Arc<dyn Store>, status: RunStatus) -> Run {
        let lease = (status == RunStatus::Running).then(|| Lease { owner: "o".into(), until_ms: i64::MAX / 2 });
        let new = NewRun {
            id: "r1".into(),
            agent: "a".into(),
            kind: "component".into(),
            source: "a.wasm".into(),
            component_sha256: "ab".repeat(32),
            input: String::new(),
            grant: json!({}),
            status,
            lease,
            created_ms: 1,
            session: None,
            tenant: None,
        };
        store.create_run(new).await.unwrap();
        store.run("r1").await.unwrap().unwrap()
    }

    async fn journal(store: &Arc<dyn Store>, decided: Option<Approval>) -> Journal {
        let run = store.run("r1").await.unwrap().unwrap();
        let journal = Journal::open(store.clone(), &run, "o", Replay::New, false).await.unwrap();
        journal.lock().decided = decided;
        journal
    }

    /// A journal recorded under an older version of the same contract line
    /// replays; another line, or another interface, is nondeterminism.
    #[test]
    fn a_journal_of_an_older_minor_version_replays() {
        assert!(same_interface("nexo:plugin/durable@0.1.2", "nexo:plugin/durable@0.1.3"));
        assert!(same_interface("nexo:plugin/durable@0.1.0", "nexo:plugin/durable@0.1.2"));
        assert!(same_interface("wasi:clocks/wall-clock@0.2.0", "wasi:clocks/wall-clock@0.2.6"));
        assert!(same_interface("x:y/z@1.2.0", "x:y/z@1.5.1"));
        assert!(same_interface("nexo:model", "nexo:model"));
        assert!(!same_interface("nexo:plugin/durable@0.1.2", "nexo:plugin/durable@0.2.0"));
        assert!(!same_interface("x:y/z@1.2.0", "x:y/z@2.0.0"));
        assert!(!same_interface("nexo:plugin/durable@0.1.2", "nexo:plugin/tools@0.1.2"));
        assert!(!same_interface("nexo:plugin/durable@0.1.2", "nexo:plugin/durable"));
        assert!(!same_interface("nexo:model", "nexo:models"));
    }

    #[tokio::test]
    async fn begin_answers_an_older_minor_versions_entry_and_refuses_another_interface() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        run_r1(&store, RunStatus::Running).await;
        let entry = |seq: u64, interface: &str| Entry {
            seq,
            end: seq + 1,
            interface: interface.into(),
            function: "checkpoint".into(),
            args_hash: "00".repeat(32),
            result: format!("{{\"ok\":{seq}}}"),
            started_ms: None,
            ended_ms: None,
        };
        let journal = vec![entry(0, "nexo:plugin/durable@0.1.0"), entry(1, "nexo:plugin/durable@0.1.0")];
        store.commit("r1", "o", nexo_store::Batch { journal, ..Default::default() }).await.unwrap();
        let run = store.run("r1").await.unwrap().unwrap();
        let journal = Journal::open(store.clone(), &run, "o", Replay::Journal, false).await.unwrap();
        let hash = "00".repeat(32);
        match journal.begin(crate::manifest::interface::DURABLE, "checkpoint", &hash) {
            Begin::Replay(result) => assert_eq!(result, r#"{"ok":0}"#),
            other => panic!("expected the recorded answer, got {other:?}"),
        }
        match journal.begin("nexo:plugin/tools@0.1.0", "checkpoint", &hash) {
            Begin::Halted(why) => assert!(why.contains("nondeterminism: at call 1"), "{why}"),
            other => panic!("expected nondeterminism, got {other:?}"),
        }
    }

    /// A watcher of the run hears of each commit that wrote its events, once
    /// they are in the store, and of no other.
    #[tokio::test]
    async fn a_commit_of_events_tells_the_watcher_after_it_is_stored() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        run_r1(&store, RunStatus::Running).await;
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (seen, reader) = (told.clone(), store.clone());
        let journal = journal(&store, None).await.with_event_watch(Arc::new(move || {
            let stored = futures::executor::block_on(reader.events("r1", 0, 100)).unwrap().len();
            seen.lock().unwrap().push(stored);
        }));
        journal.flush().await;
        assert!(told.lock().unwrap().is_empty(), "nothing was committed");
        journal.record_event("turn_started", json!({"turn": 1}));
        journal.flush().await;
        assert_eq!(*told.lock().unwrap(), [1], "told once, with the event stored");
        let Begin::Live(seq) = journal.begin("nexo:test/x", "f", "h") else { panic!("a live call") };
        journal.finish(seq, "nexo:test/x", "f", "h", "r".into(), crate::journal::Effect::Write).await;
        assert_eq!(told.lock().unwrap().len(), 1, "a commit of no event tells nobody");
    }

    /// The call a decision names is the whole call: a decision for one
    /// tool never passes another given the same arguments at the same
    /// position (as an unjournaled call, or a checkpoints-only pass, has).
    #[tokio::test]
    async fn a_decision_binds_to_the_tool_as_well_as_the_arguments() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        run_r1(&store, RunStatus::Queued).await;
        let args = json!({"path": "x"});
        let hash = hash_json(&args);
        let asked = journal(&store, None).await;
        let err = asked.approval(UNPOSITIONED, "files", "read_file", &args, &hash, "ask".into());
        assert!(matches!(err, Err(ToolError::ApprovalRequired(_))), "{err:?}");
        let Some(Halt::Suspend { approval: Some(mut shown), .. }) = asked.halted() else { panic!("no approval") };
        assert_ne!(shown.args_hash, hash, "the hash names the tool too");
        shown.decision = Some(Decision::Approved);

        let other = journal(&store, Some(shown.clone())).await;
        let err = other.approval(UNPOSITIONED, "files", "delete_file", &args, &hash, "ask".into());
        assert!(matches!(err, Err(ToolError::ApprovalRequired(_))), "another tool is not approved: {err:?}");
        let Some(Halt::Suspend { approval: Some(pending), .. }) = other.halted() else { panic!("no approval") };
        assert_ne!(pending.args_hash, shown.args_hash, "its pending call names a hash no decision for read_file has");

        let same = journal(&store, Some(shown)).await;
        assert!(same.approval(UNPOSITIONED, "files", "read_file", &args, &hash, "ask".into()).is_ok());
    }

    /// A decision binds to the call's position, its capability and the
    /// component that made it: the same arguments at another position,
    /// under another capability, or from another component (a resume that
    /// allows a changed component) ask again, and only the call shown goes
    /// through.
    #[tokio::test]
    async fn a_decision_binds_to_the_position_the_capability_and_the_component() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        run_r1(&store, RunStatus::Queued).await;
        let args = json!({"path": "notes.txt", "content": "hi"});
        let hash = hash_json(&args);
        let asked = journal(&store, None).await;
        let err = asked.approval(7, "write", "write_file", &args, &hash, "ask".into());
        assert!(matches!(err, Err(ToolError::ApprovalRequired(_))), "{err:?}");
        let Some(Halt::Suspend { approval: Some(mut shown), .. }) = asked.halted() else { panic!("no approval") };
        assert_eq!((shown.seq, shown.component_sha256.as_str()), (7, "ab".repeat(32).as_str()));
        shown.decision = Some(Decision::Approved);

        let changed = "cd".repeat(32);
        for (seq, capability, component) in [(8, "write", None), (7, "shell", None), (7, "write", Some(&changed))] {
            let mut other = journal(&store, Some(shown.clone())).await;
            if let Some(sha) = component {
                // As a resume that allows a changed component opens it.
                other.component = sha.clone();
            }
            let err = other.approval(seq, capability, "write_file", &args, &hash, "ask".into());
            assert!(matches!(err, Err(ToolError::ApprovalRequired(_))), "{seq} {capability} {component:?}: {err:?}");
            let Some(Halt::Suspend { approval: Some(pending), .. }) = other.halted() else { panic!("no approval") };
            assert_eq!((pending.seq, pending.decision), (seq, None), "a new pending call, undecided");
            assert_eq!(pending.component_sha256, component.unwrap_or(&shown.component_sha256).as_str());
        }

        let same = journal(&store, Some(shown)).await;
        assert!(same.approval(7, "write", "write_file", &args, &hash, "ask".into()).is_ok(), "the call shown");
    }

    /// A pending approval that nexo at fb8ca2c recorded (in
    /// store/tests/fixtures/sqlite/v6-fb8ca2c.db, before the hash named the
    /// whole call) names the arguments' hash alone: approved after an
    /// upgrade, it lets exactly its call through, and still no other tool's.
    #[tokio::test]
    async fn a_decision_on_an_approval_an_older_nexo_recorded_applies_to_its_call() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        run_r1(&store, RunStatus::Queued).await;
        let args = json!(["notes.txt", "hello"]);
        let hash = hash_json(&args);
        assert_eq!(hash, "cc61668d8a4d14c1b8d21506971746566f64f53bd272eaaba8c088c8d742e493", "the fixture's args_hash");
        let recorded = Approval {
            seq: 5,
            capability: "write".into(),
            tool: "write-file".into(),
            arguments: args.clone(),
            args_hash: hash.clone(),
            component_sha256: "ab".repeat(32),
            decision: Some(Decision::Approved),
            created_ms: 1,
        };
        let upgraded = journal(&store, Some(recorded.clone())).await;
        let passed = upgraded.approval(5, "write", "write-file", &args, &hash, "write".into());
        assert!(passed.is_ok(), "the decision applies after the upgrade: {passed:?}");
        assert!(upgraded.halted().is_none(), "no new approval is asked for");

        let other = journal(&store, Some(recorded)).await;
        let err = other.approval(5, "write", "delete-file", &args, &hash, "delete".into());
        assert!(matches!(err, Err(ToolError::ApprovalRequired(_))), "another tool is not approved: {err:?}");
    }
}
