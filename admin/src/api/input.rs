//! What every request brings in, checked in one place before a handler sees it: the size of the
//! body, and text PostgreSQL cannot store (the NUL character) in the body and the query string.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

use super::{ApiError, ErrorCode};

/// The largest request body the API accepts: 1 MiB (a job's `params` may be 256 KiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How much of a body over the limit is still read (and thrown away) so that the client, which
/// is still sending it, can read the `413` answer instead of failing its write.
const MAX_DRAINED_BYTES: usize = 64 * 1024 * 1024;
/// How long reading a body over the limit may take before the connection is given up.
const MAX_DRAIN_TIME: Duration = Duration::from_secs(10);
/// How long a client may take to send a body within the limit: a client that trickles it is
/// answered `408 request_timeout` instead of holding the request (and its connection) open
/// before it is even authenticated.
pub const MAX_READ_TIME: Duration = Duration::from_secs(30);

fn too_large() -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        format!(
            "the request body is larger than the API's limit of {MAX_BODY_BYTES} bytes (1 MiB); \
             send less (a job's params hold at most 256 KiB)"
        ),
    )
    .into_response()
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Middleware: reads the body whole (at most [`MAX_BODY_BYTES`]) before authentication and the
/// handler, so every answer, `401` included, is given to a client that has finished sending.
/// A body over the limit gets `413 payload_too_large`.
pub async fn limit_body(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let expects_continue = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let declared = declared_length(&parts.headers);
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) && expects_continue {
        // The client waits for "100 Continue" before sending; answering now, it sends nothing.
        return too_large();
    }
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut over = declared.is_some_and(|n| n > MAX_BODY_BYTES as u64);
    let mut drained = 0usize;
    let started = tokio::time::Instant::now();
    loop {
        let chunk = if over {
            match tokio::time::timeout_at(started + MAX_DRAIN_TIME, stream.next()).await {
                Ok(chunk) => chunk,
                Err(_) => break,
            }
        } else {
            match tokio::time::timeout_at(started + MAX_READ_TIME, stream.next()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    return ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        ErrorCode::RequestTimeout,
                        format!(
                            "the request body was not sent whole within {} s; send it again",
                            MAX_READ_TIME.as_secs()
                        ),
                    )
                    .into_response()
                }
            }
        };
        let chunk = match chunk {
            None => break,
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "reading a request body failed");
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::MalformedBody,
                    "the request body could not be read to its end",
                )
                .into_response();
            }
        };
        if over {
            drained = drained.saturating_add(chunk.len());
            if drained > MAX_DRAINED_BYTES {
                break;
            }
        } else if kept.len() + chunk.len() > MAX_BODY_BYTES {
            over = true;
            drained = kept.len() + chunk.len();
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&chunk);
        }
    }
    if over {
        return too_large();
    }
    next.run(Request::from_parts(parts, Body::from(kept))).await
}

/// The query string as name → value, with the error a person can act on when it cannot be
/// read or holds a NUL character. Use it instead of axum's `Query`.
#[derive(Debug, Default)]
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Query(map) =
            Query::<HashMap<String, String>>::try_from_uri(&parts.uri).map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::MalformedQuery,
                    format!("the query string cannot be read: {}", e.body_text()),
                )
            })?;
        for (k, v) in &map {
            if k.contains('\0') {
                return Err(ApiError::invalid("query", NUL_MESSAGE));
            }
            if v.contains('\0') {
                return Err(ApiError::invalid(k.clone(), NUL_MESSAGE));
            }
        }
        Ok(Params(map))
    }
}

const NUL_MESSAGE: &str =
    "contains a NUL character (\\u0000), which cannot be stored; remove it or encode the value";

/// The first place in a JSON body that holds a NUL character, as a field path
/// (`schedule.expr`, `tags[2]`), or `None`.
pub fn nul_at(body: &[u8]) -> Option<String> {
    // A NUL can only arrive escaped (a raw control character is not valid JSON).
    if !body.windows(6).any(|w| w == b"\\u0000") {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    find_nul(&value, String::new())
}

fn find_nul(v: &Value, at: String) -> Option<String> {
    let here = || {
        if at.is_empty() {
            "body".to_owned()
        } else {
            at.clone()
        }
    };
    match v {
        Value::String(s) => s.contains('\0').then(here),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_nul(item, format!("{at}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, item)| {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if k.contains('\0') {
                Some(here())
            } else {
                find_nul(item, path)
            }
        }),
        _ => None,
    }
}

/// The error for a NUL character at `field`.
pub fn nul_error(field: String) -> ApiError {
    ApiError::invalid(field, NUL_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_is_found_where_it_is() {
        assert_eq!(nul_at(br#"{"name":"a\u0000"}"#).as_deref(), Some("name"));
        assert_eq!(
            nul_at(br#"{"name":"a","schedule":{"kind":"cron","expr":"\u0000"}}"#).as_deref(),
            Some("schedule.expr")
        );
        assert_eq!(
            nul_at(br#"{"to":["a","b\u0000"]}"#).as_deref(),
            Some("to[1]")
        );
        assert_eq!(nul_at(br#""\u0000""#).as_deref(), Some("body"));
        // An escaped backslash before "u0000" is not a NUL.
        assert_eq!(nul_at(br#"{"params":"\\u0000"}"#), None);
        assert_eq!(nul_at(br#"{"params":"plain"}"#), None);
    }
}
