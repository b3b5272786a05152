//! The end-to-end suites' adapters over the test kit (`mssql-cdc-testkit`, shared with `demo`
//! and `bench`): they panic instead of returning errors, and add what only the suites need
//! (unique names, the Python checkers, a schema registry, an S3 server, a TCP proxy).
//!
//! The broker is `mssql-cdc broker` started as a child process on a free port with SQLite
//! storage in a temporary directory, unless `MSSQL_CDC_TEST_BOOTSTRAP` names an external
//! Kafka-protocol broker to use instead.
// Each suite uses a part of this module.
#![allow(dead_code, unused_imports)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod pipeline;
pub mod proxy;
pub mod registry;
pub mod s3;
pub mod source;

pub use mssql_cdc_testkit::broker::{BrokerProcess as TestBroker, BrokerSpec};
pub use mssql_cdc_testkit::process::{tail, Log, Process};
pub use mssql_cdc_testkit::sim::SimProcess as SimServer;
pub use mssql_cdc_testkit::stage::StageProcess;

use mssql_cdc_core::kafka::KafkaConfig;

/// The `mssql-cdc` binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mssql-cdc"))
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The simulator's `sa` password in tests (nothing sets `MSSQL_CDC_SIM_PASSWORD` for them).
pub const SIM_PASSWORD: &str = mssql_cdc_sim::client::DEFAULT_PASSWORD;

/// A name no other test (or earlier run against an external broker) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A local Delta table's JSON commits, read directly from its `_delta_log`, in version order:
/// each commit's actions.
pub fn delta_commits(table: &Path) -> Vec<Vec<serde_json::Value>> {
    let mut logs: Vec<_> = std::fs::read_dir(table.join("_delta_log")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    logs.sort();
    logs.iter().map(|log| std::fs::read_to_string(log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()).collect()
}

/// `mssql-cdc run` for a connector file, its log kept in memory, with extra environment
/// variables; panics when it cannot start.
pub fn spawn_stage(worker: &Path, connector: &Path, env: &[(&str, &str)]) -> StageProcess {
    let name = connector.file_stem().map_or("stage".into(), |stem| stem.to_string_lossy().into_owned());
    let mut all = vec![("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")];
    all.extend_from_slice(env);
    StageProcess::spawn(&name, worker, connector, &all, Log::Capture).unwrap_or_else(|error| panic!("starting {name}: {error}"))
}

/// Produces `count` records `record 0`, `record 1`, ... to partition 0 of `topic` in one
/// produce request: librdkafka gathers them into one record batch while it lingers.
pub fn produce_one_batch(bootstrap: &str, topic: &str, count: usize) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).set("linger.ms", "500").create().unwrap();
    for i in 0..count {
        producer.send(BaseRecord::<(), _>::to(topic).partition(0).payload(&format!("record {i}"))).unwrap();
    }
    producer.flush(std::time::Duration::from_secs(10)).unwrap();
}

/// Creates a topic with `partitions` partitions.
pub async fn create_topic(kafka: &KafkaConfig, topic: &str, partitions: i32) {
    mssql_cdc_testkit::kafka::create_topic(kafka, topic, partitions).await.unwrap_or_else(|error| panic!("creating {topic}: {error}"));
}

/// A plain HTTP/1.0 GET on loopback: (status code, body).
pub fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    mssql_cdc_testkit::metrics::get(address, path).unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// The Python interpreter with the independent checkers installed (`MSSQL_CDC_PYTHON`, set
/// by `scripts/test.sh`), else `python3`.
pub fn python() -> String {
    std::env::var("MSSQL_CDC_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Python: `messages(bootstrap, topic, group)` yields every record of `topic` up to the end each
/// partition has now, with confluent-kafka. Prepended to the scripts that read topics.
pub const PY_MESSAGES: &str = r#"
from confluent_kafka import Consumer, TopicPartition
def messages(bootstrap, topic, group):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {}
    for p in parts:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if high > low:
            ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen = set()
    while len(seen) < len(ends):
        m = consumer.poll(5)
        if m is None or m.error():
            continue
        yield m
        if m.offset() + 1 >= ends[m.partition()]:
            seen.add(m.partition())
"#;

/// What every script [`run_python`] runs ends with: its output flushed, then an immediate exit.
/// deltalake's runtime threads can abort the interpreter's teardown ("terminate called without
/// an active exception", seen in CI) after the answer was printed.
const PYTHON_EPILOGUE: &str = "\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_os._exit(0)\n";

/// Runs a Python script with arguments; panics with its output if it fails. Returns stdout.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let script = format!("{script}{PYTHON_EPILOGUE}");
    let output = Command::new(python()).arg("-c").arg(script).args(args).output().expect("run python");
    assert!(
        output.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    mssql_cdc_testkit::files::write_file(dir, name, text).unwrap()
}

/// Worker Kafka settings for a bootstrap address.
pub fn kafka(bootstrap: &str) -> KafkaConfig {
    KafkaConfig { bootstrap_servers: bootstrap.to_owned(), ..KafkaConfig::default() }
}

/// Whether `topic` exists on the broker.
pub fn topic_exists(bootstrap: &str, topic: &str) -> bool {
    mssql_cdc_testkit::kafka::exists(&kafka(bootstrap), topic)
}
