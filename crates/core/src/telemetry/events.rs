//! Instrumentation events: each one logs and updates its metrics in a single `emit` call, so a
//! log line and its counter never disagree.

use std::net::SocketAddr;

use std::time::Duration;

use super::metrics::{BROKER_TLS_CONNECTIONS_TOTAL, BROKER_TLS_HANDSHAKE_FAILURES_TOTAL, STAGE_FAILURES_TOTAL, STAGE_RETRIES_TOTAL};

// Each event below logs and updates its metrics in one `emit`; `register*` zero-initialises
// counters when a stage starts, so every declared metric is exported from the start.

/// A client completed a TLS handshake with the embedded broker.
pub struct TlsConnectionAccepted {
    /// The client's address.
    pub peer: SocketAddr,
}

impl TlsConnectionAccepted {
    /// Logs at debug and counts the connection.
    pub fn emit(self) {
        tracing::debug!(peer = %self.peer, "TLS connection accepted");
        metrics::counter!(BROKER_TLS_CONNECTIONS_TOTAL).increment(1);
    }
}

/// A client's TLS handshake with the embedded broker failed.
pub struct TlsHandshakeFailed<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// Why it failed.
    pub error: &'a std::io::Error,
}

impl TlsHandshakeFailed<'_> {
    /// Logs a warning and counts the failure.
    pub fn emit(self) {
        tracing::warn!(peer = %self.peer, error = %self.error, "TLS handshake failed");
        metrics::counter!(BROKER_TLS_HANDSHAKE_FAILURES_TOTAL).increment(1);
    }
}

/// A stage failed transiently and will be started again after a wait.
pub struct StageRetrying<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The failure.
    pub error: &'a (dyn std::error::Error + 'static),
    /// The retry this is within the streak (1 for the first).
    pub attempt: u32,
    /// The wait before it.
    pub wait: Duration,
}

impl StageRetrying<'_> {
    /// Logs a warning (one per failure, not per batch) and counts the retry.
    pub fn emit(self) {
        tracing::warn!(connector = %self.connector, error = %self.error, attempt = self.attempt, wait_ms = self.wait.as_millis() as u64, "stage failed transiently; retrying");
        metrics::counter!(STAGE_RETRIES_TOTAL, "connector" => self.connector.to_owned()).increment(1);
    }
}

/// A stage stopped with an error: fatal, or transient past the retry budget.
pub struct StageFailed<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The error the stage stopped with.
    pub error: &'a (dyn std::error::Error + 'static),
}

impl StageFailed<'_> {
    /// Logs an error and counts the failure.
    pub fn emit(self) {
        tracing::error!(connector = %self.connector, error = %self.error, "stage stopped");
        metrics::counter!(STAGE_FAILURES_TOTAL, "connector" => self.connector.to_owned()).increment(1);
    }
}

/// A multi-table stage started one of its tables (at start, on discovery, on a restart).
pub struct TableStarted<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The table.
    pub table: &'a str,
}

impl TableStarted<'_> {
    /// Logs at info and marks the table up.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::info!(connector = %self.connector, table = %self.table, "table started");
        metrics::counter!(STAGE_TABLE_FAILURES_TOTAL, "connector" => self.connector.to_owned()).increment(0);
        metrics::gauge!(STAGE_TABLE_UP, "connector" => self.connector.to_owned(), "table" => self.table.to_owned()).set(1.0);
    }
}

/// One table of a multi-table stage stopped with an error; the others go on.
pub struct TableFailed<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The table.
    pub table: &'a str,
    /// The error it stopped with.
    pub error: &'a (dyn std::error::Error + 'static),
}

impl TableFailed<'_> {
    /// Logs an error, counts the failure and marks the table down.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::error!(connector = %self.connector, table = %self.table, error = %self.error, "table stopped; the stage's other tables go on");
        metrics::counter!(STAGE_TABLE_FAILURES_TOTAL, "connector" => self.connector.to_owned()).increment(1);
        metrics::gauge!(STAGE_TABLE_UP, "connector" => self.connector.to_owned(), "table" => self.table.to_owned()).set(0.0);
    }
}

