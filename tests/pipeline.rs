//! The whole pipeline as separate processes: the simulator serving TDS (`mssql-cdc sim serve`),
//! the broker, a workload driving `dbo.orders` over TDS (`mssql-cdc sim workload`), and the
//! three stages as `mssql-cdc run` processes (the source, the bronze sink, the silver stage),
//! all running at once. Once everything has caught up, one independent reader (Python
//! `deltalake`) reads facts, bronze, the silver control table and silver, and the test checks
//! the end-to-end equalities ([`check_equalities`]):
//!
//! - silver equals `dbo.orders` as the simulator holds it (read over TDS);
//! - bronze equals the change table: every change exactly once, nothing else;
//! - the bronze sink's facts rows tile the LSN range of the control topic without gap or
//!   overlap, and count exactly the rows in bronze.
//!
//! The chaos suite does the same while SIGKILLing random stages over and over. For a soak:
//!
//! ```text
//! MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 scripts/test.sh --test pipeline the_pipeline_survives
//! ```
//!
//! The resilience suite starts the stages together and in reverse order, restarts the broker
//! and takes the object store away while everything runs, and exhausts a retry budget.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_testkit::metrics::sum;
use mssql_cdc_testkit::sim::WorkloadProcess;
use rand::seq::SliceRandom;
use rand::Rng;
use support::pipeline::{bronze_file_in, silver_file_in, sink_worker, Lake};
use support::proxy::Proxy;
use support::s3::S3Server;
use support::source::{controls, query_rows, source_files, truth, wait_caught_up, Coordinates};
use support::{run_python, spawn_stage, tail, unique, SimServer, StageProcess, TestBroker};
use tiberius::numeric::Numeric;

/// The bronze sink's `app_id` (its facts rows carry it).
const BRONZE_APP: &str = "orders-bronze-v1";

/// Indexes of the stages in [`Pipeline::stages`].
const SOURCE: usize = 0;
const BRONZE: usize = 1;
const SILVER: usize = 2;

/// How much of a process's stderr goes into a failure message (the tail).
const LOG_TAIL: usize = 12_000;

/// How long the stages get to catch up once the workload is done.
const CATCH_UP: Duration = Duration::from_secs(180);

/// Reads the tables in the order the sinks make them safe to read: facts first (bronze commits
/// a batch's data before its facts row), then bronze, then the silver control table (silver
/// commits its data before the control row), then silver. `mode` is `progress` (facts and
/// control only, for polling) or `full` (everything). Prints one JSON object.
const READ: &str = r#"
import sys, json, decimal
from deltalake import DeltaTable as Table
facts, bronze, control, silver, app_id, mode, storage = sys.argv[1:8]
storage = json.loads(storage) or None
out = {"errors": []}

def DeltaTable(location):
    return Table(location, storage_options=storage)

def text(v):
    # LSNs as `0x` and upper-case hex, whether stored as text or as bytes.
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex().upper()
    return str(v)

def iso(v):
    return v.isoformat() if hasattr(v, "isoformat") else v

try:
    f = DeltaTable(facts).to_pyarrow_table(columns=["app_id", "batch_id", "event", "rows", "start_lsn", "end_lsn"]).to_pylist()
    # One batch-type row per batch: `batch` or `heartbeat`; event rows (data_skipped, ...) aside.
    out["batches"] = [[r["batch_id"], text(r["start_lsn"]), text(r["end_lsn"]), r["rows"]]
                      for r in f if r["app_id"] == app_id and r["event"] in ("batch", "heartbeat")]
except Exception as e:
    out["batches"] = []
    out["errors"].append("facts: %s" % e)

if mode == "full":
    try:
        t = DeltaTable(bronze).to_pyarrow_table(columns=["_start_lsn", "_seqval", "_operation"]).to_pylist()
        out["changes"] = [[text(r["_start_lsn"]), text(r["_seqval"]), r["_operation"]] for r in t]
    except Exception as e:
        out["changes"] = []
        out["errors"].append("bronze: %s" % e)

