//! Slices: one batch larger than a step may hold, applied in ranges of keys.
//!
//! A step takes batches up to `max_rows_per_apply` bronze rows between them, but a single
//! batch (one source transaction) can be larger. Read, folded and merged whole, it would make
//! silver's memory follow the largest transaction. Such a batch is applied in
//! `⌈rows / max_rows_per_apply⌉` slices instead, each a range of keys:
//!
//! 1. **Sample**: one read of the batch keeps the key of every k-th row, at most
//!    [`SAMPLE_KEYS`] of them, as Arrow row encodings (which compare as the keys do).
//! 2. **Cut**: the sorted sample is cut into slices of about equal counts; a cut is a key.
//! 3. **Apply**: each slice reads the batch again, keeps the rows whose key falls in its
//!    range ([`Slicer::rows_in`]), folds and MERGEs them. A key's changes all fall in one
//!    slice, so the slices' folds together are the batch's fold. Ranges of keys (not hashes)
//!    keep each MERGE to the silver files of its range, as silver is clustered by key.
//!
//! Memory follows a slice and the few bronze files being read (the reads stream file by
//! file), not the batch. A key is never split, so keys that repeat make fewer slices; at
//! most [`MAX_SLICES`]. A batch of `R` rows is read
//! `1 + ⌈R / max_rows_per_apply⌉` times. Only the last slice's commit carries
//! `txn(app_id, batch)`: a restart before it applies every slice again, which changes no row
//! where a slice was in already (a change that is not newer than silver's row is never applied).
//! Between two slices, silver holds part of the batch; the control row and the verdict move
//! only after the last one.

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};

/// Most keys the sample keeps, whatever the batch's size (an owned row is about 70 bytes
/// with an integer key: ~7 MB).
pub const SAMPLE_KEYS: u64 = 100_000;

/// Most slices one batch is cut into.
pub const MAX_SLICES: u64 = 10_000;

/// Slices for a batch of `rows` rows when a step holds `max_rows`: 1 when it fits.
pub fn slice_count(rows: i64, max_rows: i64) -> usize {
    if rows <= max_rows || max_rows < 1 {
        return 1;
    }
    let slices = (rows as u64).div_ceil(max_rows as u64).min(MAX_SLICES);
    usize::try_from(slices).unwrap_or(1)
}

/// Key columns as Arrow rows, in the types of the first batch seen: a later batch whose key
/// has another type (a column widened between two reads) is cast to them, so its rows
/// compare with the others.
struct KeyEncoder {
    keys: Vec<String>,
    types: Vec<DataType>,
    converter: RowConverter,
}

impl KeyEncoder {
    fn new(batch: &RecordBatch, keys: &[String]) -> Result<Self, ArrowError> {
        let types = key_columns(batch, keys)?.iter().map(|c| c.data_type().clone()).collect::<Vec<_>>();
        let converter = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        Ok(Self { keys: keys.to_vec(), types, converter })
    }

    fn rows(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let columns = key_columns(batch, &self.keys)?
            .into_iter()
            .zip(&self.types)
            .map(|(column, to)| if column.data_type() == to { Ok(column) } else { arrow::compute::cast(&column, to) })
            .collect::<Result<Vec<_>, _>>()?;
        self.converter.convert_columns(&columns)
    }
}

/// The key columns of `batch`, by name.
fn key_columns(batch: &RecordBatch, keys: &[String]) -> Result<Vec<ArrayRef>, ArrowError> {
    keys.iter().map(|key| batch.column_by_name(key).cloned().ok_or_else(|| ArrowError::SchemaError(format!("bronze rows lack the key column `{key}`")))).collect()
}

/// The first read: every k-th row's key.
pub struct Sampler {
    keys: Vec<String>,
    encoder: Option<KeyEncoder>,
    stride: u64,
    seen: u64,
    sample: Vec<OwnedRow>,
}

impl Sampler {
    /// A sampler for a batch of about `rows` rows (the facts table's count).
    pub fn new(keys: &[String], rows: i64) -> Self {
        let stride = (rows.max(1) as u64).div_ceil(SAMPLE_KEYS).max(1);
        Self { keys: keys.to_vec(), encoder: None, stride, seen: 0, sample: Vec::new() }
    }

