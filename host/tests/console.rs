//! The web console of `nexo serve`, as its users meet it: the real binary
//! on loopback with a SQLite store and a loopback model server, and a real
//! browser (Debian's chromium, driven by playwright-core from
//! tests/console/console.test.mjs).
//!
//! - over plain HTTP: an unauthenticated request goes to `/login`; the
//!   sign-in form is CSRF-protected and refuses an admin key; the session
//!   cookie's flags; cross-origin posts are refused; a second node over the
//!   same store serves a session and signs it out; disabling the tenant or
//!   revoking the key ends a session at once;
//! - in the browser: alice signs in, sees her suspended run, reads the
//!   approval's arguments, approves it and watches the page reach `done`
//!   without a reload; forms without the CSRF token are 403; bob sees none
//!   of her runs, and each of her run's routes answers him 404.
//!
//! The browser half needs node, /usr/bin/chromium and playwright-core in
//! tests/console/node_modules (`./scripts/console-deps.sh`): without them it
//! fails in CI and says it skipped elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nexo_model::mock::{MockServer, MockToolCall, Reply};
use nexo_tests as built;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use serde_json::{Value, json};

mod common;

use common::{Node, stderr, stdout};

struct Scene {
    dir: tempfile::TempDir,
    model: MockServer,
    /// Follows no redirects, keeps no cookies: each test step says what it sends.
    http: reqwest::Client,
}

