//! Routing end to end: three workers in one consumer group on a six-partition topic, the admin's
//! live registry fed by their heartbeats, and every strategy's choice visible on the runs
//! (`routed_worker` chosen by the selector, `worker_id` that ran it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use cadenza_integration::scenario::{all_runs, create_job, text, time, PUBLISH_AHEAD};
use cadenza_integration::{
    produce, topic_partition_count, wait_for, AdminHandle, ApiClient, Cluster, StatusCode,
    WorkerHandle,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const JOB_TYPE: &str = "r.x";
/// Fast heartbeats and a short dead timeout keep the tests quick.
const HEARTBEAT_MS: &str = "500";
const DEAD_MS: &str = "2000";

struct Setup {
    cluster: Cluster,
    admin: AdminHandle,
    /// Sorted by worker id.
    workers: Vec<WorkerHandle>,
}

impl Setup {
    fn api(&self) -> ApiClient {
        self.admin.api()
    }
    fn ids(&self) -> Vec<String> {
        self.workers.iter().map(|w| w.id().to_owned()).collect()
    }
    fn topic(&self) -> String {
        format!("{}.trigger.{JOB_TYPE}", self.cluster.topic_prefix())
    }
}

/// An admin, the job type's topic, and `n` workers serving it with `handler`, once the registry
/// shows them holding all partitions between them.
async fn setup(n: usize, handler: &str, admin_env: &[(&str, &str)]) -> Setup {
    let cluster = Cluster::start().await.unwrap();
    let mut env = vec![("CADENZA_WORKER_DEAD_MS", DEAD_MS)];
    env.extend_from_slice(admin_env);
    let admin = cluster.spawn_admin(&env).await.unwrap();
    // The topic exists before the workers subscribe.
    create_job(
        &admin.api(),
        json!({"name": "topic", "job_type": JOB_TYPE, "schedule": {"kind": "none"}}),
    )
    .await;
    let mut workers = Vec::new();
    for _ in 0..n {
        workers.push(
            cluster
                .spawn_worker(
                    &format!("{JOB_TYPE}={handler}"),
                    "routing",
                    &[("CADENZA_HEARTBEAT_MS", HEARTBEAT_MS)],
                )
                .await
                .unwrap(),
        );
    }
    workers.sort_by(|a, b| a.id().cmp(b.id()));
    let s = Setup {
        cluster,
        admin,
        workers,
    };
    wait_assignment(&s.api(), &s.topic(), &s.ids()).await;
    s
}

async fn assignment(api: &ApiClient, topic: &str) -> anyhow::Result<BTreeMap<String, Vec<i64>>> {
    api.assignment(topic).await
}

async fn wait_assignment(api: &ApiClient, topic: &str, live: &[String]) {
    api.wait_assignment(topic, live, 6, WAIT).await.unwrap();
}

/// Every run of `job`, by fire time, then shard.
async fn runs(api: &ApiClient, job: i64) -> Vec<Value> {
    let mut r = all_runs(api, job).await;
    r.sort_by_key(|r| (time(&r["fire_time"]), r["shard_index"].as_i64()));
    r
}

/// Waits until the first `n` runs of `job` that fired after `after` (by fire time, then shard)
/// have all succeeded, and returns them.
async fn succeeded_after(api: &ApiClient, job: i64, after: DateTime<Utc>, n: usize) -> Vec<Value> {
    wait_for(
        WAIT,
        &format!("the first {n} runs of job {job} after {after} to succeed"),
        || async move {
            let r: Vec<Value> = runs(api, job)
                .await
                .into_iter()
                // Routed after `after`: due later than it by more than the publish-ahead.
                .filter(|r| time(&r["fire_time"]) > after + PUBLISH_AHEAD)
                .take(n)
                .collect();
            Ok((r.len() == n && r.iter().all(|r| r["status"] == "succeeded")).then_some(r))
        },
    )
    .await
    .unwrap()
}

/// Triggers `job` now (on `worker` if given) and waits until the run is published (routed).
async fn trigger_routed(api: &ApiClient, job: i64, worker: Option<&str>) -> Value {
    let body = match worker {
        Some(w) => json!({ "worker": w }),
        None => json!({}),
    };
    let (status, resp) = api
        .post_json(&format!("/api/jobs/{job}/trigger"), &body)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{resp}");
    let id = resp["trigger_ids"][0].as_i64().unwrap();
    wait_for(WAIT, &format!("run {id} to be published"), || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        Ok(r["partition"].as_i64().is_some().then_some(r))
    })
    .await
    .unwrap()
}

