//! Shard leases in `scheduler_lease`: share the shards evenly among live admins, renew held
//! ones, take free or expired ones, hand extra ones back, release all on shutdown.
//!
//! The database clock decides expiry (`now()` in every statement); this admin's monotonic clock
//! decides how long it may still act on a lease: until the time its renewal was sent + TTL −
//! margin. Live admins are counted from the `admins` table, refreshed at every round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;

use super::{SchedulerContext, SchedulerError};
use crate::ids::{AdminId, LeaseEpoch, ShardId};

#[derive(Debug, Default)]
struct View {
    held: BTreeMap<ShardId, LeaseEpoch>,
    /// Until when this admin may act on the leases it holds (its own monotonic clock).
    valid_until: Option<Instant>,
}

/// A shard's lease as this admin holds it: the shard, the epoch it holds it at, and the instant
/// (this admin's monotonic clock: renewal sent + TTL − margin) until which it trusts itself to
/// hold it. Writes under the lease name the epoch. The publisher's sends check the leases'
/// current validity ([`Leases::is_valid`]), which a renewal moves on, not this snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    pub shard: ShardId,
    pub epoch: LeaseEpoch,
    pub trusted_until: Instant,
}

/// The lease check of every write that depends on leases: which of `terms` the database still
/// gives to `admin` at their epochs, unexpired by its clock (one term per shard, by shard). Runs inside the caller's
/// transaction and locks the lease rows `FOR KEY SHARE`, so no takeover of a confirmed shard commits
/// before that transaction ends.
pub async fn confirm(
    conn: &mut PgConnection,
    admin: &AdminId,
    terms: &[Term],
) -> Result<Vec<Term>, sqlx::Error> {
    let mut asked: Vec<(ShardId, LeaseEpoch)> = terms.iter().map(|t| (t.shard, t.epoch)).collect();
    asked.sort_unstable();
    asked.dedup();
    let (shards, epochs): (Vec<i32>, Vec<LeaseEpoch>) =
        asked.into_iter().map(|(s, e)| (s.to_db(), e)).unzip();
    let valid: BTreeSet<(i32, LeaseEpoch)> =
        sqlx::query_as::<_, (i32, LeaseEpoch)>(sql!("lease/check"))
            .bind(admin)
            .bind(&shards)
            .bind(&epochs)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect();
    // By shard and epoch: a batch may hold two terms of one shard (lost and taken back while it
    // was routed), and only the current one may write.
    let confirmed: BTreeMap<ShardId, Term> = terms
        .iter()
        .filter(|t| valid.contains(&(t.shard.to_db(), t.epoch)))
        .map(|t| (t.shard, *t))
        .collect();
    Ok(confirmed.into_values().collect())
}

/// The shards this admin holds, shared by the scheduler's services.
#[derive(Debug, Default)]
pub struct Leases {
    view: RwLock<View>,
}

