//! The releaser: lets queued runs go as their concurrency group's slots and rate, and their
//! job's overlap policy, allow (see [`crate::flow`]).
//!
//! Each admin releases the queue keys of the shards it holds: a group's key with the group's
//! shard, a job's own key with the job's. A round of one key runs in one transaction under the
//! key's lock (the group's row, or an advisory lock), so two admins (an old holder that has not
//! noticed its lease is gone, and the new one) release one after the other and never past the
//! limit: the slots in use are counted from the runs themselves, from their release until their
//! end is recorded (by a worker's result, or `lost`), so a dead admin leaks none.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{JobType, Overlap, RunStatus};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{SchedulerContext, SchedulerError};
use crate::flow::{self, Queued};
use crate::ids::ShardId;
use crate::metrics::GroupLabel;

/// How often each admin looks for queued runs to release.
pub const RELEASE_INTERVAL: Duration = Duration::from_millis(100);
/// How many queued runs of a key one round looks at.
const HEAD: i64 = 5000;
/// Who the releaser's cancels are from, in the run's message and the worker's log.
const CANCELLED_BY: &str = "overlap policy cancel_other";

/// What one round of one key did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Round {
    released: usize,
    skipped: usize,
    misfired: usize,
    cancels: usize,
}

#[derive(sqlx::FromRow)]
struct GroupRow {
    limit: i64,
    rate_per_second: Option<f64>,
    rate_burst: i64,
    released_recent: Vec<DateTime<Utc>>,
    db_now: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct HeadRow {
    id: i64,
    job_id: i64,
    overlap: String,
}

#[derive(sqlx::FromRow)]
struct InFlightRow {
    id: i64,
    status: String,
    job_id: i64,
    job_type: String,
    partition: Option<i32>,
}

/// One round of the queue key `key`; with `misfires`, queued runs that waited past their
/// misfire threshold follow their job's misfire strategy first.
async fn release_key(
    ctx: &SchedulerContext,
    key: &str,
    misfires: bool,
) -> Result<Round, SchedulerError> {
    let mut tx = ctx.pool.begin().await?;
    // An admin frozen inside a round must not hold the key's lock for long.
    sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '10s'")
        .execute(&mut *tx)
        .await?;
    let group: Option<GroupRow> = match key.strip_prefix("g:") {
        Some(name) => {
            sqlx::query_as(sql!("flow/lock_group"))
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?
        }
        None => None,
    };
    let now = match &group {
        Some(g) => g.db_now,
        None => {
            let (now, _): (DateTime<Utc>, String) = sqlx::query_as(sql!("flow/lock_key"))
                .bind(key)
                .fetch_one(&mut *tx)
                .await?;
            now
        }
    };
    let mut round = Round::default();
    let misfired: Vec<i64> = if misfires {
        sqlx::query_scalar(sql!("flow/misfire_queued"))
            .bind(key)
            .fetch_all(&mut *tx)
            .await?
    } else {
        Vec::new()
    };
    round.misfired = misfired.len();
    let in_flight: HashMap<i64, i64> = sqlx::query_as(sql!("flow/in_flight"))
        .bind(key)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let busy: i64 = in_flight.values().sum();
    let head: Vec<Queued> = sqlx::query_as::<_, HeadRow>(sql!("flow/queue_head"))
        .bind(key)
        .bind(HEAD)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|r| Queued {
            id: r.id,
            job_id: r.job_id,
            overlap: r.overlap.parse().unwrap_or(Overlap::Allow),
        })
        .collect();
    let slots = group.as_ref().map(|g| g.limit - busy);
    let rate = group.as_ref().and_then(|g| {
        g.rate_per_second
            .map(|r| flow::rate_allowance(r, g.rate_burst, &g.released_recent, now))
    });
    let decision = flow::decide(&head, slots, &in_flight, rate);
    let mut ended: Vec<(i64, RunStatus)> = misfired
        .iter()
        .map(|id| (*id, RunStatus::Misfired))
        .collect();
    if !decision.skip.is_empty() {
        let (ids, why): (Vec<i64>, Vec<String>) = decision.skip.iter().cloned().unzip();
        let skipped: Vec<i64> = sqlx::query_scalar(sql!("flow/skip"))
            .bind(&ids)
            .bind(&why)
            .fetch_all(&mut *tx)
            .await?;
        round.skipped = skipped.len();
        ended.extend(skipped.into_iter().map(|id| (id, RunStatus::Skipped)));
    }
    if !decision.cancel_jobs.is_empty() {
        round.cancels =
            cancel_in_flight(ctx, &mut tx, key, &decision.cancel_jobs, &mut ended).await?;
    }
    if !decision.release.is_empty() {
        let released: Vec<(i64, bool, f64)> = sqlx::query_as(sql!("flow/release"))
            .bind(&decision.release)
            .fetch_all(&mut *tx)
            .await?;
        round.released = released.len();
        if let Some(name) = key.strip_prefix("g:") {
            let wait = crate::metrics::metrics()
                .group_wait
                .get_or_create(&GroupLabel {
                    group: name.to_owned(),
                });
            for (_, _, waited) in &released {
                wait.observe(waited.max(0.0));
            }
        }
        if let (Some(g), Some(name)) = (&group, key.strip_prefix("g:")) {
            if g.rate_per_second.is_some() {
                let mut recent = g.released_recent.clone();
                recent.extend(std::iter::repeat_n(now, released.len()));
                sqlx::query(sql!("flow/remember_releases"))
                    .bind(name)
                    .bind(flow::keep_recent(recent, g.rate_burst, now))
                    .execute(&mut *tx)
                    .await?;
            }
        }
    }
    let follow = crate::outcome::after_terminal(&mut tx, &ctx.registry, &ended).await?;
    tx.commit().await?;
    follow.ended.record();
    if round.released + round.skipped + round.misfired + round.cancels > 0 {
        tracing::debug!(key, ?round, "queue released");
    }
    Ok(round)
}

