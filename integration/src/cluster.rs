//! A whole Cadenza deployment for one test: PostgreSQL, a broker, admins and workers.

use std::ops::Deref;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cadenza_schemas::Topics;
use nix::sys::signal::Signal;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tempfile::TempDir;

use crate::api::ApiClient;
use crate::bins::cadenza_bin;
use crate::broker::Broker;
use crate::postgres::Postgres;
use crate::process::{clear_cadenza_env, supervised_command, ChildProcess, ProcessHandle};
use crate::util::{finish_temp_dir, free_port, random_hex, temp_dir};

/// How long an admin may take to answer `GET /healthz` with 200.
const ADMIN_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long children get to exit after SIGTERM when the cluster is dropped.
const TEARDOWN_GRACE: Duration = Duration::from_secs(5);

/// PostgreSQL + a broker + a per-test database, topic prefix and API token, and the admin and
/// worker processes a test spawns on them.
///
/// Dropping the cluster first prints the log tails of every process to stderr (test runners
/// show a test's output only when it fails, whether by panic or by returning `Err`; set
/// `CADENZA_QUIET_LOGS=1` to skip it), then stops every child by PID (SIGTERM, then SIGKILL
/// after 5 s), then the broker and PostgreSQL.
pub struct Cluster {
    children: Mutex<Vec<Arc<ChildProcess>>>,
    next_admin: AtomicU32,
    next_worker: AtomicU32,
    database_url: String,
    db_name: String,
    topic_prefix: String,
    token: String,
    // Dropped in this order after `Drop::drop` (which stops the children and removes the log
    // directory): the broker, then PostgreSQL.
    broker: Broker,
    pg: Postgres,
    dir: Option<TempDir>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("database_url", &self.database_url)
            .field("brokers", &self.broker.bootstrap())
            .field("topic_prefix", &self.topic_prefix)
            .finish()
    }
}

/// A running `cadenza-admin`. Derefs to [`ProcessHandle`] (`pid`, `kill_9`, `terminate`, logs).
#[derive(Debug, Clone)]
pub struct AdminHandle {
    proc: ProcessHandle,
    listen: String,
    api: ApiClient,
}

impl AdminHandle {
    /// `127.0.0.1:<port>` it listens on.
    pub fn listen(&self) -> &str {
        &self.listen
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        self.api.base_url()
    }

    /// A client for its HTTP API with the cluster's token.
    pub fn api(&self) -> ApiClient {
        self.api.clone()
    }
}

impl Deref for AdminHandle {
    type Target = ProcessHandle;
    fn deref(&self) -> &ProcessHandle {
        &self.proc
    }
}

/// A running `cadenza-worker`. Derefs to [`ProcessHandle`]; `id()` is its `CADENZA_WORKER_ID`.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    proc: ProcessHandle,
    group: String,
}

impl WorkerHandle {
    /// Its consumer group (`CADENZA_GROUP`).
    pub fn group(&self) -> &str {
        &self.group
    }
}

impl Deref for WorkerHandle {
    type Target = ProcessHandle;
    fn deref(&self) -> &ProcessHandle {
        &self.proc
    }
}

impl Cluster {
    /// Starts PostgreSQL, takes the suite's shared broker ([`Broker::shared`]; one of its own
    /// when there is none), creates a database with a random name, and picks a random topic
    /// prefix (`t` + 8 hex) and API token (32 hex).
    pub async fn start() -> Result<Cluster> {
        let (pg, broker) = tokio::try_join!(Postgres::start(), Broker::shared())?;
        Cluster::assemble(pg, broker).await
    }

    /// [`Self::start`] on a broker of the test's own: one it may stop, kill or pause, such as a
    /// three-node cluster ([`Broker::start_cluster`]).
    pub async fn start_on(broker: Broker) -> Result<Cluster> {
        let pg = Postgres::start().await?;
        Cluster::assemble(pg, broker).await
    }

