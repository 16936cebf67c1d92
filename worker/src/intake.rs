//! The intake: the consume loop over the trigger topics and the classification of each message.
//!
//! Each message is taken from the progress tracker ([`Deliveries::take`]: what earlier owners
//! left for its offset decides first), then classified: a fence is skipped, a record that cannot
//! be used goes to the DLQ, a trigger goes to its job's lane ([`RunEnv::dispatch`]). While too
//! many triggers are in flight the loop takes no message; when they do not fall to half within a
//! short grace, it pauses its partitions, and resumes them at half.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{
    CancelMessage, JobType, TriggerMessage, TriggerRecord, HEADER_RECORD, HEADER_TRACEPARENT,
};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::types::RDKafkaErrorCode;
use tokio_util::sync::CancellationToken;

use crate::dlq::{dlq_message, DlqProducer, Origin};
use crate::handler::Handler;
use crate::progress::{Deliveries, Delivery, Prior, TopicPartition};
use crate::rebalance::{is_unknown_topic, ConsumptionPaused, TriggerConsumer};
use crate::run::RunEnv;
use crate::Throttle;

/// How long the consume loop waits, without pausing its partitions, for the triggers in flight
/// to fall to half the limit before it pauses them.
const FULL_GRACE: Duration = Duration::from_millis(500);

/// A trigger record larger than this goes to the DLQ unread.
pub(crate) const MAX_TRIGGER_BYTES: usize = 1024 * 1024;

/// Whether a trigger may have run on an earlier owner of its partition.
#[derive(Debug, Clone, Copy)]
enum Redelivered {
    No,
    /// It started there with this attempt and did not finish.
    Started(u32),
    /// Unknown: the partition's progress record could not be read.
    Unknown,
}

impl Redelivered {
    /// The attempt to run it as, given the trigger's own.
    fn attempt(self, published: u32) -> u32 {
        match self {
            Self::No => published,
            Self::Started(a) => a.saturating_add(1),
            Self::Unknown => published.saturating_add(1),
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
    /// Takes each received offset from the progress tracker.
    pub deliveries: Deliveries,
    pub env: Arc<RunEnv>,
    /// Trigger topic name → job type and handler.
    pub routes: HashMap<String, Route>,
    pub dlq: DlqProducer,
    pub reporter: String,
    pub errors: Throttle,
    /// Shared with the rebalance callbacks, which apply it to partitions they assign.
    pub paused: ConsumptionPaused,
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
    /// A well-formed trigger of a job type this worker has no handler for: recorded `failed`.
    Unserved(Box<TriggerMessage>),
    /// A trigger to run.
    Run(Box<TriggerMessage>),
    /// An operator cancels a run published earlier on this partition.
    Cancel(CancelMessage),
}

/// Classify a message of `topic`, whose handler serves `expected` (None: no handler).
pub(crate) fn classify(
    expected: Option<&JobType>,
    record_header: Option<&[u8]>,
    payload: Option<&[u8]>,
) -> Classified {
    if record_header == Some(b"fence".as_slice()) {
        return Classified::Skip;
    }
    let Some(payload) = payload else {
        return Classified::Dlq("empty payload (expected a trigger record)".to_owned());
    };
    if payload.len() > MAX_TRIGGER_BYTES {
        return Classified::Dlq(format!(
            "oversized trigger record: {} bytes (at most {MAX_TRIGGER_BYTES})",
            payload.len()
        ));
    }
    match serde_json::from_slice::<TriggerRecord>(payload) {
        Err(e) => Classified::Dlq(format!("not a trigger record: {e}")),
        Ok(TriggerRecord::Fence(_)) => Classified::Skip,
        Ok(TriggerRecord::Cancel(c)) => Classified::Cancel(c),
        Ok(TriggerRecord::Trigger(t)) if Some(&t.job_type) != expected => {
            Classified::Unserved(Box::new(t))
        }
        Ok(TriggerRecord::Trigger(t)) => Classified::Run(Box::new(t)),
    }
}

impl Intake {
    /// Consume until `shutdown`. Returns as soon as it is cancelled; the caller drains.
    pub(crate) async fn run(&self, shutdown: &CancellationToken) {
        loop {
            let paused = self.paused.get();
            let received = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.env.in_flight.below_half(), if paused => {
                    self.set_paused(false);
                    continue;
                }
                m = self.consumer.recv() => m.map(|m| m.detach()),
            };
            match received {
                Ok(m) => self.handle(m),
                Err(e) => self.on_error(e),
            }
            if self.env.in_flight.is_full() && !self.paused.get() {
                // Runs that drain within the grace are waited for without pausing: librdkafka
                // fetches a resumed partition again only when its broker thread next wakes up,
                // up to a second later, so a pause costs more than a short wait. The consumer's
                // callbacks (a rebalance) wait meanwhile, and its prefetch queue stays bounded.
                let drained = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    d = tokio::time::timeout(FULL_GRACE, self.env.in_flight.below_half()) => d.is_ok(),
                };
                if !drained {
                    self.set_paused(true);
                }
            } else if self.paused.get() && self.env.in_flight.is_full() {
                // Also re-pauses partitions assigned since the last pause.
                self.set_paused(true);
            }
        }
    }

