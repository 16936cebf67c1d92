//! The scheduler: lease → scan → wheel → publish.
//!
//! * [`lease`] acquires and renews shards in `scheduler_lease` (database clock, epochs).
//! * [`scan`] claims due jobs of held shards, writes their fire times as `scheduled` triggers and
//!   advances `next_fire_at`, one transaction per batch.
//! * [`wheel`] holds scheduled triggers in memory until their fire time (millisecond timer).
//! * [`publish`] marks them `publishing` (ledger), produces them, and records `published`.
//! * [`recover`] loads the pending triggers of newly acquired shards.
//! * [`lost`] records runs of dead workers that outlived their timeout as `lost`.
//!
//! Every write that depends on a lease checks the lease's epoch in the same statement or
//! transaction, so an admin that lost a shard cannot change its rows.

pub mod clock;
pub mod lateness;
pub mod lease;
pub mod lost;
pub mod publish;
pub mod recover;
pub mod scan;
pub mod wheel;

use std::sync::Arc;

use cadenza_schemas::{BlockStrategy, JobId, JobType, RouteStrategy, TriggerId, TriggerKind};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SchedulerArgs;
use crate::kafka::KafkaClients;

/// Channel on which the API announces triggers it inserted (payload `<shard>:<trigger id>`).
pub const NOTIFY_CHANNEL: &str = "cadenza_trigger";

/// A run waiting for its fire time, as the publisher needs it.
#[derive(Debug, Clone)]
pub struct PendingTrigger {
    pub id: TriggerId,
    pub job_id: JobId,
    pub job_type: JobType,
    pub shard: u32,
    pub kind: TriggerKind,
    pub fire_time: DateTime<Utc>,
    pub params: String,
    pub block: BlockStrategy,
    pub timeout_ms: u64,
    pub attempt: u32,
    pub shard_index: u32,
    pub shard_total: u32,
    pub route: RouteStrategy,
    pub requested_worker: Option<String>,
}

/// A `triggers` row as selected for the timer.
#[derive(Debug, sqlx::FromRow)]
pub struct PendingRow {
    pub id: i64,
    pub job_id: i64,
    pub job_type: String,
    pub shard: i32,
    pub kind: String,
    pub status: String,
    pub fire_time: DateTime<Utc>,
    pub params: String,
    pub block: String,
    pub timeout_ms: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub route: String,
    pub requested_worker: Option<String>,
}

impl TryFrom<PendingRow> for PendingTrigger {
    type Error = anyhow::Error;
    fn try_from(r: PendingRow) -> anyhow::Result<Self> {
        Ok(PendingTrigger {
            id: TriggerId(r.id),
            job_id: JobId(r.job_id),
            job_type: JobType::parse(&r.job_type)?,
            shard: u32::try_from(r.shard)?,
            kind: r.kind.parse()?,
            fire_time: r.fire_time,
            params: r.params,
            block: r.block.parse()?,
            timeout_ms: u64::try_from(r.timeout_ms)?,
            attempt: u32::try_from(r.attempt)?,
            shard_index: u32::try_from(r.shard_index)?,
            shard_total: u32::try_from(r.shard_total)?,
            route: r.route.parse()?,
            requested_worker: r.requested_worker,
        })
    }
}

/// Converts rows to pending triggers, logging (not failing on) a row that cannot be read.
pub(crate) fn rows_to_pending(rows: Vec<PendingRow>) -> Vec<PendingTrigger> {
    rows.into_iter()
        .filter(|r| r.status == "scheduled")
        .filter_map(|r| {
            let id = r.id;
            PendingTrigger::try_from(r)
                .map_err(|e| tracing::error!(trigger_id = id, error = %e, "unreadable trigger row skipped"))
                .ok()
        })
        .collect()
}

/// Everything the scheduler's services share.
pub struct SchedulerContext {
    pub pool: PgPool,
    pub admin_id: String,
    pub shard_count: u32,
    pub config: SchedulerArgs,
    pub leases: Arc<lease::Leases>,
    /// The database clock, by which the timer releases triggers.
    pub clock: Arc<clock::DbClock>,
    pub wheel: Arc<wheel::Wheel>,
    /// Publication lateness of the last minute, written to this admin's `admins` row.
    pub lateness: Arc<lateness::LatenessWindow>,
    pub kafka: Arc<KafkaClients>,
    /// Live workers, from their heartbeats (routing and broadcast shard counts).
    pub registry: Arc<crate::route::registry::Registry>,
    /// Held while runs left `publishing` are read back: one read-back at a time, so two cannot
    /// act on the same runs.
    pub read_back: tokio::sync::Mutex<()>,
}

/// Starts the scheduler's loops on `tracker`; they stop when `shutdown` is cancelled, after
/// which held shards are released. The returned task ends once they are: what must outlive the
/// scheduler (result ingest) waits for it.
pub fn spawn(
    ctx: Arc<SchedulerContext>,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    // Publishing stops before leases are released: `stop_publishing` is cancelled first.
    let stop_publishing = CancellationToken::new();
    let publisher = publish::Publisher::new(ctx.clone());
    let lease_mgr = lease::LeaseManager::new(ctx.clone());
    let scanner = scan::Scanner::new(ctx.clone());

    let publish_task = {
        let stop = stop_publishing.clone();
        tracker.spawn(async move { publisher.run(stop).await })
    };
    tracker.spawn(scanner.run(shutdown.clone()));
    tracker.spawn(recover::listen(ctx.clone(), shutdown.clone()));
    tracker.spawn(lost::LostSweeper::new(ctx.clone()).run(shutdown.clone()));
    tracker.spawn(async move {
        lease_mgr.run(shutdown.clone()).await;
        // Shutdown: stop publishing, wait for the batch in flight, then hand the shards back.
        stop_publishing.cancel();
        if let Err(e) = publish_task.await {
            tracing::error!(error = %e, "publisher task failed");
        }
        lease_mgr.release_all().await;
    })
}
