//! Connector kinds and the registry that maps a file's `kind` to them.
//!
//! A kind is a folder (`src/source/<kind>/`, `src/sink/<kind>/`) whose options type implements
//! [`ConnectorKind`], one line in [`registry`], and a page in `docs/connectors/`. The stages
//! themselves (the code that runs a kind) are added by their own issues; until then a kind is
//! its configuration, validated by `mssql-cdc validate`.

pub mod registry;

use std::fmt::Debug;

use serde::de::DeserializeOwned;

use crate::config::problem::Problems;

/// The options of one connector kind.
///
/// Implementors must:
/// - derive `Deserialize` with `#[serde(default, deny_unknown_fields)]` and implement
///   `Default`, with required options as `Option`s, so the loader can report every problem in
///   one pass (a removed bad key must never cause a second error);
/// - document every field with its unit and default;
/// - check everything else in [`ConnectorKind::validate`], which is pure: no network, no
///   files, no clock.
pub trait ConnectorKind: DeserializeOwned + Debug + Default {
    /// The `kind` value that selects this type in a connector file.
    const KIND: &'static str;
    /// One line describing the kind.
    const SUMMARY: &'static str;

    /// Pushes every problem found, with keys relative to the file's root.
    fn validate(&self, problems: &mut Problems);
}
