//! `mssql-cdc bench silver`: the MERGE of one folded batch into silver tables of given sizes,
//! our way (the fold's key ranges as a file filter) next to delta-rs's plain MERGE of the same
//! batch (its own min..max filter only), each on its own copy of the same table, same run.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::protocol::SaveMode;
use mssql_cdc_lake::delta::query::ident;
use mssql_cdc_lake::delta::storage::Storage;
use mssql_cdc_lake::delta::table;
use mssql_cdc_lake::silver::apply::{key_ranges, MAX_KEY_RANGES};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, clap::Args)]
pub struct SilverBench {
    /// Silver sizes, rows (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    silver_rows: Vec<u64>,
    /// Batch sizes, changes after the fold (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    batch_changes: Vec<u64>,
    /// Rows per silver file when the table is built.
    #[arg(long, default_value_t = 250_000)]
    rows_per_file: u64,
    /// Key pattern of updates and deletes: `recent` (all on the newest 2% of keys), `hot` (95%
    /// there, 5% anywhere) or `uniform`. Inserts always take new keys above the table's.
    #[arg(long, default_value = "hot")]
    keys: String,
    /// Which MERGEs run (comma-separated): `ours` (silver's copy-on-write MERGE), `marks`
    /// (silver's deletion vectors), `plain` (delta-rs's MERGE as it comes).
    #[arg(long, value_delimiter = ',', default_value = "ours,marks,plain")]
    ways: Vec<String>,
    /// Where the tables go (deleted after).
    #[arg(long, default_value = "./bench-data/silver")]
    dir: std::path::PathBuf,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer_id", DataType::Int64, true),
        Field::new("status", DataType::Utf8, true),
        Field::new("note", DataType::Utf8, true),
        Field::new("_start_lsn", DataType::Utf8, false),
        Field::new("_commit_ts", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ]))
}

fn rows(ids: &[i64], lsn: u64, schema: &SchemaRef) -> Vec<ArrayRef> {
    let _ = schema;
    vec![
        Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i % 100_000))),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| ["new", "paid", "shipped", "closed"][(*i as usize + lsn as usize) % 4]))),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("order {i} note, revision {lsn}")))),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|_| format!("0x{lsn:020X}")))),
        Arc::new(TimestampMicrosecondArray::from_iter_values(ids.iter().map(|_| 1_790_000_000_000_000 + lsn as i64)).with_timezone("UTC")),
    ]
}

#[allow(clippy::expect_used)] // invariant: bench rows are built from the schema beside them
fn silver_batch(ids: &[i64], lsn: u64) -> RecordBatch {
    let schema = schema();
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.to_vec()))];
    columns.extend(rows(ids, lsn, &schema));
    RecordBatch::try_new(schema, columns).expect("bench rows")
}

/// The fold of a batch: `changes` distinct keys, 60% updates, 25% inserts above `n`, 15% deletes.
#[allow(clippy::expect_used)] // invariant: bench rows are built from the schema beside them
fn folded(n: u64, changes: u64, hot_percent: u32, rng: &mut StdRng) -> RecordBatch {
    let mut keys = std::collections::BTreeMap::new();
    let hot_from = n - n / 50;
    while (keys.len() as u64) < changes {
        let kind = rng.random_range(0..100);
        let key = if kind < 25 {
            (n + keys.len() as u64) as i64
        } else if rng.random_range(0..100) < hot_percent {
            rng.random_range(hot_from..n) as i64
        } else {
            rng.random_range(0..n) as i64
        };
        keys.insert(key, kind >= 85);
    }
    let ids: Vec<i64> = keys.keys().copied().collect();
    let mut fields: Vec<Field> = schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("_delete", DataType::Boolean, false));
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(ids.clone()))];
    columns.extend(rows(&ids, 1_000_000, &schema()));
    columns.push(Arc::new(BooleanArray::from(keys.values().copied().collect::<Vec<_>>())));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("bench fold")
}

async fn build(location: &str, n: u64, rows_per_file: u64) -> anyhow::Result<()> {
    let storage = Storage::new();
    let mut t = table::create(location, &storage, &schema(), &Default::default(), "bench silver").await?;
    let mut start = 0;
    while start < n {
        let end = (start + rows_per_file).min(n);
        let ids: Vec<i64> = (start as i64..end as i64).collect();
        t = t.write(vec![silver_batch(&ids, 1)]).with_save_mode(SaveMode::Append).await?;
        start = end;
    }
    Ok(())
}

/// One MERGE; returns (seconds, files scanned, files rewritten).
async fn merge(location: &str, batch: &RecordBatch, ranges: bool) -> anyhow::Result<(f64, usize, usize)> {
    let t = table::open(location, &Storage::new()).await?.ok_or_else(|| anyhow::anyhow!("no bench table at {location}"))?;
    let started = Instant::now();
    let keys = vec!["order_id".to_owned()];
    let mut on = "target.order_id = source.order_id".to_owned();
    if ranges
        && let Some(r) = key_ranges(batch, &keys, MAX_KEY_RANGES) {
            on = format!("{on} AND ({r})");
        }
    let columns: Vec<String> = schema().fields().iter().map(|f| f.name().clone()).collect();
    let source = SessionContext::new().read_batch(batch.clone())?;
    let newer = "source._start_lsn > target._start_lsn";
    let mut builder = t.merge(source, on);
    if ranges {
        builder = builder.with_session_state(mssql_cdc_lake::silver::apply::merge_session(location)?);
    }
    let (_, metrics) = builder
        .with_source_alias("source")
        .with_target_alias("target")
        // Ours writes as silver does; the plain MERGE with delta-rs's writer as it comes.
        .with_writer_properties(if ranges { mssql_cdc_lake::silver::apply::writer_properties() } else { WriterProperties::builder().build() })
        .when_matched_delete(|d| d.predicate(format!("source._delete AND {newer}")))?
        .when_matched_update(|u| columns.iter().fold(u.predicate(format!("NOT source._delete AND {newer}")), |u, c| u.update(ident(c), format!("source.{}", ident(c)))))?
        .when_not_matched_insert(|i| columns.iter().fold(i.predicate("NOT source._delete"), |i, c| i.set(ident(c), format!("source.{}", ident(c)))))?
        .await?;
    Ok((started.elapsed().as_secs_f64(), metrics.num_target_files_scanned, metrics.num_target_files_removed))
}

