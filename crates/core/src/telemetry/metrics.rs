//! Every metric the project emits, declared in one place, and the Prometheus recorder.
//!
//! Names follow `mssql_cdc_<subsystem>_<noun>_<unit>[_total]`; labels are bounded (connector
//! names, capture instances, topic names — never keys or values). Stages add their metrics here
//! when they are built.

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Unix time at which the process started (gauge, seconds).
pub const PROCESS_START_TIME_SECONDS: &str = "mssql_cdc_process_start_time_seconds";
/// Client connections accepted by the embedded broker's TLS listener (counter).
pub const BROKER_TLS_CONNECTIONS_TOTAL: &str = "mssql_cdc_broker_tls_connections_total";
/// TLS handshakes the embedded broker's listener rejected (counter).
pub const BROKER_TLS_HANDSHAKE_FAILURES_TOTAL: &str = "mssql_cdc_broker_tls_handshake_failures_total";

/// Transient stage failures the supervisor retried, by `connector` (counter).
pub const STAGE_RETRIES_TOTAL: &str = "mssql_cdc_stage_retries_total";
/// Stages that stopped with an error (fatal, or transient past the retry budget), by
/// `connector` (counter).
pub const STAGE_FAILURES_TOTAL: &str = "mssql_cdc_stage_failures_total";
/// Tables of a multi-table stage that stopped with an error while the stage went on, by
/// `connector` (counter).
pub const STAGE_TABLE_FAILURES_TOTAL: &str = "mssql_cdc_stage_table_failures_total";
/// Whether a table of a stage runs (1) or stopped with an error (0), by `connector` and
/// `table` (gauge; `table` takes the stage's own tables, so its values are bounded by them).
pub const STAGE_TABLE_UP: &str = "mssql_cdc_stage_table_up";

/// Change rows the source published, per capture instance (counter).
pub const SOURCE_ROWS_TOTAL: &str = "mssql_cdc_source_rows_total";
/// Bytes of data records (keys and values) the source published (counter).
pub const SOURCE_BYTES_TOTAL: &str = "mssql_cdc_source_bytes_total";
/// Batches (control records) the source published, heartbeats included (counter).
pub const SOURCE_BATCHES_TOTAL: &str = "mssql_cdc_source_batches_total";
/// Batches whose commits were planned on the stream's second connection while the batch
/// before was read (counter; a backlog read in batches cut by `max_commits_per_batch`).
pub const SOURCE_BATCHES_PLANNED_AHEAD_TOTAL: &str = "mssql_cdc_source_batches_planned_ahead_total";
/// Time from planning a batch to its control record's acknowledgement (histogram, seconds).
pub const SOURCE_BATCH_DURATION_SECONDS: &str = "mssql_cdc_source_batch_duration_seconds";
/// Server clock minus the commit time of `sys.fn_cdc_get_max_lsn()` (gauge, seconds).
pub const SOURCE_CAPTURE_LAG_SECONDS: &str = "mssql_cdc_source_capture_lag_seconds";
/// Hours until CDC cleanup may purge the oldest change not yet published (gauge).
pub const SOURCE_RETENTION_HEADROOM_HOURS: &str = "mssql_cdc_source_retention_headroom_hours";
/// The published position: the LSN's VLF and block as one number (gauge; monotonic).
pub const SOURCE_POSITION_LSN: &str = "mssql_cdc_source_position_lsn";
/// Transient SQL Server errors retried on a new connection (counter).
pub const SOURCE_RETRIES_TOTAL: &str = "mssql_cdc_source_retries_total";
/// Snapshot rows published (counter; its rate is the snapshot's rows/s).
pub const SOURCE_SNAPSHOT_ROWS_TOTAL: &str = "mssql_cdc_source_snapshot_rows_total";
/// Rows the open snapshot has published so far (gauge).
pub const SOURCE_SNAPSHOT_ROWS_DONE: &str = "mssql_cdc_source_snapshot_rows_done";
/// Rows the open snapshot expects: the table's estimate when it opened (gauge).
pub const SOURCE_SNAPSHOT_ROWS_EXPECTED: &str = "mssql_cdc_source_snapshot_rows_expected";
/// Chunks of the open chunked snapshot published so far (gauge).
pub const SOURCE_SNAPSHOT_CHUNKS_DONE: &str = "mssql_cdc_source_snapshot_chunks_done";
/// Chunks in the open chunked snapshot's plan (gauge).
pub const SOURCE_SNAPSHOT_CHUNKS_PLANNED: &str = "mssql_cdc_source_snapshot_chunks_planned";
/// 1 while a chunked snapshot's waves wait (for retention headroom or the stream's first
/// measurement of it), else 0 (gauge).
pub const SOURCE_BACKFILL_WAITING: &str = "mssql_cdc_source_backfill_waiting";

