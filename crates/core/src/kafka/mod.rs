//! Kafka plumbing shared by every stage: the worker's cluster settings and the librdkafka
//! client configuration built from them. The record formats that flow through Kafka (the log
//! contract) live in `crate::log`, added with the stages that write and read them.

pub mod admin;
pub mod blocking;
pub mod client;
pub mod config;
pub mod seek;

pub use client::ClientError;
pub use config::{KafkaConfig, SaslConfig, SaslMechanism, SecurityProtocol, TlsConfig};
