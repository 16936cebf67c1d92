//! Applies [`super::advance`] to workflow runs, in the caller's transaction: starting a
//! workflow run, following the end of its node runs, and the operator's actions (cancel, retry
//! a node, mark a node succeeded).
//!
//! Every function locks the workflow run's row (`FOR UPDATE`, in id order) before it reads where
//! the nodes stand, and writes the node runs it starts in the same transaction as the change
//! that made them due, so a node is started once: a second ingest of the same result finds the
//! run already ended and calls nothing, and two node runs ending at once on two admins are
//! decided one after the other.

use std::collections::HashMap;

use cadenza_schemas::{JobId, RunStatus};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgConnection;

use super::{advance, descendants, NodeSpec, NodeStatus, WorkflowRunStatus};
use crate::jobs::FieldError;

/// Most bytes of parents' outputs given to one node run (`upstream`, serialized; it fits in an
/// environment variable of the `shell` builtin, at most 128 KiB on Linux). From the first parent
/// whose output does not fit (in the order the node lists them), parents are given as `null`.
pub const MAX_UPSTREAM_BYTES: usize = 96 * 1024;

/// An operator's action could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("workflow run {0} does not exist")]
    RunNotFound(i64),
    #[error("workflow run {run} has no node {node:?}")]
    NodeNotFound { run: i64, node: String },
    /// The action does not apply in the current state; the message says why.
    #[error("{0}")]
    Conflict(String),
}

/// A node's state as stored.
#[derive(Debug, Clone)]
struct State {
    status: NodeStatus,
    run_id: Option<i64>,
}

/// A locked workflow run.
struct Locked {
    id: i64,
    status: WorkflowRunStatus,
    nodes: Vec<NodeSpec>,
    states: HashMap<String, State>,
}

/// A change to one node's row (`workflow/set_nodes`).
struct Change {
    node: String,
    status: NodeStatus,
    run_id: Option<i64>,
    add_try: i32,
    message: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    status: String,
    nodes: Json<Vec<NodeSpec>>,
}

/// Locks the workflow runs `ids` (id order) and reads where their nodes stand.
async fn lock(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<Locked>, sqlx::Error> {
    let rows: Vec<RunRow> = sqlx::query_as(sql!("workflow/lock_runs"))
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    let states: Vec<(i64, String, String, Option<i64>)> =
        sqlx::query_as(sql!("workflow/node_states"))
            .bind(ids)
            .fetch_all(&mut *conn)
            .await?;
    let mut by_run: HashMap<i64, HashMap<String, State>> = HashMap::new();
    for (run, node, status, run_id) in states {
        let status = NodeStatus::parse(&status).unwrap_or(NodeStatus::Waiting);
        by_run
            .entry(run)
            .or_default()
            .insert(node, State { status, run_id });
    }
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let status = WorkflowRunStatus::parse(&r.status)?;
            Some(Locked {
                id: r.id,
                status,
                nodes: r.nodes.0,
                states: by_run.remove(&r.id).unwrap_or_default(),
            })
        })
        .collect())
}

async fn lock_one(conn: &mut PgConnection, id: i64) -> Result<Locked, ActionError> {
    lock(conn, &[id])
        .await?
        .pop()
        .ok_or(ActionError::RunNotFound(id))
}

