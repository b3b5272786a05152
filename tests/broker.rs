//! The embedded broker is a real Kafka-protocol broker for librdkafka: idempotent produce,
//! consumer groups with rebalances, committed offsets, seeks, durable SQLite storage, TLS,
//! and `/metrics` + `/health`.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mssql_cdc_core::kafka::{KafkaConfig, SecurityProtocol};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::Message;
use support::{create_topic, unique, BrokerSpec, TestBroker};

const WAIT: Duration = Duration::from_secs(60);

async fn produce(kafka: &KafkaConfig, topic: &str, records: impl IntoIterator<Item = (String, String)>) {
    let producer: FutureProducer = kafka.client_config().unwrap().set("enable.idempotence", "true").create().unwrap();
    for (key, value) in records {
        producer
            .send(FutureRecord::to(topic).key(&key).payload(&value), Duration::from_secs(30))
            .await
            .map_err(|(error, _)| error)
            .expect("record acknowledged");
    }
}

fn consumer(kafka: &KafkaConfig, group: &str) -> StreamConsumer {
    kafka
        .client_config()
        .unwrap()
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

async fn receive(consumer: &StreamConsumer, count: usize) -> Vec<(String, String, i32, i64)> {
    let mut received = Vec::new();
    while received.len() < count {
        let message = tokio::time::timeout(WAIT, consumer.recv()).await.expect("a record within 60 s").unwrap();
        received.push((
            String::from_utf8(message.key().unwrap().to_vec()).unwrap(),
            String::from_utf8(message.payload().unwrap().to_vec()).unwrap(),
            message.partition(),
            message.offset(),
        ));
    }
    received
}

/// Invariant: a record read by its offset (the source and bronze read their control topic's
/// last record so on start) arrives also when it sits inside a record batch of tansu's memory
/// storage, which answers a fetch there with the batches that start after it.
#[tokio::test]
async fn a_record_inside_a_stored_batch_is_read_by_its_offset() {
    let broker = TestBroker::spawn(BrokerSpec { memory: true, ..BrokerSpec::default() }).unwrap();
    let topic = unique("record-at");
    create_topic(&broker.kafka(), &topic, 1).await;
    support::produce_one_batch(&broker.bootstrap, &topic, 40);
    let consumer: BaseConsumer = broker.kafka().client_config().unwrap().set("group.id", unique("record-at")).create().unwrap();
    for offset in [39, 20, 0] {
        let payload = mssql_cdc_core::kafka::seek::record_at(&consumer, &topic, 0, offset, Duration::from_secs(30)).unwrap();
        assert_eq!(payload.as_deref(), Some(format!("record {offset}").as_bytes()), "offset {offset}");
    }
}

/// Invariant: an idempotent producer's records all arrive, once each, in order per key.
#[tokio::test]
async fn idempotent_produce_round_trips_in_key_order() {
    let broker = TestBroker::start().unwrap();
    let kafka = broker.kafka();
    let topic = unique("roundtrip");
    create_topic(&kafka, &topic, 3).await;
    let records: Vec<(String, String)> = (0..600).map(|i| (format!("k{}", i % 20), format!("v{i}"))).collect();
    produce(&kafka, &topic, records.clone()).await;

    let consumer = consumer(&kafka, &unique("group"));
    consumer.subscribe(&[&topic]).unwrap();
    let received = receive(&consumer, records.len()).await;

    let values: BTreeSet<&str> = received.iter().map(|(_, value, _, _)| value.as_str()).collect();
    assert_eq!(values.len(), records.len(), "every record once");
    let mut per_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (key, value, _, _) in &received {
        per_key.entry(key).or_default().push(value[1..].parse().unwrap());
    }
    for (key, sequence) in per_key {
        assert!(sequence.windows(2).all(|pair| pair[0] < pair[1]), "key {key} out of order: {sequence:?}");
    }
}

fn assignment(consumer: &BaseConsumer) -> BTreeSet<i32> {
    consumer.assignment().unwrap().elements().iter().map(|element| element.partition()).collect()
}

/// Invariant: two members of a group split the partitions between them, and when one
/// leaves the other takes them all back.
#[tokio::test]
async fn consumer_group_rebalances_between_two_members() {
    let broker = TestBroker::start().unwrap();
    let kafka = broker.kafka();
    let topic = unique("group");
    create_topic(&kafka, &topic, 4).await;
    let group = unique("members");
    let member = |kafka: &KafkaConfig| -> BaseConsumer {
        kafka
            .client_config()
            .unwrap()
            .set("group.id", &group)
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500")
            .set("partition.assignment.strategy", "range")
            .create()
            .unwrap()
    };
    let first = member(&kafka);
    first.subscribe(&[&topic]).unwrap();
    let all: BTreeSet<i32> = (0..4).collect();
    let deadline = Instant::now() + WAIT;
    while assignment(&first) != all {
        assert!(Instant::now() < deadline, "first member never got every partition");
        first.poll(Duration::from_millis(100));
    }

    let second = member(&kafka);
    second.subscribe(&[&topic]).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        first.poll(Duration::from_millis(50));
        second.poll(Duration::from_millis(50));
        let (a, b) = (assignment(&first), assignment(&second));
        if !a.is_empty() && !b.is_empty() && a.is_disjoint(&b) && a.union(&b).copied().collect::<BTreeSet<_>>() == all {
            break;
        }
        assert!(Instant::now() < deadline, "no split after the second member joined: {a:?} / {b:?}");
    }

    drop(second);
    let deadline = Instant::now() + WAIT;
    while assignment(&first) != all {
        assert!(Instant::now() < deadline, "first member never took the partitions back");
        first.poll(Duration::from_millis(100));
    }
}