impl Leases {
    fn read<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        match self.view.read() {
            Ok(v) => f(&v),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    fn write<T>(&self, f: impl FnOnce(&mut View) -> T) -> T {
        match self.view.write() {
            Ok(mut v) => f(&mut v),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Whether leases may still be acted on by this admin's clock.
    pub fn is_valid(&self) -> bool {
        self.read(|v| v.valid_until.is_some_and(|t| Instant::now() < t))
    }

    /// The instant until which held leases may be acted on (the `trusted_until` of every
    /// [`Term`]), read now: a renewal since a term was taken moves it on.
    pub fn trusted_until(&self) -> Option<Instant> {
        self.read(|v| v.valid_until)
    }

    /// The terms of every shard held and still valid.
    pub fn terms(&self) -> Vec<Term> {
        self.read(|v| match v.valid_until {
            Some(until) if Instant::now() < until => v
                .held
                .iter()
                .map(|(s, e)| Term {
                    shard: *s,
                    epoch: *e,
                    trusted_until: until,
                })
                .collect(),
            _ => Vec::new(),
        })
    }

    /// The shards held and still valid.
    pub fn held_shards(&self) -> Vec<ShardId> {
        self.terms().into_iter().map(|t| t.shard).collect()
    }

    /// The term of `shard` if it is held and valid.
    pub fn term(&self, shard: ShardId) -> Option<Term> {
        self.read(|v| match (v.valid_until, v.held.get(&shard)) {
            (Some(until), Some(epoch)) if Instant::now() < until => Some(Term {
                shard,
                epoch: *epoch,
                trusted_until: until,
            }),
            _ => None,
        })
    }

    /// The epoch of `shard` if it is held and valid.
    pub fn epoch(&self, shard: ShardId) -> Option<LeaseEpoch> {
        self.term(shard).map(|t| t.epoch)
    }

    /// The epoch `shard` is held at, valid or not.
    pub fn held_epoch(&self, shard: ShardId) -> Option<LeaseEpoch> {
        self.read(|v| v.held.get(&shard).copied())
    }

    /// Number of shards held (valid or not).
    pub fn count(&self) -> usize {
        self.read(|v| v.held.len())
    }

    /// Stops acting on every held lease until the next renewal confirms them (this admin's
    /// producer was fenced: another admin took a shard of it over).
    pub fn distrust(&self) {
        self.write(|v| v.valid_until = None);
    }
}

/// A shard taken in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub shard: ShardId,
    pub epoch: LeaseEpoch,
    /// How long until the previous lease ended plus the margin: anything the previous holder
    /// sent has landed (or failed) by then.
    pub settle: Duration,
    /// The acquiring transaction's `now()`: earlier holders marked their runs before it.
    pub at: DateTime<Utc>,
    /// Transactional ids of earlier holders to fence before reading back what they left.
    pub fence: Vec<String>,
}

/// A row of `lease/acquire`: shard, new epoch, the previous lease's end, the database's `now()`,
/// and the producers to fence.
type AcquiredRow = (i32, LeaseEpoch, DateTime<Utc>, DateTime<Utc>, Vec<String>);

/// What one round changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LeaseChange {
    /// Live admins, this one included.
    pub admins: i64,
    pub acquired: Vec<Acquired>,
    /// Shards no longer held (taken over after this admin's lease expired).
    pub lost: Vec<ShardId>,
    /// Shards handed back because this admin held more than its share.
    pub released: Vec<ShardId>,
}

/// How many shards each of `admins` admins should hold.
pub fn fair_share(shard_count: u32, admins: i64) -> usize {
    let admins = admins.max(1) as u64;
    (u64::from(shard_count)).div_ceil(admins) as usize
}

pub struct LeaseManager {
    ctx: Arc<SchedulerContext>,
    /// Acquired shards whose pending triggers are not loaded yet (retried every round).
    unrecovered: Mutex<BTreeSet<ShardId>>,
}

impl LeaseManager {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self {
            ctx,
            unrecovered: Mutex::new(BTreeSet::new()),
        }
    }

