//! Publishing `started` and `finished` events to `<prefix>.results`, keyed by trigger id.

use std::sync::Arc;

use cadenza_schemas::{ResultEvent, HEADER_TRACEPARENT};
use futures::future::BoxFuture;
use rdkafka::error::KafkaError;

use crate::producer::{produce, Producer, Record};

/// Why a result event was not delivered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    #[error("cannot serialize the result event: {0}")]
    Json(#[from] serde_json::Error),
    #[error("kafka did not take the result event: {0}")]
    Kafka(#[from] KafkaError),
}

/// Where run results go. The Kafka implementation is [`KafkaResults`]; tests collect events.
pub(crate) trait ResultSink: Send + Sync + 'static {
    /// Publish `event`; the future resolves once it is delivered (or definitely not).
    fn publish(
        &self,
        event: ResultEvent,
        traceparent: Option<String>,
    ) -> BoxFuture<'static, Result<(), PublishError>>;
}

/// Results on `<prefix>.results` through the idempotent producer, keyed by trigger id (decimal),
/// so every event of one run lands on one partition in order.
pub(crate) struct KafkaResults {
    producer: Producer,
    topic: String,
}

impl KafkaResults {
    pub(crate) fn new(producer: Producer, topic: String) -> Arc<Self> {
        Arc::new(Self { producer, topic })
    }
}

/// The record of a result event (pure, for tests).
pub(crate) fn result_record(
    topic: &str,
    event: &ResultEvent,
    traceparent: Option<String>,
) -> Result<Record, serde_json::Error> {
    Ok(Record {
        topic: topic.to_owned(),
        key: event.trigger_id().to_string(),
        payload: Some(serde_json::to_vec(event)?),
        headers: traceparent
            .map(|t| vec![(HEADER_TRACEPARENT, t)])
            .unwrap_or_default(),
    })
}

impl ResultSink for KafkaResults {
    fn publish(
        &self,
        event: ResultEvent,
        traceparent: Option<String>,
    ) -> BoxFuture<'static, Result<(), PublishError>> {
        let producer = self.producer.clone();
        let record = result_record(&self.topic, &event, traceparent);
        Box::pin(async move {
            let record = record?;
            produce(&producer, &record).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadenza_schemas::{JobId, RunStarted, TriggerId, WorkerId};
    use chrono::DateTime;

    #[test]
    fn keyed_by_trigger_id_with_traceparent() {
        let ev = ResultEvent::Started(RunStarted {
            trigger_id: TriggerId(42),
            job_id: JobId(7),
            worker_id: WorkerId("w".into()),
            group: "g".into(),
            partition: 1,
            offset: 9,
            attempt: 1,
            started_at: DateTime::UNIX_EPOCH,
            published_at: Some(DateTime::UNIX_EPOCH),
        });
        let r = result_record("p.results", &ev, Some("00-abc-def-01".into())).unwrap();
        assert_eq!((r.topic.as_str(), r.key.as_str()), ("p.results", "42"));
        assert_eq!(
            r.headers,
            vec![(HEADER_TRACEPARENT, "00-abc-def-01".to_owned())]
        );
        let back: ResultEvent = serde_json::from_slice(r.payload.as_deref().unwrap()).unwrap();
        assert_eq!(back, ev);
    }
}
