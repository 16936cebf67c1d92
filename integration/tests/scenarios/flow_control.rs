//! Flow control across the cluster: a concurrency group holds its limit across workers and
//! releases its queue by priority; its API refuses what it cannot hold.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{create_job, quiesce, time};
use cadenza_integration::{ApiClient, Cluster, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const JOB_TYPE: &str = "demo.sleep";
const RUN_MS: i64 = 1000;

/// The most runs whose [started, finished) intervals overlap at one moment.
fn most_at_once(runs: &[&Value]) -> usize {
    let mut edges: Vec<(DateTime<Utc>, i32)> = Vec::new();
    for r in runs {
        edges.push((time(&r["started_at"]), 1));
        edges.push((time(&r["finished_at"]), -1));
    }
    // An end and a start at the same instant do not overlap: ends first.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

async fn post(api: &ApiClient, path: &str, body: Value) -> (StatusCode, Value) {
    api.post_json(path, &body).await.unwrap()
}

#[tokio::test]
async fn a_group_of_limit_two_runs_thirty_runs_on_three_workers_two_at_a_time_by_priority() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let (status, group) = post(
        api,
        "/api/concurrency-groups",
        json!({"name": "warehouse", "limit": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{group}");
    assert_eq!(group["in_flight"], 0, "{group}");
    // A job naming a group that does not exist is refused, naming the field.
    let (status, body) = post(
        api,
        "/api/jobs",
        json!({"name": "x", "job_type": JOB_TYPE, "schedule": {"kind": "none"},
               "concurrency_group": "nowhere"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "concurrency_group", "{body}");
    // Three jobs of three priorities; the lowest is triggered first.
    let mut jobs = Vec::new();
    for (name, priority) in [("low", 0), ("mid", 5), ("high", 10)] {
        jobs.push((
            create_job(
                api,
                json!({"name": name, "job_type": JOB_TYPE, "params": RUN_MS.to_string(),
                       "schedule": {"kind": "none"}, "concurrency_group": "warehouse",
                       "priority": priority, "route": "round"}),
            )
            .await,
            priority,
        ));
    }
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            cluster
                .spawn_worker(&format!("{JOB_TYPE}=sleep"), "flow", &[])
                .await
                .unwrap(),
        );
    }
    for w in &workers {
        w.wait_for_log(&format!(".trigger.{JOB_TYPE}["), Duration::from_secs(60))
            .await
            .unwrap();
    }
    for (job, _) in &jobs {
        for _ in 0..10 {
            let (status, body) = api
                .post_empty(&format!("/api/jobs/{job}/trigger"))
                .await
                .unwrap();
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
    }
    // Waiting runs show as queued, and the group counts them.
    let (_, g) = api
        .get_json("/api/concurrency-groups/warehouse")
        .await
        .unwrap();
    assert!(g["in_flight"].as_i64().unwrap() <= 2, "{g}");
    assert!(g["queued"].as_i64().unwrap() >= 20, "{g}");
    let (_, queued) = api
        .get_json(&format!("/api/triggers?status=queued&job_id={}", jobs[0].0))
        .await
        .unwrap();
    assert!(
        !queued["triggers"].as_array().unwrap().is_empty(),
        "{queued}"
    );
    let ids: Vec<i64> = jobs.iter().map(|(j, _)| *j).collect();
    let runs = quiesce(api, &ids, Duration::from_secs(120)).await;
    assert_eq!(runs.len(), 30);
    for r in &runs {
        assert_eq!(r["status"], "succeeded", "{r}");
    }
    let all: Vec<&Value> = runs.iter().collect();
    assert_eq!(most_at_once(&all), 2, "never more than the limit at once");
    // They ran on more than one worker: the limit held across the cluster.
    let ran_on: std::collections::BTreeSet<&str> = runs
        .iter()
        .filter_map(|r| r["worker_id"].as_str())
        .collect();
    assert!(ran_on.len() > 1, "{ran_on:?}");
    // After the first two (released while the others were still being triggered), the runs
    // started by priority: every run of a higher priority before any of a lower one.
    let priority = |r: &Value| {
        jobs.iter()
            .find(|(j, _)| r["job_id"] == *j)
            .map(|(_, p)| *p)
            .unwrap()
    };
    let mut by_start: Vec<&Value> = runs.iter().collect();
    by_start.sort_by_key(|r| time(&r["started_at"]));
    let order: Vec<i32> = by_start.iter().skip(2).map(|r| priority(r)).collect();
    // Two runs released together at a priority boundary may start in either order.
    let mut out_of_order = 0;
    for w in order.windows(2) {
        if w[0] < w[1] {
            out_of_order += 1;
        }
    }
    assert!(out_of_order <= 1, "started by priority: {order:?}");
    let (_, g) = api
        .get_json("/api/concurrency-groups/warehouse")
        .await
        .unwrap();
    assert_eq!(
        (g["in_flight"].as_i64(), g["queued"].as_i64()),
        (Some(0), Some(0)),
        "{g}"
    );
    // A group with jobs cannot be deleted; once they left it, it can.
    let (status, body) = api
        .delete("/api/concurrency-groups/warehouse")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "group_in_use", "{body}");
    for (job, _) in &jobs {
        let (status, body) = api
            .patch_json(
                &format!("/api/jobs/{job}"),
                &json!({"concurrency_group": null}),
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = api
        .delete("/api/concurrency-groups/warehouse")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

#[tokio::test]
async fn the_group_api_refuses_what_it_cannot_hold() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    for (body, field) in [
        (json!({"name": "a b", "limit": 1}), "name"),
        (json!({"name": "g", "limit": 0}), "limit"),
        (
            json!({"name": "g", "limit": 1, "rate": {"per_second": 0}}),
            "rate.per_second",
        ),
        (
            json!({"name": "g", "limit": 1, "rate": {"per_second": 1, "burst": -1}}),
            "rate.burst",
        ),
    ] {
        let (status, err) = post(api, "/api/concurrency-groups", body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {err}");
        assert_eq!(err["error"]["field"], field, "{body}: {err}");
    }
    let (status, _) = post(
        api,
        "/api/concurrency-groups",
        json!({"name": "g", "limit": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, err) = post(
        api,
        "/api/concurrency-groups",
        json!({"name": "g", "limit": 3}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"]["code"], "group_exists", "{err}");
    let (status, g) = api
        .patch_json(
            "/api/concurrency-groups/g",
            &json!({"limit": 4, "rate": {"per_second": 5, "burst": 1}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{g}");
    assert_eq!(
        (g["limit"].as_i64(), g["rate"]["per_second"].as_f64()),
        (Some(4), Some(5.0)),
        "{g}"
    );
    let (status, g) = api
        .patch_json("/api/concurrency-groups/g", &json!({"rate": null}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{g}");
    assert!(g["rate"].is_null(), "{g}");
    let (status, err) = api.get_json("/api/concurrency-groups/none").await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    let (_, list) = api.get_json("/api/concurrency-groups").await.unwrap();
    assert_eq!(list["groups"][0]["name"], "g", "{list}");
    // Every change is audited.
    let (_, audit) = api.get_json("/api/audit").await.unwrap();
    let actions: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["action"].as_str())
        .filter(|a| a.starts_with("group."))
        .collect();
    assert_eq!(
        actions,
        ["group.update", "group.update", "group.create"],
        "{audit}"
    );
}
