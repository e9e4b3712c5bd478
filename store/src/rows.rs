//! Rows of [`crate::sql`]'s statements decoded into the store's types, for
//! either relational backend: the column names and what makes a row
//! damaged are the same in both. A backend's row is read through
//! [`Columns`], whose few column types every backend decodes alike.

use serde_json::Value;

use crate::{
    ApiKey, Approval, AuditEntry, Decision, Entry, Job, JobKind, JobLease, JobStatus, Lease, Missed, PluginAcceptance,
    Run, RunStatus, RunTemplate, RunUsage, Schedule, Session, SignIn, Signal, StoreError, StoredEvent, StoredPlugin,
    Tenant, Usage,
};

/// How a backend reports a failed read ([`StoreError::Backend`] with its
/// location and hints) and a damaged row ([`StoreError::Corrupt`]).
pub(crate) struct Errors<'a> {
    /// A column that could not be read.
    pub(crate) read: &'a dyn Fn(&sqlx::Error) -> StoreError,
    /// A value that makes no sense.
    pub(crate) corrupt: &'a dyn Fn(String) -> StoreError,
}

fn json(text: &str, what: &str, errors: &Errors<'_>) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| (errors.corrupt)(format!("{what} is not JSON: {e}")))
}

fn unsigned(n: i64, what: impl FnOnce() -> String, errors: &Errors<'_>) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| (errors.corrupt)(what()))
}

fn count(n: i64, what: impl FnOnce() -> String, errors: &Errors<'_>) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|_| (errors.corrupt)(what()))
}

/// A row of either backend, read by column name: the column types the
/// store uses.
pub trait Columns {
    /// A `TEXT` column.
    fn text(&self, name: &str) -> Result<String, sqlx::Error>;
    /// A `TEXT` column that may be `NULL`.
    fn maybe_text(&self, name: &str) -> Result<Option<String>, sqlx::Error>;
    /// A `BIGINT` column.
    fn int(&self, name: &str) -> Result<i64, sqlx::Error>;
    /// A `BIGINT` column that may be `NULL`.
    fn maybe_int(&self, name: &str) -> Result<Option<i64>, sqlx::Error>;
    /// A column of raw bytes.
    fn bytes(&self, name: &str) -> Result<Vec<u8>, sqlx::Error>;
    /// The `BIGINT` column at `index`, for a statement that answers values
    /// rather than named columns.
    fn int_at(&self, index: usize) -> Result<i64, sqlx::Error>;
    /// The `TEXT` column at `index`, as [`Columns::int_at`].
    fn text_at(&self, index: usize) -> Result<String, sqlx::Error>;
}

impl<R> Columns for R
where
    R: sqlx::Row,
    for<'n> &'n str: sqlx::ColumnIndex<R>,
    usize: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn text(&self, name: &str) -> Result<String, sqlx::Error> {
        self.try_get(name)
    }

    fn maybe_text(&self, name: &str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(name)
    }

    fn int(&self, name: &str) -> Result<i64, sqlx::Error> {
        self.try_get(name)
    }

    fn maybe_int(&self, name: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(name)
    }

    fn bytes(&self, name: &str) -> Result<Vec<u8>, sqlx::Error> {
        self.try_get(name)
    }

    fn int_at(&self, index: usize) -> Result<i64, sqlx::Error> {
        self.try_get(index)
    }

    fn text_at(&self, index: usize) -> Result<String, sqlx::Error> {
        self.try_get(index)
    }
}

/// A column type the store reads.
trait Column: Sized {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error>;
}

impl Column for String {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error> {
        row.text(name)
    }
}

impl Column for Option<String> {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error> {
        row.maybe_text(name)
    }
}

impl Column for i64 {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error> {
        row.int(name)
    }
}

impl Column for Option<i64> {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error> {
        row.maybe_int(name)
    }
}

impl Column for Vec<u8> {
    fn read(row: &impl Columns, name: &str) -> Result<Self, sqlx::Error> {
        row.bytes(name)
    }
}

fn column<T: Column>(row: &impl Columns, name: &str, errors: &Errors<'_>) -> Result<T, StoreError> {
    T::read(row, name).map_err(|e| (errors.read)(&e))
}

/// A run's status column.
pub(crate) fn run_status(row: &impl Columns, errors: &Errors<'_>) -> Result<RunStatus, StoreError> {
    let status: String = column(row, "status", errors)?;
    RunStatus::parse(&status).ok_or_else(|| (errors.corrupt)(format!("a run has the unknown status `{status}`")))
}

