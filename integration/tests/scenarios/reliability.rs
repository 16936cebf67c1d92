//! One bad job or one odd byte never stops the scheduler: absurd durations are refused (by the
//! API and by the database), a job whose stored schedule cannot be planned stops alone, and a
//! run whose output holds a NUL character ends like any other run, as do the runs after it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::all_runs;
use cadenza_integration::{ApiClient, Cluster, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);
/// Far beyond any duration a job accepts (366 days); `now ± this` overflows a timestamp.
const ABSURD_MS: i64 = 9_000_000_000_000_000_000;

/// Runs of `job` that ended `succeeded`.
async fn succeeded(api: &ApiClient, job: i64) -> usize {
    all_runs(api, job)
        .await
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .count()
}

#[tokio::test]
async fn absurd_durations_are_refused_and_a_job_that_cannot_be_planned_stops_alone() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _w = cluster
        .spawn_worker("rel.ok=noop", "rel", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let healthy = api
        .create_job(&json!({"name": "healthy", "job_type": "rel.ok",
            "schedule": {"kind": "fix_rate", "every_ms": 500}}))
        .await
        .unwrap();

    // The API refuses every duration beyond the bound, naming the field; nothing is written.
    let base = json!({"name": "absurd", "job_type": "rel.ok", "schedule": {"kind": "fix_rate", "every_ms": 500}});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let cases = [
        (
            with("misfire_threshold_ms", json!(ABSURD_MS)),
            "misfire_threshold_ms",
        ),
        (with("timeout_ms", json!(ABSURD_MS)), "timeout_ms"),
        (
            with(
                "schedule",
                json!({"kind": "fix_rate", "every_ms": ABSURD_MS}),
            ),
            "schedule.every_ms",
        ),
        (
            with(
                "schedule",
                json!({"kind": "fix_delay", "delay_ms": ABSURD_MS}),
            ),
            "schedule.delay_ms",
        ),
        (
            with(
                "schedule",
                json!({"kind": "fix_rate", "every_ms": 31_622_400_001i64}),
            ),
            "schedule.every_ms",
        ),
    ];
    for (body, field) in &cases {
        let (status, err) = api.post_json("/api/jobs", body).await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body} → {err}");
        assert_eq!(err["error"]["field"], *field, "{body} → {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("366 days"),
            "the message states the bound: {err}"
        );
    }
    let (status, err) = api
        .patch_json(
            &format!("/api/jobs/{healthy}"),
            &json!({"misfire_threshold_ms": ABSURD_MS}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    // The bound itself is accepted.
    let (status, job) = api
        .post_json(
            "/api/jobs",
            &with("misfire_threshold_ms", json!(31_622_400_000i64)),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    api.delete(&format!("/api/jobs/{}", job["id"]))
        .await
        .unwrap();
    let (_, jobs) = api.get_json("/api/jobs").await.unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");

    // The database refuses them from any other writer too.
    let pool = cluster.pool().await.unwrap();
    for column in ["misfire_threshold_ms", "timeout_ms"] {
        let r = sqlx::query(&format!("UPDATE jobs SET {column} = $1 WHERE id = $2"))
            .bind(ABSURD_MS)
            .bind(healthy)
            .execute(&pool)
            .await;
        assert!(r.is_err(), "the database accepted an absurd {column}");
    }

    // A job whose stored schedule cannot be planned (as an older version could store it): it
    // stops firing, and every other job goes on.
    let poison = api
        .create_job(&json!({"name": "poison", "job_type": "rel.ok",
            "schedule": {"kind": "fix_rate", "every_ms": 60_000}}))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET schedule = jsonb_set(schedule, '{every_ms}', to_jsonb($1::bigint)), \
         next_fire_at = now() WHERE id = $2",
    )
    .bind(8_000_000_000_000_000i64)
    .bind(poison)
    .execute(&pool)
    .await
    .unwrap();
    admin
        .wait_for_log("the job stops firing until it is edited", WAIT)
        .await
        .unwrap();
    // Measure from a worker that is consuming already: its first assignment can take seconds.
    cadenza_integration::wait_until(WAIT, "the healthy job's first run succeeded", || async {
        Ok(succeeded(api, healthy).await >= 1)
    })
    .await
    .unwrap();
    let before = succeeded(api, healthy).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = succeeded(api, healthy).await;
    assert!(
        after >= before + 6,
        "the healthy 500 ms job ran {} times in 5 s after the poison job came due ({before} → {after}); admin log:\n{}",
        after - before,
        admin.log_tail(40)
    );
    let (_, job) = api.get_json(&format!("/api/jobs/{poison}")).await.unwrap();
    assert_eq!(job["next_fire_at"], Value::Null, "{job}");
    assert!(admin.is_running());
}

#[tokio::test]
async fn a_nul_in_a_runs_output_is_stored_and_holds_up_no_other_result() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _w = cluster
        .spawn_worker("rel.sh=shell", "rel", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let nul = api
        .create_job(&json!({"name": "prints a NUL", "job_type": "rel.sh",
            "params": "printf 'a\\000b'; exit 3", "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let echo = api
        .create_job(&json!({"name": "echo", "job_type": "rel.sh",
            "params": "echo fine", "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let poisoned = api.trigger_now(nul).await.unwrap();
    let mut after = Vec::new();
    for _ in 0..12 {
        after.push(api.trigger_now(echo).await.unwrap());
    }
    let run = api.wait_run_status(poisoned, "failed", WAIT).await.unwrap();
    let log = run["log"].as_str().unwrap_or_default();
    assert!(
        log.contains("a\u{FFFD}b"),
        "the NUL is shown as U+FFFD: {run}"
    );
    for id in after {
        api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    }

    // An event the database refuses even so goes to the DLQ with the reason, and the events
    // after it are stored.
    let results = format!("{}.results", cluster.topic_prefix());
    let last = api.trigger_now(echo).await.unwrap();
    api.wait_run_status(last, "succeeded", WAIT).await.unwrap();
    let refused = json!({"event": "finished", "trigger_id": last, "job_id": echo,
        "worker_id": "w", "group": "g", "partition": 0, "offset": 0, "attempt": 9,
        "status": "failed", "finished_at": "-10000-01-01T00:00:00Z"});
    cadenza_integration::produce(
        &cluster.brokers(),
        &results,
        None,
        Some(last.to_string().as_bytes()),
        refused.to_string().as_bytes(),
    )
    .await
    .unwrap();
    let marker = api.trigger_now(echo).await.unwrap();
    api.wait_run_status(marker, "succeeded", WAIT)
        .await
        .unwrap();
    let (_, again) = api
        .get_json(&format!("/api/triggers/{last}"))
        .await
        .unwrap();
    assert_eq!(again["status"], "succeeded", "{again}");
    let d = cluster.dlq_records(WAIT).await.unwrap().remove(0);
    assert_eq!(d["source_topic"], results, "{d}");
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains("the database refused this result event"),
        "{d}"
    );
}

/// Produces a result event for run `id` (keyed by it, so events of one run keep their order).
async fn produce_result(cluster: &Cluster, id: i64, event: Value) {
    cadenza_integration::produce(
        &cluster.brokers(),
        &format!("{}.results", cluster.topic_prefix()),
        None,
        Some(id.to_string().as_bytes()),
        event.to_string().as_bytes(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_late_result_of_an_earlier_attempt_does_not_win() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    // No worker serves the type: the runs wait, and this test reports their results itself.
    let job = api
        .create_job(&json!({"name": "reported by hand", "job_type": "rel.none",
            "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let run = api.trigger_now(job).await.unwrap();
    let marker = api.trigger_now(job).await.unwrap();
    let run_partition = api.wait_run_status(run, "published", WAIT).await.unwrap()["partition"]
        .as_i64()
        .unwrap();
    let marker_partition = api
        .wait_run_status(marker, "published", WAIT)
        .await
        .unwrap()["partition"]
        .as_i64()
        .unwrap();
    let now = chrono::Utc::now().to_rfc3339();
    // As a worker reports them: from the partition each run was sent to.
    let event = |kind: &str, id: i64, attempt: u32, worker: &str| {
        let partition = if id == run {
            run_partition
        } else {
            marker_partition
        };
        json!({"event": kind, "trigger_id": id, "job_id": job, "worker_id": worker,
               "group": "g", "partition": partition, "offset": 0, "attempt": attempt,
               "started_at": now, "finished_at": now})
    };
    // Attempt 1 started on w1, was redelivered and started again on w2 as attempt 2; then the
    // stalled w1 reports attempt 1 failed.
    produce_result(&cluster, run, event("started", run, 1, "w1")).await;
    produce_result(&cluster, run, event("started", run, 2, "w2")).await;
    let mut late = event("finished", run, 1, "w1");
    late["status"] = json!("failed");
    late["message"] = json!("late");
    produce_result(&cluster, run, late).await;
    // The marker's result, on the same results partition, is applied after those.
    let mut done = event("finished", marker, 1, "w3");
    done["status"] = json!("failed");
    done["retry_requested"] = json!(true);
    produce_result(&cluster, run, done).await;
    let m = api.wait_run_status(marker, "failed", WAIT).await.unwrap();
    let (_, r) = api.get_json(&format!("/api/triggers/{run}")).await.unwrap();
    assert_eq!(
        (&r["status"], &r["attempt"], &r["worker_id"]),
        (&json!("running"), &json!(2), &json!("w2")),
        "a late result of attempt 1 ended attempt 2: {r}"
    );
    // What the handler asked for is on the record.
    assert_eq!(m["retry_requested"], true, "{m}");
    assert_eq!(r["retry_requested"], false, "{r}");
    // Attempt 2's own result ends it.
    let mut own = event("finished", run, 2, "w2");
    own["status"] = json!("succeeded");
    produce_result(&cluster, run, own).await;
    let r = api.wait_run_status(run, "succeeded", WAIT).await.unwrap();
    assert_eq!(r["worker_id"], "w2");
}
