//! HTML: escaping, the page frame, and the small pieces pages are made of (times, badges, live fragments).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use nexo_store::RunStatus;
use serde_json::Value;

use super::assets::asset_url;
use super::who::Who;

/// Escapes text for HTML content and quoted attribute values. Bidirectional
/// controls become numeric references: raw, they would reorder what the
/// console shows (a command or a path reading other than it runs).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_bidi_control(c) || is_invisible_format(c) => {
                let _ = write!(out, "&#x{:X};", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// The Unicode bidirectional formatting characters: embeddings and
/// overrides, isolates, and the implicit marks.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Characters that change how text reads without being seen: the line
/// and paragraph separators, the byte-order mark (zero-width no-break
/// space) and the tag characters.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}')
}

/// Percent-encodes a query parameter's value.
pub(super) fn encode_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Which page the navigation marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    Runs,
    Approvals,
    Usage,
    Sessions,
    None,
}

/// A whole page.
pub(super) fn page(title: &str, who: Option<&Who>, nav: Nav, body: &str) -> String {
    let header = match who {
        Some(who) => {
            let link = |href: &str, label: &str, this: Nav| {
                let class = if nav == this { " class=\"here\"" } else { "" };
                format!("<a href=\"{href}\"{class}>{label}</a>")
            };
            format!(
                "<header class=\"top\"><a class=\"brand\" href=\"/runs\">nexo</a><nav>{}{}{}{}</nav>\
                 <div class=\"who\"><span id=\"tenant\">{}</span>\
                 <form class=\"inline\" method=\"post\" action=\"/logout\">{}<button class=\"link\" type=\"submit\">\
                 Sign out</button></form></div></header>",
                link("/runs", "Runs", Nav::Runs),
                link("/approvals", "Approvals", Nav::Approvals),
                link("/usage", "Usage", Nav::Usage),
                link("/sessions", "Sessions", Nav::Sessions),
                escape(&who.name),
                csrf_field(&who.csrf),
            )
        }
        None => "<header class=\"top\"><span class=\"brand\">nexo</span></header>".to_string(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"htmx-config\" content='{{\"includeIndicatorStyles\":false,\"allowEval\":false,\
         \"allowScriptTags\":false,\"historyCacheSize\":0}}'>\
         <title>{} · nexo</title><link rel=\"stylesheet\" href=\"{}\"><script src=\"{}\" defer></script></head>\
         <body>{header}<main>{body}</main></body></html>\n",
        escape(title),
        asset_url(1),
        asset_url(0),
    )
}

pub(super) fn csrf_field(token: &str) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", escape(token))
}

pub(super) fn html(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

/// A UTC time, to the second, in a `<time>` element.
pub(super) fn time_tag(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    let shown = format!("{} UTC", iso.trim_end_matches('Z').replacen('T', " ", 1));
    format!("<time datetime=\"{iso}\">{shown}</time>")
}

/// `HH:MM:SS.mmm` (UTC).
pub(super) fn clock(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let iso = humantime::format_rfc3339_millis(at).to_string();
    iso.get(11..23).unwrap_or(&iso).to_string()
}

pub(super) fn status_badge(status: RunStatus, id: Option<&str>) -> String {
    let id = id.map(|i| format!(" id=\"{i}\"")).unwrap_or_default();
    format!("<span{id} class=\"status status-{0}\">{0}</span>", status.as_str())
}

pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// At most `max` bytes of `text`, cut at a character boundary, marked if cut.
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// A short hash of a fragment's content: a poll that sends it back gets
/// 204 (nothing to swap) while the content is the same.
fn version(inner: &str) -> String {
    nexo_store::sha256_hex(inner)[..16].to_string()
}

/// A fragment that polls `url` (with its version added) every `every`, or a
/// still one once `polling` is false.
pub(super) fn live(tag: &str, id: &str, class: &str, url: &str, every: &str, polling: bool, inner: &str) -> String {
    let poll = if polling {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!(
            " hx-get=\"{}{sep}v={}\" hx-trigger=\"every {every}\" hx-swap=\"outerHTML\"",
            escape(url),
            version(inner)
        )
    } else {
        String::new()
    };
    format!("<{tag} id=\"{id}\" class=\"{class}\"{poll}>{inner}</{tag}>")
}

/// The answer to a poll: 204 when the client has this version already.
pub(super) fn poll_answer(given: Option<&str>, inner: &str, whole: String) -> Response {
    if given == Some(version(inner).as_str()) {
        return StatusCode::NO_CONTENT.into_response();
    }
    html(StatusCode::OK, whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(escape("plain text, ünïcode"), "plain text, ünïcode");
    }

    #[test]
    fn escape_writes_bidirectional_controls_as_references() {
        let controls = ['\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}']
            .into_iter()
            .chain(['\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}'])
            .chain(['\u{2028}', '\u{2029}', '\u{FEFF}', '\u{E0000}', '\u{E0041}', '\u{E007F}']);
        for c in controls {
            let shown = escape(&format!("rm -rf {c}gpj.exe"));
            assert!(!shown.contains(c), "{:?} is written raw", u32::from(c));
            assert!(shown.contains(&format!("&#x{:X};", u32::from(c))), "{shown}");
        }
        // Other formatting and non-Latin text pass as they are.
        assert_eq!(escape("\u{200D}שלום"), "\u{200D}שלום");
    }
}