/// Looking for new tables failed; the tables already running go on, and the next interval
/// looks again.
pub struct TablesDiscoveryFailed<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The failure.
    pub error: &'a (dyn std::error::Error + 'static),
}

impl TablesDiscoveryFailed<'_> {
    /// Logs a warning.
    pub fn emit(self) {
        tracing::warn!(connector = %self.connector, error = %self.error, "looking for new tables failed; trying again at the next interval");
    }
}

/// The source published a batch's control record.
pub struct SourceBatchPublished<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The capture instance.
    pub capture_instance: &'a str,
    /// The batch id.
    pub batch_id: u64,
    /// The batch's LSN range.
    pub from_lsn: &'a dyn std::fmt::Display,
    /// Its end.
    pub to_lsn: &'a dyn std::fmt::Display,
    /// Commits in the batch.
    pub commits: u64,
    /// Change rows published.
    pub rows: u64,
    /// Bytes of data records published.
    pub bytes: u64,
    /// From planning to the control record's acknowledgement.
    pub duration: Duration,
    /// Server clock minus the newest harvested commit, seconds.
    pub capture_lag_seconds: Option<f64>,
    /// Hours until cleanup may purge the oldest unpublished change.
    pub retention_headroom_hours: Option<f64>,
    /// The published position as a monotonic number.
    pub position: f64,
}

impl SourceBatchPublished<'_> {
    /// Logs at debug and updates the source's counters and gauges.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::debug!(connector = %self.connector, capture_instance = %self.capture_instance, batch_id = self.batch_id, from_lsn = %self.from_lsn, to_lsn = %self.to_lsn, rows = self.rows, commits = self.commits, "batch published");
        let labels = [("connector", self.connector.to_owned()), ("capture_instance", self.capture_instance.to_owned())];
        metrics::counter!(SOURCE_ROWS_TOTAL, &labels).increment(self.rows);
        metrics::counter!(SOURCE_BYTES_TOTAL, &labels).increment(self.bytes);
        metrics::counter!(SOURCE_BATCHES_TOTAL, &labels).increment(1);
        metrics::histogram!(SOURCE_BATCH_DURATION_SECONDS, &labels).record(self.duration.as_secs_f64());
        if let Some(lag) = self.capture_lag_seconds {
            metrics::gauge!(SOURCE_CAPTURE_LAG_SECONDS, &labels).set(lag);
        }
        if let Some(headroom) = self.retention_headroom_hours {
            metrics::gauge!(SOURCE_RETENTION_HEADROOM_HOURS, &labels).set(headroom);
        }
        metrics::gauge!(SOURCE_POSITION_LSN, &labels).set(self.position);
    }
}

/// A batch starts from a plan made ahead on the stream's second connection.
pub struct SourceBatchPlannedAhead<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The capture instance.
    pub capture_instance: &'a str,
    /// Where the batch starts (the LSN it reads after).
    pub from_lsn: &'a dyn std::fmt::Display,
    /// Commits planned (the limit's extra one included).
    pub commits: usize,
}

impl SourceBatchPlannedAhead<'_> {
    /// Logs at trace and counts the batch.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::trace!(connector = %self.connector, capture_instance = %self.capture_instance, from_lsn = %self.from_lsn, commits = self.commits, "batch planned ahead");
        let labels = [("connector", self.connector.to_owned()), ("capture_instance", self.capture_instance.to_owned())];
        metrics::counter!(SOURCE_BATCHES_PLANNED_AHEAD_TOTAL, &labels).increment(1);
    }
}

/// The source published a batch of snapshot rows.
pub struct SourceSnapshotRead<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The capture instance.
    pub capture_instance: &'a str,
    /// Rows in the batch.
    pub rows: u64,
    /// Rows the snapshot has published so far.
    pub rows_done: u64,
    /// The table's rows when it opened (estimate).
    pub rows_expected: Option<u64>,
    /// Rows per second since this process took the snapshot up.
    pub rows_per_second: f64,
    /// Whether to log this one (the stage logs every few seconds, and at the end).
    pub log: bool,
}

