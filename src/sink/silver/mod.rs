//! `delta-silver`: apply_changes from bronze into silver and the `finalized_until` verdict.
//! This folder holds its options; the stage arrives with its issue. See
//! `docs/connectors/delta-silver.md`.

pub mod config;

pub use config::SilverOptions;
