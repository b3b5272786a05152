//! The `mssql-source` stage end to end: the simulator over TDS (tiberius), the source as a
//! `mssql-cdc run` process, the embedded broker; the log read back with rdkafka and checked
//! against the change table as the server holds it.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use mssql_cdc_core::log::Event;
use mssql_cdc_sim::client::BlockingClient;
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
use rand::Rng;
use support::source::{check_contract, exec, read_all, source_files, truth, wait_caught_up};
use support::{spawn_stage, unique, SimServer, TestBroker};

/// Creates dbo.orders with CDC (on a thread of its own: the blocking client owns a runtime).
fn setup_orders(sim: &SimServer) {
    let config = sim.client_config();
    std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&config).expect("login");
        create_orders(&mut client).expect("set up dbo.orders");
    })
    .join()
    .unwrap();
}

/// An INSERT of one order.
fn insert_order(id: i64) -> String {
    format!(
        "INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, created_at, is_priority) \
         VALUES ({id}, 1, 'new', 1.00, 'EUR', '2026-01-01T00:00:00', 0)"
    )
}

/// Starts the orders workload on a thread: transactions of 1 to 50 statements.
fn start_workload(sim: &SimServer, changes: u64, rate: u64, seed: u64) -> std::thread::JoinHandle<()> {
    let config = sim.client_config();
    std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&config).expect("login");
        let options = WorkloadOptions { changes, rate, max_transaction_size: 50, seed, ..WorkloadOptions::default() };
        Workload::new(options, Vec::new()).run(&mut client).expect("workload");
    })
}

fn workload(sim: &SimServer, changes: u64, rate: u64, seed: u64) {
    start_workload(sim, changes, rate, seed).join().unwrap();
}

/// Invariants 1 and 2 of the log contract: after a workload of 1–50-statement transactions,
/// the control records tile the LSN range, never split a transaction, never pass the max LSN,
/// honour `max_commits_per_batch`, and name every change of the change table exactly once;
/// also for the batches planned ahead on a second connection (most of this backlog's).
#[tokio::test(flavor = "multi_thread")]
async fn batches_tile_the_lsn_range_and_name_every_change_once() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    setup_orders(&sim);
    workload(&sim, 3000, 0, 11);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("tile");
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 7");
    let mut source = spawn_stage(&worker, &connector, &[]);
    let topic = format!("{prefix}.sales.dbo.orders");
    let records = wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(120)).await;
    // The backlog was read in batches cut at 7 commits: each next one was planned on the
    // stream's second connection while the rows before it were read, and the contract below
    // holds for those batches as for the rest.
    let scraped = source.scrape().unwrap_or_default();
    let ahead = mssql_cdc_testkit::metrics::sum(&scraped, "mssql_cdc_source_batches_planned_ahead_total").unwrap_or(0.0);
    assert!(ahead >= records.len() as f64 / 2.0, "{ahead} of {} batches planned ahead:\n{scraped}", records.len());
    assert!(source.stop().is_some_and(|status| status.success()), "clean stop; stderr:\n{}", source.log());
    let truth = truth(&sim.client_config()).await;
    assert!(truth.len() >= 3000, "the workload made changes");
    let data = read_all(&broker.bootstrap, &topic);
    let named = check_contract(&records, &data, &truth, Some(7));
    assert!(records.len() > 10, "many batches of at most 7 commits");
    // Keys are the primary key, so per-key order holds within a partition.
    let first = &named[0];
    assert!(first["order_id"].is_i64() && first["_commit_ts"].as_str().unwrap().ends_with('Z'), "{first}");
}

/// Invariant 2: the log is the checkpoint. SIGKILL the source at random points during a
/// workload, many times: the control records still tile the range and name every change once
/// (orphans of killed batches may stay in the data topic, never named).
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_random_points_keeps_the_tiling_exact() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    setup_orders(&sim);
    let writer = start_workload(&sim, 6000, 1500, 23);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("kill");
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 20\nfetch_rows = 50");
    let mut rng = rand::rng();
    for _ in 0..8 {
        let mut source = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        source.kill();
    }
    writer.join().unwrap();
    let mut source = spawn_stage(&worker, &connector, &[]);
    let topic = format!("{prefix}.sales.dbo.orders");
    let records = wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(180)).await;
    source.stop();
    let truth = truth(&sim.client_config()).await;
    let data = read_all(&broker.bootstrap, &topic);
    let named = check_contract(&records, &data, &truth, Some(20));
    eprintln!("{} data records in the topic, {} named by {} batches", data.len(), named.len(), records.len());
}

