//! # mssql-cdc-lake
//!
//! The lake side of the pipeline: the only crate that depends on Delta Lake (delta-rs and
//! DataFusion).
//!
//! | module | role |
//! |---|---|
//! | [`delta`] | Delta plumbing: table locations, object-store settings, appends made idempotent by `txn` actions, SQL over tables |
//! | [`facts`] | the facts table: one row per batch and per event, shared by streams |
//! | [`bronze`] | the `delta-bronze` stage: the Kafka feed into bronze and facts, exactly once |
//! | [`silver`] | the `delta-silver` stage: apply_changes from bronze into silver, and the `finalized_until` verdict in the control table |
//!
//! Both stages implement `mssql_cdc_core::stage::ConnectorKind`; the `mssql-cdc` binary
//! registers them. The tables' columns are documented in `docs/tables.md`.
//!
//! ## Example
//!
//! Validate `delta-silver` options into settings without touching any table:
//!
//! ```
//! use mssql_cdc_core::config::Problems;
//! use mssql_cdc_core::stage::ConnectorKind;
//! use mssql_cdc_lake::silver::SilverOptions;
//!
//! let mut problems = Problems::under("");
//! assert!(SilverOptions::default().validate(&mut problems).is_none());
//! assert!(problems.into_vec().iter().any(|problem| problem.key == "bronze"));
//!
//! let options = SilverOptions {
//!     bronze: Some("./lake/bronze".into()),
//!     target: Some("./lake/silver".into()),
//!     app_id: Some("orders-silver".into()),
//!     control_table: Some("./lake/control".into()),
//!     facts_table: Some("./lake/facts".into()),
//!     ..SilverOptions::default()
//! };
//! let settings = options.validate(&mut Problems::under("")).expect("valid");
//! assert_eq!(settings.poll_interval, std::time::Duration::from_millis(1000));
//! ```

pub mod bronze;
pub mod delta;
pub mod facts;
pub mod fault;
pub mod silver;
pub mod tables;
