//! The Kafka side of the bronze sink: follow the control topic in order, read exactly the data
//! records a control record names, dead-letter undecodable records, and commit the control
//! offset to the consumer group (for lag tools only: the Delta `txn` versions are the
//! checkpoint).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::arrivals::Arrivals;
use super::error::BronzeError;
use super::records::DataRecord;
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::kafka::admin::topic_ready;
use mssql_cdc_core::kafka::blocking::off_runtime;
use mssql_cdc_core::stage::supervisor::wait_or_cancel;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::kafka::seek::{self, StepBack};
use mssql_cdc_core::log::control::{ControlRecord, PartitionRange};

/// How long a named record may take to arrive before the batch is declared incomplete.
const RANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a sink started before its topics exist looks for them again.
const TOPIC_POLL: Duration = Duration::from_millis(500);
/// The control consumer's `fetch.wait.max.ms`: the longest a caught-up fetch waits. Kafka
/// answers a fetch as soon as a record lands; the embedded broker holds it for the wait, so
/// the wait is added to a new record's latency there (librdkafka's 500 ms default cost up to
/// half a second per batch, 100 ms up to 100 ms). An idle sink sends about 1,000 / this
/// many fetches a second.
pub const CONTROL_FETCH_WAIT_MS: u64 = 25;

fn kafka(error: impl std::fmt::Display) -> BronzeError {
    BronzeError::Kafka(error.to_string())
}

/// Consumers of one feed. Its methods are `async`: each blocking librdkafka call runs on the
/// blocking pool ([`off_runtime`]). A clone shares the consumers.
#[derive(Clone)]
pub struct Feed {
    clients: Arc<Clients>,
}

/// The librdkafka handles, with the blocking calls on them.
struct Clients {
    control: BaseConsumer,
    data: BaseConsumer,
    dead_letters: Option<(ThreadedProducer<DefaultProducerContext>, String)>,
    control_topic: String,
    data_topic: String,
}

