//! `/api/alarms`: alarm deliveries of failed runs and how they went.

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{parse_id, parse_limit, ApiError, ApiResult, Params, Shared};

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct AlarmView {
    pub id: i64,
    pub trigger_id: i64,
    pub job_id: i64,
    /// `webhook` or `email`.
    pub channel: String,
    pub target: String,
    /// `pending`, `sent` or `failed` (gave up after the configured attempts).
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
}

pub async fn list(
    state: Shared,
    axum::Extension(p): axum::Extension<crate::auth::Principal>,
    Params(q): Params,
) -> ApiResult<Json<Value>> {
    let job_id = q.get("job_id").map(|s| parse_id("job_id", s)).transpose()?;
    let trigger_id = q
        .get("trigger_id")
        .map(|s| parse_id("trigger_id", s))
        .transpose()?;
    let status = match q.get("status").map(String::as_str) {
        None => None,
        Some(s @ ("pending" | "sent" | "failed")) => Some(s),
        Some(other) => {
            return Err(ApiError::invalid(
                "status",
                format!("{other:?} is not an alarm status: use pending, sent or failed"),
            ))
        }
    };
    let before = match q.get("before_id") {
        None => i64::MAX,
        Some(s) => parse_id("before_id", s)?,
    };
    let limit = parse_limit(q.get("limit"))?;
    let alarms: Vec<AlarmView> = sqlx::query_as(sql!("alarms/list"))
        .bind(job_id)
        .bind(trigger_id)
        .bind(status)
        .bind(before)
        .bind(limit)
        .bind(p.visible_like())
        .fetch_all(&state.pool)
        .await?;
    let next = (alarms.len() as i64 == limit)
        .then(|| alarms.last().map(|a| a.id))
        .flatten();
    Ok(Json(json!({ "alarms": alarms, "next_before_id": next })))
}
