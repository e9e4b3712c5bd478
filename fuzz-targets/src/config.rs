//! The operator's config file (`host/src/config.rs`): TOML that holds
//! secrets (an MCP server's token, headers and environment).

use std::path::Path;

use nexo::config::ConfigFile;

/// The secret of the seeds (`fuzz/corpus/config_file`).
pub const SECRET: &str = "fuzz-config-secret-59c3";

/// Parses arbitrary text as a config file. Parsing ends with a config or a
/// short error; the error never shows the seeds' secret unless the input
/// uses it as a key (keys are shown, so that a misspelt one can be found);
/// and an accepted config's debug form never shows an MCP server's token,
/// header or environment values except where the same text is also one of
/// its plain settings.
pub fn config_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match nexo::config::parse(text, Path::new("fuzz/config.toml")) {
        Ok(config) => check_debug(&config),
        Err(e) => {
            crate::assert_short_error("config file", &e);
            let shown = e.to_string();
            assert!(!shown.contains(SECRET) || used_as_key(text, SECRET), "the error shows a secret: {shown}");
        }
    }
}

/// Whether `secret` stands where a key does somewhere in `text`: before the
/// line's first `=`, or followed by `=`, `.` or `]` (a key, a dotted key, a
/// table header). Conservative: a value there counts too.
fn used_as_key(text: &str, secret: &str) -> bool {
    text.match_indices(secret).any(|(at, _)| {
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let after = text[at + secret.len()..].trim_start_matches(['"', '\'']).trim_start_matches([' ', '\t']);
        !text[line_start..at].contains('=') || after.starts_with(['=', '.', ']'])
    })
}

fn check_debug(config: &ConfigFile) {
    for (name, server) in &config.mcp {
        let shown = format!("{server:?}");
        let mut plain = server.clone();
        plain.token = None;
        plain.env.values_mut().for_each(String::clear);
        plain.headers.values_mut().for_each(String::clear);
        let plain = format!("{plain:?}");
        let secrets = server.token.iter().chain(server.env.values()).chain(server.headers.values());
        for secret in secrets.filter(|s| s.len() >= 8) {
            assert!(
                !shown.contains(secret.as_str()) || plain.contains(secret.as_str()),
                "[mcp.{name}]'s debug form shows a secret: {shown}"
            );
        }
    }
}
