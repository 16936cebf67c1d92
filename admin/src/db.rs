//! The one place that builds the PostgreSQL pool, and the migrator.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connects lazily: the admin starts (and serves `/healthz`) while the database is down, and
/// every query reports the outage as an error instead.
///
/// `idle_transaction_ms` bounds how long a session may sit in an open transaction without
/// sending anything: an admin that is paused (or hangs) inside a scheduling transaction would
/// otherwise keep its row locks, and with them the shards it is about to lose, from the admin
/// that takes them over. The server ends such a session and the locks go with it.
pub fn pool(database_url: &str, idle_transaction_ms: u64) -> Result<PgPool, sqlx::Error> {
    build(database_url, idle_transaction_ms, None, 16)
}

/// Connections of the API's own pool.
pub const API_CONNECTIONS: u32 = 8;
/// The longest a statement of the API may run.
pub const API_STATEMENT_TIMEOUT_MS: u64 = 30_000;

/// The API's own pool ([`API_CONNECTIONS`] connections, statements cut at
/// [`API_STATEMENT_TIMEOUT_MS`]): a slow or heavy request (a year's report, many at once) waits
/// for one of these and never for the connections that renew leases and publish.
pub fn api_pool(database_url: &str, idle_transaction_ms: u64) -> Result<PgPool, sqlx::Error> {
    build(
        database_url,
        idle_transaction_ms,
        Some(API_STATEMENT_TIMEOUT_MS),
        API_CONNECTIONS,
    )
}

fn build(
    database_url: &str,
    idle_transaction_ms: u64,
    statement_timeout_ms: Option<u64>,
    connections: u32,
) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = database_url.parse()?;
    let mut settings = vec![(
        "idle_in_transaction_session_timeout",
        idle_transaction_ms.to_string(),
    )];
    if let Some(ms) = statement_timeout_ms {
        settings.push(("statement_timeout", ms.to_string()));
    }
    let options = options.application_name("cadenza-admin").options(settings);
    Ok(PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(options))
}

/// Applies the migrations (idempotent; concurrent admins serialise on sqlx's advisory lock).
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// Why [`ensure_shard_count`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardCountError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// `cluster_settings` holds a shard count that is not a number.
    #[error(transparent)]
    Unreadable(#[from] std::num::ParseIntError),
    #[error(
        "CADENZA_SHARD_COUNT is {configured} but this cluster was created with {stored}; it is fixed once per cluster"
    )]
    Mismatch { configured: u32, stored: u32 },
}

/// Reads `shard_count` from `cluster_settings`, writing the configured one if this is a new
/// cluster. A different configured value is an error: moving jobs between shards is not supported.
pub async fn ensure_shard_count(pool: &PgPool, configured: u32) -> Result<u32, ShardCountError> {
    sqlx::query(sql!("settings/insert_shard_count"))
        .bind(configured.to_string())
        .execute(pool)
        .await?;
    let stored: String = sqlx::query_scalar(sql!("settings/get_shard_count"))
        .fetch_one(pool)
        .await?;
    let stored: u32 = stored.parse()?;
    if stored != configured {
        return Err(ShardCountError::Mismatch { configured, stored });
    }
    sqlx::query(sql!("settings/create_lease_rows"))
        .bind(stored as i32)
        .execute(pool)
        .await?;
    Ok(stored)
}
