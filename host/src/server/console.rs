//! The web console of `nexo serve`: a tenant signs in with one of its keys
//! and sees its runs with their live events, decides pending approvals,
//! and reads its usage and its sessions.
//!
//! Every page is rendered here, as HTML, from the store (sessions through
//! the API's own handlers, so a tenant sees exactly what `/v1/sessions`
//! shows it). The only script is the vendored htmx (`console/htmx.min.js`,
//! 0BSD), which polls small fragments so a page follows its run without a
//! reload. Nothing is built with Node and nothing is fetched from another
//! origin: both assets are compiled into the binary.
//!
//! Security:
//! - a session is a random 256-bit id in an `HttpOnly; SameSite=Strict`
//!   cookie, kept in the store (by its SHA-256) with the tenant, the key's
//!   hash and an expiry, so any node serves it; its CSRF token is derived
//!   from the id; the key itself is never stored or sent back;
//! - each request looks the key and the tenant up again, so a revoked key
//!   or a disabled tenant ends the session at once;
//! - each form that changes something carries the session's CSRF token,
//!   compared in constant time, and a POST whose `Origin` is not this host
//!   is refused;
//! - every string from a tenant, a run or a model goes through [`escape`];
//! - responses carry a strict `Content-Security-Policy`, `nosniff` and
//!   `Referrer-Policy: same-origin` (see [`REFERRER_POLICY`]).
//!
//! Isolation is the API's: a run or session of another tenant answers 404,
//! and approving or denying goes through [`api::decide`], audited and
//! resumed as over the API.

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Form, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use nexo_store::{Approval, Decision, Run, RunStatus, StoreError, StoredEvent, Tenant, Usage};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::api::{self, ApiError, AppState};
use super::auth::TenantCaller;
use super::sessions;
use super::signin::{self, SESSION_TTL, random_token};
use super::tenants::key_hash;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "nexo_session";

/// The sign-in form's cookie: a token the form repeats, so another site
/// cannot sign a browser in (login CSRF).
const LOGIN_COOKIE: &str = "nexo_login";

/// The console's `Content-Security-Policy`: this origin only, no inline
/// script or style, never in a frame.
pub const CSP: &str = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The console's `Referrer-Policy`: no URL of the console leaves for
/// another site. Not `no-referrer`: under it a browser sends `Origin: null`
/// with the console's own form posts, which the origin check must refuse.
pub const REFERRER_POLICY: &str = "same-origin";

/// Events shown per page load or poll.
const EVENT_BATCH: usize = 500;

/// Runs shown in a list.
const RUN_LIST: usize = 100;

/// Whether two secrets are equal, in time that does not depend on where
/// they differ (or on their lengths: both are hashed first).
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---- HTML ----

/// Escapes text for HTML content and quoted attribute values. Bidirectional
/// controls become numeric references: raw, they would reorder what the
/// console shows (a command or a path reading other than it runs).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_bidi_control(c) || is_invisible_format(c) => {
                let _ = write!(out, "&#x{:X};", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// The Unicode bidirectional formatting characters: embeddings and
/// overrides, isolates, and the implicit marks.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Characters that change how text reads without being seen: the line
/// and paragraph separators, the byte-order mark (zero-width no-break
/// space) and the tag characters.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}')
}

/// Percent-encodes a query parameter's value.
fn encode_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A vendored or hand-written file, served under a name that changes with
/// its content, so it can be cached for good.
struct Asset {
    name: String,
    bytes: &'static [u8],
    content_type: &'static str,
}

static ASSETS: LazyLock<[Asset; 2]> = LazyLock::new(|| {
    let named = |stem: &str, ext: &str, bytes: &'static [u8], content_type| Asset {
        name: format!("{stem}.{}.{ext}", &nexo_store::sha256_hex(bytes)[..12]),
        bytes,
        content_type,
    };
    [
        // htmx 2.0.11 (`npm pack htmx.org@2.0.11`, dist/htmx.min.js), 0BSD: console/htmx.LICENSE.
        named("htmx", "min.js", include_bytes!("console/htmx.min.js"), "text/javascript; charset=utf-8"),
        named("console", "css", include_bytes!("console/console.css"), "text/css; charset=utf-8"),
    ]
});

fn asset_url(index: usize) -> String {
    format!("/assets/{}", ASSETS[index].name)
}

/// Which page the navigation marks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nav {
    Runs,
    Approvals,
    Usage,
    Sessions,
    None,
}

/// The signed-in tenant's name and the session's CSRF token, for the header.
struct Who {
    name: String,
    csrf: String,
}

/// A whole page.
fn page(title: &str, who: Option<&Who>, nav: Nav, body: &str) -> String {
    let header = match who {
        Some(who) => {
            let link = |href: &str, label: &str, this: Nav| {
                let class = if nav == this { " class=\"here\"" } else { "" };
                format!("<a href=\"{href}\"{class}>{label}</a>")
            };
            format!(
                "<header class=\"top\"><a class=\"brand\" href=\"/runs\">nexo</a><nav>{}{}{}{}</nav>\
                 <div class=\"who\"><span id=\"tenant\">{}</span>\
                 <form class=\"inline\" method=\"post\" action=\"/logout\">{}<button class=\"link\" type=\"submit\">\
                 Sign out</button></form></div></header>",
                link("/runs", "Runs", Nav::Runs),
                link("/approvals", "Approvals", Nav::Approvals),
                link("/usage", "Usage", Nav::Usage),
                link("/sessions", "Sessions", Nav::Sessions),
                escape(&who.name),
                csrf_field(&who.csrf),
            )
        }
        None => "<header class=\"top\"><span class=\"brand\">nexo</span></header>".to_string(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"htmx-config\" content='{{\"includeIndicatorStyles\":false,\"allowEval\":false,\
         \"allowScriptTags\":false,\"historyCacheSize\":0}}'>\
         <title>{} · nexo</title><link rel=\"stylesheet\" href=\"{}\"><script src=\"{}\" defer></script></head>\
         <body>{header}<main>{body}</main></body></html>\n",
        escape(title),
        asset_url(1),
        asset_url(0),
    )
}

fn csrf_field(token: &str) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", escape(token))
}

