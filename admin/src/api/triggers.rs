//! `/api/triggers`: runs and their outcome.

use axum::extract::Path;
use axum::Json;
#[allow(unused_imports)] // RouteStrategy: the schema of `Run::route`
use cadenza_schemas::{RouteStrategy, RunStatus, TriggerKind};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::route::registry::Registry;

use super::doc::Id;
use super::{
    parse_id, parse_limit, parse_time, ApiError, ApiResult, AppState, ErrorBody, Params, Shared,
};
use crate::audit::{self, Entry};
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
    /// For a queued run (one run only; not in lists): its place in its line (1: released
    /// next), counting the due queued runs of its concurrency group, or of its job when the job
    /// has an overlap policy and no group; none until its fire time comes.
    #[sqlx(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub place_in_line: Option<i64>,
    /// The runs this one caused: its retry, the runs of its children (one run only; not in
    /// lists; at most 1,000).
    #[sqlx(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub follow_ups: Option<Vec<FollowUp>>,
    /// For a workflow node's run: its workflow run and node key.
    pub workflow_run_id: Option<i64>,
    pub workflow_node: Option<String>,
    /// The handler's output, for a succeeded run that returned one (one run only; not in
    /// lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>, required = false)]
    pub output: Option<sqlx::types::Json<serde_json::Value>>,
    pub created_at: DateTime<Utc>,
}

/// A run another one caused.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct FollowUp {
    pub id: i64,
    pub job_id: i64,
    /// `retry` or `child`.
    #[schema(value_type = TriggerKind)]
    pub kind: String,
    #[schema(value_type = RunStatus)]
    pub status: String,
}

/// The code stored in `route_note` when no live worker served the run's job type as it was
/// routed (queries scan/insert_triggers, publish/mark_publishing, publish/reroute_claimed): a
/// short code keeps the sentence out of every such row; [`Run::fill_notes`] words it.
const ROUTE_NOTE_NO_WORKER: &str = "no_live_worker";

impl Run {
    /// Words the stored `route_note` code, and fills in `waiting` from the live worker registry.
    fn fill_notes(&mut self, registry: &Registry, now: DateTime<Utc>) {
        if self.route_note.as_deref() == Some(ROUTE_NOTE_NO_WORKER) {
            self.route_note = Some(format!(
                "no live worker served job type {} when it was published: sent to partition {} (the hash of the job id), where it waits for a consumer",
                self.job_type,
                self.partition.map_or_else(|| "?".to_owned(), |p| p.to_string())
            ));
        }
        if self.status == RunStatus::Published.as_str() && !registry.serves(&self.job_type, now) {
            self.waiting = Some(format!(
                "no live worker serves job type {}: the run waits on partition {} of its topic until one does",
                self.job_type,
                self.partition.map_or_else(|| "?".to_owned(), |p| p.to_string())
            ));
        }
    }
}

/// Where a queued run stands, as `flow/place_in_line` reads it.
#[derive(sqlx::FromRow)]
struct Place {
    queue_key: String,
    due: bool,
    ahead: i64,
    in_flight: i64,
    limit: Option<i64>,
    overlap: String,
}