/// Invariant: a committed offset is where the group's next consumer starts.
#[tokio::test]
async fn committed_offsets_are_where_a_group_resumes() {
    let broker = TestBroker::start().unwrap();
    let kafka = broker.kafka();
    let topic = unique("commit");
    create_topic(&kafka, &topic, 1).await;
    produce(&kafka, &topic, (0..10).map(|i| ("k".to_owned(), format!("v{i}")))).await;
    let group = unique("committer");

    let first = consumer(&kafka, &group);
    first.subscribe(&[&topic]).unwrap();
    let received = receive(&first, 4).await;
    assert_eq!(received[3].1, "v3");
    let mut position = TopicPartitionList::new();
    position.add_partition_offset(&topic, 0, Offset::Offset(4)).unwrap();
    first.commit(&position, CommitMode::Sync).expect("commit");
    drop(first);

    let second = consumer(&kafka, &group);
    let committed = {
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(&topic, 0);
        second.committed_offsets(wanted, Duration::from_secs(30)).expect("fetch committed offsets")
    };
    assert_eq!(committed.find_partition(&topic, 0).unwrap().offset(), Offset::Offset(4));
    second.subscribe(&[&topic]).unwrap();
    let resumed = receive(&second, 1).await;
    assert_eq!((resumed[0].1.as_str(), resumed[0].3), ("v4", 4));
}

/// Invariant: a consumer can seek to any offset and read from exactly there.
#[tokio::test]
async fn seek_reads_from_the_chosen_offset() {
    let broker = TestBroker::start().unwrap();
    let kafka = broker.kafka();
    let topic = unique("seek");
    create_topic(&kafka, &topic, 1).await;
    produce(&kafka, &topic, (0..20).map(|i| ("k".to_owned(), format!("v{i}")))).await;

    let consumer = consumer(&kafka, &unique("seeker"));
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(&topic, 0, Offset::Offset(12)).unwrap();
    consumer.assign(&assignment).unwrap();
    let first = receive(&consumer, 1).await;
    assert_eq!((first[0].1.as_str(), first[0].3), ("v12", 12));
    consumer.seek(&topic, 0, Offset::Offset(5), Duration::from_secs(10)).expect("seek");
    let after_seek = receive(&consumer, 1).await;
    assert_eq!((after_seek[0].1.as_str(), after_seek[0].3), ("v5", 5));
}

