//! The HTTP API (JSON over axum). Every `/api` route needs `Authorization: Bearer <token>` when
//! a token is configured.

mod alarms;
mod audit;
mod doc;
mod error;
mod groups;
mod import;
mod input;
mod jobs;
mod misfires;
mod replay;
mod report;
mod scheduler;
mod schedules;
mod scope;
mod session;
mod tokens;
mod triggers;
mod users;
mod workers;
mod workflows;

use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use cadenza_worker::telemetry;
use secrecy::SecretString;
use sqlx::PgPool;
use tracing::Instrument;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa_axum::router::UtoipaMethodRouter;
use utoipa_axum::routes;

pub use error::{parse_body, ApiError, ApiResult, ErrorBody, ErrorCode};
use input::Params;

use crate::audit::{Actor, Entry};
use crate::auth::rules::Rule;
use crate::auth::Principal;

use crate::kafka::KafkaClients;

/// What the handlers share.
pub struct AppState {
    pub pool: PgPool,
    pub kafka: Arc<KafkaClients>,
    pub shard_count: u32,
    pub api_token: Option<SecretString>,
    /// Live workers, from their heartbeats.
    pub registry: Arc<crate::route::registry::Registry>,
    /// This admin's publish-ahead: how far ahead of their fire time it takes runs for sending.
    pub publish_ahead: std::time::Duration,
    /// Cancelled when the admin stops: open log streams end with it.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl AppState {
    /// A job change (or a cancel) drops the runs of its schedule written claimed only when they
    /// are due later than this: the longest publish-ahead of the live admins (the holder of the
    /// job's shard takes runs for sending that far ahead, and may be configured differently
    /// from this admin) plus a guard for the holder's reading of the database clock.
    pub async fn drop_claimed_after(
        &self,
        conn: &mut sqlx::PgConnection,
    ) -> Result<std::time::Duration, sqlx::Error> {
        let own = i64::try_from(self.publish_ahead.as_millis()).unwrap_or(i64::MAX);
        let longest: i64 = sqlx::query_scalar(sql!("jobs/taken_window"))
            .bind(own)
            .fetch_one(conn)
            .await?;
        let longest = std::time::Duration::from_millis(u64::try_from(longest).unwrap_or(0));
        Ok(longest + crate::scheduler::CLOCK_GUARD)
    }
}

pub type Shared = State<Arc<AppState>>;

/// Resolves who makes the request and checks the route's rule ([`rules`]); puts the
/// [`Principal`] in the request's extensions for the handlers.
async fn authorize(State(state): Shared, mut req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let Some(path) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
    else {
        // No route matched: the fallback answers 404.
        return next.run(req).await;
    };
    // HEAD is answered by the GET handler, so it needs what GET needs.
    let ruled = if method == Method::HEAD {
        Method::GET
    } else {
        method.clone()
    };
    let Some(rule) = rule_for(&ruled, &path) else {
        // The path exists with other methods: 405, and the handler never runs.
        return method_not_allowed(&method, &path);
    };
    let source = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    let write = !matches!(method, Method::GET | Method::HEAD) && rule != Rule::Public;
    let principal = match session::principal(&state, req.headers()).await {
        Ok(p) => Principal { source, ..p },
        Err(_) if rule == Rule::Public => return next.run(req).await,
        Err(e) => {
            if write {
                refused(
                    &state,
                    &Actor::anonymous(source),
                    &method,
                    &path,
                    &e.message,
                )
                .await;
            }
            return e.into_response();
        }
    };
    let mut refusal = None;
    if !rule.allows(principal.role) {
        let least = rule.least_role().map_or("nobody", |r| r.as_str());
        refusal = Some(ApiError::forbidden(format!(
            "{method} {path} needs the {least} role; {} is {}",
            principal.actor, principal.role
        )));
    } else if write {
        refusal = session::check_csrf(&principal, req.headers()).err();
    }
    if let Some(e) = refusal {
        if write {
            refused(&state, &principal.actor(), &method, &path, &e.message).await;
        }
        return e.into_response();
    }
    let actor = principal.actor();
    req.extensions_mut().insert(principal);
    let resp = next.run(req).await;
    // Refused by the handler (the job type is outside the caller's patterns).
    if write && resp.status() == StatusCode::FORBIDDEN {
        refused(
            &state,
            &actor,
            &method,
            &path,
            "outside the caller's job-type patterns",
        )
        .await;
    }
    resp
}

