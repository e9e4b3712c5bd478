//! The one path every request takes through the checks: each hop checked
//! and sent, redirects followed, the final answer's head scrubbed.

use std::net::IpAddr;
use std::sync::Arc;

use reqwest::header::{
    ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION, TRANSFER_ENCODING,
};
use tracing::info;
use url::{Host, Url};

use crate::connect::{Inner, send_error};
use crate::error::EgressError;
use crate::origin::Origin;
use crate::policy::{Policy, caller_headers};
use crate::request::{Method, Request};
use crate::scrub::scrub;
use crate::secret::SecretHeader;
use crate::shown::{shown, strip_query};

enum Hop {
    Done(Box<Head>),
    Redirect(Url),
}

/// A final answer whose headers passed: the body is still to be read.
pub(crate) struct Head {
    pub(crate) url: Url,
    pub(crate) url_shown: String,
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) content_type: Option<String>,
    pub(crate) response: reqwest::Response,
}

/// Sends `request`, following allowed redirects, up to the final
/// answer's headers. The one path every request takes through the checks.
///
/// It runs in a task of its own. A guest's host call polls its future on
/// the guest's fiber stack, and every page of that stack it touches
/// stays resident for as long as the run waits; connecting (lookup, TCP,
/// TLS) is the deepest part of a request, so it runs on a worker
/// thread's stack instead. This keeps 40% less of the fiber stack of a
/// run waiting on its model. Dropping the future aborts the task.
pub(crate) async fn follow(
    inner: &Arc<Inner>,
    request: &Request,
    policy: &Policy,
    deadline: tokio::time::Instant,
) -> Result<Head, EgressError> {
    use tracing::Instrument;
    use tracing::instrument::WithSubscriber;
    struct AbortOnDrop(tokio::task::JoinHandle<Result<Head, EgressError>>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let (inner, owned, policy) = (Arc::clone(inner), request.clone(), policy.clone());
    let work = async move { follow_here(&inner, &owned, &policy, deadline).await };
    let mut task = AbortOnDrop(tokio::spawn(work.in_current_span().with_current_subscriber()));
    match (&mut task.0).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(EgressError::Failed(format!(
            "{} {}: the request was cancelled because nexo is shutting down",
            request.method.as_str(),
            strip_query(&request.url)
        ))),
    }
}

async fn follow_here(
    inner: &Inner,
    request: &Request,
    policy: &Policy,
    deadline: tokio::time::Instant,
) -> Result<Head, EgressError> {
    let caller = caller_headers(&request.headers, policy)?;
    let mut current = Url::parse(&request.url)
        .map_err(|e| EgressError::BadUrl(format!("`{}` is not a valid URL: {e}", strip_query(&request.url))))?;
    let mut followed = 0;
    loop {
        match hop(inner, &current, request, &caller, policy, deadline).await? {
            Hop::Done(head) => return Ok(*head),
            Hop::Redirect(next) => {
                if followed >= policy.max_redirects {
                    return Err(EgressError::TooManyRedirects { limit: policy.max_redirects, last: shown(&next) });
                }
                followed += 1;
                current = next;
            }
        }
    }
}

/// One request; redirects and refusals are logged here, final answers
/// once their body is read (or, streamed, once their headers are in).
async fn hop(
    inner: &Inner,
    url: &Url,
    request: &Request,
    caller: &HeaderMap,
    policy: &Policy,
    deadline: tokio::time::Instant,
) -> Result<Hop, EgressError> {
    let url_shown = shown(url);
    let host = url.host_str().unwrap_or_default();
    let result = hop_unlogged(inner, url, request, caller, policy, &url_shown, deadline).await;
    match &result {
        Ok(Hop::Done(_)) => {}
        Ok(Hop::Redirect(next)) => info!(
            target: "nexo::egress",
            host,
            verdict = "redirect",
            method = request.method.as_str(),
            url = %url_shown,
            to = %shown(next)
        ),
        Err(e) => log_error(host, request.method, &url_shown, e),
    }
    result
}

