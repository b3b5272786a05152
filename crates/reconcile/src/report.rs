//! A run's findings: per bucket a verdict, per key a failure type; the summary on stdout
//! (text or JSON) and the report table (one row per bucket and per key finding).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};
use mssql_cdc_lake::delta::storage::Storage;
use mssql_cdc_lake::delta::table::{self, DeltaError};
use mssql_cdc_types::lsn::Lsn;
use serde::Serialize;

use crate::buckets::Tally;

/// A bucket's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Equal counts and key sums, and equal rows where compared row by row.
    Match,
    /// A key differs, and no change to it is in flight.
    Mismatch,
    /// Every differing key has a change after silver's applied position: check again later.
    InFlight,
}

/// What is wrong with one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureType {
    /// In SQL Server, not in silver.
    MissingTarget,
    /// In silver, not in SQL Server.
    MissingSource,
    /// In both, with different values.
    RecordDiff,
    /// Differs, with a change to it after silver's applied position (in bronze or only in the
    /// change table yet): not a failure.
    InFlight,
}

impl FailureType {
    /// As the report spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingTarget => "MISSING_TARGET",
            Self::MissingSource => "MISSING_SOURCE",
            Self::RecordDiff => "RECORD_DIFF",
            Self::InFlight => "IN_FLIGHT",
        }
    }
}

impl Verdict {
    /// As the report spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Match => "MATCH",
            Self::Mismatch => "MISMATCH",
            Self::InFlight => "IN_FLIGHT",
        }
    }
}

/// One bucket's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct BucketResult {
    /// Its number in key order, from 0.
    pub bucket: usize,
    /// Lowest key (inclusive); `None`: open, or the whole table.
    pub key_from: Option<i64>,
    /// Highest key (exclusive); `None`: open, or the whole table.
    pub key_to: Option<i64>,
    /// SQL Server's rows.
    pub source_rows: u64,
    /// Silver's rows.
    pub silver_rows: u64,
    /// SQL Server's key sum (as text: it may pass 64 bits; `null` for a whole-table count).
    pub source_key_sum: Option<String>,
    /// Silver's key sum.
    pub silver_key_sum: Option<String>,
    /// Its verdict.
    pub verdict: Verdict,
    /// Whether its rows were compared one by one (tier 2).
    pub hashed: bool,
}

impl BucketResult {
    /// A bucket from its tallies, MATCH or MISMATCH by tier 1 alone.
    pub fn new(bucket: usize, keys: (Option<i64>, Option<i64>), source: Tally, silver: Tally, sums: bool, agrees: bool) -> Self {
        Self {
            bucket,
            key_from: keys.0,
            key_to: keys.1,
            source_rows: source.rows,
            silver_rows: silver.rows,
            source_key_sum: sums.then(|| source.key_sum.to_string()),
            silver_key_sum: sums.then(|| silver.key_sum.to_string()),
            verdict: if agrees { Verdict::Match } else { Verdict::Mismatch },
            hashed: false,
        }
    }
}

/// One key's finding.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The bucket it was found in.
    pub bucket: usize,
    /// What is wrong.
    pub failure_type: FailureType,
    /// The key, as JSON.
    pub key: String,
    /// The row's hash on SQL Server (`None`: no such row).
    pub source_hash: Option<String>,
    /// The row's hash in silver.
    pub silver_hash: Option<String>,
}

/// The positions a run read, so a finding can be judged against them.
#[derive(Clone, Debug, Serialize)]
pub struct Positions {
    /// `sys.fn_cdc_get_max_lsn()` just before SQL Server was counted (`M`).
    pub source_lsn: String,
    /// Silver's applied LSN from its control row, read before silver (`E`).
    pub silver_lsn: Option<String>,
    /// The silver version compared.
    pub silver_version: i64,
}

impl Positions {
    /// From the LSNs read.
    pub fn new(source_lsn: Lsn, silver_lsn: Option<Lsn>, silver_version: i64) -> Self {
        Self { source_lsn: source_lsn.to_string(), silver_lsn: silver_lsn.map(|l| l.to_string()), silver_version }
    }
}

