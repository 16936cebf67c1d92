//! Workflows end to end, with real admins and workers: a diamond runs its join once after both
//! branches; a failed node skips what needs it and fails the workflow run, and retrying it (or
//! marking it succeeded) lets the rest run; a cancel stops a running workflow run; a node's
//! output reaches its children; a scheduled workflow fires on time; and admins killed while
//! nodes end start every node exactly once (counted on the trigger topics).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cadenza_integration::scenario::{all_runs, time};
use cadenza_integration::{
    read_topic_to_end, wait_for, AdminHandle, ApiClient, Cluster, StatusCode, WorkerHandle,
};
use rand::Rng;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// One admin and one worker of group `wf` serving `serve`.
async fn start(serve: &str) -> (Cluster, AdminHandle, WorkerHandle) {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let worker = cluster.spawn_worker(serve, "wf", &[]).await.unwrap();
    (cluster, admin, worker)
}

/// A job of `job_type` with `params` that never fires by itself; its id.
async fn job(api: &ApiClient, name: &str, job_type: &str, params: &str) -> i64 {
    api.create_job(
        &json!({"name": name, "job_type": job_type, "params": params,
        "schedule": {"kind": "none"}}),
    )
    .await
    .unwrap()
}

async fn create_workflow(api: &ApiClient, body: &Value) -> i64 {
    let (status, w) = api.post_json("/api/workflows", body).await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{w}");
    w["id"].as_i64().unwrap()
}

