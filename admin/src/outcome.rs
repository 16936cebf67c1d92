//! What a run's end sets off, in the transaction that records it: its count in the daily report,
//! a retry of a failed run (`retries`, backoff), the job's children on success (for a
//! `sharding_broadcast` fire, once every shard has succeeded), the next fire time of a
//! `fix_delay` job, the next nodes of a workflow run, and alarms.
//!
//! Called by result ingest (a worker's `finished`) and by the lost-run sweeper (`lost`). Every
//! step is idempotent: a retry is unique per failed run, a child run per parent, job and shard,
//! an alarm per run, channel and target; so replaying a result changes nothing.

use cadenza_schemas::{RunStatus, TriggerKind};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::route::registry::Registry;

/// What one call set off.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FollowUp {
    pub retries: usize,
    pub children: usize,
    /// Runs of workflow nodes started.
    pub nodes: usize,
    pub alarms: u64,
    /// The runs that ended, to count in the metrics once the transaction commits.
    pub ended: Ended,
}

/// Runs that ended in a transaction, per job type and status.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[must_use = "record() them once the transaction has committed"]
pub struct Ended(Vec<(String, String, i64)>);

impl Ended {
    /// `n` ends with `status` per job type.
    pub fn of_status(status: RunStatus, by_type: impl IntoIterator<Item = (String, i64)>) -> Self {
        Self(
            by_type
                .into_iter()
                .map(|(t, n)| (t, status.as_str().to_owned(), n))
                .collect(),
        )
    }

    /// Counts them in `cadenza_runs_ended_total`. Call after the commit, so that a transaction
    /// that is rolled back and retried counts once.
    pub fn record(self) {
        let m = crate::metrics::metrics();
        for (job_type, status, n) in self.0 {
            m.runs_ended
                .get_or_create(&crate::metrics::EndedLabels { job_type, status })
                .inc_by(u64::try_from(n).unwrap_or(0));
        }
    }
}

/// Runs to insert other than from a schedule (see `queries/triggers/insert_runs.sql`).
#[derive(Debug, Default)]
pub struct NewRuns {
    pub job_id: Vec<i64>,
    pub kind: Vec<&'static str>,
    pub fire_time: Vec<Option<DateTime<Utc>>>,
    pub params: Vec<Option<String>>,
    pub requested_worker: Vec<Option<String>>,
    pub shard_total: Vec<i32>,
    pub parent_id: Vec<Option<i64>>,
}

impl NewRuns {
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        job_id: i64,
        kind: TriggerKind,
        fire_time: Option<DateTime<Utc>>,
        params: Option<String>,
        requested_worker: Option<String>,
        shard_total: i32,
        parent_id: Option<i64>,
    ) {
        self.job_id.push(job_id);
        self.kind.push(kind.as_str());
        self.fire_time.push(fire_time);
        self.params.push(params);
        self.requested_worker.push(requested_worker);
        self.shard_total.push(shard_total.max(1));
        self.parent_id.push(parent_id);
    }

    /// Inserts the runs (announcing each to its shard's holder); returns (run id, job id) of
    /// those written, in id order.
    pub async fn insert(self, conn: &mut PgConnection) -> Result<Vec<(i64, i64)>, sqlx::Error> {
        if self.job_id.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, bool)> = sqlx::query_as(sql!("triggers/insert_runs"))
            .bind(&self.job_id)
            .bind(&self.kind)
            .bind(&self.fire_time)
            .bind(&self.params)
            .bind(&self.requested_worker)
            .bind(&self.shard_total)
            .bind(&self.parent_id)
            .fetch_all(conn)
            .await?;
        Ok(rows.into_iter().map(|(id, job, _)| (id, job)).collect())
    }
}

/// Counts the runs `ids`, which just ended in this transaction, in the daily report (by job and
/// by job type).
pub async fn count_in_report(conn: &mut PgConnection, ids: &[i64]) -> Result<Ended, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Ended::default());
    }
    sqlx::query(sql!("report/count_ended"))
        .bind(ids)
        .execute(&mut *conn)
        .await?;
    let ended = sqlx::query_as(sql!("report/count_ended_by_type"))
        .bind(ids)
        .fetch_all(conn)
        .await?;
    Ok(Ended(ended))
}

