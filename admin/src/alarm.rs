//! Alarm delivery: failed runs (failed, timed out, lost) of jobs with alarm targets leave rows in
//! `alarms` (written in the transaction that records the failure, see [`crate::outcome`]); this
//! sender claims due ones, delivers them, and retries with backoff until `attempts` is reached,
//! then marks them `failed`. It runs beside the scheduler and never blocks it: a receiver that
//! hangs costs at most `timeout` per attempt, on this task only.
//!
//! Webhook: a JSON POST (see [`AlarmPayload`]) with header `Idempotency-Key: cadenza-alarm-<id>`
//! (the same on every attempt); any 2xx is delivered. Only addresses the alarm address policy
//! allows are reached (`CADENZA_ALARM_ALLOW` / `CADENZA_ALARM_DENY`, checked on the addresses the
//! host resolves to at each attempt, see [`cadenza_worker::net_policy`]); redirects are not
//! followed (a 3xx is a failed attempt) and no proxy is used. Neither the URL (it often carries a
//! token) nor the receiver's answer body goes to `last_error` or the log: the host and the status
//! do. E-mail: a plain-text message through the
//! SMTP relay of `CADENZA_SMTP_URL`, from `CADENZA_ALARM_FROM`; without a relay, e-mail alarms
//! are marked failed with that reason.

use std::sync::Arc;
use std::time::Duration;

use cadenza_worker::net_policy::{self, AddressPolicy, NetList};
use chrono::{DateTime, Utc};
use lettre::message::{header::ContentType, Mailbox};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::{ExposeSecret, SecretString};
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
    #[arg(long, env = "CADENZA_SMTP_URL", hide_env_values = true, value_parser = crate::config::secret)]
    pub smtp_url: Option<SecretString>,
    /// Sender address of e-mail alarms.
    #[arg(long, env = "CADENZA_ALARM_FROM", default_value = "cadenza@localhost")]
    pub alarm_from: String,
    /// Addresses alarm webhooks may reach although they are denied by default (loopback,
    /// link-local, unspecified, multicast, cloud metadata): IP addresses or CIDR blocks, comma
    /// separated.
    #[arg(long = "alarm-allow", env = "CADENZA_ALARM_ALLOW", value_name = "CIDR,…",
          value_parser = alarm_allow)]
    pub allow: Option<NetList>,
    /// Addresses alarm webhooks must not reach, even if CADENZA_ALARM_ALLOW lists them: IP
    /// addresses or CIDR blocks, comma separated.
    #[arg(long = "alarm-deny", env = "CADENZA_ALARM_DENY", value_name = "CIDR,…",
          value_parser = alarm_deny)]
    pub deny: Option<NetList>,
}

/// Prefix of the settings of the webhook address policy.
pub const ALARM_SETTINGS: &str = "CADENZA_ALARM";

fn alarm_allow(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_ALARM_ALLOW: {e}"))
}

fn alarm_deny(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_ALARM_DENY: {e}"))
}

impl AlarmConfig {
    /// The addresses webhooks may reach.
    pub fn policy(&self) -> AddressPolicy {
        AddressPolicy::new(
            self.allow.clone().unwrap_or_default().0,
            self.deny.clone().unwrap_or_default().0,
            ALARM_SETTINGS,
        )
    }
}

/// Posts webhooks: to allowed addresses only, without redirects or proxies, and reports a
/// failure without the URL or the receiver's body.
pub struct WebhookClient {
    http: reqwest::Client,
    policy: AddressPolicy,
    timeout_ms: u64,
}

