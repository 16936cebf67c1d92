//! Transactional publication (`CADENZA_PUBLICATION=transactions`).
//!
//! The admin publishes triggers through one transactional producer whose `transactional.id`
//! belongs to it (`<topic prefix>.admin.<admin id>`, written on every lease it holds). Sends go
//! into the open transaction; a committer closes it every `CADENZA_PUBLISH_COMMIT_MS` once
//! something was sent, and opens the next. A trigger is published when its transaction commits:
//! a `read_committed` reader (workers, read-backs, replay) never sees one of an aborted
//! transaction.
//!
//! An admin that takes over a shard fences the producers named on its lease before it reads
//! back what they left ([`TxnProducer::fence`]: `init_transactions` under their id, which aborts
//! their open transaction and makes the broker refuse anything they send or commit after). So a
//! holder frozen between its lease check and its send (SIGSTOP, a suspended VM) cannot land a
//! trigger after the new holder's read-back, whatever the clocks say: its send or its commit is
//! refused, and it learns it was fenced, stops trusting its leases and renews them before it
//! sends again.
//!
//! Each send records the generation of the transaction it went into; [`TxnProducer::outcome`]
//! says whether that transaction committed. A shard handed back waits for the transaction its
//! last sends went into ([`TxnProducer::barrier`]) so the next holder need not fence this admin.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::ToBytes;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tokio::sync::{watch, Notify, RwLock};
use tokio_util::sync::CancellationToken;

use super::lease::Leases;
use crate::ids::{LeaseEpoch, ShardId};
use crate::kafka::{new_transactional_producer, KafkaSettings};

/// Outcomes of this many recent transactions are kept; an older one asked for counts as aborted
/// (its runs are read back).
const OUTCOMES_KEPT: usize = 4_096;
/// How often a commit looks whether the transaction's sends are all acknowledged.
const FLUSH_STEP: Duration = Duration::from_micros(500);
/// Pause between two attempts to make a producer usable again.
const REINIT_PAUSE: Duration = Duration::from_secs(1);

/// What a send did.
pub enum TxnSend {
    /// Handed to the producer in transaction `generation`.
    Sent {
        delivery: DeliveryFuture,
        generation: u64,
    },
    /// `may_send` said no (the shard is not held at the run's epoch any more).
    NotHeld,
    /// The producer refused it, or there is no usable producer right now.
    Failed(String),
}

/// The admin's two transactional producers and their committer. Transaction `g` is open on
/// producer `g % 2`: while one commits, sends go into the other, so a commit holds no send up.
pub struct TxnProducer {
    /// The admin's id; its producers are `<id>.0` and `<id>.1`.
    id: String,
    settings: KafkaSettings,
    timeout: Duration,
    commit_every: Duration,
    /// Each `None` while it is being made usable again. A send holds its producer's read lock
    /// from its check to its handover; the committer takes the write lock to close a
    /// generation to sends.
    producers: [RwLock<Option<FutureProducer>>; 2],
    /// The generation of the open transaction (on `producers[generation % 2]`).
    generation: AtomicU64,
    /// Something was sent in the open transaction.
    pending: AtomicBool,
    wake: Notify,
    /// Every generation up to this one is decided.
    decided: watch::Sender<u64>,
    outcomes: Mutex<VecDeque<(u64, bool)>>,
    /// Told when the broker refuses this admin's producer as fenced.
    leases: Arc<Leases>,
}

/// How a commit ended.
enum Ended {
    Committed,
    Aborted(String),
    /// The producer cannot be used any more (fenced, fatal, or a commit and abort that both
    /// failed): it is replaced under the same id, which aborts what it left open.
    Broken {
        error: String,
        fenced: bool,
    },
}

impl Ended {
    fn broken(e: &KafkaError) -> Self {
        Ended::Broken {
            error: e.to_string(),
            fenced: is_fenced(e),
        }
    }
}

impl TxnProducer {
    /// The id of an admin's producers, written on its leases (the producers are `<id>.0` and
    /// `<id>.1`).
    pub fn id_for(topic_prefix: &str, admin_id: &str) -> String {
        format!("{topic_prefix}.admin.{admin_id}")
    }

    /// The `transactional.id` of producer `k` of the admin whose id is `id`.
    fn producer_id(id: &str, k: u64) -> String {
        format!("{id}.{k}")
    }

