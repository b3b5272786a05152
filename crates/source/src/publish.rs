//! The Kafka side of the source: topics, an idempotent producer that records where each
//! acknowledged record landed, and the control topic (written after the data, read on start).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::error::SourceError;
use mssql_cdc_core::kafka::admin;
use mssql_cdc_core::kafka::blocking::off_runtime;
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::control::{ControlRecord, PartitionRange};

/// The delivery reports of the records queued since the last [`Publisher::begin`] (one
/// *set*): how many were queued and settled, where the acknowledged ones landed.
#[derive(Debug, Default)]
struct Acks {
    /// The set's number; each record carries it as its delivery opaque, so a late report of an
    /// abandoned set never counts towards the current one.
    set: usize,
    queued: u64,
    settled: u64,
    partitions: BTreeMap<i32, PartitionRange>,
    errors: Vec<String>,
}

/// The acknowledgements and the signal that the current set has settled.
#[derive(Default)]
struct AckState {
    acks: Mutex<Acks>,
    settled: Condvar,
}

impl AckState {
    fn lock(&self) -> MutexGuard<'_, Acks> {
        self.acks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Producer callbacks: fold each delivery report into [`Acks`].
struct AckContext {
    state: Arc<AckState>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, set: usize) {
        let mut acks = self.state.lock();
        if set != acks.set {
            return;
        }
        acks.settled += 1;
        match result {
            Ok(message) => {
                let (partition, offset) = (message.partition(), message.offset());
                let range = acks.partitions.entry(partition).or_insert(PartitionRange { partition, first_offset: offset, last_offset: offset, records: 0 });
                range.first_offset = range.first_offset.min(offset);
                range.last_offset = range.last_offset.max(offset);
                range.records += 1;
            }
            Err((error, message)) => {
                if acks.errors.len() < 10 {
                    acks.errors.push(format!("{} partition {}: {error}", message.topic(), message.partition()));
                }
            }
        }
        if acks.settled >= acks.queued {
            self.state.settled.notify_all();
        }
    }
}

/// Publishes one stream's records. Its waiting methods are `async`: each blocking librdkafka
/// call (a flush, a full queue, the resume read) runs on the blocking pool ([`off_runtime`]).
pub struct Publisher {
    producer: Arc<Producing>,
    cluster: KafkaConfig,
}

impl Publisher {
    /// An idempotent producer (`acks=all`, `enable.idempotence=true`), keyed records spread by
    /// the Java client's murmur2 partitioner so per-key order holds across clients.
    pub fn new(cluster: &KafkaConfig, properties: &Properties, client_id: &str) -> Result<Self, SourceError> {
        Ok(Self { producer: Arc::new(Producing::new(cluster, properties, client_id)?), cluster: cluster.clone() })
    }

    /// Creates the data topic (`partitions`) and the control topic (one partition) if missing.
    pub async fn ensure_topics(&self, data: &str, partitions: i32, control: &str) -> Result<(), SourceError> {
        admin::ensure_topics(&self.cluster, &[(data, partitions), (control, 1)]).await.map_err(kafka)
    }

    /// Starts a new set of records: forgets earlier acknowledgements.
    pub fn begin(&self) {
        self.producer.begin();
    }

    /// Runs `queue` (which encodes records and [`Producing::send`]s them) on the blocking pool.
    pub async fn queue<R: Send + 'static>(&self, queue: impl FnOnce(&Producing) -> Result<R, SourceError> + Send + 'static) -> Result<R, SourceError> {
        off_runtime(&self.producer, queue).await
    }

    /// Waits until every queued record is acknowledged and returns where they landed; any
    /// failed delivery fails the whole set.
    pub async fn finish(&self) -> Result<Vec<PartitionRange>, SourceError> {
        off_runtime(&self.producer, Producing::finish).await
    }

    /// Writes a control record and waits for its acknowledgement; returns its offset.
    pub async fn send_control(&self, topic: &str, record: &ControlRecord) -> Result<i64, SourceError> {
        let (topic, record) = (topic.to_owned(), record.clone());
        off_runtime(&self.producer, move |producer| producer.send_control(&topic, &record)).await
    }

    /// Whether `topic` exists (with partitions) on the cluster.
    pub async fn topic_exists(&self, topic: &str) -> Result<bool, SourceError> {
        let topic = topic.to_owned();
        off_runtime(&self.producer, move |producer| {
            let metadata = producer.producer.client().fetch_metadata(Some(&topic), Duration::from_secs(30)).map_err(kafka)?;
            Ok(admin::topic_ready(&metadata, &topic))
        })
        .await
    }

    /// The last record of the control topic, if any.
    pub async fn last_control(&self, topic: &str) -> Result<Option<ControlRecord>, SourceError> {
        Ok(self.last_control_at(topic).await?.map(|(_, record)| record))
    }

    /// The last record of the control topic with its offset, if any.
    pub async fn last_control_at(&self, topic: &str) -> Result<Option<(i64, ControlRecord)>, SourceError> {
        let topic = topic.to_owned();
        off_runtime(&self.producer, move |producer| producer.control_at(&topic, None)).await
    }

    /// The control topic's record at `offset` (a chunked snapshot's plan), if the topic still
    /// holds it.
    pub async fn control_at(&self, topic: &str, offset: i64) -> Result<Option<ControlRecord>, SourceError> {
        let topic = topic.to_owned();
        Ok(off_runtime(&self.producer, move |producer| producer.control_at(&topic, Some(offset))).await?.map(|(_, record)| record))
    }
}

