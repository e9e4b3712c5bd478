//! The SQLite store's one write connection, with group commit.
//!
//! SQLite has one writer, and with `synchronous=FULL` every commit waits
//! for the disk (about 0.4 ms on a good one), so a busy store queued its
//! writes behind each other's disk waits: one tenant's flood of runs made
//! another's few writes wait behind all of its own. Writes still take the
//! connection in turn, in order, but a write that finds others queued
//! behind it leaves its transaction open for them: each joins it in a
//! savepoint of its own (one that fails is rolled back alone), and the
//! group is committed once, by the first of its writes to come round
//! again, or by the last one if nobody is queued behind it. A write
//! returns only once its group's commit is on disk, or with the commit's
//! error. A write with nobody queued behind it commits at once, alone, as
//! it would without groups.
//!
//! A failed statement may end the transaction by itself: on a full disk
//! (and on some I/O errors) SQLite rolls it back, the ROLLBACK that follows
//! fails, and sqlx goes on counting a transaction that is gone, refusing
//! every later `BEGIN`. A rollback that fails therefore replaces the
//! connection with a new one ([`Inner::reconnect`]).
//!
//! A write dropped half-way (its future cancelled) marks the connection:
//! the next holder waits for what is in flight on it, then rolls back
//! what the write began, going by sqlx's own count of open transactions
//! and savepoints. A group whose writes were all dropped before it was
//! committed is committed by a task of its own, so the file's write lock
//! is never left held.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteTransactionManager};
use sqlx::{Connection, SqlSafeStr};
use sqlx_core::transaction::TransactionManager;
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard, watch};

use crate::{StoreError, StoreResult};

/// How many writes a store has made durable, and in how many commits:
/// fewer commits than writes means writes shared them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteCounts {
    /// Writes that succeeded.
    pub writes: u64,
    /// Commits (each one wait for the disk) that made them durable.
    pub commits: u64,
}

/// Turns a database error into the store's error, naming the location.
pub(crate) type ErrorFn = fn(&str, &sqlx::Error) -> StoreError;

/// The write connection and the writes queued for it.
#[derive(Debug)]
pub(crate) struct Writer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `None` once closed.
    slot: Arc<Mutex<Option<Slot>>>,
    /// Writes waiting for the connection, a group's writes waiting to
    /// commit it included.
    queued: AtomicUsize,
    /// Writes that ended well, and the commits that made them durable.
    counts: [AtomicU64; 2],
    location: String,
    error: ErrorFn,
    /// How to open the connection again.
    options: SqliteConnectOptions,
}

#[derive(Debug)]
struct Slot {
    conn: SqliteConnection,
    /// The open group: a transaction of writes not committed yet.
    group: Option<Arc<Group>>,
    /// Something was under way on the connection when its holder was
    /// dropped: the next holder sets it right first.
    dirty: bool,
}

type Held = OwnedMappedMutexGuard<Option<Slot>, Slot>;

/// How one write uses the connection.
#[derive(Debug)]
enum Kind {
    /// One statement, committed by itself (nobody was queued).
    Plain,
    /// A transaction of its own, which becomes a group's if others queue.
    Own,
    /// A savepoint in the open group.
    Member(Arc<Group>),
}

/// A group's outcome, for its writes waiting on it.
#[derive(Debug)]
struct Group {
    done: watch::Sender<Option<Result<(), Failure>>>,
}

/// A commit's failure, told to every write of the group.
#[derive(Debug, Clone)]
enum Failure {
    Corrupt { location: String, reason: String },
    Full { location: String, reason: String },
    Other(String),
}

impl Failure {
    fn of(e: &StoreError) -> Failure {
        match e {
            StoreError::Corrupt { location, reason } => {
                Failure::Corrupt { location: location.clone(), reason: reason.clone() }
            }
            StoreError::Full { location, reason } => {
                Failure::Full { location: location.clone(), reason: reason.clone() }
            }
            other => Failure::Other(other.to_string()),
        }
    }

    fn error(self) -> StoreError {
        match self {
            Failure::Corrupt { location, reason } => StoreError::Corrupt { location, reason },
            Failure::Full { location, reason } => StoreError::Full { location, reason },
            Failure::Other(message) => StoreError::Backend(message),
        }
    }
}

impl Group {
    fn new() -> Arc<Group> {
        Arc::new(Group { done: watch::Sender::new(None) })
    }

