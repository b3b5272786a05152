//! # mssql-cdc-types
//!
//! The SQL Server CDC vocabulary that both the simulator and the pipeline speak, and nothing
//! else: [`lsn::Lsn`], SQL Server's 10-byte log sequence number whose byte order is log order,
//! and [`timezone`], SQL Server's Windows time-zone ids with the conversions between
//! server-local commit times and UTC.
//!
//! It sits at the bottom of the workspace so that the simulator (`mssql-cdc-sim`) and the
//! source stage (`mssql-cdc-source`) agree on these without depending on each other.
//!
//! ## Example
//!
//! ```
//! use mssql_cdc_types::lsn::Lsn;
//!
//! let lsn = Lsn::parse_hex("0x0000002200000010000a").unwrap();
//! assert_eq!(lsn.to_string(), "0x0000002200000010000A");
//! assert!(Lsn::ZERO < lsn);
//! ```

pub mod lsn;
pub mod timezone;