async fn write(conn: &mut PgConnection, run: i64, changes: &[Change]) -> Result<(), sqlx::Error> {
    if changes.is_empty() {
        return Ok(());
    }
    sqlx::query(sql!("workflow/set_nodes"))
        .bind(run)
        .bind(changes.iter().map(|c| c.node.clone()).collect::<Vec<_>>())
        .bind(
            changes
                .iter()
                .map(|c| c.status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(changes.iter().map(|c| c.run_id).collect::<Vec<_>>())
        .bind(changes.iter().map(|c| c.add_try).collect::<Vec<_>>())
        .bind(
            changes
                .iter()
                .map(|c| c.message.clone())
                .collect::<Vec<_>>(),
        )
        .execute(conn)
        .await?;
    Ok(())
}

impl Locked {
    fn statuses(&self) -> HashMap<String, NodeStatus> {
        self.states
            .iter()
            .map(|(k, s)| (k.clone(), s.status))
            .collect()
    }

    fn set(&mut self, c: &Change) {
        let s = self.states.entry(c.node.clone()).or_insert(State {
            status: NodeStatus::Waiting,
            run_id: None,
        });
        s.status = c.status;
        if c.run_id.is_some() {
            s.run_id = c.run_id;
        }
    }
}

/// The `upstream` of each node in `start`: its parents' outputs by key, as JSON text.
async fn upstreams(
    conn: &mut PgConnection,
    run: &Locked,
    start: &[&NodeSpec],
) -> Result<Vec<String>, sqlx::Error> {
    let parent_runs: Vec<i64> = start
        .iter()
        .flat_map(|n| n.parents.iter())
        .filter_map(|p| run.states.get(p).and_then(|s| s.run_id))
        .collect();
    let outputs: HashMap<i64, Option<String>> = if parent_runs.is_empty() {
        HashMap::new()
    } else {
        sqlx::query_as::<_, (i64, Option<String>)>(sql!("workflow/outputs"))
            .bind(&parent_runs)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect()
    };
    Ok(start
        .iter()
        .map(|n| {
            let mut map = serde_json::Map::new();
            // `{}` and, per entry, `"key":` and a comma.
            let mut bytes = 2usize;
            let mut full = false;
            for p in &n.parents {
                let output = run
                    .states
                    .get(p)
                    .and_then(|s| s.run_id)
                    .and_then(|id| outputs.get(&id).cloned().flatten())
                    .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                    .unwrap_or(serde_json::Value::Null);
                let key = serde_json::Value::String(p.clone()).to_string().len() + 2;
                let size = output.to_string().len();
                full = full || bytes + key + size > MAX_UPSTREAM_BYTES;
                let given = if full {
                    serde_json::Value::Null
                } else {
                    output
                };
                bytes += key + given.to_string().len();
                map.insert(p.clone(), given);
            }
            serde_json::Value::Object(map).to_string()
        })
        .collect())
}

/// Starts what is due in `run` and skips what will not run, until nothing changes; ends the
/// workflow run when no node is left. The first nodes of a scheduled fire are due at
/// `fire_time`, the others at once. Returns how many node runs it inserted.
async fn proceed(
    conn: &mut PgConnection,
    run: &mut Locked,
    fire_time: Option<DateTime<Utc>>,
) -> Result<usize, sqlx::Error> {
    if run.status != WorkflowRunStatus::Running {
        return Ok(0);
    }
    let mut started = 0;
    // Each round settles every cascade; another round follows only when a node's job was gone.
    for _ in 0..=run.nodes.len() {
        let step = advance(&run.nodes, &run.statuses());
        let mut changes: Vec<Change> = step
            .skip
            .iter()
            .map(|k| Change {
                node: k.clone(),
                status: NodeStatus::Skipped,
                run_id: None,
                add_try: 0,
                message: Some("not run: a parent it runs after did not succeed".into()),
            })
            .collect();
        let nodes = run.nodes.clone();
        let start: Vec<&NodeSpec> = step
            .start
            .iter()
            .filter_map(|k| nodes.iter().find(|n| &n.key == k))
            .collect();
        let mut gone = false;
        if !start.is_empty() {
            let upstream = upstreams(&mut *conn, run, &start).await?;
            let inserted: Vec<(i64, String, bool)> =
                sqlx::query_as(sql!("workflow/insert_node_runs"))
                    .bind(run.id)
                    .bind(start.iter().map(|n| n.job_id.0).collect::<Vec<_>>())
                    .bind(start.iter().map(|n| n.params.clone()).collect::<Vec<_>>())
                    .bind(start.iter().map(|n| n.key.clone()).collect::<Vec<_>>())
                    .bind(&upstream)
                    .bind(fire_time)
                    .fetch_all(&mut *conn)
                    .await?;
            let ids: HashMap<String, i64> = inserted
                .into_iter()
                .map(|(id, node, _)| (node, id))
                .collect();
            started += ids.len();
            for n in &start {
                changes.push(match ids.get(&n.key) {
                    Some(id) => Change {
                        node: n.key.clone(),
                        status: NodeStatus::Running,
                        run_id: Some(*id),
                        add_try: 1,
                        message: None,
                    },
                    None => {
                        gone = true;
                        Change {
                            node: n.key.clone(),
                            status: NodeStatus::Failed,
                            run_id: None,
                            add_try: 0,
                            message: Some(format!("not run: job {} no longer exists", n.job_id.0)),
                        }
                    }
                });
            }
        }
        for c in &changes {
            run.set(c);
        }
        write(&mut *conn, run.id, &changes).await?;
        if gone {
            continue;
        }
        if let Some(done) = step.done {
            sqlx::query(sql!("workflow/finish_run"))
                .bind(run.id)
                .bind(done.as_str())
                .bind(None::<String>)
                .execute(&mut *conn)
                .await?;
            run.status = done;
        }
        break;
    }
    Ok(started)
}

/// How a workflow run is started.
pub struct NewRun<'a> {
    pub workflow_id: i64,
    pub nodes: &'a [NodeSpec],
    /// `cron`, `fix_rate`, `once`, `misfire` (from the schedule), `manual`, `api`.
    pub kind: &'a str,
    pub fire_time: DateTime<Utc>,
    /// Who asked, for manual and API runs.
    pub requested_by: Option<&'a str>,
}

/// Starts a workflow run: its row, a row per node, and the runs of its first nodes (due at the
/// fire time). Returns its id, or `None` when the schedule's fire time has a run already.
pub async fn start_run(
    conn: &mut PgConnection,
    new: &NewRun<'_>,
) -> Result<Option<i64>, sqlx::Error> {
    let Some(id) = insert_run(conn, new, WorkflowRunStatus::Running, None).await? else {
        return Ok(None);
    };
    let mut run = Locked {
        id,
        status: WorkflowRunStatus::Running,
        nodes: new.nodes.to_vec(),
        states: HashMap::new(),
    };
    proceed(conn, &mut run, Some(new.fire_time)).await?;
    Ok(Some(id))
}

/// Records a fire time of the schedule that misfired: a workflow run `misfired` whose nodes are
/// all `skipped`. `None` when that fire time has a run already.
pub async fn record_misfired(
    conn: &mut PgConnection,
    new: &NewRun<'_>,
    message: &str,
) -> Result<Option<i64>, sqlx::Error> {
    insert_run(conn, new, WorkflowRunStatus::Misfired, Some(message)).await
}

async fn insert_run(
    conn: &mut PgConnection,
    new: &NewRun<'_>,
    status: WorkflowRunStatus,
    message: Option<&str>,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(sql!("workflow/insert_run"))
        .bind(new.workflow_id)
        .bind(new.kind)
        .bind(new.fire_time)
        .bind(status.as_str())
        .bind(Json(new.nodes))
        .bind(new.nodes.iter().map(|n| n.key.clone()).collect::<Vec<_>>())
        .bind(message)
        .bind(new.requested_by)
        .fetch_optional(conn)
        .await
}

/// Follows up runs that just reached a terminal status (in this transaction): those of workflow
/// nodes move their node on, and what that makes due starts. `retried` maps a failed run to the
/// retry that replaces it (the node keeps running). Returns how many node runs it inserted.
pub async fn after_node_runs(
    conn: &mut PgConnection,
    ended: &[(i64, RunStatus)],
    retried: &HashMap<i64, i64>,
) -> Result<usize, sqlx::Error> {
    let ids: Vec<i64> = ended.iter().map(|(id, _)| *id).collect();
    let nodes: Vec<(i64, i64, String)> = sqlx::query_as(sql!("workflow/ended_node_runs"))
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;
    if nodes.is_empty() {
        return Ok(0);
    }
    let status: HashMap<i64, RunStatus> = ended.iter().copied().collect();
    let mut runs: Vec<i64> = nodes.iter().map(|(_, w, _)| *w).collect();
    runs.sort_unstable();
    runs.dedup();
    let mut started = 0;
    let mut orphans: Vec<i64> = Vec::new();
    for mut run in lock(&mut *conn, &runs).await? {
        let mut changes = Vec::new();
        let run_id = run.id;
        for (id, _, node) in nodes.iter().filter(|(_, w, _)| *w == run_id) {
            // Only the node's current run moves it: a run an operator replaced, or one that
            // ends after its workflow run was cancelled, changes nothing.
            let current = run
                .states
                .get(node)
                .is_some_and(|s| s.run_id == Some(*id) && s.status == NodeStatus::Running);
            if !current || run.status != WorkflowRunStatus::Running {
                // The job's retry of a run of a cancelled workflow run is not run either.
                if let (Some(retry), WorkflowRunStatus::Cancelled) = (retried.get(id), run.status) {
                    orphans.push(*retry);
                }
                continue;
            }
            let change = match retried.get(id) {
                Some(retry) => Change {
                    node: node.clone(),
                    status: NodeStatus::Running,
                    run_id: Some(*retry),
                    add_try: 0,
                    message: Some(format!("retrying: run {id} failed")),
                },
                None => {
                    let s = status.get(id).copied().unwrap_or(RunStatus::Failed);
                    Change {
                        node: node.clone(),
                        status: NodeStatus::of_run(s),
                        run_id: None,
                        add_try: 0,
                        message: (s != RunStatus::Succeeded)
                            .then(|| format!("run {id} ended {}", s.as_str())),
                    }
                }
            };
            run.set(&change);
            changes.push(change);
        }
        if changes.is_empty() {
            continue;
        }
        write(&mut *conn, run.id, &changes).await?;
        started += proceed(&mut *conn, &mut run, None).await?;
    }
    if !orphans.is_empty() {
        sqlx::query(sql!("triggers/cancel_unpublished"))
            .bind(&orphans)
            .bind("not run: its workflow run was cancelled")
            .execute(&mut *conn)
            .await?;
    }
    Ok(started)
}

/// What [`cancel`] did.
#[derive(Debug)]
pub struct Cancelled {
    /// Runs of nodes that were running and are already published: the caller asks their workers
    /// to stop them once this commits.
    pub to_stop: Vec<i64>,
    /// Runs of nodes that were not published yet, ended `cancelled` in this transaction (the
    /// publisher never sends them), to count once it commits.
    pub ended: crate::outcome::Ended,
}

/// Cancels a running workflow run: waiting nodes are skipped, running ones cancelled; their runs
/// not yet published end `cancelled` in this transaction, the others are returned to stop.
pub async fn cancel(conn: &mut PgConnection, id: i64, by: &str) -> Result<Cancelled, ActionError> {
    let run = lock_one(&mut *conn, id).await?;
    if run.status != WorkflowRunStatus::Running {
        return Err(ActionError::Conflict(format!(
            "workflow run {id} is {}; only a running workflow run can be cancelled",
            run.status.as_str()
        )));
    }
    let mut changes = Vec::new();
    let mut running = Vec::new();
    for n in &run.nodes {
        let Some(s) = run.states.get(&n.key) else {
            continue;
        };
        let change = match s.status {
            NodeStatus::Waiting => Change {
                node: n.key.clone(),
                status: NodeStatus::Skipped,
                run_id: None,
                add_try: 0,
                message: Some(format!("not run: the workflow run was cancelled by {by}")),
            },
            NodeStatus::Running => {
                running.extend(s.run_id);
                Change {
                    node: n.key.clone(),
                    status: NodeStatus::Cancelled,
                    run_id: None,
                    add_try: 0,
                    message: Some(format!("cancelled with the workflow run by {by}")),
                }
            }
            _ => continue,
        };
        changes.push(change);
    }
    write(&mut *conn, id, &changes).await?;
    sqlx::query(sql!("workflow/finish_run"))
        .bind(id)
        .bind(WorkflowRunStatus::Cancelled.as_str())
        .bind(Some(format!("cancelled by {by}")))
        .execute(&mut *conn)
        .await?;
    let unpublished: Vec<i64> = sqlx::query_scalar(sql!("triggers/cancel_unpublished"))
        .bind(&running)
        .bind(format!("cancelled by {by} with its workflow run"))
        .fetch_all(&mut *conn)
        .await?;
    let ended = crate::outcome::count_in_report(&mut *conn, &unpublished).await?;
    Ok(Cancelled {
        to_stop: running
            .into_iter()
            .filter(|r| !unpublished.contains(r))
            .collect(),
        ended,
    })
}

/// The operator's action on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAction {
    /// Run the node again (a new run, `tries` + 1); its skipped descendants wait again.
    Retry,
    /// Count the node as succeeded, so that what runs after it goes on.
    MarkSucceeded,
}

