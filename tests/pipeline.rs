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
//! MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 scripts/test.sh --test e2e pipeline::the_pipeline_survives
//! ```
//!
//! The resilience suite starts the stages together and in reverse order, restarts the broker
//! and takes the object store away while everything runs, and exhausts a retry budget.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

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
pub(crate) const SOURCE: usize = 0;
pub(crate) const BRONZE: usize = 1;
pub(crate) const SILVER: usize = 2;

/// How much of a process's stderr goes into a failure message (the tail).
const LOG_TAIL: usize = 12_000;

/// How long the stages get to catch up once the workload is done.
const CATCH_UP: Duration = Duration::from_secs(180);

/// The longest the sinks may take to drain their backlog while they keep moving, seconds
/// (`MSSQL_CDC_CATCH_UP_MAX_SECONDS` for the full-size runs, whose backlogs are larger).
fn catch_up_max() -> Duration {
    Duration::from_secs(env_u64("MSSQL_CDC_CATCH_UP_MAX_SECONDS", 600))
}

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
    out["events"] = [[r["batch_id"], r["event"], r["rows"]]
                     for r in f if r["app_id"] == app_id and r["event"] not in ("batch", "heartbeat")]
except Exception as e:
    out["batches"] = []
    out["events"] = []
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
        table = DeltaTable(silver)
        if "deletionVectors" in (table.protocol().reader_features or []):
            # pyarrow's dataset cannot apply deletion vectors; deltalake's own engine does.
            from deltalake import QueryBuilder
            out["silver_reader"] = "deletion vectors"
            import pyarrow
            rows = pyarrow.table(QueryBuilder().register("silver", table).execute("SELECT %s FROM silver" % ", ".join(cols)).read_all()).to_pylist()
        else:
            out["silver_reader"] = "pyarrow"
            rows = table.to_pyarrow_table(columns=cols).to_pylist()
        # amount as integer cents: exact, whatever the Decimal's exponent.
        out["rows"] = [[r["order_id"], r["customer_id"], r["status"],
                        None if r["amount"] is None else int(decimal.Decimal(str(r["amount"])).scaleb(2)),
                        r["currency"], r["note"], r["is_priority"]] for r in rows]
    except Exception as e:
        out["rows"] = None
        out["errors"].append("silver: %s" % e)

print(json.dumps(out))
"#;

/// A row of `dbo.orders`: (order_id, customer_id, status, amount in cents, currency, note,
/// is_priority).
pub(crate) type Order = (i64, i64, String, i128, String, Option<String>, bool);

/// A batch-type facts row of the bronze sink: (batch_id, start_lsn, end_lsn, rows).
pub(crate) type FactsBatch = (i64, String, String, i64);

/// What the Python reader saw.
#[derive(Debug)]
pub(crate) struct Observed {
    /// Tables it could not read.
    pub(crate) errors: Vec<String>,
    /// The bronze sink's batch-type facts rows, in the order read.
    pub(crate) batches: Vec<FactsBatch>,
    /// Its event rows: (batch_id, event, rows).
    pub(crate) events: Vec<(i64, String, i64)>,
    /// Bronze's (start_lsn, seqval, operation) (`full` only).
    pub(crate) changes: Vec<Coordinates>,
    /// Silver's control row: the last bronze batch applied (-1 when there is none).
    pub(crate) applied_batch: i64,
    /// Silver's control row: its verdict.
    pub(crate) finalized_until: Option<DateTime<Utc>>,
    /// Silver's rows (`full` only; `None` when unreadable).
    pub(crate) rows: Option<Vec<Order>>,
    /// How silver was read (`full` only): `pyarrow`, or `deletion vectors` (deltalake's
    /// engine, for a table with the `deletionVectors` feature).
    pub(crate) silver_reader: Option<String>,
}

/// The tables [`READ`] reads, and their storage options (JSON).
#[derive(Clone, Debug)]
pub(crate) struct Tables {
    pub(crate) facts: String,
    pub(crate) bronze: String,
    pub(crate) control: String,
    pub(crate) silver: String,
    pub(crate) storage: String,
}

impl Tables {
    /// The tables the suites' connector files write under `lake`.
    fn of(lake: &Lake) -> Self {
        Self { facts: lake.table("facts"), bronze: lake.table("orders-bronze"), control: lake.table("control"), silver: lake.table("silver"), storage: lake.storage_json() }
    }
}