    /// Creates the producers and registers their ids with the broker (fencing an earlier
    /// process of the same admin id). Fails when the broker has no transactions.
    pub async fn start(
        settings: KafkaSettings,
        id: String,
        timeout: Duration,
        commit_every: Duration,
        leases: Arc<Leases>,
    ) -> Result<Self, KafkaError> {
        // A broker just started may still be loading its transaction coordinators: a retriable
        // refusal is asked again for up to a minute.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let first =
            init_patiently(&settings, &Self::producer_id(&id, 0), timeout, deadline).await?;
        let second =
            init_patiently(&settings, &Self::producer_id(&id, 1), timeout, deadline).await?;
        let producers = [RwLock::new(Some(first)), RwLock::new(Some(second))];
        Ok(Self {
            id,
            settings,
            timeout,
            commit_every,
            producers,
            generation: AtomicU64::new(1),
            pending: AtomicBool::new(false),
            wake: Notify::new(),
            decided: watch::Sender::new(0),
            outcomes: Mutex::new(VecDeque::new()),
            leases,
        })
    }

    /// This admin's producer id, as written on its leases.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn slot(&self, generation: u64) -> &RwLock<Option<FutureProducer>> {
        &self.producers[(generation % 2) as usize]
    }

    /// Sends `record` in the open transaction if `may_send` (asked right before, while that
    /// transaction cannot be closed) says so.
    pub async fn send<K, P>(
        &self,
        record: FutureRecord<'_, K, P>,
        may_send: impl FnOnce() -> bool,
    ) -> TxnSend
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        // The generation can move on while this waits for its producer's lock: then the other
        // producer holds the open transaction.
        let (generation, slot) = loop {
            let generation = self.generation.load(Ordering::SeqCst);
            let slot = self.slot(generation).read().await;
            if self.generation.load(Ordering::SeqCst) == generation {
                break (generation, slot);
            }
        };
        let Some(producer) = slot.as_ref() else {
            return TxnSend::Failed("the transactional producer is being replaced".into());
        };
        if !may_send() {
            return TxnSend::NotHeld;
        }
        match producer.send_result(record) {
            Ok(delivery) => {
                if !self.pending.swap(true, Ordering::SeqCst) {
                    self.wake.notify_one();
                }
                TxnSend::Sent {
                    delivery,
                    generation,
                }
            }
            Err((e, _)) => TxnSend::Failed(e.to_string()),
        }
    }

    /// Whether transaction `generation` committed (waits until it is decided).
    pub async fn outcome(&self, generation: u64) -> bool {
        let mut rx = self.decided.subscribe();
        if rx.wait_for(|d| *d >= generation).await.is_err() {
            return false;
        }
        let outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
        outcomes
            .iter()
            .find(|(g, _)| *g == generation)
            .is_some_and(|(_, ok)| *ok)
    }

    /// Waits until everything sent before this call is decided (committed or aborted), asking
    /// for a commit now; gives up after `within`. Returns whether it got there.
    pub async fn barrier(&self, within: Duration) -> bool {
        // Under the write lock no send is between its check and its handover, so every send
        // made before this call has its generation and has marked it pending.
        let (generation, pending) = loop {
            let generation = self.generation.load(Ordering::SeqCst);
            let _no_send = self.slot(generation).write().await;
            if self.generation.load(Ordering::SeqCst) == generation {
                break (generation, self.pending.load(Ordering::SeqCst));
            }
        };
        // With nothing sent in the open transaction, the one before it is the last to wait for.
        let last = if pending {
            self.wake.notify_one();
            generation
        } else {
            generation - 1
        };
        let mut rx = self.decided.subscribe();
        tokio::time::timeout(within, rx.wait_for(|d| *d >= last))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Fences the producers with these transactional ids: once this returns, none of them can
    /// send or commit again, and what they had open is aborted.
    pub async fn fence(&self, ids: &[String]) -> Result<(), KafkaError> {
        let ids = ids
            .iter()
            .filter(|id| **id != self.id)
            .flat_map(|id| (0..2).map(move |k| Self::producer_id(id, k)));
        for id in ids {
            let producer =
                new_transactional_producer(&self.settings, &id, self.timeout.as_millis() as u64)?;
            let timeout = self.timeout;
            // Registering the id again bumps its epoch: the broker aborts what the old
            // producer left open and refuses it from then on. This one is dropped right after.
            // A retriable refusal (coordinator moving or loading) is asked again, a few times.
            tokio::task::spawn_blocking(move || {
                let mut tries = 0;
                loop {
                    match producer.init_transactions(timeout) {
                        Err(e) if transient(&e) && tries < 5 => {
                            tries += 1;
                            std::thread::sleep(REINIT_PAUSE);
                        }
                        other => return other,
                    }
                }
            })
            .await
            .map_err(|_| KafkaError::Canceled)??;
            tracing::info!(transactional_id = %id, "fenced the producer of an earlier holder");
        }
        Ok(())
    }

    /// Commits the open transaction every `CADENZA_PUBLISH_COMMIT_MS` once something was sent,
    /// until `stop`; then commits what is left.
    pub async fn run(&self, stop: CancellationToken) {
        loop {
            if !self.pending.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = self.wake.notified() => {}
                }
            }
            if self.pending.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(self.commit_every) => {}
                }
            }
            self.commit(&stop).await;
            if stop.is_cancelled() {
                break;
            }
        }
        self.commit(&stop).await;
    }

    /// Closes the open transaction to sends (the next one opens on the other producer), commits
    /// it, and makes its producer ready for the transaction after next.
    async fn commit(&self, stop: &CancellationToken) {
        let (generation, producer) = {
            let generation = self.generation.load(Ordering::SeqCst);
            let slot = self.slot(generation).write().await;
            if !self.pending.swap(false, Ordering::SeqCst) {
                return;
            }
            // Sends from here on go into the next transaction, on the other producer (whose
            // previous transaction this loop ended before).
            self.generation.store(generation + 1, Ordering::SeqCst);
            (generation, slot.clone())
        };
        let ended = match producer {
            None => Ended::Aborted("no usable producer".into()),
            Some(producer) => {
                let timeout = self.timeout;
                let started = std::time::Instant::now();
                let ended = tokio::task::spawn_blocking(move || end(&producer, timeout))
                    .await
                    .unwrap_or_else(|e| Ended::Broken {
                        error: format!("the commit task failed: {e}"),
                        fenced: false,
                    });
                crate::metrics::metrics()
                    .publish_commit
                    .observe(started.elapsed().as_secs_f64());
                tracing::debug!(
                    generation,
                    ms = started.elapsed().as_millis() as u64,
                    "transaction ended"
                );
                ended
            }
        };
        let committed = matches!(ended, Ended::Committed);
        let outcome = match ended {
            Ended::Committed => "committed",
            Ended::Aborted(_) => "aborted",
            Ended::Broken { .. } => "failed",
        };
        crate::metrics::metrics()
            .publish_transactions
            .get_or_create(&crate::metrics::OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
        let mut broken = false;
        match ended {
            Ended::Committed => {}
            Ended::Aborted(e) => {
                tracing::warn!(generation, error = %e, "a publication transaction was aborted; its triggers are read back and sent again")
            }
            Ended::Broken { error: e, fenced } => {
                if fenced {
                    // Another admin took a shard of this one over: no lease is acted on until
                    // a renewal confirms it, and the producer made ready again cannot send
                    // for a shard lost meanwhile.
                    self.leases.distrust();
                    tracing::warn!(error = %e, "this admin's producer was fenced: another admin took over a shard of it; its leases are renewed before it publishes again");
                } else {
                    tracing::warn!(error = %e, "the transactional producer failed; replacing it");
                }
                broken = true;
            }
        }
        {
            let mut outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
            outcomes.push_back((generation, committed));
            while outcomes.len() > OUTCOMES_KEPT {
                outcomes.pop_front();
            }
        }
        self.decided.send_replace(generation);
        if broken || self.slot(generation).read().await.is_none() {
            *self.slot(generation).write().await = None;
            self.reinit(generation, stop).await;
        }
    }

    /// Makes the producer of `generation` usable again under its id (which aborts what the old
    /// one left open), retrying until it works or `stop`. Sends meanwhile go into the other
    /// producer's transaction; the next commit waits for this.
    async fn reinit(&self, generation: u64, stop: &CancellationToken) {
        let tid = Self::producer_id(&self.id, generation % 2);
        loop {
            match init(&self.settings, &tid, self.timeout).await {
                Ok(p) => {
                    *self.slot(generation).write().await = Some(p);
                    tracing::info!(transactional_id = %tid, "transactional producer ready again");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not make the transactional producer ready; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(REINIT_PAUSE) => {}
                    }
                }
            }
        }
    }
}

