//! Run results: `started`, `log` and `finished` events from workers, applied to `triggers` in
//! batches. A `started` event of a later attempt (a redelivered run) replaces the earlier
//! attempt's worker and start; a `started` event whose run the same batch finishes is not
//! written apart (the `finished` event carries the start); `log` events append the live log of
//! a running run, each batch once; `finished` sets the terminal status and the whole log, and
//! sets off what follows a run's end ([`crate::outcome`]: retries, child jobs, `fix_delay` next
//! times, alarms) in the same transaction, skipping the steps none of the batch's runs needs.

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{
    ResultEvent, RunFinished, RunLogLines, RunStarted, RunStatus, HEADER_TRACEPARENT,
};
use cadenza_worker::telemetry;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{Headers, Message};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{recv_batch, to_dlq};
use crate::guard::{self, Backoff};
use crate::kafka::KafkaClients;
use crate::route::registry::Registry;

/// Most events applied in one transaction.
const BATCH: usize = 1_000;
/// How long a batch of result events gathers after its first event. Long enough that a short
/// run's `started` and `finished` usually arrive in one batch, and the run is written once.
const LINGER: Duration = Duration::from_millis(20);
/// Longest text kept from a run's log.
pub const MAX_LOG_BYTES: usize = 64 * 1024;

fn clip(s: Option<String>, max: usize) -> Option<String> {
    s.map(|mut s| {
        if s.len() > max {
            let mut cut = s.len() - max;
            while !s.is_char_boundary(cut) {
                cut += 1;
            }
            s.replace_range(..cut, "…");
        }
        s
    })
}

/// Text from a worker as PostgreSQL can store it: a NUL character (which `text` refuses) becomes
/// U+FFFD, the replacement character.
pub fn storable(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// A worker's text, clipped to its tail and storable.
fn worker_text(s: Option<&str>) -> Option<String> {
    clip(s.map(storable), MAX_LOG_BYTES)
}

/// Of several events of one kind for the same run in a batch, the one that counts: the latest
/// attempt's, and of one attempt the first (a repeated event changes nothing). One statement
/// then updates each run at most once, deterministically.
fn latest_per_run<'a, E>(
    events: impl Iterator<Item = &'a E>,
    key: impl Fn(&E) -> (i64, u32),
) -> Vec<&'a E> {
    let mut best: std::collections::BTreeMap<i64, &'a E> = std::collections::BTreeMap::new();
    for e in events {
        let (id, attempt) = key(e);
        match best.get(&id) {
            Some(kept) if key(kept).1 >= attempt => {}
            _ => {
                best.insert(id, e);
            }
        }
    }
    best.into_values().collect()
}

/// The `started` events whose run the same batch does not finish with that attempt or a later
/// one. A `finished` event carries the run's worker, attempt and start too, and is applied on
/// its own from any status a `started` event moves a run from, so the run is written once
/// instead of twice; a later attempt's `started` still counts (that attempt runs).
fn not_finished<'a>(
    started: Vec<&'a RunStarted>,
    finished: &[&RunFinished],
) -> Vec<&'a RunStarted> {
    let ended: std::collections::HashMap<i64, u32> = finished
        .iter()
        .map(|f| (f.trigger_id.0, f.attempt))
        .collect();
    started
        .into_iter()
        .filter(|s| ended.get(&s.trigger_id.0).is_none_or(|a| *a < s.attempt))
        .collect()
}

