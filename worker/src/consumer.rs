//! The consume loop over the trigger topics, the consumer's rebalance callbacks, and the
//! committer that turns the offset tracker's positions into Kafka commits.
//!
//! Each message is classified at once: a fence is skipped, a record that cannot be used goes to
//! the DLQ, a trigger goes to its job's lane ([`RunEnv::dispatch`]). The consumer pauses its
//! partitions while too many triggers are in flight and resumes at half.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cadenza_schemas::{JobType, TriggerMessage, TriggerRecord, HEADER_RECORD, HEADER_TRACEPARENT};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::config::{consumer_client_config, WorkerConfig};
use crate::dlq::{dlq_message, DlqProducer, Origin};
use crate::handler::Handler;
use crate::heartbeat::Assignment;
use crate::offsets::{OffsetTracker, TopicPartition};
use crate::run::{Delivery, RunEnv};
use crate::{lock, Throttle};

/// The trigger consumer.
pub(crate) type TriggerConsumer = StreamConsumer<ConsumerCtx>;

/// Consumer callbacks: keep the offset tracker and the heartbeat's assignment in step with
/// rebalances, commit what is finished before partitions go, and log errors through `tracing`.
pub(crate) struct ConsumerCtx {
    offsets: Arc<Mutex<OffsetTracker>>,
    assignment: Assignment,
    errors: Throttle,
}

impl ConsumerCtx {
    pub(crate) fn new(offsets: Arc<Mutex<OffsetTracker>>, assignment: Assignment) -> Self {
        Self {
            offsets,
            assignment,
            errors: Throttle::new(Duration::from_secs(60)),
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

fn is_unknown_topic(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

fn to_tpl(positions: &[(TopicPartition, i64)]) -> KafkaResult<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for (tp, pos) in positions {
        tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*pos))?;
    }
    Ok(tpl)
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
}

impl ConsumerContext for ConsumerCtx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let mut unfinished = 0;
                let finished: Vec<_> = {
                    let mut offsets = lock(&self.offsets);
                    tpl.elements()
                        .iter()
                        .filter_map(|e| {
                            let tp = TopicPartition::new(e.topic(), e.partition());
                            unfinished += offsets.unfinished(&tp);
                            offsets.revoke(&tp).map(|pos| (tp, pos))
                        })
                        .collect()
                };
                tracing::info!(partitions = %describe(tpl), unfinished, "partitions revoked");
                // Commit what finished before the partitions go, so their next owner does not
                // run it again. Runs still in flight for them will run again there (the
                // rebalance drain is future work).
                if !finished.is_empty() {
                    match to_tpl(&finished).and_then(|t| consumer.commit(&t, CommitMode::Sync)) {
                        Ok(()) => tracing::info!(
                            positions = ?finished.iter().map(|(tp, p)| format!("{}[{}]@{p}", tp.topic, tp.partition)).collect::<Vec<_>>(),
                            "committed before revocation"
                        ),
                        Err(error) => tracing::warn!(%error, "commit before revocation failed"),
                    }
                }
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(error) => tracing::warn!(%error, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut offsets = lock(&self.offsets);
            for e in tpl.elements() {
                offsets.assign(TopicPartition::new(e.topic(), e.partition()));
            }
            tracing::info!(partitions = %describe(tpl), "partitions assigned");
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
                *lock(&self.assignment) = map;
            }
            Err(error) => tracing::warn!(%error, "cannot read the consumer's assignment"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => tracing::trace!(partitions = %describe(offsets), "offsets committed"),
            // Nothing to commit is not an error worth reporting.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(%error, "offset commit failed; committing again next round");
                lock(&self.offsets).forget_committed();
            }
        }
    }
}

/// Create the trigger consumer (not yet subscribed).
pub(crate) fn create(config: &WorkerConfig, ctx: ConsumerCtx) -> KafkaResult<TriggerConsumer> {
    consumer_client_config(config).create_with_context(ctx)
}

/// Commits the tracker's positions: asynchronously every `interval` while running, synchronously
/// once at the end.
#[derive(Clone)]
pub(crate) struct Committer {
    consumer: Arc<TriggerConsumer>,
    offsets: Arc<Mutex<OffsetTracker>>,
    interval: Duration,
}

impl Committer {
    pub(crate) fn new(
        consumer: Arc<TriggerConsumer>,
        offsets: Arc<Mutex<OffsetTracker>>,
        interval: Duration,
    ) -> Self {
        Self {
            consumer,
            offsets,
            interval,
        }
    }

