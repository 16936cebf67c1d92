//! Job definitions: the API's input (`JobSpec`), its validation, and the stored job (`Job`).

use cadenza_schemas::{
    BlockStrategy, JobId, JobType, MisfireStrategy, Overlap, RouteStrategy, Schedule,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::schedule::{JobSchedule, ScheduleError};

/// Default `misfire_threshold_ms`: later than this past its fire time, a fire time is a misfire.
pub const DEFAULT_MISFIRE_THRESHOLD_MS: i64 = 5_000;
/// Longest duration any job field accepts (`timeout_ms`, `misfire_threshold_ms`, the intervals of
/// `fix_rate` and `fix_delay` schedules): 366 days. Bounded so that no arithmetic on fire times
/// can overflow, in the admin or in SQL; the database refuses larger values too (migration 0008).
pub const MAX_DURATION_MS: i64 = crate::schedule::MAX_INTERVAL_MS;
const MAX_NAME_LEN: usize = 200;
const MAX_PARAMS_LEN: usize = 256 * 1024;
const MAX_RETRIES: i32 = 100;
/// Longest retry backoff (and cap) accepted: 30 days.
const MAX_BACKOFF_MS: i64 = 30 * 24 * 3_600_000;
/// Default cap of an exponential backoff: one hour.
pub const DEFAULT_BACKOFF_MAX_MS: i64 = 3_600_000;
const MAX_ALARM_EMAILS: usize = 20;

/// How the wait before a retry grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// `retry_backoff_ms` before every retry.
    #[default]
    Fixed,
    /// `retry_backoff_ms × 2^(n−1)` before retry n, at most `retry_backoff_max_ms`.
    Exponential,
}

impl Backoff {
    pub fn as_str(self) -> &'static str {
        match self {
            Backoff::Fixed => "fixed",
            Backoff::Exponential => "exponential",
        }
    }
}

impl std::str::FromStr for Backoff {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(Backoff::Fixed),
            "exponential" => Ok(Backoff::Exponential),
            other => Err(format!(
                "{other:?} is not a backoff: use fixed or exponential"
            )),
        }
    }
}

/// A job as the API accepts it (create, or the merged result of an update).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// 1 to 200 characters, not only spaces.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    /// The handler family; its trigger topic is `<prefix>.trigger.<job_type>`.
    pub job_type: JobType,
    pub schedule: Schedule,
    /// Which worker runs each fire (default `round`).
    #[serde(default = "default_route")]
    pub route: RouteStrategy,
    /// What a worker does when the job's previous run is still running (default
    /// `serial_execution`).
    #[serde(default = "default_block")]
    pub block: BlockStrategy,
    /// What happens to fire times missed by more than `misfire_threshold_ms` (default
    /// `do_nothing`).
    #[serde(default = "default_misfire")]
    pub misfire: MisfireStrategy,
    /// Milliseconds after its fire time that a fire time counts as missed: 0 to 366 days
    /// (default 5000).
    #[serde(default = "default_threshold")]
    #[schema(minimum = 0, maximum = 31_622_400_000i64)]
    pub misfire_threshold_ms: i64,
    /// Free text given to the handler (at most 256 KiB).
    #[serde(default)]
    #[schema(max_length = 262_144)]
    pub params: String,
    /// The run is cut short after this many milliseconds (0: no limit; at most 366 days).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 31_622_400_000i64)]
    pub timeout_ms: i64,
    /// How many times a failed run is retried (0 to 100).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub retries: i32,
    /// Milliseconds before a retry (at most 30 days).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2_592_000_000i64)]
    pub retry_backoff_ms: i64,
    #[serde(default)]
    pub retry_backoff: Backoff,
    /// The longest wait of an exponential backoff (default one hour; at most 30 days).
    #[serde(default = "default_backoff_max")]
    #[schema(minimum = 0, maximum = 2_592_000_000i64)]
    pub retry_backoff_max_ms: i64,
    /// Jobs fired when a run of this one succeeds.
    #[serde(default)]
    pub children: Vec<JobId>,
    /// URL that receives a JSON POST for every failed run (failed, timed out, lost).
    #[serde(default)]
    #[schema(max_length = 2048, pattern = r"^https?://\S+$")]
    pub alarm_webhook: Option<String>,
    /// Addresses (at most 20) that receive an e-mail for every failed run (needs
    /// `CADENZA_SMTP_URL`).
    #[serde(default)]
    #[schema(max_items = 20)]
    pub alarm_emails: Vec<String>,
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// The concurrency group whose slots its runs take (`POST /api/concurrency-groups`); none:
    /// its runs are limited by nothing but the workers.
    #[serde(default)]
    #[schema(max_length = 100, pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
    pub concurrency_group: Option<String>,
    /// In its concurrency group's queue, runs of a higher priority go first (default 0).
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: i32,
    /// What a fire does while a run of the job is in flight anywhere (default `allow`).
    #[serde(default = "default_overlap")]
    pub overlap: Overlap,
    /// Cron schedules only: every fire time of the job is moved by one offset in
    /// `[0, jitter_ms)` derived from the job's id, so that many jobs of one cron expression do
    /// not all fire in the same millisecond (0 to one day; default 0).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 86_400_000)]
    pub jitter_ms: i64,
}

