//! `delta-silver`: apply_changes from bronze into silver, and the `finalized_until` verdict
//! in the control table. See `docs/connectors/delta-silver.md`.
//!
//! The stage follows the batches the bronze sink records in the facts table; each step folds
//! the new bronze rows to one row per key ([`fold`]), MERGEs them into silver with
//! `txn(app_id, batch_id)` and then advances the control row ([`control`]) with
//! `txn(<app_id>#control, batch_id)`. `mssql-cdc apply` runs the same steps once, until
//! bronze has nothing new.

pub mod apply;
pub mod config;
pub mod control;
pub mod error;
pub mod fold;
pub mod key_cache;
pub mod layout;
pub mod mark;
pub mod slice;
#[cfg(test)]
mod property_tests;


use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use apply::{Applier, StepReport};
pub use config::{SilverOptions, SilverSettings};
pub use error::SilverError;

use mssql_cdc_core::stage::supervisor::wait_or_cancel;
use mssql_cdc_core::stage::{Progress, Stage, StageContext, StageError};

/// The `delta-silver` stage.
pub struct SilverSink {
    name: String,
    options: SilverSettings,
    progress: Progress,
}

impl SilverSink {
    /// A stage from validated settings.
    pub fn new(options: SilverSettings, context: &StageContext) -> Self {
        Self { name: context.name.clone(), options, progress: context.progress.clone() }
    }
}

impl Stage for SilverSink {
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        let name = self.name.clone();
        Box::pin(async move { follow(&name, &self.options, &self.progress, &cancel).await.map_err(|e| StageError::from_cause(&name, e)) })
    }
}

/// Applies batches as bronze grows, until cancelled. Waits for the facts table to appear,
/// saying so once.
async fn follow(connector: &str, options: &SilverSettings, progress: &Progress, cancel: &CancellationToken) -> Result<(), SilverError> {
    let storage = options.storage_options.resolve()?;
    let idle = options.poll_interval;
    let mut waiting = false;
    let mut applier = loop {
        match Applier::open(options, storage.clone()).await {
            Ok(applier) => break applier.with_connector(connector),
            Err(SilverError::NoFacts { facts }) => {
                if !waiting {
                    tracing::info!(connector, facts = %facts, "waiting for the bronze sink to create the facts table");
                    waiting = true;
                }
                if !wait_or_cancel(idle, cancel).await {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    };
    while !cancel.is_cancelled() {
        let report = applier.step().await?;
        if report.batches == 0 {
            if !wait_or_cancel(idle, cancel).await {
                break;
            }
        } else {
            progress.advance();
        }
    }
    Ok(())
}

/// Applies everything bronze holds beyond the position, then returns the summed report.
pub async fn apply_once(options: &SilverSettings) -> Result<StepReport, SilverError> {
    let mut applier = Applier::open(options, options.storage_options.resolve()?).await?;
    let mut total = StepReport { last_batch: applier.row().applied_batch, finalized_until: applier.row().finalized_until, ..StepReport::default() };
    loop {
        let report = applier.step().await?;
        if report.batches == 0 {
            return Ok(total);
        }
        total.batches += report.batches;
        total.last_batch = report.last_batch;
        total.fold.changes += report.fold.changes;
        total.fold.upserts += report.fold.upserts;
        total.fold.deletes += report.fold.deletes;
        total.inserted += report.inserted;
        total.updated += report.updated;
        total.deleted += report.deleted;
        total.files_added += report.files_added;
        total.files_removed += report.files_removed;
        total.finalized_until = report.finalized_until;
    }
}
