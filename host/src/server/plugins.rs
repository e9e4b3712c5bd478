//! `/v1/plugins`: a tenant's plugins, uploaded as bytes or pulled by
//! registry reference, and the operator's acceptance of a pulled plugin's
//! wider authority (`/v1/tenants/{name}/accepted-plugins`).
//!
//! A plugin pulled by reference is remembered per tenant by its
//! repository, with the digest and the authority the accepted version asks
//! for, in the shared store: every node decides alike, with the one
//! decision of [`crate::acceptance::decide`]. A new version that asks for
//! more is refused until it is accepted, by the tenant itself or by the
//! operator, as the tenant's policy says ([`WiderAuthority`]).

use std::path::PathBuf;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nexo_store::{PluginAcceptance, Tenant};
use serde_json::{Value, json};

use super::api::{ApiError, ApiResult, AppState, COMPILE_WAIT, audit, blocking, busy, off_api, policy_of};
use super::auth::{AdminCaller, TenantCaller};
use super::tenants;
use crate::Plugin;
use crate::acceptance::{self, Accepted, Consent, FirstUse, Refused, Requested};
use crate::data_dir::{plugin_path, write_atomically};
use crate::manifest::Capability;
use crate::policy::{Policy, WiderAuthority};
use crate::registry::RegistryError;

/// The refusal of an upload past the tenant's plugin storage: 507, naming
/// the quota.
fn over_plugin_quota(message: String) -> ApiError {
    ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "plugin_quota", message)
}

/// Whether the tenant may store one more plugin of `size` bytes (one it
/// has already, by `sha`, costs nothing).
async fn check_plugin_quota(state: &AppState, tenant: &Tenant, sha: &str, size: usize) -> ApiResult<()> {
    let quotas = policy_of(tenant)?.quotas;
    let stored = state.store.plugins(&tenant.id).await.map_err(ApiError::store)?;
    if stored.iter().any(|p| p.sha256 == sha) {
        return Ok(());
    }
    let (count, cap) = (u64::try_from(stored.len()).unwrap_or(u64::MAX), quotas.plugins_cap());
    if count.saturating_add(1) > cap {
        return Err(over_plugin_quota(format!(
            "the tenant stores {count} plugins, its quota `plugins` ({cap}); ask the operator for a higher quota"
        )));
    }
    let used: u64 = stored.iter().map(|p| p.size).sum();
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    let cap = quotas.plugin_bytes_cap();
    if used.saturating_add(size) > cap {
        return Err(over_plugin_quota(format!(
            "this plugin ({size} bytes) would take the tenant's plugins to {} bytes, past its quota `plugin-bytes` \
             ({cap}); ask the operator for a higher quota",
            used.saturating_add(size)
        )));
    }
    Ok(())
}

