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
//! - every string from a tenant, a run or a model goes through [`escape`](html::escape);
//! - responses carry a strict `Content-Security-Policy`, `nosniff` and
//!   `Referrer-Policy: same-origin` (see [`REFERRER_POLICY`](csrf::REFERRER_POLICY)).
//!
//! Isolation is the API's: a run or session of another tenant answers 404,
//! and approving or denying goes through [`api::decide`](crate::server::api::decide), audited and
//! resumed as over the API.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::Redirect;
use axum::routing::{get, post};

use crate::server::api::AppState;
use approvals::{approvals_live, approvals_page};
use assets::asset;
use csrf::protect;
use login::{login, login_page, logout};
use runs::{approve, deny, run_events, run_page, run_state, runs_live, runs_page};
use sessions::{session_page, sessions_page};
use usage::usage_page;

mod approvals;
mod assets;
mod chart;
mod cookies;
mod csrf;
mod failure;
mod html;
mod login;
mod runs;
mod session;
mod sessions;
mod timeline;
mod usage;
mod who;

pub use who::Console;

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

/// `GET /`: the runs, or the sign-in page.
async fn home(_: Console) -> Redirect {
    Redirect::to("/runs")
}
