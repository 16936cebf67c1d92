//! `/api/jobs`: create, list, read, update, delete, enable, disable, trigger.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::{Extension, Json};
use cadenza_schemas::TriggerKind;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::{PgConnection, Postgres, Transaction};

use super::doc::Id;
use super::error::TxError;
use super::{
    parse_body, parse_bool, parse_id, parse_limit, ApiError, ApiResult, AppState, ErrorBody,
    Params, Shared,
};
use crate::audit::{self, Entry};
use crate::auth::{Access, Principal};
use crate::jobs::{Job, JobPatch, JobRow, JobSpec};
use crate::outcome::NewRuns;
use crate::route::WorkerId;
use crate::schedule::JobSchedule;

fn to_job(row: JobRow) -> ApiResult<Job> {
    Job::try_from(row).map_err(ApiError::internal)
}

/// Children must exist and, for an existing job, not lead back to it. A child the job does not
/// have yet (not in `kept`) must be a job `p` may change: triggering the parent fires it. One
/// `p` may not see answers as a job that does not exist. Concurrent updates of the same cycle
/// are serialized by [`lock_children`] around the check and the store.
async fn check_children(
    conn: &mut PgConnection,
    p: &Principal,
    spec: &JobSpec,
    own_id: Option<i64>,
    kept: &[i64],
) -> ApiResult<()> {
    if spec.children.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = spec.children.iter().map(|c| c.0).collect();
    if let Some(own) = own_id {
        if ids.contains(&own) {
            return Err(ApiError::invalid(
                "children",
                format!("job {own} cannot be its own child"),
            ));
        }
    }
    let added: Vec<i64> = ids.iter().copied().filter(|c| !kept.contains(c)).collect();
    let visible = super::scope::visible_job_types(conn, p, &added).await?;
    let mut missing: Vec<i64> = added
        .iter()
        .copied()
        .filter(|c| !visible.contains_key(c))
        .collect();
    if !kept.is_empty() {
        // Children the job had already (an admin may have set them) need only still exist.
        let kept_now: Vec<i64> = ids.iter().copied().filter(|c| kept.contains(c)).collect();
        let gone: Vec<i64> = sqlx::query_scalar(sql!("jobs/missing_children"))
            .bind(&kept_now)
            .fetch_all(&mut *conn)
            .await?;
        missing.extend(gone);
    }
    if !missing.is_empty() {
        missing.sort_unstable();
        return Err(ApiError::invalid(
            "children",
            format!("no job with id {missing:?}"),
        ));
    }
    for c in &added {
        if let Some(job_type) = visible.get(c) {
            p.require(Access::Write, job_type).map_err(|e| {
                ApiError::forbidden(format!(
                    "children: job {c} cannot be made a child: {}",
                    e.message
                ))
            })?;
        }
    }
    if let Some(own) = own_id {
        let path: Option<Vec<i64>> = sqlx::query_scalar(sql!("jobs/child_cycle"))
            .bind(own)
            .bind(&ids)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(path) = path {
            let chain: Vec<String> = std::iter::once(own)
                .chain(path)
                .map(|id| id.to_string())
                .collect();
            return Err(ApiError::invalid(
                "children",
                format!(
                    "would make a cycle of child jobs: {}; a job must not fire itself again",
                    chain.join(" → ")
                ),
            ));
        }
    }
    Ok(())
}