/// [`init`], asked again while the broker answers with a transient refusal, until `deadline`.
async fn init_patiently(
    settings: &KafkaSettings,
    id: &str,
    timeout: Duration,
    deadline: std::time::Instant,
) -> Result<FutureProducer, KafkaError> {
    loop {
        match init(settings, id, timeout).await {
            Ok(p) => return Ok(p),
            Err(e) if transient(&e) && std::time::Instant::now() < deadline => {
                tracing::info!(error = %e, "the broker is not ready for transactions yet; retrying");
                tokio::time::sleep(REINIT_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A producer under `id`, registered with the broker and with a transaction open.
async fn init(
    settings: &KafkaSettings,
    id: &str,
    timeout: Duration,
) -> Result<FutureProducer, KafkaError> {
    let producer = new_transactional_producer(settings, id, timeout.as_millis() as u64)?;
    tokio::task::spawn_blocking(move || {
        producer.init_transactions(timeout)?;
        producer.begin_transaction()?;
        Ok(producer)
    })
    .await
    .map_err(|_| KafkaError::Canceled)?
}

/// Commits the open transaction (aborting it when the commit fails), then opens the next.
fn end(producer: &FutureProducer, timeout: Duration) -> Ended {
    // The commit flushes first, and rust-rdkafka's flush waits for an event in steps of up to
    // 100 ms that the producer's own polling thread may already have taken: waiting here for the
    // sends to be acknowledged lets the commit find nothing to flush (a commit then takes a
    // round trip or two, not 100 ms).
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(FLUSH_STEP);
    }
    let ended = match producer.commit_transaction(timeout) {
        Ok(()) => Ended::Committed,
        Err(e) if needs_abort(&e) || is_retriable(&e) => {
            match producer.abort_transaction(timeout) {
                Ok(()) => Ended::Aborted(e.to_string()),
                Err(e) => Ended::broken(&e),
            }
        }
        Err(e) => Ended::broken(&e),
    };
    if matches!(ended, Ended::Broken { .. }) {
        return ended;
    }
    match producer.begin_transaction() {
        Ok(()) => ended,
        Err(e) => Ended::broken(&e),
    }
}

fn rd(e: &KafkaError) -> Option<&rdkafka::error::RDKafkaError> {
    match e {
        KafkaError::Transaction(r) => Some(r),
        _ => None,
    }
}

fn needs_abort(e: &KafkaError) -> bool {
    rd(e).is_some_and(|r| r.txn_requires_abort() && !r.is_fatal())
}

fn is_retriable(e: &KafkaError) -> bool {
    rd(e).is_some_and(|r| r.is_retriable() && !r.is_fatal())
}

/// Whether `e` may go away if asked again: retriable, or the transaction coordinator moving,
/// loading or out of reach.
fn transient(e: &KafkaError) -> bool {
    is_retriable(e)
        || matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::CoordinatorLoadInProgress
                    | RDKafkaErrorCode::CoordinatorNotAvailable
                    | RDKafkaErrorCode::NotCoordinator
                    | RDKafkaErrorCode::ConcurrentTransactions
                    | RDKafkaErrorCode::RequestTimedOut
                    | RDKafkaErrorCode::OperationTimedOut
                    | RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
            )
        )
}

/// Whether `e` says another producer took this one's id (or epoch) over.
fn is_fenced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::InvalidProducerIdMapping
        )
    ) || rd(e).is_some_and(|r| r.is_fatal())
}

