//! The life of one trigger on a worker, from admission to a committed offset:
//!
//! 1. the lane admits it (or discards it: `discard_later`) — synchronously, in consumption order;
//! 2. it waits for its lane's turn (a `cover_early` trigger may cancel it meanwhile; a revoked
//!    partition or a stopping worker hands it back unstarted);
//! 3. its `started` mark is made durable (see [`progress`](crate::progress)), then it waits for a
//!    capacity permit, which it holds only while its handler executes; `started` is published
//!    and the handler runs (timeout, cancellation, panics: see [`execute`]); its log lines are
//!    shipped in bounded batches while it runs (`log` events);
//! 4. its `reporting` mark (with the verdict) is made durable, then `finished` is published and
//!    its delivery awaited (retried until delivered or the run is abandoned);
//! 5. only then is the offset marked finished in the tracker, which the committer commits.
//!
//! A run that is handed back (before it started, or still running when the drain or the revoke
//! timeout ran out) publishes no `finished` event and never finishes its offset: the partition's
//! next owner runs it again, with `attempt + 1` if it had started.
//!
//! Steps 1 to 3 are the stages of `RunEnv::run_trigger` (`admitted`, `wait_turn`,
//! `mark_started`, `wait_capacity`, `run_handler`), steps 4 and 5 are `RunEnv::report`. A stage
//! that ends the run early returns either a verdict to report (step 4 follows) or a `HandBack`,
//! the one exit without a result.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{
    ReportingOffset, ResultEvent, RunFinished, RunLogLines, RunStarted, RunStatus, TriggerMessage,
    WorkerId, MAX_OUTPUT_BYTES,
};
use chrono::{DateTime, Utc};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::handler::{execute, Execution, Handler, Outcome, RunContext, RunLog};
use crate::lane::{Admission, Cause, LaneSlot, Lanes, Turn};
use crate::metrics::{FinishedLabels, GaugeGuard, JobTypeLabel, WorkerMetrics};
use crate::progress::Delivery;
use crate::results::ResultSink;
use crate::telemetry;

/// How often a running run's new log lines are shipped.
pub(crate) const LOG_SHIP_INTERVAL: Duration = Duration::from_millis(500);
/// Most bytes of log lines in one `log` event (so at most this much per interval and run).
pub(crate) const LOG_SHIP_MAX_BYTES: usize = 16 * 1024;
/// Most bytes of a message kept in a progress record.
const REPORT_MESSAGE_MAX: usize = 1024;

/// Counts triggers taken from Kafka and not finished, so the consumer can pause when too many
/// pile up (see [`WorkerConfig::max_in_flight`](crate::WorkerConfig::max_in_flight)).
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    inner: Arc<InFlightInner>,
}

#[derive(Debug)]
struct InFlightInner {
    count: AtomicUsize,
    limit: usize,
    drained: Notify,
}

/// Held while a trigger is in flight.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    inner: Arc<InFlightInner>,
}

impl InFlight {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            inner: Arc::new(InFlightInner {
                count: AtomicUsize::new(0),
                limit: limit.max(1),
                drained: Notify::new(),
            }),
        }
    }

    pub(crate) fn enter(&self) -> InFlightGuard {
        self.inner.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard {
            inner: Arc::clone(&self.inner),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.inner.count.load(Ordering::SeqCst)
    }

    /// At or above the limit: the consumer should pause.
    pub(crate) fn is_full(&self) -> bool {
        self.count() >= self.inner.limit
    }

    /// Resolves once at most half the limit is in flight (where the consumer resumes).
    pub(crate) async fn below_half(&self) {
        loop {
            let notified = self.inner.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count() <= self.inner.limit / 2 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let before = self.inner.count.fetch_sub(1, Ordering::SeqCst);
        if before.saturating_sub(1) <= self.inner.limit / 2 {
            self.inner.drained.notify_waiters();
        }
    }
}

/// Everything a run needs from its worker; shared by all run tasks.
pub(crate) struct RunEnv {
    pub worker_id: WorkerId,
    pub group: String,
    pub results: Arc<dyn ResultSink>,
    pub lanes: Arc<Lanes>,
    /// Bounds concurrent handler executions across jobs.
    pub capacity: Arc<Semaphore>,
    pub in_flight: InFlight,
    /// Cancelled when the worker stops taking triggers: runs that have not started are handed
    /// back. Parent of every partition's `revoking` token.
    pub hand_back: CancellationToken,
    /// Cancelled when the drain timed out: running runs are abandoned unreported. Parent of
    /// every partition's `dropped` token.
    pub abandon: CancellationToken,
    pub run_log_limit: usize,
    pub cancel_grace: Duration,
    /// Every run and DLQ task, so a stop can wait for them.
    pub tasks: TaskTracker,
    pub metrics: Arc<WorkerMetrics>,
}

/// The terminal status, message and output a run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    status: RunStatus,
    message: Option<String>,
    retry_requested: bool,
    /// The handler's output (succeeded runs only), at most [`MAX_OUTPUT_BYTES`] serialized.
    output: Option<serde_json::Value>,
}

impl Verdict {
    fn new(status: RunStatus, message: impl Into<String>) -> Self {
        Self {
            status,
            message: Some(message.into()),
            retry_requested: false,
            output: None,
        }
    }

