//! Scheduler benchmark: N `fix_rate` jobs on one admin, a fixed trigger rate, a fixed time.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo run -p cadenza-integration --release --bin bench -- --jobs 100000 --rate 10000 --secs 30
//! ```
//!
//! Starts a private PostgreSQL and broker, one `cadenza-admin` (the release build beside this
//! binary) and `--workers N` release workers serving `noop`, inserts the jobs in bulk (each fires
//! every `jobs / rate` milliseconds, their first fires spread evenly), and measures a window of
//! `--secs` seconds that starts once the first fires have settled. At the end of the window the
//! load stops (every job is disabled), the runs in flight are given time to finish, the admin
//! and the workers are stopped, and only then is anything read back: the trigger topic up to an
//! end marker written once nothing else writes to it, and the runs from PostgreSQL.
//!
//! PostgreSQL runs as in the tests (fsync off: the test broker keeps its records only in memory
//! anyway) with 512 MB of shared buffers and checkpoints at most every 15 minutes or 8 GB.
//!
//! Printed: triggers published per second and misfires, fire lateness (record timestamp on the
//! topic − fire time) p50/p99/max, scan time per batch, the admin's RSS, the CPU seconds each
//! process used in the window, the write-ahead log PostgreSQL wrote per trigger (and per run
//! with workers), and with workers how many runs finished per second and how late they started.
//! `--statements` adds the statements that took the most database time in the window. `--json`
//! adds one line of JSON with the same figures, the last line printed (`scripts/bench-compare`
//! reads it).
//!
//! The headline is CPU per unit of work: CPU-µs of the admin, the broker and PostgreSQL per
//! published trigger and, with workers, CPU-µs of everything per finished run (CPU time travels
//! between machines; a rate is this machine's).
//!
//! `--then-rate R` makes the window an overload that ends: at its end all but enough jobs for R
//! triggers/s stop firing, and after 30 s the benchmark prints how long after the fall the last
//! fire time was still skipped, and how late the fires of the last 10 s were published.
//!
//! `--find-ceiling` runs the benchmark again and again on a fresh cluster, from `--rate` up by a
//! fifth each time (as many jobs as the rate, each firing once a second), until a window of
//! `--secs` misfires or publishes less than 99 % of what was due, and prints the highest rate
//! held, with its p99 lateness and CPU per trigger.
//!
//! `--backlog N` measures the workers alone instead: N jobs fire once each while no worker runs;
//! once all are on the topic, `--workers` workers (default 1) start and the benchmark prints how
//! many runs per second they finished (first start to last finish, as recorded by the admin).
//!
//! `--group LIMIT[:RATE]` puts every job in one concurrency group of that limit (and rate of
//! starts a second): its runs are written `queued` and released by the group's releaser, which
//! measures what flow control costs and how fast one group dispatches. Without workers no run
//! ends, so a group then holds at most LIMIT runs in flight.
//!
//! `--admin-env KEY=VALUE` and `--worker-env KEY=VALUE` (repeatable) start the admin or each
//! worker with that setting, e.g. `--worker-env CADENZA_WORKER_CAPACITY=64`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cadenza_integration::{read_topic_to_end, Cluster, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

struct Args {
    jobs: i64,
    rate: i64,
    secs: u64,
    workers: usize,
    /// Workers alone: this many runs are published first, then the workers start.
    backlog: Option<i64>,
    /// Print the statements that took the most database time (`pg_stat_statements`).
    statements: bool,
    json: bool,
    /// `KEY=VALUE` settings given to the admin (`--admin-env`) and to each worker (`--worker-env`).
    admin_env: Vec<(String, String)>,
    worker_env: Vec<(String, String)>,
    /// After the window, the load falls back to this rate for [`RECOVERY_SECS`] (an overload
    /// that ends): how soon nothing more is skipped.
    then_rate: Option<i64>,
    /// Raise the rate until a window misfires; print the highest held.
    find_ceiling: bool,
    /// Every job in one concurrency group of this limit and optional rate.
    group: Option<(i64, Option<f64>)>,
}

/// How long the load that `--then-rate` falls back to is kept up.
const RECOVERY_SECS: u64 = 30;

