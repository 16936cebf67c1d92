//! Recovery: what a shard's holder does beyond the scan.
//!
//! * On acquiring shards: apply the misfire rules to runs found overdue, load the `scheduled`
//!   runs into the timer, and — once the previous holder's sends have settled (its lease expiry
//!   plus the margin) — resolve the runs it left `publishing` by reading their partitions back to
//!   a fence record: runs found there are recorded `published`, the others are sent again.
//! * All the time: `LISTEN` for runs the API inserted, and sweep periodically for anything
//!   missed (overdue `scheduled` runs, `publishing` runs whose send failed).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{FenceMessage, JobType, TriggerRecord, HEADER_RECORD};
use chrono::{DateTime, Utc};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::lease::Term;
use super::{SchedulerContext, SchedulerError, NOTIFY_CHANNEL};
use crate::ids::{LeaseEpoch, ShardId};
use crate::trigger::{rows_to_pending, PendingRow};

/// How often held shards are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);
/// Longest a read-back of one partition may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(30);
/// How far back the read-back's search reaches at least, whatever the timer holds (see
/// [`search_floor`]): no run left `publishing` more than this past its fire time is left out of
/// it. Runs wait in the timer or for the recorder a few seconds when this admin keeps up; one due
/// long before may be a catch-up or a backlog, or be stuck.
const READ_BACK_REACH: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Misfire rules, then loads the pending triggers of newly acquired shards into the timer.
pub async fn load_shards(
    ctx: &SchedulerContext,
    shards: &[ShardId],
) -> Result<usize, SchedulerError> {
    let shards = ShardId::to_db_all(shards);
    apply_misfires(ctx, &shards).await?;
    // Up to the planning horizon: the scan writes a claimed job's fires that far ahead.
    load_pending(ctx, &shards, ctx.config.plan_horizon_ms()).await
}

/// Where the read-back's search stops when it runs from the sweep: the earliest fire time among
/// the runs this admin's timer knows (waiting, being sent, or delivered and waiting to be
/// recorded), but not earlier than [`READ_BACK_REACH`] before `now`. A run left `publishing`
/// that is due later is found by a later sweep, once the timer and the recorder have moved past
/// it, or once it is that old.
fn search_floor(earliest_known: Option<DateTime<Utc>>, now: DateTime<Utc>) -> DateTime<Utc> {
    let oldest = now - READ_BACK_REACH;
    earliest_known.map_or(now, |t| t.max(oldest))
}

async fn apply_misfires(ctx: &SchedulerContext, shards: &[i32]) -> Result<(), SchedulerError> {
    let mut tx = ctx.pool.begin().await?;
    let misfired: Vec<i64> = sqlx::query_scalar(sql!("recover/misfire_overdue"))
        .bind(shards)
        .fetch_all(&mut *tx)
        .await?;
    let ended = crate::outcome::after_misfire(&mut tx, &misfired).await?;
    tx.commit().await?;
    ended.record();
    if !misfired.is_empty() {
        tracing::warn!(count = misfired.len(), "overdue runs recorded as misfired");
    }
    Ok(())
}

async fn load_pending(
    ctx: &SchedulerContext,
    shards: &[i32],
    ahead_ms: u64,
) -> Result<usize, SchedulerError> {
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/pending_for_shards"))
        .bind(shards)
        .bind(ahead_ms as f64)
        .fetch_all(&ctx.pool)
        .await?;
    let pending = rows_to_pending(rows);
    let n = pending.len();
    ctx.wheel.insert(pending);
    Ok(n)
}

/// Puts the runs written claimed that this admin had not taken for sending (`dropped` from its
/// timer) back to `scheduled`, for the next holder of their shards to load at once. Called while
/// the shards are still held, before they are handed back; if it fails, the next holder reads
/// them back once the lease margin has passed.
pub async fn hand_back(ctx: &SchedulerContext, dropped: &[crate::trigger::PendingTrigger]) {
    let (ids, epochs): (Vec<i64>, Vec<LeaseEpoch>) = dropped
        .iter()
        .filter_map(|t| t.claim.as_ref().map(|c| (t.id.0, c.epoch)))
        .unzip();
    if ids.is_empty() {
        return;
    }
    match sqlx::query(sql!("recover/hand_back"))
        .bind(&ids)
        .bind(&epochs)
        .execute(&ctx.pool)
        .await
    {
        Ok(r) => tracing::debug!(
            runs = r.rows_affected(),
            "claimed runs not yet taken handed back as scheduled"
        ),
        Err(e) => {
            tracing::warn!(error = %e, runs = ids.len(), "handing back claimed runs failed; the next holder reads them back after the lease margin")
        }
    }
}

