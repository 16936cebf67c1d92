//! Workflows and workflow runs as stored and shown: the definitions (`workflows`), and a
//! workflow run with where each of its nodes stands (`workflow_runs`, `workflow_run_nodes`, and
//! the node's latest run in `triggers`). The engine ([`super::engine`]) decides what runs; this
//! module reads and writes what the API needs around it.

use std::collections::HashMap;

use cadenza_schemas::{MisfireStrategy, Schedule};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgConnection;

use super::{After, NodeSpec, NodeStatus, WorkflowRunStatus, WorkflowSpec};

/// A stored workflow: its definition and what the admin keeps of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Workflow {
    pub id: i64,
    pub name: String,
    pub schedule: Schedule,
    pub misfire: MisfireStrategy,
    pub misfire_threshold_ms: i64,
    /// The nodes, in the order they were given.
    pub nodes: Vec<NodeSpec>,
    pub enabled: bool,
    /// The scheduler shard the workflow belongs to (`id % shard count`).
    pub shard: i32,
    /// When it fires next (none: disabled, or no more fire times).
    pub next_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Workflow {
    /// The definition, as the API accepts it.
    pub fn spec(&self) -> WorkflowSpec {
        WorkflowSpec {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            misfire: self.misfire,
            misfire_threshold_ms: self.misfire_threshold_ms,
            nodes: self.nodes.clone(),
            enabled: self.enabled,
        }
    }
}

/// Why a workflow or workflow run could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Db(sqlx::Error),
    /// Another workflow has that name.
    #[error("a workflow named {0:?} exists already")]
    NameTaken(String),
    /// A stored row does not read back (a defect, or a row written by hand).
    #[error("workflow row {id} is unreadable: {why}")]
    Unreadable { id: i64, why: String },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(e)
    }
}

