//! The scan: claim due jobs of held shards and write their fire times down as triggers, routed
//! and `publishing` under their shard's lease epoch, one transaction per batch ([`Scanner::run_once`]). What a batch of due jobs becomes
//! is decided without I/O: [`plan_fires`] applies the misfire rules to one job, `expand` turns
//! the plans into rows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{
    JobId, JobType, MisfireStrategy, RouteStrategy, RunStatus, Schedule, TriggerKind,
};
use cadenza_worker::telemetry;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use sqlx::PgConnection;

use super::{lease, SchedulerContext, SchedulerError};
use crate::guard::{self, Backoff};
use crate::ids::ShardId;
use crate::route::{RouteInput, RunRef};
use crate::schedule::JobSchedule;
use crate::trigger::{rows_to_pending, PendingRow};

/// Most fire times written for one job in one scan; a job with more due continues next scan.
pub const MAX_FIRES_PER_JOB: usize = 10_000;

/// Longest pause between scans while they fail.
pub const MAX_SCAN_BACKOFF: Duration = Duration::from_secs(5);

/// The scan claims no jobs while the publisher is further behind than this (the earliest
/// trigger waiting in the timer was due to be taken longer ago). Past the publication ceiling,
/// writing more runs ahead would only take database time from publishing those already
/// written; meanwhile the jobs' fire times pass, and when the scan claims them again the
/// misfire rules apply (fires later than the job's threshold are recorded `misfired` in one
/// write each, the rest fire late). So the load past the ceiling is what misfires, not the
/// whole window.
pub const HOLD_WHEN_BEHIND: Duration = Duration::from_secs(1);

/// Pause before looking again while the scan holds back.
const HOLD_PAUSE: Duration = Duration::from_millis(50);

/// Most fire times looked at for one job in one scan, skipped ones included (a job with a long
/// gap of missed fire times counts them over several scans instead of holding one up).
pub const MAX_STEPS_PER_JOB: usize = 100_000;

/// A fire time to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFire {
    pub fire_time: DateTime<Utc>,
    pub kind: TriggerKind,
}

/// Fire times a scan skipped by the job's misfire strategy: the first, the last, how many.
/// Every fire time of the schedule from `first` to `last` that has no run is one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub count: i64,
}

impl Skipped {
    fn add(span: &mut Option<Skipped>, t: DateTime<Utc>) {
        match span {
            Some(s) => {
                s.last = t;
                s.count += 1;
            }
            None => {
                *span = Some(Skipped {
                    first: t,
                    last: t,
                    count: 1,
                })
            }
        }
    }
}

/// What the scan does with one due job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub fires: Vec<PlannedFire>,
    /// The fire times missed and not fired (no row is written for them).
    pub skipped: Option<Skipped>,
    /// The next fire time not written yet (`None`: nothing more until something else sets it).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// False when a `once` job has fired and disables itself.
    pub enabled: bool,
}

