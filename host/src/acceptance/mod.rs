//! Acceptance: which version of each plugin the operator accepted, and the
//! authority it asked for, so that a new version that asks for more is
//! refused until the operator accepts it.
//!
//! A plugin is remembered by its *reference*: a registry repository
//! without tag or digest, or a file's canonical path. Each reference keeps
//! the digest and the [`Requested`] authority last accepted, in one file
//! only the operator reads and writes ([`default_path`], mode 0600, written
//! whole or not at all). [`Acceptances::check`] decides, where a reference
//! has been resolved to a digest and loaded:
//!
//! - the accepted digest passes;
//! - a new digest asking for the same or less passes, is recorded, and is
//!   noted ([`Accepted::note`]);
//! - a new digest asking for more is refused with each new ask named
//!   ([`Refused::Wider`]) unless the operator consents ([`Consent::Given`]:
//!   `nexo plugins accept REF`, `nexo run --accept-authority`);
//! - a reference never seen is accepted and recorded by default (trust on
//!   first use, [`FirstUse::Accept`]): naming a plugin to run is the
//!   operator's choice of it, and the grant, not this record, bounds what
//!   it may do; what the record adds is that a later version cannot widen
//!   its asks unnoticed under a grant broad enough to give them.
//!   [`FirstUse::Refuse`] makes every new reference wait for an explicit
//!   acceptance, for operators who vet each plugin first.

pub mod requested;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use requested::{Ask, Diff, Requested};

/// The environment variable that names the acceptance file itself.
pub const FILE_ENV: &str = "NEXO_ACCEPTED_PLUGINS";

/// Where the operator's acceptances are kept: `$NEXO_ACCEPTED_PLUGINS`,
/// else `accepted-plugins.json` in `$XDG_DATA_HOME/nexo`, else in
/// `~/.local/share/nexo` (beside the default store).
pub fn default_path() -> Result<PathBuf, Refused> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(file) = var(FILE_ENV) {
        return Ok(file);
    }
    let data = var("XDG_DATA_HOME").or_else(|| var("HOME").map(|h| h.join(".local").join("share")));
    match data {
        Some(dir) => Ok(dir.join("nexo").join("accepted-plugins.json")),
        None => Err(Refused::File {
            path: PathBuf::from("accepted-plugins.json"),
            reason: format!("neither $HOME nor $XDG_DATA_HOME is set: set ${FILE_ENV} to a file"),
        }),
    }
}

/// The reference of a plugin given as a file: its canonical path, so that
/// every way of naming the file is one reference.
pub fn file_reference(path: &Path) -> Result<String, Refused> {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| Refused::File { path: path.to_path_buf(), reason: e.to_string() })
}

/// The digest of a file's bytes, in the form registries use (`sha256:HEX`).
pub fn file_digest(sha256_hex: &str) -> String {
    format!("sha256:{sha256_hex}")
}

/// What the operator accepted for one reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Entry {
    /// The accepted version's digest (`sha256:HEX`).
    pub digest: String,
    /// What that version asks for.
    pub authority: Requested,
    /// When it was accepted (RFC 3339, UTC).
    pub accepted_at: String,
}

/// The file's form.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Book {
    version: u32,
    plugins: BTreeMap<String, Entry>,
}

const VERSION: u32 = 1;

/// What a reference never seen before gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FirstUse {
    /// Accepted and recorded (trust on first use). The default.
    #[default]
    Accept,
    /// Refused until the operator accepts it.
    Refuse,
}

/// Whether the operator consents to this version's authority now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consent {
    /// No: only what [`Acceptances::check`] lets through by itself passes.
    Standing,
    /// Yes: any ask is accepted and recorded.
    Given,
}

/// Why a version passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// The reference was not known: this version is now the accepted one.
    First,
    /// The digest accepted before.
    Same,
    /// A new digest that asks for no more (perhaps less); now the accepted one.
    Changed {
        /// The digest accepted before.
        was: String,
        /// How its asks differ (`wider` empty unless consent was given).
        diff: Diff,
    },
}

impl Accepted {
    /// What the operator should be told, if anything.
    pub fn note(&self, reference: &str, digest: &str) -> Option<String> {
        match self {
            Accepted::First => {
                Some(format!("first use of {reference}: accepted {} and the authority it asks for", short(digest)))
            }
            Accepted::Same => None,
            Accepted::Changed { was, diff } => {
                let mut note = format!("{reference} changed from {} to {}", short(was), short(digest));
                if !diff.wider.is_empty() {
                    note.push_str(&format!("; accepted its new asks: {}", requested::list(&diff.wider)));
                }
                if !diff.narrower.is_empty() {
                    note.push_str(&format!("; it no longer asks for {}", requested::list(&diff.narrower)));
                }
                if diff.is_empty() {
                    note.push_str(": it asks for the same authority");
                }
                Some(note)
            }
        }
    }
}