#[derive(sqlx::FromRow)]
struct WorkflowRow {
    id: i64,
    name: String,
    schedule: Json<Schedule>,
    misfire: String,
    misfire_threshold_ms: i64,
    nodes: Json<Vec<NodeSpec>>,
    enabled: bool,
    shard: i32,
    next_fire_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<WorkflowRow> for Workflow {
    type Error = StoreError;

    fn try_from(r: WorkflowRow) -> Result<Self, StoreError> {
        let misfire = r.misfire.parse().map_err(|e| StoreError::Unreadable {
            id: r.id,
            why: format!("misfire: {e}"),
        })?;
        Ok(Workflow {
            id: r.id,
            name: r.name,
            schedule: r.schedule.0,
            misfire,
            misfire_threshold_ms: r.misfire_threshold_ms,
            nodes: r.nodes.0,
            enabled: r.enabled,
            shard: r.shard,
            next_fire_at: r.next_fire_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

fn to_workflows(rows: Vec<WorkflowRow>) -> Result<Vec<Workflow>, StoreError> {
    rows.into_iter().map(Workflow::try_from).collect()
}

/// A unique-index violation on the name as [`StoreError::NameTaken`].
fn name_taken(e: sqlx::Error, name: &str) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.constraint() == Some("workflows_name") => {
            StoreError::NameTaken(name.to_owned())
        }
        _ => StoreError::Db(e),
    }
}

/// Binds a definition's fields, in the order of `insert_workflow` and `update_workflow` after
/// their first parameter.
fn bind_spec<'q>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, WorkflowRow, sqlx::postgres::PgArguments>,
    spec: &'q WorkflowSpec,
    next_fire_at: Option<DateTime<Utc>>,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, WorkflowRow, sqlx::postgres::PgArguments> {
    q.bind(&spec.name)
        .bind(Json(&spec.schedule))
        .bind(spec.schedule.kind())
        .bind(spec.misfire.as_str())
        .bind(spec.misfire_threshold_ms)
        .bind(Json(&spec.nodes))
        .bind(spec.enabled)
        .bind(next_fire_at)
}

/// Stores a new workflow (its shard from its id).
pub async fn insert(
    conn: &mut PgConnection,
    shard_count: u32,
    spec: &WorkflowSpec,
    next_fire_at: Option<DateTime<Utc>>,
) -> Result<Workflow, StoreError> {
    let q = sqlx::query_as(sql!("workflow/insert_workflow")).bind(i64::from(shard_count));
    let row = bind_spec(q, spec, next_fire_at)
        .fetch_one(conn)
        .await
        .map_err(|e| name_taken(e, &spec.name))?;
    row.try_into()
}

/// Replaces workflow `id`'s definition and next fire time.
pub async fn update(
    conn: &mut PgConnection,
    id: i64,
    spec: &WorkflowSpec,
    next_fire_at: Option<DateTime<Utc>>,
) -> Result<Workflow, StoreError> {
    let q = sqlx::query_as(sql!("workflow/update_workflow")).bind(id);
    let row = bind_spec(q, spec, next_fire_at)
        .fetch_one(conn)
        .await
        .map_err(|e| name_taken(e, &spec.name))?;
    row.try_into()
}

/// Workflow `id`, if it exists.
pub async fn select(conn: &mut PgConnection, id: i64) -> Result<Option<Workflow>, StoreError> {
    let row: Option<WorkflowRow> = sqlx::query_as(sql!("workflow/select_workflow"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.map(Workflow::try_from).transpose()
}

/// Workflow `id`, locked until the transaction ends, if it exists.
pub async fn lock(conn: &mut PgConnection, id: i64) -> Result<Option<Workflow>, StoreError> {
    let row: Option<WorkflowRow> = sqlx::query_as(sql!("workflow/lock_workflow"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.map(Workflow::try_from).transpose()
}

/// Which workflows [`list`] returns.
#[derive(Debug, Default)]
pub struct WorkflowFilter {
    pub after_id: i64,
    pub limit: i64,
    pub enabled: Option<bool>,
    pub name: Option<String>,
    /// LIKE patterns of the job types the caller may see (`None`: all).
    pub visible_like: Option<Vec<String>>,
}

/// Workflows by id.
pub async fn list(
    conn: &mut PgConnection,
    f: &WorkflowFilter,
) -> Result<Vec<Workflow>, StoreError> {
    let rows: Vec<WorkflowRow> = sqlx::query_as(sql!("workflow/list_workflows"))
        .bind(f.after_id)
        .bind(f.limit)
        .bind(f.enabled)
        .bind(&f.name)
        .bind(&f.visible_like)
        .fetch_all(conn)
        .await?;
    to_workflows(rows)
}

/// Deletes workflow `id` and its workflow runs; whether it existed.
pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<bool, StoreError> {
    sqlx::query(sql!("workflow/lock_workflow_runs"))
        .bind(id)
        .execute(&mut *conn)
        .await?;
    let n: i64 = sqlx::query_scalar(sql!("workflow/delete_workflow"))
        .bind(id)
        .fetch_one(conn)
        .await?;
    Ok(n > 0)
}

/// The job types of the jobs `nodes` run, those that exist (sorted, without repeats).
pub async fn job_types(
    conn: &mut PgConnection,
    nodes: &[NodeSpec],
) -> Result<Vec<String>, StoreError> {
    let ids: Vec<i64> = nodes.iter().map(|n| n.job_id.0).collect();
    let rows: Vec<(i64, String)> = sqlx::query_as(sql!("workflow/job_types"))
        .bind(&ids)
        .fetch_all(conn)
        .await?;
    let mut types: Vec<String> = rows.into_iter().map(|(_, t)| t).collect();
    types.sort_unstable();
    types.dedup();
    Ok(types)
}

/// The database's clock (the transaction's start, in a transaction).
pub async fn db_now(conn: &mut PgConnection) -> Result<DateTime<Utc>, StoreError> {
    Ok(sqlx::query_scalar(sql!("workflow/db_now"))
        .fetch_one(conn)
        .await?)
}

/// Why a workflow run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowRunKind {
    /// A fire time of a `cron` schedule.
    Cron,
    /// A fire time of a `fix_rate` schedule.
    FixRate,
    /// The fire time of a `once` schedule.
    Once,
    /// A missed fire time run late (misfire strategy `fire_once_now` or `fire_all`), or recorded
    /// `misfired`.
    Misfire,
    /// Triggered from a console session.
    Manual,
    /// Triggered with an API token (personal or the service token).
    Api,
}

/// One node of a workflow run: its definition as the run fired with it, and where it stands.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NodeRun {
    pub key: String,
    pub job_id: i64,
    /// Params of this node's runs instead of the job's.
    pub params: Option<String>,
    pub parents: Vec<String>,
    pub after: After,
    pub allow_failure: bool,
    pub status: NodeStatus,
    /// The node's latest run (a retry of it, or an operator's retry, replaces it).
    pub run_id: Option<i64>,
    /// How many times the node was started (an operator's retry adds one; the job's own
    /// retries do not).
    pub tries: i32,
    /// Why it stands where it stands (skipped, failed, cancelled, retried, marked succeeded).
    pub message: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The status of the run `run_id`.
    #[schema(value_type = Option<cadenza_schemas::RunStatus>)]
    pub run_status: Option<String>,
    /// The output of the run `run_id`, if its handler gave one (one workflow run only; not in
    /// lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub output: Option<Value>,
}

/// A workflow run: one fire of a workflow, or a trigger of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WorkflowRun {
    pub id: i64,
    pub workflow_id: i64,
    pub workflow_name: String,
    #[schema(value_type = WorkflowRunKind)]
    pub kind: String,
    pub fire_time: DateTime<Utc>,
    pub status: WorkflowRunStatus,
    /// Why it ended as it did (cancelled by whom, misfired), or an operator's last action.
    pub message: Option<String>,
    /// Who triggered it (manual and API runs).
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Its nodes in the order of the definition it fired with.
    pub nodes: Vec<NodeRun>,
}

impl WorkflowRun {
    /// The nodes' definitions as the run fired with them.
    pub fn specs(&self) -> Vec<NodeSpec> {
        self.nodes
            .iter()
            .map(|n| NodeSpec {
                key: n.key.clone(),
                job_id: cadenza_schemas::JobId(n.job_id),
                params: n.params.clone(),
                parents: n.parents.clone(),
                after: n.after,
                allow_failure: n.allow_failure,
            })
            .collect()
    }
}

#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    workflow_id: i64,
    workflow_name: String,
    kind: String,
    fire_time: DateTime<Utc>,
    status: String,
    nodes: Json<Vec<NodeSpec>>,
    message: Option<String>,
    requested_by: Option<String>,
    created_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    workflow_run_id: i64,
    node: String,
    status: String,
    run_id: Option<i64>,
    tries: i32,
    message: Option<String>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    run_status: Option<String>,
    output: Option<Json<Value>>,
}

/// The runs of `rows` with their nodes; `outputs`: with the node runs' outputs.
async fn with_nodes(
    conn: &mut PgConnection,
    rows: Vec<RunRow>,
    outputs: bool,
) -> Result<Vec<WorkflowRun>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    let states: Vec<NodeRow> = sqlx::query_as(sql!("workflow/run_nodes"))
        .bind(&ids)
        .bind(outputs)
        .fetch_all(conn)
        .await?;
    let mut by_run: HashMap<i64, HashMap<String, NodeRow>> = HashMap::new();
    for s in states {
        by_run
            .entry(s.workflow_run_id)
            .or_default()
            .insert(s.node.clone(), s);
    }
    rows.into_iter()
        .map(|r| {
            let status =
                WorkflowRunStatus::parse(&r.status).ok_or_else(|| StoreError::Unreadable {
                    id: r.id,
                    why: format!("workflow run status {:?}", r.status),
                })?;
            let mut states = by_run.remove(&r.id).unwrap_or_default();
            let nodes = r
                .nodes
                .0
                .into_iter()
                .map(|n| {
                    let s = states.remove(&n.key);
                    NodeRun {
                        status: s
                            .as_ref()
                            .and_then(|s| NodeStatus::parse(&s.status))
                            .unwrap_or(NodeStatus::Waiting),
                        run_id: s.as_ref().and_then(|s| s.run_id),
                        tries: s.as_ref().map_or(0, |s| s.tries),
                        message: s.as_ref().and_then(|s| s.message.clone()),
                        started_at: s.as_ref().and_then(|s| s.started_at),
                        finished_at: s.as_ref().and_then(|s| s.finished_at),
                        run_status: s.as_ref().and_then(|s| s.run_status.clone()),
                        output: s.and_then(|s| s.output).map(|o| o.0),
                        key: n.key,
                        job_id: n.job_id.0,
                        params: n.params,
                        parents: n.parents,
                        after: n.after,
                        allow_failure: n.allow_failure,
                    }
                })
                .collect();
            Ok(WorkflowRun {
                id: r.id,
                workflow_id: r.workflow_id,
                workflow_name: r.workflow_name,
                kind: r.kind,
                fire_time: r.fire_time,
                status,
                message: r.message,
                requested_by: r.requested_by,
                created_at: r.created_at,
                finished_at: r.finished_at,
                nodes,
            })
        })
        .collect()
}

/// Workflow run `id` with its nodes and their runs' outputs, if it exists.
pub async fn get_run(conn: &mut PgConnection, id: i64) -> Result<Option<WorkflowRun>, StoreError> {
    let row: Option<RunRow> = sqlx::query_as(sql!("workflow/get_run"))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(with_nodes(conn, vec![row], true).await?.pop())
}

/// Which workflow runs [`list_runs`] returns.
#[derive(Debug, Default)]
pub struct RunFilter {
    pub workflow_id: Option<i64>,
    pub status: Option<WorkflowRunStatus>,
    pub before_id: i64,
    pub limit: i64,
    /// LIKE patterns of the job types the caller may see (`None`: all).
    pub visible_like: Option<Vec<String>>,
}

/// Workflow runs newest first, with their nodes (without outputs).
pub async fn list_runs(
    conn: &mut PgConnection,
    f: &RunFilter,
) -> Result<Vec<WorkflowRun>, StoreError> {
    let rows: Vec<RunRow> = sqlx::query_as(sql!("workflow/list_runs"))
        .bind(f.workflow_id)
        .bind(f.status.map(|s| s.as_str()))
        .bind(f.before_id)
        .bind(f.limit)
        .bind(&f.visible_like)
        .fetch_all(&mut *conn)
        .await?;
    with_nodes(conn, rows, false).await
}
