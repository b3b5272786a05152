//! Change rows into Arrow chunks: each row stamped with its commit's UTC time, cut into chunks
//! of `fetch_rows` rows, never between an update's before- and after-image (the Debezium
//! envelope makes one event of the two, within one chunk). The stream's own read and the
//! partitioned reads ([`super::parallel`]) both go through it.

use std::sync::Arc;

use arrow::array::RecordBatch;
use chrono::{DateTime, Utc};

use crate::error::SourceError;
use crate::reader::ChangeRow;
use crate::rows::BatchBuilder;
use mssql_cdc_core::log::schema::TableSchema;
use mssql_cdc_types::lsn::Lsn;

/// What one batch's reads share: the table, the chunk size and each commit's UTC time.
pub(super) struct ChunkSpec {
    pub schema: TableSchema,
    pub capture_instance: String,
    pub generation: u64,
    pub fetch_rows: usize,
    /// The batch's range, for errors: `(from, to]`.
    pub from: Lsn,
    pub to: Lsn,
    /// Each commit's UTC time, in LSN order.
    pub utc: Arc<Vec<(Lsn, DateTime<Utc>)>>,
}

/// Rows counted and the LSNs they span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub count: u64,
    pub min_lsn: Option<Lsn>,
    pub max_lsn: Option<Lsn>,
}

impl Span {
    fn add(&mut self, lsn: Lsn) {
        self.count += 1;
        self.min_lsn = Some(self.min_lsn.map_or(lsn, |m| m.min(lsn)));
        self.max_lsn = Some(self.max_lsn.map_or(lsn, |m| m.max(lsn)));
    }

    /// Both spans' rows together.
    pub fn merge(&mut self, other: Span) {
        self.count += other.count;
        self.min_lsn = [self.min_lsn, other.min_lsn].into_iter().flatten().min();
        self.max_lsn = [self.max_lsn, other.max_lsn].into_iter().flatten().max();
    }
}

/// Builds chunks from change rows read in LSN order.
pub(super) struct Chunker {
    spec: Arc<ChunkSpec>,
    builder: BatchBuilder,
    pub span: Span,
}

impl Chunker {
    pub fn new(spec: Arc<ChunkSpec>) -> Self {
        let builder = BatchBuilder::new(&spec.schema, &spec.capture_instance, spec.generation, spec.fetch_rows);
        Self { spec, builder, span: Span::default() }
    }

    /// Appends `row`; a full chunk when this row completes one.
    pub fn push(&mut self, row: ChangeRow) -> Result<Option<RecordBatch>, SourceError> {
        let (start_lsn, operation) = (row.at.start_lsn, row.at.operation);
        let utc = &self.spec.utc;
        let Ok(index) = utc.binary_search_by(|(lsn, _)| lsn.cmp(&start_lsn)) else {
            let message = format!("change row at {start_lsn} has no commit in cdc.lsn_time_mapping between {} and {}", self.spec.from, self.spec.to);
            return Err(SourceError::Sql { message, code: None, transient: false });
        };
        self.builder
            .append(row.at, row.command_id, utc[index].1, row.values.into_iter())
            .map_err(|e| SourceError::Schema { capture_instance: self.spec.capture_instance.clone(), message: e.to_string() })?;
        self.span.add(start_lsn);
        Ok((self.builder.len() >= self.spec.fetch_rows && operation != 3).then(|| self.builder.finish()))
    }

    /// The rows appended since the last full chunk, if any.
    pub fn rest(&mut self) -> Option<RecordBatch> {
        (!self.builder.is_empty()).then(|| self.builder.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_spans_count_both_and_cover_both_ranges() {
        let mut a = Span::default();
        a.add(Lsn::from_record(5));
        a.add(Lsn::from_record(7));
        let mut b = Span::default();
        b.add(Lsn::from_record(2));
        a.merge(b);
        assert_eq!(a, Span { count: 3, min_lsn: Some(Lsn::from_record(2)), max_lsn: Some(Lsn::from_record(7)) });
        let mut empty = Span::default();
        empty.merge(Span::default());
        assert_eq!(empty, Span::default());
    }
}