/// Runs [`READ`] on a pipeline's tables.
pub(crate) fn observe(tables: &Tables, full: bool) -> Observed {
    let mode = if full { "full" } else { "progress" };
    let output = run_python(READ, &[&tables.facts, &tables.bronze, &tables.control, &tables.silver, BRONZE_APP, mode, &tables.storage]);
    let value: serde_json::Value = serde_json::from_str(output.trim()).unwrap_or_else(|e| panic!("reader output is JSON ({e}): {output}"));
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("text expected: {v}")).to_owned();
    let int = |v: &serde_json::Value| v.as_i64().unwrap_or_else(|| panic!("an integer expected: {v}"));
    let control = value["control"].as_array().unwrap();
    assert!(control.len() <= 1, "one control row for the one silver table: {control:?}");
    Observed {
        errors: value["errors"].as_array().unwrap().iter().map(text).collect(),
        batches: value["batches"].as_array().unwrap().iter().map(|b| (int(&b[0]), text(&b[1]), text(&b[2]), int(&b[3]))).collect(),
        events: value["events"].as_array().unwrap().iter().map(|e| (int(&e[0]), text(&e[1]), int(&e[2]))).collect(),
        changes: value["changes"].as_array().map(|c| c.iter().map(|c| (text(&c[0]), text(&c[1]), int(&c[2]))).collect()).unwrap_or_default(),
        applied_batch: control.first().and_then(|c| c["applied_batch"].as_i64()).unwrap_or(-1),
        finalized_until: control
            .first()
            .and_then(|c| c["finalized_until"].as_str())
            .map(|t| DateTime::parse_from_rfc3339(t).unwrap_or_else(|e| panic!("finalized_until {t}: {e}")).with_timezone(&Utc)),
        silver_reader: value["silver_reader"].as_str().map(str::to_owned),
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
pub(crate) async fn orders(sim: &SimServer) -> Vec<Order> {
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
/// - bronze holds exactly the changes of `truth` (every change the change table held) that
///   the control records' batches cover, and every snapshot row they announce (operation 0 at
///   the snapshot's LSN): nothing missing, nothing extra, nothing twice;
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

    // Bronze = the change history the batches cover, plus the snapshots' rows.
    let mut expected: Vec<Coordinates> = Vec::new();
    for control in controls {
        // A completion covers its range with the snapshot's rows, not with changes.
        if control.events.iter().any(|e| matches!(e.name(), "bootstrap" | "resnapshot")) {
            continue;
        }
        if let Some(chunk) = control.chunk() {
            // A chunk's rows, stamped with its wave's LSN.
            let w = chunk.stamp.to_string();
            expected.extend(std::iter::repeat_n((w.clone(), w, 0), control.rows as usize));
            continue;
        }
        match control.open_snapshot() {
            Some(snapshot) => {
                let s = snapshot.lsn.to_string();
                expected.extend(std::iter::repeat_n((s.clone(), s, 0), control.rows as usize));
            }
            None => {
                let (from, to) = (control.from_lsn.to_string(), control.to_lsn.to_string());
                expected.extend(truth.iter().filter(|c| c.0 > from && c.0 <= to).cloned());
            }
        }
    }
    assert_same_multiset("bronze (_start_lsn, _seqval, _operation) vs cdc.dbo_orders_CT and the snapshots", &expected, &found.changes);

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
pub(crate) fn assert_quiet(stage: &StageProcess) {
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
    // tiberius warns once per connection made with the suites' `encrypt = "not_supported"`:
    // a chunked snapshot's readers are connections of their own, not a warning per batch.
    let per_connection = "tiberius::client::connection: TLS encryption is not enabled.";
    let repeated: Vec<_> = warnings.iter().filter(|(message, n)| **n > 2 && !message.starts_with(per_connection)).collect();
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
pub(crate) enum Start {
    /// The source, then (once its control topic exists) bronze and silver.
    SourceFirst,
    /// All three at once.
    Together,
    /// Silver, bronze, then the source: the sinks wait for what they follow.
    Reversed,
    /// Bronze and silver only: the test publishes first (`mssql-cdc seed`), then starts the
    /// source with [`Pipeline::start_source`].
    SinksOnly,
}

/// How a [`Pipeline`] is set up.
pub(crate) struct Setup {
    pub(crate) start: Start,
    /// Extra worker lines (a `[retry]` table).
    pub(crate) worker_extra: &'static str,
    /// An S3 server (through a proxy) for the tables, else a local directory.
    pub(crate) s3: bool,
    /// Orders `1..=preloaded` are in `dbo.orders` before CDC is enabled.
    pub(crate) preloaded: u64,
    /// Extra source connector lines (`bootstrap = true`, ...).
    pub(crate) source_extra: &'static str,
    /// Extra bronze connector lines (`max_rows_per_commit = 150`).
    pub(crate) bronze_extra: &'static str,
    /// Extra silver connector lines (`deletion_vectors = true`).
    pub(crate) silver_extra: &'static str,
    /// Run the compose stack's own files (`compose/worker.toml`, `compose/connectors/`)
    /// with this schema registry URL, instead of the suites' generated ones.
    pub(crate) compose: Option<String>,
    /// Avro records, with the schema registry at this URL (the generated files).
    pub(crate) registry: Option<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Self { start: Start::SourceFirst, worker_extra: "", s3: false, preloaded: 0, source_extra: "", bronze_extra: "", silver_extra: "", compose: None, registry: None }
    }
}

/// A pipeline's worker and connector files, the tables its sinks write, and the environment
/// its stages run with.
struct Files {
    source_worker: std::path::PathBuf,
    source: std::path::PathBuf,
    sink_worker: std::path::PathBuf,
    bronze: std::path::PathBuf,
    silver: std::path::PathBuf,
    tables: Tables,
    env: Vec<(String, String)>,
}

/// The compose stack's files with only its services' addresses replaced by this machine's:
/// SQL Server by the simulator, Kafka by the test broker, the schema registry by `registry`,
/// MinIO by the S3 server (through `endpoint`), and the topic prefix made unique.
fn compose_files(dir: &std::path::Path, sim: &SimServer, broker: &TestBroker, registry: &str, endpoint: &str, prefix: &str, storage: &[(&str, String)]) -> Files {
    let compose = support::repo().join("compose");
    let rewrite = |text: String| {
        text.replace("Server=sqlserver,1433", &format!("Server=127.0.0.1,{}", sim.address.port()))
            .replace("\"kafka:9092\"", &format!("\"{}\"", broker.bootstrap))
            .replace("0.0.0.0:9464", "127.0.0.1:0")
            .replace("http://schema-registry:8081", registry)
            .replace("http://minio:9000", endpoint)
            .replace("topic_prefix = \"cdc\"", &format!("topic_prefix = \"{prefix}\""))
            .replace("\"cdc.sales.dbo.orders\"", &format!("\"{prefix}.sales.dbo.orders\""))
    };
    let copy = |from: &str, to: &str| support::write_file(dir, to, &rewrite(std::fs::read_to_string(compose.join(from)).unwrap()));
    let worker = copy("worker.toml", "worker.toml");
    let secret = |key: &str| storage.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).unwrap();
    Files {
        source_worker: worker.clone(),
        source: copy("connectors/source.toml", "source.toml"),
        sink_worker: worker,
        bronze: copy("connectors/bronze.toml", "bronze.toml"),
        silver: copy("connectors/silver.toml", "silver.toml"),
        tables: Tables {
            facts: "s3://lake/ops/facts".into(),
            bronze: "s3://lake/bronze/orders".into(),
            control: "s3://lake/ops/finalization".into(),
            silver: "s3://lake/silver/orders".into(),
            storage: serde_json::Value::Object(storage.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(v.as_str()))).collect()).to_string(),
        },
        env: vec![
            ("MSSQL_SA_PASSWORD".into(), mssql_cdc_sim::client::password_from_env()),
            ("MINIO_ROOT_USER".into(), secret("AWS_ACCESS_KEY_ID")),
            ("MINIO_ROOT_PASSWORD".into(), secret("AWS_SECRET_ACCESS_KEY")),
        ],
    }
}

