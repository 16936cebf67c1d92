//! The offset tracker: per partition, which offsets are waiting, started, being reported or
//! finished, and what a commit must record so that the partition's next owner neither loses nor
//! repeats work.
//!
//! Triggers of one partition finish out of order (different jobs, different durations), so the
//! committed **position** is the lowest unfinished offset (or the last seen + 1). That alone would
//! make the next owner re-run everything finished above it, and would not tell it which triggers
//! had started. So every commit also records, per partition, a [`ProgressRecord`]:
//!
//! * `finished`: offsets at or above the position that are finished — the next owner skips them;
//! * `started`: offsets whose run started and has not finished, with its attempt — the next owner
//!   runs them again as `attempt + 1`;
//! * `reporting`: offsets whose `finished` event was being published — the next owner publishes
//!   it again (the admin ingests it once) instead of running the trigger again.
//!
//! This is the commit metadata of Confluent's parallel consumer. Kafka brokers keep a commit's
//! metadata string, but not every Kafka-protocol broker does, so the worker writes the record to
//! `<prefix>.progress` and commits its offset there, in the auxiliary group `<group>~progress`,
//! under the trigger partition (see [`Progress`](super::store::Progress)). That pointer commit is not fenced by
//! the group's generation, so it is only where a new owner starts reading: each record carries
//! its owner's *term* (the offset of the claim the owner wrote when the partition was assigned to
//! it), and of the records from the pointer on, the one with the highest term, and the latest of
//! that term, is in force ([`supersedes`]). A partition's record is written once after each
//! assignment and again at least every [`REFRESH`], so pointers stay recent.
//!
//! A run publishes `started` only once its `started` mark is durable, and `finished` only once
//! its `reporting` mark is durable; so whatever moment a worker dies at, the next owner knows
//! whether the run may have started (→ `attempt + 1`) and whether its result may have been
//! published (→ publish again, never run again).
//!
//! The tracker is a plain struct without I/O; the worker shares it behind a mutex between the
//! progress store (commits), the rebalance callbacks (assign, revoke) and the deliveries (one per
//! offset taken: [`Delivery`](super::Delivery) is a run's only handle on it).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use cadenza_schemas::{ProgressRecord, ReportingOffset, StartedOffset, WorkerId};
use chrono::Utc;
use tokio_util::sync::CancellationToken;

/// Most bytes of handlers' outputs one partition's progress record carries (see `snapshot`).
pub const REPORTING_OUTPUT_BUDGET: usize = 128 * 1024;
/// A partition's record is written again at least this often even when unchanged, and once
/// after each assignment, so that its pointer stays recent: a new owner reads the progress topic
/// back from the pointer (see [`Progress`](super::store::Progress)), so this bounds what it reads.
pub const REFRESH: Duration = Duration::from_secs(30);

/// A partition's pointer is committed in the first round of each assignment and then in a
/// round at most this long after the last one (and in the last round before the partition goes):
/// any of the owner's records is a valid place to start reading from, so rounds in between
/// write the record and commit the group's offsets once (see
/// [`Progress`](super::store::Progress)). It bounds what a new owner reads back beyond the
/// pointer.
pub const POINTER_EVERY: Duration = Duration::from_secs(1);

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// Identifies one assignment of a partition to this consumer (counted by this process). A run
/// that began under an earlier assignment cannot finish an offset of a later one (the partition
/// was revoked and came back, and the message may have been delivered again).
///
/// Not to be confused with the admin's lease epoch of a shard (fence records), nor with the
/// owner's *term* on the progress topic: this one never leaves the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AssignmentEpoch(u64);

#[derive(Debug, Clone, PartialEq)]
enum Mark {
    /// Taken from the partition here, not started (not recorded: it only holds the position).
    Waiting,
    Started(u32),
    Reporting(Box<ReportingOffset>),
    Finished,
}

/// What earlier owners of the partition left for an offset, told when it is taken.
#[derive(Debug, Clone, PartialEq)]
pub enum Prior {
    /// Nothing: a first delivery.
    Fresh,
    /// Finished already: skip it.
    Finished,
    /// Started with this attempt and never finished: run it again with `attempt + 1`.
    Started { attempt: u32 },
    /// Its result was being published: publish it again, do not run it.
    Reporting(Box<ReportingOffset>),
    /// Delivered again within this assignment (the client reset its fetch position): the first
    /// delivery's task handles it, or has. Ignore this one.
    Again,
    /// The partition's progress record could not be read: an earlier owner may have run it.
    Unknown,
}

