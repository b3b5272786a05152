//! # mssql-cdc-reconcile
//!
//! Is silver equal to its SQL Server table? `mssql-cdc reconcile` answers while both sides keep
//! changing, and tells a real difference from a change still on its way
//! (`docs/validation.md`).
//!
//! A run reads, in this order:
//!
//! 1. **Silver's position** ([`lake::Silver::open`]): the control row's applied LSN `E`, then
//!    silver's newest version (it holds everything up to `E`).
//! 2. **SQL Server's position**: `sys.fn_cdc_get_max_lsn()` (`M`), just before counting.
//! 3. **Tier 1, every row** ([`buckets`]): for a one-column integer key, one grouped scan on
//!    SQL Server counts rows and sums keys per fine bucket of the key's range, the same
//!    arithmetic runs over silver's keys, and adjacent fine buckets merge to about
//!    `bucket_rows`. Any other key is counted whole (one bucket).
//! 4. **Tier 2, row by row**: every bucket that differs and a sampled fraction of those that
//!    match are read from both sides and compared by a canonical row hash
//!    ([`canonical`]): `MISSING_TARGET`, `MISSING_SOURCE`, `RECORD_DIFF` per key.
//! 5. **In flight**: a differing key with a change after `E` in bronze or in the change table
//!    is `IN_FLIGHT`, not a failure; a bucket whose every difference is in flight is too. What
//!    is left is looked at once more after `settle`, for commits the capture job has yet to
//!    harvest.
//!
//! Nothing is written to SQL Server and nothing is read there with NOLOCK.
//!
//! ## Example
//!
//! The report's verdict and failure names, as the report table spells them:
//!
//! ```
//! use mssql_cdc_reconcile::report::{FailureType, Verdict};
//!
//! assert_eq!(Verdict::InFlight.as_str(), "IN_FLIGHT");
//! assert_eq!(FailureType::MissingTarget.as_str(), "MISSING_TARGET");
//! ```

pub mod buckets;
pub mod canonical;
pub mod error;
pub mod lake;
pub mod layout;
pub mod report;
pub mod sqlserver;

use std::collections::HashMap;
use std::time::Instant;

use chrono::Utc;
use mssql_cdc_core::telemetry::events::ReconcileFinished;
use mssql_cdc_lake::silver::SilverSettings;
use mssql_cdc_source::reader::CapturedTable;
use mssql_cdc_source::MssqlSourceSettings;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use error::ReconcileError;
pub use report::{Outcome, Overall};

use buckets::{Cut, Tally};
use lake::Silver;
use layout::{Compared, Layout};
use report::{BucketResult, FailureType, Finding, Positions, Verdict};
use sqlserver::SqlServer;

/// What one run compares, and how.
#[derive(Clone, Debug)]
pub struct ReconcileSettings {
    /// The feed's source connector: connection, isolation level and lock timeout of reads.
    pub source: MssqlSourceSettings,
    /// The capture instance whose table silver holds.
    pub capture_instance: String,
    /// The silver connector: silver, bronze, the control table, keys, storage.
    pub silver: SilverSettings,
    /// Rows per bucket, about (positive).
    pub bucket_rows: u64,
    /// Fraction of matching buckets compared row by row, 0 to 1.
    pub sample: f64,
    /// Seed of the sample; `None`: drawn (and recorded in the outcome).
    pub sample_seed: Option<u64>,
    /// How long to wait for the capture job before calling a difference real (a commit it
    /// has not harvested yet is invisible in the change table).
    pub settle: std::time::Duration,
}