fn html(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// A UTC time, to the second, in a `<time>` element.
fn time_tag(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    let shown = format!("{} UTC", iso.trim_end_matches('Z').replacen('T', " ", 1));
    format!("<time datetime=\"{iso}\">{shown}</time>")
}

/// `HH:MM:SS.mmm` (UTC).
fn clock(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let iso = humantime::format_rfc3339_millis(at).to_string();
    iso.get(11..23).unwrap_or(&iso).to_string()
}

fn status_badge(status: RunStatus, id: Option<&str>) -> String {
    let id = id.map(|i| format!(" id=\"{i}\"")).unwrap_or_default();
    format!("<span{id} class=\"status status-{0}\">{0}</span>", status.as_str())
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// At most `max` bytes of `text`, cut at a character boundary, marked if cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// A short hash of a fragment's content: a poll that sends it back gets
/// 204 (nothing to swap) while the content is the same.
fn version(inner: &str) -> String {
    nexo_store::sha256_hex(inner)[..16].to_string()
}

/// A fragment that polls `url` (with its version added) every `every`, or a
/// still one once `polling` is false.
fn live(tag: &str, id: &str, class: &str, url: &str, every: &str, polling: bool, inner: &str) -> String {
    let poll = if polling {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!(
            " hx-get=\"{}{sep}v={}\" hx-trigger=\"every {every}\" hx-swap=\"outerHTML\"",
            escape(url),
            version(inner)
        )
    } else {
        String::new()
    };
    format!("<{tag} id=\"{id}\" class=\"{class}\"{poll}>{inner}</{tag}>")
}

/// The answer to a poll: 204 when the client has this version already.
fn poll_answer(given: Option<&str>, inner: &str, whole: String) -> Response {
    if given == Some(version(inner).as_str()) {
        return StatusCode::NO_CONTENT.into_response();
    }
    html(StatusCode::OK, whole)
}

// ---- failures ----

/// A console request that failed: an HTML page with the status and what
/// to do.
struct Failure {
    status: StatusCode,
    message: String,
    who: Option<Who>,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>, who: Option<&Console>) -> Failure {
        Failure { status, message: message.into(), who: who.map(Console::who) }
    }

    fn no_run(who: &Console) -> Failure {
        Failure::new(StatusCode::NOT_FOUND, "There is no such run for this tenant.", Some(who))
    }

    fn store(e: StoreError, who: Option<&Console>) -> Failure {
        match e {
            StoreError::Conflict(m) => Failure::new(StatusCode::CONFLICT, m, who),
            StoreError::NoRun(_) => Failure::new(StatusCode::NOT_FOUND, "There is no such run for this tenant.", who),
            other => {
                tracing::error!(target: "nexo::server", "console: store: {other}");
                Failure::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("The store does not answer ({other}); try again shortly."),
                    who,
                )
            }
        }
    }

    /// The API's error, as a page: the same status and message.
    async fn api(e: ApiError, who: &Console) -> Failure {
        let response = e.into_response();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 64 * 1024).await.unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
        Failure::new(status, message, Some(who))
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = format!(
            "<h1>{}</h1><div class=\"notice error\" id=\"failure\">{}</div><p><a href=\"/runs\">Back to the runs</a></p>",
            escape(title),
            escape(&self.message)
        );
        html(self.status, page(title, self.who.as_ref(), Nav::None, &body))
    }
}

type Page = Result<Response, Failure>;

// ---- who is asking ----

/// A request of a signed-in tenant; anyone else is sent to `/login`.
pub struct Console {
    tenant: Tenant,
    csrf: String,
    /// The SHA-256 of the session id: its sign-in's key in the store.
    session: String,
}

impl Console {
    fn who(&self) -> Who {
        Who { name: self.tenant.name.clone(), csrf: self.csrf.clone() }
    }
}

/// The value of the cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether the request came over HTTPS, as a reverse proxy says.
fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().unwrap_or("").trim().eq_ignore_ascii_case("https"))
}

/// A cookie for `path`, HttpOnly and SameSite=Strict (and Secure over
/// HTTPS); a `max_age` of 0 deletes it.
fn set_cookie(name: &str, value: &str, path: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("nexo_invalid=; Max-Age=0"))
}

/// Where a request without a session goes: `/login`, saying why, and
/// coming back here afterwards. A poll gets `HX-Redirect` instead, so htmx
/// moves the whole page rather than swapping the sign-in form into it.
fn to_login(parts: &Parts, why: Option<&str>) -> Response {
    let mut params = Vec::new();
    if let Some(why) = why {
        params.push(format!("why={why}"));
    }
    let htmx = parts.headers.contains_key("hx-request");
    if parts.method == Method::GET && !htmx {
        let here = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        if here != "/" && here != "/runs" {
            params.push(format!("next={}", encode_query(here)));
        }
    }
    let url = if params.is_empty() { "/login".to_string() } else { format!("/login?{}", params.join("&")) };
    if htmx {
        let mut response = StatusCode::UNAUTHORIZED.into_response();
        if let Ok(v) = HeaderValue::from_str(&url) {
            response.headers_mut().insert("hx-redirect", v);
        }
        return response;
    }
    Redirect::to(&url).into_response()
}

