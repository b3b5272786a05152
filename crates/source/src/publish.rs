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
use rdkafka::ClientContext;

use super::error::SourceError;
use mssql_cdc_core::kafka::admin;
use mssql_cdc_core::kafka::blocking::off_runtime;
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::control::{ControlRecord, PartitionRange};

/// The delivery reports of one *set* of records: how many were queued and settled, where the
/// acknowledged ones landed.
#[derive(Debug, Default)]
struct Acks {
    queued: u64,
    settled: u64,
    partitions: BTreeMap<i32, PartitionRange>,
    errors: Vec<String>,
    /// Handed off to [`Producing::finish_set`] by [`Publisher::settle_in_background`]: the
    /// next [`Publisher::begin`] keeps it.
    claimed: bool,
}

impl Acks {
    /// How many failed deliveries a set's error names; the rest are counted in `settled` only.
    const ERRORS_KEPT: usize = 10;

    /// Records a failed delivery of `topic`/`partition`, keeping the first few messages.
    fn fail(&mut self, topic: &str, partition: i32, reason: impl std::fmt::Display) {
        if self.errors.len() < Self::ERRORS_KEPT {
            self.errors.push(format!("{topic} partition {partition}: {reason}"));
        }
    }
}

/// The open sets by number. Each record carries its set's number as its delivery opaque, so a
/// late report of an abandoned set (no longer open) never counts towards another.
#[derive(Debug, Default)]
struct Sets {
    /// The set queueing jobs send to (the last one begun).
    current: usize,
    next: usize,
    open: BTreeMap<usize, Acks>,
}

impl Sets {
    /// Opens a set that is not the current one (a control record's).
    fn open_new(&mut self) -> usize {
        self.next = self.next.wrapping_add(1);
        self.open.insert(self.next, Acks::default());
        self.next
    }

    /// Opens a new current set; the previous current set is abandoned unless claimed.
    fn begin(&mut self) {
        let previous = self.current;
        if self.open.get(&previous).is_some_and(|acks| !acks.claimed) {
            self.open.remove(&previous);
        }
        self.current = self.open_new();
    }

    /// Claims the current set for a later wait; returns its number.
    fn claim(&mut self) -> usize {
        let current = self.current;
        if let Some(acks) = self.open.get_mut(&current) {
            acks.claimed = true;
        }
        current
    }

    /// The current set, unless it was claimed (its own task waits for it).
    fn unclaimed_current(&self) -> Option<usize> {
        self.open.get(&self.current).filter(|acks| !acks.claimed).map(|_| self.current)
    }
}

/// The acknowledgements and the signal that a set has settled.
#[derive(Default)]
struct AckState {
    sets: Mutex<Sets>,
    settled: Condvar,
}

