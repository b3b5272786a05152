//! [`ConnectorConfig`]: one connector file — `name`, `kind`, and the options of that kind.
//!
//! ```toml
//! name = "orders-source"
//! kind = "mssql-source"
//! # ... the options of `mssql-source`, at the top level ...
//! ```
//!
//! The kind selects the options type from the [`registry`]; unknown keys are errors, and every
//! problem is reported with its key path. This module sits above the stage crates (it names
//! every kind), so `mssql-cdc-core`'s configuration never depends on them.

use std::path::Path;

pub mod registry;

use mssql_cdc_core::config::load::{env_name, Document, LoadError, CONNECTOR_ENV_PREFIX};
use mssql_cdc_core::config::problem::{Problem, Problems};
use mssql_cdc_core::config::WorkerConfig;
use mssql_cdc_core::stage::board::TableBoard;
use mssql_cdc_core::stage::supervisor::supervise;
use mssql_cdc_core::stage::{StageContext, StageError};
use tokio_util::sync::CancellationToken;

pub use registry::{ConnectorSettings, KindEntry, KINDS};

/// A loaded, validated connector.
#[derive(Clone, Debug)]
pub struct ConnectorConfig {
    /// Unique name: letters, digits, `.`, `_` and `-`. It names the connector in logs, metrics
    /// and its environment overrides.
    pub name: String,
    /// Its `kind`, as registered.
    pub kind: &'static str,
    /// The validated settings of its kind.
    pub settings: ConnectorSettings,
}

impl ConnectorConfig {
    /// Loads a connector file with its `MSSQL_CDC_CONNECTOR__<NAME>__*` overrides.
    pub fn load(path: &Path) -> Result<Result<Self, Vec<Problem>>, LoadError> {
        let document = Document::read(path)?;
        Ok(Self::from_document(document))
    }

    /// Extracts and validates a connector from a parsed document.
    pub fn from_document(document: Document) -> Result<Self, Vec<Problem>> {
        let mut problems = Problems::under("");
        let name = document.string("name");
        match &name {
            None if document.has("name") => problems.invalid("name", "wrong type", "a string"),
            None => problems.missing("name", "a connector name such as \"orders-source\""),
            Some(name) if !is_valid_name(name) => {
                problems.invalid("name", "not a connector name", "letters, digits, '.', '_' and '-' (1 to 200 characters)")
            }
            Some(_) => {}
        }
        let document = match &name {
            Some(name) => document.with_env(&format!("{CONNECTOR_ENV_PREFIX}{}__", env_name(name))),
            None => document,
        };
        let kinds = registry::kind_names().join(", ");
        let mut registered = "";
        let settings = match document.string("kind") {
            None => {
                problems.missing("kind", format!("one of: {kinds}"));
                None
            }
            Some(kind) => match registry::find(&kind) {
                None => {
                    problems.invalid("kind", "unknown connector kind", format!("one of: {kinds}"));
                    None
                }
                Some(entry) => {
                    registered = entry.kind;
                    (entry.load)(&document.without(&["name", "kind"]), &mut problems)
                }
            },
        };
        match (name, settings) {
            (Some(name), Some(settings)) if problems.is_empty() => Ok(Self { name, kind: registered, settings }),
            _ => Err(problems.into_vec()),
        }
    }
}

impl ConnectorConfig {
    /// The task that runs this connector's stage under the supervisor, until `cancel` fires or
    /// it stops. The stage is built here, so what needs no network (secrets, formats) fails
    /// before anything starts; that stage is the first attempt, and the supervisor builds a
    /// fresh one for every retry.
    pub fn supervised(self, worker: &WorkerConfig, cancel: CancellationToken) -> Result<impl Future<Output = Result<(), StageError>> + Send + 'static, StageError> {
        self.supervised_with(worker, cancel, TableBoard::default())
    }

    /// [`ConnectorConfig::supervised`], showing its tables on `board`.
    pub fn supervised_with(self, worker: &WorkerConfig, cancel: CancellationToken, board: TableBoard) -> Result<impl Future<Output = Result<(), StageError>> + Send + 'static, StageError> {
        let context = StageContext { tables: board, ..StageContext::new(&self.name, worker.clone()) };
        let mut first = Some(self.settings.clone().build(&context)?);
        let progress = context.progress.clone();
        let settings = self.settings;
        let build = move || match first.take() {
            Some(stage) => Ok(stage),
            None => settings.clone().build(&context),
        };
        Ok(supervise(self.name, worker.retry.clone(), progress, build, cancel))
    }
}

/// Validates options built in code (`bench`) as a file's would be: the settings, or every
/// problem found.
pub fn validated<K: mssql_cdc_core::stage::ConnectorKind>(options: K) -> Result<K::Settings, Vec<Problem>> {
    let mut problems = Problems::under("");
    match options.validate(&mut problems) {
        Some(settings) if problems.is_empty() => Ok(settings),
        _ => Err(problems.into_vec()),
    }
}

fn is_valid_name(name: &str) -> bool {
    (1..=200).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