impl Feed {
    /// Consumers in group `app_id` (committed offsets only inform lag tools).
    pub fn new(
        cluster: &KafkaConfig,
        properties: &Properties,
        app_id: &str,
        data_topic: &str,
        control_topic: &str,
        dead_letter_topic: Option<&str>,
    ) -> Result<Self, BronzeError> {
        let mut config = cluster.client_config().map_err(kafka)?;
        // A new control record is wanted soon after it lands: a short long-poll bounds that
        // wait. A user's `properties` may override it.
        config.set("fetch.wait.max.ms", CONTROL_FETCH_WAIT_MS.to_string());
        for (key, value) in properties.iter() {
            config.set(key, value.to_string());
        }
        config
            .set("group.id", app_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false");
        let control: BaseConsumer = config.create().map_err(kafka)?;
        let mut data_config = config.clone();
        // The data consumer only reads ranges a control record names, which are already in the
        // log: a fetch must never wait for more.
        data_config.set("group.id", format!("{app_id}.data")).set("fetch.max.bytes", "52428800").set("fetch.wait.max.ms", "10");
        let data: BaseConsumer = data_config.create().map_err(kafka)?;
        let dead_letters = match dead_letter_topic {
            Some(topic) => {
                let mut producer = cluster.client_config().map_err(kafka)?;
                producer.set("enable.idempotence", "true").set("acks", "all");
                Some((producer.create().map_err(kafka)?, topic.to_owned()))
            }
            None => None,
        };
        let clients = Clients { control, data, dead_letters, control_topic: control_topic.to_owned(), data_topic: data_topic.to_owned() };
        Ok(Self { clients: Arc::new(clients) })
    }

    /// Creates the dead-letter topic (one partition) if it is missing, as Kafka Connect does.
    pub async fn ensure_dead_letter_topic(&self, cluster: &KafkaConfig) -> Result<(), BronzeError> {
        let Some((_, topic)) = &self.clients.dead_letters else { return Ok(()) };
        mssql_cdc_core::kafka::admin::ensure_topics(cluster, &[(topic, 1)]).await.map_err(kafka)
    }

    /// Waits until the control and data topics exist: compose and Kubernetes start services in
    /// any order, and the source creates the topics on its first run. Logs once while it
    /// waits. Returns `false` when cancelled first; a broker that cannot be reached is an
    /// error (a transient one: the stage is started again).
    pub async fn wait_for_topics(&self, cancel: &CancellationToken) -> Result<bool, BronzeError> {
        let mut logged = false;
        loop {
            if off_runtime(&self.clients, Clients::topics_exist).await? {
                return Ok(true);
            }
            if !logged {
                let (control_topic, data_topic) = (&self.clients.control_topic, &self.clients.data_topic);
                tracing::info!(control_topic = %control_topic, data_topic = %data_topic, "waiting for the feed's topics (the source creates them on its first run)");
                logged = true;
            }
            if !wait_or_cancel(TOPIC_POLL, cancel).await {
                return Ok(false);
            }
        }
    }

    /// The batch id of the control topic's last record, if any.
    pub async fn last_batch_id(&self) -> Result<Option<u64>, BronzeError> {
        off_runtime(&self.clients, Clients::last_batch_id).await
    }

    /// The offset committed for the control topic, if any (where to look first).
    pub async fn committed(&self) -> Option<i64> {
        off_runtime(&self.clients, |clients| Ok::<_, BronzeError>(clients.committed())).await.ok().flatten()
    }

    /// Follows the control topic from `offset` (no network wait: librdkafka assigns locally).
    pub fn assign_control(&self, offset: i64) -> Result<(), BronzeError> {
        self.clients.assign_control(offset)
    }

    /// The next control record, if one arrives within `timeout`. A record that is not a
    /// control record stops the sink, naming its offset.
    pub async fn next_control(&self, timeout: Duration) -> Result<Option<(i64, ControlRecord)>, BronzeError> {
        off_runtime(&self.clients, move |clients| clients.next_control(timeout)).await
    }

    /// Exactly the records of `ranges`, in partition and offset order.
    pub async fn read_ranges(&self, ranges: &[PartitionRange]) -> Result<Vec<DataRecord>, BronzeError> {
        let ranges = ranges.to_vec();
        off_runtime(&self.clients, move |clients| Ok(clients.read_spans(&ranges)?.into_values().collect())).await
    }

    /// Exactly the records of `ranges` (checked as [`Feed::read_ranges`] checks them), sent
    /// on `chunks` in chunks of at most `chunk` as they arrive, so that no more than a chunk
    /// or two is held at once. Stops (with an error) when `chunks` is closed.
    pub async fn stream_ranges(&self, ranges: Vec<PartitionRange>, chunk: usize, chunks: tokio::sync::mpsc::Sender<Vec<DataRecord>>) -> Result<(), BronzeError> {
        off_runtime(&self.clients, move |clients| {
            let mut buffer = Vec::with_capacity(chunk.min(100_000));
            let closed = || BronzeError::Kafka("the batch's writer stopped reading its records".into());
            clients.visit_spans(&ranges, &mut |record| {
                buffer.push(record);
                if buffer.len() >= chunk.max(1) {
                    chunks.blocking_send(std::mem::take(&mut buffer)).map_err(|_| closed())?;
                }
                Ok(())
            })?;
            if !buffer.is_empty() {
                chunks.blocking_send(buffer).map_err(|_| closed())?;
            }
            Ok(())
        })
        .await
    }

    /// Exactly the records of each batch's `ranges` (one list per batch, in partition and
    /// offset order), read in one pass per partition: from the first batch's first offset to
    /// the last batch's last, skipping what lies between the ranges (orphans, duplicates).
    pub async fn read_group(&self, batches: Vec<Vec<PartitionRange>>) -> Result<Vec<Vec<DataRecord>>, BronzeError> {
        off_runtime(&self.clients, move |clients| {
            let all: Vec<PartitionRange> = batches.iter().flatten().cloned().collect();
            let mut found = clients.read_spans(&all)?;
            Ok(batches
                .iter()
                .map(|ranges| {
                    let mut records = Vec::new();
                    for range in ranges.iter().filter(|r| r.records > 0) {
                        let keys: Vec<(i32, i64)> = found.range((range.partition, range.first_offset)..=(range.partition, range.last_offset)).map(|(key, _)| *key).collect();
                        records.extend(keys.iter().filter_map(|key| found.remove(key)));
                    }
                    records
                })
                .collect())
        })
        .await
    }

    /// Queues an undecodable record for the dead-letter topic with Kafka Connect's error
    /// headers (no wait; [`Feed::flush_dead_letters`] waits for them).
    pub fn dead_letter(&self, record: &DataRecord, reason: &str) -> Result<(), BronzeError> {
        self.clients.dead_letter(record, reason)
    }

    /// Waits for dead-lettered records to be acknowledged.
    pub async fn flush_dead_letters(&self) -> Result<(), BronzeError> {
        off_runtime(&self.clients, Clients::flush_dead_letters).await
    }

    /// Records progress in the consumer group: the next control offset to read (no wait).
    pub fn commit(&self, next_offset: i64) {
        self.clients.commit(next_offset);
    }

    /// Records behind the end of the control topic, from `offset`.
    pub async fn behind(&self, next_offset: i64) -> Option<i64> {
        off_runtime(&self.clients, move |clients| Ok::<_, BronzeError>(clients.behind(next_offset))).await.ok().flatten()
    }
}

/// Where a read fetches its partitions again from (see [`seek`] for the brokers that need
/// it). A partition is fetched again, from further back each time ([`StepBack`]), when a
/// record arrives past a named record that has not (the fetch skipped it), or when it has
/// delivered nothing for [`Rewind::SILENT`] since it was last assigned. Records before the
/// ranges are skipped as any record outside them is.
struct Rewind {
    partitions: BTreeMap<i32, Cursor>,
    logged: bool,
}

/// One partition of a read: where it was last assigned, when, whether anything arrived since,
/// and how far back the next step goes.
struct Cursor {
    assigned: i64,
    at: Instant,
    delivered: bool,
    back: StepBack,
}

impl Rewind {
    /// How long a partition may deliver nothing after an assignment before it is fetched
    /// again from further back. Longer than [`seek::STALL`]: a slow broker's first fetch must
    /// not look like a skip.
    const SILENT: Duration = Duration::from_secs(3);

