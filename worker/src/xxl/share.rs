//! Several bridge workers, one picture: what executors tell one bridge is shared with the
//! others through `<prefix>.xxl-bridge`.
//!
//! Executors know one admin address, but the runs of a job type are spread over every worker
//! of the group. So each bridge publishes the beats and deregistrations it receives, and the
//! callbacks of runs it does not know (another bridge sent them), and reads everyone's records:
//! a beat registers the address with every bridge, and a callback reaches the bridge whose run
//! waits for it. A bridge that starts reads the topic from its beginning (one partition; beats
//! older than the registration expiry are skipped), so it knows the live executors at once.
//! Records are JSON ([`SharedRecord`]); one that cannot be read goes to the DLQ.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::TopicKind;
use chrono::Utc;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admin_side::AdminSide;
use super::protocol::CallbackParam;
use crate::config::{admin_client_config, consumer_client_config, WorkerConfig};
use crate::dlq::{dlq_message, DlqProducer, Origin};
use crate::producer::{self, produce, Record};

/// Records waiting to be shared at most; beyond, new ones are dropped with a warning.
pub const QUEUE: usize = 4096;

/// What one bridge tells the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SharedEvent {
    /// An executor beat (`/api/registry`).
    Beat {
        /// Its app name.
        app: String,
        /// Its address.
        address: String,
    },
    /// An executor deregistered (`/api/registryRemove`).
    Remove {
        /// Its app name.
        app: String,
        /// Its address.
        address: String,
    },
    /// A result for a run the receiving bridge does not know.
    Callback {
        /// The executor's callback item.
        item: CallbackParam,
    },
}

/// The header of a shared record's signature ([`AdminSide::sign`]).
pub const HEADER_SIGNATURE: &str = "cadenza-signature";

/// A record of `<prefix>.xxl-bridge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedRecord {
    /// The worker id of the bridge that received it.
    pub from: String,
    /// When it received it (milliseconds since the epoch).
    pub at_ms: i64,
    /// What it received.
    #[serde(flatten)]
    pub event: SharedEvent,
}