fn parse_args() -> Result<Args> {
    let mut a = Args {
        jobs: 10_000,
        rate: 10_000,
        secs: 30,
        workers: 0,
        backlog: None,
        statements: false,
        json: false,
        admin_env: Vec::new(),
        worker_env: Vec::new(),
        then_rate: None,
        find_ceiling: false,
        group: None,
    };
    let mut workers_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<String> {
            it.next().with_context(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--jobs" => a.jobs = value("--jobs")?.parse().context("--jobs: not a number")?,
            "--rate" => a.rate = value("--rate")?.parse().context("--rate: not a number")?,
            "--secs" => a.secs = value("--secs")?.parse().context("--secs: not a number")?,
            "--workers" => {
                workers_given = true;
                a.workers = value("--workers")?
                    .parse()
                    .context("--workers: not a number")?
            }
            "--backlog" => {
                a.backlog = Some(
                    value("--backlog")?
                        .parse()
                        .context("--backlog: not a number")?,
                )
            }
            "--then-rate" => {
                a.then_rate = Some(
                    value("--then-rate")?
                        .parse()
                        .context("--then-rate: not a number")?,
                )
            }
            "--find-ceiling" => a.find_ceiling = true,
            "--group" => a.group = Some(group_arg(&value("--group")?)?),
            "--statements" => a.statements = true,
            "--json" => a.json = true,
            "--admin-env" => a.admin_env.push(setting(&value("--admin-env")?)?),
            "--worker-env" => a.worker_env.push(setting(&value("--worker-env")?)?),
            "-h" | "--help" => {
                println!(
                    "bench [--jobs N (10000)] [--rate triggers/s (10000)] [--secs S (30)] [--workers N (0)] [--then-rate triggers/s] [--group LIMIT[:RATE]] [--statements] [--json]\n\
                     bench --find-ceiling [--rate first triggers/s (10000)] [--secs S (30)]\n\
                     bench --backlog N [--workers N (1)] [--statements] [--json]\n\
                     both: [--admin-env KEY=VALUE]... [--worker-env KEY=VALUE]... (settings such as CADENZA_PUBLISH_AHEAD_MS)"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}; see --help"),
        }
    }
    if a.jobs < 1 || a.rate < 1 || a.secs < 5 {
        bail!("--jobs and --rate must be at least 1, --secs at least 5");
    }
    if a.then_rate.is_some_and(|r| r < 1 || r >= a.rate) {
        bail!("--then-rate must be at least 1 and below --rate");
    }
    if let Some(n) = a.backlog {
        if n < 1 {
            bail!("--backlog must be at least 1");
        }
        if !workers_given {
            a.workers = 1;
        }
        if a.workers < 1 {
            bail!("--backlog measures workers: --workers must be at least 1");
        }
    }
    Ok(a)
}

/// `LIMIT` or `LIMIT:RATE` of `--group`.
fn group_arg(s: &str) -> Result<(i64, Option<f64>)> {
    let (limit, rate) = match s.split_once(':') {
        Some((l, r)) => (l, Some(r)),
        None => (s, None),
    };
    let limit: i64 = limit
        .parse()
        .ok()
        .filter(|l| (1..=100_000).contains(l))
        .with_context(|| format!("--group {s:?}: the limit must be 1 to 100000"))?;
    let rate = rate
        .map(|r| {
            r.parse::<f64>()
                .ok()
                .filter(|r| *r > 0.0 && *r <= 100_000.0)
                .with_context(|| format!("--group {s:?}: the rate must be above 0, at most 100000"))
        })
        .transpose()?;
    Ok((limit, rate))
}

/// `KEY=VALUE`.
fn setting(s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => bail!("{s:?}: expected KEY=VALUE"),
    }
}

fn pairs(settings: &[(String, String)]) -> Vec<(&str, &str)> {
    settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Lateness (record timestamp minus fire time, ms), sorted, of the trigger records whose fire
/// time `within` accepts.
fn lateness_ms(
    records: &[cadenza_integration::TopicRecord],
    within: impl Fn(DateTime<Utc>) -> bool,
) -> Vec<f64> {
    let mut late: Vec<f64> = records
        .iter()
        .filter_map(|r| {
            let v = r.payload_json().ok()?;
            let fire = DateTime::parse_from_rfc3339(v["fire_time"].as_str()?).ok()?;
            let fire = fire.with_timezone(&Utc);
            let stamp = r.timestamp_ms?;
            within(fire).then(|| (stamp - fire.timestamp_millis()) as f64)
        })
        .collect();
    late.sort_by(f64::total_cmp);
    late
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    // Read by the harness when it starts PostgreSQL; nothing else runs yet.
    std::env::set_var("CADENZA_PG_BENCH", "1");
    if args.statements {
        std::env::set_var("CADENZA_PG_STAT_STATEMENTS", "1");
    }
    match args.backlog {
        Some(n) => backlog(&args, n).await,
        None if args.find_ceiling => find_ceiling(args).await,
        None => steady(&args).await.map(drop),
    }
}

/// Raises the rate by a fifth from `--rate` (with as many jobs, each firing once a second) until
/// a window of `--secs` misfires or publishes less than 99 % of what was due, and prints the
/// highest rate held, with its p99 lateness and CPU per trigger.
async fn find_ceiling(mut args: Args) -> Result<()> {
    args.json = false;
    let mut held: Option<(i64, Value)> = None;
    let mut rate = args.rate;
    loop {
        args.rate = rate;
        args.jobs = rate;
        println!("--- {rate} triggers/s for {} s", args.secs);
        let s = steady(&args).await?;
        let due = s["due_per_s"].as_f64().unwrap_or(0.0);
        let fired = s["fired_per_s"].as_f64().unwrap_or(0.0);
        let ok = s["misfired"].as_i64() == Some(0) && fired >= 0.99 * due;
        if !ok {
            break;
        }
        held = Some((rate, s));
        rate = rate * 6 / 5;
    }
    match held {
        Some((rate, s)) => println!(
            "ceiling: {rate} triggers/s held for {} s with no misfire; lateness p99 {} ms; {:.0} CPU-µs per published trigger (next step, {} /s, did not hold)",
            args.secs,
            s["lateness_ms"]["p99"],
            s["cpu_us_per_trigger"].as_f64().unwrap_or(f64::NAN),
            rate * 6 / 5
        ),
        None => println!("ceiling: below {rate} triggers/s (the first step did not hold)"),
    }
    Ok(())
}

/// The processes of one run whose CPU time is counted, by part.
struct Parts {
    parts: Vec<(&'static str, Vec<u32>)>,
}

impl Parts {
    fn new(cluster: &Cluster, admin: u32, workers: &[u32]) -> Parts {
        let mut parts = vec![("admin", vec![admin])];
        if !workers.is_empty() {
            parts.push(("workers", workers.to_vec()));
        }
        parts.push(("postgres", cluster.postgres().pid().into_iter().collect()));
        parts.push(("broker", cluster.broker().pid().into_iter().collect()));
        Parts { parts }
    }

    /// CPU seconds used so far by each part, including its processes' descendants.
    fn read(&self) -> BTreeMap<&'static str, f64> {
        let table = proc_table();
        self.parts
            .iter()
            .map(|(name, pids)| (*name, pids.iter().map(|p| tree_cpu(&table, *p)).sum()))
            .collect()
    }
}

/// `pid → (parent pid, CPU seconds of itself and its reaped children)` for every process.
fn proc_table() -> BTreeMap<u32, (u32, f64)> {
    let ticks = clock_ticks();
    let mut table = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, … utime stime cutime cstime are
        // fields 14–17 of the line, 12–15 after the name.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let ppid = f.get(1).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        table.insert(pid, (ppid, (num(11) + num(12) + num(13) + num(14)) / ticks));
    }
    table
}

