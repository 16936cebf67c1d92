//! The admin's Prometheus metrics, served at `GET /metrics` in the OpenMetrics text format
//! (prometheus-client). One set per process ([`metrics`]): the scheduler, ingest, alarms and the
//! API record into it where things happen.
//!
//! Names follow Prometheus conventions: `cadenza_` prefix, base units (`_seconds`), counters
//! end in `_total` (added by the encoder). Labels are bounded sets: job type, status, outcome,
//! route template, never a run or job id.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobTypeLabel {
    pub job_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndedLabels {
    pub job_type: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabels {
    /// `webhook` or `email`.
    pub channel: String,
    /// `sent` or `failed`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub method: String,
    /// The route template (`/api/jobs/{id}`), or `other` for paths no route matched.
    pub route: String,
    pub status: u16,
}

/// Lateness and lag: 1 ms to about 9 minutes, doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 20)
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// Everything the admin measures.
pub struct AdminMetrics {
    registry: Registry,
    /// Triggers published (acknowledged by the broker), per job type.
    pub published: Family<JobTypeLabel, Counter>,
    /// Publish time − fire time of each published trigger.
    pub fire_lateness: Histogram,
    /// Duration of one scan batch (claim due jobs, write their runs).
    pub scan_duration: Histogram,
    /// Duration of each commit (or abort) of a publication transaction.
    pub publish_commit: Histogram,
    /// Publication transactions by outcome (`committed`, `aborted`, `failed`).
    pub publish_transactions: Family<OutcomeLabel, Counter>,
    /// Jobs claimed per scan batch.
    pub scan_jobs: Histogram,
    /// How long ago the earliest trigger waiting in the timer was due to be taken for
    /// publication (its fire time less the publish-ahead), as the scan last saw it.
    pub publication_behind: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Shards this admin holds now.
    pub shards_held: Gauge,
    /// Shards in all (the database's setting; the same on every admin).
    pub shard_count: Gauge,
    /// Shard leases taken (a free or expired shard).
    pub lease_acquired: Counter,
    /// Shard leases lost to another admin or to expiry.
    pub lease_lost: Counter,
    /// Runs that reached a terminal status, per job type and status.
    pub runs_ended: Family<EndedLabels, Counter>,
    /// Now − the worker's event time of each result ingested.
    pub ingest_lag: Histogram,
    /// Alarm deliveries, per channel and outcome.
    pub alarms: Family<AlarmLabels, Counter>,
    /// Records this admin sent to the dead-letter topic.
    pub dlq_records: Counter,
    /// Partitions read back after taking shards over, per outcome (`done`, `failed`).
    pub read_backs: Family<OutcomeLabel, Counter>,
    /// Runs left `publishing` that a read-back resolved, per outcome (`found`: it had landed;
    /// `resent`: it had not).
    pub read_back_runs: Family<OutcomeLabel, Counter>,
    /// API requests, per method, route and status.
    pub api_requests: Family<ApiLabels, Counter>,
    /// Per concurrency group released by this admin: runs waiting, slots in use, the limit.
    pub group_queued: Family<GroupLabel, Gauge>,
    pub group_in_flight: Family<GroupLabel, Gauge>,
    pub group_limit: Family<GroupLabel, Gauge>,
    /// Time from a released run's fire time to its release.
    pub group_wait: Family<GroupLabel, Histogram, fn() -> Histogram>,
}

impl AdminMetrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("cadenza");
        let m = AdminMetrics {
            registry: Registry::default(),
            published: Family::default(),
            fire_lateness: latency_histogram(),
            scan_duration: latency_histogram(),
            publish_commit: latency_histogram(),
            publish_transactions: Family::default(),
            scan_jobs: Histogram::new(exponential_buckets(1.0, 4.0, 8)),
            publication_behind: Gauge::default(),
            shards_held: Gauge::default(),
            shard_count: Gauge::default(),
            lease_acquired: Counter::default(),
            lease_lost: Counter::default(),
            runs_ended: Family::default(),
            ingest_lag: latency_histogram(),
            alarms: Family::default(),
            dlq_records: Counter::default(),
            read_backs: Family::default(),
            read_back_runs: Family::default(),
            api_requests: Family::default(),
            group_queued: Family::default(),
            group_in_flight: Family::default(),
            group_limit: Family::default(),
            group_wait: Family::new_with_constructor(latency_histogram),
        };
        registry.register(
            "triggers_published",
            "Triggers published to their topic (acknowledged by the broker)",
            m.published.clone(),
        );
        registry.register_with_unit(
            "fire_lateness",
            "Publish time minus fire time of each published trigger",
            Unit::Seconds,
            m.fire_lateness.clone(),
        );
        registry.register_with_unit(
            "publish_commit_duration",
            "Duration of each commit of a publication transaction (CADENZA_PUBLICATION=transactions)",
            Unit::Seconds,
            m.publish_commit.clone(),
        );
        registry.register(
            "publish_transactions",
            "Publication transactions ended, by outcome: committed, aborted (their triggers are read back and sent again), failed (the producer was fenced or broke and was made ready again)",
            m.publish_transactions.clone(),
        );
        registry.register_with_unit(
            "scan_duration",
            "Duration of one scan batch: claiming due jobs and writing their runs",
            Unit::Seconds,
            m.scan_duration.clone(),
        );
        registry.register(
            "scan_jobs",
            "Jobs claimed per scan batch",
            m.scan_jobs.clone(),
        );
        registry.register_with_unit(
            "publication_behind",
            "How long ago the earliest trigger waiting in this admin's timer was due to be taken for publication (0 when none is overdue); the scan writes no runs ahead while it is above 1 s",
            Unit::Seconds,
            m.publication_behind.clone(),
        );
        registry.register(
            "shards_held",
            "Shards this admin holds",
            m.shards_held.clone(),
        );
        registry.register(
            "shard_count",
            "Shards in all, as this admin last read them; sum(cadenza_shards_held) below this means some shard has no admin",
            m.shard_count.clone(),
        );
        registry.register(
            "lease_acquisitions",
            "Shard leases taken by this admin",
            m.lease_acquired.clone(),
        );
        registry.register(
            "lease_losses",
            "Shard leases this admin lost (taken by another admin, or expired)",
            m.lease_lost.clone(),
        );
        registry.register(
            "runs_ended",
            "Runs that reached a terminal status",
            m.runs_ended.clone(),
        );
        registry.register_with_unit(
            "result_ingest_lag",
            "Time from a worker's result event to its ingestion",
            Unit::Seconds,
            m.ingest_lag.clone(),
        );
        registry.register("alarms", "Alarm deliveries", m.alarms.clone());
        registry.register(
            "dlq_records",
            "Records sent to the dead-letter topic by this admin",
            m.dlq_records.clone(),
        );
        registry.register(
            "read_backs",
            "Partitions read back after a takeover",
            m.read_backs.clone(),
        );
        registry.register(
            "read_back_runs",
            "Runs left publishing that a read-back resolved",
            m.read_back_runs.clone(),
        );
        registry.register("api_requests", "HTTP API requests", m.api_requests.clone());
        registry.register(
            "group_queued",
            "Runs of a concurrency group waiting for a slot (reported by the admin that releases it)",
            m.group_queued.clone(),
        );
        registry.register(
            "group_in_flight",
            "Runs of a concurrency group in flight: the slots in use (reported by the admin that releases it)",
            m.group_in_flight.clone(),
        );
        registry.register(
            "group_limit",
            "A concurrency group's limit (reported by the admin that releases it)",
            m.group_limit.clone(),
        );
        registry.register_with_unit(
            "group_wait",
            "Time from a queued run's fire time to its release",
            Unit::Seconds,
            m.group_wait.clone(),
        );
        AdminMetrics { registry, ..m }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}

/// The admin's metrics (one set per process).
pub fn metrics() -> &'static AdminMetrics {
    static METRICS: LazyLock<AdminMetrics> = LazyLock::new(AdminMetrics::new);
    &METRICS
}

/// The content type of [`AdminMetrics::encode`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
