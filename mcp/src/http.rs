//! rmcp's streamable-HTTP client over nexo's guarded egress client: every
//! request passes the address guard and reaches only the configured origin,
//! and the bearer token goes in as a secret header (scrubbed from answers),
//! never through rmcp's `auth_header`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use nexo_egress::{EgressError, GuardedClient, HostList, Origin, Policy, Request, SecretHeader, StreamingResponse};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse, SseStream};

use crate::config::HttpSpec;
use crate::error::McpError;

/// The longest wait for response headers or the next piece of a body. Calls
/// have their own, shorter limits; the standalone GET stream may be quiet
/// between server keep-alives.
const WAIT: Duration = Duration::from_secs(15 * 60);
/// The longest a single streamed request may stay open (the GET stream
/// reconnects after it).
const STREAM: Duration = Duration::from_secs(24 * 3600);
/// The most bytes of one response (a POST's answer, or a GET stream over its life).
const MAX_BODY: usize = 64 << 20;
/// How much of an error body is shown.
const ERROR_BODY_SHOWN: usize = 1000;

type HttpResult<T> = Result<T, StreamableHttpError<EgressError>>;

/// The egress policy of one connection: the configured origin only, the
/// operator's headers, and the token as a secret header.
pub(crate) fn policy(server: &str, spec: &HttpSpec, token: Option<String>) -> Result<Policy, McpError> {
    let config =
        |e: EgressError| McpError::Egress { server: server.to_string(), message: format!("{e}; fix [mcp.{server}]") };
    let host = spec.url.host_str().unwrap_or_default();
    let hosts = HostList::new([host]).map_err(|e| McpError::Egress {
        server: server.to_string(),
        message: format!("{e}; fix `url` in [mcp.{server}]"),
    })?;
    let origin = Origin::parse(&spec.origin).map_err(config)?;
    let mut policy = Policy::new(hosts)
        .within_origins([origin])
        .mcp_headers()
        .trace_context()
        .timeout(WAIT)
        .stream_timeout(STREAM)
        .max_body(MAX_BODY);
    for (name, value) in &spec.headers {
        if name != "authorization" {
            policy = policy.header(name, value).map_err(config)?;
        }
    }
    // The token wins over a configured `authorization` header.
    let secret = match (token, spec.headers.get("authorization")) {
        (Some(token), _) => {
            Some(SecretHeader::with_prefix("authorization", "Bearer ", token).map_err(|_| McpError::Token {
                server: server.to_string(),
                message: format!(
                    "the {} is not a valid header value (it has a line break or control character); fix the token",
                    spec.token.describe()
                ),
            })?)
        }
        (None, Some(value)) => Some(SecretHeader::new("authorization", value.clone()).map_err(config)?),
        (None, None) => None,
    };
    if let Some(secret) = secret {
        policy = policy.inject(secret.for_origins([spec.origin.as_str()]).map_err(config)?);
    }
    Ok(policy)
}

/// The egress client for a server: the given one, or a fresh one exempting
/// the configured host when `allow-private` is set.
pub(crate) fn egress_client(
    server: &str,
    spec: &HttpSpec,
    given: Option<&GuardedClient>,
) -> Result<GuardedClient, McpError> {
    if let Some(client) = given {
        return Ok(client.clone());
    }
    let mut builder = GuardedClient::builder();
    if spec.allow_private
        && let Some(host) = spec.url.host_str()
    {
        builder = builder.allow_private_host(host.trim_start_matches('[').trim_end_matches(']'));
    }
    builder.build().map_err(|e| McpError::Egress {
        server: server.to_string(),
        message: format!("{e}; fix `url` in [mcp.{server}]"),
    })
}

/// rmcp's HTTP client: one connection's policy over the guarded client. The
/// last egress refusal is kept, since rmcp's errors only carry its text.
#[derive(Clone)]
pub(crate) struct EgressHttp {
    client: GuardedClient,
    policy: Arc<Policy>,
    refusal: Arc<Mutex<Option<EgressError>>>,
}

impl EgressHttp {
    pub(crate) fn new(client: GuardedClient, policy: Policy) -> Self {
        EgressHttp { client, policy: Arc::new(policy), refusal: Arc::default() }
    }

