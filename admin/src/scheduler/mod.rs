//! The scheduler: lease → scan → wheel → publish.
//!
//! * [`lease`] acquires and renews shards in `scheduler_lease` (database clock, epochs).
//! * [`scan`] claims due jobs of held shards, writes their fire times as `scheduled` triggers and
//!   advances `next_fire_at`, one transaction per batch.
//! * [`wheel`] holds scheduled triggers in memory until their fire time (millisecond timer).
//! * [`publish`] marks them `publishing` (ledger), produces them, and records their deliveries.
//! * [`recover`] loads the pending triggers of newly acquired shards.
//! * `crate::workflow::scan` fires workflows of held shards as workflow runs.
//! * [`lost`] records runs of dead workers that outlived their timeout as `lost`.
//!
//! A shard's lease as this admin holds it is a [`lease::Term`]. The scan's batches and the
//! publisher's ledger check the lease's holder and epoch in their transaction
//! ([`lease::confirm`]), so an admin that lost a shard cannot schedule or claim its runs;
//! read-back resolutions are compare-and-set on the mark they saw. The runs waiting in the timer
//! are [`crate::trigger::PendingTrigger`]s.

pub mod clock;
pub mod error;
pub mod lateness;
pub mod lease;
pub mod lost;
pub mod publish;
pub mod recover;
pub mod release;
pub mod scan;
pub mod txn;
pub mod wheel;

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::SchedulerArgs;
use crate::ids::AdminId;
use crate::kafka::KafkaClients;

pub use error::SchedulerError;

/// Channel on which the API announces triggers it inserted (payload `<shard>:<trigger id>`).
pub const NOTIFY_CHANNEL: &str = "cadenza_trigger";

/// How far an admin's reading of the database clock may be off, as far as dropping runs is
/// concerned: a job change drops runs written claimed only when they are due later than the
/// longest publish-ahead of the live admins plus this, so it never drops one the holder has
/// taken for sending.
pub const CLOCK_GUARD: std::time::Duration = std::time::Duration::from_millis(250);

/// Everything the scheduler's services share.
pub struct SchedulerContext {
    pub pool: PgPool,
    pub admin_id: AdminId,
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
    /// The partition selector (the scan routes the runs it writes claimed, the publisher the
    /// others); it keeps each job's routing history.
    pub router: crate::route::Router,
    /// Held while runs left `publishing` are read back: one read-back at a time, so two cannot
    /// act on the same runs.
    pub read_back: tokio::sync::Mutex<()>,
    /// Late runs of `fire_once_now` jobs sent as their catch-up (the publisher's misfire rule).
    pub catch_ups: publish::CatchUps,
    /// The transactional producer triggers are published through (`None`:
    /// `CADENZA_PUBLICATION=idempotent`).
    pub txn: Option<Arc<txn::TxnProducer>>,
    /// Acquired shards whose earlier holders' producers are still to be fenced.
    pub fences: txn::Fences,
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

    let publish_task = {
        let stop = stop_publishing.clone();
        tracker.spawn(async move { publisher.run(stop).await })
    };
    // The committer outlives the publisher: shards are handed back once what was sent in them
    // is decided.
    let stop_committing = CancellationToken::new();
    if let Some(txn) = ctx.txn.clone() {
        let stop = stop_committing.clone();
        tracker.spawn(async move { txn.run(stop).await });
    }
    // Scanners claim disjoint jobs (`SKIP LOCKED`), so one scan's transaction overlaps the next.
    for _ in 0..scan::SCANNERS {
        tracker.spawn(scan::Scanner::new(ctx.clone()).run(shutdown.clone()));
    }
    tracker.spawn(crate::workflow::scan::run(ctx.clone(), shutdown.clone()));
    tracker.spawn(recover::listen(ctx.clone(), shutdown.clone()));
    tracker.spawn(lost::LostSweeper::new(ctx.clone()).run(shutdown.clone()));
    tracker.spawn(release::run(ctx.clone(), shutdown.clone()));
    tracker.spawn(async move {
        lease_mgr.run(shutdown.clone()).await;
        // Shutdown: stop publishing, wait for the batch in flight, then hand the shards back.
        stop_publishing.cancel();
        if let Err(e) = publish_task.await {
            tracing::error!(error = %e, "publisher task failed");
        }
        lease_mgr.release_all().await;
        stop_committing.cancel();
    })
}
