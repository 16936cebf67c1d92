//! What a job handler is, what it gets, what it returns, and how one run of it is executed
//! (its own task, a timeout, cancellation, panics).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cadenza_schemas::{
    BlockStrategy, JobId, JobType, RouteStrategy, TriggerId, TriggerKind, TriggerMessage,
};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::lock;

/// A job handler: called once per run, on its own task.
///
/// Implement it for a type, or wrap a closure with [`handler_fn`]:
///
/// ```
/// use cadenza_worker::{handler_fn, Outcome};
/// let h = handler_fn(|ctx| async move {
///     ctx.log(format!("hello {}", ctx.params));
///     Outcome::Success(None)
/// });
/// # let _ = h;
/// ```
///
/// A handler should watch [`RunContext::cancel`]: it fires on timeout, when a `cover_early`
/// trigger replaces the run, and when the worker hands the run back at shutdown. A handler that
/// ignores it is abandoned after a grace period (its task is aborted at its next `.await`).
pub trait Handler: Send + Sync + 'static {
    /// Run once. The returned future must be `'static`: clone what it needs from `self`.
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome>;
}

impl<H: Handler + ?Sized> Handler for Arc<H> {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        (**self).call(ctx)
    }
}

impl<H: Handler + ?Sized> Handler for Box<H> {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        (**self).call(ctx)
    }
}

/// A [`Handler`] made from a closure returning a future; see [`handler_fn`].
#[derive(Clone)]
pub struct FnHandler<F>(F);

impl<F> fmt::Debug for FnHandler<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnHandler")
    }
}

/// Make a [`Handler`] from `|ctx: RunContext| async move { … Outcome }`.
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F>
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    FnHandler(f)
}

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin((self.0)(ctx))
    }
}

/// How a run ended, as the handler sees it. A value, not an `Err`: the worker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `succeeded`, with an optional message for the run record.
    Success(Option<String>),
    /// `succeeded` with an output: a small JSON value reported with the result (the `finished`
    /// event's `output`), which a workflow passes to the node's children as their
    /// [`RunContext::upstream`]. Serialized, it may take at most
    /// [`MAX_OUTPUT_BYTES`](cadenza_schemas::MAX_OUTPUT_BYTES); a bigger one fails the run (an
    /// output is data for the runs that follow, so it is never cut). JSON `null` is the same as
    /// no output.
    SuccessWith {
        /// The output.
        output: serde_json::Value,
        /// An optional message for the run record.
        message: Option<String>,
    },
    /// `failed`, with the reason.
    Failure(String),
    /// The handler asks to be retried. For now this is reported as `failed` with the message:
    /// the admin applies the job's `retries` policy to failed runs. A dedicated "retry" signal
    /// (e.g. with a delay) is future work on the result schema.
    Retry {
        /// Why the run should be retried.
        message: String,
    },
}

impl Outcome {
    /// `Success(None)`.
    pub fn success() -> Self {
        Outcome::Success(None)
    }

    /// `SuccessWith { output, message: None }`: succeed with an output (see
    /// [`Outcome::SuccessWith`]).
    pub fn success_with(output: serde_json::Value) -> Self {
        Outcome::SuccessWith {
            output,
            message: None,
        }
    }

    /// `Failure(message)`.
    pub fn failure(message: impl Into<String>) -> Self {
        Outcome::Failure(message.into())
    }

    /// `Retry { message }`.
    pub fn retry(message: impl Into<String>) -> Self {
        Outcome::Retry {
            message: message.into(),
        }
    }
}

/// Everything a handler knows about its run.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run's id (the admin's `triggers` row).
    pub trigger_id: TriggerId,
    /// The job this is a run of.
    pub job_id: JobId,
    /// The job's type (the handler's registration).
    pub job_type: JobType,
    /// Why the run exists (cron, manual, retry, …).
    pub kind: TriggerKind,
    /// The job's parameters, free text.
    pub params: String,
    /// 1 for the first delivery.
    pub attempt: u32,
    /// This shard's index for `sharding_broadcast` runs (0 otherwise).
    pub shard_index: u32,
    /// The number of shards (1 unless `sharding_broadcast`).
    pub shard_total: u32,
    /// When the run was due.
    pub fire_time: DateTime<Utc>,
    /// The run's timeout, if it has one (the worker enforces it).
    pub timeout: Option<Duration>,
    /// The job's block strategy (the worker has applied it already).
    pub block: BlockStrategy,
    /// The job's route strategy, when the admin sent it (the `xxl` bridge routes among executor
    /// addresses by it).
    pub route: Option<RouteStrategy>,
    /// For a run of a workflow node (kind `workflow`): the workflow run it belongs to.
    pub workflow_run_id: Option<i64>,
    /// For a run of a workflow node: the node's key in its workflow.
    pub workflow_node: Option<String>,
    /// For a run of a workflow node: the outputs of its direct parents, a JSON object from parent
    /// node key to that node's output (JSON `null` for a parent without output; see
    /// [`Outcome::SuccessWith`]). `None` for other runs.
    pub upstream: Option<serde_json::Value>,
    /// Fires when the run should stop: timeout, `cover_early`, or shutdown hand-back.
    pub cancel: CancellationToken,
    log: RunLog,
}

