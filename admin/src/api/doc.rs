//! The OpenAPI 3.1 document: the operations come from the handlers' `#[utoipa::path]` and the
//! route table ([`super::routes`]); this module adds what every operation shares (who may call
//! it, the error answers) from the route's [`Rule`], so no handler repeats it.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, ResponseBuilder};
use utoipa::OpenApi as _;

use super::error::{ErrorBody, ErrorCode, ErrorDetail};
use super::session::{COOKIE, CSRF_HEADER};
use super::{operations, Route};
use crate::auth::rules::Rule;

/// The security scheme of the service token and of personal API tokens.
const BEARER: &str = "bearer";
/// The security scheme of the session cookie set by `POST /api/session`.
const SESSION: &str = "session";
/// The CSRF token a cookie write carries.
const CSRF: &str = "csrf";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Cadenza admin API",
        description = "Jobs, runs, workflows, workers, replay, users, tokens and the audit of a Cadenza \
            scheduler. JSON in and out. Every error answers `{\"error\":{\"code\",\"message\",\"field\"?}}` \
            with a stable `code` (see `ErrorCode`). Request bodies are limited to 1 MiB, and no text \
            may hold a NUL character (U+0000). When the admin runs without `CADENZA_API_TOKEN` \
            and without users (a local trial), no credentials are needed.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCode)),
    tags(
        (name = "jobs", description = "Job definitions: schedule, routing, blocking, retries, children, alarms."),
        (name = "runs", description = "Runs (triggers) and their outcome."),
        (name = "workflows", description = "Workflows (graphs of jobs run one after another) and their runs."),
        (name = "workers", description = "Live and recently stopped workers."),
        (name = "operations", description = "Replay, alarms and the daily report."),
        (name = "accounts", description = "Signing in and out, users, personal API tokens and the audit."),
        (name = "meta", description = "This document, and the probes outside `/api`."),
    )
)]
struct Base;

/// The whole document for the route table.
pub(super) fn build(routes: Vec<(Rule, Route)>, probes: Vec<Route>) -> OpenApi {
    let mut doc = Base::openapi();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "`Authorization: Bearer <token>`: the service token (`CADENZA_API_TOKEN`, \
                     acts as an admin) or a personal API token (`cdz_…`, acts with its owner's \
                     role and job-type patterns).",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        SESSION,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            COOKIE,
            "The session cookie set by `POST /api/session` (HttpOnly, SameSite=Strict; Secure \
             when the admin is reached over HTTPS). Lasts 12 hours.",
        ))),
    );
    components.add_security_scheme(
        CSRF,
        SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
            CSRF_HEADER,
            "The `csrf_token` answered by `POST /api/session`; every write made with the session \
             cookie carries it.",
        ))),
    );
    for (rule, (schemas, paths, _)) in routes {
        components.schemas.extend(schemas);
        for (path, mut item) in paths.paths {
            let methods: Vec<Method> = operations(&item).map(|(m, _)| m).collect();
            for method in methods {
                let op = match method {
                    Method::GET => item.get.as_mut(),
                    Method::PUT => item.put.as_mut(),
                    Method::POST => item.post.as_mut(),
                    Method::DELETE => item.delete.as_mut(),
                    Method::PATCH => item.patch.as_mut(),
                    _ => None,
                };
                if let Some(op) = op {
                    decorate(op, rule, &method, &path);
                }
            }
            let full = format!("/api{path}");
            match doc.paths.paths.get_mut(&full) {
                Some(existing) => existing.merge_operations(item),
                None => {
                    doc.paths.paths.insert(full, item);
                }
            }
        }
    }
    for (_, paths, _) in probes {
        doc.paths.merge(paths);
    }
    close_variants(&mut doc, "Schedule");
    doc
}

