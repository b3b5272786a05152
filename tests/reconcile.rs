//! `mssql-cdc reconcile` against a pipeline of real processes: the simulator over TDS, the
//! embedded broker, the source, bronze and silver stages, with Python's `deltalake` planting
//! faults in silver as an independent writer and reading the report table back.
//!
//! Invariant: reconcile reports a silver table equal to its SQL Server table exactly when it
//! is, names each planted difference with its failure type and key, and never calls a change
//! still on its way to silver a failure.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use mssql_cdc_sim::client::BlockingClient;
use mssql_cdc_sim::workload::{Workload, WorkloadOptions};

use crate::support;
use support::pipeline::{bronze_file, setup_and_load, silver_file, sink_worker};
use support::source::{exec, max_lsn, purge_up_to_max_lsn, query_rows, source_files, wait_caught_up};
use support::{run_python, spawn_stage, tail, unique, SimServer, StageProcess, TestBroker};

const SOURCE: usize = 0;
const BRONZE: usize = 1;
const SILVER: usize = 2;

/// A running feed of `dbo.orders` (or another table) through the three stages.
struct Feed {
    // First, so the stage processes stop before the broker and the simulator.
    stages: Vec<StageProcess>,
    broker: TestBroker,
    sim: SimServer,
    topic: String,
    source: (PathBuf, PathBuf),
    silver: PathBuf,
    dir: tempfile::TempDir,
}

impl Feed {
    /// `dbo.orders` with CDC and a first workload of `changes`, then the three stages.
    fn orders(changes: u64) -> Self {
        let sim = SimServer::start(&[]).unwrap();
        setup_and_load(&sim, changes, 1);
        Self::start(sim, "dbo_orders", "")
    }