    fn finish(&self, result: Result<(), Failure>) {
        self.done.send_replace(Some(result));
    }

    fn is_done(&self) -> bool {
        self.done.borrow().is_some()
    }

    async fn outcome(&self) -> Result<(), Failure> {
        let mut rx = self.done.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(done) => done.clone().unwrap_or(Ok(())),
            // The sender lives in `self`: it cannot be gone.
            Err(_) => Err(Failure::Other("the store's writer went away".into())),
        }
    }
}

/// Counts a write as queued for as long as it lives, cancelled or not.
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn enter(count: &'a AtomicUsize) -> Queued<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Queued(count)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn depth(conn: &SqliteConnection) -> usize {
    SqliteTransactionManager::get_transaction_depth(conn)
}

impl Writer {
    /// The writer over `conn`, a connection to the store at `location`
    /// made with `options`.
    pub(crate) fn new(
        conn: SqliteConnection,
        options: SqliteConnectOptions,
        location: String,
        error: ErrorFn,
    ) -> Writer {
        let slot = Slot { conn, group: None, dirty: false };
        let inner = Inner {
            slot: Arc::new(Mutex::new(Some(slot))),
            queued: AtomicUsize::new(0),
            counts: Default::default(),
            location,
            error,
            options,
        };
        Writer { inner: Arc::new(inner) }
    }

    /// The connection for one write of any number of statements, inside a
    /// transaction (its own, or a savepoint of the open group); [`Turn::end`]
    /// ends it.
    pub(crate) async fn turn(&self) -> StoreResult<Turn> {
        self.inner.turn(false).await
    }

    /// The connection for a write of one statement: committed by itself
    /// when nobody is queued, or else in the group like any other.
    pub(crate) async fn single(&self) -> StoreResult<Turn> {
        self.inner.turn(true).await
    }

    /// The connection alone, for reading its settings: nothing is begun
    /// and nothing needs ending.
    pub(crate) async fn bare(&self) -> StoreResult<Turn> {
        let mut slot = self.inner.lock().await?;
        self.inner.set_right(&mut slot).await;
        Ok(Turn { slot, kind: Kind::Plain, unfinished: Unfinished { inner: self.inner.clone(), armed: false } })
    }

    /// How many writes have succeeded, and in how many commits.
    pub(crate) fn counts(&self) -> WriteCounts {
        let [writes, commits] = &self.inner.counts;
        WriteCounts { writes: writes.load(Ordering::Relaxed), commits: commits.load(Ordering::Relaxed) }
    }

    /// Commits the open group, if any, and closes the connection; later
    /// writes fail as closed.
    pub(crate) async fn close(&self) {
        let mut guard = self.inner.slot.clone().lock_owned().await;
        if let Some(slot) = guard.as_mut() {
            self.inner.set_right(slot).await;
            self.inner.commit_group(slot).await.ok();
        }
        if let Some(slot) = guard.take() {
            slot.conn.close().await.ok();
        }
    }
}

impl Inner {
    fn error(&self, e: &sqlx::Error) -> StoreError {
        (self.error)(&self.location, e)
    }