fn default_route() -> RouteStrategy {
    RouteStrategy::Round
}
fn default_block() -> BlockStrategy {
    BlockStrategy::SerialExecution
}
fn default_misfire() -> MisfireStrategy {
    MisfireStrategy::DoNothing
}
fn default_threshold() -> i64 {
    DEFAULT_MISFIRE_THRESHOLD_MS
}
fn default_backoff_max() -> i64 {
    DEFAULT_BACKOFF_MAX_MS
}
fn default_enabled() -> bool {
    true
}
fn default_overlap() -> Overlap {
    Overlap::Allow
}

/// Highest (and, negated, lowest) job priority.
pub const MAX_PRIORITY: i32 = 1000;

/// A field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<ScheduleError> for FieldError {
    fn from(e: ScheduleError) -> Self {
        FieldError::new(e.field, e.message)
    }
}

/// A job's or workflow's `name`: not blank, at most 200 characters.
pub fn check_name(name: &str) -> Result<(), FieldError> {
    if name.trim().is_empty() {
        return Err(FieldError::new("name", "must not be empty"));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(FieldError::new(
            "name",
            format!("is longer than {MAX_NAME_LEN} characters"),
        ));
    }
    Ok(())
}

/// A job's or workflow's `misfire_threshold_ms`: 0 to 366 days.
pub fn check_misfire_threshold(ms: i64) -> Result<(), FieldError> {
    if !(0..=MAX_DURATION_MS).contains(&ms) {
        return Err(FieldError::new(
            "misfire_threshold_ms",
            format!("must be between 0 and {MAX_DURATION_MS} ms (366 days); got {ms}"),
        ));
    }
    Ok(())
}

