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
/// Most `rows` in one answer (the default page): a year of 10,000 jobs is millions of rows, read
/// a page at a time with `after`.
const MAX_ROWS: i64 = 10_000;

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
    /// Per job, ordered by day, job and status, at most `limit` of them; empty when asked with
    /// `rows=false`.
    pub rows: Vec<ReportRow>,
    /// When there are more rows: pass it as `after` for the next page (`days` is whole in every
    /// page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
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
    /// Rows per page, 1 to 10,000 (default 10,000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<i64>,
    /// The `next` of the previous page.
    after: Option<String>,
}

/// The position after a row, as `next` and `after` write it: `DAY/JOB_ID/STATUS`.
fn cursor(r: &ReportRow) -> String {
    format!("{}/{}/{}", r.day, r.job_id, r.status)
}

fn parse_cursor(s: &str) -> ApiResult<(NaiveDate, i64, String)> {
    let bad = || {
        ApiError::invalid(
            "after",
            format!("{s:?} is not the `next` of a report page (DAY/JOB_ID/STATUS)"),
        )
    };
    let mut parts = s.splitn(3, '/');
    let day = parts
        .next()
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
        .ok_or_else(bad)?;
    let job = parts
        .next()
        .and_then(|j| j.parse::<i64>().ok())
        .ok_or_else(bad)?;
    let status = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    Ok((day, job, status.to_owned()))
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
    let limit = match q.get("limit") {
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_ROWS).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("{s:?} is not a number from 1 to {MAX_ROWS}"),
                )
            })?,
        None => MAX_ROWS,
    };
    let after = q.get("after").map(|s| parse_cursor(s)).transpose()?;
    let mut rows: Vec<ReportRow> = if with_rows || job_id.is_some() {
        sqlx::query_as(sql!("report/daily"))
            .bind(from)
            .bind(to)
            .bind(job_id)
            .bind(p.visible_like())
            .bind(after.as_ref().map(|a| a.0))
            .bind(after.as_ref().map(|a| a.1))
            .bind(after.as_ref().map(|a| a.2.clone()))
            .bind(limit + 1)
            .fetch_all(&state.pool)
            .await?
    } else {
        Vec::new()
    };
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(cursor)
    } else {
        None
    };
    let mut days: BTreeMap<NaiveDate, BTreeMap<String, i64>> = BTreeMap::new();
    if job_id.is_some() && next.is_none() && after.is_none() {
        // One job's rows are few (days × statuses): they are all here and make its totals.
        for r in &rows {
            *days
                .entry(r.day)
                .or_default()
                .entry(r.status.clone())
                .or_default() += r.runs;
        }
    } else if let Some(job) = job_id {
        let totals: Vec<(NaiveDate, String, i64)> = sqlx::query_as(sql!("report/daily_job"))
            .bind(from)
            .bind(to)
            .bind(job)
            .bind(p.visible_like())
            .fetch_all(&state.pool)
            .await?;
        for (day, status, runs) in totals {
            *days.entry(day).or_default().entry(status).or_default() += runs;
        }
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
        next: if with_rows { next } else { None },
    }))
}