impl FromRequestParts<AppState> for Console {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(id) = cookie(&parts.headers, SESSION_COOKIE).filter(|v| !v.is_empty()) else {
            return Err(to_login(parts, None));
        };
        let found = signin::find(&*state.store, id, nexo_store::now_ms()).await;
        let Some(session) = found.map_err(|e| Failure::store(e, None).into_response())? else {
            return Err(to_login(parts, Some("expired")));
        };
        // The key and the tenant, again: a revocation or a disabling ends the session now.
        let found =
            state.store.key_by_hash(&session.key_hash).await.map_err(|e| Failure::store(e, None).into_response())?;
        if found.is_none_or(|k| k.revoked_ms.is_some()) {
            signin::end(&*state.store, &session.id_hash).await;
            return Err(to_login(parts, Some("revoked")));
        }
        match state.store.tenant(&session.tenant).await.map_err(|e| Failure::store(e, None).into_response())? {
            Some(tenant) if !tenant.disabled => Ok(Console { tenant, csrf: session.csrf, session: session.id_hash }),
            Some(_) => {
                signin::end(&*state.store, &session.id_hash).await;
                Err(to_login(parts, Some("disabled")))
            }
            None => {
                signin::end(&*state.store, &session.id_hash).await;
                Err(to_login(parts, Some("gone")))
            }
        }
    }
}

/// A signed-in POST whose form carries the session's CSRF token: its fields.
/// A missing or wrong token (or a body that is not a form) is refused with
/// 403 before anything happens.
struct Posted {
    console: Console,
    fields: Vec<(String, String)>,
}