/// Partitioned reads (`num_partitions = 3`, ranges of about `fetch_rows` rows over three more
/// connections) keep the log's contract through SIGKILLs: the control records tile the range
/// and name every change once, and every partition holds its named records in LSN order (the
/// order one connection would have read them in).
#[tokio::test(flavor = "multi_thread")]
async fn partitioned_reads_keep_every_partition_in_lsn_order_through_kills() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    setup_orders(&sim);
    let writer = start_workload(&sim, 6000, 2000, 31);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("partitioned");
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "num_partitions = 3\nfetch_rows = 40");
    let mut rng = rand::rng();
    for _ in 0..4 {
        let mut source = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(500..1500)));
        source.kill();
    }
    writer.join().unwrap();
    // A backlog of 60 commits for the last run: its first batch is read over the three readers.
    for id in 500_000..500_060 {
        exec(&sim.client_config(), &insert_order(id)).await;
    }
    let mut source = spawn_stage(&worker, &connector, &[]);
    let topic = format!("{prefix}.sales.dbo.orders");
    let records = wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(180)).await;
    // The stream's own connection and the three readers', kept between batches.
    let connections = mssql_cdc_testkit::process::tcp_connections_to(source.process().id(), sim.address.port());
    assert!(source.stop().is_some_and(|status| status.success()), "clean stop; stderr:\n{}", source.log());
    assert_eq!(connections, 4, "the source reads over its own connection and num_partitions = 3 more");
    let truth = truth(&sim.client_config()).await;
    let data = read_all(&broker.bootstrap, &topic);
    check_contract(&records, &data, &truth, None);
    assert!(records.iter().any(|r| r.rows > 200), "a batch spans many ranges of 40 rows");
    let named: std::collections::BTreeSet<(i32, i64)> =
        records.iter().flat_map(|r| r.partitions.iter().flat_map(|p| (p.first_offset..=p.last_offset).map(move |o| (p.partition, o)))).collect();
    let mut last: std::collections::BTreeMap<i32, (String, String, i64)> = std::collections::BTreeMap::new();
    let mut ordered = data.clone();
    ordered.sort_by_key(|r| (r.partition, r.offset));
    for record in ordered.iter().filter(|r| named.contains(&(r.partition, r.offset))) {
        let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
        let at = (value["_start_lsn"].as_str().unwrap().to_owned(), value["_seqval"].as_str().unwrap().to_owned(), value["_operation"].as_i64().unwrap());
        if let Some(previous) = last.insert(record.partition, at.clone()) {
            assert!(previous < at, "partition {} offset {}: {at:?} after {previous:?}", record.partition, record.offset);
        }
    }
}

