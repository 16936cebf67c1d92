//! Block strategies on a real worker: a job whose runs take 1 s gets manual triggers every
//! 200 ms, and every run ends exactly as its job's strategy says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{create_job, quiesce, time};
use cadenza_integration::{Cluster, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const RUN_MS: u64 = 1000;
const TRIGGERS: usize = 4;
const GAP: Duration = Duration::from_millis(200);

/// Runs `TRIGGERS` manual triggers of a `sleep 1000` job with `block`, 200 ms apart, on one
/// worker; returns the runs by trigger id.
async fn scenario(block: &str) -> Vec<Value> {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let worker = cluster
        .spawn_worker("demo.sleep=sleep", "blocks", &[])
        .await
        .unwrap();
    let job = create_job(
        api,
        json!({"name": block, "job_type": "demo.sleep", "params": RUN_MS.to_string(),
               "block": block, "schedule": {"kind": "none"}}),
    )
    .await;
    // The worker must own the topic's partitions before the first trigger.
    worker
        .wait_for_log(".trigger.demo.sleep[", Duration::from_secs(60))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..TRIGGERS {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{job}/trigger"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        ids.push(body["trigger_ids"][0].as_i64().unwrap());
        tokio::time::sleep(GAP).await;
    }
    let runs = quiesce(api, &[job], Duration::from_secs(60)).await;
    assert_eq!(runs.len(), TRIGGERS, "{runs:?}");
    for r in &runs {
        eprintln!(
            "run {} {} started {} finished {} {}",
            r["id"], r["status"], r["started_at"], r["finished_at"], r["message"]
        );
    }
    runs
}

fn interval(r: &Value) -> (DateTime<Utc>, DateTime<Utc>) {
    (time(&r["started_at"]), time(&r["finished_at"]))
}

/// No two runs that started overlap in time.
fn assert_no_overlap(runs: &[&Value]) {
    let mut spans: Vec<_> = runs.iter().map(|r| interval(r)).collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {w:?}");
    }
}

fn with_status<'a>(runs: &'a [Value], status: &str) -> Vec<&'a Value> {
    runs.iter().filter(|r| r["status"] == status).collect()
}

#[tokio::test]
async fn serial_execution_runs_every_trigger_in_order_one_at_a_time() {
    let runs = scenario("serial_execution").await;
    assert_eq!(with_status(&runs, "succeeded").len(), TRIGGERS, "{runs:?}");
    let all: Vec<&Value> = runs.iter().collect();
    assert_no_overlap(&all);
    // In trigger order, each one whole (about 1 s).
    let starts: Vec<_> = runs.iter().map(|r| interval(r).0).collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    for r in &runs {
        let (s, f) = interval(r);
        assert!((f - s).num_milliseconds() >= RUN_MS as i64 - 5, "{r}");
    }
}

#[tokio::test]
async fn discard_later_discards_triggers_arriving_while_the_job_runs() {
    let runs = scenario("discard_later").await;
    // The first runs; the others arrive within its second and are discarded, never started.
    assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    let discarded = with_status(&runs, "discarded");
    assert_eq!(discarded.len(), TRIGGERS - 1, "{runs:?}");
    for r in &discarded {
        assert!(r["started_at"].is_null(), "{r}");
        assert!(
            r["message"].as_str().unwrap().contains("discard_later"),
            "{r}"
        );
    }
    assert_no_overlap(&with_status(&runs, "succeeded"));
}

#[tokio::test]
async fn cover_early_cancels_the_running_run_for_the_new_one() {
    let runs = scenario("cover_early").await;
    // Each trigger replaces the one running: all but the last are cancelled, cut short.
    let (last, covered) = runs.split_last().unwrap();
    assert_eq!(last["status"], "succeeded", "{runs:?}");
    let (s, f) = interval(last);
    assert!((f - s).num_milliseconds() >= RUN_MS as i64 - 5, "{last}");
    for (r, next) in covered.iter().zip(runs.iter().skip(1)) {
        assert_eq!(r["status"], "cancelled", "{r}");
        let (s, f) = interval(r);
        assert!(
            (f - s).num_milliseconds() < RUN_MS as i64 - 300,
            "not cut short: {r}"
        );
        let msg = r["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("trigger {}", next["id"])) && msg.contains("cover_early"),
            "{r}"
        );
    }
    let all: Vec<&Value> = runs.iter().collect();
    assert_no_overlap(&all);
}