impl SourceSnapshotRead<'_> {
    /// Counts the rows, sets the progress gauges, and logs progress with an estimate of the
    /// time left when `log`.
    pub fn emit(self) {
        use super::metrics::*;
        let labels = [("connector", self.connector.to_owned()), ("capture_instance", self.capture_instance.to_owned())];
        metrics::counter!(SOURCE_SNAPSHOT_ROWS_TOTAL, &labels).increment(self.rows);
        metrics::gauge!(SOURCE_SNAPSHOT_ROWS_DONE, &labels).set(self.rows_done as f64);
        if let Some(expected) = self.rows_expected {
            metrics::gauge!(SOURCE_SNAPSHOT_ROWS_EXPECTED, &labels).set(expected as f64);
        }
        if self.log {
            let left = self.rows_expected.map(|expected| expected.saturating_sub(self.rows_done));
            let eta_seconds = left.filter(|_| self.rows_per_second > 0.0).map(|left| (left as f64 / self.rows_per_second).round() as u64);
            tracing::info!(connector = %self.connector, capture_instance = %self.capture_instance, rows_done = self.rows_done, rows_expected = ?self.rows_expected, rows_per_second = self.rows_per_second.round() as u64, eta_seconds = ?eta_seconds, "snapshot progress");
        }
    }
}

/// Where a chunked snapshot's backfill stands: after each wave, and when it starts or stops
/// waiting.
pub struct SourceBackfillProgress<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The capture instance.
    pub capture_instance: &'a str,
    /// `running`, `waiting_headroom`, `waiting_metrics`, `budget_spent` or `done`.
    pub state: &'a str,
    /// Why, in words.
    pub reason: &'a str,
    /// Chunks published.
    pub chunks_done: u64,
    /// Chunks in the plan.
    pub chunks_total: u64,
    /// Rows per second of the last wave.
    pub rows_per_second: f64,
    /// The stream's retention headroom, hours, as last measured.
    pub headroom_hours: Option<f64>,
}

impl SourceBackfillProgress<'_> {
    /// Sets the chunk and waiting gauges and logs the state.
    pub fn emit(self) {
        use super::metrics::*;
        let labels = [("connector", self.connector.to_owned()), ("capture_instance", self.capture_instance.to_owned())];
        metrics::gauge!(SOURCE_SNAPSHOT_CHUNKS_DONE, &labels).set(self.chunks_done as f64);
        metrics::gauge!(SOURCE_SNAPSHOT_CHUNKS_PLANNED, &labels).set(self.chunks_total as f64);
        let waiting = self.state.starts_with("waiting");
        metrics::gauge!(SOURCE_BACKFILL_WAITING, &labels).set(if waiting { 1.0 } else { 0.0 });
        let (connector, capture_instance, state, reason) = (self.connector, self.capture_instance, self.state, self.reason);
        let rows_per_second = self.rows_per_second.round() as u64;
        if waiting {
            tracing::warn!(connector = %connector, capture_instance = %capture_instance, state = %state, reason = %reason, chunks_done = self.chunks_done, chunks_total = self.chunks_total, headroom_hours = ?self.headroom_hours, "backfill waiting");
        } else {
            tracing::info!(connector = %connector, capture_instance = %capture_instance, state = %state, reason = %reason, chunks_done = self.chunks_done, chunks_total = self.chunks_total, rows_per_second, headroom_hours = ?self.headroom_hours, "backfill progress");
        }
    }
}

/// The source hit a transient SQL Server error and retries the batch on a new connection.
pub struct SourceSqlRetrying<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The capture instance.
    pub capture_instance: &'a str,
    /// The error.
    pub error: &'a (dyn std::error::Error + 'static),
    /// Attempts in this outage.
    pub attempt: u32,
    /// The wait before the next one.
    pub wait: Duration,
}

impl SourceSqlRetrying<'_> {
    /// Logs a warning and counts the retry.
    pub fn emit(self) {
        tracing::warn!(connector = %self.connector, capture_instance = %self.capture_instance, error = %self.error, attempt = self.attempt, backoff_ms = self.wait.as_millis() as u64, "transient SQL Server error; retrying the batch on a new connection");
        let labels = [("connector", self.connector.to_owned()), ("capture_instance", self.capture_instance.to_owned())];
        metrics::counter!(super::metrics::SOURCE_RETRIES_TOTAL, &labels).increment(1);
    }
}