/// Serializes changes of child lists until the transaction ends: two updates that each add
/// half of a cycle would otherwise both pass [`check_children`].
async fn lock_children(conn: &mut PgConnection) -> ApiResult<()> {
    sqlx::query(sql!("jobs/lock_children"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Validates a spec and makes sure its job type's topic exists.
async fn prepare(
    state: &AppState,
    p: &Principal,
    spec: &JobSpec,
    own_id: Option<i64>,
    now: DateTime<Utc>,
) -> ApiResult<JobSchedule> {
    let schedule = spec.validate(now)?;
    let mut conn = state.pool.acquire().await?;
    check_children(&mut conn, p, spec, own_id, &[]).await?;
    check_group(&mut conn, spec).await?;
    drop(conn);
    state
        .kafka
        .ensure_trigger_topic(&state.pool, &spec.job_type)
        .await?;
    Ok(schedule)
}

pub(super) fn bind_spec<'q>(
    q: sqlx::query::QueryAs<'q, Postgres, JobRow, sqlx::postgres::PgArguments>,
    spec: &'q JobSpec,
    next_fire_at: Option<DateTime<Utc>>,
) -> ApiResult<sqlx::query::QueryAs<'q, Postgres, JobRow, sqlx::postgres::PgArguments>> {
    let schedule = serde_json::to_value(&spec.schedule).map_err(ApiError::internal)?;
    Ok(q.bind(&spec.name)
        .bind(spec.job_type.as_str())
        .bind(sqlx::types::Json(schedule))
        .bind(spec.schedule.kind())
        .bind(spec.route.as_str())
        .bind(spec.block.as_str())
        .bind(spec.misfire.as_str())
        .bind(spec.misfire_threshold_ms)
        .bind(&spec.params)
        .bind(spec.timeout_ms)
        .bind(spec.retries)
        .bind(spec.retry_backoff_ms)
        .bind(spec.children.iter().map(|c| c.0).collect::<Vec<_>>())
        .bind(spec.enabled)
        .bind(next_fire_at)
        .bind(spec.retry_backoff.as_str())
        .bind(spec.retry_backoff_max_ms)
        .bind(&spec.alarm_webhook)
        .bind(&spec.alarm_emails)
        .bind(&spec.concurrency_group)
        .bind(spec.priority)
        .bind(spec.overlap.as_str())
        .bind(spec.jitter_ms))
}

/// Inserts the job `spec` (validated: `schedule` is its schedule) in `tx`: it takes an id
/// first, so that its first fire time carries the jitter derived from it, and fires by its
/// schedule from `now` on (unless disabled).
pub(super) async fn insert_job(
    tx: &mut Transaction<'_, Postgres>,
    shard_count: u32,
    spec: &JobSpec,
    schedule: JobSchedule,
    now: DateTime<Utc>,
) -> ApiResult<JobRow> {
    let id: i64 = sqlx::query_scalar(sql!("jobs/next_id"))
        .fetch_one(&mut **tx)
        .await?;
    let next = if spec.enabled {
        schedule.jittered(id, spec.jitter_ms).first_fire(now)
    } else {
        None
    };
    let q = sqlx::query_as::<_, JobRow>(sql!("jobs/insert")).bind(i64::from(shard_count));
    Ok(bind_spec(q, spec, next)?
        .bind(id)
        .fetch_one(&mut **tx)
        .await?)
}

/// Creates a job. It fires by its schedule from now on (unless `enabled` is false).
#[utoipa::path(post, path = "/jobs", tag = "jobs", request_body = JobSpec,
    responses((status = 201, description = "Created.", body = Job)))]
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Job>)> {
    let spec: JobSpec = parse_body(&body)?;
    p.require(Access::Write, spec.job_type.as_str())?;
    let now = Utc::now();
    let schedule = prepare(&state, &p, &spec, None, now).await?;
    let mut tx = state.pool.begin().await?;
    let row = insert_job(&mut tx, state.shard_count, &spec, schedule, now).await?;
    let job = to_job(row)?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("job.create")
            .job(job.id.0, job.spec.job_type.as_str())
            .after(as_json(&job)?),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = job.id.0, job_type = %job.spec.job_type, "job created");
    Ok((StatusCode::CREATED, Json(job)))
}

/// Which jobs, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct JobQuery {
    /// Only jobs whose name contains this (any case).
    name: Option<String>,
    /// Only jobs of this job type.
    job_type: Option<String>,
    /// Only enabled (`true`) or disabled (`false`) jobs.
    enabled: Option<bool>,
    /// Only jobs of this concurrency group.
    concurrency_group: Option<String>,
    /// The page after this id (`next_after_id` of the previous page).
    #[param(minimum = 1)]
    after_id: Option<i64>,
    /// Jobs per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A page of jobs.
