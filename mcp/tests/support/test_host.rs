//! Plays the host in the orphan tests: `nexo-mcp-test-host CONFIG_JSON wait|close`.
//!
//! Dispatches `__mcp-guard` to [`nexo_mcp::guard_main`] as the real host
//! does, and otherwise starts the `[mcp.test]` server given as JSON through
//! the guard (itself), connects, prints `ready`, and then either waits to be
//! killed (`wait`) or closes the clients, prints `closed` and exits (`close`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;

use nexo_mcp::{ClientOptions, Clients, GUARD_SUBCOMMAND, Server, ServerConfig, guard_main};

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == GUARD_SUBCOMMAND) {
        std::process::exit(guard_main(&args[1..]));
    }
    let config: ServerConfig = serde_json::from_str(args[0].to_str().unwrap()).expect("a ServerConfig as JSON");
    let mode = args[1].to_str().unwrap().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let server = Server::new("test", config).unwrap();
        let options = ClientOptions { guard: Some(std::env::current_exe().unwrap()), http_client: None };
        let clients = Clients::new(vec![server], options);
        let tools = clients.list_tools("test").await.unwrap();
        println!("ready {}", tools.len());
        match mode.as_str() {
            "close" => {
                clients.close().await;
                println!("closed");
            }
            _ => std::future::pending::<()>().await,
        }
    });
}
