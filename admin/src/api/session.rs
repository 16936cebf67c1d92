//! Who makes a request (service token, personal API token or session cookie), signing in and
//! out, and the throttle of failed sign-ins.

use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::{parse_body, ApiError, ApiResult, AppState, ErrorBody, ErrorCode, Shared};
use crate::audit::{self, Actor, Entry};
use crate::auth::{password, secret, Principal, Role, Via};

/// The session cookie's name.
pub const COOKIE: &str = "cadenza_session";
/// The header a cookie-authenticated write carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts.
const SESSION_HOURS: i64 = 12;
/// Failed sign-ins (per user name, and per client address) allowed before they are slowed.
const FREE_FAILURES: i32 = 5;
/// The longest wait imposed after failed sign-ins.
const MAX_WAIT_S: i64 = 300;

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
}

#[derive(sqlx::FromRow)]
struct Found {
    user_id: i64,
    name: String,
    role: String,
    job_types: Vec<String>,
    extra: String,
}

fn to_principal(found: Found, via: impl FnOnce(String) -> Via) -> ApiResult<Principal> {
    let role: Role = found
        .role
        .parse()
        .map_err(|e: String| ApiError::internal(e))?;
    Ok(Principal {
        actor: found.name,
        user_id: Some(found.user_id),
        role,
        patterns: found.job_types,
        via: via(found.extra),
        source: None,
    })
}

/// Who sent `headers`. Without `CADENZA_API_TOKEN`, a request with no credentials acts as the
/// service (the admin then listens on loopback only).
pub(super) async fn principal(state: &AppState, headers: &HeaderMap) -> ApiResult<Principal> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(given) = bearer {
        if let Some(service) = &state.api_token {
            if secret::same(given.as_bytes(), service.expose_secret().as_bytes()) {
                return Ok(Principal::service());
            }
        }
        if given.starts_with(secret::TOKEN_PREFIX) {
            let found: Option<Found> = sqlx::query_as(sql!("auth/token_principal"))
                .bind(secret::digest(given))
                .fetch_optional(&state.pool)
                .await?;
            if let Some(found) = found {
                return to_principal(found, |id| Via::Token(id.parse().unwrap_or_default()));
            }
        }
        return Err(ApiError::unauthorized(
            "the bearer token is not valid (unknown, expired or revoked)",
        ));
    }
    if let Some(cookie) = cookie_value(headers, COOKIE) {
        let found: Option<Found> = sqlx::query_as(sql!("auth/session_principal"))
            .bind(secret::digest(&cookie))
            .fetch_optional(&state.pool)
            .await?;
        return match found {
            Some(found) => to_principal(found, |csrf| Via::Session {
                csrf: SecretString::from(csrf),
            }),
            None => Err(ApiError::unauthorized(
                "the session has ended: sign in again (POST /api/session)",
            )),
        };
    }
    if state.api_token.is_none() {
        return Ok(Principal::service());
    }
    Err(ApiError::unauthorized(
        "sign in: send 'Authorization: Bearer <token>' (CADENZA_API_TOKEN or a personal API token) or a session cookie from POST /api/session",
    ))
}

/// A write made with a session cookie must carry the session's CSRF token.
pub(super) fn check_csrf(principal: &Principal, headers: &HeaderMap) -> ApiResult<()> {
    let Via::Session { csrf } = &principal.via else {
        return Ok(());
    };
    let given = headers
        .get(CSRF_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if secret::same(given, csrf.expose_secret().as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::CsrfRequired,
            "a write made with a session cookie needs the session's CSRF token in the X-CSRF-Token header",
        ))
    }
}

/// A sign-in.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Login {
    /// The user's name (not case-sensitive).
    name: String,
    #[schema(value_type = String, format = Password)]
    password: SecretString,
}

/// The user a session belongs to.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionUser {
    id: i64,
    name: String,
    role: Role,
    /// Job-type patterns the user is limited to (`billing.*`); none for an admin.
    job_types: Vec<String>,
}

/// A new session. The session itself is the `cadenza_session` cookie.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SignedIn {
    user: SessionUser,
    /// Send it as `X-CSRF-Token` with every write made with the cookie.
    csrf_token: String,
    expires_at: DateTime<Utc>,
}

/// How a request is authenticated.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Credential {
    ServiceToken,
    ApiToken,
    Session,
}