    /// Commit (asynchronously) every position that moved. Returns how many partitions.
    pub(crate) fn run_once(&self) -> usize {
        // The lock is held while the commit is enqueued, so a revocation (which takes it) cannot
        // slip in between and have this older commit land after its own.
        let mut offsets = lock(&self.offsets);
        let moved = offsets.to_commit();
        if moved.is_empty() {
            return 0;
        }
        match to_tpl(&moved).and_then(|t| self.consumer.commit(&t, CommitMode::Async)) {
            Ok(()) => {
                offsets.mark_committed(&moved);
                moved.len()
            }
            Err(error) => {
                tracing::warn!(%error, "offset commit failed");
                0
            }
        }
    }

    /// Commit every `interval` until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = ticker.tick() => { self.run_once(); }
            }
        }
    }

    /// Commit every known position and wait for the broker's answer (blocking: call it from
    /// `spawn_blocking`).
    pub(crate) fn commit_final(&self) {
        let positions = lock(&self.offsets).positions();
        if positions.is_empty() {
            return;
        }
        match to_tpl(&positions).and_then(|t| self.consumer.commit(&t, CommitMode::Sync)) {
            Ok(()) => {
                lock(&self.offsets).mark_committed(&positions);
                tracing::info!(partitions = positions.len(), "final offsets committed");
            }
            Err(error) => tracing::warn!(%error, "final offset commit failed"),
        }
    }
}

/// A trigger topic this worker serves.
pub(crate) struct Route {
    pub job_type: JobType,
    pub handler: Arc<dyn Handler>,
}

/// The consume loop and the classification of each message.
pub(crate) struct Intake {
    pub consumer: Arc<TriggerConsumer>,
    pub env: Arc<RunEnv>,
    /// Trigger topic name → job type and handler.
    pub routes: HashMap<String, Route>,
    pub dlq: DlqProducer,
    pub reporter: String,
    pub errors: Throttle,
}

fn header<'a>(m: &'a OwnedMessage, name: &str) -> Option<&'a [u8]> {
    m.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// What to do with a message from a trigger topic.
#[derive(Debug, PartialEq)]
pub(crate) enum Classified {
    /// A fence record: nothing to run.
    Skip,
    /// Unusable, for this reason.
    Dlq(String),
    /// A trigger to run.
    Run(Box<TriggerMessage>),
}

/// Classify a message of `topic`, whose handler serves `expected` (None: no handler).
pub(crate) fn classify(
    expected: Option<&JobType>,
    topic: &str,
    record_header: Option<&[u8]>,
    payload: Option<&[u8]>,
) -> Classified {
    if record_header == Some(b"fence".as_slice()) {
        return Classified::Skip;
    }
    let Some(expected) = expected else {
        return Classified::Dlq(format!("no handler for topic {topic}"));
    };
    let Some(payload) = payload else {
        return Classified::Dlq("empty payload (expected a trigger record)".to_owned());
    };
    match serde_json::from_slice::<TriggerRecord>(payload) {
        Err(e) => Classified::Dlq(format!("not a trigger record: {e}")),
        Ok(TriggerRecord::Fence(_)) => Classified::Skip,
        Ok(TriggerRecord::Trigger(t)) if t.job_type != *expected => Classified::Dlq(format!(
            "trigger {} has job type {:?} but arrived on the topic of {:?}",
            t.trigger_id,
            t.job_type.as_str(),
            expected.as_str()
        )),
        Ok(TriggerRecord::Trigger(t)) => Classified::Run(Box::new(t)),
    }
}