/// Batches the bronze sink completed (data and facts written), per app_id (counter).
pub const BRONZE_BATCHES_TOTAL: &str = "mssql_cdc_bronze_batches_total";
/// Rows the bronze sink appended, per app_id (counter).
pub const BRONZE_ROWS_TOTAL: &str = "mssql_cdc_bronze_rows_total";
/// Time to write one batch (read, decode, data and facts commits), seconds (histogram).
pub const BRONZE_COMMIT_DURATION_SECONDS: &str = "mssql_cdc_bronze_commit_duration_seconds";
/// Control records not yet processed, behind the control topic's end (gauge).
pub const BRONZE_RECORDS_BEHIND: &str = "mssql_cdc_bronze_records_behind";
/// Records sent to the dead-letter topic (counter).
pub const BRONZE_DEAD_LETTERED_TOTAL: &str = "mssql_cdc_bronze_dead_lettered_total";
/// Bronze batches silver applied (heartbeats included), by `table`.
pub const SILVER_BATCHES_TOTAL: &str = "mssql_cdc_silver_batches_total";
/// Bronze change rows silver read, by `table`.
pub const SILVER_CHANGES_TOTAL: &str = "mssql_cdc_silver_changes_total";
/// Silver rows inserted, by `table`.
pub const SILVER_ROWS_INSERTED_TOTAL: &str = "mssql_cdc_silver_rows_inserted_total";
/// Silver rows updated, by `table`.
pub const SILVER_ROWS_UPDATED_TOTAL: &str = "mssql_cdc_silver_rows_updated_total";
/// Silver rows deleted, by `table`.
pub const SILVER_ROWS_DELETED_TOTAL: &str = "mssql_cdc_silver_rows_deleted_total";
/// Time of one apply step, by `table`.
pub const SILVER_APPLY_DURATION_SECONDS: &str = "mssql_cdc_silver_apply_duration_seconds";
/// Now minus `finalized_until`, by `table`.
pub const SILVER_VERDICT_AGE_SECONDS: &str = "mssql_cdc_silver_verdict_age_seconds";

/// Wall time of the last reconcile run, by silver `table` (gauge, seconds).
pub const RECONCILE_DURATION_SECONDS: &str = "mssql_cdc_reconcile_duration_seconds";
/// Buckets reconcile judged, by silver `table` and `verdict` (`match`, `in_flight`, `mismatch`).
pub const RECONCILE_BUCKETS_TOTAL: &str = "mssql_cdc_reconcile_buckets_total";
/// Keys reconcile found differing (in flight included), by silver `table`.
pub const RECONCILE_FINDINGS_TOTAL: &str = "mssql_cdc_reconcile_findings_total";