/// What the whole run says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overall {
    /// Silver equals the table.
    Equal,
    /// Only in-flight differences: run again after silver catches up.
    InFlight,
    /// A real difference.
    Mismatch,
}

/// A run's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// This run's id.
    pub run_id: String,
    /// When it started.
    pub run_at: DateTime<Utc>,
    /// The silver table.
    pub silver_table: String,
    /// The source table, `schema.table`.
    pub source_table: String,
    /// The capture instance.
    pub capture_instance: String,
    /// `ranges` (tier 1 by key ranges) or `whole_table` (one count).
    pub mode: &'static str,
    /// The positions read.
    pub positions: Positions,
    /// The fraction of MATCH buckets compared row by row.
    pub sample: f64,
    /// The seed of that sample (given, or drawn and recorded here to repeat the run).
    pub sample_seed: u64,
    /// The compared columns.
    pub columns: Vec<String>,
    /// Captured columns silver lacks (not compared).
    pub skipped_columns: Vec<String>,
    /// Every bucket.
    pub buckets: Vec<BucketResult>,
    /// Every key finding.
    pub findings: Vec<Finding>,
    /// Wall time of the run.
    #[serde(serialize_with = "seconds")]
    pub duration: Duration,
}

fn seconds<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64((duration.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// The summary printed with `--json`.
#[derive(Serialize)]
struct Summary<'a> {
    verdict: Overall,
    #[serde(flatten)]
    outcome: &'a Outcome,
    buckets_total: usize,
    r#match: usize,
    in_flight: usize,
    mismatch: usize,
    hashed: usize,
    failures: BTreeMap<&'static str, usize>,
}

impl Outcome {
    /// What the run says: mismatch over in-flight over equal.
    pub fn overall(&self) -> Overall {
        let count = |v| self.buckets.iter().filter(|b| b.verdict == v).count();
        if count(Verdict::Mismatch) > 0 {
            Overall::Mismatch
        } else if count(Verdict::InFlight) > 0 {
            Overall::InFlight
        } else {
            Overall::Equal
        }
    }

    /// Buckets by verdict.
    pub fn by_verdict(&self) -> HashMap<Verdict, usize> {
        let mut out = HashMap::new();
        for bucket in &self.buckets {
            *out.entry(bucket.verdict).or_default() += 1;
        }
        out
    }

    /// Key findings by failure type.
    pub fn failures(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for finding in &self.findings {
            *out.entry(finding.failure_type.as_str()).or_default() += 1;
        }
        out
    }

    /// The summary as JSON (the `--json` output).
    pub fn json(&self) -> serde_json::Value {
        let verdicts = self.by_verdict();
        let get = |v| verdicts.get(&v).copied().unwrap_or(0);
        let summary = Summary {
            verdict: self.overall(),
            outcome: self,
            buckets_total: self.buckets.len(),
            r#match: get(Verdict::Match),
            in_flight: get(Verdict::InFlight),
            mismatch: get(Verdict::Mismatch),
            hashed: self.buckets.iter().filter(|b| b.hashed).count(),
            failures: self.failures(),
        };
        serde_json::to_value(summary).unwrap_or_default()
    }

    /// The summary for a terminal: the verdict, counts, positions and the first findings.
    pub fn text(&self) -> String {
        let verdicts = self.by_verdict();
        let get = |v| verdicts.get(&v).copied().unwrap_or(0);
        let verdict = match self.overall() {
            Overall::Equal => "EQUAL",
            Overall::InFlight => "IN FLIGHT (only changes silver has yet to apply differ: run again later)",
            Overall::Mismatch => "MISMATCH",
        };
        let mut out = format!(
            "reconcile {}: silver {} against {} ({})\n  verdict   {verdict}\n  buckets   {} ({}): {} match, {} in flight, {} mismatch; {} compared row by row\n",
            self.run_id,
            self.silver_table,
            self.source_table,
            self.capture_instance,
            self.buckets.len(),
            self.mode.replace('_', " "),
            get(Verdict::Match),
            get(Verdict::InFlight),
            get(Verdict::Mismatch),
            self.buckets.iter().filter(|b| b.hashed).count()
        );
        let rows = |f: fn(&BucketResult) -> u64| self.buckets.iter().map(f).sum::<u64>();
        out.push_str(&format!("  rows      SQL Server {}, silver {}\n", rows(|b| b.source_rows), rows(|b| b.silver_rows)));
        out.push_str(&format!(
            "  positions SQL Server max LSN {}, silver applied {} at version {}\n",
            self.positions.source_lsn,
            self.positions.silver_lsn.as_deref().unwrap_or("none"),
            self.positions.silver_version
        ));
        if !self.skipped_columns.is_empty() {
            out.push_str(&format!("  not compared (not in silver): {}\n", self.skipped_columns.join(", ")));
        }
        for finding in self.findings.iter().take(20) {
            out.push_str(&format!("  {:<15} {} (bucket {})\n", finding.failure_type.as_str(), finding.key, finding.bucket));
        }
        if self.findings.len() > 20 {
            out.push_str(&format!("  ... {} more findings in the report\n", self.findings.len() - 20));
        }
        out.push_str(&format!("  took      {:.1} s\n", self.duration.as_secs_f64()));
        out
    }

    /// The report table's rows: one per bucket, then one per key finding.
    pub fn report_batch(&self) -> RecordBatch {
        let buckets = self.buckets.iter().map(|b| Row {
            kind: "bucket",
            bucket: b.bucket,
            key_from: b.key_from,
            key_to: b.key_to,
            verdict: b.verdict.as_str(),
            failure_type: None,
            key: None,
            source_rows: Some(b.source_rows),
            silver_rows: Some(b.silver_rows),
            source_key_sum: b.source_key_sum.clone(),
            silver_key_sum: b.silver_key_sum.clone(),
            hashed: b.hashed,
            source_hash: None,
            silver_hash: None,
        });
        let verdict_of = |bucket: usize| self.buckets.get(bucket).map_or("MISMATCH", |b| b.verdict.as_str());
        let findings = self.findings.iter().map(|f| Row {
            kind: "key",
            bucket: f.bucket,
            key_from: None,
            key_to: None,
            verdict: verdict_of(f.bucket),
            failure_type: Some(f.failure_type.as_str()),
            key: Some(f.key.clone()),
            source_rows: None,
            silver_rows: None,
            source_key_sum: None,
            silver_key_sum: None,
            hashed: true,
            source_hash: f.source_hash.clone(),
            silver_hash: f.silver_hash.clone(),
        });
        let rows: Vec<Row> = buckets.chain(findings).collect();
        rows_batch(self, &rows)
    }
}

struct Row {
    kind: &'static str,
    bucket: usize,
    key_from: Option<i64>,
    key_to: Option<i64>,
    verdict: &'static str,
    failure_type: Option<&'static str>,
    key: Option<String>,
    source_rows: Option<u64>,
    silver_rows: Option<u64>,
    source_key_sum: Option<String>,
    silver_key_sum: Option<String>,
    hashed: bool,
    source_hash: Option<String>,
    silver_hash: Option<String>,
}

/// The report table's columns (`docs/tables.md#reconcile-report`).
pub fn report_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    let int = |name: &str, nullable| Field::new(name, DataType::Int64, nullable);
    Arc::new(Schema::new(vec![
        text("run_id", false),
        Field::new("run_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        text("silver_table", false),
        text("source_table", false),
        text("capture_instance", false),
        text("mode", false),
        text("kind", false),
        int("bucket", false),
        int("key_from", true),
        int("key_to", true),
        text("verdict", false),
        text("failure_type", true),
        text("key", true),
        int("source_rows", true),
        int("silver_rows", true),
        text("source_key_sum", true),
        text("silver_key_sum", true),
        Field::new("hashed", DataType::Boolean, false),
        text("source_hash", true),
        text("silver_hash", true),
        text("source_lsn", false),
        text("silver_lsn", true),
        int("silver_version", false),
    ]))
}

/// Column comments of the report table.
pub fn report_comments() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("run_id", "The reconcile run"),
        ("run_at", "When the run started (UTC)"),
        ("kind", "bucket: one row per bucket of the key's range; key: one row per differing key"),
        ("verdict", "The bucket's verdict: MATCH, MISMATCH or IN_FLIGHT"),
        ("failure_type", "For a key: MISSING_TARGET, MISSING_SOURCE, RECORD_DIFF or IN_FLIGHT"),
        ("key", "The key as JSON"),
        ("hashed", "Whether the bucket's rows were compared one by one"),
        ("source_lsn", "SQL Server's max LSN just before it was counted"),
        ("silver_lsn", "Silver's applied LSN (control table) at the compared version"),
        ("silver_version", "The silver version compared"),
    ])
}

