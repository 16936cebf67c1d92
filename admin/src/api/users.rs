//! `/api/users` (admins only): list, create, change role, patterns or password, delete. Every
//! change is audited in its transaction; passwords never appear in answers, logs or the audit.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::doc::Id;
use super::{parse_body, parse_id, ApiError, ApiResult, ErrorBody, ErrorCode, Shared};
use crate::audit::{self, Entry};
use crate::auth::{password, Principal, Role};
use crate::users::{self, CreateError, NewUser};

/// A user (never its password).
#[derive(Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct User {
    id: i64,
    name: String,
    #[schema(value_type = Role)]
    role: String,
    /// Job-type patterns the user is limited to (`billing.*`); none for an admin.
    job_types: Vec<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

fn as_json(u: &User) -> ApiResult<Value> {
    serde_json::to_value(u).map_err(ApiError::internal)
}

const COLUMNS: &str = "id, name, role, job_types, created_at, updated_at";

/// The users.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UserList {
    users: Vec<User>,
}

/// Every user, by id.
#[utoipa::path(get, path = "/users", tag = "accounts",
    responses((status = 200, description = "The users.", body = UserList)))]
pub async fn list(state: Shared) -> ApiResult<Json<UserList>> {
    let users: Vec<User> = sqlx::query_as(&format!("SELECT {COLUMNS} FROM users ORDER BY id"))
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(UserList { users }))
}

/// A new user.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// 1 to 100 characters without spaces; unique, not case-sensitive.
    #[schema(min_length = 1, max_length = 100, pattern = r"^\S+$")]
    name: String,
    role: Role,
    /// Job-type patterns for an operator or viewer (`billing.*`, `reports.daily`); none for an
    /// admin.
    #[serde(default)]
    job_types: Vec<String>,
    /// 10 characters or more.
    #[schema(value_type = String, format = Password, min_length = 10, max_length = 1024)]
    password: SecretString,
}

/// Creates a user; its password is stored as an argon2id hash.
#[utoipa::path(post, path = "/users", tag = "accounts", request_body = CreateUser,
    responses(
        (status = 201, description = "Created.", body = User),
        (status = 409, description = "A user of that name exists (`user_exists`).", body = ErrorBody),
    ))]
pub async fn create(
    state: Shared,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<User>)> {
    let req: CreateUser = parse_body(&body)?;
    let new = NewUser {
        name: req.name,
        role: req.role,
        job_types: req.job_types,
        password: req.password,
    };
    let mut tx = state.pool.begin().await?;
    let id = match users::create(&mut tx, &new, false).await {
        Ok(Some(id)) => id,
        Ok(None) => return Err(ApiError::internal("the user was not created")),
        Err(CreateError::Invalid(e)) => return Err(e.into()),
        Err(CreateError::Exists(name)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::UserExists,
                format!("a user named {name:?} exists already"),
            ))
        }
        Err(CreateError::Database(e)) => return Err(e.into()),
        Err(CreateError::Slot(e)) => return Err(e.into()),
        Err(e @ CreateError::Hash(_)) => return Err(ApiError::internal(e)),
    };
    let user: User = sqlx::query_as(&format!("SELECT {COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("user.create")
            .target(user.name.clone())
            .after(as_json(&user)?),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// What to change of a user; fields left out stay as they are.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeUser {
    role: Option<Role>,
    job_types: Option<Vec<String>>,
    /// A new password (at least 10 characters); ends the user's sessions.
    #[schema(value_type = Option<String>, format = Password, min_length = 10, max_length = 1024)]
    password: Option<SecretString>,
}

/// Changes a user's role, patterns or password.
#[utoipa::path(patch, path = "/users/{id}", tag = "accounts", params(Id), request_body = ChangeUser,
    responses(
        (status = 200, description = "Changed.", body = User),
        (status = 404, description = "No such user (`not_found`).", body = ErrorBody),
    ))]
pub async fn update(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<User>> {
    let id = parse_id("id", &id)?;
    let req: ChangeUser = parse_body(&body)?;
    if let Some(patterns) = &req.job_types {
        for (i, pat) in patterns.iter().enumerate() {
            crate::auth::check_pattern(pat)
                .map_err(|m| ApiError::invalid(format!("job_types[{i}]"), m))?;
        }
    }
    let hash = match req.password {
        Some(pw) => {
            password::check(pw.expose_secret()).map_err(|m| ApiError::invalid("password", m))?;
            let hashed = password::hash_in_slot(pw)
                .await?
                .map_err(ApiError::internal)?;
            Some(hashed)
        }
        None => None,
    };
    let mut tx = state.pool.begin().await?;
    let before: Option<User> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM users WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let before = before.ok_or_else(|| ApiError::not_found("user", id))?;
    let role = req
        .role
        .map_or_else(|| before.role.clone(), |r| r.as_str().to_owned());
    let patterns = req.job_types.unwrap_or_else(|| before.job_types.clone());
    if role == "admin" && !patterns.is_empty() {
        return Err(ApiError::invalid(
            "job_types",
            "an admin sees every job type; give patterns to operators and viewers",
        ));
    }
    let after: User = sqlx::query_as(&format!(
        "UPDATE users SET role = $2, job_types = $3,
                password_hash = COALESCE($4, password_hash), updated_at = now()
         WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(&role)
    .bind(&patterns)
    .bind(&hash)
    .fetch_one(&mut *tx)
    .await?;
    if hash.is_some() {
        // A new password ends the user's sessions.
        sqlx::query("DELETE FROM sessions WHERE user_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    let mut entry = Entry::new("user.update")
        .target(after.name.clone())
        .before(as_json(&before)?)
        .after(as_json(&after)?);
    if hash.is_some() {
        entry = entry.detail("password changed");
    }
    audit::done(&mut tx, &p.actor(), entry).await?;
    tx.commit().await?;
    Ok(Json(after))
}

/// Deletes a user, with its tokens and sessions. Nobody can delete themself.
#[utoipa::path(delete, path = "/users/{id}", tag = "accounts", params(Id),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such user (`not_found`).", body = ErrorBody),
    ))]
pub async fn delete(
    state: Shared,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id("id", &id)?;
    if p.user_id == Some(id) {
        return Err(ApiError::invalid(
            "id",
            "you cannot delete yourself; another admin can",
        ));
    }
    let mut tx = state.pool.begin().await?;
    let gone: Option<User> = sqlx::query_as(&format!(
        "DELETE FROM users WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let gone = gone.ok_or_else(|| ApiError::not_found("user", id))?;
    audit::done(
        &mut tx,
        &p.actor(),
        Entry::new("user.delete")
            .target(gone.name.clone())
            .before(as_json(&gone)?),
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
