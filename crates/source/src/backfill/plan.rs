//! A chunked snapshot's plan: chunks of about `chunk_rows` rows that tile the key space, fixed
//! once published.
//!
//! - **Range** (a single integer key): `MIN`, `MAX` and `COUNT_BIG` of the key, then one
//!   grouped count over slices of the key's values (`(CAST(k AS bigint) - min) / width`,
//!   about 16 slices per chunk) on the server; consecutive slices are packed into chunks of at
//!   most `chunk_rows` rows where a slice allows. Nothing but the counts crosses the wire.
//! - **Keyset** (any other key, or an integer range too wide for 64-bit arithmetic): the key
//!   columns alone, read once in key order `chunk_rows` at a time (`TOP (n) WITH TIES`); each
//!   read's last key is a bound.
//!
//! Either way chunk `i` holds the keys after bound `i - 1` up to bound `i`; the first starts
//! at the first key (NULL included), the last has no upper bound, so rows inserted above the
//! planned extent while the snapshot is open are read too.

use serde_json::Value as Json;

use mssql_cdc_core::log::control::ChunkBounds;

/// Slices of the key's values per chunk the range method counts.
pub const SLICES_PER_CHUNK: u64 = 16;

/// The integer extent of a key column: its smallest and largest value and the row count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// `MIN(k)`.
    pub min: i64,
    /// `MAX(k)`.
    pub max: i64,
    /// `COUNT_BIG(*)`.
    pub rows: u64,
}

impl Extent {
    /// The width of a slice for chunks of `chunk_rows`: about [`SLICES_PER_CHUNK`] slices
    /// per chunk if the rows were spread evenly. `None` when the range does not fit 64-bit
    /// arithmetic (then the plan is read as a keyset).
    pub fn slice_width(&self, chunk_rows: u64) -> Option<i64> {
        let span = i128::from(self.max) - i128::from(self.min) + 1;
        if span <= 0 || span > i128::from(i64::MAX) {
            return None;
        }
        let chunks = self.rows.div_ceil(chunk_rows.max(1)).max(1);
        let slices = i128::from(chunks.saturating_mul(SLICES_PER_CHUNK));
        i64::try_from((span + slices - 1) / slices).ok().map(|w| w.max(1))
    }
}

/// The grouped count of slices: `(slice index, rows)` pairs from the server.
pub fn slice_sql(table: &str, key: &str, extent: &Extent, width: i64) -> String {
    // Literals outside int's range would be numeric in T-SQL (and the division decimal).
    let slice = format!("(CAST({key} AS bigint) - CAST({} AS bigint)) / CAST({width} AS bigint)", extent.min);
    format!("SELECT {slice}, COUNT_BIG(*) FROM {table} WHERE {key} IS NOT NULL GROUP BY {slice}")
}

/// The extent query of an integer key.
pub fn extent_sql(table: &str, key: &str) -> String {
    format!("SELECT MIN({key}), MAX({key}), COUNT_BIG(*) FROM {table}")
}

/// Chunks from slice counts (any order; empty slices may be missing): slices packed in key
/// order while the chunk stays within `chunk_rows` (a slice larger than that is a chunk of its
/// own). Bounds are the last key value of a chunk's last slice.
pub fn pack_slices(extent: &Extent, width: i64, slices: &[(i64, u64)], chunk_rows: u64) -> Vec<ChunkBounds> {
    let mut sorted: Vec<(i64, u64)> = slices.iter().copied().filter(|(_, rows)| *rows > 0).collect();
    sorted.sort_unstable();
    let mut bounds = Vec::new();
    let mut rows = 0u64;
    for (i, (slice, count)) in sorted.iter().enumerate() {
        rows += count;
        let next = sorted.get(i + 1).map_or(0, |s| s.1);
        if i + 1 < sorted.len() && rows + next > chunk_rows {
            // The chunk ends with this slice's last value.
            let last = i128::from(extent.min) + (i128::from(*slice) + 1) * i128::from(width) - 1;
            if let Ok(last) = i64::try_from(last) {
                bounds.push(vec![Json::from(last)]);
                rows = 0;
            }
        }
    }
    chunks_between(bounds)
}

/// Chunks from ascending bounds: before the first, between each two, after the last.
pub fn chunks_between(bounds: Vec<Vec<Json>>) -> Vec<ChunkBounds> {
    let mut chunks = Vec::with_capacity(bounds.len() + 1);
    let mut after = None;
    for bound in bounds {
        chunks.push(ChunkBounds { after: after.take(), through: Some(bound.clone()) });
        after = Some(bound);
    }
    chunks.push(ChunkBounds { after, through: None });
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(chunks: &[ChunkBounds]) -> Vec<Option<i64>> {
        chunks.iter().map(|c| c.through.as_ref().and_then(|v| v[0].as_i64())).collect()
    }

    /// Invariant: the chunks tile the key space: each starts where the previous ended, the
    /// first has no lower bound and the last no upper one.
    #[test]
    fn chunks_tile_the_key_space() {
        let chunks = chunks_between(vec![vec![Json::from(10)], vec![Json::from(20)]]);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0].after, None);
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].through, pair[1].after);
        }
        assert_eq!(chunks[2].through, None);
        assert_eq!(chunks_between(Vec::new()), vec![ChunkBounds { after: None, through: None }]);
    }

    /// Slices are packed up to `chunk_rows`; a crowded slice is a chunk of its own; the
    /// packing follows key order whatever order the server returned the slices in.
    #[test]
    fn slices_pack_into_chunks_of_at_most_chunk_rows() {
        let extent = Extent { min: 1, max: 100, rows: 100 };
        let width = extent.slice_width(25).unwrap();
        assert_eq!(width, 2, "100 values, 4 chunks × 16 slices");
        let slices: Vec<(i64, u64)> = (0..50).rev().map(|s| (s, 2)).collect();
        let chunks = pack_slices(&extent, width, &slices, 25);
        // 12 slices (24 rows) per chunk: 12 × 2 = 24 values each.
        assert_eq!(through(&chunks), vec![Some(24), Some(48), Some(72), Some(96), None]);
        let crowded = pack_slices(&extent, 10, &[(0, 5), (1, 500), (2, 5)], 100);
        assert_eq!(through(&crowded), vec![Some(10), Some(20), None]);
        assert_eq!(through(&pack_slices(&extent, 10, &[(3, 7)], 100)), vec![None]);
    }

    #[test]
    fn extreme_ranges_fall_back_to_the_keyset() {
        assert_eq!(Extent { min: i64::MIN, max: i64::MAX, rows: 10 }.slice_width(5), None);
        assert_eq!(Extent { min: 5, max: 5, rows: 1 }.slice_width(100), Some(1));
        assert_eq!(Extent { min: -3, max: 1_000_000, rows: 10 }.slice_width(1_000_000), Some(62_501));
        assert!(slice_sql("[dbo].[t]", "[id]", &Extent { min: -3, max: 9, rows: 2 }, 4).contains("(CAST([id] AS bigint) - CAST(-3 AS bigint)) / CAST(4 AS bigint)"));
    }
}
