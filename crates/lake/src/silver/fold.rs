//! The fold of a run of bronze rows: for each key, the row of its newest change.
//!
//! Order is invariant 4's: (`_start_lsn`, `_seqval`, `_operation`), all ascending, the last
//! wins. `_start_lsn` and `_seqval` are fixed-width hex text, so text order is LSN order.
//! When the feed carries `_command_id` (the statement's place in its transaction), the order
//! within a transaction is by statement, and a statement's before-images come before its other
//! rows: one statement removes all the rows it changes before it writes their new images, so
//! `UPDATE t SET k = k + 1` over keys 1 and 2 of a table without a unique index leaves 2 and 3
//! (in seqval order, row 2's before-image would remove the 2 row 1 just wrote).
//! A winning delete (operation 1) becomes a row with `_delete = true`; inserts, after-images
//! and snapshot rows (2, 4, 0) become upserts. A before-image (operation 3) is never applied as
//! an image: it removes its key, and its after-image (operation 4, same `_start_lsn` and
//! `_seqval`, so later in the order) writes the key again. With a unique index the two share
//! the key and the after-image wins; on a table without one, whose silver `keys` an update may
//! change, the old key goes away. A key update of an indexed table arrives as a delete of the
//! old key and an insert of the new one, so it needs nothing special.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, SortField};

use mssql_cdc_core::log::schema::{CAPTURE_INSTANCE, COMMAND_ID, GENERATION, OPERATION, SEQVAL, SNAPSHOT, START_LSN};
use crate::bronze::records::{BATCH_ID, KAFKA_OFFSET, KAFKA_PARTITION};

/// The column of the folded rows that says "delete this key".
pub const DELETE: &str = "_delete";

/// Bronze columns silver does not keep.
pub const DROPPED: &[&str] = &[SEQVAL, OPERATION, COMMAND_ID, CAPTURE_INSTANCE, GENERATION, SNAPSHOT, BATCH_ID, KAFKA_PARTITION, KAFKA_OFFSET];

/// Silver's layout for a bronze layout: the captured columns, `_start_lsn` and `_commit_ts`.
pub fn silver_schema(bronze: &Schema) -> SchemaRef {
    Arc::new(Schema::new(bronze.fields().iter().filter(|f| !DROPPED.contains(&f.name().as_str())).cloned().collect::<Vec<_>>()))
}

/// What a fold found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FoldCounts {
    /// Change rows read (before-images included).
    pub changes: usize,
    /// Keys whose newest change is a delete.
    pub deletes: usize,
    /// Keys whose newest change is an image.
    pub upserts: usize,
}

/// Folds bronze rows (any number of batches, same layout) into one row per key: silver's
/// columns plus [`DELETE`]. Returns `None` when no row is left.
pub fn fold(batches: &[RecordBatch], keys: &[String]) -> Result<(Option<RecordBatch>, FoldCounts), ArrowError> {
    let Some(first) = batches.first() else { return Ok((None, FoldCounts::default())) };
    let all = concat_batches(&first.schema(), batches)?;
    let mut counts = FoldCounts { changes: all.num_rows(), ..FoldCounts::default() };
    let rows = all;
    if rows.num_rows() == 0 {
        return Ok((None, counts));
    }
    let key_columns: Vec<ArrayRef> = keys.iter().map(|k| column(&rows, k)).collect::<Result<_, _>>()?;
    let converter = RowConverter::new(key_columns.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
    let key_rows = converter.convert_columns(&key_columns)?;
    let lsn = string(&rows, START_LSN)?;
    let seqval = string(&rows, SEQVAL)?;
    let operation = int32(&rows, OPERATION)?;
    let command = match rows.column_by_name(COMMAND_ID) {
        Some(_) => Some(int32(&rows, COMMAND_ID)?),
        None => None,
    };
    // A change's place in the order: LSN, then (with `_command_id`) its statement with the
    // statement's before-images first, then seqval and operation.
    let place = |i: usize| {
        let statement = command.as_ref().map(|c| if c.is_null(i) { 0 } else { c.value(i) });
        let image_after = statement.map(|_| operation.value(i) != 3);
        (lsn.value(i), statement, image_after, seqval.value(i), operation.value(i))
    };
    let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
    // By key, then newest first.
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (a as usize, b as usize);
        key_rows.row(a).cmp(&key_rows.row(b)).then_with(|| place(b).cmp(&place(a)))
    });
    let mut winners = Vec::new();
    for (i, &index) in order.iter().enumerate() {
        if i == 0 || key_rows.row(order[i - 1] as usize) != key_rows.row(index as usize) {
            winners.push(index);
        }
    }
    let winners = UInt32Array::from(winners);
    let chosen = take_record_batch(&rows, &winners)?;
    let deletes: BooleanArray = int32(&chosen, OPERATION)?.iter().map(|op| Some(matches!(op, Some(1 | 3)))).collect();
    counts.deletes = deletes.true_count();
    counts.upserts = chosen.num_rows() - counts.deletes;
    let silver = silver_schema(&chosen.schema());
    let mut fields: Vec<Field> = silver.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns: Vec<ArrayRef> = silver.fields().iter().map(|f| column(&chosen, f.name())).collect::<Result<_, _>>()?;
    fields.push(Field::new(DELETE, DataType::Boolean, false));
    columns.push(Arc::new(deletes));
    Ok((Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?), counts))
}

fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef, ArrowError> {
    batch.column_by_name(name).cloned().ok_or_else(|| ArrowError::SchemaError(format!("bronze has no column `{name}`")))
}

#[allow(clippy::expect_used)] // invariant: a successful cast yields the array type cast to
fn string(batch: &RecordBatch, name: &str) -> Result<StringArray, ArrowError> {
    let array = column(batch, name)?;
    let array = arrow::compute::cast(&array, &DataType::Utf8)?;
    Ok(array.as_any().downcast_ref::<StringArray>().expect("cast to Utf8").clone())
}

#[allow(clippy::expect_used)] // invariant: a successful cast yields the array type cast to
fn int32(batch: &RecordBatch, name: &str) -> Result<Int32Array, ArrowError> {
    let array = arrow::compute::cast(&column(batch, name)?, &DataType::Int32)?;
    Ok(array.as_any().downcast_ref::<Int32Array>().expect("cast to Int32").clone())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::collections::BTreeMap;

    /// One change: (key, lsn, seqval, operation, value).
    pub(crate) type Change = (i64, u64, u64, i32, i64);

    pub(crate) fn bronze_batch(changes: &[Change]) -> RecordBatch {
        let hex = |v: u64| format!("0x{v:020X}");
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("value", DataType::Int64, true),
            Field::new(START_LSN, DataType::Utf8, false),
            Field::new(SEQVAL, DataType::Utf8, false),
            Field::new(OPERATION, DataType::Int32, false),
            Field::new(BATCH_ID, DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0))),
                Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.4))),
                Arc::new(StringArray::from_iter_values(changes.iter().map(|c| hex(c.1)))),
                Arc::new(StringArray::from_iter_values(changes.iter().map(|c| hex(c.2)))),
                Arc::new(Int32Array::from_iter_values(changes.iter().map(|c| c.3))),
                Arc::new(Int64Array::from_iter_values(changes.iter().map(|_| 0))),
            ],
        )
        .unwrap()
    }

    /// The reference: apply every change in (lsn, seqval, operation) order to a map.
    pub(crate) fn reference(state: &mut BTreeMap<i64, i64>, changes: &[Change]) {
        let mut sorted = changes.to_vec();
        sorted.sort_by_key(|c| (c.1, c.2, c.3));
        for (key, _, _, op, value) in sorted {
            match op {
                1 => {
                    state.remove(&key);
                }
                0 | 2 | 4 => {
                    state.insert(key, value);
                }
                _ => {}
            }
        }
    }

    /// `batch` with a `_command_id` column: each change's statement.
    fn with_statements(batch: RecordBatch, statements: &[i32]) -> RecordBatch {
        let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut columns = batch.columns().to_vec();
        fields.push(Field::new(COMMAND_ID, DataType::Int32, true));
        columns.push(Arc::new(Int32Array::from(statements.to_vec())));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Invariant: one statement shifting the key of several rows of a table without a unique
    /// index (`SET id = id + 1` over 1 and 2, each row a before-image and an after-image with
    /// its own seqval) leaves every new key: a statement's before-images come first. A later
    /// statement of the same transaction moving a key back still wins.
    #[test]
    fn a_statement_shifting_keys_over_each_other_keeps_every_new_key() {
        // (key, lsn, seqval, operation, value): statement 1 moves 1→2 and 2→3 in one
        // transaction (LSN 7); statement 2 moves 3→1.
        let changes: Vec<Change> = vec![(1, 7, 1, 3, 10), (2, 7, 1, 4, 10), (2, 7, 2, 3, 20), (3, 7, 2, 4, 20), (3, 7, 3, 3, 20), (1, 7, 3, 4, 20)];
        let batch = with_statements(bronze_batch(&changes), &[1, 1, 1, 1, 2, 2]);
        let (folded, _) = fold(&[batch], &["id".to_owned()]).unwrap();
        let folded = folded.unwrap();
        let ids = folded.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
        let values = folded.column_by_name("value").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
        let deletes = folded.column_by_name(DELETE).unwrap().as_any().downcast_ref::<BooleanArray>().unwrap();
        let kept: BTreeMap<i64, i64> = (0..folded.num_rows()).filter(|&i| !deletes.value(i)).map(|i| (ids.value(i), values.value(i))).collect();
        assert_eq!(kept, BTreeMap::from([(1, 20), (2, 10)]), "statement 1 leaves 2 and 3, statement 2 moves 3 to 1");
        // Without `_command_id` the order is seqval's: row 2's before-image removes the 2 that
        // row 1 wrote (the documented limit of feeds without the column).
        let (folded, _) = fold(&[bronze_batch(&changes)], &["id".to_owned()]).unwrap();
        let folded = folded.unwrap();
        let deletes = folded.column_by_name(DELETE).unwrap().as_any().downcast_ref::<BooleanArray>().unwrap();
        assert_eq!(deletes.true_count(), 2);
    }

    /// On a table without a unique index, an UPDATE of silver's `keys` column arrives as a
    /// before-image with the old key and an after-image with the new one: the old key goes.
    #[test]
    fn an_update_that_changes_the_key_of_a_keyless_table_removes_the_old_key() {
        let changes: Vec<Change> = vec![(5, 1, 1, 2, 50), (5, 2, 1, 3, 50), (2000, 2, 1, 4, 51), (7, 3, 1, 3, 70), (7, 3, 1, 4, 71)];
        let (folded, counts) = fold(&[bronze_batch(&changes)], &["id".to_owned()]).unwrap();
        let folded = folded.unwrap();
        let ids = folded.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
        let values = folded.column_by_name("value").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
        let deletes = folded.column_by_name(DELETE).unwrap().as_any().downcast_ref::<BooleanArray>().unwrap();
        let rows: BTreeMap<i64, (bool, i64)> = (0..folded.num_rows()).map(|i| (ids.value(i), (deletes.value(i), values.value(i)))).collect();
        assert!(rows[&5].0, "the old key is deleted");
        assert_eq!(rows[&2000], (false, 51), "the new key holds the after-image");
        assert_eq!(rows[&7], (false, 71), "an update keeping the key applies its after-image");
        assert_eq!((counts.deletes, counts.upserts), (1, 2));
    }

    /// Within one batch, the fold equals applying the changes one by one in order, whatever
    /// order the rows arrive in (random streams: inserts, updates as 3+4, deletes, key moves
    /// as 1+2, many changes of one key).
    #[test]
    fn fold_equals_applying_changes_in_order() {
        use rand::{Rng, SeedableRng};
        for seed in 0..300 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut changes = Vec::new();
            let mut lsn = 1;
            for _ in 0..rng.random_range(1..40) {
                lsn += 1;
                for seq in 0..rng.random_range(1..5u64) {
                    let key = rng.random_range(0..6);
                    let value = rng.random_range(0..1000);
                    match rng.random_range(0..4) {
                        0 => changes.push((key, lsn, seq, 2, value)),
                        1 => changes.push((key, lsn, seq, 1, 0)),
                        2 => {
                            changes.push((key, lsn, seq, 3, -1));
                            changes.push((key, lsn, seq, 4, value));
                        }
                        _ => {
                            let to = rng.random_range(0..6);
                            changes.push((key, lsn, seq, 1, 0));
                            changes.push((to, lsn, seq, 2, value));
                        }
                    }
                }
            }
            let mut shuffled = changes.clone();
            use rand::seq::SliceRandom;
            shuffled.shuffle(&mut rng);
            let mut expected = BTreeMap::new();
            reference(&mut expected, &changes);
            let (folded, counts) = fold(&[bronze_batch(&shuffled)], &["id".to_owned()]).unwrap();
            let folded = folded.unwrap();
            let ids = folded.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
            let values = folded.column_by_name("value").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
            let deletes = folded.column_by_name(DELETE).unwrap().as_any().downcast_ref::<BooleanArray>().unwrap();
            let mut found = BTreeMap::new();
            for i in 0..folded.num_rows() {
                if !deletes.value(i) {
                    found.insert(ids.value(i), values.value(i));
                }
            }
            assert_eq!(found, expected, "seed {seed}");
            assert_eq!(counts.changes, changes.len());
            assert!(folded.column_by_name(OPERATION).is_none() && folded.column_by_name(START_LSN).is_some());
        }
    }
}