/// Fires workflow `id` now; the new workflow run's id.
async fn trigger(api: &ApiClient, id: i64) -> i64 {
    let (status, r) = api
        .post_empty(&format!("/api/workflows/{id}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{r}");
    r["id"].as_i64().unwrap()
}

async fn workflow_run(api: &ApiClient, id: i64) -> Value {
    let (status, r) = api
        .get_json(&format!("/api/workflow-runs/{id}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{r}");
    r
}

/// Waits until workflow run `id` is `status`; returns it.
async fn wait_status(api: &ApiClient, id: i64, status: &str) -> Value {
    wait_for(
        WAIT,
        &format!("workflow run {id} to be {status}"),
        || async move {
            let r = workflow_run(api, id).await;
            Ok((r["status"] == status).then_some(r))
        },
    )
    .await
    .unwrap()
}

/// Waits until node `key` of workflow run `id` satisfies `ok`; returns the workflow run.
async fn wait_node(
    api: &ApiClient,
    id: i64,
    key: &str,
    what: &str,
    ok: fn(&Value) -> bool,
) -> Value {
    wait_for(
        WAIT,
        &format!("node {key} of workflow run {id} to be {what}"),
        || async move {
            let r = workflow_run(api, id).await;
            Ok(ok(node(&r, key)).then_some(r))
        },
    )
    .await
    .unwrap()
}

fn node<'a>(run: &'a Value, key: &str) -> &'a Value {
    run["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["key"] == key))
        .unwrap_or_else(|| panic!("no node {key} in {run}"))
}

fn statuses(run: &Value) -> BTreeMap<String, String> {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["key"].as_str().unwrap().to_owned(),
                n["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn run_of(api: &ApiClient, id: i64) -> Value {
    let (status, r) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{r}");
    r
}

/// The diamond a → (b, c) → d over the given jobs.
fn diamond(name: &str, a: i64, b: i64, c: i64, d: i64) -> Value {
    json!({"name": name, "schedule": {"kind": "none"}, "nodes": [
        {"key": "a", "job_id": a},
        {"key": "b", "job_id": b, "parents": ["a"]},
        {"key": "c", "job_id": c, "parents": ["a"]},
        {"key": "d", "job_id": d, "parents": ["b", "c"]},
    ]})
}

#[tokio::test]
async fn a_diamond_runs_its_join_once_after_both_branches() {
    let (_cluster, admin, _w) = start("wf.noop=noop,wf.sleep=sleep").await;
    let api = &admin.api();
    let a = job(api, "a", "wf.noop", "").await;
    let b = job(api, "b", "wf.sleep", "600").await;
    let c = job(api, "c", "wf.sleep", "100").await;
    let d = job(api, "d", "wf.noop", "").await;
    let wf = create_workflow(api, &diamond("diamond", a, b, c, d)).await;
    let id = trigger(api, wf).await;
    let done = wait_status(api, id, "succeeded").await;
    assert_eq!(
        statuses(&done),
        expect(&[
            ("a", "succeeded"),
            ("b", "succeeded"),
            ("c", "succeeded"),
            ("d", "succeeded")
        ]),
        "{done}"
    );
    // Each job ran once, as a run of kind `workflow` of this workflow run.
    for (key, j) in [("a", a), ("b", b), ("c", c), ("d", d)] {
        let runs = all_runs(api, j).await;
        assert_eq!(runs.len(), 1, "node {key}: {runs:?}");
        assert_eq!(runs[0]["kind"], "workflow", "{}", runs[0]);
        assert_eq!(runs[0]["id"], node(&done, key)["run_id"], "{done}");
        assert_eq!(node(&done, key)["tries"], 1, "{done}");
    }
    // d started after both branches had finished.
    let run = |k: &str| run_of(api, node(&done, k)["run_id"].as_i64().unwrap());
    let (rb, rc, rd) = (run("b").await, run("c").await, run("d").await);
    let joined = time(&rb["finished_at"]).max(time(&rc["finished_at"]));
    assert!(
        time(&rd["started_at"]) >= joined,
        "d started {} before its parents ended {joined}",
        rd["started_at"]
    );
    assert!(done["finished_at"].is_string(), "{done}");
    // A job that is a node cannot be deleted while the workflow uses it.
    let (status, body) = api.delete(&format!("/api/jobs/{b}")).await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "job_in_use", "{body}");
    assert!(text_of(&body).contains("\"diamond\""), "{body}");
    let (status, _) = api.delete(&format!("/api/workflows/{wf}")).await.unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api.delete(&format!("/api/jobs/{b}")).await.unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

fn text_of(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_failed_node_skips_what_needs_it_until_it_is_retried_or_marked_succeeded() {
    let (cluster, admin, _w) = start("wf.noop=noop,wf.sh=shell,wf.fail=fail").await;
    let api = &admin.api();
    // b fails the first time and succeeds the next (a flag file in the test's directory).
    let flag = cluster.dir().join("b-ran-once");
    let script = format!(
        "test -f '{0}' && exit 0; touch '{0}'; echo first try fails; exit 3",
        flag.display()
    );
    let a = job(api, "a", "wf.noop", "").await;
    let b = job(api, "b", "wf.sh", &script).await;
    let c = job(api, "c", "wf.noop", "").await;
    let d = job(api, "d", "wf.noop", "").await;
    let wf = create_workflow(api, &diamond("retried", a, b, c, d)).await;
    let id = trigger(api, wf).await;
    let failed = wait_status(api, id, "failed").await;
    assert_eq!(
        statuses(&failed),
        expect(&[
            ("a", "succeeded"),
            ("b", "failed"),
            ("c", "succeeded"),
            ("d", "skipped")
        ]),
        "{failed}"
    );
    assert!(all_runs(api, d).await.is_empty(), "d never ran");
    // Only a failed node can be retried.
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/nodes/c/retry"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/nodes/nope/retry"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Retrying b runs it again; then d runs, once.
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/nodes/b/retry"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = wait_status(api, id, "succeeded").await;
    assert_eq!(
        statuses(&done),
        expect(&[
            ("a", "succeeded"),
            ("b", "succeeded"),
            ("c", "succeeded"),
            ("d", "succeeded")
        ]),
        "{done}"
    );
    assert_eq!(node(&done, "b")["tries"], 2, "{done}");
    assert_eq!(all_runs(api, b).await.len(), 2);
    assert_eq!(all_runs(api, d).await.len(), 1);

    // Marking a failed node succeeded lets what runs after it go on.
    let x = job(api, "x", "wf.fail", "always").await;
    let y = job(api, "y", "wf.noop", "").await;
    let wf = create_workflow(
        api,
        &json!({"name": "marked", "schedule": {"kind": "none"}, "nodes": [
            {"key": "x", "job_id": x},
            {"key": "y", "job_id": y, "parents": ["x"]},
        ]}),
    )
    .await;
    let id = trigger(api, wf).await;
    wait_status(api, id, "failed").await;
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/nodes/x/mark-succeeded"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = wait_status(api, id, "succeeded").await;
    assert_eq!(
        statuses(&done),
        expect(&[("x", "succeeded"), ("y", "succeeded")])
    );
    assert_eq!(all_runs(api, x).await.len(), 1, "x is not run again");
    assert_eq!(all_runs(api, y).await.len(), 1);
}

#[tokio::test]
async fn retries_allow_failure_and_cleanup_nodes() {
    let (_cluster, admin, _w) = start("wf.noop=noop,wf.fail=fail").await;
    let api = &admin.api();
    let a = job(api, "a", "wf.noop", "").await;
    // A node's job retries as any run does; the node stays running meanwhile.
    let flaky = api
        .create_job(
            &json!({"name": "flaky", "job_type": "wf.fail", "params": "no",
            "schedule": {"kind": "none"}, "retries": 1, "retry_backoff_ms": 200}),
        )
        .await
        .unwrap();
    let tolerated = job(api, "tolerated", "wf.fail", "ignored").await;
    let after = job(api, "after", "wf.noop", "").await;
    let cleanup = job(api, "cleanup", "wf.noop", "").await;
    let wf = create_workflow(
        api,
        &json!({"name": "edges", "schedule": {"kind": "none"}, "nodes": [
            {"key": "a", "job_id": a},
            {"key": "flaky", "job_id": flaky, "parents": ["a"]},
            {"key": "tolerated", "job_id": tolerated, "parents": ["a"], "allow_failure": true},
            {"key": "after_tolerated", "job_id": after, "parents": ["tolerated"]},
            {"key": "needs_flaky", "job_id": after, "parents": ["flaky"]},
            {"key": "cleanup", "job_id": cleanup, "parents": ["needs_flaky"], "after": "any_end"},
        ]}),
    )
    .await;
    let id = trigger(api, wf).await;
    let done = wait_status(api, id, "failed").await;
    assert_eq!(
        statuses(&done),
        expect(&[
            ("a", "succeeded"),
            ("flaky", "failed"),
            ("tolerated", "failed"),
            ("after_tolerated", "succeeded"),
            ("needs_flaky", "skipped"),
            ("cleanup", "succeeded"),
        ]),
        "{done}"
    );
    let runs = all_runs(api, flaky).await;
    assert_eq!(runs.len(), 2, "the first run and its retry: {runs:?}");
    assert_eq!(runs[1]["kind"], "retry");
    assert_eq!(node(&done, "flaky")["run_id"], runs[1]["id"], "{done}");
    assert_eq!(
        node(&done, "flaky")["tries"],
        1,
        "a retry is not an operator's try"
    );
}

#[tokio::test]
async fn cancelling_a_running_workflow_run_stops_its_node_and_skips_the_rest() {
    let (_cluster, admin, _w) = start("wf.noop=noop,wf.sleep=sleep").await;
    let api = &admin.api();
    let a = job(api, "a", "wf.noop", "").await;
    let long = job(api, "long", "wf.sleep", "60000").await;
    let c = job(api, "c", "wf.noop", "").await;
    let wf = create_workflow(
        api,
        &json!({"name": "cancelled", "schedule": {"kind": "none"}, "nodes": [
            {"key": "a", "job_id": a},
            {"key": "long", "job_id": long, "parents": ["a"]},
            {"key": "c", "job_id": c, "parents": ["long"]},
        ]}),
    )
    .await;
    let id = trigger(api, wf).await;
    let running = wait_node(api, id, "long", "running", |n| n["run_status"] == "running").await;
    let long_run = node(&running, "long")["run_id"].as_i64().unwrap();
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");
    assert_eq!(
        statuses(&body),
        expect(&[("a", "succeeded"), ("long", "cancelled"), ("c", "skipped")])
    );
    // The worker stops the handler: the run ends cancelled long before its 60 s.
    api.wait_run_status(long_run, "cancelled", Duration::from_secs(20))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(all_runs(api, c).await.is_empty(), "c never ran");
    let after = workflow_run(api, id).await;
    assert_eq!(after["status"], "cancelled");
    // A second cancel is refused.
    let (status, body) = api
        .post_empty(&format!("/api/workflow-runs/{id}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

#[tokio::test]
async fn a_nodes_output_reaches_its_children() {
    let (_cluster, admin, _w) = start("wf.sh=shell").await;
    let api = &admin.api();
    let a = job(
        api,
        "extract",
        "wf.sh",
        r#"printf '{"rows":42,"file":"x.csv"}' > "$CADENZA_OUTPUT""#,
    )
    .await;
    let b = job(api, "load", "wf.sh", r#"echo "upstream=$CADENZA_UPSTREAM""#).await;
    let wf = create_workflow(
        api,
        &json!({"name": "context", "schedule": {"kind": "none"}, "nodes": [
            {"key": "extract", "job_id": a},
            {"key": "load", "job_id": b, "parents": ["extract"], "params": r#"echo "upstream=$CADENZA_UPSTREAM node=$CADENZA_WORKFLOW_NODE""#},
        ]}),
    )
    .await;
    let id = trigger(api, wf).await;
    let done = wait_status(api, id, "succeeded").await;
    assert_eq!(
        node(&done, "extract")["output"],
        json!({"rows": 42, "file": "x.csv"}),
        "{done}"
    );
    let load = run_of(api, node(&done, "load")["run_id"].as_i64().unwrap()).await;
    let log = load["log"].as_str().unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.starts_with("upstream="))
        .unwrap_or_else(|| panic!("no upstream line in {log:?}"));
    let (upstream, node_key) = line
        .trim_start_matches("upstream=")
        .rsplit_once(" node=")
        .unwrap();
    assert_eq!(
        node_key, "load",
        "the node's params replaced the job's: {line}"
    );
    let upstream: Value = serde_json::from_str(upstream).unwrap();
    assert_eq!(upstream, json!({"extract": {"rows": 42, "file": "x.csv"}}));
}

#[tokio::test]
async fn a_scheduled_workflow_fires_on_its_schedule() {
    let (_cluster, admin, _w) = start("wf.noop=noop").await;
    let api = &admin.api();
    let a = job(api, "a", "wf.noop", "").await;
    let b = job(api, "b", "wf.noop", "").await;
    let wf = create_workflow(
        api,
        &json!({"name": "every second", "schedule": {"kind": "fix_rate", "every_ms": 1000},
            "nodes": [{"key": "a", "job_id": a}, {"key": "b", "job_id": b, "parents": ["a"]}]}),
    )
    .await;
    let runs = wait_for(WAIT, "three succeeded workflow runs", || async move {
        let (_, page) = api
            .get_json(&format!(
                "/api/workflow-runs?workflow_id={wf}&status=succeeded"
            ))
            .await?;
        let runs = page["workflow_runs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok((runs.len() >= 3).then_some(runs))
    })
    .await
    .unwrap();
    let (status, body) = api
        .post_empty(&format!("/api/workflows/{wf}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut fires: Vec<_> = runs.iter().map(|r| time(&r["fire_time"])).collect();
    fires.sort();
    for pair in fires.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).num_milliseconds() % 1000,
            0,
            "{fires:?}"
        );
    }
    for r in &runs {
        assert_eq!(r["kind"], "fix_rate", "{r}");
        let full = workflow_run(api, r["id"].as_i64().unwrap()).await;
        let first = run_of(api, node(&full, "a")["run_id"].as_i64().unwrap()).await;
        assert_eq!(
            first["fire_time"], full["fire_time"],
            "the first node fires at the workflow's fire time"
        );
    }
}

/// Trigger records on the topics of `job_types`, counted per (workflow run, node).
async fn node_sends(cluster: &Cluster, job_types: &[&str]) -> BTreeMap<(i64, String), usize> {
    let mut sends = BTreeMap::new();
    for t in job_types {
        let topic = format!("{}.trigger.{t}", cluster.topic_prefix());
        let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(60))
            .await
            .unwrap();
        for r in records {
            let Ok(v) = r.payload_json() else { continue };
            if v["type"] != "trigger" {
                continue;
            }
            if let (Some(run), Some(node)) =
                (v["workflow_run_id"].as_i64(), v["workflow_node"].as_str())
            {
                *sends.entry((run, node.to_owned())).or_insert(0) += 1;
            }
        }
    }
    sends
}

#[tokio::test]
async fn admins_killed_while_nodes_end_start_every_node_once() {
    let secs: u64 = std::env::var("CADENZA_WORKFLOW_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let cluster = Cluster::start().await.unwrap();
    let env = [
        ("CADENZA_LEASE_TTL_MS", "3000"),
        ("CADENZA_LEASE_RENEW_MS", "500"),
        ("CADENZA_LEASE_MARGIN_MS", "1000"),
    ];
    let mut admins = [
        cluster.spawn_admin(&env).await.unwrap(),
        cluster.spawn_admin(&env).await.unwrap(),
    ];
    let _w1 = cluster
        .spawn_worker("wfc.noop=noop,wfc.sleep=sleep", "wfc", &[])
        .await
        .unwrap();
    let _w2 = cluster
        .spawn_worker("wfc.noop=noop,wfc.sleep=sleep", "wfc", &[])
        .await
        .unwrap();
    let api = admins[0].api();
    let a = job(&api, "a", "wfc.noop", "").await;
    let b = job(&api, "b", "wfc.sleep", "30").await;
    let c = job(&api, "c", "wfc.noop", "").await;
    let d = job(&api, "d", "wfc.sleep", "10").await;
    let mut workflows = Vec::new();
    for i in 0..10 {
        let mut body = diamond(&format!("chaos {i}"), a, b, c, d);
        body["schedule"] = json!({"kind": "fix_rate", "every_ms": 1000});
        // Node runs must not be retried: each node is sent once per workflow run.
        workflows.push(create_workflow(&api, &body).await);
    }
    let mut rng = rand::rng();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut kills = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
        let victim = rng.random_range(0..admins.len());
        admins[victim].kill_9().unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..1000))).await;
        admins[victim] = cluster.spawn_admin(&env).await.unwrap();
        kills += 1;
    }
    let api = admins[0].api();
    for wf in &workflows {
        let (status, body) = api
            .post_empty(&format!("/api/workflows/{wf}/disable"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // Every workflow run ends, and every one succeeded (no node failed).
    let mut runs: Vec<Value> = Vec::new();
    for wf in &workflows {
        let page = wait_for(
            Duration::from_secs(120),
            &format!("every run of workflow {wf} to end"),
            || async {
                let (_, page) = api
                    .get_json(&format!("/api/workflow-runs?workflow_id={wf}&limit=100"))
                    .await?;
                let runs = page["workflow_runs"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                Ok(runs
                    .iter()
                    .all(|r| r["status"] != "running")
                    .then_some(runs))
            },
        )
        .await
        .unwrap();
        runs.extend(page);
    }
    let fired: Vec<&Value> = runs.iter().filter(|r| r["status"] != "misfired").collect();
    assert!(
        fired.len() >= 5 * secs as usize,
        "{} workflow runs in {secs} s",
        fired.len()
    );
    let not_ok: Vec<&&Value> = fired
        .iter()
        .filter(|r| r["status"] != "succeeded")
        .collect();
    assert!(not_ok.is_empty(), "after {kills} kills: {not_ok:?}");
    // Each node of each workflow run was sent exactly once.
    let sends = node_sends(&cluster, &["wfc.noop", "wfc.sleep"]).await;
    let mut missing = Vec::new();
    for r in &fired {
        let id = r["id"].as_i64().unwrap();
        for key in ["a", "b", "c", "d"] {
            match sends.get(&(id, key.to_owned())) {
                Some(1) => {}
                other => missing.push(format!("run {id} node {key}: sent {other:?}")),
            }
        }
    }
    assert!(missing.is_empty(), "after {kills} kills: {missing:?}");
    assert_eq!(
        sends.len(),
        fired.len() * 4,
        "no node of another run was sent"
    );
}
