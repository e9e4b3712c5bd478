//! A tenant's workspace files over the API: `GET /v1/workspace` lists them
//! with their sizes; `PUT`, `GET` and `DELETE /v1/workspace/{path}` upload,
//! download and delete one, within the tenant's `workspace-bytes` quota.
//!
//! The workspace is the directory a tenant's local sandbox works in,
//! `tenants/<tenant-id>/workspace` under the data directory, created on
//! first need. Every path is resolved under a cap-std handle opened at the
//! workspace itself, so `..`, absolute paths and symlinks that lead out are
//! refused (a run may plant a symlink: from here it leads nowhere), and
//! only the caller's own workspace is ever opened.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use futures::StreamExt;
use nexo_store::Tenant;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::api::{ApiError, ApiResult, AppState, audit};
use super::auth::TenantCaller;
use crate::policy::Policy;

/// What a workspace may hold when the policy sets no `workspace-bytes`
/// (1 GiB).
pub const DEFAULT_WORKSPACE_BYTES: u64 = 1 << 30;

/// The most entries a listing shows.
const MAX_LISTED: usize = 10_000;

/// How deep a listing or a size count goes.
const MAX_DEPTH: usize = 64;

/// The name an upload has until it is whole; never listed or served.
const PARTIAL: &str = ".nexo-upload-";

pub use crate::data_dir::{ensure_workspace as ensure, workspace as dir};

fn storage(what: &str, e: impl std::fmt::Display) -> ApiError {
    tracing::error!(target: "nexo::server", "workspace: {what}: {e}");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "storage", "the server cannot reach the workspace now; try again")
}

/// A handle on the tenant's workspace, the root of every path below.
fn open(state: &AppState, tenant: &Tenant) -> ApiResult<Dir> {
    let path = ensure(&state.data_dir, &tenant.id).map_err(|e| storage("create", e))?;
    Dir::open_ambient_dir(&path, ambient_authority()).map_err(|e| storage("open", e))
}

/// `path` as a relative path inside the workspace, or a 400 that says why
/// not. The check is lexical; the handle refuses symlinks that lead out.
fn relative(path: &str) -> ApiResult<PathBuf> {
    let bad = |why: &str| {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_path", format!("`{path}` is not a path in the workspace: {why}"))
    };
    if path.contains('\0') {
        return Err(bad("it holds a NUL byte"));
    }
    if path.starts_with('/') {
        return Err(bad("absolute paths are refused; name the file from the workspace's top, as `dir/file.txt`"));
    }
    let mut out = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) if part.to_string_lossy().starts_with(PARTIAL) => {
                return Err(bad("names an upload in progress"));
            }
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(bad("`..` is refused; name the file from the workspace's top")),
            Component::RootDir | Component::Prefix(_) => return Err(bad("absolute paths are refused")),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(bad("it names the workspace itself (GET /v1/workspace lists it)"));
    }
    if out.components().count() > MAX_DEPTH {
        return Err(bad(&format!("it is deeper than {MAX_DEPTH} directories, the most the workspace holds")));
    }
    Ok(out)
}

/// A filesystem error on `path`, as the caller should see it.
fn io_error(path: &str, e: io::Error) -> ApiError {
    // cap-std's words for a path (a symlink, say) that would leave the handle.
    if e.kind() == io::ErrorKind::PermissionDenied && e.to_string().contains("outside of the filesystem") {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "outside_workspace",
            format!("`{path}` leads outside the workspace (through a symlink), so it is refused"),
        );
    }
    match e.kind() {
        io::ErrorKind::NotFound => ApiError::not_found(&format!("there is no `{path}` in the workspace")),
        io::ErrorKind::NotADirectory => ApiError::new(
            StatusCode::CONFLICT,
            "not_a_directory",
            format!("a part of `{path}` is a file, not a directory"),
        ),
        io::ErrorKind::IsADirectory | io::ErrorKind::DirectoryNotEmpty => {
            ApiError::new(StatusCode::CONFLICT, "is_a_directory", format!("`{path}` is a directory"))
        }
        _ => storage(path, e),
    }
}

