//! Retention of run records: `triggers` is partitioned by id, one partition per period
//! (`CADENZA_PARTITION_MS`, a day by default; see migration `0007_trigger_partitions.sql`).
//! This service, on whichever admin gets the advisory lock first:
//!
//! * starts the next partition when the newest one is a period old (an `ATTACH`, which does
//!   not block writes), moving the id sequence to it;
//! * drops a partition whole once the partition after it began more than the retention
//!   (`CADENZA_RETENTION_MS`, 30 days by default) ago, with the alarms of its runs and the
//!   audit rows of the same block of ids — no row deletes on `triggers`. The daily report
//!   keeps its counts;
//! * closes the spans of skipped fire times that have been quiet for a minute
//!   (`crate::misfires`), and deletes closed ones past the retention.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

/// Ids per partition: 2^40 (the migration's `span`).
pub const SPAN: i64 = 1 << 40;
/// Advisory lock serialising the admins' maintenance ("cadenza\x01").
const LOCK_KEY: i64 = 0x6361_6465_6e7a_6101;
/// Longest wait for the lock that detaching a partition takes on `triggers`.
const DETACH_LOCK_TIMEOUT: &str = "2s";

/// Settings, with documented defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionConfig {
    /// How long run records are kept, in ms (default 30 days). A run is dropped with its
    /// partition, between this and this plus one period after it was created.
    #[arg(long, env = "CADENZA_RETENTION_MS", default_value_t = 30 * 86_400_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_ms: u64,
    /// Period of one partition of run records, in ms (default one day).
    #[arg(long, env = "CADENZA_PARTITION_MS", default_value_t = 86_400_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub partition_ms: u64,
}

impl RetentionConfig {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.partition_ms / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(60))
    }
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Maintenance {
    /// The partition started, if any.
    pub created: Option<i64>,
    /// Partitions dropped.
    pub dropped: Vec<String>,
}

pub struct Retention {
    pool: PgPool,
    config: RetentionConfig,
}

/// Why a maintenance round failed.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// `trigger_partitions` names a table that is not a partition of `triggers`: it is not put
    /// into DDL.
    #[error("unexpected partition name {0:?}")]
    UnexpectedName(String),
}

/// A partition name from `trigger_partitions`, checked before it is put into DDL.
fn checked_name(name: &str) -> Result<&str, RetentionError> {
    let ok = name
        .strip_prefix("triggers_b")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(name)
    } else {
        Err(RetentionError::UnexpectedName(name.to_owned()))
    }
}

impl Retention {
    pub fn new(pool: PgPool, config: RetentionConfig) -> Self {
        Self { pool, config }
    }

    /// One round, if no other admin is doing one.
    pub async fn run_once(&self) -> Result<Maintenance, RetentionError> {
        let mut conn = self.pool.acquire().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LOCK_KEY)
            .fetch_one(&mut *conn)
            .await?;
        if !locked {
            return Ok(Maintenance::default());
        }
        let done = self.work(&mut conn).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LOCK_KEY)
            .execute(&mut *conn)
            .await;
        if unlocked.is_err() {
            // The lock would stay with the pooled session: close it instead.
            let _ = conn.detach();
        }
        done
    }

    async fn work(&self, conn: &mut PgConnection) -> Result<Maintenance, RetentionError> {
        let mut out = Maintenance::default();
        let due: Option<bool> = sqlx::query_scalar(sql!("retention/roll_due"))
            .bind(self.config.partition_ms as f64)
            .fetch_optional(&mut *conn)
            .await?;
        if due != Some(false) {
            let block: i64 = sqlx::query_scalar("SELECT cadenza_next_trigger_partition()")
                .fetch_one(&mut *conn)
                .await?;
            tracing::info!(block, "new partition of run records");
            out.created = Some(block);
        }
        let expired: Vec<(i64, String)> = sqlx::query_as(sql!("retention/expired"))
            .bind(self.config.retention_ms as f64)
            .fetch_all(&mut *conn)
            .await?;
        for (block, name) in expired {
            let name = checked_name(&name)?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            sqlx::query(&format!("SET LOCAL lock_timeout = '{DETACH_LOCK_TIMEOUT}'"))
                .execute(&mut *tx)
                .await?;
            sqlx::query(&format!("ALTER TABLE triggers DETACH PARTITION {name}"))
                .execute(&mut *tx)
                .await?;
            sqlx::query(&format!("DROP TABLE {name}"))
                .execute(&mut *tx)
                .await?;
            // The audit rows of the same block (migration 0009) go with them.
            sqlx::query(&format!("DROP TABLE IF EXISTS audit_b{block}"))
                .execute(&mut *tx)
                .await?;
            let lo = if block == 0 { i64::MIN } else { block * SPAN };
            sqlx::query(sql!("retention/forget"))
                .bind(block)
                .bind(lo)
                .bind(block.saturating_add(1).saturating_mul(SPAN))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::info!(
                block,
                partition = name,
                "run records past the retention dropped"
            );
            out.dropped.push(name.to_owned());
        }
        let gone = sqlx::query(sql!("retention/workflow_runs"))
            .bind(self.config.retention_ms as f64)
            .bind(10_000i64)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if gone > 0 {
            tracing::info!(
                workflow_runs = gone,
                "workflow runs past the retention deleted"
            );
        }
        let closed = crate::misfires::close_quiet(&self.pool).await?;
        if closed > 0 {
            tracing::debug!(spans = closed, "quiet spans of skipped fire times closed");
        }
        sqlx::query(sql!("misfires/prune"))
            .bind(self.config.retention_ms as f64)
            .bind(10_000i64)
            .execute(&mut *conn)
            .await?;
        sqlx::query(sql!("retention/login_failures"))
            .bind(100_000i64)
            .execute(&mut *conn)
            .await?;
        Ok(out)
    }

    /// Rounds until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        crate::every(
            self.config.interval(),
            shutdown,
            "partition maintenance",
            || async { self.run_once().await.map(drop) },
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_partition_names_reach_ddl() {
        assert!(super::checked_name("triggers_b12").is_ok());
        assert!(super::checked_name("triggers_b").is_err());
        assert!(super::checked_name("triggers_b1; DROP TABLE jobs").is_err());
    }
}
