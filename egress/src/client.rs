//! [`GuardedClient`]: the guarded HTTP client's requests.

use std::fmt;
use std::sync::Arc;

use tracing::info;

use crate::connect::Inner;
use crate::error::EgressError;
use crate::follow::{follow, log_error, timed_out};
use crate::policy::Policy;
use crate::request::Request;
use crate::response::{BodyStream, Response, StreamingResponse, read_capped};
use crate::scrub::Redactor;

/// The guarded HTTP client. Cloning is cheap and shares one connection pool.
#[derive(Clone)]
pub struct GuardedClient {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClient")
            .field("allow_private", &self.inner.guard.exempt)
            .field("allow_private_host", &self.inner.guard.exempt_hosts)
            .finish_non_exhaustive()
    }
}

impl GuardedClient {
    /// Whether this client exempts any address or host from the guard
    /// ([`GuardedClientBuilder::allow_private`],
    /// [`GuardedClientBuilder::allow_private_host`]). The fetch tool refuses
    /// such a client.
    ///
    /// [`GuardedClientBuilder::allow_private`]: crate::GuardedClientBuilder::allow_private
    /// [`GuardedClientBuilder::allow_private_host`]: crate::GuardedClientBuilder::allow_private_host
    pub fn has_exemptions(&self) -> bool {
        !self.inner.guard.exempt.is_empty() || !self.inner.guard.exempt_hosts.is_empty()
    }

    /// GETs `url` under `policy`, following allowed redirects. Every hop is
    /// checked against the policy's host lists and the address guard.
    pub async fn get(&self, url: &str, headers: &[(String, String)], policy: &Policy) -> Result<Response, EgressError> {
        self.send(Request::get(url).headers(headers), policy).await
    }

    /// Sends `request` under `policy` and reads the whole body, capped at
    /// [`Policy::max_body`] (then `truncated` is set), all within
    /// [`Policy::timeout`]. The same checks as [`GuardedClient::get`] apply
    /// to every hop; a POST follows only 307 and 308 redirects
    /// ([`Request::post_json`]).
    pub async fn send(&self, request: Request, policy: &Policy) -> Result<Response, EgressError> {
        let deadline = tokio::time::Instant::now() + policy.timeout;
        let head = follow(&self.inner, &request, policy, deadline).await?;
        let method = request.method;
        let host = head.url.host_str().unwrap_or_default().to_string();
        let url_shown = head.url_shown.clone();
        let read = async {
            let (body, truncated) = read_capped(head.response, policy, method, &head.url_shown).await?;
            Ok(Response {
                url: head.url.to_string(),
                status: head.status,
                headers: head.headers,
                content_type: head.content_type,
                body,
                truncated,
            })
        };
        let result = match tokio::time::timeout_at(deadline, read).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(method, &url_shown, policy)),
        };
        match &result {
            Ok(r) => info!(
                target: "nexo::egress",
                host,
                verdict = "ok",
                method = method.as_str(),
                url = %url_shown,
                status = r.status,
                bytes = r.body.len(),
                truncated = r.truncated
            ),
            Err(e) => log_error(&host, method, &url_shown, e),
        }
        result
    }

    /// Sends `request` under `policy` and returns once the response headers
    /// are in, for a body read piece by piece ([`StreamingResponse::chunk`]),
    /// such as server-sent events. The checks of [`GuardedClient::send`]
    /// apply to every hop, and the body is scrubbed of the policy's secrets
    /// as it is read. Limits: [`Policy::timeout`] until the headers and then
    /// for each wait for the body; [`Policy::stream_timeout`] for the whole
    /// request; [`Policy::max_body`] bytes of body, past which reading fails
    /// ([`EgressError::BodyTooLarge`]) rather than cutting it silently.
    pub async fn stream(&self, request: Request, policy: &Policy) -> Result<StreamingResponse, EgressError> {
        let started = tokio::time::Instant::now();
        let head = follow(&self.inner, &request, policy, started + policy.timeout).await?;
        info!(
            target: "nexo::egress",
            host = head.url.host_str().unwrap_or_default(),
            verdict = "ok",
            method = request.method.as_str(),
            url = %head.url_shown,
            status = head.status,
            streamed = true
        );
        let redactors: Vec<Arc<Redactor>> = policy.secrets.iter().map(|s| Arc::clone(&s.scrubber)).collect();
        let overlap = redactors.iter().map(|r| r.max_match()).max().unwrap_or(0);
        let body = BodyStream {
            response: head.response,
            redactors,
            overlap,
            pending: Vec::new(),
            searched: 0,
            boundary: 0,
            received: 0,
            limit: policy.max_body,
            idle: policy.timeout,
            end: started + policy.stream_timeout,
            ended: false,
            failed: None,
            method: request.method,
            url_shown: head.url_shown,
            meter: policy.meter.clone(),
        };
        Ok(StreamingResponse {
            url: head.url.to_string(),
            status: head.status,
            headers: head.headers,
            content_type: head.content_type,
            body,
        })
    }
}