/// A session's prompt in progress, from
/// [`crate::sql::PROMPT_IN_PROGRESS`]: its id and status.
pub(crate) fn prompt(row: &impl Columns, errors: &Errors<'_>) -> Result<(String, RunStatus), StoreError> {
    Ok((column(row, "id", errors)?, run_status(row, errors)?))
}

/// Who holds a run, from [`crate::sql::RUN_OWNER`].
pub(crate) fn lease_owner(row: &impl Columns, errors: &Errors<'_>) -> Result<Option<String>, StoreError> {
    column(row, "lease_owner", errors)
}

/// A run, from [`crate::sql::SELECT_RUN`]'s columns.
pub(crate) fn run(row: &impl Columns, errors: &Errors<'_>) -> Result<Run, StoreError> {
    let id: String = column(row, "id", errors)?;
    let grant: String = column(row, "grant_json", errors)?;
    let owner: Option<String> = column(row, "lease_owner", errors)?;
    let until: Option<i64> = column(row, "lease_until_ms", errors)?;
    let lease = match (owner, until) {
        (Some(owner), Some(until_ms)) => Some(Lease { owner, until_ms }),
        (None, None) => None,
        _ => return Err((errors.corrupt)(format!("run `{id}` has half a lease"))),
    };
    Ok(Run {
        agent: column(row, "agent", errors)?,
        kind: column(row, "kind", errors)?,
        source: column(row, "source", errors)?,
        component_sha256: column(row, "component_sha256", errors)?,
        input: column(row, "input", errors)?,
        grant: json(&grant, &format!("run `{id}`'s grant"), errors)?,
        status: run_status(row, errors)?,
        suspend_reason: column(row, "suspend_reason", errors)?,
        resume_key: column(row, "resume_key", errors)?,
        resume_input: column(row, "resume_input", errors)?,
        result: column(row, "result", errors)?,
        error: column(row, "error", errors)?,
        created_ms: column(row, "created_ms", errors)?,
        updated_ms: column(row, "updated_ms", errors)?,
        lease,
        session: column(row, "session", errors)?,
        tenant: column(row, "tenant", errors)?,
        wake_ms: column(row, "wake_ms", errors)?,
        signal_wait: column(row, "signal_wait", errors)?,
        wake_job: column(row, "wake_job", errors)?,
        parent: column(row, "parent", errors)?,
        id,
    })
}

/// A schedule, from [`crate::sql::SELECT_SCHEDULE`]'s columns.
pub(crate) fn schedule(row: &impl Columns, errors: &Errors<'_>) -> Result<Schedule, StoreError> {
    let id: String = column(row, "id", errors)?;
    let missed: String = column(row, "missed", errors)?;
    let grant: String = column(row, "grant_json", errors)?;
    let paused: i64 = column(row, "paused", errors)?;
    Ok(Schedule {
        tenant: column(row, "tenant", errors)?,
        cron: column(row, "cron", errors)?,
        timezone: column(row, "timezone", errors)?,
        missed: Missed::parse(&missed)
            .ok_or_else(|| (errors.corrupt)(format!("schedule `{id}` has the unknown missed policy `{missed}`")))?,
        paused: paused != 0,
        next_ms: column(row, "next_ms", errors)?,
        template: RunTemplate {
            agent: column(row, "agent", errors)?,
            kind: column(row, "kind", errors)?,
            source: column(row, "source", errors)?,
            component_sha256: column(row, "component_sha256", errors)?,
            input: column(row, "input", errors)?,
            grant: json(&grant, &format!("schedule `{id}`'s grant"), errors)?,
        },
        created_ms: column(row, "created_ms", errors)?,
        updated_ms: column(row, "updated_ms", errors)?,
        started: column(row, "started", errors)?,
        skipped: column(row, "skipped", errors)?,
        last_run: column(row, "last_run", errors)?,
        note: column(row, "note", errors)?,
        id,
    })
}

/// A signal, from [`crate::sql::NEXT_SIGNAL`]'s columns.
pub(crate) fn signal(row: &impl Columns, errors: &Errors<'_>) -> Result<Signal, StoreError> {
    Ok(Signal {
        id: column(row, "id", errors)?,
        run: column(row, "run", errors)?,
        name: column(row, "name", errors)?,
        data: column(row, "data", errors)?,
        sent_ms: column(row, "sent_ms", errors)?,
    })
}