/// Applies `action` to node `node` of workflow run `id` (failed or cancelled nodes only; the
/// workflow run must not be cancelled), and starts what it makes due. Returns how many node runs
/// it inserted.
pub async fn node_action(
    conn: &mut PgConnection,
    id: i64,
    node: &str,
    action: NodeAction,
    by: &str,
) -> Result<usize, ActionError> {
    let mut run = lock_one(&mut *conn, id).await?;
    let state = run
        .states
        .get(node)
        .cloned()
        .ok_or_else(|| ActionError::NodeNotFound {
            run: id,
            node: node.to_string(),
        })?;
    let verb = match action {
        NodeAction::Retry => "retried",
        NodeAction::MarkSucceeded => "marked succeeded",
    };
    if !matches!(state.status, NodeStatus::Failed | NodeStatus::Cancelled) {
        return Err(ActionError::Conflict(format!(
            "node {node:?} is {}; only a failed or cancelled node can be {verb}",
            state.status.as_str()
        )));
    }
    if matches!(
        run.status,
        WorkflowRunStatus::Cancelled | WorkflowRunStatus::Misfired
    ) {
        return Err(ActionError::Conflict(format!(
            "workflow run {id} is {}; its nodes stay as they are",
            run.status.as_str()
        )));
    }
    let nodes = run.nodes.clone();
    let mut changes: Vec<Change> = descendants(&nodes, node)
        .into_iter()
        .filter(|d| {
            run.states
                .get(&d.key)
                .is_some_and(|s| s.status == NodeStatus::Skipped)
        })
        .map(|d| Change {
            node: d.key.clone(),
            status: NodeStatus::Waiting,
            run_id: None,
            add_try: 0,
            message: None,
        })
        .collect();
    changes.push(Change {
        node: node.to_string(),
        status: match action {
            NodeAction::Retry => NodeStatus::Waiting,
            NodeAction::MarkSucceeded => NodeStatus::Succeeded,
        },
        run_id: None,
        add_try: 0,
        message: Some(format!("{verb} by {by}")),
    });
    for c in &changes {
        run.set(c);
    }
    write(&mut *conn, id, &changes).await?;
    if run.status != WorkflowRunStatus::Running {
        sqlx::query(sql!("workflow/reopen_run"))
            .bind(id)
            .bind(format!("node {node:?} {verb} by {by}"))
            .execute(&mut *conn)
            .await?;
        run.status = WorkflowRunStatus::Running;
    }
    Ok(proceed(&mut *conn, &mut run, None).await?)
}

/// Checks that the jobs the nodes name exist and can be nodes (not `sharding_broadcast`); an
/// error names the first node that fails.
pub async fn check_jobs(conn: &mut PgConnection, nodes: &[NodeSpec]) -> Result<(), CheckError> {
    let ids: Vec<i64> = nodes.iter().map(|n| n.job_id.0).collect();
    let bad: Vec<(i64, bool)> = sqlx::query_as(sql!("workflow/missing_jobs"))
        .bind(&ids)
        .fetch_all(conn)
        .await?;
    let bad: HashMap<i64, bool> = bad.into_iter().collect();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(missing) = bad.get(&n.job_id.0) {
            let JobId(job) = n.job_id;
            return Err(CheckError::Field(FieldError::new(
                format!("nodes[{i}] ({:?}).job_id", n.key),
                if *missing {
                    format!("job {job} does not exist")
                } else {
                    format!(
                        "job {job} routes sharding_broadcast, which a workflow node cannot use yet"
                    )
                },
            )));
        }
    }
    Ok(())
}

/// Why [`check_jobs`] refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Field(FieldError),
}
