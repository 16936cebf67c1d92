//! Workflows through the HTTP API and the CLI, against a real admin (no worker: a triggered
//! workflow run's first node runs are recorded `scheduled`, which is what these tests look at):
//! definitions and their validation, workflow runs and the operator's actions on them, who may
//! do what, and the audit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cadenza_integration::{run_cli, ApiClient, Cluster, Method, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::accounts::{browser, create_user, send, token_client};

fn node(key: &str, job: i64, parents: &[&str]) -> Value {
    json!({"key": key, "job_id": job, "parents": parents})
}

/// a → b, a → c, (b, c) → d.
fn diamond(name: &str, job: i64) -> Value {
    json!({
        "name": name,
        "schedule": {"kind": "cron", "expr": "0 0 3 * * ?"},
        "nodes": [
            node("a", job, &[]),
            node("b", job, &["a"]),
            node("c", job, &["a"]),
            node("d", job, &["b", "c"]),
        ],
    })
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {v}"))
}

async fn put(api: &ApiClient, path: &str, body: &Value) -> (StatusCode, Value) {
    api.request(Method::PUT, path, Some(body)).await.unwrap()
}

/// Asserts `422 invalid_field` naming `field`, with `needle` in the message.
#[track_caller]
fn assert_invalid((status, body): &(StatusCode, Value), field: &str, needle: &str) {
    assert_eq!(*status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "invalid_field", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

/// The nodes of a workflow run by key: (status, run_id, tries).
fn nodes_of(run: &Value) -> Vec<(String, String, Option<i64>, i64)> {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["key"].as_str().unwrap().to_owned(),
                n["status"].as_str().unwrap().to_owned(),
                n["run_id"].as_i64(),
                n["tries"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn workflows_are_created_read_listed_replaced_and_deleted_and_bad_ones_are_named() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let job = api
        .create_job(
            &json!({"name": "step", "job_type": "wfapi.step", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let broadcast = api
        .create_job(&json!({"name": "everywhere", "job_type": "wfapi.all",
            "schedule": {"kind": "none"}, "route": "sharding_broadcast"}))
        .await
        .unwrap();

    // Created: the definition with defaults, a shard and the next fire time of its cron.
    let before = Utc::now();
    let (status, created) = api
        .post_json("/api/workflows", &diamond("nightly", job))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["name"], "nightly");
    assert_eq!(created["misfire"], "do_nothing");
    assert_eq!(created["misfire_threshold_ms"], 5000);
    assert_eq!(created["enabled"], true);
    assert_eq!(created["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(created["nodes"][3]["parents"], json!(["b", "c"]));
    assert_eq!(created["nodes"][3]["after"], "all_succeeded");
    let (_, health) = api.get_json("/api/scheduler").await.unwrap();
    let shards = health["shard_count"].as_i64().unwrap();
    assert_eq!(created["shard"].as_i64().unwrap(), id % shards, "{created}");
    let next = time(&created["next_fire_at"]);
    assert!(
        next > before && next <= before + chrono::Duration::days(1),
        "{next}"
    );

    let (status, got) = api.get_json(&format!("/api/workflows/{id}")).await.unwrap();
    assert_eq!((status, &got), (StatusCode::OK, &created));

    // Listed, a page at a time.
    let (status, second) = api
        .post_json("/api/workflows", &diamond("hourly", job))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{second}");
    let second_id = second["id"].as_i64().unwrap();
    let (status, page) = api.get_json("/api/workflows?limit=1").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["workflows"][0]["id"], id, "{page}");
    assert_eq!(page["next_after_id"], id, "{page}");
    let (_, page) = api
        .get_json(&format!("/api/workflows?limit=1&after_id={id}"))
        .await
        .unwrap();
    assert_eq!(page["workflows"][0]["id"], second_id, "{page}");
    let (_, named) = api.get_json("/api/workflows?name=HOUR").await.unwrap();
    assert_eq!(named["workflows"].as_array().unwrap().len(), 1, "{named}");
    assert_eq!(named["next_after_id"], Value::Null);

    // A name is unique.
    let (status, dup) = api
        .post_json("/api/workflows", &diamond("nightly", job))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{dup}");
    assert_eq!(dup["error"]["code"], "workflow_exists");
    assert!(
        dup["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nightly"),
        "{dup}"
    );

    // What is wrong is named, down to the node.
    let create = |body: Value| {
        let api = api.clone();
        async move { api.post_json("/api/workflows", &body).await.unwrap() }
    };
    let wf =
        |nodes: Vec<Value>| json!({"name": "bad", "schedule": {"kind": "none"}, "nodes": nodes});
    assert_invalid(
        &create(wf(vec![
            node("a", job, &[]),
            node("b", job, &["a", "d"]),
            node("c", job, &["b"]),
            node("d", job, &["c"]),
        ]))
        .await,
        "nodes[1] (\"b\").parents",
        "cycle",
    );
    assert_invalid(
        &create(wf(vec![node("a", job, &[]), node("b", job, &["x"])])).await,
        "nodes[1] (\"b\").parents",
        "\"x\" is not a node",
    );
    assert_invalid(
        &create(wf(vec![node("a", job, &[]), node("b", 999_999, &["a"])])).await,
        "nodes[1] (\"b\").job_id",
        "job 999999 does not exist",
    );
    assert_invalid(
        &create(wf(vec![node("a", broadcast, &[]), node("b", job, &["a"])])).await,
        "nodes[0] (\"a\").job_id",
        "sharding_broadcast",
    );
    assert_invalid(
        &create(wf(vec![
            node("a", job, &[]),
            node("b", job, &["a"]),
            node("lonely", job, &[]),
        ]))
        .await,
        "nodes[2] (\"lonely\")",
        "not connected",
    );
    let mut many = vec![node("n0", job, &[])];
    many.extend((1..=1000).map(|i| node(&format!("n{i}"), job, &["n0"])));
    assert_invalid(&create(wf(many)).await, "nodes", "\"n1000\"");
    assert_invalid(
        &create(
            json!({"name": "bad", "schedule": {"kind": "fix_delay", "delay_ms": 1000},
            "nodes": [node("a", job, &[])]}),
        )
        .await,
        "schedule.kind",
        "fix_delay",
    );
    assert_invalid(
        &create(json!({"name": "bad", "schedule": {"kind": "none"}})).await,
        "nodes",
        "missing field",
    );
    assert_invalid(
        &create(
            json!({"name": "bad", "schedule": {"kind": "none"}, "nodes": [],
            "colour": "red"}),
        )
        .await,
        "colour",
        "unknown field",
    );
    let (_, all) = api.get_json("/api/workflows").await.unwrap();
    assert_eq!(
        all["workflows"].as_array().unwrap().len(),
        2,
        "nothing stored: {all}"
    );

    // A trigger runs the definition as it is now; the run keeps it when the workflow changes.
    let (status, run) = api
        .post_empty(&format!("/api/workflows/{id}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run_id = run["id"].as_i64().unwrap();
    assert_eq!(run["nodes"].as_array().unwrap().len(), 4);

    // Replaced: a new schedule fires from now, new nodes, same checks.
    let replaced = json!({
        "name": "nightly",
        "schedule": {"kind": "fix_rate", "every_ms": 60_000},
        "misfire": "fire_once_now",
        "nodes": [node("first", job, &[]), node("second", job, &["first"])],
    });
    let at = Utc::now();
    let (status, updated) = put(&api, &format!("/api/workflows/{id}"), &replaced).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["misfire"], "fire_once_now");
    assert_eq!(updated["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(updated["created_at"], created["created_at"]);
    let next = time(&updated["next_fire_at"]);
    assert!(
        next >= at + chrono::Duration::seconds(59)
            && next <= Utc::now() + chrono::Duration::seconds(61),
        "{next}"
    );
    let (_, kept) = api
        .get_json(&format!("/api/workflow-runs/{run_id}"))
        .await
        .unwrap();
    let keys: Vec<&str> = kept["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d"], "{kept}");
    // The same definition again keeps the next fire time.
    let (status, again) = put(&api, &format!("/api/workflows/{id}"), &replaced).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["next_fire_at"], updated["next_fire_at"]);
    assert_invalid(
        &put(
            &api,
            &format!("/api/workflows/{id}"),
            &json!({"name": "nightly", "schedule": {"kind": "none"},
                "nodes": [node("a", job, &["b"]), node("b", job, &["a"])]}),
        )
        .await,
        "nodes[0] (\"a\").parents",
        "cycle",
    );
    let (status, taken) = put(
        &api,
        &format!("/api/workflows/{id}"),
        &json!({"name": "hourly", "schedule": {"kind": "none"}, "nodes": [node("a", job, &[])]}),
    )
    .await;
    assert_eq!(
        (status, &taken["error"]["code"]),
        (StatusCode::CONFLICT, &json!("workflow_exists")),
        "{taken}"
    );
    let (status, _) = put(&api, "/api/workflows/999999", &replaced).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Disabled: no next fire time. Enabled: the next one counts from now.
    let (status, off) = api
        .post_empty(&format!("/api/workflows/{id}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{off}");
    assert_eq!(
        (&off["enabled"], &off["next_fire_at"]),
        (&json!(false), &Value::Null)
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let at = Utc::now();
    let (status, on) = api
        .post_empty(&format!("/api/workflows/{id}/enable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{on}");
    assert_eq!(on["enabled"], true);
    assert!(
        time(&on["next_fire_at"]) >= at + chrono::Duration::seconds(59),
        "{on}"
    );

    // Deleted with its runs; its node runs stay as runs of their job.
    let node_run = kept["nodes"][0]["run_id"].as_i64().unwrap();
    let (status, _) = api.delete(&format!("/api/workflows/{id}")).await.unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    for path in [
        format!("/api/workflows/{id}"),
        format!("/api/workflow-runs/{run_id}"),
    ] {
        let (status, body) = api.get_json(&path).await.unwrap();
        assert_eq!(
            (status, &body["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{path}: {body}"
        );
    }
    let (status, _) = api.delete(&format!("/api/workflows/{id}")).await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, left) = api
        .get_json(&format!("/api/triggers/{node_run}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{left}");
    assert_eq!(left["job_id"], job);

    // Every change is in the audit, with the workflow it changed.
    let (_, audit) = api.get_json("/api/audit?limit=1000").await.unwrap();
    let rows = audit["audit"].as_array().unwrap();
    for action in [
        "workflow.create",
        "workflow.update",
        "workflow.disable",
        "workflow.enable",
        "workflow.trigger",
        "workflow.delete",
    ] {
        let row = rows
            .iter()
            .find(|r| r["action"] == action && r["target"] == format!("workflow {id}"))
            .unwrap_or_else(|| panic!("no {action} of workflow {id}: {audit}"));
        assert_eq!(row["actor"], "service");
        assert_eq!(row["outcome"], "done");
    }
    let update = rows
        .iter()
        .rev()
        .find(|r| r["action"] == "workflow.update")
        .unwrap();
    assert_eq!(update["before"]["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(update["after"]["nodes"].as_array().unwrap().len(), 2);
    let creates = rows
        .iter()
        .filter(|r| r["action"] == "workflow.create")
        .count();
    assert_eq!(creates, 2, "refused creations leave no row: {audit}");
}

#[tokio::test]
async fn workflow_runs_start_their_first_nodes_and_take_the_operators_actions() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let job = api
        .create_job(
            &json!({"name": "step", "job_type": "wfapi.step", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let (status, wf) = api
        .post_json("/api/workflows", &diamond("diamond", job))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{wf}");
    let wf_id = wf["id"].as_i64().unwrap();

    // Triggered with a token: kind `api`, by the token's owner; the root node runs, the rest
    // waits.
    let before = Utc::now();
    let (status, run) = api
        .post_empty(&format!("/api/workflows/{wf_id}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run_id = run["id"].as_i64().unwrap();
    assert_eq!(run["workflow_id"], wf_id);
    assert_eq!(run["workflow_name"], "diamond");
    assert_eq!(run["kind"], "api");
    assert_eq!(run["requested_by"], "service");
    assert_eq!(run["status"], "running");
    assert_eq!(run["finished_at"], Value::Null);
    let fired = time(&run["fire_time"]);
    assert!(
        (fired - before).num_seconds().abs() < 5,
        "the database's now: {fired}"
    );
    let nodes = nodes_of(&run);
    assert_eq!(nodes[0].0, "a");
    assert_eq!((nodes[0].1.as_str(), nodes[0].3), ("running", 1), "{run}");
    let first_run = nodes[0].2.expect("the root node has a run");
    // Due now: recorded `scheduled`, and soon claimed for publication.
    assert!(
        ["scheduled", "publishing", "published"]
            .contains(&run["nodes"][0]["run_status"].as_str().unwrap()),
        "{run}"
    );
    assert_eq!(run["nodes"][0]["job_id"], job);
    for (key, status, run_id, tries) in &nodes[1..] {
        assert_eq!(
            (status.as_str(), *run_id, *tries),
            ("waiting", None, 0),
            "{key}: {run}"
        );
    }
    let (status, node_run) = api
        .get_json(&format!("/api/triggers/{first_run}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{node_run}");
    assert_eq!(node_run["job_id"], job);

    // The run list: newest first, by workflow and status, nodes included (outputs are not).
    let (status, second) = api
        .post_empty(&format!("/api/workflows/{wf_id}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{second}");
    let second_id = second["id"].as_i64().unwrap();
    let (status, list) = api
        .get_json(&format!("/api/workflow-runs?workflow_id={wf_id}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{list}");
    let ids: Vec<i64> = list["workflow_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [second_id, run_id], "{list}");
    let listed = &list["workflow_runs"][1];
    assert_eq!(listed["nodes"][0]["status"], "running", "{list}");
    assert_eq!(listed["nodes"][0]["run_id"], first_run, "{list}");
    assert_eq!(listed["nodes"][1]["status"], "waiting", "{list}");
    assert!(listed["nodes"][0].get("output").is_none(), "{list}");
    let (_, page) = api
        .get_json("/api/workflow-runs?limit=1&status=running")
        .await
        .unwrap();
    assert_eq!(page["workflow_runs"][0]["id"], second_id, "{page}");
    assert_eq!(page["next_before_id"], second_id, "{page}");
    let (_, page) = api
        .get_json(&format!("/api/workflow-runs?before_id={second_id}"))
        .await
        .unwrap();
    assert_eq!(page["workflow_runs"][0]["id"], run_id, "{page}");
    let (_, none) = api
        .get_json("/api/workflow-runs?status=succeeded")
        .await
        .unwrap();
    assert_eq!(none["workflow_runs"], json!([]), "{none}");
    assert_invalid(
        &api.get_json("/api/workflow-runs?status=done")
            .await
            .unwrap(),
        "status",
        "not a workflow run status",
    );

    // Node actions apply to failed or cancelled nodes only.
    let retry = |run: i64, node: &str| {
        let api = api.clone();
        let path = format!("/api/workflow-runs/{run}/nodes/{node}/retry");
        async move { api.post_empty(&path).await.unwrap() }
    };
    let (status, err) = retry(run_id, "b").await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::CONFLICT, &json!("conflict")),
        "{err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("waiting"),
        "{err}"
    );
    let (status, err) = retry(run_id, "zz").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("\"zz\""));
    let (status, _) = retry(999_999, "a").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Cancelled: the running node is cancelled with its run, the waiting ones skipped.
    let (status, cancelled) = api
        .post_empty(&format!("/api/workflow-runs/{run_id}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["finished_at"].is_string(), "{cancelled}");
    assert!(
        cancelled["message"]
            .as_str()
            .unwrap()
            .contains("cancelled by service"),
        "{cancelled}"
    );
    let statuses: Vec<String> = nodes_of(&cancelled).into_iter().map(|n| n.1).collect();
    assert_eq!(statuses, ["cancelled", "skipped", "skipped", "skipped"]);
    let (_, node_run) = api
        .get_json(&format!("/api/triggers/{first_run}"))
        .await
        .unwrap();
    assert!(
        node_run["status"] == "cancelled"
            || node_run["message"]
                .as_str()
                .is_some_and(|m| m.contains("cancel requested")),
        "the node's run is cancelled too: {node_run}"
    );
    assert_eq!(cancelled["nodes"][0]["run_status"], node_run["status"]);
    let (status, err) = api
        .post_empty(&format!("/api/workflow-runs/{run_id}/cancel"))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::CONFLICT, &json!("conflict")),
        "{err}"
    );
    let (status, err) = retry(run_id, "a").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a cancelled workflow run stays: {err}"
    );
    let (status, _) = api
        .post_empty("/api/workflow-runs/999999/cancel")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A node whose job is gone fails; marked succeeded, what follows it runs, and the workflow
    // run runs again.
    let gone = api
        .create_job(
            &json!({"name": "gone", "job_type": "wfapi.gone", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let (status, chain) = api
        .post_json(
            "/api/workflows",
            &json!({"name": "chain", "schedule": {"kind": "none"},
                "nodes": [node("first", gone, &[]), node("then", job, &["first"])]}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{chain}");
    assert_eq!(chain["next_fire_at"], Value::Null);
    // A node's job cannot be deleted through the API while a workflow uses it ...
    let (status, refused) = api.delete(&format!("/api/jobs/{gone}")).await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "job_in_use", "{refused}");
    // ... but one gone all the same (deleted in the database) fails its node, not the admin.
    let pool = cluster.pool().await.unwrap();
    sqlx::query("DELETE FROM jobs WHERE id = $1")
        .bind(gone)
        .execute(&pool)
        .await
        .unwrap();
    let (status, failed) = api
        .post_empty(&format!("/api/workflows/{}/trigger", chain["id"]))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{failed}");
    let failed_id = failed["id"].as_i64().unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["nodes"][0]["status"], "failed");
    assert!(
        failed["nodes"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no longer exists"),
        "{failed}"
    );
    assert_eq!(failed["nodes"][1]["status"], "skipped");
    let (status, marked) = api
        .post_empty(&format!(
            "/api/workflow-runs/{failed_id}/nodes/first/mark-succeeded"
        ))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{marked}");
    assert_eq!(marked["status"], "running", "{marked}");
    assert_eq!(marked["nodes"][0]["status"], "succeeded");
    assert!(
        marked["nodes"][0]["message"]
            .as_str()
            .unwrap()
            .contains("marked succeeded by service"),
        "{marked}"
    );
    assert_eq!(marked["nodes"][1]["status"], "running", "{marked}");
    assert!(marked["nodes"][1]["run_id"].is_i64(), "{marked}");
    assert_eq!(marked["nodes"][1]["tries"], 1);
    let (status, err) = api
        .post_empty(&format!(
            "/api/workflow-runs/{failed_id}/nodes/then/mark-succeeded"
        ))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::CONFLICT, &json!("conflict"))
    );

    // The audit has each action, by whom, on which workflow run.
    let (_, audit) = api.get_json("/api/audit?limit=1000").await.unwrap();
    let rows = audit["audit"].as_array().unwrap();
    for (action, target) in [
        ("workflow_run.cancel", format!("workflow run {run_id}")),
        (
            "workflow_run.mark_succeeded",
            format!("workflow run {failed_id}"),
        ),
    ] {
        assert!(
            rows.iter().any(|r| r["action"] == action
                && r["target"] == target.as_str()
                && r["actor"] == "service"),
            "no {action} of {target}: {audit}"
        );
    }
    assert!(
        rows.iter()
            .any(|r| r["action"] == "run.cancel" && r["target"] == format!("run {first_run}")),
        "the node's run was cancelled as a run: {audit}"
    );
    assert!(
        !rows
            .iter()
            .any(|r| r["action"] == "workflow_run.retry_node"),
        "refused actions leave no row: {audit}"
    );
}

#[tokio::test]
async fn workflows_are_scoped_by_the_job_types_of_their_nodes() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_BOOTSTRAP_ADMIN", "root:first admin pw")])
        .await
        .unwrap();
    let base = admin.base_url().to_owned();
    let api = admin.api();
    for (name, role, pw) in [
        ("olga", "operator", "operator password"),
        ("vera", "viewer", "viewer password"),
    ] {
        let (code, out, err) = create_user(
            &cluster,
            &["--name", name, "--role", role, "--job-types", "billing.*"],
            pw,
        )
        .await;
        assert_eq!(code, 0, "{out}{err}");
    }
    let olga = token_client(&base, "olga", "operator password").await;
    let vera = token_client(&base, "vera", "viewer password").await;
    let job = |name: &str, job_type: &str| json!({"name": name, "job_type": job_type, "schedule": {"kind": "none"}});
    let invoice = api
        .create_job(&job("invoice", "billing.invoice"))
        .await
        .unwrap();
    let cleanup = api
        .create_job(&job("cleanup", "ops.cleanup"))
        .await
        .unwrap();
    let billing_wf = |name: &str| {
        json!({"name": name, "schedule": {"kind": "none"},
            "nodes": [node("bill", invoice, &[]), node("again", invoice, &["bill"])]})
    };
    let (status, billing) = api
        .post_json("/api/workflows", &billing_wf("billing"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{billing}");
    let billing = billing["id"].as_i64().unwrap();
    let mixed_body = json!({"name": "mixed", "schedule": {"kind": "none"},
        "nodes": [node("bill", invoice, &[]), node("clean", cleanup, &["bill"])]});
    let (status, mixed) = api.post_json("/api/workflows", &mixed_body).await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{mixed}");
    let mixed = mixed["id"].as_i64().unwrap();
    let (status, mixed_run) = api
        .post_empty(&format!("/api/workflows/{mixed}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{mixed_run}");
    let mixed_run = mixed_run["id"].as_i64().unwrap();

    // A viewer reads the workflows all of whose jobs it may see, and changes nothing.
    let (status, list) = vera.get_json("/api/workflows").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{list}");
    let ids: Vec<i64> = list["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [billing], "{list}");
    let (status, _) = vera
        .get_json(&format!("/api/workflows/{billing}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let (status, err) = vera
        .get_json(&format!("/api/workflows/{mixed}"))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ops.cleanup"),
        "{err}"
    );
    let (status, runs) = vera.get_json("/api/workflow-runs").await.unwrap();
    assert_eq!(
        (status, &runs["workflow_runs"]),
        (StatusCode::OK, &json!([])),
        "{runs}"
    );
    let (status, _) = vera
        .get_json(&format!("/api/workflow-runs/{mixed_run}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN);
    for (method, path, body) in [
        (
            Method::POST,
            "/api/workflows".to_owned(),
            Some(billing_wf("mine")),
        ),
        (
            Method::PUT,
            format!("/api/workflows/{billing}"),
            Some(billing_wf("billing")),
        ),
        (
            Method::POST,
            format!("/api/workflows/{billing}/trigger"),
            None,
        ),
        (
            Method::POST,
            format!("/api/workflows/{billing}/disable"),
            None,
        ),
        (Method::DELETE, format!("/api/workflows/{billing}"), None),
        (
            Method::POST,
            format!("/api/workflow-runs/{mixed_run}/cancel"),
            None,
        ),
    ] {
        let (status, err) = vera
            .request(method.clone(), &path, body.as_ref())
            .await
            .unwrap();
        assert_eq!(
            (status, &err["error"]["code"]),
            (StatusCode::FORBIDDEN, &json!("forbidden")),
            "{method} {path}: {err}"
        );
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("operator"),
            "{method} {path}: {err}"
        );
    }

    // An operator changes and runs the workflows all of whose jobs are within its patterns.
    let (status, mine) = olga
        .post_json("/api/workflows", &billing_wf("mine"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{mine}");
    let (status, run) = olga
        .post_empty(&format!("/api/workflows/{billing}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(
        (&run["kind"], &run["requested_by"]),
        (&json!("api"), &json!("olga"))
    );
    let (status, _) = put(
        &olga,
        &format!("/api/workflows/{billing}"),
        &billing_wf("billing"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut outside = billing_wf("outside");
    outside["nodes"][1]["job_id"] = json!(cleanup);
    // A node on a job the operator may not see reads as a node on no job: it tells nothing of
    // other teams' jobs.
    for (what, (status, err)) in [
        (
            "create outside",
            olga.post_json("/api/workflows", &outside).await.unwrap(),
        ),
        (
            "move outside",
            put(&olga, &format!("/api/workflows/{billing}"), &outside).await,
        ),
    ] {
        assert_eq!(
            (status, &err["error"]["code"], &err["error"]["message"]),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!("invalid_field"),
                &json!(format!(
                    "nodes[1] (\"again\").job_id: job {cleanup} does not exist"
                ))
            ),
            "{what}: {err}"
        );
    }
    for (what, (status, err)) in [
        (
            "change mixed",
            put(
                &olga,
                &format!("/api/workflows/{mixed}"),
                &billing_wf("mixed"),
            )
            .await,
        ),
        (
            "trigger mixed",
            olga.post_empty(&format!("/api/workflows/{mixed}/trigger"))
                .await
                .unwrap(),
        ),
        (
            "delete mixed",
            olga.delete(&format!("/api/workflows/{mixed}"))
                .await
                .unwrap(),
        ),
        (
            "cancel mixed run",
            olga.post_empty(&format!("/api/workflow-runs/{mixed_run}/cancel"))
                .await
                .unwrap(),
        ),
    ] {
        assert_eq!(
            (status, &err["error"]["code"]),
            (StatusCode::FORBIDDEN, &json!("forbidden")),
            "{what}: {err}"
        );
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("ops.cleanup"),
            "{what}: {err}"
        );
    }
    let (_, after) = api
        .get_json(&format!("/api/workflows/{billing}"))
        .await
        .unwrap();
    assert_eq!(
        after["nodes"][1]["job_id"], invoice,
        "nothing moved: {after}"
    );

    // From a console session, a trigger is of kind `manual`.
    let root = browser();
    let (status, session) = send(
        root.post(format!("{base}/api/session"))
            .json(&json!({"name": "root", "password": "first admin pw"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{session}");
    let csrf = session["csrf_token"].as_str().unwrap().to_owned();
    let (status, manual) = send(
        root.post(format!("{base}/api/workflows/{mixed}/trigger"))
            .header("X-CSRF-Token", &csrf),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{manual}");
    assert_eq!(
        (&manual["kind"], &manual["requested_by"]),
        (&json!("manual"), &json!("root"))
    );

    // Refused writes are in the audit as refused, with who tried.
    let (_, audit) = api.get_json("/api/audit?limit=1000").await.unwrap();
    let rows = audit["audit"].as_array().unwrap();
    let refused = |actor: &str, action: &str| {
        rows.iter()
            .any(|r| r["actor"] == actor && r["action"] == action && r["outcome"] == "refused")
    };
    assert!(refused("vera", "POST /api/workflows"), "{audit}");
    assert!(
        refused("olga", "POST /api/workflows/{id}/trigger"),
        "{audit}"
    );
    assert!(refused("olga", "DELETE /api/workflows/{id}"), "{audit}");
    assert!(
        rows.iter().any(|r| r["actor"] == "olga"
            && r["action"] == "workflow.create"
            && r["outcome"] == "done"),
        "{audit}"
    );
}

#[tokio::test]
async fn the_cli_creates_shows_and_triggers_workflows() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let job = api
        .create_job(
            &json!({"name": "step", "job_type": "wfapi.step", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let home = cluster.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let url = admin.base_url().to_owned();
    let env = [
        ("CADENZA_URL", url.as_str()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    let cadenza = |args: Vec<String>| {
        let home = home.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(&home, &env, &args).await.unwrap()
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let file = cluster.dir().join("diamond.json");
    std::fs::write(&file, diamond("cli-diamond", job).to_string()).unwrap();
    let file = file.to_str().unwrap().to_owned();
    let created = cadenza(args(&["workflows", "create", "-f", &file])).await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    assert!(
        created.stdout.contains("created workflow") && created.stdout.contains("cli-diamond"),
        "{}",
        created.stdout
    );
    let (_, list) = api.get_json("/api/workflows").await.unwrap();
    let id = list["workflows"][0]["id"].as_i64().unwrap().to_string();

    let shown = cadenza(args(&["workflows", "show", &id])).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    for needle in ["cli-diamond", "KEY", "PARENTS", "b,c", "cron:0 0 3 * * ?"] {
        assert!(shown.stdout.contains(needle), "{needle}: {}", shown.stdout);
    }
    let json = cadenza(args(&["workflows", "show", &id, "--json"])).await;
    assert_eq!(json.json()["nodes"].as_array().unwrap().len(), 4);
    let listed = cadenza(args(&["workflows", "list"])).await;
    assert!(
        listed.stdout.contains("NODES") && listed.stdout.contains("cli-diamond"),
        "{}",
        listed.stdout
    );

    let triggered = cadenza(args(&["workflows", "trigger", &id, "--json"])).await;
    assert_eq!(triggered.code, 0, "{}", triggered.stderr);
    let run = triggered.json();
    let run_id = run["id"].as_i64().unwrap().to_string();
    let first_run = run["nodes"][0]["run_id"].as_i64().unwrap().to_string();
    let shown = cadenza(args(&["workflows", "run", &run_id])).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let table: Vec<&str> = shown.stdout.lines().collect();
    let header = table
        .iter()
        .position(|l| l.contains("KEY") && l.contains("TRIES"))
        .unwrap_or_else(|| panic!("no node table: {}", shown.stdout));
    let row_a: Vec<&str> = table[header + 1].split_whitespace().collect();
    assert_eq!(
        &row_a[..4],
        ["a", "running", "1", first_run.as_str()],
        "{}",
        shown.stdout
    );
    for (i, key) in ["b", "c", "d"].iter().enumerate() {
        let row: Vec<&str> = table[header + 2 + i].split_whitespace().collect();
        assert_eq!(&row[..3], [*key, "waiting", "0"], "{}", shown.stdout);
    }
    let runs = cadenza(args(&["workflows", "runs", "--workflow", &id])).await;
    assert!(
        runs.stdout.contains(&run_id) && runs.stdout.contains("1 running, 3 waiting"),
        "{}",
        runs.stdout
    );

    // Errors name what is wrong: the admin's field, a missing file.
    let bad = cluster.dir().join("bad.json");
    std::fs::write(
        &bad,
        json!({"name": "bad", "schedule": {"kind": "none"},
            "nodes": [node("a", job, &[]), node("b", job, &["nope"])]})
        .to_string(),
    )
    .unwrap();
    let refused = cadenza(args(&["workflows", "create", "-f", bad.to_str().unwrap()])).await;
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("invalid_field")
            && refused.stderr.contains("nodes[1] (\"b\").parents")
            && refused.stderr.contains("\"nope\""),
        "{}",
        refused.stderr
    );
    let missing = cadenza(args(&[
        "workflows",
        "update",
        &id,
        "-f",
        "/nonexistent.json",
    ]))
    .await;
    assert_eq!(missing.code, 2, "{}", missing.stdout);
    assert!(
        missing.stderr.contains("--file /nonexistent.json"),
        "{}",
        missing.stderr
    );

    // Cancel, then the node actions the admin refuses, then delete.
    let cancelled = cadenza(args(&["workflows", "cancel", &run_id])).await;
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    assert!(cancelled.stdout.contains("skipped"), "{}", cancelled.stdout);
    let retried = cadenza(args(&["workflows", "retry-node", &run_id, "a"])).await;
    assert_eq!(retried.code, 1, "{}", retried.stdout);
    assert!(retried.stderr.contains("conflict"), "{}", retried.stderr);
    let deleted = cadenza(args(&["workflows", "delete", &id])).await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert!(
        deleted.stdout.contains(&format!("workflow {id} deleted")),
        "{}",
        deleted.stdout
    );
}
