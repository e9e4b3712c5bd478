//! Whose signatures the operator trusts, and where: `[[registries.trust]]`
//! rules, each a scope (a registry, or a registry and a repository prefix),
//! the public keys that may sign there, and whether a signature is required.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};

use super::error::RegistryError;
use super::reference::PluginReference;

/// One `[[registries.trust]]` rule, as written.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrustRule {
    /// `HOST[:PORT]` or `HOST[:PORT]/REPOSITORY-PREFIX`: the references it
    /// covers (a prefix ends at a `/`).
    pub scope: String,
    /// PEM public keys (cosign's `cosign.pub`); relative paths are taken
    /// from the config file's directory.
    pub keys: Vec<PathBuf>,
    /// Whether a plugin in scope must carry a valid signature by one of the
    /// keys (the default), or is only checked and reported.
    #[serde(default = "required")]
    pub require: bool,
}

fn required() -> bool {
    true
}

/// A trusted public key, loaded.
pub struct TrustedKey {
    /// Its file name and fingerprint, as reports show it.
    pub id: KeyId,
    /// The PEM, checked to parse when loaded (sigstore's verifiers are not
    /// `Send`, and a server shares its keys across threads).
    pem: Vec<u8>,
}

impl TrustedKey {
    /// The sigstore constraint "signed by this key".
    pub(super) fn verifier(&self) -> Option<Box<dyn VerificationConstraint>> {
        PublicKeyVerifier::try_from(&self.pem).ok().map(|v| Box::new(v) as Box<dyn VerificationConstraint>)
    }
}

/// A key as people read it: where it came from and what it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyId {
    /// The key file's name (`team.pub`).
    pub name: String,
    /// `sha256:` and the hex SHA-256 of the key's DER encoding.
    pub fingerprint: String,
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.fingerprint)
    }
}

/// A rule with its keys loaded.
pub struct Trusted {
    /// The rule's scope, normalized (host lowercased).
    pub scope: String,
    /// Its keys.
    pub keys: Vec<TrustedKey>,
    /// Whether a valid signature is required.
    pub require: bool,
}

/// Every rule of the config file, loaded.
#[derive(Default)]
pub struct Trust {
    rules: Vec<Trusted>,
}

impl Trust {
    /// Loads `rules`' keys, relative paths from `base` (the config file's
    /// directory). A key that cannot be read or parsed is an error here,
    /// before anything is pulled: a typo must not turn into "nothing trusted".
    pub fn load(rules: &[TrustRule], base: &Path) -> Result<Trust, RegistryError> {
        let mut loaded: Vec<Trusted> = Vec::new();
        for rule in rules {
            let scope = normalize(&rule.scope);
            if !valid_scope(&scope) {
                return Err(RegistryError::BadTrust { scope: rule.scope.clone(), reason: SCOPE_FORM.into() });
            }
            // Two rules for one scope: which decides would depend on their order.
            if loaded.iter().any(|r| r.scope == scope) {
                return Err(RegistryError::BadTrust {
                    scope: rule.scope.clone(),
                    reason: "another rule has the same scope: merge their keys into one rule".into(),
                });
            }
            if rule.keys.is_empty() {
                return Err(RegistryError::BadTrust { scope: rule.scope.clone(), reason: "it lists no keys".into() });
            }
            let keys = rule.keys.iter().map(|k| load_key(&base.join(k), &rule.scope)).collect::<Result<_, _>>()?;
            loaded.push(Trusted { scope, keys, require: rule.require });
        }
        Ok(Trust { rules: loaded })
    }

    /// The most specific rule covering `reference`, if any: `*` covers
    /// every reference, a registry its repositories, a prefix the
    /// repositories under it.
    pub fn rule_for(&self, reference: &PluginReference) -> Option<&Trusted> {
        self.rules
            .iter()
            .filter(|r| covers(&r.scope, reference))
            .max_by_key(|r| if r.scope == EVERYWHERE { 0 } else { r.scope.len() })
    }

    /// Whether any rule is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Whether `scope` (as a rule or a tenant's policy writes it) is one.
pub fn check_scope(scope: &str) -> Result<(), String> {
    if valid_scope(&normalize(scope)) { Ok(()) } else { Err(SCOPE_FORM.to_string()) }
}

/// Whether `scope` covers `reference`: it is `*`, its registry, its
/// repository, or a prefix of it that ends at a `/`.
pub fn covers(scope: &str, reference: &PluginReference) -> bool {
    let scope = normalize(scope);
    let full = normalize(&reference.repository());
    let registry = full.split('/').next().unwrap_or_default();
    scope == EVERYWHERE || scope == registry || full == scope || full.starts_with(&format!("{scope}/"))
}

/// What a scope looks like, for errors.
const SCOPE_FORM: &str = "a scope is `*` (every registry), HOST[:PORT] or HOST[:PORT]/REPOSITORY-PREFIX, in \
                          lowercase letters, digits and `._-/`, with no tag or digest";

/// The scope that covers every reference.
const EVERYWHERE: &str = "*";

/// `*`, or `HOST[:PORT][/PREFIX]` in a reference's own characters: a colon
/// only before a port, no `@`, no empty segment.
fn valid_scope(scope: &str) -> bool {
    if scope == EVERYWHERE {
        return true;
    }
    let (host, rest) = scope.split_once('/').unwrap_or((scope, ""));
    let host_ok = match host.split_once(':') {
        Some((name, port)) => !name.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()),
        None => !host.is_empty(),
    };
    let chars_ok = scope.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b));
    host_ok && chars_ok && !rest.contains(':') && !scope.split('/').any(str::is_empty)
}

