//! Job definitions: the API's input (`JobSpec`), its validation, and the stored job (`Job`).

use cadenza_schemas::{BlockStrategy, JobId, JobType, MisfireStrategy, RouteStrategy, Schedule};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::schedule::{JobSchedule, ScheduleError};

/// Default `misfire_threshold_ms`: later than this past its fire time, a fire time is a misfire.
pub const DEFAULT_MISFIRE_THRESHOLD_MS: i64 = 5_000;
const MAX_NAME_LEN: usize = 200;
const MAX_PARAMS_LEN: usize = 256 * 1024;
const MAX_RETRIES: i32 = 100;

/// A job as the API accepts it (create, or the merged result of an update).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub job_type: JobType,
    pub schedule: Schedule,
    #[serde(default = "default_route")]
    pub route: RouteStrategy,
    #[serde(default = "default_block")]
    pub block: BlockStrategy,
    #[serde(default = "default_misfire")]
    pub misfire: MisfireStrategy,
    #[serde(default = "default_threshold")]
    pub misfire_threshold_ms: i64,
    #[serde(default)]
    pub params: String,
    #[serde(default)]
    pub timeout_ms: i64,
    #[serde(default)]
    pub retries: i32,
    #[serde(default)]
    pub retry_backoff_ms: i64,
    #[serde(default)]
    pub children: Vec<JobId>,
    #[serde(default = "default_enabled")]
    pub enabled: bool,
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
fn default_enabled() -> bool {
    true
}

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

impl JobSpec {
    /// Checks every field that the types alone do not; returns the parsed schedule.
    pub fn validate(&self, now: DateTime<Utc>) -> Result<JobSchedule, FieldError> {
        if self.name.trim().is_empty() {
            return Err(FieldError::new("name", "must not be empty"));
        }
        if self.name.chars().count() > MAX_NAME_LEN {
            return Err(FieldError::new(
                "name",
                format!("is longer than {MAX_NAME_LEN} characters"),
            ));
        }
        if self.params.len() > MAX_PARAMS_LEN {
            return Err(FieldError::new(
                "params",
                format!("is longer than {MAX_PARAMS_LEN} bytes"),
            ));
        }
        if self.timeout_ms < 0 {
            return Err(FieldError::new(
                "timeout_ms",
                format!(
                    "must be 0 (no timeout) or positive; got {}",
                    self.timeout_ms
                ),
            ));
        }
        if self.misfire_threshold_ms < 0 {
            return Err(FieldError::new(
                "misfire_threshold_ms",
                format!("must not be negative; got {}", self.misfire_threshold_ms),
            ));
        }
        if !(0..=MAX_RETRIES).contains(&self.retries) {
            return Err(FieldError::new(
                "retries",
                format!("must be between 0 and {MAX_RETRIES}; got {}", self.retries),
            ));
        }
        if self.retry_backoff_ms < 0 {
            return Err(FieldError::new(
                "retry_backoff_ms",
                format!("must not be negative; got {}", self.retry_backoff_ms),
            ));
        }
        Ok(JobSchedule::parse(&self.schedule, now)?)
    }
}

/// A stored job, as the API returns it.
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
    pub children: Vec<i64>,
    pub enabled: bool,
    pub shard: i32,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<JobRow> for Job {
    type Error = anyhow::Error;

    fn try_from(r: JobRow) -> anyhow::Result<Job> {
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
                children: r.children.into_iter().map(JobId).collect(),
                enabled: r.enabled,
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
    fn validation_names_the_field() {
        let mut s = spec(
            r#"{"name":"n","job_type":"demo.echo","schedule":{"kind":"fix_rate","every_ms":0}}"#,
        );
        assert_eq!(
            s.validate(Utc::now()).unwrap_err().field,
            "schedule.every_ms"
        );
        s.schedule = Schedule::None;
        s.timeout_ms = -1;
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "timeout_ms");
        s.timeout_ms = 0;
        s.name = " ".into();
        assert_eq!(s.validate(Utc::now()).unwrap_err().field, "name");
    }
}
