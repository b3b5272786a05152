//! Helpers for the source suites: connector files, the source as a child process, reading
//! topics back, and the checks of the log contract (tiling, exactly-once naming).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mssql_cdc::log::ControlRecord;
use mssql_cdc::sim::client::{connect, ClientConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{bin, write_file, SimServer, SIM_PASSWORD};

/// Files for one source connector against `sim`, publishing under `prefix`.
pub fn source_files(dir: &Path, bootstrap: &str, sim: &SimServer, prefix: &str, extra: &str) -> (PathBuf, PathBuf) {
    let worker = write_file(
        dir,
        "worker.toml",
        &format!("[kafka]\nbootstrap_servers = \"{bootstrap}\"\n\n[telemetry]\nlisten = \"127.0.0.1:0\"\n"),
    );
    let connector = write_file(
        dir,
        "source.toml",
        &format!(
            r#"name = "orders-source"
kind = "mssql-source"
connection_string = "Server=127.0.0.1,{port};Database=sales"
user = "sa"
password = {{ env = "TEST_SIM_PASSWORD" }}
encrypt = "not_supported"
capture_instances = ["dbo_orders"]
topic_prefix = "{prefix}"
poll_interval_ms = 100
heartbeat_interval_ms = 1000
topic_partitions = 3
{extra}
"#,
            port = sim.address.port()
        ),
    );
    (worker, connector)
}

/// `mssql-cdc run` with a source connector, as a child process.
pub struct SourceProcess {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl SourceProcess {
    /// Starts it.
    pub fn spawn(worker: &Path, connector: &Path) -> Self {
        Self::spawn_with_env(worker, connector, &[])
    }

    /// Starts `mssql-cdc run` for any connector file, with extra environment variables.
    pub fn spawn_with_env(worker: &Path, connector: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(bin())
            .envs(env.iter().copied())
            .args(["run", "--worker"])
            .arg(worker)
            .arg(connector)
            .env("TEST_SIM_PASSWORD", SIM_PASSWORD)
            .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mssql-cdc run");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Self { child, stderr }
    }

    /// What it logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) -> ExitStatus {
        unsafe {
            libc_kill(self.child.id() as i32, 15);
        }
        self.wait(Duration::from_secs(30)).expect("the source stops on SIGTERM")
    }

    /// Waits for the process to exit on its own.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(200));
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

impl Drop for SourceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A record read back.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key.
    pub key: Vec<u8>,
    /// Its value.
    pub value: Vec<u8>,
}

/// Every record of `topic` up to the current end of each partition.
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<Record> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", super::unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let partitions: Vec<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let mut ends = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
        if high > low {
            ends.insert(p, high);
            assignment.add_partition_offset(topic, p, Offset::Offset(low)).unwrap();
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return records;
    }
    consumer.assign(&assignment).unwrap();
    let mut done = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.len() < ends.len() && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(500)) {
            let message = message.expect("consume");
            records.push(Record {
                partition: message.partition(),
                offset: message.offset(),
                key: message.key().unwrap_or_default().to_vec(),
                value: message.payload().unwrap_or_default().to_vec(),
            });
            if message.offset() + 1 >= ends[&message.partition()] {
                done.insert(message.partition());
            }
        }
    }
    assert_eq!(done.len(), ends.len(), "read {topic} to its end");
    records
}

/// The control records of a data topic, in order.
pub fn controls(bootstrap: &str, data_topic: &str) -> Vec<ControlRecord> {
    read_all(bootstrap, &format!("{data_topic}.control"))
        .iter()
        .map(|r| serde_json::from_slice(&r.value).expect("a control record"))
        .collect()
}

/// A change's coordinates: (start_lsn, seqval, operation), LSNs as `0x…` text.
pub type Coordinates = (String, String, i64);

/// The rows of one query over TDS (panics on any error, naming the query).
pub async fn query_rows(sim: &ClientConfig, sql: &str) -> Vec<tiberius::Row> {
    let mut client = connect(sim).await.expect("login");
    let stream = client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    stream.into_first_result().await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The change table as SQL Server holds it, over TDS.
pub async fn truth(sim: &ClientConfig) -> Vec<Coordinates> {
    let rows = query_rows(sim, "SELECT __$start_lsn, __$seqval, __$operation FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation").await;
    rows.iter()
        .map(|r| (hex(r.get::<&[u8], _>(0).unwrap()), hex(r.get::<&[u8], _>(1).unwrap()), i64::from(r.get::<i32, _>(2).unwrap())))
        .collect()
}

/// `sys.fn_cdc_get_max_lsn()` over TDS.
pub async fn max_lsn(sim: &ClientConfig) -> String {
    let mut client = connect(sim).await.expect("login");
    let row = client.query("SELECT sys.fn_cdc_get_max_lsn()", &[]).await.unwrap().into_row().await.unwrap().unwrap();
    hex(row.get::<&[u8], _>(0).unwrap())
}

/// Runs statements over TDS.
pub async fn exec(sim: &ClientConfig, sql: &str) {
    let mut client = connect(sim).await.expect("login");
    client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).into_results().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `0x` and upper-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::from("0x");
    for b in bytes {
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// Waits until the control topic reaches the server's current maximum LSN.
pub async fn wait_caught_up(bootstrap: &str, data_topic: &str, sim: &ClientConfig, source: &SourceProcess, timeout: Duration) -> Vec<ControlRecord> {
    let deadline = Instant::now() + timeout;
    loop {
        let max = max_lsn(sim).await;
        let records = if super::topic_exists(bootstrap, &format!("{data_topic}.control")) { controls(bootstrap, data_topic) } else { Vec::new() };
        if records.last().is_some_and(|c| c.to_lsn.to_string() == max) {
            return records;
        }
        assert!(Instant::now() < deadline, "the source did not reach {max} in time; stderr:\n{}", source.stderr());
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
