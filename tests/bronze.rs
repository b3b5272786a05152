//! The `delta-bronze` sink end to end: a feed published by the real source (simulator over
//! TDS, broker process), then damaged the ways a log gets damaged (duplicated data records,
//! orphans, a control record delivered twice, a poison record), the sink as a `mssql-cdc run`
//! process killed at random points, and the tables checked by an independent reader (Python
//! `deltalake`).
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use mssql_cdc_core::log::control::PartitionRange;
use rand::Rng;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::source::{controls, read_all, source_files, truth, wait_caught_up, Coordinates};
use support::pipeline::{bronze_file, feed, setup_and_load, sink_worker};
use support::{delta_commits, run_python, spawn_stage, unique, write_file, BrokerSpec, SimServer, StageProcess, TestBroker};
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_lake::bronze::feed::Feed;

/// Counts bronze rows per change and facts rows per batch of one app_id, as JSON.
const CHECK: &str = r#"
import sys, json
from deltalake import DeltaTable
bronze, facts, app_id, storage = sys.argv[1:5]
so = json.loads(storage)
out = {}
try:
    f = DeltaTable(facts, storage_options=so).to_pyarrow_table().to_pylist()
    mine = [r for r in f if r["app_id"] == app_id]
    out["batches"] = sorted(r["batch_id"] for r in mine if r["event"] in ("batch", "heartbeat"))
    out["events"] = sorted([r["batch_id"], r["event"]] for r in mine if r["event"] not in ("batch", "heartbeat"))
    out["dead_lettered"] = sum(r["dead_lettered"] for r in mine if r["event"] in ("batch", "heartbeat"))
except Exception as e:
    out["batches"] = []
    out["facts_error"] = str(e)
# Bronze after facts: the sink commits a batch's data before its facts row, so a facts row
# read first has its data in the bronze read that follows.
try:
    t = DeltaTable(bronze, storage_options=so).to_pyarrow_table(columns=["_start_lsn", "_seqval", "_operation", "_batch_id"]).to_pylist()
    out["changes"] = sorted([r["_start_lsn"], r["_seqval"], r["_operation"]] for r in t)
except Exception as e:
    out["changes"] = []
    out["bronze_error"] = str(e)
print(json.dumps(out))
"#;

struct Check {
    /// What the reader could not read (a table missing, say).
    errors: Vec<String>,
    changes: Vec<Coordinates>,
    batches: Vec<u64>,
    dead_lettered: u64,
}

/// Where a sink's tables are, and the object-store options to read them (JSON).
struct Tables {
    bronze: String,
    facts: String,
    storage: String,
}

impl Tables {
    /// The tables [`bronze_file`] names: `<dir>/<name>-bronze` and `<dir>/facts`.
    fn local(dir: &Path, name: &str) -> Self {
        Self { bronze: dir.join(format!("{name}-bronze")).display().to_string(), facts: dir.join("facts").display().to_string(), storage: "{}".into() }
    }
}

fn check(tables: &Tables, app_id: &str) -> Check {
    let output = run_python(CHECK, &[&tables.bronze, &tables.facts, app_id, &tables.storage]);
    let value: serde_json::Value = serde_json::from_str(output.trim()).unwrap();
    Check {
        errors: ["bronze_error", "facts_error"].iter().filter_map(|k| value[k].as_str().map(|e| format!("{k}: {e}"))).collect(),
        changes: value["changes"].as_array().unwrap().iter().map(|c| (c[0].as_str().unwrap().to_owned(), c[1].as_str().unwrap().to_owned(), c[2].as_i64().unwrap())).collect(),
        batches: value["batches"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect(),
        dead_lettered: value["dead_lettered"].as_u64().unwrap_or(0),
    }
}

/// Invariant: bronze reads every record a control record names, also when the range starts
/// inside a record batch the broker stores whole. Kafka answers a fetch there with the whole
/// batch; tansu's memory storage (what `bench` runs on) answers with the batches that start at
/// or after the offset, and before the read stepped back it waited 60 s and stopped with
/// "records named by a control record are missing".
#[tokio::test(flavor = "multi_thread")]
async fn a_range_starting_inside_a_stored_batch_is_read_whole() {
    let broker = TestBroker::spawn(BrokerSpec { memory: true, ..BrokerSpec::default() }).unwrap();
    let topic = unique("mid-batch");
    support::create_topic(&broker.kafka(), &topic, 1).await;
    support::produce_one_batch(&broker.bootstrap, &topic, 40);
    let feed = Feed::new(&broker.kafka(), &Properties::default(), &unique("reader"), &topic, &format!("{topic}.control"), None).unwrap();
    let started = Instant::now();
    let records = feed.read_ranges(&[PartitionRange { partition: 0, first_offset: 25, last_offset: 39, records: 15 }]).await.unwrap();
    let got: Vec<(i64, String)> = records.iter().map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned())).collect();
    assert_eq!(got, (25..40).map(|i| (i, format!("record {i}"))).collect::<Vec<_>>(), "exactly the named records, in order");
    assert!(started.elapsed() < Duration::from_secs(30), "the read stepped back instead of waiting for its timeout: {:?}", started.elapsed());
}

