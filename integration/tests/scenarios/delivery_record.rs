//! The delivery record (migration 0019): a run whose row stays `publishing` after the broker
//! acknowledged it, and that a row of `deliveries` holds, is published for every reader of the
//! API: its run (status, partition, offset, publication time), the lists by status, cancel
//! (sent to its partition, as for a published run) and replay (its offset is found by fire time
//! and by partition). A run still `publishing` that the record does not hold stays `publishing`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::scenario::time;
use cadenza_integration::{produce, read_topic_to_end, wait_for, ApiClient, Cluster, StatusCode};
use cadenza_schemas::{
    BlockStrategy, JobId, JobType, TriggerId, TriggerKind, TriggerMessage, TriggerRecord,
};
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

const WAIT: Duration = Duration::from_secs(60);
const JOB_TYPE: &str = "dr.job";
/// The partition both runs were routed to (the admin creates 6 by default).
const PARTITION: i32 = 2;

/// A `publishing` run of `job` on its shard, routed to [`PARTITION`] under `epoch`, due at
/// `fire_time` and marked at `marked`.
async fn publishing_run(
    pool: &PgPool,
    job: i64,
    (shard, epoch): (i32, i64),
    fire_time: DateTime<Utc>,
    marked: DateTime<Utc>,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, \
         timeout_ms, route, partition, lease_epoch, created_at, updated_at) \
         VALUES ($1, $2, $3, 'manual', 'publishing', $4, '', 'serial_execution', 0, 'round', $5, \
         $6, $7, $7) RETURNING id",
    )
    .bind(job)
    .bind(JOB_TYPE)
    .bind(shard)
    .bind(fire_time)
    .bind(PARTITION)
    .bind(epoch)
    .bind(marked)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The ids of the runs `GET /api/triggers?{query}` lists (one page).
