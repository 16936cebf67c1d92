//! Personal API tokens: created by a signed-in user (shown once), listed without their secret,
//! revoked by their owner or an admin. A token acts with its owner's role and patterns.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::doc::Id;
use super::{parse_body, parse_bool, parse_id, ApiError, ApiResult, ErrorBody, Params, Shared};
use crate::audit::{self, Entry};
use crate::auth::{secret, Principal, Role, Via};

/// Longest lifetime a token may be given: a year.
const MAX_DAYS: i64 = 366;

/// A new personal API token.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// What it is for (`ci`, `grafana`): 1 to 100 characters.
    #[schema(min_length = 1, max_length = 100, pattern = r"\S")]
    name: String,
    /// Days until it expires, 1 to 366 (default: never).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 366)]
    expires_in_days: Option<i64>,
}

/// A personal API token, without its secret.
#[derive(Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TokenInfo {
    id: i64,
    /// Its owner; the token acts with the owner's role and patterns.
    user_id: i64,
    name: String,
    /// The token's first characters, to tell tokens apart.
    prefix: String,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    last_used_at: Option<DateTime<Utc>>,
}

fn owner(p: &Principal) -> ApiResult<i64> {
    p.user_id.ok_or_else(|| {
        ApiError::invalid(
            "user",
            "the service token cannot own personal tokens: sign in as a user, or create one with cadenza-admin users create",
        )
    })
}

/// A new token and its secret, shown this once.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    info: TokenInfo,
    /// The secret (`cdz_` and 64 hex digits): send it as `Authorization: Bearer …`. Only its
    /// SHA-256 digest is stored; it cannot be shown again.
    token: String,
}

/// The caller's tokens.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TokenList {
    tokens: Vec<TokenInfo>,
}

/// Creates a token for the caller (a user signed in with a session: not the service token, and
/// not a personal token, so that no token outlives or survives the revocation of the one that
/// made it). The answer is the only place the secret appears.
#[utoipa::path(post, path = "/tokens", tag = "accounts", request_body = NewToken,
    responses(
        (status = 201, description = "Created.", body = CreatedToken),
        (status = 403, description = "The request was made with a personal API token (`forbidden`).", body = ErrorBody),
    ))]
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<CreatedToken>)> {
    let req: NewToken = parse_body(&body)?;
    let user_id = owner(&p)?;
    if matches!(p.via, Via::Token(_)) {
        return Err(ApiError::forbidden(
            "a personal API token cannot create tokens (a token it made could outlive it and would \
             survive its revocation): sign in with a name and password and create it from that session",
        ));
    }
    let name = req.name.trim();
    if name.is_empty() || name.len() > 100 {
        return Err(ApiError::invalid("name", "must be 1 to 100 characters"));
    }
    if let Some(d) = req.expires_in_days {
        if !(1..=MAX_DAYS).contains(&d) {
            return Err(ApiError::invalid(
                "expires_in_days",
                format!("must be between 1 and {MAX_DAYS}"),
            ));
        }
    }
    let token = secret::new_token();
    let mut tx = state.pool.begin().await?;
    let info: TokenInfo = sqlx::query_as(sql!("auth/token_create"))
        .bind(user_id)
        .bind(name)
        .bind(secret::shown_prefix(&token))
        .bind(secret::digest(&token))
        .bind(req.expires_in_days.map(|d| (d * 86_400) as f64))
        .fetch_one(&mut *tx)
        .await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("token.create").target(format!("token {} ({})", info.id, info.name)),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(user = %p.actor, token_id = info.id, "API token created");
    Ok((StatusCode::CREATED, Json(CreatedToken { info, token })))
}

/// Whose tokens.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Params`
pub struct TokenQuery {
    /// The tokens of this user (admins only; others may give their own id).
    #[param(minimum = 1)]
    user_id: Option<i64>,
    /// `true`: every user's tokens (admins only).
    all: Option<bool>,
}

/// The caller's tokens, newest first, revoked and expired ones included.
#[utoipa::path(get, path = "/tokens", tag = "accounts", params(TokenQuery),
    responses((status = 200, description = "The tokens.", body = TokenList)))]
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<TokenList>> {
    let asked = q
        .get("user_id")
        .map(|s| parse_id("user_id", s))
        .transpose()?;
    let all = parse_bool("all", q.get("all"))?.unwrap_or(false);
    let user: Option<i64> = if p.role == Role::Admin {
        if all {
            None
        } else {
            Some(asked.map_or_else(|| owner(&p), Ok)?)
        }
    } else {
        if asked.is_some_and(|a| Some(a) != p.user_id) || all {
            return Err(ApiError::forbidden(
                "only an admin sees other users' tokens",
            ));
        }
        Some(owner(&p)?)
    };
    let tokens: Vec<TokenInfo> = sqlx::query_as(sql!("auth/token_list"))
        .bind(user)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(TokenList { tokens }))
}

/// Revokes a token of the caller (an admin: anyone's); it stops working at once.
#[utoipa::path(delete, path = "/tokens/{id}", tag = "accounts", params(Id),
    responses(
        (status = 200, description = "Revoked.", body = TokenInfo),
        (status = 404, description = "No such token of the caller (`not_found`).", body = ErrorBody),
    ))]
pub async fn revoke(
    state: Shared,
    Extension(p): Extension<Principal>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> ApiResult<Json<TokenInfo>> {
    let id = parse_id("id", &id)?;
    let only_of = if p.role == Role::Admin {
        None
    } else {
        Some(owner(&p)?)
    };
    let mut tx = state.pool.begin().await?;
    let revoked: Option<TokenInfo> = sqlx::query_as(sql!("auth/token_revoke"))
        .bind(id)
        .bind(only_of)
        .fetch_optional(&mut *tx)
        .await?;
    let revoked = revoked.ok_or_else(|| ApiError::not_found("token", id))?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("token.revoke").target(format!(
            "token {} ({}) of user {}",
            revoked.id, revoked.name, revoked.user_id
        )),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(user = %p.actor, token_id = id, "API token revoked");
    Ok(Json(revoked))
}
