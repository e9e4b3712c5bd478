//! Logging in to a registry: nexo reads the registry's challenge itself, so
//! a password goes only where the operator would send it.
//!
//! Given a password, oci-client sends it to whatever token realm a
//! registry's `401` names, over whatever scheme it names: a registry (or
//! whoever answers for it) could have it sent in clear text, or to any host
//! at all over plain HTTP. Here the password goes to the registry itself
//! (a `Basic` challenge) or to a token realm over HTTPS; plain HTTP only to
//! a host the operator listed as insecure. oci-client is handed the bearer
//! token, never the password.

use http_auth::ChallengeParser;
use oci_client::RegistryOperation;
use oci_client::secrets::RegistryAuth;
use reqwest013::StatusCode;
use serde::Deserialize;

use super::client::RegistryClient;
use super::credentials::Credentials;
use super::error::RegistryError;
use super::reference::PluginReference;

/// The most bytes of a token response read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// What a token endpoint answers (the distribution spec's two names).
#[derive(Deserialize)]
struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
}

/// How a registry asks to be logged in to.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    /// No login asked for.
    None,
    /// A password, to the registry itself.
    Basic,
    /// A token from `realm`, for `service`.
    Bearer { realm: String, service: Option<String> },
}

/// The credentials to use for `operation` on `reference` (nexo's own
/// manifest requests and oci-client's blob requests alike): a password
/// either as it is, when the registry asks for one itself, or exchanged
/// here for a bearer token from a realm the operator's rules allow; no
/// password, for an anonymous token from such a realm when the registry
/// asks for one, else nothing.
pub(super) async fn authorize(
    client: &RegistryClient,
    reference: &PluginReference,
    credentials: &Credentials,
    operation: RegistryOperation,
) -> Result<RegistryAuth, RegistryError> {
    let password = match credentials.auth() {
        RegistryAuth::Basic(user, password) => Some((user, password)),
        RegistryAuth::Anonymous => None,
        given @ RegistryAuth::Bearer(_) => return Ok(given.clone()),
    };
    let registry = reference.registry();
    let unreachable = |e: reqwest013::Error| RegistryError::Unreachable {
        registry: registry.to_string(),
        scheme: client.scheme(registry),
        reason: super::client::chain(&e),
    };
    let probe = format!("{}://{registry}/v2/", client.scheme(registry));
    let answer = client.http().get(&probe).send().await.map_err(unreachable)?;
    let header = answer.headers().get(reqwest013::header::WWW_AUTHENTICATE).and_then(|h| h.to_str().ok());
    let (realm, service) = match challenge(header) {
        // A registry that asks for nothing is sent nothing.
        Challenge::None => return Ok(RegistryAuth::Anonymous),
        Challenge::Basic => return Ok(credentials.auth().clone()),
        Challenge::Bearer { realm, service } => (realm, service),
    };
    let url = allowed_realm(client, registry, &realm)?;
    let scope = match operation {
        RegistryOperation::Pull => format!("repository:{}:pull", reference.oci().repository()),
        RegistryOperation::Push => format!("repository:{}:pull,push", reference.oci().repository()),
    };
    let mut query = vec![("scope", scope)];
    query.extend(service.map(|s| ("service", s)));
    let mut request = client.http().get(url).query(&query);
    if let Some((user, password)) = password {
        request = request.basic_auth(user, Some(password));
    }
    let answer = request.send().await.map_err(unreachable)?;
    let status = answer.status();
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(RegistryError::Unauthorized {
            registry: registry.to_string(),
            reference: reference.to_string(),
            how: credentials.describe(),
        });
    }
    let failed = |reason: String| RegistryError::Registry {
        registry: registry.to_string(),
        reference: reference.to_string(),
        reason: format!("its token service at {realm} {reason}"),
    };
    if !status.is_success() {
        return Err(failed(format!("answered {status}")));
    }
    let body = read_capped(answer, MAX_TOKEN_RESPONSE).await.map_err(failed)?;
    let token: TokenResponse =
        serde_json::from_slice(&body).map_err(|e| failed(format!("sent no token the spec describes ({e})")))?;
    match token.token.or(token.access_token).filter(|t| !t.is_empty()) {
        Some(token) => Ok(RegistryAuth::Bearer(token)),
        None => Err(failed("sent an empty token".into())),
    }
}

