//! Coalescing: consecutive small batches written in one bronze commit and one facts commit.
//!
//! When the sink is behind, the control records of many batches are already fetched. Writing
//! each in a Delta commit of its own costs a write pipeline, a Parquet file and a log entry
//! per batch on both tables, whatever the batch's size. A *group* of consecutive batches is
//! written instead as one bronze commit with `txn(app_id, last batch id)` and one facts commit
//! with `txn(<app_id>#facts, last batch id)` holding every batch's facts rows. Exactly once
//! holds per batch: a batch is written when its id is above the recorded version, and the
//! recorded version is the group's last id only once the whole group is in.
//!
//! A group only takes what is already fetched (a caught-up sink waits for nothing), and
//! closes at the first batch that must be written on its own:
//!
//! - a batch with another schema version (its rows have another layout, and a widened type
//!   rewrites the table first);
//! - a batch carrying a chunked snapshot's plan (the plan is committed before its facts);
//! - a batch that one of the tables already holds (a re-read after a restart: the single-batch
//!   path repairs the facts of a batch whose data is in);
//! - one past `max_batches_per_commit` or `max_rows_per_commit` (memory: a group's records
//!   and rows are held until its commit).

use mssql_cdc_core::log::control::{ControlRecord, Event};

/// How much one commit may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce {
    /// The most batches in one commit (1: no coalescing).
    pub batches: usize,
    /// The most change rows in one commit (a larger batch is committed alone).
    pub rows: u64,
}

/// The `txn` versions the tables hold (-1: none); `facts` is `None` without a facts table.
#[derive(Clone, Copy, Debug)]
pub struct Written {
    /// The bronze table's `txn` version for the app id.
    pub bronze: i64,
    /// The facts table's, if the sink writes facts.
    pub facts: Option<i64>,
}

impl Written {
    /// Whether neither table holds the batch yet.
    fn neither_holds(&self, control: &ControlRecord) -> bool {
        let id = control.batch_id as i64;
        id > self.bronze && self.facts.is_none_or(|facts| id > facts)
    }
}

/// Whether `control` may be written in a group with others at all.
pub fn groupable(control: &ControlRecord, written: Written) -> bool {
    written.neither_holds(control) && !control.events.iter().any(|e| matches!(e, Event::SnapshotPlan { .. }))
}

/// Whether `next` may join `group` (non-empty, every member [`groupable`]) in one commit.
pub fn joins(limits: Coalesce, group: &[ControlRecord], next: &ControlRecord, written: Written) -> bool {
    let (Some(first), Some(last)) = (group.first(), group.last()) else { return false };
    let rows: u64 = group.iter().map(|c| c.rows).sum();
    group.len() < limits.batches
        && next.batch_id == last.batch_id + 1
        && next.schema_version == first.schema_version
        && rows.saturating_add(next.rows) <= limits.rows
        && groupable(next, written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: u64, rows: u64) -> ControlRecord {
        let text = r#"{"version":1,"batch_id":0,"generation":0,"capture_instance":"dbo_t","data_topic":"t","from_lsn":"0x00000000000000000001","to_lsn":"0x00000000000000000002",
            "commits":1,"rows":0,"partitions":[],"format":"json","schema_version":1,"schema":{"columns":[],"key":[],"include_command_id":false},"events":[],"warnings":[],"metrics":{"read_ms":0,"bytes":0,"published_at":null}}"#;
        let mut control: ControlRecord = serde_json::from_str(text).unwrap();
        control.batch_id = id;
        control.rows = rows;
        control
    }

    const LIMITS: Coalesce = Coalesce { batches: 3, rows: 100 };
    const NOTHING: Written = Written { bronze: -1, facts: Some(-1) };

    /// Consecutive batches of one layout group up to the limits; anything that must be
    /// written alone closes the group, so every batch is still written exactly once.
    #[test]
    fn groups_close_at_limits_layout_changes_plans_and_written_batches() {
        let group = vec![batch(4, 10), batch(5, 10)];
        assert!(joins(LIMITS, &group, &batch(6, 10), NOTHING));
        assert!(!joins(LIMITS, &group, &batch(7, 10), NOTHING), "only the next batch id joins");
        assert!(!joins(LIMITS, &[batch(4, 10), batch(5, 10), batch(6, 10)], &batch(7, 10), NOTHING), "max batches");
        assert!(!joins(LIMITS, &group, &batch(6, 81), NOTHING), "max rows");
        assert!(joins(LIMITS, &group, &batch(6, 80), NOTHING));
        let mut widened = batch(6, 10);
        widened.schema_version += 1;
        assert!(!joins(LIMITS, &group, &widened, NOTHING), "another layout");
        let mut plan = batch(6, 0);
        plan.events = vec![Event::SnapshotPlan { lsn: plan.to_lsn, keys: vec!["id".into()], method: "keyset".into(), chunk_rows: 10, chunks: Vec::new() }];
        assert!(!joins(LIMITS, &group, &plan, NOTHING) && !groupable(&plan, NOTHING), "a plan batch goes alone");
        let facts_behind = Written { bronze: 6, facts: Some(5) };
        assert!(!groupable(&batch(6, 10), facts_behind), "data already in: the facts are repaired alone");
        assert!(groupable(&batch(7, 10), facts_behind));
        let no_facts = Written { bronze: 5, facts: None };
        assert!(groupable(&batch(6, 10), no_facts) && !groupable(&batch(5, 10), no_facts));
        assert!(!joins(LIMITS, &[], &batch(6, 10), NOTHING));
    }
}
