//! A span as nexo records it, and the queue ended spans wait in for the
//! exporter ([`super::exporter`]).
//!
//! Why not the SDK's tracer: a span there is a dozen allocations made on
//! the calling thread and freed on the exporter's, and a free from another
//! thread is what glibc's allocator makes slow (measured in
//! `host/benches/agent_loop.rs`). Here a span's text (its name and string
//! attributes) is one buffer owned by the span; when it ends it is copied
//! into the queue's batch, whose buffers are reused from batch to batch,
//! and the buffer is kept for the thread's next span. What still crosses
//! threads is rare (links, a `tracestate`) or a span's small box, freed
//! where its context is last dropped. The exporter builds the SDK's
//! `SpanData` from a batch on its own thread and hands it to the OTLP
//! exporter, which encodes and sends it.

use std::borrow::Cow;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Key, KeyValue, Value};

/// A range of a span's (then a batch's) text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Text {
    start: usize,
    end: usize,
}

impl Text {
    fn shifted(self, by: usize) -> Text {
        Text { start: self.start + by, end: self.end + by }
    }

    /// This range of `text`.
    pub(super) fn of(self, text: &str) -> &str {
        &text[self.start..self.end]
    }
}

/// An attribute's value, its strings kept in the span's text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Val {
    /// A string.
    Text(Text),
    /// An array of one string (a finish reason).
    OneText(Text),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    Float(f64),
}

/// One attribute of a span.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Attr {
    /// Its name: nexo's are `'static`, so cloning one copies a pointer.
    pub(super) key: Key,
    /// Its value.
    pub(super) value: Val,
}

/// What a span says of itself: its name and attributes, their strings in
/// one buffer.
#[derive(Debug, Default)]
pub(super) struct Fields {
    text: String,
    name: Option<Text>,
    attributes: Vec<Attr>,
    /// Values of other shapes (arrays of several), kept as given.
    other: Vec<KeyValue>,
}

/// Room for a span's attributes (its own and the run's labels) and text.
const ATTRIBUTES: usize = 12;
const TEXT: usize = 256;

/// How many spans' fields a thread keeps for reuse: as many as are open
/// at once on it, nested, in the usual case.
const SPARES: usize = 8;

std::thread_local! {
    /// Ended spans' fields, for the next spans on this thread: a span's
    /// buffers are then made and freed on one thread, and rarely.
    static SPARE: std::cell::RefCell<Vec<Fields>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Fields {
    /// Fields with room for a span's usual size: an ended span's, reused
    /// on this thread, when there is one.
    pub(super) fn new() -> Fields {
        let spare = SPARE.try_with(|spare| spare.borrow_mut().pop()).ok().flatten();
        spare.unwrap_or_else(|| Fields {
            text: String::with_capacity(TEXT),
            attributes: Vec::with_capacity(ATTRIBUTES),
            ..Fields::default()
        })
    }

    /// Keeps these (emptied) for this thread's next span, unless enough are
    /// kept or they grew large (contents captured).
    fn recycle(mut self) {
        if self.text.capacity() > 4 * TEXT {
            return;
        }
        self.text.clear();
        self.attributes.clear();
        self.other.clear();
        self.name = None;
        // A span that ends while its thread is going away is just freed.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARES {
                spare.push(self);
            }
        });
    }

    fn put(&mut self, parts: &[&str]) -> Text {
        let start = self.text.len();
        for part in parts {
            self.text.push_str(part);
        }
        Text { start, end: self.text.len() }
    }

    /// Names the span: `parts` joined.
    pub(super) fn name(&mut self, parts: &[&str]) {
        self.name = Some(self.put(parts));
    }

    /// The span's name.
    pub(super) fn name_str(&self) -> &str {
        self.name.map_or("", |n| n.of(&self.text))
    }

    /// A string attribute.
    pub(super) fn text(&mut self, key: &'static str, value: &str) {
        let value = Val::Text(self.put(&[value]));
        self.attributes.push(Attr { key: Key::from_static_str(key), value });
    }

    /// An integer attribute.
    pub(super) fn int(&mut self, key: &'static str, value: i64) {
        self.attributes.push(Attr { key: Key::from_static_str(key), value: Val::Int(value) });
    }

    /// Any attribute, as the OpenTelemetry API hands one over.
    pub(super) fn set(&mut self, attribute: KeyValue) {
        let value = match &attribute.value {
            Value::String(s) => Val::Text(self.put(&[s.as_str()])),
            Value::I64(i) => Val::Int(*i),
            Value::Bool(b) => Val::Bool(*b),
            Value::F64(f) => Val::Float(*f),
            Value::Array(opentelemetry::Array::String(one)) if one.len() == 1 => {
                Val::OneText(self.put(&[one[0].as_str()]))
            }
            _ => return self.other.push(attribute),
        };
        self.attributes.push(Attr { key: attribute.key, value });
    }
}

/// A span being recorded: the OpenTelemetry context a span lives in holds
/// it, so the span is the context's active span (its children's parent,
/// what requests carry as their `traceparent`), and ending it hands it to
/// the queue.
#[derive(Debug)]
pub(super) struct Live {
    queue: &'static Queue,
    context: SpanContext,
    parent: Option<(SpanId, bool)>,
    kind: SpanKind,
    start: SystemTime,
    fields: Fields,
    links: Vec<SpanContext>,
    error: Option<Text>,
    ended: bool,
}

impl Live {
    /// A span named and described by `fields`, with `context` as its own
    /// and `parent` (its span id, and whether it is remote) as its parent,
    /// that goes to `queue` when it ends. A span whose context is not
    /// sampled records nothing.
    pub(super) fn new(
        queue: &'static Queue,
        context: SpanContext,
        parent: Option<(SpanId, bool)>,
        kind: SpanKind,
        start: SystemTime,
        fields: Fields,
        links: Vec<SpanContext>,
    ) -> Live {
        let ended = !context.is_sampled();
        Live { queue, context, parent, kind, start, fields, links, error: None, ended }
    }
}

