//! What the HTTP providers share: the guarded client and its operator
//! policy, retries with backoff, error bodies, and a server-sent-events
//! reader.
//!
//! Every call goes through `nexo_egress`'s [`GuardedClient`], the one HTTP
//! stack of the process, under a [`Policy`] that reaches only the base URL's
//! origin (scheme, host and port): a redirect elsewhere is refused, and so is
//! a POST redirect other than 307 or 308. The key goes only to that origin
//! (over plain http only to a private address) and is scrubbed from every
//! answer. Only a base URL the operator configured (or Ollama's built-in
//! `localhost` one) may be on a loopback or private address ([`Reach`]).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use nexo_egress::{EgressError, GuardedClient, HostList, Origin, Policy, Redactor, SecretHeader, StreamingResponse};

use crate::endpoint::Endpoint;
use crate::{ModelConfig, ModelError};

/// The time limit for one request when the configuration sets none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Retries after the first attempt when the configuration sets none.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;
/// The first retry's delay before jitter; each further retry doubles it.
pub(crate) const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts, `retry-after` included.
pub(crate) const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(30);
/// The most bytes of one answer when the configuration sets none: a streamed
/// answer of 128k tokens is about 40 MB of events.
pub(crate) const DEFAULT_MAX_BODY: usize = 64 * 1024 * 1024;
/// A streamed answer's limit in all (each wait for a piece has the
/// configured timeout): 64k tokens at 50 a second take about 20 minutes.
const STREAM_TIME_LIMIT: Duration = Duration::from_secs(3600);
/// How much of an error body is read for its message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Statuses worth another try: rate limits, server errors, gateways, and
/// Anthropic's 529 "overloaded".
const RETRY_STATUSES: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// Error bodies and odd answers are quoted up to this many characters, the
/// ellipsis marking a cut included.
const QUOTE_LIMIT: usize = 300;

/// Time limits, the answer's size limit and the retry policy, resolved from
/// a [`ModelConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) timeout: Duration,
    pub(crate) max_retries: u32,
    pub(crate) base_delay: Duration,
    pub(crate) max_delay: Duration,
    pub(crate) max_body: usize,
}

impl Limits {
    pub(crate) fn from_config(config: &ModelConfig) -> Self {
        Limits {
            timeout: config.timeout.unwrap_or(DEFAULT_TIMEOUT),
            max_retries: config.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            base_delay: config.retry_base_delay.unwrap_or(DEFAULT_RETRY_BASE_DELAY),
            max_delay: config.retry_max_delay.unwrap_or(DEFAULT_RETRY_MAX_DELAY),
            max_body: config.max_response_bytes.unwrap_or(DEFAULT_MAX_BODY),
        }
    }

    /// Exponential backoff with "equal jitter": half the delay is fixed, half
    /// random, so clients that failed together do not retry together.
    fn backoff(&self, retry: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX)).min(self.max_delay);
        let half = exp / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// Which addresses a provider's server may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Public addresses only: the built-in base URL of a hosted API.
    Public,
    /// The base URL's host, whatever it resolves to (loopback and private
    /// addresses included, link-local never): the operator named it, or it
    /// is Ollama's built-in `localhost`. Never set from a plugin.
    OperatorHost,
}

/// The header a provider sends its key in: `prefix` then the key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Auth {
    pub(crate) header: &'static str,
    pub(crate) prefix: &'static str,
}

