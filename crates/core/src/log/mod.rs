//! The Kafka log contract, shared by the source (which writes the log) and the sinks (which
//! read it): topic names, the record layout of data topics, the control record, and the
//! encodings (JSON, Avro in the Confluent wire format with a schema registry).
//!
//! `docs/architecture.md` explains the contract; `docs/connectors/mssql-source.md` lists every
//! field and encoding.

pub mod control;
pub mod debezium;
pub mod decode;
pub mod encode;
pub mod format;
pub mod registry;
pub mod schema;
pub mod topic;

pub use control::{ControlRecord, Event, PartitionRange, SourceMetrics};
pub use format::{Encoding, Envelope, RecordFormat, RegistrySettings, SchemaRegistryConfig};
pub use schema::{Column, ColumnType, TableSchema};
