//! Publication: claim ahead (route, ledger before send), send at the fire time, record after
//! delivery.
//!
//! 1. Route (`Publisher::route`, in the publisher's loop): each trigger due within the publish-ahead window
//!    (`CADENZA_PUBLISH_AHEAD_MS`) of a shard this admin holds gets its partition from the
//!    selector, and keeps the shard's [`Term`]. A run the scan wrote already claimed (routed,
//!    `publishing` under its shard's epoch) is taken only if that epoch is the shard's term
//!    now; it keeps its partition while that route still holds among the workers live now
//!    ([`crate::route::Router::confirm`]) and is routed again otherwise.
//! 2. Ledger (`ledger`): one transaction that checks this admin still holds each shard at that
//!    epoch ([`lease::confirm`]), locks the jobs of the runs written claimed `FOR KEY SHARE` to
//!    check their `plan_gen` (a job change dropped some of them), writes the new route of those
//!    routed again, and marks the other routed triggers `publishing` with their partition and
//!    epoch. A run of a schedule, claimed or not, taken later than its job's misfire threshold
//!    is recorded `misfired` instead of sent, by the job's strategy (its job is locked and read
//!    too). Doing this ahead of the fire time
//!    keeps the transaction out of the fire lateness.
//! 3. Produce ([`produce`]): at its fire time each is handed to the producer (idempotent,
//!    `acks=all`), only while this admin still holds its shard at the epoch it was marked under
//!    and trusts that lease by its own clock; the producer's
//!    delivery timeout is shorter than the lease margin, so nothing lands after the lease could
//!    have passed to another admin.
//! 4. Record ([`record`], [`Recorder`]): once acknowledged, delivered ones wait
//!    `CADENZA_RECORD_DELAY_MS` (1 s), then go into the delivery record (`deliveries`), one row
//!    per job type and partition for many batches, in one statement. The runs' rows are not
//!    written: a run still `publishing` that the record holds was published (migration 0019),
//!    and a worker's `started` event writes the run with its partition and offset. Recording is
//!    an optimisation of the read-back: a delivered run the record misses (admin stopped or
//!    statement failed) is found on its partition by the read-back and recorded `published` in
//!    its row then. Until its delivery is recorded, a run this admin marked holds its shard's
//!    settled mark back (see [`super::wheel::Wheel::writing`]).
//!
//! Steps 1–2 run in the publisher's loop, one batch after another; steps 3–4 of a batch run in
//! its own task, beside the next batches (up to [`MAX_BATCHES_IN_FLIGHT`] batches marked and not
//! yet acknowledged), so a batch waiting for its fire times or its acknowledgements delays no
//! other.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{
    JobType, MisfireStrategy, TriggerMessage, TriggerRecord, HEADER_RECORD, HEADER_TRACEPARENT,
};
use cadenza_worker::telemetry;
use chrono::{DateTime, Utc};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::lease::{self, Term};
use super::txn::TxnSend;
use super::{SchedulerContext, SchedulerError};
use crate::guard;
use crate::ids::{LeaseEpoch, ShardId};
use crate::metrics::{metrics, JobTypeLabel};
use crate::route::{Route, RouteInput};
use crate::trigger::PendingTrigger;

/// Most triggers in one publication batch.
pub const MAX_BATCH: usize = 5_000;
/// Least time between two rounds of the recorder.
const RECORD_ROUND_GAP: Duration = Duration::from_millis(250);
/// Most runs recorded by one statement.
const MAX_RECORD: usize = 20_000;
/// Most delivered runs waiting to be recorded; beyond that (the database far behind) the oldest
/// are left to the read-back.
const MAX_WAITING: usize = 500_000;
/// Batches marked and not yet acknowledged.
pub const MAX_BATCHES_IN_FLIGHT: usize = 32;
/// Pause after a batch's ledger transaction failed, before its claimed runs are taken again.
const FAILED_BATCH_PAUSE: Duration = Duration::from_millis(200);

/// A batch routed, in fire time order, to be marked `publishing` (step 2).
pub struct RoutedBatch {
    routed: Vec<Routed>,
    outcome: PublishOutcome,
}

/// A batch marked `publishing`, to be handed to the producer at its fire times.
pub struct Claimed {
    /// In fire time order.
    claimed: Vec<Routed>,
    outcome: PublishOutcome,
}

/// A trigger with its partition and the term of its shard.
struct Routed {
    trigger: PendingTrigger,
    route: Route,
    term: Term,
    /// Written claimed on another route, routed again when taken: its row is updated.
    moved: bool,
}

pub struct Publisher {
    ctx: Arc<SchedulerContext>,
}

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    pub published: usize,
    /// Not ours any more (shard lost) or no longer `scheduled` (e.g. job disabled).
    pub skipped: usize,
    /// Sends that failed or were not made; the rows stay `publishing` until read back.
    pub failed: usize,
}

/// One trigger handed to the producer: what recording its acknowledgement needs, and its
/// `publish` span (open until the broker answers; `Span::none()` unless spans are exported).
struct Sent {
    id: i64,
    fire_time: DateTime<Utc>,
    /// When it was handed to the producer (database clock).
    sent_at: DateTime<Utc>,
    job_type: JobType,
    delivery: DeliveryFuture,
    /// The transaction it went into (with transactions): published once that commits.
    generation: Option<u64>,
    span: tracing::Span,
}

/// A new W3C `traceparent` (trace id, span id, sampled) for a run.
fn traceparent() -> String {
    format!(
        "00-{:032x}-{:016x}-01",
        rand::random::<u128>() | 1,
        rand::random::<u64>() | 1
    )
}

