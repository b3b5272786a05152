//! apply_changes as a property: for random change streams written to real bronze and facts
//! Delta tables on disk, silver (read back from its Delta table) equals the fold of the
//! changes of the batches applied, after every step; the verdict never moves back nor runs
//! ahead of the data; a restarted stage applies nothing twice; and a replay of the whole
//! prefix (the position lost) changes nothing.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};
use crate::delta::query::query;
use crate::delta::storage::Storage;
use crate::delta::table;
use mssql_cdc_core::log::control::{ControlRecord, CONTROL_VERSION};
use mssql_cdc_core::log::schema::{Column, TableSchema};
use mssql_cdc_core::log::{ColumnType, RecordFormat};
use mssql_cdc_types::lsn::Lsn;
use crate::facts::{facts_app_id, facts_comments, facts_rows, facts_schema, SinkMetrics};
use crate::silver::config::Granularity;
use mssql_cdc_core::config::Problems;
use mssql_cdc_core::stage::ConnectorKind;
use crate::silver::{Applier, SilverOptions, SilverSettings};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One change: key, commit number, seqval, operation, value.
type Change = (i64, u64, u64, i32, i64);

const BRONZE_APP: &str = "bronze-app";

fn bronze_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Int64, true),
        Field::new("_start_lsn", DataType::Utf8, false),
        Field::new("_seqval", DataType::Utf8, false),
        Field::new("_operation", DataType::Int32, false),
        Field::new("_commit_ts", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new("_batch_id", DataType::Int64, false),
    ]))
}

/// Commit `n`'s time: one per 7 minutes from a fixed start, so batches cross hour bounds.
fn commit_time(n: u64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_790_000_000 + n as i64 * 420, 0).unwrap()
}

fn lsn(n: u64) -> Lsn {
    Lsn::from_record(n * 10)
}

/// A random stream cut into batches: each batch is a run of whole commits (possibly none:
/// a heartbeat), each commit 1–4 statements on 8 keys: inserts, updates (3+4), deletes, key
/// moves (1+2), so one key changes many times in a batch.
fn stream(rng: &mut StdRng) -> Vec<(Vec<Change>, Option<u64>)> {
    let mut batches = Vec::new();
    let mut commit = 1;
    for _ in 0..rng.random_range(3..12) {
        let mut changes = Vec::new();
        let mut last_commit = None;
        let commits = if rng.random_bool(0.2) { 0 } else { rng.random_range(1..6) };
        for _ in 0..commits {
            commit += 1;
            last_commit = Some(commit);
            for seq in 0..rng.random_range(1..5u64) {
                let key = rng.random_range(0..8);
                let value = rng.random_range(0..1_000_000);
                match rng.random_range(0..4) {
                    0 => changes.push((key, commit, seq, 2, value)),
                    1 => changes.push((key, commit, seq, 1, 0)),
                    2 => {
                        changes.push((key, commit, seq, 3, -1));
                        changes.push((key, commit, seq, 4, value));
                    }
                    _ => {
                        let to = rng.random_range(0..8);
                        changes.push((key, commit, seq, 1, 0));
                        changes.push((to, commit, seq, 2, value));
                    }
                }
            }
        }
        // A heartbeat still moves time: an idle entry's commit.
        if commits == 0 && rng.random_bool(0.5) {
            commit += 1;
            last_commit = Some(commit);
        }
        batches.push((changes, last_commit));
    }
    batches
}

fn bronze_batch(changes: &[Change], batch_id: i64) -> RecordBatch {
    let hex = |v: u64| format!("0x{v:020X}");
    RecordBatch::try_new(
        bronze_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0))),
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.4))),
            Arc::new(StringArray::from_iter_values(changes.iter().map(|c| lsn(c.1).to_string()))),
            Arc::new(StringArray::from_iter_values(changes.iter().map(|c| hex(c.2)))),
            Arc::new(Int32Array::from_iter_values(changes.iter().map(|c| c.3))),
            Arc::new(TimestampMicrosecondArray::from_iter_values(changes.iter().map(|c| commit_time(c.1).timestamp_micros())).with_timezone("UTC")),
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|_| batch_id))),
        ],
    )
    .unwrap()
}