/// Invariant: with SQLite storage a record written before a broker restart (even a SIGKILL)
/// is read after it.
#[tokio::test]
async fn sqlite_storage_survives_a_broker_restart() {
    let mut broker = TestBroker::spawn(BrokerSpec::default()).unwrap();
    let kafka = broker.kafka();
    let topic = unique("durable");
    create_topic(&kafka, &topic, 1).await;
    produce(&kafka, &topic, [("k".to_owned(), "before-restart".to_owned())]).await;
    broker.kill();

    broker.restart().unwrap();
    let consumer = consumer(&broker.kafka(), &unique("after"));
    consumer.subscribe(&[&topic]).unwrap();
    let received = receive(&consumer, 1).await;
    assert_eq!(received[0].1, "before-restart");
}

/// Invariant: a client using the worker's TLS settings reaches a broker serving a
/// self-signed certificate, verifying it against the configured CA file.
#[tokio::test]
async fn tls_listener_serves_clients_with_the_workers_security_settings() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = support::write_file(dir.path(), "broker.pem", &certified.cert.pem());
    let key = support::write_file(dir.path(), "broker.key", &certified.key_pair.serialize_pem());
    let broker = TestBroker::spawn(BrokerSpec {
        tls: Some((cert.clone(), key)),
        advertised_host: Some("localhost".to_owned()),
        ..BrokerSpec::default()
    }).unwrap();

    let mut kafka = broker.kafka();
    kafka.security_protocol = SecurityProtocol::Ssl;
    kafka.tls.ca_location = Some(cert);
    let topic = unique("tls");
    create_topic(&kafka, &topic, 1).await;
    produce(&kafka, &topic, [("k".to_owned(), "over-tls".to_owned())]).await;
    let consumer = consumer(&kafka, &unique("tls-reader"));
    consumer.subscribe(&[&topic]).unwrap();
    assert_eq!(receive(&consumer, 1).await[0].1, "over-tls");

    let (status, metrics) = support::http_get(broker.metrics.unwrap(), "/metrics");
    assert_eq!(status, 200);
    let accepted = metrics
        .lines()
        .find_map(|line| line.strip_prefix("mssql_cdc_broker_tls_connections_total "))
        .expect("the TLS connection counter is exported");
    assert!(accepted.trim().parse::<f64>().unwrap() >= 1.0, "{accepted}");
}

/// Invariant: the broker process answers `/health` with 200 once it accepts clients, and
/// `/metrics` in Prometheus text with the declared metric names.
#[tokio::test]
async fn broker_process_serves_health_and_metrics() {
    let broker = TestBroker::spawn(BrokerSpec::default()).unwrap();
    let address = broker.metrics.unwrap();
    let (status, body) = support::http_get(address, "/health");
    assert_eq!((status, body.trim()), (200, "{\"status\":\"ok\"}"));
    let (status, body) = support::http_get(address, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("# TYPE mssql_cdc_process_start_time_seconds gauge"), "{body}");
    let (status, _) = support::http_get(address, "/nothing-here");
    assert_eq!(status, 404);
}

/// Invariant: an independent client (Python confluent-kafka, used by later end-to-end
/// checks) reads what librdkafka wrote through the broker.
#[tokio::test]
async fn python_confluent_kafka_reads_the_brokers_records() {
    let broker = TestBroker::start().unwrap();
    let kafka = broker.kafka();
    let topic = unique("python");
    create_topic(&kafka, &topic, 1).await;
    produce(&kafka, &topic, (0..5).map(|i| (format!("k{i}"), format!("v{i}")))).await;
    let script = r#"
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3], "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[2]])
values = []
for _ in range(600):
    m = c.poll(0.1)
    if m is not None and m.error() is None:
        values.append(m.value().decode())
    if len(values) == 5:
        break
c.close()
print(",".join(values))
"#;
    let group = unique("py");
    let output = support::run_python(script, &[&broker.bootstrap, &topic, &group]);
    assert_eq!(output.trim(), "v0,v1,v2,v3,v4");
}
