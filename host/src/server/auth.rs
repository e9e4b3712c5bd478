//! Who is asking: the bearer key of a request, resolved to a tenant or to
//! the operator.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use nexo_store::Tenant;

use super::error::ApiError;
use super::state::AppState;
use super::tenants::key_hash;

/// The caller of a request.
#[derive(Debug, Clone)]
pub enum Principal {
    /// A tenant, by one of its keys.
    Tenant(Tenant),
    /// The operator, by an admin key.
    Admin,
}

/// A request made with a tenant's key.
pub struct TenantCaller(pub Tenant);

/// A request made with a tenant's key, and which key (an event stream
/// ends when its key is revoked).
pub struct KeyedCaller {
    /// The tenant.
    pub tenant: Tenant,
    /// The key's id.
    pub key: String,
}

/// A request made with an admin key.
pub struct AdminCaller;

async fn principal(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    Ok(keyed_principal(parts, state).await?.0)
}

/// The caller and the id of the key it used.
async fn keyed_principal(parts: &Parts, state: &AppState) -> Result<(Principal, String), ApiError> {
    let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let key = match header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim) {
        Some(k) if !k.is_empty() => k,
        _ => return Err(ApiError::unauthorized("send `Authorization: Bearer KEY` with a tenant's or an admin key")),
    };
    let Some(found) = state.store.key_by_hash(&key_hash(key)).await.map_err(ApiError::store)? else {
        return Err(ApiError::unauthorized("the key is not known here (it may belong to another deployment)"));
    };
    if found.revoked_ms.is_some() {
        return Err(ApiError::unauthorized("the key was revoked; ask the operator for a new one"));
    }
    let Some(tenant_id) = found.tenant else { return Ok((Principal::Admin, found.id)) };
    match state.store.tenant(&tenant_id).await.map_err(ApiError::store)? {
        Some(t) if t.disabled => Err(ApiError::forbidden("the tenant is disabled; ask the operator to enable it")),
        Some(t) => Ok((Principal::Tenant(t), found.id)),
        None => Err(ApiError::unauthorized("the key's tenant no longer exists")),
    }
}

/// Whether key `key` of `tenant` still admits its caller: not revoked, and
/// the tenant there and enabled (what a long request checks again now
/// and then, for a change made by another node or the CLI).
pub async fn still_admitted(state: &AppState, tenant: &str, key: &str) -> Result<bool, nexo_store::StoreError> {
    let keys = state.store.keys(Some(tenant)).await?;
    if !keys.iter().any(|k| k.id == key && k.revoked_ms.is_none()) {
        return Ok(false);
    }
    Ok(state.store.tenant(tenant).await?.is_some_and(|t| !t.disabled))
}

impl FromRequestParts<AppState> for KeyedCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match keyed_principal(parts, state).await? {
            (Principal::Tenant(tenant), key) => Ok(KeyedCaller { tenant, key }),
            (Principal::Admin, _) => Err(ApiError::forbidden(
                "an admin key manages tenants; use a tenant's key for its plugins, runs and usage",
            )),
        }
    }
}

impl FromRequestParts<AppState> for TenantCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match principal(parts, state).await? {
            Principal::Tenant(t) => Ok(TenantCaller(t)),
            Principal::Admin => Err(ApiError::forbidden(
                "an admin key manages tenants; use a tenant's key for its plugins, runs and usage",
            )),
        }
    }
}

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match principal(parts, state).await? {
            Principal::Admin => Ok(AdminCaller),
            // Tenants learn nothing about the admin API, as with another tenant's records.
            Principal::Tenant(_) => Err(ApiError::not_found("no such endpoint for a tenant's key")),
        }
    }
}