impl Run {
    /// Fills in `place_in_line` and `waiting` for a queued run: what it waits for and its place.
    async fn place_in_line(&mut self, pool: &sqlx::PgPool) -> ApiResult<()> {
        let place: Option<Place> = sqlx::query_as(sql!("flow/place_in_line"))
            .bind(self.id)
            .fetch_optional(pool)
            .await?;
        let Some(p) = place else { return Ok(()) };
        let what = match (p.queue_key.strip_prefix("g:"), p.limit) {
            (Some(group), Some(limit)) if p.in_flight >= limit => format!(
                "a slot of concurrency group {group} ({} of {limit} in use)",
                p.in_flight
            ),
            (Some(group), Some(limit)) => format!(
                "its turn in concurrency group {group} ({} of {limit} in use; its rate or the next release lets it go)",
                p.in_flight
            ),
            (Some(group), None) => format!("the next release of concurrency group {group}"),
            (None, _) => format!(
                "the end of the job's run in flight (overlap policy {})",
                p.overlap
            ),
        };
        if p.due {
            let place = p.ahead + 1;
            self.place_in_line = Some(place);
            self.waiting = Some(format!(
                "queued: waits for {what}; {} in line",
                ordinal(place)
            ));
        } else {
            self.waiting = Some(format!(
                "queued: joins the line at its fire time, then waits for {what}"
            ));
        }
        Ok(())
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`, …
fn ordinal(n: i64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
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
    let statement = match status {
        Some(s) => list_by_status(s),
        None => sql!("triggers/list"),
    };
    let mut query = sqlx::query_as(statement)
        .bind(job_id)
        .bind(status.map(|s| s.as_str()))
        .bind(before)
        .bind(limit)
        .bind(from)
        .bind(to)
        .bind(kind.map(|k| k.as_str()))
        .bind(p.visible_like());
    if status == Some(RunStatus::Publishing) {
        // Runs not yet delivered were all marked at or after the earliest settled mark; the
        // delivered ones the workers never started, which can be nearly every run ever sent,
        // were marked before it. The mark is given as a value and the statement planned for it
        // each time (not kept prepared): only then does PostgreSQL know how few runs follow
        // it, and read them from triggers_pending instead of walking every run newest first
        // (all of them when fewer than a page are left undelivered).
        let settled: Option<DateTime<Utc>> = sqlx::query_scalar(sql!("triggers/settled_before"))
            .fetch_one(&state.pool)
            .await?;
        query = query.bind(settled).persistent(false);
    }
    let mut runs: Vec<Run> = query.fetch_all(&state.pool).await?;
    let now = Utc::now();
    for r in &mut runs {
        r.fill_notes(&state.registry, now);
    }
    let next = (runs.len() as i64 == limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(RunList {
        triggers: runs,
        next_before_id: next,
    }))
}

/// One run, with its log and the runs it caused (retry, children).
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
    run.fill_notes(&state.registry, Utc::now());
    if run.status == RunStatus::Queued.as_str() {
        run.place_in_line(&state.pool).await?;
    }
    run.follow_ups = Some(
        sqlx::query_as(sql!("triggers/follow_ups"))
            .bind(id)
            .fetch_all(&state.pool)
            .await?,
    );
    Ok(Json(run))
}

/// Cancels a run. Not yet published (`scheduled`): it ends `cancelled` at once and never runs
/// (200). Published or running: a `cancel` record goes to its partition, where the worker that
/// holds it stops it (waiting: never started; running: its handler is cancelled, then stopped
/// after the cancel grace period) and reports it `cancelled` (202; the run shows `cancel
/// requested by …` until then). A cancelled run is not retried and fires no children.
#[utoipa::path(post, path = "/triggers/{id}/cancel", tag = "runs", params(Id),
    responses(
        (status = 200, description = "Cancelled before it was published; it never runs.", body = Run),
        (status = 202, description = "Published: the cancel is on its way to the worker that \
            holds the run, which reports it `cancelled`.", body = Run),
        (status = 404, description = "No such run (`not_found`).", body = ErrorBody),
        (status = 409, description = "The run already ended, or is being published \
            (`not_cancellable`).", body = ErrorBody),
    ))]