/// The MERGE by deletion vectors (silver's `deletion_vectors = true`) on its own copy; the
/// table feature is turned on before the clock starts. Returns (seconds, files scanned, files
/// given a deletion vector).
async fn merge_by_marks(location: &str, batch: &RecordBatch) -> anyhow::Result<(f64, u64, u64)> {
    let t = table::open(location, &Storage::new()).await?.ok_or_else(|| anyhow::anyhow!("no bench table at {location}"))?;
    let t = mssql_cdc_lake::silver::mark::enable(t, location).await?;
    let started = Instant::now();
    let keys = vec!["order_id".to_owned()];
    let columns: Vec<usize> = (0..schema().fields().len()).collect();
    let upserts = |rows: &RecordBatch| rows.project(&columns).map_err(|e| mssql_cdc_lake::silver::SilverError::Fold(e.to_string()));
    let (_, marked) = mssql_cdc_lake::silver::mark::merge(t, &mut Default::default(), batch, &keys, upserts, Default::default(), Default::default(), location).await?;
    Ok((started.elapsed().as_secs_f64(), marked.files_scanned, marked.files_marked))
}

/// Rows in the table at `location`.
pub(super) async fn count(location: &str) -> anyhow::Result<i64> {
    let t = table::open(location, &Storage::new()).await?.ok_or_else(|| anyhow::anyhow!("no bench table at {location}"))?;
    let batches = mssql_cdc_lake::delta::query::query(&[("t", &t)], "SELECT COUNT(*) FROM t").await?;
    Ok(batches.first().and_then(|b| b.column(0).as_any().downcast_ref::<Int64Array>().map(|c| c.value(0))).unwrap_or(0))
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

pub async fn run(args: SilverBench) -> anyhow::Result<ExitCode> {
    let hot = match args.keys.as_str() {
        "recent" => 100,
        "hot" => 95,
        "uniform" => 0,
        other => anyhow::bail!("--keys `{other}`: expected recent, hot or uniform"),
    };
    if let Some(other) = args.ways.iter().find(|w| !["ours", "marks", "plain"].contains(&w.as_str())) {
        anyhow::bail!("--ways `{other}`: expected ours, marks or plain (comma-separated)");
    }
    let runs = |way: &str| args.ways.iter().any(|w| w == way);
    println!("silver rows | batch | keys | ours: s, files scanned/rewritten, peak RSS MB | deletion vectors: s, files scanned/marked, peak RSS MB | plain MERGE: s, files scanned/rewritten, peak RSS MB | peak RSS of the run, MB");
    let mut run_peak = 0.0f64;
    for &n in &args.silver_rows {
        let base = args.dir.join(format!("base-{n}"));
        let _ = std::fs::remove_dir_all(&base);
        let started = Instant::now();
        build(&base.display().to_string(), n, args.rows_per_file).await?;
        eprintln!("built silver of {n} rows in {:.1} s", started.elapsed().as_secs_f64());
        for &m in &args.batch_changes {
            let mut rng = StdRng::seed_from_u64(n ^ m);
            let batch = folded(n, m, hot, &mut rng);
            let mut cells = Vec::new();
            let mut counts = Vec::new();
            for way in ["ours", "marks", "plain"] {
                if !runs(way) {
                    cells.push("-".to_owned());
                    continue;
                }
                let copy = args.dir.join(way);
                let _ = std::fs::remove_dir_all(&copy);
                copy_dir(&base, &copy)?;
                let location = copy.display().to_string();
                // The peak of this MERGE alone (from the RSS it starts with: the process keeps
                // some of what building the table took).
                run_peak = run_peak.max(super::bench::peak_rss_mb());
                let reset = super::bench::reset_peak_rss();
                let (seconds, scanned, changed) = match way {
                    "marks" => merge_by_marks(&location, &batch).await?,
                    _ => {
                        let (s, a, b) = merge(&location, &batch, way == "ours").await?;
                        (s, a as u64, b as u64)
                    }
                };
                let peak = if reset { format!("{:.0}", super::bench::peak_rss_mb()) } else { "?".into() };
                cells.push(format!("{seconds:.2} s, {scanned}/{changed}, {peak}"));
                counts.push((way, count(&location).await?));
                let _ = std::fs::remove_dir_all(&copy);
            }
            // Every way ends with the same table.
            if let Some(&(first, rows)) = counts.first()
                && let Some(&(other, differs)) = counts.iter().find(|(_, r)| *r != rows)
            {
                anyhow::bail!("the MERGE `{other}` left {differs} rows, `{first}` {rows}");
            }
            run_peak = run_peak.max(super::bench::peak_rss_mb());
            println!("{n} | {m} | {} | {} | {run_peak:.0}", args.keys, cells.join(" | "));
        }
        let _ = std::fs::remove_dir_all(&base);
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(ExitCode::SUCCESS)
}
