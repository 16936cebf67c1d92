//! Typed worker configuration, and the one place each rdkafka client is configured.
//!
//! [`WorkerConfig`] holds every knob with a documented default; [`consumer_client_config`] and
//! [`producer_client_config`] turn it into the librdkafka settings. Nothing else in the crate sets
//! Kafka properties.

use std::time::Duration;

use cadenza_schemas::{
    TopicConfig, TopicKind, TopicPolicy, Topics, WorkerId, DEFAULT_TOPIC_PREFIX,
    DEFAULT_TRIGGER_RETENTION_MS,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::topics::new_topic;

/// Default broker list (`CADENZA_BROKERS`).
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// Default consumer group (`CADENZA_GROUP`).
pub const DEFAULT_GROUP: &str = "cadenza-workers";
/// Default number of handlers executing at once across all jobs.
pub const DEFAULT_CAPACITY: u32 = 16;
/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// Default longest wait of a trigger fetch (`CADENZA_FETCH_WAIT_MS`).
pub const DEFAULT_FETCH_WAIT: Duration = Duration::from_millis(100);
/// Longest wait of a trigger fetch that may be set.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(10);
/// Default time a graceful stop waits for running runs.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// Default time a whole graceful stop may take, every step included: below Kubernetes' default
/// grace period (30 s), so that a worker is never SIGKILLed in the middle of its stop.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(25);
/// What a stop keeps, out of its deadline, for the steps after the drain (hand-back, commit,
/// tombstone, leaving the group, flush): the drain ends this long before the deadline at the
/// latest.
pub const STOP_RESERVE: Duration = Duration::from_secs(8);
/// Default bound on the log kept per run (the tail is sent in the `finished` event).
pub const DEFAULT_RUN_LOG_LIMIT: usize = 64 * 1024;
/// Default partitions of a trigger topic this worker creates (`CADENZA_TRIGGER_PARTITIONS`, the
/// admin's default too).
pub const DEFAULT_TRIGGER_PARTITIONS: i32 = 6;
/// Most partitions a trigger topic may be created with (the admin's limit too).
pub const MAX_TRIGGER_PARTITIONS: i32 = 1024;

/// Everything a [`Worker`](crate::Worker) needs besides its handlers.
///
/// Built by [`WorkerBuilder`](crate::WorkerBuilder); every field has a default.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Kafka bootstrap servers, comma separated. Default `127.0.0.1:9092`.
    pub brokers: String,
    /// The consumer group, i.e. the deployment this worker belongs to. Default `cadenza-workers`.
    pub group: String,
    /// Topic names (`<prefix>.trigger.<job_type>`, `<prefix>.results`, …). Default prefix `cadenza`.
    pub topics: Topics,
    /// This process's identity on the wire. Default: `<hostname>-<pid>-<random>`.
    pub worker_id: WorkerId,
    /// Handlers executing at once across all jobs. A run holds its slot only while its handler
    /// executes, not while it waits for its progress marks to be committed or its result to be
    /// delivered (that is bounded by `max_in_flight`). Default 16.
    pub capacity: u32,
    /// Triggers taken from Kafka and not yet finished (running, waiting in a lane, for a commit
    /// round or for capacity, or publishing their result) at which the consumer stops taking
    /// messages; if they do not fall to half within half a second, it pauses its partitions.
    /// A soft bound: it takes messages again at half. Default 1024.
    pub max_in_flight: usize,
    /// How often a heartbeat is published. Default 5 s.
    pub heartbeat_interval: Duration,
    /// How long a graceful stop waits for running runs before handing them back unfinished
    /// (they are redelivered to the partition's next owner). Default 15 s; at most the stop
    /// timeout less [`STOP_RESERVE`].
    pub drain_timeout: Duration,
    /// How long a whole graceful stop may take ([`DEFAULT_STOP_TIMEOUT`]): each step gets what
    /// is left of it, and a step still waiting at the deadline (a broker that is down) is given
    /// up, so the process exits in time.
    pub stop_timeout: Duration,
    /// How long a cancelled handler (timed out, covered, or cancelled by an operator) may take
    /// to return before it is abandoned and its task aborted. Default 5 s.
    pub cancel_grace: Duration,
    /// How often finished offsets are committed (asynchronously). Default 100 ms.
    pub commit_interval: Duration,
    /// How long runs of revoked partitions may take to finish before they are abandoned
    /// unreported (their next owner runs them again). Default 10 s.
    pub revoke_timeout: Duration,
    /// Consumer session timeout: a silent member's partitions move after this. Default 10 s.
    /// With [`GroupProtocol::Consumer`] the brokers set it (`group.consumer.session.timeout.ms`)
    /// and this is not used.
    pub session_timeout: Duration,
    /// The consumer group protocol of the trigger consumer. Default [`GroupProtocol::Classic`].
    pub group_protocol: GroupProtocol,
    /// How long the broker may hold a fetch of triggers (and of the XXL-JOB bridge's records)
    /// when none is waiting (librdkafka's `fetch.wait.max.ms`). Apache Kafka answers a fetch as
    /// soon as a record arrives, so this only sets how often an idle worker asks (brokers that
    /// answer a waiting fetch only at their next look for records, such as Tansu, hold a trigger
    /// up to about half of it). Default 100 ms.
    pub fetch_wait: Duration,
    /// How often topic metadata is refreshed, so that a trigger topic that did not exist when the
    /// worker subscribed (it could not create it) is picked up once the admin creates it.
    /// Default 1 s.
    pub metadata_refresh: Duration,
    /// Producer delivery timeout for result, heartbeat and DLQ records. A result that fails is
    /// retried until it is delivered or the worker stops. Default 30 s.
    pub message_timeout: Duration,
    /// Bytes of log kept per run; older lines are dropped. Default 64 KiB.
    pub run_log_limit: usize,
    /// Partitions of the trigger topics this worker creates: at start it creates the topic of
    /// each job type it serves that does not exist yet, so that it holds partitions of it (and
    /// runs of a new job of that type are routed to it) from its first assignment. An existing
    /// topic keeps its partitions. Use the admins' `CADENZA_TRIGGER_PARTITIONS`. Default 6.
    pub trigger_partitions: i32,
    /// Replication factor of the topics this worker creates when they do not exist yet: the
    /// trigger topics of its job types and `<prefix>.progress`. Default 1; use the cluster's
    /// usual factor (e.g. 3).
    pub replication_factor: i32,
    /// `min.insync.replicas` of the topics this worker creates (and checks). Default: 2 with a
    /// replication factor of 3 or more, else 1.
    pub min_insync_replicas: Option<i32>,
    /// How long trigger topics this worker creates keep triggers (the replay window). Default
    /// 6 days: below Kafka's default `offsets.retention.minutes` (7 days), see `TopicPolicy`.
    pub trigger_retention_ms: i64,
    /// Extra librdkafka properties applied to both clients after the defaults (e.g. SASL/TLS).
    pub kafka_overrides: KafkaOverrides,
    /// Where to serve `GET /metrics` and `GET /healthz` (Prometheus text format). Default: off.
    /// While on, librdkafka reports statistics every 2 s for the consumer lag gauges.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Extra librdkafka properties, in the order they are applied. Their values often are secrets
/// (`sasl.password`, `ssl.key.password`), so `Debug` shows the keys only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaOverrides(pub Vec<(String, String)>);

impl std::ops::Deref for KafkaOverrides {
    type Target = Vec<(String, String)>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KafkaOverrides {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl std::fmt::Debug for KafkaOverrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, _)| (k, format_args!("<redacted>"))))
            .finish()
    }
}