pub async fn cancel(
    state: Shared,
    axum::Extension(p): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<(axum::http::StatusCode, Json<Run>)> {
    let id = parse_id("id", &id)?;
    let (answer, run) = cancel_run(&state, &p, id).await?;
    Ok((answer, Json(run)))
}

/// Cancels run `id` for `p` as `POST /api/triggers/{id}/cancel` does (also used when a workflow
/// run is cancelled): `200` when it was cancelled before publication, `202` when a cancel record
/// was sent to its worker; `409 not_cancellable` when it ended or is being published.
/// Why a run being published cannot be cancelled yet (see [`is_being_published`]).
const BEING_PUBLISHED: &str = "it is being published right now; try again in a moment";

/// Whether [`cancel_run`] refused because the run was being published (it can be cancelled a
/// moment later, once the broker acknowledged it).
pub(super) fn is_being_published(e: &ApiError) -> bool {
    e.code == super::ErrorCode::NotCancellable && e.message.ends_with(BEING_PUBLISHED)
}

pub(super) async fn cancel_run(
    state: &AppState,
    p: &Principal,
    id: i64,
) -> ApiResult<(axum::http::StatusCode, Run)> {
    use axum::http::StatusCode;

    let mut tx = state.pool.begin().await?;
    let row: Option<(String, i64, String, Option<i32>)> =
        sqlx::query_as(sql!("triggers/lock_for_cancel"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let (status, job_id, job_type, partition) =
        row.ok_or_else(|| ApiError::not_found("trigger", id))?;
    p.require(Access::Write, &job_type)?;
    let by = p.actor().name;
    let refuse = |why: String| {
        ApiError::new(
            StatusCode::CONFLICT,
            super::ErrorCode::NotCancellable,
            format!("run {id} cannot be cancelled: {why}"),
        )
    };
    let answer = match status.parse::<RunStatus>() {
        Ok(RunStatus::Scheduled | RunStatus::Queued) => {
            sqlx::query(sql!("triggers/cancel_unpublished"))
                .bind([id])
                .bind(format!("cancelled by {by}"))
                .execute(&mut *tx)
                .await?;
            StatusCode::OK
        }
        // A run `publishing` in its row that the delivery record holds comes as `published`,
        // with the partition recorded there (triggers/lock_for_cancel): it is on the topic.
        Ok(RunStatus::Published | RunStatus::Running) => {
            let partition =
                partition.ok_or_else(|| refuse("it has no partition recorded".to_owned()))?;
            let job_type_id =
                cadenza_schemas::JobType::parse(&job_type).map_err(ApiError::internal)?;
            // Sent while the row is locked: if the broker refuses, nothing is recorded.
            state
                .kafka
                .send_cancel(&job_type_id, job_id, id, partition, &by)
                .await
                .map_err(ApiError::from)?;
            sqlx::query(sql!("triggers/cancel_requested"))
                .bind(id)
                .bind(&by)
                .execute(&mut *tx)
                .await?;
            StatusCode::ACCEPTED
        }
        Ok(RunStatus::Publishing) => {
            // Written claimed ahead by the scan and not yet taken for sending: cancelled as
            // if it were `scheduled`; else it is being published.
            let drop_after = state.drop_claimed_after(&mut tx).await?;
            let cancelled: i64 = sqlx::query_scalar(sql!("triggers/cancel_claimed"))
                .bind(id)
                .bind(job_id)
                .bind(drop_after.as_millis() as f64)
                .bind(format!("cancelled by {by}"))
                .fetch_one(&mut *tx)
                .await?;
            if cancelled == 0 {
                return Err(refuse(BEING_PUBLISHED.to_owned()));
            }
            StatusCode::OK
        }
        _ => return Err(refuse(format!("it already ended ({status})"))),
    };
    // Cancelled before publication: the run ended here (the others end when a worker reports).
    let counted = if answer == StatusCode::OK {
        crate::outcome::after_terminal(&mut tx, &state.registry, &[(id, RunStatus::Cancelled)])
            .await?
            .ended
    } else {
        crate::outcome::Ended::default()
    };
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("run.cancel")
            .job(job_id, &job_type)
            .target(format!("run {id}"))
            .detail(if answer == StatusCode::OK {
                "cancelled before publication".to_owned()
            } else {
                format!("cancel sent to partition {}", partition.unwrap_or(-1))
            }),
    )
    .await?;
    tx.commit().await?;
    counted.record();
    tracing::info!(trigger_id = id, %by, status = %answer, "run cancel requested");
    let run: Option<Run> = sqlx::query_as(sql!("triggers/get"))
        .bind(id)
        .fetch_optional(&state.pool)
        .await?;
    let mut run = run.ok_or_else(|| ApiError::not_found("trigger", id))?;
    run.fill_notes(&state.registry, Utc::now());
    Ok((answer, run))
}

/// How often a followed log is looked at.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// A followed log ends after this long (a client may follow again).
const FOLLOW_AT_MOST: std::time::Duration = std::time::Duration::from_secs(3600);

/// What to send so that a client holding `sent` shows `now`: the new tail (`append`), or the
/// whole log again (`reset`) when the log was cut at the front (it keeps the last 64 KiB) or
/// replaced by the finished run's.
fn log_change(sent: &str, now: &str) -> Option<(&'static str, String)> {
    if now == sent {
        return None;
    }
    if let Some(tail) = now.strip_prefix(sent) {
        return Some(("append", tail.to_owned()));
    }
    // The front was cut: find where what was sent last ends.
    let anchor_start = sent.char_indices().rev().nth(255).map_or(0, |(i, _)| i);
    let anchor = &sent[anchor_start..];
    if anchor.len() >= 64 {
        if let Some(at) = now.rfind(anchor) {
            return Some(("append", now[at + anchor.len()..].to_owned()));
        }
    }
    Some(("reset", now.to_owned()))
}

/// A run's log as it grows, as server-sent events: `append` (new text), `reset` (the whole log,
/// when it was cut at the front or replaced), `status` (the run's status, when it changes) and
/// `end` (the run ended; the stream closes). A log that is already complete is sent at once.
#[utoipa::path(get, path = "/triggers/{id}/log", tag = "runs", params(Id),
    responses(
        (status = 200, description = "`text/event-stream` of `append`, `reset`, `status` and \
            `end` events.", content_type = "text/event-stream", body = String),
        (status = 404, description = "No such run (`not_found`).", body = ErrorBody),
    ))]
