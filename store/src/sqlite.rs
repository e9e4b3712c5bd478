//! The SQLite backend, the embedded default.
//!
//! One file, in WAL mode with `synchronous=FULL` (a commit is on disk when
//! it returns, power loss included), foreign keys on and a 5 s busy
//! timeout. Writes go through one connection, in turn (SQLite has one
//! writer anyway; queuing them here keeps them off the busy handler), and
//! under load in groups that share one commit ([`crate::writer`]): the
//! connection that checked and migrated the file. Reads go
//! through a small pool of read-only connections opened on first use. The
//! writer is not pooled because sqlx's pool pings a connection on every
//! release: one more round trip to its worker thread per write, which the
//! next write waits for (see benches/journal.rs). Every transaction that
//! reads before it writes starts with `BEGIN IMMEDIATE`, which takes the
//! write lock first, so two processes sharing the file cannot both claim a
//! run.
//!
//! Opening never changes a file that is not already a nexo store or empty:
//! a file that is not SQLite, another program's database, or a database
//! from a newer nexo is refused before anything is written (not even the
//! journal mode). The statements themselves are in [`crate::sql`], and the
//! code that runs them in [`crate::relational`], both shared with the
//! PostgreSQL backend: this module is SQLite's [`Dialect`], what differs.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteQueryResult,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Sqlite};

use crate::relational::{Arg, Dialect, List, Queue, SqlStore, bind, json_list};
use crate::sql::{self, Spelling};
use crate::writer::{Turn, WriteCounts, Writer};
use crate::{SCHEMA_VERSION, StoreError, StoreResult, now_ms};

/// How long a statement waits for another process's write lock before it
/// fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// WAL pages after which a commit checkpoints them into the database
/// (SQLite's default is 1000). The WAL outlives a process that exits
/// without closing the store, and the next process's first connection
/// reads all of it to rebuild its index: a 4 MB WAL made that 2–3 ms of a
/// one-shot `nexo run`, 512 KB keeps it under a few tenths.
const WAL_AUTOCHECKPOINT: u32 = 128;

/// Read connections: WAL readers never block the writer or each other, and
/// a process of nexo reads from a handful of tasks at most.
const READERS: u32 = 4;

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

// SQLite's primary result codes (the low byte of an extended code) that
// the store names: the first two mean the file is damaged or is not a
// database.
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_NOTADB: i64 = 26;
const SQLITE_BUSY: i64 = 5;
const SQLITE_READONLY: i64 = 8;
const SQLITE_FULL: i64 = 13;

/// A store in an SQLite file.
pub type SqliteStore = SqlStore<SqliteFile>;

/// An SQLite file and the store's connections to it: the dialect of
/// [`SqliteStore`].
#[derive(Debug)]
pub struct SqliteFile {
    path: PathBuf,
    location: String,
    /// The one connection every write goes through, in order, committed
    /// in groups under load ([`crate::writer`]).
    writer: Writer,
    /// Read-only connections for reads that need no lock.
    reader: SqlitePool,
}

/// The settings one connection runs with, as SQLite reports them
/// ([`SqliteStore::settings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `PRAGMA journal_mode`: `wal`.
    pub journal_mode: String,
    /// `PRAGMA synchronous`: 2 (`FULL`).
    pub synchronous: i64,
    /// `PRAGMA foreign_keys`.
    pub foreign_keys: bool,
    /// `PRAGMA busy_timeout`, in milliseconds.
    pub busy_timeout_ms: i64,
}

/// The settings of a store's write connection and of one of its read
/// connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The connection every write goes through.
    pub writer: ConnectionSettings,
    /// A read connection.
    pub reader: ConnectionSettings,
}

/// What the file holds before migrations run.
enum Found {
    /// Nothing: a new or empty file.
    Empty,
    /// A nexo store at this schema version.
    Nexo(i64),
}

impl SqliteStore {
    /// Opens the store in the file at `path`, creating it (mode 0600, and
    /// its missing parent directories with mode 0700) and migrating it to
    /// [`SCHEMA_VERSION`] as needed.
    ///
    /// Refuses, without changing the file: one that is not an SQLite
    /// database or is damaged, or an SQLite database with tables of its own
    /// but not nexo's ([`StoreError::Corrupt`]); one with a newer schema
    /// ([`StoreError::TooNew`]).
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        prepare_file(&path, &location)?;