fn producer(bootstrap: &str) -> BaseProducer {
    rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap()
}

/// Waits until the facts table holds a row for `last_batch` of `app_id`.
fn wait_for_batch(tables: &Tables, app_id: &str, last_batch: u64, process: &StageProcess, timeout: Duration) -> Check {
    let deadline = Instant::now() + timeout;
    loop {
        let found = check(tables, app_id);
        if found.errors.is_empty() && found.batches.last().is_some_and(|b| *b >= last_batch) {
            return found;
        }
        assert!(Instant::now() < deadline, "sink did not reach batch {last_batch} ({:?}); stderr:\n{}", found.errors, process.log());
        std::thread::sleep(Duration::from_millis(1000));
    }
}

/// Invariant 3: exactly once into bronze and facts, without broker transactions. The feed holds
/// duplicated data records, orphans no control record names and a control record delivered
/// twice; the sink is SIGKILLed at random points and aborted between a data commit and its
/// facts commit. Bronze holds each change once and facts one row per batch.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "fault-injection"), ignore = "its fault point needs a build with --features fault-injection (scripts/test.sh)")]
async fn exactly_once_under_duplicates_orphans_and_kills() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 1500).await;
    // Damage the log: every 7th data record again (duplicates no control record names), and
    // the last control record once more.
    let producer = producer(&broker.bootstrap);
    let data = read_all(&broker.bootstrap, &topic);
    for record in data.iter().step_by(7) {
        producer.send(BaseRecord::to(&topic).key(&record.key).payload(&record.value).partition(record.partition)).unwrap();
    }
    let last = records.last().unwrap();
    producer.send(BaseRecord::<(), _>::to(&format!("{topic}.control")).payload(&serde_json::to_vec(last).unwrap())).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();

    let worker = sink_worker(dir.path(), &broker);
    let connector = bronze_file(dir.path(), "orders-bronze", &topic, "orders-bronze-v1", "");
    // A deterministic crash between a data commit and its facts commit.
    let mut crashing = spawn_stage(&worker, &connector, &[("MSSQL_CDC_FAULT_ABORT_AFTER_DATA_COMMIT", "3")]);
    let status = crashing.process().wait(Duration::from_secs(120)).expect("the sink aborts at the fault point");
    assert!(!status.success());
    let mut rng = rand::rng();
    for _ in 0..6 {
        let mut sink = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(500..2500)));
        sink.kill();
    }
    let sink = spawn_stage(&worker, &connector, &[]);
    let found = wait_for_batch(&Tables::local(dir.path(), "orders-bronze"), "orders-bronze-v1", last.batch_id, &sink, Duration::from_secs(180));
    drop(sink);
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert_eq!(found.changes.len(), expected.len(), "bronze row count equals the change table's");
    assert!(found.changes == expected, "bronze holds each change exactly once");
    let ids: Vec<u64> = (0..=last.batch_id).collect();
    assert_eq!(found.batches, ids, "one facts row per batch");
}

/// The data commits in a table's Delta log (its JSON commits, read directly): for each commit
/// with files, its `txn` version and its `mssql_cdc.first_batch_id` / `mssql_cdc.batch_id`.
fn data_commits(table: &Path) -> Vec<(i64, u64, u64)> {
    let mut commits = Vec::new();
    for actions in delta_commits(table) {
        let txn = actions.iter().find_map(|a| a["txn"]["version"].as_i64());
        let info = actions.iter().find(|a| a.get("commitInfo").is_some()).map(|a| a["commitInfo"].clone()).unwrap_or_default();
        if let (Some(txn), true) = (txn, actions.iter().any(|a| a.get("add").is_some())) {
            commits.push((txn, info["mssql_cdc.first_batch_id"].as_u64().unwrap(), info["mssql_cdc.batch_id"].as_u64().unwrap()));
        }
    }
    commits
}

