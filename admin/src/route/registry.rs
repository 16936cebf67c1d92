//! The live worker registry: the latest heartbeat of every worker, from the compacted
//! `<prefix>.workers` topic.
//!
//! A worker is live while its last heartbeat is younger than the dead timeout
//! (`CADENZA_WORKER_DEAD_MS`) and it has not written its tombstone. The age of a heartbeat is
//! measured from the earlier of the time the worker says it sent it and the time this admin
//! received it: heartbeats replayed from the topic when an admin starts are as old as they
//! say, and a worker whose clock runs ahead does not look younger than it is.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use cadenza_schemas::{Heartbeat, JobId, JobType, RouteStrategy, Topics, WorkerId};
use chrono::{DateTime, Utc};

/// Entries of workers silent for longer than this are forgotten.
const FORGET_AFTER: chrono::Duration = chrono::Duration::hours(1);

/// Partition numbers believed to exist in a trigger topic nobody has routed to yet (the
/// admin's own topics have at most 1,024; see `CADENZA_TRIGGER_PARTITIONS`).
const MAX_PARTITIONS_ASSUMED: i32 = 1024;

/// A live worker that serves a job type, as the partition selector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub worker_id: WorkerId,
    /// Its partitions of the job type's topic, ascending, never empty.
    pub partitions: Vec<i32>,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: i64,
    /// Its heartbeat interval, in milliseconds.
    pub interval_ms: u64,
    /// Runs of the job being routed that it reports running or waiting.
    pub job_runs: u32,
}

#[derive(Debug, Clone)]
struct Entry {
    heartbeat: Heartbeat,
    /// min(sent_at, received): when it was last heard of.
    seen: DateTime<Utc>,
    /// When its tombstone arrived.
    stopped: Option<DateTime<Utc>>,
}

/// Why a worker named by a manual trigger cannot take it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRoutable {
    #[error("no worker {:?} is known: none has sent a heartbeat with that id", .0.0)]
    Unknown(WorkerId),
    #[error("worker {:?} stopped (it said goodbye at {})", .0.0, .1)]
    Stopped(WorkerId, DateTime<Utc>),
    #[error("worker {:?} is not live: its last heartbeat is {age_ms} ms old (dead after {dead_ms} ms)", worker.0)]
    Dead {
        worker: WorkerId,
        age_ms: i64,
        dead_ms: i64,
    },
    #[error("worker {:?} holds no partition of {topic}: it does not serve job type {job_type} (or its group is rebalancing)", worker.0)]
    NotServing {
        worker: WorkerId,
        topic: String,
        job_type: String,
    },
}

/// The latest heartbeat per worker, shared by the heartbeat ingest (writer), the publisher,
/// the scan and the API (readers).
#[derive(Debug)]
pub struct Registry {
    topics: Topics,
    dead_after: chrono::Duration,
    workers: RwLock<HashMap<WorkerId, Entry>>,
    /// Partitions of each trigger topic, as last routed to.
    partitions: RwLock<HashMap<String, i32>>,
}

impl Registry {
    pub fn new(topics: Topics, dead_after: Duration) -> Self {
        Self {
            topics,
            dead_after: chrono::Duration::from_std(dead_after)
                .unwrap_or(chrono::Duration::seconds(15)),
            workers: RwLock::default(),
            partitions: RwLock::default(),
        }
    }

