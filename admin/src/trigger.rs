//! A run waiting for its fire time: what the scheduler's timer holds and the publisher (and the
//! partition selector in [`crate::route`]) reads, and the `triggers` row it is loaded from.

use cadenza_schemas::{
    BlockStrategy, JobId, JobType, JobTypeError, ParseEnumError, RouteStrategy, TriggerId,
    TriggerKind,
};
use chrono::{DateTime, Utc};

use crate::ids::{BadShard, LeaseEpoch, ShardId};
use crate::route::Route;

/// A run waiting for its fire time, as the publisher needs it.
#[derive(Debug, Clone)]
pub struct PendingTrigger {
    pub id: TriggerId,
    pub job_id: JobId,
    pub job_type: JobType,
    pub shard: ShardId,
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
    /// For a workflow node's run: its workflow run, node key, and parents' outputs.
    pub workflow: Option<WorkflowNodeRun>,
    /// Set when the scan wrote the run already `publishing` (routed, under its shard's lease
    /// epoch); `None` for a `scheduled` run, which the publisher routes and marks itself.
    pub claim: Option<PreClaim>,
    /// When a queued run was released (concurrency group, overlap policy): its misfire
    /// threshold counts from then, as the wait in its queue was judged when it was released.
    pub released_at: Option<DateTime<Utc>>,
}

impl PendingTrigger {
    /// When the run became due for publication: its fire time, or its release from a queue.
    pub fn due_at(&self) -> DateTime<Utc> {
        self.released_at
            .unwrap_or(self.fire_time)
            .max(self.fire_time)
    }
}

/// How the scan claimed a run it wrote `publishing`.
#[derive(Debug, Clone)]
pub struct PreClaim {
    pub route: Route,
    /// The lease epoch its row is marked under; it is sent only while its shard is held at it.
    pub epoch: LeaseEpoch,
    /// The job's `plan_gen` when the run was written: a job change that dropped runs written
    /// ahead bumps it, and the publisher then sends only the runs still there.
    pub plan_gen: i64,
    /// Its row may record another route than `route`: it was routed again when taken, and
    /// that batch failed, perhaps after its update was committed. Its next take writes the
    /// route it is sent on, whether or not that route changes again.
    pub rewrite: bool,
}

/// What a run of a workflow node carries to its handler.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowNodeRun {
    pub run_id: i64,
    pub node: String,
    pub upstream: Option<serde_json::Value>,
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
    /// Absent from the scan's rows (never a workflow node's).
    #[sqlx(default)]
    pub workflow_run_id: Option<i64>,
    #[sqlx(default)]
    pub workflow_node: Option<String>,
    #[sqlx(default)]
    pub upstream: Option<sqlx::types::Json<serde_json::Value>>,
    /// Of a run the scan wrote `publishing`: where it goes and the epoch it is marked under.
    #[sqlx(default)]
    pub partition: Option<i32>,
    #[sqlx(default)]
    pub routed_worker: Option<String>,
    #[sqlx(default)]
    pub lease_epoch: Option<i64>,
    /// Of a run released from a queue.
    #[sqlx(default)]
    pub released_at: Option<DateTime<Utc>>,
}

/// Why a `triggers` row cannot become a [`PendingTrigger`].
#[derive(Debug, thiserror::Error)]
pub enum PendingRowError {
    #[error("job type: {0}")]
    JobType(#[from] JobTypeError),
    #[error(transparent)]
    Shard(#[from] BadShard),
    #[error(transparent)]
    Enum(#[from] ParseEnumError),
    #[error("{0} out of range")]
    OutOfRange(&'static str),
}

fn unsigned<T: TryFrom<i64>>(what: &'static str, v: i64) -> Result<T, PendingRowError> {
    T::try_from(v).map_err(|_| PendingRowError::OutOfRange(what))
}

impl TryFrom<PendingRow> for PendingTrigger {
    type Error = PendingRowError;
    fn try_from(r: PendingRow) -> Result<Self, PendingRowError> {
        Ok(PendingTrigger {
            id: TriggerId(r.id),
            job_id: JobId(r.job_id),
            job_type: JobType::parse(&r.job_type)?,
            shard: ShardId::from_db(r.shard)?,
            kind: r.kind.parse()?,
            fire_time: r.fire_time,
            params: r.params,
            block: r.block.parse()?,
            timeout_ms: unsigned("timeout_ms", r.timeout_ms)?,
            attempt: unsigned("attempt", r.attempt.into())?,
            shard_index: unsigned("shard_index", r.shard_index.into())?,
            shard_total: unsigned("shard_total", r.shard_total.into())?,
            route: r.route.parse()?,
            requested_worker: r.requested_worker,
            workflow: match (r.workflow_run_id, r.workflow_node) {
                (Some(run_id), Some(node)) => Some(WorkflowNodeRun {
                    run_id,
                    node,
                    upstream: r.upstream.map(|u| u.0),
                }),
                _ => None,
            },
            claim: match (r.status.as_str(), r.partition, r.lease_epoch) {
                ("publishing", Some(partition), Some(epoch)) => Some(PreClaim {
                    route: Route {
                        partition,
                        worker: r.routed_worker.map(cadenza_schemas::WorkerId),
                    },
                    epoch: LeaseEpoch(epoch),
                    plan_gen: 0,
                    rewrite: false,
                }),
                _ => None,
            },
            released_at: r.released_at,
        })
    }
}

/// Converts rows to pending triggers, keeping `scheduled` ones (and `publishing` ones with their
/// partition and epoch, as the scan writes them) and logging (not failing on) a row that cannot
/// be read.
pub(crate) fn rows_to_pending(rows: Vec<PendingRow>) -> Vec<PendingTrigger> {
    rows.into_iter()
        .filter(|r| {
            r.status == "scheduled"
                || (r.status == "publishing" && r.partition.is_some() && r.lease_epoch.is_some())
        })
        .filter_map(|r| {
            let id = r.id;
            PendingTrigger::try_from(r)
                .map_err(|e| tracing::error!(trigger_id = id, error = %e, "unreadable trigger row skipped"))
                .ok()
        })
        .collect()
}