/// Tokens of one assignment of a partition.
#[derive(Debug, Clone)]
pub struct PartitionTokens {
    /// Cancelled when the partition is being revoked (or the worker stops taking triggers): runs
    /// of it that have not started are handed back.
    pub revoking: CancellationToken,
    /// Cancelled when the partition is gone (or the worker abandons its runs): runs of it still
    /// executing are abandoned unreported; the next owner runs them again.
    pub dropped: CancellationToken,
}

/// An offset taken from an assigned partition.
#[derive(Debug, Clone)]
pub struct Begun {
    pub epoch: AssignmentEpoch,
    pub prior: Prior,
    pub tokens: PartitionTokens,
}

/// Whether a mark has reached the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Durable,
    Pending,
    /// The partition was revoked since.
    Gone,
}

/// What a progress record says of a partition (without who wrote it and when): compared with
/// the last committed one to tell whether the partition has anything new to commit.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    /// The lowest unfinished offset, or the highest seen + 1.
    position: i64,
    /// Finished offsets at or above `position`.
    finished: Vec<i64>,
    /// Started, unfinished runs with their attempt.
    started: Vec<StartedOffset>,
    /// Runs whose `finished` event was being published.
    reporting: Vec<ReportingOffset>,
}

impl Snapshot {
    /// The part of `record` a snapshot holds.
    fn of(record: &ProgressRecord) -> Self {
        Self {
            position: record.position,
            finished: record.finished.clone(),
            started: record.started.clone(),
            reporting: record.reporting.clone(),
        }
    }
}

#[derive(Debug)]
struct PartitionState {
    epoch: AssignmentEpoch,
    tokens: PartitionTokens,
    /// Every offset below is finished (known when the partition was assigned).
    base: Option<i64>,
    entries: BTreeMap<i64, Mark>,
    /// The progress record could not be read when the partition was assigned.
    unknown: bool,
    highest_seen: Option<i64>,
    /// Offsets taken here whose task has not ended.
    active: usize,
    version: u64,
    durable: u64,
    committed: Option<Snapshot>,
    /// This owner's term: the offset of its claim on the progress topic (none yet if the claim
    /// could not be written at assignment: the first commit writes one).
    term: Option<i64>,
    /// A commit of the group accepted since the claim: until then, records are not written
    /// (a member the group had moved on from before its claim must write none with that term).
    validated: bool,
    /// When a record of this assignment last reached the broker.
    written: Option<Instant>,
    /// When a pointer at a record of this assignment was last committed.
    pointed: Option<Instant>,
}