        // No journal mode here: it is a property of the file, changed only
        // once the file has proved to be ours (see `migrate`).
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(false)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Full)
            .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT.to_string());

        // The connection that checked and migrated the file stays on as the
        // writer: closing it, as the file's only connection, would checkpoint
        // the WAL (three fsyncs) only for the next connection to recreate it.
        let mut writer = options.connect().await.map_err(|e| open_error(&location, &e))?;
        if let Err(e) = migrate(&mut writer, &location).await {
            // A failure to close changes nothing about what `migrate` did.
            writer.close().await.ok();
            return Err(e);
        }
        // Readers connect on first use: a one-shot run may read nothing.
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_lazy_with(options.clone().read_only(true));
        restrict_side_files(&path);
        let writer = Writer::new(writer, options, location.clone(), db_error);
        Ok(SqlStore::new(SqliteFile { path, location, writer, reader }))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.dialect().path
    }

    /// How many writes this store has made durable, and in how many
    /// commits: under load, writes share them ([`crate::writer`]).
    pub fn write_counts(&self) -> WriteCounts {
        self.dialect().writer.counts()
    }

    /// How many read connections are open: none until the first read or
    /// [`crate::Backend::connect_all`].
    pub fn open_readers(&self) -> u32 {
        self.dialect().reader.size()
    }

    /// The settings the store's connections run with, as SQLite reports
    /// them (for `nexo doctor` and tests).
    pub async fn settings(&self) -> StoreResult<Settings> {
        let db = self.dialect();
        let mut writer = db.writer.bare().await?;
        let mut reader = db.reader.acquire().await.map_err(|e| db.error(&e))?;
        Ok(Settings {
            writer: db.connection_settings(&mut writer).await?,
            reader: db.connection_settings(&mut reader).await?,
        })
    }

    /// Closes every connection, waiting for them to finish. The writer
    /// closes last: as the file's last connection it checkpoints the WAL
    /// into the database file and removes it (a read-only connection
    /// cannot). Dropping the store closes them too, in the background, and
    /// may leave the WAL for the next open to use: no commit is lost either
    /// way.
    pub async fn close(&self) {
        self.dialect().reader.close().await;
        self.dialect().writer.close().await;
    }
}

impl SqliteFile {
    async fn connection_settings(&self, conn: &mut SqliteConnection) -> StoreResult<ConnectionSettings> {
        let journal_mode: String = self.pragma(conn, "PRAGMA journal_mode").await?;
        let synchronous: i64 = self.pragma(conn, "PRAGMA synchronous").await?;
        let foreign_keys: i64 = self.pragma(conn, "PRAGMA foreign_keys").await?;
        let busy_timeout_ms: i64 = self.pragma(conn, "PRAGMA busy_timeout").await?;
        Ok(ConnectionSettings {
            journal_mode: journal_mode.to_ascii_lowercase(),
            synchronous,
            foreign_keys: foreign_keys != 0,
            busy_timeout_ms,
        })
    }

    async fn pragma<T>(&self, conn: &mut SqliteConnection, pragma: &'static str) -> StoreResult<T>
    where
        T: for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite> + Send + Unpin,
    {
        sqlx::query_scalar(pragma).fetch_one(conn).await.map_err(|e| self.error(&e))
    }
}

/// SQLite: one file, one writer. A write takes the store's write
/// connection in turn ([`Writer`]) and holds the whole file from its first
/// statement, so what PostgreSQL locks row by row needs no lock here.
impl Dialect for SqliteFile {
    type Db = Sqlite;
    type Args = SqliteArguments;
    type Conn = SqliteConnection;
    type Row = SqliteRow;
    type Read = PoolConnection<Sqlite>;
    type Write = Turn;

    const LOCKS_ROWS: bool = false;
    const SQL: &'static Spelling = &sql::SQLITE;

    fn location(&self) -> &str {
        &self.location
    }

    fn error(&self, e: &sqlx::Error) -> StoreError {
        db_error(&self.location, e)
    }

    async fn read(&self) -> StoreResult<PoolConnection<Sqlite>> {
        self.reader.acquire().await.map_err(|e| self.error(&e))
    }

    async fn begin(&self) -> StoreResult<Turn> {
        self.writer.turn().await
    }

    async fn single(&self) -> StoreResult<Turn> {
        self.writer.single().await
    }

    async fn end<T: Send>(&self, write: Turn, result: StoreResult<T>) -> StoreResult<T> {
        write.end(result).await
    }

    async fn connect_all(&self) -> StoreResult<()> {
        // Held together, so that each acquire must open a new connection.
        let mut held = Vec::new();
        for _ in 0..READERS {
            held.push(self.read().await?);
        }
        Ok(())
    }

