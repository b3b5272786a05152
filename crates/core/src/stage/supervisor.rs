//! [`supervise`]: the one retry loop every stage runs under.
//!
//! It builds and runs a stage; when the stage fails with a transient error it waits on the
//! [`Backoff`](super::retry::Backoff) schedule and starts a freshly built stage, which resumes
//! from its checkpoints (the control topic, the Delta `txn` versions), so a retry neither
//! loses nor repeats anything. A fatal error, or a transient one once the retry budget is
//! spent, stops the stage with that error. Each retry and each stop is an instrumentation
//! event: one log line and one counter.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::retry::{Decision, RetryConfig};
use super::{Progress, Stage, StageError};
use crate::telemetry::events::{register_stage, StageFailed, StageRetrying};

/// A transient failure that outlasted the retry budget.
#[derive(Debug, thiserror::Error)]
#[error("still failing after {attempts} retries over {seconds} s (the worker's retry.budget_ms = {budget_ms}): {cause}")]
pub struct RetriesExhausted {
    /// Retries made.
    pub attempts: u32,
    /// Seconds the streak of failures lasted.
    pub seconds: u64,
    /// The budget in force.
    pub budget_ms: u64,
    /// The last failure.
    #[source]
    pub cause: Box<dyn std::error::Error + Send + Sync>,
}

/// An attempt that ran this long before failing counts as healthy (a new incident), whether or
/// not it reported progress.
const HEALTHY_RUN: Duration = Duration::from_secs(300);

/// Runs the stage `build` makes until `cancel` fires (then `Ok`), it fails fatally, or its
/// transient failures outlast `retry.budget_ms`. `build` is called again for every retry: it
/// must make a fresh stage from the same settings, reporting to `progress`. A stop is an
/// instrumentation event ([`StageFailed`]).
pub async fn supervise<B>(connector: String, retry: RetryConfig, progress: Progress, build: B, cancel: CancellationToken) -> Result<(), StageError>
where
    B: FnMut() -> Result<Box<dyn Stage>, StageError> + Send,
{
    register_stage(&connector);
    match retry_until_stopped(&connector, &retry, &progress, build, &cancel).await {
        Err(error) if !cancel.is_cancelled() => Err(stopped(error)),
        outcome => outcome,
    }
}

/// [`supervise`]'s loop without its stop event: a multi-table stage runs each table under it
/// and reports a table's stop as that table's ([`super::tables`]).
pub async fn retry_until_stopped<B>(connector: &str, retry: &RetryConfig, progress: &Progress, mut build: B, cancel: &CancellationToken) -> Result<(), StageError>
where
    B: FnMut() -> Result<Box<dyn Stage>, StageError> + Send,
{
    let mut backoff = retry.backoff();
    let origin = Instant::now();
    loop {
        let started = Instant::now();
        let done = progress.count();
        let outcome = match build() {
            Ok(stage) => stage.run(cancel.child_token()).await,
            Err(error) => Err(error),
        };
        let error = match outcome {
            Ok(()) => return Ok(()),
            Err(error) if cancel.is_cancelled() => return Err(error),
            Err(error) => error,
        };
        if !error.is_retriable() {
            return Err(error);
        }
        let recovered = progress.count() > done || started.elapsed() >= HEALTHY_RUN;
        match backoff.on_failure(origin.elapsed(), recovered) {
            Decision::GiveUp { attempts, spent } => {
                let cause = RetriesExhausted { attempts, seconds: spent.as_secs(), budget_ms: retry.budget_ms, cause: error.source };
                return Err(StageError::new(connector, cause));
            }
            Decision::Retry { wait, attempt } => {
                StageRetrying { connector, error: &error, attempt, wait }.emit();
                if !wait_or_cancel(wait, cancel).await {
                    return Ok(());
                }
            }
        }
    }
}

fn stopped(error: StageError) -> StageError {
    StageFailed { connector: &error.connector, error: &error }.emit();
    error
}

