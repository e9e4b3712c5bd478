//! Reading and writing the console's cookies: `HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS.

use axum::http::{HeaderMap, HeaderValue, header};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "nexo_session";

/// The sign-in form's cookie: a token the form repeats, so another site
/// cannot sign a browser in (login CSRF).
pub(super) const LOGIN_COOKIE: &str = "nexo_login";

/// The value of the cookie `name`.
pub(super) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether the request came over HTTPS, as a reverse proxy says.
pub(super) fn over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').next().unwrap_or("").trim().eq_ignore_ascii_case("https"))
}

/// A cookie for `path`, HttpOnly and SameSite=Strict (and Secure over
/// HTTPS); a `max_age` of 0 deletes it.
pub(super) fn set_cookie(name: &str, value: &str, path: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("nexo_invalid=; Max-Age=0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_and_written_strictly() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; nexo_session=abc ; b=2"));
        assert_eq!(cookie(&headers, "nexo_session"), Some("abc"));
        assert_eq!(cookie(&headers, "nexo"), None);
        let set = set_cookie("nexo_session", "abc", "/", 60, false);
        assert_eq!(set, "nexo_session=abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
        assert!(set_cookie("x", "y", "/", 0, true).to_str().unwrap().ends_with("; Secure"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(over_https(&headers));
    }
}