impl WorkerConfig {
    /// Replication, `min.insync.replicas` and trigger retention of the topics it creates.
    pub fn topic_policy(&self) -> TopicPolicy {
        TopicPolicy::new(
            self.replication_factor,
            self.min_insync_replicas,
            self.trigger_retention_ms,
        )
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            brokers: DEFAULT_BROKERS.to_owned(),
            group: DEFAULT_GROUP.to_owned(),
            topics: Topics::new(DEFAULT_TOPIC_PREFIX),
            worker_id: default_worker_id(),
            capacity: DEFAULT_CAPACITY,
            max_in_flight: 1024,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
            cancel_grace: Duration::from_secs(5),
            commit_interval: Duration::from_millis(100),
            revoke_timeout: Duration::from_secs(10),
            session_timeout: Duration::from_secs(10),
            group_protocol: GroupProtocol::Classic,
            fetch_wait: DEFAULT_FETCH_WAIT,
            metadata_refresh: Duration::from_secs(1),
            message_timeout: Duration::from_secs(30),
            run_log_limit: DEFAULT_RUN_LOG_LIMIT,
            trigger_partitions: DEFAULT_TRIGGER_PARTITIONS,
            replication_factor: 1,
            min_insync_replicas: None,
            trigger_retention_ms: DEFAULT_TRIGGER_RETENTION_MS,
            kafka_overrides: KafkaOverrides::default(),
            metrics_listen: None,
        }
    }
}