/// Records a refused write attempt; a failure to record it is logged, not answered.
async fn refused(state: &AppState, actor: &Actor, method: &Method, path: &str, why: &str) {
    let entry = Entry::new(&format!("{method} {path}")).detail(why.to_owned());
    let recorded = match state.pool.acquire().await {
        Ok(mut conn) => crate::audit::refused(&mut conn, actor, entry).await,
        Err(e) => Err(e),
    };
    if let Err(error) = recorded {
        tracing::warn!(%error, actor = %actor.name, %method, path, "recording a refused write in the audit failed");
    }
}

/// `405 method_not_allowed` with the path's methods in `Allow`.
fn method_not_allowed(method: &Method, path: &str) -> Response {
    let allowed = methods_of(path);
    if allowed.is_empty() {
        tracing::error!(%method, %path, "a route has no authorization rule; refused");
        return ApiError::forbidden(format!(
            "{method} {path} has no authorization rule, so nobody may call it"
        ))
        .into_response();
    }
    let allow = allowed
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let mut resp = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        format!("{path} does not take {method}; it takes {allow}"),
    )
    .into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&allow) {
        resp.headers_mut().insert(axum::http::header::ALLOW, v);
    }
    resp
}

/// The admin process is up (for a liveness probe).
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// The admin can reach its database (for a readiness probe).
#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses(
        (status = 200, description = "`ready`", body = String, content_type = "text/plain"),
        (status = 503, description = "`database not reachable`", body = String, content_type = "text/plain"),
    ))]
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
        ErrorCode::Internal,
        "internal error; the admin's log has the details",
    )
    .into_response()
}

async fn fallback() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such endpoint",
    )
}

/// A route and its OpenAPI operation, from the handler's `#[utoipa::path]`: the router and
/// the document are built from the same thing, so they cannot differ.
type Route = UtoipaMethodRouter<Arc<AppState>>;

/// Every `/api` route and who may call it. The router, the authorization layer and the OpenAPI
/// document are all built from this table.
fn routes() -> Vec<(Rule, Route)> {
    use Rule::*;
    vec![
        (Public, routes!(doc::document)),
        (Public, routes!(session::login)),
        (SignedIn, routes!(session::whoami)),
        (Public, routes!(session::logout)),
        (Admin, routes!(users::list)),
        (Admin, routes!(users::create)),
        (Admin, routes!(users::update)),
        (Admin, routes!(users::delete)),
        (SignedIn, routes!(tokens::create)),
        (SignedIn, routes!(tokens::list)),
        (SignedIn, routes!(tokens::revoke)),
        (Write, routes!(jobs::create)),
        (Read, routes!(jobs::list)),
        (Read, routes!(jobs::get)),
        (Write, routes!(jobs::update)),
        (Write, routes!(jobs::delete)),
        (Write, routes!(jobs::enable)),
        (Write, routes!(jobs::disable)),
        (Write, routes!(jobs::trigger)),
        (Write, routes!(groups::create)),
        (Read, routes!(groups::list)),
        (Read, routes!(groups::get)),
        (Read, routes!(groups::queue)),
        (Write, routes!(groups::update)),
        (Write, routes!(groups::delete)),
        (Write, routes!(import::xxl_job)),
        (Read, routes!(schedules::preview)),
        (Read, routes!(triggers::list)),
        (Read, routes!(triggers::get)),
        (Read, routes!(triggers::log_stream)),
        (Write, routes!(triggers::cancel)),
        (Read, routes!(workers::list)),
        (Read, routes!(scheduler::health)),
        (Read, routes!(alarms::list)),
        (Write, routes!(replay::create)),
        (Read, routes!(report::daily)),
        (Read, routes!(misfires::list)),
        (Read, routes!(audit::list)),
        (Write, routes!(workflows::create)),
        (Read, routes!(workflows::list)),
        (Read, routes!(workflows::get)),
        (Write, routes!(workflows::update)),
        (Write, routes!(workflows::delete)),
        (Write, routes!(workflows::enable)),
        (Write, routes!(workflows::disable)),
        (Write, routes!(workflows::trigger)),
        (Read, routes!(workflows::list_runs)),
        (Read, routes!(workflows::get_run)),
        (Write, routes!(workflows::cancel_run)),
        (Write, routes!(workflows::retry_node)),
        (Write, routes!(workflows::mark_succeeded)),
    ]
}