/// Runs one reconcile and returns its outcome (write it with [`report::write`]).
pub async fn reconcile(settings: &ReconcileSettings) -> Result<Outcome, ReconcileError> {
    let started = Instant::now();
    let run_at = Utc::now();
    let storage = settings.silver.storage_options.resolve()?;
    let silver = Silver::open(&settings.silver, &storage).await?;
    let mut sql = SqlServer::open(&settings.source, &settings.capture_instance).await?;
    let captured = sql.captured(&settings.source).await?;
    let layout = layout(&captured, &silver.columns, settings.silver.keys.as_deref(), &sql.instance.index_columns)?;
    let source_lsn = sql.max_lsn().await?;
    let (mode, mut buckets) = tier1(&mut sql, &silver, &layout, settings.bucket_rows).await?;

    let sample_seed = settings.sample_seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(sample_seed);
    let mut findings = Vec::new();
    for bucket in &mut buckets {
        let sampled = bucket.verdict == Verdict::Match && rng.random::<f64>() < settings.sample;
        if bucket.verdict != Verdict::Mismatch && !sampled {
            continue;
        }
        let range = (mode == "ranges").then_some((bucket.key_from, bucket.key_to));
        let source_rows = sql.rows(&layout, range).await?;
        let silver_rows = silver.rows(&layout, range).await?;
        bucket.hashed = true;
        bucket.verdict = Verdict::Match;
        for (key, failure_type) in differences(&source_rows, &silver_rows) {
            findings.push(Finding { bucket: bucket.bucket, failure_type, source_hash: source_rows.get(&key).cloned(), silver_hash: silver_rows.get(&key).cloned(), key });
        }
    }
    if !findings.is_empty() {
        // A difference whose key changed after silver's applied position is on its way. A
        // commit the capture job has not harvested yet cannot be seen in the change table:
        // look again once after `settle` before calling what is left real.
        let mut moving = lake::bronze_changed_keys(&settings.silver.bronze, &storage, &layout, silver.applied_lsn).await?;
        moving.extend(sql.changed_keys(&layout, silver.applied_lsn).await?);
        if !settings.settle.is_zero() && findings.iter().any(|f| !moving.contains(&f.key)) {
            tokio::time::sleep(settings.settle).await;
            moving.extend(sql.changed_keys(&layout, silver.applied_lsn).await?);
            moving.extend(lake::bronze_changed_keys(&settings.silver.bronze, &storage, &layout, silver.applied_lsn).await?);
        }
        for finding in &mut findings {
            if moving.contains(&finding.key) {
                finding.failure_type = FailureType::InFlight;
            }
        }
        for bucket in &mut buckets {
            let mut found = findings.iter().filter(|f| f.bucket == bucket.bucket).peekable();
            if found.peek().is_some() {
                bucket.verdict = if found.any(|f| f.failure_type != FailureType::InFlight) { Verdict::Mismatch } else { Verdict::InFlight };
            }
        }
    }
    let outcome = Outcome {
        run_id: uuid::Uuid::new_v4().to_string(),
        run_at,
        silver_table: settings.silver.target.clone(),
        source_table: format!("{}.{}", sql.instance.source_schema, sql.instance.source_table),
        capture_instance: sql.instance.name.clone(),
        mode,
        positions: Positions::new(source_lsn, silver.applied_lsn, silver.version),
        sample: settings.sample,
        sample_seed,
        columns: layout.columns.iter().map(|c| c.name.clone()).collect(),
        skipped_columns: layout.skipped.clone(),
        buckets,
        findings,
        duration: started.elapsed(),
    };
    let verdicts = outcome.by_verdict();
    ReconcileFinished {
        table: &outcome.silver_table,
        verdict: match outcome.overall() {
            Overall::Equal => "equal",
            Overall::InFlight => "in_flight",
            Overall::Mismatch => "mismatch",
        },
        duration: outcome.duration,
        buckets_match: verdicts.get(&Verdict::Match).copied().unwrap_or(0) as u64,
        buckets_in_flight: verdicts.get(&Verdict::InFlight).copied().unwrap_or(0) as u64,
        buckets_mismatch: verdicts.get(&Verdict::Mismatch).copied().unwrap_or(0) as u64,
        findings: outcome.findings.len() as u64,
    }
    .emit();
    Ok(outcome)
}