impl Scene {
    async fn new() -> Scene {
        // Under the target directory: bubblewrap gives commands a private /tmp.
        let dir = tempfile::Builder::new().prefix("console-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let model = MockServer::start().await.unwrap();
        // The test's own requests come through a "proxy" on 127.0.0.1; other
        // loopback addresses are peers the server does not trust.
        let config = format!(
            "[serve]\ntrusted-proxies = [\"127.0.0.1\"]\n\n[serve.models.test]\nprovider = \"openai-compatible\"\n\
             base-url = \"{}\"\nmodel = \"test-model\"\n",
            model.openai_base_url()
        );
        std::fs::write(dir.path().join("nexo.toml"), config).unwrap();
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Scene { dir, model, http }
    }

    fn config(&self) -> String {
        self.dir.path().join("nexo.toml").display().to_string()
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("nexo.db")
    }

    fn nexo(&self, args: &[&str]) -> Output {
        let mut cmd = common::nexo_command(&self.dir.path().join("cache"));
        cmd.env("NEXO_STORE", self.store()).env("NEXO_CONFIG", self.config()).args(args).stdin(Stdio::null());
        cmd.output().expect("run nexo")
    }

    /// `nexo tenant create NAME --policy FILE`: its key.
    fn tenant(&self, name: &str, policy: &Value) -> String {
        let path = self.dir.path().join(format!("{name}-policy.json"));
        std::fs::write(&path, policy.to_string()).unwrap();
        let out = self.nexo(&["tenant", "create", name, "--policy", &path.display().to_string()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let key = stdout(&out).trim().to_string();
        assert!(key.starts_with("nexo_sk_"), "{key}");
        key
    }

    fn node(&self) -> Node {
        let mut cmd = common::nexo_command(&self.dir.path().join("cache-node"));
        cmd.env("NEXO_STORE", self.store())
            .env("OPENAI_API_KEY", "sk-console-provider-secret")
            .env("NEXO_LOG", "info")
            .args(["serve", "--listen", "127.0.0.1:0", "--config", &self.config(), "--grace-secs", "5"])
            .arg("--data-dir")
            .arg(self.data());
        Node::start(cmd)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// An API call with a bearer key.
    async fn api(
        &self,
        node: &Node,
        method: reqwest::Method,
        path: &str,
        key: &str,
        body: Value,
    ) -> (StatusCode, Value) {
        let resp = self.http.request(method, node.url(path)).bearer_auth(key).json(&body).send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn upload(&self, node: &Node, key: &str, wasm: &str) -> String {
        let bytes = std::fs::read(wasm).unwrap();
        let resp = self.http.post(node.url("/v1/plugins")).bearer_auth(key).body(bytes).send().await.unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        let body: Value = resp.json().await.unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    /// A console request with the cookies and form given; answers the
    /// status, the headers and the body.
    async fn page(
        &self,
        node: &Node,
        method: reqwest::Method,
        path: &str,
        cookies: &str,
        form: Option<&[(&str, &str)]>,
        extra: &[(&str, &str)],
    ) -> (StatusCode, HeaderMap, String) {
        self.page_from(&self.http, node, method, path, cookies, form, extra).await
    }

    /// [`Scene::page`] from `client` (one bound to another source address).
    #[allow(clippy::too_many_arguments)]
    async fn page_from(
        &self,
        client: &reqwest::Client,
        node: &Node,
        method: reqwest::Method,
        path: &str,
        cookies: &str,
        form: Option<&[(&str, &str)]>,
        extra: &[(&str, &str)],
    ) -> (StatusCode, HeaderMap, String) {
        let mut req = client.request(method, node.url(path));
        if !cookies.is_empty() {
            req = req.header("cookie", cookies);
        }
        if let Some(form) = form {
            let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", urlencode(v))).collect();
            req = req.header("content-type", "application/x-www-form-urlencoded").body(body.join("&"));
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        (status, headers, resp.text().await.unwrap())
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The value of the cookie `name` among a response's `Set-Cookie` headers,
/// with the whole header.
fn set_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<(&'a str, &'a str)> {
    headers.get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|h| {
        let value = h.split(';').next()?.strip_prefix(name)?.strip_prefix('=')?;
        Some((value, h))
    })
}

/// The value of the hidden `csrf` field in a page.
fn csrf_in(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + "name=\"csrf\" value=\"".len();
    page[at..at + 64].to_string()
}

fn location(headers: &HeaderMap) -> &str {
    headers.get(LOCATION).map(|v| v.to_str().unwrap()).unwrap_or("")
}

/// A policy that lets its runs write in their local workspace, each write
/// waiting for an approval, with the operator's `test` model.
fn writer_policy() -> Value {
    json!({"allow": ["write"], "mode": "approve", "sandboxes": ["local", "virtual"], "models": ["test"]})
}

/// Signs `key` in over plain HTTP; answers the cookie header to send, and
/// the `Set-Cookie` of the session.
async fn sign_in(scene: &Scene, node: &Node, key: &str, extra: &[(&str, &str)]) -> (String, String) {
    use reqwest::Method;
    let (status, headers, body) = scene.page(node, Method::GET, "/login", "", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (login, _) = set_cookie(&headers, "nexo_login").expect("the sign-in form's cookie");
    let token = csrf_in(&body);
    assert_eq!(login, token, "the form repeats its cookie");
    let cookies = format!("nexo_login={login}");
    let (status, headers, body) =
        scene.page(node, Method::POST, "/login", &cookies, Some(&[("csrf", &token), ("key", key)]), extra).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(location(&headers), "/runs");
    let (session, header) = set_cookie(&headers, "nexo_session").expect("a session cookie");
    (format!("nexo_session={session}"), header.to_string())
}

/// Everything a browser is not needed for.
async fn over_http(scene: &Scene, node: &Node, carol: &str, admin: &str) {
    use reqwest::Method;
    // No session: every page goes to /login (coming back afterwards); a poll is told to move the page.
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", "", None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login"));
    let (status, headers, _) = scene.page(node, Method::GET, "/runs/rnothing?x=1", "", None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?next=/runs/rnothing%3Fx%3D1"));
    let (status, headers, _) = scene.page(node, Method::GET, "/runs/live", "", None, &[("hx-request", "true")]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["hx-redirect"], "/login");
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", "nexo_session=forged", None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=expired"));

    // The sign-in page: security headers, a form token in an HttpOnly, SameSite=Strict cookie.
    let (status, headers, body) = scene.page(node, Method::GET, "/login", "", None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-security-policy"].to_str().unwrap().starts_with("default-src 'self'; frame-ancestors 'none'")
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "same-origin");
    assert_eq!(headers["cache-control"], "no-store");
    let (login, cookie) = set_cookie(&headers, "nexo_login").unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!body.contains("<script>") && !body.contains("style="), "no inline script or style");
    // The vendored assets, cached for good under names that change with their content.
    for asset in body.split("\"/assets/").skip(1).map(|s| s.split('"').next().unwrap().to_string()) {
        let (status, headers, text) = scene.page(node, Method::GET, &format!("/assets/{asset}"), "", None, &[]).await;
        assert_eq!(status, StatusCode::OK, "{asset}");
        assert_eq!(headers["cache-control"], "public, max-age=31536000, immutable");
        assert!(text.len() > 1000, "{asset}");
    }
    let cookies = format!("nexo_login={login}");
    let token = csrf_in(&body);

    // The form without its token, with another's, or posted from another site: 403, no session.
    let zeros = "0".repeat(64);
    for (form, extra) in [
        (vec![("key", carol)], vec![]),
        (vec![("csrf", zeros.as_str()), ("key", carol)], vec![]),
        (vec![("csrf", token.as_str()), ("key", carol)], vec![("origin", "http://evil.example")]),
    ] {
        let (status, headers, _) = scene.page(node, Method::POST, "/login", &cookies, Some(&form), &extra).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{form:?} {extra:?}");
        assert!(set_cookie(&headers, "nexo_session").is_none());
    }
    // An admin key is refused, saying why; so is an unknown one.
    let (status, headers, body) =
        scene.page(node, Method::POST, "/login", &cookies, Some(&[("csrf", &token), ("key", admin)]), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("admin key"), "{body}");
    assert!(set_cookie(&headers, "nexo_session").is_none());
    let (status, _, body) = scene
        .page(node, Method::POST, "/login", &cookies, Some(&[("csrf", &token), ("key", "nexo_sk_forged")]), &[])
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("not known here"), "{body}");
    assert!(!body.contains("nexo_sk_forged"), "a key is never echoed");

    // Failed sign-ins are counted per client address (here as a proxy on
    // loopback forwards them): past ten, even a good key is refused from
    // there, and another address is not.
    let from = |addr: &'static str| [("x-forwarded-for", addr)];
    let form = |key: &str| vec![("csrf".to_string(), token.clone()), ("key".to_string(), key.to_string())];
    for i in 0..10 {
        let guess = form(&format!("nexo_sk_guess{i}"));
        let guess: Vec<(&str, &str)> = guess.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (status, _, _) =
            scene.page(node, Method::POST, "/login", &cookies, Some(&guess), &from("203.0.113.9")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let good = [("csrf", token.as_str()), ("key", carol)];
    let (status, headers, body) =
        scene.page(node, Method::POST, "/login", &cookies, Some(&good), &from("203.0.113.9")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(body.contains("Too many failed sign-ins from your address: try again in 5 minutes"), "{body}");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((290..=300).contains(&wait), "{wait}");
    assert!(set_cookie(&headers, "nexo_session").is_none());
    let (status, _, _) = scene.page(node, Method::POST, "/login", &cookies, Some(&good), &from("203.0.113.10")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "another address signs in");

    // A peer that is not a trusted proxy is its own address, whatever its
    // X-Forwarded-For says: a new address in each attempt escapes nothing,
    // and writing another client's address there locks that one out of nothing.
    let bound = |ip: &str| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(Some(ip.parse().unwrap()))
            .build()
            .unwrap()
    };
    let (attacker, victim) = (bound("127.0.0.2"), bound("127.0.0.3"));
    for i in 0..10 {
        let forged = if i % 2 == 0 { "127.0.0.3".to_string() } else { format!("198.51.100.{i}") };
        let guess = [("csrf", token.as_str()), ("key", "nexo_sk_guess")];
        let (status, _, _) = scene
            .page_from(&attacker, node, Method::POST, "/login", &cookies, Some(&guess), &[("x-forwarded-for", &forged)])
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let fresh = [("x-forwarded-for", "198.51.100.200")];
    let (status, _, _) = scene.page_from(&attacker, node, Method::POST, "/login", &cookies, Some(&good), &fresh).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the attacker's own address is counted");
    let (status, _, _) = scene.page_from(&victim, node, Method::POST, "/login", &cookies, Some(&good), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "the address the attacker wrote is not locked out");

    // Signed in: the cookie's flags (Secure behind an HTTPS proxy), and no key in it.
    let (session, header) = sign_in(scene, node, carol, &[]).await;
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(header.contains(flag), "{flag} in {header}");
    }
    assert!(!header.contains("Secure") && !header.contains(carol), "{header}");
    let (_, header) = sign_in(scene, node, carol, &[("x-forwarded-proto", "https")]).await;
    assert!(header.contains("; Secure"), "{header}");
    let (status, _, body) = scene.page(node, Method::GET, "/runs", &session, None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("<span id=\"tenant\">carol</span>") && body.contains("No runs yet"), "{body}");
    let (status, _, _) = scene.page(node, Method::GET, "/runs/rnothing", &session, None, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Sessions are in the store: another node serves this one, and signing
    // out there ends it here too.
    let (shared, _) = sign_in(scene, node, carol, &[]).await;
    let other = scene.node();
    let (status, _, body) = scene.page(&other, Method::GET, "/runs", &shared, None, &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("<span id=\"tenant\">carol</span>"), "{body}");
    let token = csrf_in(&body);
    let (status, headers, _) =
        scene.page(&other, Method::POST, "/logout", &shared, Some(&[("csrf", &token)]), &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=signed-out"));
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", &shared, None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=expired"));
    drop(other);
    let (status, _, _) = scene.page(node, Method::GET, "/runs", &session, None, &[]).await;
    assert_eq!(status, StatusCode::OK, "another session of the tenant is still signed in");

    // Disabling the tenant ends its sessions at once; enabling it again does not revive them.
    assert!(scene.nexo(&["tenant", "disable", "carol"]).status.success());
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", &session, None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=disabled"));
    assert!(scene.nexo(&["tenant", "enable", "carol"]).status.success());
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", &session, None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=expired"));

    // So does revoking the key it signed in with.
    let (session, _) = sign_in(scene, node, carol, &[]).await;
    let out = scene.nexo(&["tenant", "keys", "carol"]);
    let key_id = stdout(&out).lines().next().unwrap().split('\t').next().unwrap().to_string();
    assert!(scene.nexo(&["tenant", "revoke", &key_id]).status.success());
    let (status, headers, _) = scene.page(node, Method::GET, "/runs", &session, None, &[]).await;
    assert_eq!((status, location(&headers)), (StatusCode::SEE_OTHER, "/login?why=revoked"));
}

/// What the browser half needs, or what is missing.
fn browser_needs(console: &Path) -> Result<(), String> {
    let mut missing = Vec::new();
    if Command::new("node").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        missing.push("node".to_string());
    }
    if !Path::new("/usr/bin/chromium").is_file() {
        missing.push("/usr/bin/chromium".to_string());
    }
    if !console.join("node_modules/playwright-core/package.json").is_file() {
        missing.push(format!("{}/node_modules/playwright-core", console.display()));
    }
    if missing.is_empty() { Ok(()) } else { Err(missing.join(", ")) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_signs_in_follows_a_run_and_approves_it_in_a_browser() {
    let scene = Scene::new().await;
    let alice = scene.tenant("alice", &writer_policy());
    let bob = scene.tenant("bob", &writer_policy());
    let carol = scene.tenant("carol", &writer_policy());
    let out = scene.nexo(&["tenant", "admin-key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admin = stdout(&out).trim().to_string();
    let node = scene.node();

    // Alice's run suspends at its write; the model's last answer comes late, so a
    // page open at the approval sees the run under way before it is done. Its
    // model first calls a tool with markup for a name, whose call and error
    // the run's timeline must show as text.
    let plugin = scene.upload(&node, &alice, built::WORKFLOW_PROBE).await;
    scene.model.push(Reply::tool_calls(vec![
        MockToolCall::new("c0", "<script>alert(1)</script>", json!({"x": "<script>alert(2)</script>"})),
        MockToolCall::new("c1", "write_file", json!({"path": "notes.txt", "content": "hi from alice"})),
    ]));
    scene.model.push(Reply::text("done writing").with_delay(Duration::from_secs(3)));
    let (status, run) = scene
        .api(
            &node,
            reqwest::Method::POST,
            "/v1/runs",
            &alice,
            json!({"plugin": plugin, "input": "prompt write notes", "sandbox": "local", "wait": true}),
        )
        .await;
    assert_eq!((status, &run["status"]), (StatusCode::OK, &json!("suspended")), "{run}\n{}", node.log());
    let run_id = run["id"].as_str().unwrap().to_string();
    // Bob's run has markup for its input, which the console must show as text.
    let stats = scene.upload(&node, &bob, built::TEXT_STATS).await;
    let (status, bob_run) = scene
        .api(
            &node,
            reqwest::Method::POST,
            "/v1/runs",
            &bob,
            json!({"plugin": stats, "input": "<img src=x onerror=alert(1)> words", "wait": true}),
        )
        .await;
    assert_eq!((status, &bob_run["status"]), (StatusCode::OK, &json!("done")), "{bob_run}");
    let bob_run_id = bob_run["id"].as_str().unwrap().to_string();
    // And a session of bob's, which alice must not see either.
    let (status, prompted) = scene
        .api(
            &node,
            reqwest::Method::POST,
            "/v1/sessions/prompt",
            &bob,
            json!({"plugin": stats, "instance": "bob-notes", "input": "one two three", "wait": true}),
        )
        .await;
    assert_eq!((status, &prompted["run"]["status"]), (StatusCode::OK, &json!("done")), "{prompted}");
    let bob_session = prompted["session"]["id"].as_str().unwrap().to_string();

    let started = Instant::now();
    over_http(&scene, &node, &carol, &admin).await;
    println!("console over HTTP: {:.1} s", started.elapsed().as_secs_f64());

    let console = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("tests/console");
    if let Err(missing) = browser_needs(&console) {
        assert!(
            std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true),
            "the console's browser test needs {missing}: run ./scripts/console-deps.sh (CI is set, so it may not skip)"
        );
        nexo_testkit::skipped(
            "the console's browser test",
            &format!("it needs {missing} (./scripts/console-deps.sh installs them)"),
        );
        return;
    }

    // The browser: its profile in a fresh directory here (Playwright makes it under TMPDIR).
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let tmp = scene.dir.path().join("browser-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new("node");
    cmd.arg("console.test.mjs")
        .current_dir(&console)
        .env("NEXO_CONSOLE_URL", &node.base)
        .env("NEXO_ALICE_KEY", &alice)
        .env("NEXO_BOB_KEY", &bob)
        .env("NEXO_ADMIN_KEY", &admin)
        .env("NEXO_RUN_ID", &run_id)
        .env("NEXO_BOB_RUN_ID", &bob_run_id)
        .env("NEXO_BOB_SESSION_ID", &bob_session)
        .env("NEXO_SCREENSHOTS", &shots)
        .env("NEXO_CHROMIUM", "/usr/bin/chromium")
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let child = cmd.spawn().expect("start node");
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let out = match tokio::time::timeout(Duration::from_secs(300), waited).await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("the browser test did not finish in 300 s\n{}", node.log());
        }
    };
    println!("console in the browser: {:.1} s\n{}", started.elapsed().as_secs_f64(), stdout(&out));
    assert!(
        out.status.success(),
        "the browser test failed:\n{}\n{}\nserver log:\n{}",
        stdout(&out),
        stderr(&out),
        node.log()
    );

    // What the browser did happened: the approved write is in alice's workspace.
    let tenants = std::fs::read_dir(scene.data().join("tenants")).unwrap();
    let written: Vec<String> =
        tenants.filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("workspace/notes.txt")).ok()).collect();
    assert_eq!(written, ["hi from alice"]);
    let (_, done) = scene.api(&node, reqwest::Method::GET, &format!("/v1/runs/{run_id}"), &alice, json!({})).await;
    assert_eq!(done["status"], "done", "{done}");
    // Decided in the console, audited as over the API; the sign-in is audited too, without the key.
    let (_, log) = scene.api(&node, reqwest::Method::GET, "/v1/audit", &alice, json!({})).await;
    let kinds: Vec<&str> = log["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in ["approval.decided", "console.signed_in", "console.signed_out"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    assert!(!log.to_string().contains(&alice), "the audit log holds no key");
    let decided = log["entries"].as_array().unwrap().iter().find(|e| e["kind"] == "approval.decided").unwrap();
    assert!(decided["data"].as_str().unwrap().contains("approved"), "{decided}");
    let decided: Value = serde_json::from_str(decided["data"].as_str().unwrap()).unwrap();
    assert!(decided["key"].as_str().is_some_and(|k| !k.is_empty()), "the key that signed in decided: {decided}");
    for shot in [
        "1-alice-runs",
        "2-alice-run-suspended",
        "2b-alice-approvals",
        "3-alice-run-done",
        "3c-alice-run-timeline",
        "4-alice-usage",
        "5-bob-runs",
        "5b-bob-session",
        "7-bob-404",
    ] {
        assert!(shots.join(format!("{shot}.png")).is_file(), "{shot}.png in {}", shots.display());
    }
    println!("the run's timeline, as the browser drew it: {}", shots.join("3c-alice-run-timeline.png").display());
    let log = node.log();
    assert!(!log.contains(&alice) && !log.contains(&bob) && !log.contains(&carol), "no key in the server's log");
}

/// A run's page shows the runs below it, each linking to its own page,
/// and a child's page links back to its parent; another tenant sees
/// neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_its_tree_of_child_runs() {
    use reqwest::Method;
    let scene = Scene::new().await;
    let dana = scene.tenant("dana", &writer_policy());
    let eve = scene.tenant("eve", &writer_policy());
    let node = scene.node();
    let plugin = scene.upload(&node, &dana, built::WORKFLOW_PROBE).await;
    let body = json!({"plugin": plugin, "input": "child helper time", "agents": {"helper": plugin}});
    let (status, started) = scene.api(&node, Method::POST, "/v1/runs", &dana, body).await;
    assert!(status.is_success(), "{started}\n{}", node.log());
    let id = started["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let (_, run) = scene.api(&node, Method::GET, &format!("/v1/runs/{id}"), &dana, Value::Null).await;
        if run["status"] == "done" || Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "done", "{done}\n{}", node.log());
    let child = done["children"][0]["id"].as_str().unwrap().to_string();

    let (cookies, _) = sign_in(&scene, &node, &dana, &[]).await;
    let (status, _, page) = scene.page(&node, Method::GET, &format!("/runs/{id}"), &cookies, None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let tree = page.split("id=\"run-children\"").nth(1).unwrap_or_default();
    assert!(tree.contains(&format!("href=\"/runs/{child}\"")) && tree.contains("helper"), "{page}");
    let (_, _, page) = scene.page(&node, Method::GET, &format!("/runs/{child}"), &cookies, None, &[]).await;
    assert!(page.contains(&format!("id=\"run-parent\" href=\"/runs/{id}\"")), "{page}");
    assert!(!page.contains("id=\"run-children\""), "a run with no children shows no tree");

    let (cookies, _) = sign_in(&scene, &node, &eve, &[]).await;
    for run in [&id, &child] {
        let (status, _, page) = scene.page(&node, Method::GET, &format!("/runs/{run}"), &cookies, None, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's run: {page}");
    }
}