#[derive(Serialize, utoipa::ToSchema)]
pub struct JobList {
    jobs: Vec<Job>,
    /// Give it as `after_id` for the next page; none on the last page.
    next_after_id: Option<i64>,
}

/// The jobs the caller may see, by id.
#[utoipa::path(get, path = "/jobs", tag = "jobs", params(JobQuery),
    responses((status = 200, description = "A page of jobs.", body = JobList)))]
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<JobList>> {
    let enabled = parse_bool("enabled", q.get("enabled"))?;
    let after = match q.get("after_id") {
        None => 0,
        Some(s) => parse_id("after_id", s)?,
    };
    let limit = parse_limit(q.get("limit"))?;
    let rows: Vec<JobRow> = sqlx::query_as(sql!("jobs/list"))
        .bind(q.get("job_type"))
        .bind(enabled)
        .bind(after)
        .bind(limit)
        .bind(p.visible_like())
        .bind(q.get("name"))
        .bind(q.get("concurrency_group"))
        .fetch_all(&state.pool)
        .await?;
    let jobs = rows
        .into_iter()
        .map(to_job)
        .collect::<ApiResult<Vec<_>>>()?;
    let next = (jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|j| j.id.0))
        .flatten();
    Ok(Json(JobList {
        jobs,
        next_after_id: next,
    }))
}

async fn load(state: &AppState, id: &str) -> ApiResult<Job> {
    let id = parse_id("id", id)?;
    let row: Option<JobRow> = sqlx::query_as(sql!("jobs/select"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?;
    to_job(row.ok_or_else(|| ApiError::not_found("job", id))?)
}

/// One job.
#[utoipa::path(get, path = "/jobs/{id}", tag = "jobs", params(Id),
    responses(
        (status = 200, description = "The job.", body = Job),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
    ))]
pub async fn get(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Job>> {
    let job = load(&state, &id).await?;
    p.require(Access::Read, job.spec.job_type.as_str())?;
    Ok(Json(job))
}

fn as_json(job: &Job) -> ApiResult<Value> {
    serde_json::to_value(job).map_err(ApiError::internal)
}

/// Stores a changed job. Runs of its schedule that were written ahead and not yet taken for
/// sending (due later than `drop_after` from now) are dropped and written again by the scan from
/// the new definition: with an unchanged schedule from the earliest dropped fire time (nothing
/// is skipped), with a new schedule or on re-enabling from now (time spent disabled never
/// fires).
async fn store(
    tx: &mut Transaction<'_, Postgres>,
    current: &Job,
    spec: &JobSpec,
    schedule: &JobSchedule,
    drop_after: std::time::Duration,
) -> ApiResult<Job> {
    let dropped: Option<DateTime<Utc>> = sqlx::query_scalar(sql!("jobs/drop_scheduled_runs"))
        .bind(current.id.0)
        .bind(drop_after.as_millis() as f64)
        .fetch_one(&mut **tx)
        .await?;
    let now = Utc::now();
    let restart = spec.schedule != current.spec.schedule
        || spec.jitter_ms != current.spec.jitter_ms
        || (spec.enabled && !current.spec.enabled);
    let next = if !spec.enabled {
        None
    } else if restart {
        schedule.first_fire(now)
    } else {
        match (dropped, current.next_fire_at) {
            (Some(d), Some(n)) => Some(d.min(n)),
            (d, n) => d.or(n),
        }
        // A self-running schedule (cron, fix_rate) with nothing pending starts again from now;
        // a fix_delay job keeps waiting for its run to finish.
        .or_else(|| schedule.next_after(now).and(schedule.first_fire(now)))
    };
    let q = sqlx::query_as::<_, JobRow>(sql!("jobs/update")).bind(current.id.0);
    let row = bind_spec(q, spec, next)?.fetch_one(&mut **tx).await?;
    let job = to_job(row)?;
    let flow = |s: &JobSpec| (s.concurrency_group.clone(), s.priority, s.overlap);
    if flow(&job.spec) != flow(&current.spec) {
        // Its queued runs follow it into its new queue, or go at once when it has none.
        let key = crate::flow::queue_key(
            job.id.0,
            job.spec.concurrency_group.as_deref(),
            job.spec.overlap,
        );
        sqlx::query(sql!("flow/requeue_job"))
            .bind(job.id.0)
            .bind(key)
            .bind(job.spec.priority)
            .execute(&mut **tx)
            .await?;
    }
    Ok(job)
}

/// Refuses a job whose `concurrency_group` names no group.
async fn check_group(conn: &mut PgConnection, spec: &JobSpec) -> ApiResult<()> {
    let Some(name) = &spec.concurrency_group else {
        return Ok(());
    };
    let exists: bool = sqlx::query_scalar(sql!("flow/group_exists"))
        .bind(name)
        .fetch_one(conn)
        .await?;
    if exists {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "concurrency_group",
            format!("no concurrency group is named {name:?}; create it first with POST /api/concurrency-groups"),
        ))
    }
}

