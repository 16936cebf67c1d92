//! Polling with a deadline: wait on an observable outcome, never on a fixed sleep.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

const POLL_EVERY: Duration = Duration::from_millis(100);

/// Polls `probe` every 100 ms until it returns `Ok(Some(value))`, and returns the value.
///
/// `Ok(None)` means "not yet"; an `Err` is remembered and polling goes on (a server may be
/// restarting). On timeout the error names `what` and the last error or `None`.
///
/// Closures that borrow test state should return `async move` blocks over references:
/// `|| async move { api.get_json("/api/jobs").await … }` with `api: &ApiClient`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if started.elapsed() >= timeout {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// [`wait_for`] with a boolean predicate.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut predicate: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    wait_for(timeout, what, || {
        let fut = predicate();
        async move { Ok(fut.await?.then_some(())) }
    })
    .await
}