/// Puts the announced runs `ids` that are still scheduled in the timer.
async fn load_notified(ctx: &SchedulerContext, ids: &[i64]) -> Result<(), SchedulerError> {
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/get_pending"))
        .bind(ids)
        .fetch_all(&ctx.pool)
        .await?;
    ctx.wheel.insert(rows_to_pending(rows));
    Ok(())
}

#[derive(Debug, sqlx::FromRow)]
struct PublishingRow {
    id: i64,
    job_type: String,
    partition: Option<i32>,
    /// The mark the read-back acts on (compare-and-set): the epoch and time it was made.
    lease_epoch: Option<LeaseEpoch>,
    updated_at: DateTime<Utc>,
}

/// Which runs left `publishing` a read-back takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBack {
    /// Runs of earlier holders (earlier epochs) whatever their age — call it only once their
    /// sends have settled (the previous lease's expiry plus the margin) — and runs of this
    /// holder's epoch whose send has settled.
    AfterTakeover,
    /// Only runs whose send has settled by their age ([`settled_after_ms`]), whoever marked
    /// them, and that are due before the earliest run the timer knows or a minute ago,
    /// whichever is later ([`search_floor`]).
    Settled,
}

/// How long after its `publishing` mark and its fire time a run's send has landed or failed,
/// whoever made it: the run is sent at its fire time (a run the holder still has in its timer,
/// late, is left out by the caller), and its delivery times out before the lease margin ends;
/// twice the margin leaves about the margin again to spare.
pub fn settled_after_ms(config: &crate::config::SchedulerArgs) -> u64 {
    let ahead = u64::try_from(config.publish_ahead().as_millis()).unwrap_or(u64::MAX);
    config
        .lease_margin_ms
        .saturating_mul(2)
        .saturating_add(ahead)
}

/// What a read-back did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// Found on their partition: recorded `published`.
    pub published: usize,
    /// Not found: back to `scheduled`, sent again.
    pub resend: usize,
    /// Partitions that could not be read back; their runs stay `publishing` for the next sweep.
    pub failed_partitions: usize,
}

/// Runs found on a partition: trigger id → offset.
type Found = HashMap<i64, i64>;

