//! `GET /api/scheduler`: the scheduler's health as the console's dashboard shows it: the admins
//! alive, the shards each holds, the shards nobody holds, how late each admin published in the
//! last minute and how far ahead of their fire time it takes runs for sending (each admin writes
//! its figures at every lease round).

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ApiResult, Shared};

/// An admin, from its last lease round.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AdminView {
    pub admin_id: String,
    pub started_at: DateTime<Utc>,
    /// Its last lease round.
    pub last_seen: DateTime<Utc>,
    /// Its last lease round is younger than its lease TTL.
    pub alive: bool,
    /// The shards it holds now.
    pub shards: Vec<i32>,
    /// Triggers it published in the minute before its last lease round.
    #[sqlx(rename = "published_1m")]
    pub published_last_minute: i64,
    /// Publication lateness (publish − fire time) of those triggers, in ms: median, 99th
    /// percentile (each to within 10 %) and maximum. 0 when it published none.
    pub lateness_p50_ms: i64,
    pub lateness_p99_ms: i64,
    pub lateness_max_ms: i64,
    /// How far ahead of their fire time it takes runs for sending (its
    /// `CADENZA_PUBLISH_AHEAD_MS`, bounded by its look-ahead), in ms. A job change or a cancel
    /// keeps, as taken, the runs due within the longest of the live admins' (plus a guard of
    /// 250 ms). 0 when it takes runs at their fire time, or for an admin of a version that did
    /// not report it.
    pub publish_ahead_ms: i64,
}

/// The scheduler's health.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SchedulerHealth {
    /// Admins seen within the last hour.
    admins: Vec<AdminView>,
    /// How many shards the jobs are spread over.
    shard_count: u32,
    /// Shards no admin holds now: their jobs do not fire until one takes them.
    unheld_shards: Vec<i32>,
}

/// Admins alive, the shards each holds, the shards nobody holds, each admin's publication
/// lateness over the last minute and how far ahead it takes runs for sending.
#[utoipa::path(get, path = "/scheduler", tag = "operations",
    responses((status = 200, description = "The scheduler's health.", body = SchedulerHealth)))]
pub async fn health(state: Shared) -> ApiResult<Json<SchedulerHealth>> {
    let admins: Vec<AdminView> = sqlx::query_as(sql!("health/admins"))
        .fetch_all(&state.pool)
        .await?;
    let unheld_shards: Vec<i32> = sqlx::query_scalar(sql!("health/unheld_shards"))
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(SchedulerHealth {
        admins,
        shard_count: state.shard_count,
        unheld_shards,
    }))
}
