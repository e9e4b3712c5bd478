//! Provider responses (`nexo-model`): OpenAI and Anthropic JSON bodies and
//! their server-sent event streams, cut into network pieces at random, from
//! a loopback server the provider really talks to.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nexo_model::mock::{MockServer, Reply};
use nexo_model::{Message, ModelConfig, Provider, ProviderKind, Request, resolve_with_env};

use crate::mutate::Rng;
use crate::runtime;

/// The key the providers send; no error may show it, even when the server
/// echoes it back.
pub const KEY: &str = "sk-fuzz-model-7d0c5e21a9b84f36";

struct Setup {
    server: MockServer,
    openai: Arc<dyn Provider>,
    anthropic: Arc<dyn Provider>,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let server = runtime().block_on(MockServer::start()).unwrap_or_else(|e| panic!("mock server: {e}"));
        let provider = |kind: ProviderKind, base_url: String| {
            let config = ModelConfig {
                model: Some("fuzz-model".into()),
                provider: Some(kind),
                base_url: Some(base_url),
                api_key: Some(KEY.into()),
                retry_base_delay: Some(Duration::from_millis(1)),
                max_retries: Some(0),
                assume_model_exists: true,
                ..ModelConfig::default()
            };
            resolve_with_env(&config, &|_| None).unwrap_or_else(|e| panic!("provider: {e}"))
        };
        let openai = provider(ProviderKind::OpenaiCompatible, server.openai_base_url());
        let anthropic = provider(ProviderKind::Anthropic, server.anthropic_base_url());
        Setup { server, openai, anthropic }
    })
}

/// The first byte chooses the API (bit 0), streaming (bit 1), the status
/// (bits 2–3: 200, 200, 400, 401) and whether the connection is cut after
/// the body (bit 4); the second seeds where the body is cut into pieces;
/// the rest is the body. Checks: the provider answers or fails with a
/// `ModelError`, whose text never holds the key; a streamed answer's deltas
/// add up to its text; tool calls have names.
pub fn model_response(data: &[u8]) {
    let [flags, cut_seed, body @ ..] = data else { return };
    let setup = setup();
    let anthropic = flags & 1 == 1;
    let stream = flags & 2 == 2;
    let status = [200, 200, 400, 401][usize::from((flags >> 2) & 3)];
    let content_type = if stream { "text/event-stream" } else { "application/json" };
    let mut rng = Rng::new(u64::from(*cut_seed) + 1);
    let mut chunks = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = (1 + rng.below(48)).min(rest.len());
        chunks.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    setup.server.push(Reply::raw_chunks(status, content_type, chunks, flags & 16 == 16));
    let provider = if anthropic { &setup.anthropic } else { &setup.openai };
    let request = Request {
        model: "fuzz-model".into(),
        messages: vec![Message::User { text: "hi".into() }],
        tools: vec![],
        max_tokens: 64,
    };
    let pieces = Mutex::new(String::new());
    let sink = |s: &str| pieces.lock().unwrap_or_else(|e| e.into_inner()).push_str(s);
    let result = runtime().block_on(provider.complete(&request, if stream { Some(&sink) } else { None }));
    // The queue must be empty again, or the next input would get this reply.
    assert_eq!(setup.server.remaining(), 0, "the provider did not make exactly one request");
    match result {
        Ok(response) => {
            for call in &response.tool_calls {
                assert!(!call.name.is_empty(), "a tool call without a name: {call:?}");
            }
            if stream {
                let streamed = pieces.into_inner().unwrap_or_else(|e| e.into_inner());
                assert_eq!(streamed, response.text, "the streamed deltas are not the answer's text");
            }
        }
        Err(e) => {
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(KEY), "the key leaked into an error: {shown}");
        }
    }
}
