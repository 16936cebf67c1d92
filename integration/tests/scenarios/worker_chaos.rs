//! G3 and G4 under worker crashes: three workers of one group run jobs of mixed durations while
//! a random worker is killed (SIGKILL) at random moments and restarted. Afterwards every
//! published run has exactly one terminal status, no run whose `finished` event was published
//! ran again, and runs executed again (unfinished at a kill) carry a higher attempt.
//!
//! Runs about a minute by default; `CADENZA_CHAOS_SECS=300` runs the chaos phase longer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::{Duration, Instant};

use cadenza_integration::scenario::{
    audit, create_job, disable, quiesce, sleep_job, stop_all_and_read_results,
};
use cadenza_integration::{ApiClient, BrokerKind, Cluster, StatusCode, WorkerHandle};
use rand::Rng;
use serde_json::json;

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
    // A kill every 2–6 s keeps the group rebalancing; in a long run a killed worker's partition
    // can take longer than the default lost-run grace (60 s) to reach a member that stays up,
    // and the run would be recorded `lost` before its next owner runs it. This test is about
    // what the workers do (G3, G4), not lost-run detection (see the operations tests).
    let admin = cluster
        .spawn_admin(&[("CADENZA_LOST_GRACE_MS", "600000")])
        .await
        .unwrap();
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
    let events = stop_all_and_read_results(&cluster).await;
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

/// `POST /api/jobs/{job}/trigger` on `worker` with `params` (the sleep in ms); the run's id.
async fn trigger_on(api: &ApiClient, job: i64, worker: &str, params: &str) -> i64 {
    let (status, body) = api
        .post_json(
            &format!("/api/jobs/{job}/trigger"),
            &json!({"worker": worker, "params": params}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["trigger_ids"][0].as_i64().unwrap()
}

/// A member whose revocation drains runs of 8 s in a rebalance. Apache Kafka waits for it (up to
/// its rebalance timeout, `max.poll.interval.ms`, which the worker keeps above its revoke
/// drain): its runs finish where they started and none runs twice. A broker that does not wait
/// (Tansu) moves the group on and gives its partitions to another member while its runs still
/// execute; its offset commits are then refused (the group has a newer generation), so its runs
/// must not report: their new owners run them again with a higher attempt. Either way each run
/// is reported by one attempt only. (A member frozen past its session, on any broker, is
/// `worker_fence`'s case.)
#[tokio::test]
async fn a_member_draining_in_a_rebalance_reports_each_run_once() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let mut jobs = Vec::new();
    for k in 0..3 {
        jobs.push(
            create_job(
                api,
                sleep_job(
                    &format!("long {k}"),
                    "drain.work",
                    1,
                    json!({"kind": "none"}),
                ),
            )
            .await,
        );
    }
    let topic = format!("{}.trigger.drain.work", cluster.topic_prefix());
    let env = &[
        ("CADENZA_SESSION_TIMEOUT_MS", "6000"),
        ("CADENZA_REVOKE_TIMEOUT_MS", "15000"),
        ("CADENZA_HEARTBEAT_MS", "500"),
    ];
    let spawn = || cluster.spawn_worker("drain.work=sleep", "drain", env);
    let wait = Duration::from_secs(60);
    // The first member leads the group; it has nothing running when the rebalance comes.
    let leader = spawn().await.unwrap();
    api.wait_assignment(&topic, &[leader.id().to_owned()], 6, wait)
        .await
        .unwrap();
    let slow = spawn().await.unwrap();
    let members = [leader.id().to_owned(), slow.id().to_owned()];
    api.wait_assignment(&topic, &members, 6, wait)
        .await
        .unwrap();
    let held = api.assignment(&topic).await.unwrap()[slow.id()].clone();

    // A run of 8 s on each partition of the slow member: runs of a job sent to one worker go to
    // its partitions in turn, so job k's long run follows k quick ones.
    let mut long = Vec::new();
    for (k, job) in jobs.iter().enumerate() {
        for _ in 0..k {
            let quick = trigger_on(api, *job, slow.id(), "1").await;
            api.wait_run_status(quick, "succeeded", wait).await.unwrap();
        }
        long.push(trigger_on(api, *job, slow.id(), "8000").await);
    }
    let mut on = Vec::new();
    for id in &long {
        let r = api.wait_run_status(*id, "running", wait).await.unwrap();
        on.push(r["partition"].as_i64().unwrap());
    }
    on.sort_unstable();
    assert_eq!(
        on, held,
        "one long run on each of the slow member's partitions"
    );

    // A third member joins: the slow one drains for ~8 s, and with three members it keeps only
    // two of its three partitions.
    let joiner = spawn().await.unwrap();
    let runs = quiesce(api, &jobs, Duration::from_secs(120)).await;
    let events = stop_all_and_read_results(&cluster).await;
    let a = audit(&runs, &events);
    eprintln!(
        "[drain] published {}, finished {}, re-executed {}, duplicates {}; slow {} joiner {}",
        a.published,
        a.finished,
        a.re_executed,
        a.duplicates,
        slow.id(),
        joiner.id()
    );
    assert!(a.problems.is_empty(), "{:#?}", a.problems);
    assert_eq!(a.finished, a.published);
    match cluster.broker().kind() {
        BrokerKind::Kafka => {
            assert_eq!(
                a.re_executed, 0,
                "the group waited for the slow member's drain: {events:#?}"
            );
            for id in &long {
                let started = &events[id].started;
                assert_eq!(started.len(), 1, "run {id}: {started:?}");
                assert_eq!(started[0].1, slow.id(), "run {id} ran where it started");
            }
        }
        BrokerKind::Tansu => assert!(
            a.re_executed >= 1,
            "the group moved the slow member's partitions while it drained: {events:#?}"
        ),
    }
}