impl Publisher {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self { ctx }
    }

    /// Publishes due triggers until `stop`; batches claimed are sent and recorded first.
    pub async fn run(self, stop: CancellationToken) {
        let ahead = self.ctx.config.publish_ahead();
        let (recorder, recording) = Recorder::start(self.ctx.clone());
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            while in_flight.len() >= MAX_BATCHES_IN_FLIGHT {
                in_flight.join_next().await;
            }
            while in_flight.try_join_next().is_some() {}
            let batch = self
                .ctx
                .wheel
                .next_due(MAX_BATCH, &self.ctx.clock, ahead, &stop)
                .await;
            if batch.is_empty() {
                if stop.is_cancelled() {
                    break;
                }
                continue;
            }
            let ids: Vec<i64> = batch.iter().map(|t| t.id.0).collect();
            // Marked one batch after another, so the runs of a job reach the topic in fire
            // time order.
            let mut routed = self.route(batch).await;
            let round = async {
                ledger(&self.ctx, &mut routed)
                    .await
                    .map_err(anyhow::Error::from)
            };
            match guard::round("publication", round).await {
                Ok(()) => {
                    let claimed = Claimed {
                        claimed: routed.routed,
                        outcome: routed.outcome,
                    };
                    let ctx = self.ctx.clone();
                    let recorder = recorder.clone();
                    in_flight.spawn(async move {
                        // Runs handed to the recorder stay known to the timer until it has
                        // recorded them (it settles them), so that a read-back never takes a
                        // run whose delivery this admin knows and is about to record.
                        let mut handed: Vec<i64> = Vec::new();
                        let round = async {
                            // Acknowledgements are awaited while the batch is still being
                            // sent, so each is seen (and timed) as it comes.
                            let (tx, rx) = mpsc::unbounded_channel();
                            let (produced, recorded) =
                                tokio::join!(produce(&ctx, claimed, tx), record(&ctx, rx, &recorder));
                            handed = recorded.handed;
                            let mut outcome = produced?;
                            outcome.published = recorded.published;
                            outcome.failed += recorded.failed;
                            Ok::<_, anyhow::Error>(outcome)
                        };
                        match guard::round("sending and recording a publication", round).await {
                            Ok(o) if o.failed > 0 => tracing::warn!(
                                ?o,
                                "some triggers could not be published; they are read back and retried"
                            ),
                            Ok(_) => {}
                            Err(e) => tracing::error!(error = %e, "sending or recording a publication batch failed; it is read back"),
                        }
                        let handed: HashSet<i64> = handed.into_iter().collect();
                        ctx.wheel.settle(ids.into_iter().filter(|id| !handed.contains(id)));
                    });
                }
                Err(e) => {
                    // Nothing of the batch was sent. Runs the scan wrote claimed go back to the
                    // timer (their take wrote nothing); the others stay `scheduled` (or are
                    // read back, if their mark was committed after all) and the sweep loads
                    // them again.
                    // One routed again keeps its new route, written again when next taken
                    // (the update may have been committed though the commit reported an error).
                    let back: Vec<PendingTrigger> = routed
                        .routed
                        .into_iter()
                        .filter_map(|r| {
                            let mut t = r.trigger;
                            let claim = t.claim.as_mut()?;
                            if r.moved {
                                claim.route = r.route;
                                claim.rewrite = true;
                            }
                            Some(t)
                        })
                        .collect();
                    tracing::error!(error = %e, retried = back.len(), "publication batch failed; its runs are taken again");
                    self.ctx.wheel.settle(ids);
                    self.ctx.wheel.insert(back);
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(FAILED_BATCH_PAUSE) => {}
                    }
                }
            }
        }
        while in_flight.join_next().await.is_some() {}
        // What is still waiting to be recorded is recorded now, before the shards go.
        drop(recorder);
        if let Err(e) = recording.await {
            tracing::error!(error = %e, "recording publications failed");
        }
    }

    /// Step 1: the partition of each trigger of a shard held right now, with the shard's term;
    /// triggers of other shards are skipped.
    async fn route(&self, batch: Vec<PendingTrigger>) -> RoutedBatch {
        let mut outcome = PublishOutcome::default();
        let mut routed = Vec::with_capacity(batch.len());
        for trigger in batch {
            let Some(term) = self.ctx.leases.term(trigger.shard) else {
                outcome.skipped += 1;
                continue;
            };
            // The topic's partition count: known already for a run the scan routed, looked up
            // (and the topic created) for any other.
            let partitions = self
                .ctx
                .kafka
                .ensure_trigger_topic(&self.ctx.pool, &trigger.job_type)
                .await;
            if let Some(claim) = &trigger.claim {
                // Written claimed by the scan: sent only under the epoch its row is marked
                // with; one of an earlier epoch is left to the read-back.
                if claim.epoch != term.epoch {
                    outcome.skipped += 1;
                    continue;
                }
                // Routed when written, up to the lookahead ago: kept while it still holds
                // among the workers live now, routed again otherwise (its row is updated in
                // the ledger). If the topic cannot be reached now, it keeps its route.
                let rerouted = match partitions {
                    Ok(partitions) => self.ctx.router.confirm(
                        &RouteInput::of(&trigger),
                        &claim.route,
                        partitions,
                        &self.ctx.registry,
                    ),
                    Err(e) => {
                        tracing::warn!(trigger_id = trigger.id.0, job_type = trigger.job_type.as_str(), error = %e, "trigger topic not reachable; the run keeps the route it was written with");
                        None
                    }
                };
                let (route, moved) = match rerouted {
                    None => (claim.route.clone(), claim.rewrite),
                    Some(now) => (now, true),
                };
                routed.push(Routed {
                    trigger,
                    route,
                    term,
                    moved,
                });
                continue;
            }
            // A run whose topic cannot be reached now stays `scheduled` (the sweep loads it
            // again); the rest of the batch goes on.
            let partitions = match partitions {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(trigger_id = trigger.id.0, job_type = trigger.job_type.as_str(), error = %e, "trigger topic not reachable; the run stays scheduled");
                    outcome.skipped += 1;
                    continue;
                }
            };
            let route = self
                .ctx
                .router
                .select(&trigger, partitions, &self.ctx.registry);
            routed.push(Routed {
                trigger,
                route,
                term,
                moved: false,
            });
        }
        RoutedBatch { routed, outcome }
    }
}

