//! The Debezium envelope (`envelope = "debezium"` on the source): data records as Debezium's
//! SQL Server connector writes them, so consumers of Debezium topics read ours unchanged.
//!
//! A change row becomes an event `{before, after, source, transaction, op, ts_ms, ts_us,
//! ts_ns}` (JSON with Kafka Connect's `schema`/`payload` wrapping, or the bare payload): an
//! insert is `c`, a delete `d` (followed by a tombstone, a record with the same key and a
//! null value, for compacted topics), an update's before- and after-image rows one `u`, a
//! snapshot row `r`. `source` carries the LSNs as Debezium writes them (`commit_lsn` is
//! `__$start_lsn`, `change_lsn` is `__$seqval`, `00000027:00000758:0005`) and
//! `event_serial_no`, plus four fields of ours Debezium does not have: `capture_instance`,
//! `generation`, `command_id` and `snapshot_lsn`, which let the sinks rebuild the native rows
//! exactly. JSON objects are written in field-name order (serde_json's), not Debezium's.
//!
//! [`event`] writes events from native rows; [`native`] turns them back into native rows for
//! bronze; [`connect`] holds the Kafka Connect schemas of keys and values.

pub mod avro;
pub mod connect;
pub mod event;
pub mod native;

/// What the source's `source.version` says.
pub const VERSION: &str = concat!("mssql-cdc-", env!("CARGO_PKG_VERSION"));

/// Where a table's events come from: the names `source` and the schemas carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableNames {
    /// `topic_prefix` (Debezium's `topic.prefix`, the `source.name`).
    pub server: String,
    /// The database.
    pub database: String,
    /// The table's schema.
    pub schema: String,
    /// The table.
    pub table: String,
    /// The data topic: the Connect schemas are named after it (`<topic>.Key`, ...).
    pub topic: String,
}

/// An LSN in the log's text (`0x` and 20 hex digits) as Debezium writes it: lower-case hex,
/// `:` after the 8th and 16th digit.
pub fn debezium_lsn(native: &str) -> Option<String> {
    let hex = native.strip_prefix("0x")?;
    (hex.len() == 20 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| {
        let hex = hex.to_ascii_lowercase();
        format!("{}:{}:{}", &hex[..8], &hex[8..16], &hex[16..])
    })
}

/// A Debezium LSN as the log's text.
pub fn native_lsn(debezium: &str) -> Option<String> {
    let hex: String = debezium.split(':').collect();
    (hex.len() == 20 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("0x{}", hex.to_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_convert_both_ways() {
        assert_eq!(debezium_lsn("0x0000002A000001F0000B").unwrap(), "0000002a:000001f0:000b");
        assert_eq!(native_lsn("0000002a:000001f0:000b").unwrap(), "0x0000002A000001F0000B");
        assert_eq!(debezium_lsn("0x12"), None);
        assert_eq!(native_lsn("zz"), None);
    }
}
