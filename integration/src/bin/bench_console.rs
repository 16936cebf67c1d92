//! Console benchmark: the API calls behind the dashboard, the job list and the run list, timed
//! against a database the size of a busy installation.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo run -p cadenza-integration --release --bin bench_console -- --jobs 100000 --runs 1000000
//! ```
//!
//! Starts a private PostgreSQL and broker and one release `cadenza-admin`, fills the database in
//! bulk (jobs over 40 job types, runs over the last 30 days: mostly succeeded, some failed or
//! timed out, a few running now, with the daily report to match), lets autovacuum's `ANALYZE`
//! settle, then requests each page's calls `--samples` times and prints the time to the last
//! byte (loopback, so the server's time) p50 / p95 / max per call, and per page with its calls
//! made at once as the console makes them.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cadenza_integration::{ApiClient, Cluster, StatusCode};
use serde_json::json;

struct Args {
    jobs: i64,
    runs: i64,
    samples: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        jobs: 100_000,
        runs: 1_000_000,
        samples: 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<i64> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name}: not a number"))
        };
        match flag.as_str() {
            "--jobs" => a.jobs = value("--jobs")?,
            "--runs" => a.runs = value("--runs")?,
            "--samples" => a.samples = value("--samples")?.try_into()?,
            "-h" | "--help" => {
                println!(
                    "bench_console [--jobs N (100000)] [--runs N (1000000)] [--samples N (30)]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}; see --help"),
        }
    }
    if a.jobs < 40 || a.runs < 1 || a.samples < 1 {
        bail!("--jobs must be at least 40, --runs and --samples at least 1");
    }
    Ok(a)
}

/// Milliseconds to the last byte of each of `paths`, requested at once.
async fn timed(api: &ApiClient, paths: &[String]) -> Result<f64> {
    let started = Instant::now();
    let answers =
        futures::future::try_join_all(paths.iter().map(|p| api.get_text(p.as_str()))).await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    for ((status, body), path) in answers.iter().zip(paths) {
        if *status != StatusCode::OK {
            bail!("GET {path}: {status} {body}");
        }
    }
    Ok(ms)
}

