//! Where SQLite and PostgreSQL differ, as the one SQL store
//! ([`super::SqlStore`]) sees them: how a read gets a connection, how a
//! write is begun and ended, whether rows are locked, how parameters are
//! bound and changed rows counted, how an error is named, and which
//! variant of a statement whose text differs it runs ([`Spelling`]).

use std::fmt::Debug;
use std::future::Future;
use std::ops::DerefMut;

use serde_json::Value;
use sqlx::query::Query;

use crate::rows::Columns;
use crate::sql::Spelling;
use crate::{StoreError, StoreResult};

/// A value bound to one of a statement's parameters.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// Text.
    Text(&'a str),
    /// Text or `NULL`.
    MaybeText(Option<&'a str>),
    /// An integer.
    Int(i64),
    /// An integer or `NULL`.
    MaybeInt(Option<i64>),
    /// Raw bytes.
    Bytes(&'a [u8]),
    /// A list: an array on PostgreSQL, JSON text on SQLite.
    List(List<'a>),
}

/// A list bound to one parameter.
#[derive(Debug, Clone, Copy)]
pub enum List<'a> {
    /// Texts.
    Texts(&'a [String]),
    /// Integers.
    Ints(&'a [i64]),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Arg::Text(text)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Arg::Text(text)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(text: Option<&'a str>) -> Self {
        Arg::MaybeText(text)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(text: &'a Option<String>) -> Self {
        Arg::MaybeText(text.as_deref())
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(n)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        Arg::MaybeInt(n)
    }
}

impl<'a> From<&'a Vec<u8>> for Arg<'a> {
    fn from(bytes: &'a Vec<u8>) -> Self {
        Arg::Bytes(bytes)
    }
}

impl<'a> From<&'a [String]> for Arg<'a> {
    fn from(list: &'a [String]) -> Self {
        Arg::List(List::Texts(list))
    }
}

impl<'a> From<&'a [i64]> for Arg<'a> {
    fn from(list: &'a [i64]) -> Self {
        Arg::List(List::Ints(list))
    }
}

/// A list as JSON text, for an engine without arrays.
pub(crate) fn json_list<T: serde::Serialize>(list: &[T]) -> String {
    // Strings and integers always serialize.
    serde_json::to_string(list).unwrap_or_else(|_| "[]".into())
}

/// A job queue a write places a job in, which PostgreSQL holds while it
/// does ([`Dialect::hold_queue`]).
#[derive(Debug, Clone, Copy)]
pub enum Queue<'a> {
    /// The queue of this run's tenant.
    OfRun(&'a str),
    /// The queue this job is in.
    OfJob(&'a str),
}

/// A connection that runs statements: for sqlx, a borrow of it is an
/// executor.
pub trait Executes<'c, DB: sqlx::Database>: Send {
    /// The connection, borrowed for one statement.
    type Executor: sqlx::Executor<'c, Database = DB> + Send;

    /// Borrows the connection for one statement.
    fn executor(&'c mut self) -> Self::Executor;
}

impl<'c, DB: sqlx::Database, C: Send + 'c> Executes<'c, DB> for C
where
    &'c mut C: sqlx::Executor<'c, Database = DB> + Send,
{
    type Executor = &'c mut C;

    fn executor(&'c mut self) -> &'c mut C {
        self
    }
}

/// One relational database engine, and a store's connections to it.
pub trait Dialect: Debug + Send + Sync + Sized + 'static {
    /// The engine, as sqlx names it.
    type Db: sqlx::Database<Row = Self::Row>;
    /// A statement's parameters.
    type Args: sqlx::IntoArguments<Self::Db> + Send;
    /// A connection.
    type Conn: for<'c> Executes<'c, Self::Db>;
    /// A row a statement answers.
    type Row: Columns + Send + Sync;
    /// A connection held for reads.
    type Read: DerefMut<Target = Self::Conn> + Send;
    /// A connection held for one write, until [`Dialect::end`].
    type Write: DerefMut<Target = Self::Conn> + Send;

    /// Whether a transaction locks the rows it reads before it writes
    /// (PostgreSQL), rather than holding the whole database from its first
    /// statement (SQLite's `BEGIN IMMEDIATE`). With row locks, a write that
    /// touches a session locks the session's row first, before any run's.
    const LOCKS_ROWS: bool;
    /// Its variants of the statements whose text differs between the
    /// engines.
    const SQL: &'static Spelling;

    /// Where the store is, for messages.
    fn location(&self) -> &str;

    /// A database error as a [`StoreError`], naming the store.
    fn error(&self, e: &sqlx::Error) -> StoreError;

    /// A connection for reads that need no lock.
    fn read(&self) -> impl Future<Output = StoreResult<Self::Read>> + Send;

    /// A connection for a write of any number of statements, in a
    /// transaction that [`Dialect::end`] commits or rolls back.
    fn begin(&self) -> impl Future<Output = StoreResult<Self::Write>> + Send;

    /// A connection for a write of one statement, which commits by itself
    /// (or, on SQLite, with the group it joins) when [`Dialect::end`] ends
    /// it.
    fn single(&self) -> impl Future<Output = StoreResult<Self::Write>> + Send;

    /// Ends a write with its `result`: a success is committed before it is
    /// returned, a failure rolled back.
    fn end<T: Send>(&self, write: Self::Write, result: StoreResult<T>) -> impl Future<Output = StoreResult<T>> + Send;

    /// Opens every connection that would otherwise open on first use.
    fn connect_all(&self) -> impl Future<Output = StoreResult<()>> + Send;

    /// [`crate::Backend::watch_jobs`]: none unless the engine notifies
    /// other processes.
    fn watch_jobs(
        &self,
        on_due: std::sync::Arc<dyn Fn() + Send + Sync>,
    ) -> impl Future<Output = StoreResult<Option<crate::JobWatch>>> + Send {
        let _ = on_due;
        async { Ok(None) }
    }

    /// `sql` with `args` bound, each as this engine takes it ([`bind`]).
    fn query(sql: &'static str, args: &[Arg<'_>]) -> Query<'static, Self::Db, Self::Args>;

    /// How many rows a statement changed.
    fn rows_affected(done: &<Self::Db as sqlx::Database>::QueryResult) -> u64;

    /// Inserts a session's messages numbered from `first`
    /// ([`crate::sql::APPEND_MESSAGES`]).
    fn append_messages<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        session: &'a str,
        first: i64,
        messages: &'a [Value],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'a;

    /// Holds `queue` until the transaction ends, so that jobs placed in it
    /// at once take turns one after another; nothing where the whole
    /// database is held already.
    fn hold_queue<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        queue: Queue<'a>,
    ) -> impl Future<Output = StoreResult<()>> + Send + 'a;
}

/// `query` with `args` bound in order; a list goes through `list`, each
/// engine's own way.
pub(crate) fn bind<'q, DB>(
    query: sqlx::query::Query<'q, DB, DB::Arguments>,
    args: &[Arg<'_>],
    list: impl Fn(sqlx::query::Query<'q, DB, DB::Arguments>, List<'_>) -> sqlx::query::Query<'q, DB, DB::Arguments>,
) -> sqlx::query::Query<'q, DB, DB::Arguments>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> &'a [u8]: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<i64>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    args.iter().fold(query, |query, arg| match *arg {
        Arg::Text(text) => query.bind(text),
        Arg::MaybeText(text) => query.bind(text),
        Arg::Int(n) => query.bind(n),
        Arg::MaybeInt(n) => query.bind(n),
        Arg::Bytes(bytes) => query.bind(bytes),
        Arg::List(items) => list(query, items),
    })
}
