//! API errors: a status, a stable `code`, a message a person can act on, and the field at fault.
//! Database and broker internals are logged, never returned.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::jobs::FieldError;
use crate::kafka::BrokerError;

/// Every `error.code` the API answers with. The code is stable; the message may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request body is empty or not JSON.
    MalformedJson,
    /// 400: the request body could not be read (not UTF-8, cut short).
    MalformedBody,
    /// 400: the query string could not be decoded.
    MalformedQuery,
    /// 401: no credentials, or a wrong, expired or revoked token, session or password.
    Unauthorized,
    /// 403: signed in, but the role or the job-type patterns do not allow it.
    Forbidden,
    /// 403: a write made with the session cookie lacks the `X-CSRF-Token` header of the session.
    CsrfRequired,
    /// 404: no such job, run, workflow, workflow run or node, user, token or endpoint.
    NotFound,
    /// 405: the path exists, the method does not (the `Allow` header lists the methods).
    MethodNotAllowed,
    /// 409: a user of that name exists already.
    UserExists,
    /// 409: a workflow of that name exists already.
    WorkflowExists,
    /// 409: the job is a node of a workflow; remove it from the workflow first.
    JobInUse,
    /// 409: a concurrency group of that name exists already.
    GroupExists,
    /// 409: jobs still belong to the concurrency group; move them out first.
    GroupInUse,
    /// 409: the action does not apply in the current state (a workflow run that is not running
    /// cannot be cancelled; only a failed or cancelled node can be retried or marked
    /// succeeded); the message says why.
    Conflict,
    /// 409: the run cannot be cancelled: it already ended, or it is being published (from up to
    /// `CADENZA_PUBLISH_AHEAD_MS` before its fire time until the broker acknowledges it; try
    /// again in a moment).
    NotCancellable,
    /// 413: the request body is over the limit (1 MiB).
    PayloadTooLarge,
    /// 422: a field is invalid; `field` names it (`schedule.expr`, `alarm_emails[2]`, a query
    /// parameter).
    InvalidField,
    /// 422: the replay selects no run.
    NothingToReplay,
    /// 422: the replay selects more runs than `max_runs` allows.
    ReplayTooLarge,
    /// 422: an import has rows that cannot be imported; its `report` names each with the reason,
    /// and nothing was written.
    ImportRejected,
    /// 408: the request was not sent whole within the time allowed (30 s); send it again.
    RequestTimeout,
    /// 429: too many failed sign-ins for this name or address; `Retry-After` says when to retry.
    TooManyAttempts,
    /// 503: too many passwords are being checked at once (sign-ins, password changes);
    /// `Retry-After` says when to retry.
    Busy,
    /// 500: a defect; the admin's log has the details.
    Internal,
    /// 503: PostgreSQL did not answer; retry shortly.
    DatabaseUnavailable,
    /// 503: the Kafka broker did not answer; retry shortly.
    BrokerUnavailable,
}

impl ErrorCode {
    /// The code as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedJson => "malformed_json",
            ErrorCode::MalformedBody => "malformed_body",
            ErrorCode::MalformedQuery => "malformed_query",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::CsrfRequired => "csrf_required",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::UserExists => "user_exists",
            ErrorCode::WorkflowExists => "workflow_exists",
            ErrorCode::JobInUse => "job_in_use",
            ErrorCode::GroupExists => "group_exists",
            ErrorCode::GroupInUse => "group_in_use",
            ErrorCode::Conflict => "conflict",
            ErrorCode::NotCancellable => "not_cancellable",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::NothingToReplay => "nothing_to_replay",
            ErrorCode::ReplayTooLarge => "replay_too_large",
            ErrorCode::ImportRejected => "import_rejected",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::TooManyAttempts => "too_many_attempts",
            ErrorCode::Busy => "busy",
            ErrorCode::Internal => "internal",
            ErrorCode::DatabaseUnavailable => "database_unavailable",
            ErrorCode::BrokerUnavailable => "broker_unavailable",
        }
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// What went wrong and what to do about it, for a person.
    pub message: String,
    /// The field at fault (`invalid_field` only): a body path such as `schedule.expr` or a query
    /// parameter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let field = field.into();
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: ErrorCode::InvalidField,
            message: format!("{field}: {message}"),
            field: Some(field),
        }
    }

    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("{what} {id} does not exist"),
        )
    }

    pub fn unauthorized(message: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    /// `403 forbidden`: signed in, but the role or job-type patterns do not allow it.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
    }

    /// `500 internal`: a defect; `e` goes to the log, not to the client.
    pub(crate) fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; the admin's log has the details",
        )
    }
}

impl From<crate::auth::password::SlotError> for ApiError {
    fn from(e: crate::auth::password::SlotError) -> Self {
        match e {
            crate::auth::password::SlotError::Busy => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Busy,
                "too many passwords are being checked at once; try again in a moment",
            ),
            e @ crate::auth::password::SlotError::Failed(_) => ApiError::internal(e),
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ApiError::invalid(e.field, e.message)
    }
}

