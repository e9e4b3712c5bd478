//! Responses: a whole body read under the policy's cap, or a body streamed
//! piece by piece, scrubbed as it arrives.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::connect::send_error;
use crate::error::EgressError;
use crate::meter::Meter;
use crate::policy::Policy;
use crate::request::Method;
use crate::scrub::{Redactor, scrub, scrub_prefix};

/// A response to [`GuardedClient::get`] or [`GuardedClient::send`].
///
/// [`GuardedClient::get`]: crate::GuardedClient::get
/// [`GuardedClient::send`]: crate::GuardedClient::send
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The final URL, after redirects.
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// The response headers, in order (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body, at most the policy's `max_body` bytes.
    pub body: Vec<u8>,
    /// Whether the body was cut at `max_body`.
    pub truncated: bool,
}

/// A response to [`GuardedClient::stream`]: the head, checked and scrubbed
/// like a [`Response`]'s, and a body read piece by piece with
/// [`StreamingResponse::chunk`].
///
/// [`GuardedClient::stream`]: crate::GuardedClient::stream
pub struct StreamingResponse {
    /// The final URL, after redirects.
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// The response headers, in order (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    pub(crate) body: BodyStream,
}

impl fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("url", &self.url)
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("content_type", &self.content_type)
            .field("received", &self.body.received)
            .finish_non_exhaustive()
    }
}

impl StreamingResponse {
    /// The next piece of the body, scrubbed of the policy's secrets, or
    /// `None` at its end.
    ///
    /// Pieces are released at event boundaries: the bytes up to the last
    /// blank line received (`\n\n`, which ends a server-sent event) are
    /// scrubbed and returned as soon as they arrive, the rest waits for more.
    /// A match is searched in all that has arrived, so it may span such a
    /// boundary; one that has not fully arrived when the bytes before the
    /// boundary go out is caught only in the parts on each side (any 12
    /// characters of the key, see [`Redactor`]). Bytes without a blank line
    /// are held back up to twice the longest possible match and then
    /// released, keeping that much back. Without secrets every piece goes
    /// out as it arrives.
    ///
    /// Errors: [`EgressError::BodyTooLarge`] past the policy's body limit
    /// ([`Policy::max_body`]), [`EgressError::Timeout`] when nothing arrives
    /// within the policy's timeout or the whole request passes its
    /// [`Policy::stream_timeout`], and a network failure as
    /// [`EgressError::Failed`]. After an error the bytes held back are
    /// dropped, and every later call returns the same error.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, EgressError> {
        self.body.next().await
    }

    /// How many body bytes have been received so far.
    pub fn received(&self) -> usize {
        self.body.received
    }
}

/// The body of a [`StreamingResponse`].
pub(crate) struct BodyStream {
    pub(crate) response: reqwest::Response,
    pub(crate) redactors: Vec<Arc<Redactor>>,
    /// The longest match: held back when no event boundary comes.
    pub(crate) overlap: usize,
    /// Received, not yet released.
    pub(crate) pending: Vec<u8>,
    /// How far `pending` was searched for a blank line, and where the last
    /// one found ends.
    pub(crate) searched: usize,
    pub(crate) boundary: usize,
    pub(crate) received: usize,
    pub(crate) limit: usize,
    pub(crate) idle: Duration,
    pub(crate) end: tokio::time::Instant,
    pub(crate) ended: bool,
    pub(crate) failed: Option<EgressError>,
    pub(crate) method: Method,
    pub(crate) url_shown: String,
    pub(crate) meter: Option<Arc<Meter>>,
}

