//! `POST /api/import/xxl-job`: XXL-JOB job definitions (rows of `xxl_job_info` and
//! `xxl_job_group`, already read from their export files) imported as jobs.
//!
//! The rows are decided by [`xxl::plan`]; a dry run answers its report. A real import is one
//! transaction under an advisory lock (`import/lock.sql`): the ids the source imported before are
//! read again under it, every new job is inserted, remembered in `xxl_imports` and then given its
//! children (remapped to the new ids), with one audit entry. Any row that cannot be imported
//! refuses the whole import (`422 import_rejected` with the report); nothing is written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cadenza_schemas::JobType;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::ErrorDetail;
use super::{parse_body, ApiError, ApiResult, ErrorCode, Shared};
use crate::audit::{self, Entry};
use crate::auth::{Access, Principal};
use crate::import::xxl::{self, Handlers, ImportReport, Imported, Options, Outcome};
use crate::import::Row;

/// XXL-JOB rows to import, and how.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct XxlImportRequest {
    /// Rows of `xxl_job_info`: column name → value, as exported (`id`, `job_group`, `job_desc`,
    /// `schedule_type`, `schedule_conf`, …; `job_cron` in exports before XXL-JOB 2.3). Columns
    /// the import does not read are ignored.
    #[schema(schema_with = jobs_schema)]
    jobs: Vec<Row>,
    /// Rows of `xxl_job_group` (`id`, `app_name`): the app names of BEAN jobs. Without them a
    /// BEAN job needs a `handlers` mapping.
    #[serde(default)]
    #[schema(schema_with = groups_schema)]
    groups: Option<Vec<Row>>,
    /// Report what would be done; write nothing (default false).
    #[serde(default)]
    dry_run: bool,
    /// Native job types instead of the bridge: keys `<app>/<handler>`, `<handler>` (any app) or
    /// `job:<xxl id>` (one job, of any glue type), values job types.
    #[serde(default)]
    handlers: BTreeMap<String, JobType>,
    /// The job type of GLUE_SHELL jobs, served by the worker's `shell` built-in (default
    /// `shell`).
    #[serde(default = "default_shell")]
    #[schema(value_type = String)]
    shell_job_type: JobType,
    /// IANA time zone of the cron expressions: XXL-JOB evaluated them in its admin's JVM zone
    /// (default `UTC`).
    #[serde(default = "default_timezone")]
    #[schema(value_type = String)]
    timezone: String,
    /// The name the XXL ids are remembered under, so that two XXL-JOB installations can be
    /// imported (default `xxl-job`; 1 to 100 characters).
    #[serde(default = "default_source")]
    #[schema(value_type = String, min_length = 1, max_length = 100)]
    source: String,
    /// Create every job disabled, whatever its `trigger_status` (default false).
    #[serde(default)]
    all_disabled: bool,
}

fn jobs_schema() -> utoipa::openapi::schema::Array {
    let mut a = cadenza_schemas::xxl_export::rows_schema();
    a.min_items = Some(1);
    a.description = Some("Rows of `xxl_job_info` (at least one).".into());
    a
}

fn groups_schema() -> utoipa::openapi::schema::Array {
    let mut a = cadenza_schemas::xxl_export::rows_schema();
    a.description = Some("Rows of `xxl_job_group`.".into());
    a.schema_type = utoipa::openapi::schema::SchemaType::from_iter([
        utoipa::openapi::schema::Type::Array,
        utoipa::openapi::schema::Type::Null,
    ]);
    a
}

fn default_shell() -> JobType {
    JobType::parse(xxl::DEFAULT_SHELL_JOB_TYPE).unwrap_or_else(|_| unreachable!())
}
fn default_timezone() -> String {
    "UTC".to_owned()
}
fn default_source() -> String {
    xxl::DEFAULT_SOURCE.to_owned()
}

/// The answer to an import refused for its rows: the error and the report naming each row that
/// cannot be imported.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ImportRejected {
    error: ErrorDetail,
    /// Every row with its outcome; those with `outcome: error` say why. Absent when the request
    /// itself is invalid (`invalid_field`).
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<ImportReport>,
}

