//! Replay: read triggers back from a job type's topic and publish them again as new runs of kind
//! `replay`, each linked to its original (`parent_id`) and to an audited request (`replays`).
//!
//! What to read is either a time window (`from`, `to`: the fire times of the runs) or explicit
//! partition offset ranges. A window is mapped to offsets through what the admin recorded of
//! every published run: its partition and offset on its row (once a worker reported it, or the
//! read-back found it) or in the delivery record (`deliveries`, migration 0019); the broker's
//! `offsets_for_times` is not needed. The records themselves come from the topic, so a replay re-runs exactly what was
//! sent (params, block strategy, timeout, broadcast shard), even if the job changed since.
//! A dry run reads and reports, and changes nothing.

use std::time::Duration;

use cadenza_schemas::{JobType, TriggerRecord};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::jobs::FieldError;
use crate::kafka::KafkaClients;

/// Most runs one request may replay; larger replays are split (the CLI does it by offsets).
pub const MAX_RUNS: i64 = 10_000;
/// Most bytes of params a replay keeps in memory while it reads the topic.
pub const MAX_KEPT_BYTES: usize = 64 * 1024 * 1024;
/// Longest read of one partition.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// An offset range of one partition, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PartitionRange {
    pub partition: i32,
    pub from_offset: i64,
    pub to_offset: i64,
}

/// A replay: the triggers of a job type's topic to run again, by fire-time window or by
/// partition offsets (or both), optionally of one job.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    pub job_type: JobType,
    /// Runs with a fire time at or after this (with `to`: a window).
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    /// Runs with a fire time before this.
    #[serde(default)]
    pub to: Option<DateTime<Utc>>,
    /// Explicit offset ranges instead of (or narrowed by) a window.
    #[serde(default)]
    pub partitions: Vec<PartitionRange>,
    /// Only triggers of this job.
    #[serde(default)]
    pub job_id: Option<i64>,
    /// Report what would run; publish nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// One trigger found for the replay.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReplayedRun {
    /// The original run.
    pub original_id: i64,
    pub job_id: i64,
    pub fire_time: DateTime<Utc>,
    pub partition: i32,
    pub offset: i64,
    pub shard_index: u32,
    /// The new run (absent in a dry run, or when the job was deleted since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<i64>,
}

/// What a replay found and ran.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReplayOutcome {
    /// The audit record (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_id: Option<i64>,
    pub dry_run: bool,
    pub job_type: String,
    /// The ranges read.
    pub partitions: Vec<PartitionRange>,
    /// Triggers found (what would run, in a dry run).
    pub count: usize,
    /// New runs published.
    pub replayed: usize,
    pub runs: Vec<ReplayedRun>,
}

/// A trigger read back, with what its replay run copies.
struct Found {
    run: ReplayedRun,
    params: String,
    block: &'static str,
    timeout_ms: i64,
    shard_total: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("{0}")]
    NothingToReplay(String),
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("reading the topic failed: {0}")]
    Broker(crate::kafka::BrokerError),
}

fn invalid(field: &str, message: impl Into<String>) -> ReplayError {
    ReplayError::Invalid(FieldError::new(field, message))
}

impl ReplayRequest {
    /// Checks what the types do not: a window is `from` before `to`; ranges are ordered and
    /// inside the topic; there is a window or ranges.
    fn validate(&self, partitions: Option<i32>) -> Result<(), ReplayError> {
        match (self.from, self.to) {
            (Some(f), Some(t)) if f >= t => {
                return Err(invalid(
                    "from",
                    format!(
                        "{} is not before to ({}); a window is [from, to)",
                        f.to_rfc3339(),
                        t.to_rfc3339()
                    ),
                ))
            }
            (Some(_), None) => return Err(invalid("to", "is required with from")),
            (None, Some(_)) => return Err(invalid("from", "is required with to")),
            (None, None) if self.partitions.is_empty() => {
                return Err(invalid(
                    "from",
                    "give a time window (from, to) or partition offset ranges (partitions)",
                ))
            }
            _ => {}
        }
        let Some(count) = partitions else {
            return Err(invalid(
                "job_type",
                format!("no job of type {} was ever created here", self.job_type),
            ));
        };
        for (i, r) in self.partitions.iter().enumerate() {
            if !(0..count).contains(&r.partition) {
                return Err(invalid(
                    &format!("partitions[{i}].partition"),
                    format!(
                        "the topic of {} has partitions 0..{}; got {}",
                        self.job_type,
                        count - 1,
                        r.partition
                    ),
                ));
            }
            if r.from_offset < 0 || r.from_offset > r.to_offset {
                return Err(invalid(
                    &format!("partitions[{i}].from_offset"),
                    format!(
                        "must be at least 0 and at most to_offset ({}); got {}",
                        r.to_offset, r.from_offset
                    ),
                ));
            }
        }
        if self.job_id.is_some_and(|j| j <= 0) {
            return Err(invalid("job_id", "must be a positive job id"));
        }
        Ok(())
    }
}

