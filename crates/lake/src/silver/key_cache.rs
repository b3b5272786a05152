//! [`KeyCache`]: silver's key columns kept between steps of the MERGE by deletion vectors.
//!
//! Each step of [`super::mark`] reads the key columns of every silver file whose statistics
//! meet the batch's keys (and their `_start_lsn` unless every row is older). With updates
//! spread over the key space that is every file, every step: measured at 5k changes/s, a third
//! of silver's CPU went to those reads and their Parquet footers. A Delta data file never
//! changes once written (a new version of it is a new file), so what was read from one path
//! holds for as long as the path is in the table; only its deletion vector changes, and that
//! is read each step.
//!
//! The cache keeps the columns read, by path, up to [`KEY_CACHE_BYTES`]; past it, the files
//! kept longest are dropped first. Files no longer in the table are never asked for again,
//! and leave the cache in their turn.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use deltalake::Path;

/// The most bytes of key columns one silver table keeps between steps (64 MiB: an integer key
/// and `_start_lsn` for about two million rows).
pub const KEY_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// One file's key columns, batch by batch in file order, and its `_start_lsn` when read.
#[derive(Debug)]
pub struct FileKeys {
    /// Per batch, the key columns in the key's order.
    pub keys: Vec<Vec<ArrayRef>>,
    /// Per batch, `_start_lsn` (`None`: not read, the file's rows were all older).
    pub lsn: Option<Vec<StringArray>>,
}

impl FileKeys {
    fn bytes(&self) -> usize {
        let keys: usize = self.keys.iter().flatten().map(|c| c.get_array_memory_size()).sum();
        let lsn: usize = self.lsn.iter().flatten().map(|c| c.get_array_memory_size()).sum();
        keys + lsn
    }
}

/// Key columns of silver files by path, bounded in bytes ([module docs](self)).
#[derive(Debug)]
pub struct KeyCache {
    entries: HashMap<Path, (Arc<FileKeys>, usize)>,
    /// Paths in the order they were put.
    order: VecDeque<Path>,
    bytes: usize,
    limit: usize,
}

impl KeyCache {
    /// An empty cache holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { entries: HashMap::new(), order: VecDeque::new(), bytes: 0, limit }
    }

    /// The columns of `path`, when kept with `_start_lsn` if `lsn` asks for it.
    pub fn get(&self, path: &Path, lsn: bool) -> Option<Arc<FileKeys>> {
        self.entries.get(path).map(|(keys, _)| keys.clone()).filter(|keys| !lsn || keys.lsn.is_some())
    }

    /// Keeps `keys` for `path` (replacing what was kept), dropping the longest-kept files
    /// while over the limit. A file larger than the whole limit is not kept.
    pub fn put(&mut self, path: Path, keys: Arc<FileKeys>) {
        let size = keys.bytes();
        if let Some((_, old)) = self.entries.remove(&path) {
            self.bytes -= old;
            self.order.retain(|p| *p != path);
        }
        if size > self.limit {
            return;
        }
        while self.bytes + size > self.limit {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some((_, old)) = self.entries.remove(&oldest) {
                self.bytes -= old;
            }
        }
        self.bytes += size;
        self.order.push_back(path.clone());
        self.entries.insert(path, (keys, size));
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Default for KeyCache {
    fn default() -> Self {
        Self::new(KEY_CACHE_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn keys(n: i64, lsn: bool) -> Arc<FileKeys> {
        let column: ArrayRef = Arc::new(Int64Array::from((0..n).collect::<Vec<_>>()));
        let lsns = lsn.then(|| vec![StringArray::from((0..n).map(|i| format!("{i:020}")).collect::<Vec<_>>())]);
        Arc::new(FileKeys { keys: vec![vec![column]], lsn: lsns })
    }

    /// Invariant: the cache stays within its limit, dropping the longest-kept files first, and
    /// never answers for `_start_lsn` it did not read.
    #[test]
    fn the_cache_is_bounded_and_answers_only_what_it_read() {
        let one = keys(1000, false).bytes();
        let limit = one * 2 + one / 2;
        let mut cache = KeyCache::new(limit);
        cache.put(Path::from("a"), keys(1000, false));
        cache.put(Path::from("b"), keys(1000, false));
        assert!(cache.get(&Path::from("a"), false).is_some());
        cache.put(Path::from("c"), keys(1000, false));
        assert!(cache.get(&Path::from("a"), false).is_none(), "a was kept longest and dropped");
        assert!(cache.get(&Path::from("b"), false).is_some() && cache.get(&Path::from("c"), false).is_some());
        assert!(cache.bytes() <= limit, "{} bytes over {limit}", cache.bytes());
        cache.put(Path::from("huge"), keys(100_000, false));
        assert!(cache.get(&Path::from("huge"), false).is_none(), "a file over the whole limit is not kept");

        let mut cache = KeyCache::default();
        cache.put(Path::from("b"), keys(1000, false));
        assert!(cache.get(&Path::from("b"), true).is_none(), "no `_start_lsn` was read for b");
        cache.put(Path::from("b"), keys(1000, true));
        assert!(cache.get(&Path::from("b"), true).is_some(), "b replaced by its read with `_start_lsn`");
        assert_eq!(cache.bytes(), keys(1000, true).bytes(), "the replaced entry no longer counts");
    }
}