/// The simulator, the broker and the three stages, with `dbo.orders` set up and CDC on.
pub(crate) struct Pipeline {
    // Declared first so the stage processes go before the broker and the simulator.
    pub(crate) stages: Vec<StageProcess>,
    pub(crate) broker: TestBroker,
    pub(crate) sim: SimServer,
    pub(crate) topic: String,
    /// The S3 server and the proxy in front of it, for the object-store outage.
    s3: Option<(S3Server, Proxy)>,
    /// Each stage's `/metrics`, scraped just before its clean stop.
    pub(crate) scraped: String,
    /// Orders `1..=preloaded` were in the table before CDC.
    pub(crate) preloaded: u64,
    /// The source's worker and connector files (to start it again).
    pub(crate) source_files: (std::path::PathBuf, std::path::PathBuf),
    /// The silver connector file.
    pub(crate) silver_file: std::path::PathBuf,
    /// Change rows CDC cleanup purged, read before the purge: part of the history bronze
    /// must hold.
    pub(crate) purged: Vec<Coordinates>,
    /// LSN ranges `(from, to]` a snapshot's completion moved the position over: their changes
    /// reach the log only as the snapshot's rows, so bronze does not hold them.
    pub(crate) skipped: Vec<(String, String)>,
    /// The tables the reader reads.
    pub(crate) tables: Tables,
    /// The stages' environment.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) dir: tempfile::TempDir,
}

impl Pipeline {
    /// Starts the simulator and the broker, creates `dbo.orders` with CDC (a workload process
    /// with `--setup` and no changes), then starts the stages in the order `setup` says.
    pub(crate) fn start(setup: Setup) -> Self {
        let sim = SimServer::start(&[]).unwrap();
        let broker = TestBroker::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let preloaded = setup.preloaded.to_string();
        let mut init = WorkloadProcess::spawn(sim.address, &dir.path().join("setup.log"), &["--setup", "--changes", "0", "--rate", "0", "--preloaded", &preloaded]).unwrap();
        assert!(init.finish(Duration::from_secs(600)).unwrap().success(), "setup failed:\n{}", init.log());

        let (lake, s3) = if setup.s3 || setup.compose.is_some() {
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
        let files = match (&setup.compose, &s3) {
            (Some(registry), Some((server, proxy))) => compose_files(dir.path(), &sim, &broker, registry, &format!("http://{}", proxy.address), &prefix, &server.options_at(&format!("http://{}", proxy.address))),
            _ => {
                let avro = setup.registry.as_ref().map(|url| format!("format = \"avro\"\nschema_registry = {{ url = \"{url}\" }}\n")).unwrap_or_default();
                let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, &format!("max_commits_per_batch = 50\n{avro}{}", setup.source_extra));
                std::fs::write(&worker, format!("{}{}", std::fs::read_to_string(&worker).unwrap(), setup.worker_extra)).unwrap();
                let sinks = sink_worker(dir.path(), &broker);
                std::fs::write(&sinks, format!("{}{}", std::fs::read_to_string(&sinks).unwrap(), setup.worker_extra)).unwrap();
                let bronze = bronze_file_in(dir.path(), &lake, "orders", &topic, BRONZE_APP, &format!("{avro}{}", setup.bronze_extra));
                let silver = silver_file_in(dir.path(), &lake, 20, setup.silver_extra);
                Files { source_worker: worker, source: connector, sink_worker: sinks, bronze, silver, tables: Tables::of(&lake), env: Vec::new() }
            }
        };
        let source_files = (files.source_worker.clone(), files.source.clone());
        let env: Vec<(&str, &str)> = files.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let spawn = |which: usize| match which {
            SOURCE => spawn_stage(&files.source_worker, &files.source, &env),
            BRONZE => spawn_stage(&files.sink_worker, &files.bronze, &env),
            _ => spawn_stage(&files.sink_worker, &files.silver, &env),
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
            // The source's slot is filled by `start_source`.
            Start::SinksOnly => vec![spawn(BRONZE), spawn(SILVER)],
        };
        let (tables, env) = (files.tables.clone(), files.env.clone());
        Self { stages, broker, sim, topic, s3, scraped: String::new(), preloaded: setup.preloaded, source_files, silver_file: files.silver.clone(), purged: Vec::new(), skipped: Vec::new(), tables, env, dir }
    }

    /// The main workload: `changes` changes at `rate` changes/s, concurrently with the stages.
    pub(crate) fn workload(&self, changes: u64, rate: u64, seed: u64) -> WorkloadProcess {
        self.workload_of(changes, rate, seed, 1..=10)
    }

    /// [`Self::workload`] with transactions of `size` statements (the last one ends at
    /// `changes`).
    pub(crate) fn workload_of(&self, changes: u64, rate: u64, seed: u64, size: std::ops::RangeInclusive<u32>) -> WorkloadProcess {
        let (changes, rate, seed, preloaded) = (changes.to_string(), rate.to_string(), seed.to_string(), self.preloaded.to_string());
        let (min, max) = (size.start().to_string(), size.end().to_string());
        let args = ["--changes", &changes, "--rate", &rate, "--seed", &seed, "--min-transaction-size", &min, "--max-transaction-size", &max, "--preloaded", &preloaded];
        WorkloadProcess::spawn(self.sim.address, &self.dir.path().join("workload.log"), &args).unwrap()
    }

    /// Starts the source again (after [`Self::stop_source`]), or for the first time (after
    /// [`Start::SinksOnly`]: until then, `stages` holds the sinks only).
    pub(crate) fn start_source(&mut self) {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let source = spawn_stage(&self.source_files.0, &self.source_files.1, &env);
        if self.stages.len() == 2 {
            self.stages.insert(SOURCE, source);
        } else {
            self.stages[SOURCE] = source;
        }
    }

