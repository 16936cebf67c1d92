//! Skipped fire times, without a row each. The scan counts the fire times a job's misfire
//! strategy skips into the job's open span (first, last, how many; `scan/advance_jobs`), on the
//! row it updates anyway, so that a burst past the publication ceiling costs no more database
//! work than the load the admin can take. A span closes into `misfires` (and is counted in the
//! daily reports) when the job has skipped nothing for [`SPAN_QUIET`], or before it would grow
//! past `scheduler::scan::SPAN_LONGEST` or into another UTC day. `GET /api/misfires` lists both kinds.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::scheduler::scan::SPAN_QUIET;

/// Spans closed at most per maintenance round.
const CLOSE_BATCH: i64 = 10_000;

/// A span just closed, to count in the reports.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClosedSpan {
    pub job_id: i64,
    pub job_type: String,
    pub first_fire: DateTime<Utc>,
    pub count: i64,
}

/// Counts spans just closed (in this transaction) in the daily reports.
pub async fn count_closed(
    conn: &mut PgConnection,
    closed: &[ClosedSpan],
) -> Result<(), sqlx::Error> {
    if closed.is_empty() {
        return Ok(());
    }
    sqlx::query(sql!("misfires/count_closed"))
        .bind(closed.iter().map(|c| c.job_id).collect::<Vec<_>>())
        .bind(
            closed
                .iter()
                .map(|c| c.job_type.clone())
                .collect::<Vec<_>>(),
        )
        .bind(closed.iter().map(|c| c.first_fire).collect::<Vec<_>>())
        .bind(closed.iter().map(|c| c.count).collect::<Vec<_>>())
        .execute(conn)
        .await?;
    Ok(())
}

/// Closes the spans quiet for [`SPAN_QUIET`] (jobs the scan no longer claims: disabled, ended,
/// or firing rarely); returns how many.
pub async fn close_quiet(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let closed: Vec<ClosedSpan> = sqlx::query_as(sql!("misfires/close_quiet"))
        .bind(SPAN_QUIET.num_milliseconds() as f64)
        .bind(CLOSE_BATCH)
        .fetch_all(&mut *tx)
        .await?;
    count_closed(&mut tx, &closed).await?;
    tx.commit().await?;
    Ok(closed.len())
}

/// A span of fire times a job skipped, as `GET /api/misfires` shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct MisfireSpan {
    /// The closed span's id (`before` pages by it); absent while the span is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub job_id: i64,
    pub job_type: String,
    /// The first fire time skipped.
    pub first_fire: DateTime<Utc>,
    /// The last fire time skipped (so far, while open).
    pub last_fire: DateTime<Utc>,
    /// How many fire times were skipped: those of the job's schedule from `first_fire` to
    /// `last_fire` that have no run.
    pub count: i64,
    /// The job's misfire strategy and threshold (when the span closed).
    pub strategy: String,
    pub threshold_ms: i64,
    /// When the span was closed; absent while it is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<DateTime<Utc>>,
}
