//! The one place that builds the admin's Kafka clients, and topic management.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use cadenza_schemas::{JobType, TopicKind, TopicPolicy, Topics, TriggerRecord};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::ClientConfig;
use rdkafka::{Offset, TopicPartitionList};
use sqlx::PgPool;

/// Why a Kafka operation of the admin failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The broker did not answer or refused the request.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// Recording a trigger topic in `job_types` failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("creating topic {topic} failed: {code}")]
    CreateTopic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("reading {topic}/{partition} through offset {last} took longer than {timeout:?}")]
    ReadTimedOut {
        topic: String,
        partition: i32,
        last: i64,
        timeout: Duration,
    },
    #[error("topic {0} has no partitions")]
    NoPartitions(String),
    #[error(transparent)]
    TooManyPartitions(#[from] std::num::TryFromIntError),
    /// The blocking task that talked to the broker panicked.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Settings of the admin's Kafka clients.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub brokers: String,
    pub topics: Topics,
    pub trigger_partitions: i32,
    /// Replication, `min.insync.replicas` and retention of the topics the admin creates.
    pub topic_policy: TopicPolicy,
    /// The producer's delivery timeout (shorter than the lease margin).
    pub message_timeout_ms: u64,
    /// The producer's `linger.ms`.
    pub linger_ms: u64,
    /// The ingest consumers' `fetch.wait.max.ms` (a loop may ask for another).
    pub fetch_wait_ms: u64,
}

/// Producer, admin client and the partition counts of trigger topics.
pub struct KafkaClients {
    pub settings: KafkaSettings,
    producer: RwLock<FutureProducer>,
    /// A send failed because the broker fenced this producer: replace it.
    fenced: AtomicBool,
    admin: AdminClient<DefaultClientContext>,
    partitions: Mutex<HashMap<JobType, i32>>,
}

fn base_config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("client.id", "cadenza-admin")
        .set("log_level", "4");
    c
}

