//! Publication: ledger before send, send, record after delivery.
//!
//! 1. Due triggers are marked `publishing` with their partition, in one transaction that checks
//!    this admin still holds each trigger's shard at the epoch it knows.
//! 2. They are produced (idempotent producer, `acks=all`) only while the lease is valid by this
//!    admin's clock; the producer's delivery timeout is shorter than the lease margin, so nothing
//!    lands after the lease could have passed to another admin.
//! 3. Delivered ones are recorded `published` with partition and offset, in one statement.
//!
//! Step 3 of a batch overlaps steps 1–2 of the next ones (up to [`MAX_BATCHES_IN_FLIGHT`]), so
//! a trigger due while a batch waits for its acknowledgements is not delayed by it.
use std::sync::Arc;

use cadenza_schemas::{JobType, TriggerMessage, TriggerRecord, HEADER_RECORD, HEADER_TRACEPARENT};
use cadenza_worker::telemetry;
use chrono::Utc;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use tokio_util::sync::CancellationToken;

use super::{PendingTrigger, SchedulerContext};
use crate::guard;
use crate::metrics::{metrics, JobTypeLabel};
use crate::route::Router;

/// Most triggers in one publication batch.
pub const MAX_BATCH: usize = 5_000;
/// Batches sent and not yet recorded.
pub const MAX_BATCHES_IN_FLIGHT: usize = 4;

/// A batch handed to the producer, waiting for its acknowledgements.
pub struct InFlight {
    sends: Vec<Sent>,
    sent_at: chrono::DateTime<Utc>,
    outcome: PublishOutcome,
}

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

/// One trigger handed to the producer: what recording its acknowledgement needs, and its
/// `publish` span (open until the broker answers; `Span::none()` unless spans are exported).
struct Sent {
    id: i64,
    fire_time: chrono::DateTime<Utc>,
    job_type: JobType,
    delivery: DeliveryFuture,
    span: tracing::Span,
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

    /// Publishes due triggers until `stop`; batches in flight are recorded first.
    pub async fn run(self, stop: CancellationToken) {
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            while in_flight.len() >= MAX_BATCHES_IN_FLIGHT {
                in_flight.join_next().await;
            }
            while in_flight.try_join_next().is_some() {}
            let batch = self
                .ctx
                .wheel
                .next_due(MAX_BATCH, &self.ctx.clock, &stop)
                .await;
            if batch.is_empty() {
                if stop.is_cancelled() {
                    break;
                }
                continue;
            }
            let ids: Vec<i64> = batch.iter().map(|t| t.id.0).collect();
            match guard::round("publication", self.send(batch)).await {
                Ok(sent) => {
                    let ctx = self.ctx.clone();
                    in_flight.spawn(async move {
                        match guard::round("recording a publication", record(&ctx, sent)).await {
                            Ok(o) if o.failed > 0 => tracing::warn!(
                                ?o,
                                "some triggers could not be published; they are read back and retried"
                            ),
                            Ok(_) => {}
                            Err(e) => tracing::error!(error = %e, "recording a publication batch failed; it is read back"),
                        }
                        ctx.wheel.settle(ids);
                    });
                }
                Err(e) => {
                    tracing::error!(error = %e, "publication batch failed; its triggers stay scheduled");
                    self.ctx.wheel.settle(ids);
                }
            }
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// Publishes one batch of due triggers and records the outcome.
    pub async fn publish(&self, batch: Vec<PendingTrigger>) -> anyhow::Result<PublishOutcome> {
        let sent = self.send(batch).await?;
        record(&self.ctx, sent).await
    }

    /// Steps 1 and 2 for one batch: ledger, then hand the messages to the producer.
    pub async fn send(&self, batch: Vec<PendingTrigger>) -> anyhow::Result<InFlight> {
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
            return Ok(InFlight {
                sends: Vec::new(),
                sent_at: self.ctx.clock.now(),
                outcome,
            });
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
                    .map(|(_, r, _)| r.worker.as_ref().map(|w| w.0.clone()))
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
            outcome.failed = routed.len();
            return Ok(InFlight {
                sends: Vec::new(),
                sent_at: self.ctx.clock.now(),
                outcome,
            });
        };
        let topics = self.ctx.kafka.topics();
        let now = self.ctx.clock.now();
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
                routed_worker: route.worker.clone(),
                route: Some(t.route),
                published_at: now,
            });
            let payload = serde_json::to_vec(&msg)?;
            let key = t.job_id.0.to_string();
            let topic = topics.trigger(&t.job_type);
            // The run's trace starts here: its id travels in the header to the worker and back.
            let span = if telemetry::exporting() {
                tracing::info_span!(parent: None, "publish", otel.kind = "producer",
                    job_id = t.job_id.0, trigger_id = t.id.0, job_type = t.job_type.as_str(),
                    attempt = t.attempt, partition = route.partition,
                    offset = tracing::field::Empty, otel.status_code = tracing::field::Empty)
            } else {
                tracing::Span::none()
            };
            let tp = telemetry::traceparent(&span).unwrap_or_else(traceparent);
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
                Ok(delivery) => sends.push(Sent {
                    id: t.id.0,
                    fire_time: t.fire_time,
                    job_type: t.job_type.clone(),
                    delivery,
                    span,
                }),
                Err((e, _)) => {
                    tracing::warn!(trigger_id = t.id.0, error = %e, "could not enqueue");
                    unsent += 1;
                }
            }
        }
        if unsent > 0 {
            tracing::warn!(count = unsent, "not sent (lease ran out or producer refused); the rows stay publishing and are resolved by read-back");
        }
        outcome.failed = unsent;
        Ok(InFlight {
            sends,
            sent_at: now,
            outcome,
        })
    }
}

