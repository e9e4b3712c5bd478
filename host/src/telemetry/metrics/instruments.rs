//! The instruments, made once from the global meter after
//! [`super::Metrics::install`], and the function each measuring place
//! calls. Until then (and in a process with no metrics configured) every
//! function returns at its first load: no attribute is built, no
//! instrument is made.
//!
//! The GenAI ones follow the OpenTelemetry semantic conventions for
//! generative AI (1.42.0, as the spans: `gen_ai.client.token.usage`,
//! `gen_ai.client.operation.duration`, with their recommended buckets);
//! nexo's own are named `nexo.*`. Attributes carry names, ids, counts and
//! outcomes only: never a message, a tool's arguments or a secret.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nexo_model::{ModelError, Response};
use nexo_store::RunStatus;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, UpDownCounter};

/// Set once a meter provider is installed.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The semantic conventions' buckets for `gen_ai.client.token.usage`.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];

/// The semantic conventions' buckets for `gen_ai.client.operation.duration`.
const MODEL_SECONDS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/// Runs and passes: from a fraction of a second to the hours a run may
/// wait for a person.
const RUN_SECONDS: [f64; 14] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0];

struct Instruments {
    token_usage: Histogram<u64>,
    model_duration: Histogram<f64>,
    runs_ended: Counter<u64>,
    run_duration: Histogram<f64>,
    pass_duration: Histogram<f64>,
    running: UpDownCounter<i64>,
    quota_refusals: Counter<u64>,
}

/// From here on the instruments are made and used.
pub(crate) fn enable() {
    ENABLED.store(true, Ordering::Release);
}

/// `Some` once a meter provider is installed.
pub(crate) fn enabled() -> Option<()> {
    ENABLED.load(Ordering::Acquire).then_some(())
}

fn get() -> Option<&'static Instruments> {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    enabled().filter(|()| !crate::telemetry::pause::paused())?;
    Some(INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("nexo");
        Instruments {
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            model_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(MODEL_SECONDS.to_vec())
                .build(),
            runs_ended: meter
                .u64_counter("nexo.runs.ended")
                .with_unit("{run}")
                .with_description("Runs that ended: done, failed or cancelled")
                .build(),
            run_duration: meter
                .f64_histogram("nexo.run.duration")
                .with_unit("s")
                .with_description("From a run's creation to its end, waits included")
                .with_boundaries(RUN_SECONDS.to_vec())
                .build(),
            pass_duration: meter
                .f64_histogram("nexo.pass.duration")
                .with_unit("s")
                .with_description("One pass of a run on this node, by how it left the run")
                .with_boundaries(RUN_SECONDS.to_vec())
                .build(),
            running: meter
                .i64_up_down_counter("nexo.instances.running")
                .with_unit("{instance}")
                .with_description("Runs whose pass is under way on this node")
                .build(),
            quota_refusals: meter
                .u64_counter("nexo.quota.refusals")
                .with_unit("{refusal}")
                .with_description("A tenant's run refused or held by a quota")
                .build(),
        }
    }))
}

/// The tenant attribute, when the run has one.
fn tenant(attributes: &mut Vec<KeyValue>, tenant: Option<&str>) {
    if let Some(t) = tenant {
        attributes.push(KeyValue::new("nexo.tenant", t.to_string()));
    }
}

/// One call to a model provider, as it returned after `elapsed`: its
/// duration, and on success its tokens and the model that answered.
pub(crate) fn model_call(provider: &str, model: &str, elapsed: Duration, result: &Result<Response, ModelError>) {
    let Some(m) = get() else { return };
    let seconds = elapsed.as_secs_f64();
    match result {
        Ok(response) => {
            let usage = &response.usage;
            let answered = response.answered.model.as_deref();
            ANSWERED.with_borrow_mut(|last| {
                if !last.as_ref().is_some_and(|sets| sets.names == (provider, model, answered)) {
                    *last = Some(AnsweredSets::new(provider, model, answered));
                }
                let Some(sets) = last.as_ref() else { return };
                m.token_usage.record(usage.input_tokens, &sets.input);
                m.token_usage.record(usage.output_tokens, &sets.output);
                m.model_duration.record(seconds, &sets.call);
            });
        }
        Err(e) => {
            let mut attributes = call_attributes(provider, model, None);
            attributes.push(KeyValue::new("error.type", error_type(e)));
            m.model_duration.record(seconds, &attributes);
        }
    }
}

