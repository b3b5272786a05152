//! Following a table onto a newer capture instance (`docs/schema-changes.md`, "Rolling onto a
//! new capture instance").
//!
//! SQL Server allows two capture instances per table so that a table can be captured again
//! with its new columns while the old instance still runs. The stream looks for a newer
//! instance of its table every [`INSTANCE_REFRESH`]. The newer one holds every change after
//! its low water mark S, so the stream reads the old instance up to S (the batch that reaches
//! S ends there) and the new one after it: no change is read twice or missed. The batch that
//! first reads the new instance carries a `capture_instance_switched` event with the columns
//! gained and lost; its schema is the new instance's. The data topic stays the same: it is
//! named after the table.
//!
//! When the old instance was disabled before the stream reached S, the changes between the
//! position and S were held by it alone: that is data loss, handled by `on_data_loss` and
//! named with the old instance.

use std::time::{Duration, Instant};

use mssql_cdc_core::log::control::{Event, SnapshotKind};
use mssql_cdc_core::log::schema::TableSchema;
use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_types::lsn::Lsn;

use super::ddl::{column_drift, compare, Verdict};
use super::snapshot::Opening;
use super::{Position, Setup, Stream};
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::reader::{self, Instance};

/// How often the stream looks for a newer capture instance of its table.
pub(super) const INSTANCE_REFRESH: Duration = Duration::from_secs(5);

/// What the next batch does about a newer capture instance.
pub(super) enum Follow {
    /// Stays on its instance.
    Stay,
    /// Stays on its instance up to this LSN (S), then switches.
    Until(Lsn),
    /// Switched: the batch reads the new instance and carries these events.
    Switched(Vec<Event>),
}

impl Stream {
    /// Looks for a newer instance of the table (every [`INSTANCE_REFRESH`]) and switches to it
    /// once the position has reached its low water mark S.
    pub(super) async fn follow(&self, conn: &mut TdsClient, setup: &mut Setup, position: &Position) -> Result<Follow, SourceError> {
        if setup.newer.is_none() && setup.instances_read_at.elapsed() < INSTANCE_REFRESH {
            return Ok(Follow::Stay);
        }
        setup.instances_read_at = Instant::now();
        let all = reader::instances(conn, &self.connector).await?;
        let enabled = all.iter().any(|i| i.name == setup.instance.name);
        let Some(newer) = reader::newer_instance(&all, &setup.instance).cloned() else {
            setup.newer = None;
            if !enabled {
                return Err(SourceError::CaptureInstance(format!(
                    "`{}` was disabled and its table {}.{} has no newer capture instance to go on with",
                    setup.instance.name, setup.instance.source_schema, setup.instance.source_table
                )));
            }
            return Ok(Follow::Stay);
        };
        let s = newer.start_lsn;
        if s == Lsn::ZERO {
            // `start_lsn` is NULL until the new instance's low end is set: not ready yet.
            setup.newer = None;
            return Ok(Follow::Stay);
        }
        if position.lsn < s && enabled {
            if setup.newer.as_ref().is_none_or(|n| n.name != newer.name) {
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, newer = %newer.name, start_lsn = %s, "a newer capture instance of the table: the stream moves to it at its start LSN");
            }
            setup.newer = Some(newer);
            return Ok(Follow::Until(s));
        }
        if position.lsn < s {
            // Only the disabled instance held (position, S]: data loss, unless skipped.
            self.check_loss(&setup.instance.name, position.lsn, s.increment(), true)?;
        }
        Ok(Follow::Switched(self.switch_to(conn, setup, position, &newer).await?))
    }

    /// With `snapshot_on_switch`, after the batch that switched (`record`, the last published),
    /// opens a snapshot at the next step (a bootstrap: no change was lost), unless one is open.
    pub(super) fn snapshot_after_switch(&self, setup: &Setup, position: &mut Position, record: &ControlRecord) {
        if !self.options.snapshot.on_switch || !record.events.iter().any(|e| matches!(e, Event::CaptureInstanceSwitched { .. })) {
            return;
        }
        if position.snapshot.as_ref().is_some_and(|s| !s.complete) {
            tracing::warn!(connector = %self.connector_name, capture_instance = %setup.instance.name, "snapshot_on_switch: a snapshot is open already; its rows read from now on carry the new instance's columns");
            return;
        }
        position.open_next = Some(Opening { kind: SnapshotKind::Bootstrap, lost: None, seed: None });
    }

    /// Reads from `newer` from now on: its captured columns become the schema (judged like a
    /// DDL's types against the log's), and the events record the move (and the new schema's
    /// column warnings, if any).
    pub(super) async fn switch_to(&self, conn: &mut TdsClient, setup: &mut Setup, position: &Position, newer: &Instance) -> Result<Vec<Event>, SourceError> {
        let captured = reader::table_schema(conn, &self.connector, newer, &self.options).await?;
        let log = position.log_schema.as_ref().unwrap_or(&setup.schema);
        if let Verdict::Incompatible(change) = compare(log, &captured.schema) {
            return Err(SourceError::SchemaChanged {
                capture_instance: newer.name.clone(),
                ddl_lsn: newer.start_lsn,
                command: format!("capture instance `{}` replacing `{}`", newer.name, setup.instance.name),
                message: format!(
                    "the new instance reads column `{}` as {:?}, which the log's {:?} cannot become; keep the log's type with a cast in `columns`, then restart",
                    change.column, change.to, change.from
                ),
            });
        }
        let (gained, lost) = gained_and_lost(&setup.schema, &captured.schema);
        let warnings = captured.notes.event(&newer.name);
        let from = std::mem::replace(&mut setup.instance, newer.clone());
        self.take_schema(setup, captured).await?;
        setup.newer = None;
        tracing::warn!(connector = %self.connector_name, from = %from.name, to = %newer.name, start_lsn = %newer.start_lsn, gained = ?gained, lost = ?lost, "the stream moved to the newer capture instance; capture_instance_switched published");
        Ok(std::iter::once(Event::CaptureInstanceSwitched { from: from.name, to: newer.name.clone(), start_lsn: newer.start_lsn, gained, lost }).chain(warnings).collect())
    }
}

/// The columns `after` has and `before` lacks, and those `before` has and `after` lacks.
pub(super) fn gained_and_lost(before: &TableSchema, after: &TableSchema) -> (Vec<String>, Vec<String>) {
    let names = |schema: &TableSchema| schema.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    column_drift(&names(after), &names(before))
}