impl JobSpec {
    /// Checks every field that the types alone do not; returns the parsed schedule.
    pub fn validate(&self, now: DateTime<Utc>) -> Result<JobSchedule, FieldError> {
        check_name(&self.name)?;
        if self.params.len() > MAX_PARAMS_LEN {
            return Err(FieldError::new(
                "params",
                format!("is longer than {MAX_PARAMS_LEN} bytes"),
            ));
        }
        if !(0..=MAX_DURATION_MS).contains(&self.timeout_ms) {
            return Err(FieldError::new(
                "timeout_ms",
                format!(
                    "must be 0 (no timeout) or a duration up to {MAX_DURATION_MS} ms (366 days); got {}",
                    self.timeout_ms
                ),
            ));
        }
        check_misfire_threshold(self.misfire_threshold_ms)?;
        if !(0..=MAX_RETRIES).contains(&self.retries) {
            return Err(FieldError::new(
                "retries",
                format!("must be between 0 and {MAX_RETRIES}; got {}", self.retries),
            ));
        }
        for (field, v) in [
            ("retry_backoff_ms", self.retry_backoff_ms),
            ("retry_backoff_max_ms", self.retry_backoff_max_ms),
        ] {
            if !(0..=MAX_BACKOFF_MS).contains(&v) {
                return Err(FieldError::new(
                    field,
                    format!("must be between 0 and {MAX_BACKOFF_MS} (30 days); got {v}"),
                ));
            }
        }
        if let Some(url) = &self.alarm_webhook {
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && url.len() <= 2048
                && !url.chars().any(char::is_whitespace);
            if !ok {
                return Err(FieldError::new(
                    "alarm_webhook",
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
        }
        if self.alarm_emails.len() > MAX_ALARM_EMAILS {
            return Err(FieldError::new(
                "alarm_emails",
                format!("at most {MAX_ALARM_EMAILS} addresses"),
            ));
        }
        for (i, a) in self.alarm_emails.iter().enumerate() {
            let valid = a
                .split_once('@')
                .is_some_and(|(user, host)| !user.is_empty() && host.contains('.'))
                && !a
                    .chars()
                    .any(|c| c.is_whitespace() || c == ',' || c == '<' || c == '>');
            if !valid {
                return Err(FieldError::new(
                    format!("alarm_emails[{i}]"),
                    format!("{a:?} is not an e-mail address"),
                ));
            }
        }
        if let Some(group) = &self.concurrency_group {
            crate::flow::check_group_name("concurrency_group", group)?;
        }
        if !(-MAX_PRIORITY..=MAX_PRIORITY).contains(&self.priority) {
            return Err(FieldError::new(
                "priority",
                format!(
                    "must be between -{MAX_PRIORITY} and {MAX_PRIORITY}; got {}",
                    self.priority
                ),
            ));
        }
        let max_jitter = crate::schedule::MAX_JITTER_MS;
        if !(0..=max_jitter).contains(&self.jitter_ms) {
            return Err(FieldError::new(
                "jitter_ms",
                format!(
                    "must be between 0 and {max_jitter} (one day); got {}",
                    self.jitter_ms
                ),
            ));
        }
        if self.jitter_ms > 0 && !matches!(self.schedule, Schedule::Cron { .. }) {
            return Err(FieldError::new(
                "jitter_ms",
                format!(
                    "applies to cron schedules only (this one is {}); set it to 0",
                    self.schedule.kind()
                ),
            ));
        }
        Ok(JobSchedule::parse(&self.schedule, now)?)
    }
}

/// A stored job, as the API returns it: its [`JobSpec`] fields and the ones below. Its OpenAPI
/// schema is built from `JobSpec`'s (see `impl utoipa::PartialSchema for Job`).
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub id: JobId,
    #[serde(flatten)]
    pub spec: JobSpec,
    pub shard: i32,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `JobSpec`'s OpenAPI object schema, changed by `change`.
fn spec_schema_with(
    change: impl FnOnce(&mut utoipa::openapi::schema::Object),
) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    let mut schema = <JobSpec as utoipa::PartialSchema>::schema();
    if let RefOr::T(Schema::Object(object)) = &mut schema {
        change(object);
    }
    schema
}

impl utoipa::PartialSchema for Job {
    /// `JobSpec`'s fields, every one present, and the stored job's own.
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        use utoipa::openapi::Required;
        spec_schema_with(|o| {
            o.description =
                Some("A stored job: its definition and what the admin keeps of it.".into());
            o.additional_properties = None;
            o.required = o.properties.keys().cloned().collect();
            let int = |format, description: &str| {
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(format)))
                    .description(Some(description))
                    .build()
            };
            let time = |nullable: bool, description: &str| {
                let t = if nullable {
                    utoipa::openapi::schema::SchemaType::from_iter([Type::String, Type::Null])
                } else {
                    utoipa::openapi::schema::SchemaType::new(Type::String)
                };
                ObjectBuilder::new()
                    .schema_type(t)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                    .description(Some(description))
                    .build()
            };
            for (name, schema, required) in [
                (
                    "id",
                    int(KnownFormat::Int64, "The job's id."),
                    Required::True,
                ),
                (
                    "shard",
                    int(
                        KnownFormat::Int32,
                        "The scheduler shard the job belongs to.",
                    ),
                    Required::True,
                ),
                (
                    "next_fire_at",
                    time(
                        true,
                        "When it fires next (none: disabled, or no more fire times).",
                    ),
                    Required::True,
                ),
                (
                    "created_at",
                    time(false, "When it was created."),
                    Required::True,
                ),
                (
                    "updated_at",
                    time(false, "When it was last changed."),
                    Required::True,
                ),
            ] {
                o.properties.insert(name.to_owned(), schema.into());
                if required == Required::True {
                    o.required.push(name.to_owned());
                }
            }
        })
    }
}

impl utoipa::ToSchema for Job {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <JobSpec as utoipa::ToSchema>::schemas(schemas);
    }
}

/// The body of `PATCH /api/jobs/{id}`: any of [`JobSpec`]'s fields; the rest stay as they are.
/// Its schema is `JobSpec`'s with no field required.
pub struct JobPatch;

impl utoipa::PartialSchema for JobPatch {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        spec_schema_with(|o| {
            o.description = Some(
                "The fields of the job to change; those left out stay as they are. The result \
                 is validated as a whole, as on creation."
                    .into(),
            );
            o.required.clear();
        })
    }
}

