//! Plugins from an OCI registry: a real registry on loopback (Debian's
//! docker-registry, scripts/registry.sh), the `nexo` binary, wkg on the
//! other side, and real components. Each test pushes a component made
//! unique by a custom section, so the registry's shared blob store holds
//! nothing another test reads.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nexo_model::mock::{MockServer, Reply};
use nexo_tests as built;
use serde_json::Value;
use sha2::{Digest, Sha256};

mod common;

use common::{stderr, stdout};

struct Scene {
    dir: tempfile::TempDir,
    registry: String,
    repo: String,
}

impl Scene {
    /// A scene on the tests' registry (`auth`: the one with a password), or
    /// `None` when it is missing (the test is then skipped).
    fn new(test: &str, auth: bool) -> Option<(Scene, Option<String>)> {
        let (registry, password) = nexo_testkit::registry::registry(test, auth)?;
        // Under the target directory: bubblewrap gives commands a private /tmp.
        let dir = tempfile::Builder::new().prefix("registry-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir_all(dir.path().join("docker")).unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let unique = dir.path().file_name().unwrap().to_string_lossy().to_lowercase().replace(['_', '.'], "-");
        let repo = format!("{registry}/nexo-test/{test}-{}", unique.trim_start_matches("registry-"));
        Some((Scene { dir, registry, repo }, password))
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The cached components.
    fn blobs(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.cache().join("registry/blobs/sha256")) {
            Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// `nexo` with its own caches and store, an empty Docker config and no
    /// proxy for the loopback registry.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::nexo_command(&self.cache());
        cmd.env("NEXO_STORE", self.dir.path().join("nexo.db"))
            .env("DOCKER_CONFIG", self.dir.path().join("docker"))
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("NEXO_REGISTRY_USERNAME")
            .env_remove("NEXO_REGISTRY_PASSWORD")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn nexo(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nexo")
    }

    /// A copy of `wasm` with a custom section naming `label`: the same
    /// component, with a digest of its own.
    fn unique(&self, wasm: &str, label: &str) -> PathBuf {
        let mut bytes = std::fs::read(wasm).unwrap();
        let name = format!("nexo-test-{label}-{}", self.repo);
        let mut payload = leb(name.len());
        payload.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend(leb(payload.len()));
        bytes.extend(payload);
        let path = self.dir.path().join(format!("{label}.wasm"));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// `wkg oci ARGS`, with the scene's Docker config and no proxy.
    fn wkg(&self, wkg: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(wkg);
        cmd.arg("oci").args(args).env("DOCKER_CONFIG", self.dir.path().join("docker")).env("NO_PROXY", "127.0.0.1");
        cmd.output().unwrap()
    }

    /// `nexo push`, which must succeed; the manifest digest it printed.
    fn push(&self, file: &Path, reference: &str) -> String {
        let out = self.nexo(&["push", file.to_str().unwrap(), reference, "--insecure-registry", &self.registry]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    }
}

fn leb(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn sha256_file(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn a_component_nexo_pushes_is_pulled_by_wkg_byte_for_byte() {
    let test = "a_component_nexo_pushes_is_pulled_by_wkg_byte_for_byte";
    let Some((scene, _)) = Scene::new("nexo-to-wkg", false) else { return };
    let Some(wkg) = nexo_testkit::registry::wkg(test) else { return };
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    let reference = format!("{}:1", scene.repo);
    let digest = scene.push(&wasm, &reference);
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    // The same bytes give the same manifest: the config's time is fixed.
    assert_eq!(scene.push(&wasm, &format!("{}:2", scene.repo)), digest);
    let pulled = scene.dir.path().join("by-wkg.wasm");
    let out = scene.wkg(&wkg, &["pull", "--insecure", &scene.registry, &reference, "-o", pulled.to_str().unwrap()]);
    assert!(out.status.success(), "wkg: {}", stderr(&out));
    assert_eq!(std::fs::read(&pulled).unwrap(), std::fs::read(&wasm).unwrap());
}

#[test]
fn a_component_wkg_pushes_is_pulled_and_run_by_nexo() {
    let test = "a_component_wkg_pushes_is_pulled_and_run_by_nexo";
    let Some((scene, _)) = Scene::new("wkg-to-nexo", false) else { return };
    let Some(wkg) = nexo_testkit::registry::wkg(test) else { return };
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    let reference = format!("{}:1.0.0", scene.repo);
    let out = scene.wkg(&wkg, &["push", "--insecure", &scene.registry, &reference, wasm.to_str().unwrap()]);
    assert!(out.status.success(), "wkg: {}", stderr(&out));
    let out = scene.nexo(&["run", &reference, "one two three", "--ephemeral", "--insecure-registry", &scene.registry]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("words: 3"), "{}", stdout(&out));
    assert!(stderr(&out).contains(&format!("pulled {reference}")), "{}", stderr(&out));
    // It ran the cached component, kept under its own digest.
    let blobs = scene.blobs();
    assert_eq!(blobs.len(), 1, "{blobs:?}");
    assert_eq!(blobs[0].file_name().unwrap().to_string_lossy(), sha256_file(&wasm));
    // A second run needs no download.
    let out = scene.nexo(&["run", &reference, "four five", "--ephemeral", "--insecure-registry", &scene.registry]);
    assert!(stdout(&out).contains("words: 2") && !stderr(&out).contains("pulled"), "{}", stderr(&out));
}

#[test]
fn a_tampered_layer_is_refused_and_nothing_is_cached() {
    let Some((scene, _)) = Scene::new("tampered", false) else { return };
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    let reference = format!("{}:1", scene.repo);
    scene.push(&wasm, &reference);
    // The registry serves a blob edited on its disk under its old digest.
    let hex = sha256_file(&wasm);
    let data = nexo_testkit::registry::storage(false)
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(&hex)
        .join("data");
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();
    let out = scene.nexo(&["pull", &reference, "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("does not match its digest") && err.contains(&hex), "{err}");
    assert!(err.contains("nothing was cached") && err.contains("push the component again"), "{err}");
    assert!(scene.blobs().is_empty(), "{:?}", scene.blobs());
    let out = scene.nexo(&["run", &reference, "x", "--ephemeral", "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "a run refuses it too: {}", stderr(&out));
    assert!(scene.blobs().is_empty());
}

#[test]
fn a_digest_that_is_not_the_components_is_refused() {
    let Some((scene, _)) = Scene::new("wrong-digest", false) else { return };
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    scene.push(&wasm, &format!("{}:1", scene.repo));
    // A digest of something else.
    let elsewhere = hex::encode(Sha256::digest(format!("not a manifest of {}", scene.repo)));
    let reference = format!("{}@sha256:{elsewhere}", scene.repo);
    let out = scene.nexo(&["pull", &reference, "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("is not in the registry") && err.contains("check the repository and the tag or digest"),
        "{err}"
    );
    assert!(scene.blobs().is_empty());
}

#[test]
fn credentials_come_from_the_docker_config_and_anonymous_is_refused() {
    let Some((scene, password)) = Scene::new("auth", true) else { return };
    let password = password.unwrap();
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    let reference = format!("{}:1", scene.repo);
    let out = scene.nexo(&["push", wasm.to_str().unwrap(), &reference, "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("refused access") && err.contains("anonymously") && err.contains("docker login"), "{err}");
    let auth = base64(&format!("nexo:{password}"));
    let config = serde_json::json!({ "auths": { scene.registry.clone(): { "auth": auth } } });
    std::fs::write(scene.dir.path().join("docker/config.json"), config.to_string()).unwrap();
    let digest = scene.push(&wasm, &reference);
    let out = scene.nexo(&["pull", &reference, "--insecure-registry", &scene.registry, "-v"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().next(), Some(digest.as_str()));
    assert!(!stderr(&out).contains(&password), "the password stays out of the log");
    // A wrong password is refused by name.
    let config = serde_json::json!({ "auths": { scene.registry.clone(): { "auth": base64("nexo:wrong") } } });
    std::fs::write(scene.dir.path().join("docker/config.json"), config.to_string()).unwrap();
    std::fs::remove_dir_all(scene.cache()).unwrap();
    let out = scene.nexo(&["pull", &reference, "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("refused access") && stderr(&out).contains("as nexo"), "{}", stderr(&out));
}

fn base64(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn plain_http_is_refused_for_a_registry_not_marked_insecure() {
    let Some((scene, _)) = Scene::new("https-only", false) else { return };
    let wasm = scene.unique(built::TEXT_STATS, "stats");
    let reference = format!("{}:1", scene.repo);
    scene.push(&wasm, &reference);
    let out = scene.nexo(&["pull", &reference]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("over https") && err.contains(&format!("--insecure-registry {}", scene.registry)), "{err}");
    assert!(scene.blobs().is_empty());
    // The config file's list works as the flag does.
    let config = scene.dir.path().join("nexo.toml");
    std::fs::write(&config, format!("[registries]\ninsecure = [\"{}\"]\n", scene.registry)).unwrap();
    let out = scene.nexo(&["pull", &reference, "--config", config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_runs_the_recorded_digest_after_the_tag_moved() {
    let Some((scene, _)) = Scene::new("resume", false) else { return };
    let server = MockServer::start().await.unwrap();
    server.push(Reply::text("Revenue grew."));
    let first = scene.unique(built::DOCUMENT_APPROVAL, "approval");
    let reference = format!("{}:1", scene.repo);
    scene.push(&first, &reference);
    let ws = scene.dir.path().join("ws");
    let base_url = server.openai_base_url();
    let run = [
        "run",
        &reference,
        "Q3 report",
        "--provider",
        "openai-compatible",
        "--base-url",
        &base_url,
        "--model",
        "test-model",
        "--sandbox",
        "local",
        "--cwd",
        ws.to_str().unwrap(),
        "--allow",
        "write",
        "--mode",
        "auto",
        "--json",
        "--insecure-registry",
        &scene.registry,
    ];
    let out = scene.command(&run).env("OPENAI_API_KEY", "sk-registry-test").output().unwrap();
    assert_eq!(out.status.code(), Some(4), "suspended: {}", stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let id = v["run"].as_str().unwrap().to_string();
    // The tag moves to another agent.
    let other = scene.unique(built::HELLO, "hello");
    let moved = scene.push(&other, &reference);
    let out = scene.nexo(&["pull", &reference, "--insecure-registry", &scene.registry]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().next(), Some(moved.as_str()), "the tag names the other agent now");
    let out = scene
        .command(&["runs", "resume", &id, "--input", r#"{"approved": true}"#, "--json"])
        .env("OPENAI_API_KEY", "sk-registry-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(v["answer"], "published published/q3-report.md");
    let out = scene.nexo(&["runs", "show", &id, "--json"]);
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|_| panic!("{}", stdout(&out)));
    let text = shown.to_string();
    assert!(text.contains(&sha256_file(&first)) && !text.contains(&sha256_file(&other)), "{text}");
}

/// Acceptance is remembered by the repository a reference names, not by
/// the cached file: a new version behind the same tag that asks for more
/// is refused with its new asks named until the operator accepts it, by
/// the same reference.
#[test]
fn a_new_version_behind_a_tag_that_asks_for_more_is_refused_until_accepted() {
    let Some((scene, _)) = Scene::new("accept", false) else { return };
    let reference = format!("{}:1", scene.repo);
    let run = ["run", &reference, "one two", "--ephemeral", "--insecure-registry", &scene.registry];
    scene.push(&scene.unique(built::TEXT_STATS, "stats"), &reference);
    let out = scene.nexo(&run);
    assert!(stdout(&out).contains("words: 2"), "first use: {}", stderr(&out));
    let probe = scene.unique(built::TOOL_PROBE, "probe");
    let manifest = scene.push(&probe, &reference);
    let out = scene.nexo(&run);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("capability `shell`") && err.contains("fetch host `example.com`"), "{err}");
    // The fix names the refused version exactly, not the tag (which may
    // have moved on by the time the operator accepts).
    let exact = format!("{}@{manifest}", scene.repo);
    assert!(err.contains(&format!("`nexo plugins accept {exact}`")), "{err}");
    assert!(!stdout(&out).contains("shell:"), "it ran: {}", stdout(&out));
    // `nexo mcp serve` would offer its tools: refused the same way, before it serves.
    let out = scene.nexo(&["mcp", "serve", &reference, "--insecure-registry", &scene.registry]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("`nexo plugins accept {exact}`")), "{}", stderr(&out));

    let out = scene.nexo(&["plugins", "accept", &exact, "--insecure-registry", &scene.registry]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = scene.nexo(&run);
    assert!(out.status.success() && stdout(&out).contains("shell:"), "{}", stderr(&out));
    let out = scene.nexo(&["plugins", "list", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|_| panic!("{}", stdout(&out)));
    assert_eq!(listed.as_object().map(|o| o.len()), Some(1), "one reference, the repository: {listed}");
    assert_eq!(listed[&scene.repo]["digest"], format!("sha256:{}", sha256_file(&probe)), "{listed}");
}

/// A loopback HTTP server answering each request with `answer(request head)`
/// (status line, headers and body), one connection per request; it keeps
/// every request head it was sent.
struct FakeServer {
    address: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeServer {
    fn start(answer: impl Fn(&str) -> Vec<u8> + Send + 'static) -> FakeServer {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                kept.lock().unwrap().push(head.clone());
                // The client may hang up once it has had enough (an oversent blob).
                let _ = stream.write_all(&answer(&head));
            }
        });
        FakeServer { address, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn http_answer(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// `nexo` with its own caches, logging in to `registry` as alice.
fn logged_in(dir: &Path, registry: &str, args: &[&str]) -> Output {
    common::nexo_command(&dir.join("cache"))
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env("NO_PROXY", "127.0.0.1")
        .env("NEXO_REGISTRY_USERNAME", "alice")
        .env("NEXO_REGISTRY_PASSWORD", "alice-s3cret")
        .env("NEXO_REGISTRY_HOST", registry)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run nexo")
}

/// A registry whose challenge names a token service over plain HTTP on a
/// host the operator did not list is not sent the password: the pull is
/// refused by the realm's name, and the service hears nothing.
#[test]
fn a_password_is_not_sent_to_a_plain_http_token_service() {
    let trap = FakeServer::start(|_| http_answer("200 OK", &[], br#"{"token":"stolen"}"#));
    let realm = format!("http://{}/token", trap.address);
    let challenge = format!(r#"Bearer realm="{realm}",service="evil""#);
    let registry =
        FakeServer::start(move |_| http_answer("401 Unauthorized", &[("WWW-Authenticate", &challenge)], b""));
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("{}/evil/plugin:1", registry.address);
    let out = logged_in(dir.path(), &registry.address, &["pull", &reference, "--insecure-registry", &registry.address]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&realm) && err.contains("refused") && err.contains("insecure"), "{err}");
    assert!(!err.contains("alice-s3cret"), "{err}");
    assert!(trap.seen().is_empty(), "the token service was sent {:?}", trap.seen());
}

/// A token service the rules allow gets the password, and the registry gets
/// only the token it gave.
#[test]
fn the_password_goes_to_the_token_service_and_the_token_to_the_registry() {
    let registry = FakeServer::start(move |head| {
        let lower = head.to_ascii_lowercase();
        if head.starts_with("GET /token") {
            let expected = format!("authorization: basic {}", base64("alice:alice-s3cret").to_ascii_lowercase());
            return if lower.contains(&expected) && head.contains("scope=repository%3Aevil%2Fplugin%3Apull") {
                http_answer("200 OK", &[("Content-Type", "application/json")], br#"{"token":"tok-123"}"#)
            } else {
                http_answer("401 Unauthorized", &[], b"")
            };
        }
        if lower.contains("authorization: bearer tok-123") {
            let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#;
            return http_answer("404 Not Found", &[("Content-Type", "application/json")], body);
        }
        // The token service is the registry itself, which the operator listed.
        let host = lower.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("").trim().to_string();
        let challenge = format!(r#"Bearer realm="http://{host}/token",service="fake""#);
        http_answer("401 Unauthorized", &[("WWW-Authenticate", &challenge)], b"")
    });
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("{}/evil/plugin:1", registry.address);
    let out = logged_in(dir.path(), &registry.address, &["pull", &reference, "--insecure-registry", &registry.address]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not in the registry"), "{}", stderr(&out));
    let seen = registry.seen();
    let with_password: Vec<_> =
        seen.iter().filter(|h| h.to_ascii_lowercase().contains("authorization: basic")).collect();
    assert!(
        !with_password.is_empty() && with_password.iter().all(|h| h.starts_with("GET /token")),
        "the password went only to the token service: {seen:#?}"
    );
    assert!(
        seen.iter().any(|h| h.contains("/manifests/1") && h.to_ascii_lowercase().contains("bearer tok-123")),
        "{seen:#?}"
    );
    // Neither the password nor the token reaches the log, at any verbosity.
    let args = ["-vv", "pull", &reference, "--insecure-registry", &registry.address];
    let out = logged_in(dir.path(), &registry.address, &args);
    let log = stderr(&out);
    assert!(log.contains("DEBUG"), "-vv logs at debug: {log}");
    assert!(!log.contains("tok-123") && !log.contains("alice-s3cret"), "{log}");
}

/// A registry that streams more of a component than its manifest declared is
/// cut off at the declared size, and nothing is cached.
#[test]
fn a_blob_longer_than_its_manifest_declares_is_cut_off() {
    let declared = b"\0asm tiny";
    let layer = format!("sha256:{}", hex_sha256(declared));
    let config = br#"{}"#;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.wasm.config.v0+json",
            "digest": format!("sha256:{}", hex_sha256(config)),
            "size": config.len(),
        },
        "layers": [{ "mediaType": "application/wasm", "digest": layer, "size": declared.len() }],
    })
    .to_string();
    let registry = FakeServer::start(move |head| {
        if head.contains("/manifests/") {
            http_answer(
                "200 OK",
                &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                manifest.as_bytes(),
            )
        } else if head.contains("/blobs/sha256:") && head.contains(&layer[7..]) {
            // Eight MiB where nine bytes were declared.
            let mut out = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
            out.extend(std::iter::repeat_n(b'x', 8 << 20));
            out
        } else if head.contains("/blobs/sha256:") {
            http_answer("200 OK", &[], config)
        } else {
            http_answer("200 OK", &[], b"{}")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("{}/big/plugin:1", registry.address);
    let out =
        logged_in(dir.path(), "elsewhere.example", &["pull", &reference, "--insecure-registry", &registry.address]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("more than the {} bytes", declared.len())), "{}", stderr(&out));
    let blobs = dir.path().join("cache/registry/blobs/sha256");
    assert_eq!(std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0), 0, "nothing cached");
    let tmp = dir.path().join("cache/registry/tmp");
    assert_eq!(std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0), 0, "no partial download left");
}

/// A registry that answers a manifest request with more than the
/// distribution spec's 4 MiB is cut off there, and nothing is cached.
#[test]
fn a_manifest_longer_than_a_registry_may_send_is_cut_off() {
    let registry = FakeServer::start(move |head| {
        if head.contains("/manifests/") {
            // Sixteen MiB of a manifest that never ends.
            let mut out =
                b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: \
                            close\r\n\r\n{\"schemaVersion\":2,\"x\":\""
                    .to_vec();
            out.extend(std::iter::repeat_n(b'x', 16 << 20));
            out
        } else {
            http_answer("200 OK", &[], b"{}")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("{}/big/manifest:1", registry.address);
    let out =
        logged_in(dir.path(), "elsewhere.example", &["pull", &reference, "--insecure-registry", &registry.address]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("its manifest is more than 4194304 bytes"), "{}", stderr(&out));
    let cached = dir.path().join("cache/registry/manifests/sha256");
    assert_eq!(std::fs::read_dir(&cached).map(|d| d.count()).unwrap_or(0), 0, "nothing cached");
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `nexo ARGS` with COSIGN_PASSWORD set, which must succeed; its stderr.
fn signing(scene: &Scene, args: &[&str]) -> String {
    let out = scene.command(args).env("COSIGN_PASSWORD", "correct horse").output().unwrap();
    assert!(out.status.success(), "nexo {args:?}: {}", stderr(&out));
    stderr(&out)
}

/// A config file trusting `keys` (key files in the scene's directory) for
/// `scope`, with `require`.
fn trusting(scene: &Scene, scope: &str, keys: &[&str], require: bool) -> String {
    let config = scene.dir.path().join("trust.toml");
    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    std::fs::write(
        &config,
        format!(
            "[registries]\ninsecure = [{:?}]\n\n[[registries.trust]]\nscope = {scope:?}\nkeys = [{}]\nrequire = {require}\n",
            scene.registry,
            keys.join(", ")
        ),
    )
    .unwrap();
    config.to_str().unwrap().to_string()
}

#[test]
fn a_plugin_in_a_scope_that_requires_signatures_runs_only_when_a_trusted_key_signed_it() {
    let Some((scene, _)) = Scene::new("signed", false) else { return };
    let dir = scene.dir.path();
    for who in ["alice", "mallory"] {
        let prefix = dir.join(who);
        signing(&scene, &["sign", "--generate-key", prefix.to_str().unwrap()]);
        assert!(dir.join(format!("{who}.key")).exists() && dir.join(format!("{who}.pub")).exists());
    }
    // The private key is the author's alone; nexo never overwrites a key.
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join("alice.key")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let again = scene
        .command(&["sign", "--generate-key", dir.join("alice").to_str().unwrap()])
        .env("COSIGN_PASSWORD", "x")
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    let key = |who: &str| dir.join(format!("{who}.key")).to_str().unwrap().to_string();

    let reference = format!("{}:1", scene.repo);
    let digest = scene.push(&scene.unique(built::TEXT_STATS, "stats"), &reference);
    let config = trusting(&scene, &scene.repo, &["alice.pub"], true);
    let pull = || scene.nexo(&["pull", &reference, "--config", &config]);

    // Unsigned: refused, nothing cached, and the error says what to do.
    let out = pull();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not signed by a key trusted for") && err.contains("0 signature(s) found"), "{err}");
    assert!(err.contains("nexo sign --key") && err.contains("require = false"), "{err}");
    assert!(scene.blobs().is_empty(), "{:?}", scene.blobs());
    let out = scene.nexo(&["run", &reference, "one two", "--ephemeral", "--config", &config]);
    assert_eq!(out.status.code(), Some(2), "a run refuses it too: {}", stderr(&out));
    assert!(!stdout(&out).contains("words"), "it ran: {}", stdout(&out));
    // Accepting its authority pulls it, so it is checked there too.
    let out = scene.nexo(&["plugins", "accept", &reference, "--config", &config]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not signed by a key trusted for"), "{}", stderr(&out));
    // A file named like the reference, in a directory someone else prepared,
    // does not stand in for it.
    let planted = dir.join("planted");
    let decoy = planted.join(&reference);
    std::fs::create_dir_all(decoy.parent().unwrap()).unwrap();
    std::fs::copy(built::TEXT_STATS, &decoy).unwrap();
    let out = scene
        .command(&["run", &reference, "one two", "--ephemeral", "--config", &config])
        .current_dir(&planted)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is both a file here") && stderr(&out).contains("./"), "{}", stderr(&out));
    assert!(!stdout(&out).contains("words"), "the decoy ran: {}", stdout(&out));

    // Signed by a key nobody trusts: still refused.
    let insecure = ["--insecure-registry", scene.registry.as_str()];
    signing(&scene, &[&["sign", "--key", &key("mallory"), &reference][..], &insecure].concat());
    let err = stderr(&pull());
    assert!(err.contains("1 signature(s) found, none by alice.pub"), "{err}");
    assert!(scene.blobs().is_empty());
    // A wrong password is named as such.
    let out = scene
        .command(&[&["sign", "--key", &key("alice"), &reference][..], &insecure].concat())
        .env("COSIGN_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is COSIGN_PASSWORD its password?"), "{}", stderr(&out));

    // Signed by the trusted key (beside mallory's signature): it runs, and
    // says who signed it.
    let err = signing(&scene, &[&["sign", "--key", &key("alice"), &reference][..], &insecure].concat());
    assert!(err.contains("signed by alice.pub (sha256:") && err.contains("2 signature(s) in all"), "{err}");
    let err = signing(&scene, &[&["sign", "--key", &key("alice"), &reference][..], &insecure].concat());
    assert!(err.contains("was already signed"), "{err}");
    let out = pull();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("signed by alice.pub (sha256:"), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().next(), Some(digest.as_str()));
    let pinned = format!("{}@{digest}", scene.repo);
    let out = scene.nexo(&["run", &pinned, "one two", "--config", &config]);
    assert!(stdout(&out).contains("words: 2"), "{}", stderr(&out));
    assert!(stderr(&out).contains("signed by alice.pub"), "{}", stderr(&out));
    // The run records who signed what it ran; inspect shows it.
    let out = scene.nexo(&["runs", "list", "--json"]);
    let runs: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let id = runs[0]["id"].as_str().unwrap();
    let out = scene.nexo(&["runs", "show", id]);
    let shown = stdout(&out);
    assert!(shown.contains(&format!("from:      {pinned}")), "{shown}");
    assert!(shown.contains("signature: signed by alice.pub (sha256:"), "{shown}");
    let out = scene.nexo(&["inspect", &pinned, "--json", "--config", &config]);
    let inspected: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|_| panic!("{}", stderr(&out)));
    assert_eq!(inspected["origin"]["reference"], pinned.as_str());
    assert_eq!(inspected["origin"]["signature"]["status"], "signed");
    assert_eq!(inspected["origin"]["signature"]["by"][0]["name"], "alice.pub");
    // A cached component edited on disk is not run on the cache's word: it
    // is fetched again, and what runs is what alice signed.
    let blob = scene.blobs().into_iter().find(|b| std::fs::read(b).unwrap().len() > 1000).unwrap();
    let signed_bytes = std::fs::read(&blob).unwrap();
    std::fs::copy(built::TOOL_PROBE, &blob).unwrap();
    let out = scene.nexo(&["run", &pinned, "one two", "--ephemeral", "--config", &config]);
    assert!(stdout(&out).contains("words: 2"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&blob).unwrap(), signed_bytes, "the cache holds the signed component again");
    // The cache remembers alice's signature, not that the digest is "fine":
    // trusting another key instead checks the registry again, and refuses.
    signing(&scene, &["sign", "--generate-key", dir.join("carol").to_str().unwrap()]);
    let carol = trusting(&scene, &scene.repo, &["carol.pub"], true);
    let out = scene.nexo(&["run", &pinned, "one two", "--ephemeral", "--config", &carol]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("2 signature(s) found, none by carol.pub"), "{}", stderr(&out));

    // A scope that only checks: an unsigned plugin runs and is reported unsigned.
    let other = format!("{}-other:1", scene.repo);
    scene.push(&scene.unique(built::TEXT_STATS, "other"), &other);
    let lenient = trusting(&scene, &format!("{}-other", scene.repo), &["alice.pub"], false);
    let out = scene.nexo(&["pull", &other, "--config", &lenient]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("unsigned (allowed"), "{}", stderr(&out));
}

#[test]
fn a_signature_copied_from_another_component_does_not_count() {
    let Some((scene, _)) = Scene::new("replayed", false) else { return };
    let dir = scene.dir.path();
    signing(&scene, &["sign", "--generate-key", dir.join("alice").to_str().unwrap()]);
    let insecure = ["--insecure-registry", scene.registry.as_str()];
    let signed = format!("{}:signed", scene.repo);
    let signed_digest = scene.push(&scene.unique(built::TEXT_STATS, "signed"), &signed);
    let key = dir.join("alice.key");
    signing(&scene, &[&["sign", "--key", key.to_str().unwrap(), &signed][..], &insecure].concat());
    let probe = format!("{}:probe", scene.repo);
    let probe_digest = scene.push(&scene.unique(built::TOOL_PROBE, "probe"), &probe);
    // Whoever controls the registry points the probe's signature tag at the
    // signed component's signatures (valid ones, by a trusted key).
    let repository = scene.repo.split_once('/').unwrap().1;
    let tags = nexo_testkit::registry::storage(false)
        .join("docker/registry/v2/repositories")
        .join(repository)
        .join("_manifests/tags");
    let tag = |digest: &str| tags.join(format!("{}.sig", digest.replace(':', "-")));
    copy_dir(&tag(&signed_digest), &tag(&probe_digest));
    let config = trusting(&scene, &scene.repo, &["alice.pub"], true);
    let out = scene.nexo(&["pull", &probe, "--config", &config]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not signed by a key trusted for") && err.contains("0 signature(s) found"), "{err}");
    assert!(scene.blobs().is_empty(), "{:?}", scene.blobs());
    let out = scene.nexo(&["pull", &signed, "--config", &config]);
    assert!(out.status.success(), "the signed one still pulls: {}", stderr(&out));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// An anonymous pull's token, which the OCI client fetches itself (and logs
/// at debug), stays out of nexo's log even at `-vv`.
#[test]
fn an_anonymous_token_stays_out_of_the_log() {
    let registry = FakeServer::start(move |head| {
        let lower = head.to_ascii_lowercase();
        if head.starts_with("GET /token") {
            return http_answer("200 OK", &[("Content-Type", "application/json")], br#"{"token":"anon-tok-456"}"#);
        }
        if lower.contains("authorization: bearer anon-tok-456") {
            let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#;
            return http_answer("404 Not Found", &[("Content-Type", "application/json")], body);
        }
        let host = lower.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("").trim().to_string();
        let challenge = format!(r#"Bearer realm="http://{host}/token",service="fake""#);
        http_answer("401 Unauthorized", &[("WWW-Authenticate", &challenge)], b"")
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("docker")).unwrap();
    let reference = format!("{}/open/plugin:1", registry.address);
    let out = common::nexo_command(&dir.path().join("cache"))
        .env("DOCKER_CONFIG", dir.path().join("docker"))
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("NEXO_REGISTRY_USERNAME")
        .env_remove("NEXO_REGISTRY_PASSWORD")
        .args(["-vv", "pull", &reference, "--insecure-registry", &registry.address])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = stderr(&out);
    assert!(log.contains("is not in the registry"), "{log}");
    assert!(
        registry.seen().iter().any(|h| h.to_ascii_lowercase().contains("bearer anon-tok-456")),
        "the token was used: {:#?}",
        registry.seen()
    );
    assert!(!log.contains("anon-tok-456"), "{log}");
}

/// `nexo serve`: a tenant pulls a plugin by reference from a registry its
/// policy lists (and from no other), under the operator's trust rules; the
/// answer says where it came from, and it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_pulls_a_plugin_from_the_registries_its_policy_lists_under_the_operators_rules() {
    let Some((registry, _)) = Scene::new("served", false) else { return };
    let reference = format!("{}:1", registry.repo);
    let digest = registry.push(&registry.unique(built::TEXT_STATS, "stats"), &reference);
    signing(&registry, &["sign", "--generate-key", registry.dir.path().join("op").to_str().unwrap()]);
    let serve = common::scene::Scene::new(None).await;
    let key = registry.dir.path().join("op.pub");
    serve.configure(&format!(
        "[registries]\ninsecure = [{:?}]\n\n[[registries.trust]]\nscope = {:?}\nkeys = [{:?}]\n",
        registry.registry,
        registry.repo,
        key.to_str().unwrap()
    ));
    // `*` would let a tenant have the node reach any host, with its credentials.
    let path = registry.dir.path().join("star.json");
    std::fs::write(&path, serde_json::json!({"registries": ["*"]}).to_string()).unwrap();
    let out = serve.nexo(&["tenant", "create", "mallory", "--policy", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("would let the tenant have this node reach any host"), "{}", stderr(&out));
    let alice = serve.tenant("alice", Some(serde_json::json!({"registries": [registry.repo]})));
    let bob = serve.tenant("bob", None);
    let node = serve.node("n1");
    let post = |key: &str, body: Value| {
        let (url, key) = (node.url("/v1/plugins"), key.to_string());
        let serve = &serve;
        async move { serve.call(reqwest::Method::POST, &url, Some(&key), Some(body)).await }
    };

    // A policy without registries pulls from none; a repository outside the
    // policy's scopes is refused before anything is fetched.
    let (status, answer) = post(&bob, serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"]["code"], "registry_not_allowed", "{answer}");
    let elsewhere = format!("{}/nexo-test/elsewhere:1", registry.registry);
    let (status, answer) = post(&alice, serde_json::json!({"reference": elsewhere})).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{answer}");
    // Within the policy but unsigned, under the operator's rule: refused, with the cause.
    let (status, answer) = post(&alice, serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("is not signed by a key trusted"), "{answer}");

    // Signed by the operator's key: pulled, validated, stored, and it runs.
    let insecure = ["--insecure-registry", registry.registry.as_str()];
    let op_key = registry.dir.path().join("op.key");
    signing(&registry, &[&["sign", "--key", op_key.to_str().unwrap(), &reference][..], &insecure].concat());
    let (status, answer) = post(&alice, serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}\n{}", node.log());
    assert_eq!(answer["origin"]["reference"], format!("{}@{digest}", registry.repo), "{answer}");
    assert_eq!(answer["origin"]["signature"]["status"], "signed", "{answer}");
    let id = answer["id"].as_str().unwrap().to_string();
    let run = serde_json::json!({"plugin": id, "input": "one two", "wait": true});
    let (status, run) = serve.call(reqwest::Method::POST, &node.url("/v1/runs"), Some(&alice), Some(run)).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{run}\n{}", node.log());
    assert!(run["result"].as_str().unwrap_or_default().contains("words: 2"), "{run}");
    // The run and the stored plugin say where it came from and who signed it.
    assert_eq!(run["origin"]["reference"], format!("{}@{digest}", registry.repo), "{run}");
    assert_eq!(run["origin"]["signature"]["status"], "signed", "{run}");
    let (_, stored) = serve.get(&node.url(&format!("/v1/plugins/{id}")), &alice).await;
    assert_eq!(stored["origin"], answer["origin"], "{stored}");
    // Bob cannot use Alice's pull.
    let (status, _) = serve.call(reqwest::Method::GET, &node.url(&format!("/v1/plugins/{id}")), Some(&bob), None).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
}

/// `nexo serve`: each tenant's acceptance of a pulled plugin is its own and
/// in the shared store. A new version behind the tag that asks for more is
/// refused, named ask by ask, and nothing of it is stored, until whoever
/// the tenant's policy names accepts it: the operator (the default) or the
/// tenant itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_new_version_that_asks_for_more_waits_for_whoever_its_policy_names() {
    let Some((registry, _)) = Scene::new("widened", false) else { return };
    let reference = format!("{}:1", registry.repo);
    registry.push(&registry.unique(built::TEXT_STATS, "stats"), &reference);
    let serve = common::scene::Scene::new(None).await;
    serve.configure(&format!("[registries]\ninsecure = [{:?}]\n", registry.registry));
    let alice = serve.tenant("alice", Some(serde_json::json!({"registries": [registry.repo]})));
    let carol =
        serve.tenant("carol", Some(serde_json::json!({"registries": [registry.repo], "wider-authority": "tenant"})));
    let out = serve.nexo(&["tenant", "admin-key"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admin = stdout(&out).trim().to_string();
    let node = serve.node("n1");
    let post = |key: &str, body: Value| {
        let (url, key) = (node.url("/v1/plugins"), key.to_string());
        let serve = &serve;
        async move { serve.call(reqwest::Method::POST, &url, Some(&key), Some(body)).await }
    };
    let plugins = |key: &str| {
        let (url, key) = (node.url("/v1/plugins"), key.to_string());
        let serve = &serve;
        async move { serve.get(&url, &key).await.1["plugins"].as_array().unwrap().len() }
    };

    // First use: accepted, for each tenant on its own.
    for key in [&alice, &carol] {
        let (status, answer) = post(key, serde_json::json!({"reference": reference})).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}\n{}", node.log());
        assert_eq!(answer["acceptance"]["accepted"], "first-use", "{answer}");
    }

    // A new version behind the same tag asks for a shell and a fetch host.
    let probe = registry.push(&registry.unique(built::TOOL_PROBE, "probe"), &reference);
    let exact = format!("{}@{probe}", registry.repo);
    for body in [
        serde_json::json!({"reference": reference}),
        serde_json::json!({"reference": reference, "accept_authority": true}),
    ] {
        let (status, answer) = post(&alice, body).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (reqwest::StatusCode::CONFLICT, &serde_json::json!("authority_widened")),
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("capability `shell`") && message.contains("fetch host `example.com`"), "{message}");
        assert!(message.contains("leaves accepting wider authority to the operator"), "{message}");
        assert!(
            message.contains(&format!("accept {exact} for tenant `alice` (POST /v1/tenants/alice/accepted-plugins)")),
            "{message}"
        );
    }
    assert_eq!(plugins(&alice).await, 1, "nothing of the refused version is stored");
    // The refused digest is in this node's cache now: under another
    // repository name (one the policy's scope covers, no acceptance has
    // seen) it is asked of the registry, which has no such thing.
    let elsewhere = format!("{}/sub@{probe}", registry.repo);
    let (status, answer) = post(&alice, serde_json::json!({"reference": elsewhere})).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("is not in the registry"), "{answer}");
    assert_eq!(plugins(&alice).await, 1);

    // A tenant may not accept for itself through the admin route.
    let accept = |key: &str, tenant: &str, body: Value| {
        let (url, key) = (node.url(&format!("/v1/tenants/{tenant}/accepted-plugins")), key.to_string());
        let serve = &serve;
        async move { serve.call(reqwest::Method::POST, &url, Some(&key), Some(body)).await }
    };
    let (status, answer) = accept(&alice, "alice", serde_json::json!({"reference": exact})).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "a tenant's key sees no admin route: {answer}");
    // The operator accepts the exact version for Alice; then it is hers to pull.
    // The operator names the version reviewed by its digest, not by a tag.
    let (status, answer) = accept(&admin, "alice", serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("by its digest"), "{answer}");
    let (status, answer) = accept(&admin, "alice", serde_json::json!({"reference": exact})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}\n{}", node.log());
    assert!(
        answer["note"].as_str().unwrap().contains("accepted its new asks: ")
            && answer["note"].as_str().unwrap().contains("capability `shell`"),
        "{answer}"
    );
    let (status, answer) = post(&alice, serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}");
    assert_eq!(answer["acceptance"]["accepted"], "before", "{answer}");
    let accepted = serve.audit(&node, &alice, "plugin.accepted").await;
    assert_eq!(accepted.len(), 2, "{accepted:?}");
    assert_eq!(accepted[1]["by"], "operator", "{accepted:?}");
    assert!(
        accepted[1]["wider"].as_array().unwrap().contains(&serde_json::json!("capability `shell`")),
        "{accepted:?}"
    );

    // Alice's acceptance is not Carol's: Carol is refused too, and her policy lets her accept it herself.
    let (status, answer) = post(&carol, serde_json::json!({"reference": reference})).await;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    let fix = format!("naming this version by its digest, {{\"reference\": \"{exact}\", \"accept_authority\": true}}");
    assert!(message.contains(&fix), "{message}");
    assert_eq!(plugins(&carol).await, 1);
    // Consent goes to the version named: a tag may name another by now.
    let (status, answer) = post(&carol, serde_json::json!({"reference": reference, "accept_authority": true})).await;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{answer}");
    let (status, answer) = post(&carol, serde_json::json!({"reference": exact, "accept_authority": true})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}");
    assert_eq!(answer["acceptance"]["accepted"], "now", "{answer}");
    assert_eq!(serve.audit(&node, &carol, "plugin.accepted").await[1]["by"], "tenant");
}

/// A search backend from a registry is accepted as an agent is: a new
/// version behind its tag that asks for another host is refused before the
/// run starts, until the operator accepts it.
#[test]
fn a_search_backends_new_version_that_asks_for_another_host_is_refused_until_accepted() {
    let Some((scene, _)) = Scene::new("backend", false) else { return };
    let reference = format!("{}:1", scene.repo);
    let run = [
        "run",
        built::TEXT_STATS,
        "one two",
        "--ephemeral",
        "--search-backend",
        &reference,
        "--insecure-registry",
        &scene.registry,
    ];
    scene.push(&scene.unique(built::SEARXNG, "searxng"), &reference);
    let out = scene.nexo(&run);
    assert!(out.status.success() && stdout(&out).contains("words: 2"), "first use: {}", stderr(&out));
    let manifest = scene.push(&scene.unique(built::BRAVE, "brave"), &reference);
    let out = scene.nexo(&run);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("host `api.search.brave.com`"), "{err}");
    let exact = format!("{}@{manifest}", scene.repo);
    assert!(err.contains(&format!("`nexo plugins accept {exact}`")), "{err}");
    assert!(!stdout(&out).contains("words:"), "it ran: {}", stdout(&out));
    // Inspecting it is how the operator reviews it: no acceptance needed.
    let out = scene.nexo(&[
        "inspect",
        built::TEXT_STATS,
        "--search-backend",
        &reference,
        "--insecure-registry",
        &scene.registry,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = scene.nexo(&["plugins", "accept", &exact, "--insecure-registry", &scene.registry]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = scene.nexo(&run);
    assert!(out.status.success() && stdout(&out).contains("words: 2"), "{}", stderr(&out));
}

/// A skill component by registry reference (`[skills] components`): its
/// instructions reach the agent that names it, and the run records the
/// version it read by digest; a reference to something that is not a skill
/// stops the run before the model is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_component_from_a_registry_reaches_the_agent_and_its_run_records_the_digest() {
    let Some((scene, _)) = Scene::new("skill", false) else { return };
    let server = MockServer::start().await.unwrap();
    server.push(Reply::text("Reviewed."));
    let skill = scene.unique(built::CODE_REVIEW, "review");
    let reference = format!("{}:1", scene.repo);
    scene.push(&skill, &reference);
    let agent = scene.dir.path().join("reviewer.toml");
    std::fs::write(&agent, "name = \"reviewer\"\ndescription = \"Reviews\"\nskills = [\"code-review\"]\n").unwrap();
    let base_url = server.openai_base_url();
    let run = |components: &str| {
        let config = scene.dir.path().join("nexo.toml");
        std::fs::write(&config, format!("[skills]\ncomponents = [\"{components}\"]\n")).unwrap();
        let args = [
            "run",
            agent.to_str().unwrap(),
            "review this",
            "--config",
            config.to_str().unwrap(),
            "--provider",
            "openai-compatible",
            "--base-url",
            &base_url,
            "--model",
            "test-model",
            "--json",
            "--insecure-registry",
            &scene.registry,
        ];
        scene.command(&args).env("OPENAI_API_KEY", "sk-registry-test").output().unwrap()
    };
    let out = run(&reference);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].raw_body.contains("Read the changed files and what they call"), "{}", requests[0].raw_body);
    let v: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    let id = v["run"].as_str().unwrap_or_else(|| panic!("{v}")).to_string();
    let out = scene.nexo(&["runs", "show", &id, "--json"]);
    assert!(stdout(&out).contains(&sha256_file(&skill)), "the run names the skill's digest: {}", stdout(&out));

    let agent_ref = format!("{}:agent", scene.repo);
    scene.push(&scene.unique(built::HELLO, "hello"), &agent_ref);
    let out = run(&agent_ref);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a skill"), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 1, "no model call for a run that could not start");
}

/// `nexo cache prune` removes the components nothing has used for a while,
/// and keeps what a run that may still go on was started from (a resume
/// loads that very file).
#[test]
fn cache_prune_keeps_what_a_run_that_may_go_on_needs() {
    let Some((scene, _)) = Scene::new("prune", false) else { return };
    let insecure = ["--insecure-registry", scene.registry.as_str()];
    let stats = scene.unique(built::TEXT_STATS, "stats");
    let queued_ref = format!("{}:queued", scene.repo);
    scene.push(&stats, &queued_ref);
    let probe = scene.unique(built::TOOL_PROBE, "probe");
    let other_ref = format!("{}:other", scene.repo);
    scene.push(&probe, &other_ref);
    let skill = scene.unique(built::CODE_REVIEW, "skill");
    let skill_ref = format!("{}:skill", scene.repo);
    scene.push(&skill, &skill_ref);
    let queued = ["run", &queued_ref, "one two", "--later", "--skill-component", &skill_ref];
    let out = scene.nexo(&[&queued[..], &insecure].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let out = scene.nexo(&[&["pull", &other_ref][..], &insecure].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let (stats_sha, probe_sha) = (sha256_file(&stats), sha256_file(&probe));
    let blob = |sha: &str| scene.cache().join("registry/blobs/sha256").join(sha);
    assert!(blob(&stats_sha).is_file() && blob(&probe_sha).is_file());

    let prune = |extra: &[&str]| scene.nexo(&[&["cache", "prune", "--unused-for", "0s"][..], extra].concat());
    let out = prune(&["--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), probe_sha, "{}", stderr(&out));
    assert!(stderr(&out).contains("would remove 1 components"), "{}", stderr(&out));
    assert!(blob(&probe_sha).is_file(), "a dry run removes nothing");
    let out = prune(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), probe_sha);
    assert!(!blob(&probe_sha).exists(), "unused: removed");
    assert!(blob(&stats_sha).is_file(), "the queued run's component stays");
    assert!(blob(&sha256_file(&skill)).is_file(), "and so does its skill component");
    // Pulled again, it is fetched again.
    let out = scene.nexo(&[&["pull", &other_ref][..], &insecure].concat());
    assert!(out.status.success() && blob(&probe_sha).is_file(), "{}", stderr(&out));
}