/// Step 2: marks the routed triggers `publishing` with their partition and epoch, in one
/// transaction with the check of their shards' leases ([`lease::confirm`]). Runs the scan wrote
/// already claimed need no mark: the transaction locks their jobs `FOR KEY SHARE` and reads
/// their `plan_gen`; where a job change dropped runs written ahead since (its `plan_gen` moved
/// on), only the runs still there are sent; those routed again when taken get their new route.
/// Runs of a schedule, claimed or not, taken later than their job's misfire threshold follow
/// its misfire strategy (the jobs of `scheduled` ones are locked and read too). A job change
/// waits for that lock, so it never drops a run taken here. Returns those to send; the others
/// (lease lost, no longer `scheduled`, dropped by a job change, or misfired) count as skipped.
async fn ledger(ctx: &SchedulerContext, batch: &mut RoutedBatch) -> Result<(), SchedulerError> {
    let RoutedBatch { routed, outcome } = batch;
    if routed.is_empty() {
        return Ok(());
    }
    let before = routed.len();
    let terms: Vec<Term> = routed.iter().map(|r| r.term).collect();
    // The runs it marks `publishing` hold their shards' settled marks back from before the
    // transaction begins.
    let writing = ctx.wheel.writing(&ctx.clock);
    let mut tx = ctx.pool.begin().await?;
    // By shard and epoch: a batch may hold two terms of a shard lost and taken back while it
    // was routed; a run routed under the earlier one is not marked under the current one.
    let valid: HashSet<(ShardId, LeaseEpoch)> = lease::confirm(&mut tx, &ctx.admin_id, &terms)
        .await?
        .into_iter()
        .map(|t| (t.shard, t.epoch))
        .collect();
    routed.retain(|r| valid.contains(&(r.trigger.shard, r.term.epoch)));
    let (pre, fresh): (Vec<&Routed>, Vec<&Routed>) =
        routed.iter().partition(|r| r.trigger.claim.is_some());
    let mut keep: HashSet<i64> = HashSet::with_capacity(routed.len());
    let mut ended = crate::outcome::Ended::default();
    // The jobs first: a job change holds its job's lock while it drops rows, so taking the
    // rows' locks (the marks) before the jobs' could deadlock with it. Checked: the jobs of
    // runs written claimed (their plan generation and misfire rule), and those of `scheduled`
    // runs of a schedule (their misfire rule: taken late, they misfire here as claimed ones do).
    let mut jobs: Vec<i64> = pre
        .iter()
        .chain(fresh.iter().filter(|r| r.trigger.kind.is_schedule()))
        .map(|r| r.trigger.job_id.0)
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    let checks: Vec<JobCheck> = if jobs.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(sql!("publish/check_plans"))
            .bind(&jobs)
            .fetch_all(&mut *tx)
            .await?
    };
    if !pre.is_empty() {
        let gens: HashMap<i64, i64> = checks.iter().map(|c| (c.id, c.plan_gen)).collect();
        // Runs routed again when taken: their rows get the new route, if still there.
        let (moved, pre): (Vec<&Routed>, Vec<&Routed>) = pre.into_iter().partition(|r| r.moved);
        if !moved.is_empty() {
            keep.extend(write_routes(&mut tx, sql!("publish/reroute_claimed"), &moved).await?);
        }
        let (current, changed): (Vec<&Routed>, Vec<&Routed>) = pre.iter().partition(|r| {
            r.trigger.claim.as_ref().map(|c| c.plan_gen) == gens.get(&r.trigger.job_id.0).copied()
        });
        keep.extend(current.iter().map(|r| r.trigger.id.0));
        if !changed.is_empty() {
            let still: Vec<i64> = sqlx::query_scalar(sql!("publish/still_claimed"))
                .bind(changed.iter().map(|r| r.trigger.id.0).collect::<Vec<_>>())
                .bind(changed.iter().map(|r| r.term.epoch).collect::<Vec<_>>())
                .fetch_all(&mut *tx)
                .await?;
            keep.extend(still);
        }
    }
    if !fresh.is_empty() {
        keep.extend(write_routes(&mut tx, sql!("publish/mark_publishing"), &fresh).await?);
    }
    // Taken later than the job's misfire threshold (publication behind): the job's misfire
    // strategy applies here, as the sweep applies it to `scheduled` runs.
    let db_now = checks.first().map(|c| c.db_now);
    let mut caught_up = Vec::new();
    let mut misfired = Vec::new();
    if let Some(db_now) = db_now {
        (ended, caught_up, misfired) =
            misfire_late(&mut tx, routed, &checks, &ctx.catch_ups, db_now, &mut keep).await?;
    }
    match tx.commit().await {
        Ok(()) => {
            // Marked now: the runs taken from `scheduled` and those routed again (a run the scan
            // wrote claimed is held already). The others taken are no longer this admin's to
            // send (misfired, dropped by a job change): they hold no mark back.
            writing.marked(
                routed
                    .iter()
                    .filter(|r| {
                        keep.contains(&r.trigger.id.0) && (r.trigger.claim.is_none() || r.moved)
                    })
                    .map(|r| (r.trigger.id.0, r.trigger.shard)),
            );
            // The runs it recorded `misfired` (compare-and-set on the epoch they were taken
            // under) are no longer `publishing`: they hold no mark back, and the sweep need not
            // look them up (past the ceiling, hundreds of thousands a sweep).
            ctx.wheel.ended(&misfired);
            // Runs not kept that this admin marked before (an earlier take whose commit seemed
            // to fail) stay tracked: the sweep finds out whether that take committed.
        }
        Err(e) => {
            // It may have committed all the same: every run it may have marked holds its
            // shard's mark back until the sweep finds out (`Wheel::unsettled_unknown`).
            writing.marked(routed.iter().map(|r| (r.trigger.id.0, r.trigger.shard)));
            return Err(e.into());
        }
    }
    ended.record();
    if let Some(at) = db_now {
        ctx.catch_ups.taken(&caught_up, at);
    }
    routed.retain(|r| keep.contains(&r.trigger.id.0));
    outcome.skipped += before - routed.len();
    Ok(())
}

