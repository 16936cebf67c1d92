//! What a user sees of a run while it runs (its log so far), and of a trigger that reached a
//! worker without a handler for its job type.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::{wait_for, ApiClient, Cluster, StatusCode};
use chrono::Utc;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

async fn create_job(api: &ApiClient, body: Value) -> i64 {
    let (status, job) = api.post_json("/api/jobs", &body).await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    job["id"].as_i64().unwrap()
}

async fn trigger(api: &ApiClient, job: i64) -> i64 {
    let (status, body) = api
        .post_empty(&format!("/api/jobs/{job}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["trigger_ids"][0].as_i64().unwrap()
}

#[tokio::test]
async fn a_running_run_shows_its_log_so_far() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _w = cluster
        .spawn_worker("demo.shell=shell", "shell", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let job = create_job(
        api,
        json!({"name": "talks slowly", "job_type": "demo.shell", "schedule": {"kind": "none"},
               "params": "echo first-line; sleep 4; echo second-line", "timeout_ms": 20000}),
    )
    .await;
    let id = trigger(api, job).await;
    let running = wait_for(
        WAIT,
        "the first line while the run is running",
        || async move {
            let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
            let log = r["log"].as_str().unwrap_or_default();
            Ok((r["status"] == "running" && log.contains("first-line")).then_some(r))
        },
    )
    .await
    .unwrap();
    assert!(
        !running["log"].as_str().unwrap().contains("second-line"),
        "{running}"
    );
    let done = wait_for(WAIT, "the run to succeed", || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        Ok((r["status"] == "succeeded").then_some(r))
    })
    .await
    .unwrap();
    let log = done["log"].as_str().unwrap();
    assert!(
        log.contains("first-line") && log.contains("second-line"),
        "{done}"
    );
}

#[tokio::test]
async fn a_trigger_without_a_handler_is_recorded_failed_not_retried() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let _w = cluster
        .spawn_worker("demo.echo=noop", "echo", &[])
        .await
        .unwrap();
    // A run of a job type nobody serves, then its trigger delivered to the demo.echo workers, as
    // a deployment that points the wrong topic at them would.
    let orphan = create_job(
        api,
        json!({"name": "nobody serves me", "job_type": "demo.unserved", "schedule": {"kind": "none"}}),
    )
    .await;
    let echo = create_job(
        api,
        json!({"name": "served", "job_type": "demo.echo", "schedule": {"kind": "none"}}),
    )
    .await;
    let id = trigger(api, orphan).await;
    wait_for(WAIT, "the orphan run to be published", || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        Ok((r["status"] == "published").then_some(()))
    })
    .await
    .unwrap();
    let record = json!({"type": "trigger", "trigger_id": id, "job_id": orphan, "job_type": "demo.unserved",
        "kind": "manual", "fire_time": Utc::now().to_rfc3339(), "block": "serial_execution",
        "published_at": Utc::now().to_rfc3339()});
    let topic = format!("{}.trigger.demo.echo", cluster.topic_prefix());
    cadenza_integration::produce(
        &cluster.brokers(),
        &topic,
        Some(0),
        None,
        record.to_string().as_bytes(),
    )
    .await
    .unwrap();
    let failed = wait_for(
        WAIT,
        "the orphan run to be recorded failed",
        || async move {
            let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
            Ok((r["status"] == "failed").then_some(r))
        },
    )
    .await
    .unwrap();
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("demo.unserved"),
        "names the job type: {message}"
    );
    // The worker goes on with what it serves.
    let ok = trigger(api, echo).await;
    wait_for(WAIT, "a served run to succeed", || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{ok}")).await?;
        Ok((r["status"] == "succeeded").then_some(()))
    })
    .await
    .unwrap();
    let (_, again) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(again["status"], "failed");
    assert_eq!(again["attempt"], 1, "not retried: {again}");
}
