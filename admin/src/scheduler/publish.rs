//! Publication: ledger before send, send, record after delivery.
//!
//! 1. Due triggers are marked `publishing` with their partition, in one statement that checks
//!    this admin still holds each trigger's shard at the epoch it knows.
//! 2. They are produced (idempotent producer, `acks=all`) only while the lease is valid by this
//!    admin's clock; the producer's delivery timeout is shorter than the lease margin, so nothing
//!    lands after the lease could have passed to another admin.
//! 3. Delivered ones are recorded `published` with partition and offset, in one statement.

use std::sync::Arc;

use cadenza_schemas::{TriggerMessage, TriggerRecord, HEADER_RECORD, HEADER_TRACEPARENT};
use chrono::Utc;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use tokio_util::sync::CancellationToken;

use super::{PendingTrigger, SchedulerContext};
use crate::route::Router;

/// Most triggers in one publication batch.
pub const MAX_BATCH: usize = 5_000;

pub struct Publisher {
    ctx: Arc<SchedulerContext>,
    router: Router,
}

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PublishOutcome {
    pub published: usize,
    /// Not ours any more (shard lost) or no longer `scheduled` (e.g. job disabled).
    pub skipped: usize,
    /// Sends that failed or were not made; the rows stay `publishing` until read back.
    pub failed: usize,
}

/// A new W3C `traceparent` (trace id, span id, sampled) for a run.
fn traceparent() -> String {
    format!(
        "00-{:032x}-{:016x}-01",
        rand::random::<u128>() | 1,
        rand::random::<u64>() | 1
    )
}