async fn hop_unlogged(
    inner: &Inner,
    url: &Url,
    request: &Request,
    caller: &HeaderMap,
    policy: &Policy,
    url_shown: &str,
    deadline: tokio::time::Instant,
) -> Result<Hop, EgressError> {
    let host = check_url(url, url_shown)?;
    let host_text = host.to_string();
    if !policy.hosts.matches_url_host(&host) {
        return Err(EgressError::HostNotAllowed { host: host_text, allowed: policy.hosts.to_string() });
    }
    for list in &policy.within {
        if !list.matches_url_host(&host) {
            return Err(EgressError::HostNotAllowed {
                host: host_text,
                allowed: format!("{list}, as narrowed by the operator"),
            });
        }
    }
    if let Some(origins) = &policy.origins
        && !origins.iter().any(|o| o.matches(url))
    {
        let allowed: Vec<String> = origins.iter().map(Origin::to_string).collect();
        let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
        return Err(EgressError::OriginNotAllowed { origin: url.origin().ascii_serialization(), allowed });
    }
    if let Some(meter) = &policy.meter
        && meter.exhausted()
    {
        return Err(Policy::quota_error(meter));
    }
    // Only the secrets whose origin this URL has exactly.
    let inject: Vec<&SecretHeader> = policy.secrets.iter().filter(|s| policy.sends(s, url)).collect();
    if inject.len() < policy.secrets.len() {
        // Says why an upstream answers 401, without naming the key.
        let withheld: Vec<&str> =
            policy.secrets.iter().filter(|s| !inject.iter().any(|i| i.name == s.name)).map(|s| s.name()).collect();
        tracing::debug!(target: "nexo::egress", url = %url_shown, ?withheld, "not sending secret headers: this URL is not one of their origins");
    }
    let method = request.method;
    let work = async {
        let guard = &inner.guard;
        let host_exempt = guard.host_exempt(&host);
        let addrs = match host {
            // Refuses early with a clear error; the connect-time resolver
            // checks again whatever it connects to.
            Host::Domain(name) => guard.resolve_checked(name).await?,
            Host::Ipv4(ip) => vec![guard.checked(&host_text, host_exempt, IpAddr::V4(ip))?],
            Host::Ipv6(ip) => vec![guard.checked(&host_text, host_exempt, IpAddr::V6(ip))?],
        };
        // A key crosses the network only inside TLS, or to the operator's
        // own exempted service (a test route stands in for TLS).
        if !inject.is_empty() && url.scheme() != "https" && !addrs.iter().all(|ip| guard.private_ok(host_exempt, *ip)) {
            return Err(EgressError::BadRequest(format!(
                "{url_shown} is plain http, and nexo sends this host's API key only over https; use an https URL"
            )));
        }
        let mut headers = caller.clone();
        for (name, value) in &policy.headers {
            headers.insert(name.clone(), value.clone());
        }
        for secret in &inject {
            let (name, value) = secret.header()?;
            headers.insert(name, value);
        }
        // Uncompressed only: the scrubber must see the bytes the caller gets.
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let mut builder = match method {
            Method::Get => inner.http.get(url.clone()),
            Method::Post => inner.http.post(url.clone()),
        };
        if let Some(body) = &request.body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            builder = builder.body(body.clone());
            // Counted as sent: past the allowance, this is the last request.
            if let Some(meter) = &policy.meter {
                meter.add(body.len());
            }
        }
        let response = builder.headers(headers).send().await.map_err(|e| send_error(e, method, url_shown))?;
        head(url, response, policy, method, url_shown)
    };
    match tokio::time::timeout_at(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(timed_out(method, url_shown, policy)),
    }
}