    /// One round: heartbeat, renew, hand back extra shards, take free ones up to the fair share.
    pub async fn run_once(&self) -> Result<LeaseChange, SchedulerError> {
        let ctx = &self.ctx;
        let cfg = &ctx.config;
        let ttl_ms = cfg.lease_ttl_ms as f64;
        let sent = Instant::now();
        let late = ctx.lateness.summary(ctx.clock.now().timestamp());
        // The connection first: a wait for one is not part of the clock reading's round trip.
        let mut conn = ctx.pool.acquire().await?;
        let sent_wall = Utc::now();
        let (admins, db_now): (i64, DateTime<Utc>) = sqlx::query_as(sql!("lease/heartbeat"))
            .bind(&ctx.admin_id)
            .bind(ttl_ms)
            .bind(i64::try_from(late.count).unwrap_or(i64::MAX))
            .bind(late.p50_ms)
            .bind(late.p99_ms)
            .bind(late.max_ms)
            .bind(i64::try_from(cfg.publish_ahead().as_millis()).unwrap_or(i64::MAX))
            .fetch_one(&mut *conn)
            .await?;
        ctx.clock.observe(sent_wall, db_now, Utc::now());
        drop(conn);
        let share = fair_share(ctx.shard_count, admins);
        let (shards, epochs): (Vec<ShardId>, Vec<LeaseEpoch>) = ctx
            .leases
            .read(|v| v.held.iter().map(|(s, e)| (*s, *e)).unzip());
        let renewed: Vec<(i32, LeaseEpoch)> = sqlx::query_as(sql!("lease/renew"))
            .bind(&ctx.admin_id)
            .bind(ttl_ms)
            .bind(ShardId::to_db_all(&shards))
            .bind(&epochs)
            .fetch_all(&ctx.pool)
            .await?;
        let mut now_held = BTreeMap::new();
        for (s, e) in renewed {
            // The round's renewal is committed: a row that is not a shard is skipped, not a
            // reason to forget the others.
            match ShardId::from_db(s) {
                Ok(shard) => {
                    now_held.insert(shard, e);
                }
                Err(e) => tracing::error!(error = %e, "lease row ignored"),
            }
        }
        let lost: Vec<ShardId> = shards
            .iter()
            .copied()
            .filter(|s| !now_held.contains_key(s))
            .collect();
        let mut released = Vec::new();
        while now_held.len() > share {
            if let Some((s, _)) = now_held.pop_last() {
                released.push(s);
            }
        }
        let mut acquired = Vec::new();
        if now_held.len() < share {
            let rows: Vec<AcquiredRow> = sqlx::query_as(sql!("lease/acquire"))
                .bind(&ctx.admin_id)
                .bind(ttl_ms)
                .bind((share - now_held.len()) as i64)
                .bind(ctx.txn.as_ref().map(|t| t.id()))
                .fetch_all(&ctx.pool)
                .await?;
            for (shard, epoch, previous_expiry, db_now, fence) in rows {
                let settle_at = previous_expiry.max(DateTime::<Utc>::MIN_UTC)
                    + chrono::Duration::milliseconds(cfg.lease_margin_ms as i64);
                let settle = (settle_at - db_now).to_std().unwrap_or(Duration::ZERO);
                let shard = match ShardId::from_db(shard) {
                    Ok(shard) => shard,
                    Err(e) => {
                        tracing::error!(error = %e, "lease row ignored");
                        continue;
                    }
                };
                now_held.insert(shard, epoch);
                acquired.push(Acquired {
                    shard,
                    epoch,
                    settle,
                    at: db_now,
                    fence,
                });
            }
        }
        let m = crate::metrics::metrics();
        m.shards_held.set(now_held.len() as i64);
        m.shard_count.set(i64::from(ctx.shard_count));
        m.lease_acquired.inc_by(acquired.len() as u64);
        m.lease_lost.inc_by(lost.len() as u64);
        let valid_until = sent + cfg.lease_ttl().saturating_sub(cfg.lease_margin());
        ctx.leases.write(|v| {
            v.held = now_held;
            v.valid_until = Some(valid_until);
        });
        let gone: Vec<ShardId> = lost.iter().chain(&released).copied().collect();
        if !gone.is_empty() {
            let dropped = ctx.wheel.drop_shards(&gone);
            let handed: Vec<_> = dropped
                .into_iter()
                .filter(|t| released.contains(&t.shard))
                .collect();
            super::recover::hand_back(ctx, &handed).await;
        }
        if !released.is_empty() {
            // Out of the view above, so nothing of them is sent any more; what was sent is
            // decided before they go, so their next holder need not fence this admin.
            let decided = match &ctx.txn {
                Some(txn) => txn.barrier(cfg.lease_margin()).await,
                None => false,
            };
            sqlx::query(sql!("lease/release"))
                .bind(&ctx.admin_id)
                .bind(ShardId::to_db_all(&released))
                .bind(decided)
                .execute(&ctx.pool)
                .await?;
        }
        Ok(LeaseChange {
            admins,
            acquired,
            lost,
            released,
        })
    }

