//! A run's tools as a real run prepares them (`world::agent::prepare`), with
//! the calls the tests make through the host-call path, as a guest makes them.
#![allow(dead_code)] // each test crate uses part of it

use std::sync::Arc;

use nexo::ToolError;
use nexo::authority::Permissions;
use nexo::capability::files::{Glob, ReadFile, WriteFile};
use nexo::capability::search::WebSearch;
use nexo::grant::Grant;
use nexo::host_call::ToolContext;
use nexo::manifest::{AgentManifest, Capability};
use nexo::search::{SearchBackend, SearchHit};
use nexo::settings::{Providers, RunContext, RunOptions};
use nexo_sandbox::{GlobMatches, Sandbox};

/// One run's tools.
pub struct Toolbox(pub Arc<ToolContext>);

/// What a test run is made of.
pub struct Setup {
    /// The agent's name.
    pub agent: &'static str,
    /// What it requests.
    pub requested: Vec<Capability>,
    /// What the operator grants.
    pub grant: Grant,
    /// The operator's mode and hooks.
    pub permissions: Permissions,
    /// The sandbox.
    pub sandbox: Arc<dyn Sandbox>,
    /// The agent's `fetch-allow` list.
    pub fetch_allow: Vec<String>,
    /// The search backend.
    pub search: Option<Arc<dyn SearchBackend>>,
}

impl Setup {
    /// Everything requested and granted, in `sandbox` under `permissions`.
    pub fn all(sandbox: Arc<dyn Sandbox>, permissions: Permissions) -> Setup {
        Setup {
            agent: "test-agent",
            requested: Capability::ALL.to_vec(),
            grant: Grant::of(Capability::ALL),
            permissions,
            sandbox,
            fetch_allow: Vec::new(),
            search: None,
        }
    }

    /// Prepares the run.
    pub async fn build(self) -> Toolbox {
        self.build_with(None).await
    }

    /// Prepares the run, with its events going to `events`.
    pub async fn build_with_events(self, events: Arc<dyn nexo::events::EventSink>) -> Toolbox {
        self.build_with(Some(events)).await
    }

    async fn build_with(self, events: Option<Arc<dyn nexo::events::EventSink>>) -> Toolbox {
        let manifest = AgentManifest {
            name: self.agent.into(),
            capabilities: self.requested,
            fetch_allow: self.fetch_allow,
            ..AgentManifest::default()
        };
        let options = RunOptions {
            permissions: self.permissions,
            grant: self.grant,
            providers: Providers { sandbox: Some(self.sandbox), search: self.search, ..Providers::default() },
            context: RunContext { events, ..RunContext::default() },
            ..RunOptions::default()
        };
        Toolbox(nexo::world::agent::prepare(&manifest, &options, &[], &nexo::Limits::default()).await.unwrap().tools)
    }
}

impl Toolbox {
    /// The gate's verdict for one action.
    pub fn authorize(&self, cap: Capability, detail: &str) -> Result<(), ToolError> {
        self.0.authority().authorize(cap, "tool", detail)
    }

    /// The capabilities whose tools are offered.
    pub fn offered(&self) -> Vec<Capability> {
        self.0.authority().offered()
    }

    pub async fn read_file(&self, path: &str) -> Result<String, ToolError> {
        self.0.call(&ReadFile, path.to_string()).await
    }

    pub async fn write_file(&self, path: &str, contents: &str) -> Result<(), ToolError> {
        self.0.call(&WriteFile, (path.to_string(), contents.to_string())).await.map(|_| ())
    }

    pub async fn glob(&self, pattern: &str) -> Result<GlobMatches, ToolError> {
        self.0.call(&Glob, pattern.to_string()).await
    }

    pub async fn web_search(&self, query: &str) -> Result<Vec<SearchHit>, ToolError> {
        self.0.call(&WebSearch, query.to_string()).await
    }
}
