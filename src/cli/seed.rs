//! `mssql-cdc seed`: publish a copy of the table (a Delta table or a Parquet directory) as a
//! stopped stream's snapshot at `--as-of`; the stream then goes on from there.

use std::path::PathBuf;
use std::process::ExitCode;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use mssql_cdc_core::stage::StageContext;
use mssql_cdc_lake::delta::copy::Copy;
use mssql_cdc_source::seed::{AsOf, CopyError, CopyRows, CopySource, SeedRequest};
use mssql_cdc_source::MssqlSource;

use super::stream::{load, print_offset, stop_on_signal, EXIT_FAILED, EXIT_PROBLEMS};

#[derive(Debug, clap::Args)]
pub struct SeedArgs {
    /// An `mssql-source` connector file; its stage must be stopped.
    connector: PathBuf,
    /// The copy: a Delta table (path or URL) or a local directory of Parquet files.
    #[arg(long)]
    from: String,
    /// When the copy started being read: a UTC time (`2026-12-01T08:00:00Z`, or with an
    /// offset) or an LSN recorded before that (`0x...`). Every commit at or before it must be
    /// in the copy.
    #[arg(long)]
    as_of: String,
    /// Read NULL for a captured column the copy lacks (else the seed stops naming it).
    #[arg(long)]
    allow_missing_columns: bool,
    /// Publish a copy newer than where the stream stands as a new generation (after data loss).
    #[arg(long)]
    reseed: bool,
    /// The capture instance to seed, when the connector names several.
    #[arg(long)]
    capture_instance: Option<String>,
    /// An object-store option for reading the copy, `KEY=VALUE` (delta-rs names such as
    /// `AWS_REGION`); repeat for more. `AWS_*` environment variables are read too.
    #[arg(long = "storage-option", value_name = "KEY=VALUE")]
    storage_options: Vec<String>,
    /// The worker file (Kafka cluster). Default: built-in defaults and `MSSQL_CDC_WORKER__*`.
    #[arg(long)]
    worker: Option<PathBuf>,
}

/// The lake's copy reader behind the source's [`CopySource`].
struct LakeCopy(Copy);

impl CopySource for LakeCopy {
    fn location(&self) -> &str {
        self.0.location()
    }

    fn identity(&self) -> &str {
        self.0.identity()
    }

    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.0.schema()
    }

    fn rows(&self) -> Option<u64> {
        self.0.rows()
    }

    fn read<'a>(&'a self, columns: &'a [String], order: &'a [String]) -> BoxFuture<'a, Result<CopyRows, CopyError>> {
        Box::pin(async move {
            let stream = self.0.read(columns, order).await?;
            Ok(stream.map_err(|e| Box::new(e) as CopyError).boxed())
        })
    }
}

/// Seeds the stream and prints its offset as one JSON line: exit 0 when the seed is published
/// (or was already), 1 when it fails, 2 on bad input.
pub async fn seed(args: SeedArgs) -> anyhow::Result<ExitCode> {
    let as_of = match AsOf::parse(&args.as_of) {
        Ok(as_of) => Some(as_of),
        Err(problem) => {
            eprintln!("--as-of: {problem}");
            None
        }
    };
    let mut storage = std::collections::HashMap::new();
    let mut bad_storage = false;
    for option in &args.storage_options {
        match option.split_once('=') {
            Some((key, value)) if !key.is_empty() && !storage.contains_key(key) => {
                storage.insert(key.to_owned(), value.to_owned());
            }
            Some((key, _)) if !key.is_empty() => {
                eprintln!("--storage-option: `{key}` is given twice");
                bad_storage = true;
            }
            _ => {
                // Only the key is shown: values may be secrets.
                eprintln!("--storage-option: `{}`: expected KEY=VALUE", option.split('=').next().unwrap_or_default());
                bad_storage = true;
            }
        }
    }
    let loaded = load(args.worker.as_deref(), &args.connector)?;
    let (Some(as_of), Some((worker, name, mut settings))) = (as_of, loaded) else {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    if bad_storage {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    }
    match (&args.capture_instance, settings.capture_instances.as_slice()) {
        (Some(wanted), instances) => {
            let Some(found) = instances.iter().find(|ci| ci.eq_ignore_ascii_case(wanted)).cloned() else {
                eprintln!("--capture-instance: connector `{name}` does not name `{wanted}` (it names {instances:?})");
                return Ok(ExitCode::from(EXIT_PROBLEMS));
            };
            settings.capture_instances = vec![found];
        }
        (None, [_]) => {}
        (None, instances) => {
            eprintln!("--capture-instance: connector `{name}` names {} capture instances ({instances:?}); a copy is of one table: name it", instances.len());
            return Ok(ExitCode::from(EXIT_PROBLEMS));
        }
    }
    let copy = match Copy::open(&args.from, &storage).await {
        Ok(copy) => LakeCopy(copy),
        Err(error) => {
            eprintln!("--from: {error}");
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    };
    let request = SeedRequest { as_of, as_of_text: args.as_of.clone(), allow_missing_columns: args.allow_missing_columns, reseed: args.reseed };
    let context = StageContext::new(&name, worker);
    let cancel = stop_on_signal("stopping: a rerun with the same --as-of resumes the seed")?;
    for stream in MssqlSource::build(settings, &context)?.into_streams()? {
        if let Some(failed) = print_offset(stream.seed(&request, &copy, cancel.clone()).await)? {
            return Ok(failed);
        }
    }
    Ok(ExitCode::SUCCESS)
}
