//! Topics read back: every record up to the current end of each partition, the control
//! records of a data topic, and topic checks.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::ControlRecord;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Error, Result};

/// How long reading a topic to its end may take.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

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

fn consumer(kafka: &KafkaConfig) -> Result<BaseConsumer> {
    let mut config = kafka.client_config()?;
    config.set("group.id", format!("mssql-cdc-testkit-{}", uuid::Uuid::new_v4())).set("enable.auto.commit", "false");
    Ok(config.create()?)
}

/// Every record of every partition of `topic`, up to each partition's end as the broker
/// reports it now. With `settle`, reading goes on until nothing more arrives for that long
/// (a memory broker's watermarks can lag what a consumer reads).
pub fn read_all(kafka: &KafkaConfig, topic: &str, settle: Option<Duration>) -> Result<Vec<Record>> {
    let consumer = consumer(kafka)?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions: Vec<i32> = metadata.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect()).unwrap_or_default();
    let mut ends = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
        if high > low {
            ends.insert(partition, high);
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return Ok(records);
    }
    consumer.assign(&assignment)?;
    let mut open: BTreeMap<i32, i64> = ends.clone();
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut last = Instant::now();
    while Instant::now() < deadline && (!open.is_empty() || settle.is_some_and(|settle| last.elapsed() < settle)) {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = message?;
        records.push(Record {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().unwrap_or_default().to_vec(),
            value: message.payload().unwrap_or_default().to_vec(),
        });
        last = Instant::now();
        if open.get(&message.partition()).is_some_and(|end| message.offset() + 1 >= *end) {
            open.remove(&message.partition());
        }
    }
    if !open.is_empty() {
        return Err(Error::Failed(format!("{topic}: partitions {:?} not read to their ends within {READ_TIMEOUT:?}", open.keys().collect::<Vec<_>>())));
    }
    Ok(records)
}

/// The control records of a data topic (`<topic>.control`), in order.
pub fn controls(kafka: &KafkaConfig, data_topic: &str) -> Result<Vec<ControlRecord>> {
    let topic = format!("{data_topic}.control");
    read_all(kafka, &topic, None)?
        .iter()
        .map(|record| ControlRecord::decode(&record.value).map_err(|source| Error::Record { topic: topic.clone(), offset: record.offset, source }))
        .collect()
}

/// The totals of a data topic's control records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Rows.
    pub rows: u64,
    /// Bytes of data records.
    pub bytes: u64,
    /// Batches.
    pub batches: u64,
}

/// Rows, bytes and batches summed over a data topic's control records (zero before the
/// control topic exists).
pub fn totals(kafka: &KafkaConfig, data_topic: &str) -> Result<Totals> {
    if !exists(kafka, &format!("{data_topic}.control")) {
        return Ok(Totals::default());
    }
    Ok(controls(kafka, data_topic)?.iter().fold(Totals::default(), |sum, control| Totals {
        rows: sum.rows + control.rows,
        bytes: sum.bytes + control.metrics.bytes,
        batches: sum.batches + 1,
    }))
}

/// Whether `topic` exists with at least one partition.
pub fn exists(kafka: &KafkaConfig, topic: &str) -> bool {
    let Ok(consumer) = consumer(kafka) else { return false };
    consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .map(|metadata| mssql_cdc_core::kafka::admin::topic_ready(&metadata, topic))
        .unwrap_or(false)
}

/// Creates `topic` with `partitions` (an existing topic is fine).
pub async fn create_topic(kafka: &KafkaConfig, topic: &str, partitions: i32) -> Result<()> {
    mssql_cdc_core::kafka::admin::ensure_topics(kafka, &[(topic, partitions)]).await.map_err(|error| Error::Failed(error.to_string()))
}

/// Waits up to `timeout` until `topic` exists.
pub fn wait_for_topic(kafka: &KafkaConfig, topic: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !exists(kafka, topic) {
        if Instant::now() >= deadline {
            return Err(Error::Failed(format!("{topic} did not appear within {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}
