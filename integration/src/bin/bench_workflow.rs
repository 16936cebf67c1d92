//! Workflow benchmark: how long a node's children wait after it ends (the handoff), end to end
//! through the broker, the workers, result ingest and the decision in PostgreSQL.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! CADENZA_QUIET_LOGS=1 cargo run -p cadenza-integration --release --bin bench_workflow -- \
//!     --workflows 20 --length 10 --runs 5
//! ```
//!
//! Starts a private PostgreSQL and broker, one release `cadenza-admin` and `--workers` release
//! `cadenza-worker`s serving `noop`, creates `--workflows` workflows, each a chain of `--length`
//! nodes (a job each) with a fan-out and join in the middle (a → b → {c1, c2} → d → …), triggers each
//! `--runs` times (all at once per round), waits for every workflow run to succeed, and prints
//! the handoff of every edge: the child's `started_at` (when its handler began) minus the
//! parent's `finished_at` (when its handler returned), p50 / p99 / max, and node runs per second;
//! then the handoff in three parts: until the child's run is written (the parent's `finished`
//! event on the results topic, ingested), until its delivery to the trigger topic is recorded,
//! and until its handler starts. The parts mix the workers' and the database's clocks (one
//! machine here).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cadenza_integration::{wait_for, ApiClient, Cluster, StatusCode};
use serde_json::{json, Value};

struct Args {
    workflows: usize,
    length: usize,
    runs: usize,
    workers: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        workflows: 20,
        length: 10,
        runs: 5,
        workers: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name}: not a number"))
        };
        match flag.as_str() {
            "--workflows" => a.workflows = value("--workflows")?,
            "--length" => a.length = value("--length")?,
            "--runs" => a.runs = value("--runs")?,
            "--workers" => a.workers = value("--workers")?,
            "-h" | "--help" => {
                println!(
                    "bench_workflow [--workflows N (20)] [--length N (10)] [--runs N (5)] [--workers N (2)]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}; see --help"),
        }
    }
    if a.workflows < 1 || a.length < 2 || a.length > 900 || a.runs < 1 || a.workers < 1 {
        bail!("--workflows, --runs and --workers at least 1; --length from 2 to 900");
    }
    Ok(a)
}

/// A chain of `length` nodes, node `n` running `jobs[n]`, with one fan-out and join in the
/// middle.
fn chain(name: &str, jobs: &[i64], length: usize) -> Value {
    let mut nodes = Vec::new();
    let mut prev: Vec<String> = Vec::new();
    let mut i = 0;
    while nodes.len() < length {
        if i == length / 2 && nodes.len() + 3 <= length {
            for side in ["l", "r"] {
                let job = jobs[nodes.len()];
                nodes.push(json!({"key": format!("n{i}{side}"), "job_id": job, "parents": prev}));
            }
            prev = vec![format!("n{i}l"), format!("n{i}r")];
        } else {
            let job = jobs[nodes.len()];
            nodes.push(json!({"key": format!("n{i}"), "job_id": job, "parents": prev}));
            prev = vec![format!("n{i}")];
        }
        i += 1;
    }
    json!({"name": name, "schedule": {"kind": "none"}, "nodes": nodes})
}

/// One edge's handoff and its three parts, in milliseconds (see the module doc).
type Edge = (f64, f64, f64, f64);

fn spread(mut ms: Vec<f64>) -> String {
    if ms.is_empty() {
        return "no samples".into();
    }
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    format!(
        "p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({} handoffs)",
        at(0.5),
        at(0.99),
        at(1.0),
        ms.len()
    )
}