/// `POST /v1/plugins`: the body is the `.wasm`. It is validated as
/// `nexo inspect` validates it, stored by content, and shown with what it
/// requests against the tenant's policy. It counts against the tenant's
/// `plugins` and `plugin-bytes` quotas (507 past them), checked before it
/// compiles and again as it is stored.
///
/// With `Content-Type: application/json` the body is `{"reference":
/// "HOST/REPO:TAG"}` instead: a registry reference within the policy's
/// `registries`, pulled under the operator's `[registries]` (its trust
/// rules included) and then handled as an upload of its bytes.
pub async fn upload_plugin(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<Response> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "plugin_too_large",
            format!(
                "the component is larger than this server takes ({} bytes, the operator's `[serve] \
                 max-plugin-bytes`): send a smaller build (release, stripped), or ask the operator to raise it",
                state.max_plugin_bytes
            ),
        ),
        status => ApiError::new(status, "bad_body", format!("the body could not be read: {rejection}")),
    })?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: send the component's bytes (`--data-binary @agent.wasm`)",
        ));
    }
    let policy = policy_of(&tenant)?;
    let json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let (body, pull) =
        if json { pulled(&state, &policy, &body).await.map(|(b, p)| (b, Some(p)))? } else { (body, None) };
    let origin = pull.as_ref().map(|p| p.origin.clone());
    let hashed = body.clone();
    let sha = blocking(&state, move || nexo_store::sha256_hex(&hashed)).await?;
    let path = plugin_path(&state.data_dir, &sha);
    // One upload of a tenant in flight: its flood waits behind itself.
    let turn = tokio::time::timeout(COMPILE_WAIT, state.compiling.lock(&tenant.id)).await.map_err(|_| busy())?;
    // Content the tenant stored already, with its file here, is loaded
    // through the compile cache as a run's start loads it, not compiled,
    // checked against no quota and written again.
    let held = state.store.plugin(&tenant.id, &sha).await.map_err(ApiError::store)?;
    let probe = path.clone();
    let on_disk = blocking(&state, move || probe.is_file()).await?;
    let plugin =
        if held.is_some() && on_disk {
            let from = path.clone();
            off_api(&state, &state.loads, turn, move |engine| async move { Plugin::load(&engine, &from).await }).await?
        } else {
            // Refused before the costly compile if it cannot be stored anyway.
            check_plugin_quota(&state, &tenant, &sha, body.len()).await?;
            // Validation compiles the component: a typed error for bytes that are not one.
            let label = PathBuf::from(format!("{sha}.wasm"));
            let bytes = body.clone();
            off_api(&state, &state.compiles, turn, move |engine| async move {
                Plugin::from_bytes(&engine, label, &bytes).await
            })
            .await?
        }
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin", e.to_string()))?;
    let about = About::of(&plugin)?;
    // A pulled plugin's version is decided on before anything is stored.
    let acceptance = match &pull {
        Some(pull) => {
            // Consent is to the version reviewed: named by its digest, not
            // by a tag that may name another by the time it is pulled.
            let consent = if pull.accept_authority && pull.pinned && policy.wider_authority == WiderAuthority::Tenant {
                Consent::Given
            } else {
                Consent::Standing
            };
            let digest = acceptance::file_digest(&sha);
            let decided = Decision {
                reference: &pull.repository,
                digest: &digest,
                exact: &pull.origin.reference,
                consent,
                asked: pull.accept_authority,
            };
            let accepted = admit(&state, &tenant, &policy, &decided, &about.requested, By::Tenant).await?;
            Some(json!({
                "reference": pull.repository,
                "digest": decided.digest,
                "accepted": match accepted { Accepted::First => "first-use", Accepted::Same => "before", Accepted::Changed { .. } => "now" },
                "note": accepted.note(&pull.repository, decided.digest),
            }))
        }
        None => None,
    };
    // Checked again with the tenant's other uploads on this node held off.
    let _admitted = state.plugin_admission.lock(&tenant.id).await;
    let recorded_origin = origin.as_ref().and_then(|o| serde_json::to_string(o).ok());
    let (stored, created) = match state.store.plugin(&tenant.id, &sha).await.map_err(ApiError::store)? {
        // Uploaded before as bytes and pulled now: the store learns where it came from.
        Some(stored) if stored.origin.is_none() && recorded_origin.is_some() => {
            let new = nexo_store::NewPlugin {
                tenant: tenant.id.clone(),
                sha256: sha.clone(),
                name: stored.name.clone(),
                world: stored.world.clone(),
                bytes: body.to_vec(),
                created_ms: stored.created_ms,
                origin: recorded_origin.clone(),
            };
            state.store.put_plugin(new).await.map_err(ApiError::store)?
        }
        Some(stored) => (stored, false),
        None => {
            check_plugin_quota(&state, &tenant, &sha, body.len()).await?;
            let (to, written) = (path.clone(), body.clone());
            let copy = blocking(&state, move || write_atomically(&to, &written).map(|()| written.to_vec())).await?;
            let bytes = copy.map_err(|e| {
                tracing::error!(target: "nexo::server", "cannot write {}: {e}", path.display());
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "storage",
                    "the server cannot store the plugin now; try again",
                )
            })?;
            state
                .store
                .put_plugin(nexo_store::NewPlugin {
                    tenant: tenant.id.clone(),
                    sha256: sha.clone(),
                    name: about.name.clone(),
                    world: plugin.export().to_string(),
                    bytes,
                    created_ms: nexo_store::now_ms(),
                    origin: recorded_origin,
                })
                .await
                .map_err(ApiError::store)?
        }
    };
    if created {
        audit(&state, &tenant, "plugin.uploaded", json!({"plugin": sha, "name": about.name, "origin": origin})).await?;
    }
    let requested: Vec<Capability> = about.capabilities;
    let granted: Vec<&str> = requested
        .iter()
        .filter(|c| matches!(c, Capability::Read | Capability::Glob) || policy.allow.contains(c))
        .map(|c| c.as_str())
        .collect();
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let body = json!({
        "id": stored.sha256,
        "name": stored.name,
        "world": stored.world,
        "size": stored.size,
        "created": created,
        "description": about.description,
        "requested": requested.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "granted": granted,
        "policy": {"allow": policy.allow.iter().map(|c| c.as_str()).collect::<Vec<_>>(), "mode": policy.mode.as_str()},
        "origin": origin,
        "acceptance": acceptance,
    });
    Ok((status, Json(body)).into_response())
}