impl PartitionState {
    fn position(&self) -> Option<i64> {
        if let Some((o, _)) = self.entries.iter().find(|(_, m)| **m != Mark::Finished) {
            return Some(*o);
        }
        match (self.highest_seen.map(|h| h + 1), self.base) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn prune(&mut self) {
        let Some(position) = self.position() else {
            return;
        };
        let done: Vec<i64> = self
            .entries
            .range(..position)
            .filter(|(_, m)| **m == Mark::Finished)
            .map(|(o, _)| *o)
            .collect();
        for o in done {
            self.entries.remove(&o);
        }
    }

    /// The marks from the position on. Outputs of runs being reported are kept up to
    /// [`REPORTING_OUTPUT_BUDGET`] in all (a record stays well below the broker's message size);
    /// a result beyond it that has to be published again goes without its output, saying so.
    fn snapshot(&self) -> Option<Snapshot> {
        let position = self.position()?;
        let mut finished = Vec::new();
        let mut started = Vec::new();
        let mut reporting = Vec::new();
        let mut output_bytes = 0;
        for (o, m) in self.entries.range(position..) {
            match m {
                Mark::Waiting => {}
                Mark::Finished => finished.push(*o),
                Mark::Started(attempt) => started.push(StartedOffset {
                    offset: *o,
                    attempt: *attempt,
                }),
                Mark::Reporting(r) => {
                    let mut r = (**r).clone();
                    if let Some(bytes) = r.output.as_ref().map(|o| o.to_string().len()) {
                        if output_bytes + bytes > REPORTING_OUTPUT_BUDGET {
                            r.output = None;
                            r.message = Some(format!(
                                "succeeded; its output ({bytes} bytes) was lost: the worker stopped while reporting it"
                            ));
                        } else {
                            output_bytes += bytes;
                        }
                    }
                    reporting.push(r);
                }
            }
        }
        Some(Snapshot {
            position,
            finished,
            started,
            reporting,
        })
    }
}

/// One partition's record to commit.
#[derive(Debug, Clone)]
pub struct CommitItem {
    pub tp: TopicPartition,
    pub epoch: AssignmentEpoch,
    pub version: u64,
    pub record: ProgressRecord,
    /// Whether a group commit was accepted since the owner's claim (`record.term`). If not, the
    /// commit must get one accepted before it writes the record.
    pub validated: bool,
    /// Whether the round must commit the partition's pointer at this record: none committed in
    /// this assignment yet, the last one [`POINTER_EVERY`] ago, or the partition is going.
    pub pointer: bool,
}

/// Orders a partition's progress records: `true` if the record with term `a` at offset
/// `a_offset` supersedes the one with term `b` at `b_offset`. The highest term wins (a later
/// owner), then the latest record of that term (one owner writes its records in order).
pub fn supersedes(a: Option<i64>, a_offset: i64, b: Option<i64>, b_offset: i64) -> bool {
    (a, a_offset) > (b, b_offset)
}

/// Progress of every assigned partition.
#[derive(Debug)]
pub struct OffsetTracker {
    partitions: HashMap<TopicPartition, PartitionState>,
    next_epoch: AssignmentEpoch,
    hand_back: CancellationToken,
    abandon: CancellationToken,
}

impl Default for OffsetTracker {
    fn default() -> Self {
        Self::new(CancellationToken::new(), CancellationToken::new())
    }
}

impl OffsetTracker {
    /// Partition tokens are children of `hand_back` (revoking) and `abandon` (dropped).
    pub fn new(hand_back: CancellationToken, abandon: CancellationToken) -> Self {
        Self {
            partitions: HashMap::new(),
            next_epoch: AssignmentEpoch(0),
            hand_back,
            abandon,
        }
    }