    /// The three stages over capture instance `instance` of a running simulator.
    fn start(sim: SimServer, instance: &str, source_extra: &str) -> Self {
        let broker = TestBroker::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prefix = unique("reconcile");
        let table = instance.replacen('_', ".", 1);
        let topic = format!("{prefix}.sales.{table}");
        let (worker, source) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, &format!("max_commits_per_batch = 50\n{source_extra}"));
        let text = std::fs::read_to_string(&source).unwrap().replace("[\"dbo_orders\"]", &format!("[\"{instance}\"]"));
        std::fs::write(&source, text).unwrap();
        let sinks = sink_worker(dir.path(), &broker);
        let bronze = bronze_file(dir.path(), "orders", &topic, "orders-bronze-v1", "");
        let silver = silver_file(dir.path(), 20, "");
        let first = spawn_stage(&worker, &source, &[]);
        mssql_cdc_testkit::kafka::wait_for_topic(&broker.kafka(), &format!("{topic}.control"), Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}:\n{}", first.logs()));
        let stages = vec![first, spawn_stage(&sinks, &bronze, &[]), spawn_stage(&sinks, &silver, &[])];
        Self { stages, broker, sim, topic, source: (worker, source), silver, dir }
    }

    /// A feed whose silver has caught up with a first workload of `changes` and been found
    /// equal, with every stage then stopped (so a planted fault stays put).
    async fn caught_up(changes: u64) -> Self {
        let mut feed = Self::orders(changes);
        feed.source_caught_up().await;
        let outcome = feed.until_equal(&["--sample", "1"]);
        assert_eq!(outcome["failures"], serde_json::json!({}), "{outcome}");
        for stage in &mut feed.stages {
            stage.stop();
        }
        feed
    }

    async fn source_caught_up(&self) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        wait_caught_up(&self.broker.bootstrap, &self.topic, &self.sim.client_config(), &self.stages[SOURCE], Duration::from_secs(120)).await;
    }

    fn lake(&self, table: &str) -> String {
        self.dir.path().join(table).display().to_string()
    }

    /// `mssql-cdc <args>` with the source's password in the environment: exit code, stdout.
    fn command(&self, args: &[&str]) -> (i32, String) {
        let output = Command::new(support::bin())
            .args(args)
            .env("RUST_LOG", "warn")
            .env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env())
            .output()
            .unwrap_or_else(|error| panic!("running mssql-cdc {args:?}: {error}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("mssql-cdc {args:?}: {:?}\n{}", output.status, tail(&stderr, 2000));
        (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// One `reconcile --json` run (small buckets, the report table in the lake): exit code and
    /// outcome.
    fn reconcile(&self, extra: &[&str]) -> (i32, serde_json::Value) {
        self.reconcile_with(&self.silver.display().to_string(), extra)
    }

    fn reconcile_with(&self, silver: &str, extra: &[&str]) -> (i32, serde_json::Value) {
        let report = self.lake("reconcile-report");
        let source = self.source.1.display().to_string();
        let mut args = vec!["reconcile", silver, "--source", &source, "--json", "--bucket-rows", "100", "--report-table", &report, "--settle-ms", "500"];
        args.extend_from_slice(extra);
        let (code, out) = self.command(&args);
        if code == 3 && out.trim().is_empty() {
            // The run could not conclude (its error is on stderr, shown above).
            return (code, serde_json::Value::Null);
        }
        let outcome = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("reconcile prints JSON ({e}), exit {code}: {out}"));
        (code, outcome)
    }

    /// Runs reconcile until it reports equal (exit 0), asserting that no run before says
    /// anything but in flight (exit 4) or, before silver's first commit, that it cannot
    /// conclude (exit 3).
    fn until_equal(&self, extra: &[&str]) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, outcome) = self.reconcile(extra);
            match code {
                0 => return outcome,
                4 if Instant::now() < deadline => {
                    assert_eq!(outcome["verdict"], "in_flight");
                    std::thread::sleep(Duration::from_millis(500));
                }
                3 if Instant::now() < deadline && !self.dir.path().join("silver").join("_delta_log").exists() => std::thread::sleep(Duration::from_millis(500)),
                _ => panic!("reconcile exited {code} before silver caught up (lake {}):\n{outcome:#}\n{}", self.dir.path().display(), self.stages.iter().map(StageProcess::logs).collect::<Vec<_>>().join("\n")),
            }
        }
    }

    /// Changes silver's Delta table with Python's `deltalake` (an independent writer).
    fn plant(&self, action: &str, key: i64) {
        let out = run_python(PLANT, &[&self.lake("silver"), action, &key.to_string()]);
        assert_eq!(out.trim(), "ok", "{out}");
    }

    /// An order in the middle of the table, and the one after it.
    async fn some_orders(&self) -> (i64, i64) {
        let rows = query_rows(&self.sim.client_config(), "SELECT order_id FROM dbo.orders ORDER BY order_id").await;
        (rows[rows.len() / 2].get::<i64, _>(0).unwrap(), rows[rows.len() / 2 + 1].get::<i64, _>(0).unwrap())
    }
}

/// Plants one fault in silver: `delete`, `update` (a value) or `insert` (a key the source lacks).
const PLANT: &str = r#"
import os, sys
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, action, key = sys.argv[1], sys.argv[2], int(sys.argv[3])
table = DeltaTable(path)
if action == "delete":
    table.delete(f"order_id = {key}")
elif action == "update":
    table.update(updates={"status": "'planted'"}, predicate=f"order_id = {key}")
elif action == "insert":
    row = table.to_pyarrow_table().slice(0, 1)
    index = row.schema.get_field_index("order_id")
    row = row.set_column(index, row.schema.field(index), pa.array([key], type=row.schema.field(index).type))
    write_deltalake(path, row, mode="append")
print("ok")
"#;

/// Reads the report table back: (kind, verdict, failure_type, key) of one run.
const REPORT: &str = r#"
import json, os, sys
from deltalake import DeltaTable
rows = DeltaTable(sys.argv[1]).to_pyarrow_table().to_pylist()
print(json.dumps([[r["kind"], r["verdict"], r["failure_type"], r["key"]] for r in rows if r["run_id"] == sys.argv[2]]))
"#;

