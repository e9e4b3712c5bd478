//! The OpenAPI 3.1 document served at `/v1/openapi.json`.
//!
//! Written out by hand, beside the router in `mod.rs`: a test checks that
//! every route the router has is in it, and the other way round.

use serde_json::{Value, json};

fn op(summary: &str, tag: &str, ok: &str) -> Value {
    json!({
        "summary": summary,
        "tags": [tag],
        "responses": {
            ok: {"description": "success"},
            "401": {"$ref": "#/components/responses/Unauthorized"},
            "404": {"$ref": "#/components/responses/NotFound"},
        },
    })
}

fn with_body(mut operation: Value, content_type: &str, schema: Value) -> Value {
    operation["requestBody"] = json!({"required": true, "content": {content_type: {"schema": schema}}});
    operation
}

/// `POST /v1/plugins`: the component's bytes, or a registry reference.
fn plugin_upload() -> Value {
    let mut upload = with_body(
        op(
            "Upload an agent component (content-addressed, validated), or pull one by its registry reference \
             within the policy's `registries`",
            "plugins",
            "201",
        ),
        "application/wasm",
        json!({"type": "string", "format": "binary"}),
    );
    upload["requestBody"]["content"]["application/json"] = json!({"schema": {"type": "object",
        "required": ["reference"], "additionalProperties": false, "properties": {"reference": {"type": "string"},
            "accept_authority": {"type": "boolean", "description": "accept a new version's wider authority (where the policy's `wider-authority` is `tenant`)"}}}});
    upload["responses"]["409"] =
        json!({"description": "`authority_widened`: the pulled version asks for more authority than the accepted one"});
    upload
}

fn id_param(mut operation: Value, name: &str) -> Value {
    operation["parameters"] = json!([{"name": name, "in": "path", "required": true, "schema": {"type": "string"}}]);
    operation
}

