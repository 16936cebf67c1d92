//! The HTTP server: the API's router on hyper, with the limits a server facing a hostile network
//! needs and `axum::serve` does not set. A client has 10 s to send a request's headers (a
//! connection that trickles them is closed; the body's time is bounded by the API's input
//! layer), and a stop waits at most [`STOP_GRACE`] for open connections before closing them.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for requests in flight (and open log streams, which end on stop) before
/// their connections are closed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown`, then lets requests in flight finish for up to
/// [`STOP_GRACE`]. Each request carries `ConnectInfo<SocketAddr>` of its client.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            app.clone()
                .layer(Extension(ConnectInfo::<SocketAddr>(client))),
        );
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %client, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    let open = graceful.count();
    if tokio::time::timeout(STOP_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = open,
            grace_s = STOP_GRACE.as_secs(),
            "HTTP connections still open at the end of the stop's grace are closed"
        );
    }
}
