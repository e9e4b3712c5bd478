//! `nexo plugins`: the plugin versions, and the authority each asks for,
//! that the operator accepted; and the check `nexo run` makes before a
//! plugin runs. The decisions are [`nexo::acceptance`]'s.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use nexo::acceptance::{Acceptances, Accepted, Consent, FirstUse, Refused, Requested};
use nexo::agent_file::AgentFile;
use nexo::manifest::AgentManifest;
use nexo::registry::PluginReference;
use nexo::{Engine, Plugin};

/// `nexo plugins …`.
#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// Accept a plugin's current version and the authority it asks for (a new version that asks
    /// for more is refused until accepted).
    Accept {
        /// The plugin: a `.wasm` component or a declarative `.toml` agent.
        reference: String,
        #[command(flatten)]
        config: super::registry::ConfigArgs,
    },
    /// List the accepted plugins: reference, digest, when, and what each asks for.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// A reference resolved to what acceptance decides on.
struct Resolved {
    /// The key it is remembered by.
    reference: String,
    /// The version's digest.
    digest: String,
    /// What the version asks for.
    requested: Requested,
}

/// `nexo plugins`.
/// `registries` are the operator's registry settings.
pub async fn command(command: &PluginsCommand, engine: &Engine, registries: &nexo::registry::Registries) -> ExitCode {
    let book = match book() {
        Ok(b) => b,
        Err(e) => return refused(&e, false),
    };
    match command {
        PluginsCommand::Accept { reference, .. } => {
            let resolved = match resolve(engine, reference, registries).await {
                Ok(r) => r,
                Err(code) => return code,
            };
            match book.accept(&resolved.reference, &resolved.digest, &resolved.requested) {
                Ok(accepted) => {
                    if let Some(note) = accepted.note(&resolved.reference, &resolved.digest)
                        && accepted != Accepted::First
                    {
                        errln!("{note}");
                    }
                    outln!("accepted {} {}", resolved.reference, resolved.digest);
                    // What was accepted, so the operator sees it rather than takes it on trust.
                    let asks = serde_json::to_string(&resolved.requested).unwrap_or_default();
                    errln!("it asks for: {asks}");
                    ExitCode::SUCCESS
                }
                Err(e) => refused(&e, false),
            }
        }
        PluginsCommand::List { json } => match book.list() {
            Ok(entries) if *json => {
                nexo::terminal::print_json(&serde_json::json!(entries));
                ExitCode::SUCCESS
            }
            Ok(entries) => {
                for (reference, entry) in &entries {
                    let asks = serde_json::to_string(&entry.authority).unwrap_or_default();
                    outln!("{reference}  {}  {}  {asks}", entry.digest, entry.accepted_at);
                }
                if entries.is_empty() {
                    errln!("no plugin accepted yet (in {})", book.path().display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => refused(&e, false),
        },
    }
}

/// The check `nexo run` and `nexo chat` make before anything of the run
/// starts, on the very agent the run will run (its manifest and SHA-256,
/// from the one load the run uses, so the file cannot change between the
/// check and the run): a plugin that asks for
/// more than its accepted version did is refused (exit 2), unless `accept`
/// (`--accept-authority`) accepts it for good. `file` is where it was
/// loaded from; `origin` is the registry reference it was pulled as (at the
/// digest it resolved to): the plugin is then remembered by its repository
/// instead of its cached file.
pub fn check_run(
    manifest: &AgentManifest,
    sha256: &str,
    file: &Path,
    origin: Option<&PluginReference>,
    accept: bool,
    json: bool,
) -> Result<(), ExitCode> {
    let consent = if accept { Consent::Given } else { Consent::Standing };
    admit(manifest, sha256, file, origin, consent).map_err(|e| refused(&e, json))
}

/// The acceptance decision on the agent `manifest` describes, whose
/// SHA-256 is `sha256`, loaded from `file` (pulled as `origin`): `Ok` if it
/// may run, with a note on stderr when a new version was accepted.
pub fn admit(
    manifest: &AgentManifest,
    sha256: &str,
    file: &Path,
    origin: Option<&PluginReference>,
    consent: Consent,
) -> Result<(), Refused> {
    let reference = match origin {
        Some(pinned) => pinned.repository(),
        None => nexo::acceptance::file_reference(file)?,
    };
    let digest = nexo::acceptance::file_digest(sha256);
    let requested = Requested::of_agent(manifest);
    match book()?.check(&reference, &digest, &requested, consent) {
        Ok(accepted) => {
            say(&accepted, &reference, &digest);
            Ok(())
        }
        Err(e) => Err(match origin {
            Some(pinned) => e.accept_as(pinned.to_string()),
            None => e,
        }),
    }
}

/// What the operator is told of a version that passed. A first use is the
/// operator's own choice of the plugin: said at -v, not to every run.
fn say(accepted: &Accepted, reference: &str, digest: &str) {
    match accepted.note(reference, digest) {
        Some(note) if *accepted == Accepted::First => tracing::info!("{note}"),
        Some(note) => errln!("note: {note}"),
        None => {}
    }
}

/// The acceptance decision on a search backend pulled as `reference` (at
/// its digest) and cached at `file`: remembered by its repository, as an
/// agent from a registry is, by what its manifest asks for (its hosts).
/// `accept`: the operator consents (`nexo run --accept-authority`).
pub async fn admit_backend(
    engine: &Engine,
    file: &Path,
    reference: &PluginReference,
    accept: bool,
) -> Result<(), ExitCode> {
    let resolved = resolve_file(engine, file).await.map_err(|e| match e {
        Unresolved::Load(e) => super::report::fail(&e.into()),
        Unresolved::Refused(e) => refused(&e, false),
    })?;
    let repository = reference.repository();
    let consent = if accept { Consent::Given } else { Consent::Standing };
    let decided = book().and_then(|b| b.check(&repository, &resolved.digest, &resolved.requested, consent));
    match decided {
        Ok(accepted) => {
            say(&accepted, &repository, &resolved.digest);
            Ok(())
        }
        Err(e) => Err(refused(&e.accept_as(reference.to_string()), false)),
    }
}

fn book() -> Result<Acceptances, Refused> {
    Ok(Acceptances::new(nexo::acceptance::default_path()?, FirstUse::Accept))
}

/// Resolves a reference the operator typed: a file, or a registry
/// reference (pulled into the cache if needed), remembered by its
/// repository.
async fn resolve(
    engine: &Engine,
    reference: &str,
    registries: &nexo::registry::Registries,
) -> Result<Resolved, ExitCode> {
    let mut path = std::path::PathBuf::from(reference);
    let origin = super::registry::resolve(&mut path, registries).await?;
    let resolved = resolve_file(engine, &path).await.map_err(|e| match e {
        Unresolved::Load(e) => super::report::fail(&e.into()),
        Unresolved::Refused(e) => refused(&e, false),
    })?;
    Ok(Resolved { reference: origin.as_ref().map_or(resolved.reference.clone(), |(r, _)| r.repository()), ..resolved })
}

/// Why a file could not be resolved.
enum Unresolved {
    Load(nexo::LoadError),
    Refused(Refused),
}

/// A file's reference (its canonical path), digest and asks.
async fn resolve_file(engine: &Engine, file: &Path) -> Result<Resolved, Unresolved> {
    let reference = nexo::acceptance::file_reference(file).map_err(Unresolved::Refused)?;
    let (sha256, requested) = if super::report::is_toml(file) {
        let agent = AgentFile::load(file).map_err(Unresolved::Load)?;
        (agent.sha256().to_string(), Requested::of_agent(agent.manifest()))
    } else {
        let plugin = Plugin::load(engine, file).await.map_err(Unresolved::Load)?;
        (plugin.sha256().to_string(), Requested::of(plugin.description()))
    };
    Ok(Resolved { reference, digest: nexo::acceptance::file_digest(&sha256), requested })
}

fn refused(e: &Refused, json: bool) -> ExitCode {
    if json {
        nexo::terminal::print_json(&serde_json::json!({ "status": "refused", "error": e.to_string() }));
    }
    errln!("error: {e}");
    ExitCode::from(2)
}