/// The bronze sink finished a batch (data and facts written, or found written).
pub struct BronzeBatchWritten<'a> {
    /// The connector.
    pub connector: &'a str,
    /// The sink's `app_id`.
    pub app_id: &'a str,
    /// The batch id.
    pub batch_id: u64,
    /// Rows appended to bronze (0 when the batch was already there).
    pub rows: u64,
    /// Records sent to the dead-letter topic.
    pub dead_lettered: u64,
    /// Time to write the batch.
    pub duration: Duration,
    /// Control records behind the control topic's end, when known.
    pub behind: Option<i64>,
}

impl BronzeBatchWritten<'_> {
    /// Registers the sink's counters at zero, so dashboards see them before the first batch.
    pub fn register(connector: &str, app_id: &str) {
        use super::metrics::*;
        register(&[BRONZE_BATCHES_TOTAL, BRONZE_ROWS_TOTAL, BRONZE_DEAD_LETTERED_TOTAL], &[("connector", connector), ("app_id", app_id)]);
    }

    /// Logs at debug and updates the sink's metrics.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::debug!(connector = %self.connector, app_id = %self.app_id, batch_id = self.batch_id, rows = self.rows, dead_lettered = self.dead_lettered, "bronze batch written");
        let labels = [("connector", self.connector.to_owned()), ("app_id", self.app_id.to_owned())];
        metrics::counter!(BRONZE_BATCHES_TOTAL, &labels).increment(1);
        metrics::counter!(BRONZE_ROWS_TOTAL, &labels).increment(self.rows);
        metrics::counter!(BRONZE_DEAD_LETTERED_TOTAL, &labels).increment(self.dead_lettered);
        metrics::histogram!(BRONZE_COMMIT_DURATION_SECONDS, &labels).record(self.duration.as_secs_f64());
        if let Some(behind) = self.behind {
            metrics::gauge!(BRONZE_RECORDS_BEHIND, &labels).set(behind as f64);
        }
    }
}

/// Silver applied a run of bronze batches and advanced its control row.
pub struct SilverApplied<'a> {
    /// The connector (`apply` for the one-shot command).
    pub connector: &'a str,
    /// The silver table.
    pub table: &'a str,
    /// Bronze batches applied, heartbeats included.
    pub batches: u64,
    /// The last batch applied.
    pub last_batch: i64,
    /// Bronze change rows read.
    pub changes: u64,
    /// Silver rows inserted, updated and deleted.
    pub inserted: u64,
    /// Updated.
    pub updated: u64,
    /// Deleted.
    pub deleted: u64,
    /// Time of the step.
    pub duration: Duration,
    /// Now minus `finalized_until`, seconds, when there is a verdict.
    pub verdict_age_seconds: Option<f64>,
}

impl SilverApplied<'_> {
    /// Registers the stage's counters at zero, so dashboards see them before the first apply.
    pub fn register(connector: &str, table: &str) {
        use super::metrics::*;
        let names = [SILVER_BATCHES_TOTAL, SILVER_CHANGES_TOTAL, SILVER_ROWS_INSERTED_TOTAL, SILVER_ROWS_UPDATED_TOTAL, SILVER_ROWS_DELETED_TOTAL];
        register(&names, &[("connector", connector), ("table", table)]);
    }

    /// Logs at debug and updates the stage's metrics.
    pub fn emit(self) {
        use super::metrics::*;
        tracing::debug!(connector = %self.connector, table = %self.table, batches = self.batches, last_batch = self.last_batch, changes = self.changes, inserted = self.inserted, updated = self.updated, deleted = self.deleted, "silver applied");
        let labels = [("connector", self.connector.to_owned()), ("table", self.table.to_owned())];
        metrics::counter!(SILVER_BATCHES_TOTAL, &labels).increment(self.batches);
        metrics::counter!(SILVER_CHANGES_TOTAL, &labels).increment(self.changes);
        metrics::counter!(SILVER_ROWS_INSERTED_TOTAL, &labels).increment(self.inserted);
        metrics::counter!(SILVER_ROWS_UPDATED_TOTAL, &labels).increment(self.updated);
        metrics::counter!(SILVER_ROWS_DELETED_TOTAL, &labels).increment(self.deleted);
        metrics::histogram!(SILVER_APPLY_DURATION_SECONDS, &labels).record(self.duration.as_secs_f64());
        if let Some(age) = self.verdict_age_seconds {
            metrics::gauge!(SILVER_VERDICT_AGE_SECONDS, &labels).set(age);
        }
    }
}

