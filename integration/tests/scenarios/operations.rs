//! Operations end to end: retries with backoff, child jobs (also after a broadcast), lost runs of
//! a killed worker, webhook alarms, API triggers with a delay, and cancelling runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::time::Duration;

use cadenza_integration::scenario::{all_runs, time};
use cadenza_integration::{
    read_topic_to_end, wait_for, AdminHandle, ApiClient, Cluster, Receiver, SmtpSink, StatusCode,
    WorkerHandle,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// A cluster with one admin (with `admin_env`) and one worker serving `serve` in `group`.
async fn start(
    admin_env: &[(&str, &str)],
    serve: &str,
    group: &str,
) -> (Cluster, AdminHandle, WorkerHandle) {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(admin_env).await.unwrap();
    let worker = cluster.spawn_worker(serve, group, &[]).await.unwrap();
    (cluster, admin, worker)
}

/// Waits until `job` has `n` runs that all reached one of `statuses`; returns them oldest first.
async fn wait_runs(api: &ApiClient, job: i64, n: usize, statuses: &[&str]) -> Vec<Value> {
    wait_for(
        WAIT,
        &format!("{n} runs of job {job} in {statuses:?}"),
        || async move {
            let r = all_runs(api, job).await;
            let done = r.len() >= n
                && r.iter()
                    .all(|x| statuses.contains(&x["status"].as_str().unwrap_or_default()));
            Ok(done.then_some(r))
        },
    )
    .await
    .unwrap()
}

/// Waits until the first alarm of run `id` is marked `failed` (given up) and returns it.
async fn given_up_alarm(api: &ApiClient, id: i64) -> Value {
    wait_for(
        WAIT,
        &format!("the alarm of run {id} to be given up"),
        || async move {
            let (_, a) = api
                .get_json(&format!("/api/alarms?trigger_id={id}"))
                .await?;
            Ok(a["alarms"]
                .as_array()
                .and_then(|a| a.first().cloned())
                .filter(|a| a["status"] == "failed"))
        },
    )
    .await
    .unwrap()
}

fn ms(d: chrono::Duration) -> i64 {
    d.num_milliseconds()
}

#[tokio::test]
async fn a_failing_job_is_retried_with_fixed_and_exponential_backoff() {
    let (_cluster, admin, _w) = start(&[], "ops.fail=fail", "ops").await;
    let api = &admin.api();
    let fixed = api
        .create_job(
            &json!({"name": "fixed", "job_type": "ops.fail", "schedule": {"kind": "none"},
            "params": "boom", "retries": 2, "retry_backoff_ms": 1000}),
        )
        .await
        .unwrap();
    // 700 ms, then 1400 ms capped at 1000 ms.
    let exp = api
        .create_job(
            &json!({"name": "exponential", "job_type": "ops.fail", "schedule": {"kind": "none"},
            "params": "boom", "retries": 2, "retry_backoff_ms": 700,
            "retry_backoff": "exponential", "retry_backoff_max_ms": 1000}),
        )
        .await
        .unwrap();
    let (_, job) = api.get_json(&format!("/api/jobs/{exp}")).await.unwrap();
    assert_eq!(job["retry_backoff"], "exponential", "{job}");
    api.trigger_now(fixed).await.unwrap();
    api.trigger_now(exp).await.unwrap();

    for (job, delays) in [(fixed, [1000, 1000]), (exp, [700, 1000])] {
        // The last retry's failure schedules nothing more, in the transaction that records it.
        let runs = wait_runs(api, job, 3, &["failed"]).await;
        assert_eq!(runs.len(), 3, "retries 2 runs 3 times: {runs:#?}");
        let kinds: Vec<&str> = runs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["manual", "retry", "retry"]);
        let nos: Vec<i64> = runs
            .iter()
            .map(|r| r["retry_no"].as_i64().unwrap())
            .collect();
        assert_eq!(nos, [0, 1, 2]);
        for k in 1..3 {
            let (prev, next) = (&runs[k - 1], &runs[k]);
            assert_eq!(
                next["parent_id"], prev["id"],
                "a retry links to the failed run"
            );
            assert!(next["message"].as_str().unwrap().contains("boom"));
            // And the failed run links to its retry.
            let (_, one) = api
                .get_json(&format!("/api/triggers/{}", prev["id"]))
                .await
                .unwrap();
            assert_eq!(
                one["follow_ups"],
                json!([{"id": next["id"], "job_id": job, "kind": "retry", "status": "failed"}]),
                "{one}"
            );
            let gap = ms(time(&next["started_at"]) - time(&prev["finished_at"]));
            let want = delays[k - 1];
            assert!(
                gap >= want - 20 && gap < want + 3000,
                "job {job}: retry {k} started {gap} ms after the failure, backoff {want} ms"
            );
        }
        // The daily report counts every run that ended (around midnight UTC, on two days).
        assert_eq!(api.reported_runs(job, "failed").await.unwrap(), 3);
        assert_eq!(api.reported_runs(job, "succeeded").await.unwrap(), 0);
    }
    // Day totals alone (what the dashboard's chart reads) match the per-job rows.
    let (_, full) = api.get_json("/api/report").await.unwrap();
    let (_, totals) = api.get_json("/api/report?rows=false").await.unwrap();
    assert_eq!(totals["days"], full["days"], "{totals}");
    assert_eq!(totals["rows"], json!([]));
    let failed: i64 = full["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["by_status"]["failed"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(failed, 6, "three failed runs of each job: {full}");
    let (status, bad) = api.get_json("/api/report?from=yesterday").await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["error"]["field"], "from");
}

