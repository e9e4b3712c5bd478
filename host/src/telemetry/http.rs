//! The exporters' HTTP client: the host's reqwest, driven on the tokio
//! runtime that installed telemetry, so exporting works from threads that
//! have no runtime (the span exporter's, the metrics reader's) without a
//! second HTTP stack.

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError};

/// How long one export may take, body included; a stuck receiver costs a
/// dropped batch, never a run.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// An [`HttpClient`] for the OTLP exporters.
#[derive(Debug, Clone)]
pub(crate) struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl ExportClient {
    /// A client whose requests run on the current tokio runtime.
    pub(crate) fn new() -> Result<Self, super::error::TelemetryError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| super::error::TelemetryError::NoRuntime)?;
        // The receiver is the operator's, named in their config: no redirects
        // to anywhere else.
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| super::error::TelemetryError::Client(e.to_string()))?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let response = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let status = response.status();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, body))
            })
            .await??;
        let (status, body) = response;
        Ok(http::Response::builder().status(status).body(body)?)
    }
}
