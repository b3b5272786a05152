//! [`RetryConfig`] (the worker file's `[retry]` table) and [`Backoff`], the one schedule every
//! stage's transient failures are retried on.
//!
//! A failure is transient when waiting may cure it: a broker restarting or unreachable, a
//! producer or consumer timeout, an object store throttling or answering 5xx, a Delta commit
//! conflict, SQL Server failing over. The stage errors say which of theirs are
//! ([`super::StageError::is_retriable`]); the [`super::supervisor`] restarts a stage after each
//! transient failure, waiting on this schedule, until the budget is spent.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::problem::Problems;

/// How transient stage failures are retried (`[retry]` in the worker file).
///
/// ```toml
/// [retry]
/// initial_backoff_ms = 500
/// max_backoff_ms = 30000
/// budget_ms = 600000
/// ```
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Wait before the first retry, in milliseconds; each further wait doubles, up to
    /// `max_backoff_ms`. Default 500.
    pub initial_backoff_ms: u64,
    /// Longest wait between two attempts, in milliseconds. Default 30000 (30 s).
    pub max_backoff_ms: u64,
    /// How long a stage may go on failing transiently, in milliseconds, counted from the first
    /// failure of a streak; then it stops with the last error. A failure after the stage made
    /// progress (published or wrote a batch), or after it ran five minutes, starts a new
    /// streak. `0` turns retries off. Default 600000 (10 minutes).
    pub budget_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self { initial_backoff_ms: 500, max_backoff_ms: 30_000, budget_ms: 600_000 }
    }
}

impl RetryConfig {
    /// Checks the settings (pure).
    pub fn validate(&self, problems: &mut Problems) {
        if self.initial_backoff_ms == 0 {
            problems.invalid("initial_backoff_ms", "zero", "a wait in milliseconds of at least 1, such as 500");
        }
        if self.max_backoff_ms < self.initial_backoff_ms {
            problems.invalid("max_backoff_ms", "less than initial_backoff_ms", "a wait in milliseconds at least initial_backoff_ms, such as 30000");
        }
    }

    /// The schedule these settings describe.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(self.initial_backoff_ms.max(1)),
            max: Duration::from_millis(self.max_backoff_ms.max(self.initial_backoff_ms.max(1))),
            budget: Duration::from_millis(self.budget_ms),
            streak: None,
        }
    }
}

/// The retry schedule: exponential waits, a budget per streak of failures. Pure: the caller
/// passes the time, so tests need no clock.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    budget: Duration,
    /// The streak under way: when its first failure came, and the retries made since.
    streak: Option<Streak>,
}

#[derive(Clone, Copy, Debug)]
struct Streak {
    started: Duration,
    attempts: u32,
}

/// What to do after a transient failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then try again (the `attempt`th retry of the streak).
    Retry {
        /// How long to wait.
        wait: Duration,
        /// 1 for the first retry of a streak.
        attempt: u32,
    },
    /// The budget is spent: stop.
    GiveUp {
        /// Retries made in the streak.
        attempts: u32,
        /// How long the streak lasted.
        spent: Duration,
    },
}

impl Backoff {
    /// The decision after a failure at time `now` (any monotonic clock). `recovered` says the
    /// failed attempt had made progress (or ran long enough to count as healthy): the
    /// failure then opens a new streak with the whole budget. Otherwise it continues the
    /// streak, which gives up once `budget` has passed since the streak's first failure.
    pub fn on_failure(&mut self, now: Duration, recovered: bool) -> Decision {
        let streak = match self.streak {
            Some(streak) if !recovered => streak,
            _ => Streak { started: now, attempts: 0 },
        };
        let spent = now.saturating_sub(streak.started);
        if self.budget.is_zero() || spent >= self.budget {
            self.streak = None;
            return Decision::GiveUp { attempts: streak.attempts, spent };
        }
        let doubling = self.initial.saturating_mul(1u32 << streak.attempts.min(20));
        let wait = doubling.min(self.max).min(self.budget - spent);
        let attempts = streak.attempts + 1;
        self.streak = Some(Streak { started: streak.started, attempts });
        Decision::Retry { wait, attempt: attempts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy(initial: u64, max: u64, budget: u64) -> Backoff {
        RetryConfig { initial_backoff_ms: initial, max_backoff_ms: max, budget_ms: budget }.backoff()
    }

    /// Invariant: waits double from the initial wait and never exceed the maximum.
    #[test]
    fn waits_double_up_to_the_maximum() {
        let mut backoff = policy(100, 500, 60_000);
        let waits: Vec<_> = (0..6)
            .map(|n| match backoff.on_failure(ms(n * 10), false) {
                Decision::Retry { wait, .. } => wait.as_millis(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(waits, vec![100, 200, 400, 500, 500, 500]);
    }

    /// Invariant: a streak without progress gives up once the budget has passed since its
    /// first failure, however long each attempt took; the last wait is cut so the streak
    /// never outlasts the budget.
    #[test]
    fn a_streak_gives_up_when_the_budget_is_spent() {
        let mut backoff = policy(400, 400, 1_000);
        assert_eq!(backoff.on_failure(ms(5_000), false), Decision::Retry { wait: ms(400), attempt: 1 });
        assert_eq!(backoff.on_failure(ms(5_500), false), Decision::Retry { wait: ms(400), attempt: 2 });
        assert_eq!(backoff.on_failure(ms(5_950), false), Decision::Retry { wait: ms(50), attempt: 3 });
        assert_eq!(backoff.on_failure(ms(6_010), false), Decision::GiveUp { attempts: 3, spent: ms(1_010) });
        // Attempts that each take longer than the budget to fail (a client timeout): the
        // second failure already gives up.
        let mut slow = policy(100, 100, 3_000);
        assert!(matches!(slow.on_failure(ms(10_000), false), Decision::Retry { .. }));
        assert_eq!(slow.on_failure(ms(20_100), false), Decision::GiveUp { attempts: 1, spent: ms(10_100) });
    }

    /// Invariant: a failure after progress opens a fresh streak with the whole budget.
    #[test]
    fn progress_starts_a_new_streak() {
        let mut backoff = policy(100, 1_000, 2_000);
        for n in 0..3 {
            assert!(matches!(backoff.on_failure(ms(n * 100), false), Decision::Retry { .. }));
        }
        assert_eq!(backoff.on_failure(ms(60_000), true), Decision::Retry { wait: ms(100), attempt: 1 });
        assert!(matches!(backoff.on_failure(ms(61_000), false), Decision::Retry { attempt: 2, .. }));
    }

    /// Invariant: a zero budget means no retry at all.
    #[test]
    fn a_zero_budget_never_retries() {
        assert_eq!(policy(100, 1_000, 0).on_failure(ms(0), false), Decision::GiveUp { attempts: 0, spent: ms(0) });
    }

    #[test]
    fn validation_names_the_keys() {
        let mut problems = Problems::under("retry");
        RetryConfig { initial_backoff_ms: 0, max_backoff_ms: 0, budget_ms: 1 }.validate(&mut problems);
        let keys: Vec<_> = problems.into_vec().into_iter().map(|p| p.key).collect();
        assert_eq!(keys, vec!["retry.initial_backoff_ms"]);
        let mut problems = Problems::under("retry");
        RetryConfig { initial_backoff_ms: 10, max_backoff_ms: 5, budget_ms: 1 }.validate(&mut problems);
        assert_eq!(problems.into_vec()[0].key, "retry.max_backoff_ms");
    }
}