fn failures(outcome: &serde_json::Value) -> Vec<(String, String)> {
    outcome["findings"].as_array().unwrap().iter().map(|f| (f["failure_type"].as_str().unwrap().to_owned(), f["key"].as_str().unwrap().to_owned())).collect()
}

/// While a workload runs, reconcile says equal or in flight, never mismatch; after the feed
/// catches up it says equal, with every bucket compared row by row; its report table holds a
/// row per bucket, and its metrics file the run's counters.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_live_pipeline_reconcile_is_equal_or_in_flight_then_equal() {
    let feed = Feed::orders(400);
    feed.source_caught_up().await;
    feed.until_equal(&["--sample", "0.5"]);
    // A workload continuing on the table's rows, 3,000 changes at 300/s, while reconcile runs.
    let config = feed.sim.client_config();
    let existing: Vec<i64> = query_rows(&config, "SELECT order_id FROM dbo.orders").await.iter().map(|row| row.get::<i64, _>(0).unwrap()).collect();
    let workload = std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&config).expect("login");
        let options = WorkloadOptions { changes: 3000, rate: 300, max_transaction_size: 10, seed: 2, ..WorkloadOptions::default() };
        Workload::new(options, existing).run(&mut client).expect("workload");
    });
    let mut live = 0;
    while live < 3 || !workload.is_finished() {
        let (code, outcome) = feed.reconcile(&["--sample", "0.5", "--sample-seed", "7"]);
        assert!(code == 0 || code == 4, "a live run is equal or in flight, exit {code}:\n{outcome:#}");
        assert_eq!(outcome["mismatch"], 0, "{outcome:#}");
        assert!(failures(&outcome).iter().all(|(kind, _)| kind == "IN_FLIGHT"), "{outcome:#}");
        live += 1;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    workload.join().unwrap();
    feed.source_caught_up().await;
    let metrics = feed.dir.path().join("reconcile.prom");
    let outcome = feed.until_equal(&["--sample", "1", "--metrics-file", metrics.to_str().unwrap()]);
    let buckets = outcome["buckets_total"].as_u64().unwrap();
    assert!(buckets > 3, "small buckets cut the table: {outcome:#}");
    assert_eq!(outcome["hashed"].as_u64(), Some(buckets), "sample 1 compares every bucket row by row");
    assert_eq!(outcome["mode"], "ranges");
    let rows: u64 = outcome["buckets"].as_array().unwrap().iter().map(|b| b["source_rows"].as_u64().unwrap()).sum();
    let count = query_rows(&feed.sim.client_config(), "SELECT COUNT_BIG(*) FROM dbo.orders").await[0].get::<i64, _>(0).unwrap();
    assert_eq!(rows, count as u64, "tier 1 counted every row");
    assert!(outcome["positions"]["silver_lsn"].as_str().unwrap() <= outcome["positions"]["source_lsn"].as_str().unwrap());

    let report: Vec<(String, String, Option<String>, Option<String>)> =
        serde_json::from_str(run_python(REPORT, &[&feed.lake("reconcile-report"), outcome["run_id"].as_str().unwrap()]).trim()).unwrap();
    assert_eq!(report.len() as u64, buckets, "one report row per bucket, no key rows: {report:?}");
    assert!(report.iter().all(|(kind, verdict, failure, _)| kind == "bucket" && verdict == "MATCH" && failure.is_none()));
    let scraped = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(mssql_cdc_testkit::metrics::sum(&scraped, "mssql_cdc_reconcile_buckets_total"), Some(buckets as f64), "{scraped}");
    assert!(mssql_cdc_testkit::metrics::sum(&scraped, "mssql_cdc_reconcile_duration_seconds").is_some(), "{scraped}");
}

