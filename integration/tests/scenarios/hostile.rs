//! What a hostile or unlucky input can do to a running installation, each hole with the test
//! that shows it closed: a flood of sign-ins, scope escapes through references, tokens that
//! outlive their maker, oversized results, unbounded reads, forged results.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use cadenza_integration::scenario::{all_runs, time};
use cadenza_integration::{Cluster, StatusCode};
use serde_json::json;

/// The peak resident memory of process `pid`, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 64 sign-ins with wrong passwords at once, each from its own loopback address (so that no
/// per-address throttle stops them) and for its own name: the admin hashes at most two at a
/// time, so its memory stays far below a pod's 256 MiB, it stays up, and the scheduler keeps
/// publishing on time meanwhile. Without the bound, the 64 argon2 hashes hold 19 MiB each.
#[tokio::test]
async fn a_flood_of_bad_sign_ins_neither_exhausts_memory_nor_stops_the_scheduler() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_BOOTSTRAP_ADMIN", "root:first admin pw")])
        .await
        .unwrap();
    let api = admin.api();
    let (status, job) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "tick", "job_type": "flood.tick",
                    "schedule": {"kind": "fix_rate", "every_ms": 200}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_i64().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_kib = peak_rss_kib(admin.pid());

    let flood_start = chrono::Utc::now();
    let started = Instant::now();
    let url = admin.api().url("/api/session");
    let attempts = (0..64u8).map(|i| {
        let url = url.clone();
        async move {
            let client = reqwest::Client::builder()
                .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 1, i + 1)))
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            let resp = client
                .post(&url)
                .json(&json!({"name": format!("mallory{i}"), "password": format!("wrong password {i}")}))
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let retry_after = resp.headers().get("retry-after").is_some();
            let body: serde_json::Value = resp.json().await.unwrap();
            (status, retry_after, body)
        }
    });
    let answers = futures::future::join_all(attempts).await;
    let flood_secs = started.elapsed().as_secs_f64();
    let flood_end = chrono::Utc::now();

    let mut refused = 0;
    let mut busy = 0;
    for (status, retry_after, body) in &answers {
        match *status {
            StatusCode::UNAUTHORIZED => {
                assert_eq!(body["error"]["code"], "unauthorized", "{body}");
                refused += 1;
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(body["error"]["code"], "busy", "{body}");
                assert!(retry_after, "a busy answer says when to retry");
                busy += 1;
            }
            other => panic!("unexpected answer {other}: {body}"),
        }
    }
    let after_kib = peak_rss_kib(admin.pid());
    eprintln!(
        "64 bad sign-ins in {flood_secs:.1} s: {refused} refused, {busy} busy; admin peak RSS \
         {before_kib} KiB before, {after_kib} KiB after"
    );
    assert!(refused >= 2, "some sign-ins were checked and refused");
    assert!(admin.is_running(), "the admin survived the flood");
    assert!(
        after_kib < 256 * 1024,
        "the admin's peak RSS {after_kib} KiB stays under 256 MiB"
    );
    assert!(
        after_kib < before_kib + 100 * 1024,
        "the flood added at most 100 MiB to the admin's peak RSS ({before_kib} → {after_kib} KiB)"
    );

    // The right password still signs in once the slots are free.
    let mut signed_in = None;
    for _ in 0..20 {
        let resp = reqwest::Client::new()
            .post(&url)
            .json(&json!({"name": "root", "password": "first admin pw"}))
            .send()
            .await
            .unwrap();
        if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
            signed_in = Some(resp.status());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(signed_in, Some(StatusCode::OK));

    // Every fire time of the flood was published, each within a second of it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = all_runs(&api, job_id).await;
    let during: Vec<_> = runs
        .iter()
        .filter(|r| {
            let t = time(&r["fire_time"]);
            t >= flood_start && t <= flood_end
        })
        .collect();
    let expected = ((flood_end - flood_start).num_milliseconds() / 200) as usize;
    assert!(
        during.len() + 1 >= expected,
        "{} runs fired during the flood of {flood_secs:.1} s, {expected} expected",
        during.len()
    );
    for r in &during {
        let published = r["published_at"]
            .as_str()
            .unwrap_or_else(|| panic!("run not published: {r}"));
        let late = chrono::DateTime::parse_from_rfc3339(published).unwrap()
            - time(&r["fire_time"]).fixed_offset();
        assert!(
            late < chrono::Duration::seconds(1),
            "run {} published {} ms after its fire time during the flood",
            r["id"],
            late.num_milliseconds()
        );
    }
}

