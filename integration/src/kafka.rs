//! Kafka helpers for tests: create topics, produce, and read a whole topic back.
//!
//! Written for Tansu's quirks: consumers use `fetch.wait.max.ms=10`, and reading
//! a topic does not rely on high watermarks or partition EOF (both are wrong on Tansu); it
//! stops when no record has arrived for an idle period.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;

use crate::util::random_hex;

/// One record read back from a topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    /// Headers in order; a header may have no value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record timestamp in milliseconds since the epoch, when it has one.
    pub timestamp_ms: Option<i64>,
}

impl TopicRecord {
    /// The key as UTF-8, if it is.
    pub fn key_str(&self) -> Option<&str> {
        self.key
            .as_deref()
            .and_then(|k| std::str::from_utf8(k).ok())
    }

    /// The payload as UTF-8, if it is.
    pub fn payload_str(&self) -> Option<&str> {
        self.payload
            .as_deref()
            .and_then(|p| std::str::from_utf8(p).ok())
    }

    /// The payload parsed as JSON.
    pub fn payload_json(&self) -> Result<Value> {
        let payload = self.payload.as_deref().context("record without payload")?;
        serde_json::from_slice(payload).context("record payload is not JSON")
    }

    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// The value of the first header called `name`, as UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// A `ClientConfig` with `bootstrap.servers` set.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

/// Creates `topic` with `partitions` partitions (replication 1). An existing topic is an error.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .context("creating a Kafka admin client")?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(&[new_topic], &options)
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    for result in results {
        result.map_err(|(name, code)| anyhow!("creating topic {name}: {code}"))?;
    }
    Ok(())
}

/// Produces one record (to `partition`, or by key when `None`) and returns (partition, offset).
pub async fn produce(
    bootstrap: &str,
    topic: &str,
    partition: Option<i32>,
    key: Option<&[u8]>,
    payload: &[u8],
) -> Result<(i32, i64)> {
    let producer: FutureProducer = client_config(bootstrap)
        .set("message.timeout.ms", "10000")
        .create()
        .context("creating a Kafka producer")?;
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).payload(payload);
    if let Some(key) = key {
        record = record.key(key);
    }
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    let delivery = producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| anyhow!("producing to {topic}: {e}"))?;
    Ok((delivery.partition, delivery.offset))
}

fn throwaway_consumer(bootstrap: &str) -> Result<BaseConsumer> {
    client_config(bootstrap)
        .set("group.id", format!("cadenza-it-read-{}", random_hex(8)))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("allow.auto.create.topics", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating a Kafka consumer")
}

/// The partition count of `topic`, or `None` when the broker does not know it.
pub async fn topic_partition_count(bootstrap: &str, topic: &str) -> Result<Option<i32>> {
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = throwaway_consumer(&bootstrap)?;
        partition_count(&consumer, &topic)
    })
    .await?
}

fn partition_count(consumer: &BaseConsumer, topic: &str) -> Result<Option<i32>> {
    let metadata = match consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) {
        Ok(m) => m,
        Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)) => {
            return Ok(None)
        }
        Err(e) => return Err(e).with_context(|| format!("fetching metadata of {topic}")),
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok(None);
    }
    Ok(Some(i32::try_from(t.partitions().len())?))
}

/// Every topic the broker knows, sorted.
pub async fn list_topics(bootstrap: &str) -> Result<Vec<String>> {
    let bootstrap = bootstrap.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = throwaway_consumer(&bootstrap)?;
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .context("fetching metadata")?;
        let mut names: Vec<String> = metadata
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        names.sort();
        Ok(names)
    })
    .await?
}

/// Reads `topic` from the beginning of every partition until no record has arrived for 1 s
/// (or `timeout` has passed: then it returns what it read). Records are sorted by
/// (partition, offset). A topic the broker does not know reads as empty.
pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    read_topic_idle(bootstrap, topic, timeout, Duration::from_secs(1)).await
}

/// [`read_topic`] with another idle period.
pub async fn read_topic_idle(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
    idle: Duration,
) -> Result<Vec<TopicRecord>> {
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || read_blocking(&bootstrap, &topic, timeout, idle)).await?
}

fn read_blocking(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
    idle: Duration,
) -> Result<Vec<TopicRecord>> {
    let started = Instant::now();
    let consumer = throwaway_consumer(bootstrap)?;
    let Some(partitions) = partition_count(&consumer, topic)? else {
        return Ok(Vec::new());
    };
    // Explicit assignment: no group join (and no rebalance delay), nothing committed.
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;

    let mut records = Vec::new();
    let mut last_progress = Instant::now();
    let mut errors = 0u32;
    while started.elapsed() < timeout {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                last_progress = Instant::now();
                records.push(TopicRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().map(<[u8]>::to_vec),
                    headers: m
                        .headers()
                        .map(|hs| {
                            hs.iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                    timestamp_ms: m.timestamp().to_millis(),
                });
            }
            Some(Err(e)) => {
                errors += 1;
                if errors > 50 {
                    bail!("reading {topic}: too many consumer errors, last: {e}");
                }
            }
            None => {
                if last_progress.elapsed() >= idle {
                    break;
                }
            }
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}