/// `<hostname>-<pid>-<8 random hex digits>`, restricted to characters that are safe in a
/// Kafka client id and a log line.
pub fn default_worker_id() -> WorkerId {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    let suffix = random.get(..8).unwrap_or(&random);
    WorkerId(format!("{host}-{}-{suffix}", std::process::id()))
}

/// How the trigger consumer's group shares partitions among workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GroupProtocol {
    /// The classic protocol with the eager `range` assignor: in a rebalance every member gives
    /// back all its partitions and gets its new share. Every Kafka version; the session timeout
    /// is the worker's.
    #[default]
    Classic,
    /// Kafka 4's consumer protocol (KIP-848): the group coordinator assigns partitions and moves
    /// only those that change owner, so a worker joining or leaving does not pause the others.
    /// Needs Apache Kafka 4.0 or later; the brokers set the session timeout.
    Consumer,
}

impl GroupProtocol {
    /// The value of librdkafka's `group.protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
        }
    }
}

impl std::fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}

fn base(config: &WorkerConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.brokers)
        .set("client.id", &config.worker_id.0);
    c
}

fn apply_overrides(c: &mut ClientConfig, config: &WorkerConfig) {
    for (k, v) in config.kafka_overrides.iter() {
        c.set(k, v);
    }
}

