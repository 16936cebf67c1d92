//! `POST /api/replay`: re-run triggers read back from a job type's topic (see
//! [`crate::replay`]).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::Json;

use super::{parse_body, ApiError, ApiResult, Shared};
use crate::auth::{Access, Principal};
use crate::replay::{replay, ReplayError, ReplayOutcome, ReplayRequest};

impl From<ReplayError> for ApiError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Invalid(f) => f.into(),
            ReplayError::NothingToReplay(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "nothing_to_replay", m)
            }
            ReplayError::TooLarge(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "replay_too_large", m)
            }
            ReplayError::Database(e) => e.into(),
            ReplayError::Broker(e) => {
                tracing::error!(error = %e, "replay could not read the topic");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "broker_unavailable",
                    "the trigger topic could not be read back from the broker; try again shortly",
                )
            }
        }
    }
}

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
