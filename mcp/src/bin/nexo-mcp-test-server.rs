//! nexo's MCP test server: a real rmcp server with a few tools that exercise
//! the client's paths (errors, hangs, crashes, big and binary results, the
//! environment, the filesystem and the network it is given).
//!
//! ```text
//! nexo-mcp-test-server [stdio]                       MCP over stdin/stdout
//! nexo-mcp-test-server http --port N [--token T | --token-file F] [--witness FILE] [--trace-log FILE]
//!     streamable HTTP on 127.0.0.1:N (0: any free port) at /mcp, printing the bound address
//!     (`127.0.0.1:PORT`) as its first line; with a token, every request needs
//!     `Authorization: Bearer T` (with --token-file, T is read from F at each request, so a test
//!     can rotate it); with a witness file, every `echo` and `write` call appends a line to it:
//!     `NANOS CALLER TEXT`, the time since the epoch, the caller's bearer token (`-`
//!     without one) and the text. A fault test counts each effect there, by who made it.
//!     With --trace-log FILE, each request's `traceparent` header (if any) is appended to
//!     FILE, one per line: the telemetry test checks that calls continue the caller's trace.
//! ```
//!
//! Tools: `echo{text}`, `fail{message}` (a tool error), `hang{seconds}`,
//! `large{bytes}`, `image` (text and a PNG), `crash` (exits mid-call),
//! `write{path, text}` (relative to its working directory, or absolute),
//! `env{name}` (a variable's value, or `unset`), `connect{addr}` (a TCP
//! connect to `host:port`), `fetch{url}` (a plain-HTTP GET through the proxy
//! `HTTP_PROXY` names: the answer's status line and body).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// A 1x1 transparent PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// The test tools, as data (no macros): name, description, schema.
fn tools() -> Vec<Tool> {
    let string = |name: &str| json!({"type": "object", "properties": {name: {"type": "string"}}, "required": [name]});
    let number = |name: &str| json!({"type": "object", "properties": {name: {"type": "number"}}, "required": [name]});
    let none = json!({"type": "object", "properties": {}});
    let both = json!({
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"]
    });
    [
        ("echo", "Returns `text`.", string("text")),
        ("fail", "Returns a tool error with `message`.", string("message")),
        ("hang", "Sleeps `seconds` seconds, then answers.", number("seconds")),
        ("large", "Returns `bytes` bytes of text.", number("bytes")),
        ("image", "Returns a text and a small PNG image.", none.clone()),
        ("crash", "Exits the server in the middle of the call.", none),
        ("write", "Writes `text` to the file `path`.", both),
        ("env", "Returns the environment variable `name`, or `unset`.", string("name")),
        ("connect", "Opens a TCP connection to `addr` (host:port).", string("addr")),
        ("fetch", "GETs the http `url` through the proxy `HTTP_PROXY` names.", string("url")),
    ]
    .into_iter()
    .map(|(name, description, schema)| {
        let schema: JsonObject = schema.as_object().cloned().unwrap_or_default();
        Tool::new(name, description, Arc::new(schema))
    })
    .collect()
}

/// The test server's handler.
#[derive(Clone, Default)]
struct TestServer {
    /// Where `echo` and `write` calls are witnessed, if anywhere.
    witness: Log,
}

impl TestServer {
    /// Appends the call to the witness file: one `write` per line, so
    /// concurrent calls never interleave within a line.
    fn witness(&self, context: &RequestContext<RoleServer>, text: &str) -> Result<(), ErrorData> {
        use std::io::Write as _;
        let Some(file) = &self.witness else { return Ok(()) };
        let caller = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("authorization"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("-")
            .to_string();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let line = format!("{nanos} {caller} {}\n", text.replace('\n', " "));
        let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(line.as_bytes()).map_err(|e| ErrorData::internal_error(format!("witness: {e}"), None))
    }
}

fn text_arg(args: &JsonObject, name: &str) -> Result<String, ErrorData> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ErrorData::invalid_params(format!("missing string argument `{name}`"), None))
}

fn number_arg(args: &JsonObject, name: &str) -> Result<f64, ErrorData> {
    args.get(name)
        .and_then(Value::as_f64)
        .filter(|n| *n >= 0.0)
        .ok_or_else(|| ErrorData::invalid_params(format!("missing non-negative number `{name}`"), None))
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("nexo-mcp-test-server", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult { tools: tools(), ..Default::default() })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let ok = |text: String| CallToolResult::success(vec![ContentBlock::text(text)]);
        let result = match request.name.as_ref() {
            "echo" => {
                let text = text_arg(&args, "text")?;
                self.witness(&context, &text)?;
                ok(text)
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text(text_arg(&args, "message")?)]),
            "hang" => {
                tokio::time::sleep(Duration::from_secs_f64(number_arg(&args, "seconds")?)).await;
                ok("done".into())
            }
            "large" => ok("x".repeat(number_arg(&args, "bytes")? as usize)),
            "image" => {
                CallToolResult::success(vec![ContentBlock::text("a tiny image"), ContentBlock::image(PNG, "image/png")])
            }
            "crash" => {
                eprintln!("test server: crashing as asked");
                std::process::exit(3)
            }
            "write" => {
                let (path, text) = (text_arg(&args, "path")?, text_arg(&args, "text")?);
                self.witness(&context, &text)?;
                match std::fs::write(&path, text) {
                    Ok(()) => ok(format!("wrote {path}")),
                    Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("cannot write {path}: {e}"))]),
                }
            }
            "env" => ok(std::env::var(text_arg(&args, "name")?).unwrap_or_else(|_| "unset".into())),
            "connect" => {
                let addr = text_arg(&args, "addr")?;
                match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&addr)).await {
                    Ok(Ok(_)) => ok(format!("connected to {addr}")),
                    Ok(Err(e)) => CallToolResult::error(vec![ContentBlock::text(format!("cannot connect: {e}"))]),
                    Err(_) => CallToolResult::error(vec![ContentBlock::text("cannot connect: timed out")]),
                }
            }
            "fetch" => match tokio::time::timeout(Duration::from_secs(10), fetch(&text_arg(&args, "url")?)).await {
                Ok(Ok(answer)) => ok(answer),
                Ok(Err(e)) => CallToolResult::error(vec![ContentBlock::text(format!("cannot fetch: {e}"))]),
                Err(_) => CallToolResult::error(vec![ContentBlock::text("cannot fetch: timed out")]),
            },
            other => return Err(ErrorData::invalid_params(format!("no tool named `{other}`"), None)),
        };
        Ok(result.into())
    }
}

