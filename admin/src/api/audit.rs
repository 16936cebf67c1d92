//! `GET /api/audit`: who changed what, when and from where. Admins see every row; operators and
//! viewers the rows about jobs of the types their patterns match.

use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{parse_id, parse_limit, parse_time, ApiResult, Params, Shared};
use crate::auth::Principal;

/// One audited write, done or refused.
#[derive(Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AuditRow {
    id: i64,
    at: DateTime<Utc>,
    /// A user name, `service`, or the name given in a failed sign-in.
    actor: String,
    user_id: Option<i64>,
    /// The client's address.
    source: Option<String>,
    /// `job.create`, `job.update`, `replay`, `login`, `token.create`, `user.delete`, … or, for a
    /// refused request, its method and path.
    action: String,
    /// `done` or `refused`.
    outcome: String,
    job_id: Option<i64>,
    job_type: Option<String>,
    /// What else it was about (a user, a token, runs).
    target: Option<String>,
    /// The job or user before the change.
    #[schema(value_type = Option<Object>)]
    before: Option<sqlx::types::Json<Value>>,
    /// The job or user after the change.
    #[schema(value_type = Option<Object>)]
    after: Option<sqlx::types::Json<Value>>,
    /// Why it was refused, or a note.
    detail: Option<String>,
}

/// Which audit rows, newest first, a page at a time.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct AuditQuery {
    /// Only rows of this actor.
    actor: Option<String>,
    #[param(minimum = 1)]
    job_id: Option<i64>,
    /// Only rows at or after this (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Only rows before this (RFC 3339).
    to: Option<DateTime<Utc>>,
    /// The page before this id (`next_before_id` of the previous page).
    #[param(minimum = 1)]
    before_id: Option<i64>,
    /// Rows per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A page of the audit.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AuditList {
    audit: Vec<AuditRow>,
    /// Give it as `before_id` for the next page; none on the last page.
    next_before_id: Option<i64>,
}

/// Who changed what, when and from where: admins see every row; operators and viewers the rows
/// about jobs of the types their patterns match.
#[utoipa::path(get, path = "/audit", tag = "accounts", params(AuditQuery),
    responses((status = 200, description = "A page of the audit.", body = AuditList)))]
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<AuditList>> {
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
    Ok(Json(AuditList {
        audit: rows,
        next_before_id: next,
    }))
}
