//! `/api/workflows` (create, list, read, replace, delete, enable, disable, trigger) and
//! `/api/workflow-runs` (list, read, cancel, retry a node, mark a node succeeded).
//!
//! A workflow's job-type scope is that of the jobs its nodes run: a caller sees a workflow (or a
//! workflow run) when it may see every one of those job types, and changes, triggers or acts on
//! it when it may change every one of them (for a run, the jobs of the nodes it fired with). A
//! node whose job no longer exists adds nothing to the scope.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::Utc;
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;

use super::doc::Id;
use super::{
    parse_body, parse_bool, parse_id, parse_limit_upto, ApiError, ApiResult, AppState, ErrorBody,
    ErrorCode, Params, Shared,
};
use crate::audit::{self, Entry};
use crate::auth::{Access, Principal, Via};
use crate::schedule::JobSchedule;
use crate::workflow::engine::{self, ActionError, CheckError, NewRun, NodeAction};
use crate::workflow::store::{self, RunFilter, StoreError, Workflow, WorkflowFilter, WorkflowRun};
use crate::workflow::{NodeSpec, WorkflowRunStatus, WorkflowSpec};

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(e) => e.into(),
            StoreError::NameTaken(name) => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::WorkflowExists,
                format!("a workflow named {name:?} exists already; choose another name"),
            ),
            e @ StoreError::Unreadable { .. } => ApiError::internal(e),
        }
    }
}

impl From<CheckError> for ApiError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Db(e) => e.into(),
            CheckError::Field(f) => f.into(),
        }
    }
}

impl From<ActionError> for ApiError {
    fn from(e: ActionError) -> Self {
        match e {
            ActionError::Db(e) => e.into(),
            ActionError::RunNotFound(id) => ApiError::not_found("workflow run", id),
            e @ ActionError::NodeNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, e.to_string())
            }
            ActionError::Conflict(why) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::Conflict, why)
            }
        }
    }
}

/// Most workflows or workflow runs in one page: each comes with its nodes (up to 1,000).
const MAX_PAGE: i64 = 100;
/// A node whose job `p` may not see is refused exactly as one whose job does not exist, so that a
/// workflow tells nobody which jobs exist outside their patterns. Checked before
/// [`engine::check_jobs`].
async fn hide_unseen(conn: &mut PgConnection, p: &Principal, nodes: &[NodeSpec]) -> ApiResult<()> {
    if p.visible_like().is_none() {
        return Ok(());
    }
    let ids: Vec<i64> = nodes.iter().map(|n| n.job_id.0).collect();
    let visible = super::scope::visible_job_types(conn, p, &ids).await?;
    for (i, n) in nodes.iter().enumerate() {
        if !visible.contains_key(&n.job_id.0) {
            return Err(ApiError::invalid(
                format!("nodes[{i}] ({:?}).job_id", n.key),
                format!("job {} does not exist", n.job_id.0),
            ));
        }
    }
    Ok(())
}

/// `Ok` when `p` may `access` every job type the jobs of `nodes` have.
async fn require(
    conn: &mut PgConnection,
    p: &Principal,
    access: Access,
    nodes: &[NodeSpec],
) -> ApiResult<()> {
    if p.visible_like().is_none() {
        return Ok(());
    }
    for job_type in store::job_types(conn, nodes).await? {
        p.require(access, &job_type)?;
    }
    Ok(())
}

fn as_json(w: &Workflow) -> ApiResult<Value> {
    serde_json::to_value(w).map_err(ApiError::internal)
}

fn not_found(id: i64) -> ApiError {
    ApiError::not_found("workflow", id)
}

/// Creates a workflow. It fires by its schedule from now on (unless `enabled` is false). The
/// graph is checked (cycles, unknown parents, nodes not connected to the others, at most 1,000
/// nodes), and so are its jobs (they exist; none routes `sharding_broadcast`): an error names
/// the node, as in `nodes[1] ("b").parents`.
#[utoipa::path(post, path = "/workflows", tag = "workflows", request_body = WorkflowSpec,
    responses(
        (status = 201, description = "Created.", body = Workflow),
        (status = 409, description = "A workflow of that name exists (`workflow_exists`).", body = ErrorBody),
    ))]
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Workflow>)> {
    let spec: WorkflowSpec = parse_body(&body)?;
    let now = Utc::now();
    let schedule = spec.validate(now)?;
    let mut tx = state.pool.begin().await?;
    hide_unseen(&mut tx, &p, &spec.nodes).await?;
    engine::check_jobs(&mut tx, &spec.nodes).await?;
    require(&mut tx, &p, Access::Write, &spec.nodes).await?;
    let next = if spec.enabled {
        schedule.first_fire(now)
    } else {
        None
    };
    let workflow = store::insert(&mut tx, state.shard_count, &spec, next).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("workflow.create")
            .target(format!("workflow {}", workflow.id))
            .after(as_json(&workflow)?),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = workflow.id, name = %workflow.name, "workflow created");
    Ok((StatusCode::CREATED, Json(workflow)))
}

