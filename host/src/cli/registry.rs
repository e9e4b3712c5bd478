//! `nexo pull` and `nexo push`, and the registry references the other
//! commands take where they take a plugin's path: thin front ends over
//! [`nexo::registry`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use nexo::registry::{self, PluginReference, Registries, RegistryClient, RegistryError};

/// The registry flags every command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// Reach this registry (HOST:PORT, as references name it) over plain HTTP (repeatable; adds to
    /// the config file's `[registries] insecure`). Every other registry is reached over HTTPS.
    #[arg(long = "insecure-registry", global = true, value_name = "HOST:PORT")]
    pub insecure: Vec<String>,
}

impl RegistryArgs {
    /// The config file's `[registries]` with the flags' insecure registries
    /// added; `config` is the file's path (relative key paths start there).
    pub fn registries(&self, file: &nexo::config::ConfigFile, config: Option<&Path>) -> Result<Registries, ExitCode> {
        Registries::new(&file.registries, &self.insecure, &registry::trust_base_dir(config)).map_err(|e| failed(&e))
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
/// Returns the reference it was, at the manifest digest it resolved to,
/// and what its signature check found.
pub async fn resolve(
    arg: &mut PathBuf,
    registries: &Registries,
) -> Result<Option<(PluginReference, registry::Signature)>, ExitCode> {
    if !registry::is_reference(arg) {
        return registry::refuse_shadow(arg, registries).map(|()| None).map_err(|e| failed(&e));
    }
    match registry::resolve(arg, registries, None).await {
        Ok(resolved) => {
            if let Some((reference, pulled)) = &resolved.pulled {
                if !pulled.cached {
                    errln!("pulled {reference} ({})", pulled.manifest_digest);
                }
                // Where the operator has trust rules, "not checked" is news too.
                if pulled.signature != registry::Signature::NotChecked || !registries.trust.is_empty() {
                    errln!("{reference}: {}", pulled.signature);
                }
            }
            *arg = resolved.path;
            // At the digest it resolved to: what names this very version.
            Ok(resolved
                .pulled
                .map(|(reference, pulled)| (reference.at_digest(&pulled.manifest_digest), pulled.signature)))
        }
        Err(e) => Err(failed(&e)),
    }
}

/// `nexo pull REF`: prints the manifest digest and the cached file.
pub async fn pull(text: &str, registries: &Registries) -> ExitCode {
    let prefix = registry::reference::OCI_PREFIX;
    // Any argument is a reference here, even one that is also a path.
    let arg = PathBuf::from(format!("{prefix}{}", text.strip_prefix(prefix).unwrap_or(text)));
    match registry::resolve(&arg, registries, None).await {
        Ok(registry::Resolved { path, pulled: Some((reference, pulled)) }) => {
            outln!("{}", pulled.manifest_digest);
            outln!("{}", path.display());
            let how = if pulled.cached { "already cached" } else { "pulled" };
            errln!("{how} {reference}: component {}; {}", pulled.layer_digest, pulled.signature);
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

/// `nexo sign --key KEY REF`, or `nexo sign --generate-key PREFIX`.
pub async fn sign(args: &SignArgs, registries: &Registries) -> ExitCode {
    let password = std::env::var(registry::SIGNING_PASSWORD_VAR).ok().map(zeroize::Zeroizing::new);
    if let Some(prefix) = &args.generate_key {
        let Some(password) = password.filter(|p| !p.is_empty()) else {
            errln!(
                "error: set {} to the password that will encrypt the new private key",
                registry::SIGNING_PASSWORD_VAR
            );
            return ExitCode::from(2);
        };
        return match registry::SigningKey::generate(prefix, password.as_bytes()) {
            Ok((private, public)) => {
                outln!("{}", public.display());
                errln!(
                    "wrote {} (the private key, encrypted; keep it secret) and {} (the public key operators trust)",
                    private.display(),
                    public.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => failed(&e),
        };
    }
    let (Some(key), Some(text)) = (&args.key, &args.reference) else {
        errln!("error: give the key and the reference: `nexo sign --key KEY REF` (or `--generate-key PREFIX`)");
        return ExitCode::from(2);
    };
    let signed = async {
        let key = registry::SigningKey::load(key, password.as_ref().map(|p| p.as_bytes()))?;
        let reference = PluginReference::parse(text)?;
        let client = RegistryClient::new(&registries.insecure)?;
        let signed = registry::sign(&client, &reference, &key).await?;
        Ok::<_, RegistryError>((key, reference, signed))
    };
    match signed.await {
        Ok((key, reference, signed)) => {
            outln!("{}", signed.digest);
            let what = if signed.already { "was already signed" } else { "signed" };
            errln!("{reference} ({}) {what} by {}; {} signature(s) in all", signed.digest, key.id, signed.signatures);
            ExitCode::SUCCESS
        }
        Err(e) => failed(&e),
    }
}

/// The arguments of `nexo sign`.
#[derive(Args, Debug, Clone)]
pub struct SignArgs {
    /// The private key (cosign's `cosign.key`, password in COSIGN_PASSWORD, or a plain PKCS#8 PEM).
    #[arg(long, value_name = "KEY", required_unless_present = "generate_key")]
    pub key: Option<PathBuf>,
    /// HOST[:PORT]/REPOSITORY:TAG or @sha256:HEX: a tag is resolved once, and its digest is signed.
    #[arg(required_unless_present = "generate_key")]
    pub reference: Option<String>,
    /// Make a new key pair instead: PREFIX.key (encrypted with COSIGN_PASSWORD) and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["key", "reference"])]
    pub generate_key: Option<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

fn failed(e: &RegistryError) -> ExitCode {
    errln!("error: {e}");
    ExitCode::from(2)
}