/// Plans the fire times of a job from `next_fire_at` up to `until`, as of `now` (database clock).
///
/// Fire times earlier than `now - threshold` are misfires and follow the job's strategy:
/// `do_nothing` skips them; `fire_all` fires each; `fire_once_now` skips all but the last and
/// fires the last once, as kind `misfire`. Skipped fire times cost no row: they are counted in
/// [`Plan::skipped`]. Later fire times fire normally (those already past but within the
/// threshold fire at once). A `fix_delay` job whose fire time was skipped fires again its delay
/// after `now`, as if a run had ended now.
pub fn plan_fires(
    schedule: &JobSchedule,
    misfire: MisfireStrategy,
    threshold: chrono::Duration,
    next_fire_at: DateTime<Utc>,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Plan {
    let kind = schedule.trigger_kind();
    // Durations are bounded at validation; the checked form keeps any stored value harmless.
    let misfire_before = now
        .checked_sub_signed(threshold)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let fire = |fire_time, kind| PlannedFire { fire_time, kind };
    let mut fires = Vec::new();
    let mut skipped = None;
    let mut next = Some(next_fire_at);
    // fire_once_now: the latest missed fire time, fired once the missed ones end.
    let mut last_missed: Option<DateTime<Utc>> = None;
    let mut steps = 0usize;
    while let Some(t) = next {
        if t > until || fires.len() >= MAX_FIRES_PER_JOB || steps >= MAX_STEPS_PER_JOB {
            break;
        }
        steps += 1;
        if t < misfire_before {
            match misfire {
                MisfireStrategy::FireAll => fires.push(fire(t, kind)),
                MisfireStrategy::DoNothing => Skipped::add(&mut skipped, t),
                MisfireStrategy::FireOnceNow => {
                    if let Some(prev) = last_missed.replace(t) {
                        Skipped::add(&mut skipped, prev);
                    }
                }
            }
        } else if let Some(prev) = last_missed.take() {
            fires.push(fire(prev, TriggerKind::Misfire));
            continue; // look at `t` again now that the missed one is written
        } else {
            fires.push(fire(t, kind));
        }
        next = schedule.next_after(t);
    }
    // The schedule ran out (or a per-job cap was hit) while the last missed one was pending.
    if let Some(prev) = last_missed.take() {
        if next.is_none() || next.is_some_and(|n| n >= misfire_before) {
            fires.push(fire(prev, TriggerKind::Misfire));
        } else {
            // More missed fire times follow; continue from this one next scan.
            next = Some(prev);
        }
    }
    if let JobSchedule::FixDelay(delay) = schedule {
        if fires.is_empty() && skipped.is_some() && next.is_none() {
            next = now.checked_add_signed(*delay);
        }
    }
    let enabled = !(matches!(schedule, JobSchedule::Once(_)) && next.is_none());
    Plan {
        fires,
        skipped,
        next_fire_at: next,
        enabled,
    }
}

#[derive(Debug, sqlx::FromRow)]
struct DueJob {
    id: i64,
    schedule: sqlx::types::Json<Schedule>,
    misfire: String,
    misfire_threshold_ms: i64,
    next_fire_at: DateTime<Utc>,
    db_now: DateTime<Utc>,
    job_type: String,
    route: String,
    shard: i32,
    plan_gen: i64,
    /// The job's open span of skipped fire times (`misfire_count` 0: none).
    misfire_first: Option<DateTime<Utc>>,
    misfire_last: Option<DateTime<Utc>>,
    misfire_count: i64,
    /// Its runs are written `queued` (a concurrency group, or an overlap policy).
    queued: bool,
    /// Its cron fire times are moved by the offset derived from this and its id.
    jitter_ms: i64,
}

impl DueJob {
    fn open_span(&self) -> Option<Skipped> {
        match (self.misfire_first, self.misfire_last) {
            (Some(first), Some(last)) if self.misfire_count > 0 => Some(Skipped {
                first,
                last,
                count: self.misfire_count,
            }),
            _ => None,
        }
    }
}

/// A job's open span of skipped fire times closes (into `misfires`, counted in the daily
/// reports) once it has skipped nothing for this long; the maintenance round closes spans of
/// jobs the scan no longer claims.
pub const SPAN_QUIET: chrono::Duration = chrono::Duration::seconds(60);
/// A span closes before it grows longer than this, or into another UTC day.
pub const SPAN_LONGEST: chrono::Duration = chrono::Duration::hours(1);

/// Whether a scan that skipped `new` (perhaps nothing) of a job closes the job's `open` span
/// first, at `now`.
fn closes(open: Option<Skipped>, new: Option<Skipped>, now: DateTime<Utc>) -> bool {
    let Some(open) = open else {
        return false;
    };
    let quiet_until = new.map_or(now, |n| n.first);
    quiet_until - open.last > SPAN_QUIET
        || new.is_some_and(|n| {
            n.first.date_naive() != open.first.date_naive() || n.last - open.first > SPAN_LONGEST
        })
}

pub struct Scanner {
    ctx: Arc<SchedulerContext>,
}

/// What one scan did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScanOutcome {
    pub jobs: usize,
    pub triggers: usize,
    pub elapsed: Duration,
    /// Claimed nothing: the publisher was further behind than [`HOLD_WHEN_BEHIND`].
    pub held: bool,
}

/// Plans one due job. A job whose stored definition cannot be read, or whose planning fails in
/// any way, stops firing (logged) instead of stopping the scan of every other job.
fn plan_job(job: &DueJob, horizon: chrono::Duration) -> Plan {
    let stop = |what: &str, error: &dyn std::fmt::Display| {
        tracing::error!(job_id = job.id, %error, "{what}; the job stops firing until it is edited");
        Plan {
            fires: vec![],
            skipped: None,
            next_fire_at: None,
            enabled: true,
        }
    };
    let schedule = match JobSchedule::from_stored(&job.schedule.0) {
        Ok(s) => s.jittered(job.id, job.jitter_ms),
        Err(e) => return stop("stored schedule unreadable", &e),
    };
    let misfire: MisfireStrategy = match job.misfire.parse() {
        Ok(m) => m,
        Err(e) => return stop("stored misfire strategy unreadable", &e),
    };
    let until = job
        .db_now
        .checked_add_signed(horizon)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    let planned = std::panic::catch_unwind(|| {
        plan_fires(
            &schedule,
            misfire,
            chrono::Duration::milliseconds(job.misfire_threshold_ms),
            job.next_fire_at,
            job.db_now,
            until,
        )
    });
    planned.unwrap_or_else(|panic| {
        stop(
            "planning its fire times failed",
            &crate::guard::panic_message(&*panic),
        )
    })
}