/// An HTTP client for one provider. Its policy holds the key, so its
/// `Debug` leaves it out.
pub(crate) struct Http {
    provider: String,
    client: GuardedClient,
    /// Not streamed: the timeout covers the whole exchange.
    policy: Policy,
    /// Streamed: the timeout covers each wait, [`STREAM_TIME_LIMIT`] the whole.
    stream_policy: Policy,
    secret: Option<String>,
    /// The key's encodings, for messages; `None` for keys too short for it.
    redactor: Option<Redactor>,
    limits: Limits,
}

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http")
            .field("provider", &self.provider)
            .field("api_key", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// A client for `provider` that reaches only `endpoint`'s origin, with
    /// the private-address exemption `reach` allows, sending `headers` with
    /// every request and `key` (if any) as `auth` says.
    pub(crate) fn new(
        provider: &str,
        endpoint: &Endpoint,
        reach: Reach,
        auth: Auth,
        key: Option<String>,
        headers: &[(&str, &str)],
        limits: Limits,
    ) -> Result<Self, ModelError> {
        let config = |what: String| ModelError::Config(format!("cannot set up the HTTP client for {provider}: {what}"));
        let url = url::Url::parse(&endpoint.url).map_err(|e| config(e.to_string()))?;
        let host = url.host_str().ok_or_else(|| config(format!("{} has no host", endpoint.shown)))?;
        let origin = Origin::parse(&url.origin().ascii_serialization()).map_err(|e| config(e.to_string()))?;
        let hosts = HostList::new([host]).map_err(|e| config(e.to_string()))?;
        let mut builder = GuardedClient::builder();
        if reach == Reach::OperatorHost {
            builder = builder.allow_private_host(host);
        }
        let client = builder.build().map_err(|e| config(e.to_string()))?;
        let mut policy = Policy::new(hosts)
            .within_origins([origin.clone()])
            .max_body(limits.max_body)
            .timeout(limits.timeout)
            .trace_context();
        for (name, value) in headers {
            policy = policy.header(name, value).map_err(|e| config(e.to_string()))?;
        }
        let secret = key.map(|k| k.trim().to_string()).filter(|k| !k.is_empty());
        if let Some(key) = &secret {
            let header = SecretHeader::with_prefix(auth.header, auth.prefix, key.as_str()).map_err(|_| {
                ModelError::Config(format!("the API key for {provider} contains characters that cannot go in a header"))
            })?;
            let header = header.for_origins([origin.to_string()]).map_err(|e| config(e.to_string()))?;
            policy = policy.inject(header);
        }
        let stream_policy = policy.clone().stream_timeout(STREAM_TIME_LIMIT);
        let policy = policy.stream_timeout(limits.timeout);
        let redactor =
            match &secret {
                Some(key) => Some(Redactor::new([key.as_bytes()]).map_err(|e| {
                    ModelError::Config(format!("cannot prepare the scrubbing of the {provider} key: {e}"))
                })?),
                None => None,
            };
        Ok(Http { provider: provider.into(), client, policy, stream_policy, secret, redactor, limits })
    }

    /// The provider's name, for messages.
    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// Whether the client may reach a private address (the base URL's host).
    #[cfg(test)]
    pub(crate) fn reaches_private(&self) -> bool {
        self.client.has_exemptions()
    }

    /// Removes the key from `text`, should a server echo it back: literally
    /// or encoded (escaped, hex, base64, base32…), and any run of 12 of its
    /// letters and digits, as the egress client scrubs responses.
    fn scrub(&self, text: String) -> String {
        let text = match &self.redactor {
            Some(redactor) => redactor.redact_str(&text),
            None => text,
        };
        // The redactor skips keys shorter than 8 bytes; the literal still goes.
        match &self.secret {
            Some(key) if text.contains(key.as_str()) => text.replace(key.as_str(), "<redacted>"),
            _ => text,
        }
    }

    /// A [`ModelError::Protocol`] from this provider.
    pub(crate) fn protocol(&self, message: impl Into<String>) -> ModelError {
        ModelError::Protocol { provider: self.provider.clone(), message: self.scrub(message.into()) }
    }

    /// A [`ModelError::Unavailable`] from this provider.
    pub(crate) fn unavailable(&self, message: impl Into<String>) -> ModelError {
        ModelError::Unavailable { provider: self.provider.clone(), message: self.scrub(message.into()) }
    }

    /// A [`ModelError::Provider`] from this provider.
    pub(crate) fn status_error(&self, status: u16, message: impl Into<String>) -> ModelError {
        ModelError::Provider { provider: self.provider.clone(), status, message: self.scrub(message.into()) }
    }

    /// POSTs `body` as JSON and returns the first successful response,
    /// retrying failed connections and lookups and the statuses in
    /// [`RETRY_STATUSES`]. Refusals (a redirect to another origin, a
    /// non-public address) are not retried.
    ///
    /// Without `stream` the timeout covers the whole exchange. With it, the
    /// timeout covers the wait for the response headers and then each wait
    /// for the next piece of the stream ([`SseStream`]), so a long answer that
    /// keeps arriving is not cut off.
    pub(crate) async fn post(
        &self,
        endpoint: &Endpoint,
        body: Vec<u8>,
        stream: bool,
    ) -> Result<StreamingResponse, ModelError> {
        let limits = self.limits;
        let policy = if stream { &self.stream_policy } else { &self.policy };
        let mut retry = 0u32;
        loop {
            // The model call's span goes on at the provider, when tracing is on.
            let mut request = nexo_egress::Request::post_json(endpoint.url.as_str(), body.clone())
                .headers(&nexo_egress::trace_headers());
            if stream {
                request = request.header("accept", "text/event-stream");
            }
            let (failure, retry_after) = match self.client.stream(request, policy).await {
                Ok(response) if (200..300).contains(&response.status) => return Ok(response),
                Ok(mut response) => {
                    let code = response.status;
                    let retry_after = retry_after(&response.headers);
                    let body = read_some(&mut response, ERROR_BODY_LIMIT).await;
                    let message = error_message(&body).unwrap_or_else(|| {
                        http::StatusCode::from_u16(code)
                            .ok()
                            .and_then(|s| s.canonical_reason())
                            .unwrap_or("no error message")
                            .to_string()
                    }) + overflow_hint(&body);
                    if !RETRY_STATUSES.contains(&code) {
                        return Err(self.status_error(code, message));
                    }
                    if retry >= limits.max_retries {
                        return Err(self.status_error(code, gave_up(message, retry)));
                    }
                    (format!("HTTP {code}: {}", self.scrub(message)), retry_after)
                }
                Err(EgressError::Timeout(_)) => return Err(self.timed_out()),
                Err(e @ (EgressError::Connect { .. } | EgressError::Resolve { .. })) => {
                    let cause = match e {
                        EgressError::Connect { message, .. } => message,
                        other => other.to_string(),
                    };
                    let message = format!("cannot connect to {}: {cause}", endpoint.shown);
                    if retry >= limits.max_retries {
                        let hint = refused_hint(&self.provider, endpoint, &cause);
                        return Err(self.unavailable(format!("{}{hint}", gave_up(message, retry))));
                    }
                    (message, None)
                }
                Err(e) if e.is_refusal() => {
                    // The first URL is always allowed: these come from a redirect.
                    let hint = match e {
                        EgressError::HostNotAllowed { .. }
                        | EgressError::OriginNotAllowed { .. }
                        | EgressError::RedirectNotFollowed { .. } => {
                            " (a provider reaches only its base URL: set the base URL to where the server redirects)"
                        }
                        _ => "",
                    };
                    return Err(self.unavailable(format!("the request to {} was refused: {e}{hint}", endpoint.shown)));
                }
                Err(e) => return Err(self.unavailable(format!("the request to {} failed: {e}", endpoint.shown))),
            };
            let delay = match retry_after {
                Some(wait) => wait.min(limits.max_delay),
                None => limits.backoff(retry),
            };
            retry += 1;
            tracing::warn!(
                provider = %self.provider,
                retry,
                of = limits.max_retries,
                delay_ms = delay.as_millis() as u64,
                "{failure}; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    fn timed_out(&self) -> ModelError {
        self.unavailable(format!("no answer within {} s (the configured timeout)", self.limits.timeout.as_secs_f64()))
    }

    fn too_large(&self) -> ModelError {
        self.protocol(format!(
            "the answer is longer than {} bytes, the limit; raise `max_response_bytes` if answers this long are \
             expected",
            self.limits.max_body
        ))
    }

    /// Reads a whole response body as JSON.
    pub(crate) async fn read_json(&self, mut response: StreamingResponse) -> Result<serde_json::Value, ModelError> {
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(piece)) => bytes.extend_from_slice(&piece),
                Ok(None) => break,
                Err(EgressError::Timeout(_)) => return Err(self.timed_out()),
                Err(EgressError::BodyTooLarge { .. }) => return Err(self.too_large()),
                Err(e) => return Err(self.protocol(format!("the answer was cut off: {e}"))),
            }
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| self.protocol(format!("the answer is not valid JSON ({e}); it began: {}", quote(&bytes))))
    }

    /// Reads a response as server-sent events.
    pub(crate) fn events(&self, response: StreamingResponse) -> SseStream<'_> {
        SseStream { http: self, response, parser: SseParser::default(), queue: VecDeque::new(), eof: false }
    }
}

