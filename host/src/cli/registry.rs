//! `nexo pull` and `nexo push`, and the registry references the other
//! commands take where they take a plugin's path: thin front ends over
//! [`nexo::registry`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use nexo::registry::{self, PluginReference, RegistryClient, RegistryError};

/// The registry flags every command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// Reach this registry (HOST:PORT, as references name it) over plain HTTP (repeatable; adds to
    /// the config file's `[registries] insecure`). Every other registry is reached over HTTPS.
    #[arg(long = "insecure-registry", global = true, value_name = "HOST:PORT")]
    pub insecure: Vec<String>,
}

impl RegistryArgs {
    /// The insecure registries: the config file's, then the flags'.
    pub fn insecure(&self, file: &nexo::config::ConfigFile) -> Vec<String> {
        file.registries.insecure.iter().chain(&self.insecure).cloned().collect()
    }
}

/// The config file of `nexo pull` and `nexo push`.
#[derive(Args, Debug, Clone, Default)]
pub struct ConfigArgs {
    /// The operator's config file: its `[registries]` table.
    #[arg(long, value_name = "FILE", env = "NEXO_CONFIG")]
    config: Option<PathBuf>,
}

impl ConfigArgs {
    /// The config file, if one was given.
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }
}

/// Makes `arg` a local file if it is a registry reference (pulled into the
/// cache, or found there), and says so on stderr; a path is left alone.
/// Returns the reference it was, at the manifest digest it resolved to.
pub async fn resolve(arg: &mut PathBuf, insecure: &[String]) -> Result<Option<PluginReference>, ExitCode> {
    if !registry::is_reference(arg) {
        return Ok(None);
    }
    match registry::resolve(arg, insecure, None).await {
        Ok(resolved) => {
            if let Some((reference, pulled)) = &resolved.pulled
                && !pulled.cached
            {
                errln!("pulled {reference} ({})", pulled.manifest_digest);
            }
            *arg = resolved.path;
            // At the digest it resolved to: what names this very version.
            Ok(resolved.pulled.map(|(reference, pulled)| reference.at_digest(&pulled.manifest_digest)))
        }
        Err(e) => Err(failed(&e)),
    }
}

/// `nexo pull REF`: prints the manifest digest and the cached file.
pub async fn pull(text: &str, insecure: &[String]) -> ExitCode {
    let prefix = registry::reference::OCI_PREFIX;
    // Any argument is a reference here, even one that is also a path.
    let arg = PathBuf::from(format!("{prefix}{}", text.strip_prefix(prefix).unwrap_or(text)));
    match registry::resolve(&arg, insecure, None).await {
        Ok(registry::Resolved { path, pulled: Some((reference, pulled)) }) => {
            outln!("{}", pulled.manifest_digest);
            outln!("{}", path.display());
            let how = if pulled.cached { "already cached" } else { "pulled" };
            errln!("{how} {reference}: component {}", pulled.layer_digest);
            ExitCode::SUCCESS
        }
        Ok(registry::Resolved { pulled: None, .. }) => {
            errln!("error: `{text}` is not a registry reference");
            ExitCode::from(2)
        }
        Err(e) => failed(&e),
    }
}

/// `nexo push FILE REF`: prints the manifest digest.
pub async fn push(file: &Path, text: &str, insecure: &[String]) -> ExitCode {
    let reference = match PluginReference::parse(text) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    let client = match RegistryClient::new(insecure) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match registry::push(&client, file, &reference).await {
        Ok(pushed) => {
            outln!("{}", pushed.manifest_digest);
            errln!("pushed {reference} (component {})", pushed.layer_digest);
            ExitCode::SUCCESS
        }
        Err(e) => failed(&e),
    }
}

fn failed(e: &RegistryError) -> ExitCode {
    errln!("error: {e}");
    ExitCode::from(2)
}