/// Follows up runs just recorded `misfired` (in this transaction): counted in the daily report,
/// and a `fix_delay` job whose run misfired fires again its delay after now, as if the run had
/// ended now (it has no other run to wait for). Call it after the jobs' own `next_fire_at` was
/// written.
pub async fn after_misfire(conn: &mut PgConnection, ids: &[i64]) -> Result<Ended, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Ended::default());
    }
    let ended = count_in_report(&mut *conn, ids).await?;
    sqlx::query(sql!("ingest/fix_delay_next"))
        .bind(ids)
        .bind(Vec::<i64>::new())
        .execute(&mut *conn)
        .await?;
    Ok(ended)
}

/// Whether a terminal status is a failure: retried and alarmed.
pub fn is_failure(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Lost
    )
}

/// What the caller knows of runs that just ended, so that follow-ups no run needs are skipped.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Some run is of a kind a `fix_delay` next time may follow (`fix_delay`, `misfire`, `retry`).
    pub fix_delay: bool,
    /// The runs that may set off child jobs: of a job with children, or of a broadcast fire.
    pub parents: std::collections::HashSet<i64>,
    /// Some run belongs to a workflow run.
    pub workflow: bool,
}

/// Follows up the runs that just reached a terminal status (in this transaction), given with
/// that status.
pub async fn after_terminal(
    conn: &mut PgConnection,
    registry: &Registry,
    ended: &[(i64, RunStatus)],
) -> Result<FollowUp, sqlx::Error> {
    after_terminal_known(conn, registry, ended, None).await
}

/// [`after_terminal`], skipping the `fix_delay` and child-job steps where `known` says no run
/// needs them (`None`: every step runs).
pub async fn after_terminal_known(
    conn: &mut PgConnection,
    registry: &Registry,
    ended: &[(i64, RunStatus)],
    known: Option<&Known>,
) -> Result<FollowUp, sqlx::Error> {
    if ended.is_empty() {
        return Ok(FollowUp::default());
    }
    let ids: Vec<i64> = ended.iter().map(|(id, _)| *id).collect();
    let counted = count_in_report(&mut *conn, &ids).await?;
    let failed: Vec<i64> = ended
        .iter()
        .filter(|(_, s)| is_failure(*s))
        .map(|(id, _)| *id)
        .collect();
    let succeeded: Vec<i64> = ended
        .iter()
        .filter(|(id, s)| {
            *s == RunStatus::Succeeded && known.is_none_or(|k| k.parents.contains(id))
        })
        .map(|(id, _)| *id)
        .collect();
    let mut out = FollowUp {
        ended: counted,
        ..FollowUp::default()
    };
    let mut retried_parents: Vec<i64> = Vec::new();
    let mut retried_by: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
    if !failed.is_empty() {
        let retried: Vec<(i64, i64, bool)> = sqlx::query_as(sql!("ingest/retry_failed"))
            .bind(&failed)
            .fetch_all(&mut *conn)
            .await?;
        out.retries = retried.len();
        retried_parents = retried.iter().map(|(p, _, _)| *p).collect();
        retried_by = retried.iter().map(|(p, id, _)| (*p, *id)).collect();
        out.alarms = sqlx::query(sql!("ingest/alarms_for"))
            .bind(&failed)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    if known.is_none_or(|k| k.fix_delay) {
        sqlx::query(sql!("ingest/fix_delay_next"))
            .bind(&ids)
            .bind(&retried_parents)
            .execute(&mut *conn)
            .await?;
    }
    if !succeeded.is_empty() {
        out.children = fire_children(&mut *conn, registry, &succeeded).await?;
    }
    if known.is_none_or(|k| k.workflow) {
        out.nodes = crate::workflow::engine::after_node_runs(conn, ended, &retried_by).await?;
    }
    if out.retries + out.children + out.nodes > 0 || out.alarms > 0 {
        tracing::debug!(?out, "follow-up of finished runs");
    }
    Ok(out)
}

/// Fires the children of the succeeded runs `ids`; returns how many runs it inserted.
async fn fire_children(
    conn: &mut PgConnection,
    registry: &Registry,
    ids: &[i64],
) -> Result<usize, sqlx::Error> {
    sqlx::query(sql!("ingest/lock_fire_groups"))
        .bind(ids)
        .execute(&mut *conn)
        .await?;
    let due: Vec<(i64, i64, String, String)> = sqlx::query_as(sql!("ingest/children_due"))
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    let mut children = NewRuns::default();
    for (parent, job, route, job_type) in due {
        let shards = registry.shard_total_stored(&route, &job_type);
        children.push(
            job,
            TriggerKind::Child,
            None,
            None,
            None,
            shards,
            Some(parent),
        );
    }
    Ok(children.insert(&mut *conn).await?.len())
}