try:
    c = DeltaTable(control).to_pyarrow_table(columns=["applied_batch", "finalized_until"]).to_pylist()
    out["control"] = [{"applied_batch": r["applied_batch"], "finalized_until": iso(r["finalized_until"])} for r in c]
except Exception as e:
    # Not there before silver's first apply.
    out["control"] = []

if mode == "full":
    try:
        cols = ["order_id", "customer_id", "status", "amount", "currency", "note", "is_priority"]
        rows = DeltaTable(silver).to_pyarrow_table(columns=cols).to_pylist()
        # amount as integer cents: exact, whatever the Decimal's exponent.
        out["rows"] = [[r["order_id"], r["customer_id"], r["status"],
                        None if r["amount"] is None else int(decimal.Decimal(str(r["amount"])).scaleb(2)),
                        r["currency"], r["note"], r["is_priority"]] for r in rows]
    except Exception as e:
        out["rows"] = None
        out["errors"].append("silver: %s" % e)

print(json.dumps(out))
# deltalake's runtime threads can abort the interpreter's teardown; leave at once.
sys.stdout.flush()
import os
os._exit(0)
"#;

/// A row of `dbo.orders`: (order_id, customer_id, status, amount in cents, currency, note,
/// is_priority).
type Order = (i64, i64, String, i128, String, Option<String>, bool);

/// A batch-type facts row of the bronze sink: (batch_id, start_lsn, end_lsn, rows).
type FactsBatch = (i64, String, String, i64);

/// What the Python reader saw.
#[derive(Debug)]
struct Observed {
    /// Tables it could not read.
    errors: Vec<String>,
    /// The bronze sink's batch-type facts rows, in the order read.
    batches: Vec<FactsBatch>,
    /// Bronze's (start_lsn, seqval, operation) (`full` only).
    changes: Vec<Coordinates>,
    /// Silver's control row: the last bronze batch applied (-1 when there is none).
    applied_batch: i64,
    /// Silver's control row: its verdict.
    finalized_until: Option<DateTime<Utc>>,
    /// Silver's rows (`full` only; `None` when unreadable).
    rows: Option<Vec<Order>>,
}

/// Runs [`READ`] on the pipeline's tables in `lake`.
fn observe(lake: &Lake, full: bool) -> Observed {
    let mode = if full { "full" } else { "progress" };
    let (facts, bronze, control, silver) = (lake.table("facts"), lake.table("orders-bronze"), lake.table("control"), lake.table("silver"));
    let output = run_python(READ, &[&facts, &bronze, &control, &silver, BRONZE_APP, mode, &lake.storage_json()]);
    let value: serde_json::Value = serde_json::from_str(output.trim()).unwrap_or_else(|e| panic!("reader output is JSON ({e}): {output}"));
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("text expected: {v}")).to_owned();
    let int = |v: &serde_json::Value| v.as_i64().unwrap_or_else(|| panic!("an integer expected: {v}"));
    let control = value["control"].as_array().unwrap();
    assert!(control.len() <= 1, "one control row for the one silver table: {control:?}");
    Observed {
        errors: value["errors"].as_array().unwrap().iter().map(text).collect(),
        batches: value["batches"].as_array().unwrap().iter().map(|b| (int(&b[0]), text(&b[1]), text(&b[2]), int(&b[3]))).collect(),
        changes: value["changes"].as_array().map(|c| c.iter().map(|c| (text(&c[0]), text(&c[1]), int(&c[2]))).collect()).unwrap_or_default(),
        applied_batch: control.first().and_then(|c| c["applied_batch"].as_i64()).unwrap_or(-1),
        finalized_until: control
            .first()
            .and_then(|c| c["finalized_until"].as_str())
            .map(|t| DateTime::parse_from_rfc3339(t).unwrap_or_else(|e| panic!("finalized_until {t}: {e}")).with_timezone(&Utc)),
        rows: value["rows"].as_array().map(|rows| {
            rows.iter()
                .map(|r| {
                    (
                        int(&r[0]),
                        int(&r[1]),
                        text(&r[2]),
                        i128::from(int(&r[3])),
                        text(&r[4]),
                        r[5].as_str().map(str::to_owned),
                        r[6].as_bool().unwrap_or_else(|| panic!("is_priority is a boolean: {}", r[6])),
                    )
                })
                .collect()
        }),
    }
}