#[derive(Debug, sqlx::FromRow)]
struct WindowRow {
    partition: i32,
    from_offset: i64,
    to_offset: i64,
    runs: i64,
}

/// The ranges to read: the request's, or the window's published offsets.
async fn plan(pool: &PgPool, req: &ReplayRequest) -> Result<Vec<PartitionRange>, ReplayError> {
    let job_type = req.job_type.as_str();
    if !req.partitions.is_empty() {
        let mut out = Vec::new();
        let mut total = 0i64;
        for (i, r) in req.partitions.iter().enumerate() {
            let last: Option<i64> = sqlx::query_scalar(sql!("replay/last_offset"))
                .bind(job_type)
                .bind(r.partition)
                .fetch_one(pool)
                .await?;
            let Some(last) = last.filter(|l| *l >= r.from_offset) else {
                continue;
            };
            if r.to_offset > last {
                return Err(invalid(
                    &format!("partitions[{i}].to_offset"),
                    format!(
                        "partition {} has no trigger published after offset {last}; use at most {last}",
                        r.partition
                    ),
                ));
            }
            total += r.to_offset - r.from_offset + 1;
            out.push(*r);
        }
        if total > MAX_RUNS * 2 {
            return Err(ReplayError::TooLarge(format!(
                "the ranges hold {total} offsets; read at most {} per request (split them)",
                MAX_RUNS * 2
            )));
        }
        return Ok(out);
    }
    let (Some(from), Some(to)) = (req.from, req.to) else {
        return Ok(Vec::new());
    };
    let rows: Vec<WindowRow> = sqlx::query_as(sql!("replay/window"))
        .bind(job_type)
        .bind(from)
        .bind(to)
        .bind(req.job_id)
        .fetch_all(pool)
        .await?;
    let runs: i64 = rows.iter().map(|r| r.runs).sum();
    if runs > MAX_RUNS {
        return Err(ReplayError::TooLarge(format!(
            "the window holds {runs} published runs, more than {MAX_RUNS} in one request: split the window, or replay by partition offsets (the cadenza CLI does this for you)"
        )));
    }
    Ok(rows
        .into_iter()
        .map(|r| PartitionRange {
            partition: r.partition,
            from_offset: r.from_offset,
            to_offset: r.to_offset,
        })
        .collect())
}

