//! `POST /api/replay`: re-run triggers read back from a job type's topic (see
//! [`crate::replay`]).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::Json;

use super::{parse_body, ApiError, ApiResult, ErrorBody, ErrorCode, Shared};
use crate::auth::{Access, Principal};
use crate::replay::{replay, ReplayError, ReplayOutcome, ReplayRequest};

impl From<ReplayError> for ApiError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Invalid(f) => f.into(),
            ReplayError::NothingToReplay(m) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::NothingToReplay,
                m,
            ),
            ReplayError::TooLarge(m) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::ReplayTooLarge,
                m,
            ),
            ReplayError::Database(e) => e.into(),
            ReplayError::Broker(e) => {
                tracing::error!(error = %e, "replay could not read the topic");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::BrokerUnavailable,
                    "the trigger topic could not be read back from the broker; try again shortly",
                )
            }
        }
    }
}

/// Runs again the triggers read back from a job type's topic (by fire-time window or
/// partition offsets), or with `dry_run` lists what would run. At most 10,000 runs a request.
#[utoipa::path(post, path = "/replay", tag = "operations", request_body = ReplayRequest,
    responses(
        (status = 200, description = "Dry run: what would run.", body = ReplayOutcome),
        (status = 201, description = "Replayed: the new runs.", body = ReplayOutcome),
        (status = 422, description = "A field is invalid (`invalid_field`), nothing matches \
            (`nothing_to_replay`), or too much does (`replay_too_large`).", body = ErrorBody),
    ))]
pub async fn create(
    state: Shared,
    axum::Extension(p): axum::Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<ReplayOutcome>)> {
    let req: ReplayRequest = parse_body(&body)?;
    p.require(Access::Write, req.job_type.as_str())?;
    let outcome = replay(&state.pool, &state.kafka, &req, &p.actor()).await?;
    let status = if outcome.dry_run {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(outcome)))
}
