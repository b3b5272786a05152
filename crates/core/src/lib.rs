//! # mssql-cdc-core
//!
//! What every stage of the pipeline shares, with no SQL Server client and no Delta Lake in
//! its dependencies:
//!
//! | module | role |
//! |---|---|
//! | [`config`] | worker files, secrets, the layered loader, problems with key paths |
//! | [`stage`] | the stage contract: [`stage::ConnectorKind`] (options, pure validation, build) and [`stage::Stage`] (run until cancelled) |
//! | [`log`] | the Kafka log contract: topic names, record formats, the control record, the schema registry client |
//! | [`kafka`] | cluster settings and librdkafka client configuration |
//! | [`telemetry`] | metrics (names in one place), `/metrics` and `/health`, logs |
//!
//! The stage crates build on it: `mssql-cdc-source` (SQL Server → Kafka) and `mssql-cdc-lake`
//! (Kafka → Delta). The registry that maps a connector file's `kind` to a stage lives above
//! them, in the `mssql-cdc` binary's crate, so nothing here depends on a stage.
//!
//! ## Example
//!
//! Load and validate a worker file; every problem comes back with its key path:
//!
//! ```
//! use mssql_cdc_core::config::{Document, WorkerConfig};
//!
//! let text = r#"
//!     [kafka]
//!     bootstrap_servers = "localhost:9092"
//!     colour = "blue"
//! "#;
//! let problems = WorkerConfig::from_document(&Document::parse("worker.toml", text).unwrap())
//!     .unwrap_err();
//! assert_eq!(problems[0].key, "kafka.colour");
//! assert_eq!(problems[0].message, "unknown key");
//! ```

pub mod config;
pub mod kafka;
pub mod log;
pub mod stage;
pub mod tables;
pub mod telemetry;