    fn held(&self, guard: OwnedMutexGuard<Option<Slot>>) -> StoreResult<Held> {
        OwnedMutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| StoreError::Backend(format!("{}: the store was closed", self.location)))
    }

    /// The connection, once it is this write's turn.
    async fn lock(&self) -> StoreResult<Held> {
        let queued = Queued::enter(&self.queued);
        let guard = self.slot.clone().lock_owned().await;
        drop(queued);
        self.held(guard)
    }

    /// Rolls back the innermost transaction or savepoint. If SQLite ended
    /// the transaction already (a full disk), the ROLLBACK fails and sqlx's
    /// count of open transactions stays wrong: the connection is replaced,
    /// which leaves nothing open. `false` if even that failed.
    async fn roll_back(&self, slot: &mut Slot) -> bool {
        if SqliteTransactionManager::rollback(&mut slot.conn).await.is_ok() {
            return true;
        }
        self.reconnect(slot).await
    }

    /// Replaces the slot's connection with a new one (nothing open on it).
    async fn reconnect(&self, slot: &mut Slot) -> bool {
        use sqlx::ConnectOptions;
        match self.options.connect().await {
            Ok(fresh) => {
                let stale = std::mem::replace(&mut slot.conn, fresh);
                stale.close().await.ok();
                // The group's transaction went with the old connection's.
                if let Some(group) = slot.group.take() {
                    let why = format!("{}: the transaction was rolled back by the database", self.location);
                    group.finish(Err(Failure::Other(why)));
                }
                true
            }
            // The next write tries again, and fails as the store does.
            Err(_) => false,
        }
    }

    fn counted(&self, writes: u64, commits: u64) {
        self.counts[0].fetch_add(writes, Ordering::Relaxed);
        self.counts[1].fetch_add(commits, Ordering::Relaxed);
    }

    fn nobody_queued(&self) -> bool {
        self.queued.load(Ordering::SeqCst) == 0
    }

    async fn turn(self: &Arc<Self>, single: bool) -> StoreResult<Turn> {
        let mut slot = self.lock().await?;
        self.set_right(&mut slot).await;
        slot.dirty = true;
        let kind = match slot.group.clone() {
            Some(group) => {
                SqliteTransactionManager::begin(&mut slot.conn, None).await.map_err(|e| self.error(&e))?;
                Kind::Member(group)
            }
            None if single && self.nobody_queued() => Kind::Plain,
            None => {
                // Takes the file's write lock from the first statement, so
                // that two processes sharing the file cannot both claim a run.
                let begin = Some("BEGIN IMMEDIATE".into_sql_str());
                SqliteTransactionManager::begin(&mut slot.conn, begin).await.map_err(|e| self.error(&e))?;
                Kind::Own
            }
        };
        Ok(Turn { slot, kind, unfinished: Unfinished { inner: self.clone(), armed: true } })
    }

    /// Rolls back what a dropped write left open: its savepoint, or its
    /// own transaction. A group whose commit was under way is told how it
    /// ended.
    async fn set_right(&self, slot: &mut Slot) {
        if !slot.dirty {
            return;
        }
        // What the dropped write sent may still be in flight: a round trip
        // makes sqlx's count of open transactions true again.
        slot.conn.ping().await.ok();
        let open = usize::from(slot.group.is_some());
        while depth(&slot.conn) > open {
            if !self.roll_back(slot).await {
                break;
            }
        }
        if depth(&slot.conn) < open
            && let Some(group) = slot.group.take()
        {
            // Only a commit ends the group's transaction while it is still
            // open here: one whose holder was dropped before it heard back.
            group.finish(Ok(()));
        }
        // Last: dropped half-way through this, the next holder goes again.
        slot.dirty = false;
    }

    /// The group's transaction is beyond saving (a savepoint could not be
    /// rolled back): its writes fail with `why`, and it is rolled back.
    async fn abort(&self, slot: &mut Slot, why: &StoreError) {
        if let Some(group) = slot.group.take() {
            group.finish(Err(Failure::of(why)));
        }
        while depth(&slot.conn) > 0 {
            if !self.roll_back(slot).await {
                break;
            }
        }
    }

    /// Commits the open group, if any, and tells its writes.
    async fn commit_group(&self, slot: &mut Slot) -> StoreResult<()> {
        let Some(group) = slot.group.clone() else { return Ok(()) };
        slot.dirty = true;
        let committed = SqliteTransactionManager::commit(&mut slot.conn).await.map_err(|e| self.error(&e));
        slot.group = None;
        match committed {
            Ok(()) => {
                self.counted(0, 1);
                group.finish(Ok(()));
            }
            Err(ref e) => {
                group.finish(Err(Failure::of(e)));
                self.roll_back(slot).await;
            }
        }
        slot.dirty = false;
        committed
    }

    /// Waits until `group` is committed: by whoever has the connection
    /// first, this write included.
    async fn wait(self: &Arc<Self>, group: Arc<Group>) -> StoreResult<()> {
        let pending = Pending { inner: self.clone(), group: group.clone() };
        let outcome = {
            let queued = Queued::enter(&self.queued);
            let lock = self.slot.clone().lock_owned();
            tokio::select! {
                biased;
                done = group.outcome() => done,
                guard = lock => {
                    drop(queued);
                    match self.held(guard) {
                        Ok(mut slot) => {
                            self.set_right(&mut slot).await;
                            if slot.group.as_ref().is_some_and(|g| Arc::ptr_eq(g, &group)) {
                                self.commit_group(&mut slot).await.map_err(|e| Failure::of(&e))
                            } else {
                                // Committed (or failed) before this write came round.
                                drop(slot);
                                group.outcome().await
                            }
                        }
                        Err(e) => Err(Failure::of(&e)),
                    }
                }
            }
        };
        drop(pending);
        outcome.map_err(Failure::error)
    }

    /// Sets the connection right and commits `group` (or, with `None`, any
    /// open group) in a task of its own: every write that could have done
    /// it was dropped.
    fn settle_later(self: &Arc<Self>, group: Option<Arc<Group>>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let inner = self.clone();
        runtime.spawn(async move {
            let Ok(mut slot) = inner.lock().await else { return };
            inner.set_right(&mut slot).await;
            let open = slot.group.as_ref().is_some_and(|g| group.as_ref().is_none_or(|mine| Arc::ptr_eq(g, mine)));
            if open {
                inner.commit_group(&mut slot).await.ok();
            }
        });
    }
}