fn rows_batch(outcome: &Outcome, rows: &[Row]) -> RecordBatch {
    let n = rows.len();
    let repeat = |value: &str| -> ArrayRef { Arc::new(StringArray::from(vec![value; n])) };
    let opt_text = |f: &dyn Fn(&Row) -> Option<String>| -> ArrayRef { Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>())) };
    let opt_int = |f: &dyn Fn(&Row) -> Option<i64>| -> ArrayRef { Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>())) };
    let columns: Vec<ArrayRef> = vec![
        repeat(&outcome.run_id),
        Arc::new(TimestampMicrosecondArray::from(vec![outcome.run_at.timestamp_micros(); n]).with_timezone("UTC")),
        repeat(&outcome.silver_table),
        repeat(&outcome.source_table),
        repeat(&outcome.capture_instance),
        repeat(outcome.mode),
        Arc::new(StringArray::from(rows.iter().map(|r| r.kind).collect::<Vec<_>>())),
        Arc::new(Int64Array::from(rows.iter().map(|r| r.bucket as i64).collect::<Vec<_>>())),
        opt_int(&|r| r.key_from),
        opt_int(&|r| r.key_to),
        Arc::new(StringArray::from(rows.iter().map(|r| r.verdict).collect::<Vec<_>>())),
        opt_text(&|r| r.failure_type.map(str::to_owned)),
        opt_text(&|r| r.key.clone()),
        opt_int(&|r| r.source_rows.map(|v| v as i64)),
        opt_int(&|r| r.silver_rows.map(|v| v as i64)),
        opt_text(&|r| r.source_key_sum.clone()),
        opt_text(&|r| r.silver_key_sum.clone()),
        Arc::new(BooleanArray::from(rows.iter().map(|r| r.hashed).collect::<Vec<_>>())),
        opt_text(&|r| r.source_hash.clone()),
        opt_text(&|r| r.silver_hash.clone()),
        repeat(&outcome.positions.source_lsn),
        Arc::new(StringArray::from(vec![outcome.positions.silver_lsn.clone(); n])),
        Arc::new(Int64Array::from(vec![outcome.positions.silver_version; n])),
    ];
    #[allow(clippy::expect_used)] // invariant: the columns are built from report_schema, in its order
    RecordBatch::try_new(report_schema(), columns).expect("report rows match the report schema")
}

/// Appends the run's rows to the report table at `location`, creating it on first use.
pub async fn write(outcome: &Outcome, location: &str, storage: &Storage) -> Result<(), DeltaError> {
    let report = match table::open(location, storage).await? {
        Some(report) => report,
        None => table::create(location, storage, &report_schema(), &report_comments(), "mssql-cdc reconcile report: one row per bucket and per differing key").await?,
    };
    let metadata = [("mssql_cdc.reconcile_run".to_owned(), serde_json::Value::String(outcome.run_id.clone()))];
    table::append(report, vec![outcome.report_batch()], "mssql-cdc-reconcile", outcome.run_at.timestamp_millis(), metadata).await?;
    Ok(())
}
