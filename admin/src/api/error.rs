//! API errors: a status, a stable `code`, a message a person can act on, and the field at fault.
//! Database and broker internals are logged, never returned.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::jobs::FieldError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
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
            code: "invalid_field",
            message: format!("{field}: {message}"),
            field: Some(field),
        }
    }

    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} {id} does not exist"),
        )
    }

    pub fn unauthorized(message: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// `403 forbidden`: signed in, but the role or job-type patterns do not allow it.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the admin's log has the details",
        )
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ApiError::invalid(e.field, e.message)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                tracing::error!(error = %e, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "the database is not reachable; try again shortly",
                )
            }
            _ => ApiError::internal(e),
        }
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        if let Some(sqlx) = e.downcast_ref::<sqlx::Error>() {
            if matches!(sqlx, sqlx::Error::PoolTimedOut | sqlx::Error::Io(_)) {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database_unavailable",
                    "the database is not reachable; try again shortly",
                );
            }
        }
        if e.downcast_ref::<rdkafka::error::KafkaError>().is_some() {
            tracing::error!(error = %e, "broker unavailable");
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "broker_unavailable",
                "the Kafka broker did not answer; try again shortly",
            );
        }
        ApiError::internal(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(field) = self.field {
            error["field"] = json!(field);
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}

/// Parses a JSON request body into `T`, naming the field at fault.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            "the request body is empty; send a JSON object",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_json",
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
    fn body_errors_name_the_field() {
        let e = parse_body::<JobSpec>(b"{").unwrap_err();
        assert_eq!(e.code, "malformed_json");
        let e =
            parse_body::<JobSpec>(br#"{"job_type":"a","schedule":{"kind":"none"}}"#).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            ("invalid_field", Some("name"))
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
        let e = parse_body::<JobSpec>(b"").unwrap_err();
        assert_eq!(e.code, "malformed_json");
    }
}
