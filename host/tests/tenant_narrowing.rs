//! A tenant trying to widen its policy, against a real `nexo serve`: by
//! every narrowable field of a run request (an empty list, a field left
//! out, another case, an alias of the same host or tool), and by what its
//! own agent's manifest lists. Loopback hosts are stopped by the address
//! guard anyway, so the tests read the authority's decision: the tool's
//! error text and the audit log's verdict, never the network's answer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::time::{Duration, Instant};

use nexo_tests as built;
use reqwest::StatusCode;
use serde_json::{Value, json};

mod common;

use common::Node;
use common::scene::Scene;

/// Runs `plugin` with `input` and the request's own `fields`, waiting for
/// it to end: the run as the API shows it.
async fn run(scene: &Scene, node: &Node, key: &str, plugin: &str, input: &str, fields: Value) -> Value {
    let mut body = json!({"plugin": plugin, "input": input, "wait": true});
    body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    let (status, run) = scene.post(&node.url("/v1/runs"), key, body).await;
    assert_eq!(status, StatusCode::OK, "{run}\n{}", node.log());
    assert_eq!(run["status"], "done", "{run}\n{}", node.log());
    run
}

/// A request that must be refused as beyond the policy, naming `needle`.
async fn refused(scene: &Scene, node: &Node, key: &str, plugin: &str, fields: Value, needle: &str) {
    let mut body = json!({"plugin": plugin, "input": "x"});
    body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    let (status, answer) = scene.post(&node.url("/v1/runs"), key, body).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{fields}: {answer}");
    assert_eq!(answer["error"]["code"], "beyond_policy", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains(needle), "{fields} should name {needle}: {answer}");
}

/// The run's result, one line per probe.
fn lines(run: &Value) -> Vec<String> {
    run["result"].as_str().unwrap().lines().map(str::to_string).collect()
}

/// The `run.started` entry of run `id`.
async fn started(scene: &Scene, node: &Node, key: &str, id: &Value) -> Value {
    let entries = scene.audit(node, key, "run.started").await;
    entries.into_iter().find(|d| &d["run"] == id).expect("the run's run.started entry")
}

