//! Per-job lanes: at most one run of a job executes at a time on a worker, and a trigger that
//! arrives while the job is busy is handled by its block strategy, as in XXL-JOB:
//!
//! * `serial_execution`: queue behind the runs already there, in arrival order;
//! * `discard_later`: if a run of the job is running or waiting, the new trigger is discarded
//!   (reported `discarded`, never started);
//! * `cover_early`: every run of the job already there (running or waiting) is cancelled (reported
//!   `cancelled`) and the new trigger runs once the cancelled run has stopped — which the executor
//!   bounds by the cancel grace period, so a handler that ignores cancellation cannot block it.
//!
//! An operator can also cancel one run ([`Lanes::cancel`], from a `cancel` record on the
//! trigger's partition): waiting, it never starts; running, its handler is cancelled.
//!
//! The decision is taken synchronously, in consumption order, by [`Lanes::admit`]; the run's task
//! then waits for its turn with [`LaneSlot::wait_turn`]. Dropping a [`LaneSlot`] leaves the lane
//! and hands the turn to the next run, whatever the reason (finished, cancelled, task aborted).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use cadenza_schemas::{BlockStrategy, JobId, RunningJob, TriggerId};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::lock;

/// All lanes of a worker.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    inner: Mutex<LanesInner>,
}

#[derive(Debug, Default)]
struct LanesInner {
    next_ticket: u64,
    lanes: HashMap<JobId, VecDeque<Entry>>,
}

/// Why a run was cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A `cover_early` trigger of the same job replaced it.
    Covered(TriggerId),
    /// An operator cancelled it (by this name).
    Operator(String),
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    trigger_id: TriggerId,
    cancel: CancellationToken,
    cause: Arc<OnceLock<Cause>>,
    /// Sent when the entry reaches the front of its lane; taken once sent.
    turn: Option<oneshot::Sender<()>>,
}

/// The lane's decision on an arriving trigger.
#[derive(Debug)]
pub(crate) enum Admission {
    /// `discard_later` and the job is busy: report `discarded`, do not run.
    Discarded {
        /// Runs of the job already running or waiting.
        busy: usize,
    },
    /// The trigger has a place in the lane.
    Admitted(LaneSlot),
}

/// A run's place in its job's lane. Dropping it leaves the lane.
#[derive(Debug)]
pub(crate) struct LaneSlot {
    lanes: Arc<Lanes>,
    job_id: JobId,
    ticket: u64,
    turn: Option<oneshot::Receiver<()>>,
    cancel: CancellationToken,
    cause: Arc<OnceLock<Cause>>,
}

/// Result of waiting for a lane's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The run is at the front of its lane: it may start.
    Go,
    /// The run was cancelled (covered) while it waited.
    Cancelled,
}

impl Lanes {
    /// Apply `strategy` to a trigger of `job_id` that just arrived.
    pub(crate) fn admit(
        self: &Arc<Self>,
        job_id: JobId,
        trigger_id: TriggerId,
        strategy: BlockStrategy,
    ) -> Admission {
        let mut inner = lock(&self.inner);
        inner.next_ticket += 1;
        let ticket = inner.next_ticket;
        let lane = inner.lanes.entry(job_id).or_default();
        match strategy {
            BlockStrategy::SerialExecution => {}
            BlockStrategy::DiscardLater => {
                if !lane.is_empty() {
                    return Admission::Discarded { busy: lane.len() };
                }
            }
            BlockStrategy::CoverEarly => {
                for e in lane.iter() {
                    // The first cause wins: a run covered twice reports the first one.
                    let _ = e.cause.set(Cause::Covered(trigger_id));
                    e.cancel.cancel();
                }
            }
        }
        let (tx, rx) = oneshot::channel();
        let cancel = CancellationToken::new();
        let cause = Arc::new(OnceLock::new());
        let turn = if lane.is_empty() {
            // Nobody ahead: the turn is ours at once.
            let _ = tx.send(());
            None
        } else {
            Some(tx)
        };
        lane.push_back(Entry {
            ticket,
            trigger_id,
            cancel: cancel.clone(),
            cause: cause.clone(),
            turn,
        });
        Admission::Admitted(LaneSlot {
            lanes: Arc::clone(self),
            job_id,
            ticket,
            turn: Some(rx),
            cancel,
            cause,
        })
    }

