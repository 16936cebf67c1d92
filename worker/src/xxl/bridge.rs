//! The `xxl` handler: runs a Cadenza run on an existing XXL-JOB executor.
//!
//! `--serve billing.invoice=xxl:billing-app/invoiceJobHandler` serves the job type with
//! [`XxlHandler`]: each run
//!
//! 1. waits (at most [`BridgeOptions::address_wait`]) for an address of the executor app to be
//!    registered with this bridge ([`super::admin_side`]);
//! 2. picks an address by the job's route, as XXL-JOB's admin does ([`pick`]): `failover` asks
//!    each address `/beat` in turn, `busyover` asks `/idleBeat`; `sharding_broadcast` sends the
//!    run to every address of its shard (address `p` of `n` goes to shard `p % shard_total`),
//!    each with `broadcastIndex` `p` and `broadcastTotal` `n`;
//! 3. sends `POST /run` with a log id of its own ([`log_id`]), then waits for the executor's
//!    callback, copying the executor's log (`/log`) into the run's log every
//!    [`BridgeOptions::poll_interval`];
//! 4. ends as the callback says (code 200 succeeds, any other fails with the executor's
//!    message). On timeout or cancellation it sends `/kill` and stops waiting: a result that
//!    comes later is logged and counted as late, never as the run's result;
//! 5. if the executor goes away while the run is on it (it stops beating and its registration
//!    expires, it deregisters, or it stops answering [`GONE_AFTER_PROBES`] probes in a row), the
//!    run is sent again to another live address of the app, picked by the same route. A call
//!    that cannot connect is also sent on; an answer that is garbage, a refusal or a silence
//!    after the call was sent fails the run with that reason (the executor may have taken it).

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cadenza_schemas::{BlockStrategy, RouteStrategy};
use futures::future::BoxFuture;

use super::admin_side::AdminSide;
use super::protocol::{
    CallError, CallbackParam, ExecutorClient, LogParam, TriggerParam, DEFAULT_CALL_TIMEOUT,
    SUCCESS_CODE, TIMEOUT_CODE,
};
use crate::handler::{Handler, Outcome, RunContext};
use crate::lock;

/// Polls in a row an executor may refuse connections before its run is sent elsewhere.
pub const GONE_AFTER_PROBES: u32 = 3;
/// Polls in a row an executor may say it does not run the job (`/idleBeat`) before a run whose
/// result never came is failed (the executor restarted and forgot it).
pub const LOST_AFTER_IDLE_POLLS: u32 = 10;
/// Addresses one broadcast shard may send to (each needs its own log id).
pub const MAX_BROADCAST: usize = 1000;
/// Pages of log read at most when a run ends.
const FINAL_LOG_PAGES: u32 = 20;
/// How often `/kill` is tried on an executor a run was moved away from, and for how long.
const KILL_RETRY: Duration = Duration::from_secs(5);
/// See [`KILL_RETRY`].
const KILL_RETRY_FOR: Duration = Duration::from_secs(600);
/// The most of an executor's log copied into one run's log (which keeps its last 64 KiB): past
/// it, the rest stays on the executor.
const MAX_LOG_COPIED: usize = 4 * 1024 * 1024;
/// Jobs whose balancing state (round counter, use counts) is kept; beyond, it starts afresh.
const BALANCE_KEPT: usize = 100_000;

/// Which executor app and handler serve a job type: `APP/HANDLER` in `--serve T=xxl:APP/HANDLER`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct XxlTarget {
    /// The executor's app name (`xxl.job.executor.appname`, its registry key).
    pub app: String,
    /// The handler's name (`@XxlJob("…")`).
    pub handler: String,
}

/// A bad `APP/HANDLER`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not APP/HANDLER (an XXL-JOB executor app name and a handler name, both non-empty, without spaces)")]
pub struct XxlTargetError(pub String);

impl FromStr for XxlTarget {
    type Err = XxlTargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || XxlTargetError(s.to_owned());
        let (app, handler) = s.trim().split_once('/').ok_or_else(bad)?;
        let ok = |p: &str| !p.is_empty() && !p.chars().any(|c| c.is_whitespace() || c == '/');
        if !ok(app) || !ok(handler) {
            return Err(bad());
        }
        Ok(Self {
            app: app.to_owned(),
            handler: handler.to_owned(),
        })
    }
}

