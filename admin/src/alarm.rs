//! Alarm delivery: failed runs (failed, timed out, lost) of jobs with alarm targets leave rows in
//! `alarms` (written in the transaction that records the failure, see [`crate::outcome`]); this
//! sender claims due ones, delivers them, and retries with backoff until `attempts` is reached,
//! then marks them `failed`. It runs beside the scheduler and never blocks it: a receiver that
//! hangs costs at most `timeout` per attempt, on this task only.
//!
//! Webhook: a JSON POST (see [`AlarmPayload`]) with header `Idempotency-Key: cadenza-alarm-<id>`
//! (the same on every attempt); any 2xx is delivered. E-mail: a plain-text message through the
//! SMTP relay of `CADENZA_SMTP_URL`, from `CADENZA_ALARM_FROM`; without a relay, e-mail alarms
//! are marked failed with that reason.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lettre::message::{header::ContentType, Mailbox};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
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
    /// SMTP relay for e-mail alarms: `smtp://host:25` (plain), `smtp://user:pass@host:587?tls=required`
    /// (STARTTLS) or `smtps://user:pass@host:465`.
    #[arg(long, env = "CADENZA_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// Sender address of e-mail alarms.
    #[arg(long, env = "CADENZA_ALARM_FROM", default_value = "cadenza@localhost")]
    pub alarm_from: String,
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

type Mailer = AsyncSmtpTransport<Tokio1Executor>;

pub struct AlarmSender {
    pool: PgPool,
    config: AlarmConfig,
    http: reqwest::Client,
    mailer: Option<(Mailer, Mailbox)>,
}

impl AlarmSender {
    pub fn new(pool: PgPool, config: AlarmConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("cadenza-admin/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let mailer = match &config.smtp_url {
            None => None,
            Some(url) => {
                let transport = Mailer::from_url(url)
                    .map_err(|e| anyhow::anyhow!("CADENZA_SMTP_URL is not a usable SMTP URL: {e}"))?
                    .timeout(Some(Duration::from_millis(config.timeout_ms)))
                    .build();
                let from: Mailbox = config.alarm_from.parse().map_err(|e| {
                    anyhow::anyhow!(
                        "CADENZA_ALARM_FROM {:?} is not an e-mail address: {e}",
                        config.alarm_from
                    )
                })?;
                Some((transport, from))
            }
        };
        Ok(Self {
            pool,
            config,
            http,
            mailer,
        })
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
            "email" => self.mail(a).await,
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

    async fn mail(&self, a: &Claimed) -> Result<(), String> {
        let Some((mailer, from)) = &self.mailer else {
            return Err("no SMTP relay is configured (set CADENZA_SMTP_URL)".to_owned());
        };
        let to: Mailbox = a
            .target
            .parse()
            .map_err(|e| format!("{:?} is not an e-mail address: {e}", a.target))?;
        let p = a.payload();
        let subject = format!(
            "[cadenza] {} run {} of job {} ({})",
            p.status, p.run.id, p.job.id, p.job.name
        );
        let body = format!(
            "Run {run} of job {job} \"{name}\" (type {jt}) ended {status}.\n\n\
             kind:        {kind}\n\
             attempt:     {attempt} (retry {retry})\n\
             fire time:   {fire}\n\
             started:     {started}\n\
             finished:    {finished}\n\
             worker:      {worker}\n\n\
             {message}\n",
            run = p.run.id,
            job = p.job.id,
            name = p.job.name,
            jt = p.job.job_type,
            status = p.status,
            kind = p.run.kind,
            attempt = p.run.attempt,
            retry = p.run.retry_no,
            fire = p.run.fire_time.to_rfc3339(),
            started = p.run.started_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
            finished = p
                .run
                .finished_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            worker = p.run.worker_id.as_deref().unwrap_or("-"),
            message = p.message.as_deref().unwrap_or(""),
        );
        let email = Message::builder()
            .from(from.clone())
            .to(to)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| format!("cannot build the message: {e}"))?;
        mailer
            .send(email)
            .await
            .map(|_| ())
            .map_err(|e| format!("SMTP relay refused or failed: {e}"))
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
