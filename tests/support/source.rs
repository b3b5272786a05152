//! Helpers for the source suites: connector files, reading topics back, SQL over TDS, and
//! the checks of the log contract (tiling, exactly-once naming).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_sim::client::ClientConfig;
use mssql_cdc_testkit::files::{source_toml, worker_toml};
pub use mssql_cdc_testkit::kafka::Record;
use mssql_cdc_testkit::sql;

use super::{kafka, write_file, SimServer, StageProcess};

/// Files for one source connector (`orders-source`, 3 partitions) against `sim`, publishing
/// under `prefix`: (worker, connector).
pub fn source_files(dir: &Path, bootstrap: &str, sim: &SimServer, prefix: &str, extra: &str) -> (PathBuf, PathBuf) {
    let worker = write_file(dir, "worker.toml", &worker_toml(bootstrap, ""));
    let connector = write_file(dir, "source.toml", &source_toml("orders-source", sim.address.port(), prefix, &format!("topic_partitions = 3\n{extra}")));
    (worker, connector)
}

/// Every record of `topic` up to the current end of each partition.
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<Record> {
    mssql_cdc_testkit::kafka::read_all(&kafka(bootstrap), topic, None).unwrap_or_else(|error| panic!("reading {topic}: {error}"))
}

/// The control records of a data topic, in order.
pub fn controls(bootstrap: &str, data_topic: &str) -> Vec<ControlRecord> {
    mssql_cdc_testkit::kafka::controls(&kafka(bootstrap), data_topic).unwrap_or_else(|error| panic!("reading {data_topic}.control: {error}"))
}

/// A change's coordinates: (start_lsn, seqval, operation), LSNs as `0x…` text.
pub type Coordinates = (String, String, i64);

/// The rows of one query over TDS (panics on any error, naming the query).
pub async fn query_rows(sim: &ClientConfig, sql: &str) -> Vec<tiberius::Row> {
    sql::query_rows(sim, sql).await.unwrap_or_else(|error| panic!("{error}"))
}

/// The change table as SQL Server holds it, over TDS.
pub async fn truth(sim: &ClientConfig) -> Vec<Coordinates> {
    let rows = query_rows(sim, "SELECT __$start_lsn, __$seqval, __$operation FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation").await;
    rows.iter()
        .map(|r| (sql::hex(r.get::<&[u8], _>(0).unwrap()), sql::hex(r.get::<&[u8], _>(1).unwrap()), i64::from(r.get::<i32, _>(2).unwrap())))
        .collect()
}

/// `sys.fn_cdc_get_max_lsn()` over TDS, as `0x…` text.
pub async fn max_lsn(sim: &ClientConfig) -> String {
    sql::max_lsn(sim).await.unwrap_or_else(|error| panic!("{error}")).to_string()
}

/// Runs CDC cleanup of `dbo_orders` up to the server's maximum LSN now; returns that LSN.
pub async fn purge_up_to_max_lsn(sim: &ClientConfig) -> String {
    let low = max_lsn(sim).await;
    exec(sim, &format!("EXEC sys.sp_cdc_cleanup_change_table @capture_instance = N'dbo_orders', @low_water_mark = {low}")).await;
    low
}

/// Runs statements over TDS.
pub async fn exec(sim: &ClientConfig, statements: &str) {
    sql::exec(sim, statements).await.unwrap_or_else(|error| panic!("{error}"));
}

/// Waits until the control topic reaches the server's current maximum LSN.
pub async fn wait_caught_up(bootstrap: &str, data_topic: &str, sim: &ClientConfig, source: &StageProcess, timeout: Duration) -> Vec<ControlRecord> {
    let deadline = Instant::now() + timeout;
    loop {
        let max = max_lsn(sim).await;
        let records = if super::topic_exists(bootstrap, &format!("{data_topic}.control")) { controls(bootstrap, data_topic) } else { Vec::new() };
        if records.last().is_some_and(|c| c.to_lsn.to_string() == max) {
            return records;
        }
        assert!(Instant::now() < deadline, "the source did not reach {max} in time; stderr:\n{}", source.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The data records each control record names, checked against the log contract:
/// - batches tile the LSN range: each `from_lsn` is the previous `to_lsn`, ids +1;
/// - every named record lies in its batch's range and the counts match;
/// - every change of `truth` is named exactly once and nothing else is;
/// - no transaction is split across batches;
/// - `commits` never exceeds `max_commits` when given.
///
/// Returns the named records' JSON values.
pub fn check_contract(controls: &[ControlRecord], data: &[Record], truth: &[Coordinates], max_commits: Option<u64>) -> Vec<serde_json::Value> {
    let by_position: BTreeMap<(i32, i64), &Record> = data.iter().map(|r| ((r.partition, r.offset), r)).collect();
    let mut named = Vec::new();
    let mut batch_of_commit: BTreeMap<String, u64> = BTreeMap::new();
    for (index, control) in controls.iter().enumerate() {
        assert_eq!(control.batch_id, index as u64, "batch ids count up from 0 without a gap");
        if index > 0 {
            assert_eq!(control.from_lsn, controls[index - 1].to_lsn, "batch {} starts where batch {} ended", control.batch_id, index - 1);
        }
        assert!(control.to_lsn >= control.from_lsn);
        if let Some(limit) = max_commits {
            assert!(control.commits <= limit, "batch {} has {} commits > {limit}", control.batch_id, control.commits);
        }
        if let Some(max) = control.metrics.max_lsn {
            assert!(control.to_lsn <= max, "batch {} ends past the max LSN it saw", control.batch_id);
        }
        let mut count = 0;
        for range in &control.partitions {
            assert_eq!(range.records as i64, range.last_offset - range.first_offset + 1, "batch {} partition {} range is dense", control.batch_id, range.partition);
            for offset in range.first_offset..=range.last_offset {
                let record = by_position.get(&(range.partition, offset)).unwrap_or_else(|| panic!("batch {} names missing record {}/{}", control.batch_id, range.partition, offset));
                let value: serde_json::Value = serde_json::from_slice(&record.value).expect("a JSON data record");
                let lsn = value["_start_lsn"].as_str().unwrap().to_owned();
                assert!(lsn > control.from_lsn.to_string() && lsn <= control.to_lsn.to_string(), "record {lsn} outside batch {} ({}, {}]", control.batch_id, control.from_lsn, control.to_lsn);
                if let Some(previous) = batch_of_commit.insert(lsn.clone(), control.batch_id) {
                    assert_eq!(previous, control.batch_id, "transaction {lsn} split across batches");
                }
                named.push(value);
                count += 1;
            }
        }
        assert_eq!(count, control.rows, "batch {} rows", control.batch_id);
    }
    let mut seen: Vec<Coordinates> = named
        .iter()
        .map(|v| (v["_start_lsn"].as_str().unwrap().to_owned(), v["_seqval"].as_str().unwrap().to_owned(), v["_operation"].as_i64().unwrap()))
        .collect();
    seen.sort();
    let before = seen.len();
    seen.dedup();
    assert_eq!(before, seen.len(), "a change is named twice");
    let mut expected = truth.to_vec();
    expected.sort();
    assert_eq!(seen.len(), expected.len(), "named changes vs the change table");
    assert!(seen == expected, "the named changes are exactly the change table's");
    named
}