/// What an upload's answer and records say of a plugin.
struct About {
    name: String,
    description: String,
    /// An agent's capabilities (a hook asks for none).
    capabilities: Vec<Capability>,
    /// What it asks for, as a pull's acceptance weighs it.
    requested: Requested,
}

impl About {
    /// An agent's or a hook's: `nexo serve` runs agents, and asks a
    /// tenant's own hooks about its runs; anything else is refused.
    fn of(plugin: &Plugin) -> ApiResult<About> {
        if let Ok(hook) = plugin.hook() {
            return Ok(About {
                name: hook.name().to_string(),
                description: hook.info().description.clone(),
                capabilities: Vec::new(),
                requested: Requested::of(plugin.description()),
            });
        }
        let agent = plugin.agent().map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "not_an_agent",
                format!(
                    "{e}; `nexo serve` runs agent components (the `agent` world), and takes hook components (the \
                     `hook-plugin` world) for a run's `hooks`"
                ),
            )
        })?;
        let m = agent.manifest();
        Ok(About {
            name: m.name.clone(),
            description: m.description.clone(),
            capabilities: m.capabilities.clone(),
            requested: Requested::of_agent(m),
        })
    }
}

/// `POST /v1/plugins`'s JSON body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginReferenceBody {
    /// The registry reference.
    reference: String,
    /// The tenant accepts the authority this version asks for, if it asks
    /// for more than the version accepted before (only where its policy's
    /// `wider-authority` is `tenant`).
    #[serde(default)]
    accept_authority: bool,
}

/// A plugin pulled by reference.
struct Pull {
    /// Where it came from, at its digest, and who signed it.
    origin: crate::runs::Origin,
    /// The repository it is remembered by.
    repository: String,
    /// Whether the request accepts wider authority.
    accept_authority: bool,
    /// Whether the request named the version by its digest.
    pinned: bool,
}

/// The component a JSON upload names, pulled (or found in this node's
/// cache), and where it came from.
async fn pulled(state: &AppState, policy: &Policy, body: &Bytes) -> ApiResult<(Bytes, Pull)> {
    let asked: PluginReferenceBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the JSON body is not {{\"reference\": \"HOST/REPOSITORY:TAG\"}} ({e}); to upload a component, \
             send its bytes as application/octet-stream"
        ))
    })?;
    let reference = parse_reference(&asked.reference)?;
    if !policy.registries.iter().any(|scope| crate::registry::covers(scope, &reference)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "registry_not_allowed",
            format!(
                "your policy lets you pull from {}, not {}: ask the operator to add it to your policy's `registries`",
                if policy.registries.is_empty() { "no registry".to_string() } else { policy.registries.join(", ") },
                reference.repository()
            ),
        ));
    }
    let (bytes, origin, repository) = pull(state, &reference, Audience::Tenant).await?;
    let pinned = reference.digest().is_some();
    Ok((bytes, Pull { origin, repository, accept_authority: asked.accept_authority, pinned }))
}