async fn wait_status(api: &ApiClient, id: i64, status: &str) -> Value {
    wait_for(WAIT, &format!("run {id} {status}"), || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        Ok((r["status"] == status).then_some(r))
    })
    .await
    .unwrap()
}

/// `first` or `last`: every run on the end worker; once it stopped, on the next one.
async fn end_worker_moves_on_when_it_stops(route: &str, end: usize, next: usize) {
    let s = setup(3, "noop", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let start = Utc::now();
    let job = create_job(
        api,
        json!({"name": route, "job_type": JOB_TYPE, "route": route,
               "schedule": {"kind": "fix_rate", "every_ms": 300}}),
    )
    .await;
    for r in succeeded_after(api, job, start, 8).await {
        assert_eq!(text(&r["routed_worker"]), ids[end], "{r}");
        assert_eq!(text(&r["worker_id"]), ids[end], "{r}");
    }
    s.workers[end].terminate().await.unwrap();
    let stopped = Utc::now();
    let rest: Vec<String> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != end)
        .map(|(_, w)| w.clone())
        .collect();
    wait_assignment(api, &s.topic(), &rest).await;
    let settled = Utc::now();
    // From the moment the tombstone arrived, never the stopped worker. While the group
    // rebalances the members' partitions are revoked and reassigned one heartbeat at a time, so
    // the end worker among those holding partitions may briefly be another one, or none.
    // Runs written ahead and not yet due carry the route planned when they were written; it
    // is checked again when they are taken for sending. Only runs due by now count, and the
    // group may settle at once (a member that leaves says so): wait for a few fire times past
    // the bound first.
    let bound = stopped + chrono::Duration::seconds(1) + PUBLISH_AHEAD;
    if let Ok(wait) = (bound + chrono::Duration::seconds(1) - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    let read_at = Utc::now();
    let after_stop: Vec<Value> = runs(api, job)
        .await
        .into_iter()
        .filter(|r| time(&r["fire_time"]) > bound)
        .filter(|r| time(&r["fire_time"]) < read_at)
        .collect();
    assert!(!after_stop.is_empty());
    for r in &after_stop {
        assert_ne!(text(&r["routed_worker"]), ids[end], "{r}");
        if r["routed_worker"].is_null() {
            assert!(text(&r["route_note"]).contains("no live worker"), "{r}");
        }
    }
    // Ran there too, once the group settled.
    for r in succeeded_after(api, job, settled, 6).await {
        assert_eq!(text(&r["routed_worker"]), ids[next], "{r}");
        assert_eq!(text(&r["worker_id"]), ids[next], "{r}");
    }
}

#[tokio::test]
async fn first_runs_on_the_first_worker_then_the_next_when_it_stops() {
    end_worker_moves_on_when_it_stops("first", 0, 1).await;
}

#[tokio::test]
async fn last_runs_on_the_last_worker_then_the_previous_when_it_stops() {
    end_worker_moves_on_when_it_stops("last", 2, 1).await;
}

#[tokio::test]
async fn round_spreads_runs_evenly_over_workers_and_their_partitions() {
    let s = setup(3, "noop", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let parts = assignment(api, &s.topic()).await.unwrap();
    let start = Utc::now();
    let job = create_job(
        api,
        json!({"name": "round", "job_type": JOB_TYPE, "route": "round",
               "schedule": {"kind": "fix_rate", "every_ms": 200}}),
    )
    .await;
    let done = succeeded_after(api, job, start, 18).await;
    let mut routed: HashMap<&str, usize> = HashMap::new();
    let mut ran: HashMap<&str, usize> = HashMap::new();
    let mut partitions = BTreeSet::new();
    for r in &done {
        *routed.entry(text(&r["routed_worker"])).or_default() += 1;
        *ran.entry(text(&r["worker_id"])).or_default() += 1;
        let p = r["partition"].as_i64().unwrap();
        assert!(
            parts[text(&r["routed_worker"])].contains(&p),
            "{r} {parts:?}"
        );
        partitions.insert(p);
    }
    eprintln!("round over 18 runs: routed {routed:?}, ran {ran:?}, partitions {partitions:?}");
    for counts in [&routed, &ran] {
        assert_eq!(counts.len(), 3, "{counts:?}");
        let max = counts.values().max().unwrap();
        let min = counts.values().min().unwrap();
        assert!(max - min <= 1, "{counts:?}");
        assert!(ids.iter().all(|w| counts.contains_key(w.as_str())));
    }
    assert_eq!(
        partitions.len(),
        6,
        "within a worker, its partitions in turn"
    );
}

/// A job type no job had when its workers started (so no admin had created its topic).
const NEW_TYPE: &str = "r.fresh";

/// Spawns `n` workers serving [`NEW_TYPE`] with `env` (besides fast heartbeats), sorted by id.
async fn spawn_new_type_workers(
    cluster: &Cluster,
    n: usize,
    env: &[(&str, &str)],
) -> Vec<WorkerHandle> {
    let mut all = vec![("CADENZA_HEARTBEAT_MS", HEARTBEAT_MS)];
    all.extend_from_slice(env);
    let mut workers = Vec::new();
    for _ in 0..n {
        workers.push(
            cluster
                .spawn_worker(&format!("{NEW_TYPE}=noop"), "fresh", &all)
                .await
                .unwrap(),
        );
    }
    workers.sort_by(|a, b| a.id().cmp(b.id()));
    workers
}

/// Waits until `ids` are live and declare that they serve [`NEW_TYPE`].
async fn wait_live_serving(api: &ApiClient, ids: &[String]) {
    wait_for(
        WAIT,
        &format!("{ids:?} live, serving {NEW_TYPE}"),
        || async move {
            let (_, w) = api.get_json("/api/workers").await?;
            let live: BTreeSet<&str> = w["workers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|w| {
                    w["alive"] == true
                        && w["job_types"]
                            .as_array()
                            .is_some_and(|t| t.iter().any(|t| t == NEW_TYPE))
                })
                .filter_map(|w| w["worker_id"].as_str())
                .collect();
            Ok(ids
                .iter()
                .all(|id| live.contains(id.as_str()))
                .then_some(()))
        },
    )
    .await
    .unwrap();
}

/// Creates a `round` job of [`NEW_TYPE`] firing every 200 ms and checks its first `n` runs:
/// every one routed by the strategy (no "no live worker" note), to a partition of the worker
/// it was routed to, run there; the workers in turn and, within each, its partitions in turn.
async fn first_runs_follow_round(
    api: &ApiClient,
    parts: &BTreeMap<String, Vec<i64>>,
    partitions: usize,
    n: usize,
) {
    let start = Utc::now();
    let job = create_job(
        api,
        json!({"name": "fresh", "job_type": NEW_TYPE, "route": "round",
               "schedule": {"kind": "fix_rate", "every_ms": 200}}),
    )
    .await;
    let done = succeeded_after(api, job, start, n).await;
    let mut routed: BTreeMap<&str, usize> = BTreeMap::new();
    let mut used = BTreeSet::new();
    let mut unrouted = Vec::new();
    for r in &done {
        let worker = text(&r["routed_worker"]);
        if worker.is_empty() || !r["route_note"].is_null() {
            unrouted.push(format!(
                "run {} at {}: partition {}, {}",
                r["id"], r["fire_time"], r["partition"], r["route_note"]
            ));
            continue;
        }
        let p = r["partition"].as_i64().unwrap();
        assert!(
            parts.get(worker).is_some_and(|ps| ps.contains(&p)),
            "{r} {parts:?}"
        );
        assert_eq!(text(&r["worker_id"]), worker, "{r}");
        *routed.entry(worker).or_default() += 1;
        used.insert(p);
    }
    assert!(
        unrouted.is_empty(),
        "{} of the first {n} runs were not routed by their strategy:\n{}",
        unrouted.len(),
        unrouted.join("\n")
    );
    eprintln!("round over the first {n} runs: {routed:?}, partitions {used:?}");
    assert_eq!(routed.len(), parts.len(), "{routed:?}");
    let max = routed.values().max().unwrap();
    let min = routed.values().min().unwrap();
    assert!(max - min <= 1, "{routed:?}");
    assert_eq!(used.len(), partitions, "every partition in turn: {used:?}");
}

#[tokio::test]
async fn a_new_job_types_first_runs_are_routed_when_its_workers_started_first() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_WORKER_DEAD_MS", DEAD_MS)])
        .await
        .unwrap();
    let api = &admin.api();
    // No job of the type exists yet: the admin has not created its topic.
    let workers = spawn_new_type_workers(&cluster, 3, &[]).await;
    let ids: Vec<String> = workers.iter().map(|w| w.id().to_owned()).collect();
    // As a user would: wait until the workers show live, nothing more. A worker's first
    // heartbeat waits for its first assignment and another goes out on every change, so by then
    // they hold the topic's partitions between them, before any job of the type exists.
    wait_live_serving(api, &ids).await;
    let topic = format!("{}.trigger.{NEW_TYPE}", cluster.topic_prefix());
    let parts = assignment(api, &topic).await.unwrap();
    let held: BTreeSet<i64> = parts.values().flatten().copied().collect();
    assert_eq!(
        held.len(),
        6,
        "live workers hold every partition: {parts:?}"
    );
    first_runs_follow_round(api, &parts, 6, 24).await;
}