/// An amount as integer cents.
fn cents(amount: Numeric) -> i128 {
    let scale = u32::from(amount.scale());
    if scale <= 2 {
        amount.value() * 10i128.pow(2 - scale)
    } else {
        let divisor = 10i128.pow(scale - 2);
        assert_eq!(amount.value() % divisor, 0, "amount {} has more than 2 decimals", amount.value());
        amount.value() / divisor
    }
}

/// The simulator's `dbo.orders` over TDS.
async fn orders(sim: &SimServer) -> Vec<Order> {
    let rows = query_rows(&sim.client_config(), "SELECT order_id, customer_id, status, amount, currency, note, is_priority FROM dbo.orders").await;
    rows.iter()
        .map(|r| {
            (
                r.get::<i64, _>(0).unwrap(),
                i64::from(r.get::<i32, _>(1).unwrap()),
                r.get::<&str, _>(2).unwrap().to_owned(),
                cents(r.get::<Numeric, _>(3).unwrap()),
                r.get::<&str, _>(4).unwrap().to_owned(),
                r.get::<&str, _>(5).map(str::to_owned),
                r.get::<bool, _>(6).unwrap(),
            )
        })
        .collect()
}

/// Asserts two multisets are equal; on failure names the counts and the first differences
/// rather than printing both in full.
fn assert_same_multiset<T: Ord + Clone + Debug>(what: &str, expected: &[T], found: &[T]) {
    let count = |items: &[T]| {
        let mut counts: BTreeMap<T, i64> = BTreeMap::new();
        for item in items {
            *counts.entry(item.clone()).or_default() += 1;
        }
        counts
    };
    let (want, got) = (count(expected), count(found));
    if want == got {
        return;
    }
    let missing: Vec<_> = want.iter().filter(|(k, n)| got.get(*k).copied().unwrap_or(0) < **n).map(|(k, _)| k).take(10).collect();
    let extra: Vec<_> = got.iter().filter(|(k, n)| want.get(*k).copied().unwrap_or(0) < **n).map(|(k, n)| (k, *n)).take(10).collect();
    panic!("{what}: expected {} items, found {}; first missing: {missing:#?}\nfirst extra or duplicated (with counts): {extra:#?}", expected.len(), found.len());
}

