//! Sink connectors: consume the Kafka log into Delta tables, and the facts table they share.

pub mod bronze;
pub mod facts;
pub mod silver;
