//! The spec's mode × capability × sandbox table, cell by cell, through the
//! one gate (`Toolbox::authorize`), plus the real operations behind the
//! allowed cells.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

use std::sync::{Arc, Mutex};

mod toolbox;

use nexo::ToolError;
use nexo::authority::Permissions;
use nexo::grant::Grant;
use nexo::manifest::{Capability, PermissionMode};
use nexo::search::{SearchBackend, SearchError, SearchHit};
use nexo_sandbox::{ContainerConfig, ContainerSandbox, LocalSandbox, Sandbox, VirtualSandbox};
use toolbox::{Setup, Toolbox};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Allow,
    Deny,
    Approval,
    Unsupported,
}
use Cell::*;

fn outcome(r: Result<(), ToolError>) -> Cell {
    match r {
        Ok(()) => Allow,
        Err(ToolError::Denied(_)) => Deny,
        Err(ToolError::ApprovalRequired(_)) => Approval,
        Err(ToolError::Unsupported(_)) => Unsupported,
        Err(other) => panic!("unexpected gate outcome {other:?}"),
    }
}

fn container() -> ContainerSandbox {
    let config = ContainerConfig { binary: Some("/bin/true".into()), ..ContainerConfig::docker("alpine:3") };
    ContainerSandbox::new(config).unwrap()
}

/// A backend for the table only: the gate decides before any backend is called.
struct UnusedBackend;

impl SearchBackend for UnusedBackend {
    fn name(&self) -> &str {
        "unused"
    }
    fn search<'a>(&'a self, _query: &'a str) -> nexo_model::BoxFuture<'a, Result<Vec<SearchHit>, SearchError>> {
        Box::pin(async { Err(SearchError::Unavailable("the gate table never searches".into())) })
    }
}

async fn toolbox(sandbox: Arc<dyn Sandbox>, permissions: Permissions) -> Toolbox {
    // Everything requested, granted and configured: this table is about modes and sandboxes.
    Setup {
        agent: "table",
        fetch_allow: vec!["example.com".to_string()],
        search: Some(Arc::new(UnusedBackend)),
        ..Setup::all(sandbox, permissions)
    }
    .build()
    .await
}