/// Tier 1: the buckets and their tier-1 verdicts, by key ranges where the key allows it.
async fn tier1(sql: &mut SqlServer, silver: &Silver, layout: &Layout, bucket_rows: u64) -> Result<(&'static str, Vec<BucketResult>), ReconcileError> {
    if let Some(key) = layout.range_key() {
        let silver_keys = silver.keys(&key.name).await?;
        let source_range = sql.key_range(&key.name).await?;
        let silver_range = silver_keys.iter().min().zip(silver_keys.iter().max()).map(|(a, b)| (*a, *b));
        let range = match (source_range, silver_range) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (one, other) => one.or(other),
        };
        let Some((lo, hi)) = range else {
            return Ok(("ranges", vec![BucketResult::new(0, (None, None), Tally::default(), Tally::default(), true, true)]));
        };
        if let Some(cut) = Cut::plan(lo, hi, silver_keys.len() as u64, bucket_rows) {
            let source = sql.tally(&key.name, cut).await?;
            let target = lake::tally(&silver_keys, cut);
            let merged = buckets::merge(&source, &target, bucket_rows);
            let mut out: Vec<BucketResult> =
                merged.iter().enumerate().map(|(i, b)| BucketResult::new(i, cut.keys(b.first, b.last), b.source, b.silver, true, b.agrees)).collect();
            // The outer buckets are open, so a key that arrived past either end is compared.
            if let Some(first) = out.first_mut() {
                first.key_from = None;
            }
            if let Some(last) = out.last_mut() {
                last.key_to = None;
            }
            return Ok(("ranges", out));
        }
    }
    let source = Tally { rows: sql.count().await?, key_sum: 0 };
    let target = Tally { rows: silver.count().await?, key_sum: 0 };
    Ok(("whole_table", vec![BucketResult::new(0, (None, None), source, target, false, source.rows == target.rows)]))
}

/// The keys whose rows differ, with how.
fn differences(source: &HashMap<String, String>, silver: &HashMap<String, String>) -> Vec<(String, FailureType)> {
    let mut out: Vec<(String, FailureType)> = Vec::new();
    for (key, hash) in source {
        match silver.get(key) {
            None => out.push((key.clone(), FailureType::MissingTarget)),
            Some(other) if other != hash => out.push((key.clone(), FailureType::RecordDiff)),
            Some(_) => {}
        }
    }
    out.extend(silver.keys().filter(|k| !source.contains_key(*k)).map(|k| (k.clone(), FailureType::MissingSource)));
    out.sort();
    out
}

/// The compared columns: those captured that silver holds, with the key among them.
fn layout(captured: &CapturedTable, silver_columns: &[String], keys: Option<&[String]>, index_columns: &[String]) -> Result<Layout, ReconcileError> {
    let mut columns = Vec::new();
    let mut skipped = Vec::new();
    for (column, select) in captured.schema.columns.iter().zip(&captured.select) {
        if silver_columns.iter().any(|c| c == &column.name) {
            columns.push(Compared { name: column.name.clone(), ty: column.ty, select: select.clone() });
        } else {
            skipped.push(column.name.clone());
        }
    }
    let wanted: Vec<String> = match keys {
        Some(keys) => keys.to_vec(),
        None => index_columns.to_vec(),
    };
    if wanted.is_empty() {
        return Err(ReconcileError::Key { column: String::new(), message: "the table has no unique index; give the silver connector `keys`".into() });
    }
    let mut key = Vec::new();
    for name in &wanted {
        let position = columns
            .iter()
            .position(|c| c.name == *name)
            .or_else(|| columns.iter().position(|c| c.name.eq_ignore_ascii_case(name)))
            .ok_or_else(|| ReconcileError::Key { column: name.clone(), message: "not a captured column that silver holds".into() })?;
        key.push(position);
    }
    Ok(Layout { columns, key, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each side's extra and differing keys are found once, with their kind.
    #[test]
    fn differences_name_missing_extra_and_changed_keys() {
        let map = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>();
        let source = map(&[("1", "a"), ("2", "b"), ("3", "c")]);
        let silver = map(&[("1", "a"), ("2", "x"), ("4", "d")]);
        assert_eq!(differences(&source, &silver), vec![
            ("2".to_owned(), FailureType::RecordDiff),
            ("3".to_owned(), FailureType::MissingTarget),
            ("4".to_owned(), FailureType::MissingSource),
        ]);
        assert!(differences(&source, &source).is_empty());
    }
}