async fn modify(
    state: &AppState,
    p: &Principal,
    action: &str,
    id: &str,
    change: impl FnOnce(&Job) -> ApiResult<JobSpec>,
) -> ApiResult<Job> {
    let id = parse_id("id", id)?;
    // Validate outside the transaction (it may create a topic), then lock and store.
    let current = load(state, &id.to_string()).await?;
    p.require(Access::Write, current.spec.job_type.as_str())?;
    let spec = change(&current)?;
    p.require(Access::Write, spec.job_type.as_str())?;
    let now = Utc::now();
    let schedule = if spec.schedule == current.spec.schedule {
        spec.validate(now).or_else(|e| {
            // A stored `once` in the past stays valid when the schedule is not being changed.
            if e.field == "schedule.at" {
                JobSchedule::from_stored(&spec.schedule).map_err(Into::into)
            } else {
                Err(e)
            }
        })?
    } else {
        spec.validate(now)?
    }
    .jittered(id, spec.jitter_ms);
    let kept: Vec<i64> = current.spec.children.iter().map(|c| c.0).collect();
    let mut conn = state.pool.acquire().await?;
    check_children(&mut conn, p, &spec, Some(id), &kept).await?;
    check_group(&mut conn, &spec).await?;
    drop(conn);
    state
        .kafka
        .ensure_trigger_topic(&state.pool, &spec.job_type)
        .await?;
    let mut tx = state.pool.begin().await?;
    if !spec.children.is_empty() {
        // Checked again under the lock: another update may have changed the graph since.
        lock_children(&mut tx).await?;
        check_children(&mut tx, p, &spec, Some(id), &kept).await?;
    }
    let row: Option<JobRow> = sqlx::query_as(sql!("jobs/select_for_update"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let locked = to_job(row.ok_or_else(|| ApiError::not_found("job", id))?)?;
    // Locked, the job may have changed type since it was checked.
    p.require(Access::Write, locked.spec.job_type.as_str())?;
    let drop_after = state.drop_claimed_after(&mut tx).await?;
    let job = store(&mut tx, &locked, &spec, &schedule, drop_after).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new(action)
            .job(id, job.spec.job_type.as_str())
            .before(as_json(&locked)?)
            .after(as_json(&job)?),
    )
    .await?;
    tx.commit().await?;
    Ok(job)
}

/// Changes some fields of a job; its next fire time follows a new schedule.
#[utoipa::path(patch, path = "/jobs/{id}", tag = "jobs", params(Id), request_body = JobPatch,
    responses(
        (status = 200, description = "Changed.", body = Job),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
    ))]
pub async fn update(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Job>> {
    let patch: Value = parse_body(&body)?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::invalid(
            "body",
            "must be a JSON object of the fields to change",
        ));
    };
    let job = modify(&state, &p, "job.update", &id, |current| {
        let mut merged = serde_json::to_value(&current.spec).map_err(ApiError::internal)?;
        if let Value::Object(m) = &mut merged {
            m.extend(patch);
        }
        parse_body::<JobSpec>(merged.to_string().as_bytes())
    })
    .await?;
    tracing::info!(job_id = job.id.0, "job updated");
    Ok(Json(job))
}

