//! Flow control across the cluster: a concurrency group holds its limit across workers and
//! releases its queue by priority; its API refuses what it cannot hold.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{create_job, quiesce, time};
use cadenza_integration::{wait_for, AdminHandle, ApiClient, Cluster, StatusCode, WorkerHandle};
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

/// `PATCH /api/jobs/{job}` with `change`, which must be accepted.
async fn change_job(api: &ApiClient, job: i64, change: Value) {
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{job}"), &change)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
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
    let _workers = sleep_workers(&cluster, 3).await;
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
    // The queue in release order: places 1, 2, 3, … highest priority first.
    let (status, q) = api
        .get_json("/api/concurrency-groups/warehouse/queue?limit=1000")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{q}");
    let listed = q["runs"].as_array().unwrap();
    assert!(listed.len() >= 15, "{q}");
    for (i, r) in listed.iter().enumerate() {
        assert_eq!(r["place"].as_i64(), Some(i as i64 + 1), "{q}");
    }
    let priorities: Vec<i64> = listed
        .iter()
        .map(|r| r["priority"].as_i64().unwrap())
        .collect();
    assert!(
        priorities.windows(2).all(|w| w[0] >= w[1]),
        "{priorities:?}"
    );
    assert_eq!(listed[0]["priority"], 10, "{q}");
    // The last in line says where it stands; the line only moves forward.
    let last = listed.last().unwrap();
    let (_, run) = api
        .get_json(&format!("/api/triggers/{}", last["id"]))
        .await
        .unwrap();
    assert_eq!(run["status"], "queued", "{run}");
    let place = run["place_in_line"].as_i64().unwrap();
    assert!(
        place >= 1 && place <= last["place"].as_i64().unwrap(),
        "{run} {last}"
    );
    let waiting = run["waiting"].as_str().unwrap();
    assert!(
        waiting.contains("concurrency group warehouse") && waiting.contains(" in line"),
        "{waiting}"
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
    // The admin that releases the group reports it: its limit, and a wait per released run.
    let (_, text) = api.get_text("/metrics").await.unwrap();
    assert!(
        text.contains("cadenza_group_limit{group=\"warehouse\"} 2"),
        "{text}"
    );
    let waits = text
        .lines()
        .find_map(|l| l.strip_prefix("cadenza_group_wait_seconds_count{group=\"warehouse\"} "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert_eq!(waits, Some(30), "{text}");
    // A group with jobs cannot be deleted; once they left it, it can.
    let (status, body) = api
        .delete("/api/concurrency-groups/warehouse")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "group_in_use", "{body}");
    for (job, _) in &jobs {
        change_job(api, *job, json!({"concurrency_group": null})).await;
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
        // The fields in order, as serde would take them for a struct: not the API's form.
        (json!(["g", 1]), "body"),
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

/// An admin and `n` workers serving `JOB_TYPE` with `sleep`, each holding its partitions.
async fn cluster_with_workers(n: usize) -> (Cluster, AdminHandle, Vec<WorkerHandle>) {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    // The topic exists before the workers subscribe.
    create_job(
        &admin.api(),
        json!({"name": "topic", "job_type": JOB_TYPE, "schedule": {"kind": "none"}}),
    )
    .await;
    let workers = sleep_workers(&cluster, n).await;
    (cluster, admin, workers)
}

/// `n` workers serving `JOB_TYPE` with `sleep`, once each holds partitions of its topic.
async fn sleep_workers(cluster: &Cluster, n: usize) -> Vec<WorkerHandle> {
    let mut workers = Vec::new();
    for _ in 0..n {
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
    workers
}

/// The runs of `job`, once all ended, printed.
async fn ended_runs(api: &ApiClient, job: i64) -> Vec<Value> {
    let runs = quiesce(api, &[job], Duration::from_secs(120)).await;
    for r in &runs {
        eprintln!(
            "job {job} run {} {} fire {} started {} finished {} on {} {}",
            r["id"],
            r["status"],
            r["fire_time"],
            r["started_at"],
            r["finished_at"],
            r["worker_id"],
            r["message"]
        );
    }
    runs
}

fn started(runs: &[Value]) -> Vec<&Value> {
    runs.iter().filter(|r| !r["started_at"].is_null()).collect()
}

/// On one cluster of three workers: a group paced at 5 starts a second (burst 0) given 50 runs
/// at once, and three jobs, one of each overlap policy that holds runs back, each firing faster
/// than its runs last, routed `round` for 10 s. No second sees more than 5 of the paced starts,
/// and no job of an overlap policy ever runs twice at once.
#[tokio::test]
async fn a_rate_spreads_starts_and_overlap_skip_buffer_one_and_cancel_other_never_run_a_job_twice_at_once(
) {
    let (_cluster, admin, _workers) = cluster_with_workers(3).await;
    let api = &admin.api();
    let (status, g) = post(
        api,
        "/api/concurrency-groups",
        json!({"name": "paced", "limit": 100, "rate": {"per_second": 5, "burst": 0}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{g}");
    let paced = create_job(
        api,
        json!({"name": "paced", "job_type": JOB_TYPE, "params": "10",
               "schedule": {"kind": "none"}, "concurrency_group": "paced"}),
    )
    .await;
    for _ in 0..50 {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{paced}/trigger"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let mut jobs = Vec::new();
    // (policy, every ms, run ms)
    for (overlap, every_ms, run_ms) in [
        ("skip", 1000, 3000),
        ("buffer_one", 1000, 2500),
        ("cancel_other", 2000, 5000),
    ] {
        jobs.push(
            create_job(
                api,
                json!({"name": overlap, "job_type": JOB_TYPE, "params": run_ms.to_string(),
                       "schedule": {"kind": "fix_rate", "every_ms": every_ms}, "route": "round",
                       "overlap": overlap, "misfire_threshold_ms": 60000}),
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for job in &jobs {
        change_job(api, *job, json!({"enabled": false})).await;
    }

    // skip: the fires while a run was in flight are recorded skipped, never run.
    let runs = ended_runs(api, jobs[0]).await;
    let ran = started(&runs);
    assert!(ran.len() >= 2, "{runs:?}");
    assert_eq!(most_at_once(&ran), 1, "skip: two runs of the job at once");
    let skipped: Vec<&Value> = runs.iter().filter(|r| r["status"] == "skipped").collect();
    assert!(skipped.len() >= 4, "{runs:?}");
    for r in &skipped {
        assert!(r["started_at"].is_null(), "{r}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("overlap policy skip"),
            "{r}"
        );
    }
    // Round routing spread the runs that did go over more than one worker.
    let workers: std::collections::BTreeSet<&str> =
        ran.iter().filter_map(|r| r["worker_id"].as_str()).collect();
    assert!(workers.len() > 1, "{workers:?}");

    // buffer_one: one fire waits for the run in flight, the others are skipped.
    let runs = ended_runs(api, jobs[1]).await;
    let ran = started(&runs);
    assert_eq!(
        most_at_once(&ran),
        1,
        "buffer_one: two runs of the job at once"
    );
    assert!(ran.iter().all(|r| r["status"] == "succeeded"), "{runs:?}");
    let skipped: Vec<&Value> = runs.iter().filter(|r| r["status"] == "skipped").collect();
    assert!(!skipped.is_empty(), "{runs:?}");
    assert!(skipped
        .iter()
        .all(|r| r["message"].as_str().unwrap().contains("buffer_one")));
    // The buffered fire starts as soon as the one before it ended: one after another, no gap
    // longer than the release round, publication and pickup.
    let mut spans: Vec<_> = ran
        .iter()
        .map(|r| (time(&r["started_at"]), time(&r["finished_at"])))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        let gap = (w[1].0 - w[0].1).num_milliseconds();
        assert!(gap < 2000, "{gap} ms between runs: {w:?}");
    }

    // cancel_other: each new fire cancels the run in flight, then runs.
    let runs = ended_runs(api, jobs[2]).await;
    let ran = started(&runs);
    assert_eq!(
        most_at_once(&ran),
        1,
        "cancel_other: two runs of the job at once"
    );
    let cancelled: Vec<&Value> = ran
        .iter()
        .copied()
        .filter(|r| r["status"] == "cancelled")
        .collect();
    assert!(cancelled.len() >= 2, "{runs:?}");
    for r in &cancelled {
        // Cut short by the next fire, before its 5 s.
        let (s, f) = (time(&r["started_at"]), time(&r["finished_at"]));
        assert!((f - s).num_milliseconds() < 4_500, "{r}");
    }

    // The paced group: 50 starts, never more than 5 in a second.
    let runs = quiesce(api, &[paced], Duration::from_secs(120)).await;
    assert_eq!(runs.len(), 50);
    assert!(runs.iter().all(|r| r["status"] == "succeeded"), "{runs:?}");
    let mut starts: Vec<DateTime<Utc>> = runs.iter().map(|r| time(&r["started_at"])).collect();
    starts.sort();
    for (i, s) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .take_while(|t| **t - *s < chrono::Duration::seconds(1))
            .count();
        assert!(
            within <= 5,
            "{within} starts in the second from {s}: {starts:?}"
        );
    }
    // Spread, not trickled: at least 3 starts a second over the 50 (the rate held over time is
    // below 5 a second: releases are counted over 1.2 s, in rounds 100 ms apart).
    let took = (starts[49] - starts[0]).num_milliseconds();
    assert!((8_000..16_500).contains(&took), "50 starts took {took} ms");
}

#[tokio::test]
async fn admins_killed_while_a_limited_group_runs_five_hundred_runs_never_exceed_its_limit_nor_leak_a_slot(
) {
    let total: usize = std::env::var("CADENZA_FLOW_CHAOS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    const LIMIT: usize = 10;
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
    let api = admins[0].api();
    let (status, g) = post(
        &api,
        "/api/concurrency-groups",
        json!({"name": "chaos", "limit": LIMIT}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{g}");
    let mut jobs = Vec::new();
    for (i, priority) in [0, 1].iter().enumerate() {
        jobs.push(
            create_job(
                &api,
                json!({"name": format!("chaos {i}"), "job_type": JOB_TYPE, "params": "20",
                       "schedule": {"kind": "none"}, "concurrency_group": "chaos",
                       "priority": priority}),
            )
            .await,
        );
    }
    let _workers = sleep_workers(&cluster, 3).await;
    for i in 0..total {
        let job = jobs[i % jobs.len()];
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{job}/trigger"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    // For 20 s, kill an admin every 2 to 4 s while the queue drains; the other (or its
    // replacement) takes its shards over.
    let started = std::time::Instant::now();
    let mut kills = 0;
    while started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(2000 + (kills % 3) * 1000)).await;
        let victim = kills as usize % 2;
        admins[victim].kill_9().unwrap();
        admins[victim] = cluster.spawn_admin(&env).await.unwrap();
        kills += 1;
    }
    let (_, g) = admins[0]
        .api()
        .get_json("/api/concurrency-groups/chaos")
        .await
        .unwrap();
    assert!(
        g["queued"].as_i64().unwrap() > 0,
        "the queue drained before the kills ended: {g}"
    );
    eprintln!("{kills} admins killed in {:?}", started.elapsed());
    let api = admins[0].api();
    let runs = quiesce(&api, &jobs, Duration::from_secs(180)).await;
    assert_eq!(runs.len(), total);
    let not_ok: Vec<&Value> = runs.iter().filter(|r| r["status"] != "succeeded").collect();
    assert!(not_ok.is_empty(), "every run succeeded: {not_ok:?}");
    let all: Vec<&Value> = runs.iter().collect();
    let most = most_at_once(&all);
    assert!(
        most <= LIMIT,
        "{most} runs at once, over the limit of {LIMIT}"
    );
    let (_, g) = api.get_json("/api/concurrency-groups/chaos").await.unwrap();
    assert_eq!(
        (g["in_flight"].as_i64(), g["queued"].as_i64()),
        (Some(0), Some(0)),
        "no slot leaked: {g}"
    );
}

#[tokio::test]
async fn the_cli_creates_changes_lists_and_deletes_groups() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let home = cluster.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let url = admin.base_url().to_owned();
    let env = [
        ("CADENZA_URL", url.as_str()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    // `cadenza` with the words of `line`.
    let cli = |line: &'static str| {
        let (home, env) = (home.clone(), env);
        async move {
            let args: Vec<&str> = line.split_whitespace().collect();
            cadenza_integration::run_cli(&home, &env, &args)
                .await
                .unwrap()
        }
    };
    let out = cli("groups create warehouse --limit 3 --rate 5").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("created concurrency group warehouse (limit 3)"),
        "{}",
        out.stdout
    );
    let out = cli("groups update warehouse --limit 4 --no-rate --json").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let g = out.json();
    assert_eq!(
        (g["limit"].as_i64(), g["rate"].is_null()),
        (Some(4), true),
        "{g}"
    );
    let out = cli("groups list").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let row = out
        .stdout
        .lines()
        .find(|l| l.contains("warehouse"))
        .unwrap_or_default();
    assert!(row.split_whitespace().nth(1) == Some("4"), "{}", out.stdout);
    // Errors name what is wrong: a flag missing, a group that does not exist, a bad limit.
    let out = cli("groups update warehouse").await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--limit, --rate or --no-rate"),
        "{}",
        out.stderr
    );
    let out = cli("groups show nowhere").await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("not_found") || out.stderr.contains("no concurrency group"),
        "{}",
        out.stderr
    );
    let out = cli("groups create other --limit 0").await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("limit"), "{}", out.stderr);
    // Six runs and no worker: four take the slots, two wait, listed in their order.
    let api = admin.api();
    let job = create_job(
        &api,
        json!({"name": "queued", "job_type": JOB_TYPE, "schedule": {"kind": "none"},
               "concurrency_group": "warehouse"}),
    )
    .await;
    for _ in 0..6 {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{job}/trigger"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let queue = wait_for(Duration::from_secs(20), "four runs released", || async {
        let out = cli("groups queue warehouse").await;
        Ok((out.code == 0 && out.stdout.lines().count() == 3).then_some(out))
    })
    .await
    .unwrap();
    let places: Vec<&str> = queue
        .stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(places, ["1", "2"], "{}", queue.stdout);
    assert!(
        queue.stdout.trim_start().starts_with("PLACE"),
        "{}",
        queue.stdout
    );
    change_job(&api, job, json!({"concurrency_group": null})).await;
    let out = cli("groups delete warehouse").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = cli("groups list --json").await;
    assert_eq!(out.json()["groups"], serde_json::json!([]));
}