/// Applies a batch of events in one transaction. Idempotent.
pub async fn apply(
    pool: &PgPool,
    registry: &Registry,
    events: &[ResultEvent],
) -> Result<usize, sqlx::Error> {
    let finished = latest_per_run(
        events.iter().filter_map(|e| match e {
            ResultEvent::Finished(f) => Some(f),
            _ => None,
        }),
        |f: &RunFinished| (f.trigger_id.0, f.attempt),
    );
    let started = not_finished(
        latest_per_run(
            events.iter().filter_map(|e| match e {
                ResultEvent::Started(s) => Some(s),
                _ => None,
            }),
            |s: &RunStarted| (s.trigger_id.0, s.attempt),
        ),
        &finished,
    );
    let logs: Vec<&RunLogLines> = events
        .iter()
        .filter_map(|e| match e {
            ResultEvent::Log(l) => Some(l),
            _ => None,
        })
        .collect();
    let mut tx = pool.begin().await?;
    if !started.is_empty() {
        {
            sqlx::query(sql!("ingest/run_started"))
                .bind(started.iter().map(|s| s.trigger_id.0).collect::<Vec<_>>())
                .bind(
                    started
                        .iter()
                        .map(|s| storable(&s.worker_id.0))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    started
                        .iter()
                        .map(|s| storable(&s.group))
                        .collect::<Vec<_>>(),
                )
                .bind(started.iter().map(|s| s.partition).collect::<Vec<_>>())
                .bind(started.iter().map(|s| s.offset).collect::<Vec<_>>())
                .bind(started.iter().map(|s| s.attempt as i32).collect::<Vec<_>>())
                .bind(started.iter().map(|s| s.started_at).collect::<Vec<_>>())
                .bind(started.iter().map(|s| s.published_at).collect::<Vec<_>>())
                .execute(&mut *tx)
                .await?;
        }
    }
    for layer in log_layers(&logs) {
        sqlx::query(sql!("ingest/run_log"))
            .bind(layer.iter().map(|l| l.trigger_id.0).collect::<Vec<_>>())
            .bind(layer.iter().map(|l| l.attempt as i32).collect::<Vec<_>>())
            .bind(
                layer
                    .iter()
                    .map(|l| i64::try_from(l.seq).unwrap_or(i64::MAX))
                    .collect::<Vec<_>>(),
            )
            .bind(
                layer
                    .iter()
                    .map(|l| worker_text(Some(&l.lines.join("\n"))).unwrap_or_default())
                    .collect::<Vec<_>>(),
            )
            .execute(&mut *tx)
            .await?;
    }
    let mut changed = 0;
    let mut counted = crate::outcome::Ended::default();
    if !finished.is_empty() {
        let rows: Vec<(i64, String, String, bool, bool)> =
            sqlx::query_as(sql!("ingest/run_finished"))
                .bind(finished.iter().map(|f| f.trigger_id.0).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| storable(&f.worker_id.0))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| storable(&f.group))
                        .collect::<Vec<_>>(),
                )
                .bind(finished.iter().map(|f| f.partition).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.offset).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| f.attempt as i32)
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| f.status.as_str())
                        .collect::<Vec<_>>(),
                )
                .bind(finished.iter().map(|f| f.started_at).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.finished_at).collect::<Vec<_>>())
                .bind(
                    finished
                        .iter()
                        .map(|f| worker_text(f.message.as_deref()))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| worker_text(f.log.as_deref()))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    finished
                        .iter()
                        .map(|f| f.retry_requested)
                        .collect::<Vec<_>>(),
                )
                .bind(finished.iter().map(|f| output_text(f)).collect::<Vec<_>>())
                .bind(finished.iter().map(|f| f.published_at).collect::<Vec<_>>())
                .fetch_all(&mut *tx)
                .await?;
        changed = rows.len();
        let known = crate::outcome::Known {
            fix_delay: rows
                .iter()
                .any(|(_, _, kind, ..)| matches!(kind.as_str(), "fix_delay" | "misfire" | "retry")),
            parents: rows
                .iter()
                .filter(|(_, _, _, parent, _)| *parent)
                .map(|(id, ..)| *id)
                .collect(),
            workflow: rows.iter().any(|(.., workflow)| *workflow),
        };
        let ended: Vec<(i64, RunStatus)> = rows
            .into_iter()
            .filter_map(|(id, status, ..)| status.parse().ok().map(|s| (id, s)))
            .collect();
        counted = crate::outcome::after_terminal_known(&mut tx, registry, &ended, Some(&known))
            .await?
            .ended;
    }
    tx.commit().await?;
    counted.record();
    let m = crate::metrics::metrics();
    let now = chrono::Utc::now();
    for at in started
        .iter()
        .map(|s| s.started_at)
        .chain(finished.iter().map(|f| f.finished_at))
    {
        m.ingest_lag
            .observe((now - at).num_milliseconds().max(0) as f64 / 1000.0);
    }
    Ok(changed)
}

