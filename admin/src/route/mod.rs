//! The partition selector: maps a trigger to a partition of its job type's topic.
//!
//! Each strategy picks a worker, then one of that worker's partitions. Until the worker registry
//! is available to the selector, every strategy spreads triggers over the topic's partitions in
//! turn per job (`round` semantics), and the consumer group decides which worker owns each
//! partition; the run record shows the worker that actually ran it.

use std::collections::HashMap;
use std::sync::Mutex;

use cadenza_schemas::JobId;

use crate::scheduler::PendingTrigger;

/// Where a trigger goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub partition: i32,
    /// The worker the strategy chose, when it chose one.
    pub worker: Option<String>,
}

/// Stateful selector (per-job counters for `round`).
#[derive(Default)]
pub struct Router {
    round: Mutex<HashMap<JobId, u64>>,
}

impl Router {
    /// Picks the partition of `t` on a topic with `partitions` partitions.
    pub fn select(&self, t: &PendingTrigger, partitions: i32) -> Route {
        let partitions = partitions.max(1) as u64;
        let mut round = self.round.lock().unwrap_or_else(|p| p.into_inner());
        let counter = round
            .entry(t.job_id)
            // Start each job at its own offset so jobs do not all begin on partition 0.
            .or_insert_with(|| (t.job_id.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32);
        let partition = (*counter % partitions) as i32;
        *counter = counter.wrapping_add(1);
        Route {
            partition,
            worker: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadenza_schemas::{BlockStrategy, JobType, RouteStrategy, TriggerId, TriggerKind};

    fn trig(job: i64) -> PendingTrigger {
        PendingTrigger {
            id: TriggerId(1),
            job_id: JobId(job),
            job_type: JobType::parse("t").unwrap(),
            shard: 0,
            kind: TriggerKind::Cron,
            fire_time: chrono::Utc::now(),
            params: String::new(),
            block: BlockStrategy::SerialExecution,
            timeout_ms: 0,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            route: RouteStrategy::Round,
            requested_worker: None,
        }
    }

    #[test]
    fn round_visits_every_partition_in_turn() {
        let r = Router::default();
        let t = trig(42);
        let seen: Vec<i32> = (0..12).map(|_| r.select(&t, 6).partition).collect();
        for p in 0..6 {
            assert_eq!(seen.iter().filter(|x| **x == p).count(), 2, "{seen:?}");
        }
        assert_eq!(seen[0..6], seen[6..12]);
    }
}
