//! A loopback server that speaks the OpenAI chat completions and Anthropic
//! Messages wire formats, streaming and not, for tests. Enabled by the `mock`
//! feature:
//!
//! ```toml
//! [dev-dependencies]
//! nexo-model = { path = "../model", features = ["mock"] }
//! ```
//!
//! Each test starts its own server, queues the replies it wants, points a
//! provider at it, and afterwards inspects what the server received:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nexo_model::mock::{MockServer, MockToolCall, Reply};
//! use nexo_model::{Message, ModelConfig, ProviderKind, Request, resolve};
//!
//! let server = MockServer::start().await?;
//! server.push(Reply::error(429, "slow down").with_retry_after(1));
//! server.push(Reply::tool_calls(vec![MockToolCall::new("call_1", "read_file", serde_json::json!({"path": "a"}))]));
//! server.push(Reply::text("Done."));
//!
//! let config = ModelConfig {
//!     model: Some("test-model".into()),
//!     provider: Some(ProviderKind::OpenaiCompatible), // or Anthropic with `server.anthropic_base_url()`
//!     base_url: Some(server.openai_base_url()),
//!     api_key: Some("test-key".into()),
//!     ..ModelConfig::default()
//! };
//! let provider = resolve(&config)?;
//! let request = Request {
//!     model: "test-model".into(),
//!     messages: vec![Message::User { text: "hi".into() }],
//!     tools: vec![],
//!     max_tokens: 100,
//! };
//! let response = provider.complete(&request, None).await?;
//! assert_eq!(response.tool_calls[0].name, "read_file");
//! let sent = server.requests();
//! assert_eq!(sent[1].header("authorization"), Some("Bearer test-key"));
//! assert_eq!(sent[1].body["messages"][0]["content"], "hi");
//! # Ok(()) }
//! ```
//!
//! The API is chosen by the path: `…/chat/completions` answers in the OpenAI
//! format, `…/v1/messages` in the Anthropic one. A request with
//! `"stream": true` gets server-sent events, with text split into small
//! deltas, tool-call arguments split into several fragments (the fragments of
//! several calls interleaved, to exercise assembly by index), and the event
//! stream itself cut into small, unaligned network chunks. A request that
//! finds the queue empty goes to the responder, if one is set
//! ([`MockServer::respond_with`]: a model that answers from the conversation,
//! for tests that cannot know the order of their requests), and otherwise
//! gets HTTP 400 naming the problem.
//!
//! Each [`RecordedRequest`] also carries its body's size and when the server
//! received it and replied, so a benchmark can subtract the server's own
//! time from a turn ([`RecordedRequest::server_time`]) and drain the record
//! as it goes ([`MockServer::take_requests`]).
//!
//! The server stops when the [`MockServer`] is dropped. It must be started
//! inside a tokio runtime.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// Text deltas carry at most this many characters.
const TEXT_PIECE: usize = 7;
/// Tool arguments arrive in fragments of at most this many characters.
const ARGUMENT_PIECE: usize = 5;
/// The event stream is written in network chunks of this many bytes, so
/// events and UTF-8 characters are split across reads.
const NETWORK_CHUNK: usize = 61;

/// A scripted reply: what the server answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    usage: (u64, u64),
    stop: Option<String>,
    delay: Option<Duration>,
    gate: Option<Gate>,
}

/// A condition a held reply waits for ([`Reply::held_by`]): the test opens
/// it once it has seen what it waits for while the model "works".
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Gate(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate::default()
    }

    /// Opens the gate: every reply held by it is answered, now and later.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        // The sender lives in `self`, so the wait ends only when it opens.
        let _ = self.0.subscribe().wait_for(|open| *open).await;
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Answer { text: String, calls: Vec<MockToolCall> },
    Error { status: u16, message: String, retry_after: Option<u64> },
    Malformed,
    Truncated { text: String },
    StreamError { kind: String, message: String },
    Raw { status: u16, content_type: String, body: String },
    RawChunks { status: u16, content_type: String, chunks: Vec<Vec<u8>>, cut: bool },
    Redirect { status: u16, location: String },
}

