//! `mssql-cdc reconcile`: is silver equal to its SQL Server table? (`docs/validation.md`)

use std::path::PathBuf;
use std::process::ExitCode;

use mssql_cdc::connectors::ConnectorSettings;
use mssql_cdc_core::telemetry::metrics;
use mssql_cdc_reconcile::{report, Overall, ReconcileSettings};

/// Exit code: silver differs from the table.
const EXIT_MISMATCH: u8 = 1;
/// Exit code: bad arguments or connector files.
const EXIT_PROBLEMS: u8 = 2;
/// Exit code: the run could not conclude (a side unreachable, a query failed).
const EXIT_FAILED: u8 = 3;
/// Exit code: the only differences are changes silver has yet to apply.
const EXIT_IN_FLIGHT: u8 = 4;

#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The `delta-silver` connector file: silver, bronze, the control table, keys, storage.
    silver: PathBuf,
    /// The feed's `mssql-source` connector file: the connection, capture instance, isolation
    /// level and lock timeout of the reads.
    #[arg(long)]
    source: PathBuf,
    /// The capture instance silver holds, when the source connector reads several.
    #[arg(long)]
    capture_instance: Option<String>,
    /// Rows per bucket, about: tier 1 counts buckets, tier 2 reads one bucket at a time.
    #[arg(long, default_value_t = 1_000_000)]
    bucket_rows: u64,
    /// Fraction of matching buckets also compared row by row (0 to 1).
    #[arg(long, default_value_t = 0.01)]
    sample: f64,
    /// Seed of that sample, to repeat a run (default: drawn, and printed in the outcome).
    #[arg(long)]
    sample_seed: Option<u64>,
    /// A Delta table the run appends its report rows to (created on first use; the silver
    /// connector's storage options apply).
    #[arg(long)]
    report_table: Option<String>,
    /// Before calling a difference real, wait this long (milliseconds) for the capture job and
    /// look at the change table again: a commit not harvested yet is invisible there. SQL
    /// Server's capture job polls every 5 s by default.
    #[arg(long, default_value_t = 5000)]
    settle_ms: u64,
    /// Print the outcome as one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
    /// Write the run's metrics here in Prometheus text format (for node_exporter's textfile
    /// collector).
    #[arg(long)]
    metrics_file: Option<PathBuf>,
}

pub async fn run(args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let Some(settings) = settings(&args)? else {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let handle = metrics::install();
    let outcome = match mssql_cdc_reconcile::reconcile(&settings).await {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!("reconcile: {error}");
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    };
    if let Some(location) = &args.report_table {
        let storage = settings.silver.storage_options.resolve()?;
        if let Err(error) = report::write(&outcome, location, &storage).await {
            eprintln!("reconcile: the report table: {error}");
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    }
    if let Some(path) = &args.metrics_file {
        tokio::fs::write(path, handle.render()).await?;
    }
    if args.json {
        println!("{}", outcome.json());
    } else {
        print!("{}", outcome.text());
    }
    Ok(match outcome.overall() {
        Overall::Equal => ExitCode::SUCCESS,
        Overall::InFlight => ExitCode::from(EXIT_IN_FLIGHT),
        Overall::Mismatch => ExitCode::from(EXIT_MISMATCH),
    })
}

/// The settings from the two connector files and the flags; `None` after printing every
/// problem.
fn settings(args: &ReconcileArgs) -> anyhow::Result<Option<ReconcileSettings>> {
    let mut problems = Vec::new();
    if args.bucket_rows == 0 {
        problems.push("--bucket-rows: expected a positive number of rows".to_owned());
    }
    if !(0.0..=1.0).contains(&args.sample) {
        problems.push(format!("--sample: {} is out of range; expected a fraction from 0 to 1", args.sample));
    }
    let silver = super::load_connector(&args.silver)?;
    let source = super::load_connector(&args.source)?;
    let silver = match silver.map(|c| (c.name, c.kind, c.settings)) {
        Some((_, _, ConnectorSettings::DeltaSilver(settings))) => Some(settings),
        Some((name, kind, _)) => {
            problems.push(format!("{}: connector `{name}` is a `{kind}`; reconcile compares a `delta-silver` connector's table", args.silver.display()));
            None
        }
        None => None,
    };
    let source = match source.map(|c| (c.name, c.kind, c.settings)) {
        Some((_, _, ConnectorSettings::MssqlSource(settings))) => Some(settings),
        Some((name, kind, _)) => {
            problems.push(format!("--source {}: connector `{name}` is a `{kind}`; expected the feed's `mssql-source` connector", args.source.display()));
            None
        }
        None => None,
    };
    let capture_instance = source.as_ref().and_then(|source| match (&args.capture_instance, source.capture_instances.as_slice()) {
        (Some(wanted), all) if all.iter().any(|c| c.eq_ignore_ascii_case(wanted)) => Some(wanted.clone()),
        (Some(wanted), all) => {
            problems.push(format!("--capture-instance: `{wanted}` is not one the source connector reads ({})", all.join(", ")));
            None
        }
        (None, [only]) => Some(only.clone()),
        (None, all) => {
            problems.push(format!("--capture-instance: the source connector reads {}; name the one silver holds", all.join(", ")));
            None
        }
    });
    for problem in &problems {
        eprintln!("{problem}");
    }
    let (Some(silver), Some(source), Some(capture_instance), true) = (silver, source, capture_instance, problems.is_empty()) else { return Ok(None) };
    Ok(Some(ReconcileSettings { source, capture_instance, silver, bucket_rows: args.bucket_rows, sample: args.sample, sample_seed: args.sample_seed, settle: std::time::Duration::from_millis(args.settle_ms) }))
}
