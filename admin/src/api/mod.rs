//! The HTTP API (JSON over axum). Every `/api` route needs `Authorization: Bearer <token>` when
//! a token is configured.

mod alarms;
mod error;
mod input;
mod jobs;
mod replay;
mod report;
mod triggers;
mod workers;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;

pub use error::{parse_body, ApiError, ApiResult};
use input::Params;

use crate::kafka::KafkaClients;

/// What the handlers share.
pub struct AppState {
    pub pool: PgPool,
    pub kafka: Arc<KafkaClients>,
    pub shard_count: u32,
    pub api_token: Option<SecretString>,
    /// Live workers, from their heartbeats.
    pub registry: Arc<crate::route::registry::Registry>,
}

pub type Shared = State<Arc<AppState>>;

/// Compares in time independent of where the strings differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(state): Shared, req: Request, next: Next) -> Response {
    let Some(token) = state.api_token.as_ref().map(|t| t.expose_secret()) else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => ApiError::unauthorized(
            "missing bearer token: send the header 'Authorization: Bearer <CADENZA_API_TOKEN>'",
        )
        .into_response(),
        Some(g) if same_secret(g.trim().as_bytes(), token.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::unauthorized("the bearer token is not valid").into_response(),
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): Shared) -> Response {
    match sqlx::query_scalar::<_, i32>("SELECT 1")
        .fetch_one(&state.pool)
        .await
    {
        Ok(_) => (StatusCode::OK, "ready").into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database not reachable").into_response(),
    }
}

/// A handler that panicked (a defect): logged, answered `500 internal` like any internal error,
/// instead of a dropped connection.
fn panicked(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = crate::guard::panic_message(&*payload);
    tracing::error!(panic = %message, "an API handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error; the admin's log has the details",
    )
    .into_response()
}

async fn fallback() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/jobs", post(jobs::create).get(jobs::list))
        .route(
            "/jobs/{id}",
            get(jobs::get).patch(jobs::update).delete(jobs::delete),
        )
        .route("/jobs/{id}/enable", post(jobs::enable))
        .route("/jobs/{id}/disable", post(jobs::disable))
        .route("/jobs/{id}/trigger", post(jobs::trigger))
        .route("/triggers", get(triggers::list))
        .route("/triggers/{id}", get(triggers::get))
        .route("/workers", get(workers::list))
        .route("/alarms", get(alarms::list))
        .route("/replay", post(replay::create))
        .route("/report", get(report::daily))
        .fallback(fallback)
        .route_layer(middleware::from_fn_with_state(state.clone(), auth))
        // Outside authentication: every answer goes to a client that has sent its whole body.
        .layer(middleware::from_fn(input::limit_body));
    Router::new()
        .nest("/api", api)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(fallback)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .with_state(state)
}

/// Parses a numeric path or query id.
pub(crate) fn parse_id(field: &str, s: &str) -> ApiResult<i64> {
    s.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        ApiError::invalid(
            field.to_owned(),
            format!("{s:?} is not a positive integer id"),
        )
    })
}

/// Parses an optional `limit` query parameter (1..=1000, default 100).
pub(crate) fn parse_limit(s: Option<&String>) -> ApiResult<i64> {
    match s {
        None => Ok(100),
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|v| (1..=1000).contains(v))
            .ok_or_else(|| {
                ApiError::invalid("limit", format!("{s:?} is not a number between 1 and 1000"))
            }),
    }
}
