//! Kafka helpers for tests: create topics, produce, and read a whole topic back.
//!
//! Written for Tansu's quirks: consumers use `fetch.wait.max.ms=10`, and reading a topic does
//! not rely on high watermarks or partition EOF (both are wrong on Tansu). A test that counts
//! what a topic holds reads it with [`read_topic_to_end`]: it writes an end marker to every
//! partition and reads each partition up to its marker, or fails saying which partition did not
//! get there. [`read_topic`] only reads until the records stop coming for a moment: enough to
//! look at what a topic holds, never to conclude that something is missing from it.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cadenza_schemas::{FenceMessage, TriggerRecord, HEADER_RECORD};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
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

    /// Whether this is an end marker written by [`EndMark::write`] (of any read).
    pub fn is_end_marker(&self) -> bool {
        self.header(END_MARKER_HEADER).is_some()
    }

    fn from_message(m: &BorrowedMessage<'_>) -> Self {
        TopicRecord {
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
        }
    }
}

/// Header carried by an end marker; its value is the marker's nonce.
pub const END_MARKER_HEADER: &str = "cadenza-end-marker";
/// Key of an end marker.
const END_MARKER_KEY: &[u8] = b"cadenza-end-marker";
/// `admin_id` of the fence record an end marker carries.
const END_MARKER_WRITER: &str = "cadenza-integration end marker";

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

/// Deletes every topic whose name starts with `prefix`, blocking the thread (for `Drop`, inside
/// or outside a runtime): what a test leaves on the suite's shared broker. Failures are printed,
/// not returned: a broker that cannot delete only keeps a little more.
pub(crate) fn delete_test_topics(bootstrap: &str, prefix: &str) {
    let (bootstrap, prefix) = (bootstrap.to_owned(), prefix.to_owned());
    let work = std::thread::spawn(move || -> Result<()> {
        let consumer = throwaway_consumer(&bootstrap)?;
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .context("fetching metadata")?;
        let topics: Vec<String> = metadata
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|t| t.starts_with(&prefix))
            .collect();
        drop(consumer);
        let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap)
            .create()
            .context("creating a Kafka admin client")?;
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        if !topics.is_empty() {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            for result in futures::executor::block_on(admin.delete_topics(&names, &options))? {
                result.map_err(|(name, code)| anyhow!("deleting topic {name}: {code}"))?;
            }
        }
        Ok(())
    });
    match work.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("[cadenza-integration] cleaning the shared broker: {e:#}"),
        Err(_) => eprintln!("[cadenza-integration] cleaning the shared broker panicked"),
    }
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
        // What a worker reads: records of aborted transactions are not there.
        .set("isolation.level", "read_committed")
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
///
/// A broker that answers no fetch for a second (a busy machine, a long partition) ends the read
/// early, so this is no way to count what a topic holds: use [`read_topic_to_end`] for that.
pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || read_idle_blocking(&bootstrap, &topic, timeout)).await?
}

/// A consumer assigned every partition of `topic` from the beginning (no group join, nothing
/// committed), with the partition count; `None` when the broker does not know the topic.
fn assigned_consumer(bootstrap: &str, topic: &str) -> Result<Option<(BaseConsumer, i32)>> {
    let consumer = throwaway_consumer(bootstrap)?;
    let Some(partitions) = partition_count(&consumer, topic)? else {
        return Ok(None);
    };
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    Ok(Some((consumer, partitions)))
}

fn read_idle_blocking(bootstrap: &str, topic: &str, timeout: Duration) -> Result<Vec<TopicRecord>> {
    const IDLE: Duration = Duration::from_secs(1);
    let started = Instant::now();
    let Some((consumer, _)) = assigned_consumer(bootstrap, topic)? else {
        return Ok(Vec::new());
    };
    let mut records = Vec::new();
    let mut last_progress = Instant::now();
    let mut errors = 0u32;
    while started.elapsed() < timeout {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                last_progress = Instant::now();
                records.push(TopicRecord::from_message(&m));
            }
            Some(Err(e)) => {
                errors += 1;
                if errors > 50 {
                    bail!("reading {topic}: too many consumer errors, last: {e}");
                }
            }
            None => {
                if last_progress.elapsed() >= IDLE {
                    break;
                }
            }
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

/// The end of a topic, as a marker record its writer puts on every partition once nothing else
/// writes to the topic any more: a reader that reaches a partition's marker has read everything
/// that partition held before it. The marker is a fence record (header `cadenza-record: fence`,
/// a fence body), which every consumer of a trigger topic skips; its own header
/// [`END_MARKER_HEADER`] carries the nonce that tells one read's markers from another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndMark {
    nonce: String,
}

impl Default for EndMark {
    fn default() -> Self {
        Self::new()
    }
}

impl EndMark {
    /// A mark with a fresh nonce; nothing is written yet.
    pub fn new() -> Self {
        Self {
            nonce: random_hex(16),
        }
    }

