//! The CLI's HTTP client: where the admin is, the token, and errors a person can act on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;

/// What went wrong, as the CLI prints it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The admin refused the request: its stable code and message.
    #[error("{code}: {message}")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error("cannot reach the admin at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{0}")]
    Usage(String),
    /// The input (a file to import) cannot be used; the message names the row and field.
    #[error("{0}")]
    Input(String),
    /// Writing the output failed (a closed pipe is not reported: see [`super::main`]).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The stable API error code, if the admin answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            CliError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The config file: the same keys as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub url: Option<String>,
    pub token: Option<SecretString>,
}

/// The default config file: `$XDG_CONFIG_HOME/cadenza/config.toml` or
/// `~/.config/cadenza/config.toml`.
pub fn default_config_path() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|d| d.join("cadenza").join("config.toml"))
}

/// Reads a config file; a missing default file is no error, a missing named one is.
pub fn read_config(path: &Path, named: bool) -> Result<FileConfig, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            CliError::Usage(format!("config file {}: {}", path.display(), e.message()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => Ok(FileConfig::default()),
        Err(e) => Err(CliError::Usage(format!(
            "cannot read config file {}: {e}",
            path.display()
        ))),
    }
}

pub struct Client {
    base: String,
    token: Option<SecretString>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, token: Option<SecretString>) -> Result<Client, CliError> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--url {base:?} is not an http:// or https:// URL"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            // The admin closes a connection idle for 10 s; never reuse one idle that long.
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CliError::Usage(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client { base, token, http })
    }

    /// Sends a request; the JSON answer on 2xx, else the admin's error.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let (status, value) = self.exchange(method, path, body).await?;
        if status.is_success() {
            return Ok(value);
        }
        Err(Self::api_error(status, &value))
    }

    /// Sends a request; the status and the JSON answer, whatever the status (an answer that is
    /// not JSON is a string). Only a transport failure is an error.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), CliError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t.expose_secret());
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| CliError::Unreachable {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| CliError::Unreachable {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, value))
    }

    /// The admin's error answer as a [`CliError`].
    pub fn api_error(status: StatusCode, value: &Value) -> CliError {
        let code = value["error"]["code"]
            .as_str()
            .unwrap_or("http_error")
            .to_owned();
        let mut message = value["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("the admin answered {status}"));
        if status == StatusCode::UNAUTHORIZED {
            message.push_str(" (set CADENZA_API_TOKEN, --token, or token in the config file)");
        }
        CliError::Api {
            status,
            code,
            message,
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        self.call(Method::POST, path, body).await
    }
}
