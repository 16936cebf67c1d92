//! A small client for the admin's HTTP API.

use std::time::Duration;

use anyhow::{Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// JSON over HTTP to one admin, with `Authorization: Bearer <token>` when a token is set.
///
/// Every call returns the status and the body: JSON parsed, a non-JSON body as a JSON string,
/// an empty body as `null`. Only transport failures are errors, so tests can assert on 4xx.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ApiClient {
    /// `base` such as `http://127.0.0.1:8080` (no trailing slash needed).
    pub fn new(base: impl Into<String>, token: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            // The admin closes a connection that sends no request for 10 s (its header read
            // timeout): never reuse one idle that long, or a request can meet the close.
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: base.into().trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// The same admin with another token (or none): for auth tests.
    pub fn with_token(&self, token: Option<&str>) -> Self {
        Self {
            token: token.map(str::to_string),
            ..self.clone()
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `base + path`; `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Any request with an optional JSON body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value)> {
        let (status, text) = self.request_text(method.clone(), path, body).await?;
        let value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, value))
    }

    /// Any request; the body as text (for `/metrics`).
    pub async fn request_text(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, String)> {
        let mut req = self.http.request(method.clone(), self.url(path));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {}", self.url(path)))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("reading the body of {method} {}", self.url(path)))?;
        Ok((status, text))
    }

    pub async fn get_json(&self, path: &str) -> Result<(StatusCode, Value)> {
        self.request(Method::GET, path, None).await
    }

    pub async fn get_text(&self, path: &str) -> Result<(StatusCode, String)> {
        self.request_text(Method::GET, path, None).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<(StatusCode, Value)> {
        self.request(Method::POST, path, Some(body)).await
    }

    /// POST without a body (`/api/jobs/{id}/enable`).
    pub async fn post_empty(&self, path: &str) -> Result<(StatusCode, Value)> {
        self.request(Method::POST, path, None).await
    }

    pub async fn patch_json(&self, path: &str, body: &Value) -> Result<(StatusCode, Value)> {
        self.request(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<(StatusCode, Value)> {
        self.request(Method::DELETE, path, None).await
    }
}
