//! The consume loop over the trigger topics, the consumer's rebalance callbacks, and the
//! committer that turns the offset tracker's positions into Kafka commits.
//!
//! Each message is classified at once: a fence is skipped, a record that cannot be used goes to
//! the DLQ, a trigger goes to its job's lane ([`RunEnv::dispatch`]). The consumer pauses its
//! partitions while too many triggers are in flight and resumes at half.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cadenza_schemas::{
    CancelMessage, JobType, ProgressClaim, ProgressRecord, TriggerMessage, TriggerRecord, WorkerId,
    HEADER_RECORD, HEADER_TRACEPARENT,
};
use chrono::Utc;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::{consumer_client_config, progress_client_config, WorkerConfig};
use crate::dlq::{dlq_message, DlqProducer, Origin};
use crate::handler::Handler;
use crate::heartbeat::Assignment;
use crate::metrics::WorkerMetrics;
use crate::offsets::{supersedes, CommitItem, OffsetTracker, Prior, TopicPartition};
use crate::producer::{produce, Producer, Record};
use crate::run::{Delivery, RunEnv};
use crate::{lock, Throttle};

/// The trigger consumer.
pub(crate) type TriggerConsumer = StreamConsumer<ConsumerCtx>;

/// A trigger record larger than this goes to the DLQ unread.
pub(crate) const MAX_TRIGGER_BYTES: usize = 1024 * 1024;

/// How long loading a partition's progress record may take before the partition is started
/// from its committed offset alone.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub(crate) fn bump(&self) {
        self.committed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The progress records of the partitions (see `offsets`): written to `<prefix>.progress`, their