#[tokio::test]
async fn workers_started_before_any_admin_create_their_topics_and_that_partition_count_wins() {
    let cluster = Cluster::start().await.unwrap();
    // Workers configured with 4 trigger partitions, the admin with the default 6.
    let workers = spawn_new_type_workers(&cluster, 3, &[("CADENZA_TRIGGER_PARTITIONS", "4")]).await;
    for w in &workers {
        w.wait_for_log("partitions assigned", WAIT).await.unwrap();
    }
    // The topics they write to were created as an admin would, not by the broker's
    // auto-creation with its defaults.
    let prefix = cluster.topic_prefix();
    for (topic, partitions) in [
        (format!("{prefix}.results"), 4),
        (format!("{prefix}.workers"), 1),
        (format!("{prefix}.dlq"), 1),
        (format!("{prefix}.progress"), 1),
    ] {
        let found = topic_partition_count(&cluster.brokers(), &topic)
            .await
            .unwrap();
        assert_eq!(found, Some(partitions), "{topic}");
    }
    let admin = cluster
        .spawn_admin(&[("CADENZA_WORKER_DEAD_MS", DEAD_MS)])
        .await
        .unwrap();
    let api = &admin.api();
    let ids: Vec<String> = workers.iter().map(|w| w.id().to_owned()).collect();
    let topic = format!("{}.trigger.{NEW_TYPE}", cluster.topic_prefix());
    api.wait_assignment(&topic, &ids, 4, WAIT).await.unwrap();
    let parts = assignment(api, &topic).await.unwrap();
    first_runs_follow_round(api, &parts, 4, 12).await;
    // The admin took the topic as it found it, and said that its own setting differs.
    let log = admin.log();
    assert!(
        log.contains(&format!("{topic} already exists with 4 partitions"))
            && log.contains("CADENZA_TRIGGER_PARTITIONS is 6"),
        "{}",
        admin.log_tail(40)
    );
}

