//! A bearer token never shows: not in `Debug` output, `describe()`, error
//! messages or logs (captured here at TRACE level), whichever source it
//! comes from and whether it is accepted or refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{HttpServer, args, http_config};
use nexo_mcp::{ClientOptions, Clients, Server, ServerConfig};
use serde_json::json;

const RIGHT: &str = "tok-right-7d1e9b3c5a2f4e6d8c0b";
const WRONG: &str = "tok-wrong-3b8f0a6c2d4e9f1a7c5e";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_token_never_appears_in_anything_observable() {
    let logs = Captured::default();
    let sink = logs.clone();
    tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_writer(move || sink.clone()).init();

    let dir = tempfile::tempdir().unwrap();
    let server_token = dir.path().join("server-token");
    std::fs::write(&server_token, RIGHT).unwrap();
    let http = HttpServer::start(&["--token-file", server_token.to_str().unwrap()]).await;
    let (right_file, wrong_file) = (dir.path().join("right"), dir.path().join("wrong"));
    std::fs::write(&right_file, format!("{RIGHT}\n")).unwrap();
    std::fs::write(&wrong_file, format!("{WRONG}\n")).unwrap();
    let base = http_config(&http.url);
    let configs: Vec<(&str, ServerConfig)> = vec![
        ("static-ok", ServerConfig { token: Some(RIGHT.into()), ..base.clone() }),
        ("static-bad", ServerConfig { token: Some(WRONG.into()), ..base.clone() }),
        ("file-ok", ServerConfig { token_file: Some(right_file), ..base.clone() }),
        ("file-bad", ServerConfig { token_file: Some(wrong_file.clone()), ..base.clone() }),
        ("command-ok", ServerConfig { token_command: Some(format!("printf '%s' {RIGHT}")), ..base.clone() }),
        ("command-bad", ServerConfig { token_command: Some(format!("cat {}", wrong_file.display())), ..base.clone() }),
        (
            "header-ok",
            ServerConfig { headers: [("Authorization".into(), format!("Bearer {RIGHT}"))].into(), ..base.clone() },
        ),
    ];
    let mut seen = Vec::new();
    for (_, config) in &configs {
        seen.push(format!("{config:?}"));
    }
    let servers: Vec<Server> = configs.iter().map(|(n, c)| Server::new(n, c.clone()).unwrap()).collect();
    for server in &servers {
        seen.push(format!("{server:?}"));
        seen.push(server.describe());
    }
    let clients = Clients::new(servers, ClientOptions::default());
    seen.push(format!("{clients:?}"));
    for (name, _) in &configs {
        let result = clients.call_tool(name, "echo", args(json!({"text": "hi"}))).await;
        if name.ends_with("-ok") {
            assert_eq!(result.as_ref().unwrap().text, "hi", "{name}");
        } else {
            let e = result.as_ref().unwrap_err();
            assert!(e.to_string().contains("HTTP 401"), "{name}: {e}");
            seen.push(e.to_string());
        }
        seen.push(format!("{result:?}"));
    }
    // A rotated server token: the live connections now fail mid-session.
    std::fs::write(&server_token, "tok-rotated-000000000000").unwrap();
    for name in ["static-ok", "command-ok"] {
        let e = clients.call_tool(name, "echo", args(json!({"text": "hi"}))).await.unwrap_err();
        seen.push(e.to_string());
        seen.push(format!("{e:?}"));
    }
    clients.close().await;

    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(logs.contains("nexo::egress"), "the capture works: it saw the egress log lines");
    seen.push(logs);
    for text in &seen {
        for secret in [RIGHT, WRONG, &RIGHT[4..], &WRONG[4..]] {
            assert!(!text.contains(secret), "the token shows in:\n{text}");
        }
    }
}
