//! A console request that failed, as an HTML page with the status and what to do.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nexo_store::StoreError;
use serde_json::Value;

use super::html::{Nav, escape, html, page};
use super::who::{Console, Who};
use crate::server::api::ApiError;

/// A console request that failed: an HTML page with the status and what
/// to do.
pub(super) struct Failure {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) who: Option<Who>,
}

impl Failure {
    pub(super) fn new(status: StatusCode, message: impl Into<String>, who: Option<&Console>) -> Failure {
        Failure { status, message: message.into(), who: who.map(Console::who) }
    }

    pub(super) fn no_run(who: &Console) -> Failure {
        Failure::new(StatusCode::NOT_FOUND, "There is no such run for this tenant.", Some(who))
    }

    pub(super) fn store(e: StoreError, who: Option<&Console>) -> Failure {
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
    pub(super) async fn api(e: ApiError, who: &Console) -> Failure {
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

pub(super) type Page = Result<Response, Failure>;
