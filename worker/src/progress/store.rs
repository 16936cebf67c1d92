//! The progress store: the partitions' progress records on `<prefix>.progress`, their pointers
//! in the auxiliary group `<group>~progress`, and the committer that writes them in commit rounds.
//!
//! The store turns the [`OffsetTracker`]'s state into Kafka writes and back: on assignment it
//! claims a term and reads the records in force ([`Progress::assign`]), every round it writes the
//! changed records and commits offsets ([`Progress::commit_round`]), and before a partition goes
//! it writes its last record ([`Progress::commit_revoked`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cadenza_schemas::{ProgressClaim, ProgressRecord, WorkerId, HEADER_RECORD};
use chrono::Utc;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::tracker::POINTER_EVERY;
use super::tracker::{supersedes, CommitItem, OffsetTracker, TopicPartition};
use crate::config::{progress_client_config, WorkerConfig};
use crate::metrics::WorkerMetrics;
use crate::producer::{produce, Producer, Record};
use crate::{lock, Throttle};

/// How long loading a partition's progress record may take before the partition is started
/// from its committed offset alone.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Failure injection for the tests, compiled into debug builds only:
/// `CADENZA_TEST_FAIL_PROGRESS_READS=N` makes the first N reads of assigned partitions' progress
/// fail, as a read stall or a refused claim would.
mod test_hooks {
    #[cfg(debug_assertions)]
    pub(super) fn fail_read() -> bool {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::OnceLock;
        static LEFT: OnceLock<AtomicU32> = OnceLock::new();
        let left = LEFT.get_or_init(|| {
            AtomicU32::new(
                std::env::var("CADENZA_TEST_FAIL_PROGRESS_READS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            )
        });
        left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    #[cfg(not(debug_assertions))]
    pub(super) fn fail_read() -> bool {
        false
    }
}

/// How many times a new owner reads its partitions' progress before it takes them without it.
const LOAD_ATTEMPTS: u32 = 4;
/// The pause before the n-th read again is n times this.
const LOAD_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Tells runs waiting for a mark to become durable that a commit round completed, and wakes the
/// committer when one waits.
#[derive(Debug)]
pub(crate) struct ProgressSignal {
    /// Notified by a run that waits for a commit.
    pub wake: Notify,
    /// Bumped after every commit round.
    pub committed: watch::Sender<u64>,
}

impl Default for ProgressSignal {
    fn default() -> Self {
        Self {
            wake: Notify::new(),
            committed: watch::channel(0).0,
        }
    }
}

impl ProgressSignal {
    /// A commit round completed: wake the runs waiting for one.
    pub(crate) fn bump(&self) {
        self.committed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The progress records of the partitions (see [`tracker`](super::tracker)): written to `<prefix>.progress`, their
/// offsets (pointers) committed in the auxiliary group `<group>~progress` under the trigger
/// partition, read back when a partition is assigned.
///
/// The protocol, whose steps are each fenced by an offset commit of the trigger group:
/// * on assignment, a claim is written to `<prefix>.progress`; its offset is the owner's term;
///   the records are read back from the lowest pointer up to the claim ([`Self::read_back`]);
/// * the first round of a term has the group accept an offset commit before it writes a record;
/// * every round writes the records, then commits the group's offsets; a round that moves the
///   pointers (the first of each assignment, then at most every
///   [`POINTER_EVERY`](super::tracker::POINTER_EVERY), and the last
///   before a partition goes) then commits the pointers and the group's offsets again. Runs act
///   on a record only when every group commit of its round was accepted.
///
/// A member stalled between its first group commit and its pointer commit may set a pointer
/// back after a later owner moved it on; reading on from the pointer and ranking records by
/// term makes that harmless.
pub(crate) struct Progress {
    offsets: Arc<Mutex<OffsetTracker>>,
    /// Holds the pointers (commits only; never subscribes).
    pointers: BaseConsumer,
    /// Reads records back.
    reader: Mutex<BaseConsumer>,
    producer: Producer,
    topic: String,
    group: String,
    worker_id: WorkerId,
    /// One commit at a time, so an older record never lands after a newer one.
    serial: Mutex<()>,
    pub(crate) signal: Arc<ProgressSignal>,
    /// Refused commits repeat every round while they last: logged once a minute per reason.
    refusals: Throttle,
    /// Test hook, inert unless `CADENZA_TEST_STOP_BEFORE_POINTER` is set (see [`StopHook`]).
    stop_hook: Option<StopHook>,
    metrics: Arc<WorkerMetrics>,
}

/// Test hook: freezes the worker process (SIGSTOP to itself) once, in the commit round that
/// follows the creation of a file, between the group's first offset commit and the pointer
/// commit, so that an end-to-end test can stall a worker exactly there (as a long pause of the
/// process would) and resume it with SIGCONT. Armed only when the environment variable
/// `CADENZA_TEST_STOP_BEFORE_POINTER` names that file; never set it in production.
struct StopHook {
    armed_by: std::path::PathBuf,
}

impl StopHook {
    const ENV: &'static str = "CADENZA_TEST_STOP_BEFORE_POINTER";

    fn from_env() -> Option<Self> {
        std::env::var_os(Self::ENV)
            .filter(|v| !v.is_empty())
            .map(|v| Self { armed_by: v.into() })
    }

    /// Whether the file exists: the next round that commits pointers stops.
    fn armed(&self) -> bool {
        self.armed_by.exists()
    }

    /// Stops the process if the file exists (removing it first). Returns whether it did.
    fn maybe_stop(&self) -> bool {
        if std::fs::remove_file(&self.armed_by).is_err() {
            return false;
        }
        tracing::warn!("test hook: stopping before the pointer commit");
        #[cfg(unix)]
        if let Err(error) = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP) {
            tracing::warn!(%error, "test hook: cannot stop");
        }
        true
    }
}

fn key(group: &str, tp: &TopicPartition) -> String {
    format!("{group}/{}/{}", tp.topic, tp.partition)
}

impl Progress {
    pub(crate) fn new(
        config: &WorkerConfig,
        offsets: Arc<Mutex<OffsetTracker>>,
        producer: Producer,
        signal: Arc<ProgressSignal>,
        metrics: Arc<WorkerMetrics>,
    ) -> KafkaResult<Self> {
        Ok(Self {
            offsets,
            pointers: progress_client_config(config).create()?,
            reader: Mutex::new(progress_client_config(config).create()?),
            producer,
            topic: config.topics.progress(),
            group: config.group.clone(),
            worker_id: config.worker_id.clone(),
            serial: Mutex::new(()),
            signal,
            refusals: Throttle::new(Duration::from_secs(60)),
            stop_hook: StopHook::from_env(),
            metrics,
        })
    }

    /// Write a claim (see `ProgressClaim`) and return its offset (blocking).
    fn claim(&self) -> Option<i64> {
        let claim = ProgressClaim {
            group: self.group.clone(),
            worker_id: self.worker_id.clone(),
            written_at: Utc::now(),
        };
        let record = Record {
            topic: self.topic.clone(),
            key: format!("{}/claim", self.group),
            payload: Some(serde_json::to_vec(&claim).unwrap_or_default()),
            headers: vec![(HEADER_RECORD, "claim".to_owned())],
        };
        match futures::executor::block_on(produce(&self.producer, &record)) {
            Ok((_, offset)) => Some(offset),
            Err(error) => {
                tracing::warn!(%error, "writing a progress claim failed");
                None
            }
        }
    }

    /// Write `items` and commit them (blocking; call with `serial` held). Returns whether the
    /// records are durable; an item's term is filled in if it had none.
    fn commit_items<C: ConsumerContext, K: Consumer<C>>(
        &self,
        main: &K,
        items: &mut [CommitItem],
    ) -> bool {
        if items.is_empty() {
            return true;
        }
        let failed = |r: KafkaResult<()>, refused: &str| match r {
            Ok(()) => false,
            Err(error) => {
                let key = format!("{refused} {:?}", error.rdkafka_error_code());
                if self.refusals.allow(&key) {
                    tracing::warn!(%error, "{refused}; retrying next round (logged once a minute)");
                }
                true
            }
        };
        // The claim could not be written when the partitions were assigned: write it now.
        if items.iter().any(|it| it.record.term.is_none()) {
            let Some(term) = self.claim() else {
                return false;
            };
            for it in items.iter_mut().filter(|it| it.record.term.is_none()) {
                it.record.term = Some(term);
                it.validated = false;
            }
        }
        let mut positions = TopicPartitionList::new();
        for it in items.iter() {
            if let Err(error) = positions.add_partition_offset(
                &it.tp.topic,
                it.tp.partition,
                Offset::Offset(it.record.position),
            ) {
                tracing::warn!(%error, "cannot build a commit");
                return false;
            }
        }
        // No record of a term before the group accepted a commit of its owner after the claim:
        // a member the group had moved on from before it claimed writes none, so a later
        // owner's claim is always above every term that has records (see `read_back`).
        if items.iter().any(|it| !it.validated)
            && failed(
                main.commit(&positions, CommitMode::Sync),
                "the consumer group refused the offset commit that confirms this worker's claim on its partitions (it may have moved them to another member): no progress record written",
            )
        {
            return false;
        }
        let sends = items.iter().map(|it| {
            let payload = serde_json::to_vec(&it.record).unwrap_or_default();
            let record = Record {
                topic: self.topic.clone(),
                key: key(&self.group, &it.tp),
                payload: Some(payload),
                headers: Vec::new(),
            };
            async move { produce(&self.producer, &record).await }
        });
        let written = futures::executor::block_on(futures::future::join_all(sends));
        // Whether this round moves the pointers (then it moves every item's: they are all
        // written now). A test hook armed for this round needs the pointer commit.
        let point = items.iter().any(|it| it.pointer)
            || self.stop_hook.as_ref().is_some_and(StopHook::armed);
        let mut pointers = TopicPartitionList::new();
        for (it, w) in items.iter().zip(written) {
            let at = match w {
                Ok((_, offset)) => offset,
                Err(error) => {
                    tracing::warn!(%error, "writing a progress record failed; retrying next round");
                    return false;
                }
            };
            if let Err(error) =
                pointers.add_partition_offset(&it.tp.topic, it.tp.partition, Offset::Offset(at))
            {
                tracing::warn!(%error, "cannot build a commit");
                return false;
            }
        }
        // The pointer commit (in a group without members) is not fenced by the trigger group's
        // generation; the group's own offset commit is. So the pointer is written between two
        // accepted commits of the group. A round that leaves the pointers where they are (at an
        // earlier record of the owner, or of an earlier owner: a lower bound of the record in
        // force either way) needs the first one only, which then also decides whether runs may
        // act on the record. The first makes every pointer a lower bound of the
        // record in force: a member whose commit the group accepted after it wrote its record
        // still owned the partition then, so every later owner claims, and writes, above that
        // record — even if this member stalls here and commits its pointer after them. Readers
        // therefore read on from the pointer (see `read_back`). The second commit decides
        // whether runs may act on the record: only when both were accepted was the record in
        // place before any new owner could read it (a member the group moved on from meanwhile
        // must not start or report runs its successor also runs).
        if failed(
            main.commit(&positions, CommitMode::Sync),
            "the consumer group refused the offset commit (it may have moved these partitions to another member): the progress record is not in force",
        ) {
            return false;
        }
        if !point {
            return true;
        }
        for it in items.iter_mut() {
            it.pointer = true;
        }
        let stopped = self.stop_hook.as_ref().is_some_and(StopHook::maybe_stop);
        let pointed = self.pointers.commit(&pointers, CommitMode::Sync);
        if stopped {
            tracing::warn!(
                ok = pointed.is_ok(),
                "test hook: pointer commit after the stop"
            );
        }
        if failed(pointed, "committing progress pointers failed") || failed(
            main.commit(&positions, CommitMode::Sync),
            "the consumer group refused the offset commit after the progress record was written: the record is not in force",
        ) {
            return false;
        }
        true
    }

    /// Commit every changed record (blocking). Returns how many partitions had changes, and
    /// whether they are now committed.
    pub(crate) fn commit_round<C: ConsumerContext, K: Consumer<C>>(
        &self,
        main: &K,
    ) -> (usize, bool) {
        let _serial = lock(&self.serial);
        let mut items = lock(&self.offsets).to_commit(&self.worker_id, &self.group, false);
        let n = items.len();
        let began = Instant::now();
        let ok = n == 0 || self.commit_items(main, &mut items);
        if n > 0 {
            self.metrics.commit_round(began.elapsed(), ok);
        }
        if ok {
            lock(&self.offsets).mark_committed(&items);
        } else {
            lock(&self.offsets).forget_committed();
        }
        self.signal.bump();
        (n, ok)
    }

    /// Commit the last records of partitions being revoked and drop them from the tracker
    /// (blocking; their runs have been waited for). Returns how many records there were, and
    /// whether they are committed.
    pub(crate) fn commit_revoked<C: ConsumerContext, K: Consumer<C>>(
        &self,
        main: &K,
        tps: &[TopicPartition],
    ) -> (usize, bool) {
        let _serial = lock(&self.serial);
        let mut items: Vec<CommitItem> = {
            let mut offsets = lock(&self.offsets);
            tps.iter()
                .filter_map(|tp| offsets.revoke(tp, &self.worker_id, &self.group))
                .collect()
        };
        let ok = self.commit_items(main, &mut items);
        self.signal.bump();
        (items.len(), ok)
    }

    /// The partitions were assigned to this worker: claim a term, load what their earlier owners
    /// committed and recorded, and start tracking them (blocking). Returns the term and how many
    /// offsets were inherited (finished, started or reporting above the committed offsets).
    pub(crate) fn assign<C: ConsumerContext, K: Consumer<C>>(
        &self,
        main: &K,
        tps: &[TopicPartition],
    ) -> (Option<i64>, usize) {
        // A failed read (a stall, a refused claim, a broker blip during the rebalance) is tried
        // again before the partitions are taken without their progress: taken so, every run
        // from the committed offset on runs again, finished ones included.
        let mut attempt = 1;
        let (term, loaded) = loop {
            let (term, loaded) = self.load(main, tps);
            let unknown = loaded
                .iter()
                .filter(|(_, _, l)| matches!(l, Loaded::Unknown))
                .count();
            if unknown == 0 || attempt >= LOAD_ATTEMPTS {
                if unknown > 0 {
                    tracing::error!(
                        partitions = unknown,
                        attempts = attempt,
                        "the progress of assigned partitions could not be read: their triggers from the committed offset on run again (finished ones included)"
                    );
                    self.metrics.progress_unknown.inc_by(unknown as u64);
                }
                break (term, loaded);
            }
            let pause = LOAD_RETRY_PAUSE * attempt;
            tracing::warn!(
                partitions = unknown,
                attempt,
                retry_in_ms = pause.as_millis() as u64,
                "reading the progress of assigned partitions failed; reading it again"
            );
            std::thread::sleep(pause);
            attempt += 1;
        };
        let mut offsets = lock(&self.offsets);
        let mut inherited = 0;
        for (tp, committed, loaded) in loaded {
            match &loaded {
                Loaded::Record(r) => {
                    inherited += r.finished.len() + r.started.len() + r.reporting.len();
                    offsets.assign(tp, committed, Some(r), term);
                }
                Loaded::Nothing => {
                    offsets.assign(tp, committed, None, term);
                }
                Loaded::Unknown => {
                    offsets.assign_unknown(tp, committed, term);
                }
            }
        }
        (term, inherited)
    }

    /// The partitions' committed offsets and progress records, and this owner's term for them
    /// (the offset of the claim it writes here; `None` if that failed) (blocking).
    fn load<C: ConsumerContext, K: Consumer<C>>(
        &self,
        main: &K,
        tps: &[TopicPartition],
    ) -> (Option<i64>, Vec<LoadedPartition>) {
        if tps.is_empty() {
            return (None, Vec::new());
        }
        let mut q = TopicPartitionList::new();
        for tp in tps {
            q.add_partition(&tp.topic, tp.partition);
        }
        let offset_of = |tpl: &KafkaResult<TopicPartitionList>, tp: &TopicPartition| match tpl {
            Ok(l) => match l
                .find_partition(&tp.topic, tp.partition)
                .map(|e| e.offset())
            {
                Some(Offset::Offset(o)) if o >= 0 => Some(o),
                _ => None,
            },
            Err(_) => None,
        };
        if test_hooks::fail_read() {
            tracing::warn!("test hook: this progress read fails");
            let loaded = tps
                .iter()
                .map(|tp| (tp.clone(), None, Loaded::Unknown))
                .collect();
            return (None, loaded);
        }
        let committed = main.committed_offsets(q.clone(), LOAD_TIMEOUT);
        let pointers = self.pointers.committed_offsets(q, LOAD_TIMEOUT);
        if let Err(error) = committed.as_ref().and(pointers.as_ref()) {
            tracing::error!(%error, "cannot read the committed progress of assigned partitions; their triggers run as new attempts");
        }
        // Claimed after the pointers were read, so every pointer is below the claim.
        let term = self.claim();
        let found = match (&pointers, term) {
            (Ok(_), Some(end)) => {
                let wanted: HashMap<String, (TopicPartition, Option<i64>)> = tps
                    .iter()
                    .map(|tp| (key(&self.group, tp), (tp.clone(), offset_of(&pointers, tp))))
                    .collect();
                self.read_back(&wanted, end)
            }
            (Ok(_), None) => {
                tracing::error!("cannot write a progress claim; the assigned partitions' triggers run as new attempts");
                None
            }
            (Err(_), _) => None,
        };
        let loaded = tps
            .iter()
            .map(|tp| {
                let pointer = offset_of(&pointers, tp);
                let loaded = match found.as_ref() {
                    None => Loaded::Unknown,
                    // No pointer: no commit round of the partition ever completed, so no record
                    // of it was ever in force.
                    Some(_) if pointer.is_none() => Loaded::Nothing,
                    Some(f) => match (f.get(tp), pointer) {
                        (Some(f), _) if f.pointed => Loaded::Record(f.record.clone()),
                        (_, at) => {
                            tracing::error!(topic = %tp.topic, partition = tp.partition, at, "the progress record at the partition's pointer was not found or does not match its partition; the partition's triggers run as new attempts");
                            Loaded::Unknown
                        }
                    },
                };
                (tp.clone(), offset_of(&committed, tp), loaded)
            })
            .collect();
        (term, loaded)
    }

    /// Reads `<prefix>.progress` from the lowest pointer of the `wanted` partitions (by record
    /// key: partition and its pointer) up to this worker's claim at `end`, and keeps each
    /// partition's record in force: the highest term, the latest of it ([`supersedes`]).
    ///
    /// Reading on from the pointer is what makes a late pointer harmless: a member that stalled
    /// between its group commit and its pointer commit may set the pointer back to its own
    /// record after a later owner wrote newer ones, but only ever to a record below theirs, and
    /// of a lower term. The broker's high watermark is not needed (some brokers report it
    /// wrong): the claim marks the end. `None` if the read did not get there.
    fn read_back(
        &self,
        wanted: &HashMap<String, (TopicPartition, Option<i64>)>,
        end: i64,
    ) -> Option<HashMap<TopicPartition, Found>> {
        let Some(from) = wanted.values().filter_map(|(_, p)| *p).min() else {
            // No pointer was ever committed for these partitions.
            return Some(HashMap::new());
        };
        let reader = lock(&self.reader);
        let mut tpl = TopicPartitionList::new();
        if let Err(error) = tpl
            .add_partition_offset(&self.topic, 0, Offset::Offset(from))
            .and_then(|()| reader.assign(&tpl))
        {
            tracing::error!(%error, "cannot read progress records");
            return None;
        }
        let found = self.read_records(&reader, wanted, from, end);
        // Unassigned, the reader fetches nothing more: left assigned, it would go on fetching the
        // progress topic in the background until its local queue filled.
        if let Err(error) = reader.unassign() {
            tracing::warn!(%error, "cannot stop reading progress records");
        }
        found
    }

    /// Read the progress records from `from` (assigned to `reader`) to the claim at `end`; see
    /// [`Self::read_back`].
    fn read_records(
        &self,
        reader: &BaseConsumer,
        wanted: &HashMap<String, (TopicPartition, Option<i64>)>,
        from: i64,
        end: i64,
    ) -> Option<HashMap<TopicPartition, Found>> {
        let mut found: HashMap<TopicPartition, Found> = HashMap::new();
        let started = Instant::now();
        let mut last = Instant::now();
        let mut read = 0u64;
        loop {
            if last.elapsed() >= LOAD_TIMEOUT {
                tracing::error!(from, end, read, "reading progress records back stalled; the assigned partitions' triggers run as new attempts");
                return None;
            }
            let m = match reader.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => m,
                Some(Err(error)) => {
                    tracing::debug!(%error, "reading progress records");
                    continue;
                }
                None => continue,
            };
            last = Instant::now();
            read += 1;
            let at = m.offset();
            if at >= end {
                break;
            }
            let Some((tp, pointer)) = m
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .and_then(|k| wanted.get(k))
            else {
                continue;
            };
            let Some(record) = m
                .payload()
                .and_then(|p| serde_json::from_slice::<ProgressRecord>(p).ok())
                .filter(|r| {
                    r.group == self.group && r.topic == tp.topic && r.partition == tp.partition
                })
            else {
                continue;
            };
            let pointed = *pointer == Some(at);
            match found.get_mut(tp) {
                Some(f) => {
                    f.pointed |= pointed;
                    if supersedes(record.term, at, f.record.term, f.offset) {
                        f.offset = at;
                        f.record = record;
                    }
                }
                None => {
                    found.insert(
                        tp.clone(),
                        Found {
                            offset: at,
                            record,
                            pointed,
                        },
                    );
                }
            }
        }
        let took = started.elapsed();
        if took >= Duration::from_secs(1) {
            tracing::info!(
                from,
                end,
                read,
                took_ms = took.as_millis() as u64,
                "progress records read back"
            );
        }
        Some(found)
    }
}

/// A partition's record in force among those read back.
struct Found {
    offset: i64,
    record: ProgressRecord,
    /// The record at the partition's pointer was among those read.
    pointed: bool,
}

/// An assigned partition, its committed offset and what was found of its progress record.
type LoadedPartition = (TopicPartition, Option<i64>, Loaded);

/// What was found of a partition's progress record when it was assigned.
enum Loaded {
    Record(ProgressRecord),
    /// None was ever committed: a partition this group never worked on.
    Nothing,
    /// It could not be read.
    Unknown,
}

/// Commits the progress records: whenever a run waits for one, at least every `interval`, and
/// once at the end.
///
/// Generic over the trigger consumer's context so that the store does not depend on the
/// rebalance callbacks (which depend on it).
pub(crate) struct Committer<C: ConsumerContext + 'static> {
    consumer: Arc<StreamConsumer<C>>,
    progress: Arc<Progress>,
    interval: Duration,
}

impl<C: ConsumerContext + 'static> Clone for Committer<C> {
    fn clone(&self) -> Self {
        Self {
            consumer: Arc::clone(&self.consumer),
            progress: Arc::clone(&self.progress),
            interval: self.interval,
        }
    }
}

impl<C: ConsumerContext + 'static> Committer<C> {
    /// Commits through `consumer`'s group, on demand and every `interval`.
    pub(crate) fn new(
        consumer: Arc<StreamConsumer<C>>,
        progress: Arc<Progress>,
        interval: Duration,
    ) -> Self {
        Self {
            consumer,
            progress,
            interval,
        }
    }

    /// Commit every record that changed (blocking). Returns how many partitions, and whether
    /// they are committed.
    pub(crate) fn run_once(&self) -> (usize, bool) {
        self.progress.commit_round(&*self.consumer)
    }

    /// Commit on demand and every `interval` until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = self.progress.signal.wake.notified() => {}
                _ = ticker.tick() => {}
            }
            let me = self.clone();
            if let Err(error) = tokio::task::spawn_blocking(move || me.run_once()).await {
                tracing::warn!(%error, "commit task failed");
            }
        }
    }

    /// The last commit before leaving (blocking: call it from `spawn_blocking`).
    pub(crate) fn commit_final(&self) {
        match self.run_once() {
            (n, true) => tracing::info!(partitions = n, "final offsets committed"),
            (n, false) => tracing::warn!(
                partitions = n,
                "the final commit failed: the partitions' next owners run this worker's unrecorded progress again"
            ),
        }
    }
}
