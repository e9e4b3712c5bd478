//! One turn against a real OpenAI-compatible server, when asked for:
//!
//! ```sh
//! NEXO_LIVE=1 NEXO_LIVE_BASE_URL=http://localhost:11434/v1 NEXO_LIVE_MODEL=llama3.2 \
//!     cargo test -p nexo-model --test live -- --nocapture
//! ```
//!
//! `NEXO_LIVE_API_KEY` is sent as a bearer token when set.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::Mutex;
use std::time::Duration;

use nexo_model::{DeltaSink, Message, ModelConfig, ProviderKind, Request, resolve_with_env};

#[tokio::test]
async fn live_openai_compatible_server() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some("1"), Some(base_url), Some(model)) =
        (var("NEXO_LIVE").as_deref(), var("NEXO_LIVE_BASE_URL"), var("NEXO_LIVE_MODEL"))
    else {
        nexo_testkit::skipped(
            "live_openai_compatible_server",
            "set NEXO_LIVE=1, NEXO_LIVE_BASE_URL and NEXO_LIVE_MODEL to run against a real server",
        );
        return;
    };
    let config = ModelConfig {
        model: Some(model.clone()),
        provider: Some(ProviderKind::OpenaiCompatible),
        base_url: Some(base_url),
        api_key: var("NEXO_LIVE_API_KEY"),
        timeout: Some(Duration::from_secs(300)),
        ..ModelConfig::default()
    };
    let provider = resolve_with_env(&config, &|_| None).unwrap();
    let request = Request {
        model,
        messages: vec![
            Message::System { text: "Answer in one short sentence.".into() },
            Message::User { text: "Say hello.".into() },
        ],
        tools: vec![],
        max_tokens: 64,
    };

    let response = provider.complete(&request, None).await.unwrap();
    println!("non-streaming: {response:?}");
    assert!(!response.text.trim().is_empty());

    let pieces = Mutex::new(String::new());
    let sink = |s: &str| pieces.lock().unwrap().push_str(s);
    let deltas: DeltaSink<'_> = &sink;
    let response = provider.complete(&request, Some(deltas)).await.unwrap();
    println!("streaming: {response:?}");
    assert!(!response.text.trim().is_empty());
    assert_eq!(pieces.into_inner().unwrap(), response.text);
}