/// Records `misfired` the runs of a schedule kept in `keep` that were taken past their
/// job's misfire threshold, as its strategy says ([`late_runs`], `publish/misfire_taken`), and
/// removes from `keep` every late run not to be sent: misfired now, or no longer `publishing`
/// under the epoch it was taken at (recorded so by an earlier take whose commit reported an
/// error). Returns the runs ended, to count once committed, the late `fire_once_now` runs
/// to be sent (their catch-ups: run, job, broadcast shard; to note in [`CatchUps`] once
/// committed), and the ids of the runs recorded `misfired`.
async fn misfire_late(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    routed: &[Routed],
    checks: &[JobCheck],
    catch_ups: &CatchUps,
    db_now: DateTime<Utc>,
    keep: &mut HashSet<i64>,
) -> Result<(crate::outcome::Ended, Vec<(i64, i64, u32)>, Vec<i64>), SchedulerError> {
    let rules: HashMap<i64, &JobCheck> = checks.iter().map(|c| (c.id, c)).collect();
    let taken: Vec<&Routed> = routed
        .iter()
        .filter(|r| keep.contains(&r.trigger.id.0))
        .collect();
    let late = late_runs(&taken, &rules, db_now);
    if late.is_empty() {
        return Ok(Default::default());
    }
    let once_now = |c: &JobCheck| c.misfire == MisfireStrategy::FireOnceNow.as_str();
    let decided: Vec<(i64, bool)> = sqlx::query_as(sql!("publish/misfire_taken"))
        .bind(late.iter().map(|(r, _)| r.trigger.id.0).collect::<Vec<_>>())
        .bind(late.iter().map(|(r, _)| r.term.epoch).collect::<Vec<_>>())
        .bind(
            late.iter()
                .map(|(_, c)| c.misfire_threshold_ms)
                .collect::<Vec<_>>(),
        )
        .bind(
            late.iter()
                .map(|(_, c)| c.misfire.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            late.iter()
                .map(|(r, c)| once_now(c) && catch_ups.covers(&r.trigger))
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut **tx)
        .await?;
    let mut misfired = Vec::new();
    let mut send = HashSet::new();
    for (id, late) in decided {
        if late {
            misfired.push(id);
        } else {
            send.insert(id);
        }
    }
    let mut caught_up = Vec::new();
    for (r, c) in &late {
        if !send.contains(&r.trigger.id.0) {
            keep.remove(&r.trigger.id.0);
        } else if once_now(c) {
            caught_up.push((r.trigger.id.0, r.trigger.job_id.0, r.trigger.shard_index));
        }
    }
    if !misfired.is_empty() {
        tracing::warn!(
            count = misfired.len(),
            "runs taken for sending later than their misfire threshold recorded as misfired"
        );
    }
    let ended = crate::outcome::after_misfire(tx, &misfired).await?;
    Ok((ended, caught_up, misfired))
}

/// How many jobs' catch-ups [`CatchUps`] keeps before it forgets those older than
/// [`CATCH_UP_KEPT_FOR`].
const CATCH_UPS_KEPT: usize = 10_000;
const CATCH_UP_KEPT_FOR: chrono::Duration = chrono::Duration::minutes(10);

/// The late runs of `fire_once_now` jobs this admin took for sending as their catch-up: per job
/// and broadcast shard, the latest, and when (by the database clock) it was taken. A later late
/// run that was already due then is covered by that catch-up, as XXL-JOB's "fire once now"
/// skips every fire time missed up to the moment it fires, so it is recorded `misfired` rather
/// than sent as a second catch-up of the same delay. The catch-up itself is never covered: if
/// its send failed and it is taken again, it goes out. Kept in memory: after its shard changes
/// hands, the next holder does not know the catch-up and may send one more.
#[derive(Default)]
pub struct CatchUps(std::sync::Mutex<CatchUpMap>);

#[derive(Default)]
struct CatchUpMap {
    /// (job, broadcast shard) → (when taken, the catch-up run).
    latest: HashMap<(i64, u32), (DateTime<Utc>, i64)>,
    /// When entries older than [`CATCH_UP_KEPT_FOR`] were last forgotten.
    pruned_at: Option<DateTime<Utc>>,
}

impl CatchUps {
    fn lock(&self) -> std::sync::MutexGuard<'_, CatchUpMap> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `run` was due by the time another run of its job and broadcast shard was taken
    /// as their catch-up.
    fn covers(&self, run: &PendingTrigger) -> bool {
        self.lock()
            .latest
            .get(&(run.job_id.0, run.shard_index))
            .is_some_and(|(at, id)| run.fire_time <= *at && *id != run.id.0)
    }

    /// Notes catch-ups (run, job, broadcast shard) taken at `at`.
    fn taken(&self, runs: &[(i64, i64, u32)], at: DateTime<Utc>) {
        if runs.is_empty() {
            return;
        }
        let mut m = self.lock();
        for (id, job, shard_index) in runs {
            let e = m.latest.entry((*job, *shard_index)).or_insert((at, *id));
            if e.0 <= at {
                *e = (at, *id);
            }
        }
        // Past the size bound, forget the old ones, at most once a minute.
        let due = m
            .pruned_at
            .is_none_or(|p| at - p > chrono::Duration::minutes(1));
        if m.latest.len() > CATCH_UPS_KEPT && due {
            m.latest.retain(|_, (t, _)| *t > at - CATCH_UP_KEPT_FOR);
            m.pruned_at = Some(at);
        }
    }
}

/// A job's row as the ledger checks it when its runs (written claimed, or `scheduled` runs of its
/// schedule) are taken.
#[derive(sqlx::FromRow)]
struct JobCheck {
    id: i64,
    plan_gen: i64,
    misfire: String,
    misfire_threshold_ms: i64,
    db_now: DateTime<Utc>,
}

/// Of the runs taken, those of a job's schedule taken more than their job's misfire threshold
/// past their fire time, whose strategy may record them `misfired` instead of sending them
/// (`publish/misfire_taken` decides): `do_nothing` misfires every late run; `fire_once_now`
/// every one but the latest of each job (and broadcast shard), among those taken together here
/// and those still waiting; `fire_all` sends them all, as does a rule that cannot be read.
fn late_runs<'a, 'r>(
    taken: &[&'r Routed],
    rules: &HashMap<i64, &'a JobCheck>,
    now: DateTime<Utc>,
) -> Vec<(&'r Routed, &'a JobCheck)> {
    taken
        .iter()
        .filter(|r| r.trigger.kind.is_schedule())
        .filter_map(|r| {
            let rule = rules.get(&r.trigger.job_id.0)?;
            let strategy: MisfireStrategy = rule.misfire.parse().ok()?;
            let threshold = chrono::Duration::milliseconds(rule.misfire_threshold_ms);
            (strategy != MisfireStrategy::FireAll && r.trigger.due_at() < now - threshold)
                .then_some((*r, *rule))
        })
        .collect()
}

/// Runs `query` (`publish/mark_publishing` or `publish/reroute_claimed`) on the runs' ids,
/// partitions, routed workers and epochs; returns the ids it wrote.
async fn write_routes(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    query: &'static str,
    runs: &[&Routed],
) -> Result<Vec<i64>, SchedulerError> {
    Ok(sqlx::query_scalar(query)
        .bind(runs.iter().map(|r| r.trigger.id.0).collect::<Vec<_>>())
        .bind(runs.iter().map(|r| r.route.partition).collect::<Vec<_>>())
        .bind(
            runs.iter()
                .map(|r| r.route.worker.as_ref().map(|w| w.0.clone()))
                .collect::<Vec<_>>(),
        )
        .bind(runs.iter().map(|r| r.term.epoch).collect::<Vec<_>>())
        .fetch_all(&mut **tx)
        .await?)
}

/// Step 3: hands each claimed trigger to the producer at its fire time (by the database clock),
/// only while this admin holds its shard at the epoch it was marked under and trusts that lease
/// by its own clock: checked right before each message, against the leases' current view (the
/// producer's delivery timeout is shorter than the margin, and a shard is dropped from that view
/// before it is handed back). Triggers not handed over stay `publishing` and are resolved by
/// read-back.
async fn produce(
    ctx: &SchedulerContext,
    batch: Claimed,
    sends: mpsc::UnboundedSender<Sent>,
) -> Result<PublishOutcome, SchedulerError> {
    let Claimed {
        claimed,
        mut outcome,
    } = batch;
    let topics = ctx.kafka.topics();
    let mut unsent = 0;
    if ctx.txn.is_none() {
        ctx.kafka.renew_producer_if_fatal();
    }
    let producer = ctx.kafka.producer();
    for Routed {
        trigger: t,
        route,
        term,
        ..
    } in &claimed
    {
        // Rounded up: never before the fire time.
        let wait_us = (t.fire_time - ctx.clock.now())
            .num_microseconds()
            .unwrap_or(0);
        if wait_us > 0 {
            tokio::time::sleep(std::time::Duration::from_micros(wait_us.unsigned_abs())).await;
        }
        let now = ctx.clock.now();
        let payload = serde_json::to_vec(&message(t, route, now))?;
        let key = t.job_id.0.to_string();
        let topic = topics.trigger(&t.job_type);
        let span = publish_span(t, route);
        let record = FutureRecord::to(&topic)
            .partition(route.partition)
            .key(&key)
            .payload(&payload)
            .headers(headers(&span));
        // Only while this admin still holds the shard at the epoch the run was marked under,
        // and trusts that lease by its own clock: a shard handed back or lost (and perhaps
        // taken again at a new epoch) while the run waited for its fire time is left to the
        // read-back of its holder. Checked last, right before the record is handed over.
        let held = || {
            let held = ctx.leases.term(t.shard).is_some_and(|now| {
                now.epoch == term.epoch && std::time::Instant::now() < now.trusted_until
            });
            #[cfg(debug_assertions)]
            if held {
                test_pause::before_send(&t.job_type);
            }
            held
        };
        let (delivery, generation) = match &ctx.txn {
            // With transactions the check is made where no commit can begin before the send.
            Some(txn) => match txn.send(record, held).await {
                TxnSend::Sent {
                    delivery,
                    generation,
                } => (delivery, Some(generation)),
                TxnSend::NotHeld => {
                    unsent += 1;
                    continue;
                }
                TxnSend::Failed(e) => {
                    tracing::warn!(trigger_id = t.id.0, error = %e, "could not enqueue");
                    unsent += 1;
                    continue;
                }
            },
            None => {
                if !held() {
                    unsent += 1;
                    continue;
                }
                match producer.send_result(record) {
                    Ok(delivery) => (delivery, None),
                    Err((e, _)) => {
                        tracing::warn!(trigger_id = t.id.0, error = %e, "could not enqueue");
                        unsent += 1;
                        continue;
                    }
                }
            }
        };
        // The receiver (`record`) lives as long as this batch.
        let _ = sends.send(Sent {
            id: t.id.0,
            fire_time: t.fire_time,
            sent_at: now,
            job_type: t.job_type.clone(),
            delivery,
            generation,
            span,
        });
    }
    if unsent > 0 {
        tracing::warn!(count = unsent, "not sent (lease ran out, shard no longer held at the epoch they were marked under, or producer refused); the rows stay publishing and are resolved by read-back");
    }
    outcome.failed = unsent;
    Ok(outcome)
}

/// A pause point for the tests, in debug builds only: with
/// `CADENZA_TEST_FREEZE_BEFORE_SEND=<job type>`, the admin stops itself (SIGSTOP) the first time
/// it is about to send a run of that job type, after its lease check, as an admin paused by its
/// host at the worst moment would. The test resumes it with SIGCONT.
#[cfg(debug_assertions)]
mod test_pause {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    use cadenza_schemas::JobType;

    pub fn before_send(job_type: &JobType) {
        static WANTED: OnceLock<Option<String>> = OnceLock::new();
        static DONE: AtomicBool = AtomicBool::new(false);
        let wanted = WANTED.get_or_init(|| std::env::var("CADENZA_TEST_FREEZE_BEFORE_SEND").ok());
        if wanted.as_deref() == Some(job_type.as_str()) && !DONE.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                job_type = job_type.as_str(),
                "test pause point: this admin stops itself before its send"
            );
            let _ = std::process::Command::new("kill")
                .args(["-STOP", &std::process::id().to_string()])
                .status();
            tracing::warn!("test pause point: resumed");
        }
    }
}

