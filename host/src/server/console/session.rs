//! Who is asking: a session cookie looked up, with its key and tenant checked again, or a way to `/login`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::cookies::{SESSION_COOKIE, cookie};
use super::failure::Failure;
use super::html::encode_query;
use super::who::Console;
use crate::server::api::AppState;
use crate::server::signin;

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
        let Some(key) = found.filter(|k| k.revoked_ms.is_none()) else {
            signin::end(&*state.store, &session.id_hash).await;
            return Err(to_login(parts, Some("revoked")));
        };
        match state.store.tenant(&session.tenant).await.map_err(|e| Failure::store(e, None).into_response())? {
            Some(tenant) if !tenant.disabled => {
                Ok(Console { tenant, csrf: session.csrf, session: session.id_hash, key: key.id })
            }
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
