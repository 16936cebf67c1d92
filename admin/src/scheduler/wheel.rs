//! The timer: triggers wait here, ordered by fire time, until they are due.
//!
//! Millisecond resolution (tokio's timer), unlike XXL-JOB's one-second ring. The wheel is only a
//! cache of rows committed in the database (`scheduled`, or `publishing` as the scan writes a
//! schedule's runs): losing it loses nothing.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::clock::DbClock;
use crate::ids::{LeaseEpoch, ShardId};
use crate::trigger::PendingTrigger;

#[derive(Default)]
struct Inner {
    /// (fire time in ms, trigger id) → trigger
    queue: BTreeMap<(i64, i64), PendingTrigger>,
    /// ids in the queue, or handed to the publisher and not yet settled (sent, or delivered
    /// and waiting to be recorded), with their fire times in ms
    known: HashMap<i64, i64>,
    /// ids of runs written by a scan transaction that is committing, not yet inserted
    reserved: HashSet<i64>,
    /// Runs this admin marked `publishing` whose delivery is not recorded yet (nor resolved by
    /// a read-back), with their shard and a lower bound of their mark's time (`updated_at`, ms
    /// by the database clock): they hold their shard's settled mark back (see
    /// [`Wheel::settled_marks`]), and a generation that changes whenever the run is marked
    /// again (a check of its state made before then says nothing about it).
    unsettled: HashMap<i64, Unsettled>,
    next_generation: u64,
    /// Transactions that may mark runs `publishing` and have not reported them yet: token →
    /// lower bound of the time they mark them at.
    writing: BTreeMap<u64, i64>,
    next_token: u64,
    /// Shards whose settled mark this admin may move, with the epoch it may at: those of its
    /// shards where no run an earlier holder marked is left unresolved after the mark.
    mark_ready: HashMap<ShardId, LeaseEpoch>,
    /// When this admin acquired each of its shards not yet ready (the acquiring transaction's
    /// `now()`, ms): earlier holders marked their runs before then (their transactions confirm
    /// the lease, which a takeover waits for, and a lease expired by then fails that check).
    acquired: HashMap<ShardId, (LeaseEpoch, i64)>,
}

#[derive(Debug, Clone, Copy)]
struct Unsettled {
    shard: ShardId,
    floor: i64,
    generation: u64,
}

/// A run this admin marked and whose delivery is not recorded, as seen by
/// [`Wheel::unsettled_unknown`]: which marking of it a later check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsettledRun {
    pub id: i64,
    generation: u64,
}

/// How much earlier than the admin's reading of the database clock a transaction's `now()` may be
/// taken to be (see [`Wheel::writing`]). The reading is off by about a round trip; a settled mark
/// a second early only makes the read-back's search a second longer.
pub const MARK_SLACK_MS: i64 = 1_000;

/// A transaction that may mark runs `publishing` (see [`Wheel::writing`]).
pub struct Writing {
    wheel: Arc<Wheel>,
    token: u64,
}

impl Writing {
    /// The transaction committed, marking `runs` (id, shard) `publishing`: each holds its
    /// shard's settled mark back until its delivery is recorded ([`Wheel::recorded`]) or it is
    /// found resolved ([`Wheel::resolved`]). Marked again, a run is tracked as a new marking:
    /// what was found about the earlier one no longer resolves it.
    pub fn marked(self, runs: impl IntoIterator<Item = (i64, ShardId)>) {
        let mut inner = self.wheel.lock();
        let Some(floor) = inner.writing.remove(&self.token) else {
            return;
        };
        for (id, shard) in runs {
            inner.next_generation += 1;
            let generation = inner.next_generation;
            inner
                .unsettled
                .entry(id)
                .and_modify(|e| {
                    e.floor = e.floor.min(floor);
                    e.generation = generation;
                })
                .or_insert(Unsettled {
                    shard,
                    floor,
                    generation,
                });
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.wheel.lock().writing.remove(&self.token);
    }
}

#[derive(Default)]
pub struct Wheel {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Wheel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds triggers; ones already known (queued or being published) are ignored.
    pub fn insert(&self, triggers: Vec<PendingTrigger>) {
        if triggers.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let before = inner.queue.keys().next().copied();
        for t in triggers {
            inner.reserved.remove(&t.id.0);
            let fire_ms = t.fire_time.timestamp_millis();
            if let Entry::Vacant(e) = inner.known.entry(t.id.0) {
                e.insert(fire_ms);
                inner.queue.insert((fire_ms, t.id.0), t);
            }
        }
        let after = inner.queue.keys().next().copied();
        drop(inner);
        if before != after {
            self.changed.notify_one();
        }
    }