/// Sets `additionalProperties: false` on each variant of an internally tagged enum whose serde
/// denies unknown fields (utoipa does so for structs only).
fn close_variants(doc: &mut OpenApi, name: &str) {
    use utoipa::openapi::schema::{AdditionalProperties, Schema};
    use utoipa::openapi::RefOr;
    let Some(RefOr::T(Schema::OneOf(one_of))) = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut(name))
    else {
        return;
    };
    for variant in &mut one_of.items {
        if let RefOr::T(Schema::Object(o)) = variant {
            o.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
        }
    }
}

/// Who may call it, and the error answers every operation of its kind can give.
fn decorate(op: &mut Operation, rule: Rule, method: &Method, path: &str) {
    let write = !matches!(*method, Method::GET | Method::HEAD);
    // The handler's name within its resource: `jobs_list`, `users_update`, `session_login`.
    let resource = path
        .trim_start_matches('/')
        .split(['/', '.'])
        .next()
        .unwrap_or_default();
    if let Some(name) = op.operation_id.take() {
        op.operation_id = Some(format!("{resource}_{name}"));
    }
    let who = match rule {
        Rule::Public => "Anyone, without credentials.",
        Rule::SignedIn => "Any signed-in user or token.",
        Rule::Read => "Role viewer, operator or admin; a viewer or operator sees only the job types its patterns match.",
        Rule::Write => "Role operator or admin; an operator only for the job types its patterns match.",
        Rule::Admin => "Role admin (or the service token).",
    };
    let description = op.description.take().unwrap_or_default();
    op.description = Some(if description.is_empty() {
        format!("**Who:** {who}")
    } else {
        format!("{description}\n\n**Who:** {who}")
    });
    if rule != Rule::Public {
        let session = if write {
            SecurityRequirement::new(SESSION, Vec::<String>::new()).add(CSRF, Vec::<String>::new())
        } else {
            SecurityRequirement::new(SESSION, Vec::<String>::new())
        };
        op.security = Some(vec![
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
            session,
        ]);
        add(
            op,
            "401",
            "No credentials, or a wrong, expired or revoked token or session (`unauthorized`).",
        );
        add(
            op,
            "403",
            "The role or the job-type patterns do not allow it (`forbidden`), or a cookie write \
             lacks its CSRF token (`csrf_required`).",
        );
    }
    let has_body = op.request_body.is_some();
    let has_params = op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    if has_body {
        add(
            op,
            "400",
            "The body is empty, not JSON or not readable (`malformed_json`, `malformed_body`).",
        );
        add(op, "413", "The body is over 1 MiB (`payload_too_large`).");
    } else if has_params {
        add(
            op,
            "400",
            "The query string cannot be decoded (`malformed_query`).",
        );
    }
    if has_body || has_params {
        add(
            op,
            "422",
            "A field or parameter is invalid; `field` names it (`invalid_field`).",
        );
    }
    add(
        op,
        "503",
        "PostgreSQL or the broker did not answer; retry shortly (`database_unavailable`, \
         `broker_unavailable`).",
    );
    add(
        op,
        "500",
        "A defect; the admin's log has the details (`internal`).",
    );
}

/// Adds an error answer with the [`ErrorBody`] schema, unless the handler documents that status.
fn add(op: &mut Operation, status: &str, description: &str) {
    if op.responses.responses.contains_key(status) {
        return;
    }
    op.responses.responses.insert(
        status.to_owned(),
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
            .into(),
    );
}

/// The document as served, rendered once.
fn rendered() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(super::openapi_json)
}

/// Pretty JSON with a final newline, as committed in `docs/openapi.json`.
pub(super) fn render(doc: &OpenApi) -> String {
    let mut s = doc.to_pretty_json().unwrap_or_default();
    s.push('\n');
    s
}

/// This document: the operations, their bodies, answers, error codes and security schemes.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.",
        content_type = "application/json", body = Object)))]
pub async fn document(_state: super::Shared) -> Response {
    let mut resp = rendered().to_owned().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The `{id}` of a path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the path as text and checked by `parse_id`, for its error
pub struct Id {
    /// The id: a positive integer.
    #[param(minimum = 1)]
    id: i64,
}