/// The `publish` span of a run, where its trace starts (`Span::none()` unless spans are
/// exported); it stays open until the broker answers.
fn publish_span(t: &PendingTrigger, route: &Route) -> tracing::Span {
    if telemetry::exporting() {
        tracing::info_span!(parent: None, "publish", otel.kind = "producer",
            job_id = t.job_id.0, trigger_id = t.id.0, job_type = t.job_type.as_str(),
            attempt = t.attempt, partition = route.partition,
            offset = tracing::field::Empty, otel.status_code = tracing::field::Empty)
    } else {
        tracing::Span::none()
    }
}

/// The headers of a trigger record: its kind, and the run's trace id (from `span`, or a new
/// one), which travels to the worker and back.
fn headers(span: &tracing::Span) -> OwnedHeaders {
    let tp = telemetry::traceparent(span).unwrap_or_else(traceparent);
    OwnedHeaders::new()
        .insert(Header {
            key: HEADER_RECORD,
            value: Some("trigger"),
        })
        .insert(Header {
            key: HEADER_TRACEPARENT,
            value: Some(&tp),
        })
}

/// The trigger record of a routed run, published at `now`.
fn message(t: &PendingTrigger, route: &Route, now: DateTime<Utc>) -> TriggerRecord {
    TriggerRecord::Trigger(TriggerMessage {
        trigger_id: t.id,
        job_id: t.job_id,
        job_type: t.job_type.clone(),
        kind: t.kind,
        fire_time: t.fire_time,
        params: t.params.clone(),
        block: t.block,
        timeout_ms: t.timeout_ms,
        attempt: t.attempt,
        shard_index: t.shard_index,
        shard_total: t.shard_total,
        routed_worker: route.worker.clone(),
        route: Some(t.route),
        published_at: now,
        workflow_run_id: t.workflow.as_ref().map(|w| w.run_id),
        workflow_node: t.workflow.as_ref().map(|w| w.node.clone()),
        upstream: t.workflow.as_ref().and_then(|w| w.upstream.clone()),
    })
}

/// Step 4: waits for the acknowledgements of a batch and hands the delivered triggers to the
/// [`Recorder`]. Failed sends stay `publishing`: one that timed out may still have landed, so the
/// sweep reads the partition back before sending again.
async fn record(
    ctx: &SchedulerContext,
    mut sends: mpsc::UnboundedReceiver<Sent>,
    recorder: &Recorder,
) -> Recorded {
    let mut outcome = Recorded::default();
    let mut delivered = Delivered::default();
    let mut lateness = Vec::new();
    let mut types = Vec::new();
    while let Some(Sent {
        id,
        fire_time,
        sent_at,
        job_type,
        delivery,
        generation,
        span,
    }) = sends.recv().await
    {
        match delivery.await {
            Ok(Ok(_)) if !committed(ctx, generation).await => {
                span.record("otel.status_code", "ERROR");
                outcome.failed += 1;
            }
            Ok(Ok(d)) => {
                span.record("offset", d.offset);
                delivered.ids.push(id);
                delivered.job_types.push(job_type.as_str().to_owned());
                delivered.partitions.push(d.partition);
                delivered.offsets.push(d.offset);
                delivered.fire_times.push(fire_time);
                delivered.acked_at.push(ctx.clock.now());
                lateness.push((sent_at - fire_time).num_milliseconds());
                types.push(job_type);
            }
            Ok(Err((e, _))) => {
                span.record("otel.status_code", "ERROR");
                ctx.kafka.note_send_error(&e);
                tracing::warn!(trigger_id = id, error = %e, "send failed");
                outcome.failed += 1;
            }
            Err(_) => outcome.failed += 1,
        }
    }
    outcome.published = delivered.ids.len();
    let ids = delivered.ids.clone();
    if recorder.delivered(delivered) {
        outcome.handed = ids;
    }
    tracing::debug!(
        published = outcome.published,
        max_lateness_ms = lateness.iter().max().copied().unwrap_or(0),
        "published"
    );
    ctx.lateness
        .record(ctx.clock.now().timestamp(), lateness.iter().copied());
    let m = metrics();
    for (ms, job_type) in lateness.iter().zip(&types) {
        m.fire_lateness.observe(*ms as f64 / 1000.0);
        m.published
            .get_or_create(&JobTypeLabel {
                job_type: job_type.as_str().to_owned(),
            })
            .inc();
    }
    outcome
}

/// Whether a send acknowledged by the broker is published: at once without transactions, once
/// its transaction committed with them (an aborted one's records are never read).
async fn committed(ctx: &SchedulerContext, generation: Option<u64>) -> bool {
    match (&ctx.txn, generation) {
        (Some(txn), Some(g)) => txn.outcome(g).await,
        _ => true,
    }
}

