//! End to end through PostgreSQL and Kafka: jobs created over the HTTP API run on workers, and
//! their runs show what a user needs (status, worker, partition, offset, timings, message).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{create_job, time, CHANGE_TAKES_EFFECT, TERMINAL};
use cadenza_integration::{read_topic_to_end, wait_for, ApiClient, Cluster, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

async fn runs(api: &ApiClient, query: &str) -> Vec<Value> {
    api.runs(query).await.unwrap()
}

/// Waits until the job has at least `n` runs with `status`, and returns them.
async fn wait_runs(api: &ApiClient, job: i64, status: &str, n: usize) -> Vec<Value> {
    wait_for(
        WAIT,
        &format!("{n} {status} runs of job {job}"),
        || async move {
            let r = api
                .runs(&format!("job_id={job}&status={status}&limit=1000"))
                .await?;
            Ok((r.len() >= n).then_some(r))
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn cron_and_fix_rate_jobs_run_on_workers() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let w1 = cluster
        .spawn_worker("demo.echo=noop", "echo", &[])
        .await
        .unwrap();
    let w2 = cluster
        .spawn_worker("demo.echo=noop", "echo", &[])
        .await
        .unwrap();
    let api = &admin.api();

    let cron = create_job(
        api,
        json!({"name": "every second", "job_type": "demo.echo",
               "schedule": {"kind": "cron", "expr": "*/1 * * * * *"}, "params": "hi"}),
    )
    .await;
    let rate = create_job(
        api,
        json!({"name": "every 400 ms", "job_type": "demo.echo",
               "schedule": {"kind": "fix_rate", "every_ms": 400}}),
    )
    .await;

    let done = wait_runs(api, cron, "succeeded", 3).await;
    for r in &done {
        assert_eq!(r["kind"], "cron");
        let worker = r["worker_id"].as_str().unwrap();
        assert!(worker == w1.id() || worker == w2.id(), "ran on {worker}");
        assert!(
            r["partition"].as_i64().is_some() && r["offset"].as_i64().is_some(),
            "{r}"
        );
        let fire = time(&r["fire_time"]);
        assert_eq!(
            fire.timestamp_subsec_millis(),
            0,
            "cron fires on the second: {r}"
        );
        assert!(time(&r["started_at"]) >= fire, "{r}");
        assert!(time(&r["finished_at"]) >= time(&r["started_at"]), "{r}");
        assert_eq!(r["params"], "hi");
    }
    let done = wait_runs(api, rate, "succeeded", 5).await;
    let mut fires: Vec<DateTime<Utc>> = done.iter().map(|r| time(&r["fire_time"])).collect();
    fires.sort();
    for w in fires.windows(2) {
        assert_eq!(
            (w[1] - w[0]).num_milliseconds() % 400,
            0,
            "fix_rate spacing: {fires:?}"
        );
    }

    let (status, job) = api.get_json(&format!("/api/jobs/{cron}")).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(
        time(&job["next_fire_at"]) > Utc::now() - chrono::Duration::seconds(5),
        "{job}"
    );

    // Run now.
    let (status, body) = api
        .post_empty(&format!("/api/jobs/{rate}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["trigger_ids"][0].as_i64().unwrap();
    let manual = wait_for(WAIT, "the manual run to succeed", || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        Ok((r["status"] == "succeeded").then_some(r))
    })
    .await
    .unwrap();
    assert_eq!(manual["kind"], "manual");
    assert_eq!(manual["job_id"], rate);

    // Both workers registered through their heartbeats.
    wait_for(WAIT, "two live workers", || async move {
        let (_, w) = api.get_json("/api/workers").await?;
        let live = w["workers"]
            .as_array()
            .map(|a| a.iter().filter(|w| w["alive"] == true).count())
            .unwrap_or(0);
        Ok((live == 2).then_some(()))
    })
    .await
    .unwrap();

    // Disable stops new runs: nothing fires after the disable returned, but for a run already
    // taken for sending (due within the publish-ahead plus a clock guard).
    let (status, job) = api
        .post_empty(&format!("/api/jobs/{cron}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["enabled"], false);
    assert!(job["next_fire_at"].is_null());
    let disabled_at = Utc::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after: Vec<Value> = runs(api, &format!("job_id={cron}&limit=1000"))
        .await
        .into_iter()
        .filter(|r| time(&r["fire_time"]) > disabled_at + CHANGE_TAKES_EFFECT)
        .collect();
    assert!(after.is_empty(), "runs after disable: {after:?}");

    // Every trigger on the topic, up to end markers written now (the workers skip them as
    // fences; what the 400 ms job publishes after them is not read), is a published run of ours,
    // once.
    let topic = format!("{}.trigger.demo.echo", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(60))
        .await
        .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| r.payload_json().unwrap()["trigger_id"].as_i64().unwrap())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a trigger was published twice");
    assert!(n >= 9);
}

#[tokio::test]
async fn failing_and_timed_out_runs_show_why() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _w = cluster
        .spawn_worker("demo.fail=fail,demo.sleep=sleep", "ops", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let fail = create_job(
        api,
        json!({"name": "fails", "job_type": "demo.fail", "params": "disk full",
               "schedule": {"kind": "fix_rate", "every_ms": 1000}}),
    )
    .await;
    let slow = create_job(
        api,
        json!({"name": "too slow", "job_type": "demo.sleep", "params": "5000", "timeout_ms": 300,
               "schedule": {"kind": "fix_rate", "every_ms": 1000}}),
    )
    .await;
    let failed = wait_runs(api, fail, "failed", 2).await;
    assert!(
        failed
            .iter()
            .all(|r| r["message"].as_str().unwrap().contains("disk full")),
        "{failed:?}"
    );
    let timed_out = wait_runs(api, slow, "timed_out", 2).await;
    for r in &timed_out {
        let took = time(&r["finished_at"]) - time(&r["started_at"]);
        assert!(
            took.num_milliseconds() < 3000,
            "the sleep was cut short: {r}"
        );
        assert!(r["message"].as_str().unwrap().contains("timed out"), "{r}");
    }
}

#[tokio::test]
async fn bad_input_is_rejected_and_writes_nothing() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let base = json!({"name": "j", "job_type": "demo.echo", "schedule": {"kind": "fix_rate", "every_ms": 1000}});
    let with = |patch: Value| {
        let mut b = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases = [
        (
            with(json!({"schedule": {"kind": "cron", "expr": "not a cron"}})),
            "schedule.expr",
        ),
        (
            with(json!({"schedule": {"kind": "cron", "expr": "0 0 0 30 2 *"}})),
            "schedule.expr",
        ),
        (
            with(
                json!({"schedule": {"kind": "cron", "expr": "* * * * * *", "timezone": "Moon/Base"}}),
            ),
            "schedule.timezone",
        ),
        (with(json!({"route": "sometimes"})), "route"),
        (with(json!({"block": "wait"})), "block"),
        (with(json!({"misfire": "retry"})), "misfire"),
        (
            with(json!({"schedule": {"kind": "fix_rate", "every_ms": 0}})),
            "schedule.every_ms",
        ),
        (
            with(json!({"schedule": {"kind": "fix_delay", "delay_ms": -1}})),
            "schedule.delay_ms",
        ),
        (
            with(json!({"schedule": {"kind": "once", "at": "2001-01-01T00:00:00Z"}})),
            "schedule.at",
        ),
        (with(json!({"timeout_ms": -5})), "timeout_ms"),
        (with(json!({"job_type": "has space"})), "job_type"),
        (with(json!({"job_type": "slash/y"})), "job_type"),
        (with(json!({"colour": "blue"})), "colour"),
        (
            json!({"job_type": "demo.echo", "schedule": {"kind": "none"}}),
            "name",
        ),
        (
            json!({"name": "x", "schedule": {"kind": "none"}}),
            "job_type",
        ),
    ];
    for (body, field) in cases {
        let (status, err) = api.post_json("/api/jobs", &body).await.unwrap();
        assert!(status.is_client_error(), "{body} → {status} {err}");
        assert_eq!(err["error"]["code"], "invalid_field", "{body} → {err}");
        assert_eq!(err["error"]["field"], field, "{body} → {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains(field.split('.').next_back().unwrap()),
            "{err}"
        );
    }
    // Malformed JSON.
    let (status, text) = api
        .request_text(cadenza_integration::Method::POST, "/api/jobs", None)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let client = reqwest::Client::new();
    let resp = client
        .post(api.url("/api/jobs"))
        .bearer_auth(cluster.token())
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "malformed_json");

    // Auth.
    let (status, err) = api.with_token(None).get_json("/api/jobs").await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(err["error"]["code"], "unauthorized");
    let (status, _) = api
        .with_token(Some("wrong"))
        .post_json("/api/jobs", &base)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Nothing was written.
    let (status, jobs) = api.get_json("/api/jobs").await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(jobs["jobs"], json!([]), "{jobs}");
    let (status, _) = api.get_json("/api/jobs/999").await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, err) = api.get_json("/api/triggers?status=bogus").await.unwrap();
    assert_eq!(
        (status, &err["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("status"))
    );
}

/// Sends `head` (request line and headers, without the blank line) and then `body` in chunks
/// over a raw connection, and returns the status line and body of the answer.
async fn raw_request(addr: &str, head: &str, body: &[u8], chunked: bool) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut sent = Ok(());
    for piece in body.chunks(64 * 1024) {
        sent = if chunked {
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(piece);
            framed.extend_from_slice(b"\r\n");
            conn.write_all(&framed).await
        } else {
            conn.write_all(piece).await
        };
        if sent.is_err() {
            break;
        }
    }
    if chunked && sent.is_ok() {
        sent = conn.write_all(b"0\r\n\r\n").await;
    }
    sent.unwrap_or_else(|e| {
        panic!("the admin dropped the connection while the body was sent: {e}")
    });
    let mut answer = String::new();
    tokio::time::timeout(WAIT, conn.read_to_string(&mut answer))
        .await
        .expect("an answer within the wait")
        .unwrap();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

#[tokio::test]
async fn nul_characters_and_oversized_bodies_get_readable_errors_and_store_nothing() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let base = json!({"name": "j", "job_type": "demo.echo", "params": "kept",
        "schedule": {"kind": "cron", "expr": "0 0 3 * * *", "timezone": "UTC"}});
    let job = create_job(api, base.clone()).await;
    let with = |path: &[&str], v: Value| {
        let mut b = base.clone();
        let mut at = &mut b;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = v;
        b
    };
    let nul = json!("a\u{0}b");
    let bodies = [
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["name"], nul.clone()),
            "name",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["params"], nul.clone()),
            "params",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["job_type"], nul.clone()),
            "job_type",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["schedule", "expr"], nul.clone()),
            "schedule.expr",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["schedule", "timezone"], nul.clone()),
            "schedule.timezone",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["alarm_webhook"], nul.clone()),
            "alarm_webhook",
        ),
        (
            "POST",
            "/api/jobs".to_owned(),
            with(&["alarm_emails"], json!(["ops@example.com", "a\u{0}@b"])),
            "alarm_emails[1]",
        ),
        (
            "PATCH",
            format!("/api/jobs/{job}"),
            json!({"params": nul.clone()}),
            "params",
        ),
        (
            "PATCH",
            format!("/api/jobs/{job}"),
            json!({"name": nul.clone()}),
            "name",
        ),
        (
            "POST",
            format!("/api/jobs/{job}/trigger"),
            json!({"params": nul.clone()}),
            "params",
        ),
        (
            "POST",
            format!("/api/jobs/{job}/trigger"),
            json!({"worker": nul.clone()}),
            "worker",
        ),
        (
            "POST",
            "/api/replay".to_owned(),
            json!({"job_type": nul.clone(), "dry_run": true}),
            "job_type",
        ),
    ];
    for (method, path, body, field) in bodies {
        let method = cadenza_integration::Method::from_bytes(method.as_bytes()).unwrap();
        let (status, err) = api
            .request(method.clone(), &path, Some(&body))
            .await
            .unwrap();
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {path} {body} → {err}"
        );
        assert_eq!(
            err["error"]["code"], "invalid_field",
            "{method} {path} {body} → {err}"
        );
        assert_eq!(
            err["error"]["field"], field,
            "{method} {path} {body} → {err}"
        );
    }
    for (query, field) in [
        ("/api/jobs?job_type=a%00b", "job_type"),
        ("/api/jobs?enabled=%00", "enabled"),
        ("/api/triggers?status=%00", "status"),
        ("/api/triggers?kind=k%00", "kind"),
        ("/api/alarms?status=%00", "status"),
        ("/api/report?from=%00", "from"),
        ("/api/jobs?%00=1", "query"),
    ] {
        let (status, err) = api.get_json(query).await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query} → {err}");
        assert_eq!(err["error"]["code"], "invalid_field", "{query} → {err}");
        assert_eq!(err["error"]["field"], field, "{query} → {err}");
    }
    let (status, err) = api.get_json("/api/jobs/%00").await.unwrap();
    assert_eq!(
        (status, &err["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("id")),
        "{err}"
    );

    // A body over the 1 MiB limit: a readable 413, with the length declared or chunked, and
    // with "Expect: 100-continue" before the body is sent.
    let addr = api.base_url().trim_start_matches("http://").to_owned();
    let mut big =
        br#"{"name":"big","job_type":"demo.echo","schedule":{"kind":"none"},"params":""#.to_vec();
    big.resize(20 * 1024 * 1024, b'x');
    big.extend_from_slice(br#""}"#);
    let auth = format!("Authorization: Bearer {}", cluster.token());
    let head = format!(
        "POST /api/jobs HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {}",
        big.len()
    );
    for (head, body, chunked) in [
        (head.clone(), &big[..], false),
        (
            format!("POST /api/jobs HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"),
            &big[..3 * 1024 * 1024],
            true,
        ),
        (format!("{head}\r\nExpect: 100-continue"), &[][..], false),
        (
            format!("POST /api/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer wrong\r\nContent-Length: {}", big.len()),
            &big[..],
            false,
        ),
    ] {
        let (status, body) = raw_request(&addr, &head, body, chunked).await;
        assert!(status.contains(" 413 "), "{status}\n{body}");
        let err: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(err["error"]["code"], "payload_too_large", "{err}");
        assert!(err["error"]["message"].as_str().unwrap().contains("1 MiB"), "{err}");
    }
    // Under the limit, the usual validation answers.
    let (status, err) = api
        .post_json(
            "/api/jobs",
            &with(&["params"], json!("x".repeat(300 * 1024))),
        )
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("params")),
        "{err}"
    );

    // Nothing was stored, and the job is as it was.
    let (_, jobs) = api.get_json("/api/jobs").await.unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(jobs["jobs"][0]["params"], "kept");
    assert_eq!(jobs["jobs"][0]["name"], "j");
    assert_eq!(
        api.runs(&format!("job_id={job}")).await.unwrap(),
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn a_malformed_trigger_goes_to_the_dlq_and_the_worker_goes_on() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let _w = cluster
        .spawn_worker("demo.echo=noop", "echo", &[])
        .await
        .unwrap();
    // Creating the job creates the topic; the garbage goes in before the first real trigger.
    let topic = format!("{}.trigger.demo.echo", cluster.topic_prefix());
    let job = create_job(
        api,
        json!({"name": "after garbage", "job_type": "demo.echo",
               "schedule": {"kind": "fix_rate", "every_ms": 500}}),
    )
    .await;
    cadenza_integration::produce(&cluster.brokers(), &topic, Some(0), None, b"{not json")
        .await
        .unwrap();
    wait_runs(api, job, "succeeded", 3).await;
    let d = cluster.dlq_records(WAIT).await.unwrap().remove(0);
    assert_eq!(d["source_topic"], topic);
    assert_eq!(d["payload"], "{not json");
    assert!(!d["reason"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn result_ingest_is_idempotent_and_refuses_garbage() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let _w = cluster
        .spawn_worker("demo.echo=noop", "echo", &[])
        .await
        .unwrap();
    let job = create_job(
        api,
        json!({"name": "once now", "job_type": "demo.echo", "schedule": {"kind": "none"}}),
    )
    .await;
    let id = api.trigger_now(job).await.unwrap();
    let run = api.wait_run_status(id, "succeeded", WAIT).await.unwrap();

    // A late, contradicting `finished` event for the same run, then garbage, then a marker
    // event for another run: once the marker is applied, the earlier two were seen.
    let results = format!("{}.results", cluster.topic_prefix());
    let late = json!({"event": "finished", "trigger_id": id, "job_id": job, "worker_id": "intruder",
        "group": "g", "partition": 0, "offset": 0, "attempt": 1, "status": "failed",
        "finished_at": Utc::now().to_rfc3339(), "message": "should be ignored"});
    let key = id.to_string();
    cadenza_integration::produce(
        &cluster.brokers(),
        &results,
        None,
        Some(key.as_bytes()),
        late.to_string().as_bytes(),
    )
    .await
    .unwrap();
    cadenza_integration::produce(
        &cluster.brokers(),
        &results,
        None,
        Some(key.as_bytes()),
        b"\x00garbage",
    )
    .await
    .unwrap();
    let marker = api.trigger_now(job).await.unwrap();
    api.wait_run_status(marker, "succeeded", WAIT)
        .await
        .unwrap();
    let (_, again) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(again["status"], "succeeded");
    assert_eq!(again["worker_id"], run["worker_id"]);
    assert_eq!(again["finished_at"], run["finished_at"]);

    let d = cluster.dlq_records(WAIT).await.unwrap().remove(0);
    assert_eq!(d["source_topic"], results);
    assert!(
        d["reason"].as_str().unwrap().contains("not a result event"),
        "{d}"
    );
    assert_eq!(api.metric("cadenza_dlq_records_total").await.unwrap(), 1.0);
}

/// The run list filtered by each status returns exactly the runs in it, newest first, whichever
/// index serves that status (the pending and running ones, succeeded, and the others).
#[tokio::test]
async fn the_run_list_filters_by_every_status() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let job = create_job(
        &api,
        json!({"name": "listed", "job_type": "list.me", "schedule": {"kind": "none"}}),
    )
    .await;
    let pool = cluster.pool().await.unwrap();
    let statuses: Vec<&str> = ["scheduled", "publishing", "published", "running"]
        .into_iter()
        .chain(TERMINAL.iter().copied())
        .collect();
    // Two runs per status, their fire times far ahead and their marks from an epoch to come, so
    // the scheduler leaves them alone (the read-back would resolve a `publishing` run marked
    // under an earlier epoch, or long ago).
    let mut expected = std::collections::BTreeMap::new();
    for (i, status) in statuses.iter().chain(statuses.iter()).enumerate() {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, \
             timeout_ms, route, lease_epoch, updated_at) SELECT id, job_type, shard, 'manual', $2, \
             now() + interval '1 day' + make_interval(secs => $3), '', block, 0, route, \
             1000000000, now() + interval '1 day' FROM jobs WHERE id = $1 RETURNING id",
        )
        .bind(job)
        .bind(status)
        .bind(i as f64)
        .fetch_one(&pool)
        .await
        .unwrap();
        expected.entry(*status).or_insert_with(Vec::new).push(id);
    }
    for status in statuses.iter().copied() {
        let listed = runs(&api, &format!("job_id={job}&status={status}")).await;
        let ids: Vec<i64> = listed.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        let mut want = expected[status].clone();
        want.reverse();
        assert_eq!(ids, want, "runs listed with status={status}");
        // Without the job filter too (another index may serve it).
        let all = runs(&api, &format!("status={status}&limit=1000")).await;
        let all: Vec<i64> = all.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert_eq!(all, want, "all runs listed with status={status}");
    }
}