/// The consumer of the trigger topics.
///
/// Offsets are committed explicitly from the offset tracker (never automatically, never stored
/// by librdkafka), so the committed position only moves past finished triggers.
pub fn consumer_client_config(config: &WorkerConfig) -> ClientConfig {
    let mut c = base(config);
    c.set("group.id", &config.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        // Triggers are published in transactions: one of an aborted transaction is never run
        // (librdkafka's default too; set so that no override turns it off unnoticed).
        .set("isolation.level", "read_committed")
        // Apache Kafka answers a waiting fetch as soon as a trigger arrives, so this only sets
        // how often an idle worker asks; a broker that answers only at its next look for
        // records (Tansu, after half the remaining wait) holds a trigger up to about half of it
        // (librdkafka's default is 500 ms).
        .set("fetch.wait.max.ms", millis(config.fetch_wait))
        // The worker creates its trigger topics before it subscribes; one it could not create
        // (the admin creates it when a job type first appears) is picked up quickly.
        .set(
            "topic.metadata.refresh.interval.ms",
            millis(config.metadata_refresh),
        )
        .set("allow.auto.create.topics", "false")
        .set("group.protocol", config.group_protocol.as_str())
        // Also the rebalance timeout: how long a rebalance waits for members that do not rejoin
        // (a killed one) or do not acknowledge a revocation. Kept short, but above the revoke
        // drain, which delays this member's answer.
        .set(
            "max.poll.interval.ms",
            millis(
                config
                    .session_timeout
                    .max(config.revoke_timeout + Duration::from_secs(10)),
            ),
        );
    if config.group_protocol == GroupProtocol::Classic {
        // Eager `range`: a rebalance revokes every partition and assigns the new share (the
        // consumer context handles either kind of callback: the consumer protocol's are
        // incremental). The consumer protocol refuses these settings: its coordinator owns them.
        c.set("session.timeout.ms", millis(config.session_timeout))
            .set("partition.assignment.strategy", "range");
    }
    if config.metrics_listen.is_some() {
        // The lag gauges are read from these statistics (see `metrics`).
        c.set(
            "statistics.interval.ms",
            crate::metrics::STATS_INTERVAL_MS.to_string(),
        );
    }
    apply_overrides(&mut c, config);
    c
}

/// The consumers of the progress pointers and records: the auxiliary group
/// `<group>~progress`, which never subscribes (it only commits and reads back).
pub fn progress_client_config(config: &WorkerConfig) -> ClientConfig {
    let mut c = base(config);
    c.set("group.id", format!("{}~progress", config.group))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // A pointer below what the log still holds (retention) reads on from its start.
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .set("allow.auto.create.topics", "false");
    apply_overrides(&mut c, config);
    c
}

/// The admin client that creates the progress and trigger topics and reads their metadata.
/// It never creates a topic by asking for its metadata (librdkafka would by default, as for a
/// producer, on brokers that allow it).
pub fn admin_client_config(config: &WorkerConfig) -> ClientConfig {
    let mut c = base(config);
    c.set("allow.auto.create.topics", "false");
    apply_overrides(&mut c, config);
    c
}

/// The topics every deployment has: name, kind, partitions.
pub(crate) fn base_topics(config: &WorkerConfig) -> Vec<(String, TopicKind, i32)> {
    let t = &config.topics;
    vec![
        (t.results(), TopicKind::Results, config.trigger_partitions),
        (t.workers(), TopicKind::Workers, 1),
        (t.dlq(), TopicKind::Dlq, 1),
        (t.progress(), TopicKind::Progress, 1),
    ]
}

/// Creates the topics every deployment has, unless they exist, as the admin does: the results
/// topic (`CADENZA_TRIGGER_PARTITIONS` partitions), the workers topic (one partition,
/// compacted), the DLQ and the progress topic (one partition each). A worker that starts before
/// any admin thus never has them made by the broker's auto-creation with its defaults (the
/// workers topic not compacted).
pub(crate) async fn ensure_base_topics(config: &WorkerConfig) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = admin_client_config(config).create()?;
    let policy = config.topic_policy();
    let base = base_topics(config);
    let configs: Vec<Vec<TopicConfig>> = base
        .iter()
        .map(|(_, kind, _)| policy.configs(*kind))
        .collect();
    let topics: Vec<NewTopic<'_>> = base
        .iter()
        .zip(&configs)
        .map(|((name, _, partitions), configs)| new_topic(name, *partitions, &policy, configs))
        .collect();
    let results = admin
        .create_topics(
            &topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(())
}

/// The producer of results, heartbeats and DLQ records.
pub fn producer_client_config(config: &WorkerConfig) -> ClientConfig {
    let mut c = base(config);
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", millis(config.message_timeout))
        // The topics it writes to are created on purpose (see `ensure_base_topics`), never by
        // the broker with its defaults.
        .set("allow.auto.create.topics", "false");
    apply_overrides(&mut c, config);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_commits_explicitly_and_fetches_eagerly() {
        let mut config = WorkerConfig {
            group: "billing".into(),
            ..WorkerConfig::default()
        };
        config
            .kafka_overrides
            .push(("security.protocol".into(), "plaintext".into()));
        let c = consumer_client_config(&config);
        assert_eq!(c.get("group.id"), Some("billing"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
        assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(c.get("fetch.wait.max.ms"), Some("100"));
        assert_eq!(c.get("allow.auto.create.topics"), Some("false"));
        assert_eq!(c.get("session.timeout.ms"), Some("10000"));
        assert_eq!(c.get("security.protocol"), Some("plaintext"));
        let p = producer_client_config(&config);
        assert_eq!(p.get("enable.idempotence"), Some("true"));
        assert_eq!(p.get("acks"), Some("all"));
        assert_eq!(p.get("group.id"), None);
        let a = admin_client_config(&config);
        assert_eq!(a.get("allow.auto.create.topics"), Some("false"));
        assert_eq!(a.get("security.protocol"), Some("plaintext"));
        assert_eq!(a.get("group.id"), None);
    }

    #[test]
    fn the_consumer_protocol_leaves_session_and_assignor_to_the_coordinator() {
        let classic = consumer_client_config(&WorkerConfig::default());
        assert_eq!(classic.get("group.protocol"), Some("classic"));
        assert_eq!(classic.get("session.timeout.ms"), Some("10000"));
        assert_eq!(classic.get("partition.assignment.strategy"), Some("range"));
        let config = WorkerConfig {
            group_protocol: GroupProtocol::Consumer,
            ..WorkerConfig::default()
        };
        let c = consumer_client_config(&config);
        assert_eq!(c.get("group.protocol"), Some("consumer"));
        assert_eq!(c.get("session.timeout.ms"), None);
        assert_eq!(c.get("partition.assignment.strategy"), None);
        assert_eq!(c.get("max.poll.interval.ms"), Some("20000"));
        // librdkafka accepts the configuration.
        assert!(c.create::<rdkafka::consumer::BaseConsumer>().is_ok());
    }

    #[test]
    fn debug_output_hides_kafka_option_values() {
        let mut config = WorkerConfig::default();
        config
            .kafka_overrides
            .push(("sasl.password".into(), "hunter2".into()));
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("\"sasl.password\": <redacted>"), "{shown}");
        assert_eq!(
            consumer_client_config(&config).get("sasl.password"),
            Some("hunter2")
        );
    }

    #[test]
    fn default_worker_id_is_topic_and_log_safe() {
        let id = default_worker_id().0;
        assert!(id.contains(&format!("-{}-", std::process::id())));
        assert!(id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
        assert_ne!(default_worker_id(), default_worker_id());
    }
}
