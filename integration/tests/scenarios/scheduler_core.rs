//! The scheduler under failure: shards shared between admins and taken over when one dies
//! (G5), every fire time published exactly once or recorded as misfired while admins are killed
//! and paused (G1, G2), and a database outage.
//!
//! `CADENZA_SCHED_CHAOS_SECS` (default 40) sets how long the chaos test runs; the test prints its
//! counts either way.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use cadenza_integration::scenario::{all_runs, time, CHANGE_TAKES_EFFECT};
use cadenza_integration::{
    read_topic_to_end, wait_for, AdminHandle, ApiClient, BrokerKind, Cluster, Signal, StatusCode,
};
use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::{json, Value};
use sqlx::PgPool;

const TTL_MS: u64 = 3000;
const RENEW_MS: u64 = 1000;
/// The admins' `CADENZA_PUBLISH_AHEAD_MS` where a test depends on it.
const PUBLISH_AHEAD_MS: u64 = 250;
/// G5: shards of a dead admin are held again within TTL + one renewal (+ the test's polling).
const TAKEOVER_BOUND: Duration = Duration::from_millis(TTL_MS + RENEW_MS + 600);

fn admin_env(id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CADENZA_ADMIN_ID", id.to_owned()),
        ("CADENZA_LEASE_TTL_MS", TTL_MS.to_string()),
        ("CADENZA_LEASE_RENEW_MS", RENEW_MS.to_string()),
        ("CADENZA_LEASE_MARGIN_MS", "1000".to_owned()),
    ]
}

async fn spawn_admin(cluster: &Cluster, id: &str) -> AdminHandle {
    spawn_admin_with(cluster, id, &[]).await
}

pub(crate) async fn spawn_admin_with(
    cluster: &Cluster,
    id: &str,
    extra: &[(&str, String)],
) -> AdminHandle {
    let mut env = admin_env(id);
    env.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    cluster.spawn_admin(&env).await.unwrap()
}

/// Trigger partitions for a chaos run of `secs` seconds: six, the default, on Apache Kafka,
/// which answers a fetch in the same time however long the partition. The Tansu test broker
/// (`CADENZA_TEST_BROKER=tansu`) lists every record batch of a partition on each fetch, so at
/// some ten thousand batches an admin's read-back after a takeover runs out of time there: on
/// it, a run longer than 80 s spreads its ~300 fire times a second over more partitions.
fn chaos_partitions(secs: u64) -> u64 {
    match BrokerKind::selected() {
        BrokerKind::Kafka => 6,
        BrokerKind::Tansu => (secs * 300 / 4000 + 1).max(6),
    }
}

/// Valid shard counts per holder (database clock).
async fn holders(pool: &PgPool) -> BTreeMap<String, i64> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT holder, count(*) FROM scheduler_lease WHERE holder IS NOT NULL AND expires_at > now() GROUP BY holder",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter().collect()
}

/// Waits until exactly `live` hold every one of the 64 shards, each about a fair share.
pub(crate) async fn wait_balanced(pool: &PgPool, live: &[&str]) -> Duration {
    let started = Instant::now();
    let live: HashSet<String> = live.iter().map(|s| s.to_string()).collect();
    let share = (64 + live.len() as i64 - 1) / live.len() as i64;
    wait_for(
        Duration::from_secs(60),
        "shards balanced over the live admins",
        || {
            let live = live.clone();
            async move {
                let h = holders(pool).await;
                let ok = h.keys().all(|k| live.contains(k))
                    && h.values().sum::<i64>() == 64
                    && live
                        .iter()
                        .all(|a| h.get(a).is_some_and(|n| *n >= share - 2 && *n <= share));
                Ok(ok.then_some(()))
            }
        },
    )
    .await
    .unwrap();
    started.elapsed()
}