/// What awaiting a batch's acknowledgements found.
#[derive(Debug, Default)]
struct Recorded {
    published: usize,
    failed: usize,
    /// Runs the recorder took: it settles them in the timer once it has recorded them.
    handed: Vec<i64>,
}

/// Deliveries acknowledged by the broker, waiting to be recorded.
#[derive(Default)]
struct Delivered {
    /// When to record them (set when handed to the recorder).
    due: Option<tokio::time::Instant>,
    ids: Vec<i64>,
    job_types: Vec<String>,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    fire_times: Vec<DateTime<Utc>>,
    /// When the broker acknowledged each, by the database clock as this admin reads it.
    acked_at: Vec<DateTime<Utc>>,
}

/// Records delivered runs in the delivery record a moment after their delivery
/// (`CADENZA_RECORD_DELAY_MS`). Cloned into each batch's task; once every clone is dropped, its
/// task records what is left at once and ends.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::UnboundedSender<Delivered>,
    delay: Duration,
}

impl Recorder {
    /// The recorder and its task.
    pub fn start(ctx: Arc<SchedulerContext>) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let delay = ctx.config.record_delay();
        let task = tokio::spawn(record_loop(ctx, rx));
        (Self { tx, delay }, task)
    }

    /// Whether the recorder took the deliveries (and with them the job of settling their runs
    /// in the timer once recorded).
    fn delivered(&self, mut delivered: Delivered) -> bool {
        if delivered.ids.is_empty() {
            return false;
        }
        delivered.due = Some(tokio::time::Instant::now() + self.delay);
        if self.tx.send(delivered).is_err() {
            // Only if the recorder's task is gone: the runs stay `publishing` and the
            // read-back records them.
            tracing::warn!(
                "the recorder of publications has stopped; delivered runs are left to the read-back"
            );
            return false;
        }
        true
    }
}

/// The recorder's task: waits for the earliest delivery's time, then records every delivery due
/// by then (up to [`MAX_RECORD`] runs a statement); at the end, records all that is left.
async fn record_loop(ctx: Arc<SchedulerContext>, rx: mpsc::UnboundedReceiver<Delivered>) {
    let mut h = Unrecorded {
        wheel: ctx.wheel.clone(),
        waiting: VecDeque::new(),
        rx,
    };
    let mut queued = 0;
    let mut open = true;
    let mut last_round = tokio::time::Instant::now();
    while open || !h.waiting.is_empty() {
        // Once every sender is gone, what is left is due at once. Otherwise rounds are at least
        // RECORD_ROUND_GAP apart, so that one row of the record holds a good share of a
        // partition's deliveries instead of a few milliseconds' worth.
        let now = tokio::time::Instant::now();
        let next = h.waiting.front().map(|d| {
            if open {
                d.due.unwrap_or(now).max(last_round + RECORD_ROUND_GAP)
            } else {
                now
            }
        });
        tokio::select! {
            received = h.rx.recv(), if open => match received {
                Some(d) => {
                    queued += d.ids.len();
                    h.waiting.push_back(d);
                    let mut dropped = 0;
                    while queued > MAX_WAITING {
                        let Some(old) = h.waiting.pop_front() else { break };
                        queued -= old.ids.len();
                        dropped += old.ids.len();
                        ctx.wheel.settle(old.ids);
                    }
                    if dropped > 0 {
                        tracing::warn!(runs = dropped, "the database is far behind recording deliveries; the oldest are left to the read-back");
                    }
                }
                None => open = false,
            },
            _ = tokio::time::sleep_until(next.unwrap_or(now)), if next.is_some() => {
                let now = tokio::time::Instant::now();
                last_round = now;
                let mut due = Vec::new();
                let mut runs = 0;
                while let Some(d) = h.waiting.front() {
                    let ready = !open || d.due.is_none_or(|at| at <= now);
                    if !ready || (runs > 0 && runs + d.ids.len() > MAX_RECORD) {
                        break;
                    }
                    runs += d.ids.len();
                    due.extend(h.waiting.pop_front());
                }
                queued -= runs;
                let ids: Vec<i64> = due.iter().flat_map(|d| d.ids.iter().copied()).collect();
                let written = async { write_deliveries(&ctx, due).await.map_err(anyhow::Error::from) };
                match guard::round("recording delivered runs", written).await {
                    Ok(()) => ctx.wheel.recorded(ids),
                    Err(e) => {
                        tracing::warn!(error = %e, "recording delivered runs failed; they stay publishing and are read back");
                        ctx.wheel.settle(ids);
                    }
                }
            }
        }
    }
}

/// What the recorder holds. Whatever is left when its task ends, even by a panic, is settled in
/// the timer, so that the read-back takes those runs.
struct Unrecorded {
    wheel: Arc<super::wheel::Wheel>,
    waiting: VecDeque<Delivered>,
    rx: mpsc::UnboundedReceiver<Delivered>,
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(d) = self.rx.try_recv() {
            self.waiting.push_back(d);
        }
        let ids: Vec<i64> = self.waiting.drain(..).flat_map(|d| d.ids).collect();
        self.wheel.settle(ids);
    }
}

/// The rows of the delivery record for a recorder round, as `publish/record_deliveries` takes
/// them: one per job type and partition, with the runs of each in offset order in flat arrays
/// (`start`..=`end`, 1-based).
#[derive(Debug, Default, PartialEq)]
struct DeliveryRows {
    job_types: Vec<String>,
    partitions: Vec<i32>,
    lowest_id: Vec<i64>,
    highest_id: Vec<i64>,
    first_fire: Vec<DateTime<Utc>>,
    last_fire: Vec<DateTime<Utc>>,
    last_offset: Vec<i64>,
    start: Vec<i32>,
    end: Vec<i32>,
    ids: Vec<i64>,
    offsets: Vec<i64>,
    fire_times: Vec<DateTime<Utc>>,
    acked_at: Vec<DateTime<Utc>>,
}

/// One delivered run as [`DeliveryRows::group`] sorts them: job type, partition, offset, id,
/// fire time, acknowledgement time.
type DeliveredRun = (String, i32, i64, i64, DateTime<Utc>, DateTime<Utc>);

