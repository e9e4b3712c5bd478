//! The PostgreSQL backend: one database that any number of nexo processes,
//! on any number of machines, share.
//!
//! It runs the statements in [`crate::sql`], the same text as SQLite, with
//! the same code ([`crate::relational`]), in PostgreSQL's default
//! `READ COMMITTED` isolation: this module is PostgreSQL's [`Dialect`]. Where SQLite's
//! `BEGIN IMMEDIATE` holds the whole file, a transaction here locks the one
//! row it reads before it writes (`SELECT … FOR UPDATE`: a claim, a
//! transition, a cancel; a run's row `FOR NO KEY UPDATE`, which rows that
//! only name the run do not wait on), so of two processes claiming one run
//! exactly one wins and the other sees the run as the winner left it. Job claims take
//! `FOR UPDATE SKIP LOCKED`, so concurrent workers take different jobs
//! without waiting for each other.
//! An append to a session's thread updates the session's row only if its
//! message count is still the one the prompt started from; a racing append
//! waits for that row lock, then finds the new count and writes nothing.
//! A new prompt of a session, a retry of one, a batch that appends to a
//! thread and an expiry lock the session's row first (before any run's), so
//! the session rules hold between processes: one prompt in progress per
//! session, no retry behind a later prompt, no expiry under a live prompt.
//!
//! Opening migrates the schema in one transaction under an advisory lock
//! (`pg_advisory_xact_lock`), so processes that open a new database at once
//! migrate it once. A database may hold other programs' tables; it is
//! refused only when it holds tables with nexo's names but no
//! `nexo_schema`, or a schema from a newer nexo. The password in the URL
//! never appears in a message or in `Debug` output.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgArguments, PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgQueryResult, PgRow,
};
use sqlx::query::Query;
use sqlx::{Connection, Postgres, Transaction};

use crate::relational::{Arg, Dialect, List, Queue, SqlStore, bind};
use crate::sql::{self, Spelling};
use crate::{Location, SCHEMA_VERSION, StoreError, StoreResult, now_ms};

/// Connections per store: a process runs a handful of runs and workers.
const CONNECTIONS: u32 = 8;

/// How long an operation waits for a free connection, and opening for the
/// server, before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock migrations run under ("nexo" and 1): one key for
/// every nexo, so that concurrent opens of one database migrate it once.
const MIGRATION_LOCK: i64 = 0x6e65_786f_0000_0001;

/// The class of the advisory locks that hold a queue's turns while a job
/// is placed in it ("nexo" and 2; the second key is the queue's hash).
const QUEUE_LOCK: i32 = 0x6e65_7802;

// PostgreSQL's SQLSTATE codes that the store names.
const INVALID_PASSWORD: &str = "28P01";
const INVALID_AUTHORIZATION: &str = "28000";
const NO_SUCH_DATABASE: &str = "3D000";
const INSUFFICIENT_PRIVILEGE: &str = "42501";
const TOO_MANY_CONNECTIONS: &str = "53300";
const SERIALIZATION_FAILURE: &str = "40001";
const DEADLOCK: &str = "40P01";
const DATA_CORRUPTED: &str = "XX001";
/// The database server's disk is full (`disk_full`).
const DISK_FULL: &str = "53100";
const INDEX_CORRUPTED: &str = "XX002";

/// A store in a PostgreSQL database.
pub type PgStore = SqlStore<PgDatabase>;

/// A PostgreSQL database and the store's pool of connections to it: the
/// dialect of [`PgStore`].
pub struct PgDatabase {
    pool: PgPool,
    /// `postgres://USER@HOST:PORT/DATABASE`: never the password.
    location: String,
    /// The URL's password, as given and decoded, to keep out of messages.
    secrets: Vec<String>,
}

impl std::fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the pool: its options hold the password.
        f.debug_struct("PgDatabase").field("location", &self.location).finish_non_exhaustive()
    }
}

