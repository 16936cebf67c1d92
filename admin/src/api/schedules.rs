//! `GET /api/schedules/preview`: the next fire times of a schedule, as XXL-JOB's console shows
//! them next to the cron field, with the same validation errors as creating a job.

use axum::Json;
use cadenza_schemas::Schedule;
use chrono::{DateTime, FixedOffset, Utc};
use serde::Serialize;

use super::{ApiError, ApiResult, Params};
use crate::schedule::JobSchedule;

/// The most fire times one preview lists.
const MAX_COUNT: usize = 100;

/// A schedule, written as query parameters: `kind` and that kind's fields.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct PreviewQuery {
    /// `cron` (default), `fix_rate`, `fix_delay`, `once` or `none`.
    kind: Option<String>,
    /// The cron expression (kind `cron`).
    expr: Option<String>,
    /// IANA time zone of a cron expression (default `UTC`).
    timezone: Option<String>,
    /// Interval of a `fix_rate` schedule, in milliseconds.
    #[param(minimum = 1, maximum = 31_622_400_000i64)]
    every_ms: Option<i64>,
    /// Delay of a `fix_delay` schedule, in milliseconds.
    #[param(minimum = 1, maximum = 31_622_400_000i64)]
    delay_ms: Option<i64>,
    /// The instant of a `once` schedule (RFC 3339).
    at: Option<DateTime<Utc>>,
    /// A cron job's `jitter_ms`: with `job_id`, the fire times are those of that job, moved by
    /// its offset; without, the expression's own (a new job's offset comes with its id).
    #[param(minimum = 0, maximum = 86_400_000)]
    jitter_ms: Option<i64>,
    /// The job whose jitter offset applies (see `jitter_ms`).
    #[param(minimum = 1)]
    job_id: Option<i64>,
    /// How many fire times, 1 to 100 (default 5).
    #[param(minimum = 1, maximum = 100)]
    count: Option<i64>,
}

/// The next fire times from now.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// The zone the schedule is computed in (`UTC` but for cron).
    timezone: String,
    /// Fire times in UTC. Fewer than asked when the schedule ends (`once`), depends on runs
    /// (`fix_delay`: only the first) or never fires (`none`: none).
    fire_times: Vec<DateTime<Utc>>,
    /// The same instants in the schedule's zone, with its offset.
    local: Vec<DateTime<FixedOffset>>,
}

fn number(q: &std::collections::HashMap<String, String>, field: &str) -> ApiResult<i64> {
    let s = q
        .get(field)
        .ok_or_else(|| ApiError::invalid(field, "is required for this kind"))?;
    s.parse::<i64>()
        .map_err(|_| ApiError::invalid(field, format!("{s:?} is not a whole number")))
}

/// The next fire times of a schedule from now. The checks and messages are those of creating a
/// job, with the field named as the query parameter (`expr`, `timezone`, `every_ms`, …).
#[utoipa::path(get, path = "/schedules/preview", tag = "jobs", params(PreviewQuery),
    responses((status = 200, description = "The next fire times.", body = Preview)))]
pub async fn preview(Params(q): Params) -> ApiResult<Json<Preview>> {
    let count = match q.get("count") {
        None => 5,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_COUNT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "count",
                    format!("{s:?} is not a number between 1 and {MAX_COUNT}"),
                )
            })?,
    };
    let schedule = match q.get("kind").map_or("cron", String::as_str) {
        "cron" => Schedule::Cron {
            expr: q
                .get("expr")
                .cloned()
                .ok_or_else(|| ApiError::invalid("expr", "is required for a cron schedule"))?,
            timezone: q.get("timezone").cloned(),
        },
        "fix_rate" => Schedule::FixRate {
            every_ms: number(&q, "every_ms")?,
        },
        "fix_delay" => Schedule::FixDelay {
            delay_ms: number(&q, "delay_ms")?,
        },
        "once" => Schedule::Once {
            at: super::parse_time("at", q.get("at"))?
                .ok_or_else(|| ApiError::invalid("at", "is required for a once schedule"))?,
        },
        "none" => Schedule::None {},
        other => {
            return Err(ApiError::invalid(
                "kind",
                format!(
                    "{other:?} is not a schedule kind: use cron, fix_rate, fix_delay, once or none"
                ),
            ))
        }
    };
    let now = Utc::now();
    let parsed = JobSchedule::parse(&schedule, now).map_err(|e| {
        let field = e
            .field
            .strip_prefix("schedule.")
            .unwrap_or(e.field)
            .to_owned();
        ApiError::invalid(field, e.message)
    })?;
    let jitter_ms = match q.get("jitter_ms") {
        None => 0,
        Some(_) => number(&q, "jitter_ms")?,
    };
    let max_jitter = crate::schedule::MAX_JITTER_MS;
    if !(0..=max_jitter).contains(&jitter_ms) {
        return Err(ApiError::invalid(
            "jitter_ms",
            format!("must be between 0 and {max_jitter} (one day); got {jitter_ms}"),
        ));
    }
    let parsed = match q.get("job_id") {
        Some(id) => parsed.jittered(super::parse_id("job_id", id)?, jitter_ms),
        None => parsed,
    };
    let mut fire_times = Vec::with_capacity(count);
    let mut next = parsed.first_fire(now);
    while let Some(t) = next {
        fire_times.push(t);
        if fire_times.len() == count {
            break;
        }
        next = parsed.next_after(t);
    }
    let zone = parsed.zone();
    let local = fire_times
        .iter()
        .map(|t| t.with_timezone(&zone).fixed_offset())
        .collect();
    Ok(Json(Preview {
        timezone: zone.name().to_owned(),
        fire_times,
        local,
    }))
}
