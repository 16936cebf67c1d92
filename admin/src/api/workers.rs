//! `/api/workers`: live and recently dead workers (seen within the last hour). `alive` follows
//! the dead timeout (`CADENZA_WORKER_DEAD_MS`) that routing uses.

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

#[allow(unused_imports)] // the schemas of `WorkerView`'s JSON columns
use {cadenza_schemas::RunningJob, std::collections::BTreeMap};

use super::{ApiResult, Shared};

/// A worker, from its last heartbeat.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WorkerView {
    pub worker_id: String,
    /// Its consumer group.
    #[sqlx(rename = "worker_group")]
    #[serde(rename = "group")]
    pub worker_group: String,
    /// The job types it has handlers for.
    pub job_types: Vec<String>,
    /// The partitions it holds, per trigger topic.
    #[schema(value_type = BTreeMap<String, Vec<i32>>)]
    pub assignments: sqlx::types::Json<Value>,
    /// Jobs with runs in progress on it.
    #[schema(value_type = Vec<RunningJob>)]
    pub running: sqlx::types::Json<Value>,
    /// How many runs it executes at once.
    pub capacity: i32,
    pub version: String,
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub last_seen: DateTime<Utc>,
    /// How often it sends a heartbeat, in milliseconds.
    pub interval_ms: i64,
    /// When it said goodbye (a clean stop).
    pub stopped_at: Option<DateTime<Utc>>,
    /// Whether routing sends it runs: heard from within `dead_after_ms` and not stopped.
    pub alive: bool,
}

/// The workers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WorkerList {
    workers: Vec<WorkerView>,
    /// A worker not heard from for this long is dead to routing.
    dead_after_ms: i64,
}

/// Workers heard from within the last hour, by group.
#[utoipa::path(get, path = "/workers", tag = "workers",
    responses((status = 200, description = "The workers.", body = WorkerList)))]
pub async fn list(state: Shared) -> ApiResult<Json<WorkerList>> {
    let dead_after_ms = state.registry.dead_after().num_milliseconds();
    let workers: Vec<WorkerView> = sqlx::query_as(sql!("workers/list"))
        .bind(dead_after_ms as f64)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(WorkerList {
        workers,
        dead_after_ms,
    }))
}