/// Run `id`'s `capability.used` entries, once there are `count` of them:
/// a pass's decisions are written as it ends, maybe just after its status.
async fn used(scene: &Scene, node: &Node, key: &str, id: &Value, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let entries: Vec<Value> =
            scene.audit(node, key, "capability.used").await.into_iter().filter(|d| &d["run"] == id).collect();
        if entries.len() >= count {
            return entries;
        }
        assert!(Instant::now() < deadline, "run {id} has {} decisions audited: {entries:?}", entries.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The verdicts the audit log holds for run `id`'s three fetches, in order.
async fn fetch_verdicts(scene: &Scene, node: &Node, key: &str, id: &Value) -> Vec<String> {
    used(scene, node, key, id, 3)
        .await
        .into_iter()
        .filter(|d| d["capability"] == "fetch")
        .map(|d| d["verdict"].as_str().unwrap().to_string())
        .collect()
}

/// The probe's three fetches: two loopback names of the manifest's list,
/// and one public host it lists too.
const FETCHES: &str = "fetch http://localhost:9/\nfetch http://127.0.0.1:9/\nfetch http://news.example/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_hosts_never_widen_by_an_empty_list_a_case_or_an_alias() {
    let scene = Scene::new(None).await;
    // The agent (web-probe) lists news.example, localhost and 127.0.0.1.
    let web = scene
        .tenant("web", Some(json!({"allow": ["fetch"], "mode": "auto", "fetch-hosts": ["localhost", "127.0.0.1"]})));
    // No fetch-hosts in the policy: no host at all.
    let bare = scene.tenant("bare", Some(json!({"allow": ["fetch"], "mode": "auto"})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &web, built::WEB_PROBE).await;
    let sha = plugin["id"].as_str().unwrap().to_string();
    scene.upload(&node, &bare, built::WEB_PROBE).await;

    // (request, each fetch's outcome, the hosts run.started records)
    let security = "security:";
    let denied = "denied:";
    let cases = [
        // An empty list is no host: not "the agent's list decides".
        (json!({"fetch-hosts": []}), [denied, denied, denied], json!([])),
        // Left out: the policy's, as the manifest narrows it.
        (json!({}), [security, security, denied], json!(["localhost", "127.0.0.1"])),
        // Another case and a trailing dot: the same host, no other.
        (json!({"fetch-hosts": ["LOCALHOST."]}), [security, denied, denied], json!(["localhost"])),
        // 127.0.0.1 written as one number: the same address, no other.
        (json!({"fetch-hosts": ["2130706433"]}), [denied, security, denied], json!(["127.0.0.1"])),
    ];
    for (fields, want, hosts) in cases {
        let done = run(&scene, &node, &web, &sha, FETCHES, fields.clone()).await;
        let got = lines(&done);
        assert_eq!(got.len(), 3, "{done}");
        for ((line, want), host) in got.iter().zip(want).zip(["localhost", "127.0.0.1", "news.example"]) {
            assert!(line.starts_with(want), "{fields}: fetching {host} should be `{want}`: {line}");
            if want == denied {
                assert!(line.contains("not allowed") || line.contains("narrowed"), "{fields}: {line}");
            }
        }
        // The audit holds each fetch's final verdict, the host list's and the address guard's refusals too.
        let verdicts = fetch_verdicts(&scene, &node, &web, &done["id"]).await;
        let expected: Vec<&str> = want.iter().map(|w| w.trim_end_matches(':')).collect();
        assert_eq!(verdicts, expected, "{fields}");
        let entry = started(&scene, &node, &web, &done["id"]).await;
        assert_eq!(entry["fetch_hosts"], hosts, "{fields}: {entry}");
    }

    // The same fields, asking for more than the policy: refused, naming the host.
    for (fields, needle) in [
        (json!({"fetch-hosts": ["news.example"]}), "news.example"),
        (json!({"fetch-hosts": ["localhost", "sub.news.example"]}), "sub.news.example"),
        (json!({"fetch-hosts": ["0x7f.0.0.2"]}), "127.0.0.2"),
        (json!({"fetch-hosts": ["localhost:80"]}), "port"),
    ] {
        refused(&scene, &node, &web, &sha, fields, needle).await;
    }
    // A session's prompt narrows the same way: an empty list is no host.
    let body = json!({"plugin": sha, "instance": "s1", "input": FETCHES, "fetch-hosts": [], "wait": true});
    let (status, prompted) = scene.post(&node.url("/v1/sessions/prompt"), &web, body).await;
    assert_eq!(status, StatusCode::OK, "{prompted}");
    assert!(lines(&prompted["run"]).iter().all(|l| l.starts_with(denied)), "{prompted}");
    let body = json!({"plugin": sha, "instance": "s1", "input": "x", "mcp-allow": ["echo"]});
    let (status, answer) = scene.post(&node.url("/v1/sessions/prompt"), &web, body).await;
    assert_eq!((status, &answer["error"]["code"]), (StatusCode::FORBIDDEN, &json!("beyond_policy")), "{answer}");

    // Not even the policy's host written another way passes the bare tenant's empty list.
    refused(&scene, &node, &bare, &sha, json!({"fetch-hosts": ["localhost"]}), "localhost").await;
    let done = run(&scene, &node, &bare, &sha, FETCHES, json!({})).await;
    assert!(lines(&done).iter().all(|l| l.starts_with(denied)), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_and_tools_never_widen() {
    let scene = Scene::new(None).await;
    scene.configure(&format!("[mcp.tests]\ncommand = \"{}\"\n", common::mcp_test_server().display()));
    // The agent (mcp-probe) asks for the servers `tests` and `everything`,
    // and lists `echo`, `tests/image` and `tests/fetch` in its own mcp-allow.
    let quiet = scene.tenant("quiet", Some(json!({"mcp-servers": ["tests"], "models": ["test"]})));
    let echo =
        scene.tenant("echo", Some(json!({"mcp-servers": ["tests"], "mcp-allow": ["tests/echo"], "models": ["test"]})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &quiet, built::MCP_PROBE).await;
    let sha = plugin["id"].as_str().unwrap().to_string();
    scene.upload(&node, &echo, built::MCP_PROBE).await;
    let call = "call tests echo {\"text\":\"hi\"}";

    // A policy without mcp-allow (an empty list) lets no tool pass unasked:
    // a read-only run may call none, though the agent lists `echo`.
    let done = run(&scene, &node, &quiet, &sha, call, json!({})).await;
    let line = &lines(&done)[0];
    assert!(line.starts_with("call tests/echo: denied:") && line.contains("mcp-allow"), "{line}");
    let decided = used(&scene, &node, &quiet, &done["id"], 1).await;
    let verdicts: Vec<(&Value, &Value)> =
        decided.iter().filter(|d| d["server_tool"] == "echo").map(|d| (&d["server"], &d["verdict"])).collect();
    assert_eq!(verdicts, [(&json!("tests"), &json!("denied"))], "{decided:?}");
    let entry = started(&scene, &node, &quiet, &done["id"]).await;
    assert_eq!((&entry["mcp_servers"], &entry["mcp_tools"]), (&json!(["tests"]), &json!([])), "{entry}");

    // Nor is the model offered any of its tools.
    scene.model.push(nexo_model::mock::Reply::text("no tools"));
    let done = run(&scene, &node, &quiet, &sha, "prompt use echo", json!({})).await;
    assert!(lines(&done)[0].starts_with("prompt: ok"), "{done}");
    let asked = scene.model.requests().last().unwrap().body.clone();
    let tools = asked["tools"].as_array().cloned().unwrap_or_default();
    assert!(!tools.iter().any(|t| t.to_string().contains("mcp__")), "{tools:?}");

    // The policy's `tests/echo`, the agent's `echo`: their intersection passes.
    let done = run(&scene, &node, &echo, &sha, call, json!({})).await;
    assert_eq!(lines(&done)[0], "call tests/echo: ok hi", "{done}");
    let entry = started(&scene, &node, &echo, &done["id"]).await;
    assert_eq!(entry["mcp_tools"], json!(["tests/echo"]), "{entry}");
    // An empty list in the request: no tool, no server.
    let done = run(&scene, &node, &echo, &sha, call, json!({"mcp-allow": []})).await;
    assert!(lines(&done)[0].starts_with("call tests/echo: denied:"), "{done}");
    let done = run(&scene, &node, &echo, &sha, &format!("list tests\n{call}"), json!({"mcp-servers": []})).await;
    assert!(lines(&done).iter().all(|l| l.contains(": denied:")), "{done}");

    // Asking for more, another case, or a name that covers every server: refused.
    for (fields, needle) in [
        (json!({"mcp-allow": ["echo"]}), "`echo`"),
        (json!({"mcp-allow": ["TESTS/echo"]}), "`TESTS/echo`"),
        (json!({"mcp-allow": ["tests/fail"]}), "`tests/fail`"),
        (json!({"mcp-servers": ["everything"]}), "`everything`"),
        (json!({"mcp-servers": ["Tests"]}), "`Tests`"),
        (json!({"allow": ["write"]}), "`write`"),
        (json!({"mode": "auto"}), "less strict"),
        (json!({"sandbox": "local"}), "`local`"),
        (json!({"model": "TEST"}), "`TEST`"),
    ] {
        refused(&scene, &node, &echo, &sha, fields, needle).await;
    }
}

/// An operator's narrowing reaches the runs that wait: a run suspended
/// under a wider policy is approved after the policy lost its host, and
/// the approved fetch is refused by the policy as it is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_narrowed_policy_binds_the_runs_that_wait() {
    let scene = Scene::new(None).await;
    let web = scene.tenant("web", Some(json!({"allow": ["fetch"], "mode": "approve", "fetch-hosts": ["localhost"]})));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &web, built::WEB_PROBE).await;
    let sha = plugin["id"].as_str().unwrap().to_string();
    let body = json!({"plugin": sha, "input": "fetch http://localhost:9/", "wait": true});
    let (status, first) = scene.post(&node.url("/v1/runs"), &web, body).await;
    assert_eq!((status, &first["status"]), (StatusCode::OK, &json!("suspended")), "{first}\n{}", node.log());
    let id = first["id"].as_str().unwrap().to_string();

    // The operator takes the host away while the run waits.
    let path = scene.dir.path().join("narrowed-policy.json");
    std::fs::write(&path, json!({"allow": ["fetch"], "mode": "approve"}).to_string()).unwrap();
    let out = scene.nexo(&["tenant", "policy", "web", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let decision = json!({"seq": first["approval"]["seq"], "args-hash": first["approval"]["args_hash"]});
    let (status, answer) = scene.post(&node.url(&format!("/v1/runs/{id}/approve")), &web, decision).await;
    assert!(status.is_success(), "{answer}\n{}", node.log());
    let done = scene.finish(&node, &web, &id).await;
    let line = &lines(&done)[0];
    // Refused by the host list (the policy's), not reached and stopped by the address guard.
    assert!(line.starts_with("denied:") && line.contains("not on the allow-list"), "{line}\n{done}");
}

/// The policy's `mcp-allow` bounds every mode: under `auto` and `approve`
/// a tool outside it is neither offered nor callable (`[]` is no tool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_allow_is_a_ceiling_in_every_mode() {
    let scene = Scene::new(None).await;
    scene.configure(&format!("[mcp.tests]\ncommand = \"{}\"\n", common::mcp_test_server().display()));
    let auto = scene.tenant("auto", Some(json!({"mode": "auto", "mcp-servers": ["tests"], "models": ["test"]})));
    let approve = scene.tenant(
        "approve",
        Some(json!({"mode": "approve", "mcp-servers": ["tests"], "mcp-allow": ["tests/echo"], "models": ["test"]})),
    );
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &auto, built::MCP_PROBE).await;
    let sha = plugin["id"].as_str().unwrap().to_string();
    scene.upload(&node, &approve, built::MCP_PROBE).await;
    let call = "call tests echo {\"text\":\"hi\"}";

    // Auto, with no tool in the policy: the call is denied, not let through.
    let done = run(&scene, &node, &auto, &sha, call, json!({})).await;
    let line = &lines(&done)[0];
    assert!(line.starts_with("call tests/echo: denied:") && line.contains("mcp-allow"), "{line}");
    // Nor is the model offered the tool.
    scene.model.push(nexo_model::mock::Reply::text("no tools"));
    let done = run(&scene, &node, &auto, &sha, "prompt use echo", json!({})).await;
    assert!(lines(&done)[0].starts_with("prompt: ok"), "{done}");
    let tools = scene.model.requests().last().unwrap().body["tools"].as_array().cloned().unwrap_or_default();
    assert!(!tools.iter().any(|t| t.to_string().contains("mcp__")), "{tools:?}");

    // Approve, with `tests/echo` only: another tool is denied, not put to an approval.
    let body = json!({"plugin": sha, "input": "call tests write {\"path\":\"x.txt\",\"text\":\"hi\"}", "wait": true});
    let (status, other) = scene.post(&node.url("/v1/runs"), &approve, body).await;
    assert_eq!((status, &other["status"]), (StatusCode::OK, &json!("done")), "{other}\n{}", node.log());
    assert!(lines(&other)[0].contains(": denied:") && lines(&other)[0].contains("mcp-allow"), "{other}");
    // The listed tool passes.
    let done = run(&scene, &node, &approve, &sha, call, json!({})).await;
    assert_eq!(lines(&done)[0], "call tests/echo: ok hi", "{done}");
}

/// A tenant's `data-flow` policy, on the guest's own calls: once an MCP
/// tool the policy marks untrusted has answered, a tool that can send data
/// out is refused with the guard's reason, and the audit log names the
/// guard; the same tool, marked read-only, sends nothing and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_data_flow_policy_refuses_a_send_after_untrusted_content() {
    let scene = Scene::new(None).await;
    scene.configure(&format!("[mcp.tests]\ncommand = \"{}\"\n", common::mcp_test_server().display()));
    let policy = |read_only: Value| {
        json!({"mcp-servers": ["tests"], "mcp-allow": ["tests/echo"], "models": ["test"],
               "data-flow": {"untrusted": "refuse", "untrusted-mcp": ["tests"], "read-only-mcp": read_only}})
    };
    let guarded = scene.tenant("guarded", Some(policy(json!([]))));
    let reader = scene.tenant("reader", Some(policy(json!(["tests/echo"]))));
    let node = scene.node("a");
    let (_, plugin) = scene.upload(&node, &guarded, built::MCP_PROBE).await;
    let sha = plugin["id"].as_str().unwrap().to_string();
    scene.upload(&node, &reader, built::MCP_PROBE).await;
    let calls = "call tests echo {\"text\":\"first\"}\ncall tests echo {\"text\":\"second\"}";

    let done = run(&scene, &node, &guarded, &sha, calls, json!({})).await;
    let result = lines(&done);
    assert_eq!(result[0], "call tests/echo: ok first", "{done}");
    assert!(
        result[1].starts_with("call tests/echo: denied:")
            && result[1].contains("refused by the data-flow guard")
            && result[1].contains("untrusted content (from the MCP tool `tests/echo`)"),
        "{done}"
    );
    let decided = used(&scene, &node, &guarded, &done["id"], 2).await;
    let verdicts: Vec<(&Value, &Value)> = decided.iter().map(|d| (&d["verdict"], &d["guard"])).collect();
    assert_eq!(verdicts, [(&json!("allowed"), &Value::Null), (&json!("denied"), &json!("data-flow"))], "{decided:?}");

    let done = run(&scene, &node, &reader, &sha, calls, json!({})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok first", "call tests/echo: ok second"], "{done}");

    // A hook that replaces the untrusted result with text cannot wash its
    // label off: the model reads the text, and the guard still refuses.
    let (_, hook) = scene.upload(&node, &guarded, built::HOUSE_RULES).await;
    let calls = "call tests echo {\"text\":\"CONFIDENTIAL first\"}\ncall tests echo {\"text\":\"second\"}";
    let done = run(&scene, &node, &guarded, &sha, calls, json!({"hooks": [hook["id"]]})).await;
    let result = lines(&done);
    assert!(result[0].starts_with("call tests/echo: failed: a hook replaced the result: withheld"), "{done}");
    assert!(result[1].contains("refused by the data-flow guard"), "{done}");
}

/// A tenant's policy names the operator's hooks: its runs' calls are asked
/// about (here a result is redacted, and a broken hook refuses the call),
/// and a request cannot take a hook away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_policy_hooks_its_runs_and_a_request_cannot_remove_them() {
    let scene = Scene::new(None).await;
    scene.configure(&format!(
        "[mcp.tests]\ncommand = \"{}\"\n\n[serve.hooks]\nhouse-rules = {:?}\nbroken = {:?}\n",
        common::mcp_test_server().display(),
        built::HOUSE_RULES,
        built::HOOK_TRAP
    ));
    let policy = |hooks: Value| json!({"mcp-servers": ["tests"], "mcp-allow": ["tests/echo"], "models": ["test"], "hooks": hooks});
    let hooked = scene.tenant("hooked", Some(policy(json!(["house-rules"]))));
    let broken = scene.tenant("broken", Some(policy(json!(["broken"]))));
    let open = scene.tenant("open", Some(policy(json!([]))));
    let node = scene.node("a");
    let mut plugins = Vec::new();
    for key in [&hooked, &broken, &open] {
        let (_, plugin) = scene.upload(&node, key, built::MCP_PROBE).await;
        plugins.push(plugin["id"].as_str().unwrap().to_string());
    }
    let call = "call tests echo {\"text\":\"token sk-tenant-secret-77\"}";

    let done = run(&scene, &node, &hooked, &plugins[0], call, json!({})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok token [redacted]"], "{done}");
    let done = run(&scene, &node, &open, &plugins[2], call, json!({})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok token sk-tenant-secret-77"], "{done}");
    let done = run(&scene, &node, &broken, &plugins[1], call, json!({})).await;
    let result = lines(&done);
    assert!(
        result[0].starts_with("call tests/echo: denied:") && result[0].contains("the hook `hook-trap` failed"),
        "{done}"
    );
    let decided = used(&scene, &node, &broken, &done["id"], 1).await;
    assert_eq!((&decided[0]["verdict"], &decided[0]["guard"]), (&json!("denied"), &json!("hook")), "{decided:?}");

    // A request's own (empty) list of hooks adds nothing and removes none.
    let done = run(&scene, &node, &hooked, &plugins[0], call, json!({"hooks": []})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok token [redacted]"], "{done}");
    // A policy that names a hook the operator does not configure is refused.
    let path = scene.dir.path().join("bad-policy.json");
    std::fs::write(&path, policy(json!(["nowhere"])).to_string()).unwrap();
    let out = scene.nexo(&["tenant", "create", "bad", "--policy", &path.display().to_string()]);
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("the hook `nowhere` is not one of the operator's"),
        "{}",
        common::stderr(&out)
    );
}

/// A tenant's own hook: uploaded as a plugin and named by a run request,
/// it is asked besides its policy's (it only narrows) and named in events
/// as the tenant's; a request naming what is not one of the tenant's hooks
/// is refused before anything is queued; and the hook goes with its run to
/// another node, which loads it from its own copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_own_hook_narrows_its_run_and_goes_with_it_to_another_node() {
    use nexo_model::mock::{MockToolCall, Reply};
    let scene = Scene::new(None).await;
    scene.configure(&format!(
        "[mcp.tests]\ncommand = \"{}\"\n\n[serve.models.cli]\nloop = \"claude-code\"\nmodel = \"sonnet\"\n",
        common::mcp_test_server().display()
    ));
    let policy = json!({"allow": ["write"], "mode": "approve", "mcp-servers": ["tests"],
                        "mcp-allow": ["tests/echo"], "models": ["test", "cli"]});
    let own = scene.tenant("own", Some(policy.clone()));
    let other = scene.tenant("other", Some(policy));
    let a = scene.node("a");
    let (_, agent) = scene.upload(&a, &own, built::MCP_PROBE).await;
    let agent = agent["id"].as_str().unwrap().to_string();
    let (status, hook) = scene.upload(&a, &own, built::HOUSE_RULES).await;
    assert_eq!(status, StatusCode::CREATED, "{hook}");
    assert_eq!((&hook["name"], &hook["requested"]), (&json!("house-rules"), &json!([])), "{hook}");
    let hook = hook["id"].as_str().unwrap().to_string();
    let call = "call tests echo {\"text\":\"token sk-tenant-secret-77\"}";

    let done = run(&scene, &a, &own, &agent, call, json!({"hooks": [hook]})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok token [redacted]"], "{done}");
    let events = scene.events(&a, &own, done["id"].as_str().unwrap(), None).await;
    let named: Vec<&Value> = events.iter().map(|(_, _, e)| &e["data"]).filter(|d| d["hook"].is_string()).collect();
    assert!(!named.is_empty() && named.iter().all(|d| d["hook"] == "tenant/house-rules"), "{events:?}");
    let done = run(&scene, &a, &own, &agent, call, json!({})).await;
    assert_eq!(lines(&done), ["call tests/echo: ok token sk-tenant-secret-77"], "{done}");
    // A refusal of its, in the audit log: whose hook refused.
    let trap = "call tests echo {\"text\":\"HOOK-TRAP\"}";
    let done = run(&scene, &a, &own, &agent, trap, json!({"hooks": [hook]})).await;
    assert!(lines(&done)[0].contains("the hook `tenant/house-rules` failed"), "{done}");
    let decided = used(&scene, &a, &own, &done["id"], 1).await;
    assert_eq!((&decided[0]["guard"], &decided[0]["hooks"]), (&json!("hook"), &json!(["tenant/house-rules"])));

    // Not a hook, given twice, no plugin, too many: refused, nothing queued.
    let nowhere = "0".repeat(64);
    for (hooks, status, code) in [
        (json!([agent]), StatusCode::UNPROCESSABLE_ENTITY, "not_a_hook"),
        (json!([hook, hook]), StatusCode::UNPROCESSABLE_ENTITY, "invalid_hooks"),
        (json!([nowhere]), StatusCode::NOT_FOUND, "not_found"),
        (json!(vec![hook.clone(); 5]), StatusCode::UNPROCESSABLE_ENTITY, "too_many_hooks"),
    ] {
        let body = json!({"plugin": agent, "input": call, "hooks": hooks});
        let (got, answer) = scene.post(&a.url("/v1/runs"), &own, body).await;
        assert_eq!((got, &answer["error"]["code"]), (status, &json!(code)), "{hooks}: {answer}");
    }
    // Hooks need nexo's own loop: a model that runs the Claude Code CLI's is refused up front.
    let body = json!({"plugin": agent, "input": call, "model": "cli", "hooks": [hook]});
    let (got, answer) = scene.post(&a.url("/v1/runs"), &own, body).await;
    let code = &answer["error"]["code"];
    assert_eq!((got, code), (StatusCode::UNPROCESSABLE_ENTITY, &json!("hooks_need_own_loop")), "{answer}");
    // A hook is not run as an agent, and a plugin of another world is not taken.
    for body in
        [json!({"plugin": hook, "input": call}), json!({"plugin": agent, "input": call, "agents": {"helper": hook}})]
    {
        let (got, answer) = scene.post(&a.url("/v1/runs"), &own, body).await;
        let code = &answer["error"]["code"];
        assert_eq!((got, code), (StatusCode::UNPROCESSABLE_ENTITY, &json!("not_an_agent")), "{answer}");
    }
    let (got, answer) = scene.upload(&a, &own, built::SEARXNG).await;
    assert_eq!((got, &answer["error"]["code"]), (StatusCode::UNPROCESSABLE_ENTITY, &json!("not_an_agent")), "{answer}");
    // Another tenant cannot name it: its id names no plugin of theirs.
    scene.upload(&a, &other, built::MCP_PROBE).await;
    let body = json!({"plugin": agent, "input": call, "hooks": [hook]});
    let (got, answer) = scene.post(&a.url("/v1/runs"), &other, body).await;
    assert_eq!((got, &answer["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_found")), "{answer}");
    let (_, runs) = scene.get(&a.url("/v1/runs"), &other).await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");

    // The run waits for its write on node a, and goes on on node b: its
    // hook redacts the token from the prompt b's pass sends.
    let secret = "sk-tenant-secret-77";
    let write = json!({"path": "notes.txt", "content": format!("token {secret}")});
    scene.model.push(Reply::tool_calls(vec![MockToolCall::new("c1", "write_file", write)]));
    scene.model.push(Reply::text("written"));
    let body = json!({"plugin": agent, "input": "prompt note the token", "hooks": [hook], "wait": true});
    let (status, first) = scene.post(&a.url("/v1/runs"), &own, body).await;
    assert_eq!((status, &first["status"]), (StatusCode::OK, &json!("suspended")), "{first}\n{}", a.log());
    let id = first["id"].as_str().unwrap().to_string();
    drop(a);
    // Nodes share no disk: b cannot load a's copy.
    std::fs::remove_file(scene.data("a").join("plugins").join(format!("{hook}.wasm"))).unwrap();
    let b = scene.node("b");
    let copy = scene.data("b").join("plugins").join(format!("{hook}.wasm"));
    assert!(!copy.exists(), "node b has no copy of the hook yet");
    let decision = json!({"seq": first["approval"]["seq"], "args-hash": first["approval"]["args_hash"]});
    let (status, answer) = scene.post(&b.url(&format!("/v1/runs/{id}/approve")), &own, decision).await;
    assert!(status.is_success(), "{answer}\n{}", b.log());
    let done = scene.finish(&b, &own, &id).await;
    assert_eq!(done["status"], "done", "{done}\n{}", b.log());
    assert!(copy.is_file(), "node b loaded the hook from its own copy");
    let last = scene.model.requests().last().unwrap().body.to_string();
    assert!(!last.contains(secret) && last.contains("[redacted]"), "{last}");
}