impl RunContext {
    /// The context of a run of `trigger`. Public so handlers can be unit-tested.
    pub fn new(trigger: &TriggerMessage, cancel: CancellationToken, log: RunLog) -> Self {
        Self {
            trigger_id: trigger.trigger_id,
            job_id: trigger.job_id,
            job_type: trigger.job_type.clone(),
            kind: trigger.kind,
            params: trigger.params.clone(),
            attempt: trigger.attempt,
            shard_index: trigger.shard_index,
            shard_total: trigger.shard_total,
            fire_time: trigger.fire_time,
            timeout: (trigger.timeout_ms > 0).then(|| Duration::from_millis(trigger.timeout_ms)),
            block: trigger.block,
            route: trigger.route,
            workflow_run_id: trigger.workflow_run_id,
            workflow_node: trigger.workflow_node.clone(),
            upstream: trigger.upstream.clone(),
            cancel,
            log,
        }
    }

    /// Append to the run's log (several lines at once are fine). The tail of the log, bounded,
    /// is sent with the `finished` event.
    pub fn log(&self, line: impl AsRef<str>) {
        let line = line.as_ref();
        tracing::debug!(target: "cadenza_worker::run_log", "{line}");
        self.log.push(line);
    }

    /// A handle on the run's log, e.g. for a task that reads a child process's output.
    pub fn log_handle(&self) -> RunLog {
        self.log.clone()
    }

    /// Whether the run was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A run's log: the last `limit` bytes of lines, shared by clones.
#[derive(Clone)]
pub struct RunLog {
    inner: Arc<Mutex<LogBuf>>,
}

impl fmt::Debug for RunLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = lock(&self.inner);
        f.debug_struct("RunLog")
            .field("bytes", &b.bytes)
            .field("limit", &b.limit)
            .finish()
    }
}

struct LogBuf {
    lines: VecDeque<String>,
    /// Bytes held, counting one newline per line.
    bytes: usize,
    limit: usize,
    dropped: u64,
    /// Lines ever pushed: the kept lines are numbered `total - lines.len() .. total`.
    total: u64,
}

impl RunLog {
    /// An empty log keeping at most `limit` bytes (at least one byte).
    pub fn new(limit: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(LogBuf {
                lines: VecDeque::new(),
                bytes: 0,
                limit: limit.max(1),
                dropped: 0,
                total: 0,
            })),
        }
    }

    /// Append one or more lines (split on `\n`; a trailing newline adds no empty line).
    pub fn push(&self, text: &str) {
        let mut b = lock(&self.inner);
        let text = text.strip_suffix('\n').unwrap_or(text);
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let line = if line.len() >= b.limit {
                // Keep the tail of an over-long line.
                let mut start = line.len() + 1 - b.limit;
                while !line.is_char_boundary(start) {
                    start += 1;
                }
                b.dropped += start as u64;
                &line[start..]
            } else {
                line
            };
            b.bytes += line.len() + 1;
            b.total += 1;
            b.lines.push_back(line.to_owned());
            while b.bytes > b.limit {
                match b.lines.pop_front() {
                    Some(old) => {
                        b.bytes -= old.len() + 1;
                        b.dropped += old.len() as u64 + 1;
                    }
                    None => break,
                }
            }
        }
    }

    /// Lines from number `next` on, at most `max_bytes` of them (a line longer than that is cut
    /// to its end), and the number to ask for next time. Lines already dropped from the log, or
    /// left out to keep within `max_bytes`, are replaced by one note saying how many.
    pub(crate) fn since(&self, next: u64, max_bytes: usize) -> (Vec<String>, u64) {
        let b = lock(&self.inner);
        let first = b.total - b.lines.len() as u64;
        let mut from = next.max(first);
        let mut out = Vec::new();
        // Keep the newest lines that fit: walk back from the end.
        let mut bytes = 0;
        let mut start = b.total;
        for (i, l) in b.lines.iter().enumerate().rev() {
            let n = first + i as u64;
            if n < from || bytes + l.len() > max_bytes {
                break;
            }
            bytes += l.len();
            start = n;
        }
        if start == b.total && from < b.total {
            // Not even the last line fits: its end.
            start = b.total - 1;
        }
        let skipped = start.saturating_sub(next);
        if skipped > 0 {
            out.push(format!("[… {skipped} line(s) not shown live]"));
        }
        from = start;
        for l in b.lines.iter().skip((from - first) as usize) {
            if l.len() > max_bytes {
                let mut cut = l.len() - max_bytes;
                while !l.is_char_boundary(cut) {
                    cut += 1;
                }
                out.push(l[cut..].to_owned());
            } else {
                out.push(l.clone());
            }
        }
        (out, b.total)
    }

    /// The kept lines joined by newlines, preceded by a note when older output was dropped;
    /// `None` when nothing was logged.
    pub fn contents(&self) -> Option<String> {
        let b = lock(&self.inner);
        if b.lines.is_empty() && b.dropped == 0 {
            return None;
        }
        let mut out = String::with_capacity(b.bytes + 48);
        if b.dropped > 0 {
            out.push_str(&format!("[… {} earlier bytes dropped]\n", b.dropped));
        }
        for (i, l) in b.lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(l);
        }
        Some(out)
    }
}