/// The files each data commit of a table's Delta log adds, by its `txn` version.
fn files_per_commit(table: &Path) -> Vec<(i64, usize)> {
    delta_commits(table)
        .iter()
        .filter_map(|actions| {
            let adds = actions.iter().filter(|a| a.get("add").is_some()).count();
            actions.iter().find_map(|a| a["txn"]["version"].as_i64()).filter(|_| adds > 0).map(|txn| (txn, adds))
        })
        .collect()
}

/// A batch larger than `max_rows_per_commit` is never held whole: its records are read,
/// decoded and written in chunks of that many, a Parquet file each, and committed in one
/// commit with the batch's `txn` version. Through duplicated records and SIGKILLs at random
/// points (files written but not committed are left out), bronze holds each change once and
/// facts one row per batch.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_over_the_commit_limit_streams_into_files_committed_once() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 1500).await;
    let producer = producer(&broker.bootstrap);
    for record in read_all(&broker.bootstrap, &topic).iter().step_by(5) {
        producer.send(BaseRecord::to(&topic).key(&record.key).payload(&record.value).partition(record.partition)).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let large = records.iter().filter(|c| c.rows > 7).count();
    assert!(large >= 5, "batches over the limit: {large}");
    let last = records.last().unwrap();
    let worker = sink_worker(dir.path(), &broker);
    let connector = bronze_file(dir.path(), "orders-bronze", &topic, "orders-bronze-v1", "max_rows_per_commit = 7");
    let mut rng = rand::rng();
    for _ in 0..4 {
        let mut sink = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(800..3000)));
        sink.kill();
    }
    let sink = spawn_stage(&worker, &connector, &[]);
    let found = wait_for_batch(&Tables::local(dir.path(), "orders-bronze"), "orders-bronze-v1", last.batch_id, &sink, Duration::from_secs(180));
    drop(sink);
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert!(found.changes == expected, "bronze holds each change exactly once: {} rows, {} changes", found.changes.len(), expected.len());
    assert_eq!(found.batches, (0..=last.batch_id).collect::<Vec<u64>>(), "one facts row per batch");
    let files = files_per_commit(&dir.path().join("orders-bronze-bronze"));
    for control in records.iter().filter(|c| c.rows > 7) {
        let (_, added) = files.iter().find(|(txn, _)| *txn == control.batch_id as i64).unwrap_or_else(|| panic!("batch {} has a commit of its own: {files:?}", control.batch_id));
        assert_eq!(*added as u64, control.rows.div_ceil(7), "batch {} ({} rows) in files of at most 7 rows, one commit", control.batch_id, control.rows);
    }
}

/// A coalesced commit keeps exactly once per batch: a sink started behind a feed of many
/// small batches writes them in commits of at most `max_batches_per_commit`, each commit's
/// `txn` version its last batch, and through SIGKILLs at random points bronze still holds each
/// change once and facts one row per batch.
#[tokio::test(flavor = "multi_thread")]
async fn coalesced_commits_write_each_batch_once_across_kills() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 1500).await;
    let with_rows = records.iter().filter(|c| c.rows > 0).count();
    assert!(with_rows >= 8, "a feed of many batches: {with_rows}");
    let worker = sink_worker(dir.path(), &broker);
    let connector = bronze_file(dir.path(), "grouped", &topic, "grouped-v1", "max_batches_per_commit = 4");
    let mut rng = rand::rng();
    for _ in 0..3 {
        let mut sink = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(800..2500)));
        sink.kill();
    }
    let sink = spawn_stage(&worker, &connector, &[]);
    let last = records.last().unwrap().batch_id;
    let found = wait_for_batch(&Tables::local(dir.path(), "grouped"), "grouped-v1", last, &sink, Duration::from_secs(180));
    drop(sink);
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert!(found.changes == expected, "bronze holds each change exactly once ({} rows, {} changes)", found.changes.len(), expected.len());
    assert_eq!(found.batches, (0..=last).collect::<Vec<_>>(), "one facts row per batch");
    let commits = data_commits(&dir.path().join("grouped-bronze"));
    assert!(commits.len() < with_rows, "batches were coalesced: {} data commits for {with_rows} batches with rows", commits.len());
    for (txn, first, last) in &commits {
        assert_eq!(*txn, *last as i64, "a commit's txn version is its last batch");
        assert!(last - first < 4, "at most max_batches_per_commit batches in a commit: {first}..={last}");
    }
    assert!(commits.windows(2).all(|w| w[1].1 > w[0].2), "commits hold disjoint, increasing batch ranges: {commits:?}");
}