/// The tenant's `workspace-bytes` and `workspace-files`, or their defaults.
fn quota(tenant: &Tenant) -> ApiResult<(u64, u64)> {
    let policy = Policy::from_stored(&tenant.policy).map_err(|m| ApiError::new(StatusCode::CONFLICT, "policy", m))?;
    Ok((policy.quotas.workspace_bytes.unwrap_or(DEFAULT_WORKSPACE_BYTES), policy.quotas.workspace_files_cap()))
}

/// Runs filesystem work off the async threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| storage("task", e))?
}

/// What a walk of the workspace found.
#[derive(Default)]
struct Walk {
    entries: Vec<Value>,
    bytes: u64,
    /// Files, directories and other entries, uploads in progress included.
    count: u64,
    /// The listing was cut at [`MAX_LISTED`].
    truncated: bool,
    /// The count stopped short (past [`MAX_DEPTH`] or past the file cap),
    /// so `bytes` and `count` are lower bounds: an upload is refused.
    incomplete: bool,
}

/// Walks `dir` (at `prefix` in the workspace) without following symlinks:
/// lists what is there and adds up its entries and the bytes of its
/// regular files, uploads in progress included (a run may name a file so).
/// Stops once past `max_count` entries. With `sweep`, uploads in progress
/// are removed instead: the caller holds the tenant's upload lock, so any
/// there is a leftover.
fn walk(dir: &Dir, prefix: &Path, depth: usize, max_count: u64, sweep: bool, out: &mut Walk) -> io::Result<()> {
    for entry in dir.entries()? {
        if out.count > max_count {
            out.incomplete = true;
            return Ok(());
        }
        let entry = entry?;
        let name = entry.file_name();
        let kind = entry.file_type()?;
        let path = prefix.join(&name);
        let partial = name.to_string_lossy().starts_with(PARTIAL);
        if partial && sweep && !kind.is_dir() && dir.remove_file(&name).is_ok() {
            continue;
        }
        out.count = out.count.saturating_add(1);
        let shown = path.to_string_lossy().into_owned();
        let mut listed = json!({"path": shown});
        if kind.is_dir() {
            listed["kind"] = "dir".into();
            if depth < MAX_DEPTH {
                walk(&entry.open_dir()?, &path, depth + 1, max_count, sweep, out)?;
            } else {
                out.incomplete = true;
            }
        } else if kind.is_file() {
            let size = entry.metadata()?.len();
            out.bytes = out.bytes.saturating_add(size);
            listed["kind"] = "file".into();
            listed["size"] = size.into();
        } else if kind.is_symlink() {
            listed["kind"] = "symlink".into();
        } else {
            listed["kind"] = "other".into();
        }
        if partial {
            continue;
        }
        if out.entries.len() < MAX_LISTED {
            out.entries.push(listed);
        } else {
            out.truncated = true;
        }
    }
    Ok(())
}

/// `GET /v1/workspace`: the tenant's files and directories, with the sizes
/// of its files, the bytes and entries they hold and the quotas.
pub async fn list(State(state): State<AppState>, TenantCaller(tenant): TenantCaller) -> ApiResult<Json<Value>> {
    let (quota, files_quota) = quota(&tenant)?;
    let root = open(&state, &tenant)?;
    let walks = walk_permits(&tenant.id);
    let _permit = walks.acquire_owned().await.map_err(|e| storage("walk", e))?;
    let found = blocking(move || {
        let mut found = Walk::default();
        walk(&root, Path::new(""), 0, files_quota, false, &mut found).map_err(|e| io_error(".", e))?;
        Ok(found)
    })
    .await?;
    let mut entries = found.entries;
    entries.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(Json(json!({
        "files": entries,
        "bytes": found.bytes,
        "quota_bytes": quota,
        "entries": found.count,
        "quota_files": files_quota,
        "truncated": found.truncated || found.incomplete,
    })))
}

/// The tenant's entry in a per-tenant map of this node.
fn per_tenant<T: Default>(map: &'static OnceLock<Mutex<HashMap<String, Arc<T>>>>, tenant: &str) -> Arc<T> {
    let mut map = map.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    map.entry(tenant.to_string()).or_default().clone()
}

/// One upload at a time per tenant on this node, so that two cannot both
/// fit in the room one of them leaves.
fn upload_lock(tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    per_tenant(&LOCKS, tenant)
}

/// How many walks of one tenant's workspace run at once on this node.
const WALKS_PER_TENANT: usize = 2;

