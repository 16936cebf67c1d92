//! `GET /api/audit`: who changed what, when and from where. Admins see every row; operators and
//! viewers the rows about jobs of the types their patterns match.

use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{parse_id, parse_limit, parse_time, ApiResult, Params, Shared};
use crate::auth::Principal;

#[derive(Serialize, sqlx::FromRow)]
pub struct AuditRow {
    id: i64,
    at: DateTime<Utc>,
    actor: String,
    user_id: Option<i64>,
    source: Option<String>,
    action: String,
    outcome: String,
    job_id: Option<i64>,
    job_type: Option<String>,
    target: Option<String>,
    before: Option<sqlx::types::Json<Value>>,
    after: Option<sqlx::types::Json<Value>>,
    detail: Option<String>,
}

/// `?actor=&job_id=&from=&to=&before_id=&limit=`
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<Value>> {
    let job_id = q.get("job_id").map(|s| parse_id("job_id", s)).transpose()?;
    let before = match q.get("before_id") {
        None => i64::MAX,
        Some(s) => parse_id("before_id", s)?,
    };
    let limit = parse_limit(q.get("limit"))?;
    let rows: Vec<AuditRow> = sqlx::query_as(sql!("auth/audit_list"))
        .bind(q.get("actor"))
        .bind(job_id)
        .bind(parse_time("from", q.get("from"))?)
        .bind(parse_time("to", q.get("to"))?)
        .bind(before)
        .bind(limit)
        .bind(p.visible_like())
        .fetch_all(&state.pool)
        .await?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(Json(json!({ "audit": rows, "next_before_id": next })))
}