/// A row deleted from silver by hand is MISSING_TARGET with its key, found by tier 1's counts
/// alone (no sampling), by key ranges and with a composite key counted whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_deleted_from_silver_is_missing_target() {
    let feed = Feed::caught_up(300).await;
    let (key, _) = feed.some_orders().await;
    feed.plant("delete", key);
    let (code, outcome) = feed.reconcile(&["--sample", "0"]);
    assert_eq!(code, 1, "{outcome:#}");
    assert_eq!(failures(&outcome), vec![("MISSING_TARGET".to_owned(), format!("{{\"order_id\":{key}}}"))]);
    assert_eq!(outcome["mismatch"], 1);
    let report: Vec<(String, String, Option<String>, Option<String>)> =
        serde_json::from_str(run_python(REPORT, &[&feed.lake("reconcile-report"), outcome["run_id"].as_str().unwrap()]).trim()).unwrap();
    let keys: Vec<_> = report.iter().filter(|r| r.0 == "key").collect();
    assert_eq!(keys.len(), 1, "{report:?}");
    assert_eq!((keys[0].1.as_str(), keys[0].2.as_deref()), ("MISMATCH", Some("MISSING_TARGET")));

    let composite = std::fs::read_to_string(&feed.silver).unwrap() + "\nkeys = [\"order_id\", \"customer_id\"]\n";
    let composite_file = support::write_file(feed.dir.path(), "silver-composite.toml", &composite);
    let (code, whole) = feed.reconcile_with(composite_file.to_str().unwrap(), &["--sample", "0"]);
    assert_eq!((code, whole["mode"].as_str()), (1, Some("whole_table")), "{whole:#}");
    assert_eq!(failures(&whole).len(), 1, "{whole:#}");
    assert_eq!(failures(&whole)[0].0, "MISSING_TARGET");
}

/// A row added to silver by hand, under a key the table lacks, is MISSING_SOURCE.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_added_to_silver_is_missing_source() {
    let feed = Feed::caught_up(300).await;
    feed.plant("insert", 9_000_000_123);
    let (code, outcome) = feed.reconcile(&["--sample", "0"]);
    assert_eq!(code, 1, "{outcome:#}");
    assert_eq!(failures(&outcome), vec![("MISSING_SOURCE".to_owned(), "{\"order_id\":9000000123}".to_owned())]);
}

/// A value changed in silver by hand keeps tier 1's counts and sums equal: it is found row by
/// row, as RECORD_DIFF with its key, in a sampled bucket.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_changed_in_silver_is_record_diff() {
    let feed = Feed::caught_up(300).await;
    let (key, _) = feed.some_orders().await;
    feed.plant("update", key);
    let (code, unsampled) = feed.reconcile(&["--sample", "0"]);
    assert_eq!((code, unsampled["hashed"].as_u64()), (0, Some(0)), "counts and key sums cannot see a value: {unsampled:#}");
    let (code, outcome) = feed.reconcile(&["--sample", "1"]);
    assert_eq!(code, 1, "{outcome:#}");
    assert_eq!(failures(&outcome), vec![("RECORD_DIFF".to_owned(), format!("{{\"order_id\":{key}}}"))]);
    let finding = &outcome["findings"][0];
    assert!(finding["source_hash"].is_string() && finding["silver_hash"].is_string() && finding["source_hash"] != finding["silver_hash"]);
}