/// A tenant's walks wait here, so that many listings cannot tie up the
/// blocking threads (and the disk) for everyone.
fn walk_permits(tenant: &str) -> Arc<tokio::sync::Semaphore> {
    struct Walks(Arc<tokio::sync::Semaphore>);
    impl Default for Walks {
        fn default() -> Self {
            Walks(Arc::new(tokio::sync::Semaphore::new(WALKS_PER_TENANT)))
        }
    }
    static WALKS: OnceLock<Mutex<HashMap<String, Arc<Walks>>>> = OnceLock::new();
    per_tenant(&WALKS, tenant).0.clone()
}

/// An upload's file until it is whole: removed unless kept, off the
/// async threads.
struct Partial {
    dir: Option<Dir>,
    name: String,
    kept: bool,
}

impl Partial {
    /// Removes the file before a refusal is answered: a client told that
    /// nothing was kept finds nothing. (Drop only covers a dropped request.)
    async fn discard(mut self) {
        if let Some(dir) = self.dir.take() {
            let name = std::mem::take(&mut self.name);
            let _ = tokio::task::spawn_blocking(move || dir.remove_file(&name)).await;
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take().filter(|_| !self.kept) {
            let name = std::mem::take(&mut self.name);
            // Outside a runtime (never, here) the next upload's sweep removes it.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn_blocking(move || dir.remove_file(&name));
            }
        }
    }
}

/// 507: the workspace holds more than can be counted (deeper than
/// [`MAX_DEPTH`] or past its file cap), so no upload can be said to fit.
fn uncounted(path: &str, files_quota: u64) -> ApiError {
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "workspace_quota",
        format!(
            "`{path}` is refused: the workspace holds more than {files_quota} files and directories \
             (`workspace-files`) or directories deeper than {MAX_DEPTH}, so its use cannot be counted; \
             delete some (DELETE /v1/workspace/{{path}})"
        ),
    )
}

/// 507: the upload would take the workspace past its file cap.
fn too_many(path: &str, files_quota: u64, count: u64) -> ApiError {
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "workspace_quota",
        format!(
            "`{path}` does not fit: the workspace holds {count} of its {files_quota} files and directories \
             (`workspace-files`); delete some (DELETE /v1/workspace/{{path}}) or ask the operator for a larger quota"
        ),
    )
}

/// 413: the file is larger than the whole quota.
fn too_large(path: &str, quota: u64, size: Option<u64>) -> ApiError {
    let size = size.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "workspace_quota",
        format!("`{path}`{size} is larger than the workspace's whole quota of {quota} bytes (`workspace-bytes`)"),
    )
}

/// 507: the file does not fit in what the workspace has left.
fn no_room(path: &str, quota: u64, used: u64, size: Option<u64>) -> ApiError {
    let size = size.map_or_else(String::new, |n| format!(" ({n} bytes)"));
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "workspace_quota",
        format!(
            "`{path}`{size} does not fit: the workspace holds {used} of its {quota} bytes (`workspace-bytes`); \
             delete files (DELETE /v1/workspace/{{path}}) or ask the operator for a larger quota"
        ),
    )
}

/// `PUT /v1/workspace/{path}`: stores the body as the file at `path`
/// (replacing it), creating its directories, if the workspace's quota has
/// room: 413 for a file larger than the whole quota, 507 for one that does
/// not fit in what is left. The file appears whole or not at all.
///
/// A refusal is answered before the body is read to its end, so it says
/// `Connection: close`: the server drops the connection after it, and a
/// client that reused it for its next request would see that request cut.
pub async fn put(
    state: State<AppState>,
    tenant: TenantCaller,
    path: UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match store(state, tenant, path, headers, body).await {
        Ok(stored) => stored,
        Err(refused) => {
            let mut refused = refused.into_response();
            refused.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            refused
        }
    }
}