impl fmt::Display for XxlTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.app, self.handler)
    }
}

/// Settings of the bridge.
#[derive(Clone)]
pub struct BridgeOptions {
    /// The access token sent to executors and required from them (`CADENZA_XXL_ACCESS_TOKEN`).
    pub token: Option<String>,
    /// Timeout of each call to an executor.
    pub call_timeout: Duration,
    /// How long an address stays registered after its last beat.
    pub dead_after: Duration,
    /// How long a run waits for a first address of its app to be registered.
    pub address_wait: Duration,
    /// How often a waiting run copies the executor's log and checks that it is alive.
    pub poll_interval: Duration,
    /// The addresses executors may register and the bridge may call
    /// (`CADENZA_XXL_EXECUTOR_ALLOW`, `CADENZA_XXL_EXECUTOR_DENY`; by default the rules of the
    /// `http` built-in: not loopback, link-local or cloud metadata addresses).
    pub executor_policy: crate::net_policy::AddressPolicy,
}

impl fmt::Debug for BridgeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BridgeOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("call_timeout", &self.call_timeout)
            .field("dead_after", &self.dead_after)
            .field("address_wait", &self.address_wait)
            .field("poll_interval", &self.poll_interval)
            .field("executor_policy", &self.executor_policy)
            .finish()
    }
}

impl Default for BridgeOptions {
    fn default() -> Self {
        Self {
            token: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            dead_after: super::admin_side::DEFAULT_DEAD_AFTER,
            address_wait: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            executor_policy: crate::net_policy::AddressPolicy::default_for(
                super::protocol::EXECUTOR_SETTINGS,
            ),
        }
    }
}

/// A fresh log id for a dispatch: random, so that nobody can guess the id of a run they did not
/// start and end it with a forged callback (every executor holds the access token). Positive and
/// below 2^53, so that JavaScript consoles show it exactly; the run's log names it
/// (`xxl: running … (log id N)`), which ties an executor's log file to the Cadenza run.
pub fn log_id() -> i64 {
    rand::random_range(1i64 << 40..1i64 << 53)
}

/// XXL-JOB's name of a block strategy.
pub fn block_name(block: BlockStrategy) -> &'static str {
    match block {
        BlockStrategy::SerialExecution => "SERIAL_EXECUTION",
        BlockStrategy::DiscardLater => "DISCARD_LATER",
        BlockStrategy::CoverEarly => "COVER_EARLY",
    }
}

/// Per job: what the balancing routes remember (XXL-JOB keeps the same per job id).
#[derive(Debug, Default)]
pub struct Balance {
    round: u64,
    used: HashMap<String, u64>,
    last_used: HashMap<String, u64>,
    clock: u64,
}

