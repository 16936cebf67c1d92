//! The worker's Prometheus metrics, served on its own small listener when one is configured
//! ([`WorkerBuilder::metrics_listen`](crate::WorkerBuilder::metrics_listen), the binary's
//! `CADENZA_METRICS_LISTEN`): `GET /metrics` in the OpenMetrics text format, and `GET /healthz`.
//!
//! Every series carries the worker's consumer `group` as a label, so one dashboard shows every
//! deployment. Other labels are bounded: job type, status, topic and partition, never a run or
//! job id. Consumer lag comes from librdkafka's statistics (refreshed every
//! [`STATS_INTERVAL_MS`] while the listener is on).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use rdkafka::statistics::Statistics;
use tokio_util::sync::CancellationToken;

use crate::lock;

/// How often librdkafka reports the statistics the lag gauges are read from, when metrics are on.
pub const STATS_INTERVAL_MS: u64 = 2000;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct JobTypeLabel {
    pub job_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FinishedLabels {
    pub job_type: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    pub outcome: String,
}

/// Everything one worker measures. Cheap to share ([`Arc`]); recording never blocks.
pub struct WorkerMetrics {
    registry: Registry,
    pub(crate) runs_started: Family<JobTypeLabel, Counter>,
    pub(crate) runs_finished: Family<FinishedLabels, Counter>,
    pub(crate) handler_duration: Family<JobTypeLabel, Histogram>,
    pub(crate) runs_waiting: Family<JobTypeLabel, Gauge>,
    pub(crate) capacity_in_use: Gauge,
    pub(crate) capacity: Gauge,
    pub(crate) consumer_lag: Family<PartitionLabels, Gauge>,
    pub(crate) fetch_lag: Family<PartitionLabels, Gauge>,
    pub(crate) commit_duration: Histogram,
    pub(crate) commit_rounds: Family<OutcomeLabel, Counter>,
    pub(crate) rebalances: Family<KindLabel, Counter>,
    pub(crate) dlq_records: Counter,
    /// Partitions taken over without their earlier owners' progress (every read failed): their
    /// triggers at and above the committed offset run again.
    pub(crate) progress_unknown: Counter,
    /// The partitions the lag gauges hold now (to drop those no longer assigned).
    lag_series: Mutex<Vec<PartitionLabels>>,
}

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMetrics").finish_non_exhaustive()
    }
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 9 minutes, doubling.
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// A registration of metrics from outside the worker ([`crate::WorkerBuilder::register_metrics`]).
pub type ExtraMetrics = Box<dyn FnOnce(&mut Registry) + Send>;

impl WorkerMetrics {
    /// A new set, every series labelled with `group`.
    pub fn new(group: &str, capacity: u32) -> Self {
        Self::with_extra(group, capacity, Vec::new())
    }

