//! [`Delivery`]: one offset taken from an assigned partition, and a run's only handle on the
//! offset tracker.
//!
//! Whoever handles the message moves its delivery along the marks of the protocol (see
//! [`tracker`](super::tracker)): [`Delivery::mark_started`] before a handler runs,
//! [`Delivery::mark_reporting`] before the `finished` event is published, [`Delivery::finish`]
//! once it is delivered (or once the message needed nothing). Dropping a delivery without
//! finishing it hands the offset back: the partition's next owner handles it again.

use std::sync::{Arc, Mutex};

use cadenza_schemas::ReportingOffset;
use tokio_util::sync::CancellationToken;

use super::store::ProgressSignal;
use super::tracker::{AssignmentEpoch, Durability, OffsetTracker, PartitionTokens, Prior};
use super::TopicPartition;
use crate::lock;

/// Takes offsets from assigned partitions: the shared offset tracker, and the signal through
/// which deliveries wait for a commit round.
#[derive(Debug, Clone)]
pub(crate) struct Deliveries {
    offsets: Arc<Mutex<OffsetTracker>>,
    signal: Arc<ProgressSignal>,
}

impl Deliveries {
    pub(crate) fn new(offsets: Arc<Mutex<OffsetTracker>>, signal: Arc<ProgressSignal>) -> Self {
        Self { offsets, signal }
    }

    /// The message at `offset` of `tp` was received. `None` when the partition is not assigned
    /// here (the message must then be left alone: its owner will process it); else its delivery
    /// and what earlier owners of the partition left for it.
    pub(crate) fn take(
        &self,
        tp: TopicPartition,
        offset: i64,
        traceparent: Option<String>,
    ) -> Option<(Delivery, Prior)> {
        let begun = lock(&self.offsets).begin(&tp, offset)?;
        let delivery = Delivery {
            tp,
            offset,
            epoch: begun.epoch,
            tokens: begun.tokens,
            traceparent,
            offsets: Arc::clone(&self.offsets),
            signal: Arc::clone(&self.signal),
        };
        Some((delivery, begun.prior))
    }
}

/// Where a trigger came from, and the handle through which its offset moves in the tracker.
/// Dropping it tells the tracker the offset's task is over (finished or handed back).
#[derive(Debug)]
pub(crate) struct Delivery {
    pub tp: TopicPartition,
    pub offset: i64,
    /// The partition's assignment the offset was taken in: marks of an earlier one are ignored.
    epoch: AssignmentEpoch,
    /// Cancelled when the partition is being revoked (hand back what has not started) and when
    /// it is gone (abandon what still runs).
    pub tokens: PartitionTokens,
    /// The W3C trace context of the trigger, forwarded on the result events.
    pub traceparent: Option<String>,
    offsets: Arc<Mutex<OffsetTracker>>,
    signal: Arc<ProgressSignal>,
}

impl Delivery {
    /// The partition's assignment the offset was taken in.
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> AssignmentEpoch {
        self.epoch
    }

    /// The run is about to start with `attempt`: mark it `Started` and wait until the mark is
    /// durable, so the next owner knows it may have run (→ `attempt + 1`). False if the
    /// partition is being revoked (or the worker stops taking triggers) first: hand it back.
    pub(crate) async fn mark_started(&self, attempt: u32) -> bool {
        let marked = lock(&self.offsets).start(&self.tp, self.offset, self.epoch, attempt);
        match marked {
            Some(version) => self.durable(version, &self.tokens.revoking).await,
            None => false,
        }
    }

    /// The run's result is about to be published: mark it `Reporting` (with the verdict) and
    /// wait until the mark is durable, so the next owner publishes it again instead of running
    /// the trigger again. False if the partition is gone first: the next owner runs it again.
    pub(crate) async fn mark_reporting(&self, report: ReportingOffset) -> bool {
        let marked = lock(&self.offsets).report(&self.tp, self.epoch, report);
        match marked {
            Some(version) => self.durable(version, &self.tokens.dropped).await,
            None => false,
        }
    }

    /// The message is completely handled (result delivered, DLQ record delivered, or nothing to
    /// do): mark it `Finished`, for the committer to commit. Ignored when the partition was
    /// revoked since it was taken.
    pub(crate) fn finish(self) {
        lock(&self.offsets).finish(&self.tp, self.offset, self.epoch);
    }

    /// Wait until `version` of the partition is durable. False if the partition was revoked or
    /// `stop` fired first.
    async fn durable(&self, version: u64, stop: &CancellationToken) -> bool {
        let mut committed = self.signal.committed.subscribe();
        loop {
            match lock(&self.offsets).durability(&self.tp, self.epoch, version) {
                Durability::Durable => return true,
                Durability::Gone => return false,
                Durability::Pending => {}
            }
            self.signal.wake.notify_one();
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                changed = committed.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                }
            }
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        lock(&self.offsets).end(&self.tp, self.epoch);
    }
}