impl DeliveryRows {
    /// Groups `deliveries` by job type and partition, each group in offset order. Fewer than
    /// `i32::MAX` runs (a round holds at most [`MAX_RECORD`] and one batch more).
    fn group(deliveries: Vec<Delivered>) -> Self {
        // Sorted by job type, partition and offset.
        let mut runs: Vec<DeliveredRun> = Vec::new();
        for d in deliveries {
            runs.extend(
                d.job_types
                    .into_iter()
                    .zip(d.partitions)
                    .zip(d.offsets)
                    .zip(d.ids)
                    .zip(d.fire_times)
                    .zip(d.acked_at)
                    .map(|(((((jt, p), o), id), f), a)| (jt, p, o, id, f, a)),
            );
        }
        runs.sort_unstable_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
        let mut rows = DeliveryRows::default();
        for (k, (job_type, partition, offset, id, fire, acked)) in runs.into_iter().enumerate() {
            let position = i32::try_from(k + 1).unwrap_or(i32::MAX);
            let same_group = rows.job_types.last() == Some(&job_type)
                && rows.partitions.last() == Some(&partition);
            if same_group {
                let g = rows.job_types.len() - 1;
                rows.lowest_id[g] = rows.lowest_id[g].min(id);
                rows.highest_id[g] = rows.highest_id[g].max(id);
                rows.first_fire[g] = rows.first_fire[g].min(fire);
                rows.last_fire[g] = rows.last_fire[g].max(fire);
                rows.last_offset[g] = offset;
                rows.end[g] = position;
            } else {
                rows.job_types.push(job_type);
                rows.partitions.push(partition);
                rows.lowest_id.push(id);
                rows.highest_id.push(id);
                rows.first_fire.push(fire);
                rows.last_fire.push(fire);
                rows.last_offset.push(offset);
                rows.start.push(position);
                rows.end.push(position);
            }
            rows.ids.push(id);
            rows.offsets.push(offset);
            rows.fire_times.push(fire);
            rows.acked_at.push(acked);
        }
        rows
    }
}

