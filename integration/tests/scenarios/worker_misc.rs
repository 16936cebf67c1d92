//! What a user sees of a run while it runs (its log so far), and of a trigger that reached a
//! worker without a handler for its job type.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::{client_config, list_topics, produce, wait_for, Cluster};
use chrono::Utc;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_running_run_shows_its_log_so_far() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _w = cluster
        .spawn_worker("demo.shell=shell", "shell", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let job = api
        .create_job(
            &json!({"name": "talks slowly", "job_type": "demo.shell", "schedule": {"kind": "none"},
               "params": "echo first-line; sleep 4; echo second-line", "timeout_ms": 20000}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
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
    let done = api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
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
    let orphan = api.create_job(&json!({"name": "nobody serves me", "job_type": "demo.unserved", "schedule": {"kind": "none"}})).await.unwrap();
    let echo = api
        .create_job(
            &json!({"name": "served", "job_type": "demo.echo", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(orphan).await.unwrap();
    api.wait_run_status(id, "published", WAIT).await.unwrap();
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
    let ok = api.trigger_now(echo).await.unwrap();
    api.wait_run_status(ok, "succeeded", WAIT).await.unwrap();
    let (_, again) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(again["status"], "failed");
    assert_eq!(again["attempt"], 1, "not retried: {again}");
}

/// A partition whose progress record cannot be read when it is assigned (here the group's
/// pointer names a record that is not one) may hold triggers an earlier owner ran: they run as
/// new attempts, and the worker says why.
#[tokio::test]
async fn triggers_of_a_partition_whose_progress_cannot_be_read_run_as_new_attempts() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};

    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let job = api
        .create_job(
            &json!({"name": "unknown past", "job_type": "misc.past", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let brokers = cluster.brokers();
    let prefix = cluster.topic_prefix();
    // The admin creates the progress topic (at its replication factor) with its other topics.
    let progress = format!("{prefix}.progress");
    let topics = list_topics(&brokers).await.unwrap();
    assert!(topics.contains(&progress), "{topics:?}");
    // Keyed: the progress topic is compacted, and Kafka refuses a record without a key there.
    let (_, at) = produce(
        &brokers,
        &progress,
        Some(0),
        Some(b"not a progress key"),
        b"not a progress record",
    )
    .await
    .unwrap();
    let pointers: BaseConsumer = client_config(&brokers)
        .set("group.id", format!("{}~progress", cluster.group("past")))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..6 {
        tpl.add_partition_offset(
            &format!("{prefix}.trigger.misc.past"),
            p,
            Offset::Offset(at),
        )
        .unwrap();
    }
    pointers.commit(&tpl, CommitMode::Sync).unwrap();

    let id = api.trigger_now(job).await.unwrap();
    let w = cluster
        .spawn_worker("misc.past=noop", "past", &[])
        .await
        .unwrap();
    let run = api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    assert_eq!(run["attempt"], 2, "{run}");
    assert!(
        w.log().contains("progress could not be read"),
        "{}",
        w.log_tail(40)
    );
}