    /// Each partition as assigned at `starts` (partition, offset).
    fn new(starts: impl Iterator<Item = (i32, i64)>) -> Self {
        let now = Instant::now();
        let partitions = starts.map(|(partition, assigned)| (partition, Cursor { assigned, at: now, delivered: false, back: StepBack::default() })).collect();
        Self { partitions, logged: false }
    }

    /// Notes that `partition` delivered a record.
    fn delivered(&mut self, partition: i32) {
        if let Some(cursor) = self.partitions.get_mut(&partition) {
            cursor.delivered = true;
        }
    }

    /// The partitions that delivered nothing for [`Self::SILENT`] since they were assigned.
    fn silent(&self) -> Vec<i32> {
        self.partitions.iter().filter(|(_, cursor)| !cursor.delivered && cursor.at.elapsed() > Self::SILENT).map(|(partition, _)| *partition).collect()
    }

    /// The offset to fetch `partition` from next, its first missing offset being `missing`;
    /// `None` when it cannot go further back (or was never part of the read). Either way the
    /// partition's silence is counted afresh.
    fn step(&mut self, partition: i32, missing: i64) -> Option<i64> {
        let cursor = self.partitions.get_mut(&partition)?;
        cursor.at = Instant::now();
        cursor.delivered = false;
        let start = cursor.back.next(cursor.assigned, missing)?;
        cursor.assigned = start;
        Some(start)
    }
}

impl Clients {
    /// Whether the control and data topics both exist with partitions.
    fn topics_exist(&self) -> Result<bool, BronzeError> {
        let metadata = self.control.fetch_metadata(None, Duration::from_secs(10)).map_err(kafka)?;
        Ok(topic_ready(&metadata, &self.control_topic) && topic_ready(&metadata, &self.data_topic))
    }

    /// The batch id of the control topic's last record, if any.
    fn last_batch_id(&self) -> Result<Option<u64>, BronzeError> {
        let (low, high) = self.control.fetch_watermarks(&self.control_topic, 0, Duration::from_secs(30)).map_err(kafka)?;
        if high <= low {
            return Ok(None);
        }
        let Some(payload) = seek::record_at(&self.control, &self.control_topic, 0, high - 1, Duration::from_secs(30)).map_err(kafka)? else {
            return Err(BronzeError::Kafka(format!("could not read the last record of `{}` (offset {}) within 30 s", self.control_topic, high - 1)));
        };
        let record = ControlRecord::decode(&payload).map_err(|e| BronzeError::BadControl { topic: self.control_topic.clone(), offset: high - 1, reason: e.to_string() })?;
        Ok(Some(record.batch_id))
    }