impl Reply {
    fn new(kind: Kind) -> Self {
        Reply { kind, usage: (10, 5), stop: None, delay: None, gate: None }
    }

    /// A text answer (`stop` / `end_turn`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Kind::Answer { text: text.into(), calls: Vec::new() })
    }

    /// An answer made of tool calls (`tool_calls` / `tool_use`). Add text
    /// before them with [`Reply::with_text`].
    pub fn tool_calls(calls: Vec<MockToolCall>) -> Self {
        Self::new(Kind::Answer { text: String::new(), calls })
    }

    /// An HTTP error `status` with a JSON error body in the API's format
    /// carrying `message` (`error.message` in both APIs).
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::new(Kind::Error { status, message: message.into(), retry_after: None })
    }

    /// HTTP 200 with a body (or, streaming, an event) that is not valid JSON.
    pub fn malformed() -> Self {
        Self::new(Kind::Malformed)
    }

    /// An answer with `text` that stops half-way: streaming, the connection
    /// is broken in the middle of the events (no `[DONE]`, no
    /// `message_stop`); otherwise the JSON body is cut in half.
    pub fn truncated(text: impl Into<String>) -> Self {
        Self::new(Kind::Truncated { text: text.into() })
    }

    /// An error reported inside a successful answer: streaming, after one
    /// text delta, as an Anthropic `error` event or an OpenAI
    /// `data: {"error": …}` event; otherwise as an error object in a 200
    /// body. `kind` is the error type, for example `overloaded_error`.
    pub fn stream_error(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Kind::StreamError { kind: kind.into(), message: message.into() })
    }

    /// Exactly this status, content type and body, whatever the API.
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<String>) -> Self {
        Self::new(Kind::Raw { status, content_type: content_type.into(), body: body.into() })
    }

    /// Exactly this status, content type and body, written as the given
    /// pieces, one network write each (for fuzzing: a stream cut anywhere,
    /// even inside a UTF-8 character). Raw bytes, so invalid UTF-8 reaches
    /// the provider as it is; `cut` breaks the connection after the last piece.
    pub fn raw_chunks(status: u16, content_type: impl Into<String>, chunks: Vec<Vec<u8>>, cut: bool) -> Self {
        Self::new(Kind::RawChunks { status, content_type: content_type.into(), chunks, cut })
    }

    /// A redirect: `status` (301, 302, 303, 307 or 308) with `Location:
    /// location`, an empty body.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        Self::new(Kind::Redirect { status, location: location.into() })
    }

    /// Adds text to an answer (before its tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        if let Kind::Answer { text: t, .. } = &mut self.kind {
            *t = text.into();
        }
        self
    }

    /// Adds a `retry-after` header (seconds) to an error reply.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        if let Kind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(seconds);
        }
        self
    }

    /// The token usage to report (default: 10 in, 5 out).
    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = (input, output);
        self
    }

    /// The stop reason to send, verbatim in the API's vocabulary (for
    /// example `length` for OpenAI, `max_tokens` for Anthropic).
    pub fn with_stop(mut self, reason: impl Into<String>) -> Self {
        self.stop = Some(reason.into());
        self
    }

    /// Waits this long before answering (to exercise timeouts).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Waits until `gate` is opened before answering: the model works for
    /// as long as the test says.
    pub fn held_by(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }
}

/// A tool call in a scripted answer.
#[derive(Debug, Clone)]
pub struct MockToolCall {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    arguments: Arguments,
}

#[derive(Debug, Clone)]
enum Arguments {
    /// Sent as a JSON string (OpenAI) or an object (Anthropic).
    Json(Value),
    /// Sent as an object in the OpenAI format too, as some servers do.
    Object(Value),
    /// Sent as this exact text, valid JSON or not.
    Raw(String),
}

