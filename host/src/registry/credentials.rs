//! Registry credentials, from the operator's environment or Docker config
//! file. They go to the registry and nowhere else: not into a log (the
//! Debug form hides them), the store or a guest.

use std::fmt;

use oci_client::secrets::RegistryAuth;

use super::error::RegistryError;

/// The user name variable; with [`PASSWORD_VAR`], it wins over the Docker
/// config for the registry [`HOST_VAR`] names.
pub const USERNAME_VAR: &str = "NEXO_REGISTRY_USERNAME";
/// The password variable.
pub const PASSWORD_VAR: &str = "NEXO_REGISTRY_PASSWORD";
/// The registry (`host:port`, as references name it) the variables'
/// credentials are for: they go to that registry only, never to another a
/// reference or a config file names.
pub const HOST_VAR: &str = "NEXO_REGISTRY_HOST";

/// Credentials for one registry. `Debug` names the user, never the secret.
#[derive(Clone)]
pub struct Credentials(RegistryAuth);

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Credentials {
    /// No credentials.
    pub fn anonymous() -> Credentials {
        Credentials(RegistryAuth::Anonymous)
    }

    /// The credentials for `registry` (`host:port`): `NEXO_REGISTRY_USERNAME`
    /// and `NEXO_REGISTRY_PASSWORD` if both are set and `NEXO_REGISTRY_HOST`
    /// names this registry, else the Docker config file
    /// (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, with its
    /// credential helpers), else anonymous.
    pub fn for_registry(registry: &str) -> Result<Credentials, RegistryError> {
        let var = |name| std::env::var(name).ok();
        if let Some(given) = from_environment(registry, var(USERNAME_VAR), var(PASSWORD_VAR), var(HOST_VAR)) {
            return given;
        }
        use docker_credential::{CredentialRetrievalError as E, DockerCredential};
        match docker_credential::get_credential(registry) {
            Ok(DockerCredential::UsernamePassword(user, password)) => {
                Ok(Credentials(RegistryAuth::Basic(user, password)))
            }
            Ok(DockerCredential::IdentityToken(_)) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: "it holds an identity token, which nexo cannot use".into(),
                fix: "log in with a user name and password, or set NEXO_REGISTRY_USERNAME and NEXO_REGISTRY_PASSWORD",
            }),
            Err(E::ConfigNotFound | E::ConfigReadError | E::NoCredentialConfigured) => Ok(Credentials::anonymous()),
            Err(e) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: e.to_string(),
                fix: "fix the entry for this registry in the Docker config file or its credential helper",
            }),
        }
    }

    /// How the registry is accessed, for errors: `anonymously` or `as USER`.
    pub fn describe(&self) -> String {
        match &self.0 {
            RegistryAuth::Anonymous => "anonymously".into(),
            RegistryAuth::Basic(user, _) => format!("as {user}"),
            RegistryAuth::Bearer(_) => "with a bearer token".into(),
        }
    }

    /// The credentials as oci-client takes them.
    pub(super) fn auth(&self) -> &RegistryAuth {
        &self.0
    }
}

/// The environment's credentials for `registry`: `None` when they are not
/// set or are for another registry; an error when they are set for no
/// registry at all (they would go to whichever a reference names).
fn from_environment(
    registry: &str,
    user: Option<String>,
    password: Option<String>,
    host: Option<String>,
) -> Option<Result<Credentials, RegistryError>> {
    let (user, password) = (user?, password?);
    match host.as_deref().map(str::trim).filter(|h| !h.is_empty()) {
        None => Some(Err(RegistryError::Credentials {
            registry: registry.to_string(),
            reason: format!("{USERNAME_VAR} and {PASSWORD_VAR} are set for no registry"),
            fix: "set NEXO_REGISTRY_HOST to the registry (host:port) they are for",
        })),
        Some(host) if host.eq_ignore_ascii_case(registry) => Some(Ok(Credentials(RegistryAuth::Basic(user, password)))),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password in the environment goes to the registry it is for, and
    /// to no other a reference names.
    #[test]
    fn the_environments_credentials_go_to_their_registry_only() {
        let some = |s: &str| Some(s.to_string());
        let given = |host| from_environment("r.example:5000", some("alice"), some("pw"), host);
        assert_eq!(given(some("r.example:5000")).unwrap().unwrap().describe(), "as alice");
        assert_eq!(given(some("R.EXAMPLE:5000")).unwrap().unwrap().describe(), "as alice");
        assert!(given(some("other.example")).is_none(), "another registry's: the Docker config decides");
        let e = given(None).unwrap().unwrap_err().to_string();
        assert!(e.contains("set for no registry") && e.contains("NEXO_REGISTRY_HOST"), "{e}");
        assert!(from_environment("r.example:5000", some("alice"), None, some("r.example:5000")).is_none());
    }

    #[test]
    fn debug_hides_the_password() {
        let c = Credentials(RegistryAuth::Basic("alice".into(), "s3cret-pw".into()));
        let shown = format!("{c:?}");
        assert!(shown.contains("alice") && !shown.contains("s3cret-pw"), "{shown}");
    }
}