impl Intake {
    /// Consume until `shutdown`. Returns as soon as it is cancelled; the caller drains.
    pub(crate) async fn run(&self, shutdown: &CancellationToken) {
        let mut paused = false;
        loop {
            let received = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.env.in_flight.below_half(), if paused => {
                    self.set_paused(false);
                    paused = false;
                    continue;
                }
                m = self.consumer.recv() => m.map(|m| m.detach()),
            };
            match received {
                Ok(m) => self.handle(m),
                Err(e) => self.on_error(e),
            }
            if self.env.in_flight.is_full() {
                // Also re-pauses partitions assigned since the last pause.
                self.set_paused(true);
                paused = true;
            }
        }
    }

    fn set_paused(&self, pause: bool) {
        let result = self.consumer.assignment().and_then(|tpl| {
            if pause {
                self.consumer.pause(&tpl)
            } else {
                self.consumer.resume(&tpl)
            }
        });
        match result {
            Ok(()) if pause => tracing::debug!(
                in_flight = self.env.in_flight.count(),
                "too many triggers in flight: consumption paused"
            ),
            Ok(()) => tracing::debug!("consumption resumed"),
            Err(error) => tracing::warn!(%error, pause, "cannot pause/resume consumption"),
        }
    }

    fn on_error(&self, error: KafkaError) {
        let quiet = is_unknown_topic(&error)
            || matches!(
                error.rdkafka_error_code(),
                Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
            );
        if quiet {
            // The context's error callback reports these too, with more detail.
            tracing::debug!(%error, "consumer error");
        } else if self.errors.allow(&error.to_string()) {
            tracing::warn!(%error, "consumer error; continuing");
        }
    }

    /// Classify one message. Never panics on input.
    fn handle(&self, m: OwnedMessage) {
        let tp = TopicPartition::new(m.topic(), m.partition());
        let offset = m.offset();
        let Some(epoch) = lock(&self.env.offsets).begin(&tp, offset) else {
            tracing::debug!(topic = %tp.topic, partition = tp.partition, offset, "message from a partition not assigned here; left for its owner");
            return;
        };
        let delivery = Delivery {
            tp,
            offset,
            epoch,
            traceparent: header(&m, HEADER_TRACEPARENT)
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        };
        let route = self.routes.get(&delivery.tp.topic);
        match classify(
            route.map(|r| &r.job_type),
            &delivery.tp.topic,
            header(&m, HEADER_RECORD),
            m.payload(),
        ) {
            Classified::Skip => self.env.finish_offset(&delivery),
            Classified::Dlq(reason) => self.to_dlq(delivery, &m, reason),
            Classified::Run(trigger) => match route {
                Some(route) => self
                    .env
                    .dispatch(delivery, *trigger, Arc::clone(&route.handler)),
                None => self.to_dlq(delivery, &m, "no handler".to_owned()),
            },
        }
    }

    /// Send the message to the DLQ in the background; its offset finishes once delivered.
    fn to_dlq(&self, delivery: Delivery, m: &OwnedMessage, reason: String) {
        let origin = Origin {
            topic: delivery.tp.topic.clone(),
            partition: delivery.tp.partition,
            offset: delivery.offset,
        };
        tracing::warn!(topic = %origin.topic, partition = origin.partition, offset = origin.offset, %reason, "unusable message sent to the DLQ");
        let msg = dlq_message(&origin, reason, m.payload(), &self.reporter);
        let env = Arc::clone(&self.env);
        let dlq = self.dlq.clone();
        let guard = env.in_flight.enter();
        self.env.tasks.spawn(async move {
            if env
                .retry_until_abandoned("producing to the DLQ", || dlq.send(&msg))
                .await
            {
                env.finish_offset(&delivery);
            }
            drop(guard);
        });
    }
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

    #[test]
    fn classifies_fences_garbage_strangers_and_triggers() {
        let jt = JobType::parse("t.x").unwrap();
        let topic = "c.trigger.t.x";
        let trigger = crate::testing::trigger(0);
        let body = serde_json::to_vec(&TriggerRecord::Trigger(trigger.clone())).unwrap();
        assert_eq!(
            classify(Some(&jt), topic, Some(b"trigger"), Some(&body)),
            Classified::Run(Box::new(trigger.clone()))
        );
        // The fence header is enough, whatever the body.
        assert_eq!(
            classify(Some(&jt), topic, Some(b"fence"), Some(b"junk")),
            Classified::Skip
        );
        let fence = br#"{"type":"fence","admin_id":"a","shard":1,"epoch":2,"nonce":"n","written_at":"2026-01-01T00:00:00Z"}"#;
        assert_eq!(
            classify(Some(&jt), topic, None, Some(fence)),
            Classified::Skip
        );
        let Classified::Dlq(reason) = classify(Some(&jt), topic, None, Some(b"{not json")) else {
            panic!("garbage must go to the DLQ");
        };
        assert!(reason.starts_with("not a trigger record: "), "{reason}");
        assert!(matches!(
            classify(Some(&jt), topic, None, None),
            Classified::Dlq(_)
        ));
        let other = JobType::parse("t.y").unwrap();
        let Classified::Dlq(reason) = classify(Some(&other), "c.trigger.t.y", None, Some(&body))
        else {
            panic!("a trigger of another job type must go to the DLQ");
        };
        assert!(
            reason.contains("\"t.x\" but arrived on the topic of \"t.y\""),
            "{reason}"
        );
        assert!(matches!(
            classify(None, topic, None, Some(&body)),
            Classified::Dlq(_)
        ));
    }
}