/// The end-to-end equalities, on one [`observe`] read taken after everything caught up:
///
/// - silver equals `orders` (the simulator's table) on every compared column;
/// - bronze holds exactly the changes of `truth` (the change table): nothing missing,
///   nothing extra, nothing twice;
/// - the bronze sink's facts rows tile the LSN range of `controls`: batch ids `0..n` without
///   gap or duplicate, each batch starting where the previous ended, the last ending at the
///   last control record's `to_lsn`, and their row counts summing to bronze's rows.
fn check_equalities(found: &Observed, controls: &[ControlRecord], truth: &[Coordinates], orders: &[Order]) {
    assert!(found.errors.is_empty(), "the reader could read every table: {:?}", found.errors);
    let last = controls.last().expect("the source published control records");

    // Silver = dbo.orders.
    let silver = found.rows.as_deref().expect("silver rows");
    let mut ids: Vec<i64> = silver.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "silver holds each order_id once");
    assert_same_multiset("silver vs dbo.orders", orders, silver);

    // Bronze = the change history.
    assert_same_multiset("bronze (_start_lsn, _seqval, _operation) vs cdc.dbo_orders_CT", truth, &found.changes);

    // Facts tile the LSN range.
    let mut batches = found.batches.clone();
    batches.sort();
    let ids: Vec<i64> = batches.iter().map(|b| b.0).collect();
    assert_eq!(ids, (0..controls.len() as i64).collect::<Vec<_>>(), "one facts row per batch, ids 0..n without gap or duplicate");
    assert_eq!(batches[0].1, controls[0].from_lsn.to_string(), "batch 0 starts where the stream starts");
    for pair in batches.windows(2) {
        assert_eq!(pair[1].1, pair[0].2, "batch {} starts where batch {} ended", pair[1].0, pair[0].0);
    }
    for (batch, control) in batches.iter().zip(controls) {
        let range = (control.from_lsn.to_string(), control.to_lsn.to_string());
        assert_eq!((batch.1.clone(), batch.2.clone()), range, "batch {} covers its control record's range", batch.0);
    }
    assert_eq!(batches.last().unwrap().2, last.to_lsn.to_string(), "the last batch ends at the last control record's to_lsn");
    let facts_rows: i64 = batches.iter().map(|b| b.3).sum();
    assert_eq!(facts_rows, found.changes.len() as i64, "the facts rows count bronze's rows");
    assert_eq!(facts_rows, controls.iter().map(|c| c.rows as i64).sum::<i64>(), "the facts rows count the control records' rows");

    // Silver applied everything.
    assert!(found.applied_batch >= last.batch_id as i64, "silver applied up to batch {} (at {})", last.batch_id, found.applied_batch);
}

/// Asserts a stage's log is quiet for a healthy run: no ERROR line, and no WARN line
/// repeated (a per-batch warning is what operators page on).
fn assert_quiet(stage: &StageProcess) {
    let log = stage.log();
    let mut warnings: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines() {
        // `<timestamp> <LEVEL> <target>: <message> <fields>`, maybe with ANSI colours.
        let plain: String = strip_ansi(line);
        let mut words = plain.split_whitespace();
        let (Some(_time), Some(level)) = (words.next(), words.next()) else { continue };
        assert_ne!(level, "ERROR", "the {} stage logged an ERROR in a healthy run:\n{line}\n{}", stage.name(), tail(&log, LOG_TAIL));
        if level == "WARN" {
            let message: String = words.take_while(|word| !word.contains('=')).collect::<Vec<_>>().join(" ");
            *warnings.entry(message).or_default() += 1;
        }
    }
    let repeated: Vec<_> = warnings.iter().filter(|(_, n)| **n > 2).collect();
    assert!(repeated.is_empty(), "the {} stage repeated warnings in a healthy run: {repeated:?}\n{}", stage.name(), tail(&log, LOG_TAIL));
}

/// `text` without ANSI colour sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The order the stages start in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// The source, then (once its control topic exists) bronze and silver.
    SourceFirst,
    /// All three at once.
    Together,
    /// Silver, bronze, then the source: the sinks wait for what they follow.
    Reversed,
}

/// How a [`Pipeline`] is set up.
struct Setup {
    start: Start,
    /// Extra worker lines (a `[retry]` table).
    worker_extra: &'static str,
    /// An S3 server (through a proxy) for the tables, else a local directory.
    s3: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self { start: Start::SourceFirst, worker_extra: "", s3: false }
    }
}

/// The simulator, the broker and the three stages, with `dbo.orders` set up and CDC on.
struct Pipeline {
    // Declared first so the stage processes go before the broker and the simulator.
    stages: Vec<StageProcess>,
    broker: TestBroker,
    sim: SimServer,
    topic: String,
    lake: Lake,
    /// The S3 server and the proxy in front of it, for the object-store outage.
    s3: Option<(S3Server, Proxy)>,
    /// Each stage's `/metrics`, scraped just before its clean stop.
    scraped: String,
    dir: tempfile::TempDir,
}

