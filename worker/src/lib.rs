//! The Cadenza worker: joins its deployment's Kafka consumer group, consumes the trigger topics
//! of the job types it has handlers for, runs the handlers under each job's block strategy, and
//! publishes `started`/`finished` results and heartbeats.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use cadenza_worker::{Outcome, Worker};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let worker = Worker::builder()
//!     .brokers("127.0.0.1:9092")
//!     .group("billing")
//!     .capacity(16)
//!     .heartbeat_interval(Duration::from_secs(5))
//!     .handler_fn("demo.echo", |ctx| async move {
//!         ctx.log(format!("echo {}", ctx.params));
//!         Outcome::success()
//!     })
//!     .build()?;
//! let running = worker.start().await?;
//! // … until it is time to stop (e.g. SIGTERM):
//! running.stop().await; // stop taking triggers, drain, commit, leave the group
//! # Ok(()) }
//! ```
//!
//! **Architecture invariant:** the worker never touches PostgreSQL nor calls the admin's HTTP API;
//! everything it learns and reports travels through Kafka (`cadenza-schemas` wire types).
//!
//! A trigger's offset is committed only after its `finished` event is delivered, and every commit
//! records which runs above it finished, started or were reporting (see `progress`): a crash or a
//! rebalance re-runs only what had not finished, with `attempt + 1`, and never re-runs a run whose
//! result was published. On revocation, runs that have not started are handed back and running
//! ones get [`WorkerBuilder::revoke_timeout`] to finish before they are abandoned (and run again
//! by the partition's next owner).

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cadenza_schemas::{JobType, JobTypeError, TopicKind, Topics, WorkerId};
use chrono::Utc;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer as _;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub mod builtin;
mod config;
mod dlq;
mod handler;
mod heartbeat;
mod intake;
mod lane;
pub mod metrics;
pub mod net_policy;
mod producer;
mod progress;
mod rebalance;
mod results;
mod run;
pub mod telemetry;
pub mod topics;
pub mod xxl;

pub use config::{
    default_worker_id, GroupProtocol, KafkaOverrides, WorkerConfig, DEFAULT_BROKERS,
    DEFAULT_CAPACITY, DEFAULT_DRAIN_TIMEOUT, DEFAULT_FETCH_WAIT, DEFAULT_GROUP,
    DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_RUN_LOG_LIMIT, DEFAULT_TRIGGER_PARTITIONS, MAX_FETCH_WAIT,
    MAX_TRIGGER_PARTITIONS,
};
pub use futures::future::BoxFuture;
pub use handler::{handler_fn, FnHandler, Handler, Outcome, RunContext, RunLog};
pub use metrics::WorkerMetrics;
pub use tokio_util::sync::CancellationToken;

/// Lock a mutex, ignoring poisoning: every critical section in this crate leaves its data
/// consistent, and a panic elsewhere must not take the worker down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Logs a recurring message at most once per period per key.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

impl Throttle {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a message with this key should be logged now.
    pub(crate) fn allow(&self, key: &str) -> bool {
        let mut last = lock(&self.last);
        let now = Instant::now();
        match last.get(key) {
            Some(at) if now.duration_since(*at) < self.every => false,
            _ => {
                last.insert(key.to_owned(), now);
                true
            }
        }
    }
}

/// The key under which a librdkafka error is throttled: its code (the reason text varies between
/// repeats), except for unknown topics, which are told apart by the topic named in the reason.
pub(crate) fn error_key(error: &KafkaError, reason: &str) -> String {
    match error.rdkafka_error_code() {
        Some(
            code @ (rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition
            | rdkafka::types::RDKafkaErrorCode::UnknownTopic),
        ) => format!("{code:?} {reason}"),
        Some(code) => format!("{code:?}"),
        None => reason.to_owned(),
    }
}

/// Kafka limits topic names to 249 characters.
const MAX_TOPIC_LEN: usize = 249;

