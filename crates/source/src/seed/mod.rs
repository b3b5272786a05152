//! Seeding a stream from a copy of its table (`mssql-cdc seed`): the copy's rows are published
//! as the stream's snapshot at `as_of`, and the stream goes on with the changes after it.
//!
//! A team that already holds the table (a nightly export, an earlier lake table) need not read
//! SQL Server again. The copy must hold every commit at or before `as_of`; it may hold later
//! ones too, which the stream publishes again after the snapshot and silver applies by LSN,
//! the same argument as a snapshot read while the table changes. What the copy is read from is
//! behind [`CopySource`] (the binary reads Delta tables and Parquet directories with
//! DataFusion); the columns are matched and converted by [`columns::CopyColumns`]; the stream's
//! side (when a seed may open, publishing, resuming) is `Stream::seed`.
//!
//! ```
//! use mssql_cdc_source::seed::AsOf;
//! assert!(matches!(AsOf::parse("0x0000002A000001F00003"), Ok(AsOf::Lsn(_))));
//! assert!(matches!(AsOf::parse("2026-12-01T08:00:00Z"), Ok(AsOf::Time(_))));
//! assert!(AsOf::parse("yesterday").is_err());
//! ```

pub mod columns;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use mssql_cdc_types::lsn::Lsn;

/// Why a copy could not be read.
pub type CopyError = Box<dyn std::error::Error + Send + Sync>;

/// A copy's rows, batch by batch.
pub type CopyRows = BoxStream<'static, Result<RecordBatch, CopyError>>;

/// A copy of the source table to seed from.
///
/// Implementors must return the same rows in the same order from every [`CopySource::read`]
/// of one identity (a seed resumed after a crash skips the rows it published already), and
/// must change [`CopySource::identity`] whenever the rows may differ.
pub trait CopySource: Send + Sync {
    /// Where the copy is, as the user named it.
    fn location(&self) -> &str;
    /// What is read of it (a Delta version, the Parquet files' digest): recorded with the
    /// snapshot, and compared when a seed resumes.
    fn identity(&self) -> &str;
    /// The copy's columns.
    fn schema(&self) -> SchemaRef;
    /// Its rows, when known (for progress).
    fn rows(&self) -> Option<u64>;
    /// The copy's `columns` (its own names), sorted by `order` (a subset of them, ascending,
    /// NULLs first): a total order, so every read returns the rows in the same sequence.
    fn read<'a>(&'a self, columns: &'a [String], order: &'a [String]) -> BoxFuture<'a, Result<CopyRows, CopyError>>;
}

/// `--as-of`: when the copy started being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsOf {
    /// An LSN recorded before the copy was read.
    Lsn(Lsn),
    /// A UTC time: the last commit at or before it (to the second, on the server's clock).
    Time(DateTime<Utc>),
}

impl AsOf {
    /// `0x` and up to 20 hex digits, an RFC 3339 time (its offset applied), or
    /// `YYYY-MM-DD HH:MM:SS[.fraction]` (or with `T`, optionally ending in `Z`) read as UTC.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.starts_with("0x") || text.starts_with("0X") {
            return Lsn::parse_hex(text).map(Self::Lsn).ok_or_else(|| format!("`{text}`: an LSN is 0x and up to 20 hex digits"));
        }
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(Self::Time(at.with_timezone(&Utc)));
        }
        let naive = text.trim_end_matches(['Z', 'z']);
        for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
            if let Ok(at) = NaiveDateTime::parse_from_str(naive, format) {
                return Ok(Self::Time(at.and_utc()));
            }
        }
        Err(format!("`{text}`: expected a UTC time (2026-12-01T08:00:00Z, or with an offset) or an LSN (0x...)"))
    }
}

impl std::fmt::Display for AsOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lsn(lsn) => write!(f, "{lsn}"),
            Self::Time(at) => write!(f, "{}", at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        }
    }
}

/// What `mssql-cdc seed` asks of a stopped stream.
#[derive(Clone, Debug)]
pub struct SeedRequest {
    /// When the copy started being read.
    pub as_of: AsOf,
    /// `--as-of` as the user wrote it (recorded with the snapshot).
    pub as_of_text: String,
    /// A captured column the copy lacks reads NULL instead of stopping the seed.
    pub allow_missing_columns: bool,
    /// Publish a copy newer than the stream as a new generation (after data loss).
    pub reseed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_of_reads_lsns_and_utc_times() {
        assert_eq!(AsOf::parse("0x2A").unwrap(), AsOf::Lsn(Lsn::parse_hex("2A").unwrap()));
        let utc = AsOf::parse("2026-12-01 08:00:00.250").unwrap();
        assert_eq!(utc, AsOf::parse("2026-12-01T08:00:00.250Z").unwrap());
        assert_eq!(AsOf::parse("2026-12-01T09:00:00.250+01:00").unwrap(), utc);
        assert_eq!(utc.to_string(), "2026-12-01T08:00:00.250Z");
        assert!(AsOf::parse("0xZZ").unwrap_err().contains("hex"));
        assert!(AsOf::parse("12/01/2026").unwrap_err().contains("expected a UTC time"));
    }
}
