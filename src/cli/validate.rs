//! `mssql-cdc validate`: checks files without connecting anywhere.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use mssql_cdc::connectors::ConnectorConfig;
use mssql_cdc_core::config::{Document, Problem, WorkerConfig};

/// Exit code when any file has a problem.
const EXIT_PROBLEMS: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Worker and connector files. A file with a `kind` or `name` key is a connector file;
    /// any other is a worker file. Environment overrides apply as at run time.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print each file's effective configuration (secrets redacted).
    #[arg(long)]
    show: bool,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let mut failed = 0usize;
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in &args.files {
        let shown = path.display();
        let document = match Document::read(path) {
            Ok(document) => document,
            Err(error) => {
                eprintln!("{error}");
                failed += 1;
                continue;
            }
        };
        let result = if document.has("kind") || document.has("name") {
            ConnectorConfig::from_document(document).and_then(|connector| {
                if let Some(first) = names.insert(connector.name.clone(), path.clone()) {
                    let message = format!("connector name also used by `{}`", first.display());
                    return Err(vec![Problem::new("name", message, "a name unique across the files")]);
                }
                tracing::debug!(file = %shown, connector = ?connector, "connector file valid");
                Ok(format!("connector `{}` ({})", connector.name, connector.kind) + show(args.show, &connector).as_str())
            })
        } else {
            WorkerConfig::from_document(&document.with_env(mssql_cdc_core::config::load::WORKER_ENV_PREFIX)).map(|worker| {
                tracing::debug!(file = %shown, worker = ?worker, "worker file valid");
                "worker".to_owned() + show(args.show, &worker).as_str()
            })
        };
        match result {
            Ok(summary) => println!("ok: {shown}: {summary}"),
            Err(problems) => {
                failed += 1;
                for problem in problems {
                    eprintln!("{shown}: {problem}");
                }
            }
        }
    }
    if failed == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{failed} of {} file(s) have problems", args.files.len());
        Ok(ExitCode::from(EXIT_PROBLEMS))
    }
}

fn show(enabled: bool, value: &impl std::fmt::Debug) -> String {
    if enabled { format!("\n{value:#?}") } else { String::new() }
}