/// A worker could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `build()` without any `handler(…)`.
    #[error("no handlers: register at least one with .handler(job_type, handler)")]
    NoHandlers,
    /// A handler was registered under an invalid job type.
    #[error("invalid job type {job_type:?}: {source}")]
    InvalidJobType {
        /// The job type as given.
        job_type: String,
        /// What is wrong with it.
        source: JobTypeError,
    },
    /// Two handlers for one job type.
    #[error("job type {0:?} has more than one handler")]
    DuplicateHandler(String),
    /// The topic prefix cannot be part of a Kafka topic name.
    #[error("invalid topic prefix {prefix:?}: {reason}")]
    InvalidTopicPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is out of range.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// The topic settings cannot work together (see `TopicPolicy::problem`).
    #[error("invalid topic settings: {0}")]
    InvalidTopicSettings(String),
}

/// A worker stopped with an error (before or instead of a graceful stop).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A Kafka client could not be created or subscribed.
    #[error("{what}: {source}")]
    Kafka {
        /// What the worker was doing.
        what: &'static str,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The metrics listener could not bind its address.
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen {
        /// The address from `metrics_listen`.
        addr: std::net::SocketAddr,
        /// The bind error.
        source: std::io::Error,
    },
    /// The intake stopped taking triggers by itself (it panicked): a bug. The worker was
    /// stopped gracefully so that another member takes its partitions.
    #[error("the worker stopped taking triggers (its intake failed); stopped gracefully")]
    IntakeFailed,
}

/// Configures a [`Worker`]. Start with [`Worker::builder`].
pub struct WorkerBuilder {
    config: WorkerConfig,
    topic_prefix: String,
    handlers: Vec<(String, Arc<dyn Handler>)>,
    extra_metrics: Vec<metrics::ExtraMetrics>,
}

impl Default for WorkerBuilder {
    fn default() -> Self {
        Self {
            config: WorkerConfig::default(),
            topic_prefix: cadenza_schemas::DEFAULT_TOPIC_PREFIX.to_owned(),
            handlers: Vec::new(),
            extra_metrics: Vec::new(),
        }
    }
}

impl WorkerBuilder {
    /// Kafka bootstrap servers (default `127.0.0.1:9092`).
    pub fn brokers(mut self, brokers: impl Into<String>) -> Self {
        self.config.brokers = brokers.into();
        self
    }