impl BodyStream {
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>, EgressError> {
        loop {
            if let Some(error) = &self.failed {
                return Err(error.clone());
            }
            if let Some(piece) = self.release(self.ended) {
                return Ok(Some(piece));
            }
            if self.ended {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            let idle_end = now + self.idle;
            let wait = idle_end.min(self.end);
            let read = tokio::time::timeout_at(wait, self.response.chunk()).await;
            match read {
                Err(_) => {
                    let message = if idle_end <= self.end {
                        format!(
                            "{} {}: nothing arrived for {:?}; the server stalled — retry later or allow more time",
                            self.method.as_str(),
                            self.url_shown,
                            self.idle
                        )
                    } else {
                        format!(
                            "{} {}: the streamed body did not end within the request's time limit; allow more \
                             time for streams",
                            self.method.as_str(),
                            self.url_shown
                        )
                    };
                    return Err(self.fail(EgressError::Timeout(message)));
                }
                Ok(Err(e)) => return Err(self.fail(send_error(e, self.method, &self.url_shown))),
                Ok(Ok(None)) => self.ended = true,
                Ok(Ok(Some(bytes))) => {
                    self.received = self.received.saturating_add(bytes.len());
                    if self.received > self.limit {
                        let error = EgressError::BodyTooLarge { url: self.url_shown.clone(), limit: self.limit };
                        return Err(self.fail(error));
                    }
                    if let Some(meter) = &self.meter
                        && !meter.add(bytes.len())
                    {
                        let error = Policy::quota_error(meter);
                        return Err(self.fail(error));
                    }
                    self.pending.extend_from_slice(&bytes);
                }
            }
        }
    }

    fn fail(&mut self, error: EgressError) -> EgressError {
        // The held-back bytes could end in part of a key: never released.
        self.pending.clear();
        self.failed = Some(error.clone());
        info!(target: "nexo::egress", verdict = "failed", url = %self.url_shown, error = %error, "streamed body");
        error
    }

    /// The next piece to release, scrubbed; `all` releases everything.
    fn release(&mut self, all: bool) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        if self.overlap == 0 {
            return Some(std::mem::take(&mut self.pending));
        }
        let len = self.pending.len();
        let cut = if all {
            len
        } else {
            // Only the new bytes (and the two before them) can complete a blank line.
            let from = self.searched.saturating_sub(2);
            if let Some(end) = last_blank_line(&self.pending[from..]) {
                self.boundary = from + end;
            }
            self.searched = len;
            let slack = if len - self.boundary >= 2 * self.overlap { len - self.overlap } else { 0 };
            self.boundary.max(slack)
        };
        if cut == 0 {
            return None;
        }
        let redactors: Vec<&Redactor> = self.redactors.iter().map(|r| &**r).collect();
        let (piece, consumed) = scrub_prefix(&self.pending, &redactors, cut);
        self.pending.drain(..consumed);
        self.searched = self.pending.len();
        self.boundary = 0;
        Some(piece)
    }
}

/// The end of the last blank line (`\n\n` or `\n\r\n`) in `bytes`.
fn last_blank_line(bytes: &[u8]) -> Option<usize> {
    (1..bytes.len())
        .rev()
        .find(|&i| bytes[i] == b'\n' && (bytes[i - 1] == b'\n' || (i >= 2 && bytes[i - 2..i] == *b"\n\r")))
        .map(|i| i + 1)
}

/// The whole body, scrubbed and cut at the policy's limit.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    policy: &Policy,
    method: Method,
    url_shown: &str,
) -> Result<(Vec<u8>, bool), EgressError> {
    let secrets = policy.scrubbers();
    // Read a little past the cap and scrub before cutting, so a key
    // straddling the cap cannot survive in part.
    let overlap = secrets.iter().map(|s| s.max_match()).max().unwrap_or(0);
    let read_cap = policy.max_body.saturating_add(overlap);
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| send_error(e, method, url_shown))? {
        if let Some(meter) = &policy.meter
            && !meter.add(chunk.len())
        {
            return Err(Policy::quota_error(meter));
        }
        let room = read_cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let mut body = scrub(body, &secrets);
    if body.len() > policy.max_body {
        body.truncate(policy.max_body);
        truncated = true;
    }
    Ok((body, truncated))
}