    /// Forgets the triggers of shards this admin no longer holds and returns them (none of them
    /// was handed to the publisher); their rows stay as they are for the new holder.
    pub fn drop_shards(&self, shards: &[ShardId]) -> Vec<PendingTrigger> {
        let mut inner = self.lock();
        inner.unsettled.retain(|_, u| !shards.contains(&u.shard));
        inner.mark_ready.retain(|shard, _| !shards.contains(shard));
        inner.acquired.retain(|shard, _| !shards.contains(shard));
        let gone: Vec<(i64, i64)> = inner
            .queue
            .iter()
            .filter(|(_, t)| shards.contains(&t.shard))
            .map(|(k, _)| *k)
            .collect();
        let mut dropped = Vec::with_capacity(gone.len());
        for k in gone {
            dropped.extend(inner.queue.remove(&k));
            inner.known.remove(&k.1);
        }
        dropped
    }

    /// Which of `ids` are waiting here or were handed to the publisher and not yet settled: their
    /// sends have not been made, are in flight, or were delivered and are about to be recorded,
    /// so a read-back must not take them.
    pub fn known_among(&self, ids: impl IntoIterator<Item = i64>) -> HashSet<i64> {
        let inner = self.lock();
        ids.into_iter()
            .filter(|id| inner.known.contains_key(id) || inner.reserved.contains(id))
            .collect()
    }

    /// The earliest fire time (epoch milliseconds) of the runs waiting here or handed to the
    /// publisher and not yet settled, if any. Runs due before it are unknown here (but for those
    /// a scan is committing, see [`Wheel::reserve`]): the sweep's search for runs to read back
    /// can stop there, instead of reading the runs this admin is about to take or record (under
    /// load, tens of thousands) only to leave them out. It walks every known run holding the
    /// timer's lock (the publisher and the scan wait meanwhile): a few milliseconds for a full
    /// timer, once per sweep.
    pub fn earliest_known_ms(&self) -> Option<i64> {
        self.lock().known.values().min().copied()
    }

    /// Marks runs a scan wrote, before its transaction commits, as on their way here (see
    /// [`Wheel::known_among`]): from the commit until [`Wheel::insert`] a read-back must not
    /// take them either. [`Wheel::unreserve`] if the commit fails.
    pub fn reserve(&self, ids: impl IntoIterator<Item = i64>) {
        self.lock().reserved.extend(ids);
    }

    pub fn unreserve(&self, ids: impl IntoIterator<Item = i64>) {
        let mut inner = self.lock();
        for id in ids {
            inner.reserved.remove(&id);
        }
    }

    /// Announces a transaction about to mark runs `publishing`, to begin after this call: its
    /// marks (`updated_at`, the transaction's start) come no earlier than `clock` reads now, less
    /// [`MARK_SLACK_MS`] for the clock's error. Until the returned [`Writing`] reports what it
    /// marked (or is dropped), no shard's settled mark passes that time.
    pub fn writing(self: &Arc<Self>, clock: &DbClock) -> Writing {
        let floor_ms = clock.now().timestamp_millis().saturating_sub(MARK_SLACK_MS);
        let mut inner = self.lock();
        inner.next_token += 1;
        let token = inner.next_token;
        inner.writing.insert(token, floor_ms);
        Writing {
            wheel: self.clone(),
            token,
        }
    }

    /// The deliveries of `ids` are recorded: they no longer hold anything back, and the timer
    /// forgets them (see [`Wheel::settle`]).
    pub fn recorded(&self, ids: impl IntoIterator<Item = i64>) {
        let mut inner = self.lock();
        for id in ids {
            inner.known.remove(&id);
            inner.unsettled.remove(&id);
        }
    }

    /// `ids` ended in a transaction of this admin that took them for sending (recorded
    /// `misfired`) and committed: they no longer hold their shard's settled mark back. The
    /// timer handed them out and has not settled them, so no read-back or other take of this
    /// admin marked them again meanwhile.
    pub fn ended(&self, ids: &[i64]) {
        if ids.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for id in ids {
            inner.unsettled.remove(id);
        }
    }

