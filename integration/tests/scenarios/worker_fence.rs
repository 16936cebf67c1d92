//! G3 when a worker stalls in the middle of a commit round: a worker frozen between the group's
//! offset commit and its progress pointer commit, for longer than the session timeout, loses its
//! partition; when it wakes up, its late pointer commit must not make a later owner of the
//! partition forget what the owner in between finished or started.
//!
//! The worker is frozen at exactly that point by the worker's test hook
//! (`CADENZA_TEST_STOP_BEFORE_POINTER`: it stops itself with SIGSTOP once a file exists) and
//! woken up with SIGCONT.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::{
    audit, create_job, quiesce, sleep_job, stop_all_and_read_results,
};
use cadenza_integration::{wait_for, Cluster, WorkerHandle};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const HOOK: &str = "CADENZA_TEST_STOP_BEFORE_POINTER";

#[tokio::test]
async fn a_stalled_workers_late_pointer_commit_does_not_make_the_next_owner_repeat_runs() {
    let cluster = Cluster::start().await.unwrap();
    // One partition: each worker in turn owns all of the job type's triggers.
    let admin = cluster
        .spawn_admin(&[
            ("CADENZA_TRIGGER_PARTITIONS", "1"),
            ("CADENZA_WORKER_DEAD_MS", "3000"),
        ])
        .await
        .unwrap();
    let api = &admin.api();
    let topic = format!("{}.trigger.fence.work", cluster.topic_prefix());
    let arm = cluster.dir().join("stop-before-pointer");
    let arm_env = arm.to_str().unwrap().to_owned();
    let env = [
        ("CADENZA_TRIGGER_PARTITIONS", "1"),
        ("CADENZA_SESSION_TIMEOUT_MS", "6000"),
        ("CADENZA_REVOKE_TIMEOUT_MS", "5000"),
        ("CADENZA_HEARTBEAT_MS", "500"),
        (HOOK, arm_env.as_str()),
    ];
    let spawn = || cluster.spawn_worker("fence.work=sleep", "fence", &env);
    let quick = create_job(
        api,
        sleep_job("quick", "fence.work", 1, json!({"kind": "none"})),
    )
    .await;
    let long = create_job(
        api,
        sleep_job("long", "fence.work", 15_000, json!({"kind": "none"})),
    )
    .await;
    let jobs = [quick, long];

    // Worker A owns the partition and finishes a few runs.
    let a = spawn().await.unwrap();
    api.wait_assignment(&topic, &[a.id().to_owned()], 1, WAIT)
        .await
        .unwrap();
    for _ in 0..3 {
        let id = api.trigger_now(quick).await.unwrap();
        api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
    }

    // A stalls in the round that records its next run: after the group's offset commit, before
    // the pointer commit.
    std::fs::write(&arm, b"").unwrap();
    let stalled_on = api.trigger_now(quick).await.unwrap();
    a.wait_for_log("test hook: stopping before the pointer commit", WAIT)
        .await
        .unwrap();
    wait_stopped(&a).await;

    // Worker B takes the partition over once A's session has timed out, starts a long run and
    // finishes quick runs above it (out of order: the committed offset stays at the long run).
    let b = spawn().await.unwrap();
    api.wait_assignment(&topic, &[b.id().to_owned()], 1, WAIT)
        .await
        .unwrap();
    let long_run = api.trigger_now(long).await.unwrap();
    api.wait_run_status(long_run, "running", WAIT)
        .await
        .unwrap();
    let mut finished_by_b = Vec::new();
    for _ in 0..3 {
        let id = api.trigger_now(quick).await.unwrap();
        api.wait_run_status(id, "succeeded", WAIT).await.unwrap();
        finished_by_b.push(id);
    }
    api.wait_run_status(stalled_on, "succeeded", WAIT)
        .await
        .unwrap();
    // B's progress record, with those runs finished, is committed within a few rounds.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A wakes up and completes its round's pointer commit; then B dies.
    a.resume().unwrap();
    a.wait_for_log("test hook: pointer commit after the stop", WAIT)
        .await
        .unwrap();
    a.kill_9().unwrap();
    b.kill_9().unwrap();

    // Worker C takes over: it runs the long run again (B did not finish it), and nothing that
    // A or B finished.
    let c = spawn().await.unwrap();
    let runs = quiesce(api, &jobs, Duration::from_secs(120)).await;
    let events = stop_all_and_read_results(&cluster).await;
    let report = audit(&runs, &events);
    eprintln!(
        "[fence] published {}, finished {}, re-executed {}, duplicates {}; A {} B {} C {}",
        report.published,
        report.finished,
        report.re_executed,
        report.duplicates,
        a.id(),
        b.id(),
        c.id()
    );
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.finished, report.published);
    for id in finished_by_b {
        assert_eq!(events[&id].started.len(), 1, "run {id}: {:?}", events[&id]);
    }
    let long_events = &events[&long_run];
    let attempts: Vec<u64> = long_events.started.iter().map(|s| s.0).collect();
    assert_eq!(
        attempts,
        [1, 2],
        "the long run started on B and again on C: {long_events:?}"
    );
    assert_eq!(long_events.started[1].1, c.id(), "{long_events:?}");
}