impl Publisher {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self {
            ctx,
            router: Router::default(),
        }
    }

    /// Publishes due triggers until `stop`; the batch in flight is finished first.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            let batch = self.ctx.wheel.next_due(MAX_BATCH, &stop).await;
            if batch.is_empty() {
                if stop.is_cancelled() {
                    return;
                }
                continue;
            }
            let ids: Vec<i64> = batch.iter().map(|t| t.id.0).collect();
            match self.publish(batch).await {
                Ok(o) if o.failed > 0 => tracing::warn!(
                    ?o,
                    "some triggers could not be published; they will be retried"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "publication batch failed; its triggers stay scheduled")
                }
            }
            self.ctx.wheel.settle(ids);
        }
    }

    /// Publishes one batch of due triggers.
    pub async fn publish(&self, batch: Vec<PendingTrigger>) -> anyhow::Result<PublishOutcome> {
        let mut outcome = PublishOutcome::default();
        // Route, and keep only triggers of shards held right now.
        let mut routed = Vec::with_capacity(batch.len());
        for t in batch {
            let Some(epoch) = self.ctx.leases.epoch(t.shard) else {
                outcome.skipped += 1;
                continue;
            };
            let partitions = self
                .ctx
                .kafka
                .ensure_trigger_topic(&self.ctx.pool, &t.job_type)
                .await?;
            let route = self.router.select(&t, partitions, &self.ctx.registry);
            routed.push((t, route, epoch));
        }
        if routed.is_empty() {
            return Ok(outcome);
        }
        let before = routed.len();
        // 1. Ledger, in one transaction with the check of the shards' leases.
        let mut shard_epochs: Vec<(i32, i64)> = routed
            .iter()
            .map(|(t, _, e)| (t.shard as i32, *e))
            .collect();
        shard_epochs.sort_unstable();
        shard_epochs.dedup();
        let (shards, epochs): (Vec<i32>, Vec<i64>) = shard_epochs.into_iter().unzip();
        let mut tx = self.ctx.pool.begin().await?;
        let valid: std::collections::HashSet<i32> =
            sqlx::query_scalar::<_, i32>(sql!("lease/check"))
                .bind(&self.ctx.admin_id)
                .bind(&shards)
                .bind(&epochs)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .collect();
        routed.retain(|(t, _, _)| valid.contains(&(t.shard as i32)));
        let claimed: Vec<i64> = sqlx::query_scalar(sql!("publish/mark_publishing"))
            .bind(routed.iter().map(|(t, _, _)| t.id.0).collect::<Vec<_>>())
            .bind(
                routed
                    .iter()
                    .map(|(_, r, _)| r.partition)
                    .collect::<Vec<_>>(),
            )
            .bind(
                routed
                    .iter()
                    .map(|(_, r, _)| r.worker.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(routed.iter().map(|(_, _, e)| *e).collect::<Vec<_>>())
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let claimed: std::collections::HashSet<i64> = claimed.into_iter().collect();
        outcome.skipped += before - claimed.len();
        routed.retain(|(t, _, _)| claimed.contains(&t.id.0));
        // 2. Send, only while the lease is valid by our clock: checked right before each
        //    message is handed to the producer, whose delivery timeout is shorter than the margin.
        let Some(valid_until) = self.ctx.leases.valid_until() else {
            return Ok(outcome);
        };
        let topics = self.ctx.kafka.topics();
        let now = Utc::now();
        self.ctx.kafka.renew_producer_if_fatal();
        let producer = self.ctx.kafka.producer();
        let mut sends = Vec::with_capacity(routed.len());
        let mut unsent = 0;
        for (t, route, _) in &routed {
            if std::time::Instant::now() >= valid_until {
                unsent += 1;
                continue;
            }
            let msg = TriggerRecord::Trigger(TriggerMessage {
                trigger_id: t.id,
                job_id: t.job_id,
                job_type: t.job_type.clone(),
                kind: t.kind,
                fire_time: t.fire_time,
                params: t.params.clone(),
                block: t.block,
                timeout_ms: t.timeout_ms,
                attempt: t.attempt,
                shard_index: t.shard_index,
                shard_total: t.shard_total,
                routed_worker: route.worker.clone().map(cadenza_schemas::WorkerId),
                published_at: now,
            });
            let payload = serde_json::to_vec(&msg)?;
            let key = t.job_id.0.to_string();
            let topic = topics.trigger(&t.job_type);
            let tp = traceparent();
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: HEADER_RECORD,
                    value: Some("trigger"),
                })
                .insert(Header {
                    key: HEADER_TRACEPARENT,
                    value: Some(&tp),
                });
            let record = FutureRecord::to(&topic)
                .partition(route.partition)
                .key(&key)
                .payload(&payload)
                .headers(headers);
            match producer.send_result(record) {
                Ok(delivery) => sends.push((t, delivery)),
                Err((e, _)) => {
                    tracing::warn!(trigger_id = t.id.0, error = %e, "could not enqueue");
                    unsent += 1;
                }
            }
        }
        if unsent > 0 {
            tracing::warn!(count = unsent, "not sent (lease ran out or producer refused); the rows stay publishing and are resolved by read-back");
        }
        // 3. Record.
        let (mut ok_id, mut ok_part, mut ok_off) = (vec![], vec![], vec![]);
        let mut failed = unsent;
        let mut max_lateness = 0;
        for (t, delivery) in sends {
            match delivery.await {
                Ok(Ok(d)) => {
                    ok_id.push(t.id.0);
                    ok_part.push(d.partition);
                    ok_off.push(d.offset);
                    max_lateness = max_lateness.max((now - t.fire_time).num_milliseconds());
                }
                Ok(Err((e, _))) => {
                    tracing::warn!(trigger_id = t.id.0, error = %e, "send failed");
                    failed += 1;
                }
                Err(_) => failed += 1,
            }
        }
        if !ok_id.is_empty() {
            sqlx::query(sql!("publish/mark_published"))
                .bind(&ok_id)
                .bind(&ok_part)
                .bind(&ok_off)
                .execute(&self.ctx.pool)
                .await?;
        }
        // Failed sends stay `publishing`: a send that timed out may still have landed, so the
        // sweep reads the partition back before sending again.
        outcome.failed = failed;
        tracing::debug!(
            published = ok_id.len(),
            max_lateness_ms = max_lateness,
            "published"
        );
        outcome.published = ok_id.len();
        Ok(outcome)
    }
}