#[tokio::test]
async fn consistent_hash_keeps_each_job_on_one_worker_and_moves_only_the_leavers_jobs() {
    let s = setup(3, "noop", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let start = Utc::now();
    let mut jobs = Vec::new();
    for i in 0..24 {
        jobs.push(
            create_job(
                api,
                json!({"name": format!("ch{i}"), "job_type": JOB_TYPE, "route": "consistent_hash",
                       "schedule": {"kind": "fix_rate", "every_ms": 500}}),
            )
            .await,
        );
    }
    let mut owner: HashMap<i64, String> = HashMap::new();
    for job in &jobs {
        let done = succeeded_after(api, *job, start, 3).await;
        let workers: BTreeSet<&str> = done.iter().map(|r| text(&r["routed_worker"])).collect();
        let ran: BTreeSet<&str> = done.iter().map(|r| text(&r["worker_id"])).collect();
        assert_eq!(workers.len(), 1, "job {job} sticks to one worker: {done:?}");
        assert_eq!(workers, ran, "job {job}");
        owner.insert(*job, workers.into_iter().next().unwrap().to_owned());
    }
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for w in owner.values() {
        *held.entry(w.as_str()).or_default() += 1;
    }
    eprintln!("consistent_hash: jobs per worker {held:?}");
    // The worker holding most jobs leaves.
    let (leaver, _) = held
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(w, n)| (w.to_string(), *n))
        .unwrap();
    let handle = s.workers.iter().find(|w| w.id() == leaver).unwrap();
    handle.terminate().await.unwrap();
    let rest: Vec<String> = ids.iter().filter(|w| **w != leaver).cloned().collect();
    wait_assignment(api, &s.topic(), &rest).await;
    let settled = Utc::now();
    let mut moved = 0;
    for job in &jobs {
        let done = succeeded_after(api, *job, settled, 2).await;
        let workers: BTreeSet<&str> = done.iter().map(|r| text(&r["routed_worker"])).collect();
        assert_eq!(
            workers.len(),
            1,
            "job {job} sticks after the change: {done:?}"
        );
        let now_on = workers.into_iter().next().unwrap();
        if owner[job] == leaver {
            assert_ne!(now_on, leaver);
            moved += 1;
        } else {
            assert_eq!(
                now_on, owner[job],
                "job {job} moved though its worker stayed"
            );
        }
        for r in &done {
            assert_eq!(text(&r["worker_id"]), now_on, "{r}");
        }
    }
    assert_eq!(moved, held[leaver.as_str()]);
}