thread_local! {
    /// The attribute sets of this thread's last answered model call: a run
    /// calls one model, so its calls after the first build none.
    static ANSWERED: RefCell<Option<AnsweredSets>> = const { RefCell::new(None) };
}

/// The attribute sets of an answered call: its duration's, and its input
/// and output tokens'.
struct AnsweredSets {
    names: Names,
    call: Vec<KeyValue>,
    input: Vec<KeyValue>,
    output: Vec<KeyValue>,
}

/// Provider, requested model, answering model.
struct Names(String, String, Option<String>);

impl PartialEq<(&str, &str, Option<&str>)> for Names {
    fn eq(&self, (provider, model, answered): &(&str, &str, Option<&str>)) -> bool {
        self.0 == *provider && self.1 == *model && self.2.as_deref() == *answered
    }
}

impl AnsweredSets {
    fn new(provider: &str, model: &str, answered: Option<&str>) -> AnsweredSets {
        let call = call_attributes(provider, model, answered);
        let tokens = |kind: &'static str| {
            let mut set = call.clone();
            set.push(KeyValue::new("gen_ai.token.type", kind));
            set
        };
        AnsweredSets {
            names: Names(provider.to_string(), model.to_string(), answered.map(str::to_string)),
            input: tokens("input"),
            output: tokens("output"),
            call,
        }
    }
}

fn call_attributes(provider: &str, model: &str, answered: Option<&str>) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", provider.to_string()),
        KeyValue::new("gen_ai.request.model", model.to_string()),
    ];
    if let Some(answered) = answered {
        attributes.push(KeyValue::new("gen_ai.response.model", answered.to_string()));
    }
    attributes
}

/// A provider's failure as a low-cardinality `error.type`: the HTTP status
/// it answered, or what went wrong.
fn error_type(e: &ModelError) -> String {
    match e {
        ModelError::Provider { status, .. } => status.to_string(),
        ModelError::Unavailable { .. } => "unavailable".into(),
        ModelError::Protocol { .. } => "protocol".into(),
        ModelError::Config(_) => "config".into(),
        ModelError::Refused(_) => "refused".into(),
    }
}

/// A pass under way: counted in `nexo.instances.running` until dropped,
/// however the pass ends (a lost lease drops it mid-way).
pub(crate) struct Running(Option<Vec<KeyValue>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let (Some(m), Some(attributes)) = (get(), &self.0) {
            m.running.add(-1, attributes);
        }
    }
}

/// A pass of a run of `tenant` starts on this node.
pub(crate) fn pass_started(of: Option<&str>) -> Running {
    let Some(m) = get() else { return Running(None) };
    let mut attributes = Vec::new();
    tenant(&mut attributes, of);
    m.running.add(1, &attributes);
    Running(Some(attributes))
}

/// A pass of a run of `tenant` left the run `status` after `elapsed`
/// (`queued` when it failed and its job tries again).
pub(crate) fn pass_ended(of: Option<&str>, status: RunStatus, elapsed: Duration) {
    let Some(m) = get() else { return };
    let mut attributes = vec![KeyValue::new("nexo.run.status", status.as_str())];
    tenant(&mut attributes, of);
    m.pass_duration.record(elapsed.as_secs_f64(), &attributes);
}

/// A run of `tenant`, created at `created_ms`, ended `status` (done,
/// failed or cancelled) now. Called once per run, where it ends.
pub(crate) fn run_ended(of: Option<&str>, status: RunStatus, created_ms: i64) {
    let Some(m) = get() else { return };
    let mut attributes = vec![KeyValue::new("nexo.run.status", status.as_str())];
    tenant(&mut attributes, of);
    m.runs_ended.add(1, &attributes);
    let ms = nexo_store::now_ms().saturating_sub(created_ms).max(0);
    m.run_duration.record(ms as f64 / 1000.0, &attributes);
}

/// A tenant's run refused at `step` (`start`, `go-on`, `claim`) by
/// `quota` (its policy key, such as `concurrent-runs`).
pub(crate) fn quota_refused(of: &str, quota: &'static str, step: &'static str) {
    let Some(m) = get() else { return };
    let attributes = [
        KeyValue::new("nexo.tenant", of.to_string()),
        KeyValue::new("nexo.quota", quota),
        KeyValue::new("nexo.quota.step", step),
    ];
    m.quota_refusals.add(1, &attributes);
}