/// How the execution of a handler ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Execution {
    /// The handler returned on its own.
    Returned(Outcome),
    /// The handler panicked (message included); the worker goes on.
    Panicked(String),
    /// The run's timeout elapsed; the handler was cancelled (and abandoned if it did not return
    /// within the grace period).
    TimedOut(Duration),
    /// The run's token was cancelled from outside (a `cover_early` trigger replaced it).
    Cancelled,
    /// The worker is stopping and the drain timed out: the run is handed back unreported.
    HandedBack,
}

/// Run `handler` on its own task, enforcing the timeout and reacting to the run token (`cover`)
/// and the worker's `abandon` token. Returns within `grace` of any interruption, whatever the
/// handler does.
pub(crate) async fn execute(
    handler: Arc<dyn Handler>,
    ctx: RunContext,
    run_token: &CancellationToken,
    grace: Duration,
    abandon: &CancellationToken,
) -> Execution {
    let timeout = ctx.timeout;
    let mut task =
        tokio::spawn(async move { handler.call(ctx).await }.instrument(tracing::Span::current()));
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let interrupted = tokio::select! {
        biased;
        joined = &mut task => {
            // A handler that returns because its run was covered reports `cancelled`, whatever
            // it returned.
            return if run_token.is_cancelled() {
                Execution::Cancelled
            } else {
                joined_to_execution(joined)
            };
        }
        _ = abandon.cancelled() => Execution::HandedBack,
        _ = run_token.cancelled() => Execution::Cancelled,
        _ = deadline => Execution::TimedOut(timeout.unwrap_or_default()),
    };
    run_token.cancel();
    if interrupted == Execution::HandedBack {
        task.abort();
        return interrupted;
    }
    tokio::select! {
        biased;
        _ = abandon.cancelled() => {
            task.abort();
            return Execution::HandedBack;
        }
        joined = tokio::time::timeout(grace, &mut task) => {
            if joined.is_err() {
                tracing::warn!(
                    grace_ms = grace.as_millis() as u64,
                    "handler ignored cancellation; abandoning it"
                );
                task.abort();
            }
        }
    }
    interrupted
}