/// Why a version may not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// It asks for more than the accepted version did.
    #[error(
        "{reference} changed from {} to {}, and the new version asks for more authority than the one accepted: \
         {}. Review it (`nexo inspect`), then accept it with `nexo plugins accept {accept_as}` \
         (or with `--accept-authority` on the `nexo run` or `nexo mcp serve` that uses it)",
        short(.accepted), short(.digest), requested::list(.asks)
    )]
    Wider {
        /// The reference.
        reference: String,
        /// What names this very version to `nexo plugins accept`.
        accept_as: String,
        /// The new version's digest.
        digest: String,
        /// The accepted version's digest.
        accepted: String,
        /// Each new ask.
        asks: Vec<Ask>,
    },
    /// The reference was never accepted, and first use needs acceptance.
    #[error(
        "{reference} ({}) has not been accepted: review it (`nexo inspect`), then accept it with \
         `nexo plugins accept {accept_as}` (or with `--accept-authority` on the `nexo run` or `nexo mcp serve` that uses it)",
        short(.digest)
    )]
    NotAccepted {
        /// The reference.
        reference: String,
        /// What names this very version to `nexo plugins accept`.
        accept_as: String,
        /// Its digest.
        digest: String,
    },
    /// The acceptance file cannot be read or written: nothing is accepted
    /// while it is unreadable, since an empty record would accept anything.
    #[error("cannot use the plugin acceptance file {}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

impl Refused {
    /// The same refusal, telling the operator to accept `name`: what names
    /// the refused version exactly (a registry reference at its digest,
    /// where the repository the record keeps would name a tag's latest).
    pub fn accept_as(self, name: String) -> Refused {
        match self {
            Refused::Wider { reference, digest, accepted, asks, .. } => {
                Refused::Wider { reference, accept_as: name, digest, accepted, asks }
            }
            Refused::NotAccepted { reference, digest, .. } => {
                Refused::NotAccepted { reference, accept_as: name, digest }
            }
            other => other,
        }
    }
}

/// The one decision, wherever the record is kept: whether `digest` of
/// `reference`, asking for `requested`, may run, given the version accepted
/// before (`previous`: its digest and asks). Anything but
/// [`Accepted::Same`] is to be recorded as the accepted version.
pub fn decide(
    previous: Option<(&str, &Requested)>,
    reference: &str,
    digest: &str,
    requested: &Requested,
    consent: Consent,
    first_use: FirstUse,
) -> Result<Accepted, Refused> {
    match previous {
        Some((was, authority)) if was == digest && authority == requested => Ok(Accepted::Same),
        None if consent == Consent::Standing && first_use == FirstUse::Refuse => Err(Refused::NotAccepted {
            reference: reference.into(),
            accept_as: reference.into(),
            digest: digest.into(),
        }),
        None => Ok(Accepted::First),
        Some((was, authority)) => {
            let diff = requested.diff(authority);
            if !diff.wider.is_empty() && consent == Consent::Standing {
                return Err(Refused::Wider {
                    reference: reference.into(),
                    accept_as: reference.into(),
                    digest: digest.into(),
                    accepted: was.into(),
                    asks: diff.wider,
                });
            }
            Ok(Accepted::Changed { was: was.into(), diff })
        }
    }
}

/// The operator's acceptance file.
#[derive(Debug, Clone)]
pub struct Acceptances {
    path: PathBuf,
    first_use: FirstUse,
}

