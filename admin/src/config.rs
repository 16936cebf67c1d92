//! Admin configuration from the command line and `CADENZA_*` environment variables.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use secrecy::SecretString;

/// One-off commands of `cadenza-admin`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AdminCommand {
    /// Users of the API and console.
    #[command(subcommand)]
    Users(UsersCommand),
}

/// `cadenza-admin users …`
#[derive(Debug, Clone, clap::Subcommand)]
pub enum UsersCommand {
    /// Create a user. The password is read from standard input (its first line), so it appears
    /// neither in the shell history nor in the process list.
    Create {
        /// The user's name (what they sign in with).
        #[arg(long)]
        name: String,
        /// admin, operator or viewer.
        #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<crate::auth::Role>()))]
        role: crate::auth::Role,
        /// Job-type patterns an operator or viewer is granted, comma separated (`billing.*`).
        #[arg(long = "job-types", value_delimiter = ',')]
        job_types: Vec<String>,
    },
}

/// `cadenza-admin`: schedules jobs from PostgreSQL onto Kafka and serves the HTTP API.
#[derive(Debug, Clone, Parser)]
#[command(name = "cadenza-admin", version, about)]
pub struct AdminConfig {
    /// PostgreSQL connection URL.
    #[arg(long, env = "CADENZA_DATABASE_URL", hide_env_values = true, value_parser = secret)]
    pub database_url: SecretString,

    /// Kafka bootstrap servers (comma-separated host:port).
    #[arg(long, env = "CADENZA_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,

    /// Bearer token required by the HTTP API. Without one the API is open (a warning is logged),
    /// which is allowed only when CADENZA_LISTEN is a loopback address.
    #[arg(long, env = "CADENZA_API_TOKEN", hide_env_values = true, value_parser = api_token)]
    pub api_token: Option<SecretString>,

    /// The first admin, as NAME:PASSWORD: created at start when no user exists, ignored (with a
    /// log line) once one does. Prefer `cadenza-admin users create`, which reads the password
    /// from standard input.
    #[arg(long, env = "CADENZA_BOOTSTRAP_ADMIN", hide_env_values = true, value_parser = secret)]
    pub bootstrap_admin: Option<SecretString>,

    /// A one-off command instead of running the admin.
    #[command(subcommand)]
    pub command: Option<AdminCommand>,

    /// Address of the HTTP API. Beyond loopback (127.0.0.1, ::1) it needs CADENZA_API_TOKEN.
    #[arg(long, env = "CADENZA_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Prefix of every topic name.
    #[arg(long, env = "CADENZA_TOPIC_PREFIX", default_value = cadenza_schemas::DEFAULT_TOPIC_PREFIX)]
    pub topic_prefix: String,

    /// This admin's identity in the lease table (default: host-pid-random).
    #[arg(long, env = "CADENZA_ADMIN_ID")]
    pub admin_id: Option<String>,

    /// Number of shards jobs are spread over; set once when the cluster is created.
    #[arg(long, env = "CADENZA_SHARD_COUNT", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shard_count: u32,

    /// Partitions of each trigger topic the admin creates (workers create the topics of the job
    /// types they serve with their own CADENZA_TRIGGER_PARTITIONS: give both the same value; an
    /// existing topic keeps its partitions).
    #[arg(long, env = "CADENZA_TRIGGER_PARTITIONS", default_value_t = 6, value_parser = clap::value_parser!(i32).range(1..=1024))]
    pub trigger_partitions: i32,

    /// How long the admin's producer waits to gather trigger records into one request, in ms
    /// (librdkafka's `linger.ms`). A record's timestamp is when it was handed over at its fire
    /// time; this adds at most that much before a worker can fetch it, and saves the producer
    /// and the broker a request per record at high rates.
    #[arg(long, env = "CADENZA_PRODUCER_LINGER_MS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    pub producer_linger_ms: u64,