/// offsets (pointers) committed in the auxiliary group `<group>~progress` under the trigger
/// partition, read back when a partition is assigned.
///
/// The protocol, whose steps are each fenced by an offset commit of the trigger group:
/// * on assignment, a claim is written to `<prefix>.progress`; its offset is the owner's term;
///   the records are read back from the lowest pointer up to the claim ([`Self::read_back`]);
/// * the first round of a term has the group accept an offset commit before it writes a record;
/// * every round writes the records, then commits the group's offsets, the pointers, and the
///   group's offsets again. Runs act on a record only when both group commits were accepted.
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
        // accepted commits of the group. The first makes every pointer a lower bound of the
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
    /// partition's record in force: the highest term, the latest of it (`offsets::supersedes`).
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
        let mut found: HashMap<TopicPartition, Found> = HashMap::new();
        let Some(from) = wanted.values().filter_map(|(_, p)| *p).min() else {
            // No pointer was ever committed for these partitions.
            return Some(found);
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

/// Run `f`, which blocks, on a runtime worker thread without starving the runtime's other tasks
/// (runs must be able to finish while a rebalance callback waits for them).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Consumer callbacks: keep the offset tracker and the heartbeat's assignment in step with
/// rebalances, drain and commit before partitions go, load their progress when they come, and
/// log errors through `tracing`.
pub(crate) struct ConsumerCtx {
    offsets: Arc<Mutex<OffsetTracker>>,
    progress: Arc<Progress>,
    assignment: Assignment,
    revoke_timeout: Duration,
    errors: Throttle,
    metrics: Arc<WorkerMetrics>,
}

impl ConsumerCtx {
    pub(crate) fn new(
        offsets: Arc<Mutex<OffsetTracker>>,
        progress: Arc<Progress>,
        assignment: Assignment,
        revoke_timeout: Duration,
        metrics: Arc<WorkerMetrics>,
    ) -> Self {
        Self {
            offsets,
            progress,
            assignment,
            revoke_timeout,
            errors: Throttle::new(Duration::from_secs(60)),
            metrics,
        }
    }
}

fn describe(tpl: &TopicPartitionList) -> String {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for e in tpl.elements() {
        by_topic
            .entry(e.topic().to_owned())
            .or_default()
            .push(e.partition());
    }
    if by_topic.is_empty() {
        return "none".to_owned();
    }
    by_topic
        .iter()
        .map(|(t, ps)| format!("{t}{ps:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_unknown_topic(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

fn partitions(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl ClientContext for ConsumerCtx {
    fn error(&self, error: KafkaError, reason: &str) {
        if !self.errors.allow(&crate::error_key(&error, reason)) {
            return;
        }
        if is_unknown_topic(&error) {
            // Not fatal: the subscription picks the topic up once the admin creates it.
            tracing::warn!(reason, "a trigger topic does not exist yet; waiting for it");
        } else {
            tracing::warn!(%error, reason, "kafka consumer error");
        }
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        self.metrics.read_stats(&statistics);
    }
}

impl ConsumerCtx {
    /// The rebalance rule: runs of revoked partitions that have not started are handed back at
    /// once; running ones get up to the revoke timeout to finish and report; what still runs
    /// then is abandoned unreported (its `started` mark is durable, so the partition's next
    /// owner runs it again with `attempt + 1`). Then the partitions' records are committed.
    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = partitions(tpl);
        let unfinished: usize = {
            let mut offsets = lock(&self.offsets);
            offsets.start_revoking(&tps);
            tps.iter().map(|tp| offsets.unfinished(tp)).sum()
        };
        let started = Instant::now();
        let left = blocking(|| loop {
            let active = lock(&self.offsets).active(&tps);
            if active == 0 || started.elapsed() >= self.revoke_timeout {
                return active;
            }
            std::thread::sleep(Duration::from_millis(10));
        });
        if left > 0 {
            tracing::warn!(
                runs = left,
                revoke_timeout_ms = self.revoke_timeout.as_millis() as u64,
                "runs of revoked partitions still running: abandoning them (their next owner runs them again)"
            );
        }
        let committed = blocking(|| {
            let _serial = lock(&self.progress.serial);
            let mut items: Vec<CommitItem> = {
                let mut offsets = lock(&self.offsets);
                tps.iter()
                    .filter_map(|tp| {
                        offsets.revoke(tp, &self.progress.worker_id, &self.progress.group)
                    })
                    .collect()
            };
            let ok = self.progress.commit_items(consumer, &mut items);
            self.progress.signal.bump();
            (items.len(), ok)
        });
        tracing::info!(
            partitions = %describe(tpl),
            unfinished,
            drained_ms = started.elapsed().as_millis() as u64,
            committed = committed.0,
            "partitions revoked"
        );
        if !committed.1 {
            tracing::warn!(
                "commit before revocation failed; the next owner may run finished triggers again"
            );
        }
    }
}

impl ConsumerContext for ConsumerCtx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.metrics.rebalance("revoke");
                self.revoke(consumer, tpl);
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(error) => {
                self.metrics.rebalance("error");
                tracing::warn!(%error, "rebalance error");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.metrics.rebalance("assign");
            let tps = partitions(tpl);
            let (term, loaded) = blocking(|| self.progress.load(consumer, &tps));
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
            tracing::info!(partitions = %describe(tpl), inherited, term, "partitions assigned");
        }
        // Whatever the protocol (eager or cooperative), the heartbeat reports the full current
        // assignment.
        match consumer.assignment() {
            Ok(tpl) => {
                let mut map: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for e in tpl.elements() {
                    map.entry(e.topic().to_owned())
                        .or_default()
                        .push(e.partition());
                }
                for ps in map.values_mut() {
                    ps.sort_unstable();
                }
                self.assignment.set(map);
            }
            Err(error) => tracing::warn!(%error, "cannot read the consumer's assignment"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => tracing::trace!(partitions = %describe(offsets), "offsets committed"),
            // Nothing to commit is not an error worth reporting.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => tracing::debug!(%error, "offset commit failed"),
        }
    }
}

/// Create the trigger consumer (not yet subscribed).
pub(crate) fn create(config: &WorkerConfig, ctx: ConsumerCtx) -> KafkaResult<TriggerConsumer> {
    consumer_client_config(config).create_with_context(ctx)
}

/// Commits the progress records: whenever a run waits for one, at least every `interval`, and
/// once at the end.
#[derive(Clone)]
pub(crate) struct Committer {
    consumer: Arc<TriggerConsumer>,
    progress: Arc<Progress>,
    interval: Duration,
}

impl Committer {
    pub(crate) fn new(
        consumer: Arc<TriggerConsumer>,
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

/// Whether a trigger may have run on an earlier owner of its partition.
#[derive(Debug, Clone, Copy)]
enum Redelivered {
    No,
    /// It started there with this attempt and did not finish.
    Started(u32),
    /// Unknown: the partition's progress record could not be read.
    Unknown,
}

impl Redelivered {
    /// The attempt to run it as, given the trigger's own.
    fn attempt(self, published: u32) -> u32 {
        match self {
            Self::No => published,
            Self::Started(a) => a.saturating_add(1),
            Self::Unknown => published.saturating_add(1),
        }
    }
}

/// A trigger topic this worker serves.
pub(crate) struct Route {
    pub job_type: JobType,
    pub handler: Arc<dyn Handler>,
}

/// The consume loop and the classification of each message.
pub(crate) struct Intake {
    pub consumer: Arc<TriggerConsumer>,
    pub env: Arc<RunEnv>,
    /// Trigger topic name → job type and handler.
    pub routes: HashMap<String, Route>,
    pub dlq: DlqProducer,
    pub reporter: String,
    pub errors: Throttle,
}

fn header<'a>(m: &'a OwnedMessage, name: &str) -> Option<&'a [u8]> {
    m.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// What to do with a message from a trigger topic.
#[derive(Debug, PartialEq)]
pub(crate) enum Classified {
    /// A fence record: nothing to run.
    Skip,
    /// Unusable, for this reason.
    Dlq(String),
    /// A well-formed trigger of a job type this worker has no handler for: recorded `failed`.
    Unserved(Box<TriggerMessage>),
    /// A trigger to run.
    Run(Box<TriggerMessage>),
    /// An operator cancels a run published earlier on this partition.
    Cancel(CancelMessage),
}

/// Classify a message of `topic`, whose handler serves `expected` (None: no handler).
pub(crate) fn classify(
    expected: Option<&JobType>,
    record_header: Option<&[u8]>,
    payload: Option<&[u8]>,
) -> Classified {
    if record_header == Some(b"fence".as_slice()) {
        return Classified::Skip;
    }
    let Some(payload) = payload else {
        return Classified::Dlq("empty payload (expected a trigger record)".to_owned());
    };
    if payload.len() > MAX_TRIGGER_BYTES {
        return Classified::Dlq(format!(
            "oversized trigger record: {} bytes (at most {MAX_TRIGGER_BYTES})",
            payload.len()
        ));
    }
    match serde_json::from_slice::<TriggerRecord>(payload) {
        Err(e) => Classified::Dlq(format!("not a trigger record: {e}")),
        Ok(TriggerRecord::Fence(_)) => Classified::Skip,
        Ok(TriggerRecord::Cancel(c)) => Classified::Cancel(c),
        Ok(TriggerRecord::Trigger(t)) if Some(&t.job_type) != expected => {
            Classified::Unserved(Box::new(t))
        }
        Ok(TriggerRecord::Trigger(t)) => Classified::Run(Box::new(t)),
    }
}

impl Intake {
    /// Consume until `shutdown`. Returns as soon as it is cancelled; the caller drains.
    pub(crate) async fn run(&self, shutdown: &CancellationToken) {
        let mut paused = false;
        loop {
            let received = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.env.in_flight.below_half(), if paused => {
                    self.set_paused(false);
                    paused = false;
                    continue;
                }
                m = self.consumer.recv() => m.map(|m| m.detach()),
            };
            match received {
                Ok(m) => self.handle(m),
                Err(e) => self.on_error(e),
            }
            if self.env.in_flight.is_full() {
                // Also re-pauses partitions assigned since the last pause.
                self.set_paused(true);
                paused = true;
            }
        }
    }

    /// While the worker drains: keep serving the consumer's callbacks (a rebalance must not
    /// wait for this member), take no message, until `stop`.
    pub(crate) async fn idle(&self, stop: &CancellationToken) {
        self.set_paused(true);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                m = self.consumer.recv() => {
                    if m.is_ok() {
                        // A partition assigned meanwhile: pause it too; the message stays
                        // uncommitted for its next owner.
                        self.set_paused(true);
                    }
                }
            }
        }
    }

    fn set_paused(&self, pause: bool) {
        let result = self.consumer.assignment().and_then(|tpl| {
            if pause {
                self.consumer.pause(&tpl)
            } else {
                self.consumer.resume(&tpl)
            }
        });
        match result {
            Ok(()) if pause => {
                tracing::debug!(in_flight = self.env.in_flight.count(), "consumption paused")
            }
            Ok(()) => tracing::debug!("consumption resumed"),
            Err(error) => tracing::warn!(%error, pause, "cannot pause/resume consumption"),
        }
    }

    fn on_error(&self, error: KafkaError) {
        let quiet = is_unknown_topic(&error)
            || matches!(
                error.rdkafka_error_code(),
                Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
            );
        if quiet {
            // The context's error callback reports these too, with more detail.
            tracing::debug!(%error, "consumer error");
        } else if self.errors.allow(&error.to_string()) {
            tracing::warn!(%error, "consumer error; continuing");
        }
    }

    fn served(&self) -> String {
        let mut types: Vec<&str> = self.routes.values().map(|r| r.job_type.as_str()).collect();
        types.sort_unstable();
        types.join(", ")
    }

    /// Classify one message. Never panics on input.
    fn handle(&self, m: OwnedMessage) {
        let tp = TopicPartition::new(m.topic(), m.partition());
        let offset = m.offset();
        let Some(begun) = lock(&self.env.offsets).begin(&tp, offset) else {
            tracing::debug!(topic = %tp.topic, partition = tp.partition, offset, "message from a partition not assigned here; left for its owner");
            return;
        };
        let traceparent =
            header(&m, HEADER_TRACEPARENT).map(|v| String::from_utf8_lossy(v).into_owned());
        let delivery = Delivery::new(&self.env.offsets, tp, offset, &begun, traceparent);
        let redelivered = match begun.prior {
            Prior::Fresh => Redelivered::No,
            Prior::Started { attempt } => Redelivered::Started(attempt),
            Prior::Unknown => Redelivered::Unknown,
            Prior::Again => {
                if self.errors.allow("delivered again") {
                    tracing::warn!(topic = %delivery.tp.topic, partition = delivery.tp.partition, offset, "delivered again within the same assignment; ignored (the first delivery is handled); logged once a minute");
                }
                return;
            }
            Prior::Finished => {
                tracing::debug!(topic = %delivery.tp.topic, partition = delivery.tp.partition, offset, "finished by an earlier owner of the partition; skipped");
                self.env.finish_offset(&delivery);
                return;
            }
            Prior::Reporting(report) => {
                tracing::info!(trigger_id = %report.trigger_id, offset, "an earlier owner was reporting this run's result; publishing it again instead of running it");
                self.env.republish(delivery, *report);
                return;
            }
        };
        let route = self.routes.get(&delivery.tp.topic);
        match classify(
            route.map(|r| &r.job_type),
            header(&m, HEADER_RECORD),
            m.payload(),
        ) {
            Classified::Skip => self.env.finish_offset(&delivery),
            Classified::Cancel(c) => {
                // Nothing to run: the record is done once read. The run it names is earlier on
                // this partition, so if this worker holds it, it is in a lane now.
                let held = self.env.lanes.cancel(c.job_id, c.trigger_id, &c.by);
                tracing::info!(trigger_id = %c.trigger_id, by = %c.by, held, "cancel requested");
                self.env.finish_offset(&delivery);
            }
            Classified::Dlq(reason) => self.to_dlq(delivery, &m, reason),
            Classified::Unserved(trigger) => {
                let attempt = redelivered.attempt(trigger.attempt);
                let reason = format!(
                    "no handler for job type {:?} on worker {} (it serves: {}; the trigger came on topic {}): check the deployment's --serve",
                    trigger.job_type.as_str(),
                    self.reporter,
                    self.served(),
                    delivery.tp.topic
                );
                tracing::warn!(trigger_id = %trigger.trigger_id, %reason, "trigger recorded failed");
                self.env.reject(delivery, *trigger, attempt, reason);
            }
            Classified::Run(trigger) => match route {
                Some(route) => {
                    let attempt = redelivered.attempt(trigger.attempt);
                    match redelivered {
                        Redelivered::No => {}
                        Redelivered::Started(_) => {
                            tracing::info!(trigger_id = %trigger.trigger_id, offset, attempt, "redelivered: the run started on an earlier owner and did not finish; running it again");
                        }
                        Redelivered::Unknown => {
                            tracing::warn!(trigger_id = %trigger.trigger_id, offset, attempt, "the partition's progress could not be read: running the trigger as a new attempt (an earlier owner may have run it)");
                        }
                    }
                    self.env
                        .dispatch(delivery, *trigger, attempt, Arc::clone(&route.handler))
                }
                None => self.to_dlq(delivery, &m, "no handler".to_owned()),
            },
        }
    }

    /// Send the message to the DLQ in the background; its offset finishes once delivered.
    fn to_dlq(&self, delivery: Delivery, m: &OwnedMessage, reason: String) {
        let origin = Origin {
            topic: delivery.tp.topic.clone(),
            partition: delivery.tp.partition,
            offset: delivery.offset,
        };
        tracing::warn!(topic = %origin.topic, partition = origin.partition, offset = origin.offset, %reason, "unusable message sent to the DLQ");
        self.env.metrics.dlq_records.inc();
        let msg = dlq_message(&origin, reason, m.payload(), &self.reporter);
        let env = Arc::clone(&self.env);
        let dlq = self.dlq.clone();
        let guard = env.in_flight.enter();
        self.env.tasks.spawn(async move {
            if env
                .retry_until(&delivery.tokens.dropped, "producing to the DLQ", || {
                    dlq.send(&msg)
                })
                .await
            {
                env.finish_offset(&delivery);
            }
            drop(guard);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_partition_lists() {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("b", 1);
        tpl.add_partition("a", 2);
        tpl.add_partition("a", 0);
        assert_eq!(describe(&tpl), "a[2, 0] b[1]");
        assert_eq!(describe(&TopicPartitionList::new()), "none");
    }

    #[test]
    fn classifies_fences_garbage_strangers_and_triggers() {
        let jt = JobType::parse("t.x").unwrap();
        let trigger = crate::testing::trigger(0);
        let body = serde_json::to_vec(&TriggerRecord::Trigger(trigger.clone())).unwrap();
        assert_eq!(
            classify(Some(&jt), Some(b"trigger"), Some(&body)),
            Classified::Run(Box::new(trigger.clone()))
        );
        // The fence header is enough, whatever the body.
        assert_eq!(
            classify(Some(&jt), Some(b"fence"), Some(b"junk")),
            Classified::Skip
        );
        let fence = br#"{"type":"fence","admin_id":"a","shard":1,"epoch":2,"nonce":"n","written_at":"2026-01-01T00:00:00Z"}"#;
        assert_eq!(classify(Some(&jt), None, Some(fence)), Classified::Skip);
        let Classified::Dlq(reason) = classify(Some(&jt), None, Some(b"{not json")) else {
            panic!("garbage must go to the DLQ");
        };
        assert!(reason.starts_with("not a trigger record: "), "{reason}");
        assert!(matches!(
            classify(Some(&jt), None, None),
            Classified::Dlq(_)
        ));
        let other = JobType::parse("t.y").unwrap();
        // Well-formed but not served here: recorded failed, not dead-lettered.
        assert_eq!(
            classify(Some(&other), None, Some(&body)),
            Classified::Unserved(Box::new(trigger.clone()))
        );
        assert_eq!(
            classify(None, None, Some(&body)),
            Classified::Unserved(Box::new(trigger.clone()))
        );
        let huge = vec![b' '; MAX_TRIGGER_BYTES + 1];
        let Classified::Dlq(reason) = classify(Some(&jt), None, Some(&huge)) else {
            panic!("an oversized record must go to the DLQ");
        };
        assert!(reason.starts_with("oversized trigger record"), "{reason}");
    }
}