/// Two sinks with different app_ids on one feed build identical bronze tables.
#[tokio::test(flavor = "multi_thread")]
async fn two_sinks_on_one_feed_build_identical_tables() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 800).await;
    let worker = sink_worker(dir.path(), &broker);
    let a = spawn_stage(&worker, &bronze_file(dir.path(), "a", &topic, "lake-a", ""), &[]);
    let b = spawn_stage(&worker, &bronze_file(dir.path(), "b", &topic, "lake-b", ""), &[]);
    let last = records.last().unwrap().batch_id;
    let found_a = wait_for_batch(&Tables::local(dir.path(), "a"), "lake-a", last, &a, Duration::from_secs(120));
    let found_b = wait_for_batch(&Tables::local(dir.path(), "b"), "lake-b", last, &b, Duration::from_secs(120));
    assert_eq!(found_a.changes, found_b.changes);
    assert_eq!(found_a.batches, found_b.batches);
    assert!(!found_a.changes.is_empty());

    // Maintenance keeps the content: compact (z-ordered) and vacuum table a, read it again.
    drop(a);
    let table_a = dir.path().join("a-bronze");
    for args in [vec!["optimize", table_a.to_str().unwrap(), "--zorder", "_start_lsn"], vec!["vacuum", table_a.to_str().unwrap(), "--retention-hours", "0"]] {
        let output = std::process::Command::new(support::bin()).args(&args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    let files = std::fs::read_dir(&table_a).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "parquet")).count();
    assert_eq!(files, 1, "one compacted file is left after optimize and vacuum");
    let after = check(&Tables::local(dir.path(), "a"), "lake-a");
    assert_eq!(after.changes, found_b.changes, "optimize and vacuum change nothing a reader sees");

    // A rewound feed: app_id lake-a pointed at a new feed of the same table (fewer batches)
    // is refused, never silently skipped.
    let prefix = unique("rewound");
    let (worker2, connector2) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "");
    let mut source = spawn_stage(&worker2, &connector2, &[]);
    let topic2 = format!("{prefix}.sales.dbo.orders");
    wait_caught_up(&broker.bootstrap, &topic2, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    let reused = bronze_file(dir.path(), "a", &topic2, "lake-a", "");
    let mut refused = spawn_stage(&worker, &reused, &[]);
    let status = refused.process().wait(Duration::from_secs(60)).expect("the sink refuses a rewound feed");
    assert_eq!(status.code(), Some(1));
    let stderr = refused.log();
    // The new feed ends wherever its source stopped (its backlog may take several batches),
    // before the batch the table holds.
    let ends: Option<u64> = stderr.split("ends at batch ").nth(1).and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()).and_then(|n| n.parse().ok());
    assert!(stderr.contains(&format!("app_id `lake-a` already wrote batch {last}")) && ends.is_some_and(|n| n < last), "{stderr}");
}