/// A reference as a request gives it (`oci://` optional).
fn parse_reference(text: &str) -> ApiResult<crate::registry::PluginReference> {
    let text = text.strip_prefix(crate::registry::reference::OCI_PREFIX).unwrap_or(text);
    crate::registry::PluginReference::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Who a registry failure is told to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Audience {
    /// A tenant: what concerns the reference, not the node's set-up.
    Tenant,
    /// The operator: everything.
    Operator,
}

/// A registry failure as `audience` is told it. The node's credentials
/// (a user name, a credential helper's output) and set-up (cache, trust
/// keys) are the operator's: a tenant is told the pull failed on the
/// node's side, and the node's log has the cause.
fn registry_failure(e: RegistryError, reference: &str, audience: Audience) -> ApiError {
    let operators = matches!(
        e,
        RegistryError::Unauthorized { .. }
            | RegistryError::UnsafeRealm { .. }
            | RegistryError::Credentials { .. }
            | RegistryError::Cache { .. }
            | RegistryError::BadTrust { .. }
            | RegistryError::BadKey { .. }
            | RegistryError::SigningKey { .. }
    );
    let status = match e {
        RegistryError::Unreachable { .. } => StatusCode::BAD_GATEWAY,
        _ if operators => StatusCode::BAD_GATEWAY,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    if operators && audience == Audience::Tenant {
        tracing::warn!(target: "nexo::server", "a tenant's pull of {reference} failed: {e}");
        let message = format!(
            "this node could not pull {reference}: its registry set-up (credentials, cache or trust keys) failed; \
             ask the operator, whose node log has the cause"
        );
        return ApiError::new(status, "registry", message);
    }
    ApiError::new(status, "registry", e.to_string())
}

/// Pulls `reference` into this node's cache under the operator's
/// `[registries]` (or finds it there), capped at `[serve]
/// max-plugin-bytes`: its bytes, its origin and its repository.
async fn pull(
    state: &AppState,
    reference: &crate::registry::PluginReference,
    audience: Audience,
) -> ApiResult<(Bytes, crate::runs::Origin, String)> {
    let arg = PathBuf::from(format!("{}{reference}", crate::registry::reference::OCI_PREFIX));
    let cache = state.data_dir.join("registry");
    let resolved = crate::registry::resolve(&arg, &state.registries, Some(&cache))
        .await
        .map_err(|e| registry_failure(e, &reference.to_string(), audience))?;
    let Some((reference, pulled)) = resolved.pulled else {
        return Err(ApiError::bad_request("the reference names no registry"));
    };
    let (path, cap) = (resolved.path.clone(), state.max_plugin_bytes as u64);
    let bytes = blocking(state, move || crate::files::read_regular(&path, cap)).await?.map_err(|e| {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "plugin_too_large", format!("the pulled component: {e}"))
    })?;
    let origin = crate::runs::Origin {
        reference: reference.at_digest(&pulled.manifest_digest).to_string(),
        signature: pulled.signature,
    };
    Ok((Bytes::from(bytes), origin, reference.repository()))
}

/// Who decides on a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    /// The tenant, uploading it.
    Tenant,
    /// The operator, accepting it for the tenant.
    Operator,
}

/// A version to decide on: its repository, digest, and whether its asks
/// are consented to.
struct Decision<'a> {
    reference: &'a str,
    digest: &'a str,
    /// What names this very version: the reference at its manifest's digest.
    exact: &'a str,
    consent: Consent,
    /// Whether the request asked to accept wider authority.
    asked: bool,
}

/// How many times a decision is taken again when another node's decision
/// on the same reference was recorded first.
const DECISION_TRIES: usize = 8;