/// Step 3: waits for the acknowledgements of a batch and records the delivered triggers
/// `published`. Failed sends stay `publishing`: one that timed out may still have landed, so the
/// sweep reads the partition back before sending again.
pub async fn record(ctx: &SchedulerContext, batch: InFlight) -> anyhow::Result<PublishOutcome> {
    let InFlight {
        sends,
        sent_at,
        mut outcome,
    } = batch;
    let (mut ok_id, mut ok_part, mut ok_off) = (vec![], vec![], vec![]);
    let mut lateness = Vec::with_capacity(sends.len());
    let mut types = Vec::with_capacity(sends.len());
    for Sent {
        id,
        fire_time,
        job_type,
        delivery,
        span,
    } in sends
    {
        match delivery.await {
            Ok(Ok(d)) => {
                span.record("offset", d.offset);
                ok_id.push(id);
                ok_part.push(d.partition);
                ok_off.push(d.offset);
                lateness.push((sent_at - fire_time).num_milliseconds());
                types.push(job_type);
            }
            Ok(Err((e, _))) => {
                span.record("otel.status_code", "ERROR");
                ctx.kafka.note_send_error(&e);
                tracing::warn!(trigger_id = id, error = %e, "send failed");
                outcome.failed += 1;
            }
            Err(_) => outcome.failed += 1,
        }
    }
    if !ok_id.is_empty() {
        sqlx::query(sql!("publish/mark_published"))
            .bind(&ok_id)
            .bind(&ok_part)
            .bind(&ok_off)
            .execute(&ctx.pool)
            .await?;
    }
    outcome.published = ok_id.len();
    tracing::debug!(
        published = outcome.published,
        max_lateness_ms = lateness.iter().max().copied().unwrap_or(0),
        "published"
    );
    ctx.lateness
        .record(ctx.clock.now().timestamp(), lateness.iter().copied());
    let m = metrics();
    for (ms, job_type) in lateness.iter().zip(&types) {
        m.fire_lateness.observe(*ms as f64 / 1000.0);
        m.published
            .get_or_create(&JobTypeLabel {
                job_type: job_type.as_str().to_owned(),
            })
            .inc();
    }
    Ok(outcome)
}
