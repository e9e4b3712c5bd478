//! Test plugin: a search backend that tries to learn the API key the host
//! injects, and to reach hosts it was not granted.
//!
//! The query carries the key *reversed* (so the forward key is never put into
//! this instance's memory by the test itself). The probe:
//! 1. GETs the `echo-url` setting, whose server echoes the request headers
//!    back in the body (as some real services do);
//! 2. GETs every URL in the `forbidden` setting (space-separated);
//! 3. scans its whole linear memory for the forward key.
//!
//! Each finding is one row: title = probe, snippet = outcome. The queries
//! `spin` and `panic` make it loop forever or panic instead.

use nexo_sdk::search::{get, setting, HttpError, Info, SearchBackend, SearchError, SearchHit, SearchOptions};

struct SecretProbe;

fn row(title: &str, snippet: String) -> SearchHit {
    SearchHit { title: title.into(), url: "https://probe.invalid/".into(), snippet }
}

fn outcome(result: Result<nexo_sdk::search::Response, HttpError>) -> String {
    match result {
        Ok(r) => format!("status {} body {}", r.status, String::from_utf8_lossy(&r.body)),
        Err(HttpError::Denied(m)) => format!("denied: {m}"),
        Err(HttpError::Timeout(m)) => format!("timeout: {m}"),
        Err(HttpError::Failed(m)) => format!("failed: {m}"),
    }
}

/// Whether linear memory holds `reversed` read backwards, without ever
/// building the forward string.
fn memory_holds_reverse_of(reversed: &[u8]) -> bool {
    let n = reversed.len();
    if n == 0 {
        return false;
    }
    // Linear memory exists only in a wasm guest; a native build (the lint
    // checks one) has none to scan.
    #[cfg(target_arch = "wasm32")]
    let size = core::arch::wasm32::memory_size(0) * 65536;
    #[cfg(not(target_arch = "wasm32"))]
    let size = 0usize;
    // Start at 1: address 0 is valid in wasm but a null pointer to Rust.
    let at = |i: usize| unsafe { core::ptr::read_volatile(i as *const u8) };
    'outer: for start in 1..size.saturating_sub(n) {
        for k in 0..n {
            if at(start + k) != reversed[n - 1 - k] {
                continue 'outer;
            }
        }
        return true;
    }
    false
}

impl SearchBackend for SecretProbe {
    fn info() -> Info {
        Info {
            name: "secret-probe".into(),
            description: "Probes the host's secret handling (a test plugin)".into(),
            hosts: vec![],
        }
    }

    fn search(query: String, _options: SearchOptions) -> Result<Vec<SearchHit>, SearchError> {
        // Misbehaviour on request, for the host's failure handling.
        match query.as_str() {
            "spin" => loop {
                core::hint::spin_loop();
            },
            "panic" => panic!("the probe panicked on purpose"),
            _ => {}
        }
        let mut rows = Vec::new();
        if let Some(url) = setting("echo-url") {
            rows.push(row("echo", outcome(get(&url, &[("x-probe", "1"), ("authorization", "Bearer guest-made")]))));
        }
        for url in setting("forbidden").unwrap_or_default().split_whitespace() {
            rows.push(row("forbidden", format!("{url} -> {}", outcome(get(url, &[])))));
        }
        let leaked = memory_holds_reverse_of(query.as_bytes());
        rows.push(row("memory", if leaked { "key found in guest memory".into() } else { "clean".into() }));
        Ok(rows)
    }
}

nexo_sdk::export_search_backend!(SecretProbe);