impl WebhookClient {
    pub fn new(config: &AlarmConfig) -> Result<Self, reqwest::Error> {
        let policy = config.policy();
        let http = policy
            .client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("cadenza-admin/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            http,
            policy,
            timeout_ms: config.timeout_ms,
        })
    }

    /// POSTs `body` as JSON; `Err` is the reason, fit for `last_error` and the log.
    pub async fn post(
        &self,
        url: &str,
        idempotency_key: &str,
        body: &impl Serialize,
    ) -> Result<(), String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("the webhook is not a URL: {e}"))?;
        // A host that is an IP address is not resolved, so the resolver cannot check it.
        self.policy.check_url(&url).map_err(|d| d.to_string())?;
        let resp = self
            .http
            .post(url)
            .header("Idempotency-Key", idempotency_key)
            .json(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    format!("no answer within {} ms", self.timeout_ms)
                } else {
                    net_policy::describe(&e)
                }
            })?;
        let status = resp.status();
        if status.is_success() {
            Ok(())
        } else if status.is_redirection() {
            Err(format!(
                "the receiver answered {status}; redirects are not followed, configure the \
                 final URL"
            ))
        } else {
            // The body is not kept: it is the receiver's, and may be anything.
            Err(format!("the receiver answered {status}"))
        }
    }
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
    /// A webhook URL (it often carries a token) or an e-mail address.
    #[sqlx(try_from = "String")]
    target: SecretString,
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

/// Why the alarm settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AlarmSetupError {
    /// The HTTP client for webhooks could not be built.
    #[error(transparent)]
    Webhooks(#[from] reqwest::Error),
    #[error("CADENZA_SMTP_URL is not a usable SMTP URL: {0}")]
    SmtpUrl(lettre::transport::smtp::Error),
    // `error`, not `source`: the message already says it, and a cause would repeat it.
    #[error("CADENZA_ALARM_FROM {from:?} is not an e-mail address: {error}")]
    From {
        from: String,
        error: lettre::address::AddressError,
    },
}

pub struct AlarmSender {
    pool: PgPool,
    config: AlarmConfig,
    webhooks: WebhookClient,
    mailer: Option<(Mailer, Mailbox)>,
}