#[tokio::test]
async fn children_fire_once_on_success_and_not_on_failure() {
    let (_cluster, admin, _w) = start(&[], "ops.ok=noop,ops.fail=fail", "ops").await;
    let api = &admin.api();
    let none = |name: &str, job_type: &str| json!({"name": name, "job_type": job_type, "schedule": {"kind": "none"}});
    let c1 = api.create_job(&none("c1", "ops.ok")).await.unwrap();
    let c2 = api.create_job(&none("c2", "ops.ok")).await.unwrap();
    let c3 = api.create_job(&none("c3", "ops.ok")).await.unwrap();
    let mut p = none("parent", "ops.ok");
    p["children"] = json!([c1, c2]);
    let parent = api.create_job(&p).await.unwrap();
    let mut f = none("failing parent", "ops.fail");
    f["children"] = json!([c3]);
    let failing = api.create_job(&f).await.unwrap();

    let run = api.trigger_now(parent).await.unwrap();
    api.wait_run_status(run, "succeeded", WAIT).await.unwrap();
    for c in [c1, c2] {
        let runs = wait_runs(api, c, 1, &["succeeded"]).await;
        assert_eq!(runs.len(), 1, "{runs:#?}");
        assert_eq!(runs[0]["kind"], "child");
        assert_eq!(runs[0]["parent_id"], run);
    }
    let bad = api.trigger_now(failing).await.unwrap();
    api.wait_run_status(bad, "failed", WAIT).await.unwrap();
    // Children are fired in the transaction that records the parent's end: none for a failure.
    assert!(all_runs(api, c3).await.is_empty());
    for c in [c1, c2] {
        assert_eq!(all_runs(api, c).await.len(), 1, "child {c} fired once");
    }
    let (_, parent_run) = api.get_json(&format!("/api/triggers/{run}")).await.unwrap();
    let follow: Vec<(i64, &str)> = parent_run["follow_ups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["job_id"].as_i64().unwrap(), f["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(follow, [(c1, "child"), (c2, "child")], "{parent_run}");
    let (_, bad_run) = api.get_json(&format!("/api/triggers/{bad}")).await.unwrap();
    assert_eq!(bad_run["follow_ups"], json!([]));

    // Bad children: a job that does not exist, itself, a cycle.
    let mut missing = none("dangling", "ops.ok");
    missing["children"] = json!([999_999]);
    let (status, body) = api.post_json("/api/jobs", &missing).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "children", "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("999999"));
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{c1}"), &json!({"children": [c1]}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{c1}"), &json!({"children": [parent]}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "children");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cycle") && message.contains(&format!("{c1} → {parent} → {c1}")),
        "{message}"
    );
    let (_, job) = api.get_json(&format!("/api/jobs/{c1}")).await.unwrap();
    assert_eq!(
        job["children"],
        json!([]),
        "a refused change changes nothing"
    );
    // A deleted job is no longer anyone's child, and its runs go with it.
    let c2_run = all_runs(api, c2).await[0]["id"].as_i64().unwrap();
    let (status, _) = api.delete(&format!("/api/jobs/{c2}")).await.unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, job) = api.get_json(&format!("/api/jobs/{parent}")).await.unwrap();
    assert_eq!(job["children"], json!([c1]));
    assert!(all_runs(api, c2).await.is_empty());
    let (status, body) = api
        .get_json(&format!("/api/triggers/{c2_run}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // Two updates that each close half of a cycle, sent at once: never both accepted.
    let x = api.create_job(&none("x", "ops.ok")).await.unwrap();
    let y = api.create_job(&none("y", "ops.ok")).await.unwrap();
    for round in 0..20 {
        let (px, py) = (format!("/api/jobs/{x}"), format!("/api/jobs/{y}"));
        let (bx, by) = (json!({"children": [y]}), json!({"children": [x]}));
        let (a, b) = tokio::join!(api.patch_json(&px, &bx), api.patch_json(&py, &by));
        let statuses = [a.unwrap().0, b.unwrap().0];
        let accepted = statuses.iter().filter(|s| s.is_success()).count();
        assert_eq!(accepted, 1, "round {round}: {statuses:?}");
        for j in [x, y] {
            let (status, _) = api
                .patch_json(&format!("/api/jobs/{j}"), &json!({"children": []}))
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK);
        }
    }
}

