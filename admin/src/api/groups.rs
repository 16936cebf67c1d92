//! Concurrency groups: at most `limit` runs of their jobs in flight across the cluster, starts
//! spread by an optional rate (see [`crate::flow`]). Anyone who may read jobs sees them; an
//! operator creates one, and changes or deletes one whose jobs they may all change.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{parse_body, parse_limit, ApiError, ApiResult, ErrorBody, ErrorCode, Params, Shared};
use crate::audit::{self, Entry};
use crate::auth::{Access, Principal};
use crate::flow::{check_group_name, MAX_LIMIT};

/// A rate limit: starts spread so that no second sees more than `per_second + burst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Starts a second, over time (more than 0, at most 100,000).
    #[schema(exclusive_minimum = 0, maximum = 100_000)]
    pub per_second: f64,
    /// Starts allowed at once on top of the rate (default 0).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100_000)]
    pub burst: i64,
}

/// A concurrency group as created.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// 1 to 100 letters, digits, `.`, `_`, `-`; jobs name it in `concurrency_group`. It cannot
    /// be changed.
    #[schema(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
    name: String,
    /// Most runs of the group's jobs running or on their way to a worker at once (1 to 100,000).
    #[schema(minimum = 1, maximum = 100_000)]
    limit: i64,
    #[serde(default)]
    rate: Option<Rate>,
}

/// A concurrency group and how it is used now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Group {
    name: String,
    limit: i64,
    rate: Option<Rate>,
    /// Runs of its jobs in flight now (released, not ended): the slots in use.
    in_flight: i64,
    /// Runs waiting for a slot (due or not yet due).
    queued: i64,
    /// Its jobs.
    jobs: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// Every concurrency group.
#[derive(Serialize, utoipa::ToSchema)]
pub struct GroupList {
    groups: Vec<Group>,
}

#[derive(sqlx::FromRow)]
struct GroupRow {
    name: String,
    limit: i64,
    rate_per_second: Option<f64>,
    rate_burst: i64,
    in_flight: i64,
    queued: i64,
    jobs: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<GroupRow> for Group {
    fn from(r: GroupRow) -> Self {
        Group {
            name: r.name,
            limit: r.limit,
            rate: r.rate_per_second.map(|per_second| Rate {
                per_second,
                burst: r.rate_burst,
            }),
            in_flight: r.in_flight,
            queued: r.queued,
            jobs: r.jobs,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn check_limit(limit: i64) -> ApiResult<()> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}; got {limit}"),
        ));
    }
    Ok(())
}

fn check_rate(rate: &Option<Rate>) -> ApiResult<()> {
    let Some(r) = rate else { return Ok(()) };
    if !(r.per_second > 0.0 && r.per_second <= MAX_LIMIT as f64) {
        return Err(ApiError::invalid(
            "rate.per_second",
            format!(
                "must be more than 0 and at most {MAX_LIMIT}; got {}",
                r.per_second
            ),
        ));
    }
    if !(0..=MAX_LIMIT).contains(&r.burst) {
        return Err(ApiError::invalid(
            "rate.burst",
            format!("must be between 0 and {MAX_LIMIT}; got {}", r.burst),
        ));
    }
    Ok(())
}

async fn load(conn: &mut sqlx::PgConnection, name: &str) -> ApiResult<Group> {
    let row: Option<GroupRow> = sqlx::query_as(sql!("flow/get_group"))
        .bind(name)
        .bind(None::<Vec<i32>>)
        .fetch_optional(conn)
        .await?;
    row.map(Group::from)
        .ok_or_else(|| ApiError::not_found("concurrency group", name))
}

fn as_json(g: &Group) -> ApiResult<Value> {
    serde_json::to_value(g).map_err(ApiError::internal)
}

/// `Ok` when `p` may change every job of group `name`; else `403` naming the first it may not.
async fn require_members(
    conn: &mut sqlx::PgConnection,
    p: &Principal,
    name: &str,
) -> ApiResult<()> {
    let types: Vec<String> = sqlx::query_scalar(sql!("flow/group_job_types"))
        .bind(name)
        .fetch_all(conn)
        .await?;
    for t in types {
        p.require(Access::Write, &t).map_err(|e| {
            ApiError::forbidden(format!(
                "concurrency group {name} has jobs the caller may not change: {}",
                e.message
            ))
        })?;
    }
    Ok(())
}

/// Creates a concurrency group.
#[utoipa::path(post, path = "/concurrency-groups", tag = "flow control", request_body = GroupSpec,
    responses(
        (status = 201, description = "Created.", body = Group),
        (status = 409, description = "A group of that name exists (`group_exists`).", body = ErrorBody),
    ))]
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Group>)> {
    let spec: GroupSpec = parse_body(&body)?;
    check_group_name("name", &spec.name)?;
    check_limit(spec.limit)?;
    check_rate(&spec.rate)?;
    let mut tx = state.pool.begin().await?;
    let created: Option<String> = sqlx::query_scalar(sql!("flow/insert_group"))
        .bind(&spec.name)
        .bind(spec.limit)
        .bind(spec.rate.as_ref().map(|r| r.per_second))
        .bind(spec.rate.as_ref().map_or(0, |r| r.burst))
        .bind(i64::from(state.shard_count))
        .fetch_optional(&mut *tx)
        .await?;
    if created.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::GroupExists,
            format!(
                "a concurrency group named {} exists already; change it with PATCH /api/concurrency-groups/{}",
                spec.name, spec.name
            ),
        ));
    }
    let group = load(&mut tx, &spec.name).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("group.create")
            .target(format!("concurrency group {}", group.name))
            .after(as_json(&group)?),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(group = %group.name, limit = group.limit, "concurrency group created");
    Ok((StatusCode::CREATED, Json(group)))
}

