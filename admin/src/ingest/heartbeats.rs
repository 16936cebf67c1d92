//! Worker heartbeats from the compacted `<prefix>.workers` topic into the live registry (what
//! routing uses) and the `workers` table (what `GET /api/workers` lists).

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{Heartbeat, WorkerId};
use chrono::Utc;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::recv_batch;
use crate::kafka::KafkaClients;
use crate::route::registry::Registry;

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

/// What one message on the workers topic is.
#[derive(Debug)]
enum Beat {
    Heartbeat(Box<Heartbeat>),
    /// A tombstone: the worker with this id stopped.
    Stopped(WorkerId),
    /// Not usable; the reason is logged.
    Ignored(String),
}

/// Reads one message: a heartbeat whose key is its worker id, or a tombstone.
fn parse(key: Option<&[u8]>, payload: Option<&[u8]>) -> Beat {
    let key = key.map(|k| String::from_utf8_lossy(k).into_owned());
    match (payload, key) {
        (None, Some(worker_id)) => Beat::Stopped(WorkerId(worker_id)),
        (None, None) => Beat::Ignored("a tombstone without a key".into()),
        (Some(p), key) => match serde_json::from_slice::<Heartbeat>(p) {
            Ok(hb) if key.as_deref().is_some_and(|k| k != hb.worker_id.0) => {
                Beat::Ignored(format!(
                    "key {:?} is not the heartbeat's worker id {:?}",
                    key.unwrap_or_default(),
                    hb.worker_id.0
                ))
            }
            Ok(hb) => Beat::Heartbeat(Box::new(hb)),
            Err(e) => Beat::Ignored(e.to_string()),
        },
    }
}

/// Reads every heartbeat from the start of the topic (each admin has its own view) until
/// `shutdown`. A heartbeat that cannot be parsed is ignored with a warning; the registry and
/// the table stay as they were.
pub async fn run(
    pool: PgPool,
    kafka: Arc<KafkaClients>,
    registry: Arc<Registry>,
    admin_id: String,
    shutdown: CancellationToken,
) {
    let group = format!("{}-admin-registry-{admin_id}", kafka.topics().prefix());
    // Heartbeats come every few seconds: a fetch may wait longer for them than for results.
    let wait = kafka.settings.fetch_wait_ms.max(250).to_string();
    let consumer = match kafka.consumer(&group, &[("fetch.wait.max.ms", wait.as_str())]) {
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
            let result = match parse(m.key(), m.payload()) {
                Beat::Stopped(worker_id) => {
                    registry.stopped(&worker_id, Utc::now());
                    sqlx::query(sql!("ingest/worker_stopped"))
                        .bind(&worker_id.0)
                        .execute(&pool)
                        .await
                        .map(|_| ())
                }
                Beat::Heartbeat(hb) => {
                    registry.apply((*hb).clone(), Utc::now());
                    store(&pool, &hb).await
                }
                Beat::Ignored(reason) => {
                    tracing::warn!(partition = m.partition(), offset = m.offset(), %reason, "unparseable heartbeat ignored");
                    Ok(())
                }
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "storing a heartbeat failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_mismatched_keys_are_ignored() {
        assert!(matches!(
            parse(Some(b"w1"), Some(b"not json")),
            Beat::Ignored(_)
        ));
        assert!(matches!(
            parse(Some(b"w1"), Some(br#"{"worker_id":"w1"}"#)),
            Beat::Ignored(_)
        ));
        assert!(matches!(parse(None, None), Beat::Ignored(_)));
        assert!(matches!(parse(Some(b"w1"), None), Beat::Stopped(w) if w.0 == "w1"));
        let hb = r#"{"worker_id":"w1","group":"g","job_types":["x"],"capacity":1,"version":"0",
            "started_at":"2026-01-01T00:00:00Z","sent_at":"2026-01-01T00:00:01Z","interval_ms":500}"#;
        assert!(matches!(
            parse(Some(b"w1"), Some(hb.as_bytes())),
            Beat::Heartbeat(_)
        ));
        assert!(matches!(
            parse(None, Some(hb.as_bytes())),
            Beat::Heartbeat(_)
        ));
        assert!(matches!(
            parse(Some(b"w2"), Some(hb.as_bytes())),
            Beat::Ignored(r) if r.contains("not the heartbeat's worker id")
        ));
    }
}