/// A `finished` event's output as JSON text to store, if it has one within
/// [`cadenza_schemas::MAX_OUTPUT_BYTES`]; a bigger one, or one holding a NUL character (which
/// `jsonb` cannot store), from a worker that does not check it, is dropped.
fn output_text(f: &RunFinished) -> Option<String> {
    let output = f.output.as_ref()?;
    if cadenza_schemas::json_has_nul(output) {
        tracing::warn!(
            trigger_id = f.trigger_id.0,
            "a run's output holds a NUL character; not stored"
        );
        return None;
    }
    let text = output.to_string();
    if text.len() > cadenza_schemas::MAX_OUTPUT_BYTES {
        tracing::warn!(
            trigger_id = f.trigger_id.0,
            bytes = text.len(),
            "a run's output exceeds the bound; not stored"
        );
        return None;
    }
    Some(text)
}

/// Log events split into statements holding at most one event per run, in `seq` order (an
/// UPDATE applies only one row per target row).
fn log_layers<'a>(logs: &[&'a RunLogLines]) -> Vec<Vec<&'a RunLogLines>> {
    let mut sorted: Vec<&RunLogLines> = logs.to_vec();
    sorted.sort_by_key(|l| (l.trigger_id, l.attempt, l.seq));
    sorted.dedup_by_key(|l| (l.trigger_id, l.attempt, l.seq));
    let mut layers: Vec<Vec<&RunLogLines>> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let id = sorted[i].trigger_id;
        let mut k = 0;
        while i < sorted.len() && sorted[i].trigger_id == id {
            if layers.len() <= k {
                layers.push(Vec::new());
            }
            layers[k].push(sorted[i]);
            k += 1;
            i += 1;
        }
    }
    layers
}

/// The highest attempt a result may carry: a run is redelivered once per failed owner, never
/// thousands of times; an event claiming more (a forged `started` with attempt 2^31 − 1 would
/// otherwise shut out every real result of the run) goes to the DLQ.
pub const MAX_ATTEMPT: u32 = 10_000;

/// Why an event is refused (it goes to the DLQ).
fn check(e: &ResultEvent) -> Result<(), String> {
    let (attempt, partition, offset) = match e {
        ResultEvent::Started(s) => (s.attempt, Some(s.partition), Some(s.offset)),
        ResultEvent::Finished(f) => (f.attempt, Some(f.partition), Some(f.offset)),
        ResultEvent::Log(l) => (l.attempt, None, None),
    };
    if attempt == 0 || attempt > MAX_ATTEMPT {
        return Err(format!(
            "attempt {attempt} is not between 1 and {MAX_ATTEMPT}"
        ));
    }
    if partition.is_some_and(|p| p < 0) || offset.is_some_and(|o| o < 0) {
        return Err("a negative partition or offset".to_owned());
    }
    if let ResultEvent::Finished(f) = e {
        if !f.status.is_worker_outcome() {
            return Err(format!(
                "status {} cannot be reported by a worker",
                f.status
            ));
        }
    }
    Ok(())
}

/// Why storing a batch of events failed.
#[derive(Debug, thiserror::Error)]
enum StoreError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Panicked(#[from] guard::Panicked),
}

