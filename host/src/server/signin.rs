//! The web console's sign-ins, kept in the store by the SHA-256 of their
//! id: any node of a deployment serves any signed-in browser, and a
//! restart signs no one out.

use std::time::Duration;

use nexo_store::{SignIn, Store, StoreResult, sha256_hex};

/// How long a session lasts from sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// A live sign-in, found by its cookie.
#[derive(Clone, Debug)]
pub(crate) struct ConsoleSession {
    /// The SHA-256 of the session id: the sign-in's key in the store.
    pub(crate) id_hash: String,
    pub(crate) tenant: String,
    /// The SHA-256 of the key signed in with, to notice its revocation.
    pub(crate) key_hash: String,
    /// The token its forms carry.
    pub(crate) csrf: String,
}

/// Opens a session for `tenant`, signed in with the key of hash
/// `key_hash`: its id, for the cookie.
pub(crate) async fn open(store: &dyn Store, tenant: &str, key_hash: &str, now_ms: i64) -> StoreResult<String> {
    let id = random_token();
    let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
    let sign_in = SignIn {
        id_hash: sha256_hex(&id),
        tenant: tenant.to_string(),
        key_hash: key_hash.to_string(),
        created_ms: now_ms,
        expires_ms: now_ms.saturating_add(ttl),
    };
    store.open_sign_in(sign_in).await?;
    Ok(id)
}

/// The live session with this id.
pub(crate) async fn find(store: &dyn Store, id: &str, now_ms: i64) -> StoreResult<Option<ConsoleSession>> {
    let found = store.sign_in(&sha256_hex(id), now_ms).await?;
    Ok(found.map(|s| ConsoleSession { id_hash: s.id_hash, tenant: s.tenant, key_hash: s.key_hash, csrf: csrf(id) }))
}

/// Ends the session whose id hashes to `id_hash`. A failure is logged: the
/// session then lasts until it expires, or until its key is revoked.
pub(crate) async fn end(store: &dyn Store, id_hash: &str) {
    if let Err(e) = store.end_sign_in(id_hash).await {
        tracing::warn!(target: "nexo::server", "console: cannot end a session: {e}");
    }
}

/// A session's CSRF token, derived from its id rather than stored: only a
/// holder of the cookie can know it, and the store needs no secret.
fn csrf(id: &str) -> String {
    sha256_hex(format!("nexo console csrf\n{id}"))
}

/// 256 random bits, as hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use nexo_store::{MemoryStore, NewTenant, Tenants};

    use super::*;

    #[tokio::test]
    async fn sessions_open_expire_and_end() {
        let store = MemoryStore::default();
        let tenant = NewTenant { id: "t1".into(), name: "acme".into(), policy: serde_json::json!({}), created_ms: 0 };
        store.create_tenant(tenant).await.unwrap();
        let id = open(&store, "t1", "hash", 1_000).await.unwrap();
        let s = find(&store, &id, 2_000).await.unwrap().unwrap();
        assert_eq!((s.tenant.as_str(), s.key_hash.as_str()), ("t1", "hash"));
        assert_eq!(s.id_hash, sha256_hex(&id), "kept by the id's hash");
        assert_eq!(s.csrf.len(), 64);
        assert_ne!(s.csrf, id);
        let other = open(&store, "t1", "hash", 1_000).await.unwrap();
        assert_ne!(find(&store, &other, 2_000).await.unwrap().unwrap().csrf, s.csrf, "a token per session");
        assert!(find(&store, "not-a-session", 2_000).await.unwrap().is_none());
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
        assert!(find(&store, &id, 1_000 + ttl).await.unwrap().is_none(), "expired");
        end(&store, &s.id_hash).await;
        assert!(find(&store, &id, 1_002).await.unwrap().is_none());
    }
}