    async fn assemble(pg: Postgres, broker: Broker) -> Result<Cluster> {
        let dir = temp_dir("cadenza-it-")?;
        let db_name = format!("it_{}", random_hex(8));
        let database_url = pg.create_database(&db_name).await?;
        Ok(Cluster {
            children: Mutex::new(Vec::new()),
            next_admin: AtomicU32::new(1),
            next_worker: AtomicU32::new(1),
            database_url,
            db_name,
            topic_prefix: format!("t{}", random_hex(8)),
            token: random_hex(32),
            broker,
            pg,
            dir: Some(dir),
        })
    }

    fn children(&self) -> MutexGuard<'_, Vec<Arc<ChildProcess>>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `CADENZA_DATABASE_URL` of the per-test database.
    pub fn database_url(&self) -> &str {
        &self.database_url
    }

    pub fn database_name(&self) -> &str {
        &self.db_name
    }

    /// The Kafka consumer group a worker started with `group` joins: `group` and the topic
    /// prefix, so that tests sharing one broker never share a group.
    pub fn group(&self, group: &str) -> String {
        format!("{group}.{}", self.topic_prefix)
    }

    /// `CADENZA_BROKERS`.
    pub fn brokers(&self) -> String {
        self.broker.bootstrap()
    }

    /// `CADENZA_TOPIC_PREFIX`.
    pub fn topic_prefix(&self) -> &str {
        &self.topic_prefix
    }

    /// Topic names under this cluster's prefix.
    pub fn topics(&self) -> Topics {
        Topics::new(self.topic_prefix.clone())
    }

    /// Waits (up to `timeout`) until `<prefix>.dlq` holds a record; returns the records' JSON
    /// payloads in (partition, offset) order.
    pub async fn dlq_records(&self, timeout: Duration) -> Result<Vec<serde_json::Value>> {
        let dlq = self.topics().dlq();
        let records = crate::wait::wait_for(timeout, "a record on the DLQ", || {
            let (b, t) = (self.brokers(), dlq.clone());
            async move {
                let r = crate::kafka::read_topic(&b, &t, Duration::from_secs(5)).await?;
                Ok((!r.is_empty()).then_some(r))
            }
        })
        .await?;
        records.iter().map(|r| r.payload_json()).collect()
    }

