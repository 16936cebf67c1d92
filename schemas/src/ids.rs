use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Identifier of a job definition (the `jobs` table's primary key).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct JobId(pub i64);

/// Identifier of one run of a job (the `triggers` table's primary key).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct TriggerId(pub i64);

/// Identifier of a worker process, unique while it lives (e.g. `host-1234-1a2b`).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct WorkerId(pub String);

macro_rules! display_inner {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}
display_inner!(JobId, TriggerId, WorkerId);

/// A job type names a family of jobs served by the same handler; each has its own trigger topic
/// `<prefix>.trigger.<job_type>`, so it must be a legal part of a Kafka topic name.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema, utoipa::ToSchema,
)]
#[serde(transparent)]
#[schema(value_type = String, min_length = 1, max_length = 200, pattern = "^[A-Za-z0-9._-]+$")]
pub struct JobType(String);

/// Longest job type accepted. Kafka topic names are limited to 249 characters and the trigger
/// topic adds the prefix and `.trigger.` in front.
pub const MAX_JOB_TYPE_LEN: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobTypeError {
    #[error("job_type must not be empty")]
    Empty,
    #[error("job_type is {0} characters long; at most {MAX_JOB_TYPE_LEN} are allowed")]
    TooLong(usize),
    #[error("job_type may only contain ASCII letters, digits, '.', '_' and '-' (it becomes part of a Kafka topic name); found {0:?}")]
    BadChar(char),
    #[error("job_type must not be \".\" or \"..\"")]
    Dots,
}

impl JobType {
    /// Validate a job type: 1 to 200 characters from `[A-Za-z0-9._-]`, as Kafka topic names allow.
    pub fn parse(s: &str) -> Result<Self, JobTypeError> {
        if s.is_empty() {
            return Err(JobTypeError::Empty);
        }
        if s.len() > MAX_JOB_TYPE_LEN {
            return Err(JobTypeError::TooLong(s.len()));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(JobTypeError::BadChar(c));
        }
        if s == "." || s == ".." {
            return Err(JobTypeError::Dots);
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobType::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_type_accepts_topic_safe_names() {
        for ok in ["demo.echo", "billing_invoice-v2", "A", "x.y.z"] {
            assert_eq!(JobType::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn job_type_rejects_what_kafka_rejects() {
        assert_eq!(JobType::parse(""), Err(JobTypeError::Empty));
        assert_eq!(JobType::parse("a b"), Err(JobTypeError::BadChar(' ')));
        assert_eq!(JobType::parse("a/b"), Err(JobTypeError::BadChar('/')));
        assert_eq!(JobType::parse("é"), Err(JobTypeError::BadChar('é')));
        assert_eq!(JobType::parse(".."), Err(JobTypeError::Dots));
        assert_eq!(
            JobType::parse(&"a".repeat(201)),
            Err(JobTypeError::TooLong(201))
        );
        let e: Result<JobType, _> = serde_json::from_str("\"bad topic\"");
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("job_type may only contain"));
    }
}