    /// Waits for the source to publish everything CDC holds (the capture job harvests every
    /// 100 ms: a second lets it take the last commits first), keeps its `/metrics`, then stops
    /// it cleanly (SIGTERM, exit 0) so no heartbeat moves the end; returns its last control
    /// record.
    pub(crate) async fn stop_source(&mut self) -> ControlRecord {
        // A snapshot still open (a chunked one runs beside the stream) is read to its end first.
        let deadline = Instant::now() + CATCH_UP;
        while controls(&self.broker.bootstrap, &self.topic).last().is_some_and(|c| c.open_snapshot_any().is_some()) {
            self.assert_alive(SOURCE);
            assert!(Instant::now() < deadline, "the source's snapshot did not complete within {CATCH_UP:?}:\n{}", self.stages[SOURCE].logs());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        wait_caught_up(&self.broker.bootstrap, &self.topic, &self.sim.client_config(), &self.stages[SOURCE], CATCH_UP).await;
        self.scraped.push_str(&self.stages[SOURCE].scrape().unwrap_or_default());
        let status = self.stages[SOURCE].stop();
        assert!(status.is_some_and(|s| s.success()), "the source did not exit cleanly on SIGTERM ({status:?}):\n{}", self.stages[SOURCE].logs());
        controls(&self.broker.bootstrap, &self.topic).pop().expect("control records")
    }

    /// Runs CDC cleanup up to the server's maximum LSN, keeping the purged change rows for the
    /// final check.
    pub(crate) async fn purge_change_table(&mut self) {
        let config = self.sim.client_config();
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.purged.extend(truth(&config).await);
        support::source::purge_up_to_max_lsn(&config).await;
    }

    /// Runs `mssql-cdc <args> --worker <source worker> <source connector>` to its end: its exit
    /// code and standard output (panics, with its standard error, if it cannot run).
    pub(crate) fn source_command(&self, args: &[&str]) -> (Option<i32>, String) {
        let (code, stdout, _) = self.source_command_output(args);
        (code, stdout)
    }

    /// [`Self::source_command`] with its standard error too.
    pub(crate) fn source_command_output(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let output = std::process::Command::new(support::bin())
            .args(args)
            .arg("--worker")
            .arg(&self.source_files.0)
            .arg(&self.source_files.1)
            .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
            .env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap_or_else(|error| panic!("running mssql-cdc {args:?}: {error}"));
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        eprintln!("mssql-cdc {args:?}: {:?}\n{}", output.status, tail(&stderr, 3000));
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
    }

    /// Every stage's logs, for failure messages.
    pub(crate) fn logs(&self) -> String {
        self.stages.iter().map(StageProcess::logs).collect::<Vec<_>>().join("\n")
    }

    /// Panics if a stage exited on its own (a stage must keep running).
    pub(crate) fn assert_alive(&mut self, index: usize) {
        if let Err(error) = self.stages[index].process().alive() {
            panic!("the {} stage exited on its own: {error}\n{}", self.stages[index].name(), self.stages[index].logs());
        }
    }

    /// Waits for the workload to finish, for the source to publish everything and stop, and
    /// for bronze and silver to reach the last control record; then runs [`check_equalities`]
    /// on one full read.
    pub(crate) async fn catch_up_and_check(&mut self, mut workload: WorkloadProcess, workload_timeout: Duration) -> (Observed, Vec<ControlRecord>) {
        match workload.finish(workload_timeout) {
            Ok(status) => assert!(status.success(), "the workload failed ({status}):\n{}\n{}", workload.log(), self.logs()),
            Err(error) => panic!("{error}\n{}", self.logs()),
        }
        self.stop_source().await;
        let config = self.sim.client_config();
        let controls = controls(&self.broker.bootstrap, &self.topic);
        let last = controls.last().expect("control records").batch_id as i64;

        // The sinks must keep moving: the wait fails when neither advanced for CATCH_UP (a
        // stall), or after `catch_up_max()` in all. A backlog (after an outage, on a loaded
        // machine with an S3 server in Python) may take longer than one CATCH_UP to drain.
        let started = Instant::now();
        let catch_up_max = catch_up_max();
        let (mut deadline, mut seen) = (Instant::now() + CATCH_UP, (-2, -2));
        loop {
            self.assert_alive(BRONZE);
            self.assert_alive(SILVER);
            let now = observe(&self.tables, false);
            let bronze_at = now.batches.iter().map(|b| b.0).max().unwrap_or(-1);
            if bronze_at >= last && now.applied_batch >= last {
                break;
            }
            if (bronze_at, now.applied_batch) != seen {
                seen = (bronze_at, now.applied_batch);
                deadline = Instant::now() + CATCH_UP;
            }
            assert!(
                Instant::now() < deadline && started.elapsed() < catch_up_max,
                "the sinks did not reach batch {last} (no progress for {CATCH_UP:?}, or over {catch_up_max:?} in all; bronze at {bronze_at}, silver at {}; {:?}):\n{}\n{}",
                now.applied_batch,
                now.errors,
                self.stages[BRONZE].logs(),
                self.stages[SILVER].logs()
            );
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
        eprintln!("pipeline: the sinks reached batch {last} {:.0} s after the source stopped", started.elapsed().as_secs_f64());

        let mut truth = truth(&config).await;
        truth.retain(|change| !self.skipped.iter().any(|(from, to)| change.0.as_str() > from.as_str() && change.0.as_str() <= to.as_str()));
        truth.extend(self.purged.iter().cloned());
        truth.sort();
        truth.dedup();
        let orders = orders(&self.sim).await;
        assert!(!truth.is_empty() && !orders.is_empty(), "the workload made changes");
        let found = observe(&self.tables, true);
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
        (found, controls)
    }
}

/// An unsigned number from the environment, else `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
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
    // the broker process, tests/broker.rs; reconcile's from its command, tests/reconcile.rs).
    let missing: Vec<&str> = mssql_cdc_core::telemetry::metrics::ALL
        .iter()
        .copied()
        .filter(|name| !name.starts_with("mssql_cdc_broker_") && !name.starts_with("mssql_cdc_reconcile_"))
        .filter(|name| sum(&pipeline.scraped, name).or_else(|| sum(&pipeline.scraped, &format!("{name}_count"))).is_none())
        .collect();
    assert!(missing.is_empty(), "declared metrics the stages never exported: {missing:?}\n{}", pipeline.scraped);
    // The Grafana dashboard and the alert rules of compose/ name only exported metrics.
    let unexported: Vec<String> =
        crate::deploy::monitored_metrics().into_iter().filter(|name| sum(&pipeline.scraped, name).or_else(|| sum(&pipeline.scraped, &format!("{name}_count"))).is_none()).collect();
    assert!(unexported.is_empty(), "the dashboard or the alert rules name metrics no stage exports: {unexported:?}");
}

/// The same with `deletion_vectors = true` on silver: rows replaced and deleted by marks in
/// deletion vectors, not by rewriting files; silver (read through its deletion vectors by
/// deltalake's engine) equals the source table, and the vectors were written.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_with_deletion_vectors_in_silver_matches_the_simulator() {
    let mut pipeline = Pipeline::start(Setup { silver_extra: "deletion_vectors = true", ..Setup::default() });
    let workload = pipeline.workload(3000, 300, 2);
    let (found, _) = pipeline.catch_up_and_check(workload, Duration::from_secs(120)).await;
    assert_eq!(found.silver_reader.as_deref(), Some("deletion vectors"), "silver has the deletionVectors feature");
    assert_deletion_vectors_written(&pipeline.tables.silver);
    for stage in &pipeline.stages {
        assert_quiet(stage);
    }
}

