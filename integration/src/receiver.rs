//! A local HTTP receiver for alarm webhooks: records every POST it gets (path, headers of
//! interest, JSON body), and answers 200 — or, in [`Receiver::hanging`] mode, never answers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::Router;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub idempotency_key: Option<String>,
    pub body: Value,
}

#[derive(Clone)]
struct Shared {
    got: Arc<Mutex<Vec<Received>>>,
    hang: bool,
}

/// Stops serving when dropped.
pub struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

impl Receiver {
    /// Answers every request with 200.
    pub async fn start() -> Result<Receiver> {
        Self::serve(false).await
    }

    /// Accepts requests and records them, but never answers.
    pub async fn hanging() -> Result<Receiver> {
        Self::serve(true).await
    }

    async fn serve(hang: bool) -> Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            got: got.clone(),
            hang,
        };
        let app = Router::new().fallback(record).with_state(shared);
        let stop = CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { until.cancelled().await })
                .await;
        });
        Ok(Receiver { addr, got, stop })
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Everything received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn record(State(s): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let r = Received {
        path: uri.path().to_owned(),
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body,
    };
    if let Ok(mut g) = s.got.lock() {
        g.push(r);
    }
    if s.hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    StatusCode::OK
}