/// Cancels the runs in flight of `jobs` (overlap policy `cancel_other`): one not yet on its
/// topic ends `cancelled` here (added to `ended`), one published or running gets a cancel
/// record on its partition (the worker reports it `cancelled`); one being published right now
/// is asked again next round. Returns how many were cancelled or asked to.
async fn cancel_in_flight(
    ctx: &SchedulerContext,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    key: &str,
    jobs: &[i64],
    ended: &mut Vec<(i64, RunStatus)>,
) -> Result<usize, SchedulerError> {
    let runs: Vec<InFlightRow> = sqlx::query_as(sql!("flow/in_flight_of_jobs"))
        .bind(jobs)
        .bind(key)
        .fetch_all(&mut **tx)
        .await?;
    let mut unpublished = Vec::new();
    let mut asked = Vec::new();
    for r in runs {
        match (r.status.parse::<RunStatus>(), r.partition) {
            (Ok(RunStatus::Scheduled), _) => unpublished.push(r.id),
            (Ok(RunStatus::Published | RunStatus::Running), Some(partition)) => {
                let Ok(job_type) = JobType::parse(&r.job_type) else {
                    continue;
                };
                match ctx
                    .kafka
                    .send_cancel(&job_type, r.job_id, r.id, partition, CANCELLED_BY)
                    .await
                {
                    Ok(()) => asked.push(r.id),
                    Err(e) => {
                        tracing::warn!(trigger_id = r.id, error = %e, "cancel for a newer fire not sent; trying again next round")
                    }
                }
            }
            // Being published: asked once it is on its topic.
            _ => {}
        }
    }
    let cancelled: Vec<i64> = if unpublished.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar(sql!("triggers/cancel_unpublished"))
            .bind(&unpublished)
            .bind(format!(
                "cancelled by {CANCELLED_BY}: a newer fire of the job replaces it"
            ))
            .fetch_all(&mut **tx)
            .await?
    };
    if !asked.is_empty() {
        sqlx::query(sql!("flow/cancel_requested"))
            .bind(&asked)
            .execute(&mut **tx)
            .await?;
    }
    let n = cancelled.len() + asked.len();
    ended.extend(cancelled.into_iter().map(|id| (id, RunStatus::Cancelled)));
    Ok(n)
}

