//! # mssql-cdc-testkit
//!
//! The helpers the end-to-end suites (`tests/`), `mssql-cdc demo` and `mssql-cdc bench` share,
//! written once:
//!
//! | module | what |
//! |---|---|
//! | [`bin`] | where the `mssql-cdc` binary is |
//! | [`process`] | a child process with its log, stopped by SIGTERM or SIGKILL, its memory read from `/proc` |
//! | [`stage`] | a stage as an `mssql-cdc run` process, with its `/metrics` address |
//! | [`broker`] | the embedded broker as an `mssql-cdc broker` process (or an external one), restartable |
//! | [`sim`] | the simulator served over TDS as an `mssql-cdc sim serve` process, and workload processes |
//! | [`files`] | worker and connector files |
//! | [`kafka`] | topics read back to their ends, control records, topic checks |
//! | [`metrics`] | `/metrics` scraped over HTTP and summed by name |
//! | [`sql`] | SQL over TDS with tiberius: rows, statements, the maximum LSN |
//! | [`compare`] | a source table's rows against silver's, column by column under each type |
//! | [`view`] | the live view of a running pipeline, read from its metrics |
//! | [`stats`] | latencies and percentiles for the benchmarks |
//! | [`tls`] | a test CA and the server certificates it signs, as PEM files |
//!
//! It depends on the core and the simulator, never on the binary's crate, so the binary can
//! use it (for `demo` and `bench`) and the suites can too.
//!
//! ## Example
//!
//! ```
//! use mssql_cdc_testkit::files::{bronze_toml, Lake};
//!
//! let lake = Lake::local(std::path::Path::new("/tmp/lake"));
//! let text = bronze_toml("orders", "cdc.sales.dbo.orders", "orders-bronze-v1", &lake, "");
//! assert!(text.contains("target = \"/tmp/lake/orders-bronze\""));
//! assert!(text.contains("facts_table = \"/tmp/lake/facts\""));
//! ```

pub mod bin;
pub mod broker;
pub mod compare;
pub mod error;
pub mod files;
pub mod kafka;
pub mod metrics;
pub mod process;
pub mod sim;
pub mod sql;
pub mod stage;
pub mod stats;
pub mod tls;
pub mod view;

pub use error::{Error, Result};
