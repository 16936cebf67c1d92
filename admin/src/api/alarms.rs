//! `/api/alarms`: alarm deliveries of failed runs and how they went.

use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{parse_id, parse_limit, ApiError, ApiResult, Params, Shared};

/// An alarm delivery of a failed run.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AlarmView {
    pub id: i64,
    /// The failed run.
    pub trigger_id: i64,
    pub job_id: i64,
    /// `webhook` or `email`.
    #[schema(value_type = AlarmChannel)]
    pub channel: String,
    /// The URL or the address.
    pub target: String,
    /// `pending`, `sent` or `failed` (gave up after the configured attempts).
    #[schema(value_type = AlarmStatus)]
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
}

/// Where an alarm goes.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a schema: the column is text
#[schema(rename_all = "snake_case")]
pub enum AlarmChannel {
    Webhook,
    Email,
}

/// How an alarm delivery went.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a schema: the column is text
#[schema(rename_all = "snake_case")]
pub enum AlarmStatus {
    Pending,
    Sent,
    Failed,
}

/// Which alarms, newest first, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct AlarmQuery {
    #[param(minimum = 1)]
    job_id: Option<i64>,
    #[param(minimum = 1)]
    trigger_id: Option<i64>,
    status: Option<AlarmStatus>,
    /// The page before this id (`next_before_id` of the previous page).
    #[param(minimum = 1)]
    before_id: Option<i64>,
    /// Alarms per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A page of alarms.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AlarmList {
    alarms: Vec<AlarmView>,
    /// Give it as `before_id` for the next page; none on the last page.
    next_before_id: Option<i64>,
}

/// Alarm deliveries of the jobs the caller may see, newest first.
#[utoipa::path(get, path = "/alarms", tag = "operations", params(AlarmQuery),
    responses((status = 200, description = "A page of alarms.", body = AlarmList)))]
pub async fn list(
    state: Shared,
    axum::Extension(p): axum::Extension<crate::auth::Principal>,
    Params(q): Params,
) -> ApiResult<Json<AlarmList>> {
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
    Ok(Json(AlarmList {
        alarms,
        next_before_id: next,
    }))
}
