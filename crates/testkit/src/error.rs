//! [`Error`]: what a test-kit helper could not do.

/// A test-kit helper failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Starting, signalling or reading a process or file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A Kafka client call failed.
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A TDS call failed.
    #[error("TDS `{sql}`: {source}")]
    Tds {
        /// The statement.
        sql: String,
        /// The cause.
        #[source]
        source: tiberius::error::Error,
    },
    /// Worker settings could not become client settings.
    #[error(transparent)]
    Client(#[from] mssql_cdc_core::kafka::ClientError),
    /// A record was not what it should be.
    #[error("{topic} offset {offset}: {source}")]
    Record {
        /// The topic.
        topic: String,
        /// The offset.
        offset: i64,
        /// The cause.
        #[source]
        source: mssql_cdc_core::log::control::ControlDecodeError,
    },
    /// Something did not happen in time, or a process exited when it should run.
    #[error("{0}")]
    Failed(String),
}

/// A test-kit result.
pub type Result<T> = std::result::Result<T, Error>;

/// An [`Error::Io`] saying what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
