//! `mssql-cdc optimize` and `mssql-cdc vacuum`: maintenance of the Delta tables the sinks write.

use std::process::ExitCode;

use mssql_cdc_lake::delta::storage::Storage;
use mssql_cdc_lake::delta::table;

/// `--storage-option KEY=VALUE`, repeatable: delta-rs object-store options (as a connector's
/// `[storage_options]`); settings not given are read from the environment (`AWS_*`, ...).
#[derive(Debug, Default, clap::Args)]
pub struct StorageArgs {
    /// An object-store option, `KEY=VALUE` (e.g. `AWS_ENDPOINT_URL=http://minio:9000`); repeatable.
    #[arg(long = "storage-option", value_name = "KEY=VALUE", value_parser = parse_option)]
    options: Vec<(String, String)>,
}

impl StorageArgs {
    pub fn storage(&self) -> Storage {
        self.options.iter().cloned().collect()
    }
}

fn parse_option(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| "expected KEY=VALUE".to_owned())
}

#[derive(Debug, clap::Args)]
pub struct OptimizeArgs {
    /// The table: a local path or an object-store URL.
    table: String,
    /// Z-order the compacted files by these columns (e.g. `--zorder target,app_id` for facts).
    #[arg(long, value_delimiter = ',')]
    zorder: Vec<String>,
    /// Target file size, bytes (default: the table's `delta.targetFileSize`, else 100 MiB).
    #[arg(long)]
    target_size: Option<u64>,
    #[command(flatten)]
    storage: StorageArgs,
}

#[derive(Debug, clap::Args)]
pub struct VacuumArgs {
    /// The table: a local path or an object-store URL.
    table: String,
    /// Keep files a version of the last this many hours needs (default 168: one week, Delta's
    /// default; readers of older versions fail after a vacuum).
    #[arg(long, default_value_t = 168)]
    retention_hours: u64,
    /// List what would be deleted, delete nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    storage: StorageArgs,
}

pub async fn optimize(args: OptimizeArgs) -> anyhow::Result<ExitCode> {
    let report = table::optimize(&args.table, &args.storage.storage(), &args.zorder, args.target_size).await?;
    println!("optimized {}: {} files written, {} files replaced", args.table, report.files_added, report.files_removed);
    Ok(ExitCode::SUCCESS)
}

pub async fn vacuum(args: VacuumArgs) -> anyhow::Result<ExitCode> {
    let deleted = table::vacuum(&args.table, &args.storage.storage(), args.retention_hours, args.dry_run).await?;
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    println!("vacuumed {}: {verb} {deleted} files", args.table);
    Ok(ExitCode::SUCCESS)
}