fn joined_to_execution(joined: Result<Outcome, JoinError>) -> Execution {
    match joined {
        Ok(outcome) => Execution::Returned(outcome),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic payload)".to_owned());
            Execution::Panicked(msg)
        }
        Err(_) => Execution::Panicked("handler task was aborted".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::trigger;

    async fn run(h: impl Handler, timeout_ms: u64) -> (Execution, RunLog) {
        let token = CancellationToken::new();
        let log = RunLog::new(1024);
        let ctx = RunContext::new(&trigger(timeout_ms), token.child_token(), log.clone());
        let abandon = CancellationToken::new();
        let ex = execute(Arc::new(h), ctx, &token, Duration::from_secs(1), &abandon).await;
        (ex, log)
    }

    #[test]
    fn log_keeps_the_tail_within_the_limit() {
        let log = RunLog::new(12);
        assert_eq!(log.contents(), None);
        log.push("abc\n");
        log.push("def\r\nghi");
        assert_eq!(log.contents().unwrap(), "abc\ndef\nghi");
        log.push("jk");
        assert_eq!(
            log.contents().unwrap(),
            "[… 4 earlier bytes dropped]\ndef\nghi\njk"
        );
        let log = RunLog::new(4);
        log.push("héllo");
        // 6 bytes; the tail of at most 3 bytes on a char boundary is kept.
        assert_eq!(log.contents().unwrap(), "[… 3 earlier bytes dropped]\nllo");
    }

    #[test]
    fn since_ships_new_lines_within_a_bound() {
        let log = RunLog::new(1024);
        assert_eq!(log.since(0, 100), (vec![], 0));
        log.push("a\nb");
        let (lines, next) = log.since(0, 100);
        assert_eq!((lines, next), (vec!["a".to_owned(), "b".to_owned()], 2));
        assert_eq!(log.since(2, 100), (vec![], 2));
        log.push("ccc\ndd\ne");
        // Only the newest lines that fit in 3 bytes; the others are counted.
        assert_eq!(
            log.since(2, 3),
            (
                vec![
                    "[… 1 line(s) not shown live]".into(),
                    "dd".into(),
                    "e".into()
                ],
                5
            )
        );
        // A line longer than the bound: its end.
        log.push("0123456789");
        assert_eq!(log.since(5, 4), (vec!["6789".into()], 6));
        // Lines that fell out of the kept log are counted too.
        let small = RunLog::new(4);
        small.push("aa\nbb\ncc");
        assert_eq!(
            small.since(0, 100),
            (vec!["[… 2 line(s) not shown live]".into(), "cc".into()], 3)
        );
    }

    #[tokio::test]
    async fn returned_outcome_and_log() {
        let (ex, log) = run(
            handler_fn(|ctx| async move {
                ctx.log(format!("params={}", ctx.params));
                Outcome::success()
            }),
            0,
        )
        .await;
        assert_eq!(ex, Execution::Returned(Outcome::Success(None)));
        assert_eq!(log.contents().unwrap(), "params=p");
    }

    #[test]
    fn the_context_of_a_workflow_node_run() {
        let mut t = trigger(0);
        let ctx = RunContext::new(&t, CancellationToken::new(), RunLog::new(16));
        assert_eq!(
            (ctx.workflow_run_id, ctx.workflow_node, ctx.upstream),
            (None, None, None)
        );
        t.kind = TriggerKind::Workflow;
        t.workflow_run_id = Some(12);
        t.workflow_node = Some("load".into());
        t.upstream = Some(serde_json::json!({ "extract": { "rows": 42 } }));
        let ctx = RunContext::new(&t, CancellationToken::new(), RunLog::new(16));
        assert_eq!(ctx.kind, TriggerKind::Workflow);
        assert_eq!(ctx.workflow_run_id, Some(12));
        assert_eq!(ctx.workflow_node.as_deref(), Some("load"));
        assert_eq!(ctx.upstream, t.upstream);
        assert_eq!(
            Outcome::success_with(serde_json::json!(1)),
            Outcome::SuccessWith {
                output: serde_json::json!(1),
                message: None
            }
        );
    }

    #[tokio::test]
    async fn panic_is_caught_with_its_message() {
        let (ex, _) = run(
            handler_fn(|ctx| async move {
                if ctx.attempt == 1 {
                    panic!("boom {}", ctx.attempt);
                }
                Outcome::success()
            }),
            0,
        )
        .await;
        assert_eq!(ex, Execution::Panicked("boom 1".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_cancels_a_cooperative_handler() {
        let (ex, log) = run(
            handler_fn(|ctx| async move {
                ctx.cancel.cancelled().await;
                ctx.log("saw cancel");
                Outcome::success()
            }),
            100,
        )
        .await;
        assert_eq!(ex, Execution::TimedOut(Duration::from_millis(100)));
        assert_eq!(log.contents().unwrap(), "saw cancel");
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_abandons_a_handler_that_ignores_cancellation() {
        let started = tokio::time::Instant::now();
        let (ex, _) = run(
            handler_fn(|_ctx| async move {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Outcome::success()
            }),
            100,
        )
        .await;
        assert_eq!(ex, Execution::TimedOut(Duration::from_millis(100)));
        // Timeout plus the grace period, not the hour.
        assert_eq!(started.elapsed(), Duration::from_millis(1100));
    }
}
