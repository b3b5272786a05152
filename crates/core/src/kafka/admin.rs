//! Topic administration: create topics when they are missing, as Kafka Connect does for its
//! own topics. One function for the source's data and control topics, the bronze sink's
//! dead-letter topic and the test kit.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::{ClientError, KafkaConfig};

/// Creating topics failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The client could not be configured.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The request failed (broker unreachable, timeout).
    #[error("creating topics: {0}")]
    Request(#[from] KafkaError),
    /// The broker refused a topic.
    #[error("creating topic `{topic}`: {code}")]
    Refused {
        /// The topic.
        topic: String,
        /// The broker's answer.
        code: RDKafkaErrorCode,
    },
}

/// Whether `metadata` shows `topic` ready for use: known, without error, with partitions.
pub fn topic_ready(metadata: &rdkafka::metadata::Metadata, topic: &str) -> bool {
    metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
}

/// The names of the topics on the cluster (internal ones, `__`-prefixed, left out). The
/// metadata request runs on the blocking pool.
pub async fn list_topics(kafka: &KafkaConfig) -> Result<Vec<String>, AdminError> {
    let consumer: rdkafka::consumer::BaseConsumer = kafka.client_config()?.create()?;
    let listed = tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::Consumer;
        consumer.fetch_metadata(None, std::time::Duration::from_secs(10)).map(|metadata| {
            metadata.topics().iter().filter(|t| t.error().is_none() && !t.name().starts_with("__")).map(|t| t.name().to_owned()).collect::<Vec<String>>()
        })
    })
    .await;
    match listed {
        Ok(result) => Ok(result?),
        Err(joined) => Err(AdminError::Request(KafkaError::Canceled)).inspect_err(|_| tracing::warn!(error = %joined, "listing topics was interrupted")),
    }
}

/// Creates each `(topic, partitions)` that does not exist yet, with the broker's default
/// replication; existing topics are left as they are.
pub async fn ensure_topics(kafka: &KafkaConfig, topics: &[(&str, i32)]) -> Result<(), AdminError> {
    let admin: AdminClient<DefaultClientContext> = kafka.client_config()?.create()?;
    let requests: Vec<NewTopic<'_>> = topics.iter().map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(-1))).collect();
    let results = admin.create_topics(&requests, &AdminOptions::new()).await;
    // rust-rdkafka's drop joins the admin client's polling thread, which wakes every 100 ms:
    // that wait is left to the blocking pool instead of the caller's start.
    tokio::task::spawn_blocking(move || drop(admin));
    for result in results? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(AdminError::Refused { topic, code }),
        }
    }
    Ok(())
}