    /// How triggers are published: `transactions` (default) or `idempotent`.
    ///
    /// `transactions`: through a transactional producer whose id belongs to this admin; an admin
    /// that takes over a shard fences the previous holder's producer before reading back what it
    /// left, so nothing a frozen or paused admin still holds can land afterwards, and each
    /// trigger reaches a `read_committed` reader once. Needs a broker with transactions (Apache
    /// Kafka); the admin refuses to start without them.
    ///
    /// `idempotent`: an idempotent producer whose delivery timeout is shorter than the lease
    /// margin, and a takeover that waits for the old lease's end plus the margin before reading
    /// back. Exactly once against an admin that dies, not against one paused past its lease
    /// (by SIGSTOP, a suspended VM): that one can still send a trigger the new holder has sent
    /// again. For brokers without transactions. Every admin of a cluster uses the same mode.
    #[arg(long, env = "CADENZA_PUBLICATION", value_enum, default_value_t = Publication::Transactions)]
    pub publication: Publication,

    /// With `CADENZA_PUBLICATION=transactions`: how long a transaction gathers triggers before
    /// it is committed, in ms. A trigger is visible to workers once its transaction commits: up
    /// to this plus the commit's round trips after its fire time. Each commit costs the broker
    /// (transaction log writes and a marker on every partition written): shorter costs it more.
    #[arg(long, env = "CADENZA_PUBLISH_COMMIT_MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub publish_commit_ms: u64,

    /// How long the broker may hold a fetch of the admin's result ingest when no event is
    /// waiting, in ms (librdkafka's `fetch.wait.max.ms`; the heartbeat consumer waits at least
    /// 250 ms). Apache Kafka answers a fetch as soon as an event arrives, so there this only sets
    /// how often an idle consumer asks. The test broker (Tansu) answers a waiting fetch only at
    /// its next look for records (after half the remaining wait), so an event can wait there up
    /// to about half of this; each look costs it CPU, so a shorter wait costs it more under load.
    #[arg(long, env = "CADENZA_FETCH_WAIT_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub fetch_wait_ms: u64,

    /// Replication factor of the topics the admin creates (and checks at start).
    #[arg(long, env = "CADENZA_REPLICATION_FACTOR", default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
    pub replication_factor: i32,

    /// `min.insync.replicas` of the topics the admin creates and checks: how many replicas must
    /// have a write (`acks=all`) before it counts. Default: 2 with a replication factor of 3 or
    /// more, else 1.
    #[arg(long, env = "CADENZA_MIN_INSYNC_REPLICAS", value_parser = clap::value_parser!(i32).range(1..))]
    pub min_insync_replicas: Option<i32>,

    /// How long trigger topics keep triggers, in milliseconds: the window in which runs can be
    /// replayed from their offsets. Keep it (plus one hour) below the broker's
    /// `offsets.retention.minutes`. Default 6 days.
    #[arg(long, env = "CADENZA_TRIGGER_RETENTION_MS", default_value_t = cadenza_schemas::DEFAULT_TRIGGER_RETENTION_MS, value_parser = clap::value_parser!(i64).range(3_600_000..))]
    pub trigger_retention_ms: i64,

    /// A worker whose last heartbeat is older than this (ms) is dead: no run is routed to it.
    #[arg(long, env = "CADENZA_WORKER_DEAD_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub worker_dead_ms: u64,

    #[command(flatten)]
    pub scheduler: SchedulerArgs,

    #[command(flatten)]
    pub alarms: crate::alarm::AlarmConfig,

    #[command(flatten)]
    pub retention: crate::retention::RetentionConfig,
}

/// Longest `CADENZA_LOST_GRACE_MS`: 30 days.
pub const MAX_LOST_GRACE_MS: u64 = 30 * 24 * 3_600_000;

/// How the admin publishes triggers (`CADENZA_PUBLICATION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Publication {
    /// Transactional producer, fenced by the admin that takes a shard over.
    Transactions,
    /// Idempotent producer and lease timing only (brokers without transactions).
    Idempotent,
}