impl utoipa::ToSchema for JobPatch {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        <JobSpec as utoipa::ToSchema>::schemas(schemas);
    }
}

/// The `jobs` row as selected by `queries/jobs/*.sql`.
#[derive(Debug, sqlx::FromRow)]
pub struct JobRow {
    pub id: i64,
    pub name: String,
    pub job_type: String,
    pub schedule: sqlx::types::Json<serde_json::Value>,
    pub route: String,
    pub block: String,
    pub misfire: String,
    pub misfire_threshold_ms: i64,
    pub params: String,
    pub timeout_ms: i64,
    pub retries: i32,
    pub retry_backoff_ms: i64,
    pub retry_backoff: String,
    pub retry_backoff_max_ms: i64,
    pub children: Vec<i64>,
    pub alarm_webhook: Option<String>,
    pub alarm_emails: Vec<String>,
    pub enabled: bool,
    pub shard: i32,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub concurrency_group: Option<String>,
    pub priority: i32,
    pub overlap: String,
    pub jitter_ms: i64,
}

/// A `jobs` row that does not read back as a job.
#[derive(Debug, thiserror::Error)]
pub enum JobRowError {
    #[error(transparent)]
    JobType(#[from] cadenza_schemas::JobTypeError),
    #[error(transparent)]
    Schedule(#[from] serde_json::Error),
    #[error(transparent)]
    Strategy(#[from] cadenza_schemas::ParseEnumError),
    /// `retry_backoff` is not a known back-off.
    #[error("{0}")]
    Backoff(String),
}

impl TryFrom<JobRow> for Job {
    type Error = JobRowError;

    fn try_from(r: JobRow) -> Result<Job, JobRowError> {
        Ok(Job {
            id: JobId(r.id),
            spec: JobSpec {
                name: r.name,
                job_type: JobType::parse(&r.job_type)?,
                schedule: serde_json::from_value(r.schedule.0)?,
                route: r.route.parse()?,
                block: r.block.parse()?,
                misfire: r.misfire.parse()?,
                misfire_threshold_ms: r.misfire_threshold_ms,
                params: r.params,
                timeout_ms: r.timeout_ms,
                retries: r.retries,
                retry_backoff_ms: r.retry_backoff_ms,
                retry_backoff: r.retry_backoff.parse().map_err(JobRowError::Backoff)?,
                retry_backoff_max_ms: r.retry_backoff_max_ms,
                children: r.children.into_iter().map(JobId).collect(),
                alarm_webhook: r.alarm_webhook,
                alarm_emails: r.alarm_emails,
                enabled: r.enabled,
                concurrency_group: r.concurrency_group,
                priority: r.priority,
                overlap: r.overlap.parse()?,
                jitter_ms: r.jitter_ms,
            },
            shard: r.shard,
            next_fire_at: r.next_fire_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> JobSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_follow_xxl_job() {
        let s = spec(r#"{"name":"n","job_type":"demo.echo","schedule":{"kind":"none"}}"#);
        assert_eq!(s.route, RouteStrategy::Round);
        assert_eq!(s.block, BlockStrategy::SerialExecution);
        assert_eq!(s.misfire, MisfireStrategy::DoNothing);
        assert_eq!(s.misfire_threshold_ms, 5000);
        assert!(s.enabled);
        assert!(s.validate(Utc::now()).is_ok());
    }

    #[test]
    fn alarm_targets_are_checked() {
        let mut s = spec(r#"{"name":"n","job_type":"demo.echo","schedule":{"kind":"none"}}"#);
        s.alarm_webhook = Some("ftp://x".into());
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "alarm_webhook");
        s.alarm_webhook = Some("http://127.0.0.1:9/hook".into());
        s.alarm_emails = vec!["ops@example.com".into(), "nobody".into()];
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "alarm_emails[1]");
        s.alarm_emails.pop();
        assert!(s.validate(Utc::now()).is_ok());
    }

    #[test]
    fn validation_names_the_field() {
        let mut s = spec(
            r#"{"name":"n","job_type":"demo.echo","schedule":{"kind":"fix_rate","every_ms":0}}"#,
        );
        assert_eq!(
            s.validate(Utc::now()).unwrap_err().field,
            "schedule.every_ms"
        );
        s.schedule = Schedule::None {};
        s.timeout_ms = -1;
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "timeout_ms");
        s.timeout_ms = 0;
        s.name = " ".into();
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "name");
    }
}