/// CPU seconds of `pid` and every live descendant (children that exited and were reaped are in
/// their parent's figure).
fn tree_cpu(table: &BTreeMap<u32, (u32, f64)>, pid: u32) -> f64 {
    let mut total = table.get(&pid).map(|e| e.1).unwrap_or(0.0);
    for (child, (parent, _)) in table {
        if *parent == pid && *child != pid {
            total += tree_cpu(table, *child);
        }
    }
    total
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// The write-ahead log position and PostgreSQL's WAL counters.
struct Wal {
    lsn: String,
    records: i64,
    fpi: i64,
}

async fn wal(pool: &PgPool) -> Result<Wal> {
    // Backends flush their WAL counters to pg_stat_wal at most once a second or so; the LSN is
    // exact. Both are cluster-wide (the benchmark's PostgreSQL serves nothing else).
    let (lsn, records, fpi): (String, i64, i64) =
        sqlx::query_as("SELECT pg_current_wal_lsn()::text, wal_records, wal_fpi FROM pg_stat_wal")
            .fetch_one(pool)
            .await?;
    Ok(Wal { lsn, records, fpi })
}

async fn wal_bytes(pool: &PgPool, from: &Wal, to: &Wal) -> Result<f64> {
    let bytes: f64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8")
        .bind(&from.lsn)
        .bind(&to.lsn)
        .fetch_one(pool)
        .await?;
    Ok(bytes)
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Starts the cluster, the admin and the first job through the API (which creates the topic).
async fn start(
    every_ms: i64,
    args: &Args,
) -> Result<(Cluster, cadenza_integration::AdminHandle, PgPool)> {
    let cluster = Cluster::start().await?;
    let mut env = vec![("RUST_LOG", "info,cadenza_admin::scheduler=debug")];
    env.extend(pairs(&args.admin_env));
    let admin = cluster.spawn_admin(&env).await?;
    let (status, body) = admin
        .api()
        .post_json(
            "/api/jobs",
            &json!({"name": "bench 0", "job_type": "bench.noop",
            "schedule": {"kind": "fix_rate", "every_ms": every_ms}, "enabled": false}),
        )
        .await?;
    if status != StatusCode::CREATED {
        bail!("creating the first job: {status} {body}");
    }
    let pool = cluster.pool().await?;
    Ok((cluster, admin, pool))
}

/// Starts `--workers` workers serving `bench.noop` with `noop`; their pids.
async fn spawn_workers(cluster: &Cluster, args: &Args) -> Result<Vec<u32>> {
    let mut pids = Vec::new();
    for _ in 0..args.workers {
        let worker = cluster
            .spawn_worker("bench.noop=noop", "bench", &pairs(&args.worker_env))
            .await?;
        pids.push(worker.pid());
    }
    Ok(pids)
}

/// Inserts `jobs` enabled `fix_rate` jobs firing every `every_ms`, the first fires spread evenly
/// over `spread_ms` from `first_in`.
async fn insert_jobs(
    pool: &PgPool,
    jobs: i64,
    every_ms: i64,
    spread_ms: i64,
    first_in: Duration,
    group: Option<&str>,
) -> Result<()> {
    let started = Instant::now();
    let mut made = 0;
    while made < jobs {
        let n = (jobs - made).min(50_000);
        sqlx::query(
            "INSERT INTO jobs (id, shard, name, job_type, schedule, schedule_kind, route, block, misfire,
                               misfire_threshold_ms, next_fire_at, concurrency_group)
             SELECT id, (id % 64)::int, 'bench ' || id, 'bench.noop', $1, 'fix_rate', 'round',
                    'serial_execution', 'do_nothing', 5000,
                    now() + make_interval(secs => $5::float8)
                          + make_interval(secs => ((i + $6::int) % $3::int) * $4::float8 / $3::int / 1000.0),
                    $7
             FROM (SELECT nextval('jobs_id_seq') AS id, i FROM generate_series(1, $2::int) AS i) s",
        )
        .bind(json!({"kind": "fix_rate", "every_ms": every_ms}))
        .bind(n as i32)
        .bind(jobs.max(1) as i32)
        .bind(spread_ms as f64)
        .bind(first_in.as_secs_f64())
        .bind(made as i32)
        .bind(group)
        .execute(pool)
        .await?;
        made += n;
    }
    sqlx::query("ANALYZE jobs").execute(pool).await?;
    eprintln!(
        "inserted {jobs} jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Creates concurrency group `bench` of `limit` (and `rate` starts a second); its name.
async fn create_group(pool: &PgPool, limit: i64, rate: Option<f64>) -> Result<&'static str> {
    sqlx::query(
        "INSERT INTO concurrency_groups (name, \"limit\", rate_per_second, shard) VALUES ('bench', $1, $2, 0)",
    )
    .bind(limit as i32)
    .bind(rate)
    .execute(pool)
    .await
    .context("creating the concurrency group")?;
    eprintln!(
        "every job in concurrency group bench: limit {limit}, rate {}",
        rate.map_or_else(|| "none".to_owned(), |r| format!("{r}/s"))
    );
    Ok("bench")
}

/// How many fire times of the jobs (each `every_ms` apart from its first fire time, noted in
/// `bench_first_fire`) fall between `t0` and `t1`, both included.
async fn due_in(pool: &PgPool, t0: DateTime<Utc>, t1: DateTime<Utc>, every_ms: i64) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COALESCE(sum(GREATEST(0, floor(extract(epoch FROM $2 - first_fire) * 1000 / $3)
                                          - GREATEST(0, ceil(extract(epoch FROM $1 - first_fire) * 1000 / $3))
                                          + 1)), 0)::bigint
         FROM bench_first_fire",
    )
    .bind(t0)
    .bind(t1)
    .bind(every_ms as f64)
    .fetch_one(pool)
    .await?)
}