/// Up to `limit` bytes of a body (an error's), whatever stops it.
async fn read_some(response: &mut StreamingResponse, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(piece)) => body.extend_from_slice(&piece),
            _ => break,
        }
    }
    body.truncate(limit);
    body
}

/// Whether a response is an event stream (some servers ignore `stream: true`
/// and answer with plain JSON).
pub(crate) fn is_event_stream(response: &StreamingResponse) -> bool {
    response
        .content_type
        .as_deref()
        .is_none_or(|v| !v.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

fn gave_up(message: String, retries: u32) -> String {
    if retries == 0 { message } else { format!("{message} (gave up after {retries} retries)") }
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds. HTTP dates are
/// ignored: backoff applies instead.
fn retry_after(headers: &[(String, String)]) -> Option<Duration> {
    let number = |name: &str| {
        let (_, value) = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        value.trim().parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(86_400.0)))
}

/// What to add when nothing listens at a model server's address: the
/// server on the operator's side is not running, or the base URL is wrong.
/// Empty for any other failure, and for the hosted providers' own APIs.
fn refused_hint(provider: &str, endpoint: &Endpoint, cause: &str) -> String {
    if !cause.to_ascii_lowercase().contains("refused") {
        return String::new();
    }
    let Ok(url) = url::Url::parse(&endpoint.url) else { return String::new() };
    let origin = url.origin().ascii_serialization();
    let local = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match provider {
        "ollama" => format!("; nothing is listening on {origin}; is Ollama running? (`ollama serve`)"),
        "openai-compatible" => format!("; nothing is listening on {origin}; start the server or fix --base-url"),
        _ if local => format!("; nothing is listening on {origin}; start the server or fix --base-url"),
        _ => String::new(),
    }
}

/// The message in an error body: `error.message` (OpenAI and Anthropic),
/// `error` as a string (Ollama), a top-level `message`, or the text itself.
pub(crate) fn error_message(body: &[u8]) -> Option<String> {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .and_then(|m| m.as_str());
        if let Some(message) = found {
            return Some(message.to_string());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| quote(text.as_bytes()))
}

/// The fix to add when an error body says the conversation is longer than
/// the model's context: llama.cpp's `exceed_context_size_error` says only
/// "try increasing it", OpenAI's `context_length_exceeded` not even that.
fn overflow_hint(body: &[u8]) -> &'static str {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else { return "" };
    let field = |name: &str| value.pointer(&format!("/error/{name}")).and_then(|v| v.as_str());
    if field("type") == Some("exceed_context_size_error") {
        "; the conversation does not fit the server's context: restart llama-server with a larger one \
         (`-c`/`--ctx-size`, up to the model's training context), or shorten the conversation"
    } else if field("code") == Some("context_length_exceeded") {
        "; the conversation does not fit the model's context window: use a model with a longer one, or \
         shorten the conversation"
    } else {
        ""
    }
}

/// The start of `bytes` as text, for messages.
pub(crate) fn quote(bytes: &[u8]) -> String {
    nexo_text::head_chars(&String::from_utf8_lossy(bytes), QUOTE_LIMIT)
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, empty when absent.
    pub(crate) event: String,
    /// The `data:` lines, joined with newlines.
    pub(crate) data: String,
}

/// An incremental parser for `text/event-stream`. Bytes are buffered until a
/// line is complete, so lines and UTF-8 characters may be split anywhere.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buffer: Vec<u8>,
    event: String,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; complete events are appended to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut VecDeque<SseEvent>) {
        self.buffer.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = self.buffer[start..].iter().position(|b| *b == b'\n').map(|p| start + p) {
            let mut line = &self.buffer[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.line(&line, out);
            start = end + 1;
        }
        self.buffer.drain(..start);
    }

    /// Ends the input: an event whose lines were complete but which lacked
    /// the final blank line is delivered; a partial line is dropped.
    pub(crate) fn finish(&mut self, out: &mut VecDeque<SseEvent>) {
        self.buffer.clear();
        self.line("", out);
    }

    fn line(&mut self, line: &str, out: &mut VecDeque<SseEvent>) {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            if let Some(data) = self.data.take() {
                out.push_back(SseEvent { event, data });
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = value.to_string(),
            _ => {}
        }
    }
}