    /// Cancels run `trigger_id` of `job_id` if it is in its lane (waiting or running), for
    /// `by`. False when this worker does not hold it (it finished, or never came here).
    pub(crate) fn cancel(&self, job_id: JobId, trigger_id: TriggerId, by: &str) -> bool {
        let inner = lock(&self.inner);
        let Some(e) = inner
            .lanes
            .get(&job_id)
            .and_then(|l| l.iter().find(|e| e.trigger_id == trigger_id))
        else {
            return false;
        };
        let _ = e.cause.set(Cause::Operator(by.to_owned()));
        e.cancel.cancel();
        true
    }

    /// Jobs with runs in this worker (running plus waiting), by job id.
    pub(crate) fn running(&self) -> Vec<RunningJob> {
        let inner = lock(&self.inner);
        let mut out: Vec<_> = inner
            .lanes
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(job_id, l)| RunningJob {
                job_id: *job_id,
                runs: u32::try_from(l.len()).unwrap_or(u32::MAX),
            })
            .collect();
        out.sort_by_key(|r| r.job_id);
        out
    }

    fn leave(&self, job_id: JobId, ticket: u64) {
        let mut inner = lock(&self.inner);
        let Some(lane) = inner.lanes.get_mut(&job_id) else {
            return;
        };
        if let Some(pos) = lane.iter().position(|e| e.ticket == ticket) {
            lane.remove(pos);
            if pos == 0 {
                if let Some(tx) = lane.front_mut().and_then(|e| e.turn.take()) {
                    // The receiver is gone only if its slot is being dropped, which also takes
                    // this lock: it is then removed right after us.
                    let _ = tx.send(());
                }
            }
        }
        if lane.is_empty() {
            inner.lanes.remove(&job_id);
        }
    }
}

impl LaneSlot {
    /// Wait until every run ahead in the lane has left. Returns [`Turn::Cancelled`] if the run is
    /// covered first (a covered run never starts).
    pub(crate) async fn wait_turn(&mut self) -> Turn {
        let Some(rx) = self.turn.take() else {
            return if self.cancel.is_cancelled() {
                Turn::Cancelled
            } else {
                Turn::Go
            };
        };
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Turn::Cancelled,
            got = rx => match got {
                Ok(()) if !self.cancel.is_cancelled() => Turn::Go,
                // Sender dropped without sending cannot happen while our entry exists; treat it
                // (and a cover racing the turn) as cancelled rather than run out of order.
                _ => Turn::Cancelled,
            },
        }
    }

    /// The run's token: cancelled when a `cover_early` trigger replaces the run or an operator
    /// cancels it. The handler's context gets a child of it.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Why the run was cancelled, if it was.
    pub(crate) fn cause(&self) -> Option<Cause> {
        self.cause.get().cloned()
    }
}