/// One source transaction larger than every stage's limit (the source's `fetch_rows`, bronze's
/// `max_rows_per_commit`, silver's `max_rows_per_apply`) stays whole where it must and goes
/// in pieces everywhere else: one batch on the log (batches are commit-aligned), in bronze
/// files of at most the commit limit under the batch's one commit, applied to silver in key
/// slices; the pipeline still ends with silver equal to the table, bronze holding each change
/// once and the facts tiling the log. Transactions of 1,500 changes here; `bench backlog
/// --transaction-size 1000000` passes one of a million and prints each stage's peak memory.
#[tokio::test(flavor = "multi_thread")]
async fn transactions_larger_than_every_stages_limit_pass_in_pieces() {
    const BRONZE_ROWS: u64 = 150;
    const SILVER_ROWS: u64 = 200;
    let setup = Setup { source_extra: "fetch_rows = 100", bronze_extra: "max_rows_per_commit = 150", silver_extra: "max_rows_per_apply = 200", ..Setup::default() };
    let mut pipeline = Pipeline::start(setup);
    let workload = pipeline.workload_of(4500, 0, 23, 1500..=1500);
    let (_, controls) = pipeline.catch_up_and_check(workload, Duration::from_secs(300)).await;
    let large: Vec<&ControlRecord> = controls.iter().filter(|c| c.rows >= 1500).collect();
    assert!(!large.is_empty(), "a batch holds a whole transaction: {:?}", controls.iter().map(|c| c.rows).collect::<Vec<_>>());

    let bronze = support::delta_commits(std::path::Path::new(&pipeline.tables.bronze));
    let silver = support::delta_commits(std::path::Path::new(&pipeline.tables.silver));
    let info = |actions: &[serde_json::Value]| actions.iter().find_map(|a| a.get("commitInfo").cloned()).unwrap_or_default();
    for batch in large {
        // Bronze: the commit holding the batch (its first..=last batch ids cover it) added files
        // of at most BRONZE_ROWS rows each, as many as the batch needs at least.
        let commit = bronze
            .iter()
            .find(|actions| {
                let info = info(actions);
                info["mssql_cdc.first_batch_id"].as_u64().is_some_and(|first| first <= batch.batch_id) && info["mssql_cdc.batch_id"].as_u64().is_some_and(|last| last >= batch.batch_id)
            })
            .unwrap_or_else(|| panic!("no bronze commit holds batch {}", batch.batch_id));
        let rows: Vec<u64> = commit.iter().filter_map(|a| a["add"]["stats"].as_str()).map(|stats| serde_json::from_str::<serde_json::Value>(stats).unwrap()["numRecords"].as_u64().unwrap()).collect();
        assert!(rows.iter().all(|n| *n <= BRONZE_ROWS) && rows.len() as u64 >= batch.rows.div_ceil(BRONZE_ROWS), "batch {} ({} rows) in bronze files of at most {BRONZE_ROWS} rows: {rows:?}", batch.batch_id, batch.rows);
        // Silver: the batch (a step of its own: it passes the row limit alone) went in slices
        // "k of n", of about SILVER_ROWS rows each (a key is never split, so repeated keys
        // make slices larger: at most twice here), every one of them committed.
        let slices: Vec<String> = silver.iter().map(|actions| info(actions)).filter(|info| info["mssql_cdc.batch_id"].as_u64() == Some(batch.batch_id)).filter_map(|info| info["mssql_cdc.slice"].as_str().map(str::to_owned)).collect();
        let count: u64 = slices.first().and_then(|s| s.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("batch {} ({} rows) was applied to silver without slices", batch.batch_id, batch.rows));
        assert!(count * SILVER_ROWS * 2 >= batch.rows, "batch {} ({} rows) in slices of at most {} rows: {slices:?}", batch.batch_id, batch.rows, SILVER_ROWS * 2);
        for index in 1..=count {
            assert!(slices.contains(&format!("{index} of {count}")), "slice {index} of {count} committed: {slices:?}");
        }
    }
    for stage in &pipeline.stages {
        assert_quiet(stage);
    }
}

/// Some `deletion_vector_*.bin` file is in the (local) silver table's folder.
fn assert_deletion_vectors_written(silver: &str) {
    let files: Vec<String> = std::fs::read_dir(silver).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().any(|f| f.starts_with("deletion_vector_") && f.ends_with(".bin")), "no deletion vector file in {silver}: {files:?}");
}

/// Bootstrap: a table holding rows from before CDC was enabled, changed by a workload while
/// the snapshot reads it (inserts, updates, deletes, and key moves ahead of and behind the
/// reader), ends with silver equal to the table over TDS, bronze holding each snapshot row
/// once and every change after the snapshot's LSN exactly once, and facts recording the
/// `snapshot_open` and the `bootstrap`. 20,000 rows here; `MSSQL_CDC_SNAPSHOT_ROWS=200000` for
/// the issue's size.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_with_rows_from_before_cdc_bootstraps_into_silver() {
    let rows = env_u64("MSSQL_CDC_SNAPSHOT_ROWS", 20_000);
    let mut pipeline = Pipeline::start(Setup { preloaded: rows, source_extra: "bootstrap = true\nsnapshot_fetch_rows = 1000", ..Setup::default() });
    let workload = pipeline.workload(4000, 1000, 11);
    let (found, controls) = pipeline.catch_up_and_check(workload, Duration::from_secs(300)).await;
    let opened: Vec<_> = controls.iter().filter(|c| c.events.iter().any(|e| e.name() == "snapshot_open")).collect();
    assert_eq!(opened.len(), 1, "one snapshot opened");
    let completed = controls.iter().position(|c| c.events.iter().any(|e| e.name() == "bootstrap")).expect("the bootstrap completed");
    let snapshot = controls[completed].snapshot.clone().expect("the completion carries the snapshot");
    assert!(snapshot.complete && snapshot.generation == 0);
    assert_eq!(controls[completed].to_lsn, snapshot.lsn, "the completion moves the position to S");
    assert!(controls[completed + 1..].iter().all(|c| c.from_lsn >= snapshot.lsn), "the stream goes on after S");
    let snapshot_rows: u64 = controls.iter().filter(|c| c.open_snapshot().is_some()).map(|c| c.rows).sum();
    assert_eq!(snapshot.rows_done, snapshot_rows);
    assert!(snapshot_rows >= rows * 9 / 10, "the snapshot read the table ({snapshot_rows} of about {rows} rows)");
    let mut events = found.events.clone();
    events.sort();
    let events: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(events, vec!["snapshot_open", "bootstrap"], "facts record the snapshot's opening and completion");
    let bootstrap = found.events.iter().find(|e| e.1 == "bootstrap").unwrap();
    assert_eq!(bootstrap.2, snapshot_rows as i64, "the bootstrap facts row counts the snapshot's rows");
    for stage in &pipeline.stages {
        assert_quiet(stage);
    }
}

