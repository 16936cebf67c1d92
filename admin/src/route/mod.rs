//! The partition selector: maps a trigger to a partition of its job type's topic.
//!
//! The candidates are the live workers ([`registry`]) that hold partitions of the job type's
//! topic, sorted by worker id. The job's strategy picks one of them — a pure function of the
//! job, the candidates and the job's `history` — and the run goes to one of that worker's
//! partitions, taken in turn. Strategy families: `ordered` (`first`, `last`, `failover`,
//! `busyover`), `turn` (`round`, `random`), `hash` (`consistent_hash`), `usage`
//! (`least_frequently_used`, `least_recently_used`), `broadcast` (`sharding_broadcast`).
//!
//! A manual trigger that names a live worker goes to that worker. With no live worker the
//! trigger goes to the partition its job id hashes to and waits there for a consumer; the run
//! record then has no `routed_worker` and a `route_note` saying so. If the group rebalances
//! between routing and consumption, the partition's new owner runs it: `worker_id` on the run
//! shows who did.

pub(crate) mod broadcast;
pub(crate) mod hash;
pub(crate) mod history;
pub(crate) mod ordered;
pub mod registry;
pub(crate) mod turn;
pub(crate) mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Identifies a worker process (its `worker_id`), in routing and in the registry.
pub use cadenza_schemas::WorkerId;
use cadenza_schemas::{JobId, RouteStrategy};
use chrono::{DateTime, Utc};

use crate::trigger::PendingTrigger;
use history::JobHistory;
use registry::{Candidate, Registry};

/// Histories kept at most; beyond, they are all dropped and start again.
const MAX_HISTORIES: usize = 100_000;
/// Hash rings cached at most (one per distinct set of candidates).
const MAX_RINGS: usize = 256;

/// Where a trigger goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub partition: i32,
    /// The worker the strategy chose; `None` when no worker serving the job type was live.
    pub worker: Option<WorkerId>,
}

/// What routing a run needs to know about it.
#[derive(Debug, Clone, Copy)]
pub struct RouteInput<'a> {
    pub run: RunRef,
    pub job_type: &'a cadenza_schemas::JobType,
    /// A manual trigger's chosen worker.
    pub requested_worker: Option<&'a str>,
}

impl<'a> RouteInput<'a> {
    pub fn of(t: &'a PendingTrigger) -> Self {
        Self {
            run: RunRef {
                job_id: t.job_id,
                route: t.route,
                shard_index: t.shard_index,
            },
            job_type: &t.job_type,
            requested_worker: t.requested_worker.as_deref(),
        }
    }
}

/// What a strategy knows about the run it routes.
#[derive(Debug, Clone, Copy)]
pub struct RunRef {
    pub job_id: JobId,
    pub route: RouteStrategy,
    pub shard_index: u32,
}

/// Picks the index of the worker in `candidates` (non-empty, sorted by worker id) that
/// `strategy` chooses. `random` is a uniformly random number (for `random`); `ring`, when
/// given, is the hash ring of `candidates`.
pub fn pick(
    run: RunRef,
    candidates: &[Candidate],
    history: &JobHistory,
    random: u64,
    ring: Option<&hash::Ring>,
) -> usize {
    let i = match run.route {
        RouteStrategy::First => ordered::first(candidates),
        RouteStrategy::Last => ordered::last(candidates),
        RouteStrategy::Round => turn::round(candidates, history),
        RouteStrategy::Random => turn::random(candidates, random),
        RouteStrategy::ConsistentHash => match ring {
            Some(r) => r.lookup(run.job_id),
            None => hash::consistent_hash(run.job_id, candidates),
        },
        RouteStrategy::LeastFrequentlyUsed => usage::least_frequently_used(candidates, history),
        RouteStrategy::LeastRecentlyUsed => usage::least_recently_used(candidates, history),
        RouteStrategy::Failover => ordered::failover(candidates),
        RouteStrategy::Busyover => ordered::busyover(candidates),
        RouteStrategy::ShardingBroadcast => {
            broadcast::sharding_broadcast(candidates, run.shard_index)
        }
    };
    i.min(candidates.len().saturating_sub(1))
}

/// The selector with its per-job histories.
#[derive(Default)]
pub struct Router {
    histories: Mutex<HashMap<JobId, JobHistory>>,
    rings: Mutex<HashMap<Vec<WorkerId>, Arc<hash::Ring>>>,
}