/// A scope or a reference's repository as they are compared: no scheme
/// prefix, no trailing `/`, lowercase (repositories are lowercase by the
/// spec), one name for Docker Hub and no default HTTPS port, so two
/// spellings of one place are one scope.
fn normalize(scope: &str) -> String {
    let scope =
        scope.trim().trim_start_matches(super::reference::OCI_PREFIX).trim_end_matches('/').to_ascii_lowercase();
    let (host, rest) = match scope.split_once('/') {
        Some((host, rest)) => (host, Some(rest)),
        None => (scope.as_str(), None),
    };
    let host = super::reference::canonical_host(host);
    match rest {
        Some(rest) => format!("{host}/{rest}"),
        None => host.to_string(),
    }
}

/// A PEM public key file as a trusted key.
fn load_key(path: &Path, scope: &str) -> Result<TrustedKey, RegistryError> {
    let bad = |reason: String| RegistryError::BadKey { path: path.to_path_buf(), scope: scope.to_string(), reason };
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let pem = pem::parse(&text).map_err(|e| bad(format!("not a PEM file: {e}")))?;
    if pem.tag() != "PUBLIC KEY" {
        return Err(bad(format!(
            "it holds a {}, not a PUBLIC KEY (give the .pub file, never the private key)",
            pem.tag()
        )));
    }
    PublicKeyVerifier::try_from(&text).map_err(|e| bad(e.to_string()))?;
    Ok(TrustedKey { id: key_id(path, pem.contents()), pem: text })
}

/// The id of the key whose DER encoding is `der`, read from `path`.
pub(super) fn key_id(path: &Path, der: &[u8]) -> KeyId {
    KeyId {
        name: path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        fingerprint: format!("sha256:{}", hex::encode(Sha256::digest(der))),
    }
}

/// Where a relative key path in the config file at `config` is taken from.
pub fn base_dir(config: Option<&Path>) -> PathBuf {
    config.and_then(Path::parent).map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust(scopes: &[&str]) -> Trust {
        Trust {
            rules: scopes.iter().map(|s| Trusted { scope: normalize(s), keys: Vec::new(), require: true }).collect(),
        }
    }

    fn scope_for(trust: &Trust, reference: &str) -> Option<String> {
        trust.rule_for(&PluginReference::parse(reference).unwrap()).map(|r| r.scope.clone())
    }

    #[test]
    fn the_most_specific_scope_covers_a_reference_and_prefixes_end_at_a_slash() {
        let t = trust(&["Reg.example:5000", "reg.example:5000/team", "reg.example:5000/team/agents/"]);
        assert_eq!(scope_for(&t, "reg.example:5000/other:1").as_deref(), Some("reg.example:5000"));
        assert_eq!(scope_for(&t, "reg.example:5000/team/x:1").as_deref(), Some("reg.example:5000/team"));
        assert_eq!(scope_for(&t, "reg.example:5000/team/agents/a:1").as_deref(), Some("reg.example:5000/team/agents"));
        // `team` does not cover `teammate`.
        assert_eq!(scope_for(&t, "reg.example:5000/teammate/x:1").as_deref(), Some("reg.example:5000"));
        assert_eq!(scope_for(&t, "other.example/team/x:1"), None);
    }

    #[test]
    fn two_spellings_of_one_place_are_one_scope_and_star_covers_the_rest() {
        let t = trust(&["docker.io/acme", "REG.example:443/team", "*"]);
        assert_eq!(scope_for(&t, "docker.io/acme/agent:1").as_deref(), Some("index.docker.io/acme"));
        assert_eq!(scope_for(&t, "index.docker.io/acme/agent:1").as_deref(), Some("index.docker.io/acme"));
        assert_eq!(scope_for(&t, "reg.example/team/agent:1").as_deref(), Some("reg.example/team"));
        assert_eq!(scope_for(&t, "reg.example:443/team/agent:1").as_deref(), Some("reg.example/team"));
        assert_eq!(scope_for(&t, "elsewhere.example/x:1").as_deref(), Some("*"));
    }

    #[test]
    fn a_bad_rule_is_refused_naming_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        let rule = |scope: &str, keys: Vec<PathBuf>| TrustRule { scope: scope.into(), keys, require: true };
        let err = Trust::load(&[rule("reg.example/team", vec![])], dir.path()).err().unwrap();
        assert!(err.to_string().contains("lists no keys"), "{err}");
        for bad in ["reg.example/team:1", "reg.example/te am", "reg.example//team", "reg.example/t@sha256:ab", ""] {
            let err = Trust::load(&[rule(bad, vec!["k.pub".into()])], dir.path()).err().unwrap();
            assert!(err.to_string().contains("no tag or digest"), "{bad}: {err}");
        }
        super::super::SigningKey::generate(&dir.path().join("k"), b"pw").unwrap();
        assert!(Trust::load(&[rule("reg.example/team", vec!["k.pub".into()])], dir.path()).is_ok());
        let twice = [rule("reg.example/team", vec!["k.pub".into()]), rule("REG.example/team/", vec!["k.pub".into()])];
        let err = Trust::load(&twice, dir.path()).err().unwrap();
        assert!(err.to_string().contains("same scope"), "{err}");
        let err = Trust::load(&[rule("reg.example/team", vec!["missing.pub".into()])], dir.path()).err().unwrap();
        assert!(err.to_string().contains("missing.pub"), "{err}");
        std::fs::write(dir.path().join("k.key"), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            .unwrap();
        let err = Trust::load(&[rule("reg.example/team", vec!["k.key".into()])], dir.path()).err().unwrap();
        assert!(err.to_string().contains("never the private key"), "{err}");
    }
}