/// Counters `names` with `labels`, at zero (a counter exported before its first event lets
/// `rate()` and alerts see it from the start).
fn register(names: &[&'static str], labels: &[(&'static str, &str)]) {
    let labels: Vec<(&'static str, String)> = labels.iter().map(|(key, value)| (*key, (*value).to_owned())).collect();
    for name in names {
        metrics::counter!(*name, &labels).increment(0);
    }
}

/// Registers a stage's retry and failure counters at zero.
pub fn register_stage(connector: &str) {
    register(&[STAGE_RETRIES_TOTAL, STAGE_FAILURES_TOTAL], &[("connector", connector)]);
}

/// Registers a source stream's counters at zero.
pub fn register_source(connector: &str, capture_instance: &str) {
    use super::metrics::*;
    let labels = [("connector", connector), ("capture_instance", capture_instance)];
    register(&[SOURCE_ROWS_TOTAL, SOURCE_BYTES_TOTAL, SOURCE_BATCHES_TOTAL, SOURCE_BATCHES_PLANNED_AHEAD_TOTAL, SOURCE_RETRIES_TOTAL, SOURCE_SNAPSHOT_ROWS_TOTAL], &labels);
    // Progress gauges read 0 until a snapshot publishes rows.
    let owned: Vec<(&'static str, String)> = labels.iter().map(|(key, value)| (*key, (*value).to_owned())).collect();
    for name in [SOURCE_SNAPSHOT_ROWS_DONE, SOURCE_SNAPSHOT_ROWS_EXPECTED] {
        metrics::gauge!(name, &owned).increment(0.0);
    }
}

/// A reconcile run concluded.
pub struct ReconcileFinished<'a> {
    /// The silver table.
    pub table: &'a str,
    /// `equal`, `in_flight` or `mismatch`.
    pub verdict: &'static str,
    /// Its wall time.
    pub duration: std::time::Duration,
    /// Buckets that matched.
    pub buckets_match: u64,
    /// Buckets whose every difference is in flight.
    pub buckets_in_flight: u64,
    /// Buckets with a real difference.
    pub buckets_mismatch: u64,
    /// Differing keys, in-flight ones included.
    pub findings: u64,
}

impl ReconcileFinished<'_> {
    /// Sets the duration, counts buckets by verdict and findings, and logs the verdict (WARN on
    /// a mismatch).
    pub fn emit(self) {
        use super::metrics::*;
        let table = [("table", self.table.to_owned())];
        metrics::gauge!(RECONCILE_DURATION_SECONDS, &table).set(self.duration.as_secs_f64());
        for (verdict, count) in [("match", self.buckets_match), ("in_flight", self.buckets_in_flight), ("mismatch", self.buckets_mismatch)] {
            metrics::counter!(RECONCILE_BUCKETS_TOTAL, "table" => self.table.to_owned(), "verdict" => verdict).increment(count);
        }
        metrics::counter!(RECONCILE_FINDINGS_TOTAL, &table).increment(self.findings);
        let seconds = (self.duration.as_secs_f64() * 1000.0).round() / 1000.0;
        if self.verdict == "mismatch" {
            tracing::warn!(table = %self.table, verdict = self.verdict, seconds, buckets_mismatch = self.buckets_mismatch, findings = self.findings, "reconcile found differences");
        } else {
            tracing::info!(table = %self.table, verdict = self.verdict, seconds, buckets_in_flight = self.buckets_in_flight, findings = self.findings, "reconcile finished");
        }
    }
}
