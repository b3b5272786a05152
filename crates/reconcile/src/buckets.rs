//! Tier 1's buckets: the key's range cut into fine buckets of equal width, counted and
//! key-summed on both sides with the same integer arithmetic, then adjacent fine buckets merged
//! to about `bucket_rows` rows each. Pure: the queries are in [`crate::sqlserver`] and
//! [`crate::lake`].
//!
//! A fine bucket is `(key - lo) / width` in integer division that truncates toward zero, as
//! T-SQL's `/` on `bigint` and Rust's `/` both do, so a key lands in the same bucket on both
//! sides whatever its sign relative to `lo`.

use std::collections::BTreeMap;

/// Fine buckets per `bucket_rows`: a merged bucket is then within a quarter of its target.
const FINE_PER_BUCKET: u64 = 4;
/// At most this many fine buckets per run (the grouped scan's result).
const MAX_FINE: u64 = 200_000;

/// How the key's range is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The lowest key seen on either side.
    pub lo: i64,
    /// Keys per fine bucket (at least 1).
    pub width: i64,
}

impl Cut {
    /// The cut for keys in `[lo, hi]` with about `rows` rows, so that a fine bucket holds
    /// about `bucket_rows / 4`; `None` when the range does not fit `bigint` arithmetic
    /// (`hi - lo` overflows), and the table is then counted whole.
    pub fn plan(lo: i64, hi: i64, rows: u64, bucket_rows: u64) -> Option<Self> {
        let span = hi.checked_sub(lo)?.checked_add(1)?;
        let fine = rows.saturating_mul(FINE_PER_BUCKET).div_ceil(bucket_rows.max(1)).clamp(1, MAX_FINE);
        let width = (span as u64).div_ceil(fine).max(1);
        Some(Self { lo, width: i64::try_from(width).ok()? })
    }

    /// The fine bucket of `key`.
    pub fn bucket(&self, key: i64) -> i64 {
        (i128::from(key) - i128::from(self.lo)).checked_div(i128::from(self.width)).map_or(0, |b| b as i64)
    }

    /// The keys of fine buckets `first..=last` as a half-open range `[from, to)`; `None` ends
    /// are open (past `bigint`'s range).
    pub fn keys(&self, first: i64, last: i64) -> (Option<i64>, Option<i64>) {
        let (lo, width) = (i128::from(self.lo), i128::from(self.width));
        let start = |b: i128| if b > 0 { lo + b * width } else if b == 0 { lo - width + 1 } else { lo + (b - 1) * width + 1 };
        let end = |b: i128| if b >= 0 { lo + (b + 1) * width } else { lo + b * width + 1 };
        let fit = |v: i128| i64::try_from(v).ok();
        (fit(start(i128::from(first))), fit(end(i128::from(last))))
    }
}

/// One side's count and key sum in a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Rows.
    pub rows: u64,
    /// Sum of the keys.
    pub key_sum: i128,
}

impl Tally {
    /// Adds `other`.
    pub fn add(&mut self, other: Tally) {
        self.rows += other.rows;
        self.key_sum += other.key_sum;
    }
}

/// A merged bucket: fine buckets `first..=last`, both sides' tallies, and whether every fine
/// bucket in it agreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Its first fine bucket.
    pub first: i64,
    /// Its last fine bucket.
    pub last: i64,
    /// SQL Server's rows and key sum.
    pub source: Tally,
    /// Silver's.
    pub silver: Tally,
    /// Every fine bucket had equal counts and sums.
    pub agrees: bool,
}

/// Merges the fine buckets either side has into buckets of about `bucket_rows` rows (the
/// larger side's count), in key order. Every fine bucket falls in exactly one merged bucket.
pub fn merge(source: &BTreeMap<i64, Tally>, silver: &BTreeMap<i64, Tally>, bucket_rows: u64) -> Vec<Bucket> {
    let mut ids: Vec<i64> = source.keys().chain(silver.keys()).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out: Vec<Bucket> = Vec::new();
    for id in ids {
        let (s, t) = (source.get(&id).copied().unwrap_or_default(), silver.get(&id).copied().unwrap_or_default());
        let rows = s.rows.max(t.rows);
        match out.last_mut() {
            Some(open) if open.source.rows.max(open.silver.rows) + rows <= bucket_rows.max(1) => {
                open.last = id;
                open.source.add(s);
                open.silver.add(t);
                open.agrees &= s == t;
            }
            _ => out.push(Bucket { first: id, last: id, source: s, silver: t, agrees: s == t }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fine buckets tile the integers: consecutive buckets' ranges meet, below `lo` too, and
    /// every key falls in the range of its own bucket.
    #[test]
    fn fine_buckets_tile_the_keys_on_both_sides_of_lo() {
        let cut = Cut { lo: 100, width: 10 };
        for b in -3..3 {
            assert_eq!(cut.keys(b, b).1, cut.keys(b + 1, b + 1).0, "bucket {b} and the next");
        }
        for key in 60..140 {
            let (from, to) = cut.keys(cut.bucket(key), cut.bucket(key));
            assert!(from.unwrap() <= key && key < to.unwrap(), "{key} in {:?}", (from, to));
        }
        let wide = Cut { lo: i64::MIN, width: i64::MAX };
        assert_eq!(wide.keys(0, 0).0, None, "an end past bigint is open");
    }

    /// The width gives about four fine buckets per merged bucket; a range `bigint` cannot
    /// subtract is refused.
    #[test]
    fn plans_cut_to_the_target() {
        let cut = Cut::plan(1, 2_000_000, 2_000_000, 1_000_000).unwrap();
        assert_eq!(cut.width, 250_000);
        assert_eq!(Cut::plan(5, 5, 0, 10).unwrap().width, 1);
        assert_eq!(Cut::plan(i64::MIN, i64::MAX, 10, 10), None);
    }

    /// Merging keeps a disagreement anywhere in the bucket, and cuts at the target.
    #[test]
    fn merging_cuts_at_the_target_and_keeps_disagreements() {
        let tally = |rows, key_sum| Tally { rows, key_sum };
        let source = BTreeMap::from([(0, tally(3, 6)), (1, tally(3, 15)), (2, tally(3, 24)), (5, tally(1, 50))]);
        let silver = BTreeMap::from([(0, tally(3, 6)), (1, tally(2, 9)), (2, tally(3, 24)), (7, tally(1, 70))]);
        let merged = merge(&source, &silver, 6);
        assert_eq!(merged.iter().map(|b| (b.first, b.last, b.agrees)).collect::<Vec<_>>(), vec![(0, 1, false), (2, 7, false)]);
        assert_eq!(merged[0].source, tally(6, 21));
        assert_eq!(merged[1].silver, tally(4, 94));
    }
}
