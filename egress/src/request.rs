//! [`Request`]: what the client sends.

use std::fmt;

use crate::shown::strip_query;

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("nexo/", env!("CARGO_PKG_VERSION"));

/// The methods the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
}

impl Method {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// What [`GuardedClient::send`] and [`GuardedClient::stream`] send: a GET,
/// or a POST with a JSON body, and caller headers. Caller headers pass the
/// same filter as those of [`GuardedClient::get`]; the client sets
/// `Content-Type` itself. `Debug` shows the method, the URL without its
/// query, and the body's length only.
///
/// [`GuardedClient::send`]: crate::GuardedClient::send
/// [`GuardedClient::stream`]: crate::GuardedClient::stream
/// [`GuardedClient::get`]: crate::GuardedClient::get
#[derive(Clone)]
pub struct Request {
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    /// JSON, for a POST.
    pub(crate) body: Option<bytes::Bytes>,
}

impl Request {
    /// A GET of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        Request { method: Method::Get, url: url.into(), headers: Vec::new(), body: None }
    }

    /// A POST of `body` to `url`, sent with `Content-Type: application/json`.
    ///
    /// A POST follows only 307 and 308 redirects, which keep the method and
    /// body, and checks each hop like the first. It refuses 301, 302 and 303
    /// ([`EgressError::RedirectNotFollowed`]): those turn the request into a
    /// GET without its body, which an API (a model provider's, say) would
    /// answer with something other than what was asked, so the caller should
    /// learn the final URL instead.
    ///
    /// [`EgressError::RedirectNotFollowed`]: crate::EgressError::RedirectNotFollowed
    pub fn post_json(url: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Request {
            method: Method::Post,
            url: url.into(),
            headers: Vec::new(),
            body: Some(bytes::Bytes::from(body.into())),
        }
    }

    /// Adds a caller header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds caller headers.
    pub fn headers(mut self, headers: &[(String, String)]) -> Self {
        self.headers.extend_from_slice(headers);
        self
    }

    /// `GET` or `POST`.
    pub fn method(&self) -> &'static str {
        self.method.as_str()
    }

    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method.as_str())
            .field("url", &strip_query(&self.url))
            .field("headers", &names)
            .field("body_bytes", &self.body.as_ref().map(bytes::Bytes::len))
            .finish()
    }
}
