//! The web console's sign-ins: sessions kept in this process's memory,
//! by the SHA-256 of their id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// How long a session lasts from sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// At most this many sessions are kept; the oldest go first beyond it.
const MAX_SESSIONS: usize = 100_000;

/// The console's sign-ins, in this process's memory: a restart signs
/// everyone out, and behind a load balancer each node has its own (route a
/// browser to one node, with sticky sessions).
#[derive(Default)]
pub struct ConsoleSessions {
    /// By the SHA-256 of the session id, so the map holds no cookie value.
    map: Mutex<HashMap<String, ConsoleSession>>,
}

/// One sign-in.
#[derive(Clone, Debug)]
pub(crate) struct ConsoleSession {
    pub(crate) tenant: String,
    /// The SHA-256 of the key signed in with, to notice its revocation.
    pub(crate) key_hash: String,
    pub(crate) csrf: String,
    pub(crate) created_ms: i64,
    pub(crate) expires_ms: i64,
}

impl ConsoleSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ConsoleSession>> {
        self.map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new session for `tenant`: its id, for the cookie.
    pub(crate) fn open(&self, tenant: &str, key_hash: &str, now_ms: i64) -> String {
        let id = random_token();
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        let session = ConsoleSession {
            tenant: tenant.to_string(),
            key_hash: key_hash.to_string(),
            csrf: random_token(),
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl),
        };
        let mut map = self.lock();
        map.retain(|_, s| s.expires_ms > now_ms);
        if map.len() >= MAX_SESSIONS {
            let oldest = map.iter().min_by_key(|(_, s)| s.created_ms).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(session_key(&id), session);
        id
    }

    /// The live session with this id; an expired one is dropped.
    pub(crate) fn get(&self, id: &str, now_ms: i64) -> Option<(String, ConsoleSession)> {
        let key = session_key(id);
        let mut map = self.lock();
        match map.get(&key) {
            Some(s) if s.expires_ms > now_ms => Some((key, s.clone())),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session stored under `key` (the id's hash).
    pub(crate) fn end(&self, key: &str) {
        self.lock().remove(key);
    }
}

fn session_key(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
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

    use super::*;

    #[test]
    fn sessions_open_expire_and_end() {
        let sessions = ConsoleSessions::default();
        let id = sessions.open("t1", "hash", 1_000);
        let (key, s) = sessions.get(&id, 2_000).unwrap();
        assert_eq!((s.tenant.as_str(), s.key_hash.as_str()), ("t1", "hash"));
        assert_ne!(key, id, "kept by the id's hash");
        assert!(sessions.get("not-a-session", 2_000).is_none());
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
        assert!(sessions.get(&id, 1_000 + ttl).is_none(), "expired");
        assert!(sessions.lock().is_empty(), "an expired session is dropped");
        let id = sessions.open("t1", "hash", 1_000);
        let (key, _) = sessions.get(&id, 1_001).unwrap();
        sessions.end(&key);
        assert!(sessions.get(&id, 1_002).is_none());
    }
}
