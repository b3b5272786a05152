//! Delta deletion vectors: the on-disk format, written and read.
//!
//! A deletion vector (DV) marks rows of one data file as deleted by their position in the file
//! (0-based, across row groups), so a writer can delete or replace a few rows of a large file
//! without rewriting it. The log's `add` action for the file carries a descriptor saying where
//! the vector lives. This module writes the format the Delta protocol describes under
//! "Deletion Vector Format" and reads it back:
//!
//! - the vector itself: the magic number `1681511377` (little-endian `u32`), then the
//!   positions as a 64-bit roaring bitmap in the portable serialization (the number of 32-bit
//!   bitmaps as `u64`, then for each its high 32 bits as `u32` and the bitmap);
//! - a DV file (`storageType = 'u'`, `deletion_vector_<uuid>.bin` beside the data): one version
//!   byte `1`, then for each vector its size (`u32`, big-endian, magic included), the vector,
//!   and the CRC-32 of the vector (big-endian). A descriptor points at its vector's size field
//!   (`offset`) and names the file by the Z85 encoding of the uuid's 16 bytes;
//! - an inline vector (`'i'`): the vector's bytes Z85-encoded in the descriptor itself.
//!
//! One file holds every vector a commit writes.
//!
//! ```
//! use mssql_cdc_lake::delta::deletion_vector::{DvFile, parse_inline_or_file};
//! let mut file = DvFile::new();
//! let descriptor = file.push([1u64, 5, 9].into_iter().collect()).unwrap();
//! assert_eq!(descriptor.cardinality, 3);
//! let read = parse_inline_or_file(&descriptor, Some(file.bytes())).unwrap();
//! assert_eq!(read.iter().collect::<Vec<_>>(), vec![1, 5, 9]);
//! ```

use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use roaring::RoaringTreemap;

/// The portable roaring serialization's magic number, first in every vector.
const MAGIC: u32 = 1_681_511_377;

/// A DV file was malformed, or a vector does not fit the format's limits.
#[derive(Debug, thiserror::Error)]
pub enum DvError {
    /// The bytes are not what the descriptor says.
    #[error("deletion vector `{path}`: {reason}")]
    Malformed {
        /// The descriptor's `pathOrInlineDv`.
        path: String,
        /// What did not match.
        reason: String,
    },
    /// The vector is larger than the format's 2 GiB bound.
    #[error("deletion vector of {0} bytes is larger than the format allows")]
    TooLarge(usize),
}

/// The deletion vectors of one commit, as the bytes of their DV file.
pub struct DvFile {
    uuid: uuid::Uuid,
    bytes: Vec<u8>,
}

impl Default for DvFile {
    fn default() -> Self {
        Self::new()
    }
}

impl DvFile {
    /// An empty file with a new uuid.
    pub fn new() -> Self {
        Self { uuid: uuid::Uuid::new_v4(), bytes: vec![1] }
    }

    /// The file's path relative to the table root.
    pub fn relative_path(&self) -> String {
        format!("deletion_vector_{}.bin", self.uuid)
    }

    /// The file's bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends `rows` and returns the descriptor an `add` action carries for them.
    pub fn push(&mut self, rows: RoaringTreemap) -> Result<DeletionVectorDescriptor, DvError> {
        let vector = serialize(&rows)?;
        let size = i32::try_from(vector.len()).map_err(|_| DvError::TooLarge(vector.len()))?;
        let offset = i32::try_from(self.bytes.len()).map_err(|_| DvError::TooLarge(self.bytes.len()))?;
        self.bytes.extend_from_slice(&(size as u32).to_be_bytes());
        self.bytes.extend_from_slice(&vector);
        self.bytes.extend_from_slice(&crc32fast::hash(&vector).to_be_bytes());
        Ok(DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: z85::encode(self.uuid.as_bytes()),
            offset: Some(offset),
            size_in_bytes: size,
            cardinality: rows.len() as i64,
        })
    }
}

/// The vector's bytes: magic, then the portable 64-bit roaring serialization.
fn serialize(rows: &RoaringTreemap) -> Result<Vec<u8>, DvError> {
    let mut out = Vec::with_capacity(4 + rows.serialized_size());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    rows.serialize_into(&mut out).map_err(|e| DvError::Malformed { path: "(new)".into(), reason: e.to_string() })?;
    Ok(out)
}

/// The path, relative to the table root `root`, of the DV file a descriptor names: for `'u'`
/// from its uuid (its prefix, if any, is the folder), for `'p'` its URL when inside the table;
/// `None` for an inline vector.
pub fn relative_path(descriptor: &DeletionVectorDescriptor, root: &url::Url) -> Result<Option<String>, DvError> {
    let encoded = &descriptor.path_or_inline_dv;
    let malformed = |reason: &str| DvError::Malformed { path: encoded.clone(), reason: reason.to_owned() };
    match descriptor.storage_type {
        StorageType::Inline => Ok(None),
        StorageType::AbsolutePath => {
            let url = url::Url::parse(encoded).map_err(|_| malformed("not a URL"))?;
            let root = root.as_str().trim_end_matches('/');
            let rest = url.as_str().strip_prefix(root).and_then(|rest| rest.strip_prefix('/')).ok_or_else(|| malformed("outside the table's folder, where silver cannot read it"))?;
            Ok(Some(rest.to_owned()))
        }
        StorageType::UuidRelativePath => {
            let split = encoded.len().checked_sub(20).ok_or_else(|| malformed("shorter than a Z85 uuid"))?;
            let (prefix, id) = encoded.split_at(split);
            let bytes = z85::decode(id).map_err(|_| malformed("not Z85"))?;
            let uuid = uuid::Uuid::from_slice(&bytes).map_err(|_| malformed("not a uuid"))?;
            Ok(Some(if prefix.is_empty() { format!("deletion_vector_{uuid}.bin") } else { format!("{prefix}/deletion_vector_{uuid}.bin") }))
        }
    }
}

