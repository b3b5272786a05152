//! Row locks and row versions: what a statement may see under each isolation level.
//!
//! Writes change a table's rows at once (see [`crate::db`]). So that readers need not see
//! them, a writing transaction takes an exclusive lock on every row key it touches and keeps
//! the row's committed image in the lock. When it commits, each lock becomes a *version*: the
//! image the row had before that commit, stamped with the commit's sequence number, kept while
//! a SNAPSHOT transaction that started earlier is open (SQL Server keeps them in tempdb's
//! version store for the same reason).
//!
//! A [`ReadView`] then decides each row:
//!
//! - [`ReadView::Dirty`] (`READ UNCOMMITTED`, `NOLOCK`): the newest image, committed or not.
//! - [`ReadView::Locking`] (`READ COMMITTED`): the newest image; a row another transaction has
//!   locked stops the statement until that transaction ends (the engine waits and retries,
//!   up to `LOCK_TIMEOUT`).
//! - [`ReadView::AsOf`] (`SNAPSHOT`, and `READ COMMITTED` with `READ_COMMITTED_SNAPSHOT ON`):
//!   the committed state as of a commit sequence number, plus the reader's own writes. Never
//!   waits.

use std::collections::btree_map::Range;
use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

use super::table::RowKey;
use super::value::Value;

/// How a statement reads a table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadView {
    /// The newest image of every row, committed or not.
    Dirty,
    /// The newest image; a row locked by another transaction blocks. `own` is the reader's
    /// transaction, whose locks never block it.
    Locking {
        /// The reader's transaction.
        own: Option<u64>,
    },
    /// The committed state as of commit sequence `seq`, plus `own`'s writes.
    AsOf {
        /// Commits with a sequence number above this are invisible.
        seq: u64,
        /// The reader's transaction.
        own: Option<u64>,
    },
}

/// An exclusive lock on a row key, held by an open transaction.
#[derive(Clone, Debug)]
pub struct RowLock {
    /// The holder.
    pub tran_id: u64,
    /// The row as committed before the holder touched it (`None`: no row had this key).
    pub committed: Option<Vec<Value>>,
}

/// A row's image before a commit, kept for older snapshots.
#[derive(Clone, Debug)]
pub struct RowVersion {
    /// The sequence number of the commit that replaced this image.
    pub replaced_at: u64,
    /// The image (`None`: no row had this key).
    pub image: Option<Vec<Value>>,
}

/// Why a write may not proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// Another transaction holds the row's lock: wait for it.
    Blocked {
        /// The holder.
        holder: u64,
    },
    /// A SNAPSHOT transaction would overwrite a change committed after its snapshot (3960).
    UpdateConflict,
}

/// The locks and older versions of one table's rows.
#[derive(Clone, Debug, Default)]
pub struct RowVersions {
    locks: BTreeMap<RowKey, RowLock>,
    older: BTreeMap<RowKey, Vec<RowVersion>>,
    /// The sequence number of the last commit that changed the table's definition.
    pub defined_at: u64,
}

impl RowVersions {
    /// Takes the lock on `key` for `tran_id` before a write. `snapshot` is the writer's
    /// snapshot sequence under SNAPSHOT isolation; `current` the row's image now. Returns
    /// whether the lock is new (the caller records it, to release it at commit or rollback).
    pub fn lock(&mut self, key: &RowKey, tran_id: u64, snapshot: Option<u64>, current: Option<&Vec<Value>>) -> Result<bool, Conflict> {
        if let Some(lock) = self.locks.get(key) {
            return if lock.tran_id == tran_id { Ok(false) } else { Err(Conflict::Blocked { holder: lock.tran_id }) };
        }
        if let Some(seq) = snapshot
            && self.older.get(key).and_then(|versions| versions.last()).is_some_and(|version| version.replaced_at > seq)
        {
            return Err(Conflict::UpdateConflict);
        }
        self.locks.insert(key.clone(), RowLock { tran_id, committed: current.cloned() });
        Ok(true)
    }

    /// Releases `tran_id`'s lock on `key`. At a commit with sequence `committed_at`, the
    /// committed image becomes a version when `keep` (an older snapshot is open).
    pub fn release(&mut self, key: &RowKey, tran_id: u64, committed_at: Option<u64>, keep: bool) {
        let Some(lock) = self.locks.remove(key) else { return };
        if lock.tran_id != tran_id {
            self.locks.insert(key.clone(), lock);
            return;
        }
        if let (Some(seq), true) = (committed_at, keep) {
            self.older.entry(key.clone()).or_default().push(RowVersion { replaced_at: seq, image: lock.committed });
        }
    }