/// Which workflows, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct WorkflowQuery {
    /// Only workflows whose name contains this (any case).
    name: Option<String>,
    /// Only enabled (`true`) or disabled (`false`) workflows.
    enabled: Option<bool>,
    /// The page after this id (`next_after_id` of the previous page).
    #[param(minimum = 1)]
    after_id: Option<i64>,
    /// Workflows per page, 1 to 100 (default 100): each comes with its nodes.
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
}

/// A page of workflows.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WorkflowList {
    workflows: Vec<Workflow>,
    /// Give it as `after_id` for the next page; none on the last page.
    next_after_id: Option<i64>,
}

/// The workflows the caller may see, by id.
#[utoipa::path(get, path = "/workflows", tag = "workflows", params(WorkflowQuery),
    responses((status = 200, description = "A page of workflows.", body = WorkflowList)))]
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<WorkflowList>> {
    let filter = WorkflowFilter {
        after_id: match q.get("after_id") {
            None => 0,
            Some(s) => parse_id("after_id", s)?,
        },
        limit: parse_limit_upto(q.get("limit"), MAX_PAGE)?,
        enabled: parse_bool("enabled", q.get("enabled"))?,
        name: q.get("name").cloned(),
        visible_like: p.visible_like(),
    };
    let mut conn = state.pool.acquire().await?;
    let workflows = store::list(&mut conn, &filter).await?;
    let next = (workflows.len() as i64 == filter.limit)
        .then(|| workflows.last().map(|w| w.id))
        .flatten();
    Ok(Json(WorkflowList {
        workflows,
        next_after_id: next,
    }))
}

/// One workflow.
#[utoipa::path(get, path = "/workflows/{id}", tag = "workflows", params(Id),
    responses(
        (status = 200, description = "The workflow.", body = Workflow),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
    ))]
pub async fn get(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Workflow>> {
    let id = parse_id("id", &id)?;
    let mut conn = state.pool.acquire().await?;
    let workflow = store::select(&mut conn, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    require(&mut conn, &p, Access::Read, &workflow.nodes).await?;
    Ok(Json(workflow))
}

/// How a change reaches the stored workflow.
enum Change {
    /// A new definition (`PUT`): validated as on creation, its jobs checked.
    Replace(Box<WorkflowSpec>),
    /// Enabled or disabled, nothing else.
    Enabled(bool),
}

/// Locks workflow `id`, applies `change`, stores it with its next fire time and audits it as
/// `action`. The next fire time is computed from now when the schedule changed or the workflow
/// is (re)enabled (time spent disabled never fires); otherwise it stays. Runs already fired
/// keep the nodes they fired with.
async fn modify(
    state: &AppState,
    p: &Principal,
    action: &str,
    id: i64,
    change: Change,
) -> ApiResult<Workflow> {
    let mut tx = state.pool.begin().await?;
    let current = store::lock(&mut tx, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    require(&mut tx, p, Access::Write, &current.nodes).await?;
    let (spec, check) = match change {
        Change::Replace(spec) => (*spec, true),
        Change::Enabled(enabled) => (
            WorkflowSpec {
                enabled,
                ..current.spec()
            },
            false,
        ),
    };
    let now = Utc::now();
    let schedule = if spec.schedule == current.schedule {
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
    };
    if check {
        hide_unseen(&mut tx, p, &spec.nodes).await?;
        engine::check_jobs(&mut tx, &spec.nodes).await?;
        require(&mut tx, p, Access::Write, &spec.nodes).await?;
    }
    let restart = spec.schedule != current.schedule || (spec.enabled && !current.enabled);
    let next = if !spec.enabled {
        None
    } else if restart {
        schedule.first_fire(now)
    } else {
        // A self-running schedule (cron, fix_rate) with nothing pending starts again from now.
        current
            .next_fire_at
            .or_else(|| schedule.next_after(now).and(schedule.first_fire(now)))
    };
    let workflow = store::update(&mut tx, id, &spec, next).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new(action)
            .target(format!("workflow {id}"))
            .before(as_json(&current)?)
            .after(as_json(&workflow)?),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = id, action, "workflow changed");
    Ok(workflow)
}

/// Replaces a workflow's definition, checked as on creation. Its next fire time is computed
/// from now when the schedule changes or it is enabled again. Workflow runs already fired keep
/// the nodes they fired with.
#[utoipa::path(put, path = "/workflows/{id}", tag = "workflows", params(Id),
    request_body = WorkflowSpec,
    responses(
        (status = 200, description = "Replaced.", body = Workflow),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
        (status = 409, description = "Another workflow has that name (`workflow_exists`).", body = ErrorBody),
    ))]
