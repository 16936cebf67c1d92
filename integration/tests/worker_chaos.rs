//! G3 and G4 under worker crashes: three workers of one group run jobs of mixed durations while
//! a random worker is killed (SIGKILL) at random moments and restarted. Afterwards every
//! published run has exactly one terminal status, no run whose `finished` event was published
//! ran again, and runs executed again (unfinished at a kill) carry a higher attempt.
//!
//! Runs about a minute by default; `CADENZA_CHAOS_SECS=300` runs the chaos phase longer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

mod worker_support;

use std::time::{Duration, Instant};

use cadenza_integration::{Cluster, WorkerHandle};
use rand::Rng;
use serde_json::json;
use worker_support::{audit, create_job, disable, quiesce, results_by_trigger, sleep_job};

const WORKER_ENV: &[(&str, &str)] = &[
    ("CADENZA_SESSION_TIMEOUT_MS", "6000"),
    ("CADENZA_REVOKE_TIMEOUT_MS", "5000"),
    ("CADENZA_HEARTBEAT_MS", "1000"),
];

async fn spawn(cluster: &Cluster) -> WorkerHandle {
    cluster
        .spawn_worker("chaos.work=sleep", "chaos", WORKER_ENV)
        .await
        .unwrap()
}

#[tokio::test]
async fn killing_workers_neither_loses_nor_repeats_finished_runs() {
    let chaos = Duration::from_secs(
        std::env::var("CADENZA_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let mut workers = [
        spawn(&cluster).await,
        spawn(&cluster).await,
        spawn(&cluster).await,
    ];

    let mut jobs = Vec::new();
    for (name, ms, every) in [
        ("quick", 50, 300),
        ("short", 400, 700),
        ("medium", 1500, 2000),
        ("long", 3000, 4000),
    ] {
        jobs.push(
            create_job(
                api,
                sleep_job(
                    name,
                    "chaos.work",
                    ms,
                    json!({"kind": "fix_rate", "every_ms": every}),
                ),
            )
            .await,
        );
    }

    let started = Instant::now();
    let mut kills = 0;
    while started.elapsed() < chaos {
        let pause = rand::rng().random_range(2000..6000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let victim = rand::rng().random_range(0..workers.len());
        eprintln!(
            "[chaos] t={:?} SIGKILL {}",
            started.elapsed(),
            workers[victim].id()
        );
        workers[victim].kill_9().unwrap();
        kills += 1;
        let down = rand::rng().random_range(200..2000);
        tokio::time::sleep(Duration::from_millis(down)).await;
        workers[victim] = spawn(&cluster).await;
    }
    disable(api, &jobs).await;
    // Killed members' partitions move after the session timeout; runs then drain.
    let runs = quiesce(api, &jobs, Duration::from_secs(120)).await;
    let events = results_by_trigger(&cluster).await;
    let a = audit(&runs, &events);
    let not_succeeded: Vec<_> = runs
        .iter()
        .filter(|r| !r["offset"].is_null() && r["status"] != "succeeded")
        .collect();
    eprintln!(
        "[chaos] {kills} kills in {:?}: published {}, finished {}, re-executed {}, duplicates {}, not succeeded {}",
        chaos,
        a.published,
        a.finished,
        a.re_executed,
        a.duplicates,
        not_succeeded.len()
    );
    assert!(a.problems.is_empty(), "{:#?}", a.problems);
    assert!(not_succeeded.is_empty(), "{not_succeeded:#?}");
    assert_eq!(a.duplicates, 0);
    assert_eq!(a.finished, a.published);
    assert!(kills >= 3 && a.published >= 50, "too little happened");
}