    /// Drops versions no open snapshot can see: those replaced at or before `oldest`, the
    /// oldest open snapshot's sequence (all of them when none is open).
    pub fn prune(&mut self, oldest: Option<u64>) {
        match oldest {
            None => self.older.clear(),
            Some(oldest) => self.older.retain(|_, versions| {
                versions.retain(|version| version.replaced_at > oldest);
                !versions.is_empty()
            }),
        }
    }

    /// Whether any version is kept.
    pub fn has_versions(&self) -> bool {
        !self.older.is_empty()
    }

    /// The image of `key` that `view` sees, given its newest image `current`; `Err(holder)`
    /// when the view must wait for the holder's lock.
    pub fn image<'a>(&'a self, key: &RowKey, current: Option<&'a Vec<Value>>, view: ReadView) -> Result<Option<&'a Vec<Value>>, u64> {
        let other_lock = |own: Option<u64>| self.locks.get(key).filter(|lock| Some(lock.tran_id) != own);
        match view {
            ReadView::Dirty => Ok(current),
            ReadView::Locking { own } => match other_lock(own) {
                Some(lock) => Err(lock.tran_id),
                None => Ok(current),
            },
            ReadView::AsOf { seq, own } => {
                if let Some(version) = self.older.get(key).and_then(|versions| versions.iter().find(|v| v.replaced_at > seq)) {
                    return Ok(version.image.as_ref());
                }
                Ok(match other_lock(own) {
                    Some(lock) => lock.committed.as_ref(),
                    None => current,
                })
            }
        }
    }

    /// The rows `view` sees from `start` on, in key order, lazily: a scan that stops early
    /// never waits on locks beyond the rows it took.
    pub fn scan<'a>(&'a self, rows: &'a BTreeMap<RowKey, Vec<Value>>, start: Bound<RowKey>, view: ReadView) -> Scan<'a> {
        let range = (start, Bound::Unbounded);
        let plain = view == ReadView::Dirty || (self.locks.is_empty() && self.older.is_empty());
        let as_of = matches!(view, ReadView::AsOf { .. });
        Scan {
            versions: self,
            all_rows: rows,
            locks: (!plain).then(|| self.locks.range(range.clone()).peekable()),
            older: (!plain && as_of).then(|| self.older.range(range.clone()).peekable()),
            rows: rows.range(range).peekable(),
            view,
        }
    }
}

/// The visible rows of a table in key order (see [`RowVersions::scan`]).
pub struct Scan<'a> {
    versions: &'a RowVersions,
    all_rows: &'a BTreeMap<RowKey, Vec<Value>>,
    rows: Peekable<Range<'a, RowKey, Vec<Value>>>,
    /// Locked keys, when the view looks at locks.
    locks: Option<Peekable<Range<'a, RowKey, RowLock>>>,
    /// Versioned keys, when the view reads versions.
    older: Option<Peekable<Range<'a, RowKey, Vec<RowVersion>>>>,
    view: ReadView,
}