fn describe_all() {
    describe_counter!(STAGE_RETRIES_TOTAL, Unit::Count, "Transient stage failures retried after a backoff.");
    describe_counter!(STAGE_FAILURES_TOTAL, Unit::Count, "Stages stopped by an error (fatal, or past the retry budget).");
    describe_counter!(STAGE_TABLE_FAILURES_TOTAL, Unit::Count, "Tables stopped by an error while their stage's other tables went on.");
    describe_gauge!(STAGE_TABLE_UP, "1 while a table of the stage runs, 0 once it stopped with an error.");
    describe_counter!(BRONZE_BATCHES_TOTAL, Unit::Count, "Batches the bronze sink completed.");
    describe_counter!(BRONZE_ROWS_TOTAL, Unit::Count, "Rows appended to bronze.");
    describe_histogram!(BRONZE_COMMIT_DURATION_SECONDS, Unit::Seconds, "Time to write one batch: read, decode, data and facts commits.");
    describe_gauge!(BRONZE_RECORDS_BEHIND, "Control records behind the control topic's end after the last batch written.");
    describe_counter!(BRONZE_DEAD_LETTERED_TOTAL, Unit::Count, "Records sent to the dead-letter topic.");
    describe_counter!(SILVER_BATCHES_TOTAL, Unit::Count, "Bronze batches applied to silver, heartbeats included.");
    describe_counter!(SILVER_CHANGES_TOTAL, Unit::Count, "Bronze change rows read by apply_changes.");
    describe_counter!(SILVER_ROWS_INSERTED_TOTAL, Unit::Count, "Silver rows inserted.");
    describe_counter!(SILVER_ROWS_UPDATED_TOTAL, Unit::Count, "Silver rows updated.");
    describe_counter!(SILVER_ROWS_DELETED_TOTAL, Unit::Count, "Silver rows deleted.");
    describe_histogram!(SILVER_APPLY_DURATION_SECONDS, Unit::Seconds, "Time of one apply step: read bronze, fold, MERGE, control row.");
    describe_gauge!(SILVER_VERDICT_AGE_SECONDS, Unit::Seconds, "Now minus finalized_until.");
    describe_counter!(SOURCE_ROWS_TOTAL, Unit::Count, "Change rows published, per capture instance.");
    describe_counter!(SOURCE_BYTES_TOTAL, Unit::Bytes, "Bytes of data records published, per capture instance.");
    describe_counter!(SOURCE_BATCHES_TOTAL, Unit::Count, "Batches published (control records, heartbeats included).");
    describe_counter!(SOURCE_BATCHES_PLANNED_AHEAD_TOTAL, Unit::Count, "Batches planned on a second connection while the batch before was read.");
    describe_histogram!(SOURCE_BATCH_DURATION_SECONDS, Unit::Seconds, "From planning a batch to its control record's acknowledgement.");
    describe_gauge!(SOURCE_CAPTURE_LAG_SECONDS, Unit::Seconds, "Server clock minus the commit time of the newest harvested LSN.");
    describe_gauge!(SOURCE_RETENTION_HEADROOM_HOURS, "Hours until CDC cleanup may purge the oldest unpublished change.");
    describe_gauge!(SOURCE_POSITION_LSN, "Published position: the LSN's VLF and block as one number.");
    describe_counter!(SOURCE_RETRIES_TOTAL, Unit::Count, "Transient SQL Server errors retried on a new connection.");
    describe_counter!(SOURCE_SNAPSHOT_ROWS_TOTAL, Unit::Count, "Snapshot rows published, per capture instance.");
    describe_gauge!(SOURCE_SNAPSHOT_ROWS_DONE, Unit::Count, "Rows the newest snapshot has published so far.");
    describe_gauge!(SOURCE_SNAPSHOT_ROWS_EXPECTED, Unit::Count, "The table's rows when the newest snapshot opened (estimate).");
    describe_gauge!(SOURCE_SNAPSHOT_CHUNKS_DONE, Unit::Count, "Chunks the open chunked snapshot has published.");
    describe_gauge!(SOURCE_SNAPSHOT_CHUNKS_PLANNED, Unit::Count, "Chunks in the open chunked snapshot's plan.");
    describe_gauge!(SOURCE_BACKFILL_WAITING, "1 while a chunked snapshot waits for retention headroom, else 0.");
    describe_gauge!(RECONCILE_DURATION_SECONDS, Unit::Seconds, "Wall time of the last reconcile run.");
    describe_counter!(RECONCILE_BUCKETS_TOTAL, Unit::Count, "Buckets reconcile judged, by verdict.");
    describe_counter!(RECONCILE_FINDINGS_TOTAL, Unit::Count, "Keys reconcile found differing, in-flight ones included.");
    describe_gauge!(PROCESS_START_TIME_SECONDS, Unit::Seconds, "Unix time at which the process started.");
    describe_counter!(BROKER_TLS_CONNECTIONS_TOTAL, Unit::Count, "Connections accepted by the embedded broker's TLS listener.");
    describe_counter!(BROKER_TLS_HANDSHAKE_FAILURES_TOTAL, Unit::Count, "TLS handshakes rejected by the embedded broker's listener.");
}

