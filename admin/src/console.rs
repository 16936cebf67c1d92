//! The web console: a small single-page app (`admin/console/`: HTML, CSS and JavaScript modules,
//! no build step) embedded in the binary and served at `/` and `/console/…`. It talks to the
//! admin only through the HTTP API, so the API's authorization, validation and audit apply to it
//! unchanged; the files themselves hold nothing secret and are served to anyone.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// `(file name, content type, content)` of a file under `admin/console/`.
macro_rules! embed {
    ($name:literal, $type:literal) => {
        ($name, $type, include_str!(concat!("../console/", $name)))
    };
}

/// Every file of the console.
const FILES: &[(&str, &str, &str)] = &[
    embed!("index.html", "text/html; charset=utf-8"),
    embed!("style.css", "text/css; charset=utf-8"),
    embed!("app.js", "text/javascript; charset=utf-8"),
    embed!("api.js", "text/javascript; charset=utf-8"),
    embed!("ui.js", "text/javascript; charset=utf-8"),
    embed!("job_form.js", "text/javascript; charset=utf-8"),
    embed!("dashboard.js", "text/javascript; charset=utf-8"),
    embed!("records.js", "text/javascript; charset=utf-8"),
    embed!("replay.js", "text/javascript; charset=utf-8"),
    embed!("access.js", "text/javascript; charset=utf-8"),
    embed!("workflows.js", "text/javascript; charset=utf-8"),
    embed!("dag.js", "text/javascript; charset=utf-8"),
    embed!("groups.js", "text/javascript; charset=utf-8"),
];

/// Only the console's own files run and are fetched; it is never framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { file("index.html") }))
        .route(
            "/console/{file}",
            get(|Path(name): Path<String>| async move { file(&name) }),
        )
}

fn file(name: &str) -> Response {
    let Some((_, content_type, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut resp = (*body).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    // The files change with the binary: always ask.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_console_imports_is_served() {
        for (name, _, body) in FILES {
            for line in body
                .lines()
                .filter(|l| l.trim_start().starts_with("import "))
            {
                let Some(path) = line.split('"').nth(1) else {
                    continue;
                };
                let file = path.trim_start_matches("./");
                assert!(
                    FILES.iter().any(|(n, _, _)| *n == file),
                    "{name} imports {path}, which is not embedded"
                );
            }
        }
    }
}
