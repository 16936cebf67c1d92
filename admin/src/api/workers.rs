//! `/api/workers`: live and recently dead workers (seen within the last hour). `alive` follows
//! the dead timeout (`CADENZA_WORKER_DEAD_MS`) that routing uses.

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{ApiResult, Shared};

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct WorkerView {
    pub worker_id: String,
    #[sqlx(rename = "worker_group")]
    #[serde(rename = "group")]
    pub worker_group: String,
    pub job_types: Vec<String>,
    pub assignments: sqlx::types::Json<Value>,
    pub running: sqlx::types::Json<Value>,
    pub capacity: i32,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub interval_ms: i64,
    pub stopped_at: Option<DateTime<Utc>>,
    pub alive: bool,
}

pub async fn list(state: Shared) -> ApiResult<Json<Value>> {
    let dead_after_ms = state.registry.dead_after().num_milliseconds();
    let workers: Vec<WorkerView> = sqlx::query_as(sql!("workers/list"))
        .bind(dead_after_ms as f64)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(
        json!({ "workers": workers, "dead_after_ms": dead_after_ms }),
    ))
}