    /// While the worker drains: keep serving the consumer's callbacks (a rebalance must not
    /// wait for this member), take no message, until `stop`.
    pub(crate) async fn idle(&self, stop: &CancellationToken) {
        self.set_paused(true);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                m = self.consumer.recv() => {
                    if m.is_ok() {
                        // A partition assigned meanwhile: pause it too; the message stays
                        // uncommitted for its next owner.
                        self.set_paused(true);
                    }
                }
            }
        }
    }

    fn set_paused(&self, pause: bool) {
        self.paused.set(pause);
        let result = self.consumer.assignment().and_then(|tpl| {
            if pause {
                self.consumer.pause(&tpl)
            } else {
                self.consumer.resume(&tpl)
            }
        });
        match result {
            Ok(()) if pause => {
                tracing::debug!(in_flight = self.env.in_flight.count(), "consumption paused")
            }
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

    fn served(&self) -> String {
        let mut types: Vec<&str> = self.routes.values().map(|r| r.job_type.as_str()).collect();
        types.sort_unstable();
        types.join(", ")
    }

    /// Classify one message. Never panics on input.
    fn handle(&self, m: OwnedMessage) {
        let tp = TopicPartition::new(m.topic(), m.partition());
        let offset = m.offset();
        let traceparent =
            header(&m, HEADER_TRACEPARENT).map(|v| String::from_utf8_lossy(v).into_owned());
        let Some((delivery, prior)) = self.deliveries.take(tp, offset, traceparent) else {
            tracing::debug!(
                topic = m.topic(),
                partition = m.partition(),
                offset,
                "message from a partition not assigned here; left for its owner"
            );
            return;
        };
        let redelivered = match prior {
            Prior::Fresh => Redelivered::No,
            Prior::Started { attempt } => Redelivered::Started(attempt),
            Prior::Unknown => Redelivered::Unknown,
            Prior::Again => {
                if self.errors.allow("delivered again") {
                    tracing::warn!(topic = %delivery.tp.topic, partition = delivery.tp.partition, offset, "delivered again within the same assignment; ignored (the first delivery is handled); logged once a minute");
                }
                return;
            }
            Prior::Finished => {
                tracing::debug!(topic = %delivery.tp.topic, partition = delivery.tp.partition, offset, "finished by an earlier owner of the partition; skipped");
                delivery.finish();
                return;
            }
            Prior::Reporting(report) => {
                tracing::info!(trigger_id = %report.trigger_id, offset, "an earlier owner was reporting this run's result; publishing it again instead of running it");
                self.env.republish(delivery, *report);
                return;
            }
        };
        let route = self.routes.get(&delivery.tp.topic);
        match classify(
            route.map(|r| &r.job_type),
            header(&m, HEADER_RECORD),
            m.payload(),
        ) {
            Classified::Skip => delivery.finish(),
            Classified::Cancel(c) => {
                // Nothing to run: the record is done once read. The run it names is earlier on
                // this partition, so if this worker holds it, it is in a lane now.
                let held = self.env.lanes.cancel(c.job_id, c.trigger_id, &c.by);
                tracing::info!(trigger_id = %c.trigger_id, by = %c.by, held, "cancel requested");
                delivery.finish();
            }
            Classified::Dlq(reason) => self.to_dlq(delivery, &m, reason),
            Classified::Unserved(trigger) => {
                let attempt = redelivered.attempt(trigger.attempt);
                let reason = format!(
                    "no handler for job type {:?} on worker {} (it serves: {}; the trigger came on topic {}): check the deployment's --serve",
                    trigger.job_type.as_str(),
                    self.reporter,
                    self.served(),
                    delivery.tp.topic
                );
                tracing::warn!(trigger_id = %trigger.trigger_id, %reason, "trigger recorded failed");
                self.env.reject(delivery, *trigger, attempt, reason);
            }
            Classified::Run(trigger) => match route {
                Some(route) => {
                    let attempt = redelivered.attempt(trigger.attempt);
                    match redelivered {
                        Redelivered::No => {}
                        Redelivered::Started(_) => {
                            tracing::info!(trigger_id = %trigger.trigger_id, offset, attempt, "redelivered: the run started on an earlier owner and did not finish; running it again");
                        }
                        Redelivered::Unknown => {
                            tracing::warn!(trigger_id = %trigger.trigger_id, offset, attempt, "the partition's progress could not be read: running the trigger as a new attempt (an earlier owner may have run it)");
                        }
                    }
                    self.env
                        .dispatch(delivery, *trigger, attempt, Arc::clone(&route.handler))
                }
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
        self.env.metrics.dlq_records.inc();
        let msg = dlq_message(&origin, reason, m.payload(), &self.reporter);
        let env = Arc::clone(&self.env);
        let dlq = self.dlq.clone();
        let guard = env.in_flight.enter();
        self.env.tasks.spawn(async move {
            if env
                .retry_until(&delivery.tokens.dropped, "producing to the DLQ", || {
                    dlq.send(&msg)
                })
                .await
            {
                delivery.finish();
            }
            drop(guard);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_fences_garbage_strangers_and_triggers() {
        let jt = JobType::parse("t.x").unwrap();
        let trigger = crate::testing::trigger(0);
        let body = serde_json::to_vec(&TriggerRecord::Trigger(trigger.clone())).unwrap();
        assert_eq!(
            classify(Some(&jt), Some(b"trigger"), Some(&body)),
            Classified::Run(Box::new(trigger.clone()))
        );
        // The fence header is enough, whatever the body.
        assert_eq!(
            classify(Some(&jt), Some(b"fence"), Some(b"junk")),
            Classified::Skip
        );
        let fence = br#"{"type":"fence","admin_id":"a","shard":1,"epoch":2,"nonce":"n","written_at":"2026-01-01T00:00:00Z"}"#;
        assert_eq!(classify(Some(&jt), None, Some(fence)), Classified::Skip);
        let Classified::Dlq(reason) = classify(Some(&jt), None, Some(b"{not json")) else {
            panic!("garbage must go to the DLQ");
        };
        assert!(reason.starts_with("not a trigger record: "), "{reason}");
        assert!(matches!(
            classify(Some(&jt), None, None),
            Classified::Dlq(_)
        ));
        let other = JobType::parse("t.y").unwrap();
        // Well-formed but not served here: recorded failed, not dead-lettered.
        assert_eq!(
            classify(Some(&other), None, Some(&body)),
            Classified::Unserved(Box::new(trigger.clone()))
        );
        assert_eq!(
            classify(None, None, Some(&body)),
            Classified::Unserved(Box::new(trigger.clone()))
        );
        let huge = vec![b' '; MAX_TRIGGER_BYTES + 1];
        let Classified::Dlq(reason) = classify(Some(&jt), None, Some(&huge)) else {
            panic!("an oversized record must go to the DLQ");
        };
        assert!(reason.starts_with("oversized trigger record"), "{reason}");
    }
}
