//! A stand-in for the Claude Code CLI, for the tests of nexo's
//! `--loop claude-code`.
//!
//! `nexo-fake-claude --script FILE --log FILE [the CLI's arguments…]`
//! records its arguments, environment and standard input to the log (one
//! JSON object), then replays the script, a recorded `stream-json` session,
//! line by line, with these changes:
//!
//! - an `assistant` line's calls to `mcp__nexo__*` tools are made for real,
//!   over the MCP server its `--mcp-config` names, and the recorded results
//!   of those calls are replaced by the real ones;
//! - a line `{"fake": …}` is a directive: `{"fake": "raw", "text": T}`
//!   writes T as is; `{"fake": "exit", "code": N, "stderr": S}` writes S to
//!   stderr and exits with N; `{"fake": "approve", "tool_name": …, "input":
//!   …}` asks the permission-prompt tool and logs its answer;
//!   `{"fake": "sleep", "ms": N}` waits; `{"fake": "connect", "port": N}`
//!   tries a TCP connection to 127.0.0.1:N and logs the outcome;
//!   `{"fake": "connect-unix", "path": P}` the same to a Unix socket;
//!   `{"fake": "udp", "port": N}` sends a datagram to 127.0.0.1:N;
//!   `{"fake": "read", "path": P}` reads a file; `{"fake": "get", "url": U}`
//!   GETs the plain-http URL U through the proxy `HTTP_PROXY` names, as
//!   the CLI's `WebFetch` would (each logs what happened).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failure should be loud

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde_json::{Value, json};