/// Waits until the process is stopped (state `T` in `/proc/<pid>/stat`).
async fn wait_stopped(w: &WorkerHandle) {
    let stat = format!("/proc/{}/stat", w.pid());
    wait_for(WAIT, "the worker to be stopped", || {
        let stat = stat.clone();
        async move {
            let s = std::fs::read_to_string(&stat)?;
            let state = s
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            Ok((state == Some("T")).then_some(()))
        }
    })
    .await
    .unwrap();
}

/// A new owner whose first reads of the partition's progress fail (a stall, a refused claim, a
/// broker blip during the rebalance; here the worker's test hook
/// `CADENZA_TEST_FAIL_PROGRESS_READS`) reads it again rather than assume nothing was done: of 50
/// runs finished above a long one that was still running, none runs again; only the long run
/// does.
#[tokio::test]
async fn a_new_owner_whose_progress_read_fails_reads_it_again_and_reruns_nothing_finished() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[
            ("CADENZA_TRIGGER_PARTITIONS", "1"),
            ("CADENZA_WORKER_DEAD_MS", "3000"),
        ])
        .await
        .unwrap();
    let api = &admin.api();
    let topic = format!("{}.trigger.reread.work", cluster.topic_prefix());
    let env = [
        ("CADENZA_TRIGGER_PARTITIONS", "1"),
        ("CADENZA_SESSION_TIMEOUT_MS", "6000"),
        ("CADENZA_HEARTBEAT_MS", "500"),
    ];
    let quick = create_job(
        api,
        sleep_job("quick", "reread.work", 1, json!({"kind": "none"})),
    )
    .await;
    let long = create_job(
        api,
        sleep_job("long", "reread.work", 8_000, json!({"kind": "none"})),
    )
    .await;
    let a = cluster
        .spawn_worker("reread.work=sleep", "reread", &env)
        .await
        .unwrap();
    api.wait_assignment(&topic, &[a.id().to_owned()], 1, WAIT)
        .await
        .unwrap();
    let long_run = api.trigger_now(long).await.unwrap();
    api.wait_run_status(long_run, "running", WAIT)
        .await
        .unwrap();
    let mut quick_runs = Vec::new();
    for _ in 0..50 {
        quick_runs.push(api.trigger_now(quick).await.unwrap());
    }
    for id in &quick_runs {
        api.wait_run_status(*id, "succeeded", WAIT).await.unwrap();
    }
    // A's progress record, with those runs finished above the long one, is committed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill_9().unwrap();

    let mut hooked = env.to_vec();
    hooked.push(("CADENZA_TEST_FAIL_PROGRESS_READS", "2"));
    let b = cluster
        .spawn_worker("reread.work=sleep", "reread", &hooked)
        .await
        .unwrap();
    b.wait_for_log(
        "reading the progress of assigned partitions failed; reading it again",
        WAIT,
    )
    .await
    .unwrap();
    let runs = quiesce(api, &[quick, long], Duration::from_secs(120)).await;
    let events = stop_all_and_read_results(&cluster).await;
    let report = audit(&runs, &events);
    eprintln!(
        "[reread] published {}, finished {}, re-executed {}, duplicates {}",
        report.published, report.finished, report.re_executed, report.duplicates
    );
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert_eq!(report.duplicates, 0);
    for id in &quick_runs {
        assert_eq!(events[id].started.len(), 1, "run {id}: {:?}", events[id]);
    }
    let attempts: Vec<u64> = events[&long_run].started.iter().map(|s| s.0).collect();
    assert_eq!(attempts, [1, 2], "{:?}", events[&long_run]);
    assert!(
        !b.log().contains("could not be read: their triggers"),
        "the fallback was not needed"
    );
}