/// Every metric name above, for checks that each is emitted.
pub const ALL: &[&str] = &[
    PROCESS_START_TIME_SECONDS,
    BROKER_TLS_CONNECTIONS_TOTAL,
    BROKER_TLS_HANDSHAKE_FAILURES_TOTAL,
    STAGE_RETRIES_TOTAL,
    STAGE_FAILURES_TOTAL,
    SOURCE_ROWS_TOTAL,
    SOURCE_BYTES_TOTAL,
    SOURCE_BATCHES_TOTAL,
    SOURCE_BATCHES_PLANNED_AHEAD_TOTAL,
    SOURCE_BATCH_DURATION_SECONDS,
    SOURCE_CAPTURE_LAG_SECONDS,
    SOURCE_RETENTION_HEADROOM_HOURS,
    SOURCE_POSITION_LSN,
    SOURCE_RETRIES_TOTAL,
    SOURCE_SNAPSHOT_ROWS_TOTAL,
    SOURCE_SNAPSHOT_ROWS_DONE,
    SOURCE_SNAPSHOT_ROWS_EXPECTED,
    BRONZE_BATCHES_TOTAL,
    BRONZE_ROWS_TOTAL,
    BRONZE_COMMIT_DURATION_SECONDS,
    BRONZE_RECORDS_BEHIND,
    BRONZE_DEAD_LETTERED_TOTAL,
    SILVER_BATCHES_TOTAL,
    SILVER_CHANGES_TOTAL,
    SILVER_ROWS_INSERTED_TOTAL,
    SILVER_ROWS_UPDATED_TOTAL,
    SILVER_ROWS_DELETED_TOTAL,
    SILVER_APPLY_DURATION_SECONDS,
    SILVER_VERDICT_AGE_SECONDS,
    RECONCILE_DURATION_SECONDS,
    RECONCILE_BUCKETS_TOTAL,
    RECONCILE_FINDINGS_TOTAL,
];

/// Installs the process-wide Prometheus recorder (once) and returns the handle that renders it.
#[allow(clippy::expect_used)] // invariant: the recorder is installed once, inside a OnceLock
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .install_recorder()
                .expect("the Prometheus recorder is installed once per process");
            describe_all();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs_f64())
                .unwrap_or_default();
            metrics::gauge!(PROCESS_START_TIME_SECONDS).set(now);
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every declared name is unique and follows `mssql_cdc_<subsystem>_<noun>_<unit>[_total]`.
    #[test]
    fn names_are_unique_and_follow_the_convention() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a metric is declared twice");
        for name in ALL {
            let rest = name.strip_prefix("mssql_cdc_").unwrap_or_else(|| panic!("{name}: no mssql_cdc_ prefix"));
            assert!(rest.split('_').count() >= 2, "{name}: subsystem and noun");
            assert!(rest.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{name}: lower-case snake case");
        }
    }
}