/// Waits `wait`; false when cancelled first. Every stage's pause (an idle poll, a backoff)
/// waits through it, so a cancelled stage never sleeps on.
pub async fn wait_or_cancel(wait: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = cancel.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use futures::future::BoxFuture;

    use super::*;

    /// A stage that fails `failures` times (transiently or not), then succeeds.
    struct Flaky {
        runs: Arc<AtomicU32>,
        failures: u32,
        transient: bool,
        /// Advanced by each run before it fails, when set.
        progress: Option<Progress>,
    }

    impl Stage for Flaky {
        fn run(self: Box<Self>, _cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
            Box::pin(async move {
                let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
                if let Some(progress) = &self.progress {
                    progress.advance();
                }
                // Each failure takes a while to show, as a client timeout would.
                tokio::time::sleep(Duration::from_millis(5)).await;
                match run <= self.failures {
                    true if self.transient => Err(StageError::transient("flaky", format!("broker down (run {run})"))),
                    true => Err(StageError::new("flaky", "bad key")),
                    false => Ok(()),
                }
            })
        }
    }

    fn retry(budget_ms: u64) -> RetryConfig {
        RetryConfig { initial_backoff_ms: 1, max_backoff_ms: 4, budget_ms }
    }

    async fn run(failures: u32, transient: bool, budget_ms: u64) -> (Result<(), StageError>, u32) {
        let runs = Arc::new(AtomicU32::new(0));
        let counter = runs.clone();
        let build = move || Ok(Box::new(Flaky { runs: counter.clone(), failures, transient, progress: None }) as Box<dyn Stage>);
        let result = supervise("flaky".into(), retry(budget_ms), Progress::default(), build, CancellationToken::new()).await;
        (result, runs.load(Ordering::SeqCst))
    }

    /// Invariant: transient failures are retried on a freshly built stage until it succeeds.
    #[tokio::test]
    async fn transient_failures_are_retried() {
        let (result, runs) = run(3, true, 60_000).await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(runs, 4);
    }

    /// Invariant: a fatal failure stops the stage at once, with its own error.
    #[tokio::test]
    async fn a_fatal_failure_is_not_retried() {
        let (result, runs) = run(3, false, 60_000).await;
        assert_eq!(runs, 1);
        assert!(result.unwrap_err().to_string().contains("bad key"));
    }

    /// Invariant: once the budget is spent the stage stops, naming the budget and the cause.
    #[tokio::test]
    async fn an_exhausted_budget_names_the_cause() {
        let (result, runs) = run(u32::MAX, true, 20).await;
        let error = result.unwrap_err();
        let text = error.to_string();
        assert!(runs > 1, "retried at least once: {runs}");
        assert!(text.contains("retry.budget_ms = 20") && text.contains("broker down"), "{text}");
        assert!(!error.is_retriable());
    }

    /// Invariant: a stage that makes progress between transient failures is retried for as
    /// long as it does, though the failures together outlast the budget.
    #[tokio::test]
    async fn progress_between_failures_keeps_the_stage_going() {
        let runs = Arc::new(AtomicU32::new(0));
        let progress = Progress::default();
        let (counter, reported) = (runs.clone(), progress.clone());
        let build = move || Ok(Box::new(Flaky { runs: counter.clone(), failures: 30, transient: true, progress: Some(reported.clone()) }) as Box<dyn Stage>);
        let result = supervise("flaky".into(), retry(20), progress, build, CancellationToken::new()).await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 31);
    }

    /// Invariant: cancelling during a wait ends the stage cleanly, without waiting it out.
    #[tokio::test]
    async fn cancel_during_a_wait_stops_cleanly() {
        let cancel = CancellationToken::new();
        let build = || Ok(Box::new(Flaky { runs: Arc::new(AtomicU32::new(0)), failures: 1, transient: true, progress: None }) as Box<dyn Stage>);
        let slow = RetryConfig { initial_backoff_ms: 600_000, max_backoff_ms: 600_000, budget_ms: 6_000_000 };
        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            canceller.cancel();
        });
        let started = Instant::now();
        let result = supervise("flaky".into(), slow, Progress::default(), build, cancel).await;
        assert!(result.is_ok(), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