impl Pipeline {
    /// Starts the simulator and the broker, creates `dbo.orders` with CDC (a workload process
    /// with `--setup` and no changes), then starts the stages in the order `setup` says.
    fn start(setup: Setup) -> Self {
        let sim = SimServer::start(&[]).unwrap();
        let broker = TestBroker::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut init = WorkloadProcess::spawn(sim.address, &dir.path().join("setup.log"), &["--setup", "--changes", "0", "--rate", "0"]).unwrap();
        assert!(init.finish(Duration::from_secs(60)).unwrap().success(), "setup failed:\n{}", init.log());

        let (lake, s3) = if setup.s3 {
            let server = S3Server::start("lake");
            let proxy = Proxy::start(server.address());
            let endpoint = format!("http://{}", proxy.address);
            let storage = server.options_at(&endpoint).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            (Lake { root: format!("s3://{}/{}", server.bucket, unique("pipeline")), storage }, Some((server, proxy)))
        } else {
            (Lake::local(dir.path()), None)
        };
        let prefix = unique("e2e");
        let topic = format!("{prefix}.sales.dbo.orders");
        let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 50");
        std::fs::write(&worker, format!("{}{}", std::fs::read_to_string(&worker).unwrap(), setup.worker_extra)).unwrap();
        let sinks = sink_worker(dir.path(), &broker);
        std::fs::write(&sinks, format!("{}{}", std::fs::read_to_string(&sinks).unwrap(), setup.worker_extra)).unwrap();
        let bronze_connector = bronze_file_in(dir.path(), &lake, "orders", &topic, BRONZE_APP, "");
        let silver_connector = silver_file_in(dir.path(), &lake, 20);
        let spawn = |which: usize| match which {
            SOURCE => spawn_stage(&worker, &connector, &[]),
            BRONZE => spawn_stage(&sinks, &bronze_connector, &[]),
            _ => spawn_stage(&sinks, &silver_connector, &[]),
        };
        let stages = match setup.start {
            Start::SourceFirst => {
                let source = spawn(SOURCE);
                // The sinks follow the control topic: let the source create it first.
                let control = format!("{topic}.control");
                mssql_cdc_testkit::kafka::wait_for_topic(&broker.kafka(), &control, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}:\n{}", source.logs()));
                vec![source, spawn(BRONZE), spawn(SILVER)]
            }
            Start::Together => vec![spawn(SOURCE), spawn(BRONZE), spawn(SILVER)],
            Start::Reversed => {
                let (silver, bronze) = (spawn(SILVER), spawn(BRONZE));
                // Let both sinks find nothing to follow before the source starts.
                std::thread::sleep(Duration::from_secs(3));
                vec![spawn(SOURCE), bronze, silver]
            }
        };
        Self { stages, broker, sim, topic, lake, s3, scraped: String::new(), dir }
    }

    /// The main workload: `changes` changes at `rate` changes/s, concurrently with the stages.
    fn workload(&self, changes: u64, rate: u64, seed: u64) -> WorkloadProcess {
        let (changes, rate, seed) = (changes.to_string(), rate.to_string(), seed.to_string());
        let args = ["--changes", &changes, "--rate", &rate, "--seed", &seed, "--max-transaction-size", "10"];
        WorkloadProcess::spawn(self.sim.address, &self.dir.path().join("workload.log"), &args).unwrap()
    }

    /// Every stage's logs, for failure messages.
    fn logs(&self) -> String {
        self.stages.iter().map(StageProcess::logs).collect::<Vec<_>>().join("\n")
    }

    /// Panics if a stage exited on its own (a stage must keep running).
    fn assert_alive(&mut self, index: usize) {
        if let Err(error) = self.stages[index].process().alive() {
            panic!("the {} stage exited on its own: {error}\n{}", self.stages[index].name(), self.stages[index].logs());
        }
    }

