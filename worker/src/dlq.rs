//! Messages the worker cannot use go to `<prefix>.dlq` with the reason; the worker goes on.

use cadenza_schemas::DlqMessage;
use chrono::Utc;
use rdkafka::error::KafkaError;

use crate::producer::{produce, Producer, Record};

/// At most this many bytes of the original payload are kept in a DLQ record.
pub(crate) const MAX_DLQ_PAYLOAD: usize = 64 * 1024;

/// Where an unusable message came from.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Build the DLQ record body: the payload as lossy UTF-8, cut to [`MAX_DLQ_PAYLOAD`] bytes on a
/// character boundary.
pub(crate) fn dlq_message(
    origin: &Origin,
    reason: String,
    payload: Option<&[u8]>,
    reporter: &str,
) -> DlqMessage {
    let raw = payload.unwrap_or_default();
    let cut = &raw[..raw.len().min(MAX_DLQ_PAYLOAD)];
    let mut payload = String::from_utf8_lossy(cut).into_owned();
    if payload.len() > MAX_DLQ_PAYLOAD {
        // Replacement characters can make the lossy text longer than the bytes it came from.
        let mut end = MAX_DLQ_PAYLOAD;
        while !payload.is_char_boundary(end) {
            end -= 1;
        }
        payload.truncate(end);
    }
    DlqMessage {
        source_topic: origin.topic.clone(),
        partition: origin.partition,
        offset: origin.offset,
        reason,
        payload,
        reporter: reporter.to_owned(),
        at: Utc::now(),
    }
}

/// Why a DLQ record was not delivered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DlqError {
    #[error("cannot serialize the DLQ record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("kafka did not take the DLQ record: {0}")]
    Kafka(#[from] KafkaError),
}

/// Produces DLQ records, keyed `<topic>/<partition>/<offset>` of the original.
#[derive(Clone)]
pub(crate) struct DlqProducer {
    producer: Producer,
    topic: String,
}

impl DlqProducer {
    pub(crate) fn new(producer: Producer, topic: String) -> Self {
        Self { producer, topic }
    }

    /// Produce `msg` and wait for its delivery.
    pub(crate) async fn send(&self, msg: &DlqMessage) -> Result<(), DlqError> {
        let record = Record {
            topic: self.topic.clone(),
            key: format!("{}/{}/{}", msg.source_topic, msg.partition, msg.offset),
            payload: Some(serde_json::to_vec(msg)?),
            headers: Vec::new(),
        };
        produce(&self.producer, &record).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            topic: "c.trigger.x".into(),
            partition: 2,
            offset: 5,
        }
    }

    #[test]
    fn payload_is_lossy_and_bounded() {
        let m = dlq_message(&origin(), "bad".into(), Some(b"ab\xffc"), "w1");
        assert_eq!(m.payload, "ab\u{fffd}c");
        assert_eq!((m.partition, m.offset, m.reporter.as_str()), (2, 5, "w1"));
        let big = vec![0xffu8; MAX_DLQ_PAYLOAD + 10];
        let m = dlq_message(&origin(), "bad".into(), Some(&big), "w1");
        assert!(m.payload.len() <= MAX_DLQ_PAYLOAD);
        let m = dlq_message(&origin(), "empty".into(), None, "w1");
        assert_eq!(m.payload, "");
    }
}