/// Changes bronze holds but silver has not applied (the change table purged, so only bronze
/// shows them) are IN_FLIGHT, exit 4; after `mssql-cdc apply` the same check is equal.
#[tokio::test(flavor = "multi_thread")]
async fn changes_withheld_from_silver_are_in_flight_then_equal_after_apply() {
    let mut feed = Feed::orders(300);
    feed.source_caught_up().await;
    feed.until_equal(&["--sample", "1"]);
    feed.stages[SILVER].stop();
    let config = feed.sim.client_config();
    let (key, next) = feed.some_orders().await;
    exec(
        &config,
        &format!(
            "UPDATE dbo.orders SET status = N'withheld' WHERE order_id = {key}; DELETE FROM dbo.orders WHERE order_id = {}; \
             INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, note, created_at, is_priority) VALUES (8000001, 1, N'new', 1.25, 'EUR', NULL, SYSDATETIME(), 0)",
            next
        ),
    )
    .await;
    feed.source_caught_up().await;
    let end = max_lsn(&config).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while run_python(BRONZE_END, &[&feed.lake("orders-bronze")]).trim() < end.as_str() {
        assert!(Instant::now() < deadline, "bronze did not reach {end}:\n{}", feed.stages[BRONZE].logs());
        std::thread::sleep(Duration::from_millis(300));
    }
    purge_up_to_max_lsn(&config).await;
    let (code, outcome) = feed.reconcile(&["--sample", "1"]);
    assert_eq!(code, 4, "{outcome:#}");
    let mut found = failures(&outcome);
    found.sort();
    let expected = |k: i64| ("IN_FLIGHT".to_owned(), format!("{{\"order_id\":{k}}}"));
    let mut wanted = vec![expected(key), expected(next), expected(8000001)];
    wanted.sort();
    assert_eq!(found, wanted, "{outcome:#}");
    assert_eq!(outcome["verdict"], "in_flight");

    let silver = feed.silver.display().to_string();
    let (code, applied) = feed.command(&["apply", &silver]);
    assert_eq!(code, 0, "{applied}");
    let (code, after) = feed.reconcile(&["--sample", "1"]);
    assert_eq!(code, 0, "{after:#}");
}

/// Bronze's highest `_start_lsn`.
const BRONZE_END: &str = r#"
import sys
from deltalake import DeltaTable
import os
column = DeltaTable(sys.argv[1]).to_pyarrow_table(columns=["_start_lsn"])["_start_lsn"]
print(max(column.to_pylist(), default=""))
"#;

/// A table with a column of every type the log carries (NULLs, extremes, non-BMP text), its
/// rows from before CDC (the bootstrap snapshot) and after, hashes equally on SQL Server and in
/// silver, row by row; one value changed in silver by one
/// microsecond or one character makes its row differ.
#[tokio::test(flavor = "multi_thread")]
async fn every_type_the_log_carries_hashes_alike_on_both_sides() {
    let sim = SimServer::start(&[]).unwrap();
    let config = sim.client_config();
    exec(&config, EVERY_TYPE).await;
    let feed = Feed::start(sim, "dbo_every_type", "bootstrap = true");
    feed.source_caught_up().await;
    let outcome = feed.until_equal(&["--sample", "1"]);
    assert_eq!(outcome["hashed"], outcome["buckets_total"], "{outcome:#}");
    assert_eq!(outcome["columns"].as_array().unwrap().len(), 25, "every column compared: {outcome:#}");
    assert!(outcome["skipped_columns"].as_array().unwrap().is_empty());
    let rows: u64 = outcome["buckets"].as_array().unwrap().iter().map(|b| b["silver_rows"].as_u64().unwrap()).sum();
    assert_eq!(rows, 5);

    let mut feed = feed;
    for stage in &mut feed.stages {
        stage.stop();
    }
    let changed = run_python(NUDGE, &[&feed.lake("silver")]);
    assert_eq!(changed.trim(), "ok", "{changed}");
    let (code, outcome) = feed.reconcile(&["--sample", "1"]);
    assert_eq!(code, 1, "{outcome:#}");
    let mut found = failures(&outcome);
    found.sort();
    assert_eq!(found, vec![("RECORD_DIFF".to_owned(), "{\"id\":1}".to_owned()), ("RECORD_DIFF".to_owned(), "{\"id\":3}".to_owned())], "{outcome:#}");
}

/// Silver's row 1 one character different in `nvc`, row 3 a microsecond later in `dt2`.
const NUDGE: &str = r#"
import os, sys
from deltalake import DeltaTable
table = DeltaTable(sys.argv[1])
table.update(updates={"nvc": "'plain!'"}, predicate="id = 1")
table.update(updates={"dt2": "dt2 + INTERVAL '1 microsecond'"}, predicate="id = 3")
print("ok")
"#;