/// The rows one scan writes: the triggers (one array per column of `scan/insert_triggers`) and
/// the jobs' advances (`scan/advance_jobs`).
#[derive(Debug, Default, PartialEq, Eq)]
struct Expansion {
    t_job: Vec<i64>,
    t_kind: Vec<&'static str>,
    t_status: Vec<&'static str>,
    t_time: Vec<DateTime<Utc>>,
    t_shard_index: Vec<i32>,
    t_shard_total: Vec<i32>,
    /// Index in the due jobs of each row's job.
    t_due: Vec<usize>,
    /// Of a run written claimed (`publishing`): its partition, routed worker and lease epoch.
    t_partition: Vec<Option<i32>>,
    t_worker: Vec<Option<String>>,
    t_epoch: Vec<Option<i64>>,
    a_job: Vec<i64>,
    a_next: Vec<Option<DateTime<Utc>>>,
    a_enabled: Vec<bool>,
    /// Per job: the fire times it skipped now, and whether its open span closes first.
    a_skip_first: Vec<Option<DateTime<Utc>>>,
    a_skip_last: Vec<Option<DateTime<Utc>>>,
    a_skip_count: Vec<i64>,
    a_close: Vec<bool>,
}

/// Step 3 of a scan, without I/O: plans each due job ([`plan_job`]) and expands its fires into
/// trigger rows. A fire becomes `broadcast_runs(job)` runs (shard `i` of `n`: more than one only
/// for `sharding_broadcast`); skipped fire times become no row, only counts on the job.
fn expand(
    due: &[DueJob],
    horizon: chrono::Duration,
    broadcast_runs: impl Fn(&DueJob) -> i32,
) -> Expansion {
    let mut x = Expansion::default();
    for (j, job) in due.iter().enumerate() {
        let plan = plan_job(job, horizon);
        let runs = broadcast_runs(job);
        for f in &plan.fires {
            for i in 0..runs {
                x.t_job.push(job.id);
                x.t_kind.push(f.kind.as_str());
                x.t_status.push(if job.queued {
                    RunStatus::Queued.as_str()
                } else {
                    RunStatus::Scheduled.as_str()
                });
                x.t_time.push(f.fire_time);
                x.t_shard_index.push(i);
                x.t_shard_total.push(runs);
                x.t_due.push(j);
                x.t_partition.push(None);
                x.t_worker.push(None);
                x.t_epoch.push(None);
            }
        }
        x.a_job.push(job.id);
        x.a_next.push(plan.next_fire_at);
        x.a_enabled.push(plan.enabled);
        x.a_skip_first.push(plan.skipped.map(|s| s.first));
        x.a_skip_last.push(plan.skipped.map(|s| s.last));
        x.a_skip_count.push(plan.skipped.map_or(0, |s| s.count));
        x.a_close
            .push(closes(job.open_span(), plan.skipped, job.db_now));
    }
    x
}

impl Expansion {
    /// Fire times skipped, per job type of `due`, for `cadenza_runs_ended_total`.
    fn skipped(&self, due: &[DueJob]) -> crate::outcome::Ended {
        let mut by_type: HashMap<&str, i64> = HashMap::new();
        for (job, n) in due.iter().zip(&self.a_skip_count) {
            if *n > 0 {
                *by_type.entry(job.job_type.as_str()).or_default() += n;
            }
        }
        crate::outcome::Ended::of_status(
            RunStatus::Misfired,
            by_type.into_iter().map(|(t, n)| (t.to_owned(), n)),
        )
    }
}

/// What step 4 wrote: the trigger rows, and the skipped fire times to count once committed.
struct Written {
    rows: Vec<PendingRow>,
    ended: crate::outcome::Ended,
}