/// The idempotent producer for triggers, fences and DLQ records.
fn new_producer(settings: &KafkaSettings) -> Result<FutureProducer, KafkaError> {
    base_config(&settings.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", settings.linger_ms.to_string())
        .set(
            "message.timeout.ms",
            settings.message_timeout_ms.to_string(),
        )
        .set(
            "request.timeout.ms",
            settings.message_timeout_ms.to_string(),
        )
        .create()
}

/// A transactional producer for triggers with `transactional.id` `id`: idempotent, `acks=all`,
/// and a transaction that stays open at most `timeout_ms` (the broker aborts it after that).
pub fn new_transactional_producer(
    settings: &KafkaSettings,
    id: &str,
    timeout_ms: u64,
) -> Result<FutureProducer, KafkaError> {
    base_config(&settings.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", settings.linger_ms.to_string())
        .set("transactional.id", id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("message.timeout.ms", timeout_ms.to_string())
        .create()
}

/// A record read back from a trigger topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub offset: i64,
    /// `None` for a record that is not a trigger record (unreadable); fences are `Some(Fence)`.
    pub record: Option<TriggerRecord>,
}

impl KafkaClients {
    /// Reads `topic`/`partition` from `start` (the beginning when `None`) through offset `last`
    /// (inclusive), with a consumer of its own that joins no group and commits nothing. Fails
    /// when offset `last` is not reached within `timeout` (e.g. it is past the end).
    pub async fn read_partition(
        &self,
        topic: &str,
        partition: i32,
        start: Option<i64>,
        last: i64,
        timeout: Duration,
    ) -> Result<Vec<ReadRecord>, BrokerError> {
        self.scan_partition(topic, partition, start, last, timeout, Vec::push)
            .await
    }

    /// Like [`KafkaClients::read_partition`], but hands each record to `visit` instead of
    /// keeping them all: `visit` folds each record into a state that starts as `S::default()`
    /// (so a long partition costs only what the caller keeps).
    pub async fn scan_partition<S, F>(
        &self,
        topic: &str,
        partition: i32,
        start: Option<i64>,
        last: i64,
        timeout: Duration,
        visit: F,
    ) -> Result<S, BrokerError>
    where
        S: Default + Send + 'static,
        F: FnMut(&mut S, ReadRecord) + Send + 'static,
    {
        let mut visit = visit;
        let mut config = base_config(&self.settings.brokers);
        config
            .set(
                "group.id",
                format!("cadenza-read-{:016x}", rand::random::<u64>()),
            )
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // A start the broker no longer has (log retention) reads from what it still has.
            .set("auto.offset.reset", "earliest")
            // Only what was committed: a trigger of an aborted transaction was never published.
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "10");
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = config.create()?;
            let mut tpl = TopicPartitionList::new();
            let from = start.map(Offset::Offset).unwrap_or(Offset::Beginning);
            tpl.add_partition_offset(&topic, partition, from)?;
            consumer.assign(&tpl)?;
            let deadline = std::time::Instant::now() + timeout;
            let mut state = S::default();
            if start.is_some_and(|s| s > last) {
                return Ok(state);
            }
            loop {
                if std::time::Instant::now() > deadline {
                    return Err(BrokerError::ReadTimedOut {
                        topic,
                        partition,
                        last,
                        timeout,
                    });
                }
                let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
                    continue;
                };
                let msg = msg?;
                if msg.offset() > last {
                    return Ok(state);
                }
                let offset = msg.offset();
                visit(
                    &mut state,
                    ReadRecord {
                        offset,
                        record: msg
                            .payload()
                            .and_then(|p| serde_json::from_slice::<TriggerRecord>(p).ok()),
                    },
                );
                if offset == last {
                    return Ok(state);
                }
            }
        })
        .await?
    }

    /// Sends a cancel record for run `trigger_id` of job `job_id` to `partition` of its job
    /// type's trigger topic, where the worker that runs (or will run) it reads it.
    pub async fn send_cancel(
        &self,
        job_type: &JobType,
        job_id: i64,
        trigger_id: i64,
        partition: i32,
        by: &str,
    ) -> Result<(), KafkaError> {
        let record = TriggerRecord::Cancel(cadenza_schemas::CancelMessage {
            trigger_id: cadenza_schemas::TriggerId(trigger_id),
            job_id: cadenza_schemas::JobId(job_id),
            by: by.to_owned(),
            requested_at: chrono::Utc::now(),
        });
        // Serializing a record of our own types does not fail; if it did, nothing is sent.
        let payload = serde_json::to_vec(&record)
            .map_err(|_| KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord))?;
        let topic = self.topics().trigger(job_type);
        let key = job_id.to_string();
        let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: cadenza_schemas::HEADER_RECORD,
            value: Some("cancel"),
        });
        self.producer()
            .send(
                rdkafka::producer::FutureRecord::to(&topic)
                    .partition(partition)
                    .key(&key)
                    .payload(&payload)
                    .headers(headers),
                rdkafka::util::Timeout::After(Duration::from_secs(10)),
            )
            .await
            .map(drop)
            .map_err(|(e, _)| e)
    }

    /// The producer (a cheap handle).
    pub fn producer(&self) -> FutureProducer {
        self.producer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the producer when it hit a fatal error (an idempotent producer that was fenced,
    /// e.g. after the process was paused past its delivery timeout, refuses every send after).
    /// Returns whether it was replaced.
    pub fn renew_producer_if_fatal(&self) -> bool {
        let fatal = self.producer().client().fatal_error();
        let fenced = self.fenced.swap(false, Ordering::Relaxed);
        let (code, reason) = match fatal {
            Some(f) => f,
            None if fenced => (
                RDKafkaErrorCode::ProducerFenced,
                "a send was refused as from a fenced producer".to_owned(),
            ),
            None => return false,
        };
        match new_producer(&self.settings) {
            Ok(fresh) => {
                tracing::warn!(?code, %reason, "the producer failed fatally; replaced it");
                *self.producer.write().unwrap_or_else(|p| p.into_inner()) = fresh;
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "the producer failed fatally and could not be replaced");
                false
            }
        }
    }

    /// Notes a failed send: an error that means the broker no longer accepts this producer's id
    /// or epoch (which librdkafka does not always raise as fatal) gets the producer replaced
    /// before the next send.
    pub fn note_send_error(&self, e: &KafkaError) {
        if matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
                    | RDKafkaErrorCode::UnknownProducerId
                    | RDKafkaErrorCode::InvalidProducerIdMapping
            )
        ) {
            self.fenced.store(true, Ordering::Relaxed);
        }
    }

    pub fn new(settings: KafkaSettings) -> Result<Self, KafkaError> {
        let producer = new_producer(&settings)?;
        let admin: AdminClient<DefaultClientContext> = base_config(&settings.brokers).create()?;
        Ok(Self {
            settings,
            producer: RwLock::new(producer),
            fenced: AtomicBool::new(false),
            admin,
            partitions: Mutex::new(HashMap::new()),
        })
    }

    /// A consumer for one of the admin's ingest loops.
    pub fn consumer(
        &self,
        group: &str,
        extra: &[(&str, &str)],
    ) -> Result<StreamConsumer, KafkaError> {
        let mut c = base_config(&self.settings.brokers);
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("fetch.wait.max.ms", self.settings.fetch_wait_ms.to_string())
            .set("session.timeout.ms", "10000")
            .set("topic.metadata.refresh.interval.ms", "2000")
            .set("allow.auto.create.topics", "false");
        for (k, v) in extra {
            c.set(*k, *v);
        }
        c.create()
    }

    pub fn topics(&self) -> &Topics {
        &self.settings.topics
    }

    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        kind: TopicKind,
    ) -> Result<bool, BrokerError> {
        let policy = self.settings.topic_policy;
        let configs = policy.configs(kind);
        let topic = cadenza_worker::topics::new_topic(name, partitions, &policy, &configs);
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = self.admin.create_topics([&topic], &opts).await?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(true),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => Ok(false),
            Some(Err((topic, code))) => Err(BrokerError::CreateTopic { topic, code }),
        }
    }

    /// Creates the results, workers (compacted), DLQ and worker progress topics if they do not
    /// exist (workers create the progress topic too when they start first).
    pub async fn ensure_base_topics(&self) -> Result<(), BrokerError> {
        for (name, kind, partitions) in self.base_topics() {
            self.create_topic(&name, partitions, kind).await?;
        }
        Ok(())
    }

    /// The topics every deployment has: name, kind, partitions (the results topic's are
    /// `trigger_partitions`).
    fn base_topics(&self) -> [(String, TopicKind, i32); 4] {
        let t = self.topics();
        [
            (
                t.results(),
                TopicKind::Results,
                self.settings.trigger_partitions,
            ),
            (t.workers(), TopicKind::Workers, 1),
            (t.dlq(), TopicKind::Dlq, 1),
            (t.progress(), TopicKind::Progress, 1),
        ]
    }

    /// Logs a warning for each way the base topics and the trigger topics of `job_types`
    /// differ from the settings the admin creates them with (replication, `min.insync.replicas`,
    /// cleanup policy, retention), and for a broker that forgets consumer offsets before trigger
    /// topics forget triggers.
    pub async fn warn_about_topics(&self, job_types: &[String]) {
        let topics: Vec<(String, TopicKind)> = self
            .base_topics()
            .into_iter()
            .map(|(name, kind, _)| (name, kind))
            .chain(job_types.iter().filter_map(|jt| {
                let jt = JobType::parse(jt).ok()?;
                Some((self.topics().trigger(&jt), TopicKind::Trigger))
            }))
            .collect();
        cadenza_worker::topics::warn_about_topics_with(
            base_config(&self.settings.brokers).create(),
            &self.settings.topic_policy,
            &topics,
        )
        .await;
    }

    /// Makes sure the trigger topic of `job_type` exists and is recorded in `job_types`; returns
    /// its partition count.
    pub async fn ensure_trigger_topic(
        &self,
        pool: &PgPool,
        job_type: &JobType,
    ) -> Result<i32, BrokerError> {
        if let Some(p) = self.cached_partitions(job_type) {
            return Ok(p);
        }
        let known: Option<i32> = sqlx::query_scalar(sql!("jobs/job_type_partitions"))
            .bind(job_type.as_str())
            .fetch_optional(pool)
            .await?;
        let partitions = match known {
            Some(p) => p,
            None => {
                let topic = self.topics().trigger(job_type);
                let created = self
                    .create_topic(&topic, self.settings.trigger_partitions, TopicKind::Trigger)
                    .await?;
                let partitions = if created {
                    self.settings.trigger_partitions
                } else {
                    // Created by a worker serving the type, another admin, or by hand: its
                    // partition count is the one used.
                    self.fetch_partition_count(&topic).await?
                };
                if created {
                    tracing::info!(%topic, partitions, "trigger topic created");
                } else if let Some(warning) = cadenza_worker::topics::partition_mismatch(
                    &topic,
                    "admin",
                    self.settings.trigger_partitions,
                    usize::try_from(partitions).unwrap_or_default(),
                ) {
                    tracing::warn!("{warning}");
                }
                sqlx::query(sql!("jobs/insert_job_type"))
                    .bind(job_type.as_str())
                    .bind(&topic)
                    .bind(partitions)
                    .execute(pool)
                    .await?;
                partitions
            }
        };
        self.remember_partitions(job_type, partitions);
        Ok(partitions)
    }

    fn cached_partitions(&self, job_type: &JobType) -> Option<i32> {
        self.partitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job_type)
            .copied()
    }

    fn remember_partitions(&self, job_type: &JobType, partitions: i32) {
        self.partitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job_type.clone(), partitions);
    }

    /// The partition count of an existing topic. One that another client has just created
    /// (a worker at its start, another admin) may take a moment to show on every broker: asked
    /// again for up to 5 s.
    async fn fetch_partition_count(&self, topic: &str) -> Result<i32, BrokerError> {
        let producer = self.producer();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let md = producer
                    .client()
                    .fetch_metadata(Some(&topic), Duration::from_secs(10))?;
                let n = md
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .map(|t| t.partitions().len())
                    .unwrap_or(0);
                if n > 0 {
                    return Ok(i32::try_from(n)?);
                }
                if std::time::Instant::now() >= deadline {
                    return Err(BrokerError::NoPartitions(topic));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .await?
    }
}
