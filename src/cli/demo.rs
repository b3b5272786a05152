//! `mssql-cdc demo`: everything embedded, nothing to install.
//!
//! Today it starts the embedded broker and the `/metrics` listener, round-trips a number of
//! records through the broker with the same librdkafka clients the stages use, and prints
//! the rates. The simulator, source, bronze and silver stages join it with their issues.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use mssql_cdc::broker::{self, BrokerOptions, BrokerStorage};
use mssql_cdc::kafka::KafkaConfig;
use mssql_cdc::telemetry::{http, metrics, Health};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::Message;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Records to send through the embedded broker.
    #[arg(long, default_value_t = 50_000)]
    records: u64,
    /// Size of each record's value, bytes.
    #[arg(long, default_value_t = 200)]
    record_bytes: usize,
    /// Address of the `/metrics` and `/health` listener (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_listen: SocketAddr,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    let health = Health::default();
    let metrics_address = http::serve(args.metrics_listen, metrics::install(), health.clone(), shutdown.clone()).await?;
    let options = BrokerOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        advertised_host: None,
        storage: BrokerStorage::Memory,
        tls_cert: None,
        tls_key: None,
        cluster_id: "mssql-cdc-demo".to_owned(),
    };
    let broker = broker::start(&options).await?;
    health.set_ready(true);
    println!("embedded broker on {}, metrics on http://{metrics_address}/metrics", broker.address);

    let kafka = KafkaConfig { bootstrap_servers: broker.address.to_string(), ..KafkaConfig::default() };
    let topic = "demo.roundtrip";
    let admin: AdminClient<_> = kafka.client_config()?.create()?;
    for created in admin
        .create_topics(&[NewTopic::new(topic, 3, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .context("creating the demo topic")?
    {
        created.map_err(|(name, code)| anyhow::anyhow!("creating topic {name}: {code}"))?;
    }

    let producer: FutureProducer = kafka.client_config()?.set("enable.idempotence", "true").set("linger.ms", "5").create()?;
    let value = vec![b'x'; args.record_bytes];
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for index in 0..args.records {
        let key = index.to_string();
        let mut record = FutureRecord::to(topic).key(&key).payload(&value);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break pending.push_back(delivery),
                // The local queue is full: wait for the oldest delivery, then retry.
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    let oldest = pending.pop_front().context("queue full with nothing in flight")?;
                    oldest.await?.map_err(|(error, _)| error).context("producing")?;
                }
                Err((error, _)) => return Err(error).context("producing"),
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(error, _)| error).context("producing")?;
    }
    producer.flush(Duration::from_secs(30))?;
    let produce_secs = started.elapsed().as_secs_f64();

    let consumer: StreamConsumer = kafka
        .client_config()?
        .set("group.id", "mssql-cdc-demo")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    let started = Instant::now();
    let mut received = 0u64;
    while received < args.records {
        let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .context("no record for 60 s while consuming")??;
        anyhow::ensure!(message.payload().map(<[u8]>::len) == Some(args.record_bytes), "a record came back altered");
        received += 1;
    }
    let consume_secs = started.elapsed().as_secs_f64();
    let megabytes = (args.records as f64 * args.record_bytes as f64) / 1e6;
    println!(
        "produced {} records in {produce_secs:.2} s ({:.0} records/s, {:.1} MB/s)",
        args.records,
        args.records as f64 / produce_secs,
        megabytes / produce_secs
    );
    println!(
        "consumed {received} records in {consume_secs:.2} s ({:.0} records/s, {:.1} MB/s)",
        received as f64 / consume_secs,
        megabytes / consume_secs
    );
    println!("the CDC pipeline (simulator, source, bronze, silver) is not part of the demo yet: see README");
    // Close the clients before the broker so they do not report it gone.
    drop(consumer);
    drop(producer);
    drop(admin);
    shutdown.cancel();
    broker.stop().await;
    Ok(ExitCode::SUCCESS)
}