/// Data loss with `on_data_loss = "resnapshot"`: while the source is stopped, changes (deletes
/// among them) are made and CDC cleanup purges them. The restarted source takes generation 1
/// by a re-snapshot recording the lost range, and silver again equals the table over TDS,
/// without the rows deleted inside the lost range; bronze keeps both generations. A second loss
/// within `resnapshot_interval_days` stops the source with an error naming both.
#[tokio::test(flavor = "multi_thread")]
async fn data_loss_is_repaired_by_a_resnapshot_in_a_new_generation() {
    let mut pipeline = Pipeline::start(Setup { preloaded: 3000, source_extra: "on_data_loss = \"resnapshot\"\nsnapshot_fetch_rows = 700", ..Setup::default() });
    let config = pipeline.sim.client_config();
    // Generation 0 streams the changes of a first workload.
    let mut first = pipeline.workload(1500, 1500, 21);
    assert!(first.finish(Duration::from_secs(120)).unwrap().success(), "{}", first.log());
    let before = pipeline.stop_source().await;
    assert_eq!(before.generation, 0);

    // While it is stopped: deletes, updates and inserts, then a purge of all of them.
    let statements = [
        "DELETE FROM dbo.orders WHERE order_id BETWEEN 1000 AND 1199",
        "UPDATE dbo.orders SET status = N'lost', amount = 1.23 WHERE order_id BETWEEN 2000 AND 2099",
        "INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, note, created_at, is_priority) VALUES (900001, 1, N'new', 9.99, 'EUR', NULL, SYSDATETIME(), 0), (900002, 2, N'new', 8.88, 'USD', N'x', SYSDATETIME(), 1)",
    ];
    for sql in statements {
        support::source::exec(&config, sql).await;
    }
    pipeline.purge_change_table().await;

    // The restart re-snapshots as generation 1; changes after its LSN follow.
    pipeline.start_source();
    tokio::time::sleep(Duration::from_secs(2)).await;
    support::source::exec(&config, "UPDATE dbo.orders SET status = N'after' WHERE order_id BETWEEN 10 AND 19; DELETE FROM dbo.orders WHERE order_id BETWEEN 20 AND 29").await;
    let done = pipeline.workload(0, 0, 23);
    let (found, controls) = pipeline.catch_up_and_check(done, Duration::from_secs(60)).await;
    let resnapshot = controls.iter().find(|c| c.events.iter().any(|e| e.name() == "resnapshot")).expect("a resnapshot completed");
    let snapshot = resnapshot.snapshot.clone().unwrap();
    assert_eq!((snapshot.generation, resnapshot.generation), (1, 1), "the re-snapshot starts generation 1");
    let lost = snapshot.lost.clone().expect("the re-snapshot records the lost range");
    assert_eq!(lost.from_lsn, before.to_lsn.increment(), "the lost range starts after the last batch read");
    assert!(lost.from_ts.is_some() && lost.to_ts.is_some(), "the lost range has commit times: {lost:?}");
    assert!(found.events.iter().any(|e| e.1 == "resnapshot"), "facts record the re-snapshot: {:?}", found.events);

    // A second loss within resnapshot_interval_days stops the source, naming both.
    support::source::exec(&config, "DELETE FROM dbo.orders WHERE order_id BETWEEN 30 AND 39").await;
    pipeline.purge_change_table().await;
    pipeline.start_source();
    let status = pipeline.stages[SOURCE].process().wait(Duration::from_secs(60)).expect("the source stops on a second loss");
    assert_eq!(status.code(), Some(1));
    let log = pipeline.stages[SOURCE].log();
    assert!(log.contains("again") && log.contains(&snapshot.lsn.to_string()) && log.contains("generation 1"), "the error names the loss and the re-snapshot before it:\n{log}");
}