/// The methods of an OpenAPI path item, with their operations.
fn operations(item: &PathItem) -> impl Iterator<Item = (Method, &Operation)> {
    [
        (Method::GET, &item.get),
        (Method::PUT, &item.put),
        (Method::POST, &item.post),
        (Method::DELETE, &item.delete),
        (Method::PATCH, &item.patch),
    ]
    .into_iter()
    .filter_map(|(m, op)| op.as_ref().map(|op| (m, op)))
}

/// The route table's rules: (method, full path such as `/api/jobs/{id}`, rule).
pub fn rules() -> Vec<(Method, String, Rule)> {
    routes()
        .into_iter()
        .flat_map(|(rule, (_, paths, _))| {
            paths
                .paths
                .iter()
                .flat_map(|(path, item)| {
                    operations(item).map(move |(m, _)| (m, format!("/api{path}"), rule))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// [`rules`] by (method, path), built once.
fn rule_table() -> &'static HashMap<(Method, String), Rule> {
    static RULES: std::sync::OnceLock<HashMap<(Method, String), Rule>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| rules().into_iter().map(|(m, p, r)| ((m, p), r)).collect())
}

fn rule_for(method: &Method, path: &str) -> Option<Rule> {
    rule_table()
        .get(&(method.clone(), path.to_owned()))
        .copied()
}

/// The methods the route table has for `path` (for a `405`'s `Allow` header).
fn methods_of(path: &str) -> Vec<Method> {
    let mut methods: Vec<Method> = rule_table()
        .keys()
        .filter(|(_, p)| p == path)
        .map(|(m, _)| m.clone())
        .collect();
    methods.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    methods
}

/// The OpenAPI 3.1 document of the API (served at `/api/openapi.json`, committed as
/// `docs/openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    doc::build(routes(), probes())
}

/// The probes and the metrics, outside `/api`, open to anyone.
fn probes() -> Vec<Route> {
    vec![routes!(healthz), routes!(readyz), routes!(metrics_text)]
}

/// [`openapi`] as served and committed: pretty JSON with a final newline.
pub fn openapi_json() -> String {
    doc::render(&openapi())
}

/// A router of `routes`, each at the path of its operation.
fn mount(routes: impl IntoIterator<Item = Route>) -> Router<Arc<AppState>> {
    routes
        .into_iter()
        .fold(Router::new(), |router, (_, paths, handler)| {
            paths
                .paths
                .keys()
                .fold(router, |router, path| router.route(path, handler.clone()))
        })
}

/// The job or run a request names in its path (`/jobs/{id}…`, `/triggers/{id}…`), for its span.
/// `path` may lack the prefix `route` has (a nested router sees its own part), so the two are
/// matched from the end.
fn path_ids(route: &str, path: &str) -> (Option<i64>, Option<i64>) {
    let (mut job, mut trigger) = (None, None);
    let template: Vec<&str> = route.rsplit('/').collect();
    let segments: Vec<&str> = path.rsplit('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        if template.get(i) != Some(&"{id}") {
            continue;
        }
        let id = seg.parse::<i64>().ok();
        match template.get(i + 1) {
            Some(&"jobs") => job = id,
            Some(&"triggers") => trigger = id,
            _ => {}
        }
    }
    (job, trigger)
}

/// Counts the request in `cadenza_api_requests_total` by method, route template and status, and
/// runs it in a `request` span (a child of the caller's `traceparent` header, if any) when spans
/// are exported.
async fn count_request(req: Request, next: Next) -> Response {
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let resp = if telemetry::exporting() {
        let (job_id, trigger_id) = path_ids(&route, req.uri().path());
        let span = tracing::info_span!("request", otel.kind = "server",
            otel.name = format!("{method} {route}"), http.request.method = %method,
            http.route = %route, job_id, trigger_id,
            http.response.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty);
        let parent = req
            .headers()
            .get(cadenza_schemas::HEADER_TRACEPARENT)
            .and_then(|v| v.to_str().ok());
        telemetry::set_parent(&span, parent);
        let resp = next.run(req).instrument(span.clone()).await;
        span.record("http.response.status_code", resp.status().as_u16());
        if resp.status().is_server_error() {
            span.record("otel.status_code", "ERROR");
        }
        resp
    } else {
        next.run(req).await
    };
    crate::metrics::metrics()
        .api_requests
        .get_or_create(&crate::metrics::ApiLabels {
            method,
            route,
            status: resp.status().as_u16(),
        })
        .inc();
    resp
}

/// The admin's Prometheus metrics, in the OpenMetrics text format (open, like the probes).
#[utoipa::path(get, path = "/metrics", tag = "meta",
    responses((status = 200, description = "The metrics (`cadenza_…`).", body = String,
        content_type = "application/openmetrics-text")))]
