//! Run results: `started`, `log` and `finished` events from workers, applied to `triggers` in
//! batches. A `started` event of a later attempt (a redelivered run) replaces the earlier
//! attempt's worker and start; `log` events append the live log of a running run, each batch
//! once; `finished` sets the terminal status and the whole log, and sets off what follows a
//! run's end ([`crate::outcome`]: retries, child jobs, `fix_delay` next times, alarms) in the
//! same transaction.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{ResultEvent, RunFinished, RunLogLines, RunStarted, RunStatus};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::Message;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{recv_batch, to_dlq};
use crate::kafka::KafkaClients;
use crate::route::registry::Registry;

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
pub async fn apply(
    pool: &PgPool,
    registry: &Registry,
    events: &[ResultEvent],
) -> Result<usize, sqlx::Error> {
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
    let logs: Vec<&RunLogLines> = events
        .iter()
        .filter_map(|e| match e {
            ResultEvent::Log(l) => Some(l),
            _ => None,
        })
        .collect();
    let mut tx = pool.begin().await?;
    if !started.is_empty() {
        for query in [sql!("ingest/run_started"), sql!("ingest/run_restarted")] {
            sqlx::query(query)
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
    }
    for layer in log_layers(&logs) {
        sqlx::query(sql!("ingest/run_log"))
            .bind(layer.iter().map(|l| l.trigger_id.0).collect::<Vec<_>>())
            .bind(layer.iter().map(|l| l.attempt as i32).collect::<Vec<_>>())
            .bind(
                layer
                    .iter()
                    .map(|l| i64::try_from(l.seq).unwrap_or(i64::MAX))
                    .collect::<Vec<_>>(),
            )
            .bind(
                layer
                    .iter()
                    .map(|l| clip(Some(l.lines.join("\n")), MAX_LOG_BYTES).unwrap_or_default())
                    .collect::<Vec<_>>(),
            )
            .execute(&mut *tx)
            .await?;
    }
    let mut changed = 0;
    if !finished.is_empty() {
        let rows: Vec<(i64, String)> = sqlx::query_as(sql!("ingest/run_finished"))
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
        let ended: Vec<(i64, RunStatus)> = rows
            .into_iter()
            .filter_map(|(id, status)| status.parse().ok().map(|s| (id, s)))
            .collect();
        crate::outcome::after_terminal(&mut tx, registry, &ended).await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Log events split into statements holding at most one event per run, in `seq` order (an
/// UPDATE applies only one row per target row).
fn log_layers<'a>(logs: &[&'a RunLogLines]) -> Vec<Vec<&'a RunLogLines>> {
    let mut sorted: Vec<&RunLogLines> = logs.to_vec();
    sorted.sort_by_key(|l| (l.trigger_id, l.attempt, l.seq));
    sorted.dedup_by_key(|l| (l.trigger_id, l.attempt, l.seq));
    let mut layers: Vec<Vec<&RunLogLines>> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let id = sorted[i].trigger_id;
        let mut k = 0;
        while i < sorted.len() && sorted[i].trigger_id == id {
            if layers.len() <= k {
                layers.push(Vec::new());
            }
            layers[k].push(sorted[i]);
            k += 1;
            i += 1;
        }
    }
    layers
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
    registry: Arc<Registry>,
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
            match apply(&pool, &registry, &events).await {
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
    // Batches were committed as they were stored; a final synchronous commit can stall for the
    // request timeout while the group rebalances, and re-applying events is harmless.
    let _ = consumer.commit_consumer_state(CommitMode::Async);
}

#[cfg(test)]
mod tests {
    use cadenza_schemas::{JobId, RunLogLines, TriggerId, WorkerId};

    fn log(id: i64, attempt: u32, seq: u64) -> RunLogLines {
        RunLogLines {
            trigger_id: TriggerId(id),
            job_id: JobId(1),
            worker_id: WorkerId("w".into()),
            attempt,
            seq,
            lines: vec![format!("{id}/{attempt}/{seq}")],
        }
    }

    #[test]
    fn log_layers_hold_one_event_per_run_in_seq_order() {
        let events = [
            log(2, 1, 2),
            log(1, 1, 1),
            log(2, 1, 1),
            log(2, 1, 2),
            log(3, 1, 5),
        ];
        let refs: Vec<&RunLogLines> = events.iter().collect();
        let layers = super::log_layers(&refs);
        let ids = |l: &Vec<&RunLogLines>| -> Vec<(i64, u64)> {
            l.iter().map(|e| (e.trigger_id.0, e.seq)).collect()
        };
        assert_eq!(layers.len(), 2);
        assert_eq!(ids(&layers[0]), vec![(1, 1), (2, 1), (3, 5)]);
        assert_eq!(ids(&layers[1]), vec![(2, 2)]);
    }

    #[test]
    fn clip_keeps_the_tail() {
        assert_eq!(super::clip(Some("abcdef".into()), 3).unwrap(), "…def");
        assert_eq!(super::clip(Some("abc".into()), 3).unwrap(), "abc");
        assert_eq!(super::clip(None, 3), None);
    }
}