impl XxlImportRequest {
    fn options(&self) -> ApiResult<Options> {
        if chrono_tz::Tz::from_str(&self.timezone).is_err() {
            return Err(ApiError::invalid(
                "timezone",
                format!(
                    "unknown time zone {:?}; use an IANA name such as \"Asia/Shanghai\" or \"UTC\"",
                    self.timezone
                ),
            ));
        }
        let source = self.source.trim();
        if source.is_empty() || source.chars().count() > xxl::MAX_SOURCE_LEN {
            return Err(ApiError::invalid(
                "source",
                format!("must be 1 to {} characters", xxl::MAX_SOURCE_LEN),
            ));
        }
        if self.jobs.is_empty() {
            return Err(ApiError::invalid(
                "jobs",
                "holds no row; give the rows of xxl_job_info",
            ));
        }
        Ok(Options {
            handlers: Handlers::parse(&self.handlers)?,
            shell_job_type: self.shell_job_type.clone(),
            timezone: self.timezone.clone(),
            all_disabled: self.all_disabled,
            source: source.to_owned(),
        })
    }
}

/// The jobs `source` imported before among the XXL ids `ids`, as far as `p` may change them:
/// one of a job type outside the caller's patterns counts as never imported, so that it can
/// be neither a child of a new job (which would let the caller fire it) nor shown.
async fn imported(
    conn: &mut sqlx::PgConnection,
    p: &Principal,
    source: &str,
    ids: &[i64],
) -> ApiResult<HashMap<i64, Imported>> {
    let rows: Vec<(i64, i64, String)> = sqlx::query_as(sql!("import/imported"))
        .bind(source)
        .bind(ids)
        .fetch_all(conn)
        .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, _, job_type)| p.may(Access::Write, job_type))
        .map(|(xxl_id, job_id, job_type)| (xxl_id, Imported { job_id, job_type }))
        .collect())
}

/// The caller may create jobs of every job type the import creates.
fn require_types(p: &Principal, report: &ImportReport) -> ApiResult<()> {
    for r in &report.rows {
        if let Some(spec) = r.job.as_ref().filter(|_| r.outcome == Outcome::Create) {
            p.require(Access::Write, spec.job_type.as_str())?;
        }
    }
    Ok(())
}

fn rejected(report: ImportReport) -> Response {
    let rows = report
        .rows
        .iter()
        .filter(|r| r.outcome == Outcome::Error)
        .count();
    let groups = report.group_errors.len();
    let mut what = Vec::new();
    if rows > 0 {
        what.push(format!(
            "{rows} of {} rows cannot be imported (outcome error in report.rows)",
            report.rows.len()
        ));
    }
    if groups > 0 {
        what.push(format!(
            "{groups} group rows cannot be read (report.group_errors)"
        ));
    }
    let body = ImportRejected {
        error: ErrorDetail {
            code: ErrorCode::ImportRejected,
            message: format!(
                "{}; nothing was imported: fix or leave out those rows and import again",
                what.join(", ")
            ),
            field: None,
        },
        report: Some(report),
    };
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

/// Imports XXL-JOB job definitions: each `xxl_job_info` row becomes a job (schedule, strategies,
/// timeout, retries, children remapped to the new ids, alarm e-mails, enabled state). A BEAN job
/// gets the bridge's job type `xxl.<app>.<handler>` (served with `--serve
/// TYPE=xxl:APP/HANDLER`) or the native type `handlers` names; GLUE_SHELL runs its script with
/// the `shell` built-in; other GLUE types need a `job:<id>` handler. The answer reports every row
/// (`create`, `already_imported` with its job, or `error` with the reasons) and the `--serve`
/// options the workers need.
///
/// All or nothing: a dry run writes nothing, and a row that cannot be imported refuses the
/// import (`422 import_rejected`). Importing the same rows again from the same `source` creates
/// nothing: they are `already_imported`.
#[utoipa::path(post, path = "/import/xxl-job", tag = "jobs", request_body = XxlImportRequest,
    responses(
        (status = 200, description = "The report: what a dry run would do, or what was imported.", body = ImportReport),
        (status = 422, description = "Rows cannot be imported (`import_rejected`, with the report; nothing was written), or a field of the request is invalid (`invalid_field`).", body = ImportRejected),
    ))]
