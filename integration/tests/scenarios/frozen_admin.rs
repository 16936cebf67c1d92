//! An admin frozen between its lease check and its send (SIGSTOP, as a host pausing a VM would
//! do at the worst moment), held past its lease while a second admin takes the shards over and
//! publishes, then resumed: every run is on the trigger topic once for a `read_committed`
//! reader, and the frozen admin learns it was fenced and gives the shards up.
//!
//! The pause point is compiled into debug builds only (`CADENZA_TEST_FREEZE_BEFORE_SEND`).
//! `CADENZA_FROZEN_TEST_PUBLICATION=idempotent` runs the same test on the publication without
//! transactions, where the resumed admin's send lands after the new holder has sent the run
//! again: the test then fails, which is what it is there to show.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cadenza_integration::scenario::{all_runs, time};
use cadenza_integration::{read_topic_to_end, wait_for, Cluster, StatusCode};
use serde_json::json;

use crate::scheduler_core::spawn_admin_with;

const JOB_TYPE: &str = "frozen.noop";

/// The process state letter of `pid` (`T` when stopped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold spaces: the state follows its closing parenthesis.
    stat.rsplit_once(") ")?.1.chars().next()
}

#[tokio::test]
async fn an_admin_frozen_between_its_lease_check_and_its_send_does_not_send_twice() {
    let publication = std::env::var("CADENZA_FROZEN_TEST_PUBLICATION")
        .unwrap_or_else(|_| "transactions".to_owned());
    let cluster = Cluster::start().await.unwrap();
    let pool = cluster.pool().await.unwrap();
    let env = |freeze: bool| {
        let mut env = vec![("CADENZA_PUBLICATION", publication.clone())];
        if freeze {
            env.push(("CADENZA_TEST_FREEZE_BEFORE_SEND", JOB_TYPE.to_owned()));
        }
        env
    };
    let a = spawn_admin_with(&cluster, "admin-a", &env(true)).await;
    crate::scheduler_core::wait_balanced(&pool, &["admin-a"]).await;
    let (status, job) = a
        .api()
        .post_json(
            "/api/jobs",
            &json!({"name": "frozen", "job_type": JOB_TYPE,
                    "schedule": {"kind": "fix_rate", "every_ms": 500}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_i64().unwrap();

    // Admin A stops itself right after its lease check, before the send of the job's first run.
    let pid = a.pid();
    wait_for(
        Duration::from_secs(30),
        "admin A to freeze",
        || async move { Ok((state(pid) == Some('T')).then_some(())) },
    )
    .await
    .unwrap();
    let frozen_at = Instant::now();

    // B takes every shard over once A's lease has run out (3 s), resolves what A left
    // `publishing` (the frozen run among them: not on the topic, so B sends it) and publishes
    // the job's next runs.
    let b = spawn_admin_with(&cluster, "admin-b", &env(false)).await;
    crate::scheduler_core::wait_balanced(&pool, &["admin-b"]).await;
    let api = b.api();
    wait_for(
        Duration::from_secs(60),
        "admin B to publish runs of the job, the frozen one included",
        || {
            let api = api.clone();
            async move {
                let items = all_runs(&api, job_id).await;
                let cutoff = chrono::Utc::now() - chrono::Duration::seconds(2);
                let left = items
                    .iter()
                    .filter(|r| r["status"] == "publishing" || r["status"] == "scheduled")
                    .filter(|r| time(&r["fire_time"]) < cutoff)
                    .count();
                let published = items.iter().filter(|r| r["status"] == "published").count();
                Ok((left == 0 && published >= 4).then_some(()))
            }
        },
    )
    .await
    .unwrap();
    println!(
        "admin A frozen for {:.1} s while admin B took over and published",
        frozen_at.elapsed().as_secs_f64()
    );

    // A resumes where it stopped: it hands the record over, and learns it lost the shards.
    a.resume().unwrap();
    if publication == "transactions" {
        a.wait_for_log("this admin's producer was fenced", Duration::from_secs(30))
            .await
            .unwrap();
    }
    a.wait_for_log("shards lost to another admin", Duration::from_secs(30))
        .await
        .unwrap();
    // Time for anything A still had to land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, _) = api
        .post_empty(&format!("/api/jobs/{job_id}/disable"))
        .await
        .unwrap();
    assert!(status.is_success());

    let topic = format!("{}.trigger.{JOB_TYPE}", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(60))
        .await
        .unwrap();
    let mut copies: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &records {
        if r.header_str("cadenza-record") != Some("trigger") {
            continue;
        }
        if let Some(id) = r.payload_json().ok().and_then(|v| v["trigger_id"].as_i64()) {
            *copies.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<(&i64, &usize)> = copies.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "publication {publication}: {} runs on the topic, {} of them more than once",
        copies.len(),
        twice.len()
    );
    assert!(copies.len() >= 4, "runs were published: {copies:?}");
    assert!(
        twice.is_empty(),
        "runs on the topic more than once for a read_committed reader: {twice:?}"
    );
    assert!(a.is_running(), "admin A exited: {}", a.log_tail(30));
}