#[tokio::test]
async fn a_broadcast_parent_fires_its_child_once_and_a_failed_shard_retries_alone() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_WORKER_DEAD_MS", "2000")])
        .await
        .unwrap();
    let api = &admin.api();
    let child = api
        .create_job(&json!({"name": "after all shards", "job_type": "ops.child", "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    // Shard 0 fails on its first try and succeeds on its retry; shard 1 succeeds at once.
    let marker = cluster.dir().join("shard0-failed-once");
    let script = format!(
        "if [ \"$CADENZA_SHARD_INDEX\" = 0 ] && [ ! -e '{m}' ]; then touch '{m}'; echo first try fails; exit 3; fi; echo shard $CADENZA_SHARD_INDEX ok",
        m = marker.display()
    );
    let parent = api
        .create_job(
            &json!({"name": "broadcast", "job_type": "ops.bc", "schedule": {"kind": "none"},
            "route": "sharding_broadcast", "params": script, "retries": 1, "retry_backoff_ms": 300,
            "children": [child]}),
        )
        .await
        .unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            cluster
                .spawn_worker(
                    "ops.bc=shell,ops.child=noop",
                    "bc",
                    &[("CADENZA_HEARTBEAT_MS", "500")],
                )
                .await
                .unwrap(),
        );
    }
    let ids: Vec<String> = workers.iter().map(|w| w.id().to_owned()).collect();
    let topic = format!("{}.trigger.ops.bc", cluster.topic_prefix());
    api.wait_assignment(&topic, &ids, 6, WAIT).await.unwrap();

    let (status, body) = api
        .post_empty(&format!("/api/jobs/{parent}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["trigger_ids"].as_array().unwrap().len(), 2, "{body}");
    let first = body["trigger_ids"][0].as_i64().unwrap();

    let child_runs = wait_runs(api, child, 1, &["succeeded"]).await;
    let runs = wait_runs(api, parent, 3, &["succeeded", "failed"]).await;
    let summary: Vec<(String, i64, String)> = runs
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["shard_index"].as_i64().unwrap(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = summary.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            ("manual".to_owned(), 0, "failed".to_owned()),
            ("manual".to_owned(), 1, "succeeded".to_owned()),
            ("retry".to_owned(), 0, "succeeded".to_owned()),
        ],
        "only the failed shard is retried: {runs:#?}"
    );
    let retry = runs.iter().find(|r| r["kind"] == "retry").unwrap();
    assert_eq!(retry["shard_total"], 2);
    assert_eq!(child_runs.len(), 1, "{child_runs:#?}");
    assert_eq!(child_runs[0]["kind"], "child");
    assert_eq!(
        child_runs[0]["parent_id"], first,
        "the child of a broadcast links to the fire's first run"
    );
    // The child fired after the last shard succeeded, and only once.
    assert!(time(&child_runs[0]["fire_time"]) >= time(&retry["finished_at"]));
    assert_eq!(all_runs(api, child).await.len(), 1);
}

#[tokio::test]
async fn a_run_on_a_killed_worker_is_lost_then_retried() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[
            ("CADENZA_WORKER_DEAD_MS", "2000"),
            ("CADENZA_LOST_GRACE_MS", "1000"),
        ])
        .await
        .unwrap();
    let api = &admin.api();
    let job = api
        .create_job(
            &json!({"name": "slow", "job_type": "ops.sleep", "schedule": {"kind": "none"},
            "params": "3000", "timeout_ms": 4000, "retries": 1}),
        )
        .await
        .unwrap();
    let env = [("CADENZA_HEARTBEAT_MS", "500")];
    let worker = cluster
        .spawn_worker("ops.sleep=sleep", "lost", &env)
        .await
        .unwrap();
    let topic = format!("{}.trigger.ops.sleep", cluster.topic_prefix());
    api.wait_assignment(&topic, &[worker.id().to_owned()], 6, WAIT)
        .await
        .unwrap();

    let id = api.trigger_now(job).await.unwrap();
    api.wait_run_status(id, "running", WAIT).await.unwrap();
    worker.kill_9().unwrap();

    let lost = api.wait_run_status(id, "lost", WAIT).await.unwrap();
    let message = lost["message"].as_str().unwrap();
    assert!(message.contains(worker.id()), "names the worker: {message}");
    let elapsed = ms(time(&lost["finished_at"]) - time(&lost["started_at"]));
    assert!(
        elapsed >= 4000 + 1000,
        "lost only after timeout + grace: {elapsed} ms"
    );
    // Its retry is published and waits, visibly, for a worker.
    let retry = wait_for(WAIT, "the retry to wait for a worker", || async move {
        let runs = all_runs(api, job).await;
        Ok(runs.into_iter().find(|r| {
            r["kind"] == "retry" && r["status"] == "published" && r["waiting"].is_string()
        }))
    })
    .await
    .unwrap();
    assert_eq!(retry["parent_id"], id);
    assert!(
        retry["waiting"].as_str().unwrap().contains("ops.sleep"),
        "{retry}"
    );

    let _again = cluster
        .spawn_worker("ops.sleep=sleep", "lost", &env)
        .await
        .unwrap();
    let retry_id = retry["id"].as_i64().unwrap();
    api.wait_run_status(retry_id, "succeeded", WAIT)
        .await
        .unwrap();
    let (_, original) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(
        original["status"], "lost",
        "a lost run stays lost: {original}"
    );
    assert_eq!(all_runs(api, job).await.len(), 2);
}

#[tokio::test]
async fn failed_runs_raise_one_webhook_alarm_each_and_a_hanging_receiver_stalls_nothing() {
    let receiver = Receiver::start().await.unwrap();
    let hanging = Receiver::hanging().await.unwrap();
    let alarm_env = [
        ("CADENZA_ALARM_TIMEOUT_MS", "500"),
        ("CADENZA_ALARM_ATTEMPTS", "2"),
        ("CADENZA_ALARM_BACKOFF_MS", "200"),
    ];
    let (_cluster, admin, _w) = start(&alarm_env, "ops.fail=fail,ops.ok=noop", "ops").await;
    let api = &admin.api();
    let failing = api
        .create_job(
            &json!({"name": "alarming", "job_type": "ops.fail", "schedule": {"kind": "none"},
            "params": "disk full", "retries": 1, "alarm_webhook": receiver.url("/hook")}),
        )
        .await
        .unwrap();
    let fine = api
        .create_job(
            &json!({"name": "fine", "job_type": "ops.ok", "schedule": {"kind": "none"},
            "alarm_webhook": receiver.url("/hook")}),
        )
        .await
        .unwrap();

    let ok = api.trigger_now(fine).await.unwrap();
    api.wait_run_status(ok, "succeeded", WAIT).await.unwrap();
    api.trigger_now(failing).await.unwrap();
    let runs = wait_runs(api, failing, 2, &["failed"]).await;
    let failed_ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    let got = wait_for(WAIT, "two alarm POSTs", || async {
        let got = receiver.received();
        Ok((got.len() >= 2).then_some(got))
    })
    .await
    .unwrap();
    assert_eq!(got.len(), 2, "one POST per failed run: {got:#?}");
    let mut alarmed: Vec<i64> = got
        .iter()
        .map(|r| r.body["run"]["id"].as_i64().unwrap())
        .collect();
    alarmed.sort();
    assert_eq!(alarmed, failed_ids);
    for r in &got {
        assert_eq!(r.path, "/hook");
        assert_eq!(r.body["status"], "failed");
        assert_eq!(r.body["job"]["id"], failing);
        assert_eq!(r.body["job"]["name"], "alarming");
        assert!(r.body["message"].as_str().unwrap().contains("disk full"));
        assert!(r.idempotency_key.is_some());
    }
    // The receiver has the POST a moment before the admin records the answer.
    let alarms = wait_for(WAIT, "both alarms recorded sent", || async move {
        let (_, a) = api
            .get_json(&format!("/api/alarms?job_id={failing}"))
            .await?;
        let a = a["alarms"].as_array().cloned().unwrap_or_default();
        Ok((a.len() == 2 && a.iter().all(|x| x["status"] != "pending")).then_some(a))
    })
    .await
    .unwrap();
    let statuses: Vec<&str> = alarms
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["sent", "sent"], "{alarms:#?}");
    assert_eq!(
        api.metric(r#"cadenza_alarms_total{channel="webhook",outcome="sent"}"#)
            .await
            .unwrap(),
        2.0
    );
    let (_, none) = api
        .get_json(&format!("/api/alarms?job_id={fine}"))
        .await
        .unwrap();
    assert_eq!(none["alarms"], json!([]), "a success raises no alarm");

    // A receiver that never answers: the alarm gives up after its attempts, and a job ticking
    // every 200 ms meanwhile is published on time.
    let stuck = api
        .create_job(
            &json!({"name": "stuck alarm", "job_type": "ops.fail", "schedule": {"kind": "none"},
            "alarm_webhook": hanging.url("/slow")}),
        )
        .await
        .unwrap();
    let ticker = api
        .create_job(&json!({"name": "ticker", "job_type": "ops.ok",
            "schedule": {"kind": "fix_rate", "every_ms": 200}}))
        .await
        .unwrap();
    let id = api.trigger_now(stuck).await.unwrap();
    api.wait_run_status(id, "failed", WAIT).await.unwrap();
    let alarm = given_up_alarm(api, id).await;
    assert_eq!(alarm["attempts"], 2, "{alarm}");
    assert!(
        alarm["last_error"].as_str().unwrap().contains("no answer"),
        "{alarm}"
    );
    assert_eq!(hanging.received().len(), 2, "one request per attempt");
    let ticks = all_runs(api, ticker).await;
    let published: Vec<&Value> = ticks
        .iter()
        .filter(|r| r["published_at"].is_string())
        .collect();
    assert!(published.len() >= 4, "the ticker kept firing: {ticks:#?}");
    for r in published {
        let late = ms(time(&r["published_at"]) - time(&r["fire_time"]));
        assert!(late < 1000, "published {late} ms late: {r}");
    }
}

