//! A rolling restart: each of three workers in turn gets SIGTERM while jobs run, and is replaced.
//! A graceful stop finishes its running runs, and a rebalance lets running runs finish before
//! their partitions move, so no run is lost and none runs twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{
    audit, create_job, disable, quiesce, sleep_job, stop_all_and_read_results,
};
use cadenza_integration::{Cluster, WorkerHandle};
use serde_json::json;

const WORKER_ENV: &[(&str, &str)] = &[("CADENZA_HEARTBEAT_MS", "1000")];

async fn spawn(cluster: &Cluster) -> WorkerHandle {
    let w = cluster
        .spawn_worker("roll.work=sleep", "rolling", WORKER_ENV)
        .await
        .unwrap();
    w.wait_for_log(".trigger.roll.work[", Duration::from_secs(60))
        .await
        .unwrap();
    w
}

#[tokio::test]
async fn sigterm_each_worker_in_turn_loses_and_repeats_nothing() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let mut jobs = Vec::new();
    for (name, ms, every) in [
        ("quick", 50, 250),
        ("medium", 800, 1000),
        ("long", 2500, 3000),
    ] {
        jobs.push(
            create_job(
                api,
                sleep_job(
                    name,
                    "roll.work",
                    ms,
                    json!({"kind": "fix_rate", "every_ms": every}),
                ),
            )
            .await,
        );
    }
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(spawn(&cluster).await);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for slot in workers.iter_mut() {
        let old = slot.clone();
        eprintln!("[rolling] SIGTERM {}", old.id());
        let status = old.terminate_within(Duration::from_secs(40)).await.unwrap();
        assert!(status.success(), "{} exited with {status}", old.id());
        assert!(
            old.log().contains("final offsets committed"),
            "{}",
            old.log_tail(30)
        );
        *slot = spawn(&cluster).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    disable(api, &jobs).await;
    let runs = quiesce(api, &jobs, Duration::from_secs(90)).await;
    let events = stop_all_and_read_results(&cluster).await;
    let a = audit(&runs, &events);
    eprintln!(
        "[rolling] published {}, finished {}, re-executed {}, duplicates {}",
        a.published, a.finished, a.re_executed, a.duplicates
    );
    assert!(a.problems.is_empty(), "{:#?}", a.problems);
    let not_succeeded: Vec<_> = runs
        .iter()
        .filter(|r| !r["offset"].is_null() && r["status"] != "succeeded")
        .collect();
    assert!(not_succeeded.is_empty(), "{not_succeeded:#?}");
    assert_eq!((a.re_executed, a.duplicates), (0, 0));
    assert_eq!(a.finished, a.published);
    assert!(a.published >= 40, "too little happened: {}", a.published);
}
