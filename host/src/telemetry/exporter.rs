//! The thread that exports ended spans: it takes the queue's batch when it
//! is full or every `OTEL_BSP_SCHEDULE_DELAY` (5 s), builds the SDK's
//! `SpanData` from it, and hands that to the OTLP/HTTP exporter, which
//! encodes it (protobuf) and sends it. What is still queued at shutdown is
//! sent before the thread ends.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Link, SpanId, Status};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};

use super::recorder::{Batch, Ended, Queue, Val};

/// The batching the operator's `OTEL_BSP_*` variables ask for, with the
/// specification's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Batching {
    /// `OTEL_BSP_SCHEDULE_DELAY` (ms): how often a partial batch is sent.
    pub(super) delay: Duration,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans held before new ones are dropped.
    pub(super) max_queue: usize,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: spans per export.
    pub(super) max_batch: usize,
    /// How long a shutdown keeps sending what is queued: what is left
    /// then is dropped, so a receiver that does not answer cannot hold a
    /// process that is stopping.
    pub(super) shutdown: Duration,
}

impl Batching {
    /// From the environment.
    pub(super) fn from_env() -> Batching {
        Batching::from(|name| std::env::var(name).ok())
    }

    fn from(var: impl Fn(&str) -> Option<String>) -> Batching {
        let number = |name: &str, default: u64| {
            var(name).and_then(|v| v.trim().parse::<u64>().ok()).filter(|n| *n > 0).unwrap_or(default)
        };
        let max_queue = usize::try_from(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)).unwrap_or(2048);
        let max_batch = usize::try_from(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)).unwrap_or(512);
        Batching {
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
            max_queue,
            // The specification: a batch is never larger than the queue.
            max_batch: max_batch.min(max_queue),
            shutdown: SHUTDOWN,
        }
    }
}

/// How long a shutdown sends what is queued (as the SDK's processor did).
const SHUTDOWN: Duration = Duration::from_secs(5);

/// The exporting thread, running until [`Exporting::shutdown`].
#[derive(Debug)]
pub struct Exporting {
    stop: Arc<AtomicBool>,
    queue: &'static Queue,
    thread: Option<JoinHandle<()>>,
}

impl Exporting {
    /// Starts the thread that drains `queue` into `exporter`.
    pub(super) fn start<E: SpanExporter + 'static>(
        queue: &'static Queue,
        exporter: E,
        scope: InstrumentationScope,
        batching: Batching,
    ) -> std::io::Result<Exporting> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nexo-span-export".into())
            .spawn(move || run(queue, exporter, &scope, batching, &stopping))?;
        Ok(Exporting { stop, queue, thread: Some(thread) })
    }

    /// Sends what is queued and stops the thread, waiting for it: about
    /// five seconds at most, and one export's timeout.
    pub fn shutdown(mut self) -> Result<(), String> {
        {
            // Set under the lock, so the thread cannot miss it between
            // looking and waiting.
            let _batch = self.queue.lock();
            self.stop.store(true, Ordering::Release);
        }
        self.queue.wake();
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(_)) => Err("the span exporter's thread panicked".into()),
            _ => Ok(()),
        }
    }
}

fn run<E: SpanExporter>(
    queue: &'static Queue,
    exporter: E,
    scope: &InstrumentationScope,
    batching: Batching,
    stop: &AtomicBool,
) {
    let mut taken = Batch::default();
    let mut failing = false;
    let mut deadline = None;
    loop {
        let stopping = {
            let batch = queue.lock();
            let mut batch = queue.wait(batch, batching.delay, || stop.load(Ordering::Acquire));
            std::mem::swap(&mut *batch, &mut taken);
            stop.load(Ordering::Acquire)
        };
        if taken.dropped > 0 {
            tracing::warn!(
                target: "nexo::telemetry",
                "telemetry: {} spans were dropped, the export queue being full (OTEL_BSP_MAX_QUEUE_SIZE)",
                taken.dropped
            );
        }
        for (n, chunk) in taken.spans.chunks(queue.max_batch.max(1)).enumerate() {
            if stop.load(Ordering::Acquire)
                && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + batching.shutdown)
            {
                let left = taken.spans.len() - n * queue.max_batch.max(1);
                tracing::warn!(
                    target: "nexo::telemetry",
                    "telemetry: {left} spans were not sent: the receiver did not take them before shutdown"
                );
                break;
            }
            let spans = chunk.iter().map(|span| span_data(span, &taken, scope)).collect();
            match futures::executor::block_on(exporter.export(spans)) {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(target: "nexo::telemetry", "telemetry: spans are exported again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(target: "nexo::telemetry", "telemetry: spans could not be exported: {e}");
                }
                Err(_) => {}
            }
        }
        taken.clear();
        if stopping {
            break;
        }
    }
    if let Err(e) = exporter.shutdown() {
        tracing::warn!(target: "nexo::telemetry", "telemetry: the span exporter did not shut down cleanly: {e}");
    }
}