/// `mssql-cdc snapshot` and `mssql-cdc status` on a stopped stream. A stream that started
/// without a bootstrap (silver lacks the rows from before CDC) takes one with the command: the
/// JSON offset names generation 0, the completed bootstrap and every row of the table; a
/// second run takes none. After changes made while stopped, `--resnapshot` takes generation
/// 1. `status` shows position, generation and snapshot. Restarted, the stream goes on after
/// S, and silver equals the table over TDS; bronze holds every change except those the
/// snapshots' completions moved the position over (they reach the log as snapshot rows).
#[tokio::test(flavor = "multi_thread")]
async fn the_snapshot_command_bootstraps_and_resnapshots_a_stopped_stream() {
    let mut pipeline = Pipeline::start(Setup { preloaded: 2500, source_extra: "snapshot_fetch_rows = 400", ..Setup::default() });
    let config = pipeline.sim.client_config();
    let mut first = pipeline.workload(600, 600, 31);
    assert!(first.finish(Duration::from_secs(120)).unwrap().success(), "{}", first.log());
    let before = pipeline.stop_source().await;
    assert!(before.snapshot.is_none(), "the stream started without a snapshot");

    let (code, out) = pipeline.source_command(&["status", "--json"]);
    assert_eq!(code, Some(0));
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(status["stream"]["position"], before.to_lsn.to_string());
    assert_eq!(status["stream"]["generation"], 0);
    assert!(status["stream"]["snapshot"].is_null());

    async fn count(config: &mssql_cdc_sim::client::ClientConfig) -> u64 {
        query_rows(config, "SELECT COUNT_BIG(*) FROM dbo.orders").await[0].get::<i64, _>(0).unwrap() as u64
    }
    let (code, out) = pipeline.source_command(&["snapshot"]);
    assert_eq!(code, Some(0), "{out}");
    let offset: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let snapshot = &offset["snapshot"];
    assert_eq!((snapshot["kind"].as_str(), snapshot["generation"].as_u64(), snapshot["complete"].as_bool()), (Some("bootstrap"), Some(0), Some(true)), "{offset}");
    assert_eq!(snapshot["rows_done"].as_u64(), Some(count(&config).await), "the bootstrap read every row");
    assert_eq!(offset["position"], snapshot["lsn"], "the offset is at S");
    pipeline.skipped.push((before.to_lsn.to_string(), offset["position"].as_str().unwrap().to_owned()));
    let (code, again) = pipeline.source_command(&["snapshot"]);
    assert_eq!(code, Some(0));
    let again: serde_json::Value = serde_json::from_str(again.trim()).unwrap();
    assert_eq!(again["batch_id"], offset["batch_id"], "a stream that has its bootstrap takes none again");

    for sql in ["DELETE FROM dbo.orders WHERE order_id BETWEEN 100 AND 180", "UPDATE dbo.orders SET status = N'stopped' WHERE order_id BETWEEN 200 AND 260"] {
        support::source::exec(&config, sql).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, out) = pipeline.source_command(&["snapshot", "--resnapshot"]);
    assert_eq!(code, Some(0), "{out}");
    let resnapshot: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((resnapshot["generation"].as_u64(), resnapshot["snapshot"]["kind"].as_str()), (Some(1), Some("resnapshot")), "{resnapshot}");
    assert_eq!(resnapshot["snapshot"]["rows_done"].as_u64(), Some(count(&config).await));
    pipeline.skipped.push((offset["position"].as_str().unwrap().to_owned(), resnapshot["position"].as_str().unwrap().to_owned()));
    let (code, shown) = pipeline.source_command(&["status"]);
    assert_eq!(code, Some(0));
    assert!(shown.contains("generation       1") && shown.contains("resnapshot at") && shown.contains("complete"), "{shown}");

    pipeline.start_source();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = "UPDATE dbo.orders SET status = N'after' WHERE order_id BETWEEN 300 AND 340; DELETE FROM dbo.orders WHERE order_id BETWEEN 400 AND 420; \
                 INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, note, created_at, is_priority) VALUES (800001, 1, N'new', 5.55, 'EUR', NULL, SYSDATETIME(), 0)";
    support::source::exec(&config, after).await;
    // The workload's process only waits here (it made its changes before the snapshots).
    let workload = pipeline.workload(0, 0, 33);
    let (found, controls) = pipeline.catch_up_and_check(workload, Duration::from_secs(120)).await;
    let mut events: Vec<&str> = found.events.iter().map(|e| e.1.as_str()).collect();
    events.sort_unstable();
    assert_eq!(events, vec!["bootstrap", "resnapshot", "snapshot_open", "snapshot_open"], "facts record both snapshots");
    assert_eq!(controls.last().unwrap().generation, 1);
}

/// The compose stack's own connector files (`compose/worker.toml` and
/// `compose/connectors/*.toml`: Avro records with a schema registry, a bootstrap snapshot,
/// tables on `s3://lake`) run as the three stages with only the services' addresses
/// rewritten: the simulator for SQL Server, the test broker for Kafka, a test registry, an
/// S3 server for MinIO. Silver ends equal to the table, the rows from before CDC included.
#[tokio::test(flavor = "multi_thread")]
async fn the_compose_stacks_connector_files_run_against_local_services() {
    let registry = support::registry::TestRegistry::start().await;
    let mut pipeline = Pipeline::start(Setup { compose: Some(registry.url.clone()), preloaded: 1000, ..Setup::default() });
    let workload = pipeline.workload(1500, 500, 51);
    let (found, _) = pipeline.catch_up_and_check(workload, Duration::from_secs(180)).await;
    assert!(found.events.iter().any(|e| e.1 == "bootstrap"), "the compose source bootstraps: {:?}", found.events);
    assert!(registry.subjects().iter().any(|s| s.ends_with(".sales.dbo.orders-value")), "Avro schemas in the registry: {:?}", registry.subjects());
}