impl Router {
    /// Picks the partition of `t` on its topic of `partitions` partitions, from the workers
    /// live in `registry` now.
    pub fn select(&self, t: &PendingTrigger, partitions: i32, registry: &Registry) -> Route {
        self.select_for(&RouteInput::of(t), partitions, registry)
    }

    /// [`Self::select`] for a run described by `t` (the scan routes runs before it writes them).
    pub fn select_for(&self, t: &RouteInput<'_>, partitions: i32, registry: &Registry) -> Route {
        let now = Utc::now();
        let candidates = registry.candidates(t.job_type, t.run.job_id, partitions, now);
        self.select_among_for(t, partitions, &candidates, now, rand::random())
    }

    /// Checks a route chosen earlier against the workers live now: the scan routes a run up to
    /// its lookahead before the fire time, and the run is taken for publication a
    /// publish-ahead before it. `None` while `earlier` still holds; otherwise the run's route
    /// now (see [`Self::still_holds`]).
    pub fn confirm(
        &self,
        t: &RouteInput<'_>,
        earlier: &Route,
        partitions: i32,
        registry: &Registry,
    ) -> Option<Route> {
        let now = Utc::now();
        let candidates = registry.candidates(t.job_type, t.run.job_id, partitions, now);
        if self.still_holds(t, earlier, &candidates) {
            return None;
        }
        Some(self.select_among_for(t, partitions, &candidates, now, rand::random()))
    }

    /// Whether `earlier` still holds among `candidates`: with no live worker then, there is
    /// none now; with one, it is still a candidate holding the route's partition and, for the
    /// strategies that choose by which workers are live, fresh or idle right now (`first`,
    /// `last`, `failover`, `busyover`, `consistent_hash`, `sharding_broadcast`, and a requested
    /// worker), still the one chosen. The strategies that spread runs (`round`, `random`, the
    /// least used ones) keep any live candidate: their choice was made once, when routed.
    pub fn still_holds(
        &self,
        t: &RouteInput<'_>,
        earlier: &Route,
        candidates: &[Candidate],
    ) -> bool {
        let Some(worker) = &earlier.worker else {
            return candidates.is_empty();
        };
        let Some(i) = candidates.iter().position(|c| &c.worker_id == worker) else {
            return false;
        };
        if !candidates[i].partitions.contains(&earlier.partition) {
            return false;
        }
        let requested = t
            .requested_worker
            .and_then(|w| candidates.iter().position(|c| c.worker_id.0 == w));
        let chosen_now = match (requested, t.run.route) {
            (Some(r), _) => r,
            (None, RouteStrategy::First) => ordered::first(candidates),
            (None, RouteStrategy::Last) => ordered::last(candidates),
            (None, RouteStrategy::Failover) => ordered::failover(candidates),
            (None, RouteStrategy::Busyover) => ordered::busyover(candidates),
            (None, RouteStrategy::ConsistentHash) => self.ring(candidates).lookup(t.run.job_id),
            (None, RouteStrategy::ShardingBroadcast) => {
                broadcast::sharding_broadcast(candidates, t.run.shard_index)
            }
            (
                None,
                RouteStrategy::Round
                | RouteStrategy::Random
                | RouteStrategy::LeastFrequentlyUsed
                | RouteStrategy::LeastRecentlyUsed,
            ) => i,
        };
        chosen_now == i
    }

    fn ring(&self, candidates: &[Candidate]) -> Arc<hash::Ring> {
        let key: Vec<WorkerId> = candidates.iter().map(|c| c.worker_id.clone()).collect();
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = rings.get(&key) {
            return r.clone();
        }
        if rings.len() >= MAX_RINGS {
            rings.clear();
        }
        let ring = Arc::new(hash::Ring::new(key.iter().map(|w| w.0.as_str())));
        rings.insert(key, ring.clone());
        ring
    }

    /// [`Self::select`] over given candidates (sorted by worker id).
    pub fn select_among(
        &self,
        t: &PendingTrigger,
        partitions: i32,
        candidates: &[Candidate],
        now: DateTime<Utc>,
        random: u64,
    ) -> Route {
        self.select_among_for(&RouteInput::of(t), partitions, candidates, now, random)
    }