async fn metrics_text() -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        crate::metrics::metrics().encode(),
    )
        .into_response()
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = mount(routes().into_iter().map(|(_, route)| route))
        .fallback(fallback)
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .route_layer(middleware::from_fn(count_request))
        // Outside authentication: every answer goes to a client that has sent its whole body.
        .layer(middleware::from_fn(input::limit_body));
    mount(probes())
        .merge(crate::console::router())
        .nest("/api", api)
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

/// Parses an optional RFC 3339 time query parameter.
pub(crate) fn parse_time(
    field: &str,
    s: Option<&String>,
) -> ApiResult<Option<chrono::DateTime<chrono::Utc>>> {
    s.map(|s| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| {
                ApiError::invalid(
                    field,
                    format!("{s:?} is not an RFC 3339 time such as 2026-11-21T10:00:00Z"),
                )
            })
    })
    .transpose()
}

/// Parses an optional boolean query parameter (`true` or `false`).
pub(crate) fn parse_bool(field: &str, s: Option<&String>) -> ApiResult<Option<bool>> {
    match s.map(String::as_str) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(ApiError::invalid(
            field,
            format!("{other:?} is not true or false"),
        )),
    }
}

/// Parses an optional `limit` query parameter (1..=1000, default 100).
pub(crate) fn parse_limit(s: Option<&String>) -> ApiResult<i64> {
    parse_limit_upto(s, 1000)
}

/// `limit`: 1 to `max`, default 100 (or `max` if lower).
pub(crate) fn parse_limit_upto(s: Option<&String>, max: i64) -> ApiResult<i64> {
    match s {
        None => Ok(max.min(100)),
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|v| (1..=max).contains(v))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("{s:?} is not a number between 1 and {max}"),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::path_ids;

    #[test]
    fn path_ids_read_the_job_or_run_a_route_names() {
        assert_eq!(
            path_ids("/api/jobs/{id}/trigger", "/jobs/12/trigger"),
            (Some(12), None)
        );
        assert_eq!(path_ids("/api/jobs/{id}", "/api/jobs/7"), (Some(7), None));
        assert_eq!(
            path_ids("/api/triggers/{id}/log", "/triggers/9/log"),
            (None, Some(9))
        );
        assert_eq!(path_ids("/api/users/{id}", "/users/3"), (None, None));
        assert_eq!(path_ids("/api/jobs", "/jobs"), (None, None));
        assert_eq!(path_ids("/api/jobs/{id}", "/jobs/x"), (None, None));
    }
}