fn hash_of(value: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// The address a single-target route picks among `live` (sorted, non-empty) for `job_id`,
/// remembering the pick in `balance`. `failover`, `busyover` and `sharding_broadcast` are
/// handled by the caller; here they pick the first address.
pub fn pick(
    route: RouteStrategy,
    live: &[String],
    job_id: i64,
    balance: &mut Balance,
) -> Option<String> {
    if live.is_empty() {
        return None;
    }
    let n = live.len();
    let i = match route {
        RouteStrategy::Last => n - 1,
        RouteStrategy::Round => {
            // XXL-JOB starts each job's counter at a random place so jobs spread.
            if balance.round == 0 {
                balance.round = hash_of(job_id) % 1000 + 1;
            }
            balance.round = balance.round.wrapping_add(1);
            (balance.round % n as u64) as usize
        }
        RouteStrategy::Random => (uuid::Uuid::new_v4().as_u128() % n as u128) as usize,
        RouteStrategy::ConsistentHash => consistent_hash(live, job_id),
        RouteStrategy::LeastFrequentlyUsed => (0..n)
            .min_by_key(|&i| (balance.used.get(&live[i]).copied().unwrap_or(0), i))
            .unwrap_or(0),
        RouteStrategy::LeastRecentlyUsed => (0..n)
            .min_by_key(|&i| (balance.last_used.get(&live[i]).copied().unwrap_or(0), i))
            .unwrap_or(0),
        RouteStrategy::First
        | RouteStrategy::Failover
        | RouteStrategy::Busyover
        | RouteStrategy::ShardingBroadcast => 0,
    };
    let chosen = live[i].clone();
    balance.clock += 1;
    *balance.used.entry(chosen.clone()).or_default() += 1;
    balance.last_used.insert(chosen.clone(), balance.clock);
    // Forget addresses that left.
    balance.used.retain(|a, _| live.contains(a));
    balance.last_used.retain(|a, _| live.contains(a));
    Some(chosen)
}

/// XXL-JOB's hash for its consistent-hash route: the first four bytes of the MD5 of `key`,
/// little-endian, as an unsigned 32-bit number.
fn xxl_hash(key: &str) -> u64 {
    use md5::{Digest, Md5};
    let d = Md5::digest(key.as_bytes());
    u64::from(u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
}

/// XXL-JOB's consistent hash: 100 virtual nodes per address (`SHARD-<address>-NODE-<i>`) on a
/// ring; the job goes to the first node at or after the hash of its id, so a job stays on its
/// address while others come and go. Stable across bridge versions and processes.
fn consistent_hash(live: &[String], job_id: i64) -> usize {
    const VIRTUAL_NODES: u32 = 100;
    let key = xxl_hash(&job_id.to_string());
    let mut best: Option<(u64, usize)> = None;
    let mut lowest: Option<(u64, usize)> = None;
    for (i, address) in live.iter().enumerate() {
        for v in 0..VIRTUAL_NODES {
            let h = xxl_hash(&format!("SHARD-{address}-NODE-{v}"));
            if h >= key && best.is_none_or(|(b, _)| h < b) {
                best = Some((h, i));
            }
            if lowest.is_none_or(|(l, _)| h < l) {
                lowest = Some((h, i));
            }
        }
    }
    best.or(lowest).map_or(0, |(_, i)| i)
}

/// The bridge: the executor-facing endpoints, the client calling executors, and what the
/// balancing routes remember. One per worker process; [`Bridge::handler`] makes the handler of
/// each job type it serves.
#[derive(Debug)]
pub struct Bridge {
    side: Arc<AdminSide>,
    client: ExecutorClient,
    options: BridgeOptions,
    balance: std::sync::Mutex<HashMap<i64, Balance>>,
}

impl Bridge {
    /// A bridge with these settings.
    pub fn new(options: BridgeOptions) -> Result<Arc<Self>, reqwest::Error> {
        let client = ExecutorClient::with_policy(
            options.token.clone(),
            options.call_timeout,
            options.executor_policy.clone(),
        )?;
        let side = Arc::new(AdminSide::new(
            options.token.clone(),
            options.dead_after,
            options.executor_policy.clone(),
        ));
        Ok(Arc::new(Self {
            side,
            client,
            options,
            balance: std::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// The executor-facing state (registry and callbacks).
    pub fn admin_side(&self) -> &Arc<AdminSide> {
        &self.side
    }

    /// Registers the bridge's metrics (see [`AdminSide::register_metrics`]).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.side.register_metrics(registry);
    }

    /// The router executors call (see [`super::admin_side::router`]).
    pub fn router(&self) -> axum::Router {
        super::admin_side::router(Arc::clone(&self.side))
    }

    /// The handler of a job type served by `target`.
    pub fn handler(self: &Arc<Self>, target: XxlTarget) -> XxlHandler {
        XxlHandler {
            bridge: Arc::clone(self),
            target,
        }
    }

    fn pick(&self, route: RouteStrategy, live: &[String], job_id: i64) -> Option<String> {
        let mut all = lock(&self.balance);
        if all.len() > BALANCE_KEPT && !all.contains_key(&job_id) {
            all.clear();
        }
        pick(route, live, job_id, all.entry(job_id).or_default())
    }

    /// The live addresses of `app`, waiting up to `address_wait` for a first one.
    async fn wait_for_addresses(&self, app: &str, ctx: &RunContext) -> Vec<String> {
        let until = Instant::now() + self.options.address_wait;
        loop {
            let live = self.side.registry.addresses(app);
            if !live.is_empty() || Instant::now() >= until {
                return live;
            }
            tokio::select! {
                _ = ctx.cancel.cancelled() => return live,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    async fn run(self: Arc<Self>, target: XxlTarget, ctx: RunContext) -> Outcome {
        let live = self.wait_for_addresses(&target.app, &ctx).await;
        if live.is_empty() {
            return Outcome::failure(format!(
                "no executor of app {:?} is registered with this bridge (waited {} s); point the \
                 executor's admin address at the bridge",
                target.app,
                self.options.address_wait.as_secs()
            ));
        }
        let route = ctx.route.unwrap_or(RouteStrategy::First);
        if route != RouteStrategy::ShardingBroadcast {
            return self.dispatch(&target, &ctx, route, None).await;
        }
        let total = live.len();
        let shard_total = ctx.shard_total.max(1) as usize;
        let mine: Vec<(usize, String)> = live
            .into_iter()
            .enumerate()
            .filter(|(p, _)| p % shard_total == ctx.shard_index as usize)
            .collect();
        if mine.len() > MAX_BROADCAST {
            return Outcome::failure(format!(
                "shard {} of {shard_total} would go to {} executor addresses of {:?}; at most \
                 {MAX_BROADCAST} are supported: run more workers for the job type",
                ctx.shard_index,
                mine.len(),
                target.app
            ));
        }
        if mine.is_empty() {
            let msg = format!(
                "shard {} of {shard_total}: none of the {total} executor addresses of {:?} falls \
                 to this shard",
                ctx.shard_index, target.app
            );
            ctx.log(&msg);
            return Outcome::Success(Some(msg));
        }
        let runs = mine.iter().map(|(p, address)| {
            let one = Broadcast {
                address: address.clone(),
                index: *p as u32,
                total: total as u32,
            };
            let bridge = Arc::clone(&self);
            let (target, ctx) = (target.clone(), ctx.clone());
            async move {
                let outcome = bridge
                    .dispatch(&target, &ctx, route, Some(one.clone()))
                    .await;
                (one, outcome)
            }
        });
        let results = futures::future::join_all(runs).await;
        let mut failed = false;
        let lines: Vec<String> = results
            .into_iter()
            .map(|(one, outcome)| {
                let (word, msg) = match outcome {
                    Outcome::Success(m) | Outcome::SuccessWith { message: m, .. } => {
                        ("succeeded", m.unwrap_or_default())
                    }
                    Outcome::Failure(m) | Outcome::Retry { message: m } => {
                        failed = true;
                        ("failed", m)
                    }
                };
                format!(
                    "[{} of {}] {} {word}: {msg}",
                    one.index, one.total, one.address
                )
            })
            .collect();
        let msg = lines.join("; ");
        if failed {
            Outcome::Failure(msg)
        } else {
            Outcome::Success(Some(msg))
        }
    }

    /// Sends the run to one address after another until one of them reports its result.
    async fn dispatch(
        &self,
        target: &XxlTarget,
        ctx: &RunContext,
        route: RouteStrategy,
        broadcast: Option<Broadcast>,
    ) -> Outcome {
        let job_id = ctx.job_id.0;
        let mut tried: Vec<String> = Vec::new();
        let mut reasons: Vec<String> = Vec::new();
        loop {
            if ctx.is_cancelled() {
                return Outcome::failure("interrupted before an executor took the run");
            }
            let live: Vec<String> = match &broadcast {
                // A broadcast item belongs to its address: it is not sent elsewhere.
                Some(b) if tried.is_empty() => vec![b.address.clone()],
                Some(_) => Vec::new(),
                None => self
                    .side
                    .registry
                    .addresses(&target.app)
                    .into_iter()
                    .filter(|a| !tried.contains(a))
                    .collect(),
            };
            let Some(address) = self.choose(route, &live, job_id, &mut reasons).await else {
                let why = if reasons.is_empty() {
                    format!("no live executor address of app {:?}", target.app)
                } else {
                    reasons.join("; ")
                };
                return Outcome::Failure(why);
            };
            tried.push(address.clone());
            let id = log_id();
            match self
                .run_on(target, ctx, &address, id, broadcast.as_ref())
                .await
            {
                OnExecutor::Ended(outcome) => return outcome,
                OnExecutor::Elsewhere(why) => {
                    ctx.log(format!("xxl: {why}; trying another address"));
                    reasons.push(why);
                }
            }
        }
    }

    /// The next address for a run among `live`, as the route says; `None` when none is left.
    async fn choose(
        &self,
        route: RouteStrategy,
        live: &[String],
        job_id: i64,
        reasons: &mut Vec<String>,
    ) -> Option<String> {
        match route {
            RouteStrategy::Failover => {
                for address in live {
                    match self.client.beat(address).await {
                        Ok(_) => return Some(address.clone()),
                        Err(e) => reasons.push(format!("failover: {e}")),
                    }
                }
                None
            }
            RouteStrategy::Busyover => {
                for address in live {
                    match self.client.idle_beat(address, job_id).await {
                        Ok(_) => return Some(address.clone()),
                        Err(e) => reasons.push(format!("busyover: {e}")),
                    }
                }
                None
            }
            _ => self.pick(route, live, job_id),
        }
    }

    /// One dispatch of a run to `address` under log id `id`, until its result, its end, or
    /// the executor's departure.
    async fn run_on(
        &self,
        target: &XxlTarget,
        ctx: &RunContext,
        address: &str,
        id: i64,
        broadcast: Option<&Broadcast>,
    ) -> OnExecutor {
        let job_id = ctx.job_id.0;
        let fire_ms = ctx.fire_time.timestamp_millis();
        let param = TriggerParam {
            job_id,
            executor_handler: target.handler.clone(),
            executor_params: ctx.params.clone(),
            executor_block_strategy: block_name(ctx.block).to_owned(),
            // One second more than Cadenza's own timeout, so the run ends `timed_out` here
            // first; the executor's timeout stays a safety net if this worker dies.
            executor_timeout: ctx.timeout.map_or(0, |t| {
                let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0) + 1;
                i64::try_from(secs).unwrap_or(i64::MAX)
            }),
            log_id: id,
            log_date_time: fire_ms,
            glue_type: "BEAN".to_owned(),
            glue_source: String::new(),
            glue_updatetime: fire_ms,
            broadcast_index: broadcast.map_or(0, |b| b.index),
            broadcast_total: broadcast.map_or(1, |b| b.total),
        };
        let prefix = broadcast.map_or(String::new(), |b| format!("[{} of {}] ", b.index, b.total));
        let mut waiting = Waiting::new(&self.side, id);
        ctx.log(format!(
            "{prefix}xxl: running {} on {address} (log id {id})",
            target.handler
        ));
        let mut log = LogCursor::new(address, id, fire_ms, prefix.clone());
        if let Err(e) = self.client.run(address, &param).await {
            // A result may have come while the answer was lost (a fast handler).
            if let Some(result) = waiting.give_up(format!("the run call failed: {e}")) {
                return OnExecutor::Ended(outcome_of(&result, address));
            }
            if e.never_reached() {
                // Nothing reached it: another address may take the run.
                return OnExecutor::Elsewhere(e.to_string());
            }
            if !matches!(e, CallError::Refused { .. }) {
                // It may have taken the run.
                self.kill(address, job_id).await;
            }
            return OnExecutor::Ended(Outcome::Failure(e.to_string()));
        }
        waiting.kill_on_drop(self.client.clone(), address, job_id);
        let mut refused = 0u32;
        let mut idle = 0u32;
        let mut tick = tokio::time::interval(self.options.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                biased;
                result = &mut waiting.rx => {
                    waiting.settled = true;
                    let Ok(result) = result else {
                        return OnExecutor::Ended(Outcome::failure("the bridge stopped waiting"));
                    };
                    log.drain(&self.client, ctx).await;
                    return OnExecutor::Ended(outcome_of(&result, address));
                }
                _ = ctx.cancel.cancelled() => {
                    if let Some(result) = waiting.give_up("the run was cancelled or timed out") {
                        return OnExecutor::Ended(outcome_of(&result, address));
                    }
                    // Kill first: the worker gives a cancelled handler a few seconds only.
                    self.kill(address, job_id).await;
                    log.drain(&self.client, ctx).await;
                    return OnExecutor::Ended(Outcome::failure(format!(
                        "interrupted; /kill sent to {address}"
                    )));
                }
                _ = tick.tick() => {
                    let registered = self
                        .side
                        .registry
                        .addresses(&target.app)
                        .iter()
                        .any(|a| a == address);
                    let reached = log.fetch(&self.client, ctx).await;
                    refused = if reached { 0 } else { refused + 1 };
                    // A deregistered executor that still answers is draining: let it finish.
                    let gone = refused >= GONE_AFTER_PROBES || (!registered && refused > 0);
                    if gone {
                        let why = if registered {
                            format!("executor {address} stopped answering ({refused} polls refused)")
                        } else {
                            format!("executor {address} is no longer registered and does not answer")
                        };
                        if let Some(result) = waiting.give_up(why.clone()) {
                            return OnExecutor::Ended(outcome_of(&result, address));
                        }
                        waiting.disarm_kill();
                        // It may still be running there (a network split, not a crash): the
                        // first answer it gives again is to a /kill, so the run does not go on
                        // twice once it is sent elsewhere.
                        self.kill_when_back(address, job_id);
                        return OnExecutor::Elsewhere(why);
                    }
                    idle = match self.client.idle_beat(address, job_id).await {
                        Ok(_) => idle + 1,
                        Err(_) => 0,
                    };
                    if idle >= LOST_AFTER_IDLE_POLLS {
                        let why = format!(
                            "executor {address} no longer runs the job and reported no result \
                             (restarted?)"
                        );
                        if let Some(result) = waiting.give_up(why.clone()) {
                            return OnExecutor::Ended(outcome_of(&result, address));
                        }
                        waiting.disarm_kill();
                        log.drain(&self.client, ctx).await;
                        return OnExecutor::Ended(Outcome::Failure(why));
                    }
                }
            }
        }
    }

    /// Sends `/kill` for `job_id` to `address` every [`KILL_RETRY`] until the executor answers
    /// it (it is back) or [`KILL_RETRY_FOR`] has passed (it is gone for good), in the background.
    fn kill_when_back(&self, address: &str, job_id: i64) {
        let client = self.client.clone();
        let address = address.to_owned();
        tokio::spawn(async move {
            let until = tokio::time::Instant::now() + KILL_RETRY_FOR;
            while tokio::time::Instant::now() < until {
                tokio::time::sleep(KILL_RETRY).await;
                match client.kill(&address, job_id).await {
                    Err(e) if e.never_reached() || matches!(e, CallError::TimedOut { .. }) => {}
                    answered => {
                        tracing::info!(%address, job_id, ok = answered.is_ok(), "xxl executor back: /kill sent for the run moved away from it");
                        return;
                    }
                }
            }
        });
    }

    async fn kill(&self, address: &str, job_id: i64) {
        if let Err(e) = self.client.kill(address, job_id).await {
            tracing::info!(%address, job_id, error = %e, "xxl /kill failed");
        }
    }
}

/// One address of a sharding broadcast.
#[derive(Debug, Clone)]
struct Broadcast {
    address: String,
    index: u32,
    total: u32,
}

enum OnExecutor {
    /// The run has its outcome.
    Ended(Outcome),
    /// The executor could not take the run or went away: another address may.
    Elsewhere(String),
}

/// Waiting for one log id's callback. Dropped unsettled (the worker abandoned the run: drain or
/// revoke timeout), it gives up, so a later callback is late rather than lost, and sends
/// `/kill`, so the executor does not go on with a run that will run again elsewhere.
struct Waiting {
    side: Arc<AdminSide>,
    id: i64,
    rx: tokio::sync::oneshot::Receiver<CallbackParam>,
    settled: bool,
    kill: Option<(ExecutorClient, String, i64)>,
}

impl Waiting {
    fn new(side: &Arc<AdminSide>, id: i64) -> Self {
        Self {
            side: Arc::clone(side),
            id,
            rx: side.callbacks.expect(id),
            settled: false,
            kill: None,
        }
    }

    /// Once the executor took the run.
    fn kill_on_drop(&mut self, client: ExecutorClient, address: &str, job_id: i64) {
        self.kill = Some((client, address.to_owned(), job_id));
    }

    fn disarm_kill(&mut self) {
        self.kill = None;
    }

    /// Stops waiting; the result, if it came meanwhile.
    fn give_up(&mut self, why: impl Into<String>) -> Option<CallbackParam> {
        if self.settled {
            return None;
        }
        self.settled = true;
        self.kill = None;
        if self.side.callbacks.give_up(self.id, why) {
            None
        } else {
            self.rx.try_recv().ok()
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.settled {
            // Its result came, or the run already gave up (and killed what it had to).
            return;
        }
        let kill = self.kill.take();
        if self.give_up("the worker abandoned the run").is_some() {
            return;
        }
        if let (Some((client, address, job_id)), Ok(rt)) =
            (kill, tokio::runtime::Handle::try_current())
        {
            rt.spawn(async move {
                if let Err(e) = client.kill(&address, job_id).await {
                    tracing::info!(%address, job_id, error = %e, "xxl /kill of an abandoned run failed");
                }
            });
        }
    }
}

/// Where the copy of an executor's log of one dispatch stands.
struct LogCursor {
    address: String,
    param: LogParam,
    prefix: String,
    /// Bytes of the executor's log copied so far.
    copied: usize,
}

/// What executors answer for a log that does not exist (yet): not log lines.
const NO_LOG_YET: &[&str] = &["No such logid logs.", "readLog fail, logFile not exists"];

impl LogCursor {
    fn new(address: &str, log_id: i64, log_date_tim: i64, prefix: String) -> Self {
        Self {
            address: address.to_owned(),
            param: LogParam {
                log_date_tim,
                log_id,
                from_line_num: 1,
            },
            prefix,
            copied: 0,
        }
    }

    /// Copies new lines into the run's log; false only when the executor refused the
    /// connection (a slow or failing answer is not a sign that it is gone).
    async fn fetch(&mut self, client: &ExecutorClient, ctx: &RunContext) -> bool {
        self.fetch_lines(client, ctx).await.is_some()
    }

    /// Copies what is left of the log once the run has ended (a few pages at most).
    async fn drain(&mut self, client: &ExecutorClient, ctx: &RunContext) {
        for _ in 0..FINAL_LOG_PAGES {
            if self.fetch_lines(client, ctx).await.unwrap_or(0) == 0 {
                break;
            }
        }
    }

    /// The number of lines copied; `None` when the connection was refused.
    async fn fetch_lines(&mut self, client: &ExecutorClient, ctx: &RunContext) -> Option<i64> {
        if self.copied >= MAX_LOG_COPIED {
            return Some(0);
        }
        match client.log(&self.address, &self.param).await {
            Ok(got) => {
                // Java executors answer `toLineNum` below `fromLineNum` when nothing is new.
                if got.to_line_num < self.param.from_line_num && got.to_line_num != 0 {
                    return Some(0);
                }
                let content = got.log_content.unwrap_or_default();
                if NO_LOG_YET.contains(&content.trim()) {
                    return Some(0);
                }
                let mut n = 0i64;
                for line in content.lines() {
                    if self.copied >= MAX_LOG_COPIED {
                        ctx.log(format!(
                            "{}xxl: {MAX_LOG_COPIED} bytes of the executor's log copied; the rest \
                             is on the executor (log id {})",
                            self.prefix, self.param.log_id
                        ));
                        break;
                    }
                    self.copied += line.len() + 1;
                    ctx.log(format!("{}{line}", self.prefix));
                    n += 1;
                }
                // Advance by the lines received: executors disagree on `toLineNum` when
                // nothing is new.
                self.param.from_line_num += n;
                Some(n)
            }
            Err(e) => {
                tracing::debug!(address = %self.address, error = %e, "xxl /log failed");
                (!e.never_reached()).then_some(0)
            }
        }
    }
}

/// The outcome an executor's callback reports.
fn outcome_of(result: &CallbackParam, address: &str) -> Outcome {
    let msg = result.message();
    match result.handle_code {
        SUCCESS_CODE => Outcome::Success(msg),
        code => {
            let what = if code == TIMEOUT_CODE {
                "timed out on the executor"
            } else {
                "failed on the executor"
            };
            Outcome::Failure(match msg {
                Some(m) => format!("{what} {address} (code {code}): {m}"),
                None => format!("{what} {address} (code {code})"),
            })
        }
    }
}

/// The `xxl` handler of one job type.
#[derive(Debug, Clone)]
pub struct XxlHandler {
    bridge: Arc<Bridge>,
    target: XxlTarget,
}

impl Handler for XxlHandler {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin(Arc::clone(&self.bridge).run(self.target.clone(), ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect()
    }

    #[test]
    fn targets_parse_and_name_the_bad_part() {
        let t: XxlTarget = "billing-app/invoiceJobHandler".parse().unwrap();
        assert_eq!(
            (t.app.as_str(), t.handler.as_str()),
            ("billing-app", "invoiceJobHandler")
        );
        assert_eq!(t.to_string(), "billing-app/invoiceJobHandler");
        for bad in ["billing-app", "/h", "a/", "a/b/c", "a b/h", ""] {
            let e = bad.parse::<XxlTarget>().unwrap_err().to_string();
            assert!(e.contains("APP/HANDLER"), "{bad}: {e}");
        }
    }

    #[test]
    fn log_ids_cannot_be_guessed_and_stay_exact_in_javascript() {
        let ids: std::collections::HashSet<i64> = (0..1000).map(|_| log_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| (1i64 << 40..1i64 << 53).contains(id)));
    }

    #[test]
    fn first_last_and_round_pick_as_xxl_job_does() {
        let a = live(3);
        let mut b = Balance::default();
        assert_eq!(pick(RouteStrategy::First, &a, 7, &mut b).unwrap(), a[0]);
        assert_eq!(pick(RouteStrategy::Last, &a, 7, &mut b).unwrap(), a[2]);
        let mut b = Balance::default();
        let picks: Vec<String> = (0..6)
            .map(|_| pick(RouteStrategy::Round, &a, 7, &mut b).unwrap())
            .collect();
        for address in &a {
            assert_eq!(
                picks.iter().filter(|p| *p == address).count(),
                2,
                "{picks:?}"
            );
        }
        assert_ne!(picks[0], picks[1]);
        assert!(pick(RouteStrategy::First, &[], 7, &mut b).is_none());
    }

    #[test]
    fn least_used_routes_spread_and_forget_departed_addresses() {
        let a = live(3);
        let mut b = Balance::default();
        let picks: Vec<String> = (0..3)
            .map(|_| pick(RouteStrategy::LeastFrequentlyUsed, &a, 1, &mut b).unwrap())
            .collect();
        assert_eq!(picks, a, "each address once before any twice");
        let mut b = Balance::default();
        for _ in 0..3 {
            pick(RouteStrategy::LeastRecentlyUsed, &a, 1, &mut b);
        }
        assert_eq!(
            pick(RouteStrategy::LeastRecentlyUsed, &a, 1, &mut b).unwrap(),
            a[0],
            "the least recently used comes round again"
        );
        pick(RouteStrategy::LeastFrequentlyUsed, &a[1..], 1, &mut b);
        assert!(!b.used.contains_key(&a[0]));
    }

    #[test]
    fn consistent_hash_keeps_a_job_on_its_address_when_another_leaves() {
        let a = live(5);
        let mut moved = 0;
        for job in 0..200 {
            let mut b = Balance::default();
            let before = pick(RouteStrategy::ConsistentHash, &a, job, &mut b).unwrap();
            let again = pick(RouteStrategy::ConsistentHash, &a, job, &mut b).unwrap();
            assert_eq!(before, again);
            let without_last: Vec<String> = a[..4].to_vec();
            let after = pick(RouteStrategy::ConsistentHash, &without_last, job, &mut b).unwrap();
            if before != a[4] {
                assert_eq!(before, after, "job {job} moved though its address stayed");
            } else {
                moved += 1;
            }
        }
        assert!(
            moved > 10 && moved < 80,
            "{moved} of 200 jobs were on the 5th address"
        );
    }

    #[test]
    fn callbacks_become_outcomes_with_the_executors_message() {
        let cb = |code, msg: &str| CallbackParam {
            log_id: 1,
            log_date_tim: 0,
            handle_code: code,
            handle_msg: serde_json::json!(msg),
        };
        assert_eq!(
            outcome_of(&cb(200, "done"), "http://e"),
            Outcome::Success(Some("done".into()))
        );
        assert_eq!(
            outcome_of(&cb(500, "boom"), "http://e"),
            Outcome::Failure("failed on the executor http://e (code 500): boom".into())
        );
        assert!(
            matches!(outcome_of(&cb(502, "t"), "http://e"), Outcome::Failure(m) if m.contains("timed out"))
        );
    }
}
