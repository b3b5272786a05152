//! Partitioned reads (`num_partitions` > 1): one batch's change rows read over several
//! connections at once, published in LSN order.
//!
//! The batch's commits are cut into contiguous LSN ranges of about `fetch_rows` rows each (the
//! rows per commit of the batch before stand for this one's), and at least one range per
//! reader. Range *j* goes to reader *j mod n*, so each reader reads its ranges in LSN order and
//! works ahead of the publisher while the publisher takes the ranges in turn: reader 0's first
//! range, reader 1's first, reader 0's second, … Each reader hands its chunks over a queue of
//! two, so it holds at most three chunks ahead whatever the batch's size. Ranges end at commit
//! boundaries, so a transaction (and an update's two rows) is never split across readers.
//!
//! A reader's error stops the batch like one on the stream's own connection (the readers are
//! aborted, their connections dropped); the connections of a batch read to its end are kept for
//! the next one, and dropped with the stream's own after a fault.

use std::sync::Arc;

use arrow::array::RecordBatch;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::changes::{ChunkSpec, Chunker, Span};
use crate::connection::{Connector, TdsClient};
use crate::error::SourceError;
use crate::reader;
use mssql_cdc_types::lsn::Lsn;

/// Chunks a reader may hand over before the publisher takes them.
const QUEUED_CHUNKS: usize = 2;

/// The readers' connections and what the last batch told about its rows.
#[derive(Default)]
pub(super) struct Partitions {
    /// Connections kept from batch to batch (dropped after a fault).
    pub connections: Vec<TdsClient>,
    /// Rows per commit of the last batch read, to size the next one's ranges.
    rows_per_commit: Option<f64>,
}

impl Partitions {
    /// Commits per range for a batch of `commits` commits over `readers` readers: about
    /// `fetch_rows` rows each, and at least one range per reader.
    pub fn commits_per_range(&self, commits: usize, readers: usize, fetch_rows: usize) -> usize {
        let per_commit = self.rows_per_commit.unwrap_or(1.0).max(1e-3);
        let by_rows = ((fetch_rows as f64 / per_commit) as usize).max(1);
        by_rows.min(commits.div_ceil(readers.max(1))).max(1)
    }

    /// Remembers the rows per commit of a batch just read.
    pub fn observe(&mut self, rows: u64, commits: usize) {
        if commits > 0 {
            self.rows_per_commit = Some(rows as f64 / commits as f64);
        }
    }
}

/// `(from, to]` cut into contiguous ranges ending at every `per_range`-th commit, the last one
/// at `to`; `commits` are the commits in the range, in LSN order.
pub(super) fn split(from: Lsn, to: Lsn, commits: &[Lsn], per_range: usize) -> Vec<(Lsn, Lsn)> {
    let per_range = per_range.max(1);
    let mut ranges = Vec::new();
    let mut start = from;
    // Cut after every `per_range`-th commit but the last: the last range reaches `to`.
    for &end in commits.iter().skip(per_range - 1).step_by(per_range).filter(|&&end| end < to) {
        if end > start && commits.last() != Some(&end) {
            ranges.push((start, end));
            start = end;
        }
    }
    if to > start {
        ranges.push((start, to));
    }
    ranges
}

/// What a reader hands over.
enum Piece {
    Chunk(RecordBatch),
    /// The end of one of its ranges.
    RangeDone,
}

/// What the readers share.
struct Job {
    connector: Connector,
    change_sql: String,
    include_command_id: bool,
    spec: Arc<ChunkSpec>,
}

/// A batch's partitioned read under way: [`PartitionedRead::next`] yields its chunks in LSN
/// order, [`PartitionedRead::finish`] collects the readers.
pub(super) struct PartitionedRead {
    ranges: Vec<(Lsn, Lsn)>,
    queues: Vec<mpsc::Receiver<Result<Piece, SourceError>>>,
    tasks: JoinSet<Option<(TdsClient, Span)>>,
    /// The range being handed over.
    current: usize,
}

impl PartitionedRead {
    /// Starts reading `ranges` over `readers` readers (at most one per range), taking their
    /// connections from `connections` and connecting more as needed.
    pub async fn start(
        connector: &Connector,
        change_sql: &str,
        include_command_id: bool,
        spec: Arc<ChunkSpec>,
        ranges: Vec<(Lsn, Lsn)>,
        connections: &mut Vec<TdsClient>,
        readers: usize,
    ) -> Result<Self, SourceError> {
        let readers = readers.min(ranges.len()).max(1);
        while connections.len() < readers {
            connections.push(connector.connect().await?);
        }
        let job = Arc::new(Job { connector: connector.clone(), change_sql: change_sql.to_owned(), include_command_id, spec });
        let mut tasks = JoinSet::new();
        let mut queues = Vec::with_capacity(readers);
        // Extra connections from a batch with more readers stay in the pool.
        for (index, conn) in connections.drain(..readers).enumerate() {
            let (sender, receiver) = mpsc::channel(QUEUED_CHUNKS);
            let assigned: Vec<(Lsn, Lsn)> = ranges.iter().skip(index).step_by(readers).copied().collect();
            tasks.spawn(read_ranges(conn, job.clone(), assigned, sender));
            queues.push(receiver);
        }
        Ok(Self { ranges, queues, tasks, current: 0 })
    }

