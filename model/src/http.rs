//! What the HTTP providers share: the client, retries with backoff, error
//! bodies, and a server-sent-events reader.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use nexo_egress::Redactor;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::endpoint::Endpoint;
use crate::{ModelConfig, ModelError};

/// The time limit for one request when the configuration sets none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to wait for a TCP (and TLS) connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries after the first attempt when the configuration sets none.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;
/// The first retry's delay before jitter; each further retry doubles it.
pub(crate) const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts, `retry-after` included.
pub(crate) const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(30);

/// Statuses worth another try: rate limits, server errors, gateways, and
/// Anthropic's 529 "overloaded".
const RETRY_STATUSES: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// Error bodies and odd answers are quoted up to this many characters, the
/// ellipsis marking a cut included.
const QUOTE_LIMIT: usize = 300;

/// Time limits and retry policy, resolved from a [`ModelConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) timeout: Duration,
    pub(crate) max_retries: u32,
    pub(crate) base_delay: Duration,
    pub(crate) max_delay: Duration,
}

impl Limits {
    pub(crate) fn from_config(config: &ModelConfig) -> Self {
        Limits {
            timeout: config.timeout.unwrap_or(DEFAULT_TIMEOUT),
            max_retries: config.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            base_delay: config.retry_base_delay.unwrap_or(DEFAULT_RETRY_BASE_DELAY),
            max_delay: config.retry_max_delay.unwrap_or(DEFAULT_RETRY_MAX_DELAY),
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

/// An HTTP client for one provider. It holds the auth headers, so its
/// `Debug` leaves them out.
pub(crate) struct Http {
    provider: String,
    client: reqwest::Client,
    headers: HeaderMap,
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
    /// A client for `provider` sending `headers` (auth included) with every
    /// request; `secret` is the key, kept only to scrub it from messages.
    pub(crate) fn new(
        provider: &str,
        mut headers: HeaderMap,
        secret: Option<String>,
        limits: Limits,
    ) -> Result<Self, ModelError> {
        for value in headers.values_mut() {
            // Keeps keys out of reqwest's and hyper's own debug output.
            value.set_sensitive(true);
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("nexo/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelError::Config(format!("cannot set up an HTTP client for {provider}: {}", chain(&e))))?;
        let secret = secret.filter(|s| !s.is_empty());
        let redactor =
            match &secret {
                Some(key) => Some(Redactor::new([key.as_bytes()]).map_err(|e| {
                    ModelError::Config(format!("cannot prepare the scrubbing of the {provider} key: {e}"))
                })?),
                None => None,
            };
        Ok(Http { provider: provider.into(), client, headers, secret, redactor, limits })
    }

    /// The provider's name, for messages.
    pub(crate) fn provider(&self) -> &str {
        &self.provider
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
    /// retrying connection failures and the statuses in [`RETRY_STATUSES`].
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
    ) -> Result<reqwest::Response, ModelError> {
        let limits = self.limits;
        let mut retry = 0u32;
        loop {
            let mut request = self
                .client
                .post(&endpoint.url)
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone());
            if stream {
                request = request.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
            } else {
                request = request.timeout(limits.timeout);
            }
            let sent = match tokio::time::timeout(limits.timeout, request.send()).await {
                Ok(sent) => sent,
                Err(_) => return Err(self.timed_out()),
            };
            let (failure, retry_after) = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry_after(response.headers());
                    let body = match tokio::time::timeout(limits.timeout, response.bytes()).await {
                        Ok(Ok(bytes)) => bytes.to_vec(),
                        _ => Vec::new(),
                    };
                    let message = error_message(&body)
                        .unwrap_or_else(|| status.canonical_reason().unwrap_or("no error message").to_string());
                    let code = status.as_u16();
                    if !RETRY_STATUSES.contains(&code) {
                        return Err(self.status_error(code, message));
                    }
                    if retry >= limits.max_retries {
                        return Err(self.status_error(code, gave_up(message, retry)));
                    }
                    (format!("HTTP {code}: {}", self.scrub(message)), retry_after)
                }
                Err(e) if e.is_timeout() => return Err(self.timed_out()),
                Err(e) if e.is_connect() => {
                    // reqwest's own message repeats the URL; its sources hold the cause.
                    let cause = std::error::Error::source(&e).map_or_else(|| chain(&e), chain);
                    let message = format!("cannot connect to {}: {cause}", endpoint.shown);
                    if retry >= limits.max_retries {
                        return Err(self.unavailable(gave_up(message, retry)));
                    }
                    (message, None)
                }
                Err(e) => {
                    return Err(self.unavailable(format!("the request to {} failed: {}", endpoint.shown, chain(&e))));
                }
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

    /// Reads a whole response body as JSON.
    pub(crate) async fn read_json(&self, response: reqwest::Response) -> Result<serde_json::Value, ModelError> {
        let bytes = match tokio::time::timeout(self.limits.timeout, response.bytes()).await {
            Err(_) => return Err(self.timed_out()),
            Ok(Err(e)) if e.is_timeout() => return Err(self.timed_out()),
            Ok(Err(e)) => return Err(self.protocol(format!("the answer was cut off: {}", chain(&e)))),
            Ok(Ok(bytes)) => bytes,
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| self.protocol(format!("the answer is not valid JSON ({e}); it began: {}", quote(&bytes))))
    }

    /// Reads a response as server-sent events.
    pub(crate) fn events(&self, response: reqwest::Response) -> SseStream<'_> {
        SseStream { http: self, response, parser: SseParser::default(), queue: VecDeque::new(), eof: false }
    }
}

/// Whether a response is an event stream (some servers ignore `stream: true`
/// and answer with plain JSON).
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| !v.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

fn gave_up(message: String, retries: u32) -> String {
    if retries == 0 { message } else { format!("{message} (gave up after {retries} retries)") }
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds. HTTP dates are
/// ignored: backoff applies instead.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(86_400.0)))
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

/// The start of `bytes` as text, for messages.
pub(crate) fn quote(bytes: &[u8]) -> String {
    nexo_text::head_chars(&String::from_utf8_lossy(bytes), QUOTE_LIMIT)
}

/// An error and its sources, joined, because reqwest's top-level message
/// alone ("error sending request") hides the cause.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
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
    response: reqwest::Response,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    eof: bool,
}

impl SseStream<'_> {
    /// The next event, or `None` at the end of the stream. A connection that
    /// breaks is a [`ModelError::Protocol`] error ("cut off"); one that stays
    /// silent longer than the timeout is [`ModelError::Unavailable`].
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent>, ModelError> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Ok(Some(event));
            }
            if self.eof {
                return Ok(None);
            }
            let timeout = self.http.limits.timeout;
            match tokio::time::timeout(timeout, self.response.chunk()).await {
                Err(_) => {
                    return Err(self.http.unavailable(format!(
                        "the stream stalled: nothing arrived for {} s (the configured timeout)",
                        timeout.as_secs_f64()
                    )));
                }
                Ok(Err(e)) => return Err(self.http.protocol(format!("the stream was cut off: {}", chain(&e)))),
                Ok(Ok(Some(bytes))) => self.parser.push(&bytes, &mut self.queue),
                Ok(Ok(None)) => {
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

    #[test]
    fn error_messages() {
        assert_eq!(error_message(br#"{"error":{"message":"bad key","type":"x"}}"#).as_deref(), Some("bad key"));
        assert_eq!(error_message(br#"{"error":"model not found"}"#).as_deref(), Some("model not found"));
        assert_eq!(error_message(b"  upstream down \n").as_deref(), Some("upstream down"));
        assert_eq!(error_message(b""), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let limits = Limits {
            timeout: DEFAULT_TIMEOUT,
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
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
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.remove("retry-after-ms");
        headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&headers), None);
    }
}