pub async fn update(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Workflow>> {
    let id = parse_id("id", &id)?;
    let spec: WorkflowSpec = parse_body(&body)?;
    let change = Change::Replace(Box::new(spec));
    Ok(Json(
        modify(&state, &p, "workflow.update", id, change).await?,
    ))
}

/// Enables a workflow: it fires again from its next fire time after now.
#[utoipa::path(post, path = "/workflows/{id}/enable", tag = "workflows", params(Id),
    responses(
        (status = 200, description = "Enabled.", body = Workflow),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
    ))]
pub async fn enable(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Workflow>> {
    let id = parse_id("id", &id)?;
    let change = Change::Enabled(true);
    Ok(Json(
        modify(&state, &p, "workflow.enable", id, change).await?,
    ))
}

/// Disables a workflow: it stops firing. Workflow runs already started go on.
#[utoipa::path(post, path = "/workflows/{id}/disable", tag = "workflows", params(Id),
    responses(
        (status = 200, description = "Disabled.", body = Workflow),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
    ))]
pub async fn disable(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Workflow>> {
    let id = parse_id("id", &id)?;
    let change = Change::Enabled(false);
    Ok(Json(
        modify(&state, &p, "workflow.disable", id, change).await?,
    ))
}

/// Deletes a workflow and its workflow runs. Runs of its nodes stay, as runs of their jobs (one
/// not yet ended still runs; nothing follows it).
#[utoipa::path(delete, path = "/workflows/{id}", tag = "workflows", params(Id),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
    ))]
pub async fn delete(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id("id", &id)?;
    let mut tx = state.pool.begin().await?;
    let current = store::lock(&mut tx, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    require(&mut tx, &p, Access::Write, &current.nodes).await?;
    if !store::delete(&mut tx, id).await? {
        return Err(not_found(id));
    }
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("workflow.delete")
            .target(format!("workflow {id}"))
            .before(as_json(&current)?),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = id, "workflow deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Workflow run `id`, or the `404` for it.
async fn load_run(conn: &mut PgConnection, id: i64) -> ApiResult<WorkflowRun> {
    store::get_run(conn, id)
        .await?
        .ok_or_else(|| ApiError::not_found("workflow run", id))
}

/// Runs a workflow now, whatever its schedule and whether it is enabled: a workflow run of kind
/// `manual` (from a console session) or `api` (with a token), with its first nodes' runs due
/// now.
#[utoipa::path(post, path = "/workflows/{id}/trigger", tag = "workflows", params(Id),
    responses(
        (status = 201, description = "The workflow run; its first nodes' runs are recorded and \
            published when due.", body = WorkflowRun),
        (status = 404, description = "No such workflow (`not_found`).", body = ErrorBody),
    ))]
