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
//! The cache keeps the columns read, by path and size, up to [`KEY_CACHE_BYTES`]. Once full it
//! admits no more files (dropping old ones for new would, when a step's files pass the limit,
//! drop each file just before the next step asks for it): files it does not hold are read as
//! before. Each step first forgets the files no longer in the table (compacted, say).

use std::collections::{HashMap, HashSet};
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

/// A kept file: its size in the log (a file of another size at the path is another file), its
/// columns, and what they take in memory.
#[derive(Debug)]
struct Entry {
    file_size: u64,
    keys: Arc<FileKeys>,
    bytes: usize,
}

/// Key columns of silver files by path, bounded in bytes ([module docs](self)).
#[derive(Debug)]
pub struct KeyCache {
    entries: HashMap<Path, Entry>,
    bytes: usize,
    limit: usize,
}

impl KeyCache {
    /// An empty cache holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { entries: HashMap::new(), bytes: 0, limit }
    }

    /// The columns of the file at `path` of `file_size` bytes, when kept with `_start_lsn` if
    /// `lsn` asks for it.
    pub fn get(&self, path: &Path, file_size: u64, lsn: bool) -> Option<Arc<FileKeys>> {
        self.entries.get(path).filter(|entry| entry.file_size == file_size && (!lsn || entry.keys.lsn.is_some())).map(|entry| entry.keys.clone())
    }

    /// Keeps `keys` for the file at `path` (replacing what was kept for it) if they fit.
    pub fn put(&mut self, path: Path, file_size: u64, keys: Arc<FileKeys>) {
        if let Some(old) = self.entries.remove(&path) {
            self.bytes -= old.bytes;
        }
        let bytes = keys.bytes();
        if self.bytes + bytes <= self.limit {
            self.bytes += bytes;
            self.entries.insert(path, Entry { file_size, keys, bytes });
        }
    }

    /// Forgets every file not in `live` (the table's files now).
    pub fn retain(&mut self, live: &HashSet<Path>) {
        let bytes = &mut self.bytes;
        self.entries.retain(|path, entry| {
            let keep = live.contains(path);
            if !keep {
                *bytes -= entry.bytes;
            }
            keep
        });
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

    /// Invariant: the cache stays within its limit (admitting nothing more once full, and
    /// room again once files leave the table), never answers for `_start_lsn` it did not read,
    /// and never for a file of another size at the same path.
    #[test]
    fn the_cache_is_bounded_and_answers_only_what_it_read() {
        let one = keys(1000, false).bytes();
        let limit = one * 2 + one / 2;
        let mut cache = KeyCache::new(limit);
        cache.put(Path::from("a"), 10, keys(1000, false));
        cache.put(Path::from("b"), 10, keys(1000, false));
        cache.put(Path::from("c"), 10, keys(1000, false));
        assert!(cache.get(&Path::from("a"), 10, false).is_some() && cache.get(&Path::from("b"), 10, false).is_some());
        assert!(cache.get(&Path::from("c"), 10, false).is_none(), "full: c not admitted");
        assert!(cache.bytes() <= limit, "{} bytes over {limit}", cache.bytes());
        assert!(cache.get(&Path::from("a"), 11, false).is_none(), "another file at a's path");
        cache.retain(&HashSet::from([Path::from("b")]));
        assert!(cache.get(&Path::from("a"), 10, false).is_none(), "a left the table");
        cache.put(Path::from("c"), 10, keys(1000, false));
        assert!(cache.get(&Path::from("c"), 10, false).is_some(), "room again for c");
        assert_eq!(cache.bytes(), one * 2);

        let mut cache = KeyCache::default();
        cache.put(Path::from("b"), 10, keys(1000, false));
        assert!(cache.get(&Path::from("b"), 10, true).is_none(), "no `_start_lsn` was read for b");
        cache.put(Path::from("b"), 10, keys(1000, true));
        assert!(cache.get(&Path::from("b"), 10, true).is_some(), "b replaced by its read with `_start_lsn`");
        assert_eq!(cache.bytes(), keys(1000, true).bytes(), "the replaced entry no longer counts");
    }
}