/// Waits until no shard is held by `dead` and all 64 are held by others; returns how long that took.
async fn wait_taken_over(pool: &PgPool, dead: &str, since: Instant) -> Duration {
    wait_for(
        Duration::from_secs(60),
        "the dead admin's shards to be taken over",
        || async move {
            let h = holders(pool).await;
            let ok = !h.contains_key(dead) && h.values().sum::<i64>() == 64;
            Ok(ok.then(|| since.elapsed()))
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn shards_are_shared_and_taken_over_after_a_crash() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let a = spawn_admin(&cluster, "admin-a").await;
    wait_balanced(&pool, &["admin-a"]).await;
    let b = spawn_admin(&cluster, "admin-b").await;
    let c = spawn_admin(&cluster, "admin-c").await;
    let joined = wait_balanced(&pool, &["admin-a", "admin-b", "admin-c"]).await;
    println!("three admins share the shards {joined:?} after the last one started");
    // Jobs on many shards, so that every admin publishes (the health figures below).
    for _ in 0..64 {
        create(&a.api(), json!({"kind": "fix_rate", "every_ms": 1000})).await;
    }

    let killed = Instant::now();
    a.kill_9().unwrap();
    let took = wait_taken_over(&pool, "admin-a", killed).await;
    println!("takeover after SIGKILL: {took:?} (bound {TAKEOVER_BOUND:?})");
    assert!(took <= TAKEOVER_BOUND, "takeover took {took:?}");
    wait_balanced(&pool, &["admin-b", "admin-c"]).await;

    // The console's scheduler health tells the same story: a dead, holding nothing; b and c
    // alive, holding every shard between them, and publishing.
    let health = wait_for(
        Duration::from_secs(30),
        "scheduler health: b and c alive, a dead, both publishing",
        || {
            let api = c.api();
            async move {
                let (status, body) = api.get_json("/api/scheduler").await?;
                assert_eq!(status, StatusCode::OK, "{body}");
                let admin = |id: &str| {
                    body["admins"]
                        .as_array()
                        .and_then(|v| v.iter().find(|x| x["admin_id"] == id).cloned())
                };
                let ready = admin("admin-a").is_some_and(|x| x["alive"] == false)
                    && ["admin-b", "admin-c"].iter().all(|id| {
                        admin(id).is_some_and(|x| {
                            x["alive"] == true && x["published_last_minute"].as_i64() > Some(0)
                        })
                    });
                Ok(ready.then_some(body))
            }
        },
    )
    .await
    .unwrap();
    println!("scheduler health: {health}");
    assert_eq!(health["shard_count"], 64);
    assert_eq!(health["unheld_shards"], json!([]));
    let mut held: Vec<i64> = Vec::new();
    for admin in health["admins"].as_array().unwrap() {
        let shards: Vec<i64> = admin["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_i64().unwrap())
            .collect();
        if admin["admin_id"] == "admin-a" {
            assert!(shards.is_empty(), "a dead admin holds nothing: {admin}");
            continue;
        }
        let (p50, p99, max) = (
            admin["lateness_p50_ms"].as_i64().unwrap(),
            admin["lateness_p99_ms"].as_i64().unwrap(),
            admin["lateness_max_ms"].as_i64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= max, "{admin}");
        // Fire times of the dead admin's shards were published late by up to a takeover.
        assert!(max <= TAKEOVER_BOUND.as_millis() as i64 + 2_000, "{admin}");
        held.extend(shards);
    }
    held.sort_unstable();
    assert_eq!(held, (0..64).collect::<Vec<i64>>(), "each shard held once");

    // A graceful stop hands the shards over at once.
    let _a2 = spawn_admin(&cluster, "admin-a2").await;
    wait_balanced(&pool, &["admin-a2", "admin-b", "admin-c"]).await;
    let stopped = Instant::now();
    b.signal(Signal::SIGTERM).unwrap();
    let took = wait_taken_over(&pool, "admin-b", stopped).await;
    println!("takeover after SIGTERM: {took:?}");
    assert!(
        took <= Duration::from_millis(RENEW_MS * 2 + 1000),
        "graceful handover took {took:?}"
    );
    b.wait_exit(Duration::from_secs(30)).await.unwrap();
}

pub(crate) struct JobPlan {
    pub(crate) id: i64,
    first: DateTime<Utc>,
    every: chrono::Duration,
}

impl JobPlan {
    fn expected(&self, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut t = self.first;
        while t <= until {
            out.push(t);
            t += self.every;
        }
        out
    }
}

/// Counts of a run, printed by the tests.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) expected: usize,
    pub(crate) published: usize,
    pub(crate) misfired: usize,
    pub(crate) duplicates: usize,
    pub(crate) lost: usize,
    /// Runs (trigger ids) whose trigger record is on the topic more than once: one run sent
    /// twice, as opposed to two runs of one fire time.
    pub(crate) sent_twice: HashSet<i64>,
    /// Fire times with more than one run on the topic.
    pub(crate) two_runs: usize,
    /// Records read from the trigger topic (triggers and fences), and how long that took.
    records: usize,
    read_in: Duration,
    /// The runs of lost fire times, as the database has them (at most 20).
    lost_runs: Vec<String>,
}

/// How long reading a short test's trigger topic to its end may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Checks every expected fire time of `jobs` up to `until` against the trigger topic, read to
/// an end marked once nothing publishes any more (every job disabled, nothing left scheduled or
/// publishing), and the misfired runs in the database.
pub(crate) async fn tally(
    cluster: &Cluster,
    pool: &PgPool,
    jobs: &[JobPlan],
    until: DateTime<Utc>,
    read_timeout: Duration,
) -> Tally {
    let topic = format!("{}.trigger.chaos.noop", cluster.topic_prefix());
    let started = Instant::now();
    let records = read_topic_to_end(&cluster.brokers(), &topic, read_timeout)
        .await
        .unwrap();
    let read_in = started.elapsed();
    let mut on_topic: HashMap<(i64, DateTime<Utc>), usize> = HashMap::new();
    let mut runs_of: HashMap<(i64, DateTime<Utc>), HashSet<i64>> = HashMap::new();
    let mut copies: HashMap<i64, usize> = HashMap::new();
    let at: HashMap<(i32, i64), String> = records
        .iter()
        .map(|r| {
            let v = r.payload_json().unwrap_or_default();
            let what = format!("{} job {} fire {}", v["type"], v["job_id"], v["fire_time"]);
            ((r.partition, r.offset), what)
        })
        .collect();
    for r in &records {
        let v = r.payload_json().unwrap();
        if v["type"] != "trigger" {
            continue;
        }
        let key = (v["job_id"].as_i64().unwrap(), time(&v["fire_time"]));
        *on_topic.entry(key).or_default() += 1;
        let run = v["trigger_id"].as_i64().unwrap();
        runs_of.entry(key).or_default().insert(run);
        *copies.entry(run).or_default() += 1;
    }
    let misfired: Vec<(i64, DateTime<Utc>)> =
        sqlx::query_as("SELECT job_id, fire_time FROM triggers WHERE status = 'misfired'")
            .fetch_all(pool)
            .await
            .unwrap();
    let misfired: HashSet<(i64, DateTime<Utc>)> = misfired.into_iter().collect();
    let spans = skipped_spans(pool).await;
    let mut t = Tally {
        duplicates: on_topic.values().filter(|n| **n > 1).count(),
        sent_twice: copies
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(run, _)| run)
            .collect(),
        two_runs: runs_of.values().filter(|r| r.len() > 1).count(),
        records: records.len(),
        read_in,
        ..Tally::default()
    };
    let unrun = |job: &JobPlan, f: DateTime<Utc>| {
        !on_topic.contains_key(&(job.id, f)) && !misfired.contains(&(job.id, f))
    };
    for job in jobs {
        let job_spans: Vec<&SkippedSpan> = spans.iter().filter(|s| s.job_id == job.id).collect();
        for f in job.expected(until) {
            t.expected += 1;
            let published = on_topic.get(&(job.id, f)).copied().unwrap_or(0);
            let missed = misfired.contains(&(job.id, f))
                || (published == 0 && job_spans.iter().any(|s| s.covers(f)));
            match (published, missed) {
                (0, false) => {
                    t.lost += 1;
                    if t.lost_runs.len() < 20 {
                        t.lost_runs.push(describe_run(pool, job.id, f, &at).await);
                    }
                }
                (0, true) => t.misfired += 1,
                (_, false) => t.published += 1,
                (_, true) => t.duplicates += 1,
            }
        }
        // Each span counts exactly the fire times of its range that have no run: more would
        // be a fire time both sent and skipped, fewer one neither.
        for span in job_spans {
            let mut f = span.first;
            let mut without_run = 0i64;
            while f <= span.last {
                without_run += i64::from(unrun(job, f));
                f += job.every;
            }
            match without_run.cmp(&span.count) {
                std::cmp::Ordering::Less => {
                    t.duplicates += (span.count - without_run) as usize;
                }
                std::cmp::Ordering::Greater => {
                    t.lost += (without_run - span.count) as usize;
                    if t.lost_runs.len() < 20 {
                        t.lost_runs.push(format!(
                            "{span:?} has {without_run} fire times without a run"
                        ));
                    }
                }
                std::cmp::Ordering::Equal => {}
            }
        }
    }
    t
}

/// A span of fire times a job skipped (closed, or still open on the job).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SkippedSpan {
    pub(crate) job_id: i64,
    pub(crate) first: DateTime<Utc>,
    pub(crate) last: DateTime<Utc>,
    pub(crate) count: i64,
}

