//! Which named records of a read have arrived: the ranges of a group's control records, by
//! partition and in offset order, one bit per offset. A record is placed in its range by a
//! binary search and a partition's lowest missing offset is found from its first incomplete
//! range, so the cost per record does not grow with the number of ranges a read names (a
//! coalesced group over many partitions names hundreds).

use std::collections::BTreeMap;

use mssql_cdc_core::log::control::PartitionRange;

/// The offsets of one range that arrived: one bit per offset.
pub(super) struct Seen {
    pub(super) partition: i32,
    pub(super) first: i64,
    pub(super) last: i64,
    /// The records its control record names.
    pub(super) records: u64,
    bits: Vec<u64>,
    /// The offsets that arrived.
    pub(super) count: u64,
    /// How many leading words of `bits` are full.
    full_words: usize,
}

impl Seen {
    pub(super) fn new(range: &PartitionRange) -> Self {
        let span = usize::try_from(range.last_offset.saturating_sub(range.first_offset).saturating_add(1)).unwrap_or(0);
        Self { partition: range.partition, first: range.first_offset, last: range.last_offset, records: range.records, bits: vec![0; span.div_ceil(64)], count: 0, full_words: 0 }
    }

    /// The lowest offset of the range that has not arrived, if any. The words before the
    /// first one with a gap are not looked at again.
    pub(super) fn first_missing(&mut self) -> Option<i64> {
        let span = self.last.saturating_sub(self.first).saturating_add(1);
        while self.bits.get(self.full_words).is_some_and(|slot| *slot == u64::MAX) {
            self.full_words += 1;
        }
        let slot = self.bits.get(self.full_words)?;
        let at = i64::try_from(self.full_words * 64).ok()?.saturating_add(i64::from(slot.trailing_ones()));
        (at < span).then(|| self.first + at)
    }

    /// Whether `offset` lies in this range and arrives for the first time.
    pub(super) fn first_time(&mut self, offset: i64) -> bool {
        if offset < self.first || offset > self.last {
            return false;
        }
        let Ok(at) = usize::try_from(offset - self.first) else { return false };
        let (word, bit) = (at / 64, 1u64 << (at % 64));
        let Some(slot) = self.bits.get_mut(word) else { return false };
        if *slot & bit != 0 {
            return false;
        }
        *slot |= bit;
        self.count += 1;
        true
    }
}

/// One partition's ranges, ordered by first offset.
struct Ranges {
    seen: Vec<Seen>,
    /// Leading ranges with every offset arrived (they stay so).
    done: usize,
    /// Records still expected: the sum of the ranges' counts not yet arrived.
    left: u64,
    /// Whether two ranges share an offset or one ends before it starts. One feed never names
    /// such ranges (a batch's records land after the previous batch's in every partition);
    /// then every range is looked at, as for a single list.
    overlapping: bool,
}

/// The ranges of one read (those naming records), by partition.
pub(super) struct Arrivals {
    partitions: BTreeMap<i32, Ranges>,
}

impl Arrivals {
    pub(super) fn new(ranges: &[PartitionRange]) -> Self {
        let mut partitions: BTreeMap<i32, Ranges> = BTreeMap::new();
        for range in ranges.iter().filter(|r| r.records > 0) {
            let entry = partitions.entry(range.partition).or_insert(Ranges { seen: Vec::new(), done: 0, left: 0, overlapping: false });
            entry.seen.push(Seen::new(range));
            entry.left += range.records;
        }
        for ranges in partitions.values_mut() {
            ranges.seen.sort_by_key(|s| (s.first, s.last));
            // A reversed range (never from a source) would break the binary search too.
            ranges.overlapping = ranges.seen.iter().any(|s| s.first > s.last)
                || ranges.seen.windows(2).any(|pair| pair[1].first <= pair[0].last);
        }
        Self { partitions }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Where each partition's read starts: its lowest named offset.
    pub(super) fn starts(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.partitions.iter().map(|(partition, ranges)| (*partition, ranges.seen.first().map_or(0, |s| s.first)))
    }

    /// Records of `partition` still expected.
    pub(super) fn left(&self, partition: i32) -> u64 {
        self.partitions.get(&partition).map_or(0, |ranges| ranges.left)
    }

    /// Whether any partition still expects records.
    pub(super) fn any_left(&self) -> bool {
        self.partitions.values().any(|ranges| ranges.left > 0)
    }

    /// The partitions still expecting records, each with how many and its ranges.
    pub(super) fn pending(&self) -> impl Iterator<Item = (i32, u64, Vec<(i64, i64)>)> + '_ {
        self.partitions.iter().filter(|(_, r)| r.left > 0).map(|(partition, r)| (*partition, r.left, r.seen.iter().map(|s| (s.first, s.last)).collect()))
    }