    /// The consumer group, i.e. the deployment (default `cadenza-workers`).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.config.group = group.into();
        self
    }

    /// Prefix of every topic name (default `cadenza`).
    pub fn topic_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.topic_prefix = prefix.into();
        self
    }

    /// This worker's id (default: `<hostname>-<pid>-<random>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.config.worker_id = WorkerId(id.into());
        self
    }

    /// Handlers executing at once across all jobs (default 16); runs waiting for their progress
    /// to be committed or their result to be delivered hold no slot.
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.config.capacity = capacity;
        self
    }

    /// Unfinished triggers at which consumption stops until half of them are finished
    /// (default 1024).
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.config.max_in_flight = max;
        self
    }

    /// How often a heartbeat is published (default 5 s).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = interval;
        self
    }

    /// How long a graceful stop waits for running runs (default 15 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// How long a whole graceful stop may take (default 25 s).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.config.stop_timeout = timeout;
        self
    }

    /// How long runs of revoked partitions may take to finish before they are abandoned and run
    /// again by the partitions' next owner (default 10 s).
    pub fn revoke_timeout(mut self, timeout: Duration) -> Self {
        self.config.revoke_timeout = timeout;
        self
    }

    /// Partitions of the trigger topics this worker creates (default 6, at most 1024): at start
    /// it creates the topic of each job type it serves that does not exist yet. Give it the
    /// admins' `CADENZA_TRIGGER_PARTITIONS`; an existing topic keeps its partitions.
    pub fn trigger_partitions(mut self, partitions: i32) -> Self {
        self.config.trigger_partitions = partitions;
        self
    }

    /// Replication factor of the topics this worker creates when they do not exist yet: the
    /// trigger topics of its job types and the progress topic (default 1).
    pub fn replication_factor(mut self, factor: i32) -> Self {
        self.config.replication_factor = factor;
        self
    }

    /// `min.insync.replicas` of the topics this worker creates and checks (`None`: 2 with a
    /// replication factor of 3 or more, else 1).
    pub fn min_insync_replicas(mut self, replicas: Option<i32>) -> Self {
        self.config.min_insync_replicas = replicas;
        self
    }

    /// How long the trigger topics this worker creates keep triggers, in milliseconds (default
    /// 6 days).
    pub fn trigger_retention_ms(mut self, ms: i64) -> Self {
        self.config.trigger_retention_ms = ms;
        self
    }

    /// Consumer session timeout: a worker that stops answering loses its partitions after this
    /// (default 10 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.config.session_timeout = timeout;
        self
    }

    /// The trigger consumer's group protocol (default classic; see [`GroupProtocol`]).
    pub fn group_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.config.group_protocol = protocol;
        self
    }

    /// How long the broker may hold a fetch of triggers when none is waiting (default 100 ms,
    /// at most 10 s): on Apache Kafka how often an idle worker asks, on the test broker also how
    /// long a trigger can wait before the worker sees it (see [`WorkerConfig::fetch_wait`]).
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.config.fetch_wait = wait;
        self
    }

    /// How long a cancelled handler may take to return before it is abandoned (default 5 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.config.cancel_grace = grace;
        self
    }

    /// Bytes of log kept per run (default 64 KiB).
    pub fn run_log_limit(mut self, bytes: usize) -> Self {
        self.config.run_log_limit = bytes;
        self
    }

    /// Serve `GET /metrics` (Prometheus/OpenMetrics text) and `GET /healthz` on `addr`
    /// (default: off). See [`metrics`].
    pub fn metrics_listen(mut self, addr: std::net::SocketAddr) -> Self {
        self.config.metrics_listen = Some(addr);
        self
    }

    /// Set a librdkafka property on both clients, after the worker's own (e.g. SASL, TLS).
    pub fn kafka_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.kafka_overrides.push((key.into(), value.into()));
        self
    }

    /// Register metrics of the application's own (e.g. its handlers') with the worker's, under
    /// the `cadenza_worker_` prefix and the `group` label.
    pub fn register_metrics(
        mut self,
        register: impl FnOnce(&mut prometheus_client::registry::Registry) + Send + 'static,
    ) -> Self {
        self.extra_metrics.push(Box::new(register));
        self
    }

    /// Serve `job_type` with `handler`.
    pub fn handler(mut self, job_type: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers.push((job_type.into(), Arc::new(handler)));
        self
    }

    /// Serve `job_type` with a closure `|ctx| async move { … Outcome }`.
    pub fn handler_fn<F, Fut>(self, job_type: impl Into<String>, f: F) -> Self
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handler(job_type, handler_fn(f))
    }

    /// Validate everything and build the worker.
    pub fn build(self) -> Result<Worker, BuildError> {
        let mut config = self.config;
        if self.handlers.is_empty() {
            return Err(BuildError::NoHandlers);
        }
        let invalid = |field, reason| Err(BuildError::Invalid { field, reason });
        if config.brokers.trim().is_empty() {
            return invalid("brokers", "must not be empty");
        }
        if config.group.trim().is_empty() {
            return invalid("group", "must not be empty");
        }
        if config.worker_id.0.trim().is_empty() {
            return invalid("worker id", "must not be empty");
        }
        if config.capacity == 0 {
            return invalid("capacity", "must be at least 1");
        }
        if config.max_in_flight == 0 {
            return invalid("max in flight", "must be at least 1");
        }
        if config.heartbeat_interval.is_zero() {
            return invalid("heartbeat interval", "must be positive");
        }
        if config.commit_interval.is_zero() {
            return invalid("commit interval", "must be positive");
        }
        if config.fetch_wait < Duration::from_millis(1) || config.fetch_wait > MAX_FETCH_WAIT {
            return invalid("fetch wait", "must be from 1 ms to 10 s");
        }
        if !(1..=MAX_TRIGGER_PARTITIONS).contains(&config.trigger_partitions) {
            return invalid("trigger partitions", "must be from 1 to 1024");
        }
        if let Some(problem) = config.topic_policy().problem() {
            return Err(BuildError::InvalidTopicSettings(problem));
        }
        let prefix = self.topic_prefix;
        if let Err(e) = JobType::parse(&prefix) {
            // Same character rules as a job type: both are parts of a topic name.
            let reason = e.to_string().replace("job_type", "the topic prefix");
            return Err(BuildError::InvalidTopicPrefix { prefix, reason });
        }
        config.topics = Topics::new(prefix);
        let mut handlers = BTreeMap::new();
        for (name, handler) in self.handlers {
            let job_type = JobType::parse(&name).map_err(|source| BuildError::InvalidJobType {
                job_type: name.clone(),
                source,
            })?;
            let topic = config.topics.trigger(&job_type);
            if topic.len() > MAX_TOPIC_LEN {
                return Err(BuildError::InvalidJobType {
                    job_type: name,
                    source: JobTypeError::TooLong(topic.len()),
                });
            }
            if handlers.insert(job_type, handler).is_some() {
                return Err(BuildError::DuplicateHandler(name));
            }
        }
        let metrics = Arc::new(WorkerMetrics::with_extra(
            &config.group,
            config.capacity,
            self.extra_metrics,
        ));
        Ok(Worker {
            config,
            handlers,
            metrics,
        })
    }
}