fn control(batch_id: u64, changes: &[Change], last_commit: Option<u64>, previous_end: u64) -> ControlRecord {
    ControlRecord {
        version: CONTROL_VERSION,
        batch_id,
        generation: 0,
        capture_instance: "dbo_t".into(),
        data_topic: "cdc.db.dbo.t".into(),
        from_lsn: lsn(previous_end),
        to_lsn: lsn(last_commit.unwrap_or(previous_end)),
        commits: changes.iter().map(|c| c.1).collect::<std::collections::BTreeSet<_>>().len() as u64,
        rows: changes.len() as u64,
        min_row_lsn: changes.iter().map(|c| lsn(c.1)).min(),
        max_row_lsn: changes.iter().map(|c| lsn(c.1)).max(),
        min_commit_ts: last_commit.map(|_| commit_time(changes.first().map_or(last_commit.unwrap(), |c| c.1))),
        max_commit_ts: last_commit.map(commit_time),
        partitions: Vec::new(),
        format: RecordFormat::Json,
        schema_version: 1,
        schema: TableSchema {
            columns: vec![Column { name: "id".into(), ty: ColumnType::Int64 }, Column { name: "value".into(), ty: ColumnType::Int64 }],
            key: vec!["id".into()],
            include_command_id: false,
        },
        envelope: mssql_cdc_core::log::Envelope::Native,
        schema_id: None,
        events: Vec::new(),
        warnings: Vec::new(),
        metrics: Default::default(),
        snapshot: None,
        last_commit_ts: None,
    }
}

/// Writes bronze and facts as the bronze sink would: data commit, then facts commit, per batch.
async fn write_bronze(bronze: &str, facts: &str, batches: &[(Vec<Change>, Option<u64>)]) {
    let storage = Storage::new();
    let mut facts_table = table::create(facts, &storage, &facts_schema(), &facts_comments(), "facts").await.unwrap();
    let mut bronze_table = None;
    let mut end = 0;
    for (id, (changes, last_commit)) in batches.iter().enumerate() {
        if !changes.is_empty() {
            let t = match bronze_table.take() {
                Some(t) => t,
                None => table::create(bronze, &storage, &bronze_schema(), &Default::default(), "bronze").await.unwrap(),
            };
            bronze_table = Some(table::append(t, vec![bronze_batch(changes, id as i64)], BRONZE_APP, id as i64, []).await.unwrap());
        }
        let record = control(id as u64, changes, *last_commit, end);
        end = last_commit.unwrap_or(end);
        let metrics = SinkMetrics { rows: changes.len() as u64, ..Default::default() };
        let rows = facts_rows(bronze, BRONZE_APP, &record, &metrics, Utc::now());
        facts_table = table::append(facts_table, vec![rows], &facts_app_id(BRONZE_APP), id as i64, []).await.unwrap();
    }
}

/// The reference: every change of `batches` applied one by one in (lsn, seqval, operation) order.
fn reference(batches: &[(Vec<Change>, Option<u64>)]) -> BTreeMap<i64, i64> {
    let mut all: Vec<Change> = batches.iter().flat_map(|b| b.0.iter().copied()).collect();
    all.sort_by_key(|c| (c.1, c.2, c.3));
    let mut state = BTreeMap::new();
    for (key, _, _, op, value) in all {
        match op {
            1 => {
                state.remove(&key);
            }
            2 | 4 => {
                state.insert(key, value);
            }
            _ => {}
        }
    }
    state
}

async fn read_silver(location: &str) -> BTreeMap<i64, i64> {
    let Some(silver) = table::open(location, &Storage::new()).await.unwrap() else { return BTreeMap::new() };
    let mut state = BTreeMap::new();
    for batch in query(&[("silver", &silver)], "SELECT id, value FROM silver").await.unwrap() {
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let values = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..batch.num_rows() {
            assert!(state.insert(ids.value(i), values.value(i)).is_none(), "key {} twice in silver", ids.value(i));
        }
    }
    state
}