pub async fn trigger(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<WorkflowRun>)> {
    let id = parse_id("id", &id)?;
    let mut tx = state.pool.begin().await?;
    let workflow = store::lock(&mut tx, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    require(&mut tx, &p, Access::Write, &workflow.nodes).await?;
    let kind = match p.via {
        Via::Session { .. } => "manual",
        Via::Token(_) | Via::Service => "api",
    };
    let now = store::db_now(&mut tx).await?;
    let new = NewRun {
        workflow_id: id,
        nodes: &workflow.nodes,
        kind,
        fire_time: now,
        requested_by: Some(&p.actor),
    };
    let run_id = engine::start_run(&mut tx, &new).await?.ok_or_else(|| {
        ApiError::internal(format!("workflow {id}: a {kind} run was not inserted"))
    })?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("workflow.trigger")
            .target(format!("workflow {id}"))
            .detail(format!("workflow run {run_id}, kind {kind}")),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        workflow_id = id,
        workflow_run_id = run_id,
        kind,
        "workflow triggered"
    );
    let mut conn = state.pool.acquire().await?;
    let run = load_run(&mut conn, run_id).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// Which workflow runs, newest first, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct WorkflowRunQuery {
    /// Only runs of this workflow.
    #[param(minimum = 1)]
    workflow_id: Option<i64>,
    status: Option<WorkflowRunStatus>,
    /// The page before this id (`next_before_id` of the previous page).
    #[param(minimum = 1)]
    before_id: Option<i64>,
    /// Workflow runs per page, 1 to 100 (default 100): each comes with its nodes.
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
}

/// A page of workflow runs.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WorkflowRunList {
    /// With their nodes (without their runs' outputs).
    workflow_runs: Vec<WorkflowRun>,
    /// Give it as `before_id` for the next page; none on the last page.
    next_before_id: Option<i64>,
}

/// Workflow runs the caller may see, newest first.
#[utoipa::path(get, path = "/workflow-runs", tag = "workflows", operation_id = "list",
    params(WorkflowRunQuery),
    responses((status = 200, description = "A page of workflow runs.", body = WorkflowRunList)))]
pub async fn list_runs(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<WorkflowRunList>> {
    let status = match q.get("status") {
        None => None,
        Some(s) => Some(WorkflowRunStatus::parse(s).ok_or_else(|| {
            let all: Vec<&str> = WorkflowRunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid(
                "status",
                format!("{s:?} is not a workflow run status: use {}", all.join(", ")),
            )
        })?),
    };
    let filter = RunFilter {
        workflow_id: q
            .get("workflow_id")
            .map(|s| parse_id("workflow_id", s))
            .transpose()?,
        status,
        before_id: match q.get("before_id") {
            None => i64::MAX,
            Some(s) => parse_id("before_id", s)?,
        },
        limit: parse_limit_upto(q.get("limit"), MAX_PAGE)?,
        visible_like: p.visible_like(),
    };
    let mut conn = state.pool.acquire().await?;
    let runs = store::list_runs(&mut conn, &filter).await?;
    let next = (runs.len() as i64 == filter.limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(WorkflowRunList {
        workflow_runs: runs,
        next_before_id: next,
    }))
}

/// One workflow run, with every node, its latest run's status and that run's output.
#[utoipa::path(get, path = "/workflow-runs/{id}", tag = "workflows", operation_id = "get",
    params(Id),
    responses(
        (status = 200, description = "The workflow run.", body = WorkflowRun),
        (status = 404, description = "No such workflow run (`not_found`).", body = ErrorBody),
    ))]
pub async fn get_run(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkflowRun>> {
    let id = parse_id("id", &id)?;
    let mut conn = state.pool.acquire().await?;
    let run = load_run(&mut conn, id).await?;
    require(&mut conn, &p, Access::Read, &run.specs()).await?;
    Ok(Json(run))
}

/// Cancels a running workflow run: its waiting nodes are skipped, its running ones cancelled,
/// and it ends `cancelled`. Then each running node's run is cancelled as `POST
/// /api/triggers/{id}/cancel` does; one that cannot be cancelled now (it just ended, or is being
/// published) is left to end by itself, and changes nothing in the workflow run.
#[utoipa::path(post, path = "/workflow-runs/{id}/cancel", tag = "workflows",
    operation_id = "cancel", params(Id),
    responses(
        (status = 200, description = "Cancelled.", body = WorkflowRun),
        (status = 404, description = "No such workflow run (`not_found`).", body = ErrorBody),
        (status = 409, description = "The workflow run is not running (`conflict`).", body = ErrorBody),
    ))]