/// Decides on a version of a pulled plugin for `tenant`, against the
/// version the store holds as accepted, and records it (with an audit
/// entry) unless it is that very version: 409 `authority_widened`, naming
/// each new ask and who may accept it, for a version that asks for more
/// without consent.
async fn admit(
    state: &AppState,
    tenant: &Tenant,
    policy: &Policy,
    decision: &Decision<'_>,
    requested: &Requested,
    by: By,
) -> ApiResult<Accepted> {
    let authority = serde_json::to_string(requested).map_err(|e| internal(e.to_string()))?;
    for _ in 0..DECISION_TRIES {
        let previous = state.store.plugin_acceptance(&tenant.id, decision.reference).await.map_err(ApiError::store)?;
        let before = match &previous {
            Some(p) => match stored_authority(p) {
                Ok(asks) => Some((p.digest.as_str(), asks)),
                // The operator's acceptance replaces a record that cannot be read.
                Err(_) if by == By::Operator => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let accepted = acceptance::decide(
            before.as_ref().map(|(digest, asks)| (*digest, asks)),
            decision.reference,
            decision.digest,
            requested,
            decision.consent,
            FirstUse::Accept,
        )
        .map_err(|refused| widened(&refused, tenant, policy, decision))?;
        if accepted == Accepted::Same {
            return Ok(accepted);
        }
        let record = PluginAcceptance {
            tenant: tenant.id.clone(),
            reference: decision.reference.to_string(),
            digest: decision.digest.to_string(),
            authority: authority.clone(),
            accepted_ms: nexo_store::now_ms(),
            accepted_by: accepted_by(by, &accepted).to_string(),
        };
        let was = previous.as_ref().map(|p| p.digest.as_str());
        let (wider, narrower) = match &accepted {
            Accepted::Changed { diff, .. } => (labels(&diff.wider), labels(&diff.narrower)),
            _ => (Vec::new(), Vec::new()),
        };
        let data = json!({
            "reference": decision.reference,
            "digest": decision.digest,
            "was": was,
            "by": accepted_by(by, &accepted),
            "wider": wider,
            "narrower": narrower,
        });
        // The record and its audit entry are one write: neither stands without the other.
        let audit = ("plugin.accepted", &data);
        if state.store.record_plugin_acceptance(record, was, audit).await.map_err(ApiError::store)? {
            return Ok(accepted);
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!("{} is being decided on by other requests; try again", decision.reference),
    ))
}

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

/// How the record names who accepted a version.
fn accepted_by(by: By, accepted: &Accepted) -> &'static str {
    match (by, accepted) {
        (By::Operator, _) => "operator",
        (By::Tenant, Accepted::First) => "first-use",
        (By::Tenant, Accepted::Changed { diff, .. }) if !diff.wider.is_empty() => "tenant",
        (By::Tenant, _) => "no-wider",
    }
}

fn labels(asks: &[acceptance::Ask]) -> Vec<String> {
    asks.iter().map(ToString::to_string).collect()
}

/// The asks a stored acceptance records; a record that does not parse
/// accepts nothing.
fn stored_authority(record: &PluginAcceptance) -> ApiResult<Requested> {
    serde_json::from_str(&record.authority).map_err(|e| {
        tracing::error!(target: "nexo::server", "tenant {}'s acceptance of {} does not parse: {e}", record.tenant, record.reference);
        internal(format!(
            "the record of what was accepted for {} cannot be read; the operator's acceptance of a version \
             (POST /v1/tenants/{{name}}/accepted-plugins) replaces it",
            record.reference
        ))
    })
}

/// 409 for a version that asks for more than the accepted one.
fn widened(refused: &Refused, tenant: &Tenant, policy: &Policy, decision: &Decision<'_>) -> ApiError {
    let Refused::Wider { reference, digest, accepted, asks, .. } = refused else {
        return internal(refused.to_string());
    };
    let exact = decision.exact;
    let how = match policy.wider_authority {
        WiderAuthority::Tenant => format!(
            "review it, then send the request again naming this version by its digest, {{\"reference\": \"{exact}\", \
             \"accept_authority\": true}}"
        ),
        WiderAuthority::Operator => format!(
            "your policy leaves accepting wider authority to the operator{}: ask them to accept {exact} for tenant \
             `{}` (POST /v1/tenants/{}/accepted-plugins)",
            if decision.asked { ", so \"accept_authority\" accepts nothing here" } else { "" },
            tenant.name,
            tenant.name
        ),
    };
    ApiError::new(
        StatusCode::CONFLICT,
        "authority_widened",
        format!(
            "{reference} changed from the component {} to {} ({exact}), and the new version asks for more authority \
             than the one accepted: {}; {how}",
            acceptance::short(accepted),
            acceptance::short(digest),
            acceptance::requested::list(asks)
        ),
    )
}

/// `POST /v1/tenants/{name}/accepted-plugins`'s body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    /// The version to accept: a reference, best at its digest.
    pub reference: String,
}