    /// Waits for the workload to finish, for the source to publish everything and stop, and
    /// for bronze and silver to reach the last control record; then runs [`check_equalities`]
    /// on one full read.
    async fn catch_up_and_check(&mut self, mut workload: WorkloadProcess, workload_timeout: Duration) {
        match workload.finish(workload_timeout) {
            Ok(status) => assert!(status.success(), "the workload failed ({status}):\n{}\n{}", workload.log(), self.logs()),
            Err(error) => panic!("{error}\n{}", self.logs()),
        }
        // The capture job harvests every 100 ms: let it take the last commits into the change
        // table before the maximum LSN is read.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let config = self.sim.client_config();
        wait_caught_up(&self.broker.bootstrap, &self.topic, &config, &self.stages[SOURCE], CATCH_UP).await;
        // Stop the source so no heartbeat moves the end while the sinks catch up; SIGTERM is
        // a clean shutdown (exit 0).
        self.scraped.push_str(&self.stages[SOURCE].scrape().unwrap_or_default());
        let status = self.stages[SOURCE].stop();
        assert!(status.is_some_and(|s| s.success()), "the source did not exit cleanly on SIGTERM ({status:?}):\n{}", self.stages[SOURCE].logs());
        let controls = controls(&self.broker.bootstrap, &self.topic);
        let last = controls.last().expect("control records").batch_id as i64;

        let deadline = Instant::now() + CATCH_UP;
        loop {
            self.assert_alive(BRONZE);
            self.assert_alive(SILVER);
            let now = observe(&self.lake, false);
            let bronze_at = now.batches.iter().map(|b| b.0).max().unwrap_or(-1);
            if bronze_at >= last && now.applied_batch >= last {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sinks did not reach batch {last} within {CATCH_UP:?} (bronze at {bronze_at}, silver at {}; {:?}):\n{}\n{}",
                now.applied_batch,
                now.errors,
                self.stages[BRONZE].logs(),
                self.stages[SILVER].logs()
            );
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }

        let truth = truth(&config).await;
        let orders = orders(&self.sim).await;
        assert!(!truth.is_empty() && !orders.is_empty(), "the workload made changes");
        let found = observe(&self.lake, true);
        check_equalities(&found, &controls, &truth, &orders);
        for index in [BRONZE, SILVER] {
            self.scraped.push_str(&self.stages[index].scrape().unwrap_or_default());
            let status = self.stages[index].stop();
            assert!(status.is_some_and(|s| s.success()), "the {} stage did not exit cleanly on SIGTERM ({status:?}):\n{}", self.stages[index].name(), self.stages[index].logs());
        }
        eprintln!(
            "pipeline: {} changes in {} batches ({} with rows), {} rows in silver",
            truth.len(),
            controls.len(),
            controls.iter().filter(|c| c.rows > 0).count(),
            orders.len()
        );
    }
}

/// An unsigned number from the environment, else `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// End to end: with the workload running concurrently against the served simulator, the
/// source, bronze and silver as separate processes end with silver equal to the source table,
/// bronze equal to the change history (exactly once), and the facts tiling the LSN range of
/// the control topic. A healthy run is quiet: no stage logs an ERROR or repeats a WARN.
#[tokio::test(flavor = "multi_thread")]
async fn the_whole_pipeline_as_processes_matches_the_simulator() {
    let mut pipeline = Pipeline::start(Setup::default());
    let workload = pipeline.workload(3000, 300, 2);
    pipeline.catch_up_and_check(workload, Duration::from_secs(120)).await;
    for stage in &pipeline.stages {
        assert_quiet(stage);
    }
    // Every declared metric of the stages is exported (the broker's TLS counters come from
    // the broker process: tests/broker.rs).
    let missing: Vec<&str> = mssql_cdc_core::telemetry::metrics::ALL
        .iter()
        .copied()
        .filter(|name| !name.starts_with("mssql_cdc_broker_"))
        .filter(|name| sum(&pipeline.scraped, name).or_else(|| sum(&pipeline.scraped, &format!("{name}_count"))).is_none())
        .collect();
    assert!(missing.is_empty(), "declared metrics the stages never exported: {missing:?}\n{}", pipeline.scraped);
}