#[tokio::test]
async fn web_tools_need_their_configuration_as_well_as_the_grant() {
    let tb =
        Setup { agent: "bare", ..Setup::all(Arc::new(VirtualSandbox::new()), Permissions::new(PermissionMode::Auto)) }
            .build()
            .await;
    // No fetch-allow list: no fetch tool, and a direct call is denied.
    match tb.authorize(Capability::Fetch, "https://example.com/") {
        Err(ToolError::Denied(m)) => assert!(m.contains("fetch-allow"), "{m}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    // No backend: no search tool, and a direct call says none is configured.
    match tb.authorize(Capability::Search, "query") {
        Err(ToolError::Unsupported(m)) => assert!(m.contains("[search]"), "{m}"),
        other => panic!("expected unsupported, got {other:?}"),
    }
    assert_eq!(tb.offered(), [Capability::Read, Capability::Glob, Capability::Write]);
}

const CAPS: [Capability; 6] = Capability::ALL;

#[tokio::test]
async fn modes_by_capability() {
    let asked = Arc::new(Mutex::new(Vec::<Capability>::new()));
    let log = asked.clone();
    let yes = Permissions::new(PermissionMode::Ask).on_ask(move |cap, _| {
        log.lock().unwrap().push(cap);
        true
    });
    let no = Permissions::new(PermissionMode::Ask).on_ask(|_, _| false);
    //                       read   glob   write     shell     fetch     search
    let rows: Vec<(&str, Permissions, [Cell; 6])> = vec![
        ("read_only", Permissions::new(PermissionMode::ReadOnly), [Allow, Allow, Deny, Deny, Deny, Deny]),
        ("auto", Permissions::new(PermissionMode::Auto), [Allow; 6]),
        ("ask, on_ask says yes", yes, [Allow; 6]),
        ("ask, on_ask says no", no, [Allow, Allow, Deny, Deny, Deny, Deny]),
        ("ask, no hook", Permissions::new(PermissionMode::Ask), [Allow, Allow, Deny, Deny, Deny, Deny]),
        ("approve", Permissions::new(PermissionMode::Approve), [Allow, Allow, Approval, Approval, Approval, Approval]),
    ];
    // A sandbox that supports everything, so only the mode decides.
    let dir = tempfile::tempdir().unwrap();
    let sandboxes: [Arc<dyn Sandbox>; 2] = [Arc::new(LocalSandbox::open(dir.path()).unwrap()), Arc::new(container())];
    for (name, permissions, expected) in rows {
        for sandbox in &sandboxes {
            let tb = toolbox(sandbox.clone(), permissions.clone()).await;
            for (cap, want) in CAPS.iter().zip(expected) {
                let got = outcome(tb.authorize(*cap, "detail"));
                assert_eq!(got, want, "mode {name}, {} sandbox, capability {}", sandbox.name(), cap.as_str());
            }
        }
    }
    // read and glob are on the allow list: ask never asks about them.
    let asked = asked.lock().unwrap();
    assert_eq!(asked[..4], [Capability::Write, Capability::Shell, Capability::Fetch, Capability::Search]);
    assert!(!asked.contains(&Capability::Read) && !asked.contains(&Capability::Glob));
}

#[tokio::test]
async fn sandboxes_by_capability_in_auto_mode() {
    let dir = tempfile::tempdir().unwrap();
    //                         read   glob   write  shell        fetch  search
    let rows: Vec<(Arc<dyn Sandbox>, [Cell; 6])> = vec![
        (Arc::new(VirtualSandbox::new()), [Allow, Allow, Allow, Unsupported, Allow, Allow]),
        (Arc::new(LocalSandbox::open(dir.path()).unwrap()), [Allow; 6]),
        // The gate asks the container nothing, so no container is started.
        (Arc::new(container()), [Allow; 6]),
    ];
    for (sandbox, expected) in rows {
        let name = sandbox.name();
        let tb = toolbox(sandbox, Permissions::new(PermissionMode::Auto)).await;
        for (cap, want) in CAPS.iter().zip(expected) {
            assert_eq!(outcome(tb.authorize(*cap, "x")), want, "sandbox {name}, capability {}", cap.as_str());
        }
        // The shell tool is not even offered where the sandbox cannot run it.
        assert_eq!(tb.offered().contains(&Capability::Shell), name != "virtual", "{name}");
    }
}

#[tokio::test]
async fn allowed_cells_act_inside_the_sandbox() {
    // Virtual: writes stay in memory.
    let tb = toolbox(Arc::new(VirtualSandbox::new()), Permissions::new(PermissionMode::Auto)).await;
    tb.write_file("notes/a.txt", "alpha").await.unwrap();
    assert_eq!(tb.read_file("notes/a.txt").await.unwrap(), "alpha");
    assert_eq!(tb.glob("**/*.txt").await.unwrap().paths, vec!["notes/a.txt"]);
    assert!(matches!(tb.read_file("../../etc/passwd").await, Err(ToolError::Security(_))));

    // Local: guarded host files.
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("README.md"), "hello").unwrap();
    let tb = toolbox(Arc::new(LocalSandbox::open(&root).unwrap()), Permissions::new(PermissionMode::Auto)).await;
    assert_eq!(tb.read_file("README.md").await.unwrap(), "hello");
    assert!(matches!(tb.write_file("../escape.txt", "x").await, Err(ToolError::Security(_))));
    assert!(!outer.path().join("escape.txt").exists());
}

#[tokio::test]
async fn a_denied_capability_is_not_granted_unless_requested_and_granted() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox: Arc<dyn Sandbox> = Arc::new(LocalSandbox::open(dir.path()).unwrap());
    let auto = || Permissions::new(PermissionMode::Auto);
    // The operator grants write, the agent did not request it: no write.
    let tb = Setup {
        agent: "a",
        requested: vec![Capability::Read],
        grant: Grant::of([Capability::Read, Capability::Write]),
        ..Setup::all(sandbox.clone(), auto())
    }
    .build()
    .await;
    assert!(matches!(tb.write_file("x.txt", "x").await, Err(ToolError::Denied(m)) if m.contains("does not request")));
    // The agent requested write, the operator did not grant it: no write.
    let tb = Setup {
        agent: "a",
        requested: vec![Capability::Read, Capability::Write],
        grant: Grant::default(),
        ..Setup::all(sandbox, auto())
    }
    .build()
    .await;
    assert!(matches!(tb.write_file("x.txt", "x").await, Err(ToolError::Denied(m)) if m.contains("did not grant")));
    assert!(!dir.path().join("x.txt").exists());
}

#[tokio::test]
async fn read_before_write_and_the_stale_guard() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("existing.txt"), "v1").unwrap();
    let tb = toolbox(Arc::new(LocalSandbox::open(dir.path()).unwrap()), Permissions::new(PermissionMode::Auto)).await;
    // A new file writes freely.
    tb.write_file("new.txt", "fresh").await.unwrap();
    // An existing file must be read first.
    match tb.write_file("existing.txt", "v2").await {
        Err(ToolError::InvalidInput(m)) => assert_eq!(m, "read existing.txt before overwriting it"),
        other => panic!("{other:?}"),
    }
    assert_eq!(tb.read_file("existing.txt").await.unwrap(), "v1");
    // Someone else changes it after our read.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(dir.path().join("existing.txt"), "changed elsewhere").unwrap();
    let f = std::fs::File::options().write(true).open(dir.path().join("existing.txt")).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    match tb.write_file("existing.txt", "v2").await {
        Err(ToolError::InvalidInput(m)) => assert_eq!(m, "stale: existing.txt changed since you read it"),
        other => panic!("{other:?}"),
    }
    // Read again, then the write goes through, and so does a second one.
    tb.read_file("existing.txt").await.unwrap();
    tb.write_file("existing.txt", "v2").await.unwrap();
    tb.write_file("existing.txt", "v3").await.unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("existing.txt")).unwrap(), "v3");
    // The in-memory sandbox has no mtimes, so the guard does not apply there.
    let v = toolbox(
        Arc::new(VirtualSandbox::with_files([("a.txt", "1")]).unwrap()),
        Permissions::new(PermissionMode::Auto),
    )
    .await;
    v.write_file("a.txt", "2").await.unwrap();
}