    /// `runs` were found no longer `publishing` undelivered (resolved by a read-back, started,
    /// ended, dropped) after [`Wheel::unsettled_unknown`] returned them: they no longer hold
    /// their shard's settled mark back, unless marked again since.
    pub fn resolved(&self, runs: impl IntoIterator<Item = UnsettledRun>) {
        let mut inner = self.lock();
        for run in runs {
            if let Entry::Occupied(e) = inner.unsettled.entry(run.id) {
                if e.get().generation == run.generation {
                    e.remove();
                }
            }
        }
    }

    /// Runs marked by this admin whose delivery is not recorded and that the timer no longer
    /// knows (their send failed, or their record did): the sweep checks whether they are still
    /// `publishing` undelivered (the read-back resolves those) and reports the others
    /// [`Wheel::resolved`].
    pub fn unsettled_unknown(&self) -> Vec<UnsettledRun> {
        let inner = self.lock();
        inner
            .unsettled
            .iter()
            .filter(|(id, _)| !inner.known.contains_key(id) && !inner.reserved.contains(id))
            .map(|(id, u)| UnsettledRun {
                id: *id,
                generation: u.generation,
            })
            .collect()
    }

    /// For each of `shards` (held at the given epoch) whose mark this admin may move
    /// ([`Wheel::mark_ready`], checked here under the timer's lock: a shard given up meanwhile
    /// has forgotten its runs and is left out), the time (database clock, ms) before which every
    /// run this admin marked `publishing` in it has its delivery recorded or was resolved: the
    /// earliest mark among the runs it marked and has not settled, and among the transactions
    /// marking runs now, but no later than `now_ms` (the database clock as this admin reads it)
    /// less [`MARK_SLACK_MS`]: a transaction announced after this call begins after it.
    pub fn settled_marks(
        &self,
        shards: &[(ShardId, LeaseEpoch)],
        now_ms: i64,
    ) -> Vec<(ShardId, LeaseEpoch, i64)> {
        let now_ms = now_ms.saturating_sub(MARK_SLACK_MS);
        let inner = self.lock();
        let writing = inner.writing.values().min().copied().unwrap_or(now_ms);
        let mut out: BTreeMap<ShardId, (LeaseEpoch, i64)> = shards
            .iter()
            .filter(|(s, e)| inner.mark_ready.get(s) == Some(e))
            .map(|(s, e)| (*s, (*e, now_ms.min(writing))))
            .collect();
        for u in inner.unsettled.values() {
            if let Some((_, m)) = out.get_mut(&u.shard) {
                *m = (*m).min(u.floor);
            }
        }
        out.into_iter().map(|(s, (e, m))| (s, e, m)).collect()
    }

    /// Whether this admin may move the settled mark of `shard`, held at `epoch`.
    pub fn mark_ready(&self, shard: ShardId, epoch: LeaseEpoch) -> bool {
        self.lock().mark_ready.get(&shard) == Some(&epoch)
    }

    /// This admin may move the settled mark of `shard` at `epoch` from now on: no run an
    /// earlier holder marked is left unresolved after it. Refused (returns false) unless the
    /// shard is still the one acquired at `epoch` ([`Wheel::acquired`]): a shard dropped since
    /// the caller read its term (handed back, or lost, while the caller's query ran) has
    /// forgotten the runs it still had in flight, and a mark moved now would pass them, leaving
    /// them `publishing` for every later holder's read-back to skip.
    pub fn set_mark_ready(&self, shard: ShardId, epoch: LeaseEpoch) -> bool {
        let mut inner = self.lock();
        if inner.acquired.get(&shard).is_none_or(|(e, _)| *e != epoch) {
            return false;
        }
        inner.mark_ready.insert(shard, epoch);
        inner.acquired.remove(&shard);
        true
    }

    /// This admin acquired `shard` at `epoch` in a transaction whose `now()` was `at_ms`.
    pub fn acquired(&self, shard: ShardId, epoch: LeaseEpoch, at_ms: i64) {
        self.lock().acquired.insert(shard, (epoch, at_ms));
    }