/// A GET of `url` through the proxy in `HTTP_PROXY`: its status line and body.
async fn fetch(url: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let proxy = std::env::var("HTTP_PROXY").map_err(|_| "HTTP_PROXY is not set".to_string())?;
    let proxy = proxy.trim_start_matches("http://").trim_end_matches('/');
    let host = url.trim_start_matches("http://").split('/').next().unwrap_or_default();
    let mut stream = tokio::net::TcpStream::connect(proxy).await.map_err(|e| e.to_string())?;
    let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Ok(format!("{}\n{body}", head.lines().next().unwrap_or_default()))
}

async fn serve_stdio() -> Result<(), String> {
    let service = TestServer::default().serve(rmcp::transport::stdio()).await.map_err(|e| e.to_string())?;
    service.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// The bearer token HTTP requests need.
#[derive(Clone)]
enum Expected {
    None,
    Token(String),
    File(std::path::PathBuf),
}

impl Expected {
    fn allows(&self, header: Option<&http::HeaderValue>) -> bool {
        let want = match self {
            Expected::None => return true,
            Expected::Token(t) => t.clone(),
            Expected::File(path) => std::fs::read_to_string(path).unwrap_or_default().trim().to_string(),
        };
        header.is_some_and(|got| got.as_bytes() == format!("Bearer {want}").as_bytes())
    }
}

/// A file opened for appending, shared by the connections.
type Log = Option<Arc<std::sync::Mutex<std::fs::File>>>;

fn append_to(path: Option<std::path::PathBuf>, what: &str) -> Result<Log, String> {
    let Some(path) = path else { return Ok(None) };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open the {what} {}: {e}", path.display()))?;
    Ok(Some(Arc::new(std::sync::Mutex::new(file))))
}

async fn serve_http(
    port: u16,
    expected: Expected,
    witness: Option<std::path::PathBuf>,
    trace_log: Option<std::path::PathBuf>,
) -> Result<(), String> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let witness = append_to(witness, "witness file")?;
    let trace_log = append_to(trace_log, "trace log")?;
    let server = TestServer { witness };
    let mcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    println!("{}", listener.local_addr().map_err(|e| e.to_string())?);
    loop {
        let (socket, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mcp = mcp.clone();
        let expected = expected.clone();
        let trace_log = trace_log.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let mut mcp = mcp.clone();
                let expected = expected.clone();
                if let (Some(log), Some(parent)) = (&trace_log, req.headers().get("traceparent")) {
                    use std::io::Write as _;
                    let line = format!("{}\n", String::from_utf8_lossy(parent.as_bytes()));
                    let _ = log.lock().unwrap_or_else(|p| p.into_inner()).write_all(line.as_bytes());
                }
                async move {
                    if !expected.allows(req.headers().get("authorization")) {
                        let body = http_body_util::Full::new(bytes::Bytes::from_static(b"bad or missing bearer token"));
                        let mut response = http::Response::new(http_body_util::BodyExt::boxed(
                            http_body_util::BodyExt::map_err(body, |e: Infallible| match e {}),
                        ));
                        *response.status_mut() = http::StatusCode::UNAUTHORIZED;
                        return Ok::<_, Infallible>(response);
                    }
                    tower_service::Service::call(&mut mcp, req).await
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: nexo-mcp-test-server [stdio] | http --port N [--token T | --token-file F] [--witness FILE] [--trace-log FILE]"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("stdio") => serve_stdio().await,
        Some("http") => {
            let mut port = None;
            let mut expected = Expected::None;
            let mut witness = None;
            let mut trace_log = None;
            let mut rest = args[1..].iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--port" => port = rest.next().and_then(|p| p.parse::<u16>().ok()),
                    "--token" => expected = Expected::Token(rest.next().cloned().unwrap_or_else(|| usage())),
                    "--token-file" => expected = Expected::File(rest.next().unwrap_or_else(|| usage()).into()),
                    "--witness" => witness = Some(rest.next().unwrap_or_else(|| usage()).into()),
                    "--trace-log" => trace_log = Some(rest.next().unwrap_or_else(|| usage()).into()),
                    _ => usage(),
                }
            }
            serve_http(port.unwrap_or_else(|| usage()), expected, witness, trace_log).await
        }
        Some(_) => usage(),
    };
    if let Err(e) = result {
        eprintln!("test server: {e}");
        std::process::exit(1);
    }
    // A pending stdin read can hold up the runtime's shutdown.
    std::process::exit(0)
}