    /// The last refusal (or configuration error) from the guarded client.
    pub(crate) fn refusal(&self) -> Option<EgressError> {
        self.refusal.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    async fn send(&self, request: Request) -> HttpResult<StreamingResponse> {
        match self.client.stream(request, &self.policy).await {
            Ok(r) => Ok(r),
            Err(e) => {
                if e.is_refusal() || matches!(e, EgressError::Config(_)) {
                    *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
                }
                Err(StreamableHttpError::Client(e))
            }
        }
    }
}

fn header<'a>(response: &'a StreamingResponse, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn media_type_is(content_type: Option<&str>, wanted: &str) -> bool {
    content_type.and_then(|ct| ct.split(';').next()).is_some_and(|media| media.trim().eq_ignore_ascii_case(wanted))
}

/// The body as a byte stream, for the SSE parser.
fn body_stream(response: StreamingResponse) -> BoxStream<'static, Result<bytes::Bytes, EgressError>> {
    futures::stream::unfold(Some(response), |state| async move {
        let mut response = state?;
        match response.chunk().await {
            Ok(Some(piece)) => Some((Ok(bytes::Bytes::from(piece)), Some(response))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}

/// The whole body, failing past `limit` bytes.
async fn read_body(response: &mut StreamingResponse, limit: usize) -> HttpResult<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(piece) = response.chunk().await.map_err(StreamableHttpError::Client)? {
        body.extend_from_slice(&piece);
        if body.len() > limit {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
    }
    Ok(body)
}

/// Caller headers for one request: rmcp's own (protocol version and the
/// like), the session, and what the request accepts.
fn request_headers(
    accept: &str,
    session_id: Option<&str>,
    custom: HashMap<HeaderName, HeaderValue>,
) -> Vec<(String, String)> {
    let mut headers = vec![("accept".to_string(), accept.to_string())];
    if let Some(session) = session_id {
        headers.push(("mcp-session-id".into(), session.into()));
    }
    for (name, value) in custom {
        if let Ok(value) = value.to_str() {
            headers.push((name.as_str().to_string(), value.to_string()));
        }
    }
    headers
}

/// A call's trace context, which the call put in its `_meta` (SEP-414), as
/// headers too: an HTTP server's own tracing reads those.
fn trace_headers(message: &ClientJsonRpcMessage) -> Vec<(String, String)> {
    use rmcp::model::{ClientRequest, RequestParamsMeta};
    let JsonRpcMessage::Request(request) = message else { return Vec::new() };
    let ClientRequest::CallToolRequest(call) = &request.request else { return Vec::new() };
    let params = &call.params;
    [("traceparent", params.traceparent()), ("tracestate", params.tracestate())]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?.to_string())))
        .collect()
}

/// A non-success answer as rmcp's error, with the status and the start of the body.
fn status_error(status: u16, body: &[u8], content_type: Option<&str>) -> StreamableHttpError<EgressError> {
    if status == 429 || (500..600).contains(&status) {
        return StreamableHttpError::HttpStatus(HttpStatusError::new(status, None));
    }
    let text: String = String::from_utf8_lossy(body).chars().take(ERROR_BODY_SHOWN).collect();
    let text = text.trim();
    let hint = match status {
        401 => " (the server refused the credentials: check the token source)",
        403 => " (the server refused access with these credentials)",
        404 => " (check the path of `url`)",
        _ => "",
    };
    let shown = if text.is_empty() { String::new() } else { format!(": {text}") };
    let _ = content_type;
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}{hint}{shown}")))
}

impl StreamableHttpClient for EgressHttp {
    type Error = EgressError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        // Never set: the token is a secret header of the policy.
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let body = serde_json::to_vec(&message)?;
        let mut headers = request_headers("application/json, text/event-stream", session_id.as_deref(), custom_headers);
        headers.extend(trace_headers(&message));
        let mut response = self.send(Request::post_json(uri.as_ref(), body).headers(&headers)).await?;
        let status = response.status;
        if status == 202 || status == 204 {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == 404 && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let new_session = header(&response, "mcp-session-id").map(str::to_string);
        let content_type = response.content_type.clone();
        let awaits_no_response = !matches!(message, JsonRpcMessage::Request(_));
        if !(200..300).contains(&status) {
            let body = read_body(&mut response, limits.max_json_response_size).await?;
            // A JSON-RPC error in an error status still answers the request.
            if media_type_is(content_type.as_deref(), "application/json")
                && !matches!(status, 401 | 403)
                && let Ok(error @ JsonRpcMessage::Error(_)) = serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, new_session));
            }
            return Err(status_error(status, &body, content_type.as_deref()));
        }
        if media_type_is(content_type.as_deref(), "text/event-stream") {
            let events = SseStream::from_bytes_stream(body_stream(response)).boxed();
            return Ok(StreamableHttpPostResponse::Sse(events, new_session));
        }
        if media_type_is(content_type.as_deref(), "application/json") {
            let body = read_body(&mut response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, new_session)),
                Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
                Err(e) => Err(StreamableHttpError::Deserialize(e)),
            };
        }
        if awaits_no_response {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(content_type))
    }

    async fn delete_session(
        &self,
        _uri: Arc<str>,
        _session_id: Arc<str>,
        _auth_header: Option<String>,
        _custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        // The guarded client sends no DELETE; the server's session expires by itself.
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let mut headers = request_headers("text/event-stream", session_id.as_deref(), custom_headers);
        if let Some(id) = last_event_id {
            headers.push(("last-event-id".into(), id));
        }
        let mut response = self.send(Request::get(uri.as_ref()).headers(&headers)).await?;
        let status = response.status;
        if status == 405 {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !(200..300).contains(&status) {
            let content_type = response.content_type.clone();
            let body = read_body(&mut response, ERROR_BODY_SHOWN * 4).await.unwrap_or_default();
            return Err(status_error(status, &body, content_type.as_deref()));
        }
        if !media_type_is(response.content_type.as_deref(), "text/event-stream") {
            return Err(StreamableHttpError::UnexpectedContentType(response.content_type.clone()));
        }
        Ok(SseStream::from_bytes_stream(body_stream(response)).boxed())
    }
}