/// The challenge a `WWW-Authenticate` header makes: a `Bearer` one if it
/// offers one (with its realm), else `Basic` if it offers that.
fn challenge(header: Option<&str>) -> Challenge {
    let Some(header) = header else { return Challenge::None };
    let mut basic = false;
    for offered in ChallengeParser::new(header).flatten() {
        if offered.scheme.eq_ignore_ascii_case("bearer") {
            let param = |name: &str| {
                offered.params.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.to_unescaped())
            };
            if let Some(realm) = param("realm") {
                return Challenge::Bearer { realm, service: param("service") };
            }
        }
        basic |= offered.scheme.eq_ignore_ascii_case("basic");
    }
    if basic { Challenge::Basic } else { Challenge::None }
}

/// `realm` as a URL the password may be sent to: HTTPS, or plain HTTP to a
/// host the operator listed as insecure.
fn allowed_realm(client: &RegistryClient, registry: &str, realm: &str) -> Result<reqwest013::Url, RegistryError> {
    let refused = |reason: &str| RegistryError::UnsafeRealm {
        registry: registry.to_string(),
        realm: realm.to_string(),
        reason: reason.to_string(),
    };
    let url = reqwest013::Url::parse(realm).map_err(|_| refused("it is not a URL"))?;
    let host = url.host_str().ok_or_else(|| refused("it names no host"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refused("it carries credentials of its own"));
    }
    match url.scheme() {
        "https" => Ok(url),
        "http" => {
            let authority = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            };
            if client.is_insecure(&authority) {
                Ok(url)
            } else {
                Err(refused("it is plain HTTP to a host not listed as insecure"))
            }
        }
        _ => Err(refused("it is neither HTTPS nor HTTP")),
    }
}

/// The body of `answer`, refused past `cap` bytes.
async fn read_capped(mut answer: reqwest013::Response, cap: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| format!("failed mid-answer ({e})"))? {
        if body.len() + chunk.len() > cap {
            return Err(format!("answered with over {cap} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_wins_and_names_its_realm() {
        let both = r#"Basic realm="r", Bearer realm="https://auth.example/token",service="registry.example""#;
        assert_eq!(
            challenge(Some(both)),
            Challenge::Bearer { realm: "https://auth.example/token".into(), service: Some("registry.example".into()) }
        );
        assert_eq!(challenge(Some(r#"Basic realm="Registry Realm""#)), Challenge::Basic);
        assert_eq!(challenge(None), Challenge::None);
        assert_eq!(challenge(Some("Negotiate")), Challenge::None);
        assert_eq!(challenge(Some(r#"Bearer service="x""#)), Challenge::None, "a bearer challenge needs a realm");
    }

    #[test]
    fn a_password_goes_over_https_or_to_an_insecure_host_only() {
        let client = RegistryClient::new(&["127.0.0.1:5000".to_string(), "registry.lan".to_string()]).unwrap();
        let allowed = |realm| allowed_realm(&client, "r.example", realm).map(|u| u.to_string());
        assert_eq!(allowed("https://auth.example/token").unwrap(), "https://auth.example/token");
        assert!(allowed("http://127.0.0.1:5000/token").is_ok());
        assert!(allowed("http://registry.lan/token").is_ok());
        for refused in [
            "http://auth.example/token",
            "http://127.0.0.1:5001/token",
            "http://127.0.0.1/token",
            "ftp://auth.example/token",
            "https://user:pw@auth.example/token",
            "/token",
        ] {
            let e = allowed(refused).unwrap_err().to_string();
            assert!(e.contains(refused) && e.contains("r.example"), "{refused}: {e}");
        }
    }
}
