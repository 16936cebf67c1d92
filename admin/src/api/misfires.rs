//! `/api/misfires`: the fire times jobs skipped by their misfire strategy, as spans (see
//! `crate::misfires`).

use axum::Json;
use serde::Serialize;

use super::{parse_id, parse_limit, ApiError, ApiResult, Params, Shared};
use crate::misfires::MisfireSpan;

/// Which spans.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct MisfireQuery {
    #[param(minimum = 1)]
    job_id: Option<i64>,
    job_type: Option<String>,
    /// The page of closed spans before this id (`next_before_id` of the previous page); open
    /// spans are listed on the first page only.
    #[param(minimum = 1)]
    before_id: Option<i64>,
    /// Spans per page and kind, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Spans of skipped fire times.
#[derive(Serialize, utoipa::ToSchema)]
pub struct MisfireList {
    /// Spans still growing (the job skipped a fire time in the last minute), the most recent
    /// first; on the first page only.
    open: Vec<MisfireSpan>,
    /// Closed spans, newest first.
    closed: Vec<MisfireSpan>,
    /// Give it as `before_id` for the next page of closed spans; none on the last page.
    next_before_id: Option<i64>,
    /// With `job_id`: every fire time the job has skipped since it was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<i64>,
}

/// Fire times the jobs the caller may see skipped because they were found later than their
/// misfire threshold (strategy `do_nothing`, or all but the last with `fire_once_now`). They
/// have no run each: a span says the first and last skipped and how many, and every fire time
/// of the job's schedule between them that has no run is one of them.
#[utoipa::path(get, path = "/misfires", tag = "operations", params(MisfireQuery),
    responses((status = 200, description = "Spans of skipped fire times.", body = MisfireList)))]
pub async fn list(
    state: Shared,
    axum::Extension(p): axum::Extension<crate::auth::Principal>,
    Params(q): Params,
) -> ApiResult<Json<MisfireList>> {
    let job_id = q.get("job_id").map(|s| parse_id("job_id", s)).transpose()?;
    let job_type = q
        .get("job_type")
        .map(|s| {
            cadenza_schemas::JobType::parse(s)
                .map(|t| t.as_str().to_owned())
                .map_err(|e| ApiError::invalid("job_type", e))
        })
        .transpose()?;
    let before = q
        .get("before_id")
        .map(|s| parse_id("before_id", s))
        .transpose()?;
    let limit = parse_limit(q.get("limit"))?;
    let visible = p.visible_like();
    let open: Vec<MisfireSpan> = if before.is_none() {
        sqlx::query_as(sql!("misfires/open"))
            .bind(job_id)
            .bind(&job_type)
            .bind(&visible)
            .bind(limit)
            .fetch_all(&state.pool)
            .await?
    } else {
        Vec::new()
    };
    let closed: Vec<MisfireSpan> = sqlx::query_as(sql!("misfires/closed"))
        .bind(job_id)
        .bind(&job_type)
        .bind(&visible)
        .bind(before)
        .bind(limit)
        .fetch_all(&state.pool)
        .await?;
    let next_before_id = (closed.len() as i64 == limit)
        .then(|| closed.last().and_then(|s| s.id))
        .flatten();
    let total = match job_id {
        Some(id) => {
            sqlx::query_scalar(sql!("misfires/total"))
                .bind(id)
                .bind(&visible)
                .fetch_optional(&state.pool)
                .await?
        }
        None => None,
    };
    Ok(Json(MisfireList {
        open,
        closed,
        next_before_id,
        total,
    }))
}