/// Invariant 6: changes purged by cleanup before they were read stop the stream with an error
/// naming the capture instance and the LSN range; with `fail_on_data_loss = false` they are
/// skipped and a `data_skipped` event is published with the same range.
#[tokio::test(flavor = "multi_thread")]
async fn cleanup_past_the_position_is_data_loss_or_data_skipped() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let config = sim.client_config();
    setup_orders(&sim);
    workload(&sim, 20, 0, 5);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("loss");
    let topic = format!("{prefix}.sales.dbo.orders");
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "");
    let mut source = spawn_stage(&worker, &connector, &[]);
    let before = wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(60)).await;
    source.stop();
    let position = before.last().unwrap().to_lsn;

    for id in 100_000..100_030 {
        exec(&config, &insert_order(id)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let low = support::source::purge_up_to_max_lsn(&config).await;

    let mut failing = spawn_stage(&worker, &connector, &[]);
    let status = failing.process().wait(Duration::from_secs(60)).expect("the source stops on data loss");
    assert_eq!(status.code(), Some(1), "non-zero exit");
    let stderr = failing.log();
    let expected_from = position.increment().to_string();
    assert!(stderr.contains("data loss on capture instance `dbo_orders`"), "{stderr}");
    assert!(stderr.contains(&format!("changes from {expected_from} to ")), "names the lost range from {expected_from}: {stderr}");

    let skipping = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "fail_on_data_loss = false").1;
    let mut source = spawn_stage(&worker, &skipping, &[]);
    let after = wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(60)).await;
    source.stop();
    let skipped: Vec<&Event> = after.iter().flat_map(|c| c.events.iter()).collect();
    assert_eq!(skipped.len(), 1, "one data_skipped event: {skipped:?}");
    let Event::DataSkipped { from_lsn, to_lsn, certain } = skipped[0] else { panic!("a data_skipped event: {:?}", skipped[0]) };
    assert_eq!(from_lsn.to_string(), expected_from);
    assert!(*certain && to_lsn.to_string() < low, "skipped up to just below the low water mark {low}");
    let resumed = after.iter().find(|c| !c.events.is_empty()).unwrap();
    assert_eq!(resumed.from_lsn, position, "the batch with the event continues the tiling");
}

/// `source_time_zone` by Windows name: commit times cross Europe's 2026 fall-back (03:00 CEST
/// → 02:00 CET on 25 October) and map to the right UTC instants, including the repeated hour.
#[tokio::test(flavor = "multi_thread")]
async fn commit_times_cross_a_dst_transition_correctly() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&["--zone", "W. Europe Standard Time"]).unwrap();
    let config = sim.client_config();
    setup_orders(&sim);
    exec(&config, "EXEC sim.set_clock @utc = '2026-10-24T23:30:00', @freeze = 1").await;
    // (order_id, minutes to advance before the commit, expected UTC)
    let steps = [(1, 0, "2026-10-24T23:30:00"), (2, 60, "2026-10-25T00:30:00"), (3, 40, "2026-10-25T01:10:00"), (4, 60, "2026-10-25T02:10:00")];
    for (id, advance, _) in steps {
        exec(&config, &format!("EXEC sim.advance_clock @seconds = {}", advance * 60)).await;
        exec(&config, &insert_order(id)).await;
    }
    exec(&config, "EXEC sim.run_capture_job").await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("dst");
    let topic = format!("{prefix}.sales.dbo.orders");
    // One commit per batch: the repeated hour must keep its order across batches too.
    let (worker, connector) =
        source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "source_time_zone = \"W. Europe Standard Time\"\nmax_commits_per_batch = 1");
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(60)).await;
    source.stop();
    let data = read_all(&broker.bootstrap, &topic);
    for (id, _, expected) in steps {
        let value: serde_json::Value = data
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .find(|v| v["order_id"] == id)
            .unwrap_or_else(|| panic!("order {id} published"));
        assert_eq!(value["_commit_ts"].as_str().unwrap(), format!("{expected}.000000Z"), "order {id}");
    }
}