impl AlarmSender {
    pub fn new(pool: PgPool, config: AlarmConfig) -> Result<Self, AlarmSetupError> {
        let webhooks = WebhookClient::new(&config)?;
        let mailer = match &config.smtp_url {
            None => None,
            Some(url) => {
                let transport = Mailer::from_url(url.expose_secret())
                    .map_err(AlarmSetupError::SmtpUrl)?
                    .timeout(Some(Duration::from_millis(config.timeout_ms)))
                    .build();
                let from: Mailbox =
                    config
                        .alarm_from
                        .parse()
                        .map_err(|error| AlarmSetupError::From {
                            from: config.alarm_from.clone(),
                            error,
                        })?;
                Some((transport, from))
            }
        };
        Ok(Self {
            pool,
            config,
            webhooks,
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
    pub async fn run_once(&self) -> Result<usize, sqlx::Error> {
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
        let channel = match a.channel.as_str() {
            "webhook" | "email" => a.channel.clone(),
            _ => "other".to_owned(),
        };
        crate::metrics::metrics()
            .alarms
            .get_or_create(&crate::metrics::AlarmLabels {
                channel,
                outcome: if outcome.is_ok() { "sent" } else { "failed" }.to_owned(),
            })
            .inc();
        // A webhook URL often carries a token: the log shows its host only.
        let target = match a.channel.as_str() {
            "webhook" => net_policy::url_host(a.target.expose_secret()),
            _ => a.target.expose_secret().to_owned(),
        };
        let stored = match &outcome {
            Ok(()) => {
                tracing::info!(alarm_id = a.id, trigger_id = a.trigger_id, target = %target, "alarm delivered");
                sqlx::query(sql!("alarms/sent"))
                    .bind(a.id)
                    .execute(&self.pool)
                    .await
            }
            Err(e) => {
                tracing::warn!(alarm_id = a.id, trigger_id = a.trigger_id, target = %target, attempt = a.attempts, error = %e, "alarm not delivered");
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
        self.webhooks
            .post(
                a.target.expose_secret(),
                &format!("cadenza-alarm-{}", a.id),
                &a.payload(),
            )
            .await
    }

    async fn mail(&self, a: &Claimed) -> Result<(), String> {
        let Some((mailer, from)) = &self.mailer else {
            return Err("no SMTP relay is configured (set CADENZA_SMTP_URL)".to_owned());
        };
        let to: Mailbox = a.target.expose_secret().parse().map_err(|e| {
            format!(
                "{:?} is not an e-mail address: {e}",
                a.target.expose_secret()
            )
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        alarms: AlarmConfig,
    }

    fn config(args: &[&str]) -> AlarmConfig {
        let mut argv = vec!["alarms", "--timeout-ms", "2000"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).unwrap().alarms
    }

    /// Answers every connection on 127.0.0.1 with `response`; counts the connections.
    async fn receiver(response: &'static str) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 64 * 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(response.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        (port, count)
    }

    fn connections(c: &std::sync::atomic::AtomicUsize) -> usize {
        c.load(std::sync::atomic::Ordering::SeqCst)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn webhooks_to_loopback_link_local_and_names_resolving_there_are_refused_by_default() {
        let (port, count) = receiver(OK).await;
        let hooks = WebhookClient::new(&config(&[])).unwrap();
        let e = hooks
            .post(
                &format!("http://127.0.0.1:{port}/hook?token=s3cret"),
                "k",
                &1,
            )
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "address 127.0.0.1, a loopback address (127.0.0.0/8), denied unless \
             CADENZA_ALARM_ALLOW lists it"
        );
        let e = hooks
            .post(&format!("http://localhost:{port}/hook"), "k", &1)
            .await
            .unwrap_err();
        assert!(e.starts_with("localhost resolves to "), "{e}");
        let e = hooks
            .post("http://169.254.169.254/latest/meta-data/", "k", &1)
            .await
            .unwrap_err();
        assert!(e.contains("a link-local address (169.254.0.0/16)"), "{e}");
        assert_eq!(connections(&count), 0, "a denied address was connected to");
    }

    #[tokio::test]
    async fn the_allow_list_opens_an_address_and_the_deny_list_closes_it_again() {
        let (port, count) = receiver(OK).await;
        let url = format!("http://127.0.0.1:{port}/hook");
        let hooks = WebhookClient::new(&config(&["--alarm-allow", "127.0.0.1/32"])).unwrap();
        hooks.post(&url, "k", &1).await.unwrap();
        assert_eq!(connections(&count), 1);
        let hooks = WebhookClient::new(&config(&[
            "--alarm-allow",
            "127.0.0.0/8,",
            "--alarm-deny",
            "127.0.0.1",
        ]))
        .unwrap();
        assert_eq!(
            hooks.post(&url, "k", &1).await.unwrap_err(),
            "address 127.0.0.1, which is denied by 127.0.0.1/32 in CADENZA_ALARM_DENY"
        );
        assert_eq!(connections(&count), 1);
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let (port, count) = receiver(
            "HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest/meta-data/\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
        let hooks = WebhookClient::new(&config(&["--alarm-allow", "127.0.0.1"])).unwrap();
        let e = hooks
            .post(&format!("http://127.0.0.1:{port}/hook"), "k", &1)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "the receiver answered 302 Found; redirects are not followed, configure the final URL"
        );
        assert_eq!(connections(&count), 1);
    }

    #[tokio::test]
    async fn errors_carry_neither_the_url_nor_the_receivers_body() {
        let (port, _) = receiver(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 27\r\nconnection: close\r\n\r\n\
             root:x:0:0:root:/root:/bin/",
        )
        .await;
        let hooks = WebhookClient::new(&config(&["--alarm-allow", "127.0.0.1"])).unwrap();
        let e = hooks
            .post(&format!("http://127.0.0.1:{port}/hook/s3cret"), "k", &1)
            .await
            .unwrap_err();
        assert_eq!(e, "the receiver answered 500 Internal Server Error");
        // Nothing listens on port 1: the connection error must not quote the URL's token.
        let e = hooks
            .post("http://127.0.0.1:1/hook?token=s3cret", "k", &1)
            .await
            .unwrap_err();
        assert!(e.starts_with("cannot connect"), "{e}");
        assert!(!e.contains("s3cret") && !e.contains("/hook"), "{e}");
    }

    #[test]
    fn bad_list_entries_name_the_setting() {
        let e = Args::try_parse_from(["alarms", "--alarm-allow", "10.0.0.0/8,intranet"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("CADENZA_ALARM_ALLOW: \"intranet\" is not an IP address or CIDR block"),
            "{e}"
        );
    }
}