    /// The nonce its markers carry.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// Writes the marker to every partition of `topic`; returns the offset of each, by
    /// partition. Write it only once every writer of the topic has stopped: a record produced
    /// after the marker is past the end. A topic the broker does not know gets no marker.
    pub async fn write(&self, bootstrap: &str, topic: &str) -> Result<Vec<i64>> {
        let Some(partitions) = topic_partition_count(bootstrap, topic).await? else {
            return Ok(Vec::new());
        };
        let payload = serde_json::to_vec(&TriggerRecord::Fence(FenceMessage {
            admin_id: END_MARKER_WRITER.to_owned(),
            shard: 0,
            epoch: 0,
            nonce: self.nonce.clone(),
            written_at: chrono::Utc::now(),
        }))?;
        let producer: FutureProducer = client_config(bootstrap)
            .set("message.timeout.ms", "10000")
            .create()
            .context("creating a Kafka producer")?;
        let mut offsets = Vec::new();
        for partition in 0..partitions {
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: HEADER_RECORD,
                    value: Some("fence"),
                })
                .insert(Header {
                    key: END_MARKER_HEADER,
                    value: Some(self.nonce.as_str()),
                });
            let record = FutureRecord::<[u8], [u8]>::to(topic)
                .partition(partition)
                .key(END_MARKER_KEY)
                .headers(headers)
                .payload(&payload);
            let delivery = producer
                .send(record, Duration::from_secs(10))
                .await
                .map_err(|(e, _)| {
                    anyhow!("writing the end marker to {topic} partition {partition}: {e}")
                })?;
            offsets.push(delivery.offset);
        }
        Ok(offsets)
    }
}

/// Reads every partition of `topic` from its beginning up to the marker of `end` (written by
/// [`EndMark::write`], before or while this reads). Returns the records before the markers,
/// sorted by (partition, offset), without any end marker (of this read or an earlier one).
/// Fails, naming each partition that did not get there and how far it got, when a marker has
/// not been read within `timeout`. A topic the broker does not know reads as empty.
pub async fn read_topic_to(
    bootstrap: &str,
    topic: &str,
    end: &EndMark,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    let nonce = end.nonce.clone();
    tokio::task::spawn_blocking(move || {
        read_to_marker_blocking(&bootstrap, &topic, &nonce, timeout)
    })
    .await?
}

/// Writes an end marker to every partition of `topic` and reads the topic up to it
/// ([`EndMark::write`], then [`read_topic_to`]): the way to count what a topic holds. Call it
/// once nothing writes to the topic any more; while a consumer of the topic that does not skip
/// fence records still runs, it sees the markers too.
pub async fn read_topic_to_end(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let end = EndMark::new();
    let offsets = end.write(bootstrap, topic).await?;
    read_topic_to(bootstrap, topic, &end, timeout)
        .await
        .with_context(|| {
            format!("the end markers of {topic} are at offsets {offsets:?} (by partition)")
        })
}

fn read_to_marker_blocking(
    bootstrap: &str,
    topic: &str,
    nonce: &str,
    timeout: Duration,
) -> Result<Vec<TopicRecord>> {
    let started = Instant::now();
    let Some((consumer, partitions)) = assigned_consumer(bootstrap, topic)? else {
        return Ok(Vec::new());
    };
    let partitions = usize::try_from(partitions)?;
    // Per partition: whether its marker was read, the last offset read, records kept.
    let mut reached = vec![false; partitions];
    let mut last_offset: Vec<Option<i64>> = vec![None; partitions];
    let mut kept = vec![0usize; partitions];
    let mut records = Vec::new();
    let mut errors = 0u32;
    while reached.iter().any(|r| !r) {
        if started.elapsed() >= timeout {
            let behind: Vec<String> = (0..partitions)
                .filter(|p| !reached[*p])
                .map(|p| match last_offset[p] {
                    Some(o) => format!(
                        "partition {p} read through offset {o} ({} records)",
                        kept[p]
                    ),
                    None => format!("partition {p} read nothing"),
                })
                .collect();
            bail!(
                "reading {topic} to its end: no end marker within {timeout:?} on {}",
                behind.join(", ")
            );
        }
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                let p = usize::try_from(m.partition())?;
                if p >= partitions {
                    bail!("reading {topic}: a record of partition {p}, which it does not have");
                }
                if reached[p] {
                    continue; // past the end
                }
                last_offset[p] = Some(m.offset());
                let record = TopicRecord::from_message(&m);
                if record.is_end_marker() {
                    reached[p] = record.header(END_MARKER_HEADER) == Some(nonce.as_bytes());
                    continue;
                }
                kept[p] += 1;
                records.push(record);
            }
            Some(Err(e)) => {
                errors += 1;
                if errors > 50 {
                    bail!("reading {topic}: too many consumer errors, last: {e}");
                }
            }
            None => {}
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}