    /// Runs a round every `lease_renew` until `shutdown`; recovers acquired shards.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            let round = async { self.run_once().await.map_err(anyhow::Error::from) };
            match crate::guard::round("lease round", round).await {
                Ok(change) => {
                    if failing {
                        tracing::info!("lease renewal works again");
                        failing = false;
                    }
                    self.report(&change);
                    self.recover(change.acquired, &shutdown).await;
                }
                Err(e) => {
                    if !failing {
                        tracing::error!(error = %e, "lease renewal failed; scheduling stops when the leases run out");
                        failing = true;
                    }
                    if !self.ctx.leases.is_valid() {
                        let held: Vec<ShardId> =
                            self.ctx.leases.read(|v| v.held.keys().copied().collect());
                        if !held.is_empty() {
                            tracing::warn!(shards = held.len(), "leases ran out: not scheduling");
                            self.ctx.wheel.drop_shards(&held);
                            self.ctx.leases.write(|v| v.held.clear());
                            let m = crate::metrics::metrics();
                            m.shards_held.set(0);
                            m.lease_lost.inc_by(held.len() as u64);
                        }
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.ctx.config.lease_renew()) => {}
            }
        }
    }

    fn report(&self, change: &LeaseChange) {
        if !change.lost.is_empty() {
            tracing::warn!(shards = ?change.lost, "shards lost to another admin");
        }
        if !change.released.is_empty() {
            tracing::info!(shards = ?change.released, admins = change.admins, "shards handed back to share them evenly");
        }
        if !change.acquired.is_empty() {
            let shards: Vec<ShardId> = change.acquired.iter().map(|a| a.shard).collect();
            tracing::info!(
                ?shards,
                held = self.ctx.leases.count(),
                admins = change.admins,
                "shards acquired"
            );
        }
    }

    /// Loads the pending triggers of newly acquired shards (misfire rules first), and resolves
    /// what their previous holder left `publishing` once its sends have settled.
    async fn recover(&self, acquired: Vec<Acquired>, shutdown: &CancellationToken) {
        // Earlier holders marked their runs before this admin acquired the shards.
        for a in &acquired {
            self.ctx
                .wheel
                .acquired(a.shard, a.epoch, a.at.timestamp_millis());
        }
        let todo: Vec<ShardId> = {
            let mut set = self.unrecovered.lock().unwrap_or_else(|p| p.into_inner());
            set.extend(acquired.iter().map(|a| a.shard));
            // Only shards still held.
            let held: BTreeSet<ShardId> = self.ctx.leases.held_shards().into_iter().collect();
            set.retain(|s| held.contains(s));
            set.iter().copied().collect()
        };
        if todo.is_empty() {
            return;
        }
        match super::recover::load_shards(&self.ctx, &todo).await {
            Ok(n) => {
                tracing::debug!(shards = todo.len(), triggers = n, "pending triggers loaded");
                self.unrecovered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
            }
            Err(e) => {
                tracing::error!(error = %e, "loading pending triggers of acquired shards failed; will retry")
            }
        }
        if acquired.is_empty() {
            return;
        }
        let ctx = self.ctx.clone();
        let shards: Vec<ShardId> = acquired.iter().map(|a| a.shard).collect();
        let shutdown = shutdown.clone();
        if ctx.txn.is_some() {
            // Nothing an earlier holder sent can land once its producer is fenced: read back
            // right after, whatever the clocks say.
            ctx.fences
                .add(acquired.iter().map(|a| (a.shard, a.epoch, a.fence.clone())));
            tokio::spawn(async move {
                if let Err(e) = super::recover::fence_earlier_holders(&ctx).await {
                    tracing::warn!(error = %e, "fencing the producers of earlier holders failed; the sweep retries before it reads their runs back");
                    return;
                }
                let which = super::recover::ReadBack::AfterTakeover;
                if let Err(e) = super::recover::resolve_publishing(&ctx, &shards, which).await {
                    tracing::warn!(error = %e, "resolving triggers left publishing failed; the sweep retries");
                }
            });
            return;
        }
        let settle = acquired.iter().map(|a| a.settle).max().unwrap_or_default();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(settle) => {}
            }
            let which = super::recover::ReadBack::AfterTakeover;
            if let Err(e) = super::recover::resolve_publishing(&ctx, &shards, which).await {
                tracing::warn!(error = %e, "resolving triggers left publishing failed; the sweep retries");
            }
        });
    }

    /// Gives every held shard back and leaves the `admins` table (shutdown).
    pub async fn release_all(&self) {
        let held: Vec<ShardId> = self.ctx.leases.read(|v| v.held.keys().copied().collect());
        let shards: Vec<i32> = ShardId::to_db_all(&held);
        let trusted = self.ctx.leases.is_valid();
        self.ctx.leases.write(|v| {
            v.held.clear();
            v.valid_until = None;
        });
        // The publisher has stopped: what is left in the timer was never taken for sending.
        let dropped = self.ctx.wheel.drop_shards(&held);
        if trusted {
            super::recover::hand_back(&self.ctx, &dropped).await;
        }
        crate::metrics::metrics().shards_held.set(0);
        let decided = match &self.ctx.txn {
            Some(txn) => txn.barrier(self.ctx.config.lease_margin()).await,
            None => false,
        };
        if !shards.is_empty() {
            match sqlx::query(sql!("lease/release"))
                .bind(&self.ctx.admin_id)
                .bind(&shards)
                .bind(decided)
                .execute(&self.ctx.pool)
                .await
            {
                Ok(r) => tracing::info!(shards = r.rows_affected(), "shards released"),
                Err(e) => {
                    tracing::warn!(error = %e, "releasing shards failed; they expire after the TTL")
                }
            }
        }
        if let Err(e) = sqlx::query(sql!("lease/forget_admin"))
            .bind(&self.ctx.admin_id)
            .execute(&self.ctx.pool)
            .await
        {
            tracing::debug!(error = %e, "leaving the admins table failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn shares_cover_every_shard() {
        assert_eq!(fair_share(64, 1), 64);
        assert_eq!(fair_share(64, 3), 22);
        assert_eq!(fair_share(64, 0), 64);
        assert_eq!(fair_share(1, 5), 1);
        for admins in 1..10 {
            assert!(fair_share(64, admins) * admins as usize >= 64);
        }
    }
}
