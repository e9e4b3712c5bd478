//! Forms and origins: the CSRF token a POST must carry, the same-origin check, and the security headers.

use axum::extract::{Form, FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::failure::Failure;
use super::who::Console;
use crate::server::api::AppState;

/// The console's `Content-Security-Policy`: this origin only, no inline
/// script or style, never in a frame.
pub const CSP: &str = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The console's `Referrer-Policy`: no URL of the console leaves for
/// another site. Not `no-referrer`: under it a browser sends `Origin: null`
/// with the console's own form posts, which the origin check must refuse.
pub const REFERRER_POLICY: &str = "same-origin";

/// Whether two secrets are equal, in time that does not depend on where
/// they differ (or on their lengths: both are hashed first).
pub(super) fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A signed-in POST whose form carries the session's CSRF token: its fields.
/// A missing or wrong token (or a body that is not a form) is refused with
/// 403 before anything happens.
pub(super) struct Posted {
    pub(super) console: Console,
    pub(super) fields: Vec<(String, String)>,
}

impl Posted {
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        field(&self.fields, name)
    }
}

pub(super) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

impl FromRequest<AppState> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let console = Console::from_request_parts(&mut parts, state).await?;
        let fields = match Form::<Vec<(String, String)>>::from_request(Request::from_parts(parts, body), state).await {
            Ok(Form(fields)) => fields,
            Err(_) => Vec::new(),
        };
        let given = field(&fields, "csrf").unwrap_or("");
        if given.is_empty() || !same_secret(given, &console.csrf) {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "This form did not carry this session's security token, so nothing was done. \
                 Reload the page and try again.",
                Some(&console),
            )
            .into_response());
        }
        Ok(Posted { console, fields })
    }
}

/// Whether a request's `Origin`, if it sent one, is this host (as the
/// `Host` header, or a proxy's `X-Forwarded-Host`, names it).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let Some(host) = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, h)| h.trim_end_matches('/'))
    else {
        return false; // `null`, or not a URL
    };
    [header::HOST.as_str(), "x-forwarded-host"].into_iter().any(|name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').next().unwrap_or("").trim().eq_ignore_ascii_case(host))
    })
}

/// Refuses cross-origin POSTs, and adds the console's security headers to
/// every answer.
pub(super) async fn protect(request: Request, next: Next) -> Response {
    let mut response = if request.method() == Method::POST && !same_origin(request.headers()) {
        Failure::new(
            StatusCode::FORBIDDEN,
            "This form was sent from another site, so nothing was done. Use the console's own pages.",
            None,
        )
        .into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static(REFERRER_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::signin::random_token;

    #[test]
    fn secrets_compare_by_value_only() {
        let t = random_token();
        assert_eq!(t.len(), 64);
        assert_ne!(t, random_token());
        assert!(same_secret(&t, &t.clone()));
        assert!(!same_secret(&t, &random_token()));
        assert!(!same_secret(&t, &t[..63]));
        assert!(!same_secret(&t, ""));
    }

    #[test]
    fn origin_must_be_this_host() {
        let with = |origin: Option<&'static str>, host: &'static str, forwarded: Option<&'static str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static(host));
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_static(o));
            }
            if let Some(f) = forwarded {
                h.insert("x-forwarded-host", HeaderValue::from_static(f));
            }
            same_origin(&h)
        };
        assert!(with(None, "127.0.0.1:8700", None), "no Origin: the CSRF token decides");
        assert!(with(Some("http://127.0.0.1:8700"), "127.0.0.1:8700", None));
        assert!(!with(Some("http://evil.example"), "127.0.0.1:8700", None));
        assert!(!with(Some("http://127.0.0.1:8701"), "127.0.0.1:8700", None));
        assert!(!with(Some("null"), "127.0.0.1:8700", None));
        assert!(with(Some("https://nexo.example.com"), "127.0.0.1:8700", Some("nexo.example.com")));
    }
}
