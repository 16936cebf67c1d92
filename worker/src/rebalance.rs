//! The trigger consumer and its callbacks: the rebalance rule (drain, then commit, before
//! partitions go; load their progress when they come), the heartbeat's view of the assignment,
//! and librdkafka's errors and statistics.
//!
//! The progress protocol itself is in [`progress`](crate::progress); these callbacks only tell it
//! when partitions come and go.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, TopicPartitionList};

use crate::config::{consumer_client_config, WorkerConfig};
use crate::heartbeat::Assignment;
use crate::metrics::WorkerMetrics;
use crate::progress::{OffsetTracker, Progress, TopicPartition};
use crate::{lock, Throttle};

/// The trigger consumer.
pub(crate) type TriggerConsumer = StreamConsumer<ConsumerCtx>;

/// Run `f`, which blocks, on a runtime worker thread without starving the runtime's other tasks
/// (runs must be able to finish while a rebalance callback waits for them).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Consumer callbacks: keep the offset tracker and the heartbeat's assignment in step with
/// rebalances, drain and commit before partitions go, load their progress when they come, and
/// log errors through `tracing`.
pub(crate) struct ConsumerCtx {
    offsets: Arc<Mutex<OffsetTracker>>,
    progress: Arc<Progress>,
    assignment: Assignment,
    revoke_timeout: Duration,
    errors: Throttle,
    metrics: Arc<WorkerMetrics>,
    paused: ConsumptionPaused,
}

/// Whether the intake wants consumption paused (it is full, or the worker drains). Partitions
/// assigned in a rebalance are paused or resumed to match: librdkafka keeps a partition's pause
/// across a rebalance that revokes and assigns it again, and the intake may have resumed its
/// old assignment meanwhile (the revoke handed its runs back), which would leave a partition
/// it got back paused for good.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumptionPaused(Arc<AtomicBool>);

impl ConsumptionPaused {
    pub(crate) fn set(&self, paused: bool) {
        self.0.store(paused, Ordering::SeqCst);
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl ConsumerCtx {
    pub(crate) fn new(
        offsets: Arc<Mutex<OffsetTracker>>,
        progress: Arc<Progress>,
        assignment: Assignment,
        revoke_timeout: Duration,
        metrics: Arc<WorkerMetrics>,
        paused: ConsumptionPaused,
    ) -> Self {
        Self {
            offsets,
            progress,
            assignment,
            revoke_timeout,
            errors: Throttle::new(Duration::from_secs(60)),
            metrics,
            paused,
        }
    }
}

fn describe(tpl: &TopicPartitionList) -> String {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for e in tpl.elements() {
        by_topic
            .entry(e.topic().to_owned())
            .or_default()
            .push(e.partition());
    }
    if by_topic.is_empty() {
        return "none".to_owned();
    }
    by_topic
        .iter()
        .map(|(t, ps)| format!("{t}{ps:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether librdkafka reports a topic (or partition) that does not exist (yet).
pub(crate) fn is_unknown_topic(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

fn partitions(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl ClientContext for ConsumerCtx {
    fn error(&self, error: KafkaError, reason: &str) {
        if !self.errors.allow(&crate::error_key(&error, reason)) {
            return;
        }
        if is_unknown_topic(&error) {
            // Not fatal: the subscription picks the topic up once the admin creates it.
            tracing::warn!(reason, "a trigger topic does not exist yet; waiting for it");
        } else {
            tracing::warn!(%error, reason, "kafka consumer error");
        }
    }

    fn stats(&self, statistics: rdkafka::Statistics) {
        self.metrics.read_stats(&statistics);
    }
}

impl ConsumerCtx {
    /// The rebalance rule: runs of revoked partitions that have not started are handed back at
    /// once; running ones get up to the revoke timeout to finish and report; what still runs
    /// then is abandoned unreported (its `started` mark is durable, so the partition's next
    /// owner runs it again with `attempt + 1`). Then the partitions' records are committed.
    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = partitions(tpl);
        let unfinished: usize = {
            let mut offsets = lock(&self.offsets);
            offsets.start_revoking(&tps);
            tps.iter().map(|tp| offsets.unfinished(tp)).sum()
        };
        let started = Instant::now();
        let left = blocking(|| loop {
            let active = lock(&self.offsets).active(&tps);
            if active == 0 || started.elapsed() >= self.revoke_timeout {
                return active;
            }
            std::thread::sleep(Duration::from_millis(10));
        });
        if left > 0 {
            tracing::warn!(
                runs = left,
                revoke_timeout_ms = self.revoke_timeout.as_millis() as u64,
                "runs of revoked partitions still running: abandoning them (their next owner runs them again)"
            );
        }
        let committed = blocking(|| self.progress.commit_revoked(consumer, &tps));
        tracing::info!(
            partitions = %describe(tpl),
            unfinished,
            drained_ms = started.elapsed().as_millis() as u64,
            committed = committed.0,
            "partitions revoked"
        );
        if !committed.1 {
            tracing::warn!(
                "commit before revocation failed; the next owner may run finished triggers again"
            );
        }
    }
}

impl ConsumerContext for ConsumerCtx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.metrics.rebalance("revoke");
                self.revoke(consumer, tpl);
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(error) => {
                self.metrics.rebalance("error");
                tracing::warn!(%error, "rebalance error");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.metrics.rebalance("assign");
            let tps = partitions(tpl);
            let (term, inherited) = blocking(|| self.progress.assign(consumer, &tps));
            let paused = self.paused.get();
            let set = if paused {
                consumer.pause(tpl)
            } else {
                consumer.resume(tpl)
            };
            if let Err(error) = set {
                tracing::warn!(%error, paused, "cannot pause/resume the assigned partitions");
            }
            tracing::info!(partitions = %describe(tpl), inherited, term, paused, "partitions assigned");
        }
        // Whatever the protocol (eager or cooperative), the heartbeat reports the full current
        // assignment.
        match consumer.assignment() {
            Ok(tpl) => {
                let mut map: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for e in tpl.elements() {
                    map.entry(e.topic().to_owned())
                        .or_default()
                        .push(e.partition());
                }
                for ps in map.values_mut() {
                    ps.sort_unstable();
                }
                self.assignment.set(map);
            }
            Err(error) => tracing::warn!(%error, "cannot read the consumer's assignment"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => tracing::trace!(partitions = %describe(offsets), "offsets committed"),
            // Nothing to commit is not an error worth reporting.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => tracing::debug!(%error, "offset commit failed"),
        }
    }
}

/// Create the trigger consumer (not yet subscribed).
pub(crate) fn create(config: &WorkerConfig, ctx: ConsumerCtx) -> KafkaResult<TriggerConsumer> {
    consumer_client_config(config).create_with_context(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_partition_lists() {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("b", 1);
        tpl.add_partition("a", 2);
        tpl.add_partition("a", 0);
        assert_eq!(describe(&tpl), "a[2, 0] b[1]");
        assert_eq!(describe(&TopicPartitionList::new()), "none");
    }
}