/// Every concurrency group, by name, with its slots in use and its queue.
#[utoipa::path(get, path = "/concurrency-groups", tag = "flow control",
    responses((status = 200, description = "The groups.", body = GroupList)))]
pub async fn list(state: Shared) -> ApiResult<Json<GroupList>> {
    let rows: Vec<GroupRow> = sqlx::query_as(sql!("flow/get_group"))
        .bind(None::<String>)
        .bind(None::<Vec<i32>>)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(GroupList {
        groups: rows.into_iter().map(Group::from).collect(),
    }))
}

/// The group's name in a path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documents the path
pub struct GroupName {
    /// The group's name.
    name: String,
}

/// One concurrency group.
#[utoipa::path(get, path = "/concurrency-groups/{name}", tag = "flow control", params(GroupName),
    responses(
        (status = 200, description = "The group.", body = Group),
        (status = 404, description = "No such group (`not_found`).", body = ErrorBody),
    ))]
pub async fn get(state: Shared, Path(name): Path<String>) -> ApiResult<Json<Group>> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(load(&mut conn, &name).await?))
}

/// A queued run of a group, in release order.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct QueuedRun {
    /// Its place in line (1: released next), counting every queued run of the group; none
    /// for a run whose fire time has not come (it joins the line then).
    place: Option<i64>,
    /// The run (`GET /api/triggers/{id}`).
    id: i64,
    job_id: i64,
    job_name: String,
    job_type: String,
    /// Its job's priority when it was written (higher first).
    priority: i32,
    fire_time: DateTime<Utc>,
}

/// The queue of a group.
#[derive(Serialize, utoipa::ToSchema)]
pub struct GroupQueue {
    /// The group as it is now (slots in use, queued runs in all).
    group: Group,
    /// Its queued runs the caller may see, in release order: the due ones first, by place.
    runs: Vec<QueuedRun>,
}

/// How many queued runs to list.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct QueueQuery {
    /// Runs to list, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A group's queued runs in the order they will be released, with their place in line.
#[utoipa::path(get, path = "/concurrency-groups/{name}/queue", tag = "flow control",
    params(GroupName, QueueQuery),
    responses(
        (status = 200, description = "The group and its queue.", body = GroupQueue),
        (status = 404, description = "No such group (`not_found`).", body = ErrorBody),
    ))]
pub async fn queue(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(name): Path<String>,
    Params(q): Params,
) -> ApiResult<Json<GroupQueue>> {
    let limit = parse_limit(q.get("limit"))?;
    let mut conn = state.pool.acquire().await?;
    let group = load(&mut conn, &name).await?;
    let runs = sqlx::query_as(sql!("flow/queue"))
        .bind(&name)
        .bind(limit)
        .bind(p.visible_like())
        .fetch_all(&mut *conn)
        .await?;
    Ok(Json(GroupQueue { group, runs }))
}

/// The fields of a group to change.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupPatch {
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100_000)]
    limit: Option<i64>,
    /// A new rate, or `null` to remove it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Rate>)]
    rate: Option<Option<Rate>>,
}

/// A field given (`Some`, its value perhaps `null`), as told from one left out (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Rate>>, D::Error> {
    Option::<Rate>::deserialize(d).map(Some)
}

/// Changes a group's limit or rate; it applies from the next release (runs in flight beyond
/// a lowered limit finish, and no more go until the group is under it).
#[utoipa::path(patch, path = "/concurrency-groups/{name}", tag = "flow control",
    params(GroupName), request_body = GroupPatch,
    responses(
        (status = 200, description = "Changed.", body = Group),
        (status = 404, description = "No such group (`not_found`).", body = ErrorBody),
    ))]
pub async fn update(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Group>> {
    let patch: GroupPatch = parse_body(&body)?;
    let mut tx = state.pool.begin().await?;
    let before = load(&mut tx, &name).await?;
    require_members(&mut tx, &p, &name).await?;
    let limit = patch.limit.unwrap_or(before.limit);
    let rate = patch.rate.unwrap_or_else(|| before.rate.clone());
    check_limit(limit)?;
    check_rate(&rate)?;
    sqlx::query(sql!("flow/update_group"))
        .bind(&name)
        .bind(limit)
        .bind(rate.as_ref().map(|r| r.per_second))
        .bind(rate.as_ref().map_or(0, |r| r.burst))
        .execute(&mut *tx)
        .await?;
    let after = load(&mut tx, &name).await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("group.update")
            .target(format!("concurrency group {name}"))
            .before(as_json(&before)?)
            .after(as_json(&after)?),
    )
    .await?;
    tx.commit().await?;
    Ok(Json(after))
}

/// Deletes a group that no job belongs to any more.
#[utoipa::path(delete, path = "/concurrency-groups/{name}", tag = "flow control",
    params(GroupName),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such group (`not_found`).", body = ErrorBody),
        (status = 409, description = "Jobs still belong to it (`group_in_use`).", body = ErrorBody),
    ))]
pub async fn delete(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let mut tx = state.pool.begin().await?;
    let before = load(&mut tx, &name).await?;
    require_members(&mut tx, &p, &name).await?;
    if before.jobs > 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::GroupInUse,
            format!(
                "{} job(s) belong to concurrency group {name}; move them out (PATCH their concurrency_group to null or another group) first",
                before.jobs
            ),
        ));
    }
    // Its last runs (of jobs that left it) are released as they are, without a limit.
    sqlx::query(sql!("flow/delete_group"))
        .bind(&name)
        .execute(&mut *tx)
        .await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("group.delete")
            .target(format!("concurrency group {name}"))
            .before(as_json(&before)?),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