async fn reset_statements(pool: &PgPool, on: bool) -> Result<()> {
    if on {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(pool)
            .await
            .context("pg_stat_statements is not available in this PostgreSQL installation")?;
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Runs of the window still in flight (not ended, not misfired).
async fn in_flight(
    pool: &PgPool,
    t0: DateTime<Utc>,
    t1: DateTime<Utc>,
    workers: bool,
) -> Result<i64> {
    // Without workers, a run delivered stays `publishing` in its row (the delivery record holds
    // it); those still to be sent were all marked after their shard's settled mark.
    let sql = if workers {
        "SELECT count(*) FROM triggers WHERE fire_time BETWEEN $1 AND $2
           AND status IN ('scheduled', 'publishing', 'published', 'running')"
    } else {
        "WITH open AS MATERIALIZED (
             SELECT id, status FROM triggers
             WHERE fire_time BETWEEN $1 AND $2
               AND (status = 'scheduled'
                    OR (status = 'publishing'
                        AND updated_at >= (SELECT min(settled_before) FROM scheduler_lease)))
         ),
         delivered AS MATERIALIZED (
             SELECT cadenza_delivered_among(
                        ARRAY(SELECT id FROM open WHERE status = 'publishing')) AS id
         )
         SELECT count(*) FROM open o
         WHERE NOT EXISTS (SELECT 1 FROM delivered d WHERE d.id = o.id)"
    };
    Ok(sqlx::query_scalar(sql)
        .bind(t0)
        .bind(t1)
        .fetch_one(pool)
        .await?)
}

/// id, status, attempt, worker, partition, offset.
type UnfinishedRow = (i64, String, i32, Option<String>, Option<i32>, Option<i64>);

/// Up to ten runs of the window still unfinished after the drain, each with the events about it
/// on the results topic and the DLQ (read while the processes still run: the test broker keeps
/// its records in memory only).
async fn unfinished_runs(
    pool: &PgPool,
    cluster: &Cluster,
    t0: DateTime<Utc>,
    t1: DateTime<Utc>,
) -> Result<Vec<String>> {
    let rows: Vec<UnfinishedRow> = sqlx::query_as(
        "SELECT id, status, attempt, worker_id, partition, \"offset\" FROM triggers
         WHERE fire_time BETWEEN $1 AND $2
           AND status IN ('scheduled', 'publishing', 'published', 'running')
         ORDER BY id LIMIT 10",
    )
    .bind(t0)
    .bind(t1)
    .fetch_all(pool)
    .await?;
    let topics = cluster.topics();
    let mut events: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for topic in [topics.results(), topics.dlq()] {
        let records =
            read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(120)).await?;
        for r in records {
            let Some(v) = r.payload_json().ok() else {
                continue;
            };
            let id = v["trigger_id"].as_i64().or_else(|| {
                // A DLQ record holds the refused payload as text.
                let inner: Value = serde_json::from_str(v["payload"].as_str()?).ok()?;
                inner["trigger_id"].as_i64()
            });
            if let Some(id) = id.filter(|id| rows.iter().any(|row| row.0 == *id)) {
                events.entry(id).or_default().push(format!(
                    "{}:{}@{} {} attempt {}",
                    topic,
                    r.partition,
                    r.offset,
                    v["event"].as_str().unwrap_or("dlq"),
                    v["attempt"]
                ));
            }
        }
    }
    Ok(rows
        .into_iter()
        .map(|(id, status, attempt, worker, partition, offset)| {
            format!(
                "unfinished run {id}: {status}, attempt {attempt}, worker {worker:?}, partition {partition:?}, offset {offset:?}; events: {:?}",
                events.remove(&id).unwrap_or_default()
            )
        })
        .collect())
}

