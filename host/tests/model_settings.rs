//! The model's settings, from `[model]` and from flags (which win): the
//! most output tokens and the temperature each request carries, in the
//! provider's wire format, and the time limit of one request.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{stderr, stdout};
use nexo_model::mock::{MockServer, Reply};
use nexo_tests as built;

fn run(dir: &Path, server: &MockServer, extra: &[&str]) -> Output {
    let base = server.openai_base_url();
    common::nexo_command(&dir.join("cache"))
        .args(["run", built::HELLO, "hi", "--provider", "openai-compatible", "--base-url", &base, "--model", "m"])
        .args(["--ephemeral"])
        .args(extra)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_carries_the_configured_max_tokens_and_temperature_the_flags_winning() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await.unwrap();
    let config = dir.path().join("nexo.toml");
    std::fs::write(&config, "[model]\nmax-tokens = 55\ntemperature = 0.1\ntool-choice = \"required\"\n").unwrap();
    let config = config.to_str().unwrap();
    /// The flags, and what the request then carries: max tokens, temperature, tool choice.
    type Case<'a> = (&'a [&'a str], u64, Option<f64>, Option<&'a str>);
    let cases: [Case; 3] = [
        (&[], 4096, None, None),
        (&["--config", config], 55, Some(0.1), Some("required")),
        (
            &["--config", config, "--max-tokens", "77", "--temperature", "0.3", "--tool-choice", "none"],
            77,
            Some(0.3),
            Some("none"),
        ),
    ];
    for (flags, max_tokens, temperature, choice) in cases {
        server.push(Reply::text("hello"));
        let out = run(dir.path(), &server, flags);
        assert!(out.status.success(), "{flags:?}: {}\n{}", stdout(&out), stderr(&out));
        let body = server.requests().last().unwrap().body.clone();
        assert_eq!(body["max_tokens"].as_u64(), Some(max_tokens), "{flags:?}: {body}");
        assert_eq!(body["temperature"].as_f64(), temperature, "{flags:?}: {body}");
        // The first turn answers the user's message, with tools offered: `required` is asked of it.
        assert!(body["tools"].as_array().is_some_and(|t| !t.is_empty()), "{body}");
        assert_eq!(body["tool_choice"].as_str(), choice, "{flags:?}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_slower_than_the_timeout_fails_the_turn_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await.unwrap();
    server.push(Reply::text("too late").with_delay(Duration::from_secs(5)));
    let out = run(dir.path(), &server, &["--model-timeout", "1"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("no answer within 1 s (the configured timeout)"), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_out_of_range_or_that_cannot_apply_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let server = MockServer::start().await.unwrap();
    let refused = |flags: &[&str], why: &str| {
        let out = run(dir.path(), &server, flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{flags:?}: {}", stderr(&out));
    };
    refused(&["--temperature", "2.5"], "the temperature is 2.5: it must be from 0 to 2");
    refused(&["--max-tokens", "0"], "--max-tokens");
    refused(&["--model-timeout", "0"], "--model-timeout");
    refused(&["--tool-choice", "always"], "`always` is not a tool choice: use auto, required or none");
    refused(
        &["--loop", "claude-code", "--max-tokens", "100"],
        "with --loop claude-code the CLI makes its own model requests, so --max-tokens (`max-tokens`) cannot apply",
    );
    assert!(server.requests().is_empty(), "no request was made");
}