/// What the database holds before migrations run.
enum Found {
    /// No nexo tables (other programs' tables may be there).
    Empty,
    /// A nexo store at this schema version.
    Nexo(i64),
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`,
    /// with any parameter libpq's URLs take, such as `sslmode` or `host=/run/postgresql`)
    /// and migrates it to [`SCHEMA_VERSION`] as needed.
    ///
    /// A server that cannot be reached, a refused login or a missing
    /// database is [`StoreError::Open`], naming the cause and the fix; a
    /// database from a newer nexo is [`StoreError::TooNew`]; tables with
    /// nexo's names but no `nexo_schema`, or an empty one, are
    /// [`StoreError::Corrupt`]. Nothing is written to a database it refuses.
    pub async fn open(url: &str) -> StoreResult<PgStore> {
        let secrets = secrets(url);
        let shown = Location::Postgres(url.to_string()).to_string();
        let options = PgConnectOptions::from_str(url).map_err(|e| StoreError::Open {
            location: shown.clone(),
            reason: redact(
                &format!("the URL is not one PostgreSQL understands ({e}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE"),
                &secrets,
            ),
        })?;
        let location = describe(&options);
        // One connection first, made directly: the pool would retry a
        // refused connection until its timeout and then only say it timed
        // out. It runs the migrations.
        let mut conn =
            PgConnection::connect_with(&options).await.map_err(|e| open_error(&location, &options, &e, &secrets))?;
        let migrated = migrate(&mut conn, &location, &secrets).await;
        conn.close().await.ok();
        migrated?;
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(SqlStore::new(PgDatabase { pool, location, secrets }))
    }

    /// Closes every connection, waiting for them to finish.
    pub async fn close(&self) {
        self.dialect().pool.close().await;
    }
}

/// A write on PostgreSQL: a transaction, or one statement that commits by
/// itself.
#[derive(Debug)]
pub enum PgWrite {
    /// A transaction, committed or rolled back at its end.
    Transaction(Transaction<'static, Postgres>),
    /// A connection for one autocommit statement.
    Alone(PoolConnection<Postgres>),
}

impl Deref for PgWrite {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            PgWrite::Transaction(tx) => tx,
            PgWrite::Alone(conn) => conn,
        }
    }
}

impl DerefMut for PgWrite {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            PgWrite::Transaction(tx) => tx,
            PgWrite::Alone(conn) => conn,
        }
    }
}

/// PostgreSQL: a pool of connections that any number of processes share a
/// database with. A transaction locks the rows it reads before it writes
/// (`FOR UPDATE`), and job claims skip the rows other claims hold.
impl Dialect for PgDatabase {
    type Db = Postgres;
    type Args = PgArguments;
    type Conn = PgConnection;
    type Row = PgRow;
    type Read = PoolConnection<Postgres>;
    type Write = PgWrite;

    const LOCKS_ROWS: bool = true;
    const SQL: &'static Spelling = &sql::POSTGRES;

    fn location(&self) -> &str {
        &self.location
    }

    /// A database error as a [`StoreError`], naming the database.
    fn error(&self, e: &sqlx::Error) -> StoreError {
        let text = redact(&e.to_string(), &self.secrets);
        match sqlstate(e).as_deref() {
            Some(DATA_CORRUPTED | INDEX_CORRUPTED) => {
                StoreError::Corrupt { location: self.location.clone(), reason: text }
            }
            Some(DISK_FULL) => StoreError::Full { location: self.location.clone(), reason: text },
            Some(SERIALIZATION_FAILURE | DEADLOCK) => StoreError::Backend(format!(
                "{}: {text} (another process changed the same rows at the same moment; try again)",
                self.location
            )),
            _ => StoreError::Backend(format!("{}: {text}{}", self.location, connection_hint(e))),
        }
    }

    async fn read(&self) -> StoreResult<PoolConnection<Postgres>> {
        self.pool.acquire().await.map_err(|e| self.error(&e))
    }

    async fn begin(&self) -> StoreResult<PgWrite> {
        self.pool.begin().await.map(PgWrite::Transaction).map_err(|e| self.error(&e))
    }

    async fn single(&self) -> StoreResult<PgWrite> {
        self.read().await.map(PgWrite::Alone)
    }

    async fn end<T: Send>(&self, write: PgWrite, result: StoreResult<T>) -> StoreResult<T> {
        let PgWrite::Transaction(tx) = write else { return result };
        match result {
            Ok(value) => {
                tx.commit().await.map_err(|e| self.error(&e))?;
                Ok(value)
            }
            Err(e) => {
                // A failed rollback closes the connection; the first error is the one to tell.
                tx.rollback().await.ok();
                Err(e)
            }
        }
    }

    /// Nothing to open ahead: the pool connects on demand.
    async fn connect_all(&self) -> StoreResult<()> {
        Ok(())
    }

    /// A connection of its own that listens on [`crate::JOBS_CHANNEL`]. A
    /// lost connection is made again at the next wait; `on_due` is called
    /// then too, since a notification sent meanwhile is lost.
    async fn watch_jobs(&self, on_due: Arc<dyn Fn() + Send + Sync>) -> StoreResult<Option<crate::JobWatch>> {
        let mut listener = PgListener::connect_with(&self.pool).await.map_err(|e| self.error(&e))?;
        listener.listen(crate::JOBS_CHANNEL).await.map_err(|e| self.error(&e))?;
        let task = tokio::spawn(async move {
            loop {
                let heard = listener.recv().await;
                on_due();
                if heard.is_err() {
                    // Not a busy loop while the server is away.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
        Ok(Some(crate::JobWatch::new(task.abort_handle())))
    }

    /// A statement with its parameters, a list as an array.
    fn query(sql: &'static str, args: &[Arg<'_>]) -> Query<'static, Postgres, PgArguments> {
        bind(sqlx::query(sql), args, |query, list| match list {
            List::Texts(texts) => query.bind(texts),
            List::Ints(ints) => query.bind(ints),
        })
    }

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn append_messages<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        session: &'a str,
        first: i64,
        messages: &'a [Value],
    ) -> StoreResult<()> {
        for (seq, message) in (first..).zip(messages) {
            let message = message.to_string();
            let row: &[Arg<'_>] = &[session.into(), seq.into(), (&message).into()];
            Self::query(sql::APPEND_MESSAGE, row).execute(&mut *conn).await.map_err(|e| self.error(&e))?;
        }
        Ok(())
    }

    /// Takes the advisory lock of the queue ([`QUEUE_LOCK`] and its hash).
    async fn hold_queue<'a>(&'a self, conn: &'a mut PgConnection, queue: Queue<'a>) -> StoreResult<()> {
        let (statement, key) = match queue {
            Queue::OfRun(run) => (sql::LOCK_RUN_QUEUE, run),
            Queue::OfJob(job) => (sql::LOCK_JOB_QUEUE, job),
        };
        sqlx::query(statement).bind(QUEUE_LOCK).bind(key).execute(conn).await.map_err(|e| self.error(&e))?;
        Ok(())
    }
}

/// Brings the database to [`SCHEMA_VERSION`] in one transaction, under the
/// migration lock. Writes nothing to a database it refuses.
async fn migrate(conn: &mut PgConnection, location: &str, secrets: &[String]) -> StoreResult<()> {
    let fail = |e: sqlx::Error| StoreError::Open {
        location: location.to_string(),
        reason: redact(&format!("migrating the schema failed: {e}{}", privilege_hint(&e)), secrets),
    };
    let mut tx = conn.begin().await.map_err(fail)?;
    // Held until the transaction ends: another process opening the same
    // database waits here, then finds the schema this one created.
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await.map_err(fail)?;
    let current = match inspect(&mut tx, location).await.map_err(|e| match e {
        InspectError::Sql(e) => fail(e),
        InspectError::Store(e) => e,
    })? {
        Found::Empty => 0,
        Found::Nexo(v) if v > SCHEMA_VERSION => {
            tx.rollback().await.ok();
            return Err(StoreError::TooNew { location: location.to_string(), found: v, supported: SCHEMA_VERSION });
        }
        Found::Nexo(v) => v,
    };
    for migration in sql::MIGRATIONS.iter().filter(|m| m.version > current) {
        for statement in migration.statements {
            let statement = sql::POSTGRES.render(statement);
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut *tx).await.map_err(fail)?;
        }
        sqlx::query(sql::RECORD_MIGRATION)
            .bind(migration.version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
    }
    tx.commit().await.map_err(fail)
}

enum InspectError {
    Sql(sqlx::Error),
    Store(StoreError),
}

/// What the database's current schema holds: no nexo tables, or a nexo
/// store of some version. Nexo's table names without `nexo_schema` are
/// [`StoreError::Corrupt`].
async fn inspect(conn: &mut PgConnection, location: &str) -> Result<Found, InspectError> {
    // PostgreSQL's own catalogue: this probe is the one backend-specific query.
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = current_schema()")
            .fetch_all(&mut *conn)
            .await
            .map_err(InspectError::Sql)?;
    let corrupt = |reason: String| InspectError::Store(StoreError::Corrupt { location: location.to_string(), reason });
    if !tables.iter().any(|t| t == sql::SCHEMA_TABLE) {
        let ours: Vec<String> =
            tables.iter().filter(|t| sql::TABLES.contains(&t.as_str())).map(|t| format!("`{t}`")).collect();
        if ours.is_empty() {
            return Ok(Found::Empty);
        }
        return Err(corrupt(format!(
            "its schema has tables named like nexo's ({}) but no `{}` table: another program's; give nexo a \
             database or schema of its own",
            ours.join(", "),
            sql::SCHEMA_TABLE
        )));
    }
    let version: Option<i64> =
        sqlx::query_scalar(sql::SELECT_SCHEMA_VERSION).fetch_one(&mut *conn).await.map_err(InspectError::Sql)?;
    match version {
        Some(v) if v >= 1 => Ok(Found::Nexo(v)),
        _ => Err(corrupt(format!("its `{}` table records no schema version", sql::SCHEMA_TABLE))),
    }
}

/// `postgres://USER@HOST:PORT/DATABASE`, from the parsed options: the
/// password is not among them.
fn describe(options: &PgConnectOptions) -> String {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    format!("postgres://{user}@{}:{}/{database}", options.get_host(), options.get_port())
}

/// The URL's password, raw and percent-decoded, from its user part or a
/// `password=` parameter.
fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        found.push(password.to_string());
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some(password) = pair.strip_prefix("password=") {
                found.push(password.to_string());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|p| percent_decode(p)).collect();
    found.extend(decoded);
    found.retain(|p| !p.is_empty());
    found.sort();
    found.dedup();
    found
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with every secret replaced, whatever sqlx or the server put in it.
fn redact(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_string(), |text, secret| text.replace(secret.as_str(), "…"))
}