/// Resolves the runs of `shards` left `publishing` (see [`ReadBack`] for which): reads each
/// partition involved back to a fence record written now; runs found are recorded `published`,
/// the rest go back to `scheduled` and are sent again. A partition that cannot be read back is
/// skipped (its runs wait for the next sweep) without holding up the others. One read-back runs
/// at a time, and each resolution is a compare-and-set on the mark it saw, so a run marked again
/// meanwhile (its new send may be in flight) is never reset.
pub async fn resolve_publishing(
    ctx: &SchedulerContext,
    shards: &[ShardId],
    which: ReadBack,
) -> Result<Resolved, SchedulerError> {
    // A sweep does not wait behind another read-back (a takeover's may read many partitions,
    // each for up to READ_BACK_TIMEOUT): it leaves its runs to the next sweep and goes on with
    // its other work.
    let _one_at_a_time = match which {
        ReadBack::AfterTakeover => ctx.read_back.lock().await,
        ReadBack::Settled => match ctx.read_back.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                tracing::debug!("a read-back is running; this sweep leaves its runs to the next");
                return Ok(Resolved::default());
            }
        },
    };
    // Not where an earlier holder's producer may still send (not fenced yet).
    let terms: Vec<_> = shards
        .iter()
        .filter(|s| !ctx.fences.blocks(**s))
        .filter_map(|s| ctx.leases.term(*s))
        .collect();
    let Some(first) = terms.first().map(|t| t.shard) else {
        return Ok(Resolved::default());
    };
    let shard_ids = ShardId::to_db_all(terms.iter().map(|t| &t.shard));
    // Shards where runs an earlier holder marked may be left unresolved after the settled mark
    // (just acquired): searched from the mark. In the others, the only runs left `publishing`
    // undelivered are those this admin marked and knows it has not recorded (a send or its
    // record failed), looked up by id.
    let (fresh, ready): (Vec<&Term>, Vec<&Term>) = terms
        .iter()
        .partition(|t| which == ReadBack::AfterTakeover || !ctx.wheel.mark_ready(t.shard, t.epoch));
    let mut rows: Vec<PublishingRow> = Vec::new();
    if !fresh.is_empty() {
        rows = sqlx::query_as(sql!("recover/publishing_rows"))
            .bind(ShardId::to_db_all(fresh.iter().map(|t| &t.shard)))
            .bind(fresh.iter().map(|t| t.epoch).collect::<Vec<_>>())
            .bind(settled_after_ms(&ctx.config) as f64)
            .bind(which == ReadBack::AfterTakeover)
            // After a takeover, everything the previous holders left; otherwise not past the
            // earliest run this admin is about to take, send or record (see `search_floor`).
            .bind(match which {
                ReadBack::AfterTakeover => None,
                ReadBack::Settled => Some(search_floor(
                    ctx.wheel
                        .earliest_known_ms()
                        .and_then(DateTime::from_timestamp_millis),
                    ctx.clock.now(),
                )),
            })
            .bind(earlier_holders_until(ctx, &fresh))
            .fetch_all(&ctx.pool)
            .await?;
    }
    if !ready.is_empty() && which == ReadBack::Settled {
        let own = ctx.wheel.unsettled_unknown();
        if !own.is_empty() {
            let by_id: Vec<PublishingRow> = sqlx::query_as(sql!("recover/publishing_by_id"))
                .bind(own.iter().map(|r| r.id).collect::<Vec<_>>())
                .bind(settled_after_ms(&ctx.config) as f64)
                // Only runs of the shards read back here: a run marked in a shard given up
                // since is its new holder's to resolve.
                .bind(ShardId::to_db_all(ready.iter().map(|t| &t.shard)))
                .fetch_all(&ctx.pool)
                .await?;
            let seen: HashSet<i64> = rows.iter().map(|r| r.id).collect();
            rows.extend(by_id.into_iter().filter(|r| !seen.contains(&r.id)));
        }
    }
    // Runs this admin wrote claimed and still holds in its timer (or is sending) are not
    // settled, however long ago they were marked: the scan writes them up to the planning
    // horizon ahead of their fire time.
    let waiting = ctx.wheel.known_among(rows.iter().map(|r| r.id));
    let mut rows: Vec<PublishingRow> = rows
        .into_iter()
        .filter(|r| !waiting.contains(&r.id))
        .collect();
    if rows.is_empty() {
        return Ok(Resolved::default());
    }
    // The recorder records delivered runs, then lets the timer forget them: a run it recorded
    // while the search above ran is no longer known, nor `publishing` any more. Looked up again
    // by id, so that such runs are not read back for nothing (a partition read back to a fence
    // each time, under load when the recorder is a few seconds behind).
    let still: HashSet<i64> = sqlx::query_scalar(sql!("recover/still_publishing"))
        .bind(rows.iter().map(|r| r.id).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.lease_epoch).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.updated_at).collect::<Vec<_>>())
        .fetch_all(&ctx.pool)
        .await?
        .into_iter()
        .collect();
    let candidates = rows.len();
    rows.retain(|r| still.contains(&r.id));
    if rows.len() < candidates {
        tracing::debug!(
            runs = candidates - rows.len(),
            "runs left publishing recorded (or marked again) while the read-back searched; not read back"
        );
    }
    if rows.is_empty() {
        return Ok(Resolved::default());
    }
    let mut groups: BTreeMap<(String, i32), Vec<&PublishingRow>> = BTreeMap::new();
    let mut missing: Vec<&PublishingRow> = Vec::new();
    for r in &rows {
        match r.partition {
            Some(p) => groups.entry((r.job_type.clone(), p)).or_default().push(r),
            None => missing.push(r),
        }
    }
    let mut found: Vec<(&PublishingRow, i32, i64)> = Vec::new();
    let mut out = Resolved::default();
    for ((job_type, partition), group) in groups {
        match read_back_partition(ctx, &job_type, partition, &group, first).await {
            Ok(offsets) => {
                crate::metrics::metrics()
                    .read_backs
                    .get_or_create(&crate::metrics::OutcomeLabel {
                        outcome: "done".to_owned(),
                    })
                    .inc();
                for r in group {
                    match offsets.get(&r.id).copied() {
                        Some(offset) => found.push((r, partition, offset)),
                        None => missing.push(r),
                    }
                }
            }
            Err(e) => {
                out.failed_partitions += 1;
                tracing::warn!(%job_type, partition, runs = group.len(), error = %e, "reading a partition back failed; its runs stay publishing until the next sweep");
            }
        }
    }
    if !found.is_empty() {
        out.published = sqlx::query(sql!("recover/resolve_found"))
            .bind(found.iter().map(|(r, _, _)| r.id).collect::<Vec<_>>())
            .bind(found.iter().map(|(_, p, _)| *p).collect::<Vec<_>>())
            .bind(found.iter().map(|(_, _, o)| *o).collect::<Vec<_>>())
            .bind(
                found
                    .iter()
                    .map(|(r, _, _)| r.lease_epoch)
                    .collect::<Vec<_>>(),
            )
            .bind(
                found
                    .iter()
                    .map(|(r, _, _)| r.updated_at)
                    .collect::<Vec<_>>(),
            )
            .execute(&ctx.pool)
            .await?
            .rows_affected() as usize;
    }
    if !missing.is_empty() {
        out.resend = sqlx::query(sql!("recover/resolve_missing"))
            .bind(missing.iter().map(|r| r.id).collect::<Vec<_>>())
            .bind(missing.iter().map(|r| r.lease_epoch).collect::<Vec<_>>())
            .bind(missing.iter().map(|r| r.updated_at).collect::<Vec<_>>())
            .execute(&ctx.pool)
            .await?
            .rows_affected() as usize;
        // Load them again right away, misfire rules first: those overdue, and those written
        // claimed by an earlier holder up to the planning horizon ahead, not due yet.
        apply_misfires(ctx, &shard_ids).await?;
        load_pending(ctx, &shard_ids, ctx.config.plan_horizon_ms()).await?;
    }
    tracing::info!(
        published = out.published,
        resend = out.resend,
        failed_partitions = out.failed_partitions,
        "runs left publishing resolved"
    );
    let m = crate::metrics::metrics();
    let label = |outcome: &str| crate::metrics::OutcomeLabel {
        outcome: outcome.to_owned(),
    };
    m.read_backs
        .get_or_create(&label("failed"))
        .inc_by(out.failed_partitions as u64);
    m.read_back_runs
        .get_or_create(&label("found"))
        .inc_by(out.published as u64);
    m.read_back_runs
        .get_or_create(&label("resent"))
        .inc_by(out.resend as u64);
    Ok(out)
}