/// Who a request is made as.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Whoami {
    /// A user name, or `service` for the service token.
    actor: String,
    user_id: Option<i64>,
    role: Role,
    job_types: Vec<String>,
    via: Credential,
}

/// `; Secure` when the client reached the admin over HTTPS, through a proxy that terminates
/// TLS and says so (`X-Forwarded-Proto: https`, or `Forwarded: proto=https`): the browser then
/// sends the cookie over HTTPS only. The admin itself listens on plain HTTP.
fn secure_flag(headers: &HeaderMap) -> &'static str {
    let forwarded_proto = headers
        .get_all("x-forwarded-proto")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get_all(header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| {
            k.eq_ignore_ascii_case("proto") && v.trim_matches('"').eq_ignore_ascii_case("https")
        });
    if forwarded_proto || forwarded {
        "; Secure"
    } else {
        ""
    }
}

fn client_address(connect: Option<&ConnectInfo<std::net::SocketAddr>>) -> String {
    connect.map_or_else(|| "unknown".to_owned(), |c| c.0.ip().to_string())
}

/// Counts a sign-in attempt against its throttle keys before the password is checked, unless a
/// key must still wait: then nothing is counted and the seconds to wait are returned. Concurrent
/// attempts on the same key are counted one after another, so a burst of them cannot all pass
/// the throttle.
async fn count_attempt(state: &AppState, keys: &[String]) -> ApiResult<i64> {
    let mut tx = state.pool.begin().await?;
    sqlx::query(sql!("auth/login_keys"))
        .bind(keys)
        .execute(&mut *tx)
        .await?;
    let wait: Option<f64> = sqlx::query_scalar(sql!("auth/login_wait"))
        .bind(keys)
        .bind(FREE_FAILURES)
        .bind(MAX_WAIT_S as f64)
        .fetch_one(&mut *tx)
        .await?;
    let wait = wait.map_or(0, |w| w.ceil() as i64);
    if wait <= 0 {
        sqlx::query(sql!("auth/login_failed"))
            .bind(keys)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(wait.max(0))
}

/// Takes back an attempt counted by [`count_attempt`] whose password was never checked.
async fn uncount(state: &AppState, keys: &[String]) -> ApiResult<()> {
    sqlx::query(sql!("auth/login_uncount"))
        .bind(keys)
        .execute(&state.pool)
        .await?;
    Ok(())
}

/// Signs in with a name and password: sets the session cookie (HttpOnly, SameSite=Strict, Secure
/// over HTTPS) and answers the CSRF token for writes. A wrong name and a wrong password answer
/// the same; after 5 failures for a name or an address, sign-ins wait (up to 5 minutes). At most
/// two passwords are checked at once: beyond that a sign-in waits up to 3 s for its turn, then is
/// answered `503 busy`.
#[utoipa::path(post, path = "/session", tag = "accounts", request_body = Login,
    responses(
        (status = 200, description = "Signed in.", body = SignedIn,
            headers(("Set-Cookie" = String, description = "`cadenza_session=…; HttpOnly; SameSite=Strict; Path=/`"))),
        (status = 401, description = "The name or the password is wrong (`unauthorized`).", body = ErrorBody),
        (status = 429, description = "Too many failed sign-ins (`too_many_attempts`).", body = ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
        (status = 503, description = "Too many sign-ins at once (`busy`).", body = ErrorBody,
            headers(("Retry-After" = i64, description = "Seconds to wait."))),
    ))]