impl MockToolCall {
    /// A call whose arguments go out the standard way: a JSON string for
    /// OpenAI, an object (or `partial_json` fragments) for Anthropic.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        MockToolCall { id: id.into(), name: name.into(), arguments: Arguments::Json(arguments) }
    }

    /// Sends the arguments as a JSON object in the OpenAI format as well
    /// (whole, in the call's first fragment when streaming).
    pub fn arguments_as_object(mut self) -> Self {
        if let Arguments::Json(value) = self.arguments {
            self.arguments = Arguments::Object(value);
        }
        self
    }

    /// A call whose arguments are exactly `text`, for example an empty or
    /// unparsable string.
    pub fn raw_arguments(id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        MockToolCall { id: id.into(), name: name.into(), arguments: Arguments::Raw(text.into()) }
    }

    fn argument_text(&self) -> String {
        match &self.arguments {
            Arguments::Json(value) | Arguments::Object(value) => value.to_string(),
            Arguments::Raw(text) => text.clone(),
        }
    }
}

/// A long, deterministic text of at least `chars` characters, with
/// multi-byte characters so streamed chunks split some of them.
pub fn long_text(chars: usize) -> String {
    let mut out = String::with_capacity(chars + 64);
    let mut line = 0;
    while out.chars().count() < chars {
        line += 1;
        out.push_str(&format!("line {line:05}: naïve café — the quick brown fox jumps over the lazy dog\n"));
    }
    out
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The method, for example `POST`.
    pub method: String,
    /// The path, for example `/v1/chat/completions`.
    pub path: String,
    /// The headers, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
    /// The body as text.
    pub raw_body: String,
    /// The body's size in bytes, as received.
    pub body_bytes: usize,
    /// When the server had the whole request, before it parsed the body.
    pub received_at: Instant,
    /// When the server handed its reply to the connection (for a stream,
    /// before the first event went out); `None` while it is still making it.
    /// `replied_at - received_at` is the time the server itself took, which a
    /// benchmark subtracts from a turn to get the client's own cost.
    pub replied_at: Option<Instant>,
    /// Matches the reply's time to its request, whatever was drained meanwhile.
    seq: u64,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    /// How long the server took to answer: from [`received_at`] to
    /// [`replied_at`] (a reply's delay included); `None` while it is still
    /// answering.
    ///
    /// [`received_at`]: RecordedRequest::received_at
    /// [`replied_at`]: RecordedRequest::replied_at
    pub fn server_time(&self) -> Option<Duration> {
        self.replied_at.map(|at| at.saturating_duration_since(self.received_at))
    }
}

/// Answers a request's body when no reply is queued.
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<RecordedRequest>>,
    next_seq: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}

/// A running mock server on `127.0.0.1`. Dropping it stops the server.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Starts a server on a free loopback port, in a task of the current
    /// tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().map_err(std::io::Error::other)?).await
    }

    /// Starts a server on `addr` (a port a document names, such as Ollama's
    /// 11434), in a task of the current tokio runtime.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        let app = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            handle(state.clone(), method, uri, headers, body)
        });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the mock model server stopped: {e}");
            }
        });
        Ok(MockServer { addr, shared, task })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for OpenAI-compatible providers: `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL for the Anthropic provider: `http://127.0.0.1:PORT`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply; requests take replies in order.
    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.shared.replies).push_back(reply);
        self
    }

    /// Answers every request that finds the queue empty with `responder`'s
    /// reply to its body: a deterministic function of the conversation
    /// answers a replayed or repeated turn the way it answered the first.
    pub fn respond_with(&self, responder: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> &Self {
        *lock(&self.shared.responder) = Some(Arc::new(responder));
        self
    }

    /// Every request received so far, in order (retries included).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Every request received since the last call, in order, removed from
    /// the record: a long benchmark drains it as it goes instead of keeping
    /// every body (and pays for no copy of them).
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *lock(&self.shared.requests))
    }

    /// How many queued replies are still unused.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.replies).len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide later results.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    OpenAi,
    Anthropic,
}