    /// Whether `(partition, offset)` lies in a range of the read and arrives for the first
    /// time (a record the consumer delivers twice counts once).
    pub(super) fn first_time(&mut self, partition: i32, offset: i64) -> bool {
        let Some(ranges) = self.partitions.get_mut(&partition) else { return false };
        let new = if ranges.overlapping {
            ranges.seen.iter_mut().any(|range| range.first_time(offset))
        } else {
            let at = ranges.seen.partition_point(|range| range.last < offset);
            ranges.seen.get_mut(at).is_some_and(|range| range.first_time(offset))
        };
        if new {
            ranges.left = ranges.left.saturating_sub(1);
        }
        new
    }

    /// The lowest named offset of `partition` that has not arrived, if any.
    pub(super) fn first_missing(&mut self, partition: i32) -> Option<i64> {
        let ranges = self.partitions.get_mut(&partition)?;
        if ranges.overlapping {
            return ranges.seen.iter_mut().filter_map(Seen::first_missing).min();
        }
        // Ordered and disjoint: the first range with a gap holds the lowest one.
        while let Some(range) = ranges.seen.get_mut(ranges.done) {
            match range.first_missing() {
                Some(missing) => return Some(missing),
                None => ranges.done += 1,
            }
        }
        None
    }

    /// Every range of the read, by partition and offset.
    pub(super) fn ranges(&self) -> impl Iterator<Item = &Seen> {
        self.partitions.values().flat_map(|ranges| ranges.seen.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(partition: i32, first: i64, last: i64) -> PartitionRange {
        PartitionRange { partition, first_offset: first, last_offset: last, records: u64::try_from(last - first + 1).unwrap_or(0) }
    }

    /// Invariant: a read knows the lowest offset of its range still missing, across words of
    /// the bit set, and none once all arrived.
    #[test]
    fn the_first_missing_offset_is_the_lowest_not_yet_seen() {
        let mut seen = Seen::new(&range(0, 100, 229));
        assert_eq!(seen.first_missing(), Some(100));
        for offset in 100..=170 {
            assert!(seen.first_time(offset));
        }
        assert_eq!(seen.first_missing(), Some(171));
        for offset in 172..=229 {
            seen.first_time(offset);
        }
        assert_eq!(seen.first_missing(), Some(171));
        seen.first_time(171);
        assert_eq!(seen.first_missing(), None, "all 130 offsets arrived");
    }

    /// Invariant: across many ranges of several partitions, given out of order, each named
    /// record counts once in its own range, a record outside every range counts nowhere, and
    /// each partition's lowest missing offset and records left are those of a plain scan of
    /// every range (checked after each record).
    #[test]
    fn records_land_in_their_ranges_as_a_scan_of_every_range_would_place_them() {
        // Partition 0: ranges with gaps between them (orphans of a retried batch); partition
        // 3: adjacent ranges; given in a shuffled order.
        let mut given = Vec::new();
        for i in (0..40).rev() {
            given.push(range(0, i * 100 + 10, i * 100 + 59));
            given.push(range(3, i * 7, i * 7 + 6));
        }
        given.push(PartitionRange { partition: 5, first_offset: 0, last_offset: 9, records: 0 });
        let mut arrivals = Arrivals::new(&given);
        let mut plain: Vec<Seen> = given.iter().filter(|r| r.records > 0).map(Seen::new).collect();
        assert_eq!(arrivals.starts().collect::<Vec<_>>(), vec![(0, 10), (3, 0)], "a range naming no records is not read");
        // Every offset of both partitions, each twice, in a mixed order.
        let mut offsets: Vec<(i32, i64)> = (0..4_000).map(|o| (0, o)).chain((0..280).map(|o| (3, o))).collect();
        offsets.sort_by_key(|(p, o)| (o * 7919 + i64::from(*p)) % 4_001);
        offsets.extend(offsets.clone());
        for (partition, offset) in offsets {
            let expected = plain.iter_mut().any(|s| s.partition == partition && s.first_time(offset));
            assert_eq!(arrivals.first_time(partition, offset), expected, "offset {offset} of partition {partition}");
            for p in [0, 3] {
                let scan = plain.iter_mut().filter(|s| s.partition == p).filter_map(Seen::first_missing).min();
                assert_eq!(arrivals.first_missing(p), scan, "partition {p} after offset {offset}");
                let left: u64 = plain.iter().filter(|s| s.partition == p).map(|s| s.records - s.count).sum();
                assert_eq!(arrivals.left(p), left);
            }
        }
        assert!(!arrivals.any_left());
        assert!(arrivals.ranges().all(|s| s.count == s.records));
        assert!(!arrivals.first_time(7, 1), "a partition the read never named");
    }

    /// Invariant: ranges that share offsets (never named by one feed) are still counted as a
    /// scan of every range counts them.
    #[test]
    fn overlapping_ranges_fall_back_to_a_scan() {
        let mut arrivals = Arrivals::new(&[range(0, 0, 9), range(0, 5, 14)]);
        assert!((0..15).all(|offset| arrivals.first_time(0, offset)));
        assert_eq!(arrivals.first_missing(0), Some(5), "the second range's offsets 5..=9 went to the first");
        assert!((5..10).all(|offset| arrivals.first_time(0, offset)), "a second delivery fills the second range");
        assert_eq!(arrivals.first_missing(0), None);
        assert!(!arrivals.any_left());
    }
}
