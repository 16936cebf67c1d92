//! Scheduler benchmark: N `fix_rate` jobs on one admin, a fixed trigger rate, a fixed time.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo run -p cadenza-integration --release --bin bench -- --jobs 100000 --rate 10000 --secs 30
//! ```
//!
//! Starts a private PostgreSQL and broker, one `cadenza-admin` (the release build beside this
//! binary), inserts the jobs in bulk (each fires every `jobs / rate` seconds, spread evenly), lets
//! the admin schedule them for `--secs`, and prints: triggers published per second, fire
//! lateness (published − fire time) p50/p99/max, scan time per batch, and the admin's RSS.
//! No worker runs unless `--workers N` is given: the figures are the admin's.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cadenza_integration::{read_topic_to_end, Cluster, StatusCode};
use serde_json::json;

struct Args {
    jobs: i64,
    rate: i64,
    secs: u64,
    workers: usize,
    /// Print the statements that took the most database time (`pg_stat_statements`).
    statements: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        jobs: 10_000,
        rate: 10_000,
        secs: 30,
        workers: 0,
        statements: false,
    };
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
                a.workers = value("--workers")?
                    .parse()
                    .context("--workers: not a number")?
            }
            "--statements" => a.statements = true,
            "-h" | "--help" => {
                println!("bench [--jobs N (10000)] [--rate triggers/s (10000)] [--secs S (30)] [--workers N (0)] [--statements]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}; see --help"),
        }
    }
    if a.jobs < 1 || a.rate < 1 || a.secs < 5 {
        bail!("--jobs and --rate must be at least 1, --secs at least 5");
    }
    Ok(a)
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
    let every_ms = (args.jobs * 1000 / args.rate).max(1);
    println!(
        "bench: {} fix_rate jobs every {every_ms} ms (≈{} triggers/s) for {} s",
        args.jobs,
        args.jobs * 1000 / every_ms,
        args.secs
    );
    if args.statements {
        // Read by the harness when it starts PostgreSQL; nothing else runs yet.
        std::env::set_var("CADENZA_PG_STAT_STATEMENTS", "1");
    }
    let cluster = Cluster::start().await?;
    let admin = cluster
        .spawn_admin(&[("RUST_LOG", "info,cadenza_admin::scheduler=debug")])
        .await?;
    for _ in 0..args.workers {
        cluster
            .spawn_worker("bench.noop=noop", "bench", &[])
            .await?;
    }
    let api = admin.api();
    // The first job through the API creates the topic; the rest go in bulk.
    let (status, body) = api
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
    let started = Instant::now();
    let mut made = 0;
    while made < args.jobs {
        let n = (args.jobs - made).min(50_000);
        sqlx::query(
            "INSERT INTO jobs (id, shard, name, job_type, schedule, schedule_kind, route, block, misfire,
                               misfire_threshold_ms, next_fire_at)
             SELECT id, (id % 64)::int, 'bench ' || id, 'bench.noop', $1, 'fix_rate', 'round',
                    'serial_execution', 'do_nothing', 5000,
                    now() + interval '3 seconds' + make_interval(secs => (i % $3::int) * $4::float8 / $3::int / 1000.0)
             FROM (SELECT nextval('jobs_id_seq') AS id, i FROM generate_series(1, $2::int) AS i) s",
        )
        .bind(json!({"kind": "fix_rate", "every_ms": every_ms}))
        .bind(n as i32)
        .bind(n.max(1) as i32)
        .bind(every_ms as f64)
        .execute(&pool)
        .await?;
        made += n;
    }
    sqlx::query("ANALYZE jobs").execute(&pool).await?;
    println!(
        "inserted {} jobs in {:.1} s",
        args.jobs,
        started.elapsed().as_secs_f64()
    );

    let t0 = chrono::Utc::now() + chrono::Duration::seconds(5);
    tokio::time::sleep(Duration::from_secs(args.secs + 5)).await;
    let t1 = chrono::Utc::now() - chrono::Duration::seconds(3);
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{}/status", admin.pid()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);

    let mut scans: Vec<f64> = admin
        .log()
        .lines()
        .filter(|l| l.contains(" scan ") || l.ends_with(" scan"))
        .filter_map(|l| l.split("elapsed_ms=").nth(1))
        .filter_map(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .collect();
    scans.sort_by(f64::total_cmp);
    let (published, window_s): (i64, f64) = sqlx::query_as(
        "SELECT count(*), EXTRACT(EPOCH FROM ($2::timestamptz - $1::timestamptz))::float8
         FROM triggers WHERE fire_time BETWEEN $1 AND $2 AND published_at IS NOT NULL",
    )
    .bind(t0)
    .bind(t1)
    .fetch_one(&pool)
    .await?;
    let (due, misfired): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status = 'misfired') FROM triggers WHERE fire_time BETWEEN $1 AND $2",
    )
    .bind(t0)
    .bind(t1)
    .fetch_one(&pool)
    .await?;
    // Lateness as the broker sees it: the record's timestamp (taken when the admin handed it to
    // the producer) minus its fire time. And as recorded: `published_at` (after the broker's
    // acknowledgement, on the database clock) minus fire time.
    let topic = format!("{}.trigger.bench.noop", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(600)).await?;
    let mut lateness: Vec<f64> = records
        .iter()
        .filter_map(|r| {
            let v = r.payload_json().ok()?;
            let fire = chrono::DateTime::parse_from_rfc3339(v["fire_time"].as_str()?).ok()?;
            let fire = fire.with_timezone(&chrono::Utc);
            let stamp = r.timestamp_ms?;
            (fire >= t0 && fire <= t1).then(|| (stamp - fire.timestamp_millis()) as f64)
        })
        .collect();
    lateness.sort_by(f64::total_cmp);
    let recorded = ms_after_fire(&pool, "published_at", t0, t1).await?;

    println!("published:        {published} of {due} due in {window_s:.1} s = {:.0} triggers/s (misfired {misfired})", published as f64 / window_s);
    println!(
        "fire lateness ms: {}  (record timestamp on the topic − fire time, {} records)",
        spread(&lateness),
        lateness.len()
    );
    println!(
        "recorded ms:      {}  (published_at after the acknowledgement − fire time)",
        spread(&recorded)
    );
    println!(
        "scan per batch:   {} batches, {} (ms)",
        scans.len(),
        spread(&scans)
    );
    println!("admin RSS:        {:.1} MiB", rss_kb as f64 / 1024.0);
    if args.workers > 0 {
        // Runs of the window as the workers saw them: how late each started, and how many
        // finished while the window lasted (the admin goes on firing while this reads).
        let start_late = ms_after_fire(&pool, "started_at", t0, t1).await?;
        let finished_in_window: i64 =
            sqlx::query_scalar("SELECT count(*) FROM triggers WHERE finished_at BETWEEN $1 AND $2")
                .bind(t0)
                .bind(t1)
                .fetch_one(&pool)
                .await?;
        println!(
            "workers:          {} runs finished in the window = {:.0}/s; start lateness ms {} (started_at − fire time, {} runs)",
            finished_in_window,
            finished_in_window as f64 / window_s,
            spread(&start_late),
            start_late.len()
        );
    }
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM triggers GROUP BY status ORDER BY status")
            .fetch_all(&pool)
            .await?;
    println!("runs by status:   {statuses:?}");
    if args.statements {
        print_statements(&pool).await?;
    }
    Ok(())
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

