//! The real container engine the container sandbox's tests run on: Debian's
//! podman and the image scripts/podman-deps.sh builds from Debian's
//! busybox-static, with no registry.

use std::path::Path;
use std::process::{Command, Stdio};

/// The image scripts/podman-deps.sh builds; change both together.
pub const IMAGE: &str = "localhost/nexo-sandbox-test:1";

/// [`IMAGE`] when podman and the image are here. Otherwise `test` is
/// [`skipped`](crate::skipped), naming the script that installs them, and
/// `None` comes back; with `CI` set (whose `.ci/run` runs the script) it
/// panics instead.
pub fn image(test: &str) -> Option<&'static str> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = std::env::split_paths(&path).any(|dir| Path::new(&dir).join("podman").is_file());
    let why = if !on_path {
        "podman is not on PATH".to_string()
    } else if !exists() {
        format!("podman has no image {IMAGE}")
    } else {
        return Some(IMAGE);
    };
    let fix = "run scripts/podman-deps.sh";
    assert!(std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true), "CI runs the real engine, but {why}; {fix}");
    crate::skipped(test, &format!("{why}; {fix}"));
    None
}

fn exists() -> bool {
    let status =
        Command::new("podman").args(["image", "exists", IMAGE]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    status.is_ok_and(|s| s.success())
}