async fn handle(shared: Arc<Shared>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let received_at = Instant::now();
    let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
    let response = reply_to(&shared, method, uri, headers, body, received_at, seq).await;
    let replied_at = Instant::now();
    // Searched from the end: the request is the latest or nearly so, unless drained.
    if let Some(request) = lock(&shared.requests).iter_mut().rev().find(|r| r.seq == seq) {
        request.replied_at = Some(replied_at);
    }
    response
}

async fn reply_to(
    shared: &Shared,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    received_at: Instant,
    seq: u64,
) -> Response {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let parsed: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    // Read before the body moves into the record, so a long conversation is not copied.
    let stream = parsed.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = parsed.get("model").and_then(Value::as_str).unwrap_or("mock-model").to_string();
    // The responder's copy of the body, taken only when there is one to ask.
    let responder = lock(&shared.responder).clone();
    let asked = responder.as_ref().map(|_| parsed.clone());
    let recorded = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: parsed,
        raw_body,
        body_bytes: body.len(),
        received_at,
        replied_at: None,
        seq,
    };
    lock(&shared.requests).push(recorded);

    let path = uri.path();
    let api = if path.ends_with("/chat/completions") {
        Api::OpenAi
    } else if path.ends_with("/v1/messages") {
        Api::Anthropic
    } else {
        return json_response(404, &json!({"error": {"message": format!("nexo mock: no API at {path}")}}), None);
    };
    let queued = lock(&shared.replies).pop_front();
    let Some(reply) = queued.or_else(|| responder.zip(asked).map(|(r, body)| r(&body))) else {
        return error_response(api, 400, &format!("nexo mock: no reply queued for this request to {path}"), None);
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(gate) = &reply.gate {
        gate.passed().await;
    }
    let answer = Answer { model: &model, usage: reply.usage, stop: reply.stop.as_deref() };
    match &reply.kind {
        Kind::Error { status, message, retry_after } => error_response(api, *status, message, *retry_after),
        Kind::Raw { status, content_type, body } => {
            let mut response = Response::new(Body::from(body.clone()));
            *response.status_mut() = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if let Ok(value) = HeaderValue::from_str(content_type) {
                response.headers_mut().insert(header::CONTENT_TYPE, value);
            }
            response
        }
        Kind::RawChunks { status, content_type, chunks, cut } => {
            let mut pieces: Vec<Result<Bytes, std::io::Error>> =
                chunks.iter().map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            if *cut {
                pieces.push(Err(std::io::Error::other("nexo mock: connection cut on purpose")));
            }
            let stream = futures_util::stream::iter(pieces).then(|chunk| async move {
                tokio::task::yield_now().await;
                chunk
            });
            let mut response = Response::new(Body::from_stream(stream));
            *response.status_mut() = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if let Ok(value) = HeaderValue::from_str(content_type) {
                response.headers_mut().insert(header::CONTENT_TYPE, value);
            }
            response
        }
        Kind::Redirect { status, location } => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::from_u16(*status).unwrap_or(StatusCode::TEMPORARY_REDIRECT);
            if let Ok(value) = HeaderValue::from_str(location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            response
        }
        Kind::Malformed if stream => sse_response(
            match api {
                Api::OpenAi => "data: {\"choices\": [{\"delta\": {\"content\": \"oops\"\n\n".to_string(),
                Api::Anthropic => {
                    "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\n\n".to_string()
                }
            },
            false,
        ),
        Kind::Malformed => {
            raw_json_response("{\"id\": \"mock\", \"choices\": [{\"message\": {\"content\": \"oops\"".into())
        }
        Kind::Answer { text, calls } => match (api, stream) {
            (Api::OpenAi, true) => sse_response(answer.openai_events(text, calls), false),
            (Api::OpenAi, false) => json_response(200, &answer.openai_json(text, calls), None),
            (Api::Anthropic, true) => sse_response(answer.anthropic_events(text, calls), false),
            (Api::Anthropic, false) => json_response(200, &answer.anthropic_json(text, calls), None),
        },
        Kind::Truncated { text } => {
            let full = match (api, stream) {
                (Api::OpenAi, true) => answer.openai_events(text, &[]),
                (Api::OpenAi, false) => answer.openai_json(text, &[]).to_string(),
                (Api::Anthropic, true) => answer.anthropic_events(text, &[]),
                (Api::Anthropic, false) => answer.anthropic_json(text, &[]).to_string(),
            };
            let half = cut_point(&full);
            if stream {
                sse_response(full[..half].to_string(), true)
            } else {
                raw_json_response(full[..half].to_string())
            }
        }
        Kind::StreamError { kind, message } => match (api, stream) {
            (Api::OpenAi, true) => {
                let first = answer.openai_chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null);
                let error = json!({"error": {"message": message, "type": kind, "code": null}});
                sse_response(format!("data: {first}\n\ndata: {error}\n\n"), false)
            }
            (Api::Anthropic, true) => {
                let mut events = String::new();
                answer.anthropic_start(&mut events);
                sse_event(
                    &mut events,
                    "content_block_start",
                    json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
                );
                sse_event(
                    &mut events,
                    "content_block_delta",
                    json!({"index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
                );
                sse_event(&mut events, "error", json!({"error": {"type": kind, "message": message}}));
                sse_response(events, false)
            }
            (Api::OpenAi, false) => {
                json_response(200, &json!({"error": {"message": message, "type": kind, "code": null}}), None)
            }
            (Api::Anthropic, false) => {
                json_response(200, &json!({"type": "error", "error": {"type": kind, "message": message}}), None)
            }
        },
    }
}

/// Half-way, on a character boundary.
fn cut_point(text: &str) -> usize {
    let mut half = text.len() / 2;
    while !text.is_char_boundary(half) {
        half -= 1;
    }
    half
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn error_response(api: Api, status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let body = match api {
        Api::OpenAi => json!({"error": {"message": message, "type": error_type(status), "param": null, "code": null}}),
        Api::Anthropic => json!({"type": "error", "error": {"type": error_type(status), "message": message}}),
    };
    json_response(status, &body, retry_after)
}

fn json_response(status: u16, body: &Value, retry_after: Option<u64>) -> Response {
    let mut response = raw_json_response(body.to_string());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

fn raw_json_response(body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An event stream written in small chunks; `cut` breaks the connection
/// after the last one instead of ending the body.
fn sse_response(events: String, cut: bool) -> Response {
    let bytes = events.into_bytes();
    let mut chunks: Vec<Result<Bytes, std::io::Error>> =
        bytes.chunks(NETWORK_CHUNK).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    if cut {
        chunks.push(Err(std::io::Error::other("nexo mock: connection cut on purpose")));
    }
    // Yielding between chunks lets each go out as its own write.
    let stream = futures_util::stream::iter(chunks).then(|chunk| async move {
        tokio::task::yield_now().await;
        chunk
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn sse_event(out: &mut String, event: &str, mut data: Value) {
    data["type"] = json!(event);
    out.push_str(&format!("event: {event}\ndata: {data}\n\n"));
}

/// Splits `text` into pieces of at most `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// What every answer shares.
struct Answer<'a> {
    model: &'a str,
    usage: (u64, u64),
    stop: Option<&'a str>,
}

impl Answer<'_> {
    fn stop_or(&self, default: &'static str) -> String {
        self.stop.unwrap_or(default).to_string()
    }

    fn openai_stop(&self, calls: &[MockToolCall]) -> String {
        self.stop_or(if calls.is_empty() { "stop" } else { "tool_calls" })
    }

    fn openai_usage(&self) -> Value {
        json!({"prompt_tokens": self.usage.0, "completion_tokens": self.usage.1, "total_tokens": self.usage.0 + self.usage.1})
    }

    fn openai_json(&self, text: &str, calls: &[MockToolCall]) -> Value {
        let mut message =
            json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
        if !calls.is_empty() {
            let wire: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let arguments = match &c.arguments {
                        Arguments::Object(value) => value.clone(),
                        _ => json!(c.argument_text()),
                    };
                    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(wire);
        }
        json!({
            "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.openai_stop(calls)}],
            "usage": self.openai_usage(),
        })
    }

    fn openai_chunk(&self, delta: Value, finish: Value) -> Value {
        json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    fn openai_events(&self, text: &str, calls: &[MockToolCall]) -> String {
        let mut chunks = vec![self.openai_chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
        for piece in pieces(text, TEXT_PIECE) {
            chunks.push(self.openai_chunk(json!({"content": piece}), Value::Null));
        }
        // Each call's id and name first, then the argument fragments of all calls, interleaved.
        let mut fragments = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let arguments = match &call.arguments {
                Arguments::Object(value) => value.clone(),
                _ => json!(""),
            };
            let head = json!({"index": index, "id": call.id, "type": "function",
                              "function": {"name": call.name, "arguments": arguments}});
            chunks.push(self.openai_chunk(json!({"tool_calls": [head]}), Value::Null));
            let parts = match &call.arguments {
                Arguments::Object(_) => Vec::new(),
                _ => pieces(&call.argument_text(), ARGUMENT_PIECE),
            };
            fragments.push(parts);
        }
        let rounds = fragments.iter().map(Vec::len).max().unwrap_or(0);
        for round in 0..rounds {
            let entries: Vec<Value> = fragments
                .iter()
                .enumerate()
                .filter_map(|(index, parts)| {
                    parts.get(round).map(|part| json!({"index": index, "function": {"arguments": part}}))
                })
                .collect();
            chunks.push(self.openai_chunk(json!({"tool_calls": entries}), Value::Null));
        }
        chunks.push(self.openai_chunk(json!({}), json!(self.openai_stop(calls))));
        chunks.push(json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": self.model,
            "choices": [], "usage": self.openai_usage(),
        }));
        let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        out.push_str("data: [DONE]\n\n");
        out
    }

    fn anthropic_stop(&self, calls: &[MockToolCall]) -> String {
        self.stop_or(if calls.is_empty() { "end_turn" } else { "tool_use" })
    }

    fn anthropic_json(&self, text: &str, calls: &[MockToolCall]) -> Value {
        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        for call in calls {
            let input = match &call.arguments {
                Arguments::Json(value) | Arguments::Object(value) => value.clone(),
                Arguments::Raw(text) => json!(text),
            };
            content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
        }
        json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": self.model, "content": content,
            "stop_reason": self.anthropic_stop(calls), "stop_sequence": null,
            "usage": {"input_tokens": self.usage.0, "output_tokens": self.usage.1},
        })
    }

    fn anthropic_start(&self, out: &mut String) {
        sse_event(
            out,
            "message_start",
            json!({"message": {
                "id": "msg_mock", "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.usage.0, "output_tokens": 1},
            }}),
        );
        sse_event(out, "ping", json!({}));
    }

    fn anthropic_events(&self, text: &str, calls: &[MockToolCall]) -> String {
        let mut out = String::new();
        self.anthropic_start(&mut out);
        let mut index = 0;
        if !text.is_empty() {
            sse_event(
                &mut out,
                "content_block_start",
                json!({"index": index, "content_block": {"type": "text", "text": ""}}),
            );
            for piece in pieces(text, TEXT_PIECE) {
                sse_event(
                    &mut out,
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "text_delta", "text": piece}}),
                );
            }
            sse_event(&mut out, "content_block_stop", json!({"index": index}));
            index += 1;
        }
        for call in calls {
            sse_event(
                &mut out,
                "content_block_start",
                json!({"index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
            );
            // The API opens with an empty fragment, too.
            let mut parts = vec![String::new()];
            parts.extend(pieces(&call.argument_text(), ARGUMENT_PIECE));
            for part in parts {
                sse_event(
                    &mut out,
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
                );
            }
            sse_event(&mut out, "content_block_stop", json!({"index": index}));
            index += 1;
        }
        sse_event(
            &mut out,
            "message_delta",
            json!({"delta": {"stop_reason": self.anthropic_stop(calls), "stop_sequence": null},
                   "usage": {"output_tokens": self.usage.1}}),
        );
        sse_event(&mut out, "message_stop", json!({}));
        out
    }
}
