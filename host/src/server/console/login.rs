//! Signing in with a tenant key, and out.

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::json;

use super::cookies::{LOGIN_COOKIE, SESSION_COOKIE, cookie, over_https, set_cookie};
use super::csrf::{Posted, field, same_secret};
use super::failure::Failure;
use super::html::{Nav, csrf_field, escape, html, page};
use crate::server::api::AppState;
use crate::server::signin;
use crate::server::signin::{SESSION_TTL, random_token};
use crate::server::tenants::key_hash;

/// `?why=&next=` of `/login`.
#[derive(Deserialize, Debug, Default)]
pub(super) struct LoginQuery {
    pub(super) why: Option<String>,
    pub(super) next: Option<String>,
}

/// Where to go after signing in: a path on this site, else the runs.
fn next_path(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'"') =>
        {
            n
        }
        _ => "/runs",
    }
}

fn login_form(token: &str, next: &str, notice: Option<(&str, bool)>) -> String {
    let notice = match notice {
        Some((text, error)) => {
            let class = if error { "notice error" } else { "notice" };
            format!("<div class=\"{class}\" id=\"notice\">{}</div>", escape(text))
        }
        None => String::new(),
    };
    let next = if next == "/runs" {
        String::new()
    } else {
        format!("<input type=\"hidden\" name=\"next\" value=\"{}\">", escape(next))
    };
    let body = format!(
        "<div class=\"panel\"><h1>Sign in</h1>{notice}\
         <form class=\"stack\" method=\"post\" action=\"/login\">{}{next}\
         <div><label for=\"key\">Tenant API key</label>\
         <input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"off\" placeholder=\"nexo_sk_…\" required autofocus>\
         </div><button class=\"primary\" type=\"submit\">Sign in</button></form>\
         <p class=\"muted\">Use one of your tenant's keys (<code>nexo tenant key NAME</code> makes one). \
         The key is checked and forgotten: the browser keeps only a session cookie, for 8 hours.</p></div>",
        csrf_field(token)
    );
    page("Sign in", None, Nav::None, &body).replacen("<main>", "<main class=\"narrow\">", 1)
}

/// The sign-in page with its token cookie.
fn login_response(status: StatusCode, token: &str, next: &str, notice: Option<(&str, bool)>, secure: bool) -> Response {
    let mut response = html(status, login_form(token, next, notice));
    response.headers_mut().append(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, token, "/login", 3600, secure));
    response
}

/// The form's token: the browser's, if it has a well-formed one (so two
/// open sign-in pages both work), else a new one.
fn login_token(headers: &HeaderMap) -> String {
    match cookie(headers, LOGIN_COOKIE) {
        Some(t) if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) => t.to_string(),
        _ => random_token(),
    }
}

/// `GET /login`.
pub(super) async fn login_page(headers: HeaderMap, Query(q): Query<LoginQuery>) -> Response {
    let notice = match q.why.as_deref() {
        Some("expired") => Some(("Your session ended (it expired, or was ended elsewhere). Sign in again.", false)),
        Some("revoked") => Some(("The key this session signed in with was revoked. Sign in with another key.", true)),
        Some("disabled") => Some(("Your tenant is disabled; ask the operator to enable it.", true)),
        Some("gone") => Some(("Your tenant no longer exists.", true)),
        Some("signed-out") => Some(("You are signed out.", false)),
        _ => None,
    };
    let token = login_token(&headers);
    login_response(StatusCode::OK, &token, next_path(q.next.as_deref()), notice, over_https(&headers))
}