impl Posted {
    fn field(&self, name: &str) -> Option<&str> {
        field(&self.fields, name)
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
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
async fn protect(request: Request, next: Next) -> Response {
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

// ---- routes ----

/// The console's routes, for [`super::router`]: pages at `/`, its assets
/// under `/assets/`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/runs", get(runs_page))
        .route("/runs/live", get(runs_live))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/state", get(run_state))
        .route("/runs/{id}/events", get(run_events))
        .route("/runs/{id}/approve", post(approve))
        .route("/runs/{id}/deny", post(deny))
        .route("/approvals", get(approvals_page))
        .route("/approvals/live", get(approvals_live))
        .route("/usage", get(usage_page))
        .route("/sessions", get(sessions_page))
        .route("/sessions/{id}", get(session_page))
        .route("/assets/{file}", get(asset))
        .layer(DefaultBodyLimit::max(64 * 1024))
        .layer(axum::middleware::from_fn(protect))
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => (
            [(header::CONTENT_TYPE, a.content_type), (header::CACHE_CONTROL, "public, max-age=31536000, immutable")],
            a.bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// `GET /`: the runs, or the sign-in page.
async fn home(_: Console) -> Redirect {
    Redirect::to("/runs")
}

// ---- signing in and out ----

/// `?why=&next=` of `/login`.
#[derive(Deserialize, Debug, Default)]
struct LoginQuery {
    why: Option<String>,
    next: Option<String>,
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
async fn login_page(headers: HeaderMap, Query(q): Query<LoginQuery>) -> Response {
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
async fn login(
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
async fn logout(State(state): State<AppState>, headers: HeaderMap, posted: Posted) -> Response {
    signin::end(&*state.store, &posted.console.session).await;
    let now = nexo_store::now_ms();
    if let Err(e) = state.store.append_audit(&posted.console.tenant.id, "console.signed_out", &json!({}), now).await {
        tracing::warn!(target: "nexo::server", "console: cannot audit a sign-out: {e}");
    }
    let mut response = Redirect::to("/login?why=signed-out").into_response();
    response.headers_mut().append(header::SET_COOKIE, set_cookie(SESSION_COOKIE, "", "/", 0, over_https(&headers)));
    response
}

// ---- runs ----

/// `?status=&v=` of the runs list.
#[derive(Deserialize, Debug, Default)]
struct ListQuery {
    status: Option<String>,
    v: Option<String>,
}

fn runs_table(runs: &[Run], status: Option<RunStatus>) -> String {
    let mut rows = String::new();
    for run in runs {
        let _ = write!(
            rows,
            "<tr data-run=\"{id}\"><td><a href=\"/runs/{id}\"><code>{id}</code></a></td><td>{agent}</td>\
             <td>{status}</td><td>{created}</td></tr>",
            id = escape(&run.id),
            agent = escape(&run.agent),
            status = status_badge(run.status, None),
            created = time_tag(run.created_ms),
        );
    }
    if runs.is_empty() {
        let what = match status {
            Some(s) => format!("No {} runs.", s.as_str()),
            None => "No runs yet. Upload a plugin and start a run over the API: <code>POST /v1/runs</code>.".into(),
        };
        let _ = write!(rows, "<tr><td colspan=\"4\" class=\"muted\">{what}</td></tr>");
    }
    let more = if runs.len() >= RUN_LIST {
        format!("<p class=\"muted\">The newest {RUN_LIST} are shown; <code>GET /v1/runs</code> lists more.</p>")
    } else {
        String::new()
    };
    format!(
        "<table><thead><tr><th>Run</th><th>Agent</th><th>Status</th><th>Created</th></tr></thead>\
         <tbody>{rows}</tbody></table>{more}"
    )
}

fn parse_status(text: Option<&str>) -> Option<RunStatus> {
    text.and_then(RunStatus::parse)
}

fn runs_live_url(status: Option<RunStatus>) -> String {
    match status {
        Some(s) => format!("/runs/live?status={}", s.as_str()),
        None => "/runs/live".into(),
    }
}

async fn list(state: &AppState, console: &Console, status: Option<RunStatus>) -> Result<Vec<Run>, Failure> {
    state.store.tenant_runs(&console.tenant.id, status, RUN_LIST).await.map_err(|e| Failure::store(e, Some(console)))
}

/// `GET /runs`: the tenant's runs, newest first, the list kept current.
async fn runs_page(State(state): State<AppState>, console: Console, Query(q): Query<ListQuery>) -> Page {
    let status = parse_status(q.status.as_deref());
    let runs = list(&state, &console, status).await?;
    let mut filters = String::from("<div class=\"filters\">");
    let here = |s: Option<RunStatus>| if s == status { " class=\"here\"" } else { "" };
    let _ = write!(filters, "<a href=\"/runs\"{}>all</a>", here(None));
    for s in RunStatus::ALL {
        let _ = write!(filters, "<a href=\"/runs?status={0}\"{1}>{0}</a>", s.as_str(), here(Some(s)));
    }
    filters.push_str("</div>");
    let inner = runs_table(&runs, status);
    let body = format!("<h1>Runs</h1>{filters}{}", live("div", "runs", "", &runs_live_url(status), "2s", true, &inner));
    Ok(html(StatusCode::OK, page("Runs", Some(&console.who()), Nav::Runs, &body)))
}

/// `GET /runs/live`: the runs list's fragment, polled.
async fn runs_live(State(state): State<AppState>, console: Console, Query(q): Query<ListQuery>) -> Page {
    let status = parse_status(q.status.as_deref());
    let runs = list(&state, &console, status).await?;
    let inner = runs_table(&runs, status);
    let whole = live("div", "runs", "", &runs_live_url(status), "2s", true, &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}

/// The tenant's run `id`; another tenant's, or none, is 404.
async fn own_run(state: &AppState, console: &Console, id: &str) -> Result<Run, Failure> {
    match state.store.run(id).await {
        Ok(Some(run)) if run.tenant.as_deref() == Some(console.tenant.id.as_str()) => Ok(run),
        Ok(_) => Err(Failure::no_run(console)),
        Err(e) => Err(Failure::store(e, Some(console))),
    }
}

/// The pending approval of a suspended run.
async fn pending(state: &AppState, console: &Console, run: &Run) -> Result<Option<Approval>, Failure> {
    if run.status != RunStatus::Suspended {
        return Ok(None);
    }
    state.store.approval(&run.id).await.map_err(|e| Failure::store(e, Some(console)))
}

/// An approval with its Approve and Deny forms; `back` is where a decision
/// returns to (the run's page when `None`).
fn approval_card(run: &Run, approval: &Approval, csrf: &str, back: Option<&str>) -> String {
    let id = escape(&run.id);
    // On the approvals page, which run it is; on the run's own page, that goes without saying.
    let (which, back) = match back {
        Some(b) => (
            format!("<dt>Run</dt><dd><a href=\"/runs/{id}\"><code>{id}</code></a> ({})</dd>", escape(&run.agent)),
            format!("<input type=\"hidden\" name=\"back\" value=\"{}\">", escape(b)),
        ),
        None => (String::new(), String::new()),
    };
    let facts = format!(
        "<dl class=\"facts\">{which}<dt>Tool</dt><dd><code class=\"approval-tool\">{tool}</code></dd>\
         <dt>Capability</dt><dd><code class=\"approval-capability\">{capability}</code></dd>\
         <dt>Requested</dt><dd>{at}</dd></dl>\
         <h3>Arguments</h3><pre class=\"approval-arguments\">{args}</pre>",
        tool = escape(&approval.tool),
        capability = escape(&approval.capability),
        at = time_tag(approval.created_ms),
        args = escape(&clip(&pretty(&approval.arguments), 64 * 1024)),
    );
    // Each form names the call shown above it: a decision for a call the run
    // no longer waits on decides nothing.
    let call = format!(
        "<input type=\"hidden\" name=\"seq\" value=\"{}\"><input type=\"hidden\" name=\"args-hash\" value=\"{}\">",
        approval.seq,
        escape(&approval.args_hash)
    );
    let actions = match approval.decision {
        None => format!(
            "<div class=\"actions\">\
             <form method=\"post\" action=\"/runs/{id}/approve\">{csrf}{call}{back}\
             <button class=\"approve\" type=\"submit\">Approve</button></form>\
             <form method=\"post\" action=\"/runs/{id}/deny\">{csrf}{call}{back}\
             <button class=\"deny\" type=\"submit\">Deny</button></form></div>",
            csrf = csrf_field(csrf),
        ),
        Some(decision) => {
            let done = if decision == Decision::Approved { "Approved" } else { "Denied" };
            format!("<p class=\"muted decided\">{done}; the run resumes shortly.</p>")
        }
    };
    let title = if approval.decision.is_none() { "Waiting for your approval" } else { "Decided" };
    format!("<section class=\"panel approval\" data-run=\"{id}\"><h2>{title}</h2>{facts}{actions}</section>")
}

/// The part of a run's page that changes: its status, result or error, and
/// its pending approval.
fn run_state_inner(run: &Run, approval: Option<&Approval>, csrf: &str) -> String {
    let mut out = format!(
        "<dl class=\"facts\"><dt>Status</dt><dd>{}</dd><dt>Updated</dt><dd>{}</dd>",
        status_badge(run.status, Some("run-status")),
        time_tag(run.updated_ms)
    );
    if run.status == RunStatus::Suspended
        && let Some(reason) = &run.suspend_reason
    {
        let _ = write!(out, "<dt>Waiting for</dt><dd>{}</dd>", escape(reason));
    }
    if let Some(key) = &run.resume_key {
        let _ = write!(out, "<dt>Resume key</dt><dd><code>{}</code></dd>", escape(key));
    }
    out.push_str("</dl>");
    if let Some(result) = &run.result {
        let _ = write!(out, "<h2>Result</h2><pre id=\"run-result\">{}</pre>", escape(&clip(result, 256 * 1024)));
    }
    if let Some(error) = &run.error {
        let _ = write!(out, "<h2>Error</h2><pre id=\"run-error\">{}</pre>", escape(&clip(error, 64 * 1024)));
    }
    match approval {
        Some(a) => out.push_str(&approval_card(run, a, csrf, None)),
        None if run.status == RunStatus::Suspended => out.push_str(
            "<p class=\"muted\">The agent suspended itself; resume it over the API \
             (<code>POST /v1/runs/{id}/resume</code>).</p>",
        ),
        None => {}
    }
    out
}

fn run_state_url(run: &Run) -> String {
    format!("/runs/{}/state", run.id)
}

/// One event, its data folded.
fn event_row(e: &StoredEvent) -> String {
    let data = match &e.data {
        Value::Null => String::new(),
        Value::Object(m) if m.is_empty() => String::new(),
        data => format!(
            "<details><summary>{}</summary><pre>{}</pre></details>",
            escape(&clip(&data.to_string(), 160)),
            escape(&clip(&pretty(data), 16 * 1024))
        ),
    };
    format!(
        "<li data-event=\"{}\"><span class=\"kind\">{}</span><time>{}</time>{data}</li>",
        e.id,
        escape(&e.kind),
        clock(e.at_ms)
    )
}

/// The rows of `batch`, then the marker that fetches what comes after
/// them: at once if the batch was full, each second while the run goes on,
/// never once it has ended and every event is shown.
fn event_rows(run: &Run, batch: &[StoredEvent], after: i64, ended: bool) -> String {
    let mut out: String = batch.iter().map(event_row).collect();
    if batch.is_empty() && after == 0 && ended {
        out.push_str("<li class=\"muted\">No events.</li>");
    }
    let last = batch.last().map(|e| e.id).unwrap_or(after);
    let full = batch.len() >= EVENT_BATCH;
    if full || !ended {
        let trigger = if full { "load" } else { "every 1s" };
        let _ = write!(
            out,
            "<li id=\"events-more\" class=\"muted\" hx-get=\"/runs/{}/events?after={last}\" hx-trigger=\"{trigger}\" \
             hx-swap=\"outerHTML\"></li>",
            escape(&run.id)
        );
    }
    out
}

/// `GET /runs/{id}`: the run, its approval and its events, kept current.
async fn run_page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Page {
    let run = own_run(&state, &console, &id).await?;
    let approval = pending(&state, &console, &run).await?;
    let events = state.store.events(&run.id, 0, EVENT_BATCH).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let inner = run_state_inner(&run, approval.as_ref(), &console.csrf);
    let live_state = live("section", "run-state", "panel", &run_state_url(&run), "1s", !run.status.is_final(), &inner);
    let body = format!(
        "<h1>Run <code id=\"run-id\">{id}</code></h1>\
         <div class=\"panel\"><dl class=\"facts\"><dt>Agent</dt><dd id=\"run-agent\">{agent}</dd>\
         <dt>Plugin</dt><dd><code title=\"{plugin}\">{plugin_short}</code></dd>\
         <dt>Created</dt><dd>{created}</dd><dt>Input</dt><dd><pre id=\"run-input\">{input}</pre></dd></dl></div>\
         {live_state}<h2>Events</h2><div class=\"panel\"><ol id=\"events\" class=\"events\">{events}</ol></div>",
        id = escape(&run.id),
        agent = escape(&run.agent),
        plugin = escape(&run.component_sha256),
        plugin_short = escape(run.component_sha256.get(..12).unwrap_or(&run.component_sha256)),
        created = time_tag(run.created_ms),
        input = escape(&clip(&run.input, 64 * 1024)),
        events = event_rows(&run, &events, 0, run.status.is_final()),
    );
    Ok(html(StatusCode::OK, page(&format!("Run {}", run.id), Some(&console.who()), Nav::Runs, &body)))
}

/// `?v=` of a polled fragment.
#[derive(Deserialize, Debug, Default)]
struct PollQuery {
    v: Option<String>,
}

/// `GET /runs/{id}/state`: the run's status and approval, polled.
async fn run_state(
    State(state): State<AppState>,
    console: Console,
    Path(id): Path<String>,
    Query(q): Query<PollQuery>,
) -> Page {
    let run = own_run(&state, &console, &id).await?;
    let approval = pending(&state, &console, &run).await?;
    let inner = run_state_inner(&run, approval.as_ref(), &console.csrf);
    let whole = live("section", "run-state", "panel", &run_state_url(&run), "1s", !run.status.is_final(), &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}

/// `?after=` of a run's events fragment.
#[derive(Deserialize, Debug, Default)]
struct AfterQuery {
    after: Option<i64>,
}

/// `GET /runs/{id}/events?after=N`: the events after N, as rows to append;
/// 204 while there are none yet.
async fn run_events(
    State(state): State<AppState>,
    console: Console,
    Path(id): Path<String>,
    Query(q): Query<AfterQuery>,
) -> Page {
    // The status first: events written before a final status are all read below.
    let run = own_run(&state, &console, &id).await?;
    let after = q.after.unwrap_or(0).max(0);
    let batch = state.store.events(&run.id, after, EVENT_BATCH).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let ended = run.status.is_final();
    if batch.is_empty() && !ended {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(html(StatusCode::OK, event_rows(&run, &batch, after, ended)))
}

/// `POST /runs/{id}/approve`.
async fn approve(State(state): State<AppState>, Path(id): Path<String>, posted: Posted) -> Page {
    decide(state, id, posted, Decision::Approved).await
}

/// `POST /runs/{id}/deny`.
async fn deny(State(state): State<AppState>, Path(id): Path<String>, posted: Posted) -> Page {
    decide(state, id, posted, Decision::Denied).await
}

/// Decides through the API's own path (the run looked up through the
/// tenant, the decision audited, the resume queued), then goes back.
async fn decide(state: AppState, id: String, posted: Posted, decision: Decision) -> Page {
    let back =
        if posted.field("back") == Some("/approvals") { "/approvals".to_string() } else { format!("/runs/{id}") };
    let seq = posted.field("seq").map(|s| s.parse::<u64>());
    let call = match seq {
        Some(Err(_)) => Err(ApiError::bad_request("the form's `seq` is not a call's sequence number")),
        seq => api::DecisionRequest::from_fields(seq.and_then(Result::ok), posted.field("args-hash")).call(),
    };
    let console = posted.console;
    // Another tenant's run is 404 whatever the form holds.
    own_run(&state, &console, &id).await?;
    let call = match call {
        Ok(c) => c,
        Err(e) => return Err(Failure::api(e, &console).await),
    };
    match api::decide(state, console.tenant.clone(), id, call, decision).await {
        Ok(_) => Ok(Redirect::to(&back).into_response()),
        Err(e) => Err(Failure::api(e, &console).await),
    }
}

// ---- approvals ----

async fn approvals_inner(state: &AppState, console: &Console) -> Result<String, Failure> {
    let suspended = list(state, console, Some(RunStatus::Suspended)).await?;
    let mut out = String::new();
    for run in &suspended {
        if let Some(a) = pending(state, console, run).await? {
            out.push_str(&approval_card(run, &a, &console.csrf, Some("/approvals")));
        }
    }
    if out.is_empty() {
        out.push_str("<p class=\"muted\">Nothing is waiting for an approval.</p>");
    }
    Ok(out)
}

/// `GET /approvals`: every pending approval of the tenant's runs.
async fn approvals_page(State(state): State<AppState>, console: Console) -> Page {
    let inner = approvals_inner(&state, &console).await?;
    let body = format!(
        "<h1>Approvals</h1><p class=\"muted\">Tool calls your policy holds for a person to decide. \
         A decision is audited, and the run resumes.</p>{}",
        live("div", "approvals", "", "/approvals/live", "2s", true, &inner)
    );
    Ok(html(StatusCode::OK, page("Approvals", Some(&console.who()), Nav::Approvals, &body)))
}

/// `GET /approvals/live`: the approvals list, polled.
async fn approvals_live(State(state): State<AppState>, console: Console, Query(q): Query<PollQuery>) -> Page {
    let inner = approvals_inner(&state, &console).await?;
    let whole = live("div", "approvals", "", "/approvals/live", "2s", true, &inner);
    Ok(poll_answer(q.v.as_deref(), &inner, whole))
}

// ---- usage ----

/// `?hours=` of the usage page.
#[derive(Deserialize, Debug, Default)]
struct UsageQuery {
    hours: Option<String>,
}

const HOUR_MS: i64 = 3_600_000;

/// A round number at or above `n` for a chart's top (1, 2 or 5 times a
/// power of ten).
fn nice_ceiling(n: u64) -> u64 {
    if n <= 5 {
        return n.max(1);
    }
    let mut magnitude = 1u64;
    while magnitude.saturating_mul(10) <= n {
        magnitude *= 10;
    }
    [1u64, 2, 5, 10].into_iter().map(|m| m.saturating_mul(magnitude)).find(|&v| v >= n).unwrap_or(n)
}

/// Runs per hour over the `hours` hours from `start_ms`, as an inline SVG
/// bar chart (no script).
fn runs_chart(periods: &[Usage], start_ms: i64, hours: usize) -> String {
    let mut counts = vec![0u64; hours];
    for p in periods {
        let i = (p.period_ms - start_ms).div_euclid(HOUR_MS);
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| counts.get_mut(i)) {
            *slot += p.runs;
        }
    }
    let top = nice_ceiling(counts.iter().copied().max().unwrap_or(0));
    let (width, height) = (760.0_f64, 220.0_f64);
    let (left, right, above, below) = (44.0, 12.0, 14.0, 30.0);
    let plot_w = width - left - right;
    let plot_h = height - above - below;
    let slot = plot_w / hours.max(1) as f64;
    let mut svg = format!(
        "<svg class=\"chart\" id=\"runs-chart\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-labelledby=\"chart-title\"><title id=\"chart-title\">Runs per hour, the last {hours} hours</title>"
    );
    let ticks: &[u64] = if top >= 2 && top.is_multiple_of(2) { &[0, 1, 2] } else { &[0, 2] };
    for &t in ticks {
        let value = top * t / 2;
        let y = above + plot_h - plot_h * (value as f64 / top as f64);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{value}</text>",
            width - right,
            left - 6.0,
            y + 4.0
        );
    }
    let label_every = if hours <= 24 { 3 } else { 24 };
    for (i, &count) in counts.iter().enumerate() {
        let at = start_ms + i as i64 * HOUR_MS;
        let stamp =
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0)))
                .to_string();
        let x = left + slot * i as f64;
        if count > 0 {
            let h = plot_h * (count as f64 / top as f64);
            let plural = if count == 1 { "" } else { "s" };
            let _ = write!(
                svg,
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\">\
                 <title>{} {}:00 UTC: {count} run{plural}</title></rect>",
                x + slot * 0.1,
                above + plot_h - h,
                slot * 0.8,
                stamp.get(..10).unwrap_or(""),
                stamp.get(11..13).unwrap_or(""),
            );
        }
        if i.is_multiple_of(label_every) {
            let label = if hours <= 24 {
                format!("{}:00", stamp.get(11..13).unwrap_or(""))
            } else {
                stamp.get(5..10).unwrap_or("").to_string()
            };
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
                x + slot / 2.0,
                height - 10.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `GET /usage`: runs per hour as a chart, and the totals.
async fn usage_page(State(state): State<AppState>, console: Console, Query(q): Query<UsageQuery>) -> Page {
    let hours: usize = if q.hours.as_deref() == Some("168") { 168 } else { 24 };
    let now = nexo_store::now_ms();
    let start = now - now.rem_euclid(HOUR_MS) - (hours as i64 - 1) * HOUR_MS;
    let all = state.store.usage(&console.tenant.id, 0).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let recent: Vec<Usage> = all.iter().filter(|u| u.period_ms >= start).cloned().collect();
    let (window, total) = (api::usage_json(&recent), api::usage_json(&all));
    let mut cards = String::new();
    for (field, label) in
        [("runs", "Runs"), ("tokens", "Model tokens"), ("cpu_ticks", "CPU ticks"), ("egress_bytes", "Egress bytes")]
    {
        let _ = write!(
            cards,
            "<div class=\"panel\"><div class=\"muted\">{label}</div><div class=\"value\" id=\"total-{field}\">{}</div>\
             <div class=\"muted\">{} in all</div></div>",
            window["total"][field].as_u64().unwrap_or(0),
            total["total"][field].as_u64().unwrap_or(0),
        );
    }
    let mut rows = String::new();
    for u in recent.iter().rev() {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            time_tag(u.period_ms),
            u.runs,
            u.tokens,
            u.cpu_ticks,
            u.egress_bytes
        );
    }
    if rows.is_empty() {
        rows.push_str("<tr><td colspan=\"5\" class=\"muted\">Nothing used in this period.</td></tr>");
    }
    let here = |h: usize| if h == hours { " class=\"here\"" } else { "" };
    let body = format!(
        "<h1>Usage</h1><div class=\"filters\"><a href=\"/usage\"{}>last 24 hours</a>\
         <a href=\"/usage?hours=168\"{}>last 7 days</a></div>\
         <div class=\"totals\">{cards}</div><h2>Runs per hour</h2>{}\
         <h2>By hour</h2><table><thead><tr><th>Hour</th><th class=\"num\">Runs</th><th class=\"num\">Tokens</th>\
         <th class=\"num\">CPU ticks</th><th class=\"num\">Egress bytes</th></tr></thead><tbody>{rows}</tbody></table>",
        here(24),
        here(168),
        runs_chart(&recent, start, hours),
    );
    Ok(html(StatusCode::OK, page("Usage", Some(&console.who()), Nav::Usage, &body)))
}

// ---- sessions ----

/// The API's answer for the tenant, or its error as a page.
async fn through_api<T>(result: Result<axum::Json<T>, ApiError>, console: &Console) -> Result<T, Failure> {
    match result {
        Ok(axum::Json(value)) => Ok(value),
        Err(e) => Err(Failure::api(e, console).await),
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => pretty(other),
    }
}

/// `GET /sessions`: the tenant's sessions, as `GET /v1/sessions` lists them.
async fn sessions_page(State(state): State<AppState>, console: Console) -> Page {
    let listed =
        through_api(sessions::list(State(state), TenantCaller(console.tenant.clone())).await, &console).await?;
    let mut rows = String::new();
    for s in listed["sessions"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let id = escape(s["id"].as_str().unwrap_or(""));
        let _ = write!(
            rows,
            "<tr data-session=\"{id}\"><td><a href=\"/sessions/{id}\"><code>{id}</code></a></td><td>{}</td>\
             <td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(s["instance"].as_str().unwrap_or("")),
            escape(s["agent"].as_str().unwrap_or("")),
            s["messages"].as_u64().unwrap_or(0),
            time_tag(s["updated_ms"].as_i64().unwrap_or(0)),
        );
    }
    if rows.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"5\" class=\"muted\">No sessions yet. A prompt over the API opens one: \
             <code>POST /v1/sessions/prompt</code>.</td></tr>",
        );
    }
    let body = format!(
        "<h1>Sessions</h1><p class=\"muted\">Remembering instances of an agent: each prompt is a run that \
         continues the session's thread.</p><table id=\"sessions\"><thead><tr><th>Session</th><th>Name</th>\
         <th>Agent</th><th class=\"num\">Messages</th><th>Updated</th></tr></thead><tbody>{rows}</tbody></table>"
    );
    Ok(html(StatusCode::OK, page("Sessions", Some(&console.who()), Nav::Sessions, &body)))
}

/// `GET /sessions/{id}`: a session's thread and prompts, as
/// `GET /v1/sessions/{id}` shows them (another tenant's is 404).
async fn session_page(State(state): State<AppState>, console: Console, Path(id): Path<String>) -> Page {
    let shown =
        through_api(sessions::show(State(state), TenantCaller(console.tenant.clone()), Path(id)).await, &console)
            .await?;
    let mut thread = String::new();
    for message in shown["thread"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let role = message["role"].as_str().unwrap_or("message");
        let content = if message.get("content").is_some() { text_of(&message["content"]) } else { pretty(message) };
        let _ = write!(
            thread,
            "<li><span class=\"kind\">{}</span><pre>{}</pre></li>",
            escape(role),
            escape(&clip(&content, 16 * 1024))
        );
    }
    if thread.is_empty() {
        thread.push_str("<li class=\"muted\">The thread is empty.</li>");
    }
    let mut prompts = String::new();
    for run in shown["runs"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let id = escape(run["id"].as_str().unwrap_or(""));
        let status = run["status"].as_str().and_then(RunStatus::parse).map(|s| status_badge(s, None));
        let _ = write!(
            prompts,
            "<tr><td><a href=\"/runs/{id}\"><code>{id}</code></a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&clip(run["input"].as_str().unwrap_or(""), 160)),
            status.unwrap_or_default(),
            time_tag(run["created_ms"].as_i64().unwrap_or(0)),
        );
    }
    let body = format!(
        "<h1>Session <code id=\"session-id\">{id}</code></h1><div class=\"panel\"><dl class=\"facts\">\
         <dt>Name</dt><dd id=\"session-instance\">{instance}</dd><dt>Agent</dt><dd>{agent}</dd>\
         <dt>Created</dt><dd>{created}</dd><dt>Updated</dt><dd>{updated}</dd></dl></div>\
         <h2>Prompts</h2><table><thead><tr><th>Run</th><th>Input</th><th>Status</th><th>Created</th></tr></thead>\
         <tbody>{prompts}</tbody></table><h2>Thread</h2><div class=\"panel\"><ol class=\"events\">{thread}</ol></div>",
        id = escape(shown["id"].as_str().unwrap_or("")),
        instance = escape(shown["instance"].as_str().unwrap_or("")),
        agent = escape(shown["agent"].as_str().unwrap_or("")),
        created = time_tag(shown["created_ms"].as_i64().unwrap_or(0)),
        updated = time_tag(shown["updated_ms"].as_i64().unwrap_or(0)),
    );
    Ok(html(StatusCode::OK, page("Session", Some(&console.who()), Nav::Sessions, &body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(escape("plain text, ünïcode"), "plain text, ünïcode");
    }

    #[test]
    fn escape_writes_bidirectional_controls_as_references() {
        let controls = ['\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}']
            .into_iter()
            .chain(['\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}'])
            .chain(['\u{2028}', '\u{2029}', '\u{FEFF}', '\u{E0000}', '\u{E0041}', '\u{E007F}']);
        for c in controls {
            let shown = escape(&format!("rm -rf {c}gpj.exe"));
            assert!(!shown.contains(c), "{:?} is written raw", u32::from(c));
            assert!(shown.contains(&format!("&#x{:X};", u32::from(c))), "{shown}");
        }
        // Other formatting and non-Latin text pass as they are.
        assert_eq!(escape("\u{200D}שלום"), "\u{200D}שלום");
    }

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
    fn cookies_are_read_and_written_strictly() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; nexo_session=abc ; b=2"));
        assert_eq!(cookie(&headers, "nexo_session"), Some("abc"));
        assert_eq!(cookie(&headers, "nexo"), None);
        let set = set_cookie("nexo_session", "abc", "/", 60, false);
        assert_eq!(set, "nexo_session=abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
        assert!(set_cookie("x", "y", "/", 0, true).to_str().unwrap().ends_with("; Secure"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(over_https(&headers));
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

    #[test]
    fn the_chart_draws_a_bar_per_busy_hour() {
        let start = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
        let usage = |hour: i64, runs| Usage {
            tenant: "t".into(),
            period_ms: start + hour * HOUR_MS,
            runs,
            tokens: 0,
            cpu_ticks: 0,
            egress_bytes: 0,
        };
        let svg = runs_chart(&[usage(0, 3), usage(5, 7), usage(30, 9)], start, 24);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 2, "the hour outside the window is left out");
        assert!(svg.contains("7 runs") && svg.contains("3 runs"), "{svg}");
        assert!(svg.contains(">10</text>"), "the top is rounded up: {svg}");
        assert!(!runs_chart(&[], start, 24).contains("<rect"));
        assert_eq!(
            (nice_ceiling(0), nice_ceiling(4), nice_ceiling(7), nice_ceiling(11), nice_ceiling(300)),
            (1, 4, 10, 20, 500)
        );
    }

    #[test]
    fn untrusted_text_is_escaped_in_every_part_of_a_run_page() {
        let evil = "<img src=x onerror=alert(1)>";
        let run = Run {
            id: "r1".into(),
            agent: evil.into(),
            kind: "component".into(),
            source: String::new(),
            component_sha256: "ab".repeat(32),
            input: evil.into(),
            grant: Value::Null,
            status: RunStatus::Suspended,
            suspend_reason: Some(evil.into()),
            resume_key: None,
            resume_input: None,
            result: Some(evil.into()),
            error: Some(evil.into()),
            created_ms: 0,
            updated_ms: 0,
            lease: None,
            session: None,
            tenant: Some("t".into()),
        };
        let approval = Approval {
            seq: 1,
            capability: evil.into(),
            tool: evil.into(),
            arguments: json!({"path": evil}),
            args_hash: String::new(),
            component_sha256: String::new(),
            decision: None,
            created_ms: 0,
        };
        let html = run_state_inner(&run, Some(&approval), "tok");
        let event =
            event_row(&StoredEvent { id: 1, run: "r1".into(), kind: evil.into(), data: json!({"x": evil}), at_ms: 0 });
        let list = runs_table(std::slice::from_ref(&run), None);
        for text in [html, event, list] {
            assert!(!text.contains("<img"), "{text}");
            assert!(text.contains("&lt;img"), "{text}");
        }
    }
}