/// Invariant 7: a poison record named by a batch stops the sink naming topic, partition and
/// offset (tolerance none), or goes to the dead-letter topic with Kafka Connect's error
/// headers and is counted in the batch's facts row (tolerance all).
#[tokio::test(flavor = "multi_thread")]
async fn a_poison_record_stops_the_sink_or_is_dead_lettered() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 200).await;
    let producer = producer(&broker.bootstrap);
    producer.send(BaseRecord::to(&topic).key("{\"order_id\":1}").payload("{not json").partition(0)).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    let (_, high) = {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().unwrap();
        consumer.fetch_watermarks(&topic, 0, Duration::from_secs(10)).unwrap()
    };
    let poison_offset = high - 1;
    let mut poison_batch = records.last().unwrap().clone();
    poison_batch.batch_id += 1;
    poison_batch.from_lsn = poison_batch.to_lsn;
    poison_batch.rows = 1;
    poison_batch.events.clear();
    poison_batch.partitions = vec![PartitionRange { partition: 0, first_offset: poison_offset, last_offset: poison_offset, records: 1 }];
    producer.send(BaseRecord::<(), _>::to(&format!("{topic}.control")).payload(&serde_json::to_vec(&poison_batch).unwrap())).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();

    let worker = sink_worker(dir.path(), &broker);
    let mut strict = spawn_stage(&worker, &bronze_file(dir.path(), "strict", &topic, "strict", ""), &[]);
    let status = strict.process().wait(Duration::from_secs(120)).expect("the sink stops on the poison record");
    assert_eq!(status.code(), Some(1));
    let stderr = strict.log();
    assert!(stderr.contains(&format!("record {topic}/0 offset {poison_offset} cannot be decoded")), "{stderr}");

    let dlq = format!("{topic}.dlq");
    let tolerant = bronze_file(dir.path(), "tolerant", &topic, "tolerant", &format!("[errors]\ntolerance = \"all\"\ndead_letter_topic = \"{dlq}\""));
    let sink = spawn_stage(&worker, &tolerant, &[]);
    let found = wait_for_batch(&Tables::local(dir.path(), "tolerant"), "tolerant", poison_batch.batch_id, &sink, Duration::from_secs(120));
    assert_eq!(found.dead_lettered, 1, "the facts count the dead-lettered record");
    let dead = run_python(
        r#"
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic = sys.argv[1:3]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-check"})
c.assign([TopicPartition(topic, p, 0) for p in c.list_topics(topic, timeout=10).topics[topic].partitions])
for _ in range(30):
    m = c.poll(2)
    if m is not None and not m.error():
        h = {k: v.decode() for k, v in m.headers()}
        print(m.value().decode(), h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"], sep="|")
        break
"#,
        &[&broker.bootstrap, &dlq],
    );
    assert_eq!(dead.trim(), format!("{{not json|{topic}|0|{poison_offset}"));
}

/// An Avro feed (Confluent wire format, schemas from the registry) lands in bronze with the
/// same rows a JSON feed gives: every change once, exact types.
#[tokio::test(flavor = "multi_thread")]
async fn an_avro_feed_lands_in_bronze_exactly_once() {
    let broker = TestBroker::start().unwrap();
    let registry = support::registry::TestRegistry::start().await;
    let sim = SimServer::start(&[]).unwrap();
    setup_and_load(&sim, 400, 1);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("avro-bronze");
    let topic = format!("{prefix}.sales.dbo.orders");
    let avro = format!("format = \"avro\"\nschema_registry = {{ url = \"{}\" }}", registry.url);
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, &format!("{avro}\nmax_commits_per_batch = 10"));
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    let last = controls(&broker.bootstrap, &topic).last().unwrap().batch_id;
    let sink_worker = sink_worker(dir.path(), &broker);
    let sink = spawn_stage(&sink_worker, &bronze_file(dir.path(), "avro", &topic, "avro-lake", &avro), &[]);
    let found = wait_for_batch(&Tables::local(dir.path(), "avro"), "avro-lake", last, &sink, Duration::from_secs(120));
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert_eq!(found.changes, expected, "every change once, from Avro records");
    assert_eq!(found.dead_lettered, 0);
}

/// `s3://` targets go through delta-rs's object stores: bronze and facts on an S3-protocol
/// server (moto), with credentials from `[storage_options]`, hold every change once for an
/// independent reader; `optimize` reaches the same table with `--storage-option`; the secret
/// key never reaches the sink's logs.
#[tokio::test(flavor = "multi_thread")]
async fn a_feed_lands_in_an_s3_table() {
    let broker = TestBroker::start().unwrap();
    let s3 = support::s3::S3Server::start("lake");
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, records) = feed(&broker, &sim, dir.path(), 300).await;
    let worker = sink_worker(dir.path(), &broker);
    let root = format!("s3://{}/{}", s3.bucket, unique("orders"));
    let tables = Tables {
        bronze: format!("{root}/bronze"),
        facts: format!("{root}/facts"),
        storage: serde_json::to_string(&s3.options().into_iter().collect::<std::collections::HashMap<_, _>>()).unwrap(),
    };
    let connector = write_file(
        dir.path(),
        "s3.toml",
        &format!(
            "name = \"s3\"\nkind = \"delta-bronze\"\ntopic = \"{topic}\"\ntarget = \"{}\"\napp_id = \"s3-lake\"\nfacts_table = \"{}\"\n[storage_options]\n{}",
            tables.bronze,
            tables.facts,
            s3.storage_toml()
        ),
    );
    let mut sink = spawn_stage(&worker, &connector, &[]);
    let last = records.last().unwrap().batch_id;
    let found = wait_for_batch(&tables, "s3-lake", last, &sink, Duration::from_secs(120));
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert_eq!(found.changes, expected, "every change once in the S3 table");
    assert_eq!(found.batches, (0..=last).collect::<Vec<_>>(), "one facts row per batch");
    sink.stop();
    assert!(!sink.log().contains("test-secret-value"), "the secret key stays out of the logs");

    let mut optimize = std::process::Command::new(support::bin());
    optimize.args(["optimize", &tables.bronze]);
    for (key, value) in s3.options() {
        optimize.args(["--storage-option", &format!("{key}={value}")]);
    }
    let output = optimize.output().unwrap();
    assert!(output.status.success(), "optimize on s3: {}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(check(&tables, "s3-lake").changes, expected, "optimize changes nothing a reader sees");
}