    fn select_among_for(
        &self,
        t: &RouteInput<'_>,
        partitions: i32,
        candidates: &[Candidate],
        now: DateTime<Utc>,
        random: u64,
    ) -> Route {
        let RouteInput {
            run,
            requested_worker,
            ..
        } = *t;
        if candidates.is_empty() {
            return Route {
                partition: hash::job_partition(run.job_id, partitions),
                worker: None,
            };
        }
        let ring = (run.route == RouteStrategy::ConsistentHash).then(|| self.ring(candidates));
        let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
        if histories.len() >= MAX_HISTORIES && !histories.contains_key(&run.job_id) {
            histories.clear();
        }
        let history = histories
            .entry(run.job_id)
            .or_insert_with(|| JobHistory::new(run.job_id));
        history.roll_window(now);
        let requested =
            requested_worker.and_then(|w| candidates.iter().position(|c| c.worker_id.0 == w));
        let i =
            requested.unwrap_or_else(|| pick(run, candidates, history, random, ring.as_deref()));
        let chosen = &candidates[i];
        let partition = history.partition_for(chosen);
        history.record(&chosen.worker_id, candidates);
        Route {
            partition,
            worker: Some(chosen.worker_id.clone()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::registry::tests::{hb, t as at};
    use super::*;
    use cadenza_schemas::{BlockStrategy, JobType, Topics, TriggerId, TriggerKind};
    use std::time::Duration;

    pub(crate) fn cand(id: &str, partitions: &[i32]) -> Candidate {
        Candidate {
            worker_id: WorkerId(id.to_owned()),
            partitions: partitions.to_vec(),
            heartbeat_age_ms: 100,
            interval_ms: 500,
            job_runs: 0,
        }
    }

    fn trig(job: i64, route: RouteStrategy) -> PendingTrigger {
        PendingTrigger {
            id: TriggerId(1),
            job_id: JobId(job),
            job_type: JobType::parse("x").unwrap(),
            shard: crate::ids::ShardId(0),
            kind: TriggerKind::Cron,
            fire_time: chrono::Utc::now(),
            params: String::new(),
            block: BlockStrategy::SerialExecution,
            timeout_ms: 0,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            route,
            requested_worker: None,
            workflow: None,
            claim: None,
            released_at: None,
        }
    }

    fn router() -> Router {
        Router::default()
    }

    fn three() -> Vec<Candidate> {
        vec![cand("a", &[0, 1]), cand("b", &[2, 3]), cand("c", &[4, 5])]
    }

    #[test]
    fn every_strategy_picks_a_candidate() {
        let c = three();
        for s in RouteStrategy::ALL {
            let run = RunRef {
                job_id: JobId(9),
                route: *s,
                shard_index: 1,
            };
            let i = pick(run, &c, &JobHistory::new(JobId(9)), 7, None);
            assert!(i < c.len(), "{s:?}");
        }
    }

    #[test]
    fn spreads_over_the_chosen_workers_partitions() {
        let r = router();
        let t = trig(1, RouteStrategy::First);
        let parts: Vec<i32> = (0..4)
            .map(|_| r.select_among(&t, 6, &three(), at(0), 0).partition)
            .collect();
        assert_eq!(parts, [0, 1, 0, 1]);
        // round over 2 workers of 2 partitions each still reaches all four
        let t = trig(2, RouteStrategy::Round);
        let two = &three()[..2];
        let mut parts: Vec<i32> = (0..4)
            .map(|_| r.select_among(&t, 6, two, at(0), 0).partition)
            .collect();
        parts.sort();
        assert_eq!(parts, [0, 1, 2, 3]);
    }

    #[test]
    fn no_live_worker_goes_to_the_job_hash_partition() {
        let r = router();
        let t = trig(5, RouteStrategy::Round);
        let route = r.select_among(&t, 6, &[], at(0), 0);
        assert_eq!(
            route,
            Route {
                partition: hash::job_partition(JobId(5), 6),
                worker: None
            }
        );
    }

    #[test]
    fn a_requested_worker_gets_the_run_and_counts_as_a_use() {
        let r = router();
        let mut t = trig(3, RouteStrategy::LeastFrequentlyUsed);
        t.requested_worker = Some("c".into());
        let route = r.select_among(&t, 6, &three(), at(0), 0);
        assert_eq!(route.worker.as_ref().map(|w| w.0.as_str()), Some("c"));
        assert!(route.partition == 4 || route.partition == 5);
        // gone since the API accepted it: the strategy decides
        t.requested_worker = Some("zz".into());
        let route = r.select_among(&t, 6, &three(), at(0), 0);
        assert_eq!(route.worker.as_ref().map(|w| w.0.as_str()), Some("a"));
        t.requested_worker = None;
        assert_eq!(
            r.select_among(&t, 6, &three(), at(0), 0)
                .worker
                .as_ref()
                .map(|w| w.0.as_str()),
            Some("b")
        );
    }

    #[test]
    fn select_reads_the_registry() {
        let registry = Registry::new(Topics::new("c"), Duration::from_secs(15));
        let now = Utc::now();
        registry.apply(hb("w2", &[2, 3], now), now);
        registry.apply(hb("w1", &[0, 1], now), now);
        let r = Router::default();
        let route = r.select(&trig(1, RouteStrategy::Last), 6, &registry);
        assert_eq!(route.worker.as_ref().map(|w| w.0.as_str()), Some("w2"));
        registry.stopped(&WorkerId("w2".into()), now);
        let route = r.select(&trig(1, RouteStrategy::Last), 6, &registry);
        assert_eq!(route.worker.as_ref().map(|w| w.0.as_str()), Some("w1"));
    }

    fn routed(worker: &str, partition: i32) -> Route {
        Route {
            partition,
            worker: Some(WorkerId(worker.into())),
        }
    }

    #[test]
    fn a_route_chosen_earlier_holds_while_its_worker_is_still_the_pick() {
        let r = router();
        let c = three();
        let first = trig(1, RouteStrategy::First);
        let input = RouteInput::of(&first);
        assert!(r.still_holds(&input, &routed("a", 1), &c));
        assert!(
            !r.still_holds(&input, &routed("a", 2), &c),
            "partition moved to b"
        );
        assert!(!r.still_holds(&input, &routed("b", 2), &c), "a is first");
        assert!(!r.still_holds(&input, &routed("a", 0), &c[1..]), "a left");
        let last = trig(1, RouteStrategy::Last);
        assert!(r.still_holds(&RouteInput::of(&last), &routed("c", 4), &c));
        assert!(!r.still_holds(&RouteInput::of(&last), &routed("c", 4), &c[..2]));
        // Spreading strategies keep any live candidate holding the partition.
        let round = trig(1, RouteStrategy::Round);
        assert!(r.still_holds(&RouteInput::of(&round), &routed("b", 3), &c));
        assert!(!r.still_holds(&RouteInput::of(&round), &routed("z", 3), &c));
        // No live worker then: holds only while there is still none.
        let none = Route {
            partition: 1,
            worker: None,
        };
        assert!(r.still_holds(&RouteInput::of(&round), &none, &[]));
        assert!(!r.still_holds(&RouteInput::of(&round), &none, &c));
    }

    #[test]
    fn failover_and_busyover_move_on_from_a_stale_or_busy_worker() {
        let r = router();
        let mut c = three();
        let failover = trig(1, RouteStrategy::Failover);
        assert!(r.still_holds(&RouteInput::of(&failover), &routed("a", 0), &c));
        c[0].heartbeat_age_ms = 5_000;
        assert!(!r.still_holds(&RouteInput::of(&failover), &routed("a", 0), &c));
        let busy = trig(1, RouteStrategy::Busyover);
        c[0].job_runs = 1;
        assert!(!r.still_holds(&RouteInput::of(&busy), &routed("a", 0), &c));
        assert!(r.still_holds(&RouteInput::of(&busy), &routed("b", 2), &c));
    }

    #[test]
    fn confirm_routes_again_only_when_the_route_no_longer_holds() {
        let registry = Registry::new(Topics::new("c"), Duration::from_secs(15));
        let now = chrono::Utc::now();
        registry.apply(hb("w1", &[0, 1, 2], now), now);
        registry.apply(hb("w2", &[3, 4, 5], now), now);
        let r = router();
        let t = trig(1, RouteStrategy::First);
        let input = RouteInput::of(&t);
        assert_eq!(r.confirm(&input, &routed("w1", 0), 6, &registry), None);
        registry.stopped(&WorkerId("w1".into()), now);
        let again = r.confirm(&input, &routed("w1", 0), 6, &registry);
        let again = again.expect("w1 stopped: routed again");
        assert_eq!(again.worker, Some(WorkerId("w2".into())));
        assert!((3..6).contains(&again.partition));
    }
}