impl StoreError {
    /// Whether the database refused the data (a result it will refuse again however often it
    /// is sent) rather than that it could not be reached or was busy.
    fn refused(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => {
                let class = db.code().map(|c| c.chars().take(2).collect::<String>());
                // 08 connection, 40 rollback (serialization, deadlock), 53 resources, 57 operator
                // intervention (shutdown, cancel): worth retrying. Anything else is about the data.
                !matches!(class.as_deref(), Some("08" | "40" | "53" | "57"))
            }
            StoreError::Database(_) => false,
            // A panic while applying the batch.
            StoreError::Panicked(_) => true,
        }
    }
}

/// How storing some events ended.
enum Stored {
    Yes,
    Refused(StoreError),
    Shutdown,
}

/// Applies events, retrying with a back-off while the database is unreachable.
struct Store<'a> {
    pool: &'a PgPool,
    registry: &'a Registry,
    backoff: Backoff,
}

impl<'a> Store<'a> {
    fn new(pool: &'a PgPool, registry: &'a Registry) -> Self {
        Self {
            pool,
            registry,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
        }
    }

    async fn apply(&mut self, events: &[ResultEvent], shutdown: &CancellationToken) -> Stored {
        loop {
            let round =
                guard::catch_panic("storing results", apply(self.pool, self.registry, events));
            let stored = match round.await {
                Ok(r) => r.map_err(StoreError::from),
                Err(panic) => Err(StoreError::from(panic)),
            };
            match stored {
                Ok(_) => {
                    if self.backoff.succeeded() {
                        tracing::info!("storing results works again");
                    }
                    return Stored::Yes;
                }
                Err(e) if e.refused() => return Stored::Refused(e),
                Err(e) => {
                    let pause = self.backoff.failed();
                    tracing::error!(error = %e, retry_in_ms = pause.as_millis() as u64, "storing results failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Stored::Shutdown,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }
}

/// The W3C trace context a result record carries, if any.
fn traceparent<M: Message>(m: &M) -> Option<&str> {
    m.headers()?
        .iter()
        .find(|h| h.key == HEADER_TRACEPARENT)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// Consumes `<prefix>.results` until `shutdown`. Offsets are committed after the batch is in
/// the database, so a crash re-applies (harmlessly) rather than loses events.
pub async fn run(
    pool: PgPool,
    kafka: Arc<KafkaClients>,
    registry: Arc<Registry>,
    admin_id: String,
    shutdown: CancellationToken,
) {
    let group = format!("{}-admin", kafka.topics().prefix());
    let consumer = match kafka.consumer(&group, &[("enable.auto.offset.store", "false")]) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot create the results consumer");
            return;
        }
    };
    if let Err(e) = consumer.subscribe(&[&kafka.topics().results()]) {
        tracing::error!(error = %e, "cannot subscribe to the results topic");
        return;
    }
    while !shutdown.is_cancelled() {
        let batch = recv_batch(&consumer, BATCH, LINGER, &shutdown).await;
        if batch.is_empty() {
            continue;
        }
        // (index in `batch`, event): an event the database refuses goes to the DLQ as its message.
        let mut events: Vec<(usize, ResultEvent)> = Vec::with_capacity(batch.len());
        for (i, m) in batch.iter().enumerate() {
            let parsed = match m.payload() {
                None => Err("empty message".to_owned()),
                Some(p) => serde_json::from_slice::<ResultEvent>(p)
                    .map_err(|e| format!("not a result event: {e}")),
            };
            match parsed.and_then(|e| check(&e).map(|()| e)) {
                Ok(e) => events.push((i, e)),
                Err(reason) => to_dlq(&kafka, &admin_id, m, reason).await,
            }
        }
        // One `ingest` span per run event, a child of the worker's `run` span, open until the
        // batch is stored.
        let _spans: Vec<tracing::Span> = if telemetry::exporting() {
            events
                .iter()
                .filter_map(|(i, e)| {
                    let (name, job_id, attempt) = match e {
                        ResultEvent::Started(s) => ("started", s.job_id, s.attempt),
                        ResultEvent::Finished(f) => ("finished", f.job_id, f.attempt),
                        ResultEvent::Log(_) => return None,
                    };
                    let span = tracing::info_span!(parent: None, "ingest", otel.kind = "consumer",
                        event = name, job_id = job_id.0, trigger_id = e.trigger_id().0, attempt);
                    telemetry::set_parent(&span, traceparent(&batch[*i]));
                    Some(span)
                })
                .collect()
        } else {
            Vec::new()
        };
        // Never commit past events that are not stored: a batch is retried while the database
        // is unreachable; one it refuses is applied event by event, and an event refused on its
        // own goes to the DLQ with the reason, so one bad event cannot hold up the partition.
        let all: Vec<ResultEvent> = events.iter().map(|(_, e)| e.clone()).collect();
        let mut store = Store::new(&pool, &registry);
        match store.apply(&all, &shutdown).await {
            Stored::Yes => {}
            Stored::Shutdown => return,
            Stored::Refused(e) => {
                tracing::warn!(error = %e, events = all.len(), "the database refused a batch of results; applying them one by one");
                for (i, event) in &events {
                    match store.apply(std::slice::from_ref(event), &shutdown).await {
                        Stored::Yes => {}
                        Stored::Shutdown => return,
                        Stored::Refused(e) => {
                            let reason = format!("the database refused this result event: {e}");
                            to_dlq(&kafka, &admin_id, &batch[*i], reason).await;
                        }
                    }
                }
            }
        }
        for m in &batch {
            if let Err(e) = consumer.store_offset_from_message(m) {
                tracing::warn!(error = %e, "storing offset failed");
            }
        }
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            tracing::debug!(error = %e, "commit failed; will commit with the next batch");
        }
    }
    // Batches were committed as they were stored; a final synchronous commit can stall for the
    // request timeout while the group rebalances, and re-applying events is harmless.
    let _ = consumer.commit_consumer_state(CommitMode::Async);
}

#[cfg(test)]
mod tests {
    use cadenza_schemas::{JobId, RunLogLines, TriggerId, WorkerId};

    fn log(id: i64, attempt: u32, seq: u64) -> RunLogLines {
        RunLogLines {
            trigger_id: TriggerId(id),
            job_id: JobId(1),
            worker_id: WorkerId("w".into()),
            attempt,
            seq,
            lines: vec![format!("{id}/{attempt}/{seq}")],
        }
    }

    #[test]
    fn log_layers_hold_one_event_per_run_in_seq_order() {
        let events = [
            log(2, 1, 2),
            log(1, 1, 1),
            log(2, 1, 1),
            log(2, 1, 2),
            log(3, 1, 5),
        ];
        let refs: Vec<&RunLogLines> = events.iter().collect();
        let layers = super::log_layers(&refs);
        let ids = |l: &Vec<&RunLogLines>| -> Vec<(i64, u64)> {
            l.iter().map(|e| (e.trigger_id.0, e.seq)).collect()
        };
        assert_eq!(layers.len(), 2);
        assert_eq!(ids(&layers[0]), vec![(1, 1), (2, 1), (3, 5)]);
        assert_eq!(ids(&layers[1]), vec![(2, 2)]);
    }

    #[test]
    fn a_panic_is_a_refusal_and_an_unreachable_database_is_not() {
        use super::StoreError;
        let panicked = StoreError::Panicked(crate::guard::Panicked {
            what: "storing results",
            message: "boom".into(),
        });
        assert!(panicked.refused());
        assert_eq!(panicked.to_string(), "storing results panicked: boom");
        assert!(!StoreError::Database(sqlx::Error::PoolTimedOut).refused());
    }

    #[test]
    fn clip_keeps_the_tail() {
        assert_eq!(super::clip(Some("abcdef".into()), 3).unwrap(), "…def");
        assert_eq!(super::clip(Some("abc".into()), 3).unwrap(), "abc");
        assert_eq!(super::clip(None, 3), None);
    }
}