/// Schema evolution: a column added to the feed (the source restarted with more `columns`)
/// is added to bronze by a schema merge. Rows written before have NULL there; rows after carry
/// the values. A column that leaves the feed again stays, NULL in later rows. No row is lost
/// or repeated.
#[tokio::test(flavor = "multi_thread")]
async fn a_column_added_to_the_feed_is_added_to_bronze() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    setup_and_load(&sim, 200, 1);
    let prefix = unique("evolve");
    let topic = format!("{prefix}.sales.dbo.orders");
    let narrow = "columns = [\"order_id\", \"customer_id\", \"status\", \"amount\"]\nmax_commits_per_batch = 10";
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, narrow);
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    let narrow_last = controls(&broker.bootstrap, &topic).last().unwrap().batch_id;
    let sink_worker = sink_worker(dir.path(), &broker);
    let tables = Tables::local(dir.path(), "evolve");
    let sink = spawn_stage(&sink_worker, &bronze_file(dir.path(), "evolve", &topic, "evolve", ""), &[]);
    wait_for_batch(&tables, "evolve", narrow_last, &sink, Duration::from_secs(120));

    // The source again, now with every column; more changes.
    setup_and_load(&sim, 200, 2);
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 10");
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    let wide_last = controls(&broker.bootstrap, &topic).last().unwrap().batch_id;
    assert!(wide_last > narrow_last, "the wide feed added batches");
    wait_for_batch(&tables, "evolve", wide_last, &sink, Duration::from_secs(120));

    // Narrow again: the columns that left the feed stay in bronze, NULL in the new rows.
    setup_and_load(&sim, 200, 3);
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, narrow);
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    let last = controls(&broker.bootstrap, &topic).last().unwrap().batch_id;
    let found = wait_for_batch(&tables, "evolve", last, &sink, Duration::from_secs(120));
    let mut expected = truth(&sim.client_config()).await;
    expected.sort();
    assert_eq!(found.changes, expected, "every change once across both schema changes");

    // currency is NOT NULL in dbo.orders: NULL in bronze exactly for the narrow batches.
    let split = run_python(
        r#"
import sys, json
from deltalake import DeltaTable
t = DeltaTable(sys.argv[1])
names = [f.name for f in t.schema().fields]
rows = t.to_pyarrow_table(columns=["_batch_id", "currency"]).to_pylist()
narrow, wide = int(sys.argv[2]), int(sys.argv[3])
is_wide = lambda r: narrow < r["_batch_id"] <= wide
print(json.dumps({
    "has_note": "note" in names,
    "narrow_with_currency": sum(1 for r in rows if not is_wide(r) and r["currency"] is not None),
    "wide_without_currency": sum(1 for r in rows if is_wide(r) and r["currency"] is None),
    "narrow": sum(1 for r in rows if r["_batch_id"] <= narrow),
    "wide": sum(1 for r in rows if is_wide(r)),
    "narrow_again": sum(1 for r in rows if r["_batch_id"] > wide),
}))
"#,
        &[&tables.bronze, &narrow_last.to_string(), &wide_last.to_string()],
    );
    let split: serde_json::Value = serde_json::from_str(split.trim()).unwrap();
    assert_eq!(split["has_note"], true, "the added columns are in the table schema: {split}");
    assert_eq!(split["narrow_with_currency"], 0, "{split}");
    assert_eq!(split["wide_without_currency"], 0, "{split}");
    for phase in ["narrow", "wide", "narrow_again"] {
        assert!(split[phase].as_u64().unwrap() > 0, "{phase} rows: {split}");
    }
}
