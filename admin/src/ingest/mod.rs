//! Ingest of what workers publish: run results (`<prefix>.results`) and heartbeats
//! (`<prefix>.workers`). Both are idempotent: replaying a topic changes nothing.

pub mod heartbeats;
pub mod results;

use std::time::Duration;

use cadenza_schemas::DlqMessage;
use chrono::Utc;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::FutureRecord;
use tokio_util::sync::CancellationToken;

use crate::kafka::KafkaClients;

/// Largest part of a bad message kept in the DLQ.
const DLQ_PAYLOAD_LIMIT: usize = 64 * 1024;

/// Receives up to `max` messages: waits for the first (or `shutdown`), then takes what arrives
/// within `linger`.
pub(crate) async fn recv_batch<'c>(
    consumer: &'c StreamConsumer,
    max: usize,
    linger: Duration,
    shutdown: &CancellationToken,
) -> Vec<BorrowedMessage<'c>> {
    let mut batch = Vec::new();
    let first = tokio::select! {
        _ = shutdown.cancelled() => return batch,
        m = consumer.recv() => m,
    };
    match first {
        Ok(m) => batch.push(m),
        Err(e) => {
            tracing::warn!(error = %e, "consumer error");
            tokio::time::sleep(Duration::from_millis(200)).await;
            return batch;
        }
    }
    let deadline = tokio::time::Instant::now() + linger;
    while batch.len() < max {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => batch.push(m),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "consumer error");
                break;
            }
            Err(_) => break,
        }
    }
    batch
}

/// Sends a message that could not be used to the DLQ, with the reason.
pub(crate) async fn to_dlq(
    kafka: &KafkaClients,
    reporter: &str,
    m: &BorrowedMessage<'_>,
    reason: String,
) {
    let raw = m.payload().unwrap_or_default();
    let cut = &raw[..raw.len().min(DLQ_PAYLOAD_LIMIT)];
    let msg = DlqMessage {
        source_topic: m.topic().to_owned(),
        partition: m.partition(),
        offset: m.offset(),
        reason,
        payload: String::from_utf8_lossy(cut).into_owned(),
        reporter: reporter.to_owned(),
        at: Utc::now(),
    };
    tracing::warn!(topic = m.topic(), partition = m.partition(), offset = m.offset(), reason = %msg.reason, "message sent to the DLQ");
    let Ok(payload) = serde_json::to_vec(&msg) else {
        return;
    };
    let topic = kafka.topics().dlq();
    let record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).payload(&payload);
    kafka.renew_producer_if_fatal();
    match kafka.producer().send(record, Duration::from_secs(5)).await {
        Ok(_) => {
            crate::metrics::metrics().dlq_records.inc();
        }
        Err((e, _)) => {
            kafka.note_send_error(&e);
            tracing::error!(error = %e, "could not write to the DLQ");
        }
    }
}