/// Records `deliveries` in the delivery record, one row per job type and partition. The runs'
/// own rows stay as they are: a run left `publishing` that the record holds was published (see
/// migration 0019); one a worker started meanwhile was written by its `started` event.
async fn write_deliveries(
    ctx: &SchedulerContext,
    deliveries: Vec<Delivered>,
) -> Result<(), sqlx::Error> {
    let rows = DeliveryRows::group(deliveries);
    if rows.ids.is_empty() {
        return Ok(());
    }
    sqlx::query(sql!("publish/record_deliveries"))
        .bind(&rows.job_types)
        .bind(&rows.partitions)
        .bind(&rows.lowest_id)
        .bind(&rows.highest_id)
        .bind(&rows.first_fire)
        .bind(&rows.last_fire)
        .bind(&rows.last_offset)
        .bind(&rows.start)
        .bind(&rows.end)
        .bind(&rows.ids)
        .bind(&rows.offsets)
        .bind(&rows.fire_times)
        .bind(&rows.acked_at)
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::LeaseEpoch;
    use crate::trigger::PreClaim;
    use cadenza_schemas::{BlockStrategy, JobId, RouteStrategy, TriggerId, TriggerKind};

    #[test]
    fn deliveries_are_grouped_by_type_and_partition_in_offset_order() {
        let t = |s: i64| DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        let delivered = |rows: &[(i64, &str, i32, i64, i64)]| Delivered {
            due: None,
            ids: rows.iter().map(|r| r.0).collect(),
            job_types: rows.iter().map(|r| r.1.to_owned()).collect(),
            partitions: rows.iter().map(|r| r.2).collect(),
            offsets: rows.iter().map(|r| r.3).collect(),
            fire_times: rows.iter().map(|r| t(r.4)).collect(),
            acked_at: rows.iter().map(|r| t(r.4 + 1)).collect(),
        };
        // Two batches, acknowledged out of offset order, over two types and partitions.
        let rows = DeliveryRows::group(vec![
            delivered(&[(10, "b", 0, 7, 3), (11, "a", 1, 4, 1), (12, "a", 0, 9, 2)]),
            delivered(&[(13, "a", 1, 2, 5), (9, "a", 1, 5, 0)]),
        ]);
        assert_eq!(rows.job_types, ["a", "a", "b"]);
        assert_eq!(rows.partitions, [0, 1, 0]);
        assert_eq!(rows.ids, [12, 13, 11, 9, 10], "each group in offset order");
        assert_eq!(rows.offsets, [9, 2, 4, 5, 7]);
        assert_eq!(
            (rows.start.clone(), rows.end.clone()),
            (vec![1, 2, 5], vec![1, 4, 5])
        );
        assert_eq!(
            (rows.lowest_id.clone(), rows.highest_id.clone()),
            (vec![12, 9, 10], vec![12, 13, 10])
        );
        assert_eq!(rows.first_fire, [t(2), t(0), t(3)]);
        assert_eq!(rows.last_fire, [t(2), t(5), t(3)]);
        assert_eq!(rows.last_offset, [9, 5, 7]);
        assert_eq!(
            rows.acked_at[1],
            t(6),
            "acknowledgement times travel with their runs"
        );
        assert_eq!(DeliveryRows::group(Vec::new()), DeliveryRows::default());
    }

    fn taken(id: i64, job: i64, shard_index: u32, fire_time: DateTime<Utc>) -> Routed {
        let route = Route {
            partition: 0,
            worker: None,
        };
        Routed {
            trigger: PendingTrigger {
                id: TriggerId(id),
                job_id: JobId(job),
                job_type: JobType::parse("t").unwrap(),
                shard: ShardId(0),
                kind: TriggerKind::FixRate,
                fire_time,
                params: String::new(),
                block: BlockStrategy::SerialExecution,
                timeout_ms: 0,
                attempt: 1,
                shard_index,
                shard_total: 1,
                route: RouteStrategy::Round,
                requested_worker: None,
                workflow: None,
                claim: Some(PreClaim {
                    route: route.clone(),
                    epoch: LeaseEpoch(1),
                    plan_gen: 0,
                    rewrite: false,
                }),
                released_at: None,
            },
            route,
            term: Term {
                shard: ShardId(0),
                epoch: LeaseEpoch(1),
                trusted_until: std::time::Instant::now(),
            },
            moved: false,
        }
    }

    fn rule(id: i64, misfire: &str, threshold_ms: i64, now: DateTime<Utc>) -> JobCheck {
        JobCheck {
            id,
            plan_gen: 0,
            misfire: misfire.to_owned(),
            misfire_threshold_ms: threshold_ms,
            db_now: now,
        }
    }

    fn ids(late: &[(&Routed, &JobCheck)]) -> Vec<i64> {
        let mut ids: Vec<i64> = late.iter().map(|(r, _)| r.trigger.id.0).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn late_runs_follow_their_jobs_misfire_strategy() {
        let now = Utc::now();
        let ago = |ms: i64| now - chrono::Duration::milliseconds(ms);
        let runs = [
            // job 1, do_nothing, 1 s: late by 3 s and 2 s; 500 ms late and one not yet due
            // are within the threshold.
            taken(1, 1, 0, ago(3_000)),
            taken(2, 1, 0, ago(2_000)),
            taken(3, 1, 0, ago(500)),
            taken(4, 1, 0, ago(-200)),
            // job 2, fire_once_now, 1 s: late runs of both broadcast shards.
            taken(5, 2, 0, ago(3_000)),
            taken(6, 2, 0, ago(2_000)),
            taken(7, 2, 1, ago(3_000)),
            taken(8, 2, 0, ago(100)),
            // job 3, fire_all: every late run is sent.
            taken(9, 3, 0, ago(3_000)),
            taken(10, 3, 0, ago(2_000)),
            // job 4: a threshold of 0 makes any run taken after its fire time late.
            taken(11, 4, 0, ago(1)),
            taken(12, 4, 0, ago(-1)),
            // job 5: a rule that cannot be read sends.
            taken(13, 5, 0, ago(9_000)),
        ];
        let checks = [
            rule(1, "do_nothing", 1_000, now),
            rule(2, "fire_once_now", 1_000, now),
            rule(3, "fire_all", 1_000, now),
            rule(4, "do_nothing", 0, now),
            rule(5, "sometimes", 0, now),
        ];
        let rules: HashMap<i64, &JobCheck> = checks.iter().map(|c| (c.id, c)).collect();
        let all: Vec<&Routed> = runs.iter().collect();
        let late = late_runs(&all, &rules, now);
        // fire_once_now's late runs are all candidates: the query keeps the latest.
        assert_eq!(ids(&late), vec![1, 2, 5, 6, 7, 11]);
        let (_, rule) = late.iter().find(|(r, _)| r.trigger.id.0 == 5).unwrap();
        assert_eq!(rule.misfire, "fire_once_now");
        // Only runs of a job's schedule misfire.
        let mut manual = taken(14, 1, 0, ago(9_000));
        manual.trigger.kind = TriggerKind::Manual;
        assert!(late_runs(&[&manual], &rules, now).is_empty());
        // A run of a schedule left `scheduled` (not written claimed) follows its rule as well.
        let mut fresh = taken(15, 1, 0, ago(9_000));
        fresh.trigger.claim = None;
        assert_eq!(ids(&late_runs(&[&fresh], &rules, now)), vec![15]);
        // A job whose rule was not read (not among the checks) sends its runs.
        let none = late_runs(&all, &HashMap::new(), now);
        assert!(none.is_empty());
    }

    /// Runs handed to the recorder stay known to the timer (the read-back leaves them alone)
    /// until they are recorded; whatever the recorder still holds when its task ends, queued or
    /// not yet received, is settled so that the read-back takes it.
    #[tokio::test]
    async fn runs_the_recorder_still_holds_are_settled_when_it_ends() {
        let wheel = Arc::new(super::super::wheel::Wheel::default());
        let past = Utc::now() - chrono::Duration::seconds(1);
        wheel.insert((1..=3).map(|id| taken(id, id, 0, past).trigger).collect());
        let clock = crate::scheduler::clock::DbClock::default();
        let cancel = CancellationToken::new();
        let out = wheel
            .next_due(10, &clock, std::time::Duration::ZERO, &cancel)
            .await;
        assert_eq!(out.len(), 3);
        assert_eq!(
            wheel.known_among([1, 2, 3]).len(),
            3,
            "taken runs stay known"
        );
        let delivered = |ids: Vec<i64>| Delivered {
            ids,
            ..Delivered::default()
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let guard = Unrecorded {
            wheel: wheel.clone(),
            waiting: VecDeque::from([delivered(vec![1])]),
            rx,
        };
        tx.send(delivered(vec![2])).unwrap();
        // Run 3 was never handed to the recorder: its sender settles it, not the recorder.
        drop(guard);
        assert_eq!(
            wheel.known_among([1, 2, 3]),
            HashSet::from([3]),
            "queued and unreceived deliveries are settled"
        );
    }

    /// The kinds whose misfire strategy applies are named the same in Rust and in the
    /// statements that select runs of a schedule.
    #[test]
    fn schedule_kinds_are_the_same_in_rust_and_sql() {
        let list = |schedule: bool| {
            let kinds: Vec<String> = TriggerKind::ALL
                .iter()
                .filter(|k| k.is_schedule() == schedule)
                .map(|k| format!("'{}'", k.as_str()))
                .collect();
            format!("kind IN ({})", kinds.join(", "))
        };
        let schedule = list(true);
        for (name, text) in [
            ("publish/misfire_taken", sql!("publish/misfire_taken")),
            ("recover/misfire_overdue", sql!("recover/misfire_overdue")),
            ("jobs/drop_scheduled_runs", sql!("jobs/drop_scheduled_runs")),
            (
                "triggers/overdue_scheduled",
                sql!("triggers/overdue_scheduled"),
            ),
            (
                "triggers/pending_for_shards",
                sql!("triggers/pending_for_shards"),
            ),
            // The index the sweep's load reads: its predicate must be implied by the query's.
            (
                "migration 0017 (triggers_scheduled)",
                include_str!("../../migrations/0017_scheduled_runs_index.sql"),
            ),
        ] {
            assert!(
                text.contains(&schedule),
                "{name} does not select {schedule}"
            );
        }
        // The sweep loads the other kinds with this statement, from this index: between them,
        // every kind.
        let requested = list(false);
        for (name, text) in [
            (
                "triggers/pending_requested",
                sql!("triggers/pending_requested"),
            ),
            (
                "triggers/pending_for_shards",
                sql!("triggers/pending_for_shards"),
            ),
            (
                "migration 0014 (triggers_requested)",
                include_str!("../../migrations/0014_workflows.sql"),
            ),
        ] {
            assert!(
                text.contains(&requested),
                "{name} does not select {requested}"
            );
        }
    }

    /// A late run due by the time a catch-up of its job and broadcast shard was taken is
    /// covered by it; one due later, or of another job or shard, is not.
    #[test]
    fn a_catch_up_covers_the_fire_times_due_when_it_was_taken() {
        let at = Utc::now();
        let ms = |n: i64| at + chrono::Duration::milliseconds(n);
        let run = |job: i64, shard_index: u32, fire_time: DateTime<Utc>| {
            taken(1, job, shard_index, fire_time).trigger
        };
        let c = CatchUps::default();
        assert!(!c.covers(&run(1, 0, ms(-5_000))), "nothing sent yet");
        c.taken(&[(99, 1, 0)], at);
        assert!(c.covers(&run(1, 0, ms(-5_000))));
        assert!(c.covers(&run(1, 0, at)));
        assert!(!c.covers(&run(1, 0, ms(1))), "due after the catch-up");
        assert!(!c.covers(&run(1, 1, ms(-5_000))), "another broadcast shard");
        assert!(!c.covers(&run(2, 0, ms(-5_000))), "another job");
        // The catch-up itself, taken again (its send failed), is not covered.
        let mut again = run(1, 0, ms(-5_000));
        again.id = TriggerId(99);
        assert!(!c.covers(&again));
        // An earlier catch-up noted late does not move it back.
        c.taken(&[(98, 1, 0)], ms(-3_000));
        assert!(c.covers(&run(1, 0, ms(-1_000))));
        assert!(!c.covers(&again));
        // Past the size bound, catch-ups older than the time kept are forgotten.
        let old: Vec<(i64, i64, u32)> = (10..10 + CATCH_UPS_KEPT as i64)
            .map(|j| (j, j, 0))
            .collect();
        c.taken(&old, at - CATCH_UP_KEPT_FOR - chrono::Duration::seconds(1));
        c.taken(&[(97, 2, 0)], at);
        assert!(!c.covers(&run(10, 0, ms(-3_600_000))), "forgotten");
        assert!(c.covers(&run(1, 0, ms(-1_000))), "recent ones are kept");
        assert!(c.covers(&run(2, 0, ms(-1_000))));
    }
}