/// The producer's librdkafka handle and the acknowledgements it collects; its methods block.
pub struct Producing {
    producer: ThreadedProducer<AckContext>,
    acks: Arc<AckState>,
    client: ClientConfig,
    flush_timeout: Duration,
}

fn kafka(error: impl std::fmt::Display) -> SourceError {
    SourceError::Kafka(error.to_string())
}

impl Producing {
    fn new(cluster: &KafkaConfig, properties: &Properties, client_id: &str) -> Result<Self, SourceError> {
        let client = cluster.client_config().map_err(kafka)?;
        let mut config = client.clone();
        config
            .set("client.id", client_id)
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            .set("batch.size", "1000000")
            .set("queue.buffering.max.messages", "500000")
            .set("queue.buffering.max.kbytes", "1048576")
            .set("message.max.bytes", "1000000");
        for (key, value) in properties.iter() {
            config.set(key, value.to_string());
        }
        config.set("enable.idempotence", "true").set("acks", "all");
        let acks = Arc::new(AckState::default());
        let producer = config.create_with_context(AckContext { state: acks.clone() }).map_err(kafka)?;
        Ok(Self { producer, acks, client, flush_timeout: Duration::from_secs(120) })
    }

    /// Starts a new set: reports of earlier records no longer count.
    fn begin(&self) {
        let mut acks = self.acks.lock();
        *acks = Acks { set: acks.set.wrapping_add(1), ..Acks::default() };
    }

    /// Queues one record, waiting while librdkafka's queue is full.
    pub fn send(&self, topic: &str, key: &[u8], value: &[u8]) -> Result<(), SourceError> {
        let set = self.acks.lock().set;
        let mut record = BaseRecord::with_opaque_to(topic, set).key(key).payload(value);
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    let mut acks = self.acks.lock();
                    if acks.set == set {
                        acks.queued += 1;
                    }
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((error, _)) => return Err(kafka(error)),
            }
        }
    }

    /// Waits until every record of the set has a delivery report (the producer's own thread
    /// serves them and signals the last one), then returns where they landed.
    ///
    /// Not `rd_kafka_flush`: with the threaded producer serving the reports, a flush's own
    /// poll found nothing to serve and slept its 100 ms slice after the last acknowledgement,
    /// twice a batch (data, then control): most of a 1,000-commit batch's time (ADR 0010).
    fn finish(&self) -> Result<Vec<PartitionRange>, SourceError> {
        let deadline = Instant::now() + self.flush_timeout;
        let mut acks = self.acks.lock();
        while acks.settled < acks.queued {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SourceError::Kafka(format!(
                    "records not acknowledged: {} of {} without a delivery report after {} s",
                    acks.queued - acks.settled,
                    acks.queued,
                    self.flush_timeout.as_secs()
                )));
            }
            acks = self.acks.settled.wait_timeout(acks, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        let partitions = std::mem::take(&mut acks.partitions);
        let errors = std::mem::take(&mut acks.errors);
        (acks.queued, acks.settled) = (0, 0);
        drop(acks);
        if !errors.is_empty() {
            return Err(SourceError::Kafka(format!("records not delivered: {}", errors.join("; "))));
        }
        Ok(partitions.into_values().collect())
    }

    fn send_control(&self, topic: &str, record: &ControlRecord) -> Result<i64, SourceError> {
        self.begin();
        let value = serde_json::to_vec(record).map_err(kafka)?;
        self.send(topic, record.capture_instance.as_bytes(), &value)?;
        let ranges = self.finish()?;
        ranges.first().map(|r| r.last_offset).ok_or_else(|| SourceError::Kafka(format!("control record to `{topic}` not acknowledged")))
    }

    /// The record at `offset`, or the last one.
    fn control_at(&self, topic: &str, offset: Option<i64>) -> Result<Option<(i64, ControlRecord)>, SourceError> {
        let mut config = self.client.clone();
        config
            .set("group.id", format!("mssql-cdc-source-resume-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest");
        let consumer: BaseConsumer = config.create().map_err(kafka)?;
        let timeout = Duration::from_secs(30);
        let (low, high) = consumer.fetch_watermarks(topic, 0, timeout).map_err(kafka)?;
        let wanted = offset.unwrap_or(high - 1);
        if high <= low || wanted < low || wanted >= high {
            return Ok(None);
        }
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(topic, 0, Offset::Offset(wanted)).map_err(kafka)?;
        consumer.assign(&assignment).map_err(kafka)?;
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(message)) if message.offset() == wanted => {
                    let record = ControlRecord::decode(message.payload().unwrap_or_default()).map_err(|e| SourceError::BadControlRecord {
                        topic: topic.to_owned(),
                        offset: message.offset(),
                        message: e.to_string(),
                    })?;
                    return Ok(Some((wanted, record)));
                }
                Some(Ok(_)) | None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(error)) => return Err(kafka(error)),
            }
        }
        Err(SourceError::Kafka(format!("could not read the record of `{topic}` at offset {wanted} within 30 s")))
    }
}