/// Faults: deadlock victim (1205), lock timeout (1222) and dropped connections during reads
/// are retried on a new connection with no loss or duplicate; a longer outage stops the stage
/// with a clear error and a non-zero exit.
#[tokio::test(flavor = "multi_thread")]
async fn injected_faults_are_survived_and_an_outage_stops_the_stage() {
    let broker = TestBroker::start().unwrap();
    let mut sim = SimServer::start(&[]).unwrap();
    let config = sim.client_config();
    setup_orders(&sim);
    workload(&sim, 1500, 0, 31);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("fault");
    let topic = format!("{prefix}.sales.dbo.orders");
    let (worker, connector) =
        source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 3\nretry_timeout_ms = 120000");
    let mut source = spawn_stage(&worker, &connector, &[]);
    // The source is the only client now (simulator procedures are exempt from faults), so each
    // fault hits one of its statements.
    let kinds = ["deadlock", "lock_timeout", "disconnect", "deadlock", "disconnect", "lock_timeout", "disconnect", "deadlock", "lock_timeout"];
    for kind in kinds {
        exec(&config, &format!("EXEC sim.inject_fault @kind = '{kind}', @count = 1")).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // Back-to-back faults back off 0.5, 1, 2, 4, 8, 10, 10... seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let retried = |stderr: &str| stderr.matches("retrying the batch on a new connection").count();
    while retried(&source.log()) < kinds.len() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stderr = source.log();
    assert_eq!(retried(&stderr), kinds.len(), "every fault was met and retried:\n{stderr}");
    for code in ["1205", "1222"] {
        assert!(stderr.contains(code), "the warning names error {code}:\n{stderr}");
    }
    let records = wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(120)).await;
    let truth = truth(&config).await;
    let data = read_all(&broker.bootstrap, &topic);
    check_contract(&records, &data, &truth, Some(3));
    source.stop();

    // The server goes away for longer than retry_timeout_ms.
    let short = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "retry_timeout_ms = 2000").1;
    let mut source = spawn_stage(&worker, &short, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(60)).await;
    drop(std::mem::replace(&mut sim, SimServer::start(&[]).unwrap()));
    let status = source.process().wait(Duration::from_secs(60)).expect("the source gives up after retry_timeout_ms");
    assert_eq!(status.code(), Some(1));
    let stderr = source.log();
    assert!(stderr.contains("SQL Server unavailable for"), "{stderr}");
    assert!(!stderr.contains(support::SIM_PASSWORD), "no password in the logs");
}

/// Avro in the Confluent wire format: schemas generated from the captured columns are
/// registered under TopicNameStrategy, and Python confluent-kafka's AvroDeserializer (fastavro)
/// decodes every key and value with faithful types: exact decimals, 10-byte LSNs, UTC commit
/// times.
#[tokio::test(flavor = "multi_thread")]
async fn avro_records_decode_with_confluent_kafka_against_the_registry() {
    let broker = TestBroker::start().unwrap();
    let registry = support::registry::TestRegistry::start().await;
    let sim = SimServer::start(&[]).unwrap();
    setup_orders(&sim);
    workload(&sim, 300, 0, 41);
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("avro");
    let topic = format!("{prefix}.sales.dbo.orders");
    let extra = format!("format = \"avro\"\nschema_registry = {{ url = \"{}\" }}", registry.url);
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, &extra);
    let mut source = spawn_stage(&worker, &connector, &[]);
    let records = wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;
    source.stop();
    assert_eq!(registry.subjects(), vec![format!("{topic}-key"), format!("{topic}-value")]);
    assert!(records.iter().all(|c| c.schema_id.is_some() && c.format == mssql_cdc_core::log::RecordFormat::Avro));
    let truth = truth(&sim.client_config()).await;
    let script = support::PY_MESSAGES.to_owned()
        + r#"
import sys, json, datetime, decimal
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField
bootstrap, topic, url = sys.argv[1:4]
client = SchemaRegistryClient({"url": url})
keys, values = AvroDeserializer(client), AvroDeserializer(client)
out = []
for m in messages(bootstrap, topic, "avro-check"):
    k = keys(m.key(), SerializationContext(topic, MessageField.KEY))
    v = values(m.value(), SerializationContext(topic, MessageField.VALUE))
    assert k == {"order_id": v["order_id"]}, (k, v)
    assert isinstance(v["amount"], decimal.Decimal) and v["amount"].as_tuple().exponent == -2, v["amount"]
    assert isinstance(v["_start_lsn"], bytes) and len(v["_start_lsn"]) == 10
    assert isinstance(v["_commit_ts"], datetime.datetime) and v["_commit_ts"].tzinfo is not None
    assert isinstance(v["created_at"], datetime.datetime)
    out.append(["0x" + v["_start_lsn"].hex().upper(), "0x" + v["_seqval"].hex().upper(), v["_operation"]])
print(json.dumps(out))
"#;
    let output = support::run_python(&script, &[&broker.bootstrap, &topic, &registry.url]);
    let mut decoded: Vec<(String, String, i64)> = serde_json::from_str(output.trim()).expect("the checker's JSON");
    decoded.sort();
    let mut expected = truth.clone();
    expected.sort();
    assert_eq!(decoded, expected, "every change decoded once by confluent-kafka");
}