/// `POST /login`: checks the key as the API does (known, not revoked, a
/// tenant's, the tenant enabled) and opens a session.
pub(super) async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    form: Result<Form<Vec<(String, String)>>, axum::extract::rejection::FormRejection>,
) -> Response {
    let fields = form.map(|Form(f)| f).unwrap_or_default();
    let secure = over_https(&headers);
    let next = next_path(field(&fields, "next")).to_string();
    let token = login_token(&headers);
    let refuse = |status, message: &str| login_response(status, &token, &next, Some((message, true)), secure);
    let client = state.sign_ins.client_addr(extensions.get(), &headers);
    let attempted = std::time::Instant::now();
    if let Some(wait) = client.and_then(|addr| state.sign_ins.wait(addr, attempted)) {
        let minutes = wait.as_secs().div_ceil(60).max(1);
        tracing::warn!(target: "nexo::server", client = ?client, "console: sign-in refused, too many failed attempts");
        let message = format!(
            "Too many failed sign-ins from your address: try again in {minutes} minute{}.",
            if minutes == 1 { "" } else { "s" }
        );
        let mut response = refuse(StatusCode::TOO_MANY_REQUESTS, &message);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs().max(1)));
        return response;
    }
    let failed = || {
        if let Some(addr) = client {
            state.sign_ins.failed(addr, attempted);
        }
    };
    let given = field(&fields, "csrf").unwrap_or("");
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    if given.is_empty() || expected.is_empty() || !same_secret(given, expected) {
        return refuse(
            StatusCode::FORBIDDEN,
            "The sign-in form expired or did not come from this console; sign in again.",
        );
    }
    let key = field(&fields, "key").unwrap_or("").trim();
    if key.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "Enter one of your tenant's API keys.");
    }
    let hash = key_hash(key);
    let found = match state.store.key_by_hash(&hash).await {
        Ok(found) => found,
        Err(e) => return Failure::store(e, None).into_response(),
    };
    let Some(found) = found else {
        failed();
        return refuse(StatusCode::UNAUTHORIZED, "This key is not known here (it may belong to another deployment).");
    };
    if found.revoked_ms.is_some() {
        failed();
        return refuse(StatusCode::UNAUTHORIZED, "This key was revoked; ask the operator for a new one.");
    }
    let Some(tenant_id) = found.tenant else {
        return refuse(
            StatusCode::FORBIDDEN,
            "This is an admin key: it manages tenants over the API (/v1/tenants). \
             The console is a tenant's: sign in with one of the tenant's keys.",
        );
    };
    let tenant = match state.store.tenant(&tenant_id).await {
        Ok(Some(t)) if t.disabled => {
            return refuse(StatusCode::FORBIDDEN, "Your tenant is disabled; ask the operator to enable it.");
        }
        Ok(Some(t)) => t,
        Ok(None) => return refuse(StatusCode::UNAUTHORIZED, "This key's tenant no longer exists."),
        Err(e) => return Failure::store(e, None).into_response(),
    };
    let now = nexo_store::now_ms();
    let id = match signin::open(&*state.store, &tenant.id, &hash, now).await {
        Ok(id) => id,
        Err(e) => return Failure::store(e, None).into_response(),
    };
    // The key's id, never the key or its hash, as for the API's audit entries.
    if let Err(e) = state.store.append_audit(&tenant.id, "console.signed_in", &json!({"key": found.id}), now).await {
        tracing::warn!(target: "nexo::server", "console: cannot audit a sign-in: {e}");
    }
    let mut response = Redirect::to(&next).into_response();
    let ttl = SESSION_TTL.as_secs();
    let cookies = response.headers_mut();
    cookies.append(header::SET_COOKIE, set_cookie(SESSION_COOKIE, &id, "/", ttl, secure));
    cookies.append(header::SET_COOKIE, set_cookie(LOGIN_COOKIE, "", "/login", 0, secure));
    response
}

/// `POST /logout`: ends the session.
pub(super) async fn logout(State(state): State<AppState>, headers: HeaderMap, posted: Posted) -> Response {
    signin::end(&*state.store, &posted.console.session).await;
    let now = nexo_store::now_ms();
    if let Err(e) = state.store.append_audit(&posted.console.tenant.id, "console.signed_out", &json!({}), now).await {
        tracing::warn!(target: "nexo::server", "console: cannot audit a sign-out: {e}");
    }
    let mut response = Redirect::to("/login?why=signed-out").into_response();
    response.headers_mut().append(header::SET_COOKIE, set_cookie(SESSION_COOKIE, "", "/", 0, over_https(&headers)));
    response
}

#[cfg(test)]
mod tests {
    use super::super::html::encode_query;
    use super::*;

    #[test]
    fn sign_in_returns_only_to_this_site() {
        assert_eq!(next_path(Some("/runs/r1")), "/runs/r1");
        assert_eq!(next_path(Some("/usage?hours=168")), "/usage?hours=168");
        for bad in ["//evil.example", "https://evil.example", "/\\evil", "runs", "/a b", ""] {
            assert_eq!(next_path(Some(bad)), "/runs", "{bad}");
        }
        assert_eq!(next_path(None), "/runs");
        assert_eq!(encode_query("/runs?status=done&x=1"), "/runs%3Fstatus%3Ddone%26x%3D1");
    }
}