/// Reads one partition back from before the earliest of `group` was marked to a fence record
/// written now; returns the offset of each run of `group` found there. Keeps only those runs in
/// memory, however long the partition.
async fn read_back_partition(
    ctx: &SchedulerContext,
    job_type: &str,
    partition: i32,
    group: &[&PublishingRow],
    shard: ShardId,
) -> Result<Found, SchedulerError> {
    let jt = JobType::parse(job_type)?;
    let topic = ctx.kafka.topics().trigger(&jt);
    let earliest_mark = group
        .iter()
        .map(|r| r.updated_at)
        .min()
        .unwrap_or_else(Utc::now);
    let start: Option<i64> = sqlx::query_scalar(sql!("recover/read_back_start"))
        .bind(job_type)
        .bind(partition)
        .bind(earliest_mark)
        .fetch_one(&ctx.pool)
        .await?;
    let fence = write_fence(ctx, &topic, partition, shard).await?;
    let wanted: HashSet<i64> = group.iter().map(|r| r.id).collect();
    let found = ctx
        .kafka
        .scan_partition(
            &topic,
            partition,
            start,
            fence,
            READ_BACK_TIMEOUT,
            move |found: &mut Found, r| {
                if let Some(TriggerRecord::Trigger(t)) = r.record {
                    if wanted.contains(&t.trigger_id.0) {
                        found.entry(t.trigger_id.0).or_insert(r.offset);
                    }
                }
            },
        )
        .await
        .map_err(|e| SchedulerError::ReadBack {
            topic: topic.clone(),
            partition,
            source: e.into(),
        })?;
    tracing::info!(%topic, partition, from = ?start, fence, "partition read back");
    Ok(found)
}

