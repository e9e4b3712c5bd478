//! Provider calls go through the guarded egress client: the operator's
//! loopback base URL is reachable, nothing else is, redirects are re-checked,
//! and answers are capped. Against the mock server, over real HTTP, in both
//! wire formats, streaming and not.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use common::{KEY, assert_clean, config, provider, request, run};
use nexo_model::mock::{MockServer, Reply, long_text};
use nexo_model::{ModelError, ProviderKind};

const MODES: [bool; 2] = [false, true];
const KINDS: [ProviderKind; 2] = [ProviderKind::OpenaiCompatible, ProviderKind::Anthropic];

/// The API path of `kind`, for redirect targets.
fn api_path(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "/v1/messages",
        _ => "/v1/chat/completions",
    }
}

#[tokio::test]
async fn an_operator_base_url_on_loopback_is_reachable_by_ip_and_by_name() {
    let server = MockServer::start().await.unwrap();
    for kind in KINDS {
        for host in ["127.0.0.1", "localhost"] {
            let mut cfg = config(kind, &server);
            let base = cfg.base_url.take().unwrap().replace("127.0.0.1", host);
            cfg.base_url = Some(base);
            let p = provider(&cfg);
            for stream in MODES {
                server.push(Reply::text("local answer"));
                let (result, _) = run(p.as_ref(), &request("hi"), stream).await;
                assert_eq!(result.unwrap().text, "local answer", "{kind:?} at {host}, stream {stream}");
            }
        }
    }
    // The key went to the operator's own server, over plain http to loopback.
    for sent in server.requests() {
        let key = sent.header("authorization").or(sent.header("x-api-key")).unwrap();
        assert!(key.ends_with(KEY), "{key}");
    }
    assert_eq!(server.requests().len(), 8);
}

#[tokio::test]
async fn redirects_off_the_base_urls_origin_are_refused_and_never_reach_the_target() {
    let server = MockServer::start().await.unwrap();
    let elsewhere = MockServer::start().await.unwrap();
    for kind in KINDS {
        let p = provider(&config(kind, &server));
        let path = api_path(kind);
        let port = elsewhere.addr().port();
        for (status, target, why) in [
            (307, format!("http://localhost:{port}{path}"), "localhost"),
            (308, format!("http://127.0.0.1:{port}{path}"), "not one of the origins"),
            (307, format!("http://10.0.0.1{path}"), "10.0.0.1"),
            (308, "http://169.254.169.254/latest/meta-data/".to_string(), "169.254.169.254"),
            (302, path.to_string(), "307 or 308"),
            (301, path.to_string(), "307 or 308"),
        ] {
            for stream in MODES {
                server.push(Reply::redirect(status, target.clone()));
                server.push(Reply::text("must not be reached"));
                elsewhere.push(Reply::text("must not be reached either"));
                let before = server.requests().len();
                let (result, pieces) = run(p.as_ref(), &request("go"), stream).await;
                let error = result.unwrap_err();
                assert!(
                    matches!(&error, ModelError::Unavailable { message, .. }
                        if message.contains("refused") && message.contains(why)),
                    "{kind:?} {status} to {target}: {error}"
                );
                assert_clean(&error, kind.name());
                assert!(pieces.is_empty());
                // One request, no retry, no follow-up.
                assert_eq!(server.requests().len(), before + 1);
                assert_eq!(server.remaining(), 1);
                while server.remaining() > 0 {
                    run(p.as_ref(), &request("drain"), false).await.0.unwrap();
                }
            }
        }
    }
    assert!(elsewhere.requests().is_empty(), "another server was reached: {:?}", elsewhere.requests());
}

#[tokio::test]
async fn a_307_within_the_origin_is_followed_with_the_same_body() {
    let server = MockServer::start().await.unwrap();
    for kind in KINDS {
        let p = provider(&config(kind, &server));
        for stream in MODES {
            let before = server.requests().len();
            server.push(Reply::redirect(307, format!("/moved{}", api_path(kind))));
            server.push(Reply::text("after the move"));
            let (result, _) = run(p.as_ref(), &request("go"), stream).await;
            assert_eq!(result.unwrap().text, "after the move");
            let sent = &server.requests()[before..];
            assert_eq!(sent.len(), 2);
            assert_eq!(sent[1].path, format!("/moved{}", api_path(kind)));
            assert_eq!((sent[1].method.as_str(), &sent[1].raw_body), ("POST", &sent[0].raw_body));
            assert!(sent[1].header("authorization").or(sent[1].header("x-api-key")).is_some());
        }
    }
}

#[tokio::test]
async fn the_answer_size_cap_holds_streamed_or_not() {
    let server = MockServer::start().await.unwrap();
    for kind in KINDS {
        let mut cfg = config(kind, &server);
        cfg.max_response_bytes = Some(4096);
        let p = provider(&cfg);
        for stream in MODES {
            server.push(Reply::text("short"));
            assert_eq!(run(p.as_ref(), &request("go"), stream).await.0.unwrap().text, "short");
            server.push(Reply::text(long_text(20_000)));
            let (result, pieces) = run(p.as_ref(), &request("go"), stream).await;
            let error = result.unwrap_err();
            assert!(
                matches!(&error, ModelError::Protocol { message, .. }
                    if message.contains("longer than 4096 bytes") && message.contains("max_response_bytes")),
                "{kind:?}, stream {stream}: {error}"
            );
            assert_clean(&error, kind.name());
            let streamed: usize = pieces.iter().map(String::len).sum();
            assert!(streamed < 4096, "{streamed} bytes of text reached the sink");
        }
    }
}

#[tokio::test]
async fn connection_failures_are_retried_and_name_the_endpoint() {
    // A port that was free a moment ago, now closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = nexo_model::ModelConfig {
        model: Some("m".into()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(format!("http://127.0.0.1:{port}/v1;session=s3cret?key=s3cret")),
        max_retries: Some(1),
        retry_base_delay: Some(std::time::Duration::from_millis(1)),
        ..Default::default()
    };
    let error = run(provider(&cfg).as_ref(), &request("go"), true).await.0.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("cannot connect to http://127.0.0.1:{port}/v1;<redacted>/chat/completions?<redacted>"))
            && text.contains("1 retries"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}