impl AckState {
    fn lock(&self) -> MutexGuard<'_, Sets> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Producer callbacks: fold each delivery report into its set's [`Acks`].
struct AckContext {
    state: Arc<AckState>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, set: usize) {
        let mut sets = self.state.lock();
        let Some(acks) = sets.open.get_mut(&set) else { return };
        acks.settled += 1;
        match result {
            // A delivery without an offset (librdkafka reports -1 when a retry finds the
            // record already written, e.g. across a broker restart) cannot be named in a
            // control record: the set fails and the batch is published again.
            Ok(message) if message.offset() < 0 => acks.fail(message.topic(), message.partition(), "acknowledged without an offset"),
            Ok(message) => {
                let (partition, offset) = (message.partition(), message.offset());
                let range = acks.partitions.entry(partition).or_insert(PartitionRange { partition, first_offset: offset, last_offset: offset, records: 0 });
                range.first_offset = range.first_offset.min(offset);
                range.last_offset = range.last_offset.max(offset);
                range.records += 1;
            }
            Err((error, message)) => acks.fail(message.topic(), message.partition(), error),
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
    /// Held by each queueing job while it sends: jobs queue their records in the order they
    /// were started, also those left running in the background (tokio's mutex is fair).
    lane: Arc<tokio::sync::Mutex<()>>,
}

impl Publisher {
    /// An idempotent producer (`acks=all`, `enable.idempotence=true`), keyed records spread by
    /// the Java client's murmur2 partitioner so per-key order holds across clients.
    pub fn new(cluster: &KafkaConfig, properties: &Properties, client_id: &str) -> Result<Self, SourceError> {
        Ok(Self { producer: Arc::new(Producing::new(cluster, properties, client_id)?), cluster: cluster.clone(), lane: Arc::default() })
    }

    /// Creates the data topic (`partitions`) and the control topic (one partition) if missing.
    /// Then the producer connects in the background ([`Producing::connect`]), so that its
    /// producer id is in hand when the first batch is sent.
    pub async fn ensure_topics(&self, data: &str, partitions: i32, control: &str) -> Result<(), SourceError> {
        admin::ensure_topics(&self.cluster, &[(data, partitions), (control, 1)]).await.map_err(kafka)?;
        let (producer, topic) = (self.producer.clone(), data.to_owned());
        tokio::task::spawn_blocking(move || {
            if let Err(error) = producer.connect(&topic) {
                // A real fault shows again, with its cause, on the first send.
                tracing::debug!(topic, error = %error, "the producer's metadata request failed; its first send will retry");
            }
        });
        Ok(())
    }

    /// Starts a new set of records: forgets earlier acknowledgements, except those of a set
    /// handed off to [`Publisher::settle_in_background`].
    pub fn begin(&self) {
        self.producer.begin();
    }

    /// Runs `queue` (which encodes records and [`Producing::send_in`]s them to the set it is
    /// given, the current one) on the blocking pool, after every job started before it.
    pub async fn queue<R: Send + 'static>(&self, queue: impl FnOnce(&Producing, usize) -> Result<R, SourceError> + Send + 'static) -> Result<R, SourceError> {
        self.queue_behind(queue).await.wait().await
    }

    /// [`Publisher::queue`] without waiting for it: returns once the job holds its place in
    /// line (its records go before those of any job started after it, in every partition).
    pub async fn queue_behind<R: Send + 'static>(&self, queue: impl FnOnce(&Producing, usize) -> Result<R, SourceError> + Send + 'static) -> Queued<R> {
        let place = self.lane.clone().lock_owned().await;
        let set = self.producer.acks.lock().current;
        let producer = self.producer.clone();
        Queued(tokio::task::spawn_blocking(move || {
            let _place = place;
            queue(&producer, set)
        }))
    }

    /// Waits until every record of the current set is acknowledged and returns where they
    /// landed; any failed delivery fails the whole set. Nothing to wait for once the set was
    /// handed off.
    pub async fn finish(&self) -> Result<Vec<PartitionRange>, SourceError> {
        off_runtime(&self.producer, Producing::finish).await
    }

    /// Hands the current set off and returns at once: in the background, waits for the set's
    /// acknowledgements, makes the control record from where they landed (`record`, which may
    /// refuse them) and writes it. The next set can be queued meanwhile; its records land
    /// after these in every partition (one idempotent producer), and its control record must
    /// wait for [`InFlight::wait`] so that control records keep the batches' order.
    ///
    /// `queued` is the set's last queueing job, if still running; its result (the bytes it
    /// queued) is passed to `record` with the ranges.
    pub fn settle_in_background(
        &self,
        control_topic: &str,
        queued: Option<Queued<u64>>,
        record: impl FnOnce(Vec<PartitionRange>, u64) -> Result<ControlRecord, SourceError> + Send + 'static,
    ) -> InFlight {
        let set = self.producer.claim();
        let (producer, topic) = (self.producer.clone(), control_topic.to_owned());
        Queued(tokio::spawn(async move {
            let bytes = match queued {
                Some(queued) => queued.wait().await?,
                None => 0,
            };
            off_runtime(&producer, move |producer| {
                let record = record(producer.finish_set(set)?, bytes)?;
                producer.send_control(&topic, &record)?;
                Ok(record)
            })
            .await
        }))
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

/// Publishing work left running in the background: a queueing job
/// ([`Publisher::queue_behind`]) or a handed-off batch ([`InFlight`]).
pub struct Queued<R>(tokio::task::JoinHandle<Result<R, SourceError>>);

impl<R> Queued<R> {
    /// The work's result once done (for a batch, its control record once written); the
    /// error that stopped it otherwise. A panic resumes in the caller.
    pub async fn wait(self) -> Result<R, SourceError> {
        match self.0.await {
            Ok(result) => result,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(SourceError::Kafka(format!("publishing work in the background was stopped: {error}"))),
        }
    }
}

/// A batch handed off by [`Publisher::settle_in_background`]: its acknowledgements awaited
/// and its control record written in the background.
pub type InFlight = Queued<ControlRecord>;

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
            // Records waiting for the broker are the source's memory: 64 MiB of payloads keep the
            // broker busy (about 120k records of the bench's orders), where librdkafka's
            // 1 GiB default let one large batch take the source past 400 MB.
            .set("queue.buffering.max.kbytes", "65536")
            .set("message.max.bytes", "1000000");
        for (key, value) in properties.iter() {
            config.set(key, value.to_string());
        }
        // A record larger than the queue could never enter it: the queue holds at least one.
        let number = |key: &str| config.get(key).and_then(|v| v.trim().parse::<u64>().ok());
        if let (Some(largest), Some(kbytes)) = (number("message.max.bytes"), number("queue.buffering.max.kbytes")) {
            config.set("queue.buffering.max.kbytes", queue_kbytes(largest, kbytes).to_string());
        }
        // Topics are created by `ensure_topics` with their partition counts: a metadata
        // request of this producer must never have the broker create one with its defaults
        // (librdkafka lets producers ask for that unless told not to).
        config.set("enable.idempotence", "true").set("acks", "all").set("allow.auto.create.topics", "false");
        let acks = Arc::new(AckState::default());
        let producer = config.create_with_context(AckContext { state: acks.clone() }).map_err(kafka)?;
        Ok(Self { producer, acks, client, flush_timeout: Duration::from_secs(120) })
    }