impl<'a> Iterator for Scan<'a> {
    /// A visible row, or the transaction whose lock the scan must wait for.
    type Item = Result<&'a Vec<Value>, u64>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(locks) = self.locks.as_mut() else {
                // No lock or version to consult: the newest images as they are.
                return self.rows.next().map(|(_, row)| Ok(row));
            };
            let lock_key = locks.peek().map(|(k, _)| *k);
            let older_key = self.older.as_mut().and_then(|older| older.peek().map(|(k, _)| *k));
            let next = [self.rows.peek().map(|(k, _)| *k), lock_key, older_key].into_iter().flatten().min()?;
            let current = match self.rows.peek() {
                Some((key, row)) if *key == next => {
                    let row = *row;
                    self.rows.next();
                    Some(row)
                }
                _ => self.all_rows.get(next),
            };
            if lock_key == Some(next) {
                locks.next();
            }
            if older_key == Some(next)
                && let Some(older) = self.older.as_mut()
            {
                older.next();
            }
            match self.versions.image(next, current, self.view) {
                Ok(Some(row)) => return Some(Ok(row)),
                Ok(None) => {}
                Err(holder) => return Some(Err(holder)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: i64) -> RowKey {
        RowKey(vec![Value::Int(n)])
    }

    fn row(n: i64, label: &str) -> Vec<Value> {
        vec![Value::Int(n), Value::Text(label.to_owned())]
    }

    fn labels(scan: Scan<'_>) -> Result<Vec<String>, u64> {
        scan.map(|r| r.map(|row| row[1].to_text().unwrap_or_default())).collect()
    }

    /// Table: 1 committed "a"; txn 7 (open) updated 1 to "a2", deleted nothing, inserted 2.
    fn with_open_writer() -> (BTreeMap<RowKey, Vec<Value>>, RowVersions) {
        let mut rows = BTreeMap::new();
        rows.insert(key(1), row(1, "a"));
        let mut versions = RowVersions::default();
        assert_eq!(versions.lock(&key(1), 7, None, rows.get(&key(1))), Ok(true));
        rows.insert(key(1), row(1, "a2"));
        assert_eq!(versions.lock(&key(2), 7, None, None), Ok(true));
        rows.insert(key(2), row(2, "b"));
        (rows, versions)
    }

    #[test]
    fn each_view_sees_what_its_isolation_level_promises() {
        let (rows, versions) = with_open_writer();
        assert_eq!(labels(versions.scan(&rows, Bound::Unbounded, ReadView::Dirty)), Ok(vec!["a2".into(), "b".into()]));
        assert_eq!(labels(versions.scan(&rows, Bound::Unbounded, ReadView::AsOf { seq: 0, own: None })), Ok(vec!["a".into()]));
        assert_eq!(labels(versions.scan(&rows, Bound::Unbounded, ReadView::AsOf { seq: 0, own: Some(7) })), Ok(vec!["a2".into(), "b".into()]));
        assert_eq!(labels(versions.scan(&rows, Bound::Unbounded, ReadView::Locking { own: None })), Err(7));
        assert_eq!(labels(versions.scan(&rows, Bound::Unbounded, ReadView::Locking { own: Some(7) })), Ok(vec!["a2".into(), "b".into()]));
    }

    #[test]
    fn a_snapshot_keeps_seeing_what_later_commits_replaced() {
        let (mut rows, mut versions) = with_open_writer();
        // Txn 7 commits as sequence 5 while a snapshot at 4 is open; then txn 8 deletes key 2.
        versions.release(&key(1), 7, Some(5), true);
        versions.release(&key(2), 7, Some(5), true);
        assert_eq!(versions.lock(&key(2), 8, None, rows.get(&key(2))), Ok(true));
        rows.remove(&key(2));
        versions.release(&key(2), 8, Some(6), true);
        let view = |versions: &RowVersions, seq| labels(versions.scan(&rows, Bound::Unbounded, ReadView::AsOf { seq, own: None }));
        assert_eq!(view(&versions, 4), Ok(vec!["a".into()]));
        assert_eq!(view(&versions, 5), Ok(vec!["a2".into(), "b".into()]));
        assert_eq!(view(&versions, 6), Ok(vec!["a2".into()]));
        // A SNAPSHOT writer that began at 5 may not overwrite key 2, deleted at 6.
        assert_eq!(versions.lock(&key(2), 9, Some(5), None), Err(Conflict::UpdateConflict));
        assert_eq!(versions.lock(&key(2), 9, Some(6), None), Ok(true));
        versions.prune(Some(5));
        assert_eq!(view(&versions, 5), Ok(vec!["a2".into(), "b".into()]));
        versions.prune(None);
        assert!(!versions.has_versions());
    }

    #[test]
    fn a_scan_that_stops_early_does_not_wait_on_later_locks() {
        let mut rows = BTreeMap::new();
        rows.insert(key(1), row(1, "a"));
        rows.insert(key(3), row(3, "c"));
        let mut versions = RowVersions::default();
        versions.lock(&key(3), 7, None, rows.get(&key(3))).unwrap();
        let mut scan = versions.scan(&rows, Bound::Unbounded, ReadView::Locking { own: None });
        assert!(matches!(scan.next(), Some(Ok(r)) if r[0] == Value::Int(1)));
        assert_eq!(scan.next(), Some(Err(7)));
        assert_eq!(versions.lock(&key(3), 8, None, None), Err(Conflict::Blocked { holder: 7 }));
    }
}