/// Step 4 of a scan, inside its transaction: inserts the triggers, advances the jobs (with their
/// skipped fire times) and counts the spans that closed in the daily reports.
async fn write(
    conn: &mut PgConnection,
    x: &Expansion,
    due: &[DueJob],
) -> Result<Written, SchedulerError> {
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("scan/insert_triggers"))
        .bind(&x.t_job)
        .bind(&x.t_kind)
        .bind(&x.t_status)
        .bind(&x.t_time)
        .bind(&x.t_shard_index)
        .bind(&x.t_shard_total)
        .bind(&x.t_partition)
        .bind(&x.t_worker)
        .bind(&x.t_epoch)
        .fetch_all(&mut *conn)
        .await?;
    // Spans close rarely (once per job and burst): a statement only when one does.
    let closing: Vec<i64> = x
        .a_job
        .iter()
        .zip(&x.a_close)
        .filter(|(_, c)| **c)
        .map(|(j, _)| *j)
        .collect();
    if !closing.is_empty() {
        let closed: Vec<crate::misfires::ClosedSpan> = sqlx::query_as(sql!("scan/close_spans"))
            .bind(&closing)
            .fetch_all(&mut *conn)
            .await?;
        crate::misfires::count_closed(&mut *conn, &closed).await?;
    }
    sqlx::query(sql!("scan/advance_jobs"))
        .bind(&x.a_job)
        .bind(&x.a_next)
        .bind(&x.a_enabled)
        .bind(&x.a_skip_first)
        .bind(&x.a_skip_last)
        .bind(&x.a_skip_count)
        .bind(&x.a_close)
        .execute(&mut *conn)
        .await?;
    Ok(Written {
        rows,
        ended: x.skipped(due),
    })
}

/// Scan loops per admin. Each claims the earliest due jobs its shards hold that no other
/// transaction has locked, so they never claim the same job; two keep PostgreSQL busy while
/// one writes its batch.
pub const SCANNERS: usize = 2;

/// What the scan needs to route a due job's runs: its job type, strategy, the number of
/// partitions of its topic, and the lease epoch of its shard.
type Routing = (JobType, RouteStrategy, i32, i64);