/// `POST /v1/tenants/{name}/accepted-plugins` (admin): accepts the version
/// a reference names, and the authority it asks for, for the tenant,
/// whatever was accepted before. The component is pulled under the
/// operator's `[registries]` to read what it asks for.
pub async fn accept_plugin(
    State(state): State<AppState>,
    _: AdminCaller,
    Path(name): Path<String>,
    Json(body): Json<AcceptBody>,
) -> ApiResult<Json<Value>> {
    let tenant = tenants::find(&*state.store, &name).await?;
    let policy = policy_of(&tenant)?;
    let reference = parse_reference(&body.reference)?;
    if reference.digest().is_none() {
        return Err(ApiError::bad_request(format!(
            "name the version to accept by its digest ({}@sha256:…, as the tenant's refusal names it): a tag may \
             name another version by the time it is pulled",
            reference.repository()
        )));
    }
    let (bytes, origin, repository) = pull(&state, &reference, Audience::Operator).await?;
    let hashed = bytes.clone();
    let sha = blocking(&state, move || nexo_store::sha256_hex(&hashed)).await?;
    let label = PathBuf::from(format!("{sha}.wasm"));
    let plugin =
        off_api(
            &state,
            &state.compiles,
            (),
            move |engine| async move { Plugin::from_bytes(&engine, label, &bytes).await },
        )
        .await?
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin", e.to_string()))?;
    let requested = About::of(&plugin)?.requested;
    let digest = acceptance::file_digest(&sha);
    let decision = Decision {
        reference: &repository,
        digest: &digest,
        exact: &origin.reference,
        consent: Consent::Given,
        asked: true,
    };
    let accepted = admit(&state, &tenant, &policy, &decision, &requested, By::Operator).await?;
    Ok(Json(json!({
        "tenant": tenant.name,
        "reference": repository,
        "digest": digest,
        "origin": origin,
        "authority": requested,
        "note": accepted.note(&repository, &digest),
    })))
}

/// A stored plugin as the API shows it, with where it was pulled from.
fn plugin_json(p: &nexo_store::StoredPlugin) -> Value {
    let origin: Option<Value> = p.origin.as_deref().and_then(|o| serde_json::from_str(o).ok());
    json!({"id": p.sha256, "name": p.name, "world": p.world, "size": p.size, "created_ms": p.created_ms, "origin": origin})
}

/// `GET /v1/plugins`.
pub async fn list_plugins(State(state): State<AppState>, TenantCaller(tenant): TenantCaller) -> ApiResult<Json<Value>> {
    let plugins = state.store.plugins(&tenant.id).await.map_err(ApiError::store)?;
    let list: Vec<Value> = plugins.iter().map(plugin_json).collect();
    Ok(Json(json!({"plugins": list})))
}

/// `GET /v1/plugins/{id}`.
pub async fn get_plugin(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    match state.store.plugin(&tenant.id, &id).await.map_err(ApiError::store)? {
        Some(p) => Ok(Json(plugin_json(&p))),
        None => Err(ApiError::not_found("there is no such plugin for this tenant")),
    }
}
