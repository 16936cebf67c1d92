//! Shard leases in `scheduler_lease`: acquire free or expired shards, renew held ones, release
//! on shutdown. The database clock decides expiry; the admin's monotonic clock decides how long
//! it may still act on a lease (`valid_until` = time the renewal was sent + TTL − margin).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::SchedulerContext;

#[derive(Debug, Default)]
struct View {
    /// shard → epoch
    held: BTreeMap<u32, i64>,
    valid_until: Option<Instant>,
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

    /// `(shard, epoch)` of every shard held and still valid.
    pub fn held(&self) -> Vec<(u32, i64)> {
        if !self.is_valid() {
            return Vec::new();
        }
        self.read(|v| v.held.iter().map(|(s, e)| (*s, *e)).collect())
    }

    /// The epoch of `shard` if it is held and valid.
    pub fn epoch(&self, shard: u32) -> Option<i64> {
        if !self.is_valid() {
            return None;
        }
        self.read(|v| v.held.get(&shard).copied())
    }

    /// Number of shards held (valid or not).
    pub fn count(&self) -> usize {
        self.read(|v| v.held.len())
    }
}

/// What one renewal changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LeaseChange {
    /// Shards newly held, or re-taken with a new epoch.
    pub acquired: Vec<u32>,
    /// Shards no longer held.
    pub lost: Vec<u32>,
}

pub struct LeaseManager {
    ctx: Arc<SchedulerContext>,
}

impl LeaseManager {
    pub fn new(ctx: Arc<SchedulerContext>) -> Self {
        Self { ctx }
    }

    /// The shards this admin tries to hold. One admin takes every free shard; balancing between
    /// several admins is decided here.
    fn wanted(&self) -> Vec<i32> {
        (0..self.ctx.shard_count as i32).collect()
    }

    /// One acquire-and-renew round.
    pub async fn run_once(&self) -> Result<LeaseChange, sqlx::Error> {
        let cfg = &self.ctx.config;
        let sent = Instant::now();
        let rows: Vec<(i32, i64)> = sqlx::query_as(sql!("lease/acquire"))
            .bind(&self.ctx.admin_id)
            .bind(cfg.lease_ttl_ms as f64)
            .bind(self.wanted())
            .fetch_all(&self.ctx.pool)
            .await?;
        let now_held: BTreeMap<u32, i64> = rows
            .into_iter()
            .filter_map(|(s, e)| u32::try_from(s).ok().map(|s| (s, e)))
            .collect();
        let valid_until = sent + cfg.lease_ttl().saturating_sub(cfg.lease_margin());
        let change = self.ctx.leases.write(|v| {
            let was_valid = v.valid_until.is_some_and(|t| Instant::now() < t);
            let acquired = now_held
                .iter()
                .filter(|(s, e)| !was_valid || v.held.get(s) != Some(e))
                .map(|(s, _)| *s)
                .collect();
            let lost = v
                .held
                .keys()
                .filter(|s| !now_held.contains_key(s))
                .copied()
                .collect();
            v.held = now_held;
            v.valid_until = Some(valid_until);
            LeaseChange { acquired, lost }
        });
        Ok(change)
    }

    /// Renews every `lease_renew` until `shutdown`; hands new shards to recovery and drops lost
    /// ones from the timer.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut last_error_logged = false;
        loop {
            match self.run_once().await {
                Ok(change) => {
                    last_error_logged = false;
                    if !change.lost.is_empty() {
                        tracing::warn!(shards = ?change.lost, "shards lost");
                        self.ctx.wheel.drop_shards(&change.lost);
                    }
                    if !change.acquired.is_empty() {
                        tracing::info!(shards = ?change.acquired, held = self.ctx.leases.count(), "shards acquired");
                        if let Err(e) =
                            super::recover::load_shards(&self.ctx, &change.acquired).await
                        {
                            tracing::error!(error = %e, "loading pending triggers of acquired shards failed; will retry");
                            // Forget the shards so the next round counts them as acquired again.
                            self.ctx.leases.write(|v| {
                                for s in &change.acquired {
                                    v.held.remove(s);
                                }
                            });
                        }
                    }
                }
                Err(e) => {
                    if !last_error_logged {
                        tracing::error!(error = %e, "lease renewal failed; scheduling stops when the leases run out");
                        last_error_logged = true;
                    }
                    if !self.ctx.leases.is_valid() {
                        let held: Vec<u32> =
                            self.ctx.leases.read(|v| v.held.keys().copied().collect());
                        if !held.is_empty() {
                            tracing::warn!(shards = held.len(), "leases ran out");
                            self.ctx.wheel.drop_shards(&held);
                            self.ctx.leases.write(|v| v.held.clear());
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

    /// Gives every held shard back (shutdown).
    pub async fn release_all(&self) {
        let shards: Vec<i32> = self
            .ctx
            .leases
            .read(|v| v.held.keys().map(|s| *s as i32).collect());
        self.ctx.leases.write(|v| {
            v.held.clear();
            v.valid_until = None;
        });
        if shards.is_empty() {
            return;
        }
        match sqlx::query(sql!("lease/release"))
            .bind(&self.ctx.admin_id)
            .bind(&shards)
            .execute(&self.ctx.pool)
            .await
        {
            Ok(r) => tracing::info!(shards = r.rows_affected(), "shards released"),
            Err(e) => {
                tracing::warn!(error = %e, "releasing shards failed; they expire after the TTL")
            }
        }
    }
}
