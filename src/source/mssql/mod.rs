//! `mssql-source`: SQL Server CDC to Kafka. This folder holds its options; the read loop
//! arrives with the source stage's issue. See `docs/connectors/mssql-source.md`.

pub mod config;

pub use config::MssqlSourceOptions;
