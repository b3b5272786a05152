//! Injectable faults (`EXEC sim.inject_fault`): the next statements fail as SQL Server fails
//! them, so clients' retry paths are exercised.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// A fault applied to one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Error 1205: chosen as deadlock victim (the transaction is rolled back).
    Deadlock,
    /// Error 1222: lock request timeout.
    LockTimeout,
    /// The connection drops before the response completes.
    Disconnect,
    /// The response is delayed.
    Delay(Duration),
}

/// Faults waiting for the next statements of any session (simulator procedures excepted).
#[derive(Debug, Default)]
pub struct Faults {
    queue: Mutex<VecDeque<Fault>>,
}

impl Faults {
    /// Queues `count` faults.
    pub fn inject(&self, fault: Fault, count: usize) {
        let mut queue = crate::lock(&self.queue);
        queue.extend(std::iter::repeat_n(fault, count));
    }

    /// Takes the next fault, if any.
    pub fn next(&self) -> Option<Fault> {
        crate::lock(&self.queue).pop_front()
    }

    /// Removes every queued fault.
    pub fn clear(&self) {
        crate::lock(&self.queue).clear();
    }
}