impl Acceptances {
    /// The acceptances kept in `path` (which need not exist yet).
    pub fn new(path: impl Into<PathBuf>, first_use: FirstUse) -> Acceptances {
        Acceptances { path: path.into(), first_use }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every accepted reference.
    pub fn list(&self) -> Result<BTreeMap<String, Entry>, Refused> {
        Ok(self.read()?.plugins)
    }

    /// Decides whether `digest` of `reference`, asking for `requested`, may
    /// run, and records it if it passes with a change.
    pub fn check(
        &self,
        reference: &str,
        digest: &str,
        requested: &Requested,
        consent: Consent,
    ) -> Result<Accepted, Refused> {
        let _lock = self.lock()?;
        let mut book = self.read()?;
        let previous = book.plugins.get(reference).map(|e| (e.digest.as_str(), &e.authority));
        let accepted = decide(previous, reference, digest, requested, consent, self.first_use)?;
        if accepted == Accepted::Same {
            return Ok(accepted);
        }
        let entry = Entry {
            digest: digest.into(),
            authority: requested.clone(),
            accepted_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        };
        book.plugins.insert(reference.into(), entry);
        self.write(&book)?;
        Ok(accepted)
    }

    /// Accepts `digest` of `reference` and what it asks for, whatever was
    /// accepted before.
    pub fn accept(&self, reference: &str, digest: &str, requested: &Requested) -> Result<Accepted, Refused> {
        self.check(reference, digest, requested, Consent::Given)
    }

    fn failed(&self, e: impl std::fmt::Display) -> Refused {
        Refused::File { path: self.path.clone(), reason: e.to_string() }
    }

    fn read(&self) -> Result<Book, Refused> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Book { version: VERSION, ..Book::default() }),
            Err(e) => return Err(self.failed(e)),
        };
        let book: Book = serde_json::from_str(&text).map_err(|e| self.failed(format!("{e}: fix or remove it")))?;
        if book.version != VERSION {
            return Err(self.failed(format!("version {} is not {VERSION}: a newer nexo wrote it", book.version)));
        }
        Ok(book)
    }

    fn write(&self, book: &Book) -> Result<(), Refused> {
        let mut text = serde_json::to_string_pretty(book).map_err(|e| self.failed(e))?;
        text.push('\n');
        // The temporary file is created 0600 and renamed over the old one.
        crate::data_dir::write_atomically(&self.path, text.as_bytes()).map_err(|e| self.failed(e))
    }

    /// Holds the lock beside the file while a decision reads and rewrites
    /// it, so that two runs deciding at once lose neither's record (a lost
    /// record would make its reference new again, and accepted on sight).
    fn lock(&self) -> Result<File, Refused> {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        let path = self.path.with_file_name(name);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.failed(e))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(|e| self.failed(e))?;
        file.lock().map_err(|e| self.failed(e))?;
        Ok(file)
    }
}

/// A digest cut to what a person compares: `sha256:` and 12 hex digits.
pub fn short(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(caps: &[&str]) -> Requested {
        let caps: Vec<String> = caps.iter().map(|c| format!("\"{c}\"")).collect();
        let m: crate::manifest::AgentManifest =
            toml::from_str(&format!("capabilities = [{}]", caps.join(", "))).unwrap_or_else(|e| panic!("{e}"));
        Requested::of_agent(&m)
    }

    #[test]
    fn first_use_same_narrower_wider_and_consent() {
        let dir = tempfile::tempdir().unwrap();
        let book = Acceptances::new(dir.path().join("sub/accepted.json"), FirstUse::Accept);
        let (a, b, c) = ("sha256:aaaa", "sha256:bbbb", "sha256:cccc");
        let read = agent(&["read"]);
        assert_eq!(book.check("r", a, &read, Consent::Standing), Ok(Accepted::First));
        assert_eq!(book.check("r", a, &read, Consent::Standing), Ok(Accepted::Same));
        let shell = agent(&["read", "shell"]);
        let refused = book.check("r", b, &shell, Consent::Standing).unwrap_err();
        let text = refused.to_string();
        assert!(text.contains("capability `shell`") && text.contains("nexo plugins accept r"), "{text}");
        // Refused: nothing recorded.
        assert_eq!(book.list().unwrap()["r"].digest, a);
        let given = book.check("r", b, &shell, Consent::Given).unwrap();
        assert!(given.note("r", b).unwrap().contains("accepted its new asks: capability `shell`"), "{given:?}");
        assert_eq!(book.check("r", b, &shell, Consent::Standing), Ok(Accepted::Same));
        let narrower = book.check("r", c, &read, Consent::Standing).unwrap();
        assert!(narrower.note("r", c).unwrap().contains("no longer asks for capability `shell`"), "{narrower:?}");
        assert_eq!(book.list().unwrap()["r"].digest, c);
        // Other references are their own.
        assert_eq!(book.check("s", a, &shell, Consent::Standing), Ok(Accepted::First));
    }

    #[test]
    fn refuse_until_accepted_and_an_unreadable_file_accepts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let book = Acceptances::new(dir.path().join("accepted.json"), FirstUse::Refuse);
        let read = agent(&["read"]);
        assert!(matches!(book.check("r", "sha256:aa", &read, Consent::Standing), Err(Refused::NotAccepted { .. })));
        assert_eq!(book.accept("r", "sha256:aa", &read), Ok(Accepted::First));
        assert_eq!(book.check("r", "sha256:aa", &read, Consent::Standing), Ok(Accepted::Same));
        std::fs::write(book.path(), "{not json").unwrap();
        let lenient = Acceptances::new(book.path(), FirstUse::Accept);
        assert!(matches!(lenient.check("new", "sha256:aa", &read, Consent::Standing), Err(Refused::File { .. })));
    }

    #[test]
    fn digests_are_cut_for_people() {
        assert_eq!(short("sha256:0123456789abcdef"), "sha256:0123456789ab");
        assert_eq!(short("abc"), "abc");
    }
}