    /// The offset committed for the control topic, if any (where to look first).
    fn committed(&self) -> Option<i64> {
        let mut list = TopicPartitionList::new();
        list.add_partition(&self.control_topic, 0);
        let committed = self.control.committed_offsets(list, Duration::from_secs(10)).ok()?;
        match committed.find_partition(&self.control_topic, 0)?.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        }
    }

    /// Follows the control topic from `offset`.
    fn assign_control(&self, offset: i64) -> Result<(), BronzeError> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.control_topic, 0, Offset::Offset(offset)).map_err(kafka)?;
        self.control.assign(&list).map_err(kafka)
    }

    /// The next control record, if one arrives within `timeout`. A record that is not a
    /// control record stops the sink, naming its offset.
    fn next_control(&self, timeout: Duration) -> Result<Option<(i64, ControlRecord)>, BronzeError> {
        match self.control.poll(timeout) {
            None => Ok(None),
            Some(Err(KafkaError::PartitionEOF(_))) => Ok(None),
            Some(Err(error)) => Err(kafka(error)),
            Some(Ok(message)) => {
                let offset = message.offset();
                let record = ControlRecord::decode(message.payload().unwrap_or_default()).map_err(|e| BronzeError::BadControl {
                    topic: self.control_topic.clone(),
                    offset,
                    reason: e.to_string(),
                })?;
                Ok(Some((offset, record)))
            }
        }
    }

    /// Exactly the records of `ranges` (several may share a partition), by partition and
    /// offset; each partition is read once, from its first range's first offset.
    fn read_spans(&self, ranges: &[PartitionRange]) -> Result<BTreeMap<(i32, i64), DataRecord>, BronzeError> {
        let mut out: BTreeMap<(i32, i64), DataRecord> = BTreeMap::new();
        self.visit_spans(ranges, &mut |record| {
            out.insert((record.partition, record.offset), record);
            Ok(())
        })?;
        Ok(out)
    }

    /// Hands every record of `ranges` to `visit`, each once, as it arrives; fails when a range
    /// does not hold the records its control record names.
    fn visit_spans(&self, ranges: &[PartitionRange], visit: &mut dyn FnMut(DataRecord) -> Result<(), BronzeError>) -> Result<(), BronzeError> {
        // Which offsets of each range arrived, and how many records each partition still owes.
        let mut arrivals = Arrivals::new(ranges);
        if arrivals.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::new();
        for (partition, first) in arrivals.starts() {
            list.add_partition_offset(&self.data_topic, partition, Offset::Offset(first)).map_err(kafka)?;
        }
        self.data.assign(&list).map_err(kafka)?;
        let mut last_progress = Instant::now();
        let mut rewind = Rewind::new(arrivals.starts());
        // A partition is done when every record its ranges name is in. Its end is not judged
        // by the offsets seen: right after `assign`, a record the consumer had fetched for an
        // earlier read may still arrive, past the new ranges, before their own records do.
        while arrivals.any_left() {
            for partition in rewind.silent() {
                if arrivals.left(partition) > 0 {
                    self.rewind(&mut rewind, &mut arrivals, partition, None)?;
                }
            }
            match self.data.poll(Duration::from_millis(200)) {
                None | Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(error)) => return Err(kafka(error)),
                Some(Ok(message)) => {
                    let (partition, offset) = (message.partition(), message.offset());
                    rewind.delivered(partition);
                    if arrivals.first_time(partition, offset) {
                        visit(DataRecord { partition, offset, value: message.payload().unwrap_or_default().to_vec() })?;
                        last_progress = Instant::now();
                    }
                    // A partition's records arrive in offset order: one past a named record
                    // that has not arrived means the fetch skipped it.
                    if arrivals.first_missing(partition).is_some_and(|missing| missing < offset) {
                        self.rewind(&mut rewind, &mut arrivals, partition, Some(offset))?;
                    }
                }
            }
            if last_progress.elapsed() > RANGE_TIMEOUT {
                let missing: Vec<String> = arrivals.pending().map(|(p, left, spans)| format!("{}/{} {:?} ({left} records not found)", self.data_topic, p, spans)).collect();
                return Err(BronzeError::MissingRecords { detail: missing.join(", ") });
            }
        }
        if let Some(range) = arrivals.ranges().find(|range| range.count != range.records) {
            return Err(BronzeError::MissingRecords {
                detail: format!("{}/{} offsets {}..={}: {} records, the control record says {}", self.data_topic, range.partition, range.first, range.last, range.count, range.records),
            });
        }
        Ok(())
    }

    /// Fetches `partition` again from an earlier offset (a seek: the records it had fetched
    /// and not delivered are dropped), when it can still go back. `past` is the offset of the
    /// record that showed a skip; `None` when the partition has delivered nothing since its
    /// last (re)assignment (logged at debug level: a slow broker looks the same).
    fn rewind(&self, rewind: &mut Rewind, arrivals: &mut Arrivals, partition: i32, past: Option<i64>) -> Result<(), BronzeError> {
        let Some(missing) = arrivals.first_missing(partition) else { return Ok(()) };
        let Some(start) = rewind.step(partition, missing) else { return Ok(()) };
        match past {
            Some(past) if !rewind.logged => {
                rewind.logged = true;
                tracing::warn!(topic = %self.data_topic, partition, missing, past, from = start, "a fetch skipped named records: reading the partition again from an earlier offset (a broker that answers a fetch inside a stored batch with the next batch skips the rest of that batch)");
            }
            _ => tracing::debug!(topic = %self.data_topic, partition, missing, from = start, "no named record arrived: reading the partition again from an earlier offset"),
        }
        self.data.seek(&self.data_topic, partition, Offset::Offset(start), Duration::from_secs(10)).map_err(kafka)
    }

    /// Sends an undecodable record to the dead-letter topic with Kafka Connect's error headers.
    fn dead_letter(&self, record: &DataRecord, reason: &str) -> Result<(), BronzeError> {
        let Some((producer, topic)) = &self.dead_letters else { return Ok(()) };
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header { key: "__connect.errors.topic", value: Some(self.data_topic.as_str()) })
            .insert(Header { key: "__connect.errors.partition", value: Some(partition.as_str()) })
            .insert(Header { key: "__connect.errors.offset", value: Some(offset.as_str()) })
            .insert(Header { key: "__connect.errors.exception.message", value: Some(reason) });
        producer.send(BaseRecord::<(), _>::to(topic).payload(&record.value).headers(headers)).map_err(|(e, _)| kafka(e))
    }

    /// Waits for dead-lettered records to be acknowledged.
    fn flush_dead_letters(&self) -> Result<(), BronzeError> {
        match &self.dead_letters {
            Some((producer, _)) => producer.flush(Duration::from_secs(60)).map_err(kafka),
            None => Ok(()),
        }
    }

    /// Records progress in the consumer group: the next control offset to read.
    fn commit(&self, next_offset: i64) {
        let mut list = TopicPartitionList::new();
        if list.add_partition_offset(&self.control_topic, 0, Offset::Offset(next_offset)).is_ok()
            && let Err(error) = self.control.commit(&list, CommitMode::Async) {
                tracing::debug!(error = %error, "committing the control offset failed (informational only)");
            }
    }

    /// Records behind the end of the control topic, from `offset`.
    fn behind(&self, next_offset: i64) -> Option<i64> {
        self.control.fetch_watermarks(&self.control_topic, 0, Duration::from_secs(5)).ok().map(|(_, high)| (high - next_offset).max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: a rewind steps back each partition on its own (64, then 256, then 1,024
    /// records before its first missing offset), stops at offset 0, never touches a partition
    /// the read did not assign, and counts a partition's silence afresh after each step.
    #[test]
    fn rewinds_step_back_each_partition_down_to_offset_zero() {
        let mut rewind = Rewind::new([(0, 5_000), (1, 100)].into_iter());
        assert_eq!(rewind.step(0, 5_010), Some(4_936));
        assert_eq!(rewind.step(0, 5_010), Some(4_680));
        assert_eq!(rewind.step(1, 150), Some(36));
        assert_eq!(rewind.step(1, 150), Some(0));
        assert_eq!(rewind.step(1, 150), None, "partition 1 is at 0 already");
        assert_eq!(rewind.step(0, 5_010), Some(3_656), "partition 0 steps on its own");
        assert_eq!(rewind.step(7, 10), None, "a partition the read never assigned");
        assert!(rewind.silent().is_empty(), "just stepped: not silent yet");
        rewind.partitions.values_mut().for_each(|cursor| cursor.at -= Rewind::SILENT * 2);
        rewind.delivered(0);
        assert_eq!(rewind.silent(), vec![1], "only the partition that delivered nothing");
    }
}
