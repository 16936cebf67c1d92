//! The lost-run sweeper: a run still `running` past its timeout plus a grace while its worker is
//! dead gets no result any more; it is recorded `lost` and followed up like a failure (retry,
//! alarm, `fix_delay` next time).
//!
//! A dead worker's partitions move to another member of its group, which runs the unfinished
//! run again (its `started` event moves the run to the new worker), so the grace should be longer
//! than the group takes to do that. A run recorded `lost` that a worker reports later keeps its
//! `lost` status.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::RunStatus;
use tokio_util::sync::CancellationToken;

use super::{SchedulerContext, SchedulerError};
use crate::ids::ShardId;

/// How often the held shards are swept for lost runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

pub struct LostSweeper {
    ctx: Arc<SchedulerContext>,
}

impl LostSweeper {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self { ctx }
    }

    /// One sweep of the held shards; returns the runs recorded `lost`.
    pub async fn run_once(&self) -> Result<Vec<i64>, SchedulerError> {
        let held = ShardId::to_db_all(&self.ctx.leases.held_shards());
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let dead_ms = self.ctx.registry.dead_after().num_milliseconds();
        let mut tx = self.ctx.pool.begin().await?;
        let lost: Vec<i64> = sqlx::query_scalar(sql!("recover/mark_lost"))
            .bind(&held)
            .bind(i64::try_from(self.ctx.config.lost_grace_ms).unwrap_or(i64::MAX))
            .bind(dead_ms as f64)
            .fetch_all(&mut *tx)
            .await?;
        let mut counted = crate::outcome::Ended::default();
        if !lost.is_empty() {
            let ended: Vec<(i64, RunStatus)> =
                lost.iter().map(|id| (*id, RunStatus::Lost)).collect();
            let follow =
                crate::outcome::after_terminal(&mut tx, &self.ctx.registry, &ended).await?;
            tracing::warn!(runs = ?lost, retries = follow.retries, "runs of dead workers recorded lost");
            counted = follow.ended;
        }
        tx.commit().await?;
        counted.record();
        Ok(lost)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        crate::every(SWEEP_INTERVAL, shutdown, "lost-run sweep", || async {
            self.run_once().await.map(drop).map_err(anyhow::Error::from)
        })
        .await;
    }
}