/// Shares `side` with the other bridge workers of `config`'s deployment until `stop`: creates
/// the topic if needed, then publishes what `side` hands over and applies what others publish.
pub async fn run(
    side: Arc<AdminSide>,
    config: WorkerConfig,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let topic = config.topics.xxl_bridge();
    create_topic(&config, &topic).await;
    let producer = producer::create(&config)?;
    let dlq = DlqProducer::new(producer.clone(), config.topics.dlq());
    // Per process, not the worker id: a restarted bridge with a fixed id reads its previous
    // life's records as anyone else's.
    let me = format!("{}/{}", config.worker_id.0, uuid::Uuid::new_v4().simple());
    let mut consumer_config = consumer_client_config(&config);
    consumer_config
        .set("group.id", format!("{}.xxl-bridge.{me}", config.group))
        .set("client.id", format!("{}.xxl-bridge", config.worker_id.0));
    let consumer: StreamConsumer = consumer_config.create()?;
    // Every partition, from the beginning (records are few; old beats are skipped by age). A
    // topic just created takes a moment to show its partitions.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let partitions: Vec<i32> = loop {
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .map_err(|e| anyhow::anyhow!("cannot read the metadata of {topic}: {e}"))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if !partitions.is_empty() || tokio::time::Instant::now() >= deadline {
            break partitions;
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    };
    if partitions.is_empty() {
        anyhow::bail!(
            "topic {topic} does not exist and could not be created: bridge workers cannot share \
             executors' beats and results (create it with one partition)"
        );
    }
    let mut assignment = TopicPartitionList::new();
    for p in &partitions {
        assignment.add_partition_offset(&topic, *p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let (tx, mut rx) = mpsc::channel(QUEUE);
    side.share_with(tx);
    // One sender, in order: a deregistration never overtakes the beat before it.
    let (out_tx, mut out_rx) = mpsc::channel::<Record>(QUEUE);
    let sender = tokio::spawn(async move {
        while let Some(record) = out_rx.recv().await {
            if let Err(e) = produce(&producer, &record).await {
                tracing::warn!(error = %e, "the bridge could not share a record with the other workers");
            }
        }
    });
    tracing::info!(%topic, "XXL-JOB bridge shares executors' beats and results with other workers");
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            event = rx.recv() => {
                let Some(event) = event else { break };
                let key = match &event {
                    SharedEvent::Beat { app, .. } | SharedEvent::Remove { app, .. } => app.clone(),
                    SharedEvent::Callback { item } => item.log_id.to_string(),
                };
                let record = SharedRecord { from: me.clone(), at_ms: Utc::now().timestamp_millis(), event };
                let payload = match serde_json::to_vec(&record) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot serialize a shared bridge record");
                        continue;
                    }
                };
                // Signed with the access token: a record that did not come from a bridge of the
                // deployment (anything else that can write to the topic) is not applied.
                let headers = side.sign(&payload).map(|sig| vec![(HEADER_SIGNATURE, sig)]).unwrap_or_default();
                let record = Record { topic: topic.clone(), key, payload: Some(payload), headers };
                if out_tx.try_send(record).is_err() {
                    tracing::warn!("the bridge's queue to the other workers is full: a record was dropped");
                }
            }
            msg = consumer.recv() => {
                let msg = match msg {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, %topic, "reading the shared bridge topic failed");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                let payload = msg.payload();
                let signature = msg
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == HEADER_SIGNATURE).and_then(|h| h.value));
                let parsed = match payload {
                    Some(p) if !side.signed(p, signature) => Some(Err(None)),
                    Some(p) => Some(serde_json::from_slice::<SharedRecord>(p).map_err(Some)),
                    None => None,
                };
                match parsed {
                    Some(Ok(record)) if record.from == me => {}
                    Some(Ok(record)) => {
                        let age_ms = Utc::now().timestamp_millis().saturating_sub(record.at_ms);
                        let age = Duration::from_millis(u64::try_from(age_ms).unwrap_or(0));
                        side.apply_shared(record.event, age);
                    }
                    bad => {
                        let reason = match bad {
                            Some(Err(Some(e))) => format!("not a shared bridge record: {e}"),
                            Some(Err(None)) => format!(
                                "a shared bridge record without a valid {HEADER_SIGNATURE} header: \
                                 not from a bridge with this deployment's CADENZA_XXL_ACCESS_TOKEN"
                            ),
                            _ => "empty shared bridge record".to_owned(),
                        };
                        let origin = Origin { topic: topic.clone(), partition: msg.partition(), offset: msg.offset() };
                        tracing::warn!(%reason, offset = msg.offset(), "shared bridge record sent to the DLQ");
                        let record = dlq_message(&origin, reason, payload, &me);
                        if let Err(e) = dlq.send(&record).await {
                            tracing::warn!(error = %e, "the DLQ did not take a shared bridge record");
                        }
                    }
                }
            }
        }
    }
    drop(out_tx);
    let _ = sender.await;
    Ok(())
}

async fn create_topic(config: &WorkerConfig, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = match admin_client_config(config).create() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the Kafka admin client");
            return;
        }
    };
    let policy = config.topic_policy();
    let configs = policy.configs(TopicKind::XxlBridge);
    let new = crate::topics::new_topic(topic, 1, &policy, &configs);
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    match admin.create_topics([&new], &opts).await {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((t, code)) => {
                        tracing::warn!(topic = %t, %code, "cannot create the shared bridge topic")
                    }
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, %topic, "cannot create the shared bridge topic"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_flat_json() {
        let r = SharedRecord {
            from: "w1".into(),
            at_ms: 5,
            event: SharedEvent::Beat {
                app: "a".into(),
                address: "http://e:9999".into(),
            },
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"from": "w1", "at_ms": 5, "event": "beat", "app": "a", "address": "http://e:9999"})
        );
        assert_eq!(serde_json::from_value::<SharedRecord>(v).unwrap(), r);
    }
}