/// What [`put`] does, its refusal not yet marked.
async fn store(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let (quota, files_quota) = quota(&tenant)?;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if let Some(size) = declared.filter(|&n: &u64| n > quota) {
        return Err(too_large(&path, quota, Some(size)));
    }
    let lock = upload_lock(&tenant.id);
    let _one_at_a_time = lock.lock().await;
    let walks = walk_permits(&tenant.id);
    let permit = walks.acquire_owned().await.map_err(|e| storage("walk", e))?;
    let root = open(&state, &tenant)?;
    let (shown, target) = (path.clone(), rel.clone());
    let partial_name = format!("{PARTIAL}{}", nexo_store::new_run_id());
    let aside = partial_name.clone();
    let (used, parent, replaced, file) = blocking(move || {
        let mut found = Walk::default();
        walk(&root, Path::new(""), 0, files_quota, true, &mut found).map_err(|e| io_error(".", e))?;
        if found.incomplete {
            return Err(uncounted(&shown, files_quota));
        }
        let existing = match root.symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "is_a_directory",
                    format!("`{shown}` is a directory; upload to a path inside it"),
                ));
            }
            Ok(meta) if meta.is_file() => Some(meta.len()),
            Ok(_) => Some(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&shown, e)),
        };
        // The entries this upload adds: the file and the directories it needs.
        let ancestors = target.ancestors().skip(1).filter(|p| !p.as_os_str().is_empty());
        let new_dirs = ancestors.filter(|p| root.symlink_metadata(p).is_err()).count() as u64;
        let added = new_dirs + u64::from(existing.is_none());
        if found.count.saturating_add(added) > files_quota {
            return Err(too_many(&shown, files_quota, found.count));
        }
        let parent = match target.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => {
                root.create_dir_all(p).map_err(|e| io_error(&shown, e))?;
                root.open_dir(p).map_err(|e| io_error(&shown, e))?
            }
            None => root,
        };
        let used = found.bytes.saturating_sub(existing.unwrap_or(0));
        if let Some(size) = declared.filter(|&n| n > quota.saturating_sub(used)) {
            return Err(no_room(&shown, quota, used, Some(size)));
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(0o644);
        let file = parent.open_with(&aside, &options).map_err(|e| io_error(&shown, e))?;
        Ok((used, parent, existing.is_some(), file))
    })
    .await?;
    drop(permit);
    let keeper = parent.try_clone().map_err(|e| storage("clone", e))?;
    let mut partial = Partial { dir: Some(keeper), name: partial_name.clone(), kept: false };
    let room = quota.saturating_sub(used);
    let name = rel.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    let stored = async {
        let mut file = tokio::fs::File::from_std(file.into_std());
        let mut stream = body.into_data_stream();
        let mut written: u64 = 0;
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("the upload of `{path}` was cut short: {e}")))?;
            written = written.saturating_add(chunk.len() as u64);
            if written > quota {
                return Err(too_large(&path, quota, None));
            }
            if written > room {
                return Err(no_room(&path, quota, used, None));
            }
            file.write_all(&chunk).await.map_err(|e| storage(&path, e))?;
        }
        file.sync_all().await.map_err(|e| storage(&path, e))?;
        drop(file);
        let shown = path.clone();
        blocking(move || parent.rename(&partial_name, &parent, &name).map_err(|e| io_error(&shown, e))).await?;
        Ok(written)
    }
    .await;
    let written = match stored {
        Ok(written) => written,
        Err(refused) => {
            partial.discard().await;
            return Err(refused);
        }
    };
    partial.kept = true;
    audit(&state, &tenant, "workspace.uploaded", json!({"path": path, "size": written})).await?;
    let status = if replaced { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(json!({"path": path, "size": written}))).into_response())
}