    /// A statement with its parameters, a list as JSON text.
    fn query(sql: &'static str, args: &[Arg<'_>]) -> Query<'static, Sqlite, SqliteArguments> {
        bind(sqlx::query(sql), args, |query, list| match list {
            List::Texts(texts) => query.bind(json_list(texts)),
            List::Ints(ints) => query.bind(json_list(ints)),
        })
    }

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn append_messages<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        session: &'a str,
        first: i64,
        messages: &'a [Value],
    ) -> StoreResult<()> {
        // A few hundred rows per statement, well under SQLite's limit of
        // bound parameters.
        let numbered: Vec<(i64, &Value)> = (first..).zip(messages).collect();
        for chunk in numbered.chunks(300) {
            let mut insert = sqlx::QueryBuilder::<Sqlite>::new(sql::APPEND_MESSAGES);
            insert.push_values(chunk, |mut row, (seq, message)| {
                row.push_bind(session).push_bind(*seq).push_bind(message.to_string());
            });
            insert.build().execute(&mut *conn).await.map_err(|e| self.error(&e))?;
        }
        Ok(())
    }

    /// Nothing to hold: the write holds the whole file already.
    async fn hold_queue<'a>(&'a self, _conn: &'a mut SqliteConnection, _queue: Queue<'a>) -> StoreResult<()> {
        Ok(())
    }
}

/// Creates the file's missing parent directories (0700) and the file
/// itself (0600), or checks that an existing file starts like an SQLite
/// database, without writing to it.
fn prepare_file(path: &Path, location: &str) -> StoreResult<()> {
    let open_err = |reason: String| StoreError::Open { location: location.to_string(), reason };
    if let Some(dir) = path.parent() {
        create_private_dirs(dir)
            .map_err(|e| open_err(format!("cannot create the directory {}: {e}", dir.display())))?;
    }
    match create_private_file(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(open_err(format!("cannot create the file: {e}"))),
    }
    if path.is_dir() {
        return Err(open_err("it is a directory; give the path of a file in it, such as nexo.db".into()));
    }
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    std::fs::File::open(path)
        .and_then(|f| f.take(SQLITE_HEADER.len() as u64).read_to_end(&mut head))
        .map_err(|e| open_err(format!("cannot read the file: {e}")))?;
    if !head.is_empty() && head != SQLITE_HEADER {
        return Err(StoreError::Corrupt {
            location: location.to_string(),
            reason: "the file does not begin with SQLite's header, so it is not an SQLite database".into(),
        });
    }
    Ok(())
}