/// Server-sent events read from a response, one at a time.
pub(crate) struct SseStream<'h> {
    http: &'h Http,
    response: StreamingResponse,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    eof: bool,
}

impl SseStream<'_> {
    /// The next event, or `None` at the end of the stream. A connection that
    /// breaks, or a stream past the size limit, is a [`ModelError::Protocol`]
    /// error; one that stays silent longer than the timeout, or runs past
    /// the stream's time limit, is [`ModelError::Unavailable`].
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent>, ModelError> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Ok(Some(event));
            }
            if self.eof {
                return Ok(None);
            }
            match self.response.chunk().await {
                Err(EgressError::Timeout(message)) => {
                    return Err(self.http.unavailable(format!("the stream stopped: {message}")));
                }
                Err(EgressError::BodyTooLarge { .. }) => return Err(self.http.too_large()),
                Err(e) => return Err(self.http.protocol(format!("the stream was cut off: {e}"))),
                Ok(Some(bytes)) => self.parser.push(&bytes, &mut self.queue),
                Ok(None) => {
                    self.parser.finish(&mut self.queue);
                    self.eof = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_at_the_limit_without_splitting_a_character() {
        assert_eq!(quote(b"short"), "short");
        let long = quote("é".repeat(QUOTE_LIMIT + 1).as_bytes());
        assert_eq!(long.chars().count(), QUOTE_LIMIT);
        assert!(long.ends_with('…') && long.starts_with('é'), "{long}");
        assert_eq!(quote(b"a\xffb"), "a\u{fffd}b");
    }

    fn parse(chunks: &[&[u8]], finish: bool) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.push(chunk, &mut out);
        }
        if finish {
            parser.finish(&mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn sse_lines_split_anywhere() {
        let text = "event: a\ndata: {\"x\": \"é\"}\n\n: comment\r\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\n\n";
        let bytes = text.as_bytes();
        let whole = parse(&[bytes], false);
        let pieces: Vec<&[u8]> = bytes.chunks(3).collect();
        assert_eq!(parse(&pieces, false), whole);
        assert_eq!(
            whole,
            vec![
                SseEvent { event: "a".into(), data: "{\"x\": \"é\"}".into() },
                SseEvent { event: String::new(), data: "one\ntwo".into() },
                SseEvent { event: String::new(), data: "[DONE]".into() },
            ]
        );
    }

    #[test]
    fn sse_end_of_input() {
        // Complete lines without the closing blank line still count; a partial line does not.
        assert_eq!(parse(&[b"data: x\n"], true), vec![SseEvent { event: String::new(), data: "x".into() }]);
        assert_eq!(parse(&[b"data: x\n\ndata: {\"y"], true).len(), 1);
    }

    fn limits() -> Limits {
        Limits {
            timeout: Duration::from_secs(5),
            max_retries: 0,
            base_delay: DEFAULT_RETRY_BASE_DELAY,
            max_delay: DEFAULT_RETRY_MAX_DELAY,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    fn http(base: &str, reach: Reach) -> (Http, Endpoint) {
        let endpoint = Endpoint::new(base, "openai", "/chat/completions", None).unwrap();
        let auth = Auth { header: "authorization", prefix: "Bearer " };
        let http = Http::new("openai", &endpoint, reach, auth, Some("sk-unit-0123456789".into()), &[], limits());
        (http.unwrap(), endpoint)
    }

    #[test]
    fn only_an_operator_host_is_exempt_from_the_address_guard() {
        assert!(!http("https://api.openai.com/v1", Reach::Public).0.reaches_private());
        assert!(http("http://localhost:11434/v1", Reach::OperatorHost).0.reaches_private());
        let debug = format!("{:?}", http("https://api.openai.com/v1", Reach::Public).0);
        assert!(!debug.contains("sk-unit") && debug.contains("<redacted>"), "{debug}");
    }

    #[tokio::test]
    async fn a_public_only_provider_never_reaches_loopback() {
        let (http, endpoint) = http("http://127.0.0.1:9/v1", Reach::Public);
        for stream in [false, true] {
            let error = http.post(&endpoint, b"{}".to_vec(), stream).await.unwrap_err();
            assert!(
                matches!(&error, ModelError::Unavailable { message, .. }
                    if message.contains("refused") && message.contains("loopback")),
                "{error}"
            );
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(error_message(br#"{"error":{"message":"bad key","type":"x"}}"#).as_deref(), Some("bad key"));
        assert_eq!(error_message(br#"{"error":"model not found"}"#).as_deref(), Some("model not found"));
        assert_eq!(error_message(b"  upstream down \n").as_deref(), Some("upstream down"));
        assert_eq!(error_message(b""), None);
    }

    #[test]
    fn context_overflows_name_the_fix() {
        // As llama-server answers a prompt longer than its `-c`.
        let llama = br#"{"error":{"code":400,"message":"request (721 tokens) exceeds the available context size (256 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":721,"n_ctx":256}}"#;
        assert!(overflow_hint(llama).contains("`-c`/`--ctx-size`"), "{}", overflow_hint(llama));
        let openai = br#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert!(overflow_hint(openai).contains("a model with a longer one"), "{}", overflow_hint(openai));
        assert_eq!(overflow_hint(br#"{"error":{"message":"bad key","type":"x"}}"#), "");
        assert_eq!(overflow_hint(b"not json"), "");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let limits = Limits {
            timeout: DEFAULT_TIMEOUT,
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_body: DEFAULT_MAX_BODY,
        };
        for retry in 0..10 {
            let d = limits.backoff(retry);
            let exp = (Duration::from_millis(100) * 2u32.pow(retry)).min(Duration::from_secs(1));
            assert!(d >= exp / 2 && d <= exp, "retry {retry}: {d:?}");
        }
        assert!(limits.backoff(40) <= Duration::from_secs(1));
    }

    #[test]
    fn retry_after_headers() {
        let header = |name: &str, value: &str| (name.to_string(), value.to_string());
        assert_eq!(retry_after(&[]), None);
        assert_eq!(retry_after(&[header("retry-after", "2")]), Some(Duration::from_secs(2)));
        let both = [header("retry-after", "2"), header("retry-after-ms", "250")];
        assert_eq!(retry_after(&both), Some(Duration::from_millis(250)));
        assert_eq!(retry_after(&[header("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]), None);
    }
}