/// A worker, ready to [`start`](Worker::start).
pub struct Worker {
    config: WorkerConfig,
    handlers: BTreeMap<JobType, Arc<dyn Handler>>,
    metrics: Arc<WorkerMetrics>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("job_types", &self.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn kafka(what: &'static str) -> impl FnOnce(KafkaError) -> WorkerError {
    move |source| WorkerError::Kafka { what, source }
}

impl Worker {
    /// Start configuring a worker.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::default()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The job types it serves.
    pub fn job_types(&self) -> impl Iterator<Item = &JobType> {
        self.handlers.keys()
    }

    /// Its metrics, to expose elsewhere than its own listener ([`WorkerMetrics::encode`]).
    pub fn metrics(&self) -> Arc<WorkerMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Consume and run triggers until `shutdown` is cancelled, then stop gracefully: the same
    /// as [`start`](Self::start), waiting for `shutdown`, then [`Running::stop`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let running = self.start().await?;
        let failed = running.intake_failed.clone();
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = failed.cancelled() => {}
        }
        running.stop().await
    }

    /// Start the worker: listen for metrics (if configured), create the topics it needs, join
    /// the consumer group, and start consuming, committing and heartbeating in background
    /// tasks. Returns once everything runs; stop it with [`Running::stop`].
    pub async fn start(self) -> Result<Running, WorkerError> {
        let cfg = self.config;
        let topics = &cfg.topics;
        let metrics = self.metrics;
        let stop_metrics = CancellationToken::new();
        let metrics_task = match cfg.metrics_listen {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| WorkerError::MetricsListen { addr, source })?;
                Some(tokio::spawn(metrics::serve(
                    listener,
                    Arc::clone(&metrics),
                    stop_metrics.clone(),
                )))
            }
            None => None,
        };
        let producer = producer::create(&cfg).map_err(kafka("creating the Kafka producer"))?;
        config::ensure_base_topics(&cfg).await.map_err(kafka(
            "creating the results, workers, DLQ and progress topics",
        ))?;
        let hand_back = CancellationToken::new();
        let abandon = CancellationToken::new();
        let offsets = Arc::new(Mutex::new(progress::OffsetTracker::new(
            hand_back.clone(),
            abandon.clone(),
        )));
        let signal = Arc::new(progress::ProgressSignal::default());
        let progress = Arc::new(
            progress::Progress::new(
                &cfg,
                Arc::clone(&offsets),
                producer.clone(),
                Arc::clone(&signal),
                Arc::clone(&metrics),
            )
            .map_err(kafka("creating the progress clients"))?,
        );
        let assignment: heartbeat::Assignment = Arc::default();
        let paused = rebalance::ConsumptionPaused::default();
        let consumer = Arc::new(
            rebalance::create(
                &cfg,
                rebalance::ConsumerCtx::new(
                    Arc::clone(&offsets),
                    Arc::clone(&progress),
                    Arc::clone(&assignment),
                    cfg.revoke_timeout,
                    Arc::clone(&metrics),
                    paused.clone(),
                ),
            )
            .map_err(kafka("creating the Kafka consumer"))?,
        );
        let routes: HashMap<String, intake::Route> = self
            .handlers
            .iter()
            .map(|(job_type, handler)| {
                (
                    topics.trigger(job_type),
                    intake::Route {
                        job_type: job_type.clone(),
                        handler: Arc::clone(handler),
                    },
                )
            })
            .collect();
        let mut subscribed: Vec<&str> = routes.keys().map(String::as_str).collect();
        subscribed.sort_unstable();
        // Subscribe to topics that exist: the first assignment then holds their partitions, and
        // the heartbeats report them before any job of these types has run.
        let trigger_topics: Vec<String> = subscribed.iter().map(|t| (*t).to_owned()).collect();
        topics::ensure_trigger_topics(&cfg, &trigger_topics).await;
        let checked: Vec<(String, TopicKind)> = config::base_topics(&cfg)
            .into_iter()
            .map(|(name, kind, _)| (name, kind))
            .chain(
                trigger_topics
                    .iter()
                    .map(|t| (t.clone(), TopicKind::Trigger)),
            )
            .collect();
        topics::warn_about_topics(&cfg, &checked).await;
        consumer
            .subscribe(&subscribed)
            .map_err(kafka("subscribing to the trigger topics"))?;
        let serving = self
            .handlers
            .keys()
            .map(JobType::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        tracing::info!(
            group = %cfg.group,
            brokers = %cfg.brokers,
            capacity = cfg.capacity,
            topics = ?subscribed,
            "worker {} serving {serving}",
            cfg.worker_id
        );

        let lanes = Arc::new(lane::Lanes::default());
        let env = Arc::new(run::RunEnv {
            worker_id: cfg.worker_id.clone(),
            group: cfg.group.clone(),
            results: results::KafkaResults::new(producer.clone(), topics.results()),
            lanes: Arc::clone(&lanes),
            capacity: Arc::new(Semaphore::new(
                usize::try_from(cfg.capacity).unwrap_or(usize::MAX),
            )),
            in_flight: run::InFlight::new(cfg.max_in_flight),
            hand_back,
            abandon,
            run_log_limit: cfg.run_log_limit,
            cancel_grace: cfg.cancel_grace,
            tasks: TaskTracker::new(),
            metrics: Arc::clone(&metrics),
        });

        let stop_heartbeats = CancellationToken::new();
        let heartbeater = heartbeat::Heartbeater {
            source: heartbeat::HeartbeatSource {
                worker_id: cfg.worker_id.clone(),
                group: cfg.group.clone(),
                job_types: self.handlers.keys().cloned().collect(),
                capacity: cfg.capacity,
                interval: cfg.heartbeat_interval,
                started_at: Utc::now(),
                lanes,
                assignment,
            },
            producer: producer.clone(),
            topic: topics.workers(),
        };
        let heartbeat_task = tokio::spawn(heartbeater.run(stop_heartbeats.clone()));

        let committer = progress::Committer::new(
            Arc::clone(&consumer),
            Arc::clone(&progress),
            cfg.commit_interval,
        );
        let stop_commits = CancellationToken::new();
        let commit_task = tokio::spawn(committer.clone().run(stop_commits.clone()));

        let intake = intake::Intake {
            consumer: Arc::clone(&consumer),
            deliveries: progress::Deliveries::new(Arc::clone(&offsets), signal),
            env: Arc::clone(&env),
            routes,
            dlq: dlq::DlqProducer::new(producer.clone(), topics.dlq()),
            reporter: cfg.worker_id.0.clone(),
            errors: Throttle::new(Duration::from_secs(60)),
            paused,
        };
        let stop_intake = CancellationToken::new();
        let intake_failed = CancellationToken::new();
        let intake_stopped = CancellationToken::new();
        let release_consumer = CancellationToken::new();
        let consumer_task = tokio::spawn({
            let (stop_intake, release_consumer) = (stop_intake.clone(), release_consumer.clone());
            let (failed, stopped) = (intake_failed.clone(), intake_stopped.clone());
            async move {
                // The intake never panics on input; should a bug make it panic, the worker must
                // not live on without taking triggers while its heartbeats say it is alive.
                let taking = std::panic::AssertUnwindSafe(intake.run(&stop_intake));
                if futures::FutureExt::catch_unwind(taking).await.is_err() {
                    tracing::error!("the intake panicked: stopping the worker");
                    failed.cancel();
                }
                stopped.cancel();
                // The consumer keeps serving its callbacks (taking no message) so that a
                // rebalance meanwhile does not wait for this member.
                intake.idle(&release_consumer).await;
            }
        });

        Ok(Running {
            worker_id: cfg.worker_id,
            drain_timeout: cfg.drain_timeout,
            stop_timeout: cfg.stop_timeout,
            stop_intake,
            intake_stopped,
            intake_failed,
            env,
            release_consumer,
            consumer_task,
            stop_commits,
            commit_task,
            committer,
            stop_heartbeats,
            heartbeat_task,
            consumer,
            producer,
            stop_metrics,
            metrics_task,
        })
    }
}