/// Creates `dir` and its missing ancestors with mode 0700 whatever the
/// umask; directories that exist are left as they are.
fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dirs(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Ok(()) => {
            set_mode(dir, 0o700)?;
            sync_parent(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates an empty file with mode 0600 whatever the umask, so SQLite
/// never creates it with the default mode; `AlreadyExists` if it is there.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.sync_all()?;
    sync_parent(path)
}

/// Makes a new directory entry durable: SQLite syncs what it writes into
/// the file, not the directory that names the file.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Gives SQLite's `-wal` and `-shm` files mode 0600 (SQLite copies the
/// database's mode, but a file left by an older process may differ).
fn restrict_side_files(path: &Path) {
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        // Absent is fine; one we cannot chmod is not ours to fix.
        set_mode(Path::new(&side), 0o600).ok();
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

/// Finds what the file holds and brings it to [`SCHEMA_VERSION`]. Writes
/// nothing to a file it refuses.
async fn migrate(conn: &mut SqliteConnection, location: &str) -> StoreResult<()> {
    let found = inspect(conn, location).await?;
    if let Found::Nexo(version) = found
        && version > SCHEMA_VERSION
    {
        return Err(StoreError::TooNew { location: location.to_string(), found: version, supported: SCHEMA_VERSION });
    }
    use_wal(conn, location).await?;
    if matches!(found, Found::Nexo(SCHEMA_VERSION)) {
        return Ok(());
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(|e| open_error(location, &e))?;
    // Another process may have migrated the file since `inspect`: look again
    // now that this one holds the write lock.
    let current = match inspect(&mut tx, location).await? {
        Found::Empty => 0,
        Found::Nexo(v) if v > SCHEMA_VERSION => {
            return Err(StoreError::TooNew { location: location.to_string(), found: v, supported: SCHEMA_VERSION });
        }
        Found::Nexo(v) => v,
    };
    for migration in sql::MIGRATIONS.iter().filter(|m| m.version > current) {
        for statement in migration.statements {
            let statement = sql::SQLITE.render(statement);
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await
                .map_err(|e| open_error(location, &e))?;
        }
        sqlx::query(sql::RECORD_MIGRATION)
            .bind(migration.version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(|e| open_error(location, &e))?;
    }
    tx.commit().await.map_err(|e| open_error(location, &e))
}

/// What the file holds: nothing, or a nexo store of some version. Another
/// program's database is [`StoreError::Corrupt`].
async fn inspect(conn: &mut SqliteConnection, location: &str) -> StoreResult<Found> {
    // SQLite's own catalogue: this probe is the one backend-specific query.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| open_error(location, &e))?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    let corrupt = |reason: String| StoreError::Corrupt { location: location.to_string(), reason };
    if !tables.iter().any(|t| t == sql::SCHEMA_TABLE) {
        let mut shown = tables.iter().take(5).map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
        if tables.len() > 5 {
            shown.push_str(", …");
        }
        return Err(corrupt(format!(
            "it is an SQLite database with tables of its own ({shown}) but no `{}` table: another program's",
            sql::SCHEMA_TABLE
        )));
    }
    let version: Option<i64> = sqlx::query_scalar(sql::SELECT_SCHEMA_VERSION)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| open_error(location, &e))?;
    match version {
        Some(v) if v >= 1 => Ok(Found::Nexo(v)),
        _ => Err(corrupt(format!("its `{}` table records no schema version", sql::SCHEMA_TABLE))),
    }
}

/// Puts the file in WAL mode (a property of the file, kept across opens).
async fn use_wal(conn: &mut SqliteConnection, location: &str) -> StoreResult<()> {
    let mode: String =
        sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *conn).await.map_err(|e| open_error(location, &e))?;
    if mode.eq_ignore_ascii_case("wal") {
        return Ok(());
    }
    // The switch needs the file to itself, and SQLite's busy handler does
    // not wait for that: when another process opens the same new file at
    // the same moment, try again until the busy timeout runs out.
    let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
    let mode: String = loop {
        match sqlx::query_scalar("PRAGMA journal_mode = WAL").fetch_one(&mut *conn).await {
            Ok(mode) => break mode,
            Err(e)
                if sqlite_code(&e).is_some_and(|c| c & 0xff == SQLITE_BUSY)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(open_error(location, &e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            location: location.to_string(),
            reason: format!(
                "SQLite kept the journal mode `{mode}` instead of switching to WAL; is another process using the file?"
            ),
        });
    }
    Ok(())
}

/// An error while opening, as [`StoreError::Corrupt`] when SQLite says the
/// file is damaged or not a database, else [`StoreError::Open`].
fn open_error(location: &str, e: &sqlx::Error) -> StoreError {
    match sqlite_code(e) {
        Some(code) if is_corrupt(code) => StoreError::Corrupt { location: location.to_string(), reason: e.to_string() },
        code => StoreError::Open { location: location.to_string(), reason: format!("{e}{}", code.map_or("", hint)) },
    }
}

/// SQLite's extended result code, if `e` came from SQLite.
/// A database error as a [`StoreError`], naming the file at `location`.
fn db_error(location: &str, e: &sqlx::Error) -> StoreError {
    match sqlite_code(e) {
        Some(code) if is_corrupt(code) => StoreError::Corrupt { location: location.to_string(), reason: e.to_string() },
        Some(code) if code & 0xff == SQLITE_FULL => {
            StoreError::Full { location: location.to_string(), reason: e.to_string() }
        }
        Some(code) => StoreError::Backend(format!("{location}: {e}{}", hint(code))),
        None => StoreError::Backend(format!("{location}: {e}")),
    }
}

fn sqlite_code(e: &sqlx::Error) -> Option<i64> {
    match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse().ok()),
        _ => None,
    }
}

fn is_corrupt(code: i64) -> bool {
    matches!(code & 0xff, SQLITE_CORRUPT | SQLITE_NOTADB)
}

/// What to do about a failure SQLite reported, when there is something.
fn hint(code: i64) -> &'static str {
    match code & 0xff {
        // Only the plain code: the busy timeout ran out (an extended one,
        // such as a stale snapshot, is not about waiting longer).
        SQLITE_BUSY if code == SQLITE_BUSY => {
            " (another process held the store's write lock for longer than the 5 s busy timeout; try again)"
        }
        SQLITE_READONLY => " (the file or its directory is read-only; give nexo write access or another --store)",
        SQLITE_FULL => " (the disk is full; free space and try again)",
        _ => "",
    }
}