/// Fences the producers of the earlier holders of the shards acquired (and waits for what this
/// admin itself sent in them before, if it held them at an earlier epoch), then clears them from
/// the leases: from here on nothing an earlier holder sent can land, so what they left
/// `publishing` can be read back.
pub async fn fence_earlier_holders(ctx: &SchedulerContext) -> Result<(), SchedulerError> {
    let Some(txn) = &ctx.txn else {
        return Ok(());
    };
    // Shards given up since are their new holder's to fence.
    let (pending, gone): (Vec<_>, Vec<_>) = ctx
        .fences
        .pending()
        .into_iter()
        .partition(|(s, e, _)| ctx.leases.held_epoch(*s) == Some(*e));
    ctx.fences
        .done(&gone.iter().map(|(s, e, _)| (*s, *e)).collect::<Vec<_>>());
    if pending.is_empty() {
        return Ok(());
    }
    if !txn.barrier(ctx.config.lease_ttl()).await {
        return Err(SchedulerError::Fence(
            "this admin's own earlier sends are not decided yet".into(),
        ));
    }
    let mut ids: Vec<String> = pending.iter().flat_map(|(_, _, ids)| ids.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    txn.fence(&ids)
        .await
        .map_err(|e| SchedulerError::Fence(e.to_string()))?;
    let (shards, epochs): (Vec<i32>, Vec<LeaseEpoch>) =
        pending.iter().map(|(s, e, _)| (s.to_db(), *e)).unzip();
    sqlx::query(sql!("lease/fenced"))
        .bind(&ctx.admin_id)
        .bind(&shards)
        .bind(&epochs)
        .execute(&ctx.pool)
        .await?;
    let done: Vec<(ShardId, LeaseEpoch)> = pending.iter().map(|(s, e, _)| (*s, *e)).collect();
    ctx.fences.done(&done);
    if !ids.is_empty() {
        tracing::info!(
            producers = ids.len(),
            shards = done.len(),
            "earlier holders fenced"
        );
    }
    Ok(())
}

/// Writes a fence record to a partition; returns its offset.
async fn write_fence(
    ctx: &SchedulerContext,
    topic: &str,
    partition: i32,
    shard: ShardId,
) -> Result<i64, SchedulerError> {
    let fence = TriggerRecord::Fence(FenceMessage {
        admin_id: ctx.admin_id.to_string(),
        shard: shard.0,
        epoch: ctx.leases.epoch(shard).map_or(0, |e| e.0),
        nonce: format!("{:032x}", rand::random::<u128>()),
        written_at: ctx.clock.now(),
    });
    let payload = serde_json::to_vec(&fence)?;
    ctx.kafka.renew_producer_if_fatal();
    let record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
        .partition(partition)
        .payload(payload.as_slice())
        .headers(OwnedHeaders::new().insert(Header {
            key: HEADER_RECORD,
            value: Some("fence"),
        }));
    match ctx
        .kafka
        .producer()
        .send(record, Duration::from_secs(10))
        .await
    {
        Ok(d) => Ok(d.offset),
        Err((e, _)) => {
            ctx.kafka.note_send_error(&e);
            Err(e.into())
        }
    }
}

/// Parses a notification payload `<shard>:<trigger id>`.
fn parse_payload(p: &str) -> Option<(ShardId, i64)> {
    let (shard, id) = p.split_once(':')?;
    Some((ShardId(shard.parse().ok()?), id.parse().ok()?))
}

/// One sweep of the held shards: misfire rules, runs whose send failed, overdue runs not in the
/// timer.
async fn sweep(ctx: &SchedulerContext) -> Result<(), SchedulerError> {
    let held = ctx.leases.held_shards();
    if held.is_empty() {
        return Ok(());
    }
    let shard_ids = ShardId::to_db_all(&held);
    apply_misfires(ctx, &shard_ids).await?;
    // Runs waiting first, so that a slow read-back (below) holds none of them back. Only
    // overdue runs of a schedule: the scan hands fresh ones to the timer itself, and runs put
    // back to `scheduled` are loaded where they are put back (read-back, takeover).
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/overdue_scheduled"))
        .bind(&shard_ids)
        .fetch_all(&ctx.pool)
        .await?;
    ctx.wheel.insert(rows_to_pending(rows));
    // Runs the scan did not write, as they come within the look-ahead.
    let rows: Vec<PendingRow> = sqlx::query_as(sql!("triggers/pending_requested"))
        .bind(&shard_ids)
        .bind(ctx.config.lookahead_ms as f64)
        .fetch_all(&ctx.pool)
        .await?;
    ctx.wheel.insert(rows_to_pending(rows));
    // A send settles within the producer's timeout, shorter than the margin (or, with
    // transactions, once its transaction is decided, which the read-back waits for).
    if !ctx.fences.pending().is_empty() {
        if let Err(e) = fence_earlier_holders(ctx).await {
            tracing::warn!(error = %e, "fencing the producers of earlier holders failed; their runs are read back once it works");
        }
    }
    resolve_publishing(ctx, &held, ReadBack::Settled).await?;
    settle_marks(ctx, &held).await?;
    Ok(())
}

/// For each of `terms`, a time after which no earlier holder of its shard marked a run (see
/// [`super::wheel::Wheel::earlier_holders_until_ms`]).
fn earlier_holders_until(ctx: &SchedulerContext, terms: &[&Term]) -> Vec<DateTime<Utc>> {
    let now = ctx.clock.now();
    terms
        .iter()
        .map(|t| {
            DateTime::from_timestamp_millis(ctx.wheel.earlier_holders_until_ms(
                t.shard,
                t.epoch,
                now.timestamp_millis(),
            ))
            .unwrap_or(now)
        })
        .collect()
}

/// Moves the settled marks of the held shards (migration 0019): first forgets the runs this
/// admin marked that are resolved by now (their send failed and a read-back settled them, or a
/// worker started them, ...), then, for each shard where no run an earlier holder marked is
/// left unresolved after the mark, writes the earliest mark among the runs it still has in
/// flight. The read-back's search starts there.
async fn settle_marks(ctx: &SchedulerContext, held: &[ShardId]) -> Result<(), SchedulerError> {
    let unknown = ctx.wheel.unsettled_unknown();
    if !unknown.is_empty() {
        let still: HashSet<i64> = sqlx::query_scalar(sql!("recover/unsettled"))
            .bind(unknown.iter().map(|r| r.id).collect::<Vec<_>>())
            .fetch_all(&ctx.pool)
            .await?
            .into_iter()
            .collect();
        ctx.wheel
            .resolved(unknown.into_iter().filter(|r| !still.contains(&r.id)));
    }
    let terms: Vec<_> = held.iter().filter_map(|s| ctx.leases.term(*s)).collect();
    let waiting: Vec<_> = terms
        .iter()
        .filter(|t| !ctx.wheel.mark_ready(t.shard, t.epoch))
        .collect();
    if !waiting.is_empty() {
        let until = earlier_holders_until(ctx, &waiting);
        let left: HashSet<i32> = sqlx::query_scalar(sql!("recover/left_by_earlier_holders"))
            .bind(ShardId::to_db_all(waiting.iter().map(|t| &t.shard)))
            .bind(waiting.iter().map(|t| t.epoch).collect::<Vec<_>>())
            .bind(&until)
            .fetch_all(&ctx.pool)
            .await?
            .into_iter()
            .collect();
        for t in waiting {
            // Refused for a shard dropped while the query ran (see `Wheel::set_mark_ready`).
            if !left.contains(&t.shard.to_db()) && !ctx.wheel.set_mark_ready(t.shard, t.epoch) {
                tracing::debug!(
                    shard = t.shard.0,
                    "shard given up while its mark was checked"
                );
            }
        }
    }
    let asked: Vec<(ShardId, LeaseEpoch)> = terms.iter().map(|t| (t.shard, t.epoch)).collect();
    let marks = ctx
        .wheel
        .settled_marks(&asked, ctx.clock.now().timestamp_millis());
    let (mut shards, mut epochs, mut at) = (Vec::new(), Vec::new(), Vec::new());
    for (shard, epoch, ms) in marks {
        if let Some(t) = DateTime::from_timestamp_millis(ms) {
            shards.push(shard);
            epochs.push(epoch);
            at.push(t);
        }
    }
    if shards.is_empty() {
        return Ok(());
    }
    sqlx::query(sql!("lease/settled"))
        .bind(ShardId::to_db_all(&shards))
        .bind(&epochs)
        .bind(&at)
        .bind(ctx.admin_id.to_string())
        .execute(&ctx.pool)
        .await?;
    tracing::debug!(
        shards = shards.len(),
        behind_ms = at
            .iter()
            .min()
            .map(|m| (ctx.clock.now() - *m).num_milliseconds()),
        "settled marks written"
    );
    Ok(())
}

/// The most announced runs loaded in one statement.
const NOTIFIED_BATCH: usize = 5000;

/// Listens for triggers inserted by any admin's API and sweeps periodically, until `shutdown`.
pub async fn listen(ctx: Arc<SchedulerContext>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listener: Option<PgListener> = None;
    loop {
        if listener.is_none() {
            match PgListener::connect_with(&ctx.pool).await {
                Ok(mut l) => match l.listen(NOTIFY_CHANNEL).await {
                    Ok(()) => listener = Some(l),
                    Err(e) => tracing::debug!(error = %e, "LISTEN failed"),
                },
                Err(e) => tracing::debug!(error = %e, "LISTEN connection failed"),
            }
        }
        let notification = async {
            match listener.as_mut() {
                Some(l) => l.try_recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                let round = async { sweep(&ctx).await.map_err(anyhow::Error::from) };
                if let Err(e) = crate::guard::round("sweep", round).await {
                    tracing::warn!(error = %e, "sweep of held shards failed; trying again next round");
                }
            }
            n = notification => match n {
                Ok(Some(n)) => {
                    // A release or a replay announces many runs at once: they are loaded
                    // together, with those already received behind this one.
                    let mut ids = Vec::new();
                    let mut next = Some(n);
                    while let Some(n) = next.take() {
                        if let Some((shard, id)) = parse_payload(n.payload()) {
                            if ctx.leases.epoch(shard).is_some() {
                                ids.push(id);
                            }
                        }
                        if ids.len() < NOTIFIED_BATCH {
                            // Only what has arrived already: polled once, never waited for.
                            next = listener.as_mut().and_then(|l| {
                                futures::FutureExt::now_or_never(l.try_recv())
                                    .and_then(|r| r.ok().flatten())
                            });
                        }
                    }
                    if !ids.is_empty() {
                        if let Err(e) = load_notified(&ctx, &ids).await {
                            tracing::debug!(error = %e, runs = ids.len(), "loading notified triggers failed; the sweep will");
                        }
                    }
                }
                // The connection dropped; the sweep covers the gap.
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "LISTEN connection lost");
                    listener = None;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    #[test]
    fn the_search_stops_at_the_earliest_known_run_but_reaches_back_a_minute_at_least() {
        let now = Utc::now();
        let floor =
            |earliest: Option<TimeDelta>| super::search_floor(earliest.map(|d| now - d), now);
        assert_eq!(
            floor(Some(TimeDelta::seconds(5))),
            now - TimeDelta::seconds(5)
        );
        assert_eq!(
            floor(None),
            now,
            "nothing known: only the age bound applies"
        );
        assert_eq!(
            floor(Some(TimeDelta::minutes(10))),
            now - super::READ_BACK_REACH,
            "a run known since long before (a backlog, or stuck) holds nothing older back"
        );
        assert_eq!(
            floor(Some(-TimeDelta::seconds(3))),
            now + TimeDelta::seconds(3)
        );
    }

    #[test]
    fn payload() {
        assert_eq!(
            super::parse_payload("3:42"),
            Some((crate::ids::ShardId(3), 42))
        );
        assert_eq!(super::parse_payload("x"), None);
    }
}
