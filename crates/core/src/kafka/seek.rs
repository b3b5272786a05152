//! Reading from an offset also on a broker that answers a fetch inside a stored record batch
//! with the next batch.
//!
//! Kafka answers a fetch at offset *n* with the record batch that holds *n*; the client drops
//! the records before *n*. tansu's memory storage (the embedded broker's `--storage memory`)
//! answers with the batches that *start* at or after *n*, so a consumer assigned inside a
//! batch never sees the rest of it. A reader that gets nothing it wants for a while assigns
//! again from an earlier offset ([`StepBack`]) and skips what lies before its offset.
//!
//! ```
//! use mssql_cdc_core::kafka::seek::StepBack;
//!
//! let mut back = StepBack::default();
//! // Assigned at 1,000, still waiting for 1,000: go back 64, then 256 records.
//! assert_eq!(back.next(1_000, 1_000), Some(936));
//! assert_eq!(back.next(936, 1_000), Some(680));
//! ```

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// How long a reader waits for a wanted record before it steps back.
pub const STALL: Duration = Duration::from_secs(1);

/// How far back the next assignment goes: 64 offsets before the first one still missing,
/// then four times as far each time, never below offset 0, and at most [`StepBack::STEPS`]
/// times (16,384 offsets on the last step: past librdkafka's largest batch, 10,000 records
/// by default), so that a record missing from the log never makes a reader go back to the
/// start of a long partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepBack {
    step: i64,
    left: u8,
}

impl Default for StepBack {
    fn default() -> Self {
        Self { step: 64, left: Self::STEPS }
    }
}

impl StepBack {
    /// How many times a reader steps back for one record.
    pub const STEPS: u8 = 5;

    /// The offset to assign next, when the partition was last assigned at `assigned` and
    /// `first_missing` has not arrived; `None` when it cannot go further back.
    pub fn next(&mut self, assigned: i64, first_missing: i64) -> Option<i64> {
        let start = first_missing.min(assigned).saturating_sub(self.step).max(0);
        (start < assigned && self.left > 0).then(|| {
            self.step = self.step.saturating_mul(4);
            self.left -= 1;
            start
        })
    }
}

/// The payload of the record at `offset` of `topic`/`partition`, read with `consumer` (its
/// assignment is replaced); `None` when it did not arrive within `timeout`.
pub fn record_at(consumer: &BaseConsumer, topic: &str, partition: i32, offset: i64, timeout: Duration) -> Result<Option<Vec<u8>>, KafkaError> {
    let assign = |from: i64| {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, Offset::Offset(from))?;
        consumer.assign(&list)
    };
    assign(offset)?;
    let (started, mut assigned_at, mut assigned) = (Instant::now(), Instant::now(), offset);
    let mut back = StepBack::default();
    while started.elapsed() < timeout {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) if message.topic() == topic && message.partition() == partition && message.offset() == offset => {
                return Ok(Some(message.payload().unwrap_or_default().to_vec()));
            }
            Some(Ok(_)) | None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(error)) => return Err(error),
        }
        if assigned_at.elapsed() > STALL {
            if let Some(from) = back.next(assigned, offset) {
                tracing::debug!(topic, partition, offset, from, "the record did not arrive: reading again from an earlier offset");
                assign(from)?;
                assigned = from;
            }
            assigned_at = Instant::now();
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: each step goes further back than the last (64, 256, 1,024 offsets before
    /// the first missing one), never below 0, stops once at 0, and after five steps.
    #[test]
    fn steps_go_back_fourfold_down_to_offset_zero() {
        let mut back = StepBack::default();
        assert_eq!(back.next(5_000, 5_010), Some(4_936));
        assert_eq!(back.next(4_936, 5_010), Some(4_680));
        assert_eq!(back.next(4_680, 5_010), Some(3_656));
        let mut far = StepBack::default();
        let starts: Vec<Option<i64>> = (0..6).map(|_| far.next(1_000_000, 1_000_000)).collect();
        assert_eq!(starts, vec![Some(999_936), Some(999_744), Some(998_976), Some(995_904), Some(983_616), None], "five steps, the last 16,384 back, then none");
        let mut near_start = StepBack::default();
        assert_eq!(near_start.next(100, 150), Some(36));
        assert_eq!(near_start.next(36, 150), Some(0));
        assert_eq!(near_start.next(0, 150), None, "at offset 0 already");
    }
}