/// A GET through `HTTP_PROXY`: the answer's status line and body, or why none came.
fn get(url: &str) -> String {
    let Ok(proxy) = std::env::var("HTTP_PROXY") else { return "refused: no HTTP_PROXY".into() };
    let proxy = proxy.trim_start_matches("http://").trim_end_matches('/').to_string();
    let host = url.trim_start_matches("http://").split('/').next().unwrap_or_default();
    let mut stream = match std::net::TcpStream::connect(&proxy) {
        Ok(s) => s,
        Err(e) => return format!("refused: {e}"),
    };
    let ask = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    if let Err(e) = stream.write_all(ask.as_bytes()).and_then(|()| stream.read_to_string(&mut answer)) {
        return format!("refused: {e}");
    }
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    format!("{} {body}", head.lines().next().unwrap_or_default())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let script = take(&mut args, "--script").expect("--script FILE");
    let log = take(&mut args, "--log").expect("--log FILE");
    let mut stdin = String::new();
    std::io::stdin().read_to_string(&mut stdin).unwrap();
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let mcp_config = args.iter().position(|a| a == "--mcp-config").map(|i| args[i + 1].clone());
    let config_mode = mcp_config.as_ref().and_then(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).ok().map(|m| format!("{:o}", m.permissions().mode() & 0o777))
    });
    let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
    let record = json!({"args": args, "env": env, "stdin": stdin, "cwd": cwd, "mcp_config_mode": config_mode});
    let mut log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    writeln!(log_file, "{record}").unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let clients = mcp_config.map(|path| clients(&path));
    let mut results: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let text = std::fs::read_to_string(&script).unwrap();
    let mut out = std::io::stdout().lock();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(mut value) = serde_json::from_str::<Value>(line) else {
            writeln!(out, "{line}").unwrap();
            continue;
        };
        if let Some(directive) = value.get("fake").and_then(Value::as_str) {
            match directive {
                "raw" => writeln!(out, "{}", value["text"].as_str().unwrap_or_default()).unwrap(),
                "exit" => {
                    out.flush().unwrap();
                    eprintln!("{}", value["stderr"].as_str().unwrap_or_default());
                    std::process::exit(value["code"].as_i64().unwrap_or(1) as i32);
                }
                "sleep" => std::thread::sleep(std::time::Duration::from_millis(value["ms"].as_u64().unwrap_or(0))),
                "approve" => {
                    let arguments =
                        json!({"tool_name": value["tool_name"], "input": value["input"], "tool_use_id": "t"});
                    let answer = runtime.block_on(call(clients.as_ref().unwrap(), "approve", &arguments));
                    writeln!(log_file, "{}", json!({"approve": value["tool_name"], "answer": answer.0})).unwrap();
                }
                "connect" => {
                    let port = value["port"].as_u64().unwrap_or(0) as u16;
                    let outcome = match std::net::TcpStream::connect(("127.0.0.1", port)) {
                        Ok(_) => "connected".to_string(),
                        Err(e) => format!("refused: {e}"),
                    };
                    writeln!(log_file, "{}", json!({"connect": port, "outcome": outcome})).unwrap();
                }
                "get" => {
                    let url = value["url"].as_str().unwrap_or_default();
                    writeln!(log_file, "{}", json!({"get": url, "outcome": get(url)})).unwrap();
                }
                "connect-unix" => {
                    let path = value["path"].as_str().unwrap_or_default();
                    let outcome = match std::os::unix::net::UnixStream::connect(path) {
                        Ok(_) => "connected".to_string(),
                        Err(e) => format!("refused: {e}"),
                    };
                    writeln!(log_file, "{}", json!({"connect-unix": path, "outcome": outcome})).unwrap();
                }
                "udp" => {
                    let port = value["port"].as_u64().unwrap_or(0) as u16;
                    let outcome = match std::net::UdpSocket::bind("127.0.0.1:0")
                        .and_then(|s| s.send_to(b"fake-claude-datagram", ("127.0.0.1", port)))
                    {
                        Ok(_) => "sent".to_string(),
                        Err(e) => format!("refused: {e}"),
                    };
                    writeln!(log_file, "{}", json!({"udp": port, "outcome": outcome})).unwrap();
                }
                "read" => {
                    let path = value["path"].as_str().unwrap_or_default();
                    let outcome = match std::fs::read_to_string(path) {
                        Ok(text) => format!("read: {text}"),
                        Err(e) => format!("refused: {e}"),
                    };
                    writeln!(log_file, "{}", json!({"read": path, "outcome": outcome})).unwrap();
                }
                other => panic!("unknown directive {other}"),
            }
            out.flush().unwrap();
            continue;
        }
        match value.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                writeln!(out, "{line}").unwrap();
                out.flush().unwrap();
                for block in value["message"]["content"].as_array().cloned().unwrap_or_default() {
                    let name = block["name"].as_str().unwrap_or_default();
                    if let Some(tool) = name.strip_prefix("mcp__nexo__") {
                        let clients = clients.as_ref().expect("a tool call needs --mcp-config");
                        let result = runtime.block_on(call(clients, tool, &block["input"]));
                        results.insert(block["id"].as_str().unwrap_or_default().to_string(), result);
                    }
                }
                continue;
            }
            Some("user") => {
                if let Some(blocks) = value["message"]["content"].as_array_mut() {
                    for block in blocks {
                        let id = block["tool_use_id"].as_str().unwrap_or_default().to_string();
                        if let Some((text, is_error)) = results.get(&id) {
                            block["content"] = json!([{"type": "text", "text": text}]);
                            block["is_error"] = json!(is_error);
                        }
                    }
                }
                writeln!(out, "{value}").unwrap();
            }
            _ => writeln!(out, "{line}").unwrap(),
        }
        out.flush().unwrap();
    }
}

fn take(args: &mut Vec<String>, flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    let value = args.get(i + 1).cloned();
    args.drain(i..(i + 2).min(args.len()));
    value
}

/// A client of the one server in the CLI's MCP configuration.
fn clients(path: &str) -> nexo_mcp::Clients {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let server = &config["mcpServers"]["nexo"];
    let token = server["headers"]["Authorization"].as_str().unwrap().strip_prefix("Bearer ").unwrap();
    let config = nexo_mcp::ServerConfig {
        url: Some(server["url"].as_str().unwrap().to_string()),
        token: Some(token.to_string()),
        allow_private: true,
        ..Default::default()
    };
    let server = nexo_mcp::Server::new("nexo", config).unwrap();
    nexo_mcp::Clients::new(vec![server], nexo_mcp::ClientOptions::default())
}

async fn call(clients: &nexo_mcp::Clients, tool: &str, arguments: &Value) -> (String, bool) {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    match clients.call_tool("nexo", tool, arguments).await {
        Ok(r) => (r.text, r.is_error),
        Err(e) => (format!("MCP error: {e}"), true),
    }
}