/// Timing of leases, scans and publication.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    /// Lease time to live, in ms (database clock).
    #[arg(long, env = "CADENZA_LEASE_TTL_MS", default_value_t = 10_000)]
    pub lease_ttl_ms: u64,
    /// How often leases are renewed and free shards acquired, in ms.
    #[arg(long, env = "CADENZA_LEASE_RENEW_MS", default_value_t = 3_000)]
    pub lease_renew_ms: u64,
    /// An admin stops publishing this long before its lease expires by its own clock, in ms;
    /// the producer's delivery timeout is shorter than this.
    #[arg(long, env = "CADENZA_LEASE_MARGIN_MS", default_value_t = 2_000)]
    pub lease_margin_ms: u64,
    /// How far ahead of now a job is claimed by the scan, in ms; its fires are then written up to
    /// twice this far ahead.
    #[arg(long, env = "CADENZA_LOOKAHEAD_MS", default_value_t = 2_000)]
    pub lookahead_ms: u64,
    /// How long before their fire time triggers are taken for publication, in ms (a schedule's
    /// runs, written already routed and `publishing` by the scan, are checked against job
    /// changes; others are routed and marked `publishing`); each is handed to the producer at its
    /// fire time. Keeps the database transaction out of the fire lateness. Capped at the
    /// lookahead.
    #[arg(long, env = "CADENZA_PUBLISH_AHEAD_MS", default_value_t = 250)]
    pub publish_ahead_ms: u64,
    /// How long after their delivery runs are recorded in the delivery record, in ms (at most
    /// half the lease margin): one row per job type and partition holds all the deliveries of
    /// that time. The runs' own rows are not written; the API shows them `published` from then
    /// on.
    #[arg(long, env = "CADENZA_RECORD_DELAY_MS", default_value_t = 1_000)]
    pub record_delay_ms: u64,
    /// Pause between scans when the previous scan found less than a full batch, in ms.
    #[arg(long, env = "CADENZA_SCAN_INTERVAL_MS", default_value_t = 500)]
    pub scan_interval_ms: u64,
    /// Jobs claimed per scan transaction.
    #[arg(long, env = "CADENZA_SCAN_BATCH", default_value_t = 1_000)]
    pub scan_batch: i64,
    /// A run still `running` this long past its timeout (its start, without one), while its
    /// worker is dead, is recorded `lost`, in ms. Longer than a consumer group takes to hand a
    /// dead worker's partitions to another (which runs it again) by default.
    #[arg(long, env = "CADENZA_LOST_GRACE_MS", default_value_t = 60_000)]
    pub lost_grace_ms: u64,
}

impl SchedulerArgs {
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }
    pub fn lease_renew(&self) -> Duration {
        Duration::from_millis(self.lease_renew_ms)
    }
    pub fn lease_margin(&self) -> Duration {
        Duration::from_millis(self.lease_margin_ms)
    }
    pub fn lookahead(&self) -> Duration {
        Duration::from_millis(self.lookahead_ms)
    }
    /// How far ahead a claimed job's fires are written: twice the lookahead. A job is claimed
    /// once its next fire is within the lookahead, so a frequent job's row is claimed and
    /// advanced once per lookahead rather than once per fire.
    pub fn plan_horizon_ms(&self) -> u64 {
        self.lookahead_ms.saturating_mul(2)
    }
    /// How long before its fire time a trigger is claimed for publication: at most the lookahead.
    pub fn publish_ahead(&self) -> Duration {
        Duration::from_millis(self.publish_ahead_ms.min(self.lookahead_ms))
    }
    /// How long after delivery a run still `publishing` is recorded `published`: at most half
    /// the lease margin, before the sweep's read-back would take it (twice the margin plus the
    /// publish-ahead). A takeover's read-back may meet a run still waiting here: it records the
    /// run itself, and this admin's record then changes nothing (compare-and-set).
    pub fn record_delay(&self) -> Duration {
        Duration::from_millis(self.record_delay_ms.min(self.lease_margin_ms / 2))
    }
    pub fn scan_interval(&self) -> Duration {
        Duration::from_millis(self.scan_interval_ms)
    }

    /// Checks the relations between the timings; the message names the settings involved.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_renew_ms == 0 || self.lease_renew_ms >= self.lease_ttl_ms {
            return Err(format!(
                "CADENZA_LEASE_RENEW_MS ({}) must be above 0 and below CADENZA_LEASE_TTL_MS ({})",
                self.lease_renew_ms, self.lease_ttl_ms
            ));
        }
        if self.lease_margin_ms < 500
            || self.lease_margin_ms + self.lease_renew_ms >= self.lease_ttl_ms
        {
            return Err(format!(
                "CADENZA_LEASE_MARGIN_MS ({}) must be at least 500 and leave room for a renewal: margin + renew < ttl ({} + {} >= {})",
                self.lease_margin_ms, self.lease_margin_ms, self.lease_renew_ms, self.lease_ttl_ms
            ));
        }
        for (name, v) in [
            ("CADENZA_LEASE_TTL_MS", self.lease_ttl_ms),
            ("CADENZA_LOOKAHEAD_MS", self.lookahead_ms),
            ("CADENZA_SCAN_INTERVAL_MS", self.scan_interval_ms),
        ] {
            if v > 3_600_000 {
                return Err(format!("{name} ({v}) must be at most 3600000 (one hour)"));
            }
        }
        if self.lost_grace_ms > MAX_LOST_GRACE_MS {
            return Err(format!(
                "CADENZA_LOST_GRACE_MS ({}) must be at most {MAX_LOST_GRACE_MS} (30 days)",
                self.lost_grace_ms
            ));
        }
        if self.scan_batch < 1 {
            return Err("CADENZA_SCAN_BATCH must be at least 1".into());
        }
        Ok(())
    }

    /// The producer's `message.timeout.ms`: a send either lands or fails before the margin ends.
    pub fn message_timeout_ms(&self) -> u64 {
        self.lease_margin_ms.saturating_sub(250).max(250)
    }
}