    /// `succeeded`, with the handler's message and output; `failed` instead if the output is
    /// more than [`MAX_OUTPUT_BYTES`] serialized (it is never cut: the runs that follow would
    /// take a truncated output for the whole). A JSON `null` output is no output.
    fn succeeded(message: Option<String>, output: Option<serde_json::Value>) -> Self {
        let output = output.filter(|o| !o.is_null());
        if let Some(o) = &output {
            if cadenza_schemas::json_has_nul(o) {
                return Verdict::new(
                    RunStatus::Failed,
                    "the handler's output holds a NUL character (\\u0000), which cannot be stored; \
                     leave it out or encode the data (e.g. base64)",
                );
            }
            match serialized_len(o) {
                Ok(bytes) if bytes > MAX_OUTPUT_BYTES => {
                    return Verdict::new(
                        RunStatus::Failed,
                        format!(
                            "the handler's output is {bytes} bytes; at most {MAX_OUTPUT_BYTES} \
                             are kept (serialize less, or store it elsewhere and pass a reference)"
                        ),
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    return Verdict::new(
                        RunStatus::Failed,
                        format!("the handler's output cannot be serialized as JSON: {e}"),
                    );
                }
            }
        }
        Self {
            status: RunStatus::Succeeded,
            message,
            retry_requested: false,
            output,
        }
    }
}

/// The length of `value` serialized as compact JSON (as it travels in the `finished` event),
/// counted without building the text.
fn serialized_len(value: &serde_json::Value) -> Result<usize, serde_json::Error> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value)?;
    Ok(count.0)
}

fn cancelled_verdict(cause: Option<Cause>) -> Verdict {
    match cause {
        Some(Cause::Covered(id)) => Verdict::new(
            RunStatus::Cancelled,
            format!("cancelled: trigger {id} of the same job replaced this run (cover_early)"),
        ),
        Some(Cause::Operator(by)) => {
            Verdict::new(RunStatus::Cancelled, format!("cancelled by {by}"))
        }
        None => Verdict::new(RunStatus::Cancelled, "cancelled"),
    }
}

fn clip_front(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How a run ends before its handler has a result.
enum Ended {
    /// With this verdict to report, without running (discarded, or cancelled before it started).
    Verdict(Verdict),
    /// Handed back: no `finished` event, the offset is not finished; the partition's next owner
    /// runs the trigger again.
    HandBack(HandBack),
}

/// Why a run is handed back.
#[derive(Debug, Clone, Copy)]
enum HandBack {
    /// Before it started (partition revoked, or the worker stopping): the next owner runs it
    /// with the same attempt, unless its `started` mark was already recorded.
    NotStarted,
    /// While it executed (revoke or drain timeout): its `started` mark is durable, so the next
    /// owner runs it as `attempt + 1`.
    Abandoned,
}

impl HandBack {
    fn log(self) {
        match self {
            Self::NotStarted => tracing::info!(
                "handing back a run whose handler had not started (partition revoked or worker stopping); its next owner runs it, as attempt + 1 if its started mark was durable"
            ),
            Self::Abandoned => {
                tracing::warn!(
                    "run abandoned unfinished (drain or revoke timeout); it will run again"
                )
            }
        }
    }
}

/// A run whose turn came: its place in the lane and its share of the capacity, held while its
/// handler runs.
struct Turned {
    slot: LaneSlot,
    permit: OwnedSemaphorePermit,
    /// Counts the run in the capacity in use.
    running: GaugeGuard,
}

/// A run whose handler has a result.
struct Ran {
    verdict: Verdict,
    /// When it started and ended.
    times: (DateTime<Utc>, DateTime<Utc>),
    log: Option<String>,
}

/// A run's identity in the events it publishes.
struct RunIds<'a> {
    trigger: &'a TriggerMessage,
    attempt: u32,
}

