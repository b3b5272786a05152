//! The Kafka log contract: topic names and record formats shared by the source (which writes
//! the log) and the sinks (which read it). See `docs/architecture.md` for the contract; the
//! record layouts arrive with the source stage.

pub mod format;
pub mod topic;

pub use format::{RecordFormat, SchemaRegistryConfig};
