//! Loading pending triggers into the timer: for shards just acquired, for triggers the API
//! inserted (announced with NOTIFY), and a periodic sweep for anything missed.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::{rows_to_pending, PendingRow, SchedulerContext, NOTIFY_CHANNEL};

/// How often `scheduled` rows of held shards are re-read in case a notification was missed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

/// Loads the pending triggers of newly acquired shards.
///
/// Rows a previous holder left `publishing` go back to `scheduled` and are sent again: delivery
/// is at-least-once when an admin dies between sending and recording.
pub async fn load_shards(ctx: &SchedulerContext, shards: &[u32]) -> anyhow::Result<usize> {
    let shards: Vec<i32> = shards.iter().map(|s| *s as i32).collect();
    let requeued: Vec<i64> = sqlx::query_scalar(sql!("triggers/requeue_publishing"))
        .bind(&shards)
        .fetch_all(&ctx.pool)
        .await?;
    if !requeued.is_empty() {
        tracing::warn!(
            count = requeued.len(),
            "triggers left publishing by the previous holder are sent again"
        );
    }
    load_pending(ctx, &shards, ctx.config.lookahead_ms).await
}

async fn load_pending(
    ctx: &SchedulerContext,
    shards: &[i32],
    ahead_ms: u64,
) -> anyhow::Result<usize> {
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/pending_for_shards"))
        .bind(shards)
        .bind(ahead_ms as f64)
        .fetch_all(&ctx.pool)
        .await?;
    let pending = rows_to_pending(rows);
    let n = pending.len();
    ctx.wheel.insert(pending);
    Ok(n)
}

async fn load_one(ctx: &SchedulerContext, id: i64) -> anyhow::Result<()> {
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/get_pending"))
        .bind(id)
        .fetch_all(&ctx.pool)
        .await?;
    ctx.wheel.insert(rows_to_pending(rows));
    Ok(())
}

/// Parses a notification payload `<shard>:<trigger id>`.
fn parse_payload(p: &str) -> Option<(u32, i64)> {
    let (shard, id) = p.split_once(':')?;
    Some((shard.parse().ok()?, id.parse().ok()?))
}

/// Listens for triggers inserted by any admin's API and sweeps periodically, until `shutdown`.
pub async fn listen(ctx: Arc<SchedulerContext>, shutdown: CancellationToken) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listener: Option<PgListener> = None;
    loop {
        if listener.is_none() {
            match PgListener::connect_with(&ctx.pool).await {
                Ok(mut l) => match l.listen(NOTIFY_CHANNEL).await {
                    Ok(()) => listener = Some(l),
                    Err(e) => tracing::debug!(error = %e, "LISTEN failed"),
                },
                Err(e) => tracing::debug!(error = %e, "LISTEN connection failed"),
            }
        }
        let notification = async {
            match listener.as_mut() {
                Some(l) => l.try_recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sweep.tick() => {
                let held: Vec<i32> = ctx.leases.held().into_iter().map(|(s, _)| s as i32).collect();
                if !held.is_empty() {
                    // Only overdue rows: the scan hands fresh ones to the timer itself.
                    if let Err(e) = load_pending(&ctx, &held, 0).await {
                        tracing::debug!(error = %e, "sweep failed");
                    }
                }
            }
            n = notification => match n {
                Ok(Some(n)) => {
                    if let Some((shard, id)) = parse_payload(n.payload()) {
                        if ctx.leases.epoch(shard).is_some() {
                            if let Err(e) = load_one(&ctx, id).await {
                                tracing::debug!(error = %e, trigger_id = id, "loading a notified trigger failed; the sweep will");
                            }
                        }
                    }
                }
                // The connection dropped; the sweep covers the gap.
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "LISTEN connection lost");
                    listener = None;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn payload() {
        assert_eq!(super::parse_payload("3:42"), Some((3, 42)));
        assert_eq!(super::parse_payload("x"), None);
    }
}