    /// The next chunk in LSN order; `None` after the last range's.
    pub async fn next(&mut self) -> Result<Option<RecordBatch>, SourceError> {
        while self.current < self.ranges.len() {
            let readers = self.queues.len();
            match self.queues[self.current % readers].recv().await {
                Some(Ok(Piece::Chunk(chunk))) => return Ok(Some(chunk)),
                Some(Ok(Piece::RangeDone)) => self.current += 1,
                Some(Err(error)) => return Err(error),
                None => return Err(lost_reader(self.ranges[self.current])),
            }
        }
        Ok(None)
    }

    /// Once every chunk was taken: the rows read, the readers' connections put back into
    /// `connections`.
    pub async fn finish(mut self, connections: &mut Vec<TdsClient>) -> Result<Span, SourceError> {
        let mut span = Span::default();
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(Some((conn, read))) => {
                    span.merge(read);
                    connections.push(conn);
                }
                Ok(None) => return Err(lost_reader(self.ranges[0])),
                Err(e) => return Err(SourceError::Sql { message: format!("a partitioned reader failed: {e}"), code: None, transient: false }),
            }
        }
        Ok(span)
    }
}

fn lost_reader((from, to): (Lsn, Lsn)) -> SourceError {
    SourceError::Sql { message: format!("a reader of change rows stopped before the end of its ranges (the batch's from ({from}, {to}])"), code: None, transient: true }
}

/// One reader: its ranges in order, each followed by [`Piece::RangeDone`]; its connection and
/// the rows it read. `None` after an error (handed over first) or when the publisher no longer
/// listens (its connection may be mid-result: dropped).
async fn read_ranges(mut conn: TdsClient, job: Arc<Job>, ranges: Vec<(Lsn, Lsn)>, queue: mpsc::Sender<Result<Piece, SourceError>>) -> Option<(TdsClient, Span)> {
    let mut span = Span::default();
    for (from, to) in ranges {
        let mut chunker = Chunker::new(job.spec.clone());
        match read_range(&mut conn, &job, from, to, &mut chunker, &queue).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(error) => {
                let _ = queue.send(Err(error)).await;
                return None;
            }
        }
        span.merge(chunker.span);
        if queue.send(Ok(Piece::RangeDone)).await.is_err() {
            return None;
        }
    }
    Some((conn, span))
}

/// Reads `(from, to]` into chunks handed over `queue`; `false` when the queue closed.
async fn read_range(conn: &mut TdsClient, job: &Job, from: Lsn, to: Lsn, chunker: &mut Chunker, queue: &mpsc::Sender<Result<Piece, SourceError>>) -> Result<bool, SourceError> {
    let mut changes = reader::read_changes(conn, &job.connector, &job.change_sql, from, to, job.include_command_id).await?;
    while let Some(row) = changes.next().await? {
        if let Some(chunk) = chunker.push(row)?
            && queue.send(Ok(Piece::Chunk(chunk))).await.is_err()
        {
            return Ok(false);
        }
    }
    drop(changes);
    if let Some(chunk) = chunker.rest()
        && queue.send(Ok(Piece::Chunk(chunk))).await.is_err()
    {
        return Ok(false);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges tile `(from, to]` exactly, end at commits, and hold `per_range` commits each.
    #[test]
    fn ranges_tile_the_batch_and_end_at_commits() {
        let at = Lsn::from_record;
        let commits: Vec<Lsn> = [2, 3, 5, 8, 9].into_iter().map(at).collect();
        assert_eq!(split(at(1), at(9), &commits, 2), vec![(at(1), at(3)), (at(3), at(8)), (at(8), at(9))]);
        assert_eq!(split(at(1), at(9), &commits, 5), vec![(at(1), at(9))]);
        assert_eq!(split(at(1), at(9), &commits, 1).len(), 5);
        // A batch reaching past its last commit (a DDL's LSN) ends at `to`.
        assert_eq!(split(at(1), at(12), &commits, 3), vec![(at(1), at(5)), (at(5), at(12))]);
        assert_eq!(split(at(1), at(12), &commits, 2), vec![(at(1), at(3)), (at(3), at(8)), (at(8), at(12))]);
        assert_eq!(split(at(1), at(12), &[], 3), vec![(at(1), at(12))]);
    }

    #[test]
    fn ranges_follow_the_last_batchs_rows_per_commit_with_one_range_per_reader_at_least() {
        let mut partitions = Partitions::default();
        // Unknown rows per commit: as if one.
        assert_eq!(partitions.commits_per_range(1000, 2, 10_000), 500);
        partitions.observe(40_000, 10_000);
        assert_eq!(partitions.commits_per_range(33_000, 4, 10_000), 2_500);
        assert_eq!(partitions.commits_per_range(1000, 4, 10_000), 250);
        partitions.observe(1_000_000, 1);
        assert_eq!(partitions.commits_per_range(3, 2, 10_000), 1);
    }
}
