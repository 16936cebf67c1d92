//! The worker's one Kafka producer (results, heartbeats, DLQ records): its client context and a
//! `produce` that awaits the delivery report.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientContext;

use crate::config::{producer_client_config, WorkerConfig};
use crate::Throttle;

/// The producer type shared by the result, heartbeat and DLQ publishers (cheap to clone).
pub(crate) type Producer = FutureProducer<ProducerLog>;

/// Routes librdkafka's producer errors to `tracing`, each kind at most once a minute.
pub(crate) struct ProducerLog {
    errors: Throttle,
}

impl ClientContext for ProducerLog {
    fn error(&self, error: KafkaError, reason: &str) {
        if self.errors.allow(&crate::error_key(&error, reason)) {
            tracing::warn!(%error, reason, "kafka producer error");
        }
    }
}

/// Create the producer from the typed config.
pub(crate) fn create(config: &WorkerConfig) -> Result<Producer, KafkaError> {
    producer_client_config(config).create_with_context(ProducerLog {
        errors: Throttle::new(Duration::from_secs(60)),
    })
}

/// One record to produce. `payload: None` is a tombstone.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub topic: String,
    pub key: String,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(&'static str, String)>,
}

/// How long `produce` waits for room in librdkafka's queue before failing.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

/// Produce `record` and wait for its delivery report; returns its partition and offset.
pub(crate) async fn produce(
    producer: &Producer,
    record: &Record,
) -> Result<(i32, i64), KafkaError> {
    let mut fr = FutureRecord::<str, [u8]>::to(&record.topic).key(record.key.as_str());
    if let Some(p) = &record.payload {
        fr = fr.payload(p.as_slice());
    }
    if !record.headers.is_empty() {
        let mut h = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            h = h.insert(Header {
                key,
                value: Some(value.as_str()),
            });
        }
        fr = fr.headers(h);
    }
    producer
        .send(fr, Timeout::After(QUEUE_TIMEOUT))
        .await
        .map(|d| (d.partition, d.offset))
        .map_err(|(e, _)| e)
}