    /// [`Self::new`], with other metrics registered alongside.
    pub fn with_extra(group: &str, capacity: u32, extra: Vec<ExtraMetrics>) -> Self {
        let labels = [(Cow::Borrowed("group"), Cow::Owned(group.to_owned()))];
        let mut registry = Registry::with_prefix_and_labels("cadenza_worker", labels.into_iter());
        let m = WorkerMetrics {
            registry: Registry::default(),
            runs_started: Family::default(),
            runs_finished: Family::default(),
            handler_duration: Family::new_with_constructor(duration_histogram),
            runs_waiting: Family::default(),
            capacity_in_use: Gauge::default(),
            capacity: Gauge::default(),
            consumer_lag: Family::default(),
            fetch_lag: Family::default(),
            commit_duration: duration_histogram(),
            commit_rounds: Family::default(),
            rebalances: Family::default(),
            dlq_records: Counter::default(),
            progress_unknown: Counter::default(),
            lag_series: Mutex::new(Vec::new()),
        };
        m.capacity.set(i64::from(capacity));
        registry.register(
            "runs_started",
            "Runs whose handler started",
            m.runs_started.clone(),
        );
        registry.register(
            "runs_finished",
            "Runs whose result was published, by status",
            m.runs_finished.clone(),
        );
        registry.register_with_unit(
            "handler_duration",
            "Time from a handler's start to its end",
            Unit::Seconds,
            m.handler_duration.clone(),
        );
        registry.register(
            "runs_waiting",
            "Runs taken from Kafka that wait for their job's lane, their started mark to be committed, or capacity",
            m.runs_waiting.clone(),
        );
        registry.register(
            "capacity_in_use",
            "Handlers running now",
            m.capacity_in_use.clone(),
        );
        registry.register(
            "capacity",
            "Handlers this worker runs at once at most",
            m.capacity.clone(),
        );
        registry.register(
            "consumer_lag",
            "Records of an assigned partition past the group's committed offset (partition end minus committed)",
            m.consumer_lag.clone(),
        );
        registry.register(
            "consumer_fetch_lag",
            "Records of an assigned partition not fetched yet (partition end minus fetch position)",
            m.fetch_lag.clone(),
        );
        registry.register_with_unit(
            "commit_round_duration",
            "Duration of a commit round that had progress to commit (progress records and offsets)",
            Unit::Seconds,
            m.commit_duration.clone(),
        );
        registry.register(
            "commit_rounds",
            "Commit rounds that had progress to commit, by outcome",
            m.commit_rounds.clone(),
        );
        registry.register(
            "rebalances",
            "Consumer group rebalances seen (partitions assigned or revoked)",
            m.rebalances.clone(),
        );
        registry.register(
            "dlq_records",
            "Records this worker sent to the dead-letter topic",
            m.dlq_records.clone(),
        );
        registry.register(
            "progress_unknown_partitions",
            "Partitions taken over whose earlier owners' progress could not be read after every retry: their triggers from the committed offset on run again",
            m.progress_unknown.clone(),
        );
        for register in extra {
            register(&mut registry);
        }
        WorkerMetrics { registry, ..m }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }

    /// Counts a rebalance event (`assign`, `revoke` or `error`).
    pub(crate) fn rebalance(&self, kind: &str) {
        self.rebalances
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a finished commit round.
    pub(crate) fn commit_round(&self, took: Duration, ok: bool) {
        self.commit_duration.observe(took.as_secs_f64());
        let outcome = if ok { "ok" } else { "failed" };
        self.commit_rounds
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// A run waits for its turn until the guard is dropped.
    pub(crate) fn waiting(self: &Arc<Self>, job_type: &str) -> GaugeGuard {
        GaugeGuard::new(self.runs_waiting.get_or_create_owned(&JobTypeLabel {
            job_type: job_type.to_owned(),
        }))
    }

    /// A handler holds a capacity slot until the guard is dropped.
    pub(crate) fn running(&self) -> GaugeGuard {
        GaugeGuard::new(self.capacity_in_use.clone())
    }

    /// Sets the lag gauges from librdkafka's statistics of the trigger consumer: one series per
    /// assigned partition, dropped when the partition goes.
    pub(crate) fn read_stats(&self, stats: &Statistics) {
        let mut now = Vec::new();
        for (topic, t) in &stats.topics {
            for (partition, p) in &t.partitions {
                // librdkafka lists an internal `-1` partition, partitions it only knows of
                // (`none`) and partitions this member no longer holds (`stopping`, `stopped`).
                if *partition < 0 || !fetching(&p.fetch_state) {
                    continue;
                }
                let labels = PartitionLabels {
                    topic: topic.clone(),
                    partition: *partition,
                };
                // `consumer_lag` is librdkafka's end − committed; −1 until both are known.
                if p.consumer_lag >= 0 {
                    self.consumer_lag.get_or_create(&labels).set(p.consumer_lag);
                } else if p.hi_offset >= 0 && p.committed_offset < 0 && p.lo_offset >= 0 {
                    // Nothing committed yet: everything retained is behind.
                    let behind = p.hi_offset - p.lo_offset;
                    self.consumer_lag.get_or_create(&labels).set(behind);
                }
                if p.hi_offset >= 0 && p.app_offset >= 0 {
                    let behind = (p.hi_offset - p.app_offset).max(0);
                    self.fetch_lag.get_or_create(&labels).set(behind);
                }
                now.push(labels);
            }
        }
        let mut held = lock(&self.lag_series);
        for gone in held.iter().filter(|l| !now.contains(l)) {
            self.consumer_lag.remove(gone);
            self.fetch_lag.remove(gone);
        }
        *held = now;
    }
}

/// Whether librdkafka's fetch state of a partition is one of an assigned partition: being
/// fetched, or having its start offset looked up or validated.
fn fetching(state: &str) -> bool {
    !matches!(state, "none" | "stopping" | "stopped")
}

/// Increments a gauge while alive.
pub(crate) struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves `GET /metrics` and `GET /healthz` on `listener` until `stop`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<WorkerMetrics>,
    stop: CancellationToken,
) {
    use axum::http::header;
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = Arc::clone(&metrics);
                async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.encode()) }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a: SocketAddr| a.to_string());
    tracing::info!("metrics on http://{addr}/metrics");
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "the metrics listener stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_carries_the_group_and_counters_end_in_total() {
        let m = Arc::new(WorkerMetrics::new("billing", 4));
        m.runs_started
            .get_or_create(&JobTypeLabel {
                job_type: "demo.echo".into(),
            })
            .inc();
        let waiting = m.waiting("demo.echo");
        let running = m.running();
        m.commit_round(Duration::from_millis(3), true);
        let text = m.encode();
        assert!(
            text.contains(
                "cadenza_worker_runs_started_total{group=\"billing\",job_type=\"demo.echo\"} 1"
            ),
            "{text}"
        );
        assert!(text
            .contains("cadenza_worker_runs_waiting{group=\"billing\",job_type=\"demo.echo\"} 1"));
        assert!(text.contains("cadenza_worker_capacity_in_use{group=\"billing\"} 1"));
        assert!(text.contains("cadenza_worker_capacity{group=\"billing\"} 4"));
        assert!(
            text.contains("cadenza_worker_commit_rounds_total{group=\"billing\",outcome=\"ok\"} 1")
        );
        drop((waiting, running));
        let text = m.encode();
        assert!(text
            .contains("cadenza_worker_runs_waiting{group=\"billing\",job_type=\"demo.echo\"} 0"));
        assert!(text.contains("cadenza_worker_capacity_in_use{group=\"billing\"} 0"));
        assert!(text.ends_with("# EOF\n"));
    }

    fn stats(partitions: &[(i32, &str, i64)]) -> Statistics {
        let mut topic = rdkafka::statistics::Topic::default();
        for &(partition, state, lag) in partitions {
            topic.partitions.insert(
                partition,
                rdkafka::statistics::Partition {
                    partition,
                    fetch_state: state.to_owned(),
                    consumer_lag: lag,
                    hi_offset: 10,
                    committed_offset: 10 - lag,
                    app_offset: 10,
                    ..Default::default()
                },
            );
        }
        let mut stats = Statistics::default();
        stats.topics.insert("t".to_owned(), topic);
        stats
    }

    #[test]
    fn lag_is_reported_for_the_partitions_held_now_only() {
        let m = WorkerMetrics::new("g", 1);
        m.read_stats(&stats(&[
            (-1, "none", -1),
            (0, "active", 2),
            (1, "active", 0),
        ]));
        let text = m.encode();
        assert!(
            text.contains("cadenza_worker_consumer_lag{group=\"g\",topic=\"t\",partition=\"0\"} 2")
        );
        assert!(text.contains("partition=\"1\"} 0"), "{text}");
        assert!(!text.contains("partition=\"-1\""), "{text}");
        // A rebalance took partition 1 away: librdkafka still lists it, stopped.
        m.read_stats(&stats(&[(0, "active", 0), (1, "stopped", 5)]));
        let text = m.encode();
        assert!(
            text.contains("cadenza_worker_consumer_lag{group=\"g\",topic=\"t\",partition=\"0\"} 0")
        );
        assert!(!text.contains("partition=\"1\""), "{text}");
    }
}
