//! Network for the shell's commands through nexo's egress proxy, end to
//! end: the real `nexo` binary, a scripted model calling the `shell` tool,
//! real `curl` and `git` inside each confinement, and a loopback origin
//! server (allowed explicitly with `[sandbox] net-allow-private`, as a
//! mirror on the LAN would be).
//!
//! - under bubblewrap and under Landlock: a granted host answers through
//!   the proxy, `git clone` over HTTP works, an unlisted host is refused
//!   by the proxy, and a connection that ignores the proxy reaches nothing;
//! - without the private-address allowance the same grant is refused by
//!   the address guard;
//! - in `nexo serve`, the tenant's policy grants the hosts, its egress
//!   quota stops a large download part way, and each connection is in the
//!   tenant's audit log with its bytes and verdict;
//! - a confined MCP server's own `net-hosts` (the operator's `[mcp.NAME]`)
//!   reach those hosts through the proxy in a served run, audited as the
//!   server's (`by: mcp:NAME`) under the run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nexo_model::mock::{MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::json;

mod common;

use common::scene::Scene;
use common::stderr;

/// What `/big` serves: past the quota the serve test sets.
const BIG: usize = 8 << 20;

/// A loopback origin: `/small`, `/big`, and the files beneath `root` (a
/// bare repository, for git's plain HTTP). Counts the requests it gets.
struct Origin {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Origin {
    fn start(root: PathBuf) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let root = root.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).to_string();
                    let target = head.split_whitespace().nth(1).unwrap_or("/");
                    let path = target.split('?').next().unwrap_or("/").to_string();
                    let body = match path.as_str() {
                        "/small" => Some(b"hello from the origin\n".to_vec()),
                        "/big" => Some(vec![b'x'; BIG]),
                        p if !p.contains("..") => std::fs::read(root.join(p.trim_start_matches('/'))).ok(),
                        _ => None,
                    };
                    let (status, body) = match body {
                        Some(body) => ("200 OK", body),
                        None => ("404 Not Found", b"no such file\n".to_vec()),
                    };
                    let head =
                        format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.write_all(&body);
                });
            }
        });
        Origin { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("these tests need git (apt-get install git)");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A bare repository with one commit, ready for git's plain HTTP.
fn repository(root: &Path) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("README"), "cloned through the proxy\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-qm", "first"]);
    git(root, &["clone", "-q", "--bare", "work", "repo.git"]);
    git(&root.join("repo.git"), &["update-server-info"]);
}

/// Runs one `shell` call of `command` through `nexo run` in `ws` under
/// `confinement`, with `args` added; the run's output.
fn run(dir: &Path, ws: &Path, confinement: &str, command: &str, args: &[&str]) -> std::process::Output {
    let agent = dir.join("netter.toml");
    std::fs::write(&agent, "name = \"netter\"\ndescription = \"Fetches\"\ncapabilities = [\"shell\"]\n").unwrap();
    let script = dir.join("script.json");
    let turn = json!({ "tool_calls": [{ "name": "shell", "arguments": { "command": command } }] });
    std::fs::write(&script, json!({ "turns": [turn, { "text": "done" }] }).to_string()).unwrap();
    common::nexo_command(&dir.join("cache"))
        .args(["run", agent.to_str().unwrap(), "go", "--script", script.to_str().unwrap()])
        .args(["--sandbox", "local", "--cwd", ws.to_str().unwrap(), "--mode", "auto", "--allow", "shell"])
        .args(["--shell-confinement", confinement])
        .args(args)
        .output()
        .expect("run nexo")
}

fn read(ws: &Path, name: &str) -> String {
    std::fs::read_to_string(ws.join(name)).unwrap_or_else(|e| format!("(no {name}: {e})"))
}