impl SkippedSpan {
    pub(crate) fn covers(&self, f: DateTime<Utc>) -> bool {
        self.first <= f && f <= self.last
    }
}

/// Every span of skipped fire times, closed and open.
pub(crate) async fn skipped_spans(pool: &PgPool) -> Vec<SkippedSpan> {
    sqlx::query_as(
        "SELECT job_id, first_fire AS first, last_fire AS last, count FROM misfires \
         UNION ALL \
         SELECT id, misfire_first, misfire_last, misfire_count FROM jobs WHERE misfire_count > 0",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A run's id, kind, status, partition, offset, lease epoch and last update.
type RunRow = (
    i64,
    String,
    String,
    Option<i32>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

/// A fire time's runs as the database has them, and what the topic holds where a run was
/// recorded published, for a failure message.
async fn describe_run(
    pool: &PgPool,
    job_id: i64,
    fire_time: DateTime<Utc>,
    at: &HashMap<(i32, i64), String>,
) -> String {
    let rows: Vec<RunRow> = sqlx::query_as(
        "SELECT id, kind, status, partition, \"offset\", lease_epoch, \
                    to_char(updated_at, 'HH24:MI:SS.MS') \
             FROM triggers WHERE job_id = $1 AND fire_time = $2 ORDER BY id",
    )
    .bind(job_id)
    .bind(fire_time)
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let there: Vec<Option<&String>> = rows
        .iter()
        .filter_map(|r| Some(at.get(&(r.3?, r.4?))))
        .collect();
    format!("job {job_id} fire {fire_time}: {rows:?}; on the topic there: {there:?}")
}

async fn create_jobs(api: &ApiClient, n: usize) -> Vec<JobPlan> {
    create_jobs_every(api, n, 100..=2000).await
}

/// `n` jobs of type `chaos.noop`: every fifth on a cron firing every second, the others at a
/// fixed rate, each with its own period drawn from `every_ms`.
pub(crate) async fn create_jobs_every(
    api: &ApiClient,
    n: usize,
    every_ms: std::ops::RangeInclusive<u64>,
) -> Vec<JobPlan> {
    let mut rng = rand::rng();
    let mut jobs = Vec::new();
    for i in 0..n {
        let body = if i % 5 == 0 {
            json!({"name": format!("cron {i}"), "job_type": "chaos.noop",
                   "schedule": {"kind": "cron", "expr": "* * * * * *"}})
        } else {
            json!({"name": format!("rate {i}"), "job_type": "chaos.noop",
                   "schedule": {"kind": "fix_rate", "every_ms": rng.random_range(every_ms.clone())}})
        };
        let (status, job) = api.post_json("/api/jobs", &body).await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{job}");
        let every = match job["schedule"]["kind"].as_str() {
            Some("cron") => chrono::Duration::seconds(1),
            _ => chrono::Duration::milliseconds(job["schedule"]["every_ms"].as_i64().unwrap()),
        };
        jobs.push(JobPlan {
            id: job["id"].as_i64().unwrap(),
            first: time(&job["next_fire_at"]),
            every,
        });
    }
    jobs
}

/// A job at the bounds of every duration (the API refuses anything beyond them, the database
/// too), plus one whose stored schedule cannot be planned: it stops alone, and the first one is
/// tallied with the others.
async fn absurd_durations_job(api: &ApiClient, pool: &PgPool) -> JobPlan {
    const MAX_MS: i64 = 366 * 24 * 3_600_000;
    let (status, err) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "absurd", "job_type": "chaos.noop", "misfire_threshold_ms": i64::MAX,
                    "schedule": {"kind": "fix_rate", "every_ms": 900}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let (status, job) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "longest durations", "job_type": "chaos.noop",
                    "misfire_threshold_ms": MAX_MS, "timeout_ms": MAX_MS,
                    "schedule": {"kind": "fix_rate", "every_ms": 900}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let poison = api
        .create_job(
            &json!({"name": "cannot be planned", "job_type": "chaos.noop",
            "schedule": {"kind": "fix_rate", "every_ms": 60_000}, "enabled": false}),
        )
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET schedule = jsonb_set(schedule, '{every_ms}', to_jsonb($1::bigint)), \
         enabled = true, next_fire_at = now() + interval '1 second' WHERE id = $2",
    )
    .bind(8_000_000_000_000_000i64)
    .bind(poison)
    .execute(pool)
    .await
    .unwrap();
    JobPlan {
        id: job["id"].as_i64().unwrap(),
        first: time(&job["next_fire_at"]),
        every: chrono::Duration::milliseconds(900),
    }
}

pub(crate) async fn disable_all(api: &ApiClient, jobs: &[JobPlan]) {
    for j in jobs {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{}/disable", j.id))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

/// Waits until nothing is scheduled or being published any more.
pub(crate) async fn wait_quiet(pool: &PgPool) {
    let waited = wait_for(
        Duration::from_secs(60),
        "no run left scheduled or publishing",
        || async move {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM triggers \
                 WHERE cadenza_run_status(status, id) IN ('scheduled', 'publishing')",
            )
            .fetch_one(pool)
            .await?;
            Ok((n == 0).then_some(()))
        },
    )
    .await;
    if let Err(e) = waited {
        panic!("{e:#}\n{}", describe_pending(pool).await);
    }
}

/// The runs still scheduled or publishing, with their shards' leases, for the failure message
/// of [`wait_quiet`].
async fn describe_pending(pool: &PgPool) -> String {
    let runs: Result<Vec<String>, _> = sqlx::query_scalar(
        "SELECT format('run %s job %s %s %s shard %s partition %s epoch %s fires %s marked %s', \
                       t.id, t.job_id, t.kind, t.status, t.shard, t.partition, t.lease_epoch, \
                       t.fire_time, t.updated_at) \
         FROM triggers t \
         WHERE cadenza_run_status(t.status, t.id) IN ('scheduled', 'publishing') \
         ORDER BY t.id LIMIT 20",
    )
    .fetch_all(pool)
    .await;
    let leases: Result<Vec<String>, _> = sqlx::query_scalar(
        "SELECT format('shard %s held by %s at epoch %s, live %s, settled before %s', \
                       l.shard, l.holder, l.epoch, l.expires_at > now(), l.settled_before) \
         FROM scheduler_lease l \
         WHERE l.shard IN (SELECT DISTINCT shard FROM triggers \
                           WHERE cadenza_run_status(status, id) IN ('scheduled', 'publishing')) \
         ORDER BY l.shard",
    )
    .fetch_all(pool)
    .await;
    format!("runs left: {runs:#?}\ntheir shards: {leases:#?}")
}

#[tokio::test]
async fn every_fire_time_once_while_admins_are_killed_and_paused() {
    let secs: u64 = std::env::var("CADENZA_SCHED_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let partitions = [(
        "CADENZA_TRIGGER_PARTITIONS",
        chaos_partitions(secs).to_string(),
    )];
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let mut admins: Vec<(String, AdminHandle)> = Vec::new();
    for id in ["admin-0", "admin-1", "admin-2"] {
        admins.push((
            id.to_owned(),
            spawn_admin_with(&cluster, id, &partitions).await,
        ));
    }
    // The workers create the trigger topics of the types they serve: with as many partitions.
    let worker_env = [(partitions[0].0, partitions[0].1.as_str())];
    let _w1 = cluster
        .spawn_worker("chaos.noop=noop,chaos.sh=shell", "chaos", &worker_env)
        .await
        .unwrap();
    let _w2 = cluster
        .spawn_worker("chaos.noop=noop,chaos.sh=shell", "chaos", &worker_env)
        .await
        .unwrap();
    wait_balanced(&pool, &["admin-0", "admin-1", "admin-2"]).await;
    let api = admins[0].1.api();
    let mut jobs = create_jobs(&api, 200).await;
    jobs.push(absurd_durations_job(&api, &pool).await);
    let nul = api
        .create_job(&json!({"name": "prints a NUL", "job_type": "chaos.sh",
            "params": "printf 'a\\000b'", "schedule": {"kind": "fix_rate", "every_ms": 1000}}))
        .await
        .unwrap();

    let mut rng = rand::rng();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut kills, mut pauses, mut max_takeover, mut generation) = (0, 0, Duration::ZERO, 0);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1000..4000))).await;
        let victim = rng.random_range(0..admins.len());
        let (id, handle) = admins[victim].clone();
        let t0 = Instant::now();
        if pauses == 0 || rng.random_bool(0.2) {
            // Paused past its lease: the others take over; when it wakes up it must not publish.
            handle.pause().unwrap();
            let took = wait_taken_over(&pool, &id, t0).await;
            max_takeover = max_takeover.max(took);
            // Frozen on past the takeover (longer than the lease TTL in all): its successor has
            // fenced its producer and read back what it left before it wakes.
            tokio::time::sleep(Duration::from_millis(rng.random_range(500..3000))).await;
            handle.resume().unwrap();
            pauses += 1;
        } else {
            handle.kill_9().unwrap();
            let took = wait_taken_over(&pool, &id, t0).await;
            max_takeover = max_takeover.max(took);
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
            generation += 1;
            let new_id = format!("admin-{victim}-{generation}");
            admins[victim] = (
                new_id.clone(),
                spawn_admin_with(&cluster, &new_id, &partitions).await,
            );
            kills += 1;
        }
    }
    // Let the cluster settle, then stop the jobs.
    let ids: Vec<String> = admins.iter().map(|(id, _)| id.clone()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    wait_balanced(&pool, &ids).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    disable_all(&admins[0].1.api(), &jobs).await;
    let api = admins[0].1.api();
    api.post_empty(&format!("/api/jobs/{nul}/disable"))
        .await
        .unwrap();
    wait_quiet(&pool).await;
    // Nothing publishes to the trigger topic any more: every job is disabled and no run is left
    // scheduled or publishing (so no admin has a run to send, or a fence to write). Its end is
    // marked now; the workers skip the markers (fences), the admins' read-backs ignore them.
    // Tansu answers a fetch in time proportional to the partition's length, more so while the
    // workers still drain their backlog: a 240 s run's topic took over two minutes there.
    let read_timeout = Duration::from_secs(60 + secs);
    let t = tally(&cluster, &pool, &jobs, until, read_timeout).await;
    println!(
        "chaos {secs} s ({} partitions): {kills} kills, {pauses} pauses; expected {}, published {}, misfired {}, duplicates {}, runs sent twice {}, lost {}, max takeover {max_takeover:?}; {} records read to the end in {:?}",
        partitions[0].1, t.expected, t.published, t.misfired, t.duplicates, t.sent_twice.len(), t.lost, t.records, t.read_in
    );
    // Every run of the job that prints a NUL ends, as do the runs after it.
    let nul_runs = wait_for(
        Duration::from_secs(90),
        "every run of the NUL-printing job to end",
        || {
            let api = api.clone();
            async move {
                let runs = api.runs(&format!("job_id={nul}&limit=1000")).await?;
                let open = runs
                    .iter()
                    .filter(|r| {
                        ["published", "running"].contains(&r["status"].as_str().unwrap_or(""))
                    })
                    .count();
                Ok((open == 0).then_some(runs))
            }
        },
    )
    .await
    .unwrap();
    let nul_ok = nul_runs
        .iter()
        .filter(|r| r["status"] == "succeeded")
        .count();
    println!("NUL job: {nul_ok} of {} runs succeeded", nul_runs.len());
    assert!(
        nul_ok > 0,
        "no run of the NUL-printing job succeeded: {nul_runs:?}"
    );
    assert!(t.expected > 1000, "{t:?}");
    assert_eq!(
        t.duplicates, 0,
        "G2: a fire time was published twice: {t:?}"
    );
    assert_eq!(
        t.lost, 0,
        "G1: fire times neither published nor misfired: {t:?}"
    );
    // With transactions (Apache Kafka) a paused admin's late send is refused as well: no run is
    // on the topic twice. Without them (Tansu) one can land after its successor's read-back.
    if BrokerKind::selected() == BrokerKind::Kafka {
        assert!(
            t.sent_twice.is_empty(),
            "G2: runs on the trigger topic twice for a read_committed reader: {t:?}"
        );
    }
    assert!(
        max_takeover <= TAKEOVER_BOUND,
        "G5: takeover took {max_takeover:?}"
    );
}

