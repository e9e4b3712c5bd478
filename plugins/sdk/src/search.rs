//! The search-backend world: implement [`SearchBackend`] and export it with
//! [`export_search_backend!`](crate::export_search_backend).
//!
//! A backend reaches the network only through [`http`], which the host limits to
//! the hosts the operator granted. The host adds the API key to those requests;
//! the backend never sees it. Non-secret settings (such as the base URL of a
//! self-hosted service) come from [`setting`].

use alloc::string::String;
use alloc::vec::Vec;

/// Raw bindings generated from `wit/` for the `search-backend-plugin`
/// world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "nexo:plugin/search-backend-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_search_backend_plugin",
        default_bindings_module: "nexo_sdk::search::bindings",
        runtime_path: "nexo_sdk::__wit_bindgen::rt",
    });
}

pub use bindings::exports::nexo::plugin::search_backend::{BackendInfo as Info, SearchError, SearchOptions};
pub use bindings::nexo::plugin::config::get as setting;
pub use bindings::nexo::plugin::log::{self, Level};
pub use bindings::nexo::plugin::outbound_http::{self as http, HttpError, Request, Response};
pub use bindings::nexo::plugin::types::SearchHit;

/// A web-search backend.
pub trait SearchBackend {
    /// The backend's name, description and the hosts it needs.
    fn info() -> Info;

    /// Runs one query.
    fn search(query: String, options: SearchOptions) -> Result<Vec<SearchHit>, SearchError>;
}

/// Sends a GET request with extra headers through the host.
pub fn get(url: &str, headers: &[(&str, &str)]) -> Result<Response, HttpError> {
    http::send(&Request {
        url: url.into(),
        headers: headers.iter().map(|(k, v)| (String::from(*k), String::from(*v))).collect(),
    })
}

impl From<HttpError> for SearchError {
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::Denied(m) => SearchError::Unavailable(alloc::format!("request refused by the host: {m}")),
            HttpError::Timeout(m) => SearchError::Unavailable(alloc::format!("timed out: {m}")),
            HttpError::Failed(m) => SearchError::Unavailable(m),
        }
    }
}

impl<T: SearchBackend> bindings::exports::nexo::plugin::search_backend::Guest for T {
    fn info() -> Info {
        <T as SearchBackend>::info()
    }

    fn search(query: String, options: SearchOptions) -> Result<Vec<SearchHit>, SearchError> {
        <T as SearchBackend>::search(query, options)
    }
}

/// Exports a type that implements [`SearchBackend`] as this component's
/// search backend.
#[macro_export]
macro_rules! export_search_backend {
    ($ty:ident) => {
        $crate::search::bindings::__export_search_backend_plugin!($ty);
    };
}
