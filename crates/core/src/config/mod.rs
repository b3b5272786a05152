//! Configuration: the worker file, connector files, secrets, and the loader that layers
//! environment variables over files and reports every problem with its key path.
//!
//! Validation is pure (no network, no files beyond the one being read, no clock) and separate
//! from building a stage: a loaded connector (`mssql_cdc::connectors::ConnectorConfig`, in the
//! binary's crate, which knows every kind) has passed `validate()`, and secrets are only
//! resolved when a stage is built.

pub mod api;
pub mod load;
pub mod problem;
pub mod secret;
pub mod worker;

pub use api::ApiConfig;
pub use load::{Document, LoadError};
pub use problem::{Problem, Problems};
pub use secret::{Secret, SecretString};
pub use worker::WorkerConfig;