/// An error while connecting, as [`StoreError::Open`] naming the cause and
/// the fix.
fn open_error(location: &str, options: &PgConnectOptions, e: &sqlx::Error, secrets: &[String]) -> StoreError {
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    let server = format!("{}:{}", options.get_host(), options.get_port());
    let reason = match (e, sqlstate(e).as_deref()) {
        (_, Some(INVALID_PASSWORD | INVALID_AUTHORIZATION)) => format!(
            "PostgreSQL refused the login of user `{user}` ({e}): check the user name and password in the URL, \
             and that the server's pg_hba.conf lets this user in from here"
        ),
        (_, Some(NO_SUCH_DATABASE)) => format!(
            "the database `{database}` does not exist on {server}: create it (`createdb -h {} -p {} -U {user} \
             {database}`) or name an existing one in the URL",
            options.get_host(),
            options.get_port()
        ),
        (_, Some(TOO_MANY_CONNECTIONS)) => {
            format!("{e}: the server has no connection to spare; try again, or raise its max_connections")
        }
        (sqlx::Error::Io(io), _) if io.kind() == std::io::ErrorKind::ConnectionRefused => format!(
            "nothing accepts connections at {server} ({io}): start PostgreSQL there, or fix the host and port in \
             the URL"
        ),
        (sqlx::Error::Io(io), _) => {
            format!("cannot reach {server} ({io}): check the host and port in the URL and the network")
        }
        (sqlx::Error::Tls(tls), _) => {
            format!(
                "the TLS handshake with {server} failed ({tls}): check the server's certificate or the URL's sslmode"
            )
        }
        (sqlx::Error::PoolTimedOut, _) => format!(
            "{server} did not answer within {} s: check that PostgreSQL runs there and the network lets you in",
            ACQUIRE_TIMEOUT.as_secs()
        ),
        _ => format!("{e}{}", privilege_hint(e)),
    };
    StoreError::Open { location: location.to_string(), reason: redact(&reason, secrets) }
}

