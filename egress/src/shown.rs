//! How a URL appears in logs and error messages: without what can hold
//! secrets.

use url::Url;

/// Scheme, host, port and path: query strings and fragments can hold
/// secrets, and so can matrix parameters (`/v1;jsessionid=…`), shown as
/// `;<redacted>`.
pub(crate) fn shown(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let path = url.path();
    let path = if path.contains(';') {
        let segments: Vec<String> = path
            .split('/')
            .map(|segment| match segment.split_once(';') {
                Some((name, _)) => format!("{name};<redacted>"),
                None => segment.to_string(),
            })
            .collect();
        segments.join("/")
    } else {
        path.to_string()
    };
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{path}", url.scheme()),
        None => format!("{}://{host}{path}", url.scheme()),
    }
}

pub(crate) fn strip_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_drop_query_and_userinfo() {
        let url = Url::parse("https://u:p@example.com:8443/a/b?token=secret#frag").unwrap();
        assert_eq!(shown(&url), "https://example.com:8443/a/b");
        let url = Url::parse("http://h/v1;jsessionid=secret/chat").unwrap();
        assert_eq!(shown(&url), "http://h/v1;<redacted>/chat");
    }
}