/// A table without a unique index: the source streams it (records with the empty key) and
/// snapshots it in order of `snapshot_keys` (here a column whose values repeat about 70 times,
/// against reads of 64 rows: no value is split between reads); bronze keeps every change;
/// silver refuses to run without `keys`, naming the option, and with `keys` equals the table
/// over TDS, also after one UPDATE moving keys over each other.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_without_a_unique_index_streams_and_snapshots_by_snapshot_keys() {
    let sim = SimServer::start(&[]).unwrap();
    let broker = TestBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = sim.client_config();
    support::source::exec(&config, "CREATE TABLE dbo.orders (order_id bigint NOT NULL, status nvarchar(16) NOT NULL, amount int NULL)").await;
    for chunk in 0..5 {
        let values: Vec<String> = (chunk * 100 + 1..=chunk * 100 + 100).map(|id| format!("({id}, N'new', {})", id % 7)).collect();
        support::source::exec(&config, &format!("INSERT INTO dbo.orders VALUES {}", values.join(", "))).await;
    }
    support::source::exec(&config, "EXEC sys.sp_cdc_enable_db").await;
    support::source::exec(&config, "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @supports_net_changes = 0").await;

    let lake = Lake::local(dir.path());
    let prefix = unique("heap");
    let topic = format!("{prefix}.sales.dbo.orders");
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "bootstrap = true\nsnapshot_keys = [\"amount\"]\nsnapshot_fetch_rows = 64");
    let mut source = spawn_stage(&worker, &connector, &[]);
    mssql_cdc_testkit::kafka::wait_for_topic(&broker.kafka(), &format!("{topic}.control"), Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}:\n{}", source.logs()));
    for sql in [
        "UPDATE dbo.orders SET status = N'paid', amount = 70 WHERE order_id BETWEEN 10 AND 40",
        "DELETE FROM dbo.orders WHERE order_id BETWEEN 300 AND 330",
        "INSERT INTO dbo.orders VALUES (1000, N'late', 1), (1001, N'late', NULL)",
        "UPDATE dbo.orders SET order_id = 2000 WHERE order_id = 5",
        // One statement moving keys over each other (51 and 52 are both old and new keys).
        "DELETE FROM dbo.orders WHERE order_id = 53",
        "UPDATE dbo.orders SET order_id = order_id + 1 WHERE order_id BETWEEN 50 AND 52",
    ] {
        support::source::exec(&config, sql).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_caught_up(&broker.bootstrap, &topic, &config, &source, CATCH_UP).await;
    assert!(source.stop().is_some_and(|s| s.success()), "{}", source.logs());
    let controls = controls(&broker.bootstrap, &topic);
    assert!(controls.iter().all(|c| c.schema.key.is_empty()), "the feed has no key");
    assert!(controls.iter().any(|c| c.events.iter().any(|e| e.name() == "bootstrap")), "the snapshot completed");
    let records = support::source::read_all(&broker.bootstrap, &topic);
    assert!(records.iter().all(|r| r.key == b"{}"), "records carry the empty key");

    let sinks = sink_worker(dir.path(), &broker);
    let bronze = bronze_file_in(dir.path(), &lake, "orders", &topic, BRONZE_APP, "");
    let mut bronze_stage = spawn_stage(&sinks, &bronze, &[]);
    // Without `keys`, silver stops and says what to set.
    let keyless = support::write_file(dir.path(), "keyless.toml", &mssql_cdc_testkit::files::silver_toml("orders-silver", "orders-bronze", "orders-silver-v1", &lake, ""));
    let last = controls.last().unwrap().batch_id as i64;
    let deadline = Instant::now() + CATCH_UP;
    while observe(&Tables::of(&lake), false).batches.iter().map(|b| b.0).max().unwrap_or(-1) < last {
        assert!(Instant::now() < deadline, "bronze did not catch up:\n{}", bronze_stage.logs());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let refused = std::process::Command::new(support::bin()).arg("apply").arg(&keyless).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("set `keys`"), "silver names the missing keys: {stderr}");
    let with_keys = support::write_file(dir.path(), "keyed.toml", &mssql_cdc_testkit::files::silver_toml("orders-silver", "orders-bronze", "orders-silver-v1", &lake, "keys = [\"order_id\"]"));
    let applied = std::process::Command::new(support::bin()).arg("apply").arg(&with_keys).output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    bronze_stage.stop();

    let script = r#"
import sys, json
from deltalake import DeltaTable
rows = DeltaTable(sys.argv[1]).to_pyarrow_table(columns=["order_id", "status", "amount"]).to_pylist()
print(json.dumps(sorted([[r["order_id"], r["status"], r["amount"]] for r in rows], key=lambda r: r[0])))
"#;
    let silver: Vec<(i64, String, Option<i64>)> = serde_json::from_str(run_python(script, &[&lake.table("silver")]).trim()).unwrap();
    let mut table: Vec<(i64, String, Option<i64>)> = query_rows(&config, "SELECT order_id, status, amount FROM dbo.orders")
        .await
        .iter()
        .map(|r| (r.get::<i64, _>(0).unwrap(), r.get::<&str, _>(1).unwrap().to_owned(), r.get::<i32, _>(2).map(i64::from)))
        .collect();
    table.sort();
    assert_eq!(silver, table, "silver with keys = [order_id] equals the table");
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
/// `MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 scripts/test.sh --test e2e pipeline::the_pipeline_survives`.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_survives_sigkills_of_every_stage() {
    let kills = env_u64("MSSQL_CDC_CHAOS_KILLS", 24);
    let changes = env_u64("MSSQL_CDC_CHAOS_CHANGES", 6000);
    chaos(Setup::default(), kills, changes, 5).await;
}

/// The chaos run with `deletion_vectors = true` on silver (`MSSQL_CDC_CHAOS_DV_KILLS`,
/// default 12): kills between a deletion vector file's write and its commit leave silver
/// equal to the source table.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_with_deletion_vectors_survives_sigkills_of_every_stage() {
    let kills = env_u64("MSSQL_CDC_CHAOS_DV_KILLS", 12);
    let (found, _) = chaos(Setup { silver_extra: "deletion_vectors = true", ..Setup::default() }, kills, 3000, 3).await;
    assert_eq!(found.silver_reader.as_deref(), Some("deletion vectors"));
}

/// Chaos during a bootstrap: the table holds rows from before CDC (20,000 here,
/// `MSSQL_CDC_CHAOS_SNAPSHOT_ROWS` to change it) read 200 at a time, so the first kills land
/// while the snapshot is open. Nothing is lost or duplicated in bronze or silver, and the
/// verdict never moves back (`MSSQL_CDC_CHAOS_SNAPSHOT_KILLS`, default 12).
#[tokio::test(flavor = "multi_thread")]
async fn sigkills_during_a_bootstrap_lose_and_duplicate_nothing() {
    let rows = env_u64("MSSQL_CDC_CHAOS_SNAPSHOT_ROWS", 20_000);
    let kills = env_u64("MSSQL_CDC_CHAOS_SNAPSHOT_KILLS", 12);
    let setup = Setup { preloaded: rows, source_extra: "bootstrap = true\nsnapshot_fetch_rows = 200", ..Setup::default() };
    let (_, controls) = chaos(setup, kills, 2000, 3).await;
    assert!(controls.iter().any(|c| c.events.iter().any(|e| e.name() == "bootstrap")), "the bootstrap completed");
    assert_eq!(controls.iter().filter(|c| c.events.iter().any(|e| e.name() == "snapshot_open")).count(), 1, "the snapshot opened once across the kills");
}

/// The chaos run: `kills` SIGKILLs (each stage at least `min_per_stage`) at random moments while
/// `changes` changes run; silver's verdict and position never move back across the kills, and
/// the end-to-end equalities hold at the end.
async fn chaos(setup: Setup, kills: u64, changes: u64, min_per_stage: u32) -> (Observed, Vec<ControlRecord>) {
    let kills = kills.max(3 * u64::from(min_per_stage));
    let changes = changes.max(1);
    // A kill takes about 0.8 s of downtime plus a 1.15 s pause on average (plus a read after a
    // silver kill): pace the workload to last about as long as the kills.
    let kill_seconds = kills as f64 * 2.2;
    let rate = ((changes as f64 / kill_seconds).ceil() as u64).max(1);
    let workload_timeout = Duration::from_secs_f64(kill_seconds * 3.0 + changes as f64 / rate as f64 * 2.0 + 120.0);

    let mut pipeline = Pipeline::start(setup);
    let workload = pipeline.workload(changes, rate, 3);
    eprintln!("chaos: {kills} kills, {changes} changes at {rate}/s");

    let mut rng = rand::rng();
    let mut previous = observe(&pipeline.tables, false);
    let mut done = 0u64;
    let enough = |done: u64, stages: &[StageProcess]| done >= kills && stages.iter().all(|s| s.kills >= min_per_stage);
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
                let now = observe(&pipeline.tables, false);
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
    let checked = pipeline.catch_up_and_check(workload, workload_timeout).await;
    let last = observe(&pipeline.tables, false);
    assert!(last.finalized_until >= previous.finalized_until, "finalized_until moved back after the kills");
    checked
}
