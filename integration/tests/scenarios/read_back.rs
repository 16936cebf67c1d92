//! Read-back of runs left `publishing`, driven directly against a real PostgreSQL and broker:
//! runs of earlier lease holders are resolved from their partitions (found → `published`,
//! missing → sent again), a run this admin marked under its current epoch (its send still in
//! flight) is never reset, and a partition that cannot be read back holds up no other.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::sync::Arc;
use std::time::Duration;

use cadenza_admin::config::SchedulerArgs;
use cadenza_admin::ids::{LeaseEpoch, ShardId};
use cadenza_admin::kafka::{KafkaClients, KafkaSettings};
use cadenza_admin::route::registry::Registry;
use cadenza_admin::scheduler::lease::LeaseManager;
use cadenza_admin::scheduler::recover::{resolve_publishing, ReadBack};
use cadenza_admin::scheduler::{clock::DbClock, wheel::Wheel, SchedulerContext};
use cadenza_integration::Cluster;
use cadenza_schemas::{
    BlockStrategy, JobId, JobType, TriggerId, TriggerKind, TriggerMessage, TriggerRecord,
};
use chrono::Utc;
use sqlx::PgPool;

async fn context(cluster: &Cluster) -> (Arc<SchedulerContext>, PgPool) {
    let pool = cadenza_admin::db::pool(cluster.database_url(), 2_000).unwrap();
    cadenza_admin::db::migrate(&pool).await.unwrap();
    let shard_count = cadenza_admin::db::ensure_shard_count(&pool, 64)
        .await
        .unwrap();
    let kafka = Arc::new(
        KafkaClients::new(KafkaSettings {
            brokers: cluster.brokers(),
            topics: cluster.topics(),
            trigger_partitions: 3,
            topic_policy: cadenza_schemas::TopicPolicy::default(),
            message_timeout_ms: 1_000,
            linger_ms: 1,
            fetch_wait_ms: 100,
        })
        .unwrap(),
    );
    kafka.ensure_base_topics().await.unwrap();
    let config = SchedulerArgs {
        lease_ttl_ms: 10_000,
        lease_renew_ms: 3_000,
        lease_margin_ms: 1_500,
        lookahead_ms: 2_000,
        publish_ahead_ms: 250,
        record_delay_ms: 1_000,
        scan_interval_ms: 500,
        scan_batch: 1_000,
        lost_grace_ms: 60_000,
    };
    let ctx = Arc::new(SchedulerContext {
        pool: pool.clone(),
        admin_id: "read-back-test".into(),
        shard_count,
        config,
        leases: Default::default(),
        clock: Arc::new(DbClock::default()),
        wheel: Arc::new(Wheel::default()),
        lateness: Default::default(),
        kafka,
        registry: Arc::new(Registry::new(cluster.topics(), Duration::from_secs(10))),
        router: Default::default(),
        read_back: tokio::sync::Mutex::new(()),
        catch_ups: Default::default(),
        // The read-back itself, as without transactions (no producer to fence here).
        txn: None,
        fences: Default::default(),
    });
    (ctx, pool)
}

/// A `publishing` run of `job` on shard 0 for `partition`, marked under `epoch`.
async fn publishing_run(pool: &PgPool, job: i64, partition: i32, epoch: i64) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, \
         timeout_ms, route, partition, lease_epoch) \
         VALUES ($1, 'rb.job', 0, 'manual', 'publishing', now(), '', 'serial_execution', 0, \
         'round', $2, $3) RETURNING id",
    )
    .bind(job)
    .bind(partition)
    .bind(epoch)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn status(pool: &PgPool, id: i64) -> (String, Option<i64>) {
    sqlx::query_as("SELECT status, \"offset\" FROM triggers WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn read_back_resolves_earlier_holders_runs_only_and_survives_a_bad_partition() {
    let cluster = Cluster::start().await.unwrap();
    let (ctx, pool) = context(&cluster).await;
    LeaseManager::new(ctx.clone()).run_once().await.unwrap();
    let LeaseEpoch(epoch) = ctx.leases.epoch(ShardId(0)).expect("shard 0 held");
    let job: i64 = sqlx::query_scalar(
        "INSERT INTO jobs (name, job_type, schedule, schedule_kind, route, block, misfire, \
         misfire_threshold_ms, shard) VALUES ('rb', 'rb.job', '{\"kind\":\"none\"}', 'none', \
         'round', 'serial_execution', 'do_nothing', 5000, 0) RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let job_type = JobType::parse("rb.job").unwrap();
    let partitions = ctx
        .kafka
        .ensure_trigger_topic(&pool, &job_type)
        .await
        .unwrap();
    assert_eq!(partitions, 3);

    // Marked by this admin under its current epoch a moment ago: its send is in flight.
    let own = publishing_run(&pool, job, 0, epoch).await;
    // Left by the previous holder: one never landed, one did.
    let lost = publishing_run(&pool, job, 1, epoch - 1).await;
    let landed = publishing_run(&pool, job, 2, epoch - 1).await;
    // Left on a partition that cannot be read back (the topic has 3).
    let unreadable = publishing_run(&pool, job, 7, epoch - 1).await;

    let record = TriggerRecord::Trigger(TriggerMessage {
        trigger_id: TriggerId(landed),
        job_id: JobId(job),
        job_type: job_type.clone(),
        kind: TriggerKind::Manual,
        fire_time: Utc::now(),
        params: String::new(),
        block: BlockStrategy::SerialExecution,
        timeout_ms: 0,
        attempt: 1,
        shard_index: 0,
        shard_total: 1,
        routed_worker: None,
        route: None,
        published_at: Utc::now(),
        workflow_run_id: None,
        workflow_node: None,
        upstream: None,
    });
    let topic = cluster.topics().trigger(&job_type);
    let (_, at) = cadenza_integration::produce(
        &cluster.brokers(),
        &topic,
        Some(2),
        Some(job.to_string().as_bytes()),
        serde_json::to_string(&record).unwrap().as_bytes(),
    )
    .await
    .unwrap();

    let resolved = resolve_publishing(&ctx, &[ShardId(0)], ReadBack::AfterTakeover)
        .await
        .unwrap();
    println!("{resolved:?}");
    assert_eq!(status(&pool, landed).await, ("published".into(), Some(at)));
    assert_eq!(status(&pool, lost).await.0, "scheduled", "sent again");
    assert_eq!(
        status(&pool, own).await.0,
        "publishing",
        "a run this admin is still sending was reset: it would be published twice"
    );
    assert_eq!(status(&pool, unreadable).await.0, "publishing");
    assert_eq!(resolved.failed_partitions, 1);
    assert_eq!((resolved.published, resolved.resend), (1, 1));
}