impl opentelemetry::trace::Span for Live {
    /// nexo's spans carry no events.
    fn add_event_with_timestamp<T>(&mut self, _name: T, _timestamp: SystemTime, _attributes: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
    }

    fn span_context(&self) -> &SpanContext {
        &self.context
    }

    fn is_recording(&self) -> bool {
        !self.ended
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        if !self.ended {
            self.fields.set(attribute);
        }
    }

    fn set_status(&mut self, status: Status) {
        if let (false, Status::Error { description }) = (self.ended, status) {
            self.error = Some(self.fields.put(&[&description]));
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        if !self.ended {
            self.fields.name(&[&new_name.into()]);
        }
    }

    fn add_link(&mut self, span_context: SpanContext, _attributes: Vec<KeyValue>) {
        if !self.ended {
            self.links.push(span_context);
        }
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.queue.push(self, timestamp);
    }
}

/// A span dropped unended (its context's last clone gone) ends then.
impl Drop for Live {
    fn drop(&mut self) {
        if !self.ended {
            opentelemetry::trace::Span::end(self);
        }
    }
}

/// A span that ended, its strings in its batch's text.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) context: SpanContext,
    pub(super) parent: Option<(SpanId, bool)>,
    pub(super) kind: SpanKind,
    pub(super) name: Text,
    pub(super) start: SystemTime,
    pub(super) end: SystemTime,
    /// Its attributes' range in the batch's.
    pub(super) attributes: (usize, usize),
    pub(super) other: Vec<KeyValue>,
    pub(super) links: Vec<SpanContext>,
    pub(super) error: Option<Text>,
}

/// Ended spans waiting for the exporter. Its buffers are reused: the
/// exporter swaps a full batch for its emptied one.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) spans: Vec<Ended>,
    pub(super) text: String,
    pub(super) attributes: Vec<Attr>,
    /// Spans dropped since the last export because the queue was full.
    pub(super) dropped: u64,
}

impl Batch {
    /// Empties the batch, keeping its room (up to a bound, so that one
    /// burst of captured contents does not hold memory for good).
    pub(super) fn clear(&mut self) {
        self.spans.clear();
        self.text.clear();
        self.attributes.clear();
        self.dropped = 0;
        const KEEP: usize = 4 << 20;
        if self.text.capacity() > KEEP {
            self.text.shrink_to(KEEP);
        }
    }
}

/// The most text (names and string attributes) a batch holds: past it,
/// spans are dropped as when the queue is full, so captured contents
/// cannot grow the queue without bound.
const MAX_TEXT: usize = 64 << 20;

/// The queue of ended spans, and how the exporter waits on it.
#[derive(Debug)]
pub(super) struct Queue {
    batch: Mutex<Batch>,
    /// Signalled when a batch is full, or at shutdown.
    ready: Condvar,
    /// Spans held before new ones are dropped (`OTEL_BSP_MAX_QUEUE_SIZE`).
    max_queue: usize,
    /// Spans that make a batch worth exporting at once
    /// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    pub(super) max_batch: usize,
}

impl Queue {
    /// A queue holding up to `max_queue` spans, full at `max_batch`.
    pub(super) fn new(max_queue: usize, max_batch: usize) -> Queue {
        Queue { batch: Mutex::default(), ready: Condvar::new(), max_queue, max_batch }
    }

    /// The batch, locked (a panic elsewhere while it was held left nothing
    /// half-written that matters: a span is appended whole or not at all).
    pub(super) fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until a batch is full, `stop` says to, or `delay` passes.
    pub(super) fn wait<'a>(
        &'a self,
        batch: MutexGuard<'a, Batch>,
        delay: std::time::Duration,
        stop: impl Fn() -> bool,
    ) -> MutexGuard<'a, Batch> {
        let (batch, _) = self
            .ready
            .wait_timeout_while(batch, delay, |b| b.spans.len() < self.max_batch && !stop())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        batch
    }

    /// Wakes the exporter.
    pub(super) fn wake(&self) {
        self.ready.notify_all();
    }

    /// Appends `span`, ended at `end`, to the batch (or counts it dropped
    /// when the queue is full).
    fn push(&self, span: &mut Live, end: SystemTime) {
        let mut fields = std::mem::take(&mut span.fields);
        let links = std::mem::take(&mut span.links);
        let mut batch = self.lock();
        if batch.spans.len() >= self.max_queue || batch.text.len() + fields.text.len() > MAX_TEXT {
            batch.dropped += 1;
            return;
        }
        let base = batch.text.len();
        batch.text.push_str(&fields.text);
        let first = batch.attributes.len();
        batch.attributes.extend(fields.attributes.iter().map(|a| Attr {
            key: a.key.clone(),
            value: match a.value {
                Val::Text(t) => Val::Text(t.shifted(base)),
                Val::OneText(t) => Val::OneText(t.shifted(base)),
                other => other,
            },
        }));
        let attributes = (first, batch.attributes.len());
        batch.spans.push(Ended {
            context: span.context.clone(),
            parent: span.parent,
            kind: span.kind.clone(),
            name: fields.name.unwrap_or(Text { start: 0, end: 0 }).shifted(base),
            start: span.start,
            end,
            attributes,
            other: std::mem::take(&mut fields.other),
            links,
            error: span.error.map(|e| e.shifted(base)),
        });
        let full = batch.spans.len() == self.max_batch;
        drop(batch);
        if full {
            self.wake();
        }
        fields.recycle();
    }
}