/// Milliseconds from the fire time to `column` (`published_at` or `started_at`) of the runs
/// that fired between `t0` and `t1` and have it, sorted.
async fn ms_after_fire(
    pool: &sqlx::PgPool,
    column: &'static str,
    t0: chrono::DateTime<chrono::Utc>,
    t1: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<f64>> {
    let mut ms: Vec<f64> = sqlx::query_scalar(&format!(
        "SELECT EXTRACT(EPOCH FROM ({column} - fire_time))::float8 * 1000.0
         FROM triggers WHERE fire_time BETWEEN $1 AND $2 AND {column} IS NOT NULL"
    ))
    .bind(t0)
    .bind(t1)
    .fetch_all(pool)
    .await?;
    ms.sort_by(f64::total_cmp);
    Ok(ms)
}

/// The statements that took the most database time over the whole run.
async fn print_statements(pool: &sqlx::PgPool) -> Result<()> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .context("pg_stat_statements is not available in this PostgreSQL installation")?;
    let rows: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT regexp_replace(left(query, 400), '\\s+', ' ', 'g'), calls,
                total_exec_time, total_plan_time
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_exec_time + total_plan_time DESC LIMIT 15",
    )
    .fetch_all(pool)
    .await?;
    let (exec, plan): (f64, f64) = rows.iter().fold((0.0, 0.0), |a, r| (a.0 + r.2, a.1 + r.3));
    println!("database time by statement (top 15: {exec:.0} ms executing, {plan:.0} ms planning):");
    println!(
        "  {:>9} {:>9} {:>8} {:>8}",
        "exec ms", "plan ms", "calls", "ms/call"
    );
    for (query, calls, exec, plan) in rows {
        let short: String = query.chars().take(100).collect();
        let per = (exec + plan) / calls.max(1) as f64;
        println!("  {exec:>9.0} {plan:>9.0} {calls:>8} {per:>8.2}  {short}");
    }
    Ok(())
}