impl Scanner {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self { ctx }
    }

    /// Step 3b: claims the `scheduled` rows of `x` for publication as they are written: routes
    /// each (partition and worker, as the publisher would when it takes it) and marks it
    /// `publishing` under the confirmed lease epoch of its shard, so it is written once before
    /// it is sent. A row whose job type or strategy cannot be read, or whose topic cannot be
    /// reached now, stays `scheduled` for the publisher to route and mark.
    async fn claim(&self, x: &mut Expansion, due: &[DueJob], confirmed: &[lease::Term]) {
        let epochs: HashMap<i32, i64> = confirmed
            .iter()
            .map(|t| (t.shard.to_db(), t.epoch.0))
            .collect();
        let mut partitions: HashMap<String, Option<i32>> = HashMap::new();
        // Per due job, once looked at: what routing it needs, or `None` when its rows stay
        // `scheduled`.
        let mut jobs: Vec<Option<Option<Routing>>> = vec![None; due.len()];
        for r in 0..x.t_job.len() {
            if x.t_status[r] != RunStatus::Scheduled.as_str() {
                continue;
            }
            let j = x.t_due[r];
            if jobs[j].is_none() {
                let job = &due[j];
                let parsed = (
                    JobType::parse(&job.job_type),
                    job.route.parse::<RouteStrategy>(),
                    epochs.get(&job.shard),
                );
                jobs[j] = Some(match parsed {
                    (Ok(job_type), Ok(route), Some(epoch)) => {
                        let n = match partitions.get(&job.job_type) {
                            Some(n) => *n,
                            None => {
                                let n = self
                                    .ctx
                                    .kafka
                                    .ensure_trigger_topic(&self.ctx.pool, &job_type)
                                    .await
                                    .map_err(|e| tracing::warn!(job_type = %job.job_type, error = %e, "trigger topic not reachable; its runs are written scheduled and routed when they are taken"))
                                    .ok();
                                partitions.insert(job.job_type.clone(), n);
                                n
                            }
                        };
                        n.map(|n| (job_type, route, n, *epoch))
                    }
                    _ => None,
                });
            }
            let Some(Some((job_type, route, n, epoch))) = &jobs[j] else {
                continue;
            };
            let input = RouteInput {
                run: RunRef {
                    job_id: JobId(due[j].id),
                    route: *route,
                    shard_index: u32::try_from(x.t_shard_index[r]).unwrap_or(0),
                },
                job_type,
                requested_worker: None,
            };
            let chosen = self.ctx.router.select_for(&input, *n, &self.ctx.registry);
            x.t_status[r] = RunStatus::Publishing.as_str();
            x.t_partition[r] = Some(chosen.partition);
            x.t_worker[r] = chosen.worker.map(|w| w.0);
            x.t_epoch[r] = Some(*epoch);
        }
    }

    /// One batch, in one transaction:
    ///
    /// 0. unless the publisher is further behind than [`HOLD_WHEN_BEHIND`] (then nothing);
    /// 1. confirm the leases of the held shards ([`lease::confirm`], `FOR KEY SHARE`);
    /// 2. claim up to `scan_batch` jobs of the confirmed shards due within the lookahead
    ///    (`FOR NO KEY UPDATE SKIP LOCKED`);
    /// 3. expand them into trigger rows up to the planning horizon (twice the lookahead) and job
    ///    advances (`expand`, no I/O);
    /// 4. write them: insert the triggers, advance the jobs, follow up the misfired runs, commit;
    /// 5. hand the triggers (`publishing`, or `scheduled` where routing failed) to the timer.
    pub async fn run_once(&self) -> Result<ScanOutcome, SchedulerError> {
        let started = std::time::Instant::now();
        let cfg = &self.ctx.config;
        // 0. (Also while no shard is held, so the gauge never keeps a stale value.)
        let behind_ms = self
            .ctx
            .wheel
            .behind_ms(self.ctx.clock.now().timestamp_millis(), cfg.publish_ahead());
        crate::metrics::metrics()
            .publication_behind
            .set(behind_ms as f64 / 1000.0);
        let held = self.ctx.leases.terms();
        if held.is_empty() {
            return Ok(ScanOutcome::default());
        }
        if Duration::from_millis(behind_ms) > HOLD_WHEN_BEHIND {
            return Ok(ScanOutcome {
                held: true,
                ..ScanOutcome::default()
            });
        }
        // The runs it writes `publishing` hold their shards' settled marks back from before the
        // transaction begins.
        let writing = self.ctx.wheel.writing(&self.ctx.clock);
        let mut tx = self.ctx.pool.begin().await?;
        // 1.
        let confirmed = lease::confirm(&mut tx, &self.ctx.admin_id, &held).await?;
        if confirmed.is_empty() {
            return Ok(ScanOutcome::default());
        }
        // 2. A plain index scan, never a bitmap scan (see the statement).
        sqlx::query("SET LOCAL enable_bitmapscan = off")
            .execute(&mut *tx)
            .await?;
        let due: Vec<DueJob> = sqlx::query_as(sql!("scan/due_jobs"))
            .bind(ShardId::to_db_all(confirmed.iter().map(|t| &t.shard)))
            .bind(cfg.lookahead_ms as f64)
            .bind(cfg.scan_batch)
            .fetch_all(&mut *tx)
            .await?;
        sqlx::query("SET LOCAL enable_bitmapscan = DEFAULT")
            .execute(&mut *tx)
            .await?;
        if due.is_empty() {
            tx.commit().await?;
            return Ok(ScanOutcome::default());
        }
        let span = if telemetry::exporting() {
            tracing::info_span!(
                "scan",
                shards = confirmed.len(),
                jobs = due.len(),
                triggers = tracing::field::Empty
            )
        } else {
            tracing::Span::none()
        };
        let write = async {
            // 3. A `sharding_broadcast` fire is one run per live worker (shard i of n).
            let horizon = chrono::Duration::milliseconds(
                i64::try_from(cfg.plan_horizon_ms()).unwrap_or(i64::MAX),
            );
            let mut expansion = expand(&due, horizon, |job| {
                self.ctx
                    .registry
                    .shard_total_stored(&job.route, &job.job_type)
            });
            self.claim(&mut expansion, &due, &confirmed).await;
            // 4.
            let inserted = write(&mut tx, &expansion, &due).await?;
            let ids: Vec<i64> = inserted.rows.iter().map(|r| r.id).collect();
            self.ctx.wheel.reserve(ids.iter().copied());
            let committed = tx.commit().await;
            // Even when the commit reports an error: it may have committed all the same, and
            // the sweep finds out (`Wheel::unsettled_unknown`).
            writing.marked(
                inserted
                    .rows
                    .iter()
                    .filter(|r| r.status == RunStatus::Publishing.as_str())
                    .filter_map(|r| Some((r.id, ShardId::from_db(r.shard).ok()?))),
            );
            if let Err(e) = committed {
                self.ctx.wheel.unreserve(ids);
                return Err(e.into());
            }
            inserted.ended.record();
            let written = inserted.rows.len();
            tracing::Span::current().record("triggers", written);
            // 5. Each claimed run remembers the job's plan_gen it was written under.
            let gens: HashMap<i64, i64> = due.iter().map(|j| (j.id, j.plan_gen)).collect();
            let mut pending = rows_to_pending(inserted.rows);
            for p in &mut pending {
                if let Some(claim) = &mut p.claim {
                    claim.plan_gen = gens.get(&p.job_id.0).copied().unwrap_or(0);
                }
            }
            // A shard handed back (or lost) while this transaction committed: its runs written
            // claimed under the old epoch go back to `scheduled` for the next holder, not to
            // the timer (the publisher would not take them).
            let (ours, gone): (Vec<_>, Vec<_>) = pending.into_iter().partition(|p| {
                p.claim.as_ref().is_none_or(|c| {
                    self.ctx
                        .leases
                        .term(p.shard)
                        .is_some_and(|t| t.epoch == c.epoch)
                })
            });
            self.ctx.wheel.insert(ours);
            if !gone.is_empty() {
                crate::scheduler::recover::hand_back(&self.ctx, &gone).await;
            }
            // Rows the timer does not take (unreadable ones) are no longer on their way.
            self.ctx.wheel.unreserve(ids);
            Ok::<_, SchedulerError>(ScanOutcome {
                jobs: due.len(),
                triggers: written,
                elapsed: started.elapsed(),
                held: false,
            })
        };
        write.instrument(span).await
    }

    /// Scans until `shutdown`: again at once after a full batch, else after `scan_interval`. A
    /// failed (or panicking) scan is logged and tried again after a back-off of up to
    /// [`MAX_SCAN_BACKOFF`]; the loop itself never ends before `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(self.ctx.config.scan_interval(), MAX_SCAN_BACKOFF);
        let mut holding = Holding::default();
        loop {
            let round = async { self.run_once().await.map_err(anyhow::Error::from) };
            let pause = match guard::round("scan", round).await {
                Ok(o) if o.held => {
                    holding.held();
                    HOLD_PAUSE
                }
                Ok(o) => {
                    if backoff.succeeded() {
                        tracing::info!("scan works again");
                    }
                    holding.resumed();
                    if o.jobs > 0 {
                        let m = crate::metrics::metrics();
                        m.scan_duration.observe(o.elapsed.as_secs_f64());
                        m.scan_jobs.observe(o.jobs as f64);
                        tracing::debug!(
                            jobs = o.jobs,
                            triggers = o.triggers,
                            elapsed_ms = o.elapsed.as_millis() as u64,
                            "scan"
                        );
                    }
                    if o.jobs as i64 >= self.ctx.config.scan_batch {
                        Duration::ZERO
                    } else {
                        self.ctx.config.scan_interval()
                    }
                }
                Err(e) => {
                    let pause = backoff.failed();
                    tracing::error!(error = %e, failures = backoff.failures(), retry_in_ms = pause.as_millis() as u64, "scan failed; retrying");
                    pause
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Says when a scan loop starts holding back (at most once a minute) and when it resumes.
#[derive(Default)]
struct Holding {
    since: Option<std::time::Instant>,
    last_warned: Option<std::time::Instant>,
}

impl Holding {
    fn held(&mut self) {
        if self.since.is_some() {
            return;
        }
        let now = std::time::Instant::now();
        self.since = Some(now);
        if self
            .last_warned
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60))
        {
            self.last_warned = Some(now);
            tracing::warn!(
                threshold_ms = HOLD_WHEN_BEHIND.as_millis() as u64,
                "publication is more than a second behind (runs waiting in the timer past the moment they were due to be taken, their fire time less CADENZA_PUBLISH_AHEAD_MS): the scan writes no runs ahead until it catches up; fires that pass their misfire threshold meanwhile follow the job's misfire strategy. Lasting, it means more load than this admin can publish; after a takeover it clears once the runs found overdue are sent"
            );
        }
    }

    fn resumed(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::debug!(
                held_ms = since.elapsed().as_millis() as u64,
                "publication caught up; the scan resumes"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }
    fn rate(ms: i64) -> JobSchedule {
        JobSchedule::FixRate(chrono::Duration::milliseconds(ms))
    }
    fn th(ms: i64) -> chrono::Duration {
        chrono::Duration::milliseconds(ms)
    }
    fn fires(p: &Plan) -> Vec<(i64, TriggerKind)> {
        p.fires
            .iter()
            .map(|f| ((f.fire_time - t(0)).num_milliseconds(), f.kind))
            .collect()
    }
    fn skipped(first: i64, last: i64, count: i64) -> Option<Skipped> {
        Some(Skipped {
            first: t(first),
            last: t(last),
            count,
        })
    }

    #[test]
    fn fix_rate_fills_the_window() {
        let p = plan_fires(
            &rate(100),
            MisfireStrategy::DoNothing,
            th(5000),
            t(0),
            t(0),
            t(350),
        );
        assert_eq!(p.fires.len(), 4); // 0, 100, 200, 300
        assert_eq!(p.next_fire_at, Some(t(400)));
        assert!(p.enabled);
    }

    #[test]
    fn late_within_threshold_fires() {
        let p = plan_fires(
            &rate(1000),
            MisfireStrategy::DoNothing,
            th(5000),
            t(0),
            t(3000),
            t(3500),
        );
        assert_eq!(p.skipped, None);
        assert_eq!(p.fires.len(), 4);
    }

    #[test]
    fn do_nothing_skips_misfires_without_a_row() {
        // due at 0..=9000 every 1000, now = 10_000, threshold 5000: 0..=4000 are misfires.
        let p = plan_fires(
            &rate(1000),
            MisfireStrategy::DoNothing,
            th(5000),
            t(0),
            t(10_000),
            t(10_000),
        );
        assert_eq!(p.skipped, skipped(0, 4000, 5));
        let s = fires(&p);
        assert_eq!(s.len(), 6); // 5000..=10000
        assert_eq!(s[0], (5000, TriggerKind::FixRate));
        assert!(
            s.windows(2).all(|w| w[0].0 < w[1].0),
            "fire times increase: {s:?}"
        );
        assert_eq!(p.next_fire_at, Some(t(11_000)));
    }

    #[test]
    fn a_long_gap_is_counted_over_several_scans() {
        // A million missed fire times: counted a bounded number at a time.
        let p = plan_fires(
            &rate(1),
            MisfireStrategy::DoNothing,
            th(5000),
            t(0),
            t(1_005_000),
            t(1_005_000),
        );
        assert!(p.fires.is_empty());
        assert_eq!(
            p.skipped,
            skipped(0, MAX_STEPS_PER_JOB as i64 - 1, MAX_STEPS_PER_JOB as i64)
        );
        assert_eq!(p.next_fire_at, Some(t(MAX_STEPS_PER_JOB as i64)));
    }

    #[test]
    fn a_skipped_fix_delay_fire_fires_again_its_delay_after_now() {
        let p = plan_fires(
            &JobSchedule::FixDelay(th(500)),
            MisfireStrategy::DoNothing,
            th(1000),
            t(0),
            t(60_000),
            t(62_000),
        );
        assert!(p.fires.is_empty());
        assert_eq!(p.skipped, skipped(0, 0, 1));
        assert_eq!(p.next_fire_at, Some(t(60_500)));
        assert!(p.enabled);
    }

    #[test]
    fn fire_once_now_runs_the_last_missed_once() {
        let p = plan_fires(
            &rate(1000),
            MisfireStrategy::FireOnceNow,
            th(5000),
            t(0),
            t(10_000),
            t(10_000),
        );
        assert_eq!(p.skipped, skipped(0, 3000, 4));
        let s = fires(&p);
        assert_eq!(
            s.iter()
                .filter(|x| x.1 == TriggerKind::Misfire)
                .collect::<Vec<_>>(),
            vec![&(4000, TriggerKind::Misfire)]
        );
        assert_eq!(s.len(), 7);
    }

    #[test]
    fn fire_all_fires_every_missed_time() {
        let p = plan_fires(
            &rate(1000),
            MisfireStrategy::FireAll,
            th(5000),
            t(0),
            t(10_000),
            t(10_000),
        );
        assert_eq!(p.fires.len(), 11);
        assert_eq!(p.skipped, None);
    }

    #[test]
    fn once_fires_then_disables() {
        let p = plan_fires(
            &JobSchedule::Once(t(100)),
            MisfireStrategy::DoNothing,
            th(5000),
            t(100),
            t(0),
            t(2000),
        );
        assert_eq!(fires(&p), vec![(100, TriggerKind::Once)]);
        assert_eq!(p.next_fire_at, None);
        assert!(!p.enabled);
        // missed by far more than the threshold: skipped, still disables
        let p = plan_fires(
            &JobSchedule::Once(t(100)),
            MisfireStrategy::DoNothing,
            th(5000),
            t(100),
            t(60_000),
            t(62_000),
        );
        assert!(p.fires.is_empty());
        assert_eq!(p.skipped, skipped(100, 100, 1));
        assert!(!p.enabled);
    }

    #[test]
    fn fix_delay_fires_once_and_waits_for_the_result() {
        let s = JobSchedule::FixDelay(th(500));
        let p = plan_fires(
            &s,
            MisfireStrategy::DoNothing,
            th(5000),
            t(0),
            t(0),
            t(2000),
        );
        assert_eq!(p.fires.len(), 1);
        assert_eq!(p.next_fire_at, None);
        assert!(p.enabled);
    }

    fn due(id: i64, misfire: &str, next: i64, now: i64) -> DueJob {
        DueJob {
            id,
            schedule: sqlx::types::Json(Schedule::FixRate { every_ms: 100 }),
            misfire: misfire.to_owned(),
            misfire_threshold_ms: 1000,
            next_fire_at: t(next),
            db_now: t(now),
            job_type: "t".to_owned(),
            route: "sharding_broadcast".to_owned(),
            shard: 0,
            plan_gen: 0,
            misfire_first: None,
            misfire_last: None,
            misfire_count: 0,
            queued: false,
            jitter_ms: 0,
        }
    }

    #[test]
    fn expand_writes_one_run_per_broadcast_shard_and_advances_each_job() {
        // Job 1 is due now: 0, 100, 200, 300 within 350 ms of look-ahead, 3 runs each.
        // Job 2 missed 0..=3900 by more than the threshold: `do_nothing` skips them (no row,
        // counted on the job), then fires from 4000 on.
        let jobs = [due(1, "do_nothing", 0, 0), due(2, "do_nothing", 0, 5000)];
        let x = expand(&jobs, th(350), |j| if j.id == 1 { 3 } else { 2 });
        let job1: Vec<(i32, i32)> = x
            .t_job
            .iter()
            .zip(x.t_shard_index.iter().zip(&x.t_shard_total))
            .filter(|(j, _)| **j == 1)
            .map(|(_, (i, n))| (*i, *n))
            .collect();
        assert_eq!(job1.len(), 12);
        assert_eq!(&job1[..3], &[(0, 3), (1, 3), (2, 3)]);
        assert!(x
            .t_status
            .iter()
            .all(|s| *s == RunStatus::Scheduled.as_str()));
        assert_eq!(x.a_skip_count, vec![0, 40]);
        assert_eq!(x.a_skip_first, vec![None, Some(t(0))]);
        assert_eq!(x.a_skip_last, vec![None, Some(t(3900))]);
        assert_eq!(x.a_close, vec![false, false]);
        let scheduled2 = (0..x.t_job.len())
            .filter(|i| x.t_job[*i] == 2 && x.t_status[*i] == RunStatus::Scheduled.as_str())
            .count();
        assert_eq!(scheduled2, 14 * 2); // 4000..=5300, 2 runs each
        assert_eq!(x.a_job, vec![1, 2]);
        assert_eq!(x.a_next, vec![Some(t(400)), Some(t(5400))]);
        assert_eq!(x.a_enabled, vec![true, true]);
    }

    #[test]
    fn expand_stops_a_job_it_cannot_plan_and_goes_on() {
        let jobs = [due(1, "no such strategy", 0, 0), due(2, "fire_all", 0, 0)];
        let x = expand(&jobs, th(50), |_| 1);
        assert!(x.t_job.iter().all(|j| *j == 2));
        assert_eq!(x.t_job.len(), 1);
        assert_eq!(x.a_job, vec![1, 2]);
        assert_eq!(x.a_next, vec![None, Some(t(100))]);
        assert_eq!(x.a_enabled, vec![true, true]);
    }

    #[test]
    fn an_open_span_closes_when_quiet_for_a_minute_an_hour_long_or_on_another_day() {
        let open = skipped(0, 10_000, 11);
        // Nothing new, a minute after its last: closes; sooner: stays open.
        assert!(closes(open, None, t(70_001)));
        assert!(!closes(open, None, t(69_000)));
        // New misses soon after: it grows; after a quiet minute: a new span.
        assert!(!closes(open, skipped(11_000, 20_000, 10), t(25_000)));
        assert!(closes(open, skipped(80_000, 81_000, 2), t(90_000)));
        // An hour long: a new span.
        let long = skipped(0, 3_590_000, 3591);
        assert!(!closes(
            long,
            skipped(3_600_000, 3_600_000, 1),
            t(3_610_000)
        ));
        assert!(closes(long, skipped(3_600_000, 3_600_001, 2), t(3_610_000)));
        // Another UTC day (t(0) is 2027-01-15T08:00:00Z): a new span.
        let before_midnight = skipped(57_599_000, 57_599_000, 1);
        assert!(closes(
            before_midnight,
            skipped(57_600_000, 57_600_000, 1),
            t(57_601_000)
        ));
        assert!(!closes(None, skipped(0, 1, 2), t(5)));
    }

    #[test]
    fn per_job_cap_continues_next_scan() {
        let p = plan_fires(
            &rate(1),
            MisfireStrategy::FireAll,
            th(5000),
            t(0),
            t(0),
            t(100_000),
        );
        assert_eq!(p.fires.len(), MAX_FIRES_PER_JOB);
        assert_eq!(p.next_fire_at, Some(t(MAX_FIRES_PER_JOB as i64)));
    }
}
