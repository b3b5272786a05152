//! `mssql-cdc apply` (one apply_changes pass), `mssql-cdc freshness` and `mssql-cdc is-final`
//! (the verdict, read from the control table).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use chrono::{DateTime, NaiveDateTime, Utc};
use mssql_cdc_lake::delta::table::{self, table_url};
use mssql_cdc_lake::silver::{self, control};
use mssql_cdc::connectors::ConnectorSettings;

use super::table::StorageArgs;

/// Exit code of `is-final` when the period is not final yet (0: final).
const EXIT_NOT_FINAL: u8 = 1;
/// Exit code for bad arguments or files.
const EXIT_PROBLEMS: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// A `delta-silver` connector file.
    connector: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct FreshnessArgs {
    /// The silver table (as the connector's `target`).
    table: String,
    /// The control table the silver stage writes.
    #[arg(long)]
    control_table: String,
    #[command(flatten)]
    storage: StorageArgs,
}

#[derive(Debug, clap::Args)]
pub struct IsFinalArgs {
    /// The silver table (as the connector's `target`).
    table: String,
    /// End of the period (exclusive), RFC 3339 (`2026-11-30T10:00:00Z`) or a UTC
    /// `YYYY-MM-DD[ HH:MM[:SS]]`.
    period_end: String,
    /// The control table the silver stage writes.
    #[arg(long)]
    control_table: String,
    #[command(flatten)]
    storage: StorageArgs,
}

pub async fn apply(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let Some(connector) = super::load_connector(&args.connector)? else {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let ConnectorSettings::DeltaSilver(options) = connector.settings else {
        eprintln!("{}: kind is `{}`; `apply` runs a `delta-silver` connector", args.connector.display(), connector.kind);
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let report = silver::apply_once(&options).await?;
    let verdict = report.finalized_until.map_or("none".to_owned(), |t| t.to_rfc3339());
    println!(
        "applied {} batches (through batch {}): {} changes; {} inserted, {} updated, {} deleted; finalized_until {verdict}",
        report.batches, report.last_batch, report.fold.changes, report.inserted, report.updated, report.deleted
    );
    Ok(ExitCode::SUCCESS)
}

async fn read_row(table: &str, control_table: &str, storage: &StorageArgs) -> anyhow::Result<Option<control::ControlRow>> {
    let control = table::open(control_table, &storage.storage()).await?.with_context(|| format!("no control table at `{control_table}`"))?;
    let name = table_url(table)?.to_string();
    Ok(control::read_row(&control, &name).await?)
}

pub async fn freshness(args: FreshnessArgs) -> anyhow::Result<ExitCode> {
    let now = Utc::now();
    let row = read_row(&args.table, &args.control_table, &args.storage).await?;
    let seconds = |t: Option<DateTime<Utc>>| t.map_or("none".to_owned(), |t| format!("{:.0}", (now - t).num_milliseconds() as f64 / 1000.0));
    match row {
        None => println!("table {}: no verdict yet", args.table),
        Some(row) => {
            println!("table            {}", args.table);
            println!("finalized_until  {}", row.finalized_until.map_or("none".into(), |t| t.to_rfc3339()));
            println!("age_seconds      {}", seconds(row.finalized_until));
            println!("since_moved_s    {}", seconds(row.updated_at));
            println!("applied_batch    {}", row.applied_batch);
            println!("end_lsn          {}", row.end_lsn.as_deref().unwrap_or("none"));
            println!("open_snapshot_lsn {}", row.open_snapshot_lsn.as_deref().unwrap_or("none"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn is_final(args: IsFinalArgs) -> anyhow::Result<ExitCode> {
    let Some(period_end) = parse_instant(&args.period_end) else {
        eprintln!("period_end `{}`: expected RFC 3339 (2026-11-30T10:00:00Z) or a UTC YYYY-MM-DD[ HH:MM[:SS]]", args.period_end);
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let row = read_row(&args.table, &args.control_table, &args.storage).await?;
    let verdict = row.and_then(|r| r.finalized_until);
    let is_final = verdict.is_some_and(|v| period_end <= v);
    println!("{}: {} (finalized_until {})", period_end.to_rfc3339(), if is_final { "final" } else { "not final yet" }, verdict.map_or("none".into(), |v| v.to_rfc3339()));
    Ok(if is_final { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_FINAL) })
}

fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc());
        }
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
}
