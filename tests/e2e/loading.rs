//! Loading and describing the first-party plugins, and the compile cache.

use nexo::engine::CacheOutcome;
use nexo::manifest::Capability;
use nexo::plugin::Description;
use nexo::{EngineConfig, Plugin, PluginKind};
use nexo_tests as built;

use crate::engine;

#[tokio::test]
async fn every_first_party_plugin_describes_itself() {
    let hello = Plugin::load(engine(), built::HELLO).await.unwrap();
    assert_eq!(hello.kind(), PluginKind::Agent);
    assert_eq!(hello.name(), "hello");
    assert_eq!(hello.export(), "nexo:plugin/agent@0.1.4");
    let m = hello.manifest().unwrap();
    assert_eq!(m.capabilities, vec![Capability::Read, Capability::Glob]);
    assert_eq!(m.max_turns, Some(8));
    assert!(m.instructions.contains("helpful assistant"));
    assert!(hello.imports().iter().any(|i| i == "nexo:plugin/model@0.1.4"));

    let stats = Plugin::load(engine(), built::TEXT_STATS).await.unwrap();
    assert_eq!((stats.kind(), stats.name()), (PluginKind::Agent, "text-stats"));
    assert!(stats.manifest().unwrap().capabilities.is_empty());

    let skill = Plugin::load(engine(), built::CODE_REVIEW).await.unwrap();
    assert_eq!((skill.kind(), skill.name()), (PluginKind::Skill, "code-review"));
    let Description::Skill(s) = skill.description() else { panic!("not a skill description") };
    assert_eq!(s.resources, vec!["references/severity.md".to_string()]);
    assert_eq!(s.metadata.license.as_deref(), Some("Apache-2.0"));
    assert!(
        !skill.imports().iter().any(|i| i.starts_with("nexo:")),
        "a skill imports nothing from nexo: {:?}",
        skill.imports()
    );

    for (path, name, hosts) in
        [(built::SEARXNG, "searxng", vec![]), (built::BRAVE, "brave", vec!["api.search.brave.com"])]
    {
        let backend = Plugin::load(engine(), path).await.unwrap();
        assert_eq!((backend.kind(), backend.name()), (PluginKind::SearchBackend, name));
        let Description::SearchBackend(info) = backend.description() else { panic!("not a backend") };
        assert_eq!(info.hosts, hosts);
        assert!(backend.imports().iter().any(|i| i == "nexo:plugin/outbound-http@0.1.4"));
        assert!(!backend.imports().iter().any(|i| i.starts_with("nexo:plugin/tools")));
    }
}

#[tokio::test]
async fn the_compile_cache_is_hit_on_the_second_load_and_survives_damage() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        || EngineConfig { cache_dir: Some(dir.path().to_path_buf()), max_live_instances: 4, ..EngineConfig::default() };
    let engine = nexo::Engine::new(config()).unwrap();
    let first = Plugin::load(&engine, built::TEXT_STATS).await.unwrap();
    assert_eq!(first.cache_outcome(), CacheOutcome::Miss);
    let second = Plugin::load(&engine, built::TEXT_STATS).await.unwrap();
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);

    // A new engine with the same settings (a new process) reuses the artifact.
    let again = nexo::Engine::new(config()).unwrap();
    assert_eq!(Plugin::load(&again, built::TEXT_STATS).await.unwrap().cache_outcome(), CacheOutcome::Hit);

    // A damaged artifact is replaced, and the plugin still runs.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let repaired = Plugin::load(&engine, built::TEXT_STATS).await.unwrap();
    assert_eq!(repaired.cache_outcome(), CacheOutcome::Miss);
    let answer = repaired.run_agent("one two", &Default::default()).await.unwrap();
    assert!(answer.contains("words: 2"), "{answer}");
    assert_eq!(Plugin::load(&engine, built::TEXT_STATS).await.unwrap().cache_outcome(), CacheOutcome::Hit);
}

#[tokio::test]
async fn without_a_cache_every_load_compiles() {
    let engine = crate::engine_with(|_| {});
    let plugin = Plugin::load(&engine, built::HELLO).await.unwrap();
    assert_eq!(plugin.cache_outcome(), CacheOutcome::Disabled);
}

/// `bytes` with every `from` replaced by `to` (same length, so the
/// component's encoding stays valid).
fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut i = 0;
    while let Some(at) = out[i..].windows(from.len()).position(|w| w == from) {
        out[i + at..i + at + to.len()].copy_from_slice(to);
        i += at + to.len();
    }
    assert_ne!(out, bytes, "nothing to patch");
    out
}

#[tokio::test]
async fn a_component_of_another_contract_version_says_which_way_to_go() {
    let bytes = std::fs::read(built::TEXT_STATS).unwrap();
    let cases = [
        (
            &b"nexo:plugin/agent@0.1.4"[..],
            &b"nexo:plugin/agent@0.9.0"[..],
            "a newer contract than this host knows",
            "Upgrade nexo",
        ),
        (&b"nexo:plugin/agent@0.1.4"[..], &b"nexo:plugin/agent@0.0.9"[..], "an older contract", "Rebuild the plugin"),
    ];
    for (from, to, says, fix) in cases {
        let component = patched(&bytes, from, to);
        let err = Plugin::from_bytes(engine(), "patched.wasm".into(), &component).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, nexo::LoadError::UnsupportedVersion { .. }), "{text}");
        assert!(text.contains(says) && text.contains(fix), "{text}");
        assert!(text.contains(std::str::from_utf8(to).unwrap()), "{text}");
    }
}

#[tokio::test]
async fn a_component_built_against_contract_0_1_0_still_loads_and_runs_on_this_host() {
    // Every nexo name in the component, moved back to the version before
    // `durable` (0.1.1), `mcp` (0.1.2), timers (0.1.3) and hooks (0.1.4) arrived: what a plugin built
    // before them imports.
    let bytes = std::fs::read(built::TEXT_STATS).unwrap();
    let mut old = bytes.clone();
    for name in ["agent-children", "agent-mcp", "agent", "model", "log", "types"] {
        let from = format!("nexo:plugin/{name}@0.1.4");
        let to = format!("nexo:plugin/{name}@0.1.0");
        old = patched(&old, from.as_bytes(), to.as_bytes());
    }
    assert!(!old.windows(6).any(|w| w == b"@0.1.4"), "every 0.1.4 name was patched");
    let plugin = Plugin::from_bytes(engine(), "old.wasm".into(), &old).await.unwrap();
    assert_eq!(plugin.export(), "nexo:plugin/agent@0.1.0");
    let out = plugin.agent().unwrap().run("a b c", &nexo::settings::RunOptions::default()).await.unwrap();
    assert!(out.answer.contains("words: 3"), "{}", out.answer);
}
