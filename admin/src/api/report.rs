//! `/api/report`: runs per day, job and status (the dashboard's daily report), kept up to date
//! in the transaction that ends each run (`outcome::count_in_report`).

use std::collections::BTreeMap;

use axum::Json;
#[allow(unused_imports)] // RunStatus: the schema of `ReportRow::status`
use cadenza_schemas::RunStatus;
use chrono::{NaiveDate, Utc};
use serde::Serialize;

use super::{parse_bool, parse_id, ApiError, ApiResult, Params, Shared};

/// Longest span of one request, in days.
const MAX_DAYS: i64 = 366;

/// Runs of one job that ended with one status on one day (UTC).
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ReportRow {
    pub day: NaiveDate,
    pub job_id: i64,
    #[schema(value_type = RunStatus)]
    pub status: String,
    pub runs: i64,
}

/// One day's runs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReportDay {
    pub day: NaiveDate,
    pub runs: i64,
    /// Runs per status.
    pub by_status: BTreeMap<String, i64>,
}

/// Runs per day, job and status.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Report {
    pub from: NaiveDate,
    pub to: NaiveDate,
    /// Days with runs, in order.
    pub days: Vec<ReportDay>,
    /// Per job; empty when asked with `rows=false`.
    pub rows: Vec<ReportRow>,
}

/// Which days, and which job.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct ReportQuery {
    /// The first day (`2026-11-21`; default: six days before `to`). At most 366 days.
    from: Option<NaiveDate>,
    /// The last day, included (default: today, UTC).
    to: Option<NaiveDate>,
    #[param(minimum = 1)]
    job_id: Option<i64>,
    /// `false`: only the day totals, without the per-job `rows` (what a chart needs; cheaper
    /// with many jobs). Default `true`.
    rows: Option<bool>,
}

fn parse_day(field: &str, s: &str) -> ApiResult<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| ApiError::invalid(field, format!("{s:?} is not a date such as 2026-11-21")))
}

/// Runs per day, job and status (XXL-JOB's run report), of the jobs the caller may see, with
/// each day's totals. Kept up to date as runs end, so it is fast with millions of runs.
#[utoipa::path(get, path = "/report", tag = "operations", params(ReportQuery),
    responses((status = 200, description = "The report.", body = Report)))]
pub async fn daily(
    state: Shared,
    axum::Extension(p): axum::Extension<crate::auth::Principal>,
    Params(q): Params,
) -> ApiResult<Json<Report>> {
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
    let with_rows = parse_bool("rows", q.get("rows"))?.unwrap_or(true);
    let mut days: BTreeMap<NaiveDate, BTreeMap<String, i64>> = BTreeMap::new();
    let rows: Vec<ReportRow> = if with_rows || job_id.is_some() {
        sqlx::query_as(sql!("report/daily"))
            .bind(from)
            .bind(to)
            .bind(job_id)
            .bind(p.visible_like())
            .fetch_all(&state.pool)
            .await?
    } else {
        let totals: Vec<(NaiveDate, String, i64)> = sqlx::query_as(sql!("report/daily_totals"))
            .bind(from)
            .bind(to)
            .bind(p.visible_like())
            .fetch_all(&state.pool)
            .await?;
        for (day, status, runs) in totals {
            *days.entry(day).or_default().entry(status).or_default() += runs;
        }
        Vec::new()
    };
    for r in &rows {
        *days
            .entry(r.day)
            .or_default()
            .entry(r.status.clone())
            .or_default() += r.runs;
    }
    let days = days
        .into_iter()
        .map(|(day, by_status)| ReportDay {
            day,
            runs: by_status.values().sum(),
            by_status,
        })
        .collect();
    Ok(Json(Report {
        from,
        to,
        days,
        rows: if with_rows { rows } else { Vec::new() },
    }))
}