/// `POST /v1/runs/{id}/signals/{name}`: its body is the signal's data.
fn signal() -> Value {
    let mut operation = with_body(
        op(
            "Send the run a signal: kept for its next wait-signal of the name; a run waiting for it wakes now",
            "runs",
            "202",
        ),
        "application/json",
        json!({"description": "the signal's data, any JSON (an empty body sends null)"}),
    );
    operation["requestBody"]["required"] = json!(false);
    operation["parameters"] = json!([
        {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "name", "in": "path", "required": true, "schema": {"type": "string", "maxLength": 200}},
    ]);
    operation["responses"]["400"] = json!({"description": "the name or the data cannot be sent (not JSON, too large)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    operation["responses"]["409"] = json!({"description": "the run has finished, or has been sent its most signals",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    operation
}

/// An approve or deny: its body names the call decided, and a call the run
/// no longer waits on is refused.
fn decision(operation: Value) -> Value {
    let mut operation =
        with_body(id_param(operation, "id"), "application/json", json!({"$ref": "#/components/schemas/Decision"}));
    operation["responses"]["400"] = json!({"description": "the body does not name the call decided (`seq`, `args-hash`)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    operation["responses"]["409"] = json!({"description": "`stale_approval`: the run does not wait on that call (now); \
        nothing was decided, and the message names the call it waits on, if any",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    operation
}

/// An upload: refused past the tenant's `workspace-bytes`.
fn workspace_upload(mut operation: Value) -> Value {
    operation["responses"]["413"] = json!({"description": "the file is larger than the whole quota"});
    operation["responses"]["507"] = json!({"description": "the file does not fit in what the quota has left"});
    operation
}

/// The routes under `/v1`, as `(method, path)`, in the document's order;
/// the unit test below holds the document to it, `tests/serve.rs` the router.
#[cfg_attr(not(test), allow(dead_code))]
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/plugins"),
    ("get", "/v1/plugins"),
    ("get", "/v1/plugins/{id}"),
    ("post", "/v1/runs"),
    ("get", "/v1/runs"),
    ("get", "/v1/runs/{id}"),
    ("get", "/v1/runs/{id}/events"),
    ("get", "/v1/runs/{id}/timeline"),
    ("post", "/v1/runs/{id}/approve"),
    ("post", "/v1/runs/{id}/deny"),
    ("post", "/v1/runs/{id}/resume"),
    ("post", "/v1/runs/{id}/cancel"),
    ("post", "/v1/runs/{id}/signals/{name}"),
    ("post", "/v1/schedules"),
    ("get", "/v1/schedules"),
    ("get", "/v1/schedules/{id}"),
    ("delete", "/v1/schedules/{id}"),
    ("post", "/v1/schedules/{id}/pause"),
    ("post", "/v1/schedules/{id}/resume"),
    ("get", "/v1/sessions"),
    ("post", "/v1/sessions/prompt"),
    ("get", "/v1/sessions/{id}"),
    ("delete", "/v1/sessions/{id}"),
    ("get", "/v1/usage"),
    ("get", "/v1/audit"),
    ("get", "/v1/workspace"),
    ("put", "/v1/workspace/{path}"),
    ("get", "/v1/workspace/{path}"),
    ("delete", "/v1/workspace/{path}"),
    ("post", "/v1/tenants"),
    ("get", "/v1/tenants"),
    ("put", "/v1/tenants/{name}/policy"),
    ("post", "/v1/tenants/{name}/keys"),
    ("post", "/v1/tenants/{name}/accepted-plugins"),
    ("post", "/v1/tenants/{name}/disable"),
    ("post", "/v1/tenants/{name}/enable"),
    ("delete", "/v1/keys/{id}"),
];

/// The document.
pub fn document() -> Value {
    let paths = json!({
        "/v1/plugins": {
            "post": plugin_upload(),
            "get": op("The tenant's plugins", "plugins", "200"),
        },
        "/v1/plugins/{id}": {"get": id_param(op("One plugin", "plugins", "200"), "id")},
        "/v1/runs": {
            "post": with_body(op("Start a run (queued; with wait, answered when it ends or suspends)", "runs", "202"),
                "application/json", json!({"$ref": "#/components/schemas/RunRequest"})),
            "get": op("The tenant's runs, newest first (?status=&limit=)", "runs", "200"),
        },
        "/v1/runs/{id}": {"get": id_param(op("One run, with its pending approval", "runs", "200"), "id")},
        "/v1/runs/{id}/events": {"get": id_param(op("The run's events as server-sent events (Last-Event-ID resumes)", "runs", "200"), "id")},
        "/v1/runs/{id}/timeline": {"get": id_param(op("The run's timeline: its passes, model turns (durations, tokens), tool calls with their full arguments and results, and waits", "runs", "200"), "id")},
        "/v1/runs/{id}/approve": {"post": decision(op("Approve the pending call named in the body, and resume", "runs", "200"))},
        "/v1/runs/{id}/deny": {"post": decision(op("Deny the pending call named in the body, and resume", "runs", "200"))},
        "/v1/runs/{id}/resume": {"post": id_param(op("Resume a suspended or failed run with an input", "runs", "200"), "id")},
        "/v1/runs/{id}/cancel": {"post": id_param(op("Cancel a run", "runs", "200"), "id")},
        "/v1/runs/{id}/signals/{name}": {"post": signal()},
        "/v1/schedules": {
            "post": with_body(op("Add a schedule: the run (as POST /v1/runs takes it) started at each occurrence of a cron expression in a time zone, exactly once across nodes; within the policy and quotas", "schedules", "201"),
                "application/json", json!({"type": "object", "required": ["cron", "run"], "properties": {
                    "cron": {"type": "string", "description": "five fields, or six with seconds first"},
                    "timezone": {"type": "string", "description": "an IANA name; UTC if not given"},
                    "missed": {"type": "string", "enum": ["skip", "run-once"], "description": "occurrences missed while no node was up"},
                    "run": {"$ref": "#/components/schemas/RunRequest"}}})),
            "get": op("The tenant's schedules, oldest first", "schedules", "200"),
        },
        "/v1/schedules/{id}": {
            "get": id_param(op("One schedule: its next occurrence, runs started and skipped, and what happened last", "schedules", "200"), "id"),
            "delete": id_param(op("Delete a schedule (the runs it started stay)", "schedules", "204"), "id"),
        },
        "/v1/schedules/{id}/pause": {"post": id_param(op("Pause a schedule", "schedules", "200"), "id")},
        "/v1/schedules/{id}/resume": {"post": id_param(op("Resume a schedule at its next occurrence to come", "schedules", "200"), "id")},
        "/v1/sessions": {"get": op("The tenant's sessions, most recently updated first", "sessions", "200")},
        "/v1/sessions/prompt": {"post": with_body(op("Prompt a session (opened if new): a run that continues its thread", "sessions", "202"),
            "application/json", json!({"type": "object", "required": ["plugin", "instance", "input"],
                "properties": {"plugin": {"type": "string"}, "instance": {"type": "string"}, "input": {"type": "string"}, "wait": {"type": "boolean"}}}))},
        "/v1/sessions/{id}": {
            "get": id_param(op("A session, its thread and its prompts", "sessions", "200"), "id"),
            "delete": id_param(op("Delete a session with its thread and runs", "sessions", "204"), "id"),
        },
        "/v1/usage": {"get": op("Metered usage per hour, and totals (?since_ms=)", "usage", "200")},
        "/v1/audit": {"get": op("The tenant's hash-chained audit log (?after=)", "audit", "200")},
        "/v1/workspace": {"get": op("The workspace's files with their sizes, the bytes they hold and the quota", "workspace", "200")},
        "/v1/workspace/{path}": {
            "put": workspace_upload(with_body(id_param(op("Upload a file (replacing it), within the `workspace-bytes` quota", "workspace", "201"), "path"),
                "application/octet-stream", json!({"type": "string", "format": "binary"}))),
            "get": id_param(op("Download a file", "workspace", "200"), "path"),
            "delete": id_param(op("Delete a file, or a directory with what it holds", "workspace", "204"), "path"),
        },
        "/v1/tenants": {
            "post": with_body(op("Create a tenant and its first key (admin)", "admin", "201"),
                "application/json", json!({"type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string"}, "policy": {"$ref": "#/components/schemas/Policy"}}})),
            "get": op("Every tenant (admin)", "admin", "200"),
        },
        "/v1/tenants/{name}/policy": {"put": with_body(id_param(op("Replace a tenant's policy (admin)", "admin", "200"), "name"),
            "application/json", json!({"$ref": "#/components/schemas/Policy"}))},
        "/v1/tenants/{name}/keys": {"post": id_param(op("A new key for the tenant, shown once (admin)", "admin", "201"), "name")},
        "/v1/tenants/{name}/accepted-plugins": {"post": with_body(id_param(op("Accept, for the tenant, the version a registry reference names and the authority it asks for (admin)", "admin", "200"), "name"),
            "application/json", json!({"type": "object", "required": ["reference"], "additionalProperties": false,
                "properties": {"reference": {"type": "string", "description": "best at its digest: HOST/REPO@sha256:…"}}}))},
        "/v1/tenants/{name}/disable": {"post": id_param(op("Disable a tenant (admin)", "admin", "200"), "name")},
        "/v1/tenants/{name}/enable": {"post": id_param(op("Enable a tenant (admin)", "admin", "200"), "name")},
        "/v1/keys/{id}": {"delete": id_param(op("Revoke a key (admin)", "admin", "200"), "id")},
    });
    let capability = json!({"type": "string", "enum": ["read", "glob", "write", "shell", "fetch", "search"]});
    let mode = json!({"type": "string", "enum": ["read-only", "auto", "approve"]});
    let command_rules = json!({"type": "array", "description": "ordered rules on the shell's commands; the first whose prefix matches decides", "items": {
        "type": "object", "required": ["prefix", "decision"], "additionalProperties": false, "properties": {
            "prefix": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}], "description": "an argv prefix: one plain command, or its words"},
            "decision": {"type": "string", "enum": ["allow", "ask", "deny"]},
            "reason": {"type": "string"}}}});
    let descendant = json!({"type": "object", "properties": {
        "id": {"type": "string"}, "parent": {"type": "string"}, "depth": {"type": "integer"},
        "agent": {"type": "string"}, "status": {"type": "string"}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "nexo serve", "version": env!("CARGO_PKG_VERSION"),
            "description": "Hosts tenants' agent components: plugins, runs, events, approvals, usage and audit."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Unauthorized": {"description": "no key, an unknown key, or a revoked one", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "NotFound": {"description": "nothing by that id for this caller (another tenant's records included)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}}}}},
                "RunRequest": {"type": "object", "required": ["plugin", "input"], "additionalProperties": false, "properties": {
                    "plugin": {"type": "string", "description": "the plugin's id (SHA-256)"},
                    "input": {"type": "string"},
                    "wait": {"type": "boolean"},
                    "allow": {"type": "array", "items": capability},
                    "mode": mode,
                    "sandbox": {"type": "string", "enum": ["virtual", "local"]},
                    "fetch-hosts": {"type": "array", "items": {"type": "string"}, "description": "within the policy's; empty: none"},
                    "net-hosts": {"type": "array", "items": {"type": "string"}, "description": "the shell's network, `HOST[:PORT]` within the policy's `net-hosts`; empty: none"},
                    "model": {"type": "string"},
                    "mcp-servers": {"type": "array", "items": {"type": "string"}, "description": "within the policy's; empty: none"},
                    "mcp-allow": {"type": "array", "items": {"type": "string"}, "description": "within the policy's; empty: none"},
                    "agents": {"type": "object", "additionalProperties": {"type": "string"}, "description": "the tenant's plugins the run may start as child runs (run-agent): name → plugin id"},
                    "hooks": {"type": "array", "items": {"type": "string"}, "maxItems": 4, "description": "the tenant's own hook plugins (ids) asked besides its policy's: they only narrow"}}},
                "Decision": {"type": "object", "required": ["seq", "args-hash"], "additionalProperties": false, "properties": {
                    "seq": {"type": "integer", "description": "the pending call's sequence number (`approval.seq`)"},
                    "args-hash": {"type": "string", "description": "the SHA-256 of the call: its capability, tool and arguments (`approval.args_hash`)"}}},
                "Approval": {"type": "object", "properties": {
                    "capability": {"type": "string"}, "tool": {"type": "string"}, "arguments": {},
                    "seq": {"type": "integer"}, "args_hash": {"type": "string"},
                    "decision": {"type": ["string", "null"], "enum": ["approved", "denied", null]},
                    "created_ms": {"type": "integer"}}},
                "Run": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "status": {"type": "string", "enum": ["queued", "running", "suspended", "done", "failed", "cancelled"]},
                    "agent": {"type": "string"}, "plugin": {"type": "string"}, "input": {"type": "string"},
                    "result": {"type": ["string", "null"]}, "error": {"type": ["string", "null"]},
                    "suspend_reason": {"type": ["string", "null"]}, "resume_key": {"type": ["string", "null"]},
                    "wake_ms": {"type": ["integer", "null"], "description": "when a run sleeping on a durable timer, or waiting for a signal with a timeout, wakes (ms since the epoch)"},
                    "signal_wait": {"type": ["string", "null"], "description": "the signal a suspended run waits for (wait-signal)"},
                    "parent": {"type": ["string", "null"], "description": "the run that started this one with run-agent"},
                    "children": {"type": "array", "description": "one run's (GET /v1/runs/{id}): the runs below it, depth first", "items": descendant},
                    "created_ms": {"type": "integer"}, "updated_ms": {"type": "integer"},
                    "origin": {"type": ["object", "null"], "description": "where its plugin was pulled from: `reference` at its digest, and `signature`"},
                    "approval": {"oneOf": [{"$ref": "#/components/schemas/Approval"}, {"type": "null"}]}}},
                "Policy": {"type": "object", "additionalProperties": false, "properties": {
                    "allow": {"type": "array", "items": capability},
                    "mode": mode,
                    "sandboxes": {"type": "array", "items": {"type": "string", "enum": ["virtual", "local"]}},
                    "fetch-hosts": {"type": "array", "items": {"type": "string"}},
                    "net-hosts": {"type": "array", "items": {"type": "string"}, "description": "`HOST` (ports 80 and 443) or `HOST:PORT` the local sandbox's commands may reach through nexo's egress proxy; empty: no network"},
                    "models": {"type": "array", "items": {"type": "string"}},
                    "mcp-servers": {"type": "array", "items": {"type": "string"}},
                    "mcp-allow": {"type": "array", "items": {"type": "string"}},
                    "hooks": {"type": "array", "items": {"type": "string"}, "description": "the operator's hooks (`[serve.hooks]`) asked about each of the tenant's runs, by name"},
                    "command-rules": command_rules,
                    "quotas": {"type": "object"},
                    "registries": {"type": "array", "items": {"type": "string"}},
                    "wider-authority": {"type": "string", "enum": ["operator", "tenant"]}}},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_every_route_and_no_other() {
        let doc = document();
        let paths = doc["paths"].as_object().into_iter().flatten();
        let mut listed: Vec<(String, String)> = paths
            .flat_map(|(path, ops)| ops.as_object().into_iter().flatten().map(move |(m, _)| (m.clone(), path.clone())))
            .collect();
        listed.sort();
        let mut routes: Vec<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
        routes.sort();
        assert_eq!(listed, routes);
    }
}
