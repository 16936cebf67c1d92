//! Cadenza admin: owns job definitions in PostgreSQL, schedules them under per-shard leases,
//! publishes triggers to Kafka, ingests results and heartbeats, and serves the HTTP API.
//!
//! **Architecture invariant:** this is the only crate that touches PostgreSQL.

/// The text of `queries/<name>.sql`, embedded at compile time.
#[macro_export]
macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/queries/",
            $name,
            ".sql"
        ))
    };
}

pub(crate) mod alarm;
pub mod api;
pub(crate) mod audit;
pub mod auth;
pub mod config;
pub(crate) mod console;
pub mod db;
pub(crate) mod flow;
pub(crate) mod guard;
pub mod ids;
pub(crate) mod import;
pub(crate) mod ingest;
pub(crate) mod jobs;
pub mod kafka;
pub(crate) mod metrics;
pub(crate) mod misfires;
pub(crate) mod outcome;
pub(crate) mod quartz;
pub(crate) mod replay;
pub(crate) mod retention;
pub mod route;
pub mod schedule;
pub mod scheduler;
pub(crate) mod serve;
pub mod trigger;
pub(crate) mod users;
pub mod workflow;

use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::Topics;
use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::AdminConfig;
use crate::kafka::{KafkaClients, KafkaSettings};

/// Calls `round` every `interval` (a late round delays the next) until `shutdown`; a failed or
/// panicking round is logged as `what` and tried again at the next tick.
pub(crate) async fn every<F, Fut, E>(
    interval: Duration,
    shutdown: CancellationToken,
    what: &'static str,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                match guard::catch_panic(what, round()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "{what} failed; trying again next round"),
                    Err(e) => tracing::warn!(error = %e, "{what} failed; trying again next round"),
                }
            }
        }
    }
}

/// Why a one-off command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Input(#[from] std::io::Error),
    #[error("password: none given on standard input")]
    NoPassword,
    #[error(transparent)]
    Create(#[from] users::CreateError),
    #[error("the user was not created")]
    NotCreated,
}

/// Runs a one-off command (`cadenza-admin users create …`); `input` gives the password.
pub async fn run_command(
    config: &AdminConfig,
    command: &config::AdminCommand,
    input: impl std::io::BufRead,
) -> Result<String, CommandError> {
    let pool = db::pool(config.database_url.expose_secret(), 5_000)?;
    db::migrate(&pool).await?;
    match command {
        config::AdminCommand::Users(config::UsersCommand::Create {
            name,
            role,
            job_types,
        }) => {
            let password = input
                .lines()
                .next()
                .transpose()?
                .ok_or(CommandError::NoPassword)?;
            let user = users::NewUser {
                name: name.clone(),
                role: *role,
                job_types: job_types.clone(),
                password: secrecy::SecretString::from(password.trim_end_matches(['\r', '\n'])),
            };
            let mut conn = pool.acquire().await?;
            let id = users::create(&mut conn, &user, false)
                .await?
                .ok_or(CommandError::NotCreated)?;
            Ok(format!("created user {name} ({role}), id {id}"))
        }
    }
}