async fn set_enabled(state: &AppState, p: &Principal, id: &str, enabled: bool) -> ApiResult<Job> {
    let action = if enabled { "job.enable" } else { "job.disable" };
    modify(state, p, action, id, |current| {
        let mut spec = current.spec.clone();
        spec.enabled = enabled;
        Ok(spec)
    })
    .await
}

/// Enables a job: it fires again from its next fire time after now.
#[utoipa::path(post, path = "/jobs/{id}/enable", tag = "jobs", params(Id),
    responses(
        (status = 200, description = "Enabled.", body = Job),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
    ))]
pub async fn enable(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Job>> {
    Ok(Json(set_enabled(&state, &p, &id, true).await?))
}

/// Disables a job: it stops firing; runs already due, or claimed for publication (due within
/// `CADENZA_PUBLISH_AHEAD_MS`), still run.
#[utoipa::path(post, path = "/jobs/{id}/disable", tag = "jobs", params(Id),
    responses(
        (status = 200, description = "Disabled.", body = Job),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
    ))]
pub async fn disable(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Job>> {
    Ok(Json(set_enabled(&state, &p, &id, false).await?))
}

/// Deletes a job and its runs (the audit keeps who deleted it; the daily report keeps its counts).
#[utoipa::path(delete, path = "/jobs/{id}", tag = "jobs", params(Id),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
        (status = 409, description = "The job is a node of a workflow (`job_in_use`).", body = ErrorBody),
    ))]
pub async fn delete(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id("id", &id)?;
    // Deleting a job deletes its runs, which the result ingest may be updating at that moment in
    // another order: the database then breaks the deadlock by failing one of the two. The
    // delete did nothing then and is simply done again.
    let mut attempt = 1;
    loop {
        match delete_once(&state, &p, id).await {
            Ok(()) => break,
            Err(TxError::Db(e)) if attempt < 3 && super::error::is_lock_conflict(&e) => {
                tracing::debug!(job_id = id, attempt, error = %e, "deleting a job again after a lock conflict");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
            }
            Err(TxError::Db(e)) => return Err(e.into()),
            Err(TxError::Api(e)) => return Err(e),
        }
    }
    tracing::info!(job_id = id, "job deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_once(state: &Shared, p: &Principal, id: i64) -> Result<(), TxError> {
    let mut tx = state.pool.begin().await?;
    let row: Option<JobRow> = sqlx::query_as(sql!("jobs/select_for_update"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let current = to_job(row.ok_or_else(|| ApiError::not_found("job", id))?)?;
    p.require(Access::Write, current.spec.job_type.as_str())?;
    let users: Vec<(i64, String)> = sqlx::query_as(sql!("jobs/used_by_workflows"))
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
    if !users.is_empty() {
        let names: Vec<&str> = users.iter().map(|(_, what)| what.as_str()).collect();
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            super::ErrorCode::JobInUse,
            format!(
                "job {id} is a node of {}; remove it from the workflow (PUT /api/workflows/{{id}}) or delete the workflow, and let its running workflow runs end, first",
                names.join(", ")
            ),
        )
        .into());
    }
    let deleted: i64 = sqlx::query_scalar(sql!("jobs/delete"))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if deleted == 0 {
        return Err(ApiError::not_found("job", id).into());
    }
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("job.delete")
            .job(id, current.spec.job_type.as_str())
            .before(as_json(&current).map_err(TxError::Api)?),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Longest delay of a triggered run: one year.
const MAX_TRIGGER_DELAY_MS: i64 = 365 * 24 * 3_600_000;

/// A run of a job outside its schedule. Every field is optional, and so is the body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Parameters for this run instead of the job's.
    params: Option<String>,
    /// A live worker serving the job type to run it on (its id, as `GET /api/workers` shows).
    worker: Option<String>,
    /// Run at this instant (RFC 3339, at most a year ahead) rather than now.
    at: Option<DateTime<Utc>>,
    /// Run this many milliseconds from now (0 to one year); not with `at`.
    #[schema(minimum = 0, maximum = 31_536_000_000i64)]
    delay_ms: Option<i64>,
}

/// The runs a trigger made.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Triggered {
    /// One run, or one per live worker for a `sharding_broadcast` job.
    trigger_ids: Vec<i64>,
    /// When they are due.
    fire_time: DateTime<Utc>,
}