fn options(dir: &std::path::Path, app_id: &str, control: &str, (max_batches, max_rows): (u64, u64), deletion_vectors: bool) -> SilverSettings {
    let options = SilverOptions {
        bronze: Some(dir.join("bronze").display().to_string()),
        target: Some(dir.join("silver").display().to_string()),
        app_id: Some(app_id.into()),
        keys: Some(vec!["id".into()]),
        control_table: Some(dir.join(control).display().to_string()),
        facts_table: Some(dir.join("facts").display().to_string()),
        granularity: Granularity::Hour,
        max_batches_per_apply: max_batches,
        max_rows_per_apply: max_rows,
        deletion_vectors,
        ..SilverOptions::default()
    };
    let mut problems = Problems::under("");
    let settings = options.validate(&mut problems).expect("valid silver options");
    assert!(problems.is_empty(), "{:?}", problems.into_vec());
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silver_equals_the_fold_of_the_changes() {
    check_the_fold(false).await;
}

/// The same property with `deletion_vectors = true`: rows replaced and deleted by marks, read
/// back through the deletion vectors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silver_by_deletion_vectors_equals_the_fold_of_the_changes() {
    check_the_fold(true).await;
}

async fn check_the_fold(deletion_vectors: bool) {
    let seeds: u64 = std::env::var("SILVER_PROPERTY_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let batches = stream(&mut rng);
        let dir = tempfile::tempdir().unwrap();
        let (bronze, facts) = (dir.path().join("bronze").display().to_string(), dir.path().join("facts").display().to_string());
        write_bronze(&bronze, &facts, &batches).await;
        // Runs cut by batch count and by rows (a batch over the row limit goes alone, applied
        // in slices of keys: silver/slice.rs).
        let limits = (rng.random_range(1..4), [1, 5, 20, 100_000][rng.random_range(0..4)]);
        let mut applier = Applier::open(&options(dir.path(), "silver-app", "control", limits, deletion_vectors), Storage::new()).await.unwrap();
        let mut verdict = None;
        // Rows replaced or deleted in a silver table that already existed (by marks, then).
        let mut replaced_on_a_table = 0;
        loop {
            let existed = table::open(&dir.path().join("silver").display().to_string(), &Storage::new()).await.unwrap().is_some();
            let report = applier.step().await.unwrap();
            if existed {
                replaced_on_a_table += report.updated + report.deleted;
            }
            if report.batches == 0 {
                break;
            }
            let applied = &batches[..=report.last_batch as usize];
            assert_eq!(read_silver(&dir.path().join("silver").display().to_string()).await, reference(applied), "seed {seed}, after batch {}", report.last_batch);
            // The verdict: monotonic, and never past the data applied.
            let end = applied.iter().rev().find_map(|b| b.1).map(commit_time);
            assert!(report.finalized_until >= verdict, "seed {seed}: the verdict moved back");
            if let Some(v) = report.finalized_until {
                assert!(end.is_some_and(|end| v <= end), "seed {seed}: verdict {v} ahead of the data (end {end:?})");
            }
            assert_eq!(report.finalized_until, end.map(|e| Granularity::Hour.truncate(e)), "seed {seed}: the verdict is the truncated end commit time");
            verdict = report.finalized_until;
        }
        let expected = reference(&batches);
        let silver_path = dir.path().join("silver").display().to_string();
        if deletion_vectors && replaced_on_a_table > 0 {
            let written = std::fs::read_dir(&silver_path).unwrap().filter_map(|e| e.ok()).any(|e| e.file_name().to_string_lossy().starts_with("deletion_vector_"));
            assert!(written, "seed {seed}: rows were replaced by deletion vectors");
        }
        assert_eq!(read_silver(&silver_path).await, expected, "seed {seed}: at the end");
        let version = table::open(&silver_path, &Storage::new()).await.unwrap().and_then(|t| t.version());

        // Restarted: the txn versions say everything is applied; nothing is written to silver.
        let mut restarted = Applier::open(&options(dir.path(), "silver-app", "control", (5, 100_000), deletion_vectors), Storage::new()).await.unwrap();
        assert_eq!(restarted.step().await.unwrap().batches, 0, "seed {seed}");
        assert_eq!(table::open(&silver_path, &Storage::new()).await.unwrap().and_then(|t| t.version()), version, "seed {seed}: a restart applies nothing twice");

        // The whole prefix again (a new app id and control table: the position lost).
        let mut replay = Applier::open(&options(dir.path(), "replayer", "control-replay", (100_000, 100_000_000), deletion_vectors), Storage::new()).await.unwrap();
        let report = replay.step().await.unwrap();
        assert_eq!(report.batches as usize, batches.len(), "seed {seed}");
        assert_eq!((report.inserted, report.updated, report.deleted), (0, 0, 0), "seed {seed}: a replay changes no row");
        assert_eq!(read_silver(&silver_path).await, expected, "seed {seed}: after the replay");

        // `optimize` (the compaction the docs tell users to run) applies the vectors: the
        // marked rows stay gone, and the small files it rewrites carry no vector any more.
        table::optimize(&silver_path, &Storage::new(), &[], None).await.unwrap();
        assert_eq!(read_silver(&silver_path).await, expected, "seed {seed}: after optimize");
        let optimized = table::open(&silver_path, &Storage::new()).await.unwrap().unwrap();
        let marked = optimized.snapshot().unwrap().log_data().iter().filter(|f| f.deletion_vector_descriptor().is_some()).count();
        assert!(!deletion_vectors || marked == 0 || optimized.snapshot().unwrap().log_data().iter().count() == 1, "seed {seed}: {marked} files keep a vector after optimize");
    }
}

