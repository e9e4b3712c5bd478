//! The OCI registries the registry tests push to and pull from
//! (scripts/registry.sh: Debian's docker-registry on loopback), and wkg
//! (scripts/wkg-deps.sh), which checks that other tools read what nexo
//! writes and the other way round.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unavailable(test: &str, why: &str, fix: &str) {
    assert!(std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true), "CI runs a real registry, but {why}; {fix}");
    crate::skipped(test, &format!("{why}; {fix}"));
}

fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
}

/// Starts (or finds) the tests' registry and returns its `HOST:PORT`; with
/// `auth`, the one that asks for a password, and that password (user
/// `nexo`). Without docker-registry `test` is [`skipped`](crate::skipped)
/// and `None` comes back; with `CI` set it panics instead.
pub fn registry(test: &str, auth: bool) -> Option<(String, Option<String>)> {
    let fix = "run scripts/registry.sh";
    if !on_path("docker-registry") {
        unavailable(test, "docker-registry is not on PATH", fix);
        return None;
    }
    let mut cmd = Command::new(root().join("scripts/registry.sh"));
    if auth {
        cmd.arg("auth");
    }
    let out = cmd.stderr(Stdio::inherit()).output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        unavailable(test, "scripts/registry.sh could not start a registry", fix);
        return None;
    };
    let address = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let password = auth.then(|| {
        let file = root().join("target/registry-auth/password");
        std::fs::read_to_string(file).map(|p| p.trim().to_string()).unwrap_or_default()
    });
    Some((address, password))
}

/// The registry's storage directory (`auth` as for [`registry`]), where a
/// test can alter a blob behind the registry's back.
pub fn storage(auth: bool) -> PathBuf {
    root().join(if auth { "target/registry-auth/data" } else { "target/registry/data" })
}

/// wkg, if scripts/wkg-deps.sh installed it; otherwise as for [`registry`].
pub fn wkg(test: &str) -> Option<PathBuf> {
    let wkg = std::env::var_os("NEXO_WKG_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/tools/wkg"))
        .join("bin/wkg");
    if wkg.is_file() {
        return Some(wkg);
    }
    unavailable(test, &format!("wkg is not at {}", wkg.display()), "run scripts/wkg-deps.sh");
    None
}
