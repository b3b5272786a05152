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
//! ## The workspace
//!
//! The crates are the architecture (`docs/adr/0006-workspace-of-crates.md`):
//!
//! | crate | role |
//! |---|---|
//! | `mssql-cdc-types` | LSNs and SQL Server time zones, shared by the simulator and the pipeline |
//! | `mssql-cdc-sim` | the SQL Server simulator: T-SQL over tables, a log with LSNs, CDC and its jobs, TDS |
//! | `mssql-cdc-core` | configuration, the stage contract, the Kafka log contract, Kafka plumbing, telemetry |
//! | `mssql-cdc-source` | the `mssql-source` stage: SQL Server CDC → Kafka |
//! | `mssql-cdc-lake` | Delta plumbing, the facts table, the `delta-bronze` and `delta-silver` stages |
//! | `mssql-cdc-reconcile` | `mssql-cdc reconcile`: silver against its SQL Server table, by bucket counts and row hashes |
//! | `mssql-cdc-broker` | the embedded Kafka-protocol broker (tansu in-process), re-exported as [`broker`] |
//! | `mssql-cdc-testkit` | the test kit the end-to-end suites, `demo` and `bench` share |
//! | `mssql-cdc` (this one) | the registry of connector kinds ([`connectors`]), the worker that runs connectors and its management API ([`worker`]), and the binary's commands |
//!
//! ## Example
//!
//! Load and validate a connector file; every problem comes back with its key path:
//!
//! ```
//! use mssql_cdc::connectors::ConnectorConfig;
//! use mssql_cdc_core::config::Document;
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
pub use mssql_cdc_broker as broker;
pub mod connectors;
pub mod worker;