/// A tenant, from [`crate::sql::SELECT_TENANT`]'s columns.
pub(crate) fn tenant(row: &impl Columns, errors: &Errors<'_>) -> Result<Tenant, StoreError> {
    let id: String = column(row, "id", errors)?;
    let policy: String = column(row, "policy", errors)?;
    let disabled: i64 = column(row, "disabled", errors)?;
    Ok(Tenant {
        name: column(row, "name", errors)?,
        policy: json(&policy, &format!("tenant `{id}`'s policy"), errors)?,
        disabled: match disabled {
            0 => false,
            1 => true,
            n => return Err((errors.corrupt)(format!("tenant `{id}` has the disabled flag {n}, not 0 or 1"))),
        },
        created_ms: column(row, "created_ms", errors)?,
        updated_ms: column(row, "updated_ms", errors)?,
        id,
    })
}

/// Tenant `id`'s audit head, from [`crate::sql::AUDIT_HEAD`]: `None`
/// while its log is empty.
pub(crate) fn audit_head(
    id: &str,
    row: &impl Columns,
    errors: &Errors<'_>,
) -> Result<Option<(u64, String)>, StoreError> {
    let seq = unsigned(
        column(row, "audit_seq", errors)?,
        || format!("tenant `{id}`'s audit head has a negative sequence number"),
        errors,
    )?;
    let hash: String = column(row, "audit_hash", errors)?;
    Ok((seq > 0).then_some((seq, hash)))
}

/// One tenant's audit head, from [`crate::sql::AUDIT_HEADS`]:
/// `(tenant, seq, hash)`, `0` for an empty log.
pub(crate) fn audit_heads_row(row: &impl Columns, errors: &Errors<'_>) -> Result<(String, u64, String), StoreError> {
    let id: String = column(row, "id", errors)?;
    let seq = unsigned(
        column(row, "audit_seq", errors)?,
        || format!("tenant `{id}`'s audit head has a negative sequence number"),
        errors,
    )?;
    let hash: String = column(row, "audit_hash", errors)?;
    Ok((id, seq, hash))
}

/// An audit entry, from [`crate::sql::AUDIT`].
pub(crate) fn audit_entry(row: &impl Columns, errors: &Errors<'_>) -> Result<AuditEntry, StoreError> {
    let tenant: String = column(row, "tenant", errors)?;
    Ok(AuditEntry {
        seq: unsigned(
            column(row, "seq", errors)?,
            || format!("tenant `{tenant}`'s audit log has a negative sequence number"),
            errors,
        )?,
        kind: column(row, "kind", errors)?,
        data: column(row, "data", errors)?,
        at_ms: column(row, "at_ms", errors)?,
        prev: column(row, "prev", errors)?,
        hash: column(row, "hash", errors)?,
        tenant,
    })
}

/// An API key, from [`crate::sql::SELECT_KEY_BY_HASH`]'s columns.
pub(crate) fn api_key(row: &impl Columns, errors: &Errors<'_>) -> Result<ApiKey, StoreError> {
    Ok(ApiKey {
        id: column(row, "id", errors)?,
        tenant: column(row, "tenant", errors)?,
        hash: column(row, "hash", errors)?,
        created_ms: column(row, "created_ms", errors)?,
        revoked_ms: column(row, "revoked_ms", errors)?,
    })
}

/// A console sign-in, from [`crate::sql::SELECT_SIGN_IN`]'s columns.
pub(crate) fn sign_in(row: &impl Columns, errors: &Errors<'_>) -> Result<SignIn, StoreError> {
    Ok(SignIn {
        id_hash: column(row, "id_hash", errors)?,
        tenant: column(row, "tenant", errors)?,
        key_hash: column(row, "key_hash", errors)?,
        created_ms: column(row, "created_ms", errors)?,
        expires_ms: column(row, "expires_ms", errors)?,
    })
}

/// A plugin, from [`crate::sql::SELECT_PLUGIN`]'s columns.
pub(crate) fn plugin(row: &impl Columns, errors: &Errors<'_>) -> Result<StoredPlugin, StoreError> {
    let tenant: String = column(row, "tenant", errors)?;
    let sha256: String = column(row, "sha256", errors)?;
    Ok(StoredPlugin {
        size: unsigned(
            column(row, "size", errors)?,
            || format!("tenant `{tenant}`'s plugin {sha256} has a negative size"),
            errors,
        )?,
        name: column(row, "name", errors)?,
        world: column(row, "world", errors)?,
        created_ms: column(row, "created_ms", errors)?,
        origin: column(row, "origin", errors)?,
        tenant,
        sha256,
    })
}

