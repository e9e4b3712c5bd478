//! The vendored and hand-written files the console serves, under names that change with their content.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A vendored or hand-written file, served under a name that changes with
/// its content, so it can be cached for good.
struct Asset {
    pub(super) name: String,
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
        named("htmx", "min.js", include_bytes!("htmx.min.js"), "text/javascript; charset=utf-8"),
        named("console", "css", include_bytes!("console.css"), "text/css; charset=utf-8"),
    ]
});

pub(super) fn asset_url(index: usize) -> String {
    format!("/assets/{}", ASSETS[index].name)
}

pub(super) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => (
            [(header::CONTENT_TYPE, a.content_type), (header::CACHE_CONTROL, "public, max-age=31536000, immutable")],
            a.bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}
