//! `/api/triggers`: runs and their outcome.

use axum::extract::Path;
use axum::Json;
#[allow(unused_imports)] // RouteStrategy: the schema of `Run::route`
use cadenza_schemas::{RouteStrategy, RunStatus, TriggerKind};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::route::registry::Registry;

use super::doc::Id;
use super::{parse_id, parse_limit, parse_time, ApiError, ApiResult, ErrorBody, Params, Shared};
use crate::auth::{Access, Principal};

/// One run as the API shows it.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Run {
    pub id: i64,
    pub job_id: i64,
    pub job_type: String,
    #[schema(value_type = TriggerKind)]
    pub kind: String,
    #[schema(value_type = RunStatus)]
    pub status: String,
    pub fire_time: DateTime<Utc>,
    pub params: String,
    /// Deliveries of this run to a worker (more than 1 after a worker died mid-run).
    pub attempt: i32,
    /// This run's shard of a `sharding_broadcast` fire (0-based), and how many there are.
    pub shard_index: i32,
    pub shard_total: i32,
    #[schema(value_type = RouteStrategy)]
    pub route: String,
    /// The worker a manual trigger asked for.
    pub requested_worker: Option<String>,
    /// The worker the partition selector chose.
    pub routed_worker: Option<String>,
    /// Why the run went where it went, when not by the strategy (e.g. no live worker).
    pub route_note: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub published_at: Option<DateTime<Utc>>,
    /// The worker that ran it.
    pub worker_id: Option<String>,
    pub worker_group: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// What the handler said, or why the run ended as it did.
    pub message: Option<String>,
    /// The run's log (one run only; not in lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The run this one retries (kind `retry`) or whose success fired it (kind `child`).
    pub parent_id: Option<i64>,
    /// Which retry of its fire this run is (0: the first run).
    pub retry_no: i32,
    /// The handler asked for this failed run to be retried (`Outcome::Retry`); it is retried
    /// under the job's `retries` like any failed run.
    pub retry_requested: bool,
    /// For a run published but not started: why it waits, when no live worker serves its job
    /// type (it runs once one does).
    #[sqlx(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub waiting: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl Run {
    /// Fills in `waiting` from the live worker registry.
    fn note_waiting(&mut self, registry: &Registry, now: DateTime<Utc>) {
        if self.status == RunStatus::Published.as_str() && !registry.serves(&self.job_type, now) {
            self.waiting = Some(format!(
                "no live worker serves job type {}: the run waits on partition {} of its topic until one does",
                self.job_type,
                self.partition.map_or_else(|| "?".to_owned(), |p| p.to_string())
            ));
        }
    }
}

/// Which runs, newest first, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct RunQuery {
    /// Only runs of this job.
    #[param(minimum = 1)]
    job_id: Option<i64>,
    status: Option<RunStatus>,
    kind: Option<TriggerKind>,
    /// Only runs with a fire time at or after this (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Only runs with a fire time before this (RFC 3339).
    to: Option<DateTime<Utc>>,
    /// The page before this id (`next_before_id` of the previous page).
    #[param(minimum = 1)]
    before_id: Option<i64>,
    /// Runs per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A page of runs.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RunList {
    triggers: Vec<Run>,
    /// Give it as `before_id` for the next page; none on the last page.
    next_before_id: Option<i64>,
}

/// Runs of the jobs the caller may see, newest first.
#[utoipa::path(get, path = "/triggers", tag = "runs", params(RunQuery),
    responses((status = 200, description = "A page of runs.", body = RunList)))]
pub async fn list(
    state: Shared,
    axum::Extension(p): axum::Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<RunList>> {
    let job_id = q.get("job_id").map(|s| parse_id("job_id", s)).transpose()?;
    let status = match q.get("status") {
        None => None,
        Some(s) => Some(
            s.parse::<RunStatus>()
                .map_err(|e| ApiError::invalid("status", e))?,
        ),
    };
    let before = match q.get("before_id") {
        None => i64::MAX,
        Some(s) => parse_id("before_id", s)?,
    };
    let limit = parse_limit(q.get("limit"))?;
    let (from, to) = (
        parse_time("from", q.get("from"))?,
        parse_time("to", q.get("to"))?,
    );
    let kind = match q.get("kind") {
        None => None,
        Some(s) => Some(
            s.parse::<TriggerKind>()
                .map_err(|e| ApiError::invalid("kind", e))?,
        ),
    };
    let mut runs: Vec<Run> = sqlx::query_as(sql!("triggers/list"))
        .bind(job_id)
        .bind(status.map(|s| s.as_str()))
        .bind(before)
        .bind(limit)
        .bind(from)
        .bind(to)
        .bind(kind.map(|k| k.as_str()))
        .bind(p.visible_like())
        .fetch_all(&state.pool)
        .await?;
    let now = Utc::now();
    for r in &mut runs {
        r.note_waiting(&state.registry, now);
    }
    let next = (runs.len() as i64 == limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(RunList {
        triggers: runs,
        next_before_id: next,
    }))
}

/// One run, with its log.
#[utoipa::path(get, path = "/triggers/{id}", tag = "runs", params(Id),
    responses(
        (status = 200, description = "The run.", body = Run),
        (status = 404, description = "No such run (`not_found`).", body = ErrorBody),
    ))]
pub async fn get(
    state: Shared,
    axum::Extension(p): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Run>> {
    let id = parse_id("id", &id)?;
    let run: Option<Run> = sqlx::query_as(sql!("triggers/get"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?;
    let mut run = run.ok_or_else(|| ApiError::not_found("trigger", id))?;
    p.require(Access::Read, &run.job_type)?;
    run.note_waiting(&state.registry, Utc::now());
    Ok(Json(run))
}