/// Invariant: silver kept by deletion vectors reads back whole even when its files with vectors
/// outnumber the reader's blocking threads. delta-rs starts one blocking task per vector at
/// once and each waits for a read that needs another blocking thread
/// (delta-io/delta-rs#4657); [`crate::delta::vector_reads`] gives such reads a runtime with
/// room for them. Here the reader's runtime has a single blocking thread, so one file with a
/// vector would hang a read on it.
#[test]
fn a_table_with_more_vectors_than_blocking_threads_reads_back() {
    let setup = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (silver, expected) = setup.block_on(async {
        for seed in 0..12 {
            let seed_dir = dir.path().join(seed.to_string());
            let batches = stream(&mut StdRng::seed_from_u64(seed));
            let (bronze, facts) = (seed_dir.join("bronze").display().to_string(), seed_dir.join("facts").display().to_string());
            write_bronze(&bronze, &facts, &batches).await;
            let mut applier = Applier::open(&options(&seed_dir, "silver-app", "control", (1, 100_000), true), Storage::new()).await.unwrap();
            while applier.step().await.unwrap().batches > 0 {}
            let silver = table::open(&seed_dir.join("silver").display().to_string(), &Storage::new()).await.unwrap();
            if let Some(silver) = silver.filter(|t| crate::delta::vector_reads::files_with_vectors(t) > 0) {
                return (silver, reference(&batches));
            }
        }
        panic!("no seed left a file with a deletion vector in silver");
    });
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let tight = tokio::runtime::Builder::new_multi_thread().worker_threads(2).max_blocking_threads(1).enable_all().build().unwrap();
        let rows = tight.block_on(query(&[("silver", &silver)], "SELECT id, value FROM silver")).unwrap();
        let mut state = BTreeMap::new();
        for batch in rows {
            let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let values = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            state.extend((0..batch.num_rows()).map(|i| (ids.value(i), values.value(i))));
        }
        let _ = sender.send(state);
    });
    match receiver.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(read) => assert_eq!(read, expected),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("the read of a table with deletion vectors hung for 2 minutes"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the read of a table with deletion vectors failed (its thread panicked)"),
    }
}
