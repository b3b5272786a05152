//! # mssql-cdc
//!
//! A Kafka-Connect-style change-data-capture pipeline for Microsoft SQL Server.
//!
//! A **source** stage reads SQL Server CDC and publishes commit-aligned change batches, every
//! row stamped with its LSN, to Kafka: a data topic per table and a control topic naming each
//! batch. **Sink** stages consume that log at their own pace into a bronze Delta table (every
//! change, plus one facts row per batch) and a silver Delta table (current state by key, with
//! the `finalized_until` verdict). Kafka decouples the read rate from each sink's write rate,
//! so several consumers share one CDC feed.
//!
//! ## Layout
//!
//! | module | role |
//! |---|---|
//! | [`config`] | worker and connector files, secrets, layered loading, problems with key paths |
//! | [`stage`] | the [`stage::ConnectorKind`] trait and the registry of kinds |
//! | [`source`] | source connectors (`mssql-source`) |
//! | [`sink`] | sink connectors (`delta-bronze`, `delta-silver`) |
//! | [`sim`] | the SQL Server simulator: T-SQL over tables, a log with LSNs, CDC and its jobs |
//! | [`log`] | the Kafka log contract: topic names, record formats |
//! | [`kafka`] | cluster settings and librdkafka client configuration |
//! | [`delta`] | Delta Lake plumbing shared by the sinks |
//! | `broker` | the embedded tansu Kafka-protocol broker (`mssql-cdc broker`; feature `embedded-broker`, on by default) |
//! | [`telemetry`] | metrics (names in one place), `/metrics` and `/health`, logs |
//!
//! ## Example
//!
//! Load and validate a connector file; every problem comes back with its key path:
//!
//! ```
//! use mssql_cdc::config::{ConnectorConfig, Document};
//!
//! let text = r#"
//!     name = "orders-bronze"
//!     kind = "delta-bronze"
//!     topic = "cdc.sales.dbo.orders"
//!     target = "./data/bronze/orders"
//!     app_id = "orders-bronze-v1"
//!     colour = "blue"
//! "#;
//! let problems = ConnectorConfig::from_document(Document::parse("orders.toml", text).unwrap())
//!     .unwrap_err();
//! assert_eq!(problems[0].key, "colour");
//! assert_eq!(problems[0].message, "unknown key");
//! ```

#[cfg(feature = "embedded-broker")]
pub mod broker;
pub mod config;
pub mod delta;
pub mod kafka;
pub mod log;
pub mod lsn;
pub mod sim;
pub mod sink;
pub mod source;
pub mod stage;
pub mod telemetry;
pub mod timezone;