#[tokio::test]
async fn an_api_trigger_can_be_delayed_and_bad_requests_are_refused() {
    let (_cluster, admin, _w) = start(&[], "ops.ok=noop", "ops").await;
    let api = &admin.api();
    let job = api
        .create_job(
            &json!({"name": "later", "job_type": "ops.ok", "schedule": {"kind": "none"},
            "params": "default"}),
        )
        .await
        .unwrap();
    let path = format!("/api/jobs/{job}/trigger");
    let asked = Utc::now();
    let (status, body) = api
        .post_json(&path, &json!({"delay_ms": 1500, "params": "given"}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["trigger_ids"][0].as_i64().unwrap();
    let run = api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    assert_eq!(run["kind"], "api");
    assert_eq!(run["params"], "given");
    let delay = ms(time(&run["fire_time"]) - asked);
    assert!(
        (1400..2500).contains(&delay),
        "fire time {delay} ms after the request"
    );
    assert!(time(&run["published_at"]) >= time(&run["fire_time"]));

    let at = Utc::now() + chrono::Duration::milliseconds(1000);
    let (status, body) = api
        .post_json(&path, &json!({"at": at.to_rfc3339()}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["trigger_ids"][0].as_i64().unwrap();
    let run = api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    assert_eq!(
        time(&run["fire_time"]).timestamp_millis(),
        at.timestamp_millis()
    );
    assert_eq!(run["params"], "default");

    let before = all_runs(api, job).await.len();
    for (body, field) in [
        (json!({"delay_ms": -1}), "delay_ms"),
        (json!({"at": "2020-01-01T00:00:00Z"}), "at"),
        (
            json!({"at": Utc::now().to_rfc3339(), "delay_ms": 10}),
            "delay_ms",
        ),
    ] {
        let (status, answer) = api.post_json(&path, &body).await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    let (status, answer) = api
        .post_json(&path, &json!({"at": "tomorrow"}))
        .await
        .unwrap();
    assert!(status.is_client_error(), "{answer}");
    assert_eq!(
        all_runs(api, job).await.len(),
        before,
        "nothing was triggered"
    );
}

#[tokio::test]
async fn replay_of_a_window_reruns_exactly_its_runs_and_a_dry_run_changes_nothing() {
    let (_cluster, admin, _w) = start(&[], "ops.rep=noop", "rep").await;
    let api = &admin.api();
    let fast = api
        .create_job(
            &json!({"name": "fast", "job_type": "ops.rep", "params": "fast-params",
            "schedule": {"kind": "fix_rate", "every_ms": 300}}),
        )
        .await
        .unwrap();
    let slow = api
        .create_job(&json!({"name": "slow", "job_type": "ops.rep",
            "schedule": {"kind": "fix_rate", "every_ms": 700}}))
        .await
        .unwrap();
    let from = Utc::now() + chrono::Duration::seconds(1);
    let to = from + chrono::Duration::seconds(10);
    // Both jobs ran through the window (and a little past it); then stop them.
    for job in [fast, slow] {
        wait_for(
            Duration::from_secs(40),
            "runs past the window",
            || async move {
                let runs = all_runs(api, job).await;
                Ok(runs
                    .iter()
                    .any(|r| r["status"] == "succeeded" && time(&r["fire_time"]) > to)
                    .then_some(()))
            },
        )
        .await
        .unwrap();
    }
    for job in [fast, slow] {
        let (status, _) = api
            .post_empty(&format!("/api/jobs/{job}/disable"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
    }
    let mut expected: Vec<i64> = Vec::new();
    for job in [fast, slow] {
        for r in all_runs(api, job).await {
            let t = time(&r["fire_time"]);
            if t >= from && t < to && r["offset"].is_i64() {
                expected.push(r["id"].as_i64().unwrap());
            }
        }
    }
    expected.sort();
    assert!(
        expected.len() >= 40,
        "{} runs in the window",
        expected.len()
    );
    let window = json!({"job_type": "ops.rep", "from": from.to_rfc3339(), "to": to.to_rfc3339()});
    let replays = || async move {
        let mut n = 0;
        for job in [fast, slow] {
            n += all_runs(api, job)
                .await
                .iter()
                .filter(|r| r["kind"] == "replay")
                .count();
        }
        n
    };

    // Dry run: what would run, nothing published.
    let mut dry = window.clone();
    dry["dry_run"] = json!(true);
    let (status, plan) = api.post_json("/api/replay", &dry).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{plan}");
    let mut planned: Vec<i64> = plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["original_id"].as_i64().unwrap())
        .collect();
    planned.sort();
    assert_eq!(
        planned, expected,
        "the dry run lists exactly the window's runs"
    );
    assert_eq!(plan["count"], expected.len());
    assert_eq!(replays().await, 0, "a dry run publishes nothing");
    // One job only.
    let mut one = dry.clone();
    one["job_id"] = json!(slow);
    let (_, plan_slow) = api.post_json("/api/replay", &one).await.unwrap();
    assert!(plan_slow["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["job_id"] == slow));
    assert!(plan_slow["count"].as_u64().unwrap() < expected.len() as u64);

    // The replay: one new run per original, linked to it, run by the worker.
    let (status, done) = api.post_json("/api/replay", &window).await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{done}");
    assert_eq!(done["replayed"], expected.len(), "{done}");
    assert!(done["replay_id"].is_i64());
    let new_ids: Vec<i64> = done["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trigger_id"].as_i64().unwrap())
        .collect();
    for id in &new_ids {
        let run = api.wait_run_status(*id, "succeeded", WAIT).await.unwrap();
        assert_eq!(run["kind"], "replay");
        assert!(expected.contains(&run["parent_id"].as_i64().unwrap()));
        if run["job_id"] == fast {
            assert_eq!(run["params"], "fast-params", "the original's params");
        }
    }
    assert_eq!(
        replays().await,
        expected.len(),
        "exactly the window's runs again"
    );

    // By explicit partition offsets: the ranges the window mapped to.
    let mut by_offsets =
        json!({"job_type": "ops.rep", "partitions": done["partitions"], "dry_run": true});
    let (status, plan) = api.post_json("/api/replay", &by_offsets).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert!(plan["count"].as_u64().unwrap() >= expected.len() as u64);
    by_offsets["partitions"][0]["to_offset"] = json!(1_000_000);
    let (status, answer) = api.post_json("/api/replay", &by_offsets).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "partitions[0].to_offset");

    // Bad windows: refused with a message, nothing published.
    let backwards =
        json!({"job_type": "ops.rep", "from": to.to_rfc3339(), "to": from.to_rfc3339()});
    let (status, answer) = api.post_json("/api/replay", &backwards).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "from");
    let empty = json!({"job_type": "ops.rep", "from": "2001-01-01T00:00:00Z", "to": "2001-01-01T00:00:10Z"});
    let (status, answer) = api.post_json("/api/replay", &empty).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["code"], "nothing_to_replay");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing to replay"));
    assert_eq!(
        replays().await,
        expected.len(),
        "refused replays publish nothing"
    );
}

#[tokio::test]
async fn a_failed_run_sends_an_email_alarm_through_the_smtp_relay() {
    let sink = SmtpSink::start().await.unwrap();
    let url = sink.url();
    let smtp_env = [
        ("CADENZA_SMTP_URL", url.as_str()),
        ("CADENZA_ALARM_FROM", "alarms@cadenza.test"),
    ];
    let (_cluster, admin, _w) = start(&smtp_env, "ops.fail=fail", "ops").await;
    let api = &admin.api();
    let job = api
        .create_job(
            &json!({"name": "nightly export", "job_type": "ops.fail", "schedule": {"kind": "none"},
            "params": "bucket missing", "alarm_emails": ["ops@example.com", "oncall@example.com"]}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
    api.wait_run_status(id, "failed", WAIT).await.unwrap();
    let mails = wait_for(WAIT, "two e-mails", || async {
        let m = sink.received();
        Ok((m.len() >= 2).then_some(m))
    })
    .await
    .unwrap();
    assert_eq!(mails.len(), 2, "one per address: {mails:#?}");
    let mut to: Vec<String> = mails.iter().flat_map(|m| m.to.clone()).collect();
    to.sort();
    assert_eq!(to, ["oncall@example.com", "ops@example.com"]);
    for m in &mails {
        assert_eq!(m.from, "alarms@cadenza.test");
        assert!(
            m.data
                .contains(&format!("failed run {id} of job {job} (nightly export)")),
            "{}",
            m.data
        );
        assert!(m.data.contains("bucket missing"), "{}", m.data);
    }
    let alarms = wait_for(WAIT, "both alarms recorded sent", || async move {
        let (_, a) = api
            .get_json(&format!("/api/alarms?trigger_id={id}"))
            .await?;
        let a = a["alarms"].as_array().cloned().unwrap_or_default();
        Ok((a.len() == 2 && a.iter().all(|x| x["status"] == "sent")).then_some(a))
    })
    .await
    .unwrap();
    assert!(alarms.iter().all(|a| a["channel"] == "email"));
}

#[tokio::test]
async fn retention_drops_old_partitions_whole_and_keeps_recent_runs() {
    let retention_env = [
        ("CADENZA_PARTITION_MS", "1500"),
        ("CADENZA_RETENTION_MS", "4000"),
    ];
    let (cluster, admin, _w) = start(&retention_env, "ops.ok=noop", "ops").await;
    let api = &admin.api();
    let job = api
        .create_job(&json!({"name": "ticker", "job_type": "ops.ok",
            "schedule": {"kind": "fix_rate", "every_ms": 200}}))
        .await
        .unwrap();
    let first = wait_for(WAIT, "a first run", || async move {
        Ok(all_runs(api, job)
            .await
            .first()
            .and_then(|r| r["id"].as_i64()))
    })
    .await
    .unwrap();
    wait_for(
        Duration::from_secs(40),
        "the first run to be dropped with its partition",
        || async move {
            let (status, _) = api.get_json(&format!("/api/triggers/{first}")).await?;
            Ok((status == StatusCode::NOT_FOUND).then_some(()))
        },
    )
    .await
    .unwrap();
    // What is kept is whole: the job's fire times since the oldest kept run, without a gap.
    let kept = all_runs(api, job).await;
    assert!(kept.len() >= 10, "recent runs are kept: {}", kept.len());
    let mut times: Vec<DateTime<Utc>> = kept.iter().map(|r| time(&r["fire_time"])).collect();
    times.sort();
    for w in times.windows(2) {
        assert_eq!(ms(w[1] - w[0]), 200, "no gap among kept runs: {times:?}");
    }
    let newest_kept_age = ms(Utc::now() - *times.last().unwrap());
    assert!(newest_kept_age < 3000, "the newest runs are there");
    // Dropped as whole tables, and the record of partitions says which are left.
    let pool = cluster.pool().await.unwrap();
    let listed: Vec<String> =
        sqlx::query_scalar("SELECT name FROM trigger_partitions ORDER BY block")
            .fetch_all(&pool)
            .await
            .unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relname ~ '^triggers_b[0-9]+$' AND relkind = 'r' ORDER BY oid",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!listed.contains(&"triggers_b0".to_owned()), "{listed:?}");
    let mut sorted_tables = tables.clone();
    sorted_tables.sort();
    let mut sorted_listed = listed.clone();
    sorted_listed.sort();
    assert_eq!(
        sorted_tables, sorted_listed,
        "every partition left is listed"
    );
    assert!(listed.len() <= 6, "old partitions are gone: {listed:?}");
    // The daily report still counts the runs whose records are gone.
    let counted = api.reported_runs(job, "succeeded").await.unwrap();
    let kept_succeeded = kept.iter().filter(|r| r["status"] == "succeeded").count() as i64;
    assert!(
        counted > kept_succeeded,
        "{counted} counted, {kept_succeeded} kept"
    );
}

/// A `fix_delay` job fires again its delay after its own run ended, through that run's
/// retries; a retry of a run someone else asked for (manual, API, child) does not move it.
#[tokio::test]
async fn only_a_fix_delay_jobs_own_runs_and_their_retries_schedule_its_next_fire() {
    let (cluster, admin, _w) = start(&[], "ops.fail=fail", "ops").await;
    let api = &admin.api();
    let fix_delay = |name: &str, delay_ms: i64| {
        json!({"name": name, "job_type": "ops.fail", "retries": 1, "retry_backoff_ms": 100,
               "schedule": {"kind": "fix_delay", "delay_ms": delay_ms}})
    };

    // Own runs: fire, fail, retried once, and the next fire comes its delay after the retry.
    let own = api.create_job(&fix_delay("own", 500)).await.unwrap();
    let runs = wait_for(
        WAIT,
        "a second own run after a retried one",
        || async move {
            let r = all_runs(api, own).await;
            Ok((r.iter().filter(|x| x["kind"] == "fix_delay").count() >= 2).then_some(r))
        },
    )
    .await
    .unwrap();
    let first_retry = runs.iter().find(|r| r["kind"] == "retry").unwrap();
    let second = runs
        .iter()
        .filter(|r| r["kind"] == "fix_delay")
        .nth(1)
        .unwrap();
    let gap = ms(time(&second["fire_time"]) - time(&first_retry["finished_at"]));
    assert!((500..1500).contains(&gap), "{gap} ms: {runs:#?}");
    api.patch_json(&format!("/api/jobs/{own}"), &json!({"enabled": false}))
        .await
        .unwrap();

    // A manual run of a job whose own run is out (standing in for it: no next fire time).
    let waits = api
        .create_job(&fix_delay("waits", 3_600_000))
        .await
        .unwrap();
    let pool = cluster.pool().await.unwrap();
    sqlx::query("UPDATE jobs SET next_fire_at = NULL WHERE id = $1")
        .bind(waits)
        .execute(&pool)
        .await
        .unwrap();
    api.trigger_now(waits).await.unwrap();
    let runs = wait_runs(api, waits, 2, &["failed"]).await;
    assert_eq!(runs[1]["kind"], "retry", "{runs:#?}");
    let (_, job) = api.get_json(&format!("/api/jobs/{waits}")).await.unwrap();
    assert_eq!(job["next_fire_at"], Value::Null, "{job}");
}

#[tokio::test]
async fn outbound_requests_to_loopback_are_refused_unless_allowed() {
    let receiver = Receiver::start().await.unwrap();
    // The harness allows loopback; this admin keeps the default policy.
    let alarm_env = [("CADENZA_ALARM_ALLOW", ""), ("CADENZA_ALARM_ATTEMPTS", "1")];
    let (cluster, admin, _open) = start(&alarm_env, "ops.call=http", "open").await;
    let _closed = cluster
        .spawn_worker("ops.locked=http", "closed", &[("CADENZA_HTTP_ALLOW", "")])
        .await
        .unwrap();
    let api = &admin.api();

    // A worker whose CADENZA_HTTP_ALLOW lists 127.0.0.1 reaches the receiver.
    let call = api
        .create_job(
            &json!({"name": "call", "job_type": "ops.call", "schedule": {"kind": "none"},
            "params": json!({"url": receiver.url("/called")}).to_string()}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(call).await.unwrap();
    api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(receiver.received()[0].path, "/called");

    // One with the default policy does not, and says why; the alarm of that failure is not
    // posted to loopback either, and no log shows the webhook's token.
    let locked = api
        .create_job(
            &json!({"name": "locked", "job_type": "ops.locked", "schedule": {"kind": "none"},
            "params": json!({"url": receiver.url("/admin")}).to_string(),
            "alarm_webhook": receiver.url("/hook?token=s3cret")}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(locked).await.unwrap();
    let run = api.wait_run_status(id, "failed", WAIT).await.unwrap();
    assert_eq!(
        run["message"],
        "http: address 127.0.0.1, a loopback address (127.0.0.0/8), denied unless \
         CADENZA_HTTP_ALLOW lists it",
        "{run}"
    );
    let alarm = given_up_alarm(api, id).await;
    assert_eq!(
        alarm["last_error"],
        "address 127.0.0.1, a loopback address (127.0.0.0/8), denied unless \
         CADENZA_ALARM_ALLOW lists it",
        "{alarm}"
    );
    assert_eq!(receiver.received().len(), 1, "{:#?}", receiver.received());
    let log = admin.log();
    assert!(log.contains("alarm not delivered"), "{log}");
    assert!(!log.contains("s3cret"), "{log}");
}

/// Waits until run `id` is `cancelled` by someone; returns it.
async fn wait_cancelled(api: &ApiClient, id: i64) -> Value {
    let run = api.wait_run_status(id, "cancelled", WAIT).await.unwrap();
    let message = run["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("cancelled by "), "{run}");
    run
}

/// An operator cancels runs: one waiting behind another on the worker (never starts), one
/// running (its handler stops), one not yet published (never sent); an ended run is refused. A
/// cancelled run is not retried, and the daily report counts it.
#[tokio::test]
async fn an_operator_cancels_waiting_running_and_unpublished_runs() {
    let (cluster, admin, _w) = start(&[], "ops.sleep=sleep", "ops").await;
    let api = &admin.api();
    let job = api
        .create_job(&json!({"name": "long", "job_type": "ops.sleep",
            "schedule": {"kind": "none"}, "params": "60000", "retries": 2,
            "block": "serial_execution"}))
        .await
        .unwrap();
    let running = api.trigger_now(job).await.unwrap();
    api.wait_run_status(running, "running", WAIT).await.unwrap();
    let waiting = api.trigger_now(job).await.unwrap();
    api.wait_run_status(waiting, "published", WAIT)
        .await
        .unwrap();
    // Let the worker take the second trigger into the job's lane, behind the running one.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let cancel = |id: i64| async move {
        api.post_empty(&format!("/api/triggers/{id}/cancel"))
            .await
            .unwrap()
    };
    let (status, body) = cancel(waiting).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("cancel requested by "),
        "{body}"
    );
    let run = wait_cancelled(api, waiting).await;
    assert_eq!(
        run["started_at"],
        Value::Null,
        "a waiting run never starts: {run}"
    );
    let (_, first) = api
        .get_json(&format!("/api/triggers/{running}"))
        .await
        .unwrap();
    assert_eq!(
        first["status"], "running",
        "only the named run is cancelled"
    );

    let asked = std::time::Instant::now();
    let (status, body) = cancel(running).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_cancelled(api, running).await;
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "a 60 s run stopped {:?} after the cancel",
        asked.elapsed()
    );

    // Not published yet (due in 3 s): cancelled at once, never sent.
    let (status, body) = api
        .post_json(
            &format!("/api/jobs/{job}/trigger"),
            &json!({"delay_ms": 3000}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let later = body["trigger_ids"][0].as_i64().unwrap();
    let (status, body) = cancel(later).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, run) = api
        .get_json(&format!("/api/triggers/{later}"))
        .await
        .unwrap();
    assert_eq!(run["status"], "cancelled", "{run}");
    assert_eq!(run["published_at"], Value::Null, "{run}");
    let topic = format!("{}.trigger.ops.sleep", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(20))
        .await
        .unwrap();
    let sent = |id: i64| {
        records
            .iter()
            .filter(|r| {
                r.payload_json()
                    .is_ok_and(|v| v["trigger_id"] == id && v["type"] == "trigger")
            })
            .count()
    };
    assert_eq!((sent(running), sent(waiting), sent(later)), (1, 1, 0));
    assert_eq!(
        records
            .iter()
            .filter(|r| r.header_str("cadenza-record") == Some("cancel"))
            .count(),
        2,
        "one cancel record per published run"
    );

    // Ended: refused, and nothing else changes.
    let (status, body) = cancel(running).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "not_cancellable");
    let (status, _) = cancel(999_999_999).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Not retried (the job has retries left), counted in the report.
    let runs = all_runs(api, job).await;
    assert_eq!(runs.len(), 3, "no retry of a cancelled run: {runs:#?}");
    assert_eq!(api.reported_runs(job, "cancelled").await.unwrap(), 3);
    let (_, audit) = api.get_json("/api/audit").await.unwrap();
    let cancels = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "run.cancel")
        .count();
    assert_eq!(cancels, 3, "{audit}");
}

/// The scan writes a schedule's runs up to twice the look-ahead before their fire time, already
/// claimed for publication. One of them due later than the publish-ahead is still cancelled at
/// once and never sent; a change of the job drops the others written ahead and writes them again
/// with the new parameters. Every other fire time is sent once.
#[tokio::test]
async fn a_schedule_run_written_ahead_is_cancelled_or_changed_before_it_is_sent() {
    let (cluster, admin, _w) = start(&[], "ops.sleep=sleep", "ops").await;
    let api = &admin.api();
    let job = api
        .create_job(&json!({"name": "often", "job_type": "ops.sleep",
            "schedule": {"kind": "fix_rate", "every_ms": 1000}, "params": "0"}))
        .await
        .unwrap();
    let fire_time = |r: &Value| {
        DateTime::parse_from_rfc3339(r["fire_time"].as_str().unwrap())
            .unwrap()
            .with_timezone(&Utc)
    };
    // A run written ahead, due 2 s or more from now (publish-ahead 250 ms plus the 250 ms guard).
    let ahead = wait_for(WAIT, "a run written ahead", || async {
        Ok(all_runs(api, job).await.into_iter().find(|r| {
            r["status"] == "publishing" && fire_time(r) > Utc::now() + chrono::Duration::seconds(2)
        }))
    })
    .await
    .unwrap();
    let id = ahead["id"].as_i64().unwrap();
    let (status, body) = api
        .post_empty(&format!("/api/triggers/{id}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");

    // A change of parameters: what was written ahead is written again with them.
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"params": "1"}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let changed_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (status, _) = api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"enabled": false}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let runs = all_runs(api, job).await;
    let (_, cancelled) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["published_at"], Value::Null, "{cancelled}");
    let topic = format!("{}.trigger.ops.sleep", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(20))
        .await
        .unwrap();
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &records {
        if let Ok(v) = r.payload_json() {
            if v["type"] == "trigger" && v["job_id"] == job {
                sent.entry(v["fire_time"].as_str().unwrap_or_default().to_owned())
                    .or_default()
                    .push(v["params"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    assert!(
        sent.values().all(|p| p.len() == 1),
        "a fire time sent twice: {sent:?}"
    );
    let cancelled_at = fire_time(&cancelled);
    let times: Vec<DateTime<Utc>> = sent
        .keys()
        .map(|t| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc))
        .collect();
    assert!(
        !times.contains(&cancelled_at),
        "the cancelled run was sent: {sent:?}"
    );
    // Every other fire time from the first to the last sent one, 1 s apart.
    let (first, last) = (times[0], times[times.len() - 1]);
    let expected =
        (last - first).num_seconds() + 1 - i64::from(cancelled_at > first && cancelled_at < last);
    assert_eq!(times.len() as i64, expected, "a fire time lost: {sent:?}");
    // Runs due more than a second after the change carry the new parameters.
    let late: Vec<&Value> = runs
        .iter()
        .filter(|r| {
            fire_time(r) > changed_at + chrono::Duration::seconds(1) && r["status"] != "cancelled"
        })
        .collect();
    assert!(!late.is_empty(), "{runs:#?}");
    for (t, params) in &sent {
        let at = DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc);
        if at > changed_at + chrono::Duration::seconds(1) {
            assert_eq!(
                params,
                &vec!["1".to_owned()],
                "sent at {t} with old parameters: {sent:?}"
            );
        }
    }
}

/// Admins configured with different publish-aheads (a setting changed one admin at a time): a
/// change made through an admin with a short one keeps the runs that the holder of the job's
/// shard, with a long one, has already taken for sending. Dropped, they would still be sent,
/// without a run to record them, and the scan would write their fire times again: sent twice.
#[tokio::test]
async fn a_change_keeps_what_an_admin_with_a_longer_publish_ahead_took() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    // One shard: the first admin holds it; the second holds none and serves the API.
    let holder = cluster
        .spawn_admin(&[
            ("CADENZA_ADMIN_ID", "holder"),
            ("CADENZA_SHARD_COUNT", "1"),
            ("CADENZA_LOOKAHEAD_MS", "4000"),
            ("CADENZA_PUBLISH_AHEAD_MS", "3000"),
        ])
        .await
        .unwrap();
    let _w = cluster
        .spawn_worker("ops.sleep=sleep", "ops", &[])
        .await
        .unwrap();
    let job = holder
        .api()
        .create_job(&json!({"name": "often", "job_type": "ops.sleep",
            "schedule": {"kind": "fix_rate", "every_ms": 1000}, "params": "0"}))
        .await
        .unwrap();
    let other = cluster
        .spawn_admin(&[("CADENZA_ADMIN_ID", "other"), ("CADENZA_SHARD_COUNT", "1")])
        .await
        .unwrap();
    let other_api = other.api();
    wait_for(WAIT, "both admins' lease rounds", || {
        let pool = pool.clone();
        async move {
            let aheads: Vec<(String, i64)> =
                sqlx::query_as("SELECT admin_id, publish_ahead_ms FROM admins ORDER BY 2")
                    .fetch_all(&pool)
                    .await?;
            let held: Option<String> =
                sqlx::query_scalar("SELECT holder FROM scheduler_lease WHERE expires_at > now()")
                    .fetch_optional(&pool)
                    .await?
                    .flatten();
            let ready = aheads.len() == 2
                && aheads[0].1 == 250
                && aheads[1] == ("holder".to_owned(), 3000)
                && held.as_deref() == Some("holder");
            Ok(ready.then_some(()))
        }
    })
    .await
    .unwrap();
    // The scheduler's health shows an operator each admin's setting.
    let (status, health) = other_api.get_json("/api/scheduler").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{health}");
    let mut aheads: Vec<(String, i64)> = health["admins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let id = a["admin_id"].as_str().unwrap().to_owned();
            (id, a["publish_ahead_ms"].as_i64().unwrap())
        })
        .collect();
    aheads.sort();
    assert_eq!(
        aheads,
        [("holder".to_owned(), 3000), ("other".to_owned(), 250)],
        "{health}"
    );
    // Runs sent in a steady state, so that the holder has taken the next ones (due within 3 s).
    let sent_once = wait_for(WAIT, "a run of the job published", || async {
        let runs = all_runs(&other_api, job).await;
        Ok(runs
            .iter()
            .any(|r| r["status"] == "succeeded")
            .then_some(()))
    });
    sent_once.await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, body) = other_api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"params": "1"}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (status, _) = other_api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"enabled": false}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    // Every run kept is sent and ends (those the disable dropped are gone).
    let runs = wait_for(WAIT, "every run of the job ended", || async {
        let runs = all_runs(&other_api, job).await;
        let ended = runs.iter().all(|r| r["status"] == "succeeded");
        Ok(ended.then_some(runs))
    })
    .await
    .unwrap();

    let topic = format!("{}.trigger.ops.sleep", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(20))
        .await
        .unwrap();
    let mut sent: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for r in &records {
        if let Ok(v) = r.payload_json() {
            if v["type"] == "trigger" && v["job_id"] == job {
                sent.entry(v["fire_time"].as_str().unwrap_or_default().to_owned())
                    .or_default()
                    .push((
                        v["trigger_id"].as_i64().unwrap_or_default(),
                        v["params"].as_str().unwrap_or_default().to_owned(),
                    ));
            }
        }
    }
    assert!(sent.len() >= 8, "{sent:?}");
    assert!(
        sent.values().all(|s| s.len() == 1),
        "a fire time sent twice: {sent:?}"
    );
    for (t, s) in &sent {
        let (id, _) = &s[0];
        let run = runs.iter().find(|r| r["id"] == *id);
        assert!(
            run.is_some_and(|r| r["status"] == "succeeded"),
            "the run sent for {t} ({id}) is not recorded: {run:?}"
        );
    }
    assert!(
        sent.values().any(|s| s[0].1 == "1"),
        "the change never took effect: {sent:?}"
    );
}

/// A job deleted while the scheduler writes its runs ahead, sends them and its worker reports
/// them leaves no run behind: each write of a run either came before the delete, which took the
/// run with the job, or finds the job gone (runs are not checked by a foreign key, migration
/// 0021, but by the locks of the statements that write them).
#[tokio::test]
async fn a_job_deleted_while_it_fires_leaves_no_run() {
    let (cluster, admin, _w) = start(&[], "ops.ok=noop", "ops").await;
    let api = &admin.api();
    let pool = cluster.pool().await.unwrap();
    let mut jobs = Vec::new();
    for n in 0..5 {
        jobs.push(
            api.create_job(&json!({"name": format!("busy-{n}"), "job_type": "ops.ok",
                "schedule": {"kind": "fix_rate", "every_ms": 50}}))
                .await
                .unwrap(),
        );
    }
    for job in &jobs {
        let job = *job;
        wait_for(
            WAIT,
            &format!("5 runs of job {job} succeeded"),
            || async move {
                let r = all_runs(api, job).await;
                let n = r.iter().filter(|x| x["status"] == "succeeded").count();
                Ok((n >= 5).then_some(()))
            },
        )
        .await
        .unwrap();
    }
    for job in &jobs {
        let (status, body) = api.delete(&format!("/api/jobs/{job}")).await.unwrap();
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    // Runs written ahead, sent, started and finished meanwhile have all settled by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM triggers WHERE job_id = ANY($1)")
        .bind(&jobs)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "runs of deleted jobs left behind");
    for job in &jobs {
        assert!(all_runs(api, *job).await.is_empty());
    }
}