/// Parses a secret setting (kept out of `Debug` output).
pub fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}

/// Parses `CADENZA_API_TOKEN`: an empty token would let any request that sends an empty one in.
fn api_token(s: &str) -> Result<SecretString, String> {
    if s.trim().is_empty() {
        return Err(
            "CADENZA_API_TOKEN is empty; set a token, or unset it to run without one on \
                    a loopback address"
                .to_owned(),
        );
    }
    Ok(SecretString::from(s))
}

/// Refuses an HTTP API that anyone who can reach it could use: without a token the admin only
/// listens on a loopback address. The message names both settings.
pub fn check_api_exposure(listen: SocketAddr, has_token: bool) -> Result<(), String> {
    if has_token || listen.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "CADENZA_LISTEN is {listen}, which is not a loopback address, and CADENZA_API_TOKEN is \
         not set: anyone who can reach the admin could use its API. Set CADENZA_API_TOKEN, or \
         listen on 127.0.0.1"
    ))
}

impl AdminConfig {
    /// Replication, `min.insync.replicas` and trigger retention of the topics it creates.
    pub fn topic_policy(&self) -> cadenza_schemas::TopicPolicy {
        cadenza_schemas::TopicPolicy::new(
            self.replication_factor,
            self.min_insync_replicas,
            self.trigger_retention_ms,
        )
    }

    /// See [`check_api_exposure`].
    pub fn check_api_exposure(&self) -> Result<(), String> {
        check_api_exposure(self.listen, self.api_token.is_some())
    }

    pub fn admin_id(&self) -> String {
        self.admin_id.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME")
                .ok()
                .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "admin".to_owned());
            let rand: u16 = rand::random();
            format!("{host}-{}-{rand:04x}", std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_without_token_listens_on_loopback_only() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(check_api_exposure(addr("127.0.0.1:8080"), false).is_ok());
        assert!(check_api_exposure(addr("127.0.0.2:8080"), false).is_ok());
        assert!(check_api_exposure(addr("[::1]:8080"), false).is_ok());
        for open in [
            "0.0.0.0:8080",
            "[::]:8080",
            "10.0.0.5:8080",
            "[::ffff:127.0.0.1]:80",
        ] {
            let e = check_api_exposure(addr(open), false).unwrap_err();
            assert!(
                e.contains("CADENZA_LISTEN") && e.contains("CADENZA_API_TOKEN"),
                "{e}"
            );
            assert!(check_api_exposure(addr(open), true).is_ok());
        }
    }

    #[test]
    fn an_empty_api_token_is_refused() {
        let e = AdminConfig::try_parse_from([
            "cadenza-admin",
            "--database-url",
            "postgres://db/cadenza",
            "--api-token",
            " ",
        ])
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("CADENZA_API_TOKEN is empty"), "{e}");
    }

    #[test]
    fn debug_output_hides_every_secret() {
        let config = AdminConfig::try_parse_from([
            "cadenza-admin",
            "--database-url",
            "postgres://cadenza:db-hunter2@db.internal/cadenza",
            "--api-token",
            "token-hunter2",
            "--smtp-url",
            "smtp://alarms:smtp-hunter2@mail.internal:587",
            "--listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
    }
}
