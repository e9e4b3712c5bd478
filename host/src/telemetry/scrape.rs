//! `/metrics` for Prometheus, on the operator's own address
//! (`[telemetry.prometheus] listen`) and never on the tenants' API: its own
//! listener and router, with the bearer token `token-env` names when set
//! (compared in constant time; 401 otherwise). Bind it to a private
//! address: the metrics name every tenant.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::Encoder;
use sha2::{Digest, Sha256};

use super::metrics::Scrape;

/// The routes: `/metrics` only.
pub fn router(scrape: Scrape) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(Arc::new(scrape))
}

/// Binds `scrape.listen` now (so a taken address fails start-up) and
/// serves `/metrics` there until `stop` completes.
pub async fn serve(
    scrape: Scrape,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<std::net::SocketAddr, super::error::TelemetryError> {
    let addr = scrape.listen;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        super::error::TelemetryError::Scrape(format!(
            "cannot listen on {addr} for /metrics: {e} (set another address: [telemetry.prometheus] listen, or \
             `nexo worker --metrics-listen ADDR` for a worker beside another node)"
        ))
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let app = router(scrape);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
            tracing::warn!(target: "nexo::telemetry", "the /metrics server failed: {e}");
        }
    });
    Ok(bound)
}

/// What a node (`nexo serve`, `nexo worker`) keeps for the operator's
/// metrics until `stop` says so: `/metrics` on the scrape address, when the
/// operator set one (returned, bound), and the store's gauges (queue depth
/// and pending approvals per tenant), when metrics are installed.
/// `listen`, when given, is this node's address for it instead of the
/// config file's (nodes on one host that share a config file each need one).
pub async fn keep_node_metrics(
    store: Arc<dyn nexo_store::Store>,
    stop: tokio::sync::watch::Receiver<bool>,
    listen: Option<std::net::SocketAddr>,
) -> Result<Option<std::net::SocketAddr>, super::error::TelemetryError> {
    let stopped = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let at = match (super::metrics::scrape(), listen) {
        (Some(mut scrape), listen) => {
            scrape.listen = listen.unwrap_or(scrape.listen);
            Some(serve(scrape, stopped(stop.clone())).await?)
        }
        (None, Some(_)) => {
            return Err(super::error::TelemetryError::Scrape(
                "an address for /metrics was given, but the config file sets up no Prometheus metrics: add a                  `[telemetry.prometheus]` table (its `token-env` too, for a token)"
                    .into(),
            ));
        }
        (None, None) => None,
    };
    tokio::spawn(super::metrics::gauges::keep(store, stopped(stop)));
    Ok(at)
}

async fn metrics(State(scrape): State<Arc<Scrape>>, headers: HeaderMap) -> Response {
    if let Some(token) = &scrape.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !same_secret(given.trim(), token) {
            let challenge = [(header::WWW_AUTHENTICATE, "Bearer")];
            return (StatusCode::UNAUTHORIZED, challenge, "a bearer token is needed for /metrics\n").into_response();
        }
    }
    let encoder = prometheus::TextEncoder::new();
    let mut body = Vec::new();
    if let Err(e) = encoder.encode(&scrape.registry.gather(), &mut body) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the metrics: {e}\n")).into_response();
    }
    ([(header::CONTENT_TYPE, encoder.format_type().to_string())], body).into_response()
}

/// Whether the token given is the one expected, in time that depends on
/// neither where they differ nor their lengths (both are hashed first).
fn same_secret(given: &str, expected: &str) -> bool {
    let (a, b) = (Sha256::digest(given.as_bytes()), Sha256::digest(expected.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