/// Whether the database failed a statement to break a deadlock or a serialization conflict
/// (SQLSTATE class 40): the transaction was rolled back and may simply run again.
pub(crate) fn is_lock_conflict(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("40")))
}

/// A transaction's failure: a database error (which may be worth running it again, see
/// [`is_lock_conflict`]) or an answer for the client.
#[derive(Debug)]
pub(crate) enum TxError {
    Db(sqlx::Error),
    Api(ApiError),
}

impl From<sqlx::Error> for TxError {
    fn from(e: sqlx::Error) -> Self {
        TxError::Db(e)
    }
}

impl From<ApiError> for TxError {
    fn from(e: ApiError) -> Self {
        TxError::Api(e)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                tracing::error!(error = %e, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::DatabaseUnavailable,
                    "the database is not reachable; try again shortly",
                )
            }
            sqlx::Error::Database(db) if db.code().as_deref() == Some("57014") => {
                tracing::warn!(error = %e, "an API statement ran past its time limit");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::DatabaseUnavailable,
                    "the database did not answer within 30 s; ask for less (a shorter range, a \
                     smaller page) or try again later",
                )
            }
            _ => ApiError::internal(e),
        }
    }
}

impl From<rdkafka::error::KafkaError> for ApiError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        tracing::error!(error = %e, "broker unavailable");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::BrokerUnavailable,
            "the Kafka broker did not answer; try again shortly",
        )
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Kafka(e) => e.into(),
            BrokerError::Database(e) => e.into(),
            e @ (BrokerError::CreateTopic { .. }
            | BrokerError::ReadTimedOut { .. }
            | BrokerError::NoPartitions(_)
            | BrokerError::TooManyPartitions(_)
            | BrokerError::Task(_)) => ApiError::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                field: self.field,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if self.code == ErrorCode::Busy {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}

/// Parses a JSON request body into `T`, naming the field at fault. Every body the API takes is
/// a JSON object: an array is refused, though serde would take one for a struct (its fields in
/// order), which the API does not document.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::MalformedJson,
                "the request body is empty; send a JSON object",
            ))
        }
        Some(b'[') => {
            return Err(ApiError::invalid(
                "body",
                "must be a JSON object, not an array",
            ))
        }
        Some(_) => {}
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                ErrorCode::MalformedJson,
                format!("the request body is not valid JSON: {inner}"),
            );
        }
        let text = inner.to_string();
        // serde reports a missing field at its parent; name the field itself.
        let field = match text
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            Some(name) if path == "." => name.to_owned(),
            Some(name) => format!("{path}.{name}"),
            None if path == "." => "body".to_owned(),
            None => path,
        };
        let text = text.split(" at line ").next().unwrap_or(&text).to_owned();
        ApiError::invalid(field, text)
    })?;
    // PostgreSQL cannot store a NUL in text: refuse it here, naming the field.
    match super::input::nul_at(body) {
        Some(field) => Err(super::input::nul_error(field)),
        None => Ok(parsed),
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobSpec;

    #[test]
    fn broker_errors_map_to_their_status_and_code() {
        let kafka = BrokerError::Kafka(rdkafka::error::KafkaError::Canceled);
        let e = ApiError::from(kafka);
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::BrokerUnavailable
            )
        );
        let e = ApiError::from(BrokerError::Database(sqlx::Error::PoolTimedOut));
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::DatabaseUnavailable
            )
        );
        let e = ApiError::from(BrokerError::Database(sqlx::Error::RowNotFound));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal)
        );
        let e = ApiError::from(BrokerError::NoPartitions("t".into()));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal)
        );
        assert_eq!(e.message, "internal error; the admin's log has the details");
    }

    #[test]
    fn body_errors_name_the_field() {
        let e = parse_body::<JobSpec>(b"{").unwrap_err();
        assert_eq!(e.code, "malformed_json");
        let e =
            parse_body::<JobSpec>(br#"{"job_type":"a","schedule":{"kind":"none"}}"#).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            (ErrorCode::InvalidField, Some("name"))
        );
        let e = parse_body::<JobSpec>(
            br#"{"name":"n","job_type":"a","schedule":{"kind":"none"},"route":"sometimes"}"#,
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("route"));
        assert!(
            e.message.contains("unknown variant `sometimes`"),
            "{}",
            e.message
        );
        let e =
            parse_body::<JobSpec>(br#"{"name":"n","job_type":"a b","schedule":{"kind":"none"}}"#)
                .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("job_type"));
        let e = parse_body::<JobSpec>(br#"{"name":"n","job_type":"a","schedule":{"kind":"cron"}}"#)
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("schedule.expr"));
        let e = parse_body::<JobSpec>(br#" ["n", "a"]"#).unwrap_err();
        assert_eq!(
            (e.field.as_deref(), e.code),
            (Some("body"), ErrorCode::InvalidField)
        );
        let e = parse_body::<JobSpec>(b"").unwrap_err();
        assert_eq!(e.code, "malformed_json");
    }
}