pub async fn cancel_run(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkflowRun>> {
    let id = parse_id("id", &id)?;
    let mut tx = state.pool.begin().await?;
    let run = load_run(&mut tx, id).await?;
    require(&mut tx, &p, Access::Write, &run.specs()).await?;
    let by = p.actor().name;
    let engine::Cancelled {
        to_stop: runs,
        ended,
    } = engine::cancel(&mut tx, id, &by).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("workflow_run.cancel")
            .target(format!("workflow run {id}"))
            .detail(format!(
                "workflow {}; node runs to cancel: {runs:?}",
                run.workflow_id
            )),
    )
    .await?;
    tx.commit().await?;
    ended.record();
    tracing::info!(workflow_run_id = id, %by, node_runs = ?runs, "workflow run cancelled");
    for run_id in runs {
        // A run being handed to the broker can be cancelled once it is acknowledged: a moment.
        let mut tries = 0;
        let cancelled = loop {
            let answer = super::triggers::cancel_run(&state, &p, run_id).await;
            match answer {
                Err(e) if super::triggers::is_being_published(&e) && tries < 25 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => break other,
            }
        };
        match cancelled {
            Ok((answer, _)) => {
                tracing::info!(workflow_run_id = id, trigger_id = run_id, status = %answer, "node run cancelled")
            }
            Err(e) => tracing::warn!(
                workflow_run_id = id,
                trigger_id = run_id,
                code = e.code.as_str(),
                error = %e.message,
                "a node run of the cancelled workflow run was not cancelled; it ends by itself"
            ),
        }
    }
    let mut conn = state.pool.acquire().await?;
    Ok(Json(load_run(&mut conn, id).await?))
}

/// Applies an operator's action to node `node` of workflow run `id`, audited.
async fn act(
    state: &AppState,
    p: &Principal,
    id: &str,
    node: &str,
    action: NodeAction,
) -> ApiResult<WorkflowRun> {
    let id = parse_id("id", id)?;
    let mut tx = state.pool.begin().await?;
    let run = load_run(&mut tx, id).await?;
    require(&mut tx, p, Access::Write, &run.specs()).await?;
    let by = p.actor().name;
    let started = engine::node_action(&mut tx, id, node, action, &by).await?;
    let name = match action {
        NodeAction::Retry => "workflow_run.retry_node",
        NodeAction::MarkSucceeded => "workflow_run.mark_succeeded",
    };
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new(name)
            .target(format!("workflow run {id}"))
            .detail(format!(
                "workflow {}; node {node:?}; {started} node runs started",
                run.workflow_id
            )),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_run_id = id, node, action = name, started, %by, "workflow node action");
    let mut conn = state.pool.acquire().await?;
    load_run(&mut conn, id).await
}

/// The `{id}` and `{node}` of a node's path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the path as text
pub struct NodePath {
    /// The workflow run's id: a positive integer.
    #[param(minimum = 1)]
    id: i64,
    /// The node's key.
    node: String,
}

/// Runs a failed or cancelled node again (a new run, `tries` + 1); the nodes after it that were
/// skipped wait again. A workflow run that had ended runs again.
#[utoipa::path(post, path = "/workflow-runs/{id}/nodes/{node}/retry", tag = "workflows",
    operation_id = "retry_node", params(NodePath),
    responses(
        (status = 200, description = "The workflow run, the node running again.", body = WorkflowRun),
        (status = 404, description = "No such workflow run or node (`not_found`).", body = ErrorBody),
        (status = 409, description = "The node is not failed or cancelled, or the workflow run \
            was cancelled (`conflict`).", body = ErrorBody),
    ))]
pub async fn retry_node(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path((id, node)): Path<(String, String)>,
) -> ApiResult<Json<WorkflowRun>> {
    Ok(Json(act(&state, &p, &id, &node, NodeAction::Retry).await?))
}

/// Counts a failed or cancelled node as succeeded, so that the nodes after it go on. A workflow
/// run that had ended runs again.
#[utoipa::path(post, path = "/workflow-runs/{id}/nodes/{node}/mark-succeeded", tag = "workflows",
    operation_id = "mark_succeeded", params(NodePath),
    responses(
        (status = 200, description = "The workflow run, the node succeeded.", body = WorkflowRun),
        (status = 404, description = "No such workflow run or node (`not_found`).", body = ErrorBody),
        (status = 409, description = "The node is not failed or cancelled, or the workflow run \
            was cancelled (`conflict`).", body = ErrorBody),
    ))]
pub async fn mark_succeeded(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path((id, node)): Path<(String, String)>,
) -> ApiResult<Json<WorkflowRun>> {
    Ok(Json(
        act(&state, &p, &id, &node, NodeAction::MarkSucceeded).await?,
    ))
}