    /// The partition is now assigned to this consumer, whose group had committed `committed`
    /// and recorded `record` for it; `term` is the offset of this consumer's claim. Returns its
    /// epoch.
    pub fn assign(
        &mut self,
        tp: TopicPartition,
        committed: Option<i64>,
        record: Option<&ProgressRecord>,
        term: Option<i64>,
    ) -> AssignmentEpoch {
        self.next_epoch = AssignmentEpoch(self.next_epoch.0 + 1);
        let epoch = self.next_epoch;
        // A round that failed half-way may leave either ahead; every offset below the higher is finished.
        let base = match (committed, record.map(|r| r.position)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut entries = BTreeMap::new();
        if let (Some(r), Some(base)) = (record, base) {
            for o in r.finished.iter().filter(|o| **o >= base) {
                entries.insert(*o, Mark::Finished);
            }
            for s in r.started.iter().filter(|s| s.offset >= base) {
                entries.insert(s.offset, Mark::Started(s.attempt));
            }
            for rep in r.reporting.iter().filter(|r| r.offset >= base) {
                entries.insert(rep.offset, Mark::Reporting(Box::new(rep.clone())));
            }
        }
        let mut state = PartitionState {
            epoch,
            tokens: PartitionTokens {
                revoking: self.hand_back.child_token(),
                dropped: self.abandon.child_token(),
            },
            base,
            entries,
            unknown: false,
            highest_seen: None,
            active: 0,
            version: 0,
            durable: 0,
            committed: None,
            term,
            validated: false,
            written: None,
            pointed: None,
        };
        state.committed = state.snapshot();
        self.partitions.insert(tp, state);
        epoch
    }

    /// The partition is now assigned, but its progress record could not be read: offsets not
    /// below `committed` are told [`Prior::Unknown`].
    pub fn assign_unknown(
        &mut self,
        tp: TopicPartition,
        committed: Option<i64>,
        term: Option<i64>,
    ) -> AssignmentEpoch {
        let epoch = self.assign(tp.clone(), committed, None, term);
        if let Some(state) = self.partitions.get_mut(&tp) {
            state.unknown = true;
        }
        epoch
    }

    /// A message at `offset` was taken from the partition. `None` when the partition is not
    /// assigned (the message must then be left alone: its owner will process it). The caller
    /// must call [`end`](Self::end) once the offset's task is over.
    pub fn begin(&mut self, tp: &TopicPartition, offset: i64) -> Option<Begun> {
        let state = self.partitions.get_mut(tp)?;
        state.active += 1;
        // Within one assignment a partition's messages come in offset order: an offset not
        // above the highest seen is a second delivery (running it would run it twice with the
        // same attempt, whether its first run is going on or finished and pruned).
        if state.highest_seen.is_some_and(|h| offset <= h) {
            return Some(Begun {
                epoch: state.epoch,
                prior: Prior::Again,
                tokens: state.tokens.clone(),
            });
        }
        state.highest_seen = Some(offset);
        let prior = if state.base.is_some_and(|b| offset < b) {
            Prior::Finished
        } else {
            match state.entries.get(&offset) {
                None | Some(Mark::Waiting) => {
                    state.entries.insert(offset, Mark::Waiting);
                    if state.unknown {
                        Prior::Unknown
                    } else {
                        Prior::Fresh
                    }
                }
                Some(Mark::Finished) => Prior::Finished,
                Some(Mark::Started(attempt)) => Prior::Started { attempt: *attempt },
                Some(Mark::Reporting(r)) => Prior::Reporting(r.clone()),
            }
        };
        state.prune();
        Some(Begun {
            epoch: state.epoch,
            prior,
            tokens: state.tokens.clone(),
        })
    }

    fn live(&mut self, tp: &TopicPartition, epoch: AssignmentEpoch) -> Option<&mut PartitionState> {
        self.partitions.get_mut(tp).filter(|s| s.epoch == epoch)
    }

    /// The run at `offset` is about to start with `attempt`. Returns the version that must be
    /// durable before it does, or `None` if the partition was revoked.
    pub fn start(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        epoch: AssignmentEpoch,
        attempt: u32,
    ) -> Option<u64> {
        let state = self.live(tp, epoch)?;
        state.entries.insert(offset, Mark::Started(attempt));
        state.version += 1;
        Some(state.version)
    }

    /// The result of the run at `offset` is about to be published. Returns the version that
    /// must be durable before it is, or `None` if the partition was revoked.
    pub fn report(
        &mut self,
        tp: &TopicPartition,
        epoch: AssignmentEpoch,
        report: ReportingOffset,
    ) -> Option<u64> {
        let state = self.live(tp, epoch)?;
        state
            .entries
            .insert(report.offset, Mark::Reporting(Box::new(report)));
        state.version += 1;
        Some(state.version)
    }

    /// Whether `version` of the partition reached the broker.
    pub fn durability(
        &self,
        tp: &TopicPartition,
        epoch: AssignmentEpoch,
        version: u64,
    ) -> Durability {
        match self.partitions.get(tp) {
            Some(s) if s.epoch == epoch && s.durable >= version => Durability::Durable,
            Some(s) if s.epoch == epoch => Durability::Pending,
            _ => Durability::Gone,
        }
    }

    /// The message at `offset` is completely handled (result delivered, DLQ record delivered,
    /// or skipped). Ignored when the partition was revoked since `begin`.
    pub fn finish(&mut self, tp: &TopicPartition, offset: i64, epoch: AssignmentEpoch) {
        if let Some(state) = self.live(tp, epoch) {
            if state.base.is_none_or(|b| offset >= b) {
                state.entries.insert(offset, Mark::Finished);
            }
            state.prune();
        }
    }

    /// The task of an offset taken with `begin` is over (finished or handed back).
    pub fn end(&mut self, tp: &TopicPartition, epoch: AssignmentEpoch) {
        if let Some(state) = self.live(tp, epoch) {
            state.active = state.active.saturating_sub(1);
        }
    }

    /// Offsets of these partitions whose task has not ended.
    pub fn active(&self, tps: &[TopicPartition]) -> usize {
        tps.iter()
            .filter_map(|tp| self.partitions.get(tp))
            .map(|s| s.active)
            .sum()
    }

    /// The partitions are being revoked: their runs that have not started are handed back.
    pub fn start_revoking(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(s) = self.partitions.get(tp) {
                s.tokens.revoking.cancel();
            }
        }
    }

    /// The partition is taken away: its runs still executing are abandoned. Returns what to
    /// commit before letting it go, if anything changed since the last commit.
    pub fn revoke(
        &mut self,
        tp: &TopicPartition,
        worker: &WorkerId,
        group: &str,
    ) -> Option<CommitItem> {
        let item = self
            .item(tp, worker, group, false, Instant::now())
            .map(|it| CommitItem {
                pointer: true,
                ..it
            });
        if let Some(state) = self.partitions.remove(tp) {
            state.tokens.revoking.cancel();
            state.tokens.dropped.cancel();
        }
        item
    }