impl TriggerRequest {
    /// When the run is due (`None`: now) and its kind: `manual` when due now, `api` when delayed.
    fn due(&self, now: DateTime<Utc>) -> ApiResult<(Option<DateTime<Utc>>, TriggerKind)> {
        let at = match (self.at, self.delay_ms) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "delay_ms",
                    "give either at or delay_ms, not both",
                ))
            }
            (None, None) => return Ok((None, TriggerKind::Manual)),
            (None, Some(d)) => {
                if !(0..=MAX_TRIGGER_DELAY_MS).contains(&d) {
                    return Err(ApiError::invalid(
                        "delay_ms",
                        format!("must be between 0 and {MAX_TRIGGER_DELAY_MS} (one year); got {d}"),
                    ));
                }
                now + chrono::Duration::milliseconds(d)
            }
            (Some(at), None) => {
                // A little slack for clocks and transit: "now" from the caller is not an error.
                if at < now - chrono::Duration::seconds(5) {
                    return Err(ApiError::invalid(
                        "at",
                        format!(
                            "{} is in the past; give a future instant, or leave at out to run now",
                            at.to_rfc3339()
                        ),
                    ));
                }
                if at > now + chrono::Duration::milliseconds(MAX_TRIGGER_DELAY_MS) {
                    return Err(ApiError::invalid("at", "is more than a year ahead"));
                }
                at
            }
        };
        Ok((Some(at.max(now)), TriggerKind::Api))
    }
}

/// Runs a job now, later, with other parameters or on a chosen worker (XXL-JOB's "run once").
/// A run due now is of kind `manual`, a later one of kind `api`.
#[utoipa::path(post, path = "/jobs/{id}/trigger", tag = "jobs", params(Id),
    request_body(content = Option<TriggerRequest>, description = "Optional."),
    responses(
        (status = 202, description = "The runs are recorded; they are published when due.", body = Triggered),
        (status = 404, description = "No such job (`not_found`).", body = ErrorBody),
    ))]
pub async fn trigger(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Triggered>)> {
    let id = parse_id("id", &id)?;
    let req: TriggerRequest = if body.iter().all(|b| b.is_ascii_whitespace()) {
        TriggerRequest::default()
    } else {
        parse_body::<Option<TriggerRequest>>(&body)?.unwrap_or_default()
    };
    if let Some(w) = &req.worker {
        if w.trim().is_empty() {
            return Err(ApiError::invalid("worker", "must not be empty"));
        }
    }
    let now = Utc::now();
    let (fire_time, kind) = req.due(now)?;
    let job = load(&state, &id.to_string()).await?;
    p.require(Access::Write, job.spec.job_type.as_str())?;
    // A named worker must be live and serve the job type; it runs the one run. Otherwise a
    // `sharding_broadcast` job runs once per live worker.
    let runs = match &req.worker {
        Some(w) => {
            state
                .registry
                .check_requested(&WorkerId(w.clone()), &job.spec.job_type, now)
                .map_err(|e| ApiError::invalid("worker", e))?;
            1
        }
        None => state
            .registry
            .shard_total(job.spec.route, &job.spec.job_type, now),
    };
    let mut new = NewRuns::default();
    new.push(
        id,
        kind,
        fire_time,
        req.params,
        req.worker,
        i32::try_from(runs).unwrap_or(i32::MAX),
        None,
    );
    let mut tx = state.pool.begin().await?;
    let rows = new.insert(&mut tx).await?;
    if rows.is_empty() {
        return Err(ApiError::not_found("job", id));
    }
    let trigger_ids: Vec<i64> = rows.into_iter().map(|(t, _)| t).collect();
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("job.trigger")
            .job(id, job.spec.job_type.as_str())
            .target(format!("runs {trigger_ids:?}"))
            .detail(format!("kind {}", kind.as_str())),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        job_id = id,
        ?trigger_ids,
        kind = kind.as_str(),
        "triggered through the API"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(Triggered {
            trigger_ids,
            fire_time: fire_time.unwrap_or(now),
        }),
    ))
}
