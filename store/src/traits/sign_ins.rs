//! The server console's sign-ins.

use crate::{SignIn, StoreResult};

/// The server console's sign-ins: what a browser's session cookie stands
/// for, recorded by the hash of its id. Only the console of `nexo serve`
/// uses them. Every method is one transaction.
#[async_trait::async_trait]
pub trait SignIns: Send + Sync {
    /// Records a console sign-in, and forgets those expired by its
    /// `created_ms`. A tenant that is not there is [`StoreError::NoTenant`](crate::StoreError::NoTenant);
    /// an id hash already recorded is a [`StoreError::Conflict`](crate::StoreError::Conflict).
    async fn open_sign_in(&self, sign_in: SignIn) -> StoreResult<()>;

    /// The sign-in with this id hash, unless it ended or expired by `now_ms`.
    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> StoreResult<Option<SignIn>>;

    /// Ends a sign-in; ending one that is not there does nothing.
    async fn end_sign_in(&self, id_hash: &str) -> StoreResult<()>;
}