/// Stages start in any order, as compose starts them: all three at once, and the sinks before
/// the source (bronze waits for the topics, silver for the facts table). None exits, and the
/// end-to-end equalities hold.
#[tokio::test(flavor = "multi_thread")]
async fn stages_started_together_or_in_reverse_order_all_run() {
    for start in [Start::Together, Start::Reversed] {
        let mut pipeline = Pipeline::start(Setup { start, ..Setup::default() });
        let workload = pipeline.workload(1500, 300, 4);
        pipeline.catch_up_and_check(workload, Duration::from_secs(120)).await;
        for stage in &pipeline.stages {
            assert_quiet(stage);
        }
        eprintln!("start order {start:?}: ok");
    }
}

/// A worker `[retry]` table with short waits, so recoveries are quick in tests.
const FAST_RETRY: &str = "\n[retry]\ninitial_backoff_ms = 200\nmax_backoff_ms = 2000\nbudget_ms = 300000\n";

/// The broker restarts mid-run (SQLite storage, down for `MSSQL_CDC_OUTAGE_SECONDS`, default
/// 30 s) while the workload runs: every stage rides it out on its own (the supervisor retries
/// the transient Kafka failures), none exits, and the end-to-end equalities hold.
#[tokio::test(flavor = "multi_thread")]
async fn the_stages_recover_from_a_broker_restart() {
    let outage = Duration::from_secs(env_u64("MSSQL_CDC_OUTAGE_SECONDS", 30));
    let mut pipeline = Pipeline::start(Setup { worker_extra: FAST_RETRY, ..Setup::default() });
    let workload = pipeline.workload(3000, 50, 5);
    std::thread::sleep(Duration::from_secs(8));
    pipeline.broker.stop();
    eprintln!("broker: stopped for {outage:?}");
    std::thread::sleep(outage);
    for index in [SOURCE, BRONZE, SILVER] {
        pipeline.assert_alive(index);
    }
    pipeline.broker.restart().unwrap();
    eprintln!("broker: restarted on {}", pipeline.broker.bootstrap);
    pipeline.catch_up_and_check(workload, Duration::from_secs(240)).await;
    let retried = pipeline.stages[BRONZE].log().contains("retrying");
    assert!(retried, "bronze retried through the outage:\n{}", pipeline.stages[BRONZE].logs());
}

/// The object store goes away while all three stages run on `s3://` tables: first frozen (the
/// server stopped, connections hang) for `MSSQL_CDC_OUTAGE_SECONDS` (default 20 s), then
/// refusing connections for as long. The sinks ride it out on their own and the end-to-end
/// equalities hold.
#[tokio::test(flavor = "multi_thread")]
async fn the_sinks_recover_from_an_object_store_outage() {
    let outage = Duration::from_secs(env_u64("MSSQL_CDC_OUTAGE_SECONDS", 20));
    let mut pipeline = Pipeline::start(Setup { worker_extra: FAST_RETRY, s3: true, ..Setup::default() });
    let workload = pipeline.workload(3000, 50, 6);
    std::thread::sleep(Duration::from_secs(8));
    {
        let (server, proxy) = pipeline.s3.as_ref().unwrap();
        server.freeze();
        eprintln!("s3: frozen for {outage:?}");
        std::thread::sleep(outage);
        server.thaw();
        proxy.refuse();
        eprintln!("s3: refusing connections for {outage:?}");
        std::thread::sleep(outage);
        proxy.restore();
    }
    for index in [SOURCE, BRONZE, SILVER] {
        pipeline.assert_alive(index);
    }
    pipeline.catch_up_and_check(workload, Duration::from_secs(240)).await;
}