    /// Brings a broker connection up with a metadata request for `topic`. An idempotent
    /// producer asks for its producer id once a connection is up, and librdkafka retries that
    /// every 500 ms while none is: without this, the first batch's records waited 500–1,000 ms
    /// for their first acknowledgement (measured on the embedded broker, ADR 0016).
    fn connect(&self, topic: &str) -> Result<(), SourceError> {
        self.producer.client().fetch_metadata(Some(topic), Duration::from_secs(10)).map(drop).map_err(kafka)
    }

    /// Starts a new set, the one queueing jobs send to: reports of earlier records no longer
    /// count, except those of sets handed off to [`Producing::finish_set`].
    fn begin(&self) {
        self.acks.lock().begin();
    }

    /// Hands the current set off to a later [`Producing::finish_set`]; returns its number.
    fn claim(&self) -> usize {
        self.acks.lock().claim()
    }

    /// Queues one record in `set` (an empty key is no key, as a Debezium event of a table
    /// without one has; a `None` value is a tombstone), waiting while librdkafka's queue is
    /// full.
    pub fn send_in(&self, set: usize, topic: &str, key: &[u8], value: Option<&[u8]>) -> Result<(), SourceError> {
        let mut record: BaseRecord<'_, [u8], [u8], usize> = BaseRecord::with_opaque_to(topic, set);
        record.key = (!key.is_empty()).then_some(key);
        record.payload = value;
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    if let Some(acks) = self.acks.lock().open.get_mut(&set) {
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

    /// Waits until every record of the current set has a delivery report; see
    /// [`Producing::finish_set`]. A set handed off is left to its own task: nothing to wait for.
    fn finish(&self) -> Result<Vec<PartitionRange>, SourceError> {
        let current = self.acks.lock().unclaimed_current();
        current.map_or(Ok(Vec::new()), |set| self.finish_set(set))
    }

    /// Waits until every record of `set` has a delivery report (the producer's own thread
    /// serves them and signals the last one), closes the set and returns where its records
    /// landed; any failed delivery fails the set. A set no longer open has nothing to wait for.
    ///
    /// Not `rd_kafka_flush`: with the threaded producer serving the reports, a flush's own
    /// poll found nothing to serve and slept its 100 ms slice after the last acknowledgement,
    /// twice a batch (data, then control): most of a 1,000-commit batch's time (ADR 0010).
    fn finish_set(&self, set: usize) -> Result<Vec<PartitionRange>, SourceError> {
        let deadline = Instant::now() + self.flush_timeout;
        let mut sets = self.acks.lock();
        loop {
            let Some(acks) = sets.open.get(&set) else { return Ok(Vec::new()) };
            if acks.settled >= acks.queued {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let message = format!(
                    "records not acknowledged: {} of {} without a delivery report after {} s",
                    acks.queued - acks.settled,
                    acks.queued,
                    self.flush_timeout.as_secs()
                );
                sets.open.remove(&set);
                return Err(SourceError::Kafka(message));
            }
            sets = self.acks.settled.wait_timeout(sets, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        let acks = sets.open.remove(&set).unwrap_or_default();
        drop(sets);
        if !acks.errors.is_empty() {
            return Err(SourceError::Kafka(format!("records not delivered: {}", acks.errors.join("; "))));
        }
        Ok(acks.partitions.into_values().collect())
    }

    /// Writes a control record in a set of its own (the current set is left alone) and waits
    /// for its acknowledgement; returns its offset.
    fn send_control(&self, topic: &str, record: &ControlRecord) -> Result<i64, SourceError> {
        let set = self.acks.lock().open_new();
        let value = serde_json::to_vec(record).map_err(kafka)?;
        let sent = self.send_in(set, topic, record.capture_instance.as_bytes(), Some(&value));
        let ranges = sent.and_then(|()| self.finish_set(set));
        self.acks.lock().open.remove(&set);
        ranges?.first().map(|r| r.last_offset).ok_or_else(|| SourceError::Kafka(format!("control record to `{topic}` not acknowledged")))
    }

    /// The record at `offset`, or the last one.
    fn control_at(&self, topic: &str, offset: Option<i64>) -> Result<Option<(i64, ControlRecord)>, SourceError> {
        let mut config = self.client.clone();
        config
            .set("group.id", format!("mssql-cdc-source-resume-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // The record is in the log already: a fetch need not wait for more (the embedded
            // broker holds a fetch for its whole wait, 500 ms by default).
            .set("fetch.wait.max.ms", "10");
        let consumer: BaseConsumer = config.create().map_err(kafka)?;
        let read = Self::read_control(&consumer, topic, offset);
        // Closing a consumer of a group waits out 100-ms polls: the stream need not.
        std::thread::spawn(move || drop(consumer));
        read
    }

    fn read_control(consumer: &BaseConsumer, topic: &str, offset: Option<i64>) -> Result<Option<(i64, ControlRecord)>, SourceError> {
        let timeout = Duration::from_secs(30);
        let (low, high) = consumer.fetch_watermarks(topic, 0, timeout).map_err(kafka)?;
        let wanted = offset.unwrap_or(high - 1);
        if high <= low || wanted < low || wanted >= high {
            return Ok(None);
        }
        let Some(payload) = mssql_cdc_core::kafka::seek::record_at(consumer, topic, 0, wanted, timeout).map_err(kafka)? else {
            return Err(SourceError::Kafka(format!("could not read the record of `{topic}` at offset {wanted} within 30 s")));
        };
        let record = ControlRecord::decode(&payload).map_err(|e| SourceError::BadControlRecord { topic: topic.to_owned(), offset: wanted, message: e.to_string() })?;
        Ok(Some((wanted, record)))
    }
}

/// The producer queue's size in KiB: `kbytes`, or enough for one record of `largest` bytes
/// when that is more (librdkafka answers "queue full" for good to a record larger than the
/// whole queue).
fn queue_kbytes(largest: u64, kbytes: u64) -> u64 {
    kbytes.max(largest.div_ceil(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as large as `message.max.bytes` allows always fits the queue, which otherwise
    /// keeps its size.
    #[test]
    fn the_queue_holds_at_least_one_largest_record() {
        assert_eq!(queue_kbytes(1_000_000, 65_536), 65_536);
        assert_eq!(queue_kbytes(100_000_000, 65_536), 97_657);
        assert_eq!(queue_kbytes(0, 65_536), 65_536);
    }

    /// A handed-off set survives the next `begin` (its task still waits for it) while an
    /// abandoned one is dropped, so its late reports count nowhere; each set is its own.
    #[test]
    fn begin_keeps_claimed_sets_and_drops_abandoned_ones() {
        let mut sets = Sets::default();
        sets.begin();
        let abandoned = sets.current;
        sets.begin();
        assert!(!sets.open.contains_key(&abandoned), "an unclaimed set is abandoned by the next begin");
        let handed_off = sets.claim();
        assert_eq!(sets.unclaimed_current(), None, "a claimed current set is not the caller's to wait for");
        sets.begin();
        assert!(sets.open.contains_key(&handed_off), "a claimed set stays open for its task");
        assert_ne!(sets.current, handed_off);
        assert_eq!(sets.unclaimed_current(), Some(sets.current));
        let control = sets.open_new();
        assert_ne!(control, sets.current, "a control record's set is never the current one");
        assert_eq!(sets.open.len(), 3);
    }
}