/// Shards acquired whose earlier holders' producers are not fenced yet: their runs left
/// `publishing` are not read back until they are.
#[derive(Debug, Default)]
pub struct Fences {
    pending: Mutex<std::collections::BTreeMap<ShardId, (LeaseEpoch, Vec<String>)>>,
}

impl Fences {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<ShardId, (LeaseEpoch, Vec<String>)>>
    {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shards just acquired at `epoch`, with the producers to fence (perhaps none: this admin's
    /// own earlier sends are waited for all the same).
    pub fn add(&self, acquired: impl IntoIterator<Item = (ShardId, LeaseEpoch, Vec<String>)>) {
        let mut pending = self.lock();
        for (shard, epoch, ids) in acquired {
            pending.insert(shard, (epoch, ids));
        }
    }

    /// What is still to fence.
    pub fn pending(&self) -> Vec<(ShardId, LeaseEpoch, Vec<String>)> {
        self.lock()
            .iter()
            .map(|(s, (e, ids))| (*s, *e, ids.clone()))
            .collect()
    }

    /// These shards' earlier holders are fenced (at the epochs given).
    pub fn done(&self, fenced: &[(ShardId, LeaseEpoch)]) {
        let mut pending = self.lock();
        for (shard, epoch) in fenced {
            if pending.get(shard).is_some_and(|(e, _)| e == epoch) {
                pending.remove(shard);
            }
        }
    }

    /// Whether `shard`'s earlier holders are still to be fenced.
    pub fn blocks(&self, shard: ShardId) -> bool {
        self.lock().contains_key(&shard)
    }
}