/// The SQLSTATE code of an error the server reported.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

fn privilege_hint(e: &sqlx::Error) -> &'static str {
    match sqlstate(e).as_deref() {
        Some(INSUFFICIENT_PRIVILEGE) => {
            " (the user may not create tables here: grant it CREATE on the schema, or give nexo a database it owns)"
        }
        _ => "",
    }
}

/// What to do about a lost connection, when that is what happened.
fn connection_hint(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            " (the connection to PostgreSQL was lost or none was free; check that the server is up, then try again)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_and_redacted() {
        let url = "postgres://nexo:s%40cret@db.example:5432/nexo?password=other";
        let found = secrets(url);
        for s in ["s%40cret", "s@cret", "other"] {
            assert!(found.iter().any(|f| f == s), "{found:?}");
        }
        assert_eq!(redact("bad s@cret and s%40cret", &found), "bad … and …");
        assert!(secrets("postgres://db.example/nexo").is_empty());
        assert!(secrets("postgres://nexo@db.example/nexo").is_empty());
    }

    #[test]
    fn the_location_has_no_password() {
        let options = PgConnectOptions::from_str("postgres://nexo:hunter2@db.example:6543/runs").unwrap_or_default();
        assert_eq!(describe(&options), "postgres://nexo@db.example:6543/runs");
    }
}
