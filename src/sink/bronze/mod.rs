//! `delta-bronze`: Kafka to the bronze Delta table and the facts table, exactly once. This
//! folder holds its options; the sink arrives with its issue. See
//! `docs/connectors/delta-bronze.md`.

pub mod config;

pub use config::BronzeOptions;