/// One column per SQL Server type the log carries; rows of extremes, of NULLs, of everyday
/// values and of text beyond the BMP.
const EVERY_TYPE: &str = "CREATE TABLE dbo.every_type (
    id int NOT NULL PRIMARY KEY,
    tiny tinyint NULL, small smallint NULL, big bigint NULL, flag bit NULL,
    r real NULL, f float NULL, d decimal(38,10) NULL, m money NULL, sm smallmoney NULL,
    c char(5) NULL, vc varchar(50) NULL, nc nchar(4) NULL, nvc nvarchar(100) NULL,
    bin binary(4) NULL, vb varbinary(max) NULL,
    dt date NULL, t time(7) NULL, dt2 datetime2(7) NULL, dtm datetime NULL, sdt smalldatetime NULL, dto datetimeoffset(7) NULL,
    g uniqueidentifier NULL, n numeric(5,0) NULL, f2 float NULL
);
INSERT INTO dbo.every_type VALUES
 (1, 255, 32767, 9223372036854775807, 1, 3.4E+38, 1.7976931348623157E+308, 9999999999999999999999999999.9999999999, 922337203685477.5807, 214748.3647,
  'ab', 'x', N'ñ', N'plain', 0x00FF00FF, 0x, '9999-12-31', '23:59:59.9999999', '9999-12-31 23:59:59.9999999', '9999-12-31 23:59:59.997', '2079-06-06 23:59',
  '9999-12-31 23:59:59.9999999 +00:00', 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF', 99999, -0.5),
 (2, 0, -32768, -9223372036854775808, 0, -1.17549435E-38, -2.2250738585072014E-308, -9999999999999999999999999999.9999999999, -922337203685477.5808, -214748.3648,
  '', '', N'', N'', 0x00000000, 0x00, '0001-01-01', '00:00:00', '0001-01-01 00:00:00', '1753-01-01 00:00:00.003', '1900-01-01 00:00',
  '0001-01-01 14:00:00 +14:00', '00000000-0000-0000-0000-000000000000', -99999, 0),
 (3, 7, 12, 42, 1, 0.1, 0.1, 1.5, 12.34, 0.01,
  'abc  ', 'tail  ', N'ab', N'😀𝄞 mixed', 0xDEADBEEF, 0x0102030405, '2026-12-01', '12:34:56.1234567', '2026-12-01 12:34:56.1234567', '2026-12-01 12:34:56.123', '2026-12-01 12:35',
  '2026-12-01 12:34:56.1234567 -08:00', '6F9619FF-8B86-D011-B42D-00C04FC964FF', 12345, 2.5),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
EXEC sys.sp_cdc_enable_db;
EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'every_type', @role_name = NULL;
INSERT INTO dbo.every_type (id, nvc, dto) VALUES (5, N'after CDC', '2026-12-01 00:00:00.5 +05:30')";

/// Bad input exits 2 and names every problem at once: a silver file of another kind, a sample
/// and a bucket size out of range; nothing is connected to.
#[test]
fn bad_input_exits_2_naming_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bronze = bronze_file(dir.path(), "orders", "cdc.sales.dbo.orders", "orders-bronze-v1", "");
    let source = support::write_file(dir.path(), "source.toml", &mssql_cdc_testkit::files::source_toml("orders-source", 1, "cdc", ""));
    let output = Command::new(support::bin())
        .args(["reconcile", bronze.to_str().unwrap(), "--source", source.to_str().unwrap(), "--sample", "2", "--bucket-rows", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for expected in ["--sample: 2 is out of range", "--bucket-rows", "is a `delta-bronze`"] {
        assert!(stderr.contains(expected), "`{expected}` in:\n{stderr}");
    }
    assert!(output.stdout.is_empty());
}