async fn steady(args: &Args) -> Result<Value> {
    let every_ms = (args.jobs * 1000 / args.rate).max(1);
    eprintln!(
        "bench: {} fix_rate jobs every {every_ms} ms (≈{} triggers/s), {} s window, {} workers",
        args.jobs,
        args.jobs * 1000 / every_ms,
        args.secs,
        args.workers
    );
    let (cluster, admin, pool) = start(every_ms, args).await?;
    let worker_pids = spawn_workers(&cluster, args).await?;
    let parts = Parts::new(&cluster, admin.pid(), &worker_pids);
    let group = match args.group {
        Some((limit, rate)) => Some(create_group(&pool, limit, rate).await?),
        None => None,
    };
    insert_jobs(
        &pool,
        args.jobs,
        every_ms,
        every_ms,
        Duration::from_secs(3),
        group,
    )
    .await?;
    // Each job's first fire time, to count the fire times due in the window exactly: the jobs
    // inserted later (50,000 a statement) start later, so they are spread over a little more
    // than one interval.
    sqlx::query("CREATE TABLE bench_first_fire AS SELECT next_fire_at AS first_fire FROM jobs")
        .execute(&pool)
        .await?;

    // The window starts 5 s after the first fires.
    tokio::time::sleep(Duration::from_secs(8)).await;
    reset_statements(&pool, args.statements).await?;
    let t0 = Utc::now();
    let (cpu0, wal0) = (parts.read(), wal(&pool).await?);
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    let t1 = Utc::now();
    let (cpu1, wal1) = (parts.read(), wal(&pool).await?);
    let rss = rss_mib(admin.pid());
    let window_s = (t1 - t0).num_milliseconds() as f64 / 1000.0;

    // The load falls back: all but enough jobs for --then-rate stop firing.
    let fell_back = match args.then_rate {
        Some(r2) => {
            let keep = (args.jobs * r2 / args.rate).max(1);
            sqlx::query(
                "UPDATE jobs SET enabled = false
                 WHERE id NOT IN (SELECT id FROM jobs ORDER BY id LIMIT $1)",
            )
            .bind(keep)
            .execute(&pool)
            .await?;
            let at = Utc::now();
            tokio::time::sleep(Duration::from_secs(RECOVERY_SECS)).await;
            Some((at, keep))
        }
        None => None,
    };

    // Stop the load, let what is in flight finish (bounded), stop every writer, then read.
    sqlx::query("UPDATE jobs SET enabled = false")
        .execute(&pool)
        .await?;
    let drain_started = Instant::now();
    let drain_cap = Duration::from_secs(if args.workers > 0 { 90 } else { 30 });
    let mut left = in_flight(&pool, t0, t1, args.workers > 0).await?;
    while left > 0 && drain_started.elapsed() < drain_cap {
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = in_flight(&pool, t0, t1, args.workers > 0).await?;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let statements = if args.statements {
        top_statements(&pool).await?
    } else {
        Vec::new()
    };
    let unfinished = if args.workers > 0 && left > 0 {
        unfinished_runs(&pool, &cluster, t0, t1).await?
    } else {
        Vec::new()
    };
    cluster.stop_all(Duration::from_secs(20)).await?;
    runs_view(&pool).await?;

    let mut scans: Vec<f64> = admin
        .log()
        .lines()
        .filter(|l| l.contains(" scan ") || l.ends_with(" scan"))
        .filter_map(|l| l.split("elapsed_ms=").nth(1))
        .filter_map(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .collect();
    scans.sort_by(f64::total_cmp);
    let expected_due = due_in(&pool, t0, t1, every_ms).await? as f64;
    let (recorded_due, published, misfired): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE published_at IS NOT NULL),
                count(*) FILTER (WHERE status = 'misfired')
         FROM bench_runs WHERE fire_time BETWEEN $1 AND $2",
    )
    .bind(t0)
    .bind(t1)
    .fetch_one(&pool)
    .await?;
    // Fire times skipped by the misfire rules have no run (they are counted in spans on the
    // job): the window's due fire times without a run.
    let skipped = (expected_due as i64 - recorded_due).max(0);
    let misfired_rows = misfired;
    let misfired = misfired_rows + skipped;
    let topic = format!("{}.trigger.bench.noop", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(300)).await?;
    let lateness = lateness_ms(&records, |fire| fire >= t0 && fire <= t1);
    // Each run's record timestamp, for the workers' share of the start lateness.
    let sent_at: HashMap<i64, i64> = records
        .iter()
        .filter_map(|r| {
            let v = r.payload_json().ok()?;
            Some((v["trigger_id"].as_i64()?, r.timestamp_ms?))
        })
        .collect();
    let recorded = ms_after_fire(&pool, "published_at", t0, t1).await?;
    let wal_bytes = wal_bytes(&pool, &wal0, &wal1).await?;
    let cpu = cpu_used(&cpu0, &cpu1);
    let cpu_total: f64 = cpu.values().sum();

    println!(
        "bench: {} jobs every {every_ms} ms, window {window_s:.1} s, {} workers",
        args.jobs, args.workers
    );
    println!(
        "published:        {published} of {:.0} due = {:.0} triggers/s (misfired {misfired}: {skipped} skipped without a run, {misfired_rows} runs taken too late; {recorded_due} runs recorded)",
        expected_due,
        published as f64 / window_s
    );
    println!(
        "fire lateness ms: {}  (record timestamp on the topic − fire time, {} records)",
        spread(&lateness),
        lateness.len()
    );
    println!(
        "published_at ms:  {}  (published_at − fire time: when the broker acknowledged the record, or for a run a worker started first, when the record was handed over)",
        spread(&recorded)
    );
    println!(
        "scan per batch:   {} batches, {} (ms)",
        scans.len(),
        spread(&scans)
    );
    println!("admin RSS:        {rss:.1} MiB");
    println!(
        "CPU seconds:      {cpu_total:.1} in {window_s:.1} s ({})",
        by_part(&cpu)
    );
    let per_trigger = wal_bytes / (published.max(1) as f64);
    println!(
        "WAL:              {:.1} MiB in the window = {per_trigger:.0} bytes per published trigger ({} records, {} full-page images)",
        wal_bytes / 1048576.0,
        wal1.records - wal0.records,
        wal1.fpi - wal0.fpi
    );
    let server_cpu: f64 = ["admin", "broker", "postgres"]
        .iter()
        .filter_map(|p| cpu.get(p))
        .sum();
    let us_per_trigger = server_cpu * 1e6 / published.max(1) as f64;
    println!(
        "CPU per trigger:  {us_per_trigger:.0} µs per published trigger (admin + broker + PostgreSQL)"
    );
    let recovery = match fell_back {
        Some((at, keep)) => Some(recovery(&pool, &records, at, keep, every_ms).await?),
        None => None,
    };
    let mut e2e = Value::Null;
    let mut us_per_run = Value::Null;
    let mut start_spread = Value::Null;
    if args.workers > 0 {
        let start_late = ms_after_fire(&pool, "started_at", t0, t1).await?;
        let started: Vec<(i64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, started_at FROM bench_runs
             WHERE fire_time BETWEEN $1 AND $2 AND started_at IS NOT NULL",
        )
        .bind(t0)
        .bind(t1)
        .fetch_all(&pool)
        .await?;
        let mut pickup: Vec<f64> = started
            .iter()
            .filter_map(|(id, at)| Some((at.timestamp_millis() - sent_at.get(id)?) as f64))
            .collect();
        pickup.sort_by(f64::total_cmp);
        let finished_in_window: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM bench_runs WHERE finished_at BETWEEN $1 AND $2",
        )
        .bind(t0)
        .bind(t1)
        .fetch_one(&pool)
        .await?;
        let rate = finished_in_window as f64 / window_s;
        println!(
            "workers:          {finished_in_window} runs finished in the window = {rate:.0}/s; start lateness ms {} (started_at − fire time, {} runs)",
            spread(&start_late),
            start_late.len()
        );
        println!(
            "after the window: {} of the window's runs unfinished after {drain_s:.1} s",
            left
        );
        println!(
            "worker pickup ms: {}  (started_at − record timestamp on the topic, {} runs)",
            spread(&pickup),
            pickup.len()
        );
        for line in &unfinished {
            println!("  {line}");
        }
        e2e = json!(rate);
        let per_run = cpu_total * 1e6 / finished_in_window.max(1) as f64;
        println!(
            "CPU per run:      {per_run:.0} µs per finished run end to end (admin + broker + PostgreSQL + workers)"
        );
        us_per_run = json!(per_run);
        start_spread = spread_json(&start_late);
    } else if left > 0 {
        println!(
            "after the window: {left} of the window's fires not published after {drain_s:.1} s"
        );
    }
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM bench_runs GROUP BY status ORDER BY status")
            .fetch_all(&pool)
            .await?;
    println!("runs by status:   {statuses:?}");
    print_statements(&statements);
    let summary = json!({
                "system": "cadenza",
                "jobs": args.jobs,
                "secs": args.secs,
                "workers": args.workers,
                "due_per_s": expected_due / window_s,
                "fired_per_s": published as f64 / window_s,
                "misfired": misfired,
                "lateness_ms": spread_json(&lateness),
                "e2e_runs_per_s": e2e,
                "start_lateness_ms": start_spread,
                "cpu_s": {"total": cpu_total, "parts": cpu},
                "wal_bytes_per_trigger": per_trigger,
                "cpu_us_per_trigger": us_per_trigger,
                "cpu_us_per_run": us_per_run,
                "recovery": recovery,
                "admin_rss_mib": rss,
    });
    if args.json {
        println!("{summary}");
    }
    Ok(summary)
}