pub async fn xxl_job(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<Response> {
    let req: XxlImportRequest = parse_body(&body)?;
    let opts = req.options()?;
    let ids = xxl::referenced_ids(&req.jobs);
    let now = Utc::now();
    let mut conn = state.pool.acquire().await?;
    let before = imported(&mut conn, &p, &opts.source, &ids).await?;
    drop(conn);
    let report = xxl::plan(
        &req.jobs,
        req.groups.as_deref(),
        &opts,
        &before,
        req.dry_run,
        now,
    );
    require_types(&p, &report)?;
    if report.errors > 0 && !req.dry_run {
        return Ok(rejected(report));
    }
    let creates = report.create;
    if req.dry_run || creates == 0 {
        return Ok(Json(report).into_response());
    }
    // Topics first, outside the transaction (as creating a job does).
    let types: BTreeSet<&JobType> = report
        .rows
        .iter()
        .filter(|r| r.outcome == Outcome::Create)
        .filter_map(|r| r.job.as_ref().map(|j| &j.job_type))
        .collect();
    for t in types {
        state.kafka.ensure_trigger_topic(&state.pool, t).await?;
    }

    let mut tx = state.pool.begin().await?;
    sqlx::query(sql!("import/lock")).execute(&mut *tx).await?;
    // Decided again under the lock: another import may have created some of these meanwhile.
    let before = imported(&mut tx, &p, &opts.source, &ids).await?;
    let mut report = xxl::plan(&req.jobs, req.groups.as_deref(), &opts, &before, false, now);
    require_types(&p, &report)?;
    if report.errors > 0 {
        return Ok(rejected(report));
    }
    if report.create == 0 {
        // A concurrent import created them all: nothing to write.
        return Ok(Json(report).into_response());
    }
    let mut new_ids: HashMap<i64, i64> = HashMap::new();
    let mut created = Vec::new();
    for r in &mut report.rows {
        let (Some(xxl_id), Some(spec)) = (r.xxl_id, r.job.as_ref()) else {
            continue;
        };
        if r.outcome != Outcome::Create {
            continue;
        }
        let schedule = spec.validate(now)?;
        let row = super::jobs::insert_job(&mut tx, state.shard_count, spec, schedule, now).await?;
        sqlx::query(sql!("import/remember"))
            .bind(&opts.source)
            .bind(xxl_id)
            .bind(row.id)
            .execute(&mut *tx)
            .await?;
        new_ids.insert(xxl_id, row.id);
        r.job_id = Some(row.id);
        created.push(
            json!({"xxl_id": xxl_id, "job_id": row.id, "name": spec.name,
            "job_type": spec.job_type}),
        );
    }
    // Every new job exists: children can point at any of them, in any order.
    for r in &mut report.rows {
        if r.outcome != Outcome::Create || r.children.is_empty() {
            continue;
        }
        let children = xxl::resolve_children(r, &new_ids);
        let Some(job_id) = r.job_id else { continue };
        sqlx::query(sql!("import/set_children"))
            .bind(job_id)
            .bind(children.iter().map(|c| c.0).collect::<Vec<i64>>())
            .execute(&mut *tx)
            .await?;
        if let Some(spec) = r.job.as_mut() {
            spec.children = children;
        }
    }
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("job.import")
            .target(format!("XXL-JOB source {}", opts.source))
            .detail(format!(
                "created {} jobs; {} were imported before",
                created.len(),
                report.already_imported
            ))
            .after(json!({"source": opts.source, "created": created})),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        source = %opts.source,
        created = created.len(),
        already_imported = report.already_imported,
        "XXL-JOB jobs imported"
    );
    Ok(Json(report).into_response())
}
