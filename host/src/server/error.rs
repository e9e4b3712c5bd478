//! The API's errors: a status, a stable code and a message that names the
//! cause and the fix.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nexo_store::StoreError;
use serde_json::json;

use super::tenants::TenantError;

/// An API error: a status, a stable code and a message that names the
/// cause and the fix, as `{"error": {"code": …, "message": …}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with its status, its stable code and its message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), retry_after: None }
    }

    /// 429: a quota is used up; try again after `retry_after` seconds. A
    /// run that spent its own budget, which waiting does not renew: 409.
    pub fn quota(refusal: crate::quota::Refusal) -> ApiError {
        match refusal.retry_after {
            Some(after) => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: "quota_exceeded",
                message: refusal.message,
                retry_after: Some(after),
            },
            None => ApiError {
                status: StatusCode::CONFLICT,
                code: "run_budget_spent",
                message: refusal.message,
                retry_after: None,
            },
        }
    }

    /// 401: no key, or a key that is not valid.
    pub fn unauthorized(message: &str) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the caller may not do this.
    pub fn forbidden(message: &str) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: nothing by that id for this caller.
    pub fn not_found(message: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A store failure: conflicts are the caller's (409), a full disk is 507,
    /// the rest the server's.
    pub fn store(e: StoreError) -> ApiError {
        match e {
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            e @ StoreError::StaleApproval { .. } => {
                ApiError::new(StatusCode::CONFLICT, "stale_approval", e.to_string())
            }
            e @ StoreError::AlreadyDecided { .. } => {
                ApiError::new(StatusCode::CONFLICT, "already_decided", e.to_string())
            }
            StoreError::NoRun(_) => ApiError::not_found("there is no such run"),
            StoreError::NoSchedule(_) => ApiError::not_found("there is no such schedule"),
            StoreError::Invalid(m) => ApiError::bad_request(m),
            e @ StoreError::Full { .. } => {
                // Where the store is (a path, a server) is the operator's, in the log.
                tracing::error!(target: "nexo::server", "store: {e}");
                ApiError::new(
                    StatusCode::INSUFFICIENT_STORAGE,
                    "store_full",
                    "the server's store is out of disk space, so nothing was written; what was written before is \
                     intact: try again once its operator has freed space",
                )
            }
            other => {
                // The details (a path, a server's address) are the operator's, in the log.
                tracing::error!(target: "nexo::server", "store: {other}");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the server cannot reach its store now; try again shortly",
                )
            }
        }
    }
}

impl From<TenantError> for ApiError {
    fn from(e: TenantError) -> ApiError {
        match e {
            TenantError::BadName(_) | TenantError::BadPolicy(_) => ApiError::bad_request(e.to_string()),
            TenantError::NoTenant(_) => ApiError::not_found(&e.to_string()),
            TenantError::Store(s) => ApiError::store(s),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A handler's result.
pub type ApiResult<T> = Result<T, ApiError>;