/// A transient failure that outlasts `retry.budget_ms` stops the stage with an error naming
/// the budget and the cause: a bronze sink whose broker never answers exits 1.
#[test]
fn an_exhausted_retry_budget_stops_the_stage_naming_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let worker = support::write_file(
        dir.path(),
        "worker.toml",
        &mssql_cdc_testkit::files::worker_toml(&nowhere.to_string(), "\n[retry]\ninitial_backoff_ms = 100\nmax_backoff_ms = 500\nbudget_ms = 3000\n"),
    );
    let connector = bronze_file_in(dir.path(), &Lake::local(dir.path()), "orders", "nowhere.sales.dbo.orders", BRONZE_APP, "");
    let mut stage = spawn_stage(&worker, &connector, &[]);
    let status = stage.process().wait(Duration::from_secs(120)).unwrap_or_else(|| panic!("the stage did not give up:\n{}", stage.log()));
    assert_eq!(status.code(), Some(1), "{}", stage.log());
    let log = stage.log();
    assert!(log.contains("retry.budget_ms = 3000") && log.contains("Kafka"), "the error names the budget and the cause:\n{log}");
    assert!(log.contains("retrying"), "it retried before giving up:\n{log}");
}

/// Chaos: the same equalities hold when every stage is SIGKILLed many times at random points
/// (each at least 5 times; `MSSQL_CDC_CHAOS_KILLS` in all, default 24) while the workload
/// (`MSSQL_CDC_CHAOS_CHANGES` changes, default 6000) runs, and silver's `finalized_until` and
/// applied position never move back across the kills. Soak with
/// `MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 scripts/test.sh --test pipeline the_pipeline_survives`.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_survives_sigkills_of_every_stage() {
    const MIN_KILLS_PER_STAGE: u32 = 5;
    let kills = env_u64("MSSQL_CDC_CHAOS_KILLS", 24).max(3 * u64::from(MIN_KILLS_PER_STAGE));
    let changes = env_u64("MSSQL_CDC_CHAOS_CHANGES", 6000).max(1);
    // A kill takes about 0.8 s of downtime plus a 1.15 s pause on average (plus a read after a
    // silver kill): pace the workload to last about as long as the kills.
    let kill_seconds = kills as f64 * 2.2;
    let rate = ((changes as f64 / kill_seconds).ceil() as u64).max(1);
    let workload_timeout = Duration::from_secs_f64(kill_seconds * 3.0 + changes as f64 / rate as f64 * 2.0 + 120.0);

    let mut pipeline = Pipeline::start(Setup::default());
    let workload = pipeline.workload(changes, rate, 3);
    eprintln!("chaos: {kills} kills, {changes} changes at {rate}/s");

    let mut rng = rand::rng();
    let mut previous = observe(&pipeline.lake, false);
    let mut done = 0u64;
    let enough = |done: u64, stages: &[StageProcess]| done >= kills && stages.iter().all(|s| s.kills >= MIN_KILLS_PER_STAGE);
    // Rounds over the three stages in a fresh random order each: every stage is killed about
    // equally often, at random moments.
    while !enough(done, &pipeline.stages) {
        let mut order = [SOURCE, BRONZE, SILVER];
        order.shuffle(&mut rng);
        for index in order {
            if enough(done, &pipeline.stages) {
                break;
            }
            pipeline.assert_alive(index);
            pipeline.stages[index].kill();
            done += 1;
            if index == SILVER {
                let now = observe(&pipeline.lake, false);
                assert!(
                    now.finalized_until >= previous.finalized_until,
                    "kill {done}: finalized_until moved back from {:?} to {:?}",
                    previous.finalized_until,
                    now.finalized_until
                );
                assert!(now.applied_batch >= previous.applied_batch, "kill {done}: silver's position moved back from {} to {}", previous.applied_batch, now.applied_batch);
                previous = now;
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(100..1500)));
            pipeline.stages[index].respawn().unwrap();
            std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        }
    }
    eprintln!(
        "chaos: {done} SIGKILLs: {}",
        pipeline.stages.iter().map(|s| format!("{} {}", s.name(), s.kills)).collect::<Vec<_>>().join(", ")
    );

    // No more kills: everything catches up and the equalities hold.
    pipeline.catch_up_and_check(workload, workload_timeout).await;
    let last = observe(&pipeline.lake, false);
    assert!(last.finalized_until >= previous.finalized_until, "finalized_until moved back after the kills");
}