impl RunEnv {
    /// Take a trigger: the lane decides now (consumption order), the run proceeds on its own task.
    pub(crate) fn dispatch(
        self: &Arc<Self>,
        mut delivery: Delivery,
        trigger: TriggerMessage,
        attempt: u32,
        handler: Arc<dyn Handler>,
    ) {
        let guard = self.in_flight.enter();
        let admission = self
            .lanes
            .admit(trigger.job_id, trigger.trigger_id, trigger.block);
        let span = tracing::info_span!(
            "run",
            otel.kind = "consumer",
            job_id = %trigger.job_id,
            trigger_id = %trigger.trigger_id,
            job_type = trigger.job_type.as_str(),
            attempt,
            partition = delivery.tp.partition,
            offset = delivery.offset,
            traceparent = delivery.traceparent.as_deref(),
            status = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        // A child of the admin's `publish` span; the results carry this span's context so the
        // admin's `ingest` spans hang under it.
        telemetry::set_parent(&span, delivery.traceparent.as_deref());
        if let Some(tp) = telemetry::traceparent(&span) {
            delivery.traceparent = Some(tp);
        }
        let env = Arc::clone(self);
        self.tasks.spawn(
            async move {
                env.run_trigger(delivery, trigger, attempt, handler, admission)
                    .await;
                drop(guard);
            }
            .instrument(span),
        );
    }

    /// Record a trigger `failed` without running it (e.g. no handler for its job type).
    pub(crate) fn reject(
        self: &Arc<Self>,
        delivery: Delivery,
        trigger: TriggerMessage,
        attempt: u32,
        reason: String,
    ) {
        let guard = self.in_flight.enter();
        let env = Arc::clone(self);
        self.tasks.spawn(async move {
            let ids = RunIds {
                trigger: &trigger,
                attempt,
            };
            env.report(
                delivery,
                &ids,
                Verdict::new(RunStatus::Failed, reason),
                None,
                None,
            )
            .await;
            drop(guard);
        });
    }

    /// Publish again the result an earlier owner of the partition was publishing.
    pub(crate) fn republish(self: &Arc<Self>, delivery: Delivery, r: ReportingOffset) {
        let guard = self.in_flight.enter();
        let env = Arc::clone(self);
        self.tasks.spawn(async move {
            let mut finished = RunFinished {
                trigger_id: r.trigger_id,
                job_id: r.job_id,
                worker_id: r.worker_id.clone(),
                group: env.group.clone(),
                partition: delivery.tp.partition,
                offset: delivery.offset,
                attempt: r.attempt,
                status: r.status,
                started_at: r.started_at,
                finished_at: r.finished_at,
                published_at: None,
                message: r.message.clone(),
                log: None,
                retry_requested: r.retry_requested,
                output: r.output.clone(),
            };
            finished.fit(cadenza_schemas::MAX_RESULT_RECORD_BYTES);
            let event = ResultEvent::Finished(finished);
            if env
                .retry_until(
                    &delivery.tokens.dropped,
                    "publishing a finished event again",
                    || {
                        env.results
                            .publish(event.clone(), delivery.traceparent.clone())
                    },
                )
                .await
            {
                delivery.finish();
            }
            drop(guard);
        });
    }

    /// Run `attempt` until it succeeds or `stop` fires; waits with exponential backoff between
    /// failures. Returns whether it succeeded.
    pub(crate) async fn retry_until<F, Fut, E>(
        &self,
        stop: &CancellationToken,
        what: &str,
        mut attempt: F,
    ) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let mut backoff = BACKOFF_START;
        loop {
            let result = tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                r = attempt() => r,
            };
            match result {
                Ok(()) => return true,
                Err(error) => {
                    tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "{what} failed");
                }
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// The life of one trigger, in the steps of this module's doc; runs inside the `run` span
    /// [`RunEnv::dispatch`] made. Each stage either passes the run on to the next, ends it with a
    /// verdict to report (discarded, cancelled), or hands it back: the one exit where the worker
    /// gives the trigger back without a result.
    async fn run_trigger(
        &self,
        delivery: Delivery,
        trigger: TriggerMessage,
        attempt: u32,
        handler: Arc<dyn Handler>,
        admission: Admission,
    ) {
        let ids = RunIds {
            trigger: &trigger,
            attempt,
        };
        let ended = async {
            // 1. Admitted by the lane (or discarded).
            let slot = self.admitted(admission, &trigger)?;
            // Counted waiting until its handler has a permit.
            let waiting = self.metrics.waiting(trigger.job_type.as_str());
            // 2. Its turn in the lane.
            let slot = self.wait_turn(&delivery, slot).await?;
            // 3. `started` durable, then a capacity permit; `started` is published and the
            //    handler runs.
            self.mark_started(&delivery, attempt).await?;
            let (turn, waited) = self.wait_capacity(&delivery, slot).await?;
            if waited {
                // The group may have moved on while this run waited for a permit, its
                // `started` mark durable: its next owner would run it too. A fresh round, which
                // the group accepts only from the partition's owner, confirms it still is
                // (holding the permit meanwhile); otherwise the run is handed back.
                self.mark_started(&delivery, attempt).await?;
            }
            drop(waiting);
            self.run_handler(&delivery, &ids, handler, turn).await
        }
        .await;
        match ended {
            // 4. and 5.: `reporting` durable, `finished` delivered, offset finished.
            Ok(Ran {
                verdict,
                times,
                log,
            }) => self.report(delivery, &ids, verdict, Some(times), log).await,
            Err(Ended::Verdict(verdict)) => self.report(delivery, &ids, verdict, None, None).await,
            Err(Ended::HandBack(why)) => why.log(),
        }
    }

    /// Step 1: the lane's decision, taken when the trigger was dispatched. A `discard_later`
    /// trigger whose job is busy ends here, `discarded`.
    fn admitted(&self, admission: Admission, trigger: &TriggerMessage) -> Result<LaneSlot, Ended> {
        match admission {
            Admission::Discarded { busy } => Err(Ended::Verdict(Verdict::new(
                RunStatus::Discarded,
                format!(
                    "discarded: job {} already has {busy} run(s) running or waiting on worker {} (discard_later)",
                    trigger.job_id, self.worker_id
                ),
            ))),
            Admission::Admitted(slot) => Ok(slot),
        }
    }

    /// Step 2: wait for the run's turn in its lane. A `cover_early` trigger or an operator may
    /// cancel it meanwhile (→ `cancelled`, its slot left before it is reported); a revoked
    /// partition or a stopping worker hands it back.
    async fn wait_turn(&self, delivery: &Delivery, mut slot: LaneSlot) -> Result<LaneSlot, Ended> {
        let turn = tokio::select! {
            biased;
            _ = delivery.tokens.revoking.cancelled() => return Err(Ended::HandBack(HandBack::NotStarted)),
            t = slot.wait_turn() => t,
        };
        if turn == Turn::Cancelled {
            return Err(Ended::Verdict(cancelled_verdict(slot.cause())));
        }
        Ok(slot)
    }

    /// Step 3, second part: wait for a capacity permit, which the run holds only while its
    /// handler executes (waiting for a commit round holds none, so durability does not limit
    /// how many handlers execute). Its `started` mark is durable already: cancelled meanwhile it
    /// reports `cancelled`; handed back, its next owner runs it as `attempt + 1`.
    async fn wait_capacity(
        &self,
        delivery: &Delivery,
        slot: LaneSlot,
    ) -> Result<(Turned, bool), Ended> {
        if let Ok(permit) = Arc::clone(&self.capacity).try_acquire_owned() {
            let turned = Turned {
                slot,
                permit,
                running: self.metrics.running(),
            };
            return Ok((turned, false));
        }
        tokio::select! {
            biased;
            _ = delivery.tokens.revoking.cancelled() => Err(Ended::HandBack(HandBack::NotStarted)),
            _ = slot.token().cancelled() => Err(Ended::Verdict(cancelled_verdict(slot.cause()))),
            p = Arc::clone(&self.capacity).acquire_owned() => match p {
                Ok(permit) => Ok((
                    Turned {
                        slot,
                        permit,
                        running: self.metrics.running(),
                    },
                    true,
                )),
                // The semaphore is never closed; if it were, the run is handed back.
                Err(_) => Err(Ended::HandBack(HandBack::NotStarted)),
            },
        }
    }

    /// Step 3, first part: the next owner must know this run may have started (→ `attempt + 1`)
    /// before it does. Handed back if the partition is revoked (or the worker stops) first.
    async fn mark_started(&self, delivery: &Delivery, attempt: u32) -> Result<(), Ended> {
        if delivery.mark_started(attempt).await {
            Ok(())
        } else {
            Err(Ended::HandBack(HandBack::NotStarted))
        }
    }

    /// Step 3, last part: publish `started`, ship the log while the handler runs (see
    /// [`execute`]), then leave the lane and give the permit back, and make the verdict. A run
    /// still executing when its partition is dropped (revoke or drain timeout) is handed back.
    async fn run_handler(
        &self,
        delivery: &Delivery,
        ids: &RunIds<'_>,
        handler: Arc<dyn Handler>,
        turn: Turned,
    ) -> Result<Ran, Ended> {
        let Turned {
            slot,
            permit,
            running,
        } = turn;
        let trigger = ids.trigger;
        let attempt = ids.attempt;
        let started_at = Utc::now();
        let started = ResultEvent::Started(RunStarted {
            trigger_id: trigger.trigger_id,
            job_id: trigger.job_id,
            worker_id: self.worker_id.clone(),
            group: self.group.clone(),
            partition: delivery.tp.partition,
            offset: delivery.offset,
            attempt,
            started_at,
            published_at: Some(trigger.published_at),
        });
        tracing::debug!(job_type = %trigger.job_type, "run started");
        let job_type = JobTypeLabel {
            job_type: trigger.job_type.as_str().to_owned(),
        };
        self.metrics.runs_started.get_or_create(&job_type).inc();
        let began = std::time::Instant::now();
        let log = RunLog::new(self.run_log_limit);
        // `started`, then the live log, from one task: they stay in order on the results
        // partition, and `finished` is only produced once that task is over.
        let stop_shipping = CancellationToken::new();
        let shipper = tokio::spawn(ship(
            Arc::clone(&self.results),
            started,
            RunLogLines {
                trigger_id: trigger.trigger_id,
                job_id: trigger.job_id,
                worker_id: self.worker_id.clone(),
                attempt,
                seq: 0,
                lines: Vec::new(),
            },
            log.clone(),
            delivery.traceparent.clone(),
            stop_shipping.clone(),
        ));

        let mut run_trigger = trigger.clone();
        run_trigger.attempt = attempt;
        let ctx = RunContext::new(&run_trigger, slot.token().child_token(), log.clone());
        let execution = execute(
            handler,
            ctx,
            slot.token(),
            self.cancel_grace,
            &delivery.tokens.dropped,
        )
        .await;
        // Before the next run of the job may start: its start is after this run's end.
        let ended_at = Utc::now();
        self.metrics
            .handler_duration
            .get_or_create(&job_type)
            .observe(began.elapsed().as_secs_f64());
        let cause = slot.cause();
        // The next run of the job and of the worker may start now.
        drop(permit);
        drop(running);
        drop(slot);

        let verdict = match execution {
            Execution::HandedBack => {
                shipper.abort();
                return Err(Ended::HandBack(HandBack::Abandoned));
            }
            Execution::Returned(Outcome::Success(message)) => Verdict::succeeded(message, None),
            Execution::Returned(Outcome::SuccessWith { output, message }) => {
                Verdict::succeeded(message, Some(output))
            }
            Execution::Returned(Outcome::Failure(message)) => {
                Verdict::new(RunStatus::Failed, message)
            }
            Execution::Returned(Outcome::Retry { message }) => Verdict {
                retry_requested: true,
                ..Verdict::new(RunStatus::Failed, message)
            },
            Execution::Panicked(message) => {
                Verdict::new(RunStatus::Failed, format!("handler panicked: {message}"))
            }
            Execution::TimedOut(after) => Verdict::new(
                RunStatus::TimedOut,
                format!("timed out after {} ms", after.as_millis()),
            ),
            Execution::Cancelled => cancelled_verdict(cause),
        };
        stop_shipping.cancel();
        if let Err(error) = shipper.await {
            tracing::warn!(%error, "the started/log task failed");
        }
        Ok(Ran {
            verdict,
            times: (started_at, ended_at),
            log: log.contents(),
        })
    }

    /// Make the verdict durable, publish `finished`, wait for its delivery, then finish the
    /// offset.
    async fn report(
        &self,
        delivery: Delivery,
        ids: &RunIds<'_>,
        verdict: Verdict,
        times: Option<(DateTime<Utc>, DateTime<Utc>)>,
        log: Option<String>,
    ) {
        let status = verdict.status;
        let span = tracing::Span::current();
        span.record("status", status.as_str());
        if !matches!(status, RunStatus::Succeeded) {
            span.record("otel.status_code", "ERROR");
        }
        let (started_at, finished_at) = match times {
            Some((s, f)) => (Some(s), f),
            None => (None, Utc::now()),
        };
        let trigger = ids.trigger;
        let durable = delivery
            .mark_reporting(ReportingOffset {
                offset: delivery.offset,
                trigger_id: trigger.trigger_id,
                job_id: trigger.job_id,
                worker_id: self.worker_id.clone(),
                attempt: ids.attempt,
                status,
                started_at,
                finished_at,
                message: verdict
                    .message
                    .as_deref()
                    .map(|m| clip_front(m, REPORT_MESSAGE_MAX)),
                retry_requested: verdict.retry_requested,
                output: verdict.output.clone(),
            })
            .await;
        if !durable {
            tracing::warn!(%status, "partition revoked before the result was recorded; its next owner runs the trigger again");
            return;
        }
        let mut finished = RunFinished {
            trigger_id: trigger.trigger_id,
            job_id: trigger.job_id,
            worker_id: self.worker_id.clone(),
            group: self.group.clone(),
            partition: delivery.tp.partition,
            offset: delivery.offset,
            attempt: ids.attempt,
            status,
            started_at,
            finished_at,
            published_at: Some(trigger.published_at),
            message: verdict.message,
            log,
            retry_requested: verdict.retry_requested,
            output: verdict.output,
        };
        // An executor's 1.5 MB message or a long log would make a record the producer refuses,
        // and the run would stay `running` for ever: cut them to a size that always fits.
        finished.fit(cadenza_schemas::MAX_RESULT_RECORD_BYTES);
        let event = ResultEvent::Finished(finished);
        let delivered = self
            .retry_until(
                &delivery.tokens.dropped,
                "publishing the finished event",
                || {
                    self.results
                        .publish(event.clone(), delivery.traceparent.clone())
                },
            )
            .await;
        if delivered {
            delivery.finish();
            self.metrics
                .runs_finished
                .get_or_create(&FinishedLabels {
                    job_type: trigger.job_type.as_str().to_owned(),
                    status: status.to_string(),
                })
                .inc();
            tracing::info!(%status, "run finished");
        } else {
            tracing::warn!(%status, "the finished event was not delivered before the partition went; its next owner publishes it again");
        }
    }
}

/// Publish `started`, then every [`LOG_SHIP_INTERVAL`] the log lines added since, at most
/// [`LOG_SHIP_MAX_BYTES`] per event (the rest is skipped, with a note), until `stop`.
async fn ship(
    results: Arc<dyn ResultSink>,
    started: ResultEvent,
    mut batch: RunLogLines,
    log: RunLog,
    traceparent: Option<String>,
    stop: CancellationToken,
) {
    if let Err(error) = results.publish(started, traceparent.clone()).await {
        tracing::warn!(%error, "the started event was not delivered");
    }
    let mut next = 0;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(LOG_SHIP_INTERVAL) => {}
        }
        let (lines, after) = log.since(next, LOG_SHIP_MAX_BYTES);
        if lines.is_empty() {
            continue;
        }
        next = after;
        batch.seq += 1;
        batch.lines = lines;
        if let Err(error) = results
            .publish(ResultEvent::Log(batch.clone()), traceparent.clone())
            .await
        {
            tracing::debug!(%error, "log lines not delivered (the finished event carries the log)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::handler_fn;
    use crate::lock;
    use crate::progress::tracker::AssignmentEpoch;
    use crate::progress::{Deliveries, OffsetTracker, ProgressSignal, TopicPartition};
    use crate::results::PublishError;
    use cadenza_schemas::{BlockStrategy, JobId, TriggerId};
    use futures::future::BoxFuture;
    use std::sync::Mutex;
    use tokio::time::Instant;

    /// Collects published events, with the (virtual) time they were published.
    #[derive(Default)]
    struct Collect {
        events: Mutex<Vec<(Instant, ResultEvent)>>,
        notify: Notify,
    }

    impl ResultSink for Collect {
        fn publish(
            &self,
            event: ResultEvent,
            _traceparent: Option<String>,
        ) -> BoxFuture<'static, Result<(), PublishError>> {
            lock(&self.events).push((Instant::now(), event));
            self.notify.notify_waiters();
            Box::pin(async { Ok(()) })
        }
    }

    struct Harness {
        env: Arc<RunEnv>,
        sink: Arc<Collect>,
        offsets: Arc<Mutex<OffsetTracker>>,
        deliveries: Deliveries,
        tp: TopicPartition,
        epoch: AssignmentEpoch,
        t0: Instant,
    }

    impl Harness {
        fn new(capacity: usize) -> Self {
            Self::with_commit_delay(capacity, Duration::ZERO)
        }

        /// Commit rounds that take `delay` each.
        fn with_commit_delay(capacity: usize, delay: Duration) -> Self {
            let sink = Arc::new(Collect::default());
            let tp = TopicPartition::new("c.trigger.t.x", 0);
            let hand_back = CancellationToken::new();
            let abandon = CancellationToken::new();
            let mut tracker = OffsetTracker::new(hand_back.clone(), abandon.clone());
            let epoch = tracker.assign(tp.clone(), None, None, None);
            let offsets = Arc::new(Mutex::new(tracker));
            let progress = Arc::new(ProgressSignal::default());
            // Commits instantly whenever a run waits for a commit.
            tokio::spawn({
                let (offsets, progress) = (Arc::clone(&offsets), Arc::clone(&progress));
                async move {
                    loop {
                        progress.wake.notified().await;
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let mut t = lock(&offsets);
                        let items = t.to_commit(&WorkerId("w1".into()), "g", false);
                        t.mark_committed(&items);
                        drop(t);
                        progress.bump();
                    }
                }
            });
            let env = Arc::new(RunEnv {
                worker_id: WorkerId("w1".into()),
                group: "g".into(),
                results: sink.clone(),
                lanes: Arc::new(Lanes::default()),
                capacity: Arc::new(Semaphore::new(capacity)),
                in_flight: InFlight::new(1000),
                hand_back,
                abandon,
                run_log_limit: 1024,
                cancel_grace: Duration::from_secs(1),
                tasks: TaskTracker::new(),
                metrics: Arc::new(WorkerMetrics::new("test", capacity as u32)),
            });
            let deliveries = Deliveries::new(Arc::clone(&offsets), progress);
            Self {
                env,
                sink,
                offsets,
                deliveries,
                tp,
                epoch,
                t0: Instant::now(),
            }
        }

        /// Dispatch trigger `id` of `job` at offset `id`, with a handler sleeping `ms` (cooperative).
        fn send(&self, id: i64, job: i64, block: BlockStrategy, timeout_ms: u64, ms: u64) {
            let mut t = crate::testing::trigger(timeout_ms);
            t.trigger_id = TriggerId(id);
            t.job_id = JobId(job);
            t.block = block;
            t.params = ms.to_string();
            self.dispatch(id, t, Arc::new(sleeper()));
        }

        fn delivery(&self, offset: i64) -> Delivery {
            let (delivery, _) = self.deliveries.take(self.tp.clone(), offset, None).unwrap();
            assert_eq!(delivery.epoch(), self.epoch);
            delivery
        }

        /// Dispatch `t` at offset `offset` with `handler`.
        fn dispatch(&self, offset: i64, t: TriggerMessage, handler: Arc<dyn Handler>) {
            let attempt = t.attempt;
            self.env
                .dispatch(self.delivery(offset), t, attempt, handler);
        }

        async fn settle(&self) {
            self.env.tasks.close();
            self.env.tasks.wait().await;
        }

        /// (trigger id, event name or status, ms since start) in publication order.
        fn timeline(&self) -> Vec<(i64, String, u128)> {
            lock(&self.sink.events)
                .iter()
                .filter_map(|(at, e)| {
                    let what = match e {
                        ResultEvent::Started(_) => "started".to_owned(),
                        ResultEvent::Finished(f) => f.status.to_string(),
                        ResultEvent::Log(_) => return None,
                    };
                    Some((e.trigger_id().0, what, (*at - self.t0).as_millis()))
                })
                .collect::<Vec<_>>()
                .tap_sort()
        }

        fn finished(&self, id: i64) -> RunFinished {
            lock(&self.sink.events)
                .iter()
                .find_map(|(_, e)| match e {
                    ResultEvent::Finished(f) if f.trigger_id == TriggerId(id) => Some(f.clone()),
                    _ => None,
                })
                .unwrap()
        }

        fn position(&self) -> Option<i64> {
            lock(&self.offsets).position(&self.tp)
        }
    }

    /// Sleeps `params` ms, stops early (reporting failure) when cancelled.
    fn sleeper() -> impl Handler {
        handler_fn(|ctx: RunContext| async move {
            let ms: u64 = ctx.params.parse().unwrap_or(0);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                    ctx.log(format!("slept {ms}"));
                    Outcome::success()
                }
                _ = ctx.cancel.cancelled() => Outcome::failure("interrupted"),
            }
        })
    }

    /// Events at the same (virtual) instant may be published in any order: timelines are
    /// compared sorted by time, then trigger id.
    trait TapSort {
        fn tap_sort(self) -> Self;
    }

    impl TapSort for Vec<(i64, String, u128)> {
        fn tap_sort(mut self) -> Self {
            self.sort_by_key(|e| (e.2, e.0));
            self
        }
    }

    fn tl(v: &[(i64, &str, u128)]) -> Vec<(i64, String, u128)> {
        v.iter()
            .map(|(a, b, c)| (*a, (*b).to_owned(), *c))
            .collect::<Vec<_>>()
            .tap_sort()
    }

    #[tokio::test(start_paused = true)]
    async fn serial_execution_runs_a_jobs_triggers_in_order_one_at_a_time() {
        let h = Harness::new(8);
        let s = BlockStrategy::SerialExecution;
        h.send(1, 7, s, 0, 100);
        h.send(2, 7, s, 0, 100);
        h.send(3, 8, s, 0, 50); // another job runs alongside
        h.settle().await;
        assert_eq!(
            h.timeline(),
            tl(&[
                (1, "started", 0),
                (3, "started", 0),
                (3, "succeeded", 50),
                (1, "succeeded", 100),
                (2, "started", 100),
                (2, "succeeded", 200),
            ])
        );
        assert_eq!(h.finished(2).log.as_deref(), Some("slept 100"));
        assert_eq!(h.position(), Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn discard_later_discards_while_the_job_is_busy() {
        let h = Harness::new(8);
        let d = BlockStrategy::DiscardLater;
        h.send(1, 7, d, 0, 100);
        h.send(2, 7, d, 0, 100);
        h.settle().await;
        assert_eq!(
            h.timeline(),
            tl(&[
                (1, "started", 0),
                (2, "discarded", 0),
                (1, "succeeded", 100)
            ])
        );
        let f = h.finished(2);
        assert_eq!(f.started_at, None);
        assert!(f.message.unwrap().contains("discard_later"));
        assert_eq!(h.position(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn cover_early_cancels_the_running_and_waiting_runs() {
        let h = Harness::new(8);
        h.send(1, 7, BlockStrategy::SerialExecution, 0, 1000);
        h.send(2, 7, BlockStrategy::SerialExecution, 0, 1000);
        tokio::time::sleep(Duration::from_millis(10)).await;
        h.send(3, 7, BlockStrategy::CoverEarly, 0, 100);
        h.settle().await;
        assert_eq!(
            h.timeline(),
            tl(&[
                (1, "started", 0),
                (1, "cancelled", 10),
                (2, "cancelled", 10),
                (3, "started", 10),
                (3, "succeeded", 110),
            ])
        );
        let f1 = h.finished(1);
        assert!(f1.started_at.is_some());
        assert_eq!(
            f1.message.as_deref(),
            Some("cancelled: trigger 3 of the same job replaced this run (cover_early)")
        );
        assert_eq!(h.finished(2).started_at, None);
        assert_eq!(h.position(), Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_reports_timed_out() {
        let h = Harness::new(8);
        h.send(1, 7, BlockStrategy::SerialExecution, 50, 1000);
        h.settle().await;
        assert_eq!(h.timeline(), tl(&[(1, "started", 0), (1, "timed_out", 50)]));
        assert_eq!(
            h.finished(1).message.as_deref(),
            Some("timed out after 50 ms")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_bounds_runs_across_jobs() {
        let h = Harness::new(1);
        h.send(1, 7, BlockStrategy::SerialExecution, 0, 100);
        h.send(2, 8, BlockStrategy::SerialExecution, 0, 100);
        h.settle().await;
        // One handler at a time: one run, then the other. Both `started` marks are made durable
        // by the same commit round, so either may take the one permit first.
        let timeline = h.timeline();
        let first = timeline.first().map(|(run, _, _)| *run).unwrap();
        let second = if first == 1 { 2 } else { 1 };
        assert_eq!(
            timeline,
            tl(&[
                (first, "started", 0),
                (first, "succeeded", 100),
                (second, "started", 100),
                (second, "succeeded", 200),
            ])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_commit_round_holds_no_capacity() {
        // Rounds take 50 ms; one handler at a time. Both runs' `started` marks are made durable
        // by the same round (neither holds the permit meanwhile), then the first runs. The
        // second gets the permit when the first gives it back (at 60 ms) and, having waited
        // for it, has its mark confirmed by the next round (at 100 ms) before it starts.
        let h = Harness::with_commit_delay(1, Duration::from_millis(50));
        h.send(1, 7, BlockStrategy::SerialExecution, 0, 10);
        h.send(2, 8, BlockStrategy::SerialExecution, 0, 10);
        h.settle().await;
        let mut started: Vec<u128> = h
            .timeline()
            .into_iter()
            .filter(|(_, what, _)| what == "started")
            .map(|(_, _, at)| at)
            .collect();
        started.sort_unstable();
        assert_eq!(started, vec![50, 100]);
        assert_eq!(h.position(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_fails_the_run_and_the_worker_goes_on() {
        let h = Harness::new(8);
        let mut t = crate::testing::trigger(0);
        t.trigger_id = TriggerId(1);
        h.dispatch(
            1,
            t,
            Arc::new(handler_fn(|ctx: RunContext| async move {
                ctx.log("about to panic");
                if ctx.attempt > 0 {
                    panic!("kaboom");
                }
                Outcome::success()
            })),
        );
        h.send(2, 7, BlockStrategy::SerialExecution, 0, 10);
        h.settle().await;
        let f = h.finished(1);
        assert_eq!(f.status, RunStatus::Failed);
        assert_eq!(f.message.as_deref(), Some("handler panicked: kaboom"));
        assert_eq!(f.log.as_deref(), Some("about to panic"));
        assert_eq!(h.finished(2).status, RunStatus::Succeeded);
        assert_eq!(h.position(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_hands_back_waiting_runs_and_drains_running_ones() {
        let h = Harness::new(8);
        let s = BlockStrategy::SerialExecution;
        h.send(1, 7, s, 0, 100);
        h.send(2, 7, s, 0, 100);
        tokio::time::sleep(Duration::from_millis(10)).await;
        h.env.hand_back.cancel();
        h.settle().await;
        assert_eq!(
            h.timeline(),
            tl(&[(1, "started", 0), (1, "succeeded", 100)])
        );
        // Trigger 2 never finished: the committed position stays on it.
        assert_eq!(h.position(), Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoning_leaves_running_runs_unreported() {
        let h = Harness::new(8);
        h.send(1, 7, BlockStrategy::SerialExecution, 0, 10_000);
        tokio::time::sleep(Duration::from_millis(10)).await;
        h.env.hand_back.cancel();
        h.env.abandon.cancel();
        h.settle().await;
        assert_eq!(h.timeline(), tl(&[(1, "started", 0)]));
        assert_eq!(h.position(), Some(1));
    }

    #[test]
    fn an_output_is_kept_up_to_the_bound_and_fails_the_run_beyond() {
        let v = Verdict::succeeded(Some("ok".into()), Some(serde_json::json!({ "rows": 42 })));
        assert_eq!(
            (v.status, v.message.as_deref(), v.output),
            (
                RunStatus::Succeeded,
                Some("ok"),
                Some(serde_json::json!({ "rows": 42 }))
            )
        );
        assert_eq!(
            Verdict::succeeded(None, Some(serde_json::Value::Null)).output,
            None
        );
        // A JSON string of n characters is n + 2 bytes serialized.
        let exactly = serde_json::Value::String("x".repeat(MAX_OUTPUT_BYTES - 2));
        assert_eq!(serialized_len(&exactly).unwrap(), MAX_OUTPUT_BYTES);
        let v = Verdict::succeeded(None, Some(exactly.clone()));
        assert_eq!((v.status, v.output), (RunStatus::Succeeded, Some(exactly)));
        let v = Verdict::succeeded(
            Some("ok".into()),
            Some(serde_json::Value::String("x".repeat(20478))),
        );
        assert_eq!(
            v,
            Verdict::new(
                RunStatus::Failed,
                "the handler's output is 20480 bytes; at most 16384 are kept (serialize less, \
                 or store it elsewhere and pass a reference)"
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_output_travels_in_the_finished_event_and_an_oversized_one_fails() {
        let h = Harness::new(8);
        for (id, size) in [(1, 10), (2, MAX_OUTPUT_BYTES)] {
            let mut t = crate::testing::trigger(0);
            t.trigger_id = TriggerId(id);
            t.job_id = JobId(id);
            t.upstream = Some(serde_json::json!({ "parent": size }));
            h.dispatch(
                id,
                t,
                Arc::new(handler_fn(|ctx: RunContext| async move {
                    // The upstream reaches the handler.
                    let size = ctx.upstream.as_ref().and_then(|u| u["parent"].as_u64());
                    let size = usize::try_from(size.unwrap_or(0)).unwrap_or(0);
                    Outcome::SuccessWith {
                        output: serde_json::json!({ "data": "x".repeat(size) }),
                        message: Some("done".into()),
                    }
                })),
            );
        }
        h.settle().await;
        let f = h.finished(1);
        assert_eq!(
            (f.status, f.message.as_deref(), f.output),
            (
                RunStatus::Succeeded,
                Some("done"),
                Some(serde_json::json!({ "data": "x".repeat(10) }))
            )
        );
        let f = h.finished(2);
        assert_eq!((f.status, f.output), (RunStatus::Failed, None));
        assert!(
            f.message
                .as_deref()
                .unwrap()
                .starts_with("the handler's output is 16395 bytes; at most 16384 are kept"),
            "{:?}",
            f.message
        );
        assert_eq!(h.position(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_result_published_again_keeps_its_output() {
        let h = Harness::new(8);
        h.env.republish(
            h.delivery(1),
            ReportingOffset {
                offset: 1,
                trigger_id: TriggerId(5),
                job_id: JobId(7),
                worker_id: WorkerId("w0".into()),
                attempt: 2,
                status: RunStatus::Succeeded,
                started_at: None,
                finished_at: DateTime::UNIX_EPOCH,
                message: None,
                retry_requested: false,
                output: Some(serde_json::json!({ "rows": 42 })),
            },
        );
        h.settle().await;
        let f = h.finished(5);
        assert_eq!(
            (f.attempt, f.status, f.output),
            (
                2,
                RunStatus::Succeeded,
                Some(serde_json::json!({ "rows": 42 }))
            )
        );
        assert_eq!(h.position(), Some(2));
    }

    #[tokio::test]
    async fn in_flight_resumes_below_half() {
        let f = InFlight::new(4);
        let guards: Vec<_> = (0..4).map(|_| f.enter()).collect();
        assert!(f.is_full());
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.below_half().await })
        };
        let mut guards = guards.into_iter();
        drop(guards.next());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(guards.next());
        waiter.await.unwrap();
        assert_eq!(f.count(), 2);
    }
}