/// `GET /v1/workspace/{path}`: the file's bytes. Only a regular file with
/// no other hard link is served: a link a run made to a file elsewhere
/// would otherwise read it.
pub async fn get(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    UrlPath(path): UrlPath<String>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let root = open(&state, &tenant)?;
    let shown = path.clone();
    let (file, size) = blocking(move || {
        let mut options = OpenOptions::new();
        // Never blocks on a FIFO with no writer, never takes a terminal.
        options.read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = root.open_with(&rel, &options).map_err(|e| io_error(&shown, e))?.into_std();
        let meta = file.metadata().map_err(|e| io_error(&shown, e))?;
        if meta.is_dir() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "is_a_directory",
                format!("`{shown}` is a directory; GET /v1/workspace lists the workspace"),
            ));
        }
        if !meta.is_file() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_a_file",
                format!("`{shown}` is not a regular file (a FIFO, a device or a socket), so it is not served"),
            ));
        }
        if meta.nlink() > 1 {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "linked_file",
                format!("`{shown}` has other hard links, which may lead outside the workspace, so it is not served"),
            ));
        }
        Ok((file, meta.len()))
    })
    .await?;
    let file = tokio::fs::File::from_std(file);
    let chunks = futures::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buffer = vec![0u8; 64 * 1024];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(n) => {
                buffer.truncate(n);
                Some((Ok::<Bytes, io::Error>(Bytes::from(buffer)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    let headers =
        [(header::CONTENT_TYPE, "application/octet-stream".to_string()), (header::CONTENT_LENGTH, size.to_string())];
    Ok((StatusCode::OK, headers, Body::from_stream(chunks)).into_response())
}

/// `DELETE /v1/workspace/{path}`: removes the file, or the directory with
/// everything in it. A symlink is removed itself, never what it names.
pub async fn delete(
    State(state): State<AppState>,
    TenantCaller(tenant): TenantCaller,
    UrlPath(path): UrlPath<String>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let root = open(&state, &tenant)?;
    let shown = path.clone();
    blocking(move || {
        let meta = root.symlink_metadata(&rel).map_err(|e| io_error(&shown, e))?;
        let removed = if meta.is_dir() { root.remove_dir_all(&rel) } else { root.remove_file(&rel) };
        removed.map_err(|e| io_error(&shown, e))
    })
    .await?;
    audit(&state, &tenant, "workspace.deleted", json!({"path": path})).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_name_a_file() {
        assert_eq!(relative("a/./b.txt").ok(), Some(PathBuf::from("a/b.txt")));
        for bad in ["", ".", "/etc/passwd", "../x", "a/../../x", "a/..", "a\0b", ".nexo-upload-r1", "d/.nexo-upload-x"]
        {
            assert!(relative(bad).is_err(), "{bad:?} is refused");
        }
        let deepest = vec!["d"; MAX_DEPTH].join("/");
        assert!(relative(&deepest).is_ok(), "{MAX_DEPTH} levels are counted");
        let err = relative(&format!("{deepest}/x")).err().map(|e| format!("{e:?}")).unwrap_or_default();
        assert!(err.contains(&MAX_DEPTH.to_string()), "a deeper path is refused, naming the limit: {err}");
    }

    fn scratch() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn a_file_below_the_deepest_counted_level_makes_the_count_fail_closed() {
        let (tmp, root) = scratch();
        let deep = tmp.path().join(vec!["d"; MAX_DEPTH + 2].join("/"));
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("big"), vec![0u8; 4096]).unwrap();
        let mut found = Walk::default();
        walk(&root, Path::new(""), 0, u64::MAX, false, &mut found).unwrap();
        assert!(found.incomplete, "the uncounted file is not silently left out");
    }

    #[test]
    fn the_count_covers_files_and_directories_and_stops_past_the_cap() {
        let (tmp, root) = scratch();
        for i in 0..10 {
            std::fs::create_dir(tmp.path().join(format!("d{i}"))).unwrap();
            std::fs::write(tmp.path().join(format!("d{i}/f")), b"").unwrap();
        }
        let mut found = Walk::default();
        walk(&root, Path::new(""), 0, 100, false, &mut found).unwrap();
        assert_eq!((found.count, found.incomplete), (20, false), "empty files and directories count too");
        let mut capped = Walk::default();
        walk(&root, Path::new(""), 0, 5, false, &mut capped).unwrap();
        assert!(capped.incomplete && capped.count <= 7, "the walk stops once past the cap: {}", capped.count);
    }

    #[test]
    fn a_leftover_upload_is_swept_by_the_next_upload_and_never_listed() {
        let (tmp, root) = scratch();
        std::fs::create_dir(tmp.path().join("in")).unwrap();
        std::fs::write(tmp.path().join("in").join(format!("{PARTIAL}r1")), vec![0u8; 100]).unwrap();
        let mut listed = Walk::default();
        walk(&root, Path::new(""), 0, 100, false, &mut listed).unwrap();
        assert_eq!(listed.entries.len(), 1, "only `in` is listed");
        assert_eq!(listed.bytes, 100, "a listing still counts it: a run may name a file so");
        let mut swept = Walk::default();
        walk(&root, Path::new(""), 0, 100, true, &mut swept).unwrap();
        assert_eq!((swept.bytes, swept.count), (0, 1));
        assert!(!tmp.path().join("in").join(format!("{PARTIAL}r1")).exists(), "removed");
    }
}
