//! The timer: triggers wait here, ordered by fire time, until they are due.
//!
//! Millisecond resolution (tokio's timer), unlike XXL-JOB's one-second ring. The wheel is only a
//! cache of rows committed in the database (`scheduled`, or `publishing` as the scan writes a
//! schedule's runs): losing it loses nothing.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::clock::DbClock;
use crate::ids::ShardId;
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
        }
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