fn commands_reach_granted_hosts_through_the_proxy_only(confinement: &str) {
    let dir = tempfile::Builder::new().prefix("net-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let served = dir.path().join("served");
    repository(&served);
    let origin = Origin::start(served);
    let port = origin.port;
    let config = dir.path().join("nexo.toml");
    std::fs::write(&config, "[sandbox]\nnet-allow-private = [\"127.0.0.1\"]\n").unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let command = format!(
        "curl -sS http://127.0.0.1:{port}/small > small.txt 2>&1; \
         curl -sS http://localhost:{port}/small > unlisted.txt 2>&1; \
         curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{}/small > other-port.txt 2>&1; \
         curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/small > direct.txt 2>&1; echo $? > direct.rc; \
         git clone -q http://127.0.0.1:{port}/repo.git cloned > clone.txt 2>&1; echo $? > clone.rc",
        port + 1
    );
    let grant = format!("127.0.0.1:{port}");
    let out =
        run(dir.path(), &ws, confinement, &command, &["--config", config.to_str().unwrap(), "--allow-net", &grant]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&ws, "small.txt"), "hello from the origin\n", "under {confinement}");
    let unlisted = read(&ws, "unlisted.txt");
    assert!(unlisted.contains("nexo egress proxy") && unlisted.contains("localhost"), "{unlisted}");
    assert_eq!(read(&ws, "other-port.txt"), "403", "another port of a granted host");
    assert_ne!(read(&ws, "direct.rc").trim(), "0", "a direct connection: {}", read(&ws, "direct.txt"));
    assert_eq!(read(&ws, "clone.rc").trim(), "0", "git clone: {}", read(&ws, "clone.txt"));
    assert_eq!(read(&ws, "cloned/README"), "cloned through the proxy\n");
    // The origin saw the small request and git's, never the direct one or the refused ones.
    let seen = origin.hits();

    // Without the allowance, the address guard refuses the same grant.
    let out = run(
        dir.path(),
        &ws,
        confinement,
        &format!("curl -sS http://127.0.0.1:{port}/small > guarded.txt 2>&1"),
        &["--allow-net", &grant],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let guarded = read(&ws, "guarded.txt");
    assert!(guarded.contains("nexo egress proxy") && guarded.contains("127.0.0.1"), "{guarded}");
    assert_eq!(origin.hits(), seen, "a refused connection never reached the origin");

    // Without a grant: no proxy, no network.
    let out = run(
        dir.path(),
        &ws,
        confinement,
        "env > env.txt; curl -sS --max-time 5 http://127.0.0.1:1/ ; echo $? > none.rc",
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!read(&ws, "env.txt").contains("PROXY"), "{}", read(&ws, "env.txt"));
    assert_ne!(read(&ws, "none.rc").trim(), "0");
}

#[test]
fn bubblewrap_commands_reach_granted_hosts_through_the_proxy_only() {
    commands_reach_granted_hosts_through_the_proxy_only("bubblewrap");
}

#[test]
fn landlock_commands_reach_granted_hosts_through_the_proxy_only() {
    commands_reach_granted_hosts_through_the_proxy_only("landlock");
}

/// `--allow-net` is for the local sandbox: anywhere else it is refused
/// before anything runs, naming the fix.
#[test]
fn network_for_a_container_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("netter.toml");
    std::fs::write(&agent, "name = \"netter\"\ndescription = \"Fetches\"\ncapabilities = [\"shell\"]\n").unwrap();
    let out = common::nexo_command(&dir.path().join("cache"))
        .args(["run", agent.to_str().unwrap(), "go", "--sandbox", "container", "--image", "busybox"])
        .args(["--allow", "shell", "--allow-net", "example.com"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--sandbox local"), "{}", stderr(&out));
    let out = common::nexo_command(&dir.path().join("cache"))
        .args(["run", agent.to_str().unwrap(), "go", "--sandbox", "local", "--allow-net", "example.com:0"])
        .output()
        .unwrap();
    assert!(!out.status.success() && stderr(&out).contains("net-hosts"), "{}", stderr(&out));
}

fn shell(id: &str, command: &str) -> Reply {
    Reply::tool_calls(vec![MockToolCall::new(id, "shell", json!({"command": command}))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_policy_grants_hosts_its_quota_stops_a_download_and_the_audit_shows_each_connection() {
    let scene = Scene::new(None).await;
    let origin = Origin::start(scene.dir.path().join("served"));
    let port = origin.port;
    scene.configure("[sandbox]\nnet-allow-private = [\"127.0.0.1\"]\n");
    let quota = 1_000_000;
    let alice = scene.tenant(
        "alice",
        Some(json!({
            "allow": ["shell"], "mode": "auto", "sandboxes": ["local"], "models": ["test"],
            "net-hosts": [format!("127.0.0.1:{port}")],
            "quotas": {"egress-bytes-per-hour": quota},
        })),
    );
    let node = scene.node("a");
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");

    let command = format!(
        "curl -sS http://127.0.0.1:{port}/small; curl -sS http://example.com/; \
         curl -sS http://127.0.0.1:{port}/big -o big.bin; echo \"rc=$?\"; echo \"size=$(wc -c < big.bin)\""
    );
    scene.model.push(shell("c1", &command));
    scene.model.push(Reply::text("fetched what I could"));
    let body = json!({"plugin": plugin["id"], "input": "prompt fetch", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}\n{}", node.log());
    let requests = scene.model.requests();
    let result = &requests[1].raw_body;
    assert!(result.contains("hello from the origin"), "{result}");
    let size: usize = result
        .rsplit("size=")
        .next()
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {result}"));
    assert!(
        size < quota as usize && !result.contains("rc=0"),
        "the quota stopped the download: {size} bytes, {result}"
    );
    assert!(result.contains("example.com"), "an unlisted host is refused, naming it: {result}");

    let connections = scene.audit(&node, &alice, "net.connection").await;
    let shown: Vec<(String, bool)> = connections
        .iter()
        .map(|c| (format!("{}:{}", c["host"].as_str().unwrap(), c["port"]), c["allowed"].as_bool().unwrap()))
        .collect();
    let granted = format!("127.0.0.1:{port}");
    assert_eq!(
        shown,
        [(granted.clone(), true), ("example.com:80".to_string(), false), (granted, true)],
        "{connections:?}"
    );
    assert!(connections[0]["received"].as_u64().unwrap() > 20, "{connections:?}");
    let big = &connections[2];
    assert!(big["received"].as_u64().unwrap() < quota && big["reason"].as_str().unwrap().contains("egress"), "{big}");
    assert!(connections.iter().all(|c| c["run"] == run["id"]), "{connections:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_mcp_server_reaches_its_own_net_hosts_through_the_proxy_audited_as_its_own() {
    let scene = Scene::new(None).await;
    let origin = Origin::start(scene.dir.path().join("served"));
    let port = origin.port;
    let cwd = scene.dir.path().join("mcp-work");
    std::fs::create_dir_all(&cwd).unwrap();
    scene.configure(&format!(
        "[mcp.tests]\ncommand = \"{}\"\ncwd = \"{}\"\nconfine = true\nnet-hosts = [\"127.0.0.1:{port}\"]\nallow-private = \
         true\n",
        common::mcp_test_server().display(),
        cwd.display()
    ));
    // The tenant's shell gets no host: the server's grant is the operator's, for that server alone.
    let alice = scene.tenant(
        "alice",
        Some(json!({"mode": "auto", "mcp-servers": ["tests"], "mcp-allow": ["tests/fetch"], "models": ["test"]})),
    );
    let node = scene.node("a");
    let (status, plugin) = scene.upload(&node, &alice, built::MCP_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");
    let call = |url: String| json!({"plugin": plugin["id"], "input": format!("call tests fetch {}", json!({"url": url})), "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, call(format!("http://127.0.0.1:{port}/small"))).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}\n{}", node.log());
    let result = run["result"].as_str().unwrap();
    assert!(result.contains("ok HTTP/1.1 200 OK") && result.contains("hello from the origin"), "{result}");
    assert_eq!(origin.hits(), 1);
    let (_, refused) = scene.post(&node.url("/v1/runs"), &alice, call("http://example.com/".into())).await;
    assert!(refused["result"].as_str().unwrap().contains("403"), "{refused}");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let connections = loop {
        let entries = scene.audit(&node, &alice, "net.connection").await;
        if entries.len() >= 2 || std::time::Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let shown: Vec<(&str, String, bool, &serde_json::Value)> = connections
        .iter()
        .map(|c| {
            let at = format!("{}:{}", c["host"].as_str().unwrap(), c["port"]);
            (c["by"].as_str().unwrap(), at, c["allowed"].as_bool().unwrap(), &c["run"])
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("mcp:tests", format!("127.0.0.1:{port}"), true, &run["id"]),
            ("mcp:tests", "example.com:80".to_string(), false, &refused["id"])
        ],
        "{connections:?}"
    );
}

/// A tenant's `net-connections` caps what its commands hold open through
/// the proxy at once: one more is answered 503 naming the quota, and is in
/// the audit as refused; a closed one's place is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_connection_share_turns_away_one_past_it_and_gives_back_a_closed_one() {
    let scene = Scene::new(None).await;
    let origin = Origin::start(scene.dir.path().join("served"));
    let port = origin.port;
    scene.configure("[sandbox]\nnet-allow-private = [\"127.0.0.1\"]\n");
    let alice = scene.tenant(
        "alice",
        Some(json!({
            "allow": ["shell"], "mode": "auto", "sandboxes": ["local"], "models": ["test"],
            "net-hosts": [format!("127.0.0.1:{port}")],
            "quotas": {"net-connections": 1},
        })),
    );
    let node = scene.node("a");
    let (status, plugin) = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    assert_eq!(status, StatusCode::CREATED, "{plugin}");

    // fd 3 holds the tenant's one connection (the proxy waits for its head);
    // once it is closed, a retry gets through.
    let url = format!("http://127.0.0.1:{port}/small");
    let command = format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128; echo \"first=$(curl -sS {url})\"; exec 3>&-; \
         for i in $(seq 200); do out=$(curl -sSf {url}) && break; sleep 0.05; done; echo \"then=$out\"'"
    );
    scene.model.push(shell("c1", &command));
    scene.model.push(Reply::text("done"));
    let body = json!({"plugin": plugin["id"], "input": "prompt fetch", "sandbox": "local", "wait": true});
    let (status, run) = scene.post(&node.url("/v1/runs"), &alice, body).await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("done")), "{run}\n{}", node.log());
    let requests = scene.model.requests();
    let result = &requests[1].raw_body;
    assert!(
        result.contains("first=nexo egress proxy: 1 connections") && result.contains("net-connections"),
        "{result}"
    );
    assert!(result.contains("then=hello from the origin"), "{result}");
    assert_eq!(origin.hits(), 1, "the one turned away never reached the origin");

    let connections = scene.audit(&node, &alice, "net.connection").await;
    let verdicts: Vec<bool> = connections.iter().map(|c| c["allowed"].as_bool().unwrap()).collect();
    assert_eq!(verdicts, [false, true], "{connections:?}");
    assert!(connections[0]["reason"].as_str().unwrap().contains("net-connections"), "{connections:?}");
}

/// A tenant's policy that calls a tool of a confined MCP server with
/// network read-only is set, with a warning: the guard would trust a tool
/// whose server can send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_calling_a_networked_servers_tool_read_only_is_warned_of() {
    let scene = Scene::new(None).await;
    let cwd = scene.dir.path().join("mcp-work");
    std::fs::create_dir_all(&cwd).unwrap();
    scene.configure(&format!(
        "[mcp.docs]\ncommand = \"{}\"\ncwd = \"{}\"\nconfine = true\nnet-hosts = [\"docs.example\"]\n\n\
         [mcp.plain]\ncommand = \"{0}\"\ncwd = \"{1}\"\nconfine = true\n",
        common::mcp_test_server().display(),
        cwd.display()
    ));
    let policy = scene.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "mcp-servers = [\"docs\", \"plain\"]\n\n[data-flow]\nread-only-mcp = [\"docs/search\", \"plain/read\"]\n",
    )
    .unwrap();
    let out = scene.nexo(&["tenant", "create", "acme", "--policy", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning: the policy's data-flow `read-only-mcp` names `docs/search`, a tool of confined MCP servers with network"),
        "{err}"
    );
    assert!(!err.contains("`plain/read`"), "a server without network is not warned of: {err}");
}