/// A write waiting for its group's commit: dropped before then, it leaves
/// the commit to a task of its own.
struct Pending {
    inner: Arc<Inner>,
    group: Arc<Group>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.group.is_done() {
            self.inner.settle_later(Some(self.group.clone()));
        }
    }
}

/// One write's hold on the connection; [`Turn::end`] ends it.
#[derive(Debug)]
pub struct Turn {
    // Dropped first: the connection is free before `unfinished` acts.
    slot: Held,
    kind: Kind,
    unfinished: Unfinished,
}

/// A turn dropped before its end: the next write sets the connection
/// right, or a task of its own does if none comes (so the file's write
/// lock is not left held).
#[derive(Debug)]
struct Unfinished {
    inner: Arc<Inner>,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.armed {
            self.inner.settle_later(None);
        }
    }
}

impl Turn {
    /// Ends the write with its `result`: a success is committed (alone, or
    /// with its group) before it is returned; a failure is rolled back.
    pub(crate) async fn end<T>(self, result: StoreResult<T>) -> StoreResult<T> {
        let inner = self.unfinished.inner.clone();
        let (result, solo) = self.settle(result).await;
        if result.is_ok() {
            inner.counted(1, u64::from(solo));
        }
        result
    }

    /// [`Turn::end`]'s work; also whether the write was committed alone.
    async fn settle<T>(self, result: StoreResult<T>) -> (StoreResult<T>, bool) {
        let Turn { mut slot, kind, mut unfinished } = self;
        let inner = unfinished.inner.clone();
        let group = match kind {
            Kind::Plain => None,
            Kind::Own if result.is_err() => {
                inner.roll_back(&mut slot).await;
                None
            }
            Kind::Own if inner.nobody_queued() => {
                if let Err(e) = SqliteTransactionManager::commit(&mut slot.conn).await {
                    inner.roll_back(&mut slot).await;
                    slot.dirty = false;
                    unfinished.armed = false;
                    return (Err(inner.error(&e)), true);
                }
                None
            }
            Kind::Own => {
                // Others are queued: they join this transaction.
                let group = Group::new();
                slot.group = Some(group.clone());
                Some(group)
            }
            Kind::Member(group) => {
                let ended = match &result {
                    Ok(_) => SqliteTransactionManager::commit(&mut slot.conn).await,
                    Err(_) => SqliteTransactionManager::rollback(&mut slot.conn).await,
                };
                if let Err(e) = ended {
                    let e = inner.error(&e);
                    inner.abort(&mut slot, &e).await;
                    slot.dirty = false;
                    unfinished.armed = false;
                    return (result.and(Err(e)), false);
                }
                if inner.nobody_queued() {
                    let committed = inner.commit_group(&mut slot).await;
                    unfinished.armed = false;
                    return (result.and_then(|v| committed.map(|()| v)), false);
                }
                // A rolled-back write has nothing waiting for the commit.
                result.is_ok().then_some(group)
            }
        };
        slot.dirty = false;
        unfinished.armed = false;
        drop(slot);
        match group {
            Some(group) => {
                let committed = inner.wait(group).await;
                (result.and_then(|v| committed.map(|()| v)), false)
            }
            None => (result, true),
        }
    }
}

impl Deref for Turn {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.slot.conn
    }
}

impl DerefMut for Turn {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.slot.conn
    }
}
