//! XXL-JOB's executor protocol against a real third-party executor, pyxxl (PyPI, installed by
//! scripts/install-deps), unchanged: it registers with Cadenza's admin side, takes runs from the
//! client, reports results by callback, times out, is killed, tells busy from idle, serves its
//! log. And executors that answer garbage, hang or refuse the token fail calls with that reason.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::sync::Arc;
use std::time::Duration;

use cadenza_integration::{cadenza_home, free_port, wait_for_port, Cluster};
use cadenza_worker::xxl::admin_side::{self, AdminSide};
use cadenza_worker::xxl::protocol::{
    CallError, CallbackParam, ExecutorClient, LogParam, TriggerParam, DEFAULT_CALL_TIMEOUT,
};

const TOKEN: &str = "bridge-test-token";

fn pyxxl_python() -> std::path::PathBuf {
    std::env::var_os("CADENZA_PYXXL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| cadenza_home().join("pyxxl/bin/python"))
}

/// Serves `router` on a free loopback port; returns its base URL.
async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn trigger(log_id: i64, handler: &str, params: &str, timeout_s: i64) -> TriggerParam {
    TriggerParam {
        job_id: log_id * 10,
        executor_handler: handler.into(),
        executor_params: params.into(),
        executor_block_strategy: "SERIAL_EXECUTION".into(),
        executor_timeout: timeout_s,
        log_id,
        log_date_time: chrono::Utc::now().timestamp_millis(),
        glue_type: "BEAN".into(),
        glue_source: String::new(),
        glue_updatetime: 0,
        broadcast_index: 0,
        broadcast_total: 1,
    }
}

async fn result(
    rx: tokio::sync::oneshot::Receiver<CallbackParam>,
    within: Duration,
) -> CallbackParam {
    tokio::time::timeout(within, rx)
        .await
        .expect("no callback in time")
        .expect("callback channel closed")
}

#[tokio::test]
async fn pyxxl_executor_speaks_with_cadenza() {
    let cluster = Cluster::start().await.unwrap();
    // The executor listens on loopback, which the default policy refuses.
    let policy = cadenza_worker::net_policy::AddressPolicy::new(
        vec!["127.0.0.1/32".parse().unwrap()],
        Vec::new(),
        cadenza_worker::xxl::protocol::EXECUTOR_SETTINGS,
    );
    let side = Arc::new(AdminSide::new(
        Some(TOKEN.into()),
        admin_side::DEFAULT_DEAD_AFTER,
        policy,
    ));
    let admin = serve(admin_side::router(side.clone())).await;
    let python = pyxxl_python();
    let logs = cluster.dir().join("pyxxl");
    std::fs::create_dir_all(&logs).unwrap();
    let script = cadenza_integration::manifest_dir().join("tests/xxl/executor.py");
    let script = script.to_str().expect("the checkout path is UTF-8");

    // The executor registers itself (its admin address: ours, under the usual context path).
    let port = free_port().unwrap();
    let exec = cluster
        .spawn_process(
            "pyxxl",
            &python,
            &[
                script,
                &format!("{admin}/xxl-job-admin/api/"),
                "billing-app",
                &port.to_string(),
                TOKEN,
                logs.to_str().unwrap(),
            ],
        )
        .unwrap();
    wait_for_port(port, Duration::from_secs(20)).await.unwrap();
    let address = format!("http://127.0.0.1:{port}");
    cadenza_integration::wait_until(Duration::from_secs(10), "the executor registers", || {
        let side = side.clone();
        let address = address.clone();
        async move { Ok(side.registry.addresses("billing-app") == [address]) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", exec.log_tail(30)));

    let client = ExecutorClient::new(Some(TOKEN.into()), DEFAULT_CALL_TIMEOUT).unwrap();
    assert_eq!(client.beat(&address).await.unwrap().code, 200);

    // Success, with the handler's return value as the message, and its log.
    let rx = side.callbacks.expect(1);
    let t = trigger(1, "echoHandler", "invoice-42", 0);
    client.run(&address, &t).await.unwrap();
    let cb = result(rx, Duration::from_secs(10)).await;
    assert_eq!(
        (cb.handle_code, cb.message().as_deref()),
        (200, Some("echo invoice-42"))
    );
    let log = client
        .log(
            &address,
            &LogParam {
                log_date_tim: t.log_date_time,
                log_id: 1,
                from_line_num: 1,
            },
        )
        .await
        .unwrap();
    assert!(log
        .log_content
        .unwrap_or_default()
        .contains("echo got invoice-42"));

    // Failure, with the exception's message.
    let rx = side.callbacks.expect(2);
    client
        .run(&address, &trigger(2, "failHandler", "x=1", 0))
        .await
        .unwrap();
    let cb = result(rx, Duration::from_secs(10)).await;
    assert_eq!(cb.handle_code, 500);
    assert!(cb.message().unwrap().contains("bad input: x=1"), "{cb:?}");

    // The executor's own timeout (1 s): pyxxl says 500 TimeoutError (Java says 502).
    let rx = side.callbacks.expect(3);
    client
        .run(&address, &trigger(3, "sleepHandler", "30", 1))
        .await
        .unwrap();
    let cb = result(rx, Duration::from_secs(10)).await;
    assert!([500, 502].contains(&cb.handle_code), "{cb:?}");
    assert!(cb.message().unwrap().contains("Timeout"), "{cb:?}");

    // Busy and idle, then a kill: the run ends with a callback, and a late repeat of it is
    // recognised rather than counted.
    let rx = side.callbacks.expect(4);
    let long = trigger(4, "sleepHandler", "30", 0);
    client.run(&address, &long).await.unwrap();
    let busy = client.idle_beat(&address, long.job_id).await.unwrap_err();
    assert!(
        matches!(busy, CallError::Refused { code: 500, .. }),
        "{busy}"
    );
    assert_eq!(client.idle_beat(&address, 999).await.unwrap().code, 200);
    client.kill(&address, long.job_id).await.unwrap();
    let cb = result(rx, Duration::from_secs(10)).await;
    assert_eq!(cb.handle_code, 500, "{cb:?}");
    assert!(cb.message().unwrap().contains("Cancel"), "{cb:?}");

    // An unknown handler is refused at once, with the executor's reason.
    let e = client
        .run(&address, &trigger(5, "noSuchHandler", "", 0))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("noSuchHandler"), "{e}");

    // A wrong token: the executor refuses the call; the admin side refuses its registration.
    let wrong = ExecutorClient::new(Some("guess".into()), DEFAULT_CALL_TIMEOUT).unwrap();
    let e = wrong
        .run(&address, &trigger(6, "echoHandler", "", 0))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("The access token is wrong."), "{e}");
    let port2 = free_port().unwrap();
    let intruder = cluster
        .spawn_process(
            "pyxxl-wrong-token",
            &python,
            &[
                script,
                &format!("{admin}/xxl-job-admin/api/"),
                "billing-app",
                &port2.to_string(),
                "guess",
                logs.to_str().unwrap(),
            ],
        )
        .unwrap();
    wait_for_port(port2, Duration::from_secs(20)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(side.registry.addresses("billing-app"), [address.as_str()]);
    intruder.kill_9().unwrap();

    // Stopped gracefully, it deregisters.
    exec.terminate().await.unwrap();
    cadenza_integration::wait_until(Duration::from_secs(10), "the executor deregisters", || {
        let side = side.clone();
        async move { Ok(side.registry.addresses("billing-app").is_empty()) }
    })
    .await
    .unwrap();
}

/// Executors that answer garbage, an HTTP error, or nothing in time: the call fails saying so.
#[tokio::test]
async fn broken_executors_fail_calls_with_the_reason() {
    use axum::routing::post;
    let garbage =
        serve(axum::Router::new().route("/run", post(|| async { "<html>oops</html>" }))).await;
    let error = serve(axum::Router::new().route(
        "/run",
        post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "stack trace") }),
    ))
    .await;
    let slow = serve(axum::Router::new().route(
        "/run",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "{}"
        }),
    ))
    .await;
    let closed = format!("http://127.0.0.1:{}", free_port().unwrap());
    let client = ExecutorClient::new(None, Duration::from_millis(500)).unwrap();
    let t = trigger(1, "h", "", 0);

    let e = client.run(&garbage, &t).await.unwrap_err();
    assert!(
        matches!(e, CallError::Garbage { .. }) && e.to_string().contains("<html>oops"),
        "{e}"
    );
    let e = client.run(&error, &t).await.unwrap_err();
    assert!(
        e.to_string().contains("HTTP 500") && e.to_string().contains("stack trace"),
        "{e}"
    );
    let started = std::time::Instant::now();
    let e = client.run(&slow, &t).await.unwrap_err();
    assert!(
        matches!(e, CallError::TimedOut { .. }) && e.is_gone(),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let e = client.run(&closed, &t).await.unwrap_err();
    assert!(
        matches!(e, CallError::Unreachable { .. }) && e.is_gone(),
        "{e}"
    );
}