impl Drop for LaneSlot {
    fn drop(&mut self) {
        self.lanes.leave(self.job_id, self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> LaneSlot {
        match a {
            Admission::Admitted(s) => s,
            Admission::Discarded { .. } => panic!("expected admission"),
        }
    }

    async fn is_pending(slot: &mut LaneSlot) -> bool {
        // A turn not yet given leaves the receiver pending (polled in place, not taken).
        let rx = slot.turn.as_mut().unwrap();
        matches!(futures::poll!(rx), std::task::Poll::Pending)
    }

    #[tokio::test]
    async fn serial_runs_one_at_a_time_in_order() {
        let lanes = Arc::new(Lanes::default());
        let s = BlockStrategy::SerialExecution;
        let mut a = admitted(lanes.admit(JobId(1), TriggerId(1), s));
        let mut b = admitted(lanes.admit(JobId(1), TriggerId(2), s));
        let mut c = admitted(lanes.admit(JobId(1), TriggerId(3), s));
        let mut other = admitted(lanes.admit(JobId(2), TriggerId(4), s));
        assert_eq!(a.wait_turn().await, Turn::Go);
        assert_eq!(other.wait_turn().await, Turn::Go);
        assert!(is_pending(&mut b).await && is_pending(&mut c).await);
        assert_eq!(
            lanes.running(),
            vec![
                RunningJob {
                    job_id: JobId(1),
                    runs: 3
                },
                RunningJob {
                    job_id: JobId(2),
                    runs: 1
                }
            ]
        );
        drop(a);
        assert_eq!(b.wait_turn().await, Turn::Go);
        assert!(is_pending(&mut c).await);
        drop(b);
        assert_eq!(c.wait_turn().await, Turn::Go);
        drop(c);
        drop(other);
        assert!(lanes.running().is_empty());
    }

    #[tokio::test]
    async fn discard_later_rejects_while_running_or_waiting() {
        let lanes = Arc::new(Lanes::default());
        let a = admitted(lanes.admit(JobId(1), TriggerId(1), BlockStrategy::SerialExecution));
        let b = admitted(lanes.admit(JobId(1), TriggerId(2), BlockStrategy::SerialExecution));
        assert!(matches!(
            lanes.admit(JobId(1), TriggerId(3), BlockStrategy::DiscardLater),
            Admission::Discarded { busy: 2 }
        ));
        drop(a);
        // Still one waiting (b): still discarded.
        assert!(matches!(
            lanes.admit(JobId(1), TriggerId(4), BlockStrategy::DiscardLater),
            Admission::Discarded { busy: 1 }
        ));
        drop(b);
        let mut d = admitted(lanes.admit(JobId(1), TriggerId(5), BlockStrategy::DiscardLater));
        assert_eq!(d.wait_turn().await, Turn::Go);
    }

    #[tokio::test]
    async fn cover_early_cancels_everything_ahead() {
        let lanes = Arc::new(Lanes::default());
        let mut a = admitted(lanes.admit(JobId(1), TriggerId(1), BlockStrategy::SerialExecution));
        let mut b = admitted(lanes.admit(JobId(1), TriggerId(2), BlockStrategy::SerialExecution));
        assert_eq!(a.wait_turn().await, Turn::Go);
        let mut c = admitted(lanes.admit(JobId(1), TriggerId(3), BlockStrategy::CoverEarly));
        assert!(a.token().is_cancelled());
        assert_eq!(a.cause(), Some(Cause::Covered(TriggerId(3))));
        // The waiting one never starts.
        assert_eq!(b.wait_turn().await, Turn::Cancelled);
        assert_eq!(b.cause(), Some(Cause::Covered(TriggerId(3))));
        drop(b);
        // The new one waits until the cancelled running one has stopped.
        assert!(is_pending(&mut c).await);
        drop(a);
        assert_eq!(c.wait_turn().await, Turn::Go);
        assert!(!c.token().is_cancelled());
    }

    #[tokio::test]
    async fn an_operator_cancels_one_run_waiting_or_running() {
        let lanes = Arc::new(Lanes::default());
        let s = BlockStrategy::SerialExecution;
        let mut a = admitted(lanes.admit(JobId(1), TriggerId(1), s));
        let mut b = admitted(lanes.admit(JobId(1), TriggerId(2), s));
        let mut c = admitted(lanes.admit(JobId(1), TriggerId(3), s));
        assert_eq!(a.wait_turn().await, Turn::Go);
        // Waiting: b never starts, c keeps its place.
        assert!(lanes.cancel(JobId(1), TriggerId(2), "ada"));
        assert_eq!(b.wait_turn().await, Turn::Cancelled);
        assert_eq!(b.cause(), Some(Cause::Operator("ada".into())));
        assert!(!a.token().is_cancelled() && !c.token().is_cancelled());
        drop(b);
        // Running: its token is cancelled; the next one goes once it has stopped.
        assert!(lanes.cancel(JobId(1), TriggerId(1), "ops-token"));
        assert!(a.token().is_cancelled());
        assert!(is_pending(&mut c).await);
        drop(a);
        assert_eq!(c.wait_turn().await, Turn::Go);
        // Not held here (finished, another job, unknown): nothing happens.
        assert!(!lanes.cancel(JobId(1), TriggerId(1), "ada"));
        assert!(!lanes.cancel(JobId(2), TriggerId(3), "ada"));
        assert!(!c.token().is_cancelled());
    }
}