/// The SDK's record of `span`, whose strings are in `batch`.
fn span_data(span: &Ended, batch: &Batch, scope: &InstrumentationScope) -> SpanData {
    let text = |t: super::recorder::Text| t.of(&batch.text).to_string();
    let (first, last) = span.attributes;
    let mut attributes: Vec<KeyValue> = batch.attributes[first..last]
        .iter()
        .map(|a| {
            let value = match a.value {
                Val::Text(t) => Value::from(text(t)),
                Val::OneText(t) => Value::Array(vec![StringValue::from(text(t))].into()),
                Val::Int(i) => Value::I64(i),
                Val::Bool(b) => Value::Bool(b),
                Val::Float(f) => Value::F64(f),
            };
            KeyValue::new(a.key.clone(), value)
        })
        .collect();
    attributes.extend(span.other.iter().cloned());
    let mut links = SpanLinks::default();
    links.links = span.links.iter().map(|cx| Link::with_context(cx.clone())).collect();
    let (parent, parent_remote) = span.parent.unwrap_or((SpanId::INVALID, false));
    SpanData {
        span_context: span.context.clone(),
        parent_span_id: parent,
        parent_span_is_remote: parent_remote,
        span_kind: span.kind.clone(),
        name: Cow::Owned(text(span.name)),
        start_time: span.start,
        end_time: span.end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links,
        status: span.error.map_or(Status::Unset, |e| Status::error(text(e))),
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::SystemTime;

    use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceFlags, TraceId, TraceState};

    use super::*;
    use crate::telemetry::recorder::{Fields, Live};

    fn context(span: u64) -> SpanContext {
        let trace = TraceId::from_bytes([7; 16]);
        SpanContext::new(trace, SpanId::from_bytes(span.to_be_bytes()), TraceFlags::SAMPLED, false, TraceState::NONE)
    }

    /// What a span recorded comes out as the SDK's record of it: name,
    /// ids, parent, kind, times, every attribute in order (its strings
    /// where they belong, however many spans share the batch), links and
    /// an error status.
    #[test]
    fn a_recorded_span_is_exported_as_it_was_recorded() {
        let queue: &'static Queue = Box::leak(Box::new(Queue::new(8, 8)));
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let end = start + Duration::from_millis(1500);
        for (n, tool) in ["glob", "write_file"].into_iter().enumerate() {
            let mut fields = Fields::new();
            fields.name(&["execute_tool ", tool]);
            fields.text("gen_ai.tool.name", tool);
            fields.int("n", n as i64);
            let mut span = Live::new(
                queue,
                context(10 + n as u64),
                Some((SpanId::from_bytes([1; 8]), n == 1)),
                SpanKind::Internal,
                start,
                fields,
                vec![context(99)],
            );
            span.set_attribute(KeyValue::new("nexo.replayed", true));
            span.set_attribute(KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(vec![StringValue::from("stop")].into()),
            ));
            span.set_attribute(KeyValue::new("several", Value::Array(vec![1i64, 2].into())));
            span.set_status(Status::error(format!("failed-{tool}")));
            span.end_with_timestamp(end);
            // Ended once: ending again, or setting anything after, records nothing.
            span.set_attribute(KeyValue::new("late", 1));
            span.end_with_timestamp(end + Duration::from_secs(1));
        }
        let batch = queue.lock();
        assert_eq!(batch.spans.len(), 2);
        let scope = InstrumentationScope::builder("nexo").build();
        let second = span_data(&batch.spans[1], &batch, &scope);
        assert_eq!(second.name, "execute_tool write_file");
        assert_eq!(second.span_context, context(11));
        assert_eq!((second.parent_span_id, second.parent_span_is_remote), (SpanId::from_bytes([1; 8]), true));
        assert_eq!((second.start_time, second.end_time), (start, end));
        assert_eq!(
            second.attributes,
            vec![
                KeyValue::new("gen_ai.tool.name", "write_file"),
                KeyValue::new("n", 1),
                KeyValue::new("nexo.replayed", true),
                KeyValue::new("gen_ai.response.finish_reasons", Value::Array(vec![StringValue::from("stop")].into())),
                KeyValue::new("several", Value::Array(vec![1i64, 2].into())),
            ]
        );
        assert_eq!(second.status, Status::error("failed-write_file"));
        assert_eq!(second.links.links.iter().map(|l| l.span_context.clone()).collect::<Vec<_>>(), vec![context(99)]);
        let first = span_data(&batch.spans[0], &batch, &scope);
        assert_eq!(first.name, "execute_tool glob");
        assert_eq!(first.attributes[0], KeyValue::new("gen_ai.tool.name", "glob"));
        assert!(!first.parent_span_is_remote);
    }

    /// An exporter that keeps what it is given, taking `pause` per export.
    #[derive(Debug, Default, Clone)]
    struct Collect {
        spans: Arc<std::sync::Mutex<Vec<SpanData>>>,
        pause: Duration,
    }

    impl SpanExporter for Collect {
        async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
            std::thread::sleep(self.pause);
            self.spans.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    impl Collect {
        fn count(&self) -> usize {
            self.spans.lock().unwrap().len()
        }
    }

    fn end_spans(queue: &'static Queue, n: u64) {
        for id in 0..n {
            let mut fields = Fields::new();
            fields.name(&["span ", &id.to_string()]);
            let mut span =
                Live::new(queue, context(id + 1), None, SpanKind::Internal, SystemTime::now(), fields, vec![]);
            span.end();
        }
    }

    /// A full batch is sent at once, without waiting for the delay; what
    /// is left is sent at shutdown, however long the delay.
    #[test]
    fn a_full_batch_goes_at_once_and_the_rest_at_shutdown() {
        let queue: &'static Queue = Box::leak(Box::new(Queue::new(16, 2)));
        let collect = Collect::default();
        let hour = Duration::from_secs(3600);
        let batching = Batching { delay: hour, max_queue: 16, max_batch: 2, shutdown: SHUTDOWN };
        let scope = InstrumentationScope::builder("nexo").build();
        let exporting = Exporting::start(queue, collect.clone(), scope, batching).unwrap();
        end_spans(queue, 2);
        let waited = Instant::now();
        while collect.count() < 2 {
            assert!(waited.elapsed() < Duration::from_secs(30), "a full batch was not sent");
            std::thread::yield_now();
        }
        end_spans(queue, 1);
        exporting.shutdown().unwrap();
        let names: Vec<String> = collect.spans.lock().unwrap().iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names, ["span 0", "span 1", "span 0"]);
    }

    /// A receiver that is slow to take spans cannot hold a stopping
    /// process: past the shutdown's time, what is left is dropped.
    #[test]
    fn a_slow_receiver_does_not_hold_a_shutdown() {
        let queue: &'static Queue = Box::leak(Box::new(Queue::new(64, 1)));
        let collect = Collect { pause: Duration::from_millis(50), ..Collect::default() };
        let batching = Batching {
            delay: Duration::from_secs(3600),
            max_queue: 64,
            max_batch: 1,
            shutdown: Duration::from_millis(100),
        };
        let scope = InstrumentationScope::builder("nexo").build();
        let exporting = Exporting::start(queue, collect.clone(), scope, batching).unwrap();
        end_spans(queue, 40);
        exporting.shutdown().unwrap();
        // 40 exports of 50 ms each would take 2 s; about 3 fit in 100 ms.
        assert!(collect.count() < 40, "every span was sent: {}", collect.count());
        assert!(collect.count() >= 1);
    }

    /// Fields reused from an ended span start empty.
    #[test]
    fn reused_fields_start_empty() {
        let queue: &'static Queue = Box::leak(Box::new(Queue::new(8, 8)));
        let mut fields = Fields::new();
        fields.name(&["first"]);
        fields.text("k", "v");
        fields.set(KeyValue::new("several", Value::Array(vec![1i64, 2].into())));
        let mut span = Live::new(queue, context(1), None, SpanKind::Internal, SystemTime::now(), fields, vec![]);
        span.end();
        let mut again = Fields::new();
        assert_eq!(again.name_str(), "");
        again.name(&["second"]);
        let mut span = Live::new(queue, context(2), None, SpanKind::Internal, SystemTime::now(), again, vec![]);
        span.end();
        let batch = queue.lock();
        let scope = InstrumentationScope::builder("nexo").build();
        let second = span_data(&batch.spans[1], &batch, &scope);
        assert_eq!((second.name.as_ref(), second.attributes.len()), ("second", 0));
    }

    /// A full queue drops new spans and counts them; a span that was not
    /// sampled is never queued.
    #[test]
    fn a_full_queue_drops_and_counts_and_an_unsampled_span_is_not_queued() {
        let queue: &'static Queue = Box::leak(Box::new(Queue::new(1, 1)));
        let now = SystemTime::now();
        for n in 0..3 {
            let mut span = Live::new(queue, context(n), None, SpanKind::Internal, now, Fields::new(), Vec::new());
            span.end_with_timestamp(now);
        }
        let batch = queue.lock();
        assert_eq!((batch.spans.len(), batch.dropped), (1, 2));
        drop(batch);
        let unsampled = SpanContext::new(
            TraceId::from_bytes([7; 16]),
            SpanId::from_bytes([5; 8]),
            TraceFlags::default(),
            false,
            TraceState::NONE,
        );
        let mut span = Live::new(queue, unsampled, None, SpanKind::Internal, now, Fields::new(), Vec::new());
        assert!(!span.is_recording());
        span.end();
        assert_eq!(queue.lock().spans.len(), 1);
    }

    #[test]
    fn batching_follows_the_variables_within_bounds() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let default = Batching::from(vars(&[]));
        let shutdown = SHUTDOWN;
        assert_eq!(default, Batching { delay: Duration::from_secs(5), max_queue: 2048, max_batch: 512, shutdown });
        let set = Batching::from(vars(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "250"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
        ]));
        assert_eq!(set, Batching { delay: Duration::from_millis(250), max_queue: 100, max_batch: 100, shutdown });
        let nonsense = Batching::from(vars(&[("OTEL_BSP_SCHEDULE_DELAY", "soon"), ("OTEL_BSP_MAX_QUEUE_SIZE", "0")]));
        assert_eq!(nonsense, default);
    }
}