    /// A time (database clock, ms) after which no earlier holder of `shard` marked a run: when
    /// this admin acquired it at `epoch`, or `now_ms` if it does not know, plus
    /// [`MARK_SLACK_MS`]. The acquiring transaction's `now()` is kept to the millisecond (rounded
    /// down), and `now_ms` is this admin's reading of the database clock, up to a round trip
    /// behind: a run an earlier holder marked in the same millisecond, or a moment before the
    /// reading, would fall after an exact bound. A later bound only widens the searches for
    /// earlier holders' runs, which tell them apart by their epoch.
    pub fn earlier_holders_until_ms(&self, shard: ShardId, epoch: LeaseEpoch, now_ms: i64) -> i64 {
        let at = match self.lock().acquired.get(&shard) {
            Some((e, at)) if *e == epoch => *at,
            _ => now_ms,
        };
        at.saturating_add(MARK_SLACK_MS)
    }

    /// Marks triggers handed out by [`Wheel::next_due`] as settled (published, or given back to
    /// the database), so they may be loaded again if they are still `scheduled`.
    pub fn settle(&self, ids: impl IntoIterator<Item = i64>) {
        let mut inner = self.lock();
        for id in ids {
            inner.known.remove(&id);
        }
    }

    /// How far behind the publisher is at `now_ms` (epoch milliseconds, database clock): how long
    /// ago the earliest trigger still waiting was due to be taken (its fire time less `ahead`);
    /// zero when nothing waiting is overdue.
    pub fn behind_ms(&self, now_ms: i64, ahead: std::time::Duration) -> u64 {
        let ahead_ms = i64::try_from(ahead.as_millis()).unwrap_or(i64::MAX);
        self.lock().queue.keys().next().map_or(0, |&(due, _)| {
            u64::try_from(now_ms.saturating_sub(due.saturating_sub(ahead_ms))).unwrap_or(0)
        })
    }

