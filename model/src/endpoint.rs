//! A provider's endpoint: the base URL the operator gave, checked, joined
//! with the API path, and a form of it that is safe to print.
//!
//! Some gateways take a key in the query string (`?key=…`), so the query is
//! kept for requests but never shown: every message, warning and debug line
//! uses [`Endpoint::shown`]. Credentials in the URL (`user:pass@host`) are
//! refused outright; keys belong in the environment.

use crate::ModelError;

/// The full URL of one API call, and its printable form.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// What requests go to, query included.
    pub url: String,
    /// `url` with its query replaced by `?<redacted>` and any matrix
    /// parameters by `;<redacted>`.
    pub shown: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Endpoint {
    /// `base` with `path` appended to its path (the query stays at the end).
    /// `path` starts with `/`; `strip` is a suffix of the base path that
    /// `path` already includes (Anthropic's `/v1`).
    pub(crate) fn new(base: &str, provider: &str, path: &str, strip: Option<&str>) -> Result<Endpoint, ModelError> {
        let mut url = check_base(base, provider)?;
        let mut base_path = url.path().trim_end_matches('/').to_string();
        if let Some(strip) = strip
            && base_path.ends_with(strip)
        {
            base_path.truncate(base_path.len() - strip.len());
        }
        url.set_path(&format!("{base_path}{path}"));
        let shown = shown(&url);
        Ok(Endpoint { url: url.into(), shown })
    }
}

/// Parses and checks a base URL: http or https, no credentials, no fragment.
pub(crate) fn check_base(base: &str, provider: &str) -> Result<url::Url, ModelError> {
    let url = url::Url::parse(base).map_err(|e| {
        ModelError::Config(format!("the base URL `{}` for {provider} is not a URL: {e}", redact_text(base)))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ModelError::Config(format!(
            "the base URL `{}` for {provider} must start with http:// or https://",
            shown(&url)
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ModelError::Config(format!(
            "the base URL `{}` for {provider} carries credentials (`user:password@`); remove them and give the key \
             through the provider's API-key variable instead",
            shown(&url)
        )));
    }
    if url.fragment().is_some() {
        return Err(ModelError::Config(format!(
            "the base URL `{}` for {provider} has a `#fragment`, which is never sent; remove it",
            shown(&url)
        )));
    }
    Ok(url)
}

/// `url` without credentials, its query replaced by `?<redacted>` and its
/// matrix parameters by `;<redacted>`.
pub(crate) fn shown(url: &url::Url) -> String {
    let mut clean = url.clone();
    let _ = clean.set_username("");
    let _ = clean.set_password(None);
    clean.set_fragment(None);
    let had_query = clean.query().is_some();
    clean.set_query(None);
    let mut text = String::from(clean.clone());
    // Matrix parameters (`/v1;jsessionid=…`) carry sessions and tokens too.
    let path = clean.path();
    if path.contains(';') {
        let shown: Vec<String> = path
            .split('/')
            .map(|seg| match seg.split_once(';') {
                Some((name, _)) => format!("{name};<redacted>"),
                None => seg.to_string(),
            })
            .collect();
        // Without query or fragment, the serialized URL ends with its path.
        text.truncate(text.len() - path.len());
        text.push_str(&shown.join("/"));
    }
    if had_query {
        text.push_str("?<redacted>");
    }
    text
}

/// The same redaction for text that did not parse as a URL: anything from
/// the first `?` or `#` on, and anything before an `@` in the authority,
/// is hidden; the rest is cut to 100 characters, marked with `…`.
fn redact_text(text: &str) -> String {
    let (head, hidden) = match text.find(['?', '#']) {
        Some(cut) => (&text[..cut], true),
        None => (text, false),
    };
    let (scheme, rest) = match head.find("://") {
        Some(i) => (&head[..i + 3], &head[i + 3..]),
        None => ("", head),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => format!("<redacted>@{}", &rest[at + 1..]),
        None => rest.to_string(),
    };
    let mut out = nexo_text::head_chars(&format!("{scheme}{rest}"), 100);
    if hidden {
        out.push_str("?<redacted>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_stays_after_the_joined_path_and_is_never_shown() {
        let e = Endpoint::new("https://gw.example/v1?key=s3cret", "openai", "/chat/completions", None).unwrap();
        assert_eq!(e.url, "https://gw.example/v1/chat/completions?key=s3cret");
        assert_eq!(e.shown, "https://gw.example/v1/chat/completions?<redacted>");
        assert!(!format!("{e:?}").contains("s3cret"));
    }

    #[test]
    fn matrix_parameters_are_hidden_too() {
        let e = Endpoint::new("http://h:1/v1;jsessionid=s3cret", "openai", "/chat/completions", None).unwrap();
        assert_eq!(e.url, "http://h:1/v1;jsessionid=s3cret/chat/completions");
        assert_eq!(e.shown, "http://h:1/v1;<redacted>/chat/completions");
    }

    #[test]
    fn anthropic_accepts_a_base_with_or_without_v1() {
        for base in ["http://h", "http://h/", "http://h/v1", "http://h/v1/"] {
            let e = Endpoint::new(base, "anthropic", "/v1/messages", Some("/v1")).unwrap();
            assert_eq!(e.url, "http://h/v1/messages", "{base}");
        }
    }

    #[test]
    fn credentials_and_fragments_are_refused_without_echoing_them() {
        for base in ["http://user:pw-s3cret@h/v1", "http://tok-s3cret@h/v1", "http://h/v1#s3cret"] {
            let e = check_base(base, "openai").unwrap_err().to_string();
            assert!(!e.contains("s3cret"), "{e}");
            assert!(e.contains("http://h/v1"), "{e}");
        }
    }

    #[test]
    fn long_unparseable_bases_are_cut_and_say_so() {
        let shown = redact_text(&format!("http://[bad/{}?key=s3cret", "é".repeat(200)));
        assert!(shown.ends_with("…?<redacted>"), "{shown}");
        assert_eq!(shown.trim_end_matches("?<redacted>").chars().count(), 100);
    }

    #[test]
    fn unparseable_bases_are_redacted_too() {
        let e = check_base("http://us:s3cret@[bad/v1?key=s3cret", "openai").unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(e.contains("not a URL"), "{e}");
    }
}