/// A started worker (see [`Worker::start`]). Stop it with [`Running::stop`]; dropped without
/// it, its tasks go on in the background until the runtime shuts down, and it neither drains,
/// commits nor leaves its group.
///
/// The fields are listed in the order [`stop`](Running::stop) uses them: each says what it stops
/// and when.
#[must_use = "a worker stops gracefully only through Running::stop"]
pub struct Running {
    worker_id: WorkerId,
    /// How long step 3 waits for running runs.
    drain_timeout: Duration,
    /// How long the whole stop may take.
    stop_timeout: Duration,
    /// Step 1: cancelled first; the intake takes no more messages. The consumer task then pauses
    /// its partitions and goes on serving the consumer's callbacks (rebalances) until step 4.
    stop_intake: CancellationToken,
    /// Cancelled by the consumer task once the intake has returned: step 1 waits for it, so
    /// that no message is handled once step 2 has begun.
    intake_stopped: CancellationToken,
    /// Cancelled by the consumer task if the intake panicked (see [`Running::failed`]).
    intake_failed: CancellationToken,
    /// What the runs share. Its `hand_back` token is cancelled in step 2 (runs that have not
    /// started are handed back; parent of every partition's `revoking` token), its `abandon`
    /// token in step 3 if the drain timed out (runs still executing are abandoned unreported;
    /// parent of every partition's `dropped` token). Its `tasks` are what step 3 waits for.
    env: Arc<run::RunEnv>,
    /// Step 4: cancelled once the runs are over; the consumer task returns (no more callbacks
    /// are served until the consumer is closed in step 7).
    release_consumer: CancellationToken,
    /// The intake, then the idle consumer: ends after step 4.
    consumer_task: JoinHandle<()>,
    /// Step 5: cancelled after the consumer task ended; the committer stops its rounds, then
    /// one final round commits what the drain finished.
    stop_commits: CancellationToken,
    /// The committer's loop: ends after step 5's cancellation.
    commit_task: JoinHandle<()>,
    /// Runs step 5's final commit round.
    committer: progress::Committer<rebalance::ConsumerCtx>,
    /// Step 6: cancelled after the final commit; the heartbeat stops and writes the tombstone
    /// that tells the admin this worker left on purpose.
    stop_heartbeats: CancellationToken,
    /// The heartbeat loop: ends after its tombstone.
    heartbeat_task: JoinHandle<()>,
    /// Step 7: unsubscribed and closed (its last reference) to leave the group; librdkafka
    /// serves the final revocation, whose callback commits once more if anything moved.
    consumer: Arc<rebalance::TriggerConsumer>,
    /// Step 8: flushed, so every result and heartbeat produced is delivered.
    producer: producer::Producer,
    /// Step 9: cancelled last; the metrics listener stops (it answers until the end).
    stop_metrics: CancellationToken,
    /// The metrics listener, if `metrics_listen` was set.
    metrics_task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Resolves if the worker stopped taking triggers by itself (its intake panicked, which
    /// only a bug can cause). Wait for it beside the shutdown signal, then [`stop`](Self::stop),
    /// which then returns [`WorkerError::IntakeFailed`].
    pub fn failed(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.intake_failed.clone().cancelled_owned()
    }

    /// Stop gracefully, in this order:
    ///
    /// 1. stop taking triggers: the intake takes no more messages (this waits until it has
    ///    handled the one in hand); the consumer pauses and keeps serving rebalances;
    /// 2. hand back the runs that have not started (waiting in lanes or for capacity): they
    ///    publish nothing and their offsets stay uncommitted, for the partitions' next owners;
    /// 3. drain: let running runs finish and report, for up to the drain timeout; then abandon
    ///    the rest unreported (they will run again elsewhere, `attempt + 1`);
    /// 4. release the consumer: stop serving its callbacks;
    /// 5. stop the committer and commit the finished offsets in a final round;
    /// 6. stop the heartbeat, which writes its tombstone;
    /// 7. leave the group: unsubscribe and close the consumer;
    /// 8. flush the producer;
    /// 9. stop the metrics listener.
    ///
    /// A step that fails is logged and the sequence goes on. The result is an error only if
    /// the intake had failed (see [`failed`](Self::failed)).
    pub async fn stop(self) -> Result<(), WorkerError> {
        let Self {
            worker_id,
            drain_timeout,
            stop_timeout,
            stop_intake,
            intake_stopped,
            intake_failed,
            env,
            release_consumer,
            consumer_task,
            stop_commits,
            commit_task,
            committer,
            stop_heartbeats,
            heartbeat_task,
            consumer,
            producer,
            stop_metrics,
            metrics_task,
        } = self;
        let deadline = tokio::time::Instant::now() + stop_timeout;
        // Each step waits at most what is left of the stop's time; one still waiting at the
        // deadline (a broker that is down) is given up, and the next steps get no time.
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        let given_up = |step: &'static str| {
            tracing::warn!(
                step,
                stop_timeout_ms = stop_timeout.as_millis() as u64,
                "stop deadline: a step did not finish in time and is given up"
            );
        };

        // 1. Stop taking triggers, and wait until the intake has handled its last message.
        stop_intake.cancel();
        if tokio::time::timeout(left(), intake_stopped.cancelled())
            .await
            .is_err()
        {
            given_up("intake");
        }
        let drain = drain_timeout.min(left().saturating_sub(config::STOP_RESERVE));
        tracing::info!(
            in_flight = env.in_flight.count(),
            drain_timeout_ms = drain.as_millis() as u64,
            stop_timeout_ms = stop_timeout.as_millis() as u64,
            "stopping: taking no new triggers, draining running runs"
        );

        // 2. Hand back the runs that have not started.
        env.hand_back.cancel();
        env.tasks.close();

        // 3. Drain, then abandon what still runs.
        if tokio::time::timeout(drain, env.tasks.wait()).await.is_err() {
            tracing::warn!(
                unfinished = env.tasks.len(),
                "drain timed out: handing back the runs still in progress (they will run again)"
            );
            env.abandon.cancel();
            // Runs return promptly once abandoned; bounded anyway.
            let wait = Duration::from_secs(5).min(left());
            let _ = tokio::time::timeout(wait, env.tasks.wait()).await;
        }

        // 4. Release the consumer.
        release_consumer.cancel();
        match tokio::time::timeout(left(), consumer_task).await {
            Ok(Err(error)) => tracing::warn!(%error, "the consumer task failed"),
            Ok(Ok(())) => {}
            Err(_) => given_up("consumer"),
        }

        // 5. Stop the committer; final commit.
        stop_commits.cancel();
        let _ = tokio::time::timeout(left(), commit_task).await;
        let committing = tokio::task::spawn_blocking(move || committer.commit_final());
        match tokio::time::timeout(left(), committing).await {
            Ok(Err(error)) => tracing::warn!(%error, "final commit task failed"),
            Ok(Ok(())) => {}
            Err(_) => given_up("final commit"),
        }

        // 6. Stop the heartbeat (tombstone).
        stop_heartbeats.cancel();
        match tokio::time::timeout(left(), heartbeat_task).await {
            Ok(Err(error)) => tracing::warn!(%error, "heartbeat task failed"),
            Ok(Ok(())) => {}
            Err(_) => given_up("heartbeat tombstone"),
        }

        // 7. Leave the group: unsubscribe, then close (blocking: librdkafka serves the final
        // revocation, whose callback commits once more if anything moved). The consumer must
        // be the last reference to close it.
        drop(env);
        let closing = tokio::task::spawn_blocking(move || {
            consumer.unsubscribe();
            drop(consumer);
        });
        match tokio::time::timeout(left(), closing).await {
            Ok(Err(error)) => tracing::warn!(%error, "closing the consumer failed"),
            Ok(Ok(())) => {}
            Err(_) => given_up("leaving the group"),
        }

        // 8. Flush the producer, with what is left (at least a moment).
        let flush_for = left().max(Duration::from_millis(100));
        let flushing = tokio::task::spawn_blocking(move || producer.flush(flush_for));
        match tokio::time::timeout(flush_for + Duration::from_millis(200), flushing).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "flushing the producer failed"),
            Ok(Err(error)) => tracing::warn!(%error, "flushing the producer failed"),
            Err(_) => given_up("flushing the producer"),
        }

        // 9. Stop the metrics listener.
        stop_metrics.cancel();
        if let Some(task) = metrics_task {
            if let Ok(Err(error)) = tokio::time::timeout(Duration::from_secs(1), task).await {
                tracing::warn!(%error, "the metrics listener failed");
            }
        }
        tracing::info!("worker {worker_id} stopped");
        if intake_failed.is_cancelled() {
            return Err(WorkerError::IntakeFailed);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use cadenza_schemas::{BlockStrategy, JobId, JobType, TriggerId, TriggerKind, TriggerMessage};
    use chrono::DateTime;

    /// A trigger of job 1, type `t.x`, id 1, serial, params `p`.
    pub(crate) fn trigger(timeout_ms: u64) -> TriggerMessage {
        TriggerMessage {
            trigger_id: TriggerId(1),
            job_id: JobId(1),
            job_type: JobType::parse("t.x").unwrap_or_else(|e| panic!("{e}")),
            kind: TriggerKind::Manual,
            fire_time: DateTime::UNIX_EPOCH,
            params: "p".into(),
            block: BlockStrategy::SerialExecution,
            timeout_ms,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            routed_worker: None,
            route: None,
            published_at: DateTime::UNIX_EPOCH,
            workflow_run_id: None,
            workflow_node: None,
            upstream: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_allows_once_per_period_per_key() {
        let t = Throttle::new(Duration::from_secs(60));
        assert!(t.allow("a"));
        assert!(!t.allow("a"));
        assert!(t.allow("b"));
        let t = Throttle::new(Duration::ZERO);
        assert!(t.allow("a") && t.allow("a"));
    }

    fn noop() -> impl Handler {
        handler_fn(|_ctx| async { Outcome::success() })
    }

    #[test]
    fn build_validates() {
        let err = |b: WorkerBuilder| b.build().unwrap_err().to_string();
        assert_eq!(
            err(Worker::builder()),
            "no handlers: register at least one with .handler(job_type, handler)"
        );
        assert!(err(Worker::builder().handler("a b", noop()))
            .starts_with("invalid job type \"a b\": job_type may only contain"));
        assert_eq!(
            err(Worker::builder().handler("a", noop()).handler("a", noop())),
            "job type \"a\" has more than one handler"
        );
        assert_eq!(
            err(Worker::builder().handler("a", noop()).capacity(0)),
            "invalid capacity: must be at least 1"
        );
        for bad in [0, -1, 1025] {
            assert_eq!(
                err(Worker::builder()
                    .handler("a", noop())
                    .trigger_partitions(bad)),
                "invalid trigger partitions: must be from 1 to 1024"
            );
        }
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_millis(10_001),
        ] {
            assert_eq!(
                err(Worker::builder().handler("a", noop()).fetch_wait(bad)),
                "invalid fetch wait: must be from 1 ms to 10 s"
            );
        }
        assert!(
            err(Worker::builder().handler("a", noop()).topic_prefix("x/y"))
                .starts_with("invalid topic prefix \"x/y\": the topic prefix may only contain")
        );
        assert!(err(Worker::builder()
            .handler("a".repeat(200), noop())
            .topic_prefix("p".repeat(45)))
        .starts_with("invalid job type"));

        let w = Worker::builder()
            .group("billing")
            .topic_prefix("t1")
            .worker_id("w-1")
            .handler("demo.echo", noop())
            .handler_fn("demo.other", |_ctx| async { Outcome::failure("x") })
            .build()
            .unwrap();
        assert_eq!(w.config().group, "billing");
        assert_eq!(w.config().trigger_partitions, DEFAULT_TRIGGER_PARTITIONS);
        assert_eq!(w.config().fetch_wait, DEFAULT_FETCH_WAIT);
        assert_eq!(
            w.config().topics.trigger(&JobType::parse("x").unwrap()),
            "t1.trigger.x"
        );
        assert_eq!(
            w.job_types().map(JobType::as_str).collect::<Vec<_>>(),
            vec!["demo.echo", "demo.other"]
        );
    }
}
