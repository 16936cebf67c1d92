//! `cadenza-worker`: a worker process serving built-in handlers.
//!
//! ```text
//! cadenza-worker --serve demo.echo=noop --serve ops.backup=shell
//! CADENZA_SERVE=demo.echo=noop,demo.wait=sleep cadenza-worker
//! cadenza-worker --serve billing.invoice=xxl:billing-app/invoiceJobHandler --xxl-listen 0.0.0.0:9700
//! ```

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context as _;
use cadenza_worker::builtin::{BuiltinOptions, ServeSpec, Served, HTTP_SETTINGS};
use cadenza_worker::net_policy::{self, AddressPolicy, NetList};
use cadenza_worker::xxl::bridge::{Bridge, BridgeOptions};
use cadenza_worker::{CancellationToken, GroupProtocol, Worker, DEFAULT_BROKERS, DEFAULT_GROUP};
use clap::{CommandFactory, Parser};

/// A Cadenza worker: consumes the trigger topics of the job types it serves, runs the built-in
/// handlers, publishes results and heartbeats. Stops gracefully on SIGTERM or Ctrl-C (a second
/// signal exits at once).
#[derive(Debug, Parser)]
#[command(name = "cadenza-worker", version)]
struct Cli {
    /// Kafka bootstrap servers.
    #[arg(long, env = "CADENZA_BROKERS", default_value = DEFAULT_BROKERS)]
    brokers: String,
    /// Consumer group: the worker deployment.
    #[arg(long, env = "CADENZA_GROUP", default_value = DEFAULT_GROUP)]
    group: String,
    /// Prefix of every topic name.
    #[arg(long, env = "CADENZA_TOPIC_PREFIX", default_value = cadenza_schemas::DEFAULT_TOPIC_PREFIX)]
    topic_prefix: String,
    /// This worker's id [default: <hostname>-<pid>-<random>].
    #[arg(long, env = "CADENZA_WORKER_ID")]
    worker_id: Option<String>,
    /// Handlers executing at once across all jobs (runs waiting for their progress to be
    /// committed or their result to be delivered hold no slot).
    #[arg(long, env = "CADENZA_WORKER_CAPACITY", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..))]
    capacity: u32,
    /// Heartbeat interval in milliseconds.
    #[arg(long, env = "CADENZA_HEARTBEAT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_ms: u64,
    /// How long a graceful stop waits for running runs, in milliseconds (at most the stop
    /// timeout less 8 s).
    #[arg(long, env = "CADENZA_DRAIN_TIMEOUT_MS", default_value_t = 15_000)]
    drain_timeout_ms: u64,
    /// How long a whole graceful stop may take, in milliseconds: keep it below the grace period
    /// your supervisor gives before SIGKILL (Kubernetes: 30 s by default).
    #[arg(long, env = "CADENZA_STOP_TIMEOUT_MS", default_value_t = 25_000,
          value_parser = clap::value_parser!(u64).range(1000..))]
    stop_timeout_ms: u64,
    /// Consumer session timeout in milliseconds: a worker that stops answering loses its
    /// partitions after this.
    #[arg(long, env = "CADENZA_SESSION_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    session_timeout_ms: u64,
    /// The consumer group protocol: `classic` (every Kafka; eager rebalances) or `consumer`
    /// (Kafka 4's KIP-848: only moved partitions are revoked; the brokers' session timeout).
    #[arg(long, env = "CADENZA_GROUP_PROTOCOL", value_enum, default_value_t = GroupProtocol::Classic)]
    group_protocol: GroupProtocol,
    /// How long the broker may hold a fetch of triggers when none is waiting, in milliseconds.
    /// Apache Kafka answers as soon as a trigger arrives, so there this only sets how often an
    /// idle worker asks; the test broker answers a waiting fetch only at its next look for
    /// records (after half the remaining wait), so a trigger can wait there up to about half of
    /// this, and shorter waits cost it CPU under load.
    #[arg(long, env = "CADENZA_FETCH_WAIT_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    fetch_wait_ms: u64,
    /// How long runs of revoked partitions may take to finish in a rebalance before they are
    /// abandoned (and run again, attempt + 1, by the partitions' next owner), in milliseconds.
    #[arg(long, env = "CADENZA_REVOKE_TIMEOUT_MS", default_value_t = 10_000)]
    revoke_timeout_ms: u64,
    /// Partitions of the trigger topics this worker creates: at start it creates the topic of
    /// each job type it serves that does not exist yet (an existing topic keeps its
    /// partitions). Give it the admins' value.
    #[arg(long, env = "CADENZA_TRIGGER_PARTITIONS", default_value_t = 6,
          value_parser = clap::value_parser!(i32).range(1..=1024))]
    trigger_partitions: i32,
    /// Replication factor of the topics this worker creates when they do not exist yet (the
    /// trigger topics of the job types it serves, the progress topic).
    #[arg(long, env = "CADENZA_REPLICATION_FACTOR", default_value_t = 1,
          value_parser = clap::value_parser!(i32).range(1..))]
    replication_factor: i32,
    /// `min.insync.replicas` of the topics this worker creates and checks: how many replicas
    /// must have a write (`acks=all`) before it counts. Default: 2 with a replication factor of
    /// 3 or more, else 1.
    #[arg(long, env = "CADENZA_MIN_INSYNC_REPLICAS",
          value_parser = clap::value_parser!(i32).range(1..))]
    min_insync_replicas: Option<i32>,
    /// How long the trigger topics this worker creates keep triggers, in milliseconds: the
    /// window in which runs can be replayed from their offsets. Keep it (plus one hour) below
    /// the broker's `offsets.retention.minutes`. Default 6 days.
    #[arg(long, env = "CADENZA_TRIGGER_RETENTION_MS", default_value_t = cadenza_schemas::DEFAULT_TRIGGER_RETENTION_MS,
          value_parser = clap::value_parser!(i64).range(3_600_000..))]
    trigger_retention_ms: i64,
    /// Unfinished triggers at which consumption stops (and pauses after half a second), until
    /// half of them are finished.
    #[arg(long, env = "CADENZA_MAX_IN_FLIGHT", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_in_flight: u64,
    /// Addresses the `http` builtin may reach although they are denied by default (loopback,
    /// link-local, unspecified, multicast, cloud metadata): IP addresses or CIDR blocks, comma
    /// separated.
    #[arg(long, env = "CADENZA_HTTP_ALLOW", value_name = "CIDR,…", value_parser = http_allow)]
    http_allow: Option<NetList>,
    /// Addresses the `http` builtin must not reach, even if CADENZA_HTTP_ALLOW lists them: IP
    /// addresses or CIDR blocks, comma separated.
    #[arg(long, env = "CADENZA_HTTP_DENY", value_name = "CIDR,…", value_parser = http_deny)]
    http_deny: Option<NetList>,
    /// Serve Prometheus metrics (`GET /metrics`) and `GET /healthz` on this address, e.g.
    /// 127.0.0.1:9464 (off unless set).
    #[arg(long, env = "CADENZA_METRICS_LISTEN", value_name = "ADDR:PORT")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// JOB_TYPE=BUILTIN to serve (repeatable, or comma separated). Builtins: noop, sleep, fail,
    /// shell, http, and xxl:APP/HANDLER (the handler HANDLER of the XXL-JOB executor app APP,
    /// through the bridge).
    #[arg(
        long = "serve",
        env = "CADENZA_SERVE",
        value_name = "JOB_TYPE=BUILTIN",
        value_delimiter = ',',
        required = true
    )]
    serve: Vec<ServeSpec>,
    /// Where the XXL-JOB bridge listens for executors (their admin address:
    /// `xxl.job.admin.addresses=http://ADDR:PORT/`), when an xxl: job type is served. Loopback
    /// unless set: give an address executors on other machines can reach.
    #[arg(
        long,
        env = "CADENZA_XXL_LISTEN",
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:9700"
    )]
    xxl_listen: std::net::SocketAddr,
    /// The access token of the XXL-JOB bridge: sent to executors and required from them
    /// (`xxl.job.accessToken`). Unset: none, as XXL-JOB.
    #[arg(long, env = "CADENZA_XXL_ACCESS_TOKEN", hide_env_values = true)]
    xxl_access_token: Option<String>,
    /// How long an executor address stays registered after its last beat, in milliseconds (its
    /// runs then go to another address).
    #[arg(long, env = "CADENZA_XXL_DEAD_AFTER_MS", default_value_t = 90_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    xxl_dead_after_ms: u64,
    /// How long a run of an xxl: job type waits for a first executor of its app to register,
    /// in milliseconds, before it fails.
    #[arg(long, env = "CADENZA_XXL_ADDRESS_WAIT_MS", default_value_t = 10_000)]
    xxl_address_wait_ms: u64,
    /// Executor addresses the XXL-JOB bridge accepts and calls although they are denied by
    /// default (loopback, link-local, cloud metadata): IP addresses or CIDR blocks, comma
    /// separated (an executor on the worker's own machine needs 127.0.0.1/32).
    #[arg(long, env = "CADENZA_XXL_EXECUTOR_ALLOW", value_name = "CIDR,…", value_parser = xxl_executor_allow)]
    xxl_executor_allow: Option<NetList>,
    /// Executor addresses the XXL-JOB bridge refuses, even if CADENZA_XXL_EXECUTOR_ALLOW lists
    /// them (e.g. every network but the executors': CIDR blocks, comma separated).
    #[arg(long, env = "CADENZA_XXL_EXECUTOR_DENY", value_name = "CIDR,…", value_parser = xxl_executor_deny)]
    xxl_executor_deny: Option<NetList>,
}