/// `snapshot_isolation = "snapshot"`: the snapshot's rows are the table as of its first read.
/// A concurrent transaction's uncommitted update and insert are not in them (and do not block
/// the reads), nor is an update committed after the first read; all three reach the log as
/// changes after S once committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_under_snapshot_isolation_sees_the_table_as_of_its_first_read() {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    setup_orders(&sim);
    let config = sim.client_config();
    for chunk in 0..20 {
        let statements: Vec<String> = (chunk * 100 + 1..=chunk * 100 + 100).map(insert_order).collect();
        exec(&config, &statements.join("; ")).await;
    }
    exec(&config, "ALTER DATABASE sales SET ALLOW_SNAPSHOT_ISOLATION ON").await;
    // A writer holding an open transaction: its row locks would block a READ COMMITTED read.
    let mut writer = mssql_cdc_sim::client::connect(&config).await.unwrap();
    let open = "BEGIN TRAN; UPDATE dbo.orders SET status = 'uncommitted' WHERE order_id = 1900; ".to_owned() + &insert_order(900_001);
    writer.simple_query(open).await.unwrap().into_results().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("snapiso");
    let topic = format!("{prefix}.sales.dbo.orders");
    let extra = "bootstrap = true\nsnapshot_isolation = \"snapshot\"\nsnapshot_fetch_rows = 10\nlock_timeout_ms = 500";
    let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, extra);
    let mut source = spawn_stage(&worker, &connector, &[]);
    // After the first snapshot read, a committed update of a row not read yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !support::source::controls(&broker.bootstrap, &topic).iter().any(|c| c.open_snapshot().is_some() && c.rows > 0) {
        assert!(std::time::Instant::now() < deadline, "no snapshot rows published:\n{}", source.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    exec(&config, "UPDATE dbo.orders SET status = 'later' WHERE order_id = 1990").await;
    let committed_at = chrono::Utc::now();
    while !support::source::controls(&broker.bootstrap, &topic).iter().any(|c| c.events.iter().any(|e| e.name() == "bootstrap")) {
        assert!(std::time::Instant::now() < deadline, "the snapshot did not complete while a writer held locks:\n{}", source.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writer.simple_query("COMMIT").await.unwrap().into_results().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_caught_up(&broker.bootstrap, &topic, &config, &source, Duration::from_secs(60)).await;
    assert!(source.stop().is_some_and(|s| s.success()), "{}", source.logs());

    let controls = support::source::controls(&broker.bootstrap, &topic);
    let snapshot = controls.iter().find_map(|c| c.snapshot.clone().filter(|s| s.complete)).expect("a completed snapshot");
    let read_after = controls.iter().filter(|c| c.open_snapshot().is_some() && c.rows > 0 && c.metrics.published_at.is_some_and(|t| t > committed_at)).count();
    assert!(read_after > 0, "the later update was committed while the snapshot was still reading");
    let values: Vec<serde_json::Value> = read_all(&broker.bootstrap, &topic).iter().map(|r| serde_json::from_slice(&r.value).unwrap()).collect();
    let rows_of = |id: i64, operation: i64| values.iter().filter(|v| v["order_id"] == id && v["_operation"] == operation).cloned().collect::<Vec<_>>();
    let status = |rows: &[serde_json::Value]| rows.iter().map(|r| r["status"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>();
    assert_eq!(status(&rows_of(1900, 0)), vec!["new"], "the uncommitted update is not in the snapshot");
    assert_eq!(status(&rows_of(1990, 0)), vec!["new"], "the update committed after the first read is not in the snapshot");
    assert!(rows_of(900_001, 0).is_empty(), "the uncommitted insert is not in the snapshot");
    assert_eq!(snapshot.rows_done, 2000, "the snapshot holds the committed table as of its first read");
    let s = snapshot.lsn.to_string();
    for (id, operation, wanted) in [(1900, 4, "uncommitted"), (1990, 4, "later"), (900_001, 2, "new")] {
        let changes = rows_of(id, operation);
        assert_eq!(status(&changes), vec![wanted], "order {id} arrives as a change once committed");
        assert!(changes[0]["_start_lsn"].as_str().unwrap() > s.as_str(), "after S");
    }
}
