//! Sink connectors: consume the Kafka log into Delta tables.

pub mod bronze;
pub mod silver;