/// Plans, reads and (unless a dry run) publishes a replay.
pub async fn replay(
    pool: &PgPool,
    kafka: &KafkaClients,
    req: &ReplayRequest,
    actor: &crate::audit::Actor,
) -> Result<ReplayOutcome, ReplayError> {
    let partitions: Option<i32> = sqlx::query_scalar(sql!("jobs/job_type_partitions"))
        .bind(req.job_type.as_str())
        .fetch_optional(pool)
        .await?;
    req.validate(partitions)?;
    let ranges = plan(pool, req).await?;
    let topic = kafka.topics().trigger(&req.job_type);
    // Scanned record by record: only the triggers to replay are kept, and at most
    // MAX_KEPT_BYTES of their params (a trigger's params may hold 256 KiB).
    #[derive(Default)]
    struct Scan {
        found: Vec<Found>,
        bytes: usize,
        over: bool,
    }
    let mut found: Vec<Found> = Vec::new();
    let mut bytes = 0usize;
    for r in &ranges {
        let (from, to, job_id) = (req.from, req.to, req.job_id);
        let partition = r.partition;
        let budget = MAX_KEPT_BYTES.saturating_sub(bytes);
        let scan: Scan = kafka
            .scan_partition(
                &topic,
                r.partition,
                Some(r.from_offset),
                r.to_offset,
                READ_TIMEOUT,
                move |scan: &mut Scan, rec| {
                    if scan.over {
                        return;
                    }
                    let Some(TriggerRecord::Trigger(t)) = rec.record else {
                        return; // fences and unreadable records
                    };
                    let in_window = match (from, to) {
                        (Some(f), Some(to)) => t.fire_time >= f && t.fire_time < to,
                        _ => true,
                    };
                    if !in_window || job_id.is_some_and(|j| j != t.job_id.0) {
                        return;
                    }
                    scan.bytes += t.params.len();
                    if scan.bytes > budget || scan.found.len() as i64 >= MAX_RUNS * 2 {
                        scan.over = true;
                        scan.found.clear();
                        return;
                    }
                    scan.found.push(Found {
                        run: ReplayedRun {
                            original_id: t.trigger_id.0,
                            job_id: t.job_id.0,
                            fire_time: t.fire_time,
                            partition,
                            offset: rec.offset,
                            shard_index: t.shard_index,
                            trigger_id: None,
                        },
                        params: t.params,
                        block: t.block.as_str(),
                        timeout_ms: i64::try_from(t.timeout_ms).unwrap_or(i64::MAX),
                        shard_total: i32::try_from(t.shard_total).unwrap_or(i32::MAX),
                    });
                },
            )
            .await
            .map_err(ReplayError::Broker)?;
        if scan.over {
            return Err(ReplayError::TooLarge(format!(
                "the triggers to replay hold more than {} MiB of params (or more than {} \
                 triggers): split the window or the ranges",
                MAX_KEPT_BYTES / (1024 * 1024),
                MAX_RUNS * 2
            )));
        }
        bytes += scan.bytes;
        found.extend(scan.found);
    }
    if found.is_empty() {
        let what = match (req.from, req.to) {
            (Some(f), Some(t)) => format!(
                "with a fire time in [{}, {})",
                f.to_rfc3339(),
                t.to_rfc3339()
            ),
            _ => "in the given offset ranges".to_owned(),
        };
        let job = req
            .job_id
            .map(|j| format!(" of job {j}"))
            .unwrap_or_default();
        return Err(ReplayError::NothingToReplay(format!(
            "no trigger of job type {}{job} was published {what}; nothing to replay",
            req.job_type
        )));
    }
    if found.len() as i64 > MAX_RUNS {
        return Err(ReplayError::TooLarge(format!(
            "{} triggers found, more than {MAX_RUNS} in one request: split the ranges",
            found.len()
        )));
    }
    let mut outcome = ReplayOutcome {
        replay_id: None,
        dry_run: req.dry_run,
        job_type: req.job_type.as_str().to_owned(),
        partitions: ranges,
        count: found.len(),
        replayed: 0,
        runs: Vec::new(),
    };
    if req.dry_run {
        outcome.runs = found.into_iter().map(|f| f.run).collect();
        return Ok(outcome);
    }
    // The audit keeps the request as given (plain data: serialising it cannot fail).
    let request = serde_json::to_value(req).unwrap_or_default();
    let mut tx = pool.begin().await?;
    let rows: Vec<(i64, i64, i64, bool)> = sqlx::query_as(sql!("replay/insert"))
        .bind(req.job_type.as_str())
        .bind(sqlx::types::Json(request.clone()))
        .bind(i32::try_from(found.len()).unwrap_or(i32::MAX))
        .bind(found.iter().map(|f| f.run.original_id).collect::<Vec<_>>())
        .bind(found.iter().map(|f| f.run.job_id).collect::<Vec<_>>())
        .bind(found.iter().map(|f| f.params.as_str()).collect::<Vec<_>>())
        .bind(found.iter().map(|f| f.block).collect::<Vec<_>>())
        .bind(found.iter().map(|f| f.timeout_ms).collect::<Vec<_>>())
        .bind(
            found
                .iter()
                .map(|f| i32::try_from(f.run.shard_index).unwrap_or(i32::MAX))
                .collect::<Vec<_>>(),
        )
        .bind(found.iter().map(|f| f.shard_total).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await?;
    let replay_id = rows.first().map(|r| r.0);
    crate::audit::done(
        &mut tx,
        actor,
        crate::audit::Entry::new("replay")
            .target(format!("replay {}", replay_id.unwrap_or_default()))
            .detail(format!("{} runs of job type {}", rows.len(), req.job_type))
            .after(request),
    )
    .await?;
    tx.commit().await?;
    let new: std::collections::HashMap<i64, i64> = rows
        .iter()
        .map(|(_, parent, id, _)| (*parent, *id))
        .collect();
    outcome.replay_id = rows.first().map(|r| r.0);
    outcome.replayed = rows.len();
    outcome.runs = found
        .into_iter()
        .map(|f| {
            let mut run = f.run;
            run.trigger_id = new.get(&run.original_id).copied();
            run
        })
        .collect();
    tracing::info!(replay_id = ?outcome.replay_id, job_type = %req.job_type, runs = outcome.replayed, "replay published");
    Ok(outcome)
}