/// A tenant's acceptance of a plugin, from
/// [`crate::sql::SELECT_PLUGIN_ACCEPTANCE`].
pub(crate) fn plugin_acceptance(row: &impl Columns, errors: &Errors<'_>) -> Result<PluginAcceptance, StoreError> {
    Ok(PluginAcceptance {
        tenant: column(row, "tenant", errors)?,
        reference: column(row, "reference", errors)?,
        digest: column(row, "digest", errors)?,
        authority: column(row, "authority", errors)?,
        accepted_ms: column(row, "accepted_ms", errors)?,
        accepted_by: column(row, "accepted_by", errors)?,
    })
}

/// A plugin's bytes, from [`crate::sql::PLUGIN_BYTES`].
pub(crate) fn plugin_bytes(row: &impl Columns, errors: &Errors<'_>) -> Result<Vec<u8>, StoreError> {
    column(row, "bytes", errors)
}

/// One hour of a tenant's usage, from [`crate::sql::USAGE`].
pub(crate) fn usage(row: &impl Columns, errors: &Errors<'_>) -> Result<Usage, StoreError> {
    let tenant: String = column(row, "tenant", errors)?;
    let period_ms: i64 = column(row, "period_ms", errors)?;
    let counter = |name: &str| -> Result<u64, StoreError> {
        unsigned(
            column(row, name, errors)?,
            || format!("tenant `{tenant}`'s usage at {period_ms} has a negative {name} count"),
            errors,
        )
    };
    Ok(Usage {
        runs: counter("runs")?,
        tokens: counter("tokens")?,
        cpu_ticks: counter("cpu_ticks")?,
        egress_bytes: counter("egress_bytes")?,
        cost_nanos: counter("cost_nanos")?,
        period_ms,
        tenant,
    })
}

/// A run's counters, from [`crate::sql::RUN_USAGE`].
pub(crate) fn run_usage(row: &impl Columns, run: &str, errors: &Errors<'_>) -> Result<RunUsage, StoreError> {
    let counter = |name: &str| -> Result<u64, StoreError> {
        unsigned(column(row, name, errors)?, || format!("run `{run}`'s usage has a negative {name} count"), errors)
    };
    Ok(RunUsage {
        tokens: counter("tokens")?,
        cpu_ticks: counter("cpu_ticks")?,
        egress_bytes: counter("egress_bytes")?,
        cost_nanos: counter("cost_nanos")?,
    })
}

/// A session, from [`crate::sql::SELECT_SESSION`]'s columns.
pub(crate) fn session(row: &impl Columns, errors: &Errors<'_>) -> Result<Session, StoreError> {
    let id: String = column(row, "id", errors)?;
    Ok(Session {
        agent: column(row, "agent", errors)?,
        instance: column(row, "instance", errors)?,
        messages: unsigned(
            column(row, "messages", errors)?,
            || format!("session `{id}` has a negative message count"),
            errors,
        )?,
        created_ms: column(row, "created_ms", errors)?,
        updated_ms: column(row, "updated_ms", errors)?,
        id,
    })
}

/// One message of session `id`'s thread, from [`crate::sql::THREAD`].
pub(crate) fn message(id: &str, row: &impl Columns, errors: &Errors<'_>) -> Result<Value, StoreError> {
    let message: String = column(row, "message", errors)?;
    json(&message, &format!("a message of session `{id}`'s thread"), errors)
}

/// Run `id`'s pending approval, from [`crate::sql::SELECT_APPROVAL`].
pub(crate) fn approval(id: &str, row: &impl Columns, errors: &Errors<'_>) -> Result<Approval, StoreError> {
    let arguments: String = column(row, "arguments", errors)?;
    let decision: Option<String> = column(row, "decision", errors)?;
    let decision = match decision {
        None => None,
        Some(d) => Some(
            Decision::parse(&d)
                .ok_or_else(|| (errors.corrupt)(format!("run `{id}`'s approval has the unknown decision `{d}`")))?,
        ),
    };
    Ok(Approval {
        seq: unsigned(
            column(row, "seq", errors)?,
            || format!("run `{id}`'s approval has a negative sequence number"),
            errors,
        )?,
        capability: column(row, "capability", errors)?,
        tool: column(row, "tool", errors)?,
        arguments: json(&arguments, &format!("run `{id}`'s approval arguments"), errors)?,
        args_hash: column(row, "args_hash", errors)?,
        component_sha256: column(row, "component_sha256", errors)?,
        decision,
        created_ms: column(row, "created_ms", errors)?,
    })
}