/// After the load fell back at `at` to `keep` jobs: the last fire time skipped after it (how
/// long the admin took to catch up), and how late the fires of the last 10 s of the recovery
/// window were published. Printed; returned as JSON.
async fn recovery(
    pool: &PgPool,
    records: &[cadenza_integration::TopicRecord],
    at: DateTime<Utc>,
    keep: i64,
    every_ms: i64,
) -> Result<Value> {
    let last_skipped: Option<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT max(last) FROM (
             SELECT last_fire AS last FROM misfires
             WHERE job_id IN (SELECT id FROM jobs ORDER BY id LIMIT $2)
             UNION ALL
             SELECT misfire_last FROM jobs
             WHERE misfire_count > 0 AND id IN (SELECT id FROM jobs ORDER BY id LIMIT $2)) s
         WHERE last >= $1",
    )
    .bind(at)
    .bind(keep)
    .fetch_one(pool)
    .await?;
    let caught_up_s = last_skipped.map_or(0.0, |l| (l - at).num_milliseconds() as f64 / 1000.0);
    let tail_from = at + chrono::Duration::seconds(RECOVERY_SECS as i64 - 10);
    let tail_to = at + chrono::Duration::seconds(RECOVERY_SECS as i64);
    let late = lateness_ms(records, |fire| fire >= tail_from && fire < tail_to);
    let rate = keep * 1000 / every_ms.max(1);
    println!(
        "recovery:         load fell to {rate}/s ({keep} jobs): last fire time skipped {caught_up_s:.1} s after; lateness of the fires {}-{} s after: {} ms ({} records)",
        RECOVERY_SECS - 10,
        RECOVERY_SECS,
        spread(&late),
        late.len()
    );
    Ok(
        json!({"rate": rate, "last_skipped_after_s": caught_up_s, "lateness_ms": spread_json(&late)}),
    )
}

