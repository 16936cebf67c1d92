//! `/api/report`: runs per day, job and status (the dashboard's daily report), kept up to date
//! in the transaction that ends each run (`outcome::count_in_report`).

use std::collections::BTreeMap;

use axum::Json;
use chrono::{NaiveDate, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::{parse_id, ApiError, ApiResult, Params, Shared};

/// Longest span of one request, in days.
const MAX_DAYS: i64 = 366;

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct ReportRow {
    pub day: NaiveDate,
    pub job_id: i64,
    pub status: String,
    pub runs: i64,
}

fn parse_day(field: &str, s: &str) -> ApiResult<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| ApiError::invalid(field, format!("{s:?} is not a date such as 2026-11-21")))
}

/// `from`, `to` (days, both included; default the last 7 days, UTC), `job_id`. Answers the rows
/// and, per day, the totals by status.
pub async fn daily(
    state: Shared,
    axum::Extension(p): axum::Extension<crate::auth::Principal>,
    Params(q): Params,
) -> ApiResult<Json<Value>> {
    let today = Utc::now().date_naive();
    let to = match q.get("to") {
        Some(s) => parse_day("to", s)?,
        None => today,
    };
    let from = match q.get("from") {
        Some(s) => parse_day("from", s)?,
        None => to - chrono::Duration::days(6),
    };
    if from > to {
        return Err(ApiError::invalid(
            "from",
            format!("{from} is after to ({to})"),
        ));
    }
    if (to - from).num_days() >= MAX_DAYS {
        return Err(ApiError::invalid(
            "from",
            format!("at most {MAX_DAYS} days per request"),
        ));
    }
    let job_id = q.get("job_id").map(|s| parse_id("job_id", s)).transpose()?;
    let rows: Vec<ReportRow> = sqlx::query_as(sql!("report/daily"))
        .bind(from)
        .bind(to)
        .bind(job_id)
        .bind(p.visible_like())
        .fetch_all(&state.pool)
        .await?;
    let mut days: BTreeMap<NaiveDate, BTreeMap<&str, i64>> = BTreeMap::new();
    for r in &rows {
        *days.entry(r.day).or_default().entry(&r.status).or_default() += r.runs;
    }
    let totals: Vec<Value> = days
        .iter()
        .map(|(day, by)| json!({"day": day, "runs": by.values().sum::<i64>(), "by_status": by}))
        .collect();
    Ok(Json(
        json!({"from": from, "to": to, "days": totals, "rows": rows}),
    ))
}