/// The scan writes a job's runs up to twice the look-ahead before their fire times, already
/// claimed. If publication then falls behind (here the admin is frozen, holding its lease), a run
/// taken for sending later than its job's misfire threshold follows the misfire strategy like
/// any other: with `do_nothing` it is recorded `misfired`, not sent late.
#[tokio::test]
async fn runs_written_ahead_and_taken_past_their_misfire_threshold_misfire() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    // A lease long enough to outlast the freeze: the admin still holds its shards when it wakes.
    // A look-ahead long enough that every run due in the freeze was written before it (up to
    // twice the look-ahead ahead), whatever the test's own delays.
    let admin = spawn_admin_with(
        &cluster,
        "admin-behind",
        &[
            ("CADENZA_LEASE_TTL_MS", "15000".to_owned()),
            ("CADENZA_LOOKAHEAD_MS", "5000".to_owned()),
            ("CADENZA_PUBLISH_AHEAD_MS", PUBLISH_AHEAD_MS.to_string()),
        ],
    )
    .await;
    let api = admin.api();
    let mut jobs = Vec::new();
    for misfire in ["do_nothing", "fire_once_now"] {
        let (status, job) = api
            .post_json(
                "/api/jobs",
                &json!({"name": format!("behind-{misfire}"), "job_type": "chaos.behind",
                "schedule": {"kind": "fix_rate", "every_ms": 250},
                "misfire": misfire, "misfire_threshold_ms": 300}),
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::CREATED, "{job}");
        jobs.push(job["id"].as_i64().unwrap());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written_ahead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM triggers WHERE job_id = ANY($1) AND status = 'publishing' AND fire_time > now() + interval '4 seconds'",
    )
    .bind(&jobs)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(written_ahead > 0, "the scan writes runs ahead, claimed");

    let frozen_at = Utc::now();
    admin.pause().unwrap();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    admin.resume().unwrap();
    let woke_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in &jobs {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{id}/disable"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    wait_quiet(&pool).await;

    // Runs due while the admin was frozen were taken more than 300 ms late: runs taken before
    // the freeze are due at most the publish-ahead after it began, and the margins cover that
    // and the freeze's end.
    let frozen_runs = |job: i64| {
        sqlx::query_as::<_, (String, Option<String>)>(
            "SELECT status, message FROM triggers WHERE job_id = $1 AND fire_time > $2 AND fire_time < $3 ORDER BY fire_time",
        )
        .bind(job)
        .bind(frozen_at + chrono::Duration::milliseconds(PUBLISH_AHEAD_MS as i64 + 350))
        .bind(woke_at - chrono::Duration::milliseconds(400))
        .fetch_all(&pool)
    };
    // do_nothing: none was sent.
    let frozen = frozen_runs(jobs[0]).await.unwrap();
    assert!(frozen.len() >= 6, "{frozen:?}");
    assert!(
        frozen.iter().all(|(status, _)| status == "misfired"),
        "runs taken past their misfire threshold were sent: {frozen:?}"
    );
    assert!(
        frozen.iter().any(|(_, m)| m
            .as_deref()
            .is_some_and(|m| m.contains("when it was taken for sending"))),
        "recorded when taken, not by the sweep: {frozen:?}"
    );
    // fire_once_now: only the latest late run is sent, the others misfired.
    let frozen = frozen_runs(jobs[1]).await.unwrap();
    let sent = frozen.iter().filter(|(s, _)| s != "misfired").count();
    assert!(frozen.len() >= 6 && sent <= 1, "{frozen:?}");
    // Runs go on after it: due once the admin woke up, they are published again.
    let after: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM triggers \
         WHERE job_id = $1 AND fire_time > $2 AND cadenza_run_status(status, id) = 'published'",
    )
    .bind(jobs[0])
    .bind(woke_at + chrono::Duration::milliseconds(500))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(after > 0, "publication resumes after the freeze");
}