#[tokio::test]
async fn lfu_and_lru_follow_their_definitions() {
    let s = setup(3, "noop", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let name = |r: &Value| {
        let w = text(&r["routed_worker"]);
        ["a", "b", "c"][ids.iter().position(|i| i == w).unwrap()]
    };

    // least_frequently_used: a has run 3 times; b and c catch up first, then all take turns.
    let lfu = create_job(
        api,
        json!({"name": "lfu", "job_type": JOB_TYPE, "route": "least_frequently_used",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let mut seq = String::new();
    for _ in 0..3 {
        seq.push_str(name(&trigger_routed(api, lfu, Some(&ids[0])).await));
    }
    for _ in 0..7 {
        seq.push_str(name(&trigger_routed(api, lfu, None).await));
    }
    assert_eq!(seq, "aaabcbcbca", "least frequently used");

    // least_recently_used: after b then a, the order is c (never used), b, a, c, b, a.
    let lru = create_job(
        api,
        json!({"name": "lru", "job_type": JOB_TYPE, "route": "least_recently_used",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let mut seq = String::new();
    seq.push_str(name(&trigger_routed(api, lru, Some(&ids[1])).await));
    seq.push_str(name(&trigger_routed(api, lru, Some(&ids[0])).await));
    let mut last = 0;
    for _ in 0..6 {
        let r = trigger_routed(api, lru, None).await;
        last = r["id"].as_i64().unwrap();
        seq.push_str(name(&r));
    }
    assert_eq!(seq, "bacbacba", "least recently used");

    // Each ran where it was routed.
    wait_status(api, last, "succeeded").await;
    for job in [lfu, lru] {
        for r in runs(api, job).await {
            let r = wait_status(api, r["id"].as_i64().unwrap(), "succeeded").await;
            assert_eq!(r["worker_id"], r["routed_worker"], "{r}");
        }
    }
}

#[tokio::test]
async fn failover_stops_routing_to_a_killed_worker_once_its_heartbeat_is_stale() {
    let s = setup(3, "noop", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let start = Utc::now();
    let job = create_job(
        api,
        json!({"name": "failover", "job_type": JOB_TYPE, "route": "failover",
               "schedule": {"kind": "fix_rate", "every_ms": 250}}),
    )
    .await;
    for r in succeeded_after(api, job, start, 6).await {
        assert_eq!(text(&r["routed_worker"]), ids[0], "{r}");
        assert_eq!(text(&r["worker_id"]), ids[0], "{r}");
    }
    s.workers[0].kill_9().unwrap();
    let killed = Utc::now();
    // Its heartbeat goes stale (two intervals: 1 s) before it is dead (2 s) and long before
    // the broker moves its partitions (session timeout, 10 s).
    let stale = killed + chrono::Duration::milliseconds(1500);
    let dead_id: &str = &ids[0];
    wait_for(WAIT, "the killed worker to be dead", || async move {
        let (_, w) = api.get_json("/api/workers").await?;
        let dead = w["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w["worker_id"] == dead_id && w["alive"] == false);
        Ok(dead.then_some(()))
    })
    .await
    .unwrap();
    // Naming the dead worker is refused.
    let (status, body) = api
        .post_json(
            &format!("/api/jobs/{job}/trigger"),
            &json!({"worker": ids[0]}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "worker");
    assert!(
        text(&body["error"]["message"]).contains("not live"),
        "{body}"
    );

    let after = succeeded_after(api, job, stale, 8).await;
    let limit = killed + chrono::Duration::seconds(8);
    for r in &after {
        assert_eq!(text(&r["routed_worker"]), ids[1], "{r}");
        // Before the group rebalances, the worker it was routed to ran it.
        if time(&r["fire_time"]) < limit {
            assert_eq!(text(&r["worker_id"]), ids[1], "{r}");
        }
    }
    // Runs written ahead and not yet due carry the route planned when they were written; it
    // is checked again when they are taken for sending. Only runs due by now count.
    let read_at = Utc::now();
    let to_dead: Vec<Value> = runs(api, job)
        .await
        .into_iter()
        .filter(|r| {
            let fire = time(&r["fire_time"]);
            fire > stale + PUBLISH_AHEAD && fire < read_at && r["routed_worker"] == ids[0].as_str()
        })
        .collect();
    assert!(
        to_dead.is_empty(),
        "no run routed to the killed worker once it was stale (killed at {killed}): {to_dead:#?}"
    );
}

#[tokio::test]
async fn busyover_sends_the_next_run_to_a_worker_that_is_idle_for_the_job() {
    let s = setup(3, "sleep", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let job = create_job(
        api,
        json!({"name": "busy", "job_type": JOB_TYPE, "route": "busyover",
               "schedule": {"kind": "none"}, "params": "60000"}),
    )
    .await;
    for (i, want) in ids.iter().enumerate() {
        let r = trigger_routed(api, job, None).await;
        assert_eq!(text(&r["routed_worker"]), want, "run {i}: {r}");
        let r = wait_status(api, r["id"].as_i64().unwrap(), "running").await;
        assert_eq!(text(&r["worker_id"]), want, "{r}");
        // Its heartbeat reports the job running before the next trigger.
        wait_for(
            WAIT,
            &format!("{want} to report job {job} running"),
            || async move {
                let (_, w) = api.get_json("/api/workers").await?;
                let busy = w["workers"].as_array().into_iter().flatten().any(|w| {
                    w["worker_id"] == want.as_str()
                        && w["running"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|r| r["job_id"] == job)
                });
                Ok(busy.then_some(()))
            },
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn sharding_broadcast_runs_one_shard_on_every_live_worker() {
    let s = setup(3, "shell", &[]).await;
    let api = &s.api();
    let ids = s.ids();
    let start = Utc::now();
    let job = create_job(
        api,
        json!({"name": "broadcast", "job_type": JOB_TYPE, "route": "sharding_broadcast",
               "schedule": {"kind": "fix_rate", "every_ms": 1000},
               "params": "echo shard=$CADENZA_SHARD_INDEX/$CADENZA_SHARD_TOTAL"}),
    )
    .await;
    let done = succeeded_after(api, job, start, 9).await;
    let mut fires: BTreeMap<DateTime<Utc>, Vec<&Value>> = BTreeMap::new();
    for r in &done {
        fires.entry(time(&r["fire_time"])).or_default().push(r);
    }
    let mut complete = 0;
    for (fire, shards) in &fires {
        assert_eq!(shards.len(), 3, "fire {fire}: {shards:?}");
        complete += 1;
        let idx: BTreeSet<i64> = shards
            .iter()
            .map(|r| r["shard_index"].as_i64().unwrap())
            .collect();
        assert_eq!(idx, BTreeSet::from([0, 1, 2]), "fire {fire}");
        let ran: BTreeSet<&str> = shards.iter().map(|r| text(&r["worker_id"])).collect();
        assert_eq!(
            ran.len(),
            3,
            "every worker runs one shard of {fire}: {shards:?}"
        );
        for r in shards {
            let i = r["shard_index"].as_i64().unwrap() as usize;
            assert_eq!(r["shard_total"], 3, "{r}");
            assert_eq!(text(&r["routed_worker"]), ids[i], "{r}");
            assert_eq!(text(&r["worker_id"]), ids[i], "{r}");
            let id = r["id"].as_i64().unwrap();
            let (_, full) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
            assert!(
                text(&full["log"]).contains(&format!("shard={i}/3")),
                "the handler sees its shard: {full}"
            );
        }
    }
    assert_eq!(complete, 3, "{fires:?}");

    // A manual trigger is broadcast too.
    let (status, body) = api
        .post_json(&format!("/api/jobs/{job}/trigger"), &json!({}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let tids: Vec<i64> = body["trigger_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(tids.len(), 3, "{body}");
    let mut ran = BTreeSet::new();
    for id in tids {
        let r = wait_status(api, id, "succeeded").await;
        assert_eq!(r["kind"], "manual");
        ran.insert((
            r["shard_index"].as_i64().unwrap(),
            text(&r["worker_id"]).to_owned(),
        ));
    }
    let want: BTreeSet<(i64, String)> = ids
        .iter()
        .enumerate()
        .map(|(i, w)| (i as i64, w.clone()))
        .collect();
    assert_eq!(ran, want);
}

#[tokio::test]
async fn with_no_live_worker_a_run_goes_to_the_job_hash_partition_and_says_so() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_WORKER_DEAD_MS", DEAD_MS)])
        .await
        .unwrap();
    let api = &admin.api();
    let job = create_job(
        api,
        json!({"name": "alone", "job_type": JOB_TYPE, "route": "round", "schedule": {"kind": "none"}}),
    )
    .await;
    // Naming a worker nobody has heard of is refused.
    let (status, body) = api
        .post_json(
            &format!("/api/jobs/{job}/trigger"),
            &json!({"worker": "nobody"}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "worker");
    assert!(
        text(&body["error"]["message"]).contains("no worker \"nobody\""),
        "{body}"
    );

    let r = trigger_routed(api, job, None).await;
    assert!(r["routed_worker"].is_null(), "{r}");
    assert!(text(&r["route_note"]).contains("no live worker"), "{r}");
    let partition = r["partition"].as_i64().unwrap();
    assert!((0..6).contains(&partition));
    // The same job always lands on the same partition.
    let again = trigger_routed(api, job, None).await;
    assert_eq!(again["partition"], partition);

    // A worker that comes later runs both.
    let w = cluster
        .spawn_worker(
            &format!("{JOB_TYPE}=noop"),
            "routing",
            &[("CADENZA_HEARTBEAT_MS", HEARTBEAT_MS)],
        )
        .await
        .unwrap();
    for id in [r["id"].as_i64().unwrap(), again["id"].as_i64().unwrap()] {
        let done = wait_status(api, id, "succeeded").await;
        assert_eq!(text(&done["worker_id"]), w.id());
        assert!(
            text(&done["route_note"]).contains("no live worker"),
            "the note stays: {done}"
        );
    }
}

#[tokio::test]
async fn an_unknown_strategy_is_rejected() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let (status, body) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "j", "job_type": JOB_TYPE, "route": "sometimes",
                    "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    assert!(status.is_client_error(), "{status} {body}");
    assert_eq!(body["error"]["field"], "route", "{body}");
    assert!(
        text(&body["error"]["message"]).contains("consistent_hash"),
        "lists the valid ones: {body}"
    );
    let job = create_job(
        api,
        json!({"name": "j", "job_type": JOB_TYPE, "schedule": {"kind": "none"}}),
    )
    .await;
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"route": "busy_over"}))
        .await
        .unwrap();
    assert!(status.is_client_error(), "{status} {body}");
    let (_, stored) = api.get_json(&format!("/api/jobs/{job}")).await.unwrap();
    assert_eq!(stored["route"], "round");
}

#[tokio::test]
async fn an_unparseable_heartbeat_is_ignored_and_the_registry_is_unchanged() {
    // A long dead timeout: the worker is paused (no heartbeats) while garbage arrives.
    let s = setup(1, "noop", &[("CADENZA_WORKER_DEAD_MS", "60000")]).await;
    let api = &s.api();
    let id = s.workers[0].id().to_owned();
    let job = create_job(
        api,
        json!({"name": "j", "job_type": JOB_TYPE, "route": "first", "schedule": {"kind": "none"}}),
    )
    .await;
    s.workers[0].pause().unwrap();
    let before = assignment(api, &s.topic()).await.unwrap();
    let topic = s.cluster.topics().workers();
    let brokers = s.cluster.brokers();
    let wrong_shape = json!({"worker_id": id}).to_string();
    let other = json!({"worker_id": "someone-else", "group": "routing", "job_types": [JOB_TYPE],
        "capacity": 1, "version": "0", "started_at": Utc::now(), "sent_at": Utc::now(),
        "interval_ms": 500, "assignments": {}})
    .to_string();
    for (key, payload) in [
        (Some(id.as_bytes()), b"{not json".as_slice()),
        (Some(id.as_bytes()), wrong_shape.as_bytes()),
        // Not UTF-8 (Kafka refuses a record without a key on a compacted topic).
        (Some(b"\xff\xfe".as_slice()), b"\xff\xfe".as_slice()),
        (Some(id.as_bytes()), other.as_bytes()),
    ] {
        produce(&brokers, &topic, None, key, payload).await.unwrap();
    }
    wait_for(WAIT, "four warnings", || async {
        let n = s
            .admin
            .log()
            .matches("unparseable heartbeat ignored")
            .count();
        Ok((n >= 4).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(assignment(api, &s.topic()).await.unwrap(), before);
    let (_, workers) = api.get_json("/api/workers").await.unwrap();
    assert_eq!(workers["workers"].as_array().unwrap().len(), 1, "{workers}");
    // The selector still sees the worker live with its partitions.
    let r = trigger_routed(api, job, None).await;
    assert_eq!(text(&r["routed_worker"]), id, "{r}");
    let named = trigger_routed(api, job, Some(&id)).await;
    assert_eq!(text(&named["routed_worker"]), id);
    s.workers[0].resume().unwrap();
    for r in [r, named] {
        let done = wait_status(api, r["id"].as_i64().unwrap(), "succeeded").await;
        assert_eq!(text(&done["worker_id"]), id);
    }
}
