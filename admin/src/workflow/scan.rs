//! Fires workflows on their schedules: the scan of the shards this admin holds, as for jobs
//! (`scheduler::scan`), one transaction per batch. A fire within the look-ahead becomes a
//! workflow run whose first node runs are due at the fire time; a fire missed by more than the
//! misfire threshold follows the workflow's misfire strategy (`do_nothing`: recorded
//! `misfired`; `fire_once_now`: the last one runs now; `fire_all`: each runs).

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{MisfireStrategy, Schedule};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use tokio_util::sync::CancellationToken;

use super::engine::{self, NewRun};
use super::NodeSpec;
use crate::guard::{self, Backoff};
use crate::ids::ShardId;
use crate::schedule::JobSchedule;
use crate::scheduler::scan::plan_fires;
use crate::scheduler::{lease, SchedulerContext, SchedulerError};

/// Most workflows fired in one transaction.
const BATCH: i64 = 50;
/// Most fires of one workflow in one transaction (after an outage, `fire_all` or `do_nothing`
/// may have thousands to write: they follow in later rounds, in order).
const FIRES_PER_ROUND: usize = 20;

#[derive(sqlx::FromRow)]
struct DueWorkflow {
    id: i64,
    schedule: Json<Schedule>,
    misfire: String,
    misfire_threshold_ms: i64,
    next_fire_at: DateTime<Utc>,
    nodes: Json<Vec<NodeSpec>>,
    db_now: DateTime<Utc>,
}

/// One batch: confirm the leases, claim due workflows, start a workflow run per fire (or record
/// it misfired), advance them, commit. Returns how many workflows it claimed.
pub async fn run_once(ctx: &SchedulerContext) -> Result<usize, SchedulerError> {
    let held = ctx.leases.terms();
    if held.is_empty() {
        return Ok(0);
    }
    let mut tx = ctx.pool.begin().await?;
    let confirmed = lease::confirm(&mut tx, &ctx.admin_id, &held).await?;
    if confirmed.is_empty() {
        return Ok(0);
    }
    let due: Vec<DueWorkflow> = sqlx::query_as(sql!("workflow/due"))
        .bind(ShardId::to_db_all(confirmed.iter().map(|t| &t.shard)))
        .bind(ctx.config.lookahead_ms as f64)
        .bind(BATCH)
        .fetch_all(&mut *tx)
        .await?;
    for w in &due {
        let (schedule, misfire) = match (
            JobSchedule::from_stored(&w.schedule.0),
            w.misfire.parse::<MisfireStrategy>(),
        ) {
            (Ok(s), Ok(m)) => (s, m),
            _ => {
                tracing::error!(
                    workflow_id = w.id,
                    "stored schedule unreadable; the workflow stops firing until it is edited"
                );
                advance(&mut tx, w.id, None, true).await?;
                continue;
            }
        };
        let until = w.db_now + chrono::Duration::milliseconds(ctx.config.lookahead_ms as i64);
        let mut plan = plan_fires(
            &schedule,
            misfire,
            chrono::Duration::milliseconds(w.misfire_threshold_ms),
            w.next_fire_at,
            w.db_now,
            until,
        );
        // At most FIRES_PER_ROUND fires of one workflow per transaction; the rest next round.
        if plan.fires.len() > FIRES_PER_ROUND {
            plan.next_fire_at = Some(plan.fires[FIRES_PER_ROUND].fire_time);
            plan.enabled = true;
            plan.fires.truncate(FIRES_PER_ROUND);
        }
        // Skipped fire times: one `misfired` workflow run for them all, at the last of them.
        if let Some(skipped) = plan.skipped {
            let new = NewRun {
                workflow_id: w.id,
                nodes: &w.nodes.0,
                kind: schedule.trigger_kind().as_str(),
                fire_time: skipped.last,
                requested_by: None,
            };
            let message = if skipped.count == 1 {
                format!(
                    "missed its fire time by more than the misfire threshold ({} ms); misfire strategy {}",
                    w.misfire_threshold_ms, w.misfire
                )
            } else {
                format!(
                    "missed {} fire times from {} to {} by more than the misfire threshold ({} ms); misfire strategy {}",
                    skipped.count,
                    skipped.first.to_rfc3339(),
                    skipped.last.to_rfc3339(),
                    w.misfire_threshold_ms,
                    w.misfire
                )
            };
            engine::record_misfired(&mut tx, &new, &message).await?;
        }
        for f in &plan.fires {
            let new = NewRun {
                workflow_id: w.id,
                nodes: &w.nodes.0,
                kind: f.kind.as_str(),
                fire_time: f.fire_time,
                requested_by: None,
            };
            engine::start_run(&mut tx, &new).await?;
        }
        advance(&mut tx, w.id, plan.next_fire_at, plan.enabled).await?;
    }
    tx.commit().await?;
    Ok(due.len())
}

async fn advance(
    conn: &mut sqlx::PgConnection,
    id: i64,
    next: Option<DateTime<Utc>>,
    enabled: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql!("workflow/advance"))
        .bind(id)
        .bind(next)
        .bind(enabled)
        .execute(conn)
        .await?;
    Ok(())
}

/// Fires workflows until `shutdown`: again at once after a full batch, else after the scan
/// interval; a failed round is logged and tried again after a back-off.
pub async fn run(ctx: Arc<SchedulerContext>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(ctx.config.scan_interval(), Duration::from_secs(5));
    loop {
        let round = async { run_once(&ctx).await.map_err(anyhow::Error::from) };
        let pause = match guard::round("workflow scan", round).await {
            Ok(n) => {
                backoff.succeeded();
                if n as i64 >= BATCH {
                    Duration::ZERO
                } else {
                    ctx.config.scan_interval()
                }
            }
            Err(e) => {
                let pause = backoff.failed();
                tracing::error!(error = %e, retry_in_ms = pause.as_millis() as u64, "workflow scan failed; retrying");
                pause
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