/// Runs an admin until `shutdown` is cancelled: migrates, starts the scheduler, the ingest loops
/// and the HTTP API. On `shutdown` it stops in this order:
///
/// 1. The HTTP API stops accepting connections and finishes the requests in flight; at the same
///    time the scheduler's loops stop (scan, sweeps, lease rounds), and the publisher stops after
///    the batch in flight has been recorded.
/// 2. Once publishing has stopped, the scheduler releases its shards (their leases end at once
///    instead of after the TTL) and leaves the `admins` table.
/// 3. Only then does ingest (results and heartbeats) stop, on its own token: results of runs
///    published until the end are still recorded, and the worker registry the publisher routes
///    by stays fed while it publishes.
/// 4. The remaining background tasks (alarms, retention) stop with `shutdown`; all tasks get
///    20 s to end, then the pool is closed.
pub async fn run(config: AdminConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    config
        .scheduler
        .validate()
        .map_err(|m| anyhow::anyhow!("invalid configuration: {m}"))?;
    if let Some(problem) = config.topic_policy().problem() {
        anyhow::bail!("invalid configuration: {problem}");
    }
    let message_timeout_ms = config.scheduler.message_timeout_ms();
    if config.publication == config::Publication::Idempotent
        && config.producer_linger_ms >= message_timeout_ms
    {
        anyhow::bail!(
            "invalid configuration: CADENZA_PRODUCER_LINGER_MS ({}) must be below the producer's delivery timeout, CADENZA_LEASE_MARGIN_MS - 250 ({message_timeout_ms})",
            config.producer_linger_ms
        );
    }
    // Before anything listens.
    config
        .check_api_exposure()
        .map_err(|m| anyhow::anyhow!("refusing to start: {m}"))?;
    let admin_id = ids::AdminId::new(config.admin_id());
    // As long as the lease margin: a paused admin's open transaction cannot hold its shards'
    // rows past the time its lease has run out.
    let pool = db::pool(
        config.database_url.expose_secret(),
        config.scheduler.lease_margin_ms.max(500),
    )?;

    // The database may still be starting: retry the migration until it answers.
    let mut delay = Duration::from_millis(200);
    loop {
        match db::migrate(&pool).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, "database not ready; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    let shard_count = db::ensure_shard_count(&pool, config.shard_count).await?;
    if let Some(spec) = &config.bootstrap_admin {
        users::bootstrap(&pool, spec.expose_secret()).await?;
    }

    let kafka = Arc::new(KafkaClients::new(KafkaSettings {
        brokers: config.brokers.clone(),
        topics: Topics::new(config.topic_prefix.clone()),
        trigger_partitions: config.trigger_partitions,
        topic_policy: config.topic_policy(),
        message_timeout_ms: config.scheduler.message_timeout_ms(),
        linger_ms: config.producer_linger_ms,
        fetch_wait_ms: config.fetch_wait_ms,
    })?);
    kafka.ensure_base_topics().await?;
    {
        // The topics' settings are checked in the background: a broker slow to describe them
        // does not hold the admin's start.
        let kafka = Arc::clone(&kafka);
        let known: Vec<String> = sqlx::query_scalar(sql!("jobs/job_type_names"))
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
        tokio::spawn(async move { kafka.warn_about_topics(&known).await });
    }

    let leases = Arc::new(scheduler::lease::Leases::default());
    let txn = match config.publication {
        config::Publication::Idempotent => {
            tracing::warn!("CADENZA_PUBLICATION=idempotent: an admin paused past its lease (SIGSTOP, a suspended VM) can still send a trigger its successor has sent again; use transactions where the broker has them");
            None
        }
        config::Publication::Transactions => {
            let id = scheduler::txn::TxnProducer::id_for(&config.topic_prefix, admin_id.as_str());
            match scheduler::txn::TxnProducer::start(
                kafka.settings.clone(),
                id,
                config.scheduler.lease_ttl(),
                Duration::from_millis(config.publish_commit_ms),
                leases.clone(),
            )
            .await
            {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => anyhow::bail!(
                    "refusing to start: the broker did not accept a transactional producer ({e}); triggers are published in transactions so that a paused admin cannot send a trigger twice. With a broker that has no transactions, set CADENZA_PUBLICATION=idempotent on every admin (weaker: see the README)"
                ),
            }
        }
    };

    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    tracing::info!(admin_id = %admin_id, listen = %listener.local_addr()?, shards = shard_count, "admin started");
    if config.api_token.is_none() {
        tracing::warn!(
            "CADENZA_API_TOKEN is not set: the HTTP API accepts requests without a token"
        );
    }

    let tracker = TaskTracker::new();
    let registry = Arc::new(route::registry::Registry::new(
        Topics::new(config.topic_prefix.clone()),
        Duration::from_millis(config.worker_dead_ms),
    ));
    let ctx = Arc::new(scheduler::SchedulerContext {
        pool: pool.clone(),
        admin_id: admin_id.clone(),
        shard_count,
        config: config.scheduler.clone(),
        leases,
        clock: Arc::new(scheduler::clock::DbClock::default()),
        wheel: Arc::new(scheduler::wheel::Wheel::default()),
        lateness: Arc::default(),
        kafka: kafka.clone(),
        registry: registry.clone(),
        router: route::Router::default(),
        read_back: tokio::sync::Mutex::new(()),
        catch_ups: Default::default(),
        txn,
        fences: Default::default(),
    });
    let released = scheduler::spawn(ctx, &tracker, shutdown.clone());
    // Steps 2 → 3: ingest stops only once the scheduler has released its shards.
    let stop_ingest = CancellationToken::new();
    {
        let stop_ingest = stop_ingest.clone();
        tracker.spawn(async move {
            if let Err(e) = released.await {
                tracing::error!(error = %e, "scheduler shutdown task failed");
            }
            stop_ingest.cancel();
        });
    }
    tracker.spawn(ingest::results::run(
        pool.clone(),
        kafka.clone(),
        registry.clone(),
        admin_id.to_string(),
        stop_ingest.clone(),
    ));
    let alarms = Arc::new(alarm::AlarmSender::new(
        pool.clone(),
        config.alarms.clone(),
    )?);
    tracker.spawn(alarms.run(shutdown.clone()));
    tracker.spawn(
        retention::Retention::new(pool.clone(), config.retention.clone()).run(shutdown.clone()),
    );
    tracker.spawn(ingest::heartbeats::run(
        pool.clone(),
        kafka.clone(),
        registry.clone(),
        admin_id.to_string(),
        stop_ingest.clone(),
    ));

    let api_pool = db::api_pool(
        config.database_url.expose_secret(),
        config.scheduler.lease_margin_ms.max(500),
    )?;
    let state = Arc::new(api::AppState {
        pool: api_pool.clone(),
        kafka: kafka.clone(),
        shard_count,
        api_token: config.api_token.clone(),
        registry,
        publish_ahead: config.scheduler.publish_ahead(),
        shutdown: shutdown.clone(),
    });
    let app = api::router(state);
    // Step 1 (the scheduler's loops stop on the same token).
    let api_shutdown = shutdown.clone();
    serve::serve(listener, app, api_shutdown).await;

    // Steps 2–4 run on their own; wait for them.
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(20), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("background tasks did not stop within 20 s");
        stop_ingest.cancel();
    }
    pool.close().await;
    api_pool.close().await;
    tracing::info!("admin stopped");
    Ok(())
}
