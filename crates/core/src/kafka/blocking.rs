//! [`off_runtime`]: librdkafka's blocking calls (polls, flushes, metadata, watermark and
//! committed-offset queries) run on tokio's blocking pool, never on an async worker thread.
//!
//! A stage's Kafka client wraps its librdkafka handles in an `Arc` and exposes `async`
//! methods that hand each blocking call to [`off_runtime`]. The async workers stay free for
//! the TDS reads, the Delta commits and, in `demo`, the embedded broker.

use std::sync::Arc;

/// A blocking call did not complete: the runtime shut down under it.
#[derive(Debug, thiserror::Error)]
#[error("a blocking Kafka call was interrupted: {0}")]
pub struct Interrupted(String);

/// Runs `call` on `client` in the blocking pool and returns its result. A panic in `call`
/// resumes in the caller.
pub async fn off_runtime<T, V, E>(client: &Arc<T>, call: impl FnOnce(&T) -> Result<V, E> + Send + 'static) -> Result<V, E>
where
    T: Send + Sync + 'static,
    V: Send + 'static,
    E: From<Interrupted> + Send + 'static,
{
    let client = Arc::clone(client);
    match tokio::task::spawn_blocking(move || call(&client)).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(Interrupted(error.to_string()).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Failed(String);

    impl From<Interrupted> for Failed {
        fn from(error: Interrupted) -> Self {
            Self(error.to_string())
        }
    }

    /// Invariant: the call runs off the async worker (on a blocking-pool thread) and its
    /// result comes back unchanged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn blocking_calls_run_on_the_blocking_pool() {
        let worker = std::thread::current().id();
        let client = Arc::new(7);
        let ran_on = off_runtime(&client, |value| Ok::<_, Failed>((*value, std::thread::current().id()))).await.unwrap();
        assert_eq!(ran_on.0, 7);
        assert_ne!(ran_on.1, worker, "the call ran on the async worker");
        let failed = off_runtime(&client, |_| Err::<(), _>(Failed("refused".into()))).await.unwrap_err();
        assert_eq!(failed.0, "refused");
    }
}
