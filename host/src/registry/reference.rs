//! Telling a registry reference from a file path.
//!
//! A plugin argument is a registry reference only when it cannot be a path
//! nexo would load:
//!
//! - a file or directory that exists is always a path;
//! - `oci://HOST/REPO:TAG` is always a reference (the prefix is dropped);
//! - otherwise it is a reference when the part before its first `/` names a
//!   registry host: it holds a dot (`ghcr.io`) or a port (`127.0.0.1:5000`),
//!   or is `localhost`, and it does not start with a dot (`./`, `../`), and
//!   the argument does not end in `.wasm` or `.toml`.
//!
//! So `plugins/echo.wasm` and `./echo.wasm` are paths, `ghcr.io/acme/echo:1`
//! and `localhost:5000/echo@sha256:…` are references, and a bare
//! `acme/echo:1` (which Docker would send to docker.io) is a path: nexo never
//! guesses a registry.

use std::fmt;
use std::path::{Path, PathBuf};

use oci_client::Reference;

use super::error::RegistryError;

/// The prefix that makes any argument a registry reference.
pub const OCI_PREFIX: &str = "oci://";

/// What a plugin argument names.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file on this machine.
    Path(PathBuf),
    /// A component in a registry.
    Registry(PluginReference),
}

/// A registry host as nexo compares it: lowercase (host names are
/// case-insensitive), without the default HTTPS port, and one name for
/// Docker Hub.
pub fn canonical_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix(":443").unwrap_or(&host);
    match host {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => "index.docker.io".to_string(),
        other => other.to_string(),
    }
}

/// A registry reference: registry, repository, and a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginReference {
    inner: Reference,
}

impl PluginReference {
    /// Parses `text` (with or without the `oci://` prefix).
    pub fn parse(text: &str) -> Result<PluginReference, RegistryError> {
        let bare = text.strip_prefix(OCI_PREFIX).unwrap_or(text);
        // Host names are case-insensitive, and oci-client's Docker Hub rule
        // (`library/`) reads the lowercase name: one spelling for all.
        let bare = match bare.split_once('/') {
            Some((host, rest)) => format!("{}/{rest}", host.to_ascii_lowercase()),
            None => bare.to_string(),
        };
        let bare = bare.as_str();
        let inner: Reference = bare.parse().map_err(|e: oci_client::ParseError| RegistryError::BadReference {
            reference: text.to_string(),
            reason: e.to_string(),
        })?;
        if !names_registry(bare) {
            return Err(RegistryError::BadReference {
                reference: text.to_string(),
                reason: "it names no registry host".into(),
            });
        }
        Ok(PluginReference { inner })
    }

    /// The same repository at `digest` (`sha256:…`): what a pinned pull fetches.
    pub fn at_digest(&self, digest: &str) -> PluginReference {
        PluginReference {
            inner: Reference::with_digest(
                self.inner.registry().to_string(),
                self.inner.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    /// The registry's host and port, as the insecure list and credentials name it.
    pub fn registry(&self) -> &str {
        self.inner.resolve_registry()
    }

    /// The registry and repository, without tag or digest: what the
    /// operator's acceptance of a plugin is remembered by, whichever
    /// version a tag names.
    pub fn repository(&self) -> String {
        // One plugin, one key, however its host is spelled: a tenant's
        // acceptance must not be sidestepped by writing `HOST:443`.
        format!("{}/{}", canonical_host(self.inner.resolve_registry()), self.inner.repository())
    }

    /// The digest the reference pins, if it pins one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The reference as oci-client takes it.
    pub fn oci(&self) -> &Reference {
        &self.inner
    }
}

impl fmt::Display for PluginReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner.whole())
    }
}

/// Whether the part before the first `/` is a registry host.
fn names_registry(text: &str) -> bool {
    let Some((host, rest)) = text.split_once('/') else { return false };
    !rest.is_empty() && !host.starts_with('.') && (host.contains('.') || host.contains(':') || host == "localhost")
}

/// Whether `arg` would be taken as a registry reference (see the module's rule).
pub fn is_reference(arg: &Path) -> bool {
    arg.to_str().is_some_and(|t| t.starts_with(OCI_PREFIX)) || (!arg.exists() && names_registry_text(arg))
}

/// Whether `arg`'s text names a registry reference, whatever files there
/// are: `oci://…`, or `host[:port]/repository[:tag|@digest]` that does not
/// end in `.wasm` or `.toml`. [`is_reference`] also lets a file of that
/// name win.
pub fn names_registry_text(arg: &Path) -> bool {
    let Some(text) = arg.to_str() else { return false };
    if text.starts_with(OCI_PREFIX) {
        return true;
    }
    if text.ends_with(".wasm") || text.ends_with(".toml") {
        return false;
    }
    names_registry(text)
}

/// The reference a path that exists would be, had it not existed: a file
/// named `ghcr.io/acme/agent:1` in the working directory shadows that
/// reference. `None` for paths that cannot be read as one (`./x`, `/x`,
/// `x.wasm`, …).
pub fn shadowed(arg: &Path) -> Option<PluginReference> {
    let text = arg.to_str()?;
    if text.starts_with(OCI_PREFIX) || text.ends_with(".wasm") || text.ends_with(".toml") || !names_registry(text) {
        return None;
    }
    PluginReference::parse(text).ok()
}

/// What `arg` names, by the module's rule.
pub fn classify(arg: &Path) -> Result<Source, RegistryError> {
    if !is_reference(arg) {
        return Ok(Source::Path(arg.to_path_buf()));
    }
    let text = arg.to_str().unwrap_or_default();
    Ok(Source::Registry(PluginReference::parse(text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_references_follow_the_rule() {
        for path in ["plugins/echo.wasm", "./echo", "../a/b", "acme/echo:1", "echo", "/abs/x", "a.b/c.wasm"] {
            assert!(!is_reference(Path::new(path)), "{path} is a path");
        }
        for reference in
            ["ghcr.io/acme/echo:1", "127.0.0.1:5000/nexo/echo:1.2", "localhost/echo@sha256:00", "oci://acme/echo:1"]
        {
            assert!(is_reference(Path::new(reference)), "{reference} is a reference");
        }
    }

    #[test]
    fn a_reference_keeps_its_registry_and_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let r = PluginReference::parse(&format!("127.0.0.1:5000/nexo/echo@{digest}")).unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.digest(), Some(digest.as_str()));
        let tagged = PluginReference::parse("oci://127.0.0.1:5000/nexo/echo:1").unwrap();
        assert_eq!(tagged.at_digest(&digest).to_string(), format!("127.0.0.1:5000/nexo/echo@{digest}"));
        assert!(matches!(PluginReference::parse("oci://echo"), Err(RegistryError::BadReference { .. })));
    }

    /// One plugin is remembered under one key, however its host is spelled.
    #[test]
    fn the_repository_key_ignores_the_hosts_case() {
        let upper = PluginReference::parse("Registry.Example:5000/acme/echo:1").unwrap();
        let lower = PluginReference::parse("registry.example:5000/acme/echo:2").unwrap();
        assert_eq!(upper.repository(), "registry.example:5000/acme/echo");
        assert_eq!(upper.repository(), lower.repository());
        let hub = PluginReference::parse("Docker.IO/nginx:1").unwrap();
        assert_eq!(hub.repository(), PluginReference::parse("docker.io/nginx:1").unwrap().repository());
        assert_eq!(hub.repository(), "index.docker.io/library/nginx");
        let port = PluginReference::parse("Registry.Example:443/acme/echo:2").unwrap();
        assert_eq!(port.repository(), "registry.example/acme/echo", "the default port is no other plugin");
    }
}
