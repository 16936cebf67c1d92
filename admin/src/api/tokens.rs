//! Personal API tokens: created by a signed-in user (shown once), listed without their secret,
//! revoked by their owner or an admin. A token acts with its owner's role and patterns.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{parse_body, parse_id, ApiError, ApiResult, Params, Shared};
use crate::audit::{self, Entry};
use crate::auth::{secret, Principal, Role};

/// Longest lifetime a token may be given: a year.
const MAX_DAYS: i64 = 366;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    /// What it is for (`ci`, `grafana`).
    name: String,
    /// Days until it expires (default: never).
    #[serde(default)]
    expires_in_days: Option<i64>,
}

#[derive(Serialize, sqlx::FromRow)]
pub struct TokenInfo {
    id: i64,
    user_id: i64,
    name: String,
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

/// `POST /api/tokens`: a new token of the caller; the only answer that shows it.
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let req: NewToken = parse_body(&body)?;
    let user_id = owner(&p)?;
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
    let mut body = serde_json::to_value(&info).map_err(anyhow::Error::from)?;
    body["token"] = json!(token);
    Ok((StatusCode::CREATED, Json(body)))
}

/// `GET /api/tokens`: the caller's tokens; an admin may ask for `?user_id=` or `?all=true`.
pub async fn list(
    state: Shared,
    Extension(p): Extension<Principal>,
    Params(q): Params,
) -> ApiResult<Json<Value>> {
    let asked = q
        .get("user_id")
        .map(|s| parse_id("user_id", s))
        .transpose()?;
    let all = q.get("all").is_some_and(|v| v == "true");
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
    Ok(Json(json!({ "tokens": tokens })))
}

/// `DELETE /api/tokens/{id}`: revokes a token of the caller (an admin: anyone's).
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
