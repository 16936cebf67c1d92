//! Cadenza on a three-node Apache Kafka cluster (each node broker and controller, replication
//! factor 3, `min.insync.replicas=2`, `acks=all` with idempotence) while nodes are lost, under
//! load: two admins, three workers, about 1,000 triggers a second.
//!
//! Counts printed and checked: fire times neither published nor misfired (lost), fire times
//! published twice, runs run again after they finished, published runs never recorded.
//!
//! `CADENZA_BROKER_CHAOS_SECS` (default 90) sets how long nodes are killed; `scripts/chaos
//! brokers` runs it for 600 s.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::{Duration, Instant};

use cadenza_integration::scenario::{audit, quiesce, stop_all_and_read_results};
use cadenza_integration::{AdminHandle, Broker, Cluster, WorkerHandle};
use chrono::Utc;
use rand::seq::IndexedRandom;
use rand::Rng;

use crate::scheduler_core::{
    create_jobs_every, disable_all, spawn_admin_with, tally, wait_balanced, wait_quiet,
};

const REPLICATION: &[(&str, &str)] = &[("CADENZA_REPLICATION_FACTOR", "3")];

async fn spawn_worker(cluster: &Cluster) -> WorkerHandle {
    cluster
        .spawn_worker(
            "chaos.noop=noop",
            "chaos",
            &[
                REPLICATION[0],
                ("CADENZA_SESSION_TIMEOUT_MS", "6000"),
                ("CADENZA_HEARTBEAT_MS", "1000"),
            ],
        )
        .await
        .unwrap()
}

async fn spawn_admin(cluster: &Cluster, id: &str) -> AdminHandle {
    spawn_admin_with(
        cluster,
        id,
        &[
            (REPLICATION[0].0, REPLICATION[0].1.to_owned()),
            // Runs are recorded `lost` only by this test's own accounting, never by the admin
            // while partitions move.
            ("CADENZA_LOST_GRACE_MS", "600000".to_owned()),
        ],
    )
    .await
}

/// The node ids that lead a partition of the trigger, results or progress topic now.
async fn leaders(broker: &Broker, topics: &[String]) -> Vec<i32> {
    let mut out = Vec::new();
    for topic in topics {
        for p in 0..6 {
            if let Ok(Some(l)) = broker.leader_of(topic, p).await {
                out.push(l);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Not yet part of `scripts/test`: on this 2-core machine (three Kafka nodes, debug binaries) the
/// workers stop taking triggers for minutes after a node is lost (their group sessions time out,
/// partitions come back with every offset inherited, and the runs stay `published`), which is
/// being worked on. `scripts/chaos brokers [SECONDS]` runs it.
#[tokio::test]
#[ignore = "workers stall after a broker loss; run with scripts/chaos brokers"]
async fn losing_brokers_loses_no_fire_time_and_repeats_no_run() {
    let secs: u64 = std::env::var("CADENZA_BROKER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    let broker = Broker::start_cluster(3).await.unwrap();
    let cluster = Cluster::start_on(broker).await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let admins = [
        spawn_admin(&cluster, "admin-0").await,
        spawn_admin(&cluster, "admin-1").await,
    ];
    let _workers = [
        spawn_worker(&cluster).await,
        spawn_worker(&cluster).await,
        spawn_worker(&cluster).await,
    ];
    wait_balanced(&pool, &["admin-0", "admin-1"]).await;
    let api = admins[0].api();
    // 200 jobs every 100-300 ms (and every fifth each second): about 1,000 fire times a second.
    let jobs = create_jobs_every(&api, 200, 100..=300).await;
    let t = cluster.topics();
    let watched = [
        format!("{}.trigger.chaos.noop", cluster.topic_prefix()),
        t.results(),
        t.progress(),
    ];

    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut kills = 0;
    let mut rng = rand::rng();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10_000..20_000))).await;
        // A node that leads a partition Cadenza uses (most often all three do).
        let candidates = leaders(cluster.broker(), &watched).await;
        let victim = candidates
            .choose(&mut rng)
            .copied()
            .unwrap_or_else(|| rng.random_range(1..=3));
        let node = cluster.broker().node(victim).unwrap();
        eprintln!(
            "[broker chaos] t={:?} SIGKILL node {victim} (leaders: {candidates:?})",
            started.elapsed()
        );
        node.kill_9().unwrap();
        kills += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(2000..8000))).await;
        node.start_again().await.unwrap();
    }
    let ran_for = started.elapsed();
    // The cluster whole again, the admins' shards settled: stop the jobs.
    tokio::time::sleep(Duration::from_secs(5)).await;
    wait_balanced(&pool, &["admin-0", "admin-1"]).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    disable_all(&api, &jobs).await;
    wait_quiet(&pool).await;
    let tally = tally(&cluster, &pool, &jobs, until, Duration::from_secs(120)).await;
    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let runs = quiesce(&api, &ids, Duration::from_secs(180)).await;
    let published_runs = runs.iter().filter(|r| !r["offset"].is_null()).count();
    let events = stop_all_and_read_results(&cluster).await;
    let a = audit(&runs, &events);
    let per_second = tally.expected as f64 / ran_for.as_secs_f64().max(1.0);
    println!(
        "broker chaos {secs} s, 3 nodes (rf 3, min.insync 2): {kills} kills; fire times expected {} (~{per_second:.0}/s), published {}, misfired {}, published twice {}, lost {}; runs published {published_runs}, finished {}, run again after finishing {}, re-executed (unfinished at a loss) {}, problems {}",
        tally.expected,
        tally.published,
        tally.misfired,
        tally.duplicates,
        tally.lost,
        a.finished,
        a.duplicates,
        a.re_executed,
        a.problems.len()
    );
    assert!(kills >= 1);
    assert!(per_second >= 900.0, "load too low: {tally:?}");
    assert_eq!(tally.lost, 0, "fire times lost: {tally:?}");
    assert_eq!(tally.duplicates, 0, "fire times published twice: {tally:?}");
    assert_eq!(
        a.duplicates, 0,
        "finished runs run again: {:#?}",
        a.problems
    );
    assert!(a.problems.is_empty(), "{:#?}", a.problems);
    assert_eq!(a.finished, a.published, "every published run recorded");
}
