//! [`SignIns`] over SQL: the server console's sign-ins.

use super::{Arg, Dialect, SqlStore};
use crate::refusal::sign_in_taken;
use crate::rows;
use crate::sql;
use crate::{SignIn, SignIns, StoreError, StoreResult};

#[async_trait::async_trait]
impl<D: Dialect> SignIns for SqlStore<D> {
    async fn open_sign_in(&self, new: SignIn) -> StoreResult<()> {
        let mut tx = self.db.begin().await?;
        let result = async {
            self.execute(&mut tx, sql::PURGE_SIGN_INS, &[new.created_ms.into()]).await?;
            let args: &[Arg<'_>] = &[
                (&new.id_hash).into(),
                (&new.tenant).into(),
                (&new.key_hash).into(),
                new.created_ms.into(),
                new.expires_ms.into(),
            ];
            match super::run::<D>(&mut tx, sql::INSERT_SIGN_IN, args).await {
                Ok(_) => Ok(()),
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    Err(StoreError::NoTenant(new.tenant.clone()))
                }
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    Err(StoreError::Conflict(sign_in_taken()))
                }
                Err(e) => Err(self.error(&e)),
            }
        }
        .await;
        self.db.end(tx, result).await
    }

    async fn sign_in(&self, id_hash: &str, now_ms: i64) -> StoreResult<Option<SignIn>> {
        let row = self.read_optional(sql::SELECT_SIGN_IN, &[id_hash.into(), now_ms.into()]).await?;
        row.map(|r| self.decode(|errors| rows::sign_in(&r, errors))).transpose()
    }

    async fn end_sign_in(&self, id_hash: &str) -> StoreResult<()> {
        let mut conn = self.db.single().await?;
        let result = self.execute(&mut conn, sql::DELETE_SIGN_IN, &[id_hash.into()]).await;
        self.db.end(conn, result.map(drop)).await
    }
}