pub async fn log_stream(
    state: Shared,
    axum::Extension(p): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<axum::response::Response> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use axum::response::IntoResponse;
    use futures::StreamExt;

    let id = parse_id("id", &id)?;
    let job_type: Option<String> =
        sqlx::query_scalar("SELECT job_type FROM triggers WHERE id = $1")
            .bind(id)
            .fetch_optional(&state.pool)
            .await?;
    let job_type = job_type.ok_or_else(|| ApiError::not_found("trigger", id))?;
    p.require(Access::Read, &job_type)?;

    struct Follow {
        pool: sqlx::PgPool,
        sent: String,
        status: String,
        ended: bool,
        until: tokio::time::Instant,
        first: bool,
        stop: tokio_util::sync::CancellationToken,
    }
    let start = Follow {
        stop: state.shutdown.clone(),
        pool: state.pool.clone(),
        sent: String::new(),
        status: String::new(),
        ended: false,
        until: tokio::time::Instant::now() + FOLLOW_AT_MOST,
        first: true,
    };
    let stream = futures::stream::unfold(start, move |mut f| async move {
        loop {
            if f.ended || tokio::time::Instant::now() >= f.until {
                return None;
            }
            if !f.first {
                // The admin stopping closes the stream without an `end`: the client follows
                // again through another admin.
                tokio::select! {
                    () = tokio::time::sleep(FOLLOW_EVERY) => {}
                    () = f.stop.cancelled() => return None,
                }
            }
            f.first = false;
            let row: Option<(String, Option<String>)> =
                match sqlx::query_as(sql!("triggers/follow_log"))
                    .bind(id)
                    .fetch_optional(&f.pool)
                    .await
                {
                    Ok(row) => row,
                    // A database hiccup: look again at the next tick.
                    Err(error) => {
                        tracing::warn!(%error, trigger_id = id, "following a run's log");
                        continue;
                    }
                };
            let Some((status, log)) = row else {
                f.ended = true;
                return Some((vec![Event::default().event("end").data("gone")], f));
            };
            let log = log.unwrap_or_default();
            let mut events = Vec::new();
            if let Some((kind, text)) = log_change(&f.sent, &log) {
                events.push(Event::default().event(kind).data(text));
                f.sent = log;
            }
            if status != f.status {
                events.push(Event::default().event("status").data(status.clone()));
                let ended = status.parse::<RunStatus>().is_ok_and(|s| s.is_terminal());
                f.status = status;
                if ended {
                    events.push(Event::default().event("end").data(f.status.clone()));
                    f.ended = true;
                }
            }
            if !events.is_empty() {
                return Some((events, f));
            }
        }
    })
    .flat_map(|events| {
        futures::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The statement listing the runs that show `status`: `triggers/list_by_status` with the
/// condition on the run's own row that selects the runs that may show it, written so that every
/// plan PostgreSQL keeps for the statement can use the index serving them and the delivery record
/// is looked up for those runs only. Scheduled runs are read from `triggers_scheduled` and
/// `triggers_requested` (migrations 0017, 0014; `triggers_pending` now also holds every run
/// delivered and never started), running ones from `triggers_running`, those that ended other
/// than succeeded from `triggers_status`, succeeded ones (most runs) and published ones newest
/// first (a published run is `publishing` in its row when the delivery record holds it, and those
/// are in no index by id). Publishing runs have a statement of their own,
/// `triggers/list_publishing`, which takes the earliest settled mark as `$9` (see [`list`]).
fn list_by_status(status: RunStatus) -> &'static str {
    use std::sync::LazyLock;
    const BASE: &str = sql!("triggers/list_by_status");
    const PLACEHOLDER: &str = "TRUE /* index */";
    static SCHEDULED: LazyLock<String> = LazyLock::new(|| {
        BASE.replace(
            PLACEHOLDER,
            &format!(
                "t.status = 'scheduled' AND ({} OR {})",
                kinds_in(true),
                kinds_in(false)
            ),
        )
    });
    static PUBLISHED: LazyLock<String> =
        LazyLock::new(|| BASE.replace(PLACEHOLDER, "t.status IN ('published', 'publishing')"));
    static RUNNING: LazyLock<String> =
        LazyLock::new(|| BASE.replace(PLACEHOLDER, "t.status = 'running'"));
    static SUCCEEDED: LazyLock<String> =
        LazyLock::new(|| BASE.replace(PLACEHOLDER, "t.status = 'succeeded'"));
    static ENDED: LazyLock<String> = LazyLock::new(|| {
        BASE.replace(
            PLACEHOLDER,
            "t.status = $2 AND t.status NOT IN ('scheduled', 'publishing', 'running', 'succeeded')",
        )
    });
    match status {
        RunStatus::Scheduled => SCHEDULED.as_str(),
        RunStatus::Publishing => sql!("triggers/list_publishing"),
        RunStatus::Published => PUBLISHED.as_str(),
        RunStatus::Running => RUNNING.as_str(),
        RunStatus::Succeeded => SUCCEEDED.as_str(),
        RunStatus::Failed
        | RunStatus::TimedOut
        | RunStatus::Discarded
        | RunStatus::Cancelled
        | RunStatus::Lost
        | RunStatus::Misfired
        // Indexed with the ended ones (triggers_status, migration 0013).
        | RunStatus::Queued
        | RunStatus::Skipped => ENDED.as_str(),
    }
}

/// `t.kind IN (…)` of the kinds of a job's schedule (`schedule`), or of the others: the
/// predicates of triggers_scheduled and triggers_requested, which between them hold every
/// scheduled run.
fn kinds_in(schedule: bool) -> String {
    let kinds: Vec<String> = TriggerKind::ALL
        .iter()
        .filter(|k| k.is_schedule() == schedule)
        .map(|k| format!("'{}'", k.as_str()))
        .collect();
    format!("t.kind IN ({})", kinds.join(", "))
}

#[cfg(test)]
mod tests {
    use super::{kinds_in, list_by_status, log_change, ordinal};
    use cadenza_schemas::RunStatus;

    #[test]
    fn places_read_as_ordinals() {
        let words: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            words,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }

    /// Every status gets its own condition, and only the publishing list takes the settled
    /// mark ($9) that `list` binds for it.
    #[test]
    fn each_status_list_names_its_condition() {
        for &s in RunStatus::ALL {
            let statement = list_by_status(s);
            assert!(!statement.contains("TRUE /* index */"), "{s:?}");
            assert_eq!(
                statement.contains("$9"),
                s == RunStatus::Publishing,
                "{s:?}"
            );
        }
    }

    /// The scheduled runs' list names the predicates of the indexes holding scheduled runs
    /// (migrations 0017 and 0014) as they are written there, so that every plan can read them.
    #[test]
    fn the_scheduled_list_names_the_predicates_of_its_indexes() {
        let statement = list_by_status(RunStatus::Scheduled);
        for (migration, schedule) in [
            (
                include_str!("../../migrations/0017_scheduled_runs_index.sql"),
                true,
            ),
            (include_str!("../../migrations/0014_workflows.sql"), false),
        ] {
            let condition = kinds_in(schedule);
            assert!(statement.contains(&condition), "{condition}");
            let predicate = condition.trim_start_matches("t.");
            assert!(
                migration.contains(&format!("WHERE status = 'scheduled' AND {predicate}")),
                "{predicate}"
            );
        }
    }

    #[test]
    fn a_followed_log_sends_only_what_is_new_and_resets_when_it_cannot() {
        assert_eq!(log_change("", ""), None);
        assert_eq!(log_change("a", "a"), None);
        assert_eq!(log_change("", "a"), Some(("append", "a".into())));
        assert_eq!(
            log_change("a\nb", "a\nb\nc"),
            Some(("append", "\nc".into()))
        );
        // Cut at the front (the log keeps its last 64 KiB): the tail after what was sent.
        let sent: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let now = format!("{}line 100\n", &sent[50..]);
        assert_eq!(
            log_change(&sent, &now),
            Some(("append", "line 100\n".into()))
        );
        // Replaced by something else: the whole log again.
        assert_eq!(
            log_change("short", "other"),
            Some(("reset", "other".into()))
        );
    }
}