fn xxl_executor_allow(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_XXL_EXECUTOR_ALLOW: {e}"))
}

fn xxl_executor_deny(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_XXL_EXECUTOR_DENY: {e}"))
}

fn http_allow(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_HTTP_ALLOW: {e}"))
}

fn http_deny(s: &str) -> Result<NetList, String> {
    net_policy::parse_list(s).map_err(|e| format!("CADENZA_HTTP_DENY: {e}"))
}

/// Cancel `shutdown` on the first SIGTERM or Ctrl-C; exit at once on the second.
fn wire_signals(shutdown: CancellationToken) -> anyhow::Result<()> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        for n in 0.. {
            #[cfg(unix)]
            let name = tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
            };
            #[cfg(not(unix))]
            let name = {
                let _ = tokio::signal::ctrl_c().await;
                "Ctrl-C"
            };
            if n == 0 {
                tracing::info!("{name}: stopping gracefully (again to exit at once)");
                shutdown.cancel();
            } else {
                tracing::warn!("{name} again: exiting without draining");
                std::process::exit(130);
            }
        }
    });
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut seen = HashSet::new();
    for spec in &cli.serve {
        if !seen.insert(spec.job_type.clone()) {
            Cli::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "job type {:?} is served twice in --serve",
                        spec.job_type.as_str()
                    ),
                )
                .exit();
        }
    }
    let telemetry = cadenza_worker::telemetry::init("cadenza-worker", "info");

    let mut builder = Worker::builder()
        .brokers(cli.brokers)
        .group(cli.group)
        .topic_prefix(cli.topic_prefix)
        .capacity(cli.capacity)
        .heartbeat_interval(Duration::from_millis(cli.heartbeat_ms))
        .drain_timeout(Duration::from_millis(cli.drain_timeout_ms))
        .stop_timeout(Duration::from_millis(cli.stop_timeout_ms))
        .session_timeout(Duration::from_millis(cli.session_timeout_ms))
        .group_protocol(cli.group_protocol)
        .fetch_wait(Duration::from_millis(cli.fetch_wait_ms))
        .revoke_timeout(Duration::from_millis(cli.revoke_timeout_ms))
        .trigger_partitions(cli.trigger_partitions)
        .replication_factor(cli.replication_factor)
        .min_insync_replicas(cli.min_insync_replicas)
        .trigger_retention_ms(cli.trigger_retention_ms)
        .max_in_flight(usize::try_from(cli.max_in_flight).unwrap_or(usize::MAX));
    if let Some(addr) = cli.metrics_listen {
        builder = builder.metrics_listen(addr);
    }
    if let Some(id) = cli.worker_id {
        builder = builder.worker_id(id);
    }
    let options = BuiltinOptions {
        http_policy: AddressPolicy::new(
            cli.http_allow.unwrap_or_default().0,
            cli.http_deny.unwrap_or_default().0,
            HTTP_SETTINGS,
        ),
    };
    // Cheap when unused (an HTTP client); it listens only when an xxl: job type is served.
    let bridge = Bridge::new(BridgeOptions {
        token: cli.xxl_access_token.clone(),
        dead_after: Duration::from_millis(cli.xxl_dead_after_ms),
        address_wait: Duration::from_millis(cli.xxl_address_wait_ms),
        executor_policy: AddressPolicy::new(
            cli.xxl_executor_allow.unwrap_or_default().0,
            cli.xxl_executor_deny.unwrap_or_default().0,
            cadenza_worker::xxl::protocol::EXECUTOR_SETTINGS,
        ),
        ..BridgeOptions::default()
    })
    .context("setting up the XXL-JOB bridge's HTTP client")?;
    let mut serves_xxl = false;
    for spec in &cli.serve {
        let handler: std::sync::Arc<dyn cadenza_worker::Handler> = match &spec.served {
            Served::Builtin(b) => b
                .handler(&options)
                .with_context(|| format!("setting up {spec}"))?,
            Served::Xxl(target) => {
                serves_xxl = true;
                std::sync::Arc::new(bridge.handler(target.clone()))
            }
        };
        builder = builder.handler(spec.job_type.as_str(), handler);
    }
    if serves_xxl {
        let b = std::sync::Arc::clone(&bridge);
        builder = builder.register_metrics(move |registry| b.register_metrics(registry));
    }
    let worker = builder.build()?;

    // The bridge listens until the worker has stopped: draining runs still need callbacks.
    let stop_bridge = CancellationToken::new();
    let bridge_task = match serves_xxl {
        true => {
            if !cli.xxl_listen.ip().is_loopback()
                && cli
                    .xxl_access_token
                    .as_deref()
                    .is_none_or(|t| t.trim().is_empty())
            {
                anyhow::bail!(
                    "refusing to start: the XXL-JOB bridge would listen on {} (CADENZA_XXL_LISTEN), \
                     which is not a loopback address, without CADENZA_XXL_ACCESS_TOKEN: anyone who \
                     reaches it could register executors (which then receive job parameters) and \
                     report results. Set CADENZA_XXL_ACCESS_TOKEN (the executors' accessToken), or \
                     listen on 127.0.0.1",
                    cli.xxl_listen
                );
            }
            let listener = tokio::net::TcpListener::bind(cli.xxl_listen)
                .await
                .with_context(|| {
                    format!(
                        "the XXL-JOB bridge cannot listen on {} (CADENZA_XXL_LISTEN)",
                        cli.xxl_listen
                    )
                })?;
            tracing::info!(listen = %cli.xxl_listen, "XXL-JOB bridge listening for executors");
            let share = tokio::spawn(cadenza_worker::xxl::share::run(
                std::sync::Arc::clone(bridge.admin_side()),
                worker.config().clone(),
                stop_bridge.clone(),
            ));
            tokio::spawn(async move {
                match share.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "the XXL-JOB bridge cannot share executors with other workers")
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the XXL-JOB bridge's sharing task panicked")
                    }
                }
            });
            let stop = stop_bridge.clone();
            let app = bridge.router();
            Some(tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stop.cancelled().await })
                    .await
            }))
        }
        false => None,
    };

    let shutdown = CancellationToken::new();
    wire_signals(shutdown.clone())?;
    // A signal during the start stops the worker as soon as it runs.
    let result = match worker.start().await {
        Ok(running) => {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = running.failed() => {}
            }
            running.stop().await
        }
        Err(e) => Err(e),
    };
    stop_bridge.cancel();
    if let Some(task) = bridge_task {
        match tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .unwrap_or(Ok(Ok(())))
        {
            Ok(Err(e)) => tracing::warn!(error = %e, "the XXL-JOB bridge listener failed"),
            Err(e) => tracing::warn!(error = %e, "the XXL-JOB bridge listener panicked"),
            Ok(Ok(())) => {}
        }
    }
    // Exit now (spans flushed first): a blocking call of the stop that was given up at its
    // deadline (librdkafka waiting for a broker that is down) would otherwise hold the
    // runtime's shutdown.
    drop(telemetry);
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            tracing::error!(error = %e, "the worker stopped with an error");
            eprintln!("Error: {e}");
            std::process::exit(1)
        }
    }
}