async fn post(api: &ApiClient, path: &str, body: &Value) -> Result<Value> {
    let (status, v) = api.post_json(path, body).await?;
    if !status.is_success() {
        bail!("POST {path}: {status} {v}");
    }
    Ok(v)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let cluster = Cluster::start().await?;
    let admin = cluster.spawn_admin(&[("RUST_LOG", "warn")]).await?;
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        workers.push(
            cluster
                .spawn_worker("bench.noop=noop", "bench", &[("RUST_LOG", "warn")])
                .await?,
        );
    }
    let api = admin.api();
    let mut workflows = Vec::new();
    for w in 0..args.workflows {
        // A job per node: the runs of one job wait for each other on a worker (serial
        // execution), which would measure that queue rather than the handoff.
        let mut jobs = Vec::new();
        for n in 0..args.length {
            let body = json!({"name": format!("w{w} n{n}"), "job_type": "bench.noop",
                "schedule": {"kind": "none"}});
            jobs.push(api.create_job(&body).await?);
        }
        let v = post(
            &api,
            "/api/workflows",
            &chain(&format!("chain {w}"), &jobs, args.length),
        )
        .await?;
        workflows.push(v["id"].as_i64().context("workflow id")?);
    }
    // A warm-up run, so that topics exist and the workers are assigned.
    let warm = post(
        &api,
        &format!("/api/workflows/{}/trigger", workflows[0]),
        &json!({}),
    )
    .await?;
    let warm = warm["id"].as_i64().context("workflow run id")?;
    wait_for(Duration::from_secs(120), "the warm-up run", || {
        let api = &api;
        async move {
            let (_, r) = api.get_json(&format!("/api/workflow-runs/{warm}")).await?;
            Ok((r["status"] == "succeeded").then_some(()))
        }
    })
    .await?;
    let pool = cluster.pool().await?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..args.runs {
        let round: Vec<_> = workflows
            .iter()
            .map(|w| {
                let api = &api;
                let path = format!("/api/workflows/{w}/trigger");
                async move { post(api, &path, &json!({})).await }
            })
            .collect();
        for v in futures::future::try_join_all(round).await? {
            ids.push(v["id"].as_i64().context("workflow run id")?);
        }
    }
    let total = ids.len();
    let ids_ref = &ids;
    let pool_ref = &pool;
    wait_for(
        Duration::from_secs(600),
        &format!("{total} workflow runs to end"),
        || async move {
            let (running, failed): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status = 'running'),
                        count(*) FILTER (WHERE status NOT IN ('running', 'succeeded'))
                 FROM workflow_runs WHERE id = ANY($1)",
            )
            .bind(ids_ref)
            .fetch_one(pool_ref)
            .await?;
            if failed > 0 {
                bail!("{failed} workflow runs did not succeed");
            }
            Ok((running == 0).then_some(()))
        },
    )
    .await?;
    let elapsed = started.elapsed();
    let edges: Vec<Edge> = sqlx::query_as(
        "SELECT (EXTRACT(EPOCH FROM (c.started_at - p.finished_at)) * 1000)::float8,
                (EXTRACT(EPOCH FROM (c.created_at - p.finished_at)) * 1000)::float8,
                (EXTRACT(EPOCH FROM (c.published_at - c.created_at)) * 1000)::float8,
                (EXTRACT(EPOCH FROM (c.started_at - c.published_at)) * 1000)::float8
         FROM workflow_runs wr
         CROSS JOIN LATERAL jsonb_array_elements(wr.nodes) AS n (def)
         CROSS JOIN LATERAL jsonb_array_elements_text(n.def -> 'parents') AS par (key)
         JOIN workflow_run_nodes cn ON cn.workflow_run_id = wr.id AND cn.node = n.def ->> 'key'
         JOIN workflow_run_nodes pn ON pn.workflow_run_id = wr.id AND pn.node = par.key
         JOIN triggers c ON c.id = cn.run_id
         JOIN triggers p ON p.id = pn.run_id
         WHERE wr.id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await?;
    let nodes: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM workflow_run_nodes WHERE workflow_run_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_one(&pool)
    .await?;
    println!(
        "{} workflow runs of {} nodes ({} workers): {:.1} s, {:.0} node runs/s",
        total,
        args.length,
        args.workers,
        elapsed.as_secs_f64(),
        nodes as f64 / elapsed.as_secs_f64()
    );
    let parts = [
        "handoff (child started - parent finished)",
        "  parent finished -> child written (result event, ingest)",
        "  child written -> its delivery recorded (publisher)",
        "  delivery recorded -> child started (worker)",
    ];
    for (i, what) in parts.iter().enumerate() {
        let ms = edges.iter().map(|e| [e.0, e.1, e.2, e.3][i]).collect();
        println!("{what}: {}", spread(ms));
    }
    let (status, _) = api.get_json("/api/workflows").await?;
    if status != StatusCode::OK {
        bail!("the admin stopped answering: {status}");
    }
    cluster.stop_all(Duration::from_secs(10)).await?;
    Ok(())
}