pub async fn login(
    state: Shared,
    connect: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let req: Login = parse_body(&body)?;
    let address = client_address(connect.as_ref().map(|c| &c.0));
    let user_key = format!("user:{}", req.name.to_lowercase());
    let address_key = format!("addr:{address}");
    // Sorted: rows are locked in this order.
    let mut keys = vec![user_key.clone(), address_key.clone()];
    keys.sort();
    let wait = count_attempt(&state, &keys).await?;
    if wait > 0 {
        tracing::warn!(user = %req.name, %address, wait_s = wait, "sign-in refused: too many failures");
        let mut resp = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyAttempts,
            format!("too many failed sign-ins; try again in {wait} s"),
        )
        .into_response();
        if let Ok(v) = HeaderValue::from_str(&wait.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return Ok(resp);
    }
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        name: String,
        role: String,
        job_types: Vec<String>,
        password_hash: String,
    }
    let user: Option<Row> = sqlx::query_as(
        "SELECT id, name, role, job_types, password_hash FROM users WHERE lower(name) = lower($1)",
    )
    .bind(&req.name)
    .fetch_optional(&state.pool)
    .await?;
    // A name that does not exist costs as much as a wrong password, and answers the same.
    let phc = user.as_ref().map(|u| u.password_hash.clone());
    let ok = match password::verify_in_slot(req.password.clone(), phc).await {
        Ok(ok) => ok,
        Err(e) => {
            uncount(&state, &keys).await?;
            if matches!(e, password::SlotError::Busy) {
                tracing::warn!(user = %req.name, %address, "sign-in refused: every password slot is busy");
            }
            return Err(e.into());
        }
    };
    let user = match user {
        Some(u) if ok => u,
        _ => {
            let mut tx = state.pool.begin().await?;
            let name: String = req.name.chars().take(100).collect();
            let actor = Actor {
                name,
                user_id: None,
                source: Some(address.clone()),
            };
            audit::refused(&mut tx, &actor, Entry::new("login")).await?;
            tx.commit().await?;
            tracing::warn!(user = %req.name, %address, "sign-in failed");
            return Err(ApiError::unauthorized("the name or the password is wrong"));
        }
    };
    let cookie = secret::random_hex();
    let csrf = secret::random_hex();
    let mut tx = state.pool.begin().await?;
    let expires: DateTime<Utc> = sqlx::query_scalar(sql!("auth/session_create"))
        .bind(secret::digest(&cookie))
        .bind(user.id)
        .bind(&csrf)
        .bind((SESSION_HOURS * 3600) as f64)
        .bind(vec![user_key])
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query(sql!("auth/login_uncount"))
        .bind(vec![address_key])
        .execute(&mut *tx)
        .await?;
    let actor = Actor {
        name: user.name.clone(),
        user_id: Some(user.id),
        source: Some(address.clone()),
    };
    audit::done(&mut tx, &actor, Entry::new("login")).await?;
    tx.commit().await?;
    tracing::info!(user = %user.name, %address, "signed in");
    let set_cookie = format!(
        "{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        SESSION_HOURS * 3600,
        secure_flag(&headers)
    );
    let role = user
        .role
        .parse::<Role>()
        .map_err(|e| ApiError::internal(format!("user {} has an unknown role: {e}", user.id)))?;
    let mut resp = Json(SignedIn {
        user: SessionUser {
            id: user.id,
            name: user.name,
            role,
            job_types: user.job_types,
        },
        csrf_token: csrf,
        expires_at: expires,
    })
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&set_cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

/// Who the request is made as, with which role and patterns.
#[utoipa::path(get, path = "/session", tag = "accounts",
    responses((status = 200, description = "The caller.", body = Whoami)))]
pub async fn whoami(Extension(p): Extension<Principal>) -> Json<Whoami> {
    let via = match &p.via {
        Via::Service => Credential::ServiceToken,
        Via::Token(_) => Credential::ApiToken,
        Via::Session { .. } => Credential::Session,
    };
    Json(Whoami {
        actor: p.actor,
        user_id: p.user_id,
        role: p.role,
        job_types: p.patterns,
        via,
    })
}

/// Signs out: ends the session of the cookie, if any, and clears the cookie.
#[utoipa::path(delete, path = "/session", tag = "accounts",
    responses((status = 204, description = "Signed out (also when there was no session).")))]
pub async fn logout(state: Shared, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(cookie) = cookie_value(&headers, COOKIE) {
        sqlx::query("DELETE FROM sessions WHERE hash = $1")
            .bind(secret::digest(&cookie))
            .execute(&state.pool)
            .await?;
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let clear = format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_flag(&headers)
    );
    if let Ok(v) = HeaderValue::from_str(&clear) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_cookie_is_secure_only_behind_https() {
        assert_eq!(secure_flag(&headers(&[])), "");
        assert_eq!(secure_flag(&headers(&[("x-forwarded-proto", "http")])), "");
        assert_eq!(
            secure_flag(&headers(&[("x-forwarded-proto", "https")])),
            "; Secure"
        );
        assert_eq!(
            secure_flag(&headers(&[("x-forwarded-proto", "HTTPS, http")])),
            "; Secure"
        );
        assert_eq!(
            secure_flag(&headers(&[("forwarded", "for=1.2.3.4;proto=https;by=x")])),
            "; Secure"
        );
        assert_eq!(
            secure_flag(&headers(&[("forwarded", "for=1.2.3.4;proto=http")])),
            ""
        );
    }
}
