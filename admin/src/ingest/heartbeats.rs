//! Worker heartbeats from the compacted `<prefix>.workers` topic into the `workers` table.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::Heartbeat;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::recv_batch;
use crate::kafka::KafkaClients;

async fn store(pool: &PgPool, hb: &Heartbeat) -> Result<(), sqlx::Error> {
    sqlx::query(sql!("ingest/upsert_worker"))
        .bind(&hb.worker_id.0)
        .bind(&hb.group)
        .bind(
            hb.job_types
                .iter()
                .map(|j| j.as_str().to_owned())
                .collect::<Vec<_>>(),
        )
        .bind(sqlx::types::Json(&hb.assignments))
        .bind(sqlx::types::Json(&hb.running))
        .bind(hb.capacity as i32)
        .bind(&hb.version)
        .bind(hb.started_at)
        .bind(hb.sent_at)
        .bind(hb.interval_ms as i64)
        .execute(pool)
        .await?;
    Ok(())
}

/// Reads every heartbeat from the start of the topic (each admin has its own view) until
/// `shutdown`. A heartbeat that cannot be parsed is ignored with a warning.
pub async fn run(
    pool: PgPool,
    kafka: Arc<KafkaClients>,
    admin_id: String,
    shutdown: CancellationToken,
) {
    let group = format!("{}-admin-registry-{admin_id}", kafka.topics().prefix());
    let consumer = match kafka.consumer(&group, &[]) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot create the heartbeat consumer");
            return;
        }
    };
    if let Err(e) = consumer.subscribe(&[&kafka.topics().workers()]) {
        tracing::error!(error = %e, "cannot subscribe to the workers topic");
        return;
    }
    while !shutdown.is_cancelled() {
        for m in recv_batch(&consumer, 500, Duration::from_millis(5), &shutdown).await {
            let key = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
            let result = match (m.payload(), key) {
                (None, Some(worker_id)) => sqlx::query(sql!("ingest/worker_stopped"))
                    .bind(worker_id)
                    .execute(&pool)
                    .await
                    .map(|_| ()),
                (None, None) => Ok(()),
                (Some(p), _) => match serde_json::from_slice::<Heartbeat>(p) {
                    Ok(hb) => store(&pool, &hb).await,
                    Err(e) => {
                        tracing::warn!(offset = m.offset(), error = %e, "unparseable heartbeat ignored");
                        Ok(())
                    }
                },
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "storing a heartbeat failed");
            }
        }
    }
}
