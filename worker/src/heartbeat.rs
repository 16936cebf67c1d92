//! Heartbeats on the compacted topic `<prefix>.workers` (key = worker id): group, job types,
//! current partition assignment, running jobs with their run counts, capacity, version, start
//! time and interval (`CADENZA_HEARTBEAT_MS`, default 5 s), and at once when the assignment
//! changes. The first waits for the first assignment (at most 10 s), so a worker shows live when
//! it holds partitions. A graceful stop writes a tombstone. The admin routes runs from these (it
//! calls a worker dead after `CADENZA_WORKER_DEAD_MS`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cadenza_schemas::{Heartbeat, JobType, WorkerId};
use chrono::{DateTime, Utc};
use rdkafka::error::KafkaError;
use tokio::sync::Notify;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::lane::Lanes;
use crate::lock;
use crate::producer::{produce, Producer, Record};

/// Partitions currently assigned to this worker, per topic (maintained by the consumer's
/// rebalance callbacks).
pub(crate) type Assignment = Arc<Held>;

/// The partitions this worker holds, and a signal when they change: the heartbeat then goes out
/// at once, so the admin routes to the new holders without waiting for the next interval.
#[derive(Debug, Default)]
pub(crate) struct Held {
    partitions: Mutex<BTreeMap<String, Vec<i32>>>,
    changed: Notify,
}

impl Held {
    /// Records the current assignment; wakes the heartbeat if it differs from the last one.
    pub(crate) fn set(&self, partitions: BTreeMap<String, Vec<i32>>) {
        let mut held = lock(&self.partitions);
        if *held != partitions {
            *held = partitions;
            drop(held);
            self.changed.notify_one();
        }
    }

    pub(crate) fn get(&self) -> BTreeMap<String, Vec<i32>> {
        lock(&self.partitions).clone()
    }
}

/// Why a heartbeat was not delivered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeartbeatError {
    #[error("cannot serialize the heartbeat: {0}")]
    Json(#[from] serde_json::Error),
    #[error("kafka did not take the heartbeat: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the heartbeat was not delivered within {0:?}")]
    Timeout(Duration),
}

/// What a heartbeat reports, gathered from the running worker.
pub(crate) struct HeartbeatSource {
    pub worker_id: WorkerId,
    pub group: String,
    pub job_types: Vec<JobType>,
    pub capacity: u32,
    pub interval: Duration,
    pub started_at: DateTime<Utc>,
    pub lanes: Arc<Lanes>,
    pub assignment: Assignment,
}

impl HeartbeatSource {
    /// The heartbeat as of now.
    pub(crate) fn snapshot(&self) -> Heartbeat {
        Heartbeat {
            worker_id: self.worker_id.clone(),
            group: self.group.clone(),
            job_types: self.job_types.clone(),
            assignments: self.assignment.get(),
            running: self.lanes.running(),
            capacity: self.capacity,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: self.started_at,
            sent_at: Utc::now(),
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// How long the first heartbeat waits for the worker's first partition assignment.
const FIRST_BEAT_WAIT: Duration = Duration::from_secs(10);

/// Publishes this worker's heartbeats.
pub(crate) struct Heartbeater {
    pub source: HeartbeatSource,
    pub producer: Producer,
    pub topic: String,
}

impl Heartbeater {
    async fn send(&self, payload: Option<Vec<u8>>) -> Result<(), HeartbeatError> {
        let record = Record {
            topic: self.topic.clone(),
            key: self.source.worker_id.0.clone(),
            payload,
            headers: Vec::new(),
        };
        // A heartbeat older than the next one is worthless: do not wait longer than an interval.
        let wait = self.source.interval.max(Duration::from_secs(1));
        match tokio::time::timeout(wait, produce(&self.producer, &record)).await {
            Ok(r) => r.map(|_| ()).map_err(HeartbeatError::from),
            Err(_) => Err(HeartbeatError::Timeout(wait)),
        }
    }

    /// Publish one heartbeat and wait for its delivery.
    pub(crate) async fn run_once(&self) -> Result<(), HeartbeatError> {
        let payload = serde_json::to_vec(&self.source.snapshot())?;
        self.send(Some(payload)).await
    }

    /// Publish the tombstone that tells the admin this worker left on purpose.
    pub(crate) async fn tombstone(&self) -> Result<(), HeartbeatError> {
        self.send(None).await
    }

    /// Beat every interval (the first at once) and whenever the assignment changes, until
    /// `stop`, then write the tombstone.
    ///
    /// The first beat waits for the first assignment (at most [`FIRST_BEAT_WAIT`]): a worker
    /// shows live to the admin when it holds its partitions, so runs routed to it from then on
    /// reach it.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(self.source.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Stopped meanwhile, the loop ends at once.
        tokio::select! {
            biased;
            _ = stop.cancelled() => {}
            _ = self.source.assignment.changed.notified() => {}
            _ = tokio::time::sleep(FIRST_BEAT_WAIT) => {}
        }
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {}
                _ = self.source.assignment.changed.notified() => ticker.reset(),
            }
            let beat = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                r = self.run_once() => r,
            };
            match beat {
                Ok(()) => tracing::trace!("heartbeat sent"),
                Err(error) => tracing::warn!(%error, "heartbeat failed"),
            }
        }
        match self.tombstone().await {
            Ok(()) => tracing::info!("heartbeat tombstone sent"),
            Err(error) => tracing::warn!(%error, "heartbeat tombstone failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadenza_schemas::{BlockStrategy, JobId, RunningJob, TriggerId};

    #[test]
    fn snapshot_reports_assignment_running_jobs_and_version() {
        let lanes = Arc::new(Lanes::default());
        let _a = lanes.admit(JobId(3), TriggerId(1), BlockStrategy::SerialExecution);
        let _b = lanes.admit(JobId(3), TriggerId(2), BlockStrategy::SerialExecution);
        let assignment: Assignment = Arc::default();
        assignment.set(BTreeMap::from([("c.trigger.x".into(), vec![0, 2])]));
        let source = HeartbeatSource {
            worker_id: WorkerId("w1".into()),
            group: "billing".into(),
            job_types: vec![JobType::parse("x").unwrap()],
            capacity: 4,
            interval: Duration::from_millis(1500),
            started_at: DateTime::UNIX_EPOCH,
            lanes,
            assignment,
        };
        let hb = source.snapshot();
        assert_eq!(hb.assignments["c.trigger.x"], vec![0, 2]);
        assert_eq!(
            hb.running,
            vec![RunningJob {
                job_id: JobId(3),
                runs: 2
            }]
        );
        assert_eq!((hb.capacity, hb.interval_ms), (4, 1500));
        assert_eq!(hb.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(hb.group, "billing");
    }
}