/// The rows a descriptor marks: decoded from the descriptor itself when inline, else from
/// `file`, the bytes of the DV file it names.
pub fn parse_inline_or_file(descriptor: &DeletionVectorDescriptor, file: Option<&[u8]>) -> Result<RoaringTreemap, DvError> {
    let path = descriptor.path_or_inline_dv.clone();
    let malformed = |reason: String| DvError::Malformed { path: path.clone(), reason };
    let vector: Vec<u8> = match descriptor.storage_type {
        StorageType::Inline => z85::decode(&descriptor.path_or_inline_dv).map_err(|_| malformed("inline vector not Z85".into()))?,
        _ => {
            let file = file.ok_or_else(|| malformed("no file bytes".into()))?;
            let start = usize::try_from(descriptor.offset.unwrap_or(1)).map_err(|_| malformed("negative offset".into()))?;
            let size = usize::try_from(descriptor.size_in_bytes).map_err(|_| malformed("negative size".into()))?;
            if file.first() != Some(&1) {
                return Err(malformed("not a version 1 file".into()));
            }
            let end = start + 4 + size + 4;
            let Some(slot) = file.get(start..end) else { return Err(malformed(format!("{end} bytes needed, the file has {}", file.len()))) };
            let stated = u32::from_be_bytes([slot[0], slot[1], slot[2], slot[3]]) as usize;
            if stated != size {
                return Err(malformed(format!("size {stated} in the file, {size} in the log")));
            }
            let vector = &slot[4..4 + size];
            let crc = u32::from_be_bytes([slot[4 + size], slot[5 + size], slot[6 + size], slot[7 + size]]);
            if crc != crc32fast::hash(vector) {
                return Err(malformed("checksum mismatch".into()));
            }
            vector.to_vec()
        }
    };
    let magic = vector.get(..4).map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    if magic != Some(MAGIC) {
        return Err(malformed(format!("magic {magic:?}, not the portable format")));
    }
    RoaringTreemap::deserialize_from(&vector[4..]).map_err(|e| malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors written to one file read back through their own descriptors, across the
    /// 32-bit boundary of the 64-bit bitmap.
    #[test]
    fn vectors_in_one_file_read_back_by_descriptor() {
        let mut file = DvFile::new();
        let a: RoaringTreemap = [0u64, 7, 65_536, 1 << 33].into_iter().collect();
        let b: RoaringTreemap = (100u64..200).collect();
        let da = file.push(a.clone()).unwrap();
        let db = file.push(b.clone()).unwrap();
        assert_eq!(da.offset, Some(1));
        assert_eq!((da.cardinality, db.cardinality), (4, 100));
        assert_eq!(parse_inline_or_file(&da, Some(file.bytes())).unwrap(), a);
        assert_eq!(parse_inline_or_file(&db, Some(file.bytes())).unwrap(), b);
        let root = url::Url::parse("s3://lake/silver/orders/").unwrap();
        assert_eq!(relative_path(&da, &root).unwrap().unwrap(), file.relative_path());
        let absolute = DeletionVectorDescriptor { storage_type: StorageType::AbsolutePath, path_or_inline_dv: format!("s3://lake/silver/orders/{}", file.relative_path()), ..da.clone() };
        assert_eq!(relative_path(&absolute, &root).unwrap().unwrap(), file.relative_path());
        let elsewhere = DeletionVectorDescriptor { path_or_inline_dv: "s3://other/dv.bin".into(), ..absolute };
        assert!(relative_path(&elsewhere, &root).is_err());
    }

    /// A corrupted byte is a named error, not a wrong vector.
    #[test]
    fn a_corrupted_vector_is_refused() {
        let mut file = DvFile::new();
        let d = file.push([3u64, 4].into_iter().collect()).unwrap();
        let mut bytes = file.bytes().to_vec();
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        let error = parse_inline_or_file(&d, Some(&bytes)).unwrap_err().to_string();
        assert!(error.contains("checksum"), "{error}");
        let error = parse_inline_or_file(&d, Some(&bytes[..10])).unwrap_err().to_string();
        assert!(error.contains("bytes needed"), "{error}");
    }

    /// An inline vector (as other writers may leave) decodes from the descriptor alone.
    #[test]
    fn inline_vectors_decode() {
        let rows: RoaringTreemap = [2u64, 5, 7].into_iter().collect();
        let mut bytes = serialize(&rows).unwrap();
        let size = bytes.len() as i32;
        while !bytes.len().is_multiple_of(4) {
            bytes.push(0);
        }
        let descriptor = DeletionVectorDescriptor { storage_type: StorageType::Inline, path_or_inline_dv: z85::encode(&bytes), offset: None, size_in_bytes: size, cardinality: 3 };
        assert_eq!(parse_inline_or_file(&descriptor, None).unwrap(), rows);
    }
}