#[tokio::test]
async fn a_database_outage_stops_scheduling_and_misfire_rules_apply_after() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let admin = spawn_admin(&cluster, "admin-x").await;
    let _w = cluster
        .spawn_worker("chaos.noop=noop", "chaos", &[])
        .await
        .unwrap();
    let api = admin.api();
    let (status, job) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "steady", "job_type": "chaos.noop",
            "schedule": {"kind": "fix_rate", "every_ms": 200}, "misfire_threshold_ms": 2000}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let plan = JobPlan {
        id: job["id"].as_i64().unwrap(),
        first: time(&job["next_fire_at"]),
        every: chrono::Duration::milliseconds(200),
    };
    // fix_delay jobs wait for their run's end; a run missed in the outage must not stop them.
    let mut delayed = Vec::new();
    for misfire in ["do_nothing", "fire_once_now"] {
        let (status, job) = api
            .post_json(
                "/api/jobs",
                &json!({"name": format!("delayed-{misfire}"), "job_type": "chaos.noop",
                "schedule": {"kind": "fix_delay", "delay_ms": 300}, "misfire": misfire,
                "misfire_threshold_ms": 1000}),
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::CREATED, "{job}");
        delayed.push(job["id"].as_i64().unwrap());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    pool.close().await;

    let down_at = Utc::now();
    cluster.postgres().stop().await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    cluster.postgres().start_again().await.unwrap();
    let up_at = Utc::now();
    let pool = cluster.pool().await.unwrap();
    let api = &api;
    let id = plan.id;
    // Runs resume.
    wait_succeeded_after(api, id, up_at, Duration::from_secs(60)).await;
    // Both fix_delay jobs run again after the outage.
    for job in &delayed {
        wait_succeeded_after(api, *job, up_at, Duration::from_secs(30)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    for job in &delayed {
        api.patch_json(&format!("/api/jobs/{job}"), &json!({"enabled": false}))
            .await
            .unwrap();
    }
    disable_all(api, std::slice::from_ref(&plan)).await;
    wait_quiet(&pool).await;

    // Nothing was published while the lease could not be renewed. The admin stays up (its log
    // and report are checked below) but publishes nothing more: every job is disabled and
    // nothing is left scheduled or publishing; the worker skips the end markers (fences).
    let topic = format!("{}.trigger.chaos.noop", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, READ_TIMEOUT)
        .await
        .unwrap();
    let lease_gone = down_at + chrono::Duration::milliseconds(TTL_MS as i64);
    // Trigger records only: a run whose publication could not be recorded during the outage is
    // read back afterwards, behind a fence record.
    let during: Vec<DateTime<Utc>> = records
        .iter()
        .map(|r| r.payload_json().unwrap())
        .filter(|v| v["type"] == "trigger")
        .map(|v| time(&v["published_at"]))
        .filter(|p| *p > lease_gone && *p < up_at)
        .collect();
    assert!(during.is_empty(), "published without a lease: {during:?}");

    let t = tally(
        &cluster,
        &pool,
        std::slice::from_ref(&plan),
        until,
        READ_TIMEOUT,
    )
    .await;
    println!("database outage: {t:?}");
    assert_eq!((t.duplicates, t.lost), (0, 0), "{t:?}");
    assert!(
        t.misfired >= 10,
        "fire times missed during the outage are recorded misfired: {t:?}"
    );
    assert!(
        admin.log().contains("lease renewal failed"),
        "the outage is logged"
    );
    // The daily report counts the misfires, whichever path recorded them: the scan (skipped,
    // in spans, open or closed) or the recovery (runs written ahead, found too late).
    let misfired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM triggers WHERE job_id = $1 AND status = 'misfired'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    let skipped: i64 = skipped_spans(&pool)
        .await
        .iter()
        .filter(|s| s.job_id == id)
        .map(|s| s.count)
        .sum();
    let counted = api.reported_runs(id, "misfired").await.unwrap();
    assert_eq!(counted, misfired + skipped);
    // And the API lists the spans, with the job's total.
    let (_, spans) = api
        .get_json(&format!("/api/misfires?job_id={id}"))
        .await
        .unwrap();
    assert_eq!(spans["total"], skipped, "{spans}");
    let listed: i64 = ["open", "closed"]
        .iter()
        .flat_map(|k| spans[k].as_array().unwrap().iter())
        .map(|s| s["count"].as_i64().unwrap())
        .sum();
    assert_eq!(listed, skipped, "{spans}");
}

/// Waits until job `id` has a succeeded run fired after `t`.
async fn wait_succeeded_after(api: &ApiClient, id: i64, t: DateTime<Utc>, within: Duration) {
    wait_for(
        within,
        &format!("job {id} succeeds after {t}"),
        || async move {
            let (_, r) = api
                .get_json(&format!(
                    "/api/triggers?job_id={id}&status=succeeded&limit=1"
                ))
                .await?;
            let after = r["triggers"][0]["fire_time"]
                .as_str()
                .map(|s| time(&json!(s)) > t);
            Ok((after == Some(true)).then_some(()))
        },
    )
    .await
    .unwrap();
}

/// An admin died after marking two runs `publishing`: one had reached the broker, the other had
/// not. The next holder reads the partition back to its fence record, records the first as
/// published where it landed, and sends only the second.
#[tokio::test]
async fn a_new_holder_reads_back_what_the_dead_one_sent() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let a = spawn_admin(&cluster, "admin-a").await;
    let (status, job) = a
        .api()
        .post_json(
            "/api/jobs",
            &json!({"name": "manual", "job_type": "chaos.noop", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let job_id = job["id"].as_i64().unwrap();
    wait_balanced(&pool, &["admin-a"]).await;
    a.kill_9().unwrap();

    let insert = "INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, route, partition, lease_epoch)
                  SELECT id, job_type, shard, 'manual', 'publishing', now(), '', block, 0, route, 0, 1 FROM jobs WHERE id = $1 RETURNING id";
    let landed: i64 = sqlx::query_scalar(insert)
        .bind(job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let lost: i64 = sqlx::query_scalar(insert)
        .bind(job_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let topic = format!("{}.trigger.chaos.noop", cluster.topic_prefix());
    let record = json!({"type": "trigger", "trigger_id": landed, "job_id": job_id, "job_type": "chaos.noop",
        "kind": "manual", "fire_time": Utc::now().to_rfc3339(), "block": "serial_execution",
        "published_at": Utc::now().to_rfc3339()});
    let (_, landed_offset) = cadenza_integration::produce(
        &cluster.brokers(),
        &topic,
        Some(0),
        Some(job_id.to_string().as_bytes()),
        record.to_string().as_bytes(),
    )
    .await
    .unwrap();

    let b = spawn_admin(&cluster, "admin-b").await;
    let api = &b.api();
    for id in [landed, lost] {
        wait_for(
            Duration::from_secs(30),
            "the run to be resolved",
            || async move {
                let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
                Ok((r["status"] == "published").then_some(()))
            },
        )
        .await
        .unwrap();
    }
    let (_, r) = api
        .get_json(&format!("/api/triggers/{landed}"))
        .await
        .unwrap();
    assert_eq!(r["offset"], landed_offset, "recorded where it landed: {r}");
    let records = read_topic_to_end(&cluster.brokers(), &topic, READ_TIMEOUT)
        .await
        .unwrap();
    let count = |id: i64| {
        records
            .iter()
            .filter(|r| r.payload_json().unwrap()["trigger_id"].as_i64() == Some(id))
            .count()
    };
    assert_eq!(
        (count(landed), count(lost)),
        (1, 1),
        "each run on the topic once"
    );
    // The new holder's metrics count what its read-back resolved.
    let found = api
        .metric(r#"cadenza_read_back_runs_total{outcome="found"}"#)
        .await
        .unwrap();
    let resent = api
        .metric(r#"cadenza_read_back_runs_total{outcome="resent"}"#)
        .await
        .unwrap();
    assert_eq!((found, resent), (1.0, 1.0));
    assert!(
        records
            .iter()
            .any(|r| r.header_str("cadenza-record") == Some("fence")),
        "the new holder wrote a fence record"
    );
}

/// Every run of `job`, by fire time.
async fn runs_of(api: &ApiClient, job: i64) -> Vec<Value> {
    let mut runs = all_runs(api, job).await;
    runs.sort_by_key(|r| time(&r["fire_time"]));
    runs
}

async fn wait_succeeded(api: &ApiClient, job: i64, n: usize) -> Vec<Value> {
    wait_for(
        Duration::from_secs(60),
        &format!("{n} succeeded runs of job {job}"),
        || async move {
            let runs: Vec<Value> = runs_of(api, job)
                .await
                .into_iter()
                .filter(|r| r["status"] == "succeeded")
                .collect();
            Ok((runs.len() >= n).then_some(runs))
        },
    )
    .await
    .unwrap()
}

async fn create(api: &ApiClient, schedule: Value) -> Value {
    let (status, job) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "kinds", "job_type": "chaos.noop", "schedule": schedule}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    job
}

#[tokio::test]
async fn schedule_kinds_edits_and_disabled_time() {
    let cluster = Cluster::start().await.unwrap();
    let admin = spawn_admin(&cluster, "admin-k").await;
    let _w = cluster
        .spawn_worker("chaos.noop=noop", "chaos", &[])
        .await
        .unwrap();
    let api = &admin.api();

    // once: one run at its instant, then the job disables itself.
    let at = DateTime::from_timestamp_millis(Utc::now().timestamp_millis() + 2000).unwrap();
    let once = create(api, json!({"kind": "once", "at": at.to_rfc3339()})).await;
    let once_id = once["id"].as_i64().unwrap();
    let runs = wait_succeeded(api, once_id, 1).await;
    assert_eq!(time(&runs[0]["fire_time"]), at);
    assert_eq!(runs[0]["kind"], "once");
    let (_, job) = api.get_json(&format!("/api/jobs/{once_id}")).await.unwrap();
    assert_eq!(
        (job["enabled"].clone(), job["next_fire_at"].clone()),
        (json!(false), Value::Null),
        "{job}"
    );

    // fix_delay: each run fires delay_ms after the previous one finished.
    let delay = create(api, json!({"kind": "fix_delay", "delay_ms": 700})).await;
    let delay_id = delay["id"].as_i64().unwrap();
    let runs = wait_succeeded(api, delay_id, 4).await;
    for w in runs.windows(2) {
        let gap = (time(&w[1]["fire_time"]) - time(&w[0]["finished_at"])).num_milliseconds();
        assert!(
            (700..1000).contains(&gap),
            "fire {gap} ms after the previous run finished: {w:?}"
        );
    }

    // An edit takes effect at once: from once a minute to every 300 ms.
    let slow = create(api, json!({"kind": "fix_rate", "every_ms": 60_000})).await;
    let slow_id = slow["id"].as_i64().unwrap();
    let edited_at = Utc::now();
    let (status, job) = api
        .patch_json(
            &format!("/api/jobs/{slow_id}"),
            &json!({"schedule": {"kind": "fix_rate", "every_ms": 300}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{job}");
    assert!(
        time(&job["next_fire_at"]) < edited_at + chrono::Duration::seconds(1),
        "{job}"
    );
    let runs = wait_succeeded(api, slow_id, 5).await;
    assert!(
        time(&runs[4]["fire_time"]) < edited_at + chrono::Duration::seconds(4),
        "{runs:?}"
    );

    // Disabled time never fires, also not as misfires when re-enabled.
    let cron = create(
        api,
        json!({"kind": "cron", "expr": "* * * * * *", "timezone": "Europe/Berlin"}),
    )
    .await;
    let cron_id = cron["id"].as_i64().unwrap();
    wait_succeeded(api, cron_id, 2).await;
    let (status, _) = api
        .post_empty(&format!("/api/jobs/{cron_id}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    // A run already taken for sending (due within the publish-ahead plus a clock guard) still
    // runs; none after that.
    let off = Utc::now() + CHANGE_TAKES_EFFECT;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let on = Utc::now();
    let (status, job) = api
        .post_empty(&format!("/api/jobs/{cron_id}/enable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(time(&job["next_fire_at"]) > on, "{job}");
    let before = runs_of(api, cron_id).await.len();
    wait_succeeded(api, cron_id, before + 2).await;
    let during: Vec<Value> = runs_of(api, cron_id)
        .await
        .into_iter()
        .filter(|r| time(&r["fire_time"]) > off && time(&r["fire_time"]) < on)
        .collect();
    assert!(during.is_empty(), "runs for the disabled time: {during:?}");
}

/// Jitter: 1,000 jobs of one cron expression (once a minute) with a minute of jitter are due
/// spread over the whole minute, each at the expression's time plus its own offset, which the
/// preview of its schedule shows too; a job firing every second with a second of jitter runs
/// each second at its offset, on time.
#[tokio::test]
async fn jitter_spreads_a_thousand_jobs_of_one_cron_expression_over_its_range() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    // Jitter is for cron schedules; a wrong one names the field.
    for (body, why) in [
        (
            json!({"name": "r", "job_type": "jitter.min", "jitter_ms": 1000,
                   "schedule": {"kind": "fix_rate", "every_ms": 1000}}),
            "cron schedules only",
        ),
        (
            json!({"name": "r", "job_type": "jitter.min", "jitter_ms": -1,
                   "schedule": {"kind": "cron", "expr": "0 * * * * ?"}}),
            "between 0 and",
        ),
    ] {
        let (status, err) = api.post_json("/api/jobs", &body).await.unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert_eq!(err["error"]["field"], "jitter_ms", "{err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(why),
            "{err}"
        );
    }
    let mut ids = Vec::new();
    for chunk in 0..20 {
        let made = futures::future::join_all((0..50).map(|i| {
            let api = api.clone();
            async move {
                api.create_job(&json!({
                    "name": format!("minutely {}", chunk * 50 + i), "job_type": "jitter.min",
                    "schedule": {"kind": "cron", "expr": "0 * * * * ?"}, "jitter_ms": 60000}))
                    .await
                    .unwrap()
            }
        }))
        .await;
        ids.extend(made);
    }
    let (_, page) = api
        .get_json("/api/jobs?job_type=jitter.min&limit=1000")
        .await
        .unwrap();
    let jobs = page["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1000);
    // Each is due at a whole minute plus its offset (below a minute): the offset is where in
    // its minute it falls.
    let mut offsets = std::collections::BTreeSet::new();
    let mut minutes = std::collections::BTreeSet::new();
    for j in jobs {
        assert_eq!(j["jitter_ms"], 60000, "{j}");
        let next = time(&j["next_fire_at"]);
        let ms = next.timestamp_millis();
        offsets.insert(ms.rem_euclid(60_000));
        minutes.insert(ms.div_euclid(60_000));
    }
    assert!(minutes.len() <= 3, "due within a few minutes: {minutes:?}");
    assert!(offsets.len() >= 900, "{} distinct offsets", offsets.len());
    for tenth in 0..10 {
        let n = offsets.range(tenth * 6_000..(tenth + 1) * 6_000).count();
        assert!(
            n > 50,
            "{n} of 1,000 jobs in the {tenth}th tenth of the minute"
        );
    }
    // The preview of a job's schedule with its id and jitter shows its own fire times.
    let one = &jobs[0];
    let (status, preview) = api
        .get_json(&format!(
            "/api/schedules/preview?expr=0%20*%20*%20*%20*%20%3F&jitter_ms=60000&job_id={}&count=2",
            one["id"]
        ))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{preview}");
    let first = time(&preview["fire_times"][0]);
    let next = time(&one["next_fire_at"]);
    assert!(
        first == next || first == next + chrono::Duration::minutes(1),
        "preview {first}, job due {next}"
    );
    // Every second, moved by one offset below a second: each run at that offset, on time.
    let _worker = cluster
        .spawn_worker("jitter.sec=noop", "jitter", &[])
        .await
        .unwrap();
    let job = api
        .create_job(&json!({"name": "every second", "job_type": "jitter.sec",
            "schedule": {"kind": "cron", "expr": "* * * * * ?"}, "jitter_ms": 1000}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (status, body) = api
        .patch_json(&format!("/api/jobs/{job}"), &json!({"enabled": false}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let runs = cadenza_integration::scenario::quiesce(&api, &[job], Duration::from_secs(60)).await;
    assert!(runs.len() >= 4, "{runs:?}");
    let offset = time(&runs[0]["fire_time"]).timestamp_subsec_millis();
    for r in &runs {
        assert_eq!(r["status"], "succeeded", "{r}");
        let fire = time(&r["fire_time"]);
        assert_eq!(fire.timestamp_subsec_millis(), offset, "{r}");
        assert!(
            time(&r["started_at"]) >= fire,
            "started before its fire time: {r}"
        );
    }
    let _ = ids;
}