    /// Number of triggers waiting.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until at least one trigger is due within `ahead` by `clock` (the database's) and
    /// returns every trigger due by then (up to `max`, earliest first), or an empty batch when
    /// `cancel` fires.
    pub async fn next_due(
        &self,
        max: usize,
        clock: &DbClock,
        ahead: std::time::Duration,
        cancel: &CancellationToken,
    ) -> Vec<PendingTrigger> {
        let ahead_ms = i64::try_from(ahead.as_millis()).unwrap_or(i64::MAX);
        loop {
            let notified = self.changed.notified();
            let wait_ms = {
                let mut inner = self.lock();
                let now = clock.now().timestamp_millis().saturating_add(ahead_ms);
                match inner.queue.keys().next() {
                    Some(&(due, _)) if due <= now => {
                        let mut out = Vec::new();
                        while out.len() < max {
                            match inner.queue.first_key_value() {
                                Some((&(due, _), _)) if due <= now => {}
                                _ => break,
                            }
                            if let Some((_, t)) = inner.queue.pop_first() {
                                out.push(t);
                            }
                        }
                        return out;
                    }
                    Some(&(due, _)) => Some((due - now) as u64),
                    None => None,
                }
            };
            let sleep = async {
                match wait_ms {
                    Some(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return Vec::new(),
                _ = notified => {}
                _ = sleep => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadenza_schemas::{BlockStrategy, JobId, JobType, RouteStrategy, TriggerId, TriggerKind};
    use chrono::{DateTime, Duration, Utc};

    /// Due now, nothing ahead.
    const NOW: std::time::Duration = std::time::Duration::ZERO;

    fn trig(id: i64, shard: u32, fire_time: DateTime<Utc>) -> PendingTrigger {
        PendingTrigger {
            id: TriggerId(id),
            job_id: JobId(1),
            job_type: JobType::parse("t").unwrap(),
            shard: ShardId(shard),
            kind: TriggerKind::Cron,
            fire_time,
            params: String::new(),
            block: BlockStrategy::SerialExecution,
            timeout_ms: 0,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            route: RouteStrategy::Round,
            requested_worker: None,
            workflow: None,
            claim: None,
            released_at: None,
        }
    }

    #[test]
    fn earlier_holders_are_searched_past_the_millisecond_of_the_takeover() {
        let wheel = Wheel::default();
        let (s, e) = (ShardId(4), LeaseEpoch(7));
        // Acquired at 10,000.9 ms, kept as 10,000: a run marked at 10,000.5 ms by the earlier
        // holder falls inside the bound.
        wheel.acquired(s, e, 10_000);
        assert!(wheel.earlier_holders_until_ms(s, e, 50_000) > 10_000);
        assert_eq!(
            wheel.earlier_holders_until_ms(s, e, 50_000),
            10_000 + MARK_SLACK_MS
        );
        // Another epoch (or nothing known): from this admin's reading of the clock, which may
        // be behind the database's.
        assert_eq!(
            wheel.earlier_holders_until_ms(s, LeaseEpoch(8), 50_000),
            50_000 + MARK_SLACK_MS
        );
    }

    #[test]
    fn the_settled_mark_waits_for_every_run_marked_and_every_transaction_marking() {
        let wheel = Arc::new(Wheel::default());
        let clock = DbClock::with_offset(Duration::zero());
        let (a, b) = (ShardId(0), ShardId(1));
        let e = LeaseEpoch(3);
        let mark = |now: i64| -> Vec<i64> {
            wheel
                .settled_marks(&[(a, e), (b, e)], now)
                .into_iter()
                .map(|(_, _, m)| m)
                .collect()
        };
        let now = clock.now().timestamp_millis();
        // Not ready (runs an earlier holder marked may be left): no mark at all.
        assert!(mark(now).is_empty());
        wheel.acquired(a, e, now);
        wheel.acquired(b, e, now);
        assert!(wheel.set_mark_ready(a, e));
        assert!(wheel.set_mark_ready(b, e));
        // Nothing in flight: the clock, less the slack.
        assert_eq!(mark(now), vec![now - MARK_SLACK_MS; 2]);
        // A transaction about to mark runs holds every shard back from its start.
        let first = wheel.writing(&clock);
        let floor = now - MARK_SLACK_MS;
        let later = now + 10_000;
        assert!(mark(later)
            .iter()
            .all(|&m| (floor..floor + 1_000).contains(&m)));
        // It marked run 7 of shard 0: that run holds shard 0 back, shard 1 moves on.
        first.marked([(7, a)]);
        let m = mark(later);
        assert!((floor..floor + 1_000).contains(&m[0]), "{m:?}");
        assert_eq!(m[1], later - MARK_SLACK_MS);
        // A failed transaction (dropped) holds nothing back.
        drop(wheel.writing(&clock));
        assert_eq!(mark(later)[1], later - MARK_SLACK_MS);
        // Its send failed: the timer forgets it, the mark does not.
        wheel.settle([7]);
        let unknown = wheel.unsettled_unknown();
        assert_eq!(unknown.iter().map(|r| r.id).collect::<Vec<_>>(), vec![7]);
        assert!(mark(later)[0] < later - MARK_SLACK_MS);
        // Resolved (read back), or recorded: shard 0 moves on.
        wheel.resolved(unknown);
        assert_eq!(mark(later), vec![later - MARK_SLACK_MS; 2]);
        wheel.writing(&clock).marked([(8, b)]);
        assert!(mark(later)[1] < later - MARK_SLACK_MS);
        wheel.recorded([8]);
        assert_eq!(mark(later), vec![later - MARK_SLACK_MS; 2]);
        // Taken too late and recorded `misfired`: it holds nothing back, and the sweep has
        // nothing to look up.
        wheel.writing(&clock).marked([(10, b)]);
        assert!(mark(later)[1] < later - MARK_SLACK_MS);
        wheel.ended(&[10]);
        assert_eq!(mark(later), vec![later - MARK_SLACK_MS; 2]);
        assert!(wheel.unsettled_unknown().is_empty());
        // A shard given up forgets its runs and its readiness: no mark is computed for it.
        wheel.writing(&clock).marked([(9, b)]);
        assert!(wheel.mark_ready(b, e));
        assert!(
            !wheel.mark_ready(b, LeaseEpoch(4)),
            "ready at its epoch only"
        );
        wheel.drop_shards(&[b]);
        assert!(!wheel.mark_ready(b, e));
        assert!(wheel.unsettled_unknown().is_empty());
        assert_eq!(
            wheel.settled_marks(&[(a, e), (b, e)], later),
            vec![(a, e, later - MARK_SLACK_MS)]
        );
    }

    /// The sweep reads a shard's term, asks the database whether earlier holders left runs,
    /// and meanwhile the lease round hands the shard back (dropping the runs this admin still
    /// had in flight in it): the answer must not make the dropped shard ready, or its mark would
    /// be moved past those runs while the lease is still this admin's, and no later holder
    /// would read them back.
    #[test]
    fn a_shard_dropped_while_the_sweep_asks_does_not_become_ready() {
        let wheel = Arc::new(Wheel::default());
        let clock = DbClock::with_offset(Duration::zero());
        let (s, e) = (ShardId(54), LeaseEpoch(7));
        let now = clock.now().timestamp_millis();
        wheel.acquired(s, e, now);
        wheel.writing(&clock).marked([(13, s)]);
        // The sweep has read (s, e) as waiting; the round drops the shard.
        wheel.drop_shards(&[s]);
        assert!(!wheel.set_mark_ready(s, e), "the stale answer is refused");
        assert!(!wheel.mark_ready(s, e));
        assert!(wheel.settled_marks(&[(s, e)], now + 60_000).is_empty());
        // Acquired again at a new epoch: an answer for the old epoch is refused too.
        wheel.acquired(s, LeaseEpoch(9), now);
        assert!(!wheel.set_mark_ready(s, e));
        assert!(wheel.set_mark_ready(s, LeaseEpoch(9)));
    }

    #[test]
    fn a_run_marked_again_after_a_check_is_not_resolved_by_that_check() {
        let wheel = Arc::new(Wheel::default());
        let clock = DbClock::with_offset(Duration::zero());
        let (a, e) = (ShardId(0), LeaseEpoch(1));
        wheel.acquired(a, e, 0);
        assert!(wheel.set_mark_ready(a, e));
        wheel.writing(&clock).marked([(7, a)]);
        let seen = wheel.unsettled_unknown();
        // The sweep checks run 7 and finds it no longer `publishing`; meanwhile a transaction
        // marks it again (taken again after its first take's commit seemed to fail).
        wheel.writing(&clock).marked([(7, a)]);
        wheel.resolved(seen);
        assert_eq!(
            wheel
                .unsettled_unknown()
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>(),
            vec![7],
            "still holds its shard's mark back"
        );
        let later = clock.now().timestamp_millis() + 60_000;
        assert!(wheel.settled_marks(&[(a, e)], later)[0].2 < later - MARK_SLACK_MS);
        // A check made after the second marking resolves it.
        wheel.resolved(wheel.unsettled_unknown());
        assert!(wheel.unsettled_unknown().is_empty());
    }

    #[tokio::test]
    async fn releases_in_fire_time_order_when_due() {
        let w = Wheel::default();
        let now = Utc::now();
        w.insert(vec![
            trig(2, 0, now + Duration::milliseconds(60)),
            trig(1, 0, now - Duration::milliseconds(5)),
            trig(3, 1, now + Duration::milliseconds(30)),
        ]);
        w.insert(vec![trig(1, 0, now)]); // duplicate id ignored
        let cancel = CancellationToken::new();
        let first = w.next_due(100, &DbClock::default(), NOW, &cancel).await;
        assert_eq!(first.iter().map(|t| t.id.0).collect::<Vec<_>>(), vec![1]);
        let second = w.next_due(100, &DbClock::default(), NOW, &cancel).await;
        assert_eq!(second[0].id.0, 3);
        assert!(Utc::now() >= now + Duration::milliseconds(30));
        w.drop_shards(&[ShardId(0)]);
        assert!(w.is_empty());
    }

    #[test]
    fn behind_is_how_long_ago_the_earliest_waiting_trigger_was_due_to_be_taken() {
        let w = Wheel::default();
        let now = Utc::now();
        let ahead = std::time::Duration::from_millis(250);
        let ms = now.timestamp_millis();
        assert_eq!(w.behind_ms(ms, ahead), 0, "nothing waiting");
        w.insert(vec![trig(1, 0, now + Duration::milliseconds(900))]);
        assert_eq!(w.behind_ms(ms, ahead), 0, "due to be taken in 650 ms");
        w.insert(vec![trig(2, 0, now - Duration::milliseconds(1_500))]);
        assert_eq!(
            w.behind_ms(ms, ahead),
            1_750,
            "due to be taken 1,750 ms ago"
        );
        w.drop_shards(&[ShardId(0)]);
        assert_eq!(w.behind_ms(ms, ahead), 0);
    }

    #[tokio::test]
    async fn the_earliest_known_run_counts_until_it_is_settled() {
        let w = Wheel::default();
        let now = Utc::now();
        let ms = |t: DateTime<Utc>| Some(t.timestamp_millis());
        assert_eq!(w.earliest_known_ms(), None);
        let (a, b, c) = (
            now - Duration::seconds(3),
            now - Duration::seconds(1),
            now + Duration::seconds(30),
        );
        w.insert(vec![trig(2, 0, b), trig(3, 1, c), trig(1, 0, a)]);
        assert_eq!(w.earliest_known_ms(), ms(a));
        w.insert(vec![trig(1, 0, c)]);
        assert_eq!(
            w.earliest_known_ms(),
            ms(a),
            "a known run loaded again is ignored"
        );
        let cancel = CancellationToken::new();
        let taken = w.next_due(1, &DbClock::default(), NOW, &cancel).await;
        assert_eq!(taken[0].id.0, 1);
        assert_eq!(
            w.earliest_known_ms(),
            ms(a),
            "handed to the publisher, not yet settled: still known"
        );
        w.settle([1]);
        assert_eq!(w.earliest_known_ms(), ms(b));
        w.drop_shards(&[ShardId(0)]);
        assert_eq!(w.earliest_known_ms(), ms(c));
        w.reserve([4]);
        w.drop_shards(&[ShardId(1)]);
        assert_eq!(
            w.earliest_known_ms(),
            None,
            "runs a scan is committing have no fire time here"
        );
    }

    #[tokio::test]
    async fn an_earlier_insert_wakes_the_waiter() {
        let w = std::sync::Arc::new(Wheel::default());
        let now = Utc::now();
        w.insert(vec![trig(1, 0, now + Duration::seconds(30))]);
        let w2 = w.clone();
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        let waiter =
            tokio::spawn(async move { w2.next_due(10, &DbClock::default(), NOW, &c2).await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        w.insert(vec![trig(2, 0, Utc::now())]);
        let got = tokio::time::timeout(std::time::Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got[0].id.0, 2);
        // a settled id can be loaded again; a known one cannot
        w.insert(vec![trig(2, 0, Utc::now())]);
        assert_eq!(w.len(), 1);
        w.settle([2]);
        w.insert(vec![trig(2, 0, Utc::now())]);
        assert_eq!(w.len(), 2);
    }

    #[tokio::test]
    async fn triggers_are_released_by_the_database_clock() {
        let w = Wheel::default();
        let local = Utc::now();
        w.insert(vec![
            trig(1, 0, local + Duration::seconds(5)),
            trig(2, 0, local - Duration::seconds(5)),
        ]);
        let cancel = CancellationToken::new();
        // The database's clock is 10 s ahead of this admin's: both are due by it.
        let ahead = DbClock::with_offset(Duration::seconds(10));
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            w.next_due(10, &ahead, NOW, &cancel),
        )
        .await
        .expect("released at once by the database clock");
        assert_eq!(got.iter().map(|t| t.id.0).collect::<Vec<_>>(), vec![2, 1]);
        // 10 s behind: a trigger due 5 s ago by this admin's clock is not due yet.
        let behind = DbClock::with_offset(Duration::seconds(-10));
        w.insert(vec![trig(3, 0, local - Duration::seconds(5))]);
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            w.next_due(10, &behind, NOW, &cancel),
        )
        .await;
        assert!(
            waited.is_err(),
            "released before its fire time by the database clock"
        );
    }

    #[tokio::test]
    async fn releases_what_is_due_within_ahead() {
        let w = Wheel::default();
        let now = Utc::now();
        w.insert(vec![
            trig(1, 0, now + Duration::milliseconds(100)),
            trig(2, 0, now + Duration::seconds(30)),
        ]);
        let cancel = CancellationToken::new();
        let got = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            w.next_due(
                10,
                &DbClock::default(),
                std::time::Duration::from_millis(500),
                &cancel,
            ),
        )
        .await
        .expect("a trigger due within the 500 ms ahead is released at once");
        assert_eq!(got.iter().map(|t| t.id.0).collect::<Vec<_>>(), vec![1]);
        assert_eq!(w.len(), 1, "the one due in 30 s waits");
    }
}
