//! Alarm delivery: failed runs (failed, timed out, lost) of jobs with alarm targets leave rows in
//! `alarms` (written in the transaction that records the failure, see [`crate::outcome`]); this
//! sender claims due ones, delivers them, and retries with backoff until `attempts` is reached,
//! then marks them `failed`. It runs beside the scheduler and never blocks it: a receiver that
//! hangs costs at most `timeout` per attempt, on this task only.
//!
//! Webhook: a JSON POST (see [`AlarmPayload`]) with header `Idempotency-Key: cadenza-alarm-<id>`
//! (the same on every attempt); any 2xx is delivered. E-mail alarms are recorded but delivered
//! only where an SMTP relay is configured (not yet: they are marked failed with that reason).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Settings of the sender, with documented defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct AlarmConfig {
    /// Longest wait for a webhook receiver's answer, in ms.
    #[arg(long, env = "CADENZA_ALARM_TIMEOUT_MS", default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Attempts per alarm before it is marked failed.
    #[arg(long, env = "CADENZA_ALARM_ATTEMPTS", default_value_t = 5, value_parser = clap::value_parser!(i32).range(1..=100))]
    pub attempts: i32,
    /// Wait before the second attempt, in ms; doubles with each further attempt, up to a minute.
    #[arg(long, env = "CADENZA_ALARM_BACKOFF_MS", default_value_t = 1_000)]
    pub backoff_ms: u64,
}

/// Alarms claimed per round.
const BATCH: i64 = 50;
/// Pause between rounds that found nothing.
const IDLE: Duration = Duration::from_millis(500);

/// What a webhook receiver gets.
#[derive(Debug, Serialize)]
pub struct AlarmPayload {
    pub alarm_id: i64,
    pub job: AlarmJob,
    pub run: AlarmRun,
    pub status: String,
    pub message: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AlarmJob {
    pub id: i64,
    pub name: String,
    pub job_type: String,
}

#[derive(Debug, Serialize)]
pub struct AlarmRun {
    pub id: i64,
    pub kind: String,
    pub attempt: i32,
    pub retry_no: i32,
    pub fire_time: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
}

#[derive(Debug, sqlx::FromRow)]
struct Claimed {
    id: i64,
    channel: String,
    target: String,
    attempts: i32,
    trigger_id: i64,
    job_id: i64,
    job_name: String,
    job_type: String,
    kind: String,
    status: String,
    attempt: i32,
    retry_no: i32,
    fire_time: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    worker_id: Option<String>,
    message: Option<String>,
}

impl Claimed {
    fn payload(&self) -> AlarmPayload {
        AlarmPayload {
            alarm_id: self.id,
            job: AlarmJob {
                id: self.job_id,
                name: self.job_name.clone(),
                job_type: self.job_type.clone(),
            },
            run: AlarmRun {
                id: self.trigger_id,
                kind: self.kind.clone(),
                attempt: self.attempt,
                retry_no: self.retry_no,
                fire_time: self.fire_time,
                started_at: self.started_at,
                finished_at: self.finished_at,
                worker_id: self.worker_id.clone(),
            },
            status: self.status.clone(),
            message: self.message.clone(),
        }
    }
}

pub struct AlarmSender {
    pool: PgPool,
    config: AlarmConfig,
    http: reqwest::Client,
}

impl AlarmSender {
    pub fn new(pool: PgPool, config: AlarmConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("cadenza-admin/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { pool, config, http })
    }

    /// Wait before attempt `n + 1` after attempt `n` failed.
    fn backoff_ms(&self, n: i32) -> u64 {
        let shift = u32::try_from(n.saturating_sub(1)).unwrap_or(0).min(16);
        self.config
            .backoff_ms
            .saturating_mul(1 << shift)
            .min(60_000)
    }

    /// One round: claims due alarms and delivers them concurrently; returns how many it tried.
    pub async fn run_once(&self) -> anyhow::Result<usize> {
        // Claimed for longer than an attempt can take, so no other admin sends it meanwhile.
        let hold_ms = self.config.timeout_ms.saturating_mul(2).max(1_000) as f64;
        let claimed: Vec<Claimed> = sqlx::query_as(sql!("alarms/claim"))
            .bind(BATCH)
            .bind(hold_ms)
            .fetch_all(&self.pool)
            .await?;
        let n = claimed.len();
        futures::future::join_all(claimed.iter().map(|a| self.deliver(a))).await;
        Ok(n)
    }

    async fn deliver(&self, a: &Claimed) {
        let outcome = match a.channel.as_str() {
            "webhook" => self.post(a).await,
            "email" => Err(
                "e-mail alarms need an SMTP relay, which this admin does not support yet"
                    .to_owned(),
            ),
            other => Err(format!("unknown alarm channel {other:?}")),
        };
        let stored = match &outcome {
            Ok(()) => {
                tracing::info!(alarm_id = a.id, trigger_id = a.trigger_id, target = %a.target, "alarm delivered");
                sqlx::query(sql!("alarms/sent"))
                    .bind(a.id)
                    .execute(&self.pool)
                    .await
            }
            Err(e) => {
                tracing::warn!(alarm_id = a.id, trigger_id = a.trigger_id, target = %a.target, attempt = a.attempts, error = %e, "alarm not delivered");
                sqlx::query(sql!("alarms/attempt_failed"))
                    .bind(a.id)
                    .bind(e)
                    .bind(self.backoff_ms(a.attempts) as f64)
                    .bind(self.config.attempts)
                    .execute(&self.pool)
                    .await
            }
        };
        if let Err(e) = stored {
            // The claim runs out and the alarm is tried again.
            tracing::warn!(alarm_id = a.id, error = %e, "recording an alarm attempt failed");
        }
    }

    async fn post(&self, a: &Claimed) -> Result<(), String> {
        let resp = self
            .http
            .post(&a.target)
            .header("Idempotency-Key", format!("cadenza-alarm-{}", a.id))
            .json(&a.payload())
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    format!("no answer within {} ms", self.config.timeout_ms)
                } else {
                    format!("request failed: {e}")
                }
            })?;
        let status = resp.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the receiver answered {status}"))
        }
    }

    /// Delivers until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let pause = match self.run_once().await {
                Ok(n) if n as i64 >= BATCH => Duration::ZERO,
                Ok(_) => IDLE,
                Err(e) => {
                    tracing::debug!(error = %e, "alarm round failed");
                    IDLE
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}