pub(crate) fn timed_out(method: Method, url_shown: &str, policy: &Policy) -> EgressError {
    EgressError::Timeout(format!(
        "{} {url_shown} did not finish within {:?} (redirects included); the server is slow or unreachable — \
         retry later or allow more time",
        method.as_str(),
        policy.timeout
    ))
}

pub(crate) fn log_error(host: &str, method: Method, url_shown: &str, e: &EgressError) {
    info!(
        target: "nexo::egress",
        host,
        verdict = if e.is_refusal() { "refused" } else { "failed" },
        method = method.as_str(),
        url = %url_shown,
        error = %e
    );
}

/// A redirect to follow, or the final answer with its headers scrubbed and
/// its codings checked.
fn head(
    url: &Url,
    response: reqwest::Response,
    policy: &Policy,
    method: Method,
    url_shown: &str,
) -> Result<Hop, EgressError> {
    let status = response.status().as_u16();
    // Every secret of the policy, not only those sent on this hop: an
    // earlier hop may have put one into this URL.
    let secrets = policy.scrubbers();
    if matches!(status, 301 | 302 | 303 | 307 | 308)
        && let Some(location) = response.headers().get(LOCATION)
    {
        // Scrubbed too: the next URL shows up in logs and error messages.
        let location = String::from_utf8_lossy(&scrub(location.as_bytes().to_vec(), &secrets)).into_owned();
        let next = url.join(&location).map_err(|e| {
            EgressError::BadUrl(format!(
                "{url_shown} redirected to `{}`, which is not a valid URL: {e}",
                strip_query(&location)
            ))
        })?;
        if method == Method::Post && !matches!(status, 307 | 308) {
            return Err(EgressError::RedirectNotFollowed {
                method: method.as_str().to_string(),
                status,
                from: url_shown.to_string(),
                to: shown(&next),
            });
        }
        return Ok(Hop::Redirect(next));
    }
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(name, value)| {
            // Names too: a server can echo a key as a header name.
            let name = scrub(name.as_str().as_bytes().to_vec(), &secrets);
            let value = scrub(value.as_bytes().to_vec(), &secrets);
            (String::from_utf8_lossy(&name).into_owned(), String::from_utf8_lossy(&value).into_owned())
        })
        .collect();
    // Refused rather than decoded: decoding would put a decompressor
    // (and its zip-bomb limits) in front of the scrubber, while a server
    // asked for `identity` has no reason to send anything else.
    // Hyper removes chunked framing itself.
    for (header, allowed) in
        [(CONTENT_ENCODING.as_str(), &["identity"][..]), (TRANSFER_ENCODING.as_str(), &["identity", "chunked"][..])]
    {
        for (_, value) in headers.iter().filter(|(name, _)| name == header) {
            let refused = value
                .split(',')
                .map(str::trim)
                .any(|coding| !coding.is_empty() && !allowed.iter().any(|a| coding.eq_ignore_ascii_case(a)));
            if refused {
                return Err(EgressError::UnrequestedEncoding {
                    url: url_shown.to_string(),
                    header: header.to_string(),
                    encoding: value.clone(),
                });
            }
        }
    }
    let content_type = headers.iter().find(|(name, _)| name == CONTENT_TYPE.as_str()).map(|(_, v)| v.clone());
    Ok(Hop::Done(Box::new(Head {
        url: url.clone(),
        url_shown: url_shown.to_string(),
        status,
        headers,
        content_type,
        response,
    })))
}

/// Scheme, user info and host checks for one hop.
fn check_url<'u>(url: &'u Url, url_shown: &str) -> Result<Host<&'u str>, EgressError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(EgressError::BadUrl(format!(
            "{url_shown} uses the scheme `{}`; only http and https URLs can be fetched",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EgressError::BadUrl(format!(
            "{url_shown} carries credentials (`user:password@`); remove them — nexo never sends credentials from URLs"
        )));
    }
    url.host().ok_or_else(|| EgressError::BadUrl(format!("{url_shown} has no host")))
}