/// A `finished` event published again from a worker's progress record carries no log (the
/// worker that ran the run is gone): the run keeps the log its worker shipped while it ran.
#[tokio::test]
async fn a_result_published_again_without_its_log_keeps_the_shipped_log() {
    use cadenza_schemas::{
        JobId, ResultEvent, RunFinished, RunLogLines, RunStarted, RunStatus, TriggerId, WorkerId,
    };
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let job = api
        .create_job(&json!({"name": "relog", "job_type": "relog.x", "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
    let run =
        cadenza_integration::wait_for(Duration::from_secs(30), "the run to be published", || {
            let api = api.clone();
            async move {
                let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
                Ok(r["published_at"].is_string().then_some(r))
            }
        })
        .await
        .unwrap();
    let partition = run["partition"].as_i64().unwrap_or(0) as i32;
    let offset = run["offset"].as_i64().unwrap_or(0);
    let worker = WorkerId("w-gone".into());
    let now = chrono::Utc::now();
    let events = [
        ResultEvent::Started(RunStarted {
            trigger_id: TriggerId(id),
            job_id: JobId(job),
            worker_id: worker.clone(),
            group: "g".into(),
            partition,
            offset,
            attempt: 1,
            started_at: now,
            published_at: None,
        }),
        ResultEvent::Log(RunLogLines {
            trigger_id: TriggerId(id),
            job_id: JobId(job),
            worker_id: worker.clone(),
            attempt: 1,
            seq: 1,
            lines: vec!["line one".into(), "line two".into()],
        }),
    ];
    let results = cluster.topics().results();
    let key = id.to_string();
    for e in &events {
        cadenza_integration::produce(
            &cluster.brokers(),
            &results,
            None,
            Some(key.as_bytes()),
            &serde_json::to_vec(e).unwrap(),
        )
        .await
        .unwrap();
    }
    cadenza_integration::wait_for(Duration::from_secs(30), "the shipped log", || {
        let api = api.clone();
        async move {
            let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
            Ok(r["log"]
                .as_str()
                .is_some_and(|l| l.contains("line two"))
                .then_some(()))
        }
    })
    .await
    .unwrap();
    let again = ResultEvent::Finished(RunFinished {
        trigger_id: TriggerId(id),
        job_id: JobId(job),
        worker_id: worker,
        group: "g".into(),
        partition,
        offset,
        attempt: 1,
        status: RunStatus::Succeeded,
        started_at: Some(now),
        finished_at: chrono::Utc::now(),
        published_at: None,
        message: Some("done".into()),
        log: None,
        retry_requested: false,
        output: None,
    });
    cadenza_integration::produce(
        &cluster.brokers(),
        &results,
        None,
        Some(key.as_bytes()),
        &serde_json::to_vec(&again).unwrap(),
    )
    .await
    .unwrap();
    let run = api
        .wait_run_status(id, "succeeded", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(run["message"], "done", "{run}");
    let log = run["log"].as_str().unwrap_or_default();
    assert!(
        log.contains("line one") && log.contains("line two"),
        "the shipped log is kept: {run}"
    );
}

/// A user `name` with `role` and `patterns`, and an API client acting as them (a personal
/// token created from their session).
async fn user_client(
    admin: &cadenza_integration::AdminHandle,
    name: &str,
    role: &str,
    patterns: &[&str],
) -> cadenza_integration::ApiClient {
    let password = format!("{name} password 1");
    let (status, body) = admin
        .api()
        .post_json(
            "/api/users",
            &json!({"name": name, "role": role, "job_types": patterns, "password": password}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let signed_in: serde_json::Value = browser
        .post(admin.api().url("/api/session"))
        .json(&json!({"name": name, "password": password}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let csrf = signed_in["csrf_token"].as_str().unwrap().to_owned();
    let token: serde_json::Value = browser
        .post(admin.api().url("/api/tokens"))
        .header("X-CSRF-Token", csrf)
        .json(&json!({"name": "test"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    admin
        .api()
        .with_token(Some(token["token"].as_str().unwrap()))
}

/// An operator limited to `billing.*` cannot reach a `payroll.*` job through a reference: not as
/// a child of a job it creates or changes (triggering the parent would fire it), not as a
/// workflow node, not as the child of a job it imports. Each refusal reads exactly as for an id
/// of no job, so it does not tell which jobs exist; children an admin set stay when the operator
/// changes something else.
#[tokio::test]
async fn references_to_jobs_stay_within_the_callers_patterns() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let root = admin.api();
    let none = json!({"kind": "none"});
    let payroll = root
        .create_job(&json!({"name": "pay", "job_type": "payroll.pay", "schedule": none}))
        .await
        .unwrap();
    let billing = root
        .create_job(&json!({"name": "invoice", "job_type": "billing.invoice", "schedule": none}))
        .await
        .unwrap();
    let nobody = payroll + billing + 1000;
    let olga = user_client(
        &admin,
        "olga",
        "operator",
        &["billing.*", "xxl.billing-app.*"],
    )
    .await;

    // The refusal for a job of another scope, with the id replaced, equals the one for no job.
    let same_as_missing = |status: StatusCode, body: &serde_json::Value, id: i64, what: &str| {
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
        body["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&id.to_string(), "N")
    };

    // Children of a new job.
    let child_of = |id: i64| {
        json!({"name": "escape", "job_type": "billing.escape", "schedule": {"kind": "none"},
               "children": [id]})
    };
    let (s1, b1) = olga
        .post_json("/api/jobs", &child_of(payroll))
        .await
        .unwrap();
    let (s2, b2) = olga
        .post_json("/api/jobs", &child_of(nobody))
        .await
        .unwrap();
    assert_eq!(
        same_as_missing(s1, &b1, payroll, "a payroll child"),
        same_as_missing(s2, &b2, nobody, "a missing child")
    );
    assert_eq!(b1["error"]["field"], "children", "{b1}");

    // Children added by a change.
    let path = format!("/api/jobs/{billing}");
    let (s1, b1) = olga
        .patch_json(&path, &json!({"children": [payroll]}))
        .await
        .unwrap();
    let (s2, b2) = olga
        .patch_json(&path, &json!({"children": [nobody]}))
        .await
        .unwrap();
    assert_eq!(
        same_as_missing(s1, &b1, payroll, "a payroll child added"),
        same_as_missing(s2, &b2, nobody, "a missing child added")
    );
    // An admin's choice stays: the operator changes something else of the job.
    let (status, body) = root
        .patch_json(&path, &json!({"children": [payroll]}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = olga
        .patch_json(&path, &json!({"params": "--month=11"}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["children"], json!([payroll]), "{body}");

    // Workflow nodes.
    let workflow = |id: i64| {
        json!({"name": format!("wf-{id}"), "schedule": {"kind": "none"},
               "nodes": [{"key": "a", "job_id": id}]})
    };
    let (s1, b1) = olga
        .post_json("/api/workflows", &workflow(payroll))
        .await
        .unwrap();
    let (s2, b2) = olga
        .post_json("/api/workflows", &workflow(nobody))
        .await
        .unwrap();
    assert_eq!(
        same_as_missing(s1, &b1, payroll, "a payroll node"),
        same_as_missing(s2, &b2, nobody, "a missing node")
    );

    // Import: a child imported before, of a job type outside the patterns, is as unknown.
    let row = |id: i64, app: i64, handler: &str, children: &str| {
        json!({"id": id, "job_group": app, "job_desc": handler, "schedule_type": "NONE",
               "schedule_conf": "", "misfire_strategy": "DO_NOTHING",
               "executor_route_strategy": "FIRST", "executor_handler": handler,
               "executor_param": "", "executor_block_strategy": "SERIAL_EXECUTION",
               "executor_timeout": 0, "executor_fail_retry_count": 0, "glue_type": "BEAN",
               "glue_source": "", "child_jobid": children, "trigger_status": 0,
               "alarm_email": "", "author": "ops"})
    };
    let groups = json!([
        {"id": 1, "app_name": "billing-app", "title": "Billing", "address_type": 0},
        {"id": 2, "app_name": "payroll-app", "title": "Payroll", "address_type": 0},
    ]);
    let (status, body) = root
        .post_json(
            "/api/import/xxl-job",
            &json!({"jobs": [row(7, 2, "payHandler", "")], "groups": groups, "source": "prod"}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = olga
        .post_json(
            "/api/import/xxl-job",
            &json!({"jobs": [row(8, 1, "invoiceHandler", "7")], "groups": groups,
                    "source": "prod"}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "import_rejected", "{body}");
    let errors = body["report"]["rows"][0]["errors"].to_string();
    assert!(
        errors.contains("child job 7 is not in this export and was not imported"),
        "{errors}"
    );
    assert!(
        !body.to_string().contains(&format!("\"job_id\":{payroll}")),
        "{body}"
    );
}

/// A viewer asking for a year's report over thousands of jobs (here 2,000 jobs × 366 days, 732,000
/// rows) gets it a page at a time: the admin never holds the whole of it, its memory stays
/// bounded, and the day totals are whole in every page.
#[tokio::test]
async fn a_years_report_over_many_jobs_comes_a_page_at_a_time() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let pool = cluster.pool().await.unwrap();
    sqlx::query(
        "INSERT INTO daily_report (day, job_id, status, runs)
         SELECT d::date, j, 'succeeded', 3
         FROM generate_series(DATE '2026-01-01', DATE '2026-12-31' + 1, interval '1 day') AS d,
              generate_series(1, 2000) AS j",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO daily_type_report (day, job_type, status, runs)
         SELECT d::date, 'bulk.job', 'succeeded', 6000
         FROM generate_series(DATE '2026-01-01', DATE '2026-12-31' + 1, interval '1 day') AS d",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before_kib = peak_rss_kib(admin.pid());
    let api = admin.api();
    let mut after: Option<String> = None;
    let mut rows = 0usize;
    let mut pages = 0;
    loop {
        let mut path = "/api/report?from=2026-01-01&to=2027-01-01".to_owned();
        if let Some(a) = &after {
            path.push_str(&format!("&after={a}"));
        }
        let (status, page) = api.get_json(&path).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{page}");
        let n = page["rows"].as_array().unwrap().len();
        assert!(n <= 10_000, "a page holds at most 10,000 rows: {n}");
        assert_eq!(
            page["days"].as_array().unwrap().len(),
            366,
            "every page has all the days"
        );
        assert_eq!(page["days"][0]["runs"], 6000);
        rows += n;
        pages += 1;
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
        if pages == 5 {
            // Enough to see the paging; the rest is the same.
            break;
        }
    }
    assert_eq!((pages, rows), (5, 50_000));
    let (status, err) = api
        .get_json("/api/report?from=2026-01-01&to=2027-01-01&after=yesterday")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"]["field"], "after", "{err}");
    let after_kib = peak_rss_kib(admin.pid());
    eprintln!("report pages: admin peak RSS {before_kib} KiB before, {after_kib} KiB after");
    assert!(
        after_kib < before_kib + 64 * 1024,
        "the report added at most 64 MiB to the admin's peak RSS ({before_kib} → {after_kib} KiB)"
    );
}

/// The XXL-JOB bridge refuses to listen beyond loopback without an access token (it would take
/// registrations and results from anyone who reaches it), before it binds anything.
#[tokio::test]
async fn the_bridge_refuses_an_open_port_without_a_token() {
    let cluster = Cluster::start().await.unwrap();
    let port = cadenza_integration::free_port().unwrap();
    let listen = format!("0.0.0.0:{port}");
    let worker = cluster
        .spawn_worker(
            "xo.echo=xxl:app/echoHandler",
            "open-bridge",
            &[("CADENZA_XXL_LISTEN", listen.as_str())],
        )
        .await
        .unwrap();
    let status = worker.wait_exit(Duration::from_secs(60)).await.unwrap();
    assert!(!status.success(), "{status}");
    let log = worker.log();
    assert!(
        log.contains("refusing to start")
            && log.contains("CADENZA_XXL_ACCESS_TOKEN")
            && log.contains(&listen),
        "{log}"
    );
}

/// A worker told to stop while its broker is down (a run in progress, its commits and its
/// tombstone with nowhere to go) still exits within its stop timeout, before a supervisor would
/// SIGKILL it; once the broker is back the run is not lost: it runs again and succeeds.
#[tokio::test]
async fn a_worker_stopped_while_its_broker_is_down_exits_in_time_and_loses_nothing() {
    use cadenza_integration::{Broker, Signal};
    let cluster = Cluster::start_on(Broker::start().await.unwrap())
        .await
        .unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let env = [
        ("CADENZA_STOP_TIMEOUT_MS", "12000"),
        ("CADENZA_DRAIN_TIMEOUT_MS", "3000"),
    ];
    let worker = cluster
        .spawn_worker("down.sleep=sleep", "down", &env)
        .await
        .unwrap();
    let job = api
        .create_job(
            &json!({"name": "long", "job_type": "down.sleep", "params": "6000",
                            "timeout_ms": 300000, "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
    api.wait_run_status(id, "running", Duration::from_secs(60))
        .await
        .unwrap();

    cluster.broker().stop().await.unwrap();
    let asked = Instant::now();
    worker.signal(Signal::SIGTERM).unwrap();
    let status = worker.wait_exit(Duration::from_secs(90)).await.unwrap();
    let took = asked.elapsed();
    eprintln!("worker stopped in {took:?} with the broker down ({status})");
    assert!(
        took < Duration::from_secs(15),
        "a stop of at most 12 s took {took:?}:\n{}",
        worker.log_tail(30)
    );

    cluster.broker().start_again().await.unwrap();
    let _again = cluster
        .spawn_worker("down.sleep=sleep", "down", &env)
        .await
        .unwrap();
    let run = api
        .wait_run_status(id, "succeeded", Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.dump_logs_tail(40)));
    assert!(run["attempt"].as_i64().unwrap() >= 2, "it ran again: {run}");
}

/// A producer on the results topic that is not the run's worker: a `started` claiming attempt
/// 2^31 − 1 (which would shut out every real result) goes to the DLQ, and a `finished` claiming
/// an attempt far past the run's changes nothing; the worker's real result ends the run.
#[tokio::test]
async fn forged_results_neither_end_a_run_nor_shut_out_its_worker() {
    use cadenza_schemas::{JobId, ResultEvent, RunFinished, RunStatus, TriggerId, WorkerId};
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let _worker = cluster
        .spawn_worker("forge.sleep=sleep", "forge", &[])
        .await
        .unwrap();
    let job = api
        .create_job(
            &json!({"name": "nap", "job_type": "forge.sleep", "params": "4000",
                            "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
    let run = api
        .wait_run_status(id, "running", Duration::from_secs(60))
        .await
        .unwrap();
    let partition = run["partition"].as_i64().unwrap() as i32;
    let results = cluster.topics().results();
    let key = id.to_string();
    let forged_started = json!({"event": "started", "trigger_id": id, "job_id": job,
        "worker_id": "mallory", "group": "forge", "partition": partition, "offset": 0,
        "attempt": 2147483647u32, "started_at": chrono::Utc::now()});
    let forged_finished = ResultEvent::Finished(RunFinished {
        trigger_id: TriggerId(id),
        job_id: JobId(job),
        worker_id: WorkerId("mallory".into()),
        group: "forge".into(),
        partition,
        offset: 0,
        attempt: 50,
        status: RunStatus::Failed,
        started_at: None,
        finished_at: chrono::Utc::now(),
        published_at: None,
        message: Some("forged".into()),
        log: None,
        retry_requested: false,
        output: None,
    });
    for payload in [
        serde_json::to_vec(&forged_started).unwrap(),
        serde_json::to_vec(&forged_finished).unwrap(),
    ] {
        cadenza_integration::produce(
            &cluster.brokers(),
            &results,
            None,
            Some(key.as_bytes()),
            &payload,
        )
        .await
        .unwrap();
    }
    let run = api
        .wait_run_status(id, "succeeded", Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.dump_logs_tail(30)));
    assert_eq!(run["attempt"], 1, "{run}");
    assert_ne!(run["message"], "forged", "{run}");
    let dlq = cluster.dlq_records(Duration::from_secs(20)).await.unwrap();
    assert!(
        dlq.iter().any(|r| r
            .to_string()
            .contains("attempt 2147483647 is not between 1 and 10000")),
        "{dlq:?}"
    );

    // Forged heartbeats: 200 "workers" claiming the job type's partitions (and partitions it
    // does not have) make a broadcast no wider than the topic.
    let topic = cluster
        .topics()
        .trigger(&cadenza_schemas::JobType::parse("forge.sleep").unwrap());
    let partitions = cadenza_integration::topic_partition_count(&cluster.brokers(), &topic)
        .await
        .unwrap()
        .unwrap();
    for i in 0..200 {
        let name = format!("forged-{i:03}");
        let now = chrono::Utc::now();
        let beat = json!({"worker_id": name, "group": "forge", "job_types": ["forge.sleep"],
            "assignments": {&topic: [i % partitions, 1000 + i]}, "capacity": 4,
            "version": "0", "started_at": now, "sent_at": now, "interval_ms": 60000});
        cadenza_integration::produce(
            &cluster.brokers(),
            &cluster.topics().workers(),
            None,
            Some(name.as_bytes()),
            &serde_json::to_vec(&beat).unwrap(),
        )
        .await
        .unwrap();
    }
    cadenza_integration::wait_for(
        Duration::from_secs(30),
        "the forged heartbeats to be read",
        || async {
            let (_, w) = api.get_json("/api/workers").await?;
            let n = w["workers"].as_array().map_or(0, |a| a.len());
            Ok((n > 200).then_some(()))
        },
    )
    .await
    .unwrap();
    let wide = api
        .create_job(
            &json!({"name": "wide", "job_type": "forge.sleep", "params": "10",
                            "route": "sharding_broadcast", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let first = api.trigger_now(wide).await.unwrap();
    let (_, run) = api
        .get_json(&format!("/api/triggers/{first}"))
        .await
        .unwrap();
    let total = run["shard_total"].as_i64().unwrap();
    assert!(
        (1..=i64::from(partitions)).contains(&total),
        "a broadcast over a {partitions}-partition topic: {run}"
    );
}

/// An admin asked to stop while a client follows a run's log (a stream that would otherwise stay
/// open until the run ends, up to an hour) and while another client trickles a request's headers
/// stops within its grace: the stream ends, the slow connection is closed.
#[tokio::test]
async fn an_admin_stops_in_time_with_log_streams_and_slow_clients_open() {
    use cadenza_integration::Signal;
    use tokio::io::AsyncWriteExt;
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    // No worker serves the job type: its run stays published, and its log stream open.
    let job = api
        .create_job(
            &json!({"name": "idle", "job_type": "nobody.serves", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let id = api.trigger_now(job).await.unwrap();
    let mut stream = reqwest::Client::new()
        .get(api.url(&format!("/api/triggers/{id}/log")))
        .bearer_auth(cluster.token())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    // A client that sends half a request's headers and then nothing.
    let mut slow = tokio::net::TcpStream::connect(admin.listen())
        .await
        .unwrap();
    slow.write_all(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    let asked = Instant::now();
    admin.signal(Signal::SIGTERM).unwrap();
    let status = admin.wait_exit(Duration::from_secs(60)).await.unwrap();
    let took = asked.elapsed();
    eprintln!("admin stopped in {took:?} ({status})");
    assert!(
        took < Duration::from_secs(25),
        "the admin took {took:?} to stop:\n{}",
        admin.log_tail(20)
    );
    // The stream ended (the client reads its end rather than waiting for ever).
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the log stream ended with the admin");
}

/// A replay of more params than the admin keeps in memory (64 MiB: here 300 runs of 256 KiB
/// each) is refused with a code and a way out, before anything is published; a part of the
/// same window that fits is planned as usual.
#[tokio::test]
async fn a_replay_of_more_params_than_fit_in_memory_is_refused_and_a_smaller_one_is_not() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let pool = cluster.pool().await.unwrap();
    let start = chrono::Utc::now();
    // Nobody serves the job type: its runs stay published on the topic.
    let job = api
        .create_job(&json!({"name": "bulky", "job_type": "bulky.load",
                            "params": "p".repeat(256 * 1024),
                            "schedule": {"kind": "fix_rate", "every_ms": 20}}))
        .await
        .unwrap();
    let published = || {
        let pool = pool.clone();
        async move {
            // Acknowledged runs are recorded in `deliveries` (their rows stay `publishing`).
            let n: i64 = sqlx::query_scalar(
                "SELECT COALESCE(sum(cardinality(run_ids)), 0)::bigint FROM deliveries \
                 WHERE job_type = 'bulky.load'",
            )
            .fetch_one(&pool)
            .await?;
            Ok::<i64, anyhow::Error>(n)
        }
    };
    cadenza_integration::wait_for(Duration::from_secs(60), "300 published runs", || async {
        Ok((published().await? >= 300).then_some(()))
    })
    .await
    .unwrap();
    let (status, body) = api
        .post_empty(&format!("/api/jobs/{job}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let end = chrono::Utc::now() + chrono::Duration::seconds(5);
    let window = |to: chrono::DateTime<chrono::Utc>| json!({"job_type": "bulky.load", "from": start, "to": to, "dry_run": true});
    let (status, body) = api.post_json("/api/replay", &window(end)).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "replay_too_large", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 64 MiB of params"),
        "{body}"
    );
    // The first 100 runs' fire times: 25 MiB.
    let first: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "SELECT fire_time FROM triggers WHERE id = ANY( \
             SELECT unnest(run_ids) FROM deliveries WHERE job_type = 'bulky.load') \
         ORDER BY fire_time LIMIT 101",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let (status, plan) = api
        .post_json("/api/replay", &window(first[100]))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["count"], 100, "{plan}");
    let replayed: i64 = sqlx::query_scalar("SELECT count(*) FROM triggers WHERE kind = 'replay'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(replayed, 0, "dry runs and a refused replay publish nothing");
}