#[derive(sqlx::FromRow)]
struct GroupUse {
    name: String,
    limit: i64,
    in_flight: i64,
    queued: i64,
}

/// Sets the group gauges to the groups of the `held` shards, and drops those of groups this
/// admin no longer releases (`shown`: the groups it showed last time).
async fn report_groups(
    ctx: &SchedulerContext,
    held: &[i32],
    shown: &mut Vec<String>,
) -> Result<(), SchedulerError> {
    let groups: Vec<GroupUse> = sqlx::query_as(sql!("flow/get_group"))
        .bind(None::<String>)
        .bind(held)
        .fetch_all(&ctx.pool)
        .await?;
    let m = crate::metrics::metrics();
    for name in shown.iter() {
        if !groups.iter().any(|g| &g.name == name) {
            let label = GroupLabel {
                group: name.clone(),
            };
            m.group_queued.remove(&label);
            m.group_in_flight.remove(&label);
            m.group_limit.remove(&label);
        }
    }
    for g in &groups {
        let label = GroupLabel {
            group: g.name.clone(),
        };
        m.group_queued.get_or_create(&label).set(g.queued);
        m.group_in_flight.get_or_create(&label).set(g.in_flight);
        m.group_limit.get_or_create(&label).set(g.limit);
    }
    *shown = groups.into_iter().map(|g| g.name).collect();
    Ok(())
}

/// One round over the queue keys of the held shards that have a queued run due. A key whose
/// round fails is tried again next round; the others go on. With `misfires`, waits past the
/// misfire threshold are looked for too (it reads the whole queue: once a second is enough for
/// thresholds counted in seconds).
async fn run_once(ctx: &SchedulerContext, misfires: bool) -> Result<(), SchedulerError> {
    let held = ShardId::to_db_all(&ctx.leases.held_shards());
    if held.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = sqlx::query_scalar(sql!("flow/due_keys"))
        .bind(&held)
        .fetch_all(&ctx.pool)
        .await?;
    for key in keys {
        if let Err(e) = release_key(ctx, &key, misfires).await {
            tracing::warn!(key, error = %e, "queue release failed; trying again next round");
        }
    }
    Ok(())
}

/// Every how many rounds (once a second) queued runs are checked against their misfire
/// threshold and the group gauges are brought up to date.
const ONCE_A_SECOND: u64 = 10;

/// Releases every [`RELEASE_INTERVAL`] until `shutdown`; checks misfires and reports the
/// groups' use every [`ONCE_A_SECOND`] rounds.
pub async fn run(ctx: Arc<SchedulerContext>, shutdown: CancellationToken) {
    // The rounds so far, and the groups whose gauges this admin showed last.
    let state = Arc::new(tokio::sync::Mutex::new((0u64, Vec::new())));
    crate::every(RELEASE_INTERVAL, shutdown, "queue release", || {
        let (ctx, state) = (ctx.clone(), state.clone());
        async move {
            let mut state = state.lock().await;
            let (rounds, shown) = &mut *state;
            *rounds += 1;
            let every_second = *rounds % ONCE_A_SECOND == 1;
            run_once(&ctx, every_second).await?;
            if every_second {
                let held = ShardId::to_db_all(&ctx.leases.held_shards());
                report_groups(&ctx, &held, shown).await?;
            }
            Ok::<(), SchedulerError>(())
        }
    })
    .await;
}
