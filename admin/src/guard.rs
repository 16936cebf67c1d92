//! Keeping the admin's background loops alive: a round that panics or fails is logged and the
//! loop goes on after a back-off, so one bad job, row or message never ends a scheduler task.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

/// A round of a loop that panicked.
#[derive(Debug, thiserror::Error)]
#[error("{what} panicked: {message}")]
pub struct Panicked {
    pub what: &'static str,
    /// The panic's text.
    pub message: String,
}

/// Runs `fut`, turning a panic inside it into [`Panicked`].
pub async fn catch_panic<F: Future>(what: &'static str, fut: F) -> Result<F::Output, Panicked> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|panic| Panicked {
            what,
            message: panic_message(&*panic),
        })
}

/// Runs one round of a loop; a panic inside it becomes an error (the loop logs it and goes on).
pub async fn round<T, F>(what: &'static str, fut: F) -> anyhow::Result<T>
where
    F: Future<Output = anyhow::Result<T>>,
{
    catch_panic(what, fut).await?
}

/// The pause after consecutive failures of a round: `base`, doubling up to `max`; one success
/// resets it.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            failures: 0,
        }
    }

    /// Records a failure; returns the pause before the next try.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let factor = 1u32.checked_shl(self.failures - 1).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Records a success; returns whether the rounds were failing before.
    pub fn succeeded(&mut self) -> bool {
        std::mem::take(&mut self.failures) > 0
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_round_is_an_error() {
        let r: anyhow::Result<()> = round("scan", async { panic!("boom {}", 7) }).await;
        let e = r.unwrap_err().to_string();
        assert!(e.contains("scan panicked: boom 7"), "{e}");
        let ok = round("scan", async { Ok(3) }).await.unwrap();
        assert_eq!(ok, 3);
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let pauses: Vec<u128> = (0..4).map(|_| b.failed().as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 350, 350]);
        for _ in 0..100 {
            b.failed();
        }
        assert_eq!(b.failed(), Duration::from_millis(350));
        assert!(b.succeeded());
        assert!(!b.succeeded());
        assert_eq!(b.failed(), Duration::from_millis(100));
    }
}