    /// `CADENZA_API_TOKEN`.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn postgres(&self) -> &Postgres {
        &self.pg
    }

    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// The directory holding the admin and worker logs.
    pub fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path())
    }

    /// A small pool on the per-test database, for assertions on tables.
    pub async fn pool(&self) -> Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.database_url)
            .await
            .context("connecting to the test database")
    }

    /// Starts `cadenza-admin` on a free port with the cluster's settings (`RUST_LOG=info`,
    /// `CADENZA_ALARM_ALLOW=127.0.0.1/32`, overridable by `extra_env`) and waits until `GET /healthz` answers 200 (30 s). On a
    /// timeout or an early exit the error carries the log tail.
    pub async fn spawn_admin(&self, extra_env: &[(&str, &str)]) -> Result<AdminHandle> {
        let n = self.next_admin.fetch_add(1, Ordering::Relaxed);
        let id = format!("admin-{n}");
        let listen = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = supervised_command(&cadenza_bin("cadenza-admin")?, None);
        clear_cadenza_env(&mut cmd);
        cmd.env("CADENZA_DATABASE_URL", &self.database_url)
            .env("CADENZA_BROKERS", self.brokers())
            .env("CADENZA_API_TOKEN", &self.token)
            .env("CADENZA_LISTEN", &listen)
            .env("CADENZA_TOPIC_PREFIX", &self.topic_prefix)
            // Test receivers listen on loopback, which alarm webhooks may not reach by default.
            .env("CADENZA_ALARM_ALLOW", "127.0.0.1/32")
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "1")
            .env("NO_COLOR", "1");
        if crate::broker::BrokerKind::selected() == crate::broker::BrokerKind::Tansu {
            // Tansu has no transactions: the weaker mode, chosen explicitly.
            cmd.env("CADENZA_PUBLICATION", "idempotent");
        }
        apply_env(&mut cmd, extra_env);
        let proc = self.spawn_child(&id, cmd)?;
        let api = ApiClient::new(format!("http://{listen}"), Some(self.token.clone()))?;
        let handle = AdminHandle {
            proc: ProcessHandle::new(id, proc),
            listen,
            api,
        };
        self.wait_healthy(&handle).await?;
        Ok(handle)
    }

    async fn wait_healthy(&self, admin: &AdminHandle) -> Result<()> {
        let started = Instant::now();
        let mut last;
        loop {
            if let Some(status) = admin.exit_status() {
                bail!(
                    "{} (pid {}) exited before it was healthy ({status}); log {}:\n{}",
                    admin.id(),
                    admin.pid(),
                    admin.log_path().display(),
                    admin.log_tail(60)
                );
            }
            match admin.api.get_text("/healthz").await {
                Ok((status, _)) if status.is_success() => return Ok(()),
                Ok((status, body)) => last = format!("{status}: {body}"),
                Err(e) => last = format!("{e:#}"),
            }
            if started.elapsed() > ADMIN_READY_TIMEOUT {
                bail!(
                    "{} (pid {}) not healthy within {ADMIN_READY_TIMEOUT:?} (last: {last}); log \
                     {}:\n{}",
                    admin.id(),
                    admin.pid(),
                    admin.log_path().display(),
                    admin.log_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts `cadenza-worker --serve <serve>` in consumer group [`Self::group`]`(group)` with a unique
    /// `CADENZA_WORKER_ID` (its [`ProcessHandle::id`]), `CADENZA_HTTP_ALLOW=127.0.0.1/32` and `CADENZA_XXL_EXECUTOR_ALLOW=127.0.0.1/32`
    /// (overridable by `extra_env`). Returns at once: wait for an
    /// observable effect (the admin's `/api/workers`, or [`ProcessHandle::wait_for_log`]).
    pub async fn spawn_worker(
        &self,
        serve: &str,
        group: &str,
        extra_env: &[(&str, &str)],
    ) -> Result<WorkerHandle> {
        let n = self.next_worker.fetch_add(1, Ordering::Relaxed);
        let id = format!("worker-{n}-{}", random_hex(4));
        let group = self.group(group);
        let mut cmd = supervised_command(&cadenza_bin("cadenza-worker")?, None);
        clear_cadenza_env(&mut cmd);
        cmd.arg("--serve")
            .arg(serve)
            .env("CADENZA_BROKERS", self.brokers())
            .env("CADENZA_GROUP", &group)
            .env("CADENZA_TOPIC_PREFIX", &self.topic_prefix)
            .env("CADENZA_WORKER_ID", &id)
            // Test servers listen on loopback, which the `http` builtin may not reach by default.
            .env("CADENZA_HTTP_ALLOW", "127.0.0.1/32")
            // The tests' XXL-JOB executors listen on loopback.
            .env("CADENZA_XXL_EXECUTOR_ALLOW", "127.0.0.1/32")
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "1")
            .env("NO_COLOR", "1");
        // `CADENZA_TEST_GROUP_PROTOCOL=consumer` runs the workers of every test on Kafka 4's
        // consumer group protocol (a test may still choose its own).
        if let Ok(protocol) = std::env::var("CADENZA_TEST_GROUP_PROTOCOL") {
            cmd.env("CADENZA_GROUP_PROTOCOL", protocol);
        }
        apply_env(&mut cmd, extra_env);
        let proc = self.spawn_child(&id, cmd)?;
        Ok(WorkerHandle {
            proc: ProcessHandle::new(id, proc),
            group,
        })
    }

    /// Spawns any command as a child of the cluster (stopped with it), output to
    /// `<dir>/<name>.log`.
    pub fn spawn_process(
        &self,
        name: &str,
        program: &Path,
        args: &[&str],
    ) -> Result<ProcessHandle> {
        let mut cmd = supervised_command(program, None);
        cmd.args(args);
        let proc = self.spawn_child(name, cmd)?;
        Ok(ProcessHandle::new(name.to_string(), proc))
    }

    fn spawn_child(&self, name: &str, cmd: Command) -> Result<Arc<ChildProcess>> {
        let log = self.dir().join(format!("{name}.log"));
        let proc = Arc::new(ChildProcess::spawn(name, cmd, &log)?);
        self.children().push(proc.clone());
        Ok(proc)
    }

    /// The last 100 lines of every child's log, the broker's and PostgreSQL's.
    pub fn dump_logs(&self) -> String {
        self.dump_logs_tail(100)
    }

    /// [`Self::dump_logs`] with another number of lines.
    pub fn dump_logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for child in self.children().iter() {
            let state = match child.exit_status() {
                Some(status) => format!("exited: {status}"),
                None => "running".to_string(),
            };
            out.push_str(&format!(
                "===== {} (pid {}, {state}) {} =====\n{}\n",
                child.name(),
                child.pid(),
                child.log_path().display(),
                child.log_tail(lines)
            ));
        }
        out.push_str(&format!(
            "===== broker ({}) =====\n{}\n===== postgres {} =====\n{}\n",
            self.broker.kind().name(),
            self.broker.log_tail(lines),
            self.pg.log_path().display(),
            self.pg.log_tail(lines)
        ));
        out
    }

    /// Prints [`Self::dump_logs`] to stderr (shown by the test runner for failed tests).
    pub fn print_logs(&self) {
        eprintln!("{}", self.dump_logs());
    }

    /// Stops every admin and worker still running, all at once: SIGTERM (and SIGCONT, in case
    /// one is paused), up to `grace` for each to exit, then SIGKILL. Once it returns none of them
    /// writes anything any more: the end of a topic can be marked ([`crate::EndMark`]).
    pub async fn stop_all(&self, grace: Duration) -> Result<()> {
        let children: Vec<Arc<ChildProcess>> = self.children().clone();
        for child in &children {
            child.signal(Signal::SIGTERM)?;
            child.signal(Signal::SIGCONT)?;
        }
        let deadline = Instant::now() + grace;
        for child in &children {
            let left = deadline.saturating_duration_since(Instant::now());
            if child.wait(left).await.is_none() {
                eprintln!(
                    "[cadenza-integration] {} (pid {}) ignored SIGTERM for {grace:?}; SIGKILL",
                    child.name(),
                    child.pid()
                );
                child.kill_9()?;
            }
        }
        Ok(())
    }

    /// Stops every admin and worker still running: SIGTERM to all, wait up to `grace`, then
    /// SIGKILL.
    pub fn stop_children(&self, grace: Duration) {
        let children: Vec<Arc<ChildProcess>> = self.children().clone();
        for child in &children {
            let _ = child.signal(Signal::SIGTERM);
            let _ = child.signal(Signal::SIGCONT);
        }
        let deadline = Instant::now() + grace;
        for child in &children {
            let left = deadline.saturating_duration_since(Instant::now());
            if child.wait_blocking(left).is_none() {
                eprintln!(
                    "[cadenza-integration] {} (pid {}) ignored SIGTERM for {grace:?}; SIGKILL",
                    child.name(),
                    child.pid()
                );
                let _ = child.kill_9();
            }
        }
    }
}

fn apply_env(cmd: &mut Command, extra_env: &[(&str, &str)]) {
    for (key, value) in extra_env {
        cmd.env(key, value);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let quiet = std::env::var_os("CADENZA_QUIET_LOGS").is_some_and(|v| v != "0");
        if !quiet || std::thread::panicking() {
            eprintln!(
                "[cadenza-integration] cluster logs (in {}):\n{}",
                self.dir().display(),
                self.dump_logs()
            );
        }
        self.stop_children(TEARDOWN_GRACE);
        if self.broker.is_shared() {
            crate::kafka::delete_test_topics(
                &self.broker.bootstrap(),
                &format!("{}.", self.topic_prefix),
            );
        }
        if let Some(dir) = self.dir.take() {
            finish_temp_dir(dir, "the cluster's logs");
        }
    }
}