/// One of run `id`'s journal entries, from [`crate::sql::JOURNAL`].
pub(crate) fn entry(id: &str, row: &impl Columns, errors: &Errors<'_>) -> Result<Entry, StoreError> {
    let bad = || format!("run `{id}`'s journal has a negative sequence number");
    Ok(Entry {
        seq: unsigned(column(row, "seq", errors)?, bad, errors)?,
        end: unsigned(column(row, "end_seq", errors)?, bad, errors)?,
        interface: column(row, "interface", errors)?,
        function: column(row, "function", errors)?,
        args_hash: column(row, "args_hash", errors)?,
        result: column(row, "result", errors)?,
        started_ms: column(row, "started_ms", errors)?,
        ended_ms: column(row, "ended_ms", errors)?,
    })
}

/// An event, from [`crate::sql::EVENTS`].
pub(crate) fn event(row: &impl Columns, errors: &Errors<'_>) -> Result<StoredEvent, StoreError> {
    let data: String = column(row, "data", errors)?;
    let id: i64 = column(row, "id", errors)?;
    Ok(StoredEvent {
        id,
        run: column(row, "run", errors)?,
        kind: column(row, "kind", errors)?,
        data: json(&data, &format!("event {id}'s data"), errors)?,
        at_ms: column(row, "at_ms", errors)?,
    })
}

/// One of run `id`'s checkpoints, from [`crate::sql::CHECKPOINTS`].
pub(crate) fn checkpoint(id: &str, row: &impl Columns, errors: &Errors<'_>) -> Result<(String, Value), StoreError> {
    let name: String = column(row, "name", errors)?;
    let value: String = column(row, "value", errors)?;
    let value = json(&value, &format!("run `{id}`'s checkpoint `{name}`"), errors)?;
    Ok((name, value))
}

/// A job, from [`crate::sql::SELECT_JOB`]'s columns.
pub(crate) fn job(row: &impl Columns, errors: &Errors<'_>) -> Result<Job, StoreError> {
    let id: String = column(row, "id", errors)?;
    let kind: String = column(row, "kind", errors)?;
    let status: String = column(row, "status", errors)?;
    let payload: String = column(row, "payload", errors)?;
    let worker: Option<String> = column(row, "lease_worker", errors)?;
    let token: Option<i64> = column(row, "lease_token", errors)?;
    let until: Option<i64> = column(row, "lease_until_ms", errors)?;
    let lease = match (worker, token, until) {
        (Some(worker), Some(token), Some(until_ms)) => Some(JobLease { worker, token, until_ms }),
        (None, None, None) => None,
        _ => return Err((errors.corrupt)(format!("job `{id}` has part of a lease"))),
    };
    let bad_count = |what: &str| format!("job `{id}` has a negative or huge {what}");
    let queue: String = column(row, "queue", errors)?;
    Ok(Job {
        run: column(row, "run", errors)?,
        tenant: Some(queue).filter(|q| !q.is_empty()),
        turn: column(row, "turn", errors)?,
        kind: JobKind::parse(&kind)
            .ok_or_else(|| (errors.corrupt)(format!("job `{id}` has the unknown kind `{kind}`")))?,
        payload: json(&payload, &format!("job `{id}`'s payload"), errors)?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| (errors.corrupt)(format!("job `{id}` has the unknown status `{status}`")))?,
        attempts: count(column(row, "attempts", errors)?, || bad_count("attempt count"), errors)?,
        max_attempts: count(column(row, "max_attempts", errors)?, || bad_count("attempt limit"), errors)?,
        backoff_ms: column(row, "backoff_ms", errors)?,
        not_before_ms: column(row, "not_before_ms", errors)?,
        lease,
        error: column(row, "error", errors)?,
        created_ms: column(row, "created_ms", errors)?,
        updated_ms: column(row, "updated_ms", errors)?,
        id,
    })
}