    /// The dead timeout.
    pub fn dead_after(&self) -> chrono::Duration {
        self.dead_after
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<WorkerId, Entry>> {
        self.workers.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<WorkerId, Entry>> {
        self.workers.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a heartbeat received at `received`. One older than the worker's current heartbeat
    /// is ignored; returns whether it was taken.
    pub fn apply(&self, heartbeat: Heartbeat, received: DateTime<Utc>) -> bool {
        let seen = heartbeat.sent_at.min(received);
        let mut workers = self.write();
        workers.retain(|_, e| received - e.seen < FORGET_AFTER);
        if let Some(current) = workers.get(&heartbeat.worker_id) {
            if current.heartbeat.sent_at > heartbeat.sent_at {
                return false;
            }
        }
        workers.insert(
            heartbeat.worker_id.clone(),
            Entry {
                heartbeat,
                seen,
                stopped: None,
            },
        );
        true
    }

    /// A worker's tombstone: it left on purpose and takes no more runs.
    pub fn stopped(&self, worker_id: &WorkerId, at: DateTime<Utc>) {
        if let Some(e) = self.write().get_mut(worker_id) {
            e.stopped.get_or_insert(at);
        }
    }

    fn is_live(&self, e: &Entry, now: DateTime<Utc>) -> bool {
        e.stopped.is_none() && now - e.seen < self.dead_after
    }

    /// Live workers holding at least one partition (below `partitions`) of `job_type`'s topic,
    /// sorted by worker id; `job_runs` counts `job`'s runs on each.
    ///
    /// A partition belongs to one consumer of a group at a time, so it is counted for one
    /// worker only: the one heard of last (the others' heartbeats predate a rebalance). A
    /// worker left with none is not a candidate. So heartbeats, forged or stale, can never make
    /// more candidates than the topic has partitions (a broadcast is at most that wide).
    pub fn candidates(
        &self,
        job_type: &JobType,
        job: JobId,
        partitions: i32,
        now: DateTime<Utc>,
    ) -> Vec<Candidate> {
        let topic = self.topics.trigger(job_type);
        self.note_partitions(&topic, partitions);
        self.holders(&topic, partitions, job, now)
    }

    /// What [`Self::candidates`] computes, for a topic of `partitions` partitions.
    fn holders(
        &self,
        topic: &str,
        partitions: i32,
        job: JobId,
        now: DateTime<Utc>,
    ) -> Vec<Candidate> {
        let workers = self.read();
        let live: Vec<(&Entry, Vec<i32>)> = workers
            .values()
            .filter(|e| self.is_live(e, now))
            .filter_map(|e| {
                let mut parts: Vec<i32> = e
                    .heartbeat
                    .assignments
                    .get(topic)?
                    .iter()
                    .copied()
                    .filter(|p| (0..partitions).contains(p))
                    .collect();
                parts.sort_unstable();
                parts.dedup();
                (!parts.is_empty()).then_some((e, parts))
            })
            .collect();
        // partition -> the entry heard of last that claims it (ties: the smaller worker id)
        let mut owner: HashMap<i32, &Entry> = HashMap::new();
        for (e, parts) in &live {
            for p in parts {
                let newer = owner.get(p).is_none_or(|o| {
                    (e.seen, std::cmp::Reverse(&e.heartbeat.worker_id))
                        > (o.seen, std::cmp::Reverse(&o.heartbeat.worker_id))
                });
                if newer {
                    owner.insert(*p, e);
                }
            }
        }
        let mut out: Vec<Candidate> = live
            .into_iter()
            .filter_map(|(e, mut parts)| {
                parts.retain(|p| owner.get(p).is_some_and(|o| std::ptr::eq(*o, e)));
                if parts.is_empty() {
                    return None;
                }
                Some(Candidate {
                    worker_id: e.heartbeat.worker_id.clone(),
                    partitions: parts,
                    heartbeat_age_ms: (now - e.seen).num_milliseconds().max(0),
                    interval_ms: e.heartbeat.interval_ms,
                    job_runs: e
                        .heartbeat
                        .running
                        .iter()
                        .filter(|r| r.job_id == job)
                        .map(|r| r.runs)
                        .sum(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        out
    }

    /// Remembers how many partitions `topic` has (the publisher and the scan know it).
    fn note_partitions(&self, topic: &str, partitions: i32) {
        let known = self
            .partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .copied();
        if known != Some(partitions) {
            self.partitions
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(topic.to_owned(), partitions);
        }
    }

    /// The candidates of `job_type` by what is known of its topic's partitions (until the
    /// publisher has routed to it: by [`MAX_PARTITIONS_ASSUMED`]).
    fn holders_known(&self, job_type: &JobType, now: DateTime<Utc>) -> Vec<Candidate> {
        let topic = self.topics.trigger(job_type);
        let partitions = self
            .partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&topic)
            .copied()
            .unwrap_or(MAX_PARTITIONS_ASSUMED);
        self.holders(&topic, partitions, JobId(0), now)
    }

    /// Whether any live worker holds a partition of `job_type`'s topic (as stored; false when it
    /// cannot be read).
    pub fn serves(&self, job_type: &str, now: DateTime<Utc>) -> bool {
        JobType::parse(job_type).is_ok_and(|jt| !self.holders_known(&jt, now).is_empty())
    }

    /// How many runs one fire time of a job becomes: one per live worker serving its job type
    /// for `sharding_broadcast` (at least one, which waits for a consumer when none is live),
    /// one for every other strategy.
    pub fn shard_total(&self, route: RouteStrategy, job_type: &JobType, now: DateTime<Utc>) -> u32 {
        if route != RouteStrategy::ShardingBroadcast {
            return 1;
        }
        let n = self.holders_known(job_type, now).len();
        u32::try_from(n).unwrap_or(u32::MAX).max(1)
    }

    /// [`Self::shard_total`] for a job as stored (route and job type as text); 1 when either
    /// cannot be read.
    pub fn shard_total_stored(&self, route: &str, job_type: &str) -> i32 {
        match (route.parse::<RouteStrategy>(), JobType::parse(job_type)) {
            (Ok(route), Ok(job_type)) => {
                i32::try_from(self.shard_total(route, &job_type, Utc::now())).unwrap_or(i32::MAX)
            }
            _ => 1,
        }
    }

    /// Whether a manual trigger of a `job_type` job may name `worker`: it must be live and hold
    /// partitions of the job type's topic.
    pub fn check_requested(
        &self,
        worker: &WorkerId,
        job_type: &JobType,
        now: DateTime<Utc>,
    ) -> Result<(), NotRoutable> {
        let workers = self.read();
        let Some(e) = workers.get(worker) else {
            return Err(NotRoutable::Unknown(worker.clone()));
        };
        if let Some(at) = e.stopped {
            return Err(NotRoutable::Stopped(worker.clone(), at));
        }
        if !self.is_live(e, now) {
            return Err(NotRoutable::Dead {
                worker: worker.clone(),
                age_ms: (now - e.seen).num_milliseconds(),
                dead_ms: self.dead_after.num_milliseconds(),
            });
        }
        let topic = self.topics.trigger(job_type);
        if e.heartbeat
            .assignments
            .get(&topic)
            .is_none_or(|p| p.is_empty())
        {
            return Err(NotRoutable::NotServing {
                worker: worker.clone(),
                topic,
                job_type: job_type.to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cadenza_schemas::{RunningJob, WorkerId};
    use std::collections::BTreeMap;

    pub(crate) fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    pub(crate) fn hb(id: &str, parts: &[i32], sent: DateTime<Utc>) -> Heartbeat {
        let mut assignments = BTreeMap::new();
        assignments.insert("c.trigger.x".to_owned(), parts.to_vec());
        Heartbeat {
            worker_id: WorkerId(id.into()),
            group: "g".into(),
            job_types: vec![JobType::parse("x").unwrap()],
            assignments,
            running: vec![],
            capacity: 4,
            version: "0".into(),
            started_at: t(0),
            sent_at: sent,
            interval_ms: 500,
        }
    }

    fn reg() -> Registry {
        Registry::new(Topics::new("c"), Duration::from_millis(1500))
    }

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.worker_id.0.as_str()).collect()
    }

    fn x() -> JobType {
        JobType::parse("x").unwrap()
    }

    #[test]
    fn live_workers_of_the_topic_sorted_by_id() {
        let r = reg();
        r.apply(hb("b", &[3, 2], t(0)), t(0));
        r.apply(hb("a", &[0, 1], t(0)), t(0));
        let mut other = hb("c", &[4], t(0));
        other.assignments = BTreeMap::from([("c.trigger.y".to_owned(), vec![0])]);
        r.apply(other, t(0));
        let c = r.candidates(&x(), JobId(1), 6, t(100));
        assert_eq!(ids(&c), ["a", "b"]);
        assert_eq!(c[1].partitions, [2, 3]);
        assert_eq!(c[0].heartbeat_age_ms, 100);
        // partitions beyond the topic's are not offered
        assert_eq!(r.candidates(&x(), JobId(1), 3, t(100))[1].partitions, [2]);
    }

    #[test]
    fn dead_after_the_timeout_and_stopped_after_a_tombstone() {
        let r = reg();
        r.apply(hb("a", &[0], t(0)), t(0));
        r.apply(hb("b", &[1], t(1000)), t(1000));
        assert_eq!(ids(&r.candidates(&x(), JobId(1), 6, t(1400))), ["a", "b"]);
        assert_eq!(ids(&r.candidates(&x(), JobId(1), 6, t(1500))), ["b"]);
        r.stopped(&WorkerId("b".into()), t(1600));
        assert!(r.candidates(&x(), JobId(1), 6, t(1600)).is_empty());
        assert!(matches!(
            r.check_requested(&WorkerId("b".into()), &x(), t(1600)),
            Err(NotRoutable::Stopped(..))
        ));
        assert!(matches!(
            r.check_requested(&WorkerId("a".into()), &x(), t(1600)),
            Err(NotRoutable::Dead { age_ms: 1600, .. })
        ));
        assert!(matches!(
            r.check_requested(&WorkerId("zz".into()), &x(), t(1600)),
            Err(NotRoutable::Unknown(_))
        ));
        // it comes back
        r.apply(hb("b", &[1], t(2000)), t(2000));
        assert_eq!(
            r.check_requested(&WorkerId("b".into()), &x(), t(2000)),
            Ok(())
        );
        assert!(matches!(
            r.check_requested(
                &WorkerId("b".into()),
                &JobType::parse("y").unwrap(),
                t(2000)
            ),
            Err(NotRoutable::NotServing { .. })
        ));
    }

    #[test]
    fn refusals_quote_the_worker_id_as_text() {
        let w = || WorkerId("w 1".into());
        assert_eq!(
            NotRoutable::Unknown(w()).to_string(),
            r#"no worker "w 1" is known: none has sent a heartbeat with that id"#
        );
        assert_eq!(
            NotRoutable::Dead {
                worker: w(),
                age_ms: 20,
                dead_ms: 10
            }
            .to_string(),
            r#"worker "w 1" is not live: its last heartbeat is 20 ms old (dead after 10 ms)"#
        );
    }

    #[test]
    fn replayed_heartbeats_are_as_old_as_they_say_and_older_ones_are_ignored() {
        let r = reg();
        // read at 10 s, sent at 0: already dead
        r.apply(hb("a", &[0], t(0)), t(10_000));
        assert!(r.candidates(&x(), JobId(1), 6, t(10_000)).is_empty());
        r.apply(hb("a", &[0, 1], t(9_900)), t(10_000));
        assert!(!r.apply(hb("a", &[5], t(9_000)), t(10_001)));
        assert_eq!(
            r.candidates(&x(), JobId(1), 6, t(10_000))[0].partitions,
            [0, 1]
        );
        // a worker clock ahead of ours does not make it younger
        r.apply(hb("b", &[2], t(60_000)), t(10_000));
        assert_eq!(ids(&r.candidates(&x(), JobId(1), 6, t(11_400))), ["b"]);
        assert!(r.candidates(&x(), JobId(1), 6, t(11_600)).is_empty());
    }

    #[test]
    fn a_partition_counts_for_the_worker_heard_of_last_and_a_broadcast_is_never_wider_than_the_topic(
    ) {
        let r = reg();
        // `a` held 0-2 before a rebalance gave 1 and 2 to `b`; a's next heartbeat is not in yet.
        r.apply(hb("a", &[0, 1, 2], t(0)), t(0));
        r.apply(hb("b", &[1, 2], t(100)), t(100));
        let c = r.candidates(&x(), JobId(1), 3, t(200));
        assert_eq!(ids(&c), ["a", "b"]);
        assert_eq!(
            (&c[0].partitions[..], &c[1].partitions[..]),
            (&[0][..], &[1, 2][..])
        );
        // Same moment: the smaller id keeps it.
        r.apply(hb("c", &[0], t(0)), t(0));
        assert_eq!(ids(&r.candidates(&x(), JobId(1), 3, t(200))), ["a", "b"]);
        // A thousand forged heartbeats claiming partitions make no broadcast wider than the
        // topic, whatever partition numbers they name.
        for i in 0..1000 {
            r.apply(
                hb(&format!("forged-{i:04}"), &[i % 3, 5000 + i], t(300)),
                t(300),
            );
        }
        assert_eq!(r.candidates(&x(), JobId(1), 3, t(400)).len(), 3);
        assert_eq!(
            r.shard_total(RouteStrategy::ShardingBroadcast, &x(), t(400)),
            3,
            "the topic's partition count, as the selector last saw it"
        );
        let fresh = reg();
        for i in 0..5000 {
            fresh.apply(hb(&format!("forged-{i:04}"), &[i], t(0)), t(0));
        }
        assert_eq!(
            fresh.shard_total(RouteStrategy::ShardingBroadcast, &x(), t(0)),
            MAX_PARTITIONS_ASSUMED as u32,
            "not yet routed to: bounded all the same"
        );
    }

    #[test]
    fn running_runs_of_the_job_and_broadcast_shard_count() {
        let r = reg();
        let mut a = hb("a", &[0], t(0));
        a.running = vec![
            RunningJob {
                job_id: JobId(7),
                runs: 2,
            },
            RunningJob {
                job_id: JobId(8),
                runs: 1,
            },
        ];
        r.apply(a, t(0));
        r.apply(hb("b", &[1], t(0)), t(0));
        let c = r.candidates(&x(), JobId(7), 6, t(0));
        assert_eq!((c[0].job_runs, c[1].job_runs), (2, 0));
        assert_eq!(
            r.shard_total(RouteStrategy::ShardingBroadcast, &x(), t(0)),
            2
        );
        assert_eq!(r.shard_total(RouteStrategy::Round, &x(), t(0)), 1);
        assert_eq!(
            r.shard_total(RouteStrategy::ShardingBroadcast, &x(), t(5000)),
            1,
            "no live worker: one run that waits"
        );
    }
}