async fn listed(api: &ApiClient, query: &str) -> Vec<i64> {
    let (status, page) = api
        .get_json(&format!("/api/triggers?{query}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{page}");
    page["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// A dry-run replay of `request` (plus the job type); the original ids and offsets it found.
async fn replay_plan(api: &ApiClient, mut request: Value) -> Vec<(i64, i64, i64)> {
    request["job_type"] = json!(JOB_TYPE);
    request["dry_run"] = json!(true);
    let (status, plan) = api.post_json("/api/replay", &request).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{plan}");
    plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["original_id"].as_i64().unwrap(),
                r["partition"].as_i64().unwrap(),
                r["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_run_the_delivery_record_holds_is_published_to_every_reader() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let pool = cluster.pool().await.unwrap();
    let job = api
        .create_job(&json!({"name": "held", "job_type": JOB_TYPE, "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    // The runs are written as the admin holding the job's shard would have: under its epoch, so
    // that its read-back leaves them alone.
    let lease: (i32, i64) = wait_for(WAIT, "the job's shard to be held", || {
        let pool = pool.clone();
        async move {
            Ok(sqlx::query_as(
                "SELECT l.shard, l.epoch FROM jobs j JOIN scheduler_lease l ON l.shard = j.shard \
                 WHERE j.id = $1 AND l.holder IS NOT NULL AND l.expires_at > now()",
            )
            .bind(job)
            .fetch_optional(&pool)
            .await?)
        }
    })
    .await
    .unwrap();

    // Sent 10 s ago and acknowledged 5 ms later; its row still says `publishing`.
    let fire_time = (Utc::now() - chrono::Duration::seconds(10)).trunc_subsecs(3);
    let acked_at = fire_time + chrono::Duration::milliseconds(5);
    let delivered = publishing_run(&pool, job, lease, fire_time, fire_time).await;
    let record = TriggerRecord::Trigger(TriggerMessage {
        trigger_id: TriggerId(delivered),
        job_id: JobId(job),
        job_type: JobType::parse(JOB_TYPE).unwrap(),
        kind: TriggerKind::Manual,
        fire_time,
        params: String::new(),
        block: BlockStrategy::SerialExecution,
        timeout_ms: 0,
        attempt: 1,
        shard_index: 0,
        shard_total: 1,
        routed_worker: None,
        route: None,
        published_at: acked_at,
        workflow_run_id: None,
        workflow_node: None,
        upstream: None,
    });
    let topic = cluster.topics().trigger(&JobType::parse(JOB_TYPE).unwrap());
    let (_, offset) = produce(
        &cluster.brokers(),
        &topic,
        Some(PARTITION),
        Some(job.to_string().as_bytes()),
        serde_json::to_string(&record).unwrap().as_bytes(),
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (job_type, partition, runs, first_fire, last_fire, last_offset, \
         run_ids, offsets, fire_times, acked_at) \
         VALUES ($1, $2, int8range($3, $3, '[]'), $4, $4, $5, ARRAY[$3], ARRAY[$5], ARRAY[$4], \
         ARRAY[$6::timestamptz])",
    )
    .bind(JOB_TYPE)
    .bind(PARTITION)
    .bind(delivered)
    .bind(fire_time)
    .bind(offset)
    .bind(acked_at)
    .execute(&pool)
    .await
    .unwrap();
    // Written ahead for in an hour, not sent. The admin did not mark it, so nothing holds its
    // shard's settled mark back from passing it: marked in the future, it stays after the mark
    // (where the publishing runs' list looks) while the test runs.
    let in_an_hour = Utc::now() + chrono::Duration::hours(1);
    let pending = publishing_run(&pool, job, lease, in_an_hour, in_an_hour).await;

    // The run.
    let (status, run) = api
        .get_json(&format!("/api/triggers/{delivered}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["status"], "published", "{run}");
    assert_eq!(
        (run["partition"].clone(), run["offset"].clone()),
        (json!(PARTITION), json!(offset))
    );
    assert_eq!(time(&run["published_at"]), acked_at, "{run}");
    assert!(
        run["waiting"].as_str().unwrap().contains(JOB_TYPE),
        "no worker serves it: {run}"
    );
    let (_, run) = api
        .get_json(&format!("/api/triggers/{pending}"))
        .await
        .unwrap();
    assert_eq!(run["status"], "publishing", "{run}");
    assert_eq!(
        (run["offset"].clone(), run["published_at"].clone()),
        (Value::Null, Value::Null)
    );

    // The lists.
    let all = format!("job_id={job}");
    let (_, page) = api.get_json(&format!("/api/triggers?{all}")).await.unwrap();
    let shown: Vec<(i64, &str, Value)> = page["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["status"].as_str().unwrap(),
                r["offset"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (pending, "publishing", Value::Null),
            (delivered, "published", json!(offset))
        ]
    );
    for query in [
        "status=published".to_owned(),
        format!("status=published&{all}"),
    ] {
        let ids = listed(api, &query).await;
        assert!(
            ids.contains(&delivered) && !ids.contains(&pending),
            "{query}: {ids:?}"
        );
    }
    for query in [
        "status=publishing".to_owned(),
        format!("status=publishing&{all}"),
    ] {
        let ids = listed(api, &query).await;
        assert!(
            ids.contains(&pending) && !ids.contains(&delivered),
            "{query}: {ids:?}"
        );
    }
    assert_eq!(
        listed(api, &format!("status=scheduled&{all}")).await,
        Vec::<i64>::new()
    );

    // Replay finds its offset by its fire time (of its job or all), and by its partition.
    let window = json!({
        "from": (fire_time - chrono::Duration::seconds(1)).to_rfc3339(),
        "to": (fire_time + chrono::Duration::seconds(1)).to_rfc3339(),
    });
    let found = vec![(delivered, i64::from(PARTITION), offset)];
    assert_eq!(replay_plan(api, window.clone()).await, found);
    let mut of_job = window.clone();
    of_job["job_id"] = json!(job);
    assert_eq!(replay_plan(api, of_job).await, found);
    let range = json!({"partitions": [
        {"partition": PARTITION, "from_offset": offset, "to_offset": offset}]});
    assert_eq!(replay_plan(api, range).await, found);

    // Cancel: the published run gets a cancel record on its partition; the one written ahead
    // is cancelled before it is sent.
    let (status, body) = api
        .post_empty(&format!("/api/triggers/{delivered}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "published", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("cancel requested by "),
        "{body}"
    );
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(20))
        .await
        .unwrap();
    let cancels: Vec<i32> = records
        .iter()
        .filter(|r| {
            r.header_str("cadenza-record") == Some("cancel")
                && r.payload_json().is_ok_and(|v| v["trigger_id"] == delivered)
        })
        .map(|r| r.partition)
        .collect();
    assert_eq!(
        cancels,
        [PARTITION],
        "one cancel record, on the run's partition"
    );
    let (status, body) = api
        .post_empty(&format!("/api/triggers/{pending}/cancel"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");
}

/// One row of `deliveries` holding `ids` (consecutive offsets from 0).
async fn delivery_row(pool: &PgPool, ids: &[i64]) {
    let n = ids.len() as i64;
    sqlx::query(
        "INSERT INTO deliveries (job_type, partition, runs, first_fire, last_fire, last_offset, \
         run_ids, offsets, fire_times, acked_at) \
         SELECT $1, 0, int8range(min(x), max(x), '[]'), now(), now(), $3 - 1, $2, \
                ARRAY(SELECT generate_series(0, $3 - 1)), \
                array_fill(now(), ARRAY[$3::int]), array_fill(now(), ARRAY[$3::int]) \
         FROM unnest($2::bigint[]) AS x",
    )
    .bind(JOB_TYPE)
    .bind(ids)
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

/// `cadenza_delivered_among` finds exactly the recorded runs among ids far apart (an old run
/// looked up beside recent ones, the case migration 0020 cuts into spans), near the spans' cut
/// and at the edges of a delivery's range.
#[tokio::test]
async fn the_runs_delivered_among_ids_far_apart_are_found() {
    let cluster = Cluster::start().await.unwrap();
    let pool = cadenza_admin::db::pool(cluster.database_url(), 2_000).unwrap();
    cadenza_admin::db::migrate(&pool).await.unwrap();
    // Recorded: an old round (ids 100..=109), one recent (5,000,000..=5,000,499) and, between
    // them, a thousand rounds of 100 ids each.
    delivery_row(&pool, &(100..=109).collect::<Vec<_>>()).await;
    for round in 0..1_000i64 {
        let first = 1_000_000 + round * 100;
        delivery_row(&pool, &(first..first + 100).collect::<Vec<_>>()).await;
    }
    delivery_row(&pool, &(5_000_000..5_000_500).collect::<Vec<_>>()).await;
    let among = |ids: Vec<i64>| {
        let pool = pool.clone();
        async move {
            let mut found: Vec<i64> =
                sqlx::query_scalar("SELECT cadenza_delivered_among($1::bigint[])")
                    .bind(&ids)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            found.sort_unstable();
            found
        }
    };
    // Old and recent together, with ids recorded nowhere beside them (99, 110, 4,999,999,
    // 5,000,500) and one 4,096 ids past the old round (a span of its own).
    assert_eq!(
        among(vec![
            99, 100, 109, 110, 4_205, 4_999_999, 5_000_000, 5_000_250, 5_000_499, 5_000_500
        ])
        .await,
        vec![100, 109, 5_000_000, 5_000_250, 5_000_499]
    );
    // Ids of the rounds between, sparse and dense, repeated.
    let ids: Vec<i64> = (1_000_000..1_100_000)
        .step_by(997)
        .chain([1_050_000; 3])
        .collect();
    let mut expected = ids.clone();
    expected.sort_unstable();
    expected.dedup();
    assert_eq!(among(ids).await, expected);
    assert!(among(vec![]).await.is_empty());
    assert!(among(vec![7, 8_000_000]).await.is_empty());
}