/// The workers alone: a backlog of runs on the topic, then the workers start.
async fn backlog(args: &Args, n: i64) -> Result<()> {
    eprintln!(
        "bench: {n} runs published first, then {} workers",
        args.workers
    );
    // Every job fires once in the first second and next an hour later.
    let (cluster, admin, pool) = start(3_600_000, args).await?;
    insert_jobs(&pool, n, 3_600_000, 1_000, Duration::from_secs(1), None).await?;
    let waited = Instant::now();
    loop {
        let published: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM triggers WHERE status = 'published')
                      + (SELECT coalesce(sum(cardinality(run_ids)), 0) FROM deliveries)::bigint",
        )
        .fetch_one(&pool)
        .await?;
        if published >= n {
            break;
        }
        if waited.elapsed() > Duration::from_secs(120) {
            bail!("only {published} of {n} runs published after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    sqlx::query("UPDATE jobs SET enabled = false")
        .execute(&pool)
        .await?;
    reset_statements(&pool, args.statements).await?;
    let worker_pids = spawn_workers(&cluster, args).await?;
    let parts = Parts::new(&cluster, admin.pid(), &worker_pids);
    let (cpu0, wal0) = (parts.read(), wal(&pool).await?);
    let started = Instant::now();
    let cap = Duration::from_secs(300);
    let mut done: i64 = 0;
    while started.elapsed() < cap {
        done = sqlx::query_scalar("SELECT count(*) FROM triggers WHERE status = 'succeeded'")
            .fetch_one(&pool)
            .await?;
        if done >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (cpu1, wal1) = (parts.read(), wal(&pool).await?);
    let statements = if args.statements {
        top_statements(&pool).await?
    } else {
        Vec::new()
    };
    cluster.stop_all(Duration::from_secs(20)).await?;
    let (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT min(started_at), max(finished_at) FROM triggers WHERE status = 'succeeded'",
    )
    .fetch_one(&pool)
    .await?;
    let span_s = match (first, last) {
        (Some(a), Some(b)) => (b - a).num_milliseconds() as f64 / 1000.0,
        _ => f64::NAN,
    };
    let rate = done as f64 / span_s;
    let wal_bytes = wal_bytes(&pool, &wal0, &wal1).await?;
    let cpu = cpu_used(&cpu0, &cpu1);
    let cpu_total: f64 = cpu.values().sum();
    println!("bench: backlog of {n} runs, {} workers", args.workers);
    println!("finished:         {done} of {n} in {span_s:.1} s (first start to last finish) = {rate:.0} runs/s");
    println!("CPU seconds:      {cpu_total:.1} ({})", by_part(&cpu));
    println!(
        "WAL:              {:.0} bytes per run (results ingested by the admin)",
        wal_bytes / done.max(1) as f64
    );
    print_statements(&statements);
    if args.json {
        println!(
            "{}",
            json!({"system": "cadenza", "backlog": n, "workers": args.workers,
                   "e2e_runs_per_s": rate, "finished": done,
                   "cpu_s": {"total": cpu_total, "parts": cpu},
                   "wal_bytes_per_run": wal_bytes / done.max(1) as f64})
        );
    }
    Ok(())
}

/// CPU seconds each part used between two readings ([`Parts::read`]).
fn cpu_used(
    before: &BTreeMap<&'static str, f64>,
    after: &BTreeMap<&'static str, f64>,
) -> BTreeMap<&'static str, f64> {
    after
        .iter()
        .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// `admin 1.2, broker 3.4, …`.
fn by_part(cpu: &BTreeMap<&'static str, f64>) -> String {
    cpu.iter()
        .map(|(k, v)| format!("{k} {v:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `p50 …  p99 …  max …` of sorted figures.
fn spread(sorted: &[f64]) -> String {
    format!(
        "p50 {:.1}  p99 {:.1}  max {:.1}",
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN)
    )
}

fn spread_json(sorted: &[f64]) -> Value {
    let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    json!({
        "p50": num(percentile(sorted, 0.5)),
        "p99": num(percentile(sorted, 0.99)),
        "max": num(sorted.last().copied().unwrap_or(f64::NAN)),
    })
}

/// `bench_runs`: the runs as the API shows them, for reading results back once every process
/// stopped. A run delivered and not started by a worker stays `publishing` in its row; the
/// delivery record (one row per job type, partition and recorder round) holds its
/// acknowledgement. Looked up once for all runs here, instead of run by run.
async fn runs_view(pool: &PgPool) -> Result<()> {
    for statement in [
        "DROP VIEW IF EXISTS bench_runs",
        "DROP TABLE IF EXISTS bench_delivered",
        "CREATE TABLE bench_delivered AS
         SELECT id, min(acked_at) AS acked_at
         FROM (SELECT unnest(run_ids) AS id, unnest(acked_at) AS acked_at FROM deliveries) d
         GROUP BY id",
        "CREATE UNIQUE INDEX ON bench_delivered (id)",
        "ANALYZE bench_delivered",
        "CREATE VIEW bench_runs AS
         SELECT t.id, t.fire_time, t.started_at, t.finished_at,
                CASE WHEN t.status = 'publishing' AND d.id IS NOT NULL THEN 'published'
                     ELSE t.status END AS status,
                COALESCE(t.published_at, d.acked_at) AS published_at
         FROM triggers t LEFT JOIN bench_delivered d ON d.id = t.id",
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// Milliseconds from the fire time to `column` (`published_at` or `started_at`) of the runs
/// that fired between `t0` and `t1` and have it, sorted.
async fn ms_after_fire(
    pool: &PgPool,
    column: &'static str,
    t0: DateTime<Utc>,
    t1: DateTime<Utc>,
) -> Result<Vec<f64>> {
    let mut ms: Vec<f64> = sqlx::query_scalar(&format!(
        "SELECT EXTRACT(EPOCH FROM ({column} - fire_time))::float8 * 1000.0
         FROM bench_runs WHERE fire_time BETWEEN $1 AND $2 AND {column} IS NOT NULL"
    ))
    .bind(t0)
    .bind(t1)
    .fetch_all(pool)
    .await?;
    ms.sort_by(f64::total_cmp);
    Ok(ms)
}

/// The statements that took the most database time since the window started.
async fn top_statements(pool: &PgPool) -> Result<Vec<(String, i64, f64, f64, f64)>> {
    Ok(sqlx::query_as(
        "SELECT regexp_replace(left(query, 400), '\\s+', ' ', 'g'), calls,
                total_exec_time, total_plan_time, wal_bytes::float8
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_exec_time + total_plan_time DESC LIMIT 15",
    )
    .fetch_all(pool)
    .await?)
}

fn print_statements(rows: &[(String, i64, f64, f64, f64)]) {
    if rows.is_empty() {
        return;
    }
    let (exec, plan): (f64, f64) = rows.iter().fold((0.0, 0.0), |a, r| (a.0 + r.2, a.1 + r.3));
    println!("database time by statement (top 15: {exec:.0} ms executing, {plan:.0} ms planning):");
    println!(
        "  {:>9} {:>9} {:>8} {:>8} {:>9}",
        "exec ms", "plan ms", "calls", "ms/call", "WAL MiB"
    );
    for (query, calls, exec, plan, wal) in rows {
        let short: String = query.chars().take(100).collect();
        let per = (exec + plan) / (*calls).max(1) as f64;
        let wal = wal / 1048576.0;
        println!("  {exec:>9.0} {plan:>9.0} {calls:>8} {per:>8.2} {wal:>9.1}  {short}");
    }
}
