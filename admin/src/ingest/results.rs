//! Run results: `started` and `finished` events from workers, applied to `triggers` in batches.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{ResultEvent, RunFinished, RunStarted, TriggerKind};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::Message;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{recv_batch, to_dlq};
use crate::kafka::KafkaClients;

/// Most events applied in one transaction.
const BATCH: usize = 1_000;
/// Longest text kept from a run's log.
pub const MAX_LOG_BYTES: usize = 64 * 1024;

fn clip(s: Option<String>, max: usize) -> Option<String> {
    s.map(|mut s| {
        if s.len() > max {
            let mut cut = s.len() - max;
            while !s.is_char_boundary(cut) {
                cut += 1;
            }
            s.replace_range(..cut, "…");
        }
        s
    })
}

/// Applies a batch of events in one transaction. Idempotent.
pub async fn apply(pool: &PgPool, events: &[ResultEvent]) -> Result<usize, sqlx::Error> {
    let started: Vec<&RunStarted> = events
        .iter()
        .filter_map(|e| match e {
            ResultEvent::Started(s) => Some(s),
            _ => None,
        })
        .collect();
    let finished: Vec<&RunFinished> = events
        .iter()
        .filter_map(|e| match e {
            ResultEvent::Finished(f) => Some(f),
            _ => None,
        })
        .collect();
    let mut tx = pool.begin().await?;
    if !started.is_empty() {
        sqlx::query(sql!("ingest/run_started"))
            .bind(started.iter().map(|s| s.trigger_id.0).collect::<Vec<_>>())
            .bind(
                started
                    .iter()
                    .map(|s| s.worker_id.0.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(started.iter().map(|s| s.group.clone()).collect::<Vec<_>>())
            .bind(started.iter().map(|s| s.partition).collect::<Vec<_>>())
            .bind(started.iter().map(|s| s.offset).collect::<Vec<_>>())
            .bind(started.iter().map(|s| s.attempt as i32).collect::<Vec<_>>())
            .bind(started.iter().map(|s| s.started_at).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await?;
    }
    let mut changed = 0;
    if !finished.is_empty() {
        let rows: Vec<(i64, i64, String, DateTime<Utc>)> =
            sqlx::query_as(sql!("ingest/run_finished"))
                .bind(finished.iter().map(|f| f.trigger_id.0).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| f.worker_id.0.clone())
                        .collect::<Vec<_>>(),
                )
                .bind(finished.iter().map(|f| f.group.clone()).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.partition).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.offset).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| f.attempt as i32)
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| f.status.as_str())
                        .collect::<Vec<_>>(),
                )
                .bind(finished.iter().map(|f| f.started_at).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.finished_at).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| clip(f.message.clone(), MAX_LOG_BYTES))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| clip(f.log.clone(), MAX_LOG_BYTES))
                        .collect::<Vec<_>>(),
                )
                .fetch_all(&mut *tx)
                .await?;
        changed = rows.len();
        let (jobs, at): (Vec<i64>, Vec<DateTime<Utc>>) = rows
            .into_iter()
            .filter(|(_, _, kind, _)| kind == TriggerKind::FixDelay.as_str())
            .map(|(_, job, _, at)| (job, at))
            .unzip();
        if !jobs.is_empty() {
            sqlx::query(sql!("ingest/fix_delay_next"))
                .bind(&jobs)
                .bind(&at)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(changed)
}

/// Why an event is refused (it goes to the DLQ).
fn check(e: &ResultEvent) -> Result<(), String> {
    if let ResultEvent::Finished(f) = e {
        if !f.status.is_worker_outcome() {
            return Err(format!(
                "status {} cannot be reported by a worker",
                f.status
            ));
        }
    }
    Ok(())
}

/// Consumes `<prefix>.results` until `shutdown`. Offsets are committed after the batch is in
/// the database, so a crash re-applies (harmlessly) rather than loses events.
pub async fn run(
    pool: PgPool,
    kafka: Arc<KafkaClients>,
    admin_id: String,
    shutdown: CancellationToken,
) {
    let group = format!("{}-admin", kafka.topics().prefix());
    let consumer = match kafka.consumer(&group, &[("enable.auto.offset.store", "false")]) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot create the results consumer");
            return;
        }
    };
    if let Err(e) = consumer.subscribe(&[&kafka.topics().results()]) {
        tracing::error!(error = %e, "cannot subscribe to the results topic");
        return;
    }
    while !shutdown.is_cancelled() {
        let batch = recv_batch(&consumer, BATCH, Duration::from_millis(5), &shutdown).await;
        if batch.is_empty() {
            continue;
        }
        let mut events = Vec::with_capacity(batch.len());
        for m in &batch {
            let parsed = match m.payload() {
                None => Err("empty message".to_owned()),
                Some(p) => serde_json::from_slice::<ResultEvent>(p)
                    .map_err(|e| format!("not a result event: {e}")),
            };
            match parsed.and_then(|e| check(&e).map(|()| e)) {
                Ok(e) => events.push(e),
                Err(reason) => to_dlq(&kafka, &admin_id, m, reason).await,
            }
        }
        // Retry the batch until it is stored: never commit past events that are not.
        let mut delay = Duration::from_millis(100);
        loop {
            match apply(&pool, &events).await {
                Ok(_) => break,
                Err(e) => {
                    tracing::error!(error = %e, "storing results failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        for m in &batch {
            if let Err(e) = consumer.store_offset_from_message(m) {
                tracing::warn!(error = %e, "storing offset failed");
            }
        }
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            tracing::debug!(error = %e, "commit failed; will commit with the next batch");
        }
    }
    let _ = consumer.commit_consumer_state(CommitMode::Sync);
}

#[cfg(test)]
mod tests {
    #[test]
    fn clip_keeps_the_tail() {
        assert_eq!(super::clip(Some("abcdef".into()), 3).unwrap(), "…def");
        assert_eq!(super::clip(Some("abc".into()), 3).unwrap(), "abc");
        assert_eq!(super::clip(None, 3), None);
    }
}