    /// Takes the keys of the batch's rows that fall on the stride.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let encoder = match &self.encoder {
            Some(encoder) => encoder,
            None => self.encoder.insert(KeyEncoder::new(batch, &self.keys)?),
        };
        let rows = encoder.rows(batch)?;
        let first = ((self.stride - self.seen % self.stride) % self.stride) as usize;
        for i in (first..rows.num_rows()).step_by(self.stride as usize) {
            self.sample.push(rows.row(i).owned());
        }
        self.seen += rows.num_rows() as u64;
        Ok(())
    }

    /// Cuts the sample into at most `slices` ranges of about equal counts.
    pub fn cut(mut self, slices: usize) -> Slicer {
        self.sample.sort_unstable();
        let n = self.sample.len();
        let mut cuts: Vec<OwnedRow> = Vec::new();
        for k in (1..slices.max(1)).filter(|_| n > 0) {
            let cut = &self.sample[k * n / slices];
            // A cut at the least key, or at the previous cut, would make an empty slice.
            if cut != &self.sample[0] && cuts.last() != Some(cut) {
                cuts.push(cut.clone());
            }
        }
        Slicer { encoder: self.encoder, cuts }
    }
}

/// The slices' key ranges: slice `i` holds the keys with exactly `i` cuts at or below them.
pub struct Slicer {
    /// `None` when the sample saw no row: then everything is one slice.
    encoder: Option<KeyEncoder>,
    cuts: Vec<OwnedRow>,
}

impl Slicer {
    /// How many slices there are (at least one).
    pub fn count(&self) -> usize {
        self.cuts.len() + 1
    }

    /// The rows of `batch` whose key falls in slice `slice`.
    pub fn rows_in(&self, batch: &RecordBatch, slice: usize) -> Result<RecordBatch, ArrowError> {
        let Some(encoder) = &self.encoder else { return Ok(batch.clone()) };
        let rows = encoder.rows(batch)?;
        let mask: BooleanArray = (0..rows.num_rows()).map(|i| Some(self.cuts.partition_point(|cut| cut.row() <= rows.row(i)) == slice)).collect();
        arrow::compute::filter_record_batch(batch, &mask)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(ids: &[i64], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))]).unwrap()
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
    }

    #[test]
    fn slices_are_needed_only_past_the_limit() {
        assert_eq!(slice_count(100, 100), 1);
        assert_eq!(slice_count(101, 100), 2);
        assert_eq!(slice_count(1_000_000, 100_000), 10);
        assert_eq!(slice_count(i64::MAX, 1), MAX_SLICES as usize);
    }

    /// Invariant: every row falls in exactly one slice, all rows of one key in the same one,
    /// and the slices are ranges of keys of about equal size.
    #[test]
    fn every_row_falls_in_one_slice_with_its_key() {
        let keys = vec!["id".to_owned()];
        // Each key three times (three changes), in an order unlike the keys'.
        let ids_in: Vec<i64> = (0..3).flat_map(|_| (0..1000).map(|i| (i * 7919) % 1000)).collect();
        let names: Vec<String> = ids_in.iter().map(|i| format!("n{i}")).collect();
        let input: Vec<RecordBatch> = ids_in.chunks(700).zip(names.chunks(700)).map(|(i, n)| batch(i, &n.iter().map(String::as_str).collect::<Vec<_>>())).collect();
        let mut sampler = Sampler::new(&keys, ids_in.len() as i64);
        for b in &input {
            sampler.add(b).unwrap();
        }
        let slicer = sampler.cut(4);
        assert_eq!(slicer.count(), 4);
        let mut seen: Vec<(i64, usize)> = Vec::new();
        for slice in 0..slicer.count() {
            let mut count = 0;
            for b in &input {
                let kept = slicer.rows_in(b, slice).unwrap();
                count += kept.num_rows();
                seen.extend(ids(&kept).into_iter().map(|id| (id, slice)));
            }
            assert!((600..=900).contains(&count), "slice {slice} holds {count} of 3000 rows");
        }
        assert_eq!(seen.len(), ids_in.len(), "each row in exactly one slice");
        seen.sort_unstable();
        for pair in seen.windows(2) {
            assert!(pair[0].1 <= pair[1].1, "slices are ranges of keys: {pair:?}");
        }
    }

    /// Invariant: a batch of a few keys repeated many times never yields an empty slice's cut
    /// or splits a key, whatever the slice count asked for.
    #[test]
    fn repeated_keys_make_fewer_slices_not_split_keys() {
        let keys = vec!["id".to_owned()];
        let input = batch(&[5, 5, 5, 5, 9, 9, 9, 9], &["a"; 8]);
        let mut sampler = Sampler::new(&keys, 8);
        sampler.add(&input).unwrap();
        let slicer = sampler.cut(8);
        assert_eq!(slicer.count(), 2);
        assert_eq!(ids(&slicer.rows_in(&input, 0).unwrap()), [5, 5, 5, 5]);
        assert_eq!(ids(&slicer.rows_in(&input, 1).unwrap()), [9, 9, 9, 9]);
    }

    #[test]
    fn a_missing_key_column_is_an_error() {
        let mut sampler = Sampler::new(&["nope".to_owned()], 8);
        assert!(sampler.add(&batch(&[1], &["a"])).unwrap_err().to_string().contains("`nope`"));
    }
}