    /// How many offsets of the partition are not finished.
    pub fn unfinished(&self, tp: &TopicPartition) -> usize {
        self.partitions.get(tp).map_or(0, |s| {
            s.entries.values().filter(|m| **m != Mark::Finished).count()
        })
    }

    /// The position a commit records for the partition: the lowest unfinished offset, or the
    /// highest seen + 1 when all are finished; `None` before anything is known.
    #[cfg(test)]
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp)?.position()
    }

    fn item(
        &self,
        tp: &TopicPartition,
        worker: &WorkerId,
        group: &str,
        force: bool,
        now: Instant,
    ) -> Option<CommitItem> {
        let s = self.partitions.get(tp)?;
        let snap = s.snapshot()?;
        let due = s
            .written
            .is_none_or(|w| now.saturating_duration_since(w) >= REFRESH);
        if !force && !due && s.committed.as_ref() == Some(&snap) {
            return None;
        }
        let Snapshot {
            position,
            finished,
            started,
            reporting,
        } = snap;
        Some(CommitItem {
            tp: tp.clone(),
            epoch: s.epoch,
            version: s.version,
            record: ProgressRecord {
                group: group.to_owned(),
                topic: tp.topic.clone(),
                partition: tp.partition,
                position,
                finished,
                started,
                reporting,
                worker_id: worker.clone(),
                written_at: Utc::now(),
                term: s.term,
            },
            validated: s.validated,
            pointer: s
                .pointed
                .is_none_or(|p| now.saturating_duration_since(p) >= POINTER_EVERY),
        })
    }

    /// Records that changed since they were last committed, or are due again (see
    /// [`REFRESH`]); all with `force`. Sorted.
    pub fn to_commit(&self, worker: &WorkerId, group: &str, force: bool) -> Vec<CommitItem> {
        self.to_commit_at(worker, group, force, Instant::now())
    }

    fn to_commit_at(
        &self,
        worker: &WorkerId,
        group: &str,
        force: bool,
        now: Instant,
    ) -> Vec<CommitItem> {
        let mut tps: Vec<&TopicPartition> = self.partitions.keys().collect();
        tps.sort();
        tps.into_iter()
            .filter_map(|tp| self.item(tp, worker, group, force, now))
            .collect()
    }

    /// These records reached the broker (and the group accepted commits since their claim).
    pub fn mark_committed(&mut self, items: &[CommitItem]) {
        for it in items {
            if let Some(s) = self.live(&it.tp, it.epoch) {
                s.validated = true;
                s.written = Some(Instant::now());
                if it.pointer {
                    s.pointed = s.written;
                }
                if s.term.is_none() {
                    s.term = it.record.term;
                }
                s.durable = s.durable.max(it.version);
                s.committed = Some(Snapshot::of(&it.record));
            }
        }
    }

    /// A commit failed: commit every record again next round.
    pub fn forget_committed(&mut self) {
        for s in self.partitions.values_mut() {
            s.committed = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadenza_schemas::{JobId, RunStatus, TriggerId};
    use chrono::DateTime;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn w() -> WorkerId {
        WorkerId("w".into())
    }

    fn fresh(t: &mut OffsetTracker, p: i32, o: i64) -> AssignmentEpoch {
        let b = t.begin(&tp(p), o).unwrap();
        assert_eq!(b.prior, Prior::Fresh, "offset {o}");
        b.epoch
    }

    fn reporting(offset: i64) -> ReportingOffset {
        ReportingOffset {
            offset,
            trigger_id: TriggerId(100 + offset),
            job_id: JobId(1),
            worker_id: w(),
            attempt: 1,
            status: RunStatus::Succeeded,
            started_at: None,
            finished_at: DateTime::UNIX_EPOCH,
            message: None,
            retry_requested: false,
            output: Some(serde_json::json!({ "offset": offset })),
        }
    }

    /// Commit everything and return the partition's record.
    fn commit(t: &mut OffsetTracker, p: i32) -> ProgressRecord {
        let items = t.to_commit(&w(), "g", false);
        t.mark_committed(&items);
        items
            .into_iter()
            .find(|i| i.tp == tp(p))
            .map(|i| i.record)
            .unwrap()
    }

    #[test]
    fn a_second_delivery_within_an_assignment_is_ignored() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), Some(10), None, None);
        for o in 10..13 {
            fresh(&mut t, 0, o);
        }
        t.start(&tp(0), 11, e, 1);
        t.finish(&tp(0), 10, e);
        t.end(&tp(0), e);
        // The client fetches from the committed offset again: 10 (finished and pruned), 11
        // (running), 12 (waiting) are not taken again; 13 is new.
        for o in 10..13 {
            assert_eq!(
                t.begin(&tp(0), o).unwrap().prior,
                Prior::Again,
                "offset {o}"
            );
            t.end(&tp(0), e);
        }
        fresh(&mut t, 0, 13);
        assert_eq!(t.position(&tp(0)), Some(11));
        assert_eq!(
            t.active(&[tp(0)]),
            3,
            "offsets 11, 12, 13 are still being handled"
        );
    }

    #[test]
    fn without_its_record_a_partition_tells_offsets_they_may_have_run() {
        let mut t = OffsetTracker::default();
        let e = t.assign_unknown(tp(0), Some(10), None);
        assert_eq!(t.begin(&tp(0), 9).unwrap().prior, Prior::Finished);
        assert_eq!(t.begin(&tp(0), 10).unwrap().prior, Prior::Unknown);
        assert_eq!(t.begin(&tp(0), 11).unwrap().prior, Prior::Unknown);
        t.finish(&tp(0), 10, e);
        assert_eq!(t.position(&tp(0)), Some(11));
        // Once committed, the next owner has a record: what this one finished is skipped.
        let r = commit(&mut t, 0);
        let mut next = OffsetTracker::default();
        next.assign(tp(0), Some(10), Some(&r), None);
        assert_eq!(next.begin(&tp(0), 10).unwrap().prior, Prior::Finished);
    }

    #[test]
    fn position_is_lowest_unfinished_then_last_plus_one() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), None, None, None);
        assert_eq!(t.position(&tp(0)), None);
        for o in 10..15 {
            assert_eq!(fresh(&mut t, 0, o), e);
        }
        assert_eq!(t.position(&tp(0)), Some(10));
        t.finish(&tp(0), 12, e);
        t.finish(&tp(0), 11, e);
        assert_eq!(t.position(&tp(0)), Some(10));
        t.finish(&tp(0), 10, e);
        assert_eq!(t.position(&tp(0)), Some(13));
        t.finish(&tp(0), 14, e);
        assert_eq!(t.position(&tp(0)), Some(13));
        t.finish(&tp(0), 13, e);
        assert_eq!(t.position(&tp(0)), Some(15));
        assert_eq!(t.unfinished(&tp(0)), 0);
    }

    #[test]
    fn the_record_lists_finished_above_the_position_and_started_runs() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), Some(10), None, None);
        for o in 10..14 {
            fresh(&mut t, 0, o);
        }
        let v = t.start(&tp(0), 10, e, 1).unwrap();
        assert_eq!(t.durability(&tp(0), e, v), Durability::Pending);
        t.start(&tp(0), 12, e, 2).unwrap();
        t.finish(&tp(0), 11, e);
        t.finish(&tp(0), 13, e);
        let r = commit(&mut t, 0);
        assert_eq!(t.durability(&tp(0), e, v), Durability::Durable);
        assert_eq!(r.position, 10);
        assert_eq!(r.finished, vec![11, 13]);
        assert_eq!(
            r.started,
            vec![
                StartedOffset {
                    offset: 10,
                    attempt: 1
                },
                StartedOffset {
                    offset: 12,
                    attempt: 2
                }
            ]
        );
        // Nothing changed: nothing to commit.
        assert!(t.to_commit(&w(), "g", false).is_empty());
        assert_eq!(t.to_commit(&w(), "g", true).len(), 1);
        // A failed commit makes it eligible again.
        t.forget_committed();
        assert_eq!(t.to_commit(&w(), "g", false).len(), 1);
    }

    #[test]
    fn the_next_owner_skips_finished_reruns_started_and_republishes_reporting() {
        let mut a = OffsetTracker::default();
        let e = a.assign(tp(0), None, None, None);
        for o in 0..6 {
            fresh(&mut a, 0, o);
        }
        a.start(&tp(0), 0, e, 1);
        a.start(&tp(0), 1, e, 3);
        a.finish(&tp(0), 2, e);
        a.report(&tp(0), e, reporting(3));
        // 4 waits (never started), 5 finished.
        a.finish(&tp(0), 5, e);
        let record = commit(&mut a, 0);
        assert_eq!(record.position, 0);

        // The worker dies; the next owner gets the partition from the committed offset 0.
        let mut b = OffsetTracker::default();
        let e2 = b.assign(tp(0), Some(0), Some(&record), None);
        let prior = |b: &mut OffsetTracker, o| b.begin(&tp(0), o).unwrap().prior;
        assert_eq!(prior(&mut b, 0), Prior::Started { attempt: 1 });
        assert_eq!(prior(&mut b, 1), Prior::Started { attempt: 3 });
        assert_eq!(prior(&mut b, 2), Prior::Finished);
        assert_eq!(prior(&mut b, 3), Prior::Reporting(Box::new(reporting(3))));
        assert_eq!(prior(&mut b, 4), Prior::Fresh);
        assert_eq!(prior(&mut b, 5), Prior::Finished);
        assert_eq!(prior(&mut b, 6), Prior::Fresh);
        // Until the new owner starts them, the inherited marks stay in its records.
        let r = b.to_commit(&w(), "g", true)[0].record.clone();
        assert_eq!(r.finished, vec![2, 5]);
        assert_eq!(r.started.len(), 2);
        assert_eq!(r.reporting, vec![reporting(3)]);
        b.start(&tp(0), 0, e2, 2);
        let r = commit(&mut b, 0);
        assert_eq!(r.started[0].attempt, 2);
    }

    #[test]
    fn a_record_ahead_of_the_committed_offset_wins() {
        // The record was written, the worker died before committing the offset.
        let record = ProgressRecord {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
            position: 8,
            finished: vec![9],
            started: vec![],
            reporting: vec![],
            worker_id: w(),
            written_at: DateTime::UNIX_EPOCH,
            term: None,
        };
        let mut t = OffsetTracker::default();
        t.assign(tp(0), Some(5), Some(&record), None);
        for o in 5..8 {
            assert_eq!(t.begin(&tp(0), o).unwrap().prior, Prior::Finished);
        }
        assert_eq!(t.begin(&tp(0), 8).unwrap().prior, Prior::Fresh);
        assert_eq!(t.begin(&tp(0), 9).unwrap().prior, Prior::Finished);
    }

    #[test]
    fn the_record_in_force_has_the_highest_term_then_the_latest_offset() {
        // Read on from a pointer that a stalled member set back to its own record at 10 (term
        // 3): the next owner (term 12) wrote at 14 and 20; the stalled member wrote again at 25.
        let read = [(10, Some(3)), (14, Some(12)), (20, Some(12)), (25, Some(3))];
        let mut best: Option<(Option<i64>, i64)> = None;
        for (offset, term) in read {
            if best.is_none_or(|(t, o)| supersedes(term, offset, t, o)) {
                best = Some((term, offset));
            }
        }
        assert_eq!(best, Some((Some(12), 20)));
        // A record of an earlier version (no term) ranks below any term.
        assert!(supersedes(Some(0), 1, None, 9));
        assert!(!supersedes(None, 9, Some(0), 1));
    }

    #[test]
    fn records_carry_the_owners_term_and_need_a_confirmed_claim() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), Some(0), None, Some(42));
        fresh(&mut t, 0, 0);
        t.finish(&tp(0), 0, e);
        let items = t.to_commit(&w(), "g", false);
        assert_eq!(items[0].record.term, Some(42));
        assert!(!items[0].validated, "no group commit since the claim yet");
        t.mark_committed(&items);
        fresh(&mut t, 0, 1);
        t.start(&tp(0), 1, e, 1);
        let items = t.to_commit(&w(), "g", false);
        assert!(items[0].validated);
        // The partition comes back: a new claim, to be confirmed again.
        t.revoke(&tp(0), &w(), "g");
        t.assign(tp(0), Some(2), None, Some(50));
        let items = t.to_commit(&w(), "g", true);
        assert_eq!(items[0].record.term, Some(50));
        assert!(!items[0].validated);
    }

    #[test]
    fn without_a_claim_at_assignment_the_commit_provides_the_term() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), Some(0), None, None);
        fresh(&mut t, 0, 0);
        t.finish(&tp(0), 0, e);
        let mut items = t.to_commit(&w(), "g", false);
        assert_eq!(items[0].record.term, None);
        // The commit claims (at offset 7) and confirms the claim.
        items[0].record.term = Some(7);
        t.mark_committed(&items);
        fresh(&mut t, 0, 1);
        t.start(&tp(0), 1, e, 1);
        let items = t.to_commit(&w(), "g", false);
        assert_eq!(items[0].record.term, Some(7));
        assert!(items[0].validated);
    }

    #[test]
    fn a_record_is_written_after_assignment_and_again_when_due_even_unchanged() {
        let mut t = OffsetTracker::default();
        t.assign(tp(0), Some(4), None, Some(9));
        let items = t.to_commit(&w(), "g", false);
        assert_eq!(items.len(), 1, "the new owner's first record");
        assert_eq!(items[0].record.position, 4);
        t.mark_committed(&items);
        assert!(t.to_commit(&w(), "g", false).is_empty());
        let later = Instant::now() + REFRESH;
        assert_eq!(t.to_commit_at(&w(), "g", false, later).len(), 1);
    }

    #[test]
    fn the_pointer_moves_in_the_first_round_then_at_most_every_interval_and_at_revoke() {
        let mut t = OffsetTracker::default();
        let e = t.assign(tp(0), Some(0), None, Some(9));
        let first = t.to_commit(&w(), "g", false);
        assert!(first[0].pointer, "no pointer of this assignment yet");
        // A failed round moves nothing: the next one still commits the pointer.
        t.forget_committed();
        assert!(t.to_commit(&w(), "g", false)[0].pointer);
        t.mark_committed(&first);
        fresh(&mut t, 0, 0);
        t.start(&tp(0), 0, e, 1);
        let next = t.to_commit(&w(), "g", false);
        assert!(
            !next[0].pointer,
            "a pointer was committed less than POINTER_EVERY ago"
        );
        t.mark_committed(&next);
        t.finish(&tp(0), 0, e);
        let later = Instant::now() + POINTER_EVERY;
        assert!(t.to_commit_at(&w(), "g", false, later)[0].pointer);
        fresh(&mut t, 0, 1);
        let last = t.revoke(&tp(0), &w(), "g").unwrap();
        assert!(
            last.pointer,
            "the last record before the partition goes is pointed at"
        );
    }

    #[test]
    fn unassigned_partitions_are_left_alone() {
        let mut t = OffsetTracker::default();
        assert!(t.begin(&tp(3), 1).is_none());
        t.finish(&tp(3), 1, AssignmentEpoch(1));
        assert!(t.start(&tp(3), 1, AssignmentEpoch(1), 1).is_none());
        assert!(t.to_commit(&w(), "g", false).is_empty());
        assert_eq!(
            t.durability(&tp(3), AssignmentEpoch(1), 0),
            Durability::Gone
        );
    }

    #[test]
    fn revoke_returns_the_final_record_and_stale_epochs_cannot_finish() {
        let mut t = OffsetTracker::default();
        let old = t.assign(tp(0), None, None, None);
        let tokens = t.begin(&tp(0), 5).unwrap().tokens;
        fresh(&mut t, 0, 6);
        t.finish(&tp(0), 5, old);
        assert_eq!(t.active(&[tp(0)]), 2);
        t.end(&tp(0), old);
        assert_eq!(t.active(&[tp(0)]), 1);
        t.start_revoking(&[tp(0)]);
        assert!(tokens.revoking.is_cancelled() && !tokens.dropped.is_cancelled());
        let item = t.revoke(&tp(0), &w(), "g").unwrap();
        assert_eq!(item.record.position, 6);
        assert!(tokens.dropped.is_cancelled());
        assert!(t.revoke(&tp(0), &w(), "g").is_none());
        // The partition comes back and offset 6 is delivered again.
        let new = t.assign(tp(0), Some(6), None, None);
        assert_ne!(old, new);
        fresh(&mut t, 0, 6);
        // The run from the old assignment finishing must not mark the redelivered copy done.
        t.finish(&tp(0), 6, old);
        assert_eq!(t.position(&tp(0)), Some(6));
        assert_eq!(t.durability(&tp(0), old, 0), Durability::Gone);
        t.finish(&tp(0), 6, new);
        assert_eq!(t.position(&tp(0)), Some(7));
    }

    #[test]
    fn stopping_cancels_every_partitions_tokens() {
        let hand_back = CancellationToken::new();
        let abandon = CancellationToken::new();
        let mut t = OffsetTracker::new(hand_back.clone(), abandon.clone());
        t.assign(tp(0), None, None, None);
        let tokens = t.begin(&tp(0), 0).unwrap().tokens;
        hand_back.cancel();
        assert!(tokens.revoking.is_cancelled() && !tokens.dropped.is_cancelled());
        abandon.cancel();
        assert!(tokens.dropped.is_cancelled());
    }
}