fn spread(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    format!(
        "p50 {:>6.1}  p95 {:>6.1}  max {:>6.1}",
        at(0.5),
        at(0.95),
        ms[ms.len() - 1]
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let cluster = Cluster::start().await?;
    let admin = cluster.spawn_admin(&[("RUST_LOG", "warn")]).await?;
    let api = admin.api();
    let (status, body) = api
        .post_json(
            "/api/jobs",
            &json!({"name": "console bench", "job_type": "team0.task",
                    "schedule": {"kind": "none"}}),
        )
        .await?;
    if status != StatusCode::CREATED {
        bail!("creating the first job: {status} {body}");
    }
    let pool = cluster.pool().await?;
    let started = Instant::now();
    // Jobs: 40 job types, names with a number, one in ten disabled, none fires during the bench
    // (a cron schedule far ahead), so the figures are the pages' alone.
    sqlx::query(
        "INSERT INTO jobs (id, shard, name, job_type, schedule, schedule_kind, route, block, misfire,
                           misfire_threshold_ms, enabled, next_fire_at)
         SELECT id, (id % 64)::int, 'nightly export ' || id, 'team' || (id % 40) || '.task',
                '{\"kind\": \"cron\", \"expr\": \"0 0 3 1 1 ? 2099\", \"timezone\": \"UTC\"}', 'cron',
                'round', 'serial_execution', 'do_nothing', 5000, id % 10 <> 0,
                '2099-01-01T03:00:00Z'
         FROM (SELECT nextval('jobs_id_seq') AS id FROM generate_series(2, $1::bigint)) s",
    )
    .bind(args.jobs)
    .execute(&pool)
    .await?;
    println!(
        "inserted {} jobs in {:.1} s",
        args.jobs,
        started.elapsed().as_secs_f64()
    );
    // Runs over the last 30 days, oldest first (ids grow with time as they do live): 95 %
    // succeeded, 3 % failed, 1 % timed out, 1 % misfired; the newest 20 still running.
    let started = Instant::now();
    let first_job: i64 = sqlx::query_scalar("SELECT min(id) FROM jobs")
        .fetch_one(&pool)
        .await?;
    let mut made = 0;
    while made < args.runs {
        let n = (args.runs - made).min(200_000);
        sqlx::query(
            "INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block,
                                   timeout_ms, route, partition, \"offset\", published_at, worker_id,
                                   worker_group, started_at, finished_at, message)
             SELECT j, 'team' || (j % 40) || '.task', (j % 64)::int, 'cron',
                    CASE WHEN i > $4 - 20 THEN 'running'
                         WHEN i % 100 < 3 THEN 'failed' WHEN i % 100 = 3 THEN 'timed_out'
                         WHEN i % 100 = 4 THEN 'misfired' ELSE 'succeeded' END,
                    t, '', 'serial_execution', 0, 'round', 0, i, t, 'worker-1', 'bench', t,
                    CASE WHEN i > $4 - 20 THEN NULL ELSE t + interval '40 ms' END,
                    CASE WHEN i % 100 < 4 THEN 'exit status 1' END
             FROM (SELECT i, $3 + (i * 7919) % $5 AS j,
                          now() - interval '30 days' + (interval '30 days' * i / $4) AS t
                   FROM generate_series($1::bigint, $2::bigint) AS i) s",
        )
        .bind(made + 1)
        .bind(made + n)
        .bind(first_job)
        .bind(args.runs)
        .bind(args.jobs)
        .execute(&pool)
        .await?;
        made += n;
    }
    sqlx::query(
        "INSERT INTO daily_report (day, job_id, status, runs)
         SELECT (fire_time AT TIME ZONE 'UTC')::date, job_id, status, count(*)
         FROM triggers WHERE finished_at IS NOT NULL GROUP BY 1, 2, 3
         ON CONFLICT (day, job_id, status) DO UPDATE SET runs = EXCLUDED.runs",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO daily_type_report (day, job_type, status, runs)
         SELECT r.day, j.job_type, r.status, sum(r.runs)
         FROM daily_report r JOIN jobs j ON j.id = r.job_id GROUP BY 1, 2, 3
         ON CONFLICT (day, job_type, status) DO UPDATE SET runs = EXCLUDED.runs",
    )
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
    println!(
        "inserted {} runs and their daily report in {:.1} s",
        args.runs,
        started.elapsed().as_secs_f64()
    );
    let day = |d: i64| (chrono::Utc::now() - chrono::Duration::days(d)).date_naive();
    let since = (chrono::Utc::now() - chrono::Duration::days(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let some_job = first_job + args.jobs / 2;
    let dashboard = |days: i64| {
        vec![
            format!(
                "/api/report?from={}&to={}&rows=false",
                day(days - 1),
                day(0)
            ),
            "/api/triggers?status=running&limit=100".to_owned(),
            format!("/api/triggers?status=failed&from={since}&limit=20"),
            "/api/workers".to_owned(),
            "/api/scheduler".to_owned(),
        ]
    };
    let pages: Vec<(&str, Vec<String>)> = vec![
        ("dashboard, 7 days", dashboard(7)),
        ("dashboard, 30 days", dashboard(30)),
        ("jobs", vec!["/api/jobs?limit=50".to_owned()]),
        (
            "jobs, page 1000",
            vec![format!(
                "/api/jobs?limit=50&after_id={}",
                first_job + args.jobs - 100
            )],
        ),
        (
            "jobs, name search",
            vec!["/api/jobs?name=export%2099&limit=50".to_owned()],
        ),
        (
            "jobs, name matching none",
            vec!["/api/jobs?name=no%20such%20job&limit=50".to_owned()],
        ),
        (
            "jobs, type and disabled",
            vec!["/api/jobs?job_type=team7.task&enabled=false&limit=50".to_owned()],
        ),
        (
            "job detail",
            vec![
                format!("/api/jobs/{some_job}"),
                format!("/api/triggers?job_id={some_job}&limit=20"),
            ],
        ),
        ("runs", vec!["/api/triggers?limit=50".to_owned()]),
        (
            "runs, failed",
            vec!["/api/triggers?status=failed&limit=50".to_owned()],
        ),
    ];
    // The dashboard's calls one by one, to see which one costs.
    let mut calls: Vec<(String, Vec<String>)> = dashboard(30)
        .into_iter()
        .map(|p| (format!("  {}", p.split('?').next().unwrap_or(&p)), vec![p]))
        .collect();
    calls.insert(0, ("dashboard, 30 days, call by call:".to_owned(), vec![]));
    println!(
        "\nms to the last byte, {} samples each (after 3 warm-ups)",
        args.samples
    );
    let every = pages
        .into_iter()
        .map(|(n, p)| (n.to_owned(), p))
        .chain(calls);
    for (name, paths) in every {
        if paths.is_empty() {
            println!("{name}");
            continue;
        }
        for _ in 0..3 {
            timed(&api, &paths).await?;
        }
        let mut ms = Vec::with_capacity(args.samples);
        for _ in 0..args.samples {
            ms.push(timed(&api, &paths).await?);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("{name:<34} {}", spread(ms));
    }
    // The worst case of "running now" and "failed in the last 24 h": none to find.
    sqlx::query(
        "UPDATE triggers SET status = 'succeeded'
         WHERE status = 'running' OR (status IN ('failed', 'lost') AND fire_time > now() - interval '2 days')",
    )
    .execute(&pool)
    .await?;
    sqlx::query("VACUUM ANALYZE triggers")
        .execute(&pool)
        .await?;
    for _ in 0..3 {
        timed(&api, &dashboard(7)).await?;
    }
    let mut ms = Vec::with_capacity(args.samples);
    for _ in 0..args.samples {
        ms.push(timed(&api, &dashboard(7)).await?);
    }
    println!("{:<34} {}", "dashboard, none running or failed", spread(ms));
    Ok(())
}
