//! `broker-check`: does the Tansu test broker hide acknowledged produce batches from a live
//! consumer while several producers write to one partition at the same time?
//!
//! # What it checks
//!
//! Cadenza's tests and benchmarks use Tansu (in-memory storage) as their Kafka broker. With
//! several idempotent producers writing to the same partition concurrently, Tansu can make a
//! produce batch visible only after a batch that was appended after it. A consumer that fetches at
//! that moment moves past the earlier batch's offsets without receiving it, although the broker
//! acknowledged the batch; a reader that starts later finds it at its offsets. Apache Kafka
//! appends and serves a partition in offset order, so there a consumer never skips an
//! acknowledged record.
//!
//! # How
//!
//! 1. Starts `tansu broker` with memory storage on a free port of 127.0.0.1 and creates a topic
//!    with 6 partitions.
//! 2. Starts a live group consumer (its own thread) that reads in batches of up to 500 records
//!    and commits after each batch.
//! 3. Runs `--producers` idempotent producers (`acks=all`) for `--secs` seconds, each at `--rate`
//!    records per second. Every record carries a unique id `p<producer>-<sequence>` as key and
//!    value. `--mode spread` spreads each producer's records over all partitions; `--mode p0`
//!    sends them all to partition 0, so every producer writes to the same partition.
//! 4. Waits until the live consumer has passed every acknowledged end offset (at most 20 s).
//! 5. Re-reads every partition from the beginning with a fresh consumer.
//! 6. Compares what was acknowledged, what the live consumer received and what the re-read found,
//!    prints the details and a `VERDICT:` line.
//! 7. Stops the broker by its process id (SIGTERM, SIGKILL after 5 s), on errors too. The whole
//!    run is limited to `--secs` + 180 s; past that the broker is stopped and the tool exits.
//!
//! # Reading the result
//!
//! The details before the verdict give, per partition, the offset ranges the live consumer never
//! received and the ids around them. Then one of:
//!
//! - `VERDICT: OK: no loss, no hidden records, no duplicates or gaps` (exit status 0);
//! - `VERDICT: HIDDEN: <n> acknowledged records never reached the live consumer (<m> anomalies
//!   in all)` (exit status 1): the defect. If the re-read found them at their acknowledged
//!   offsets, the broker kept them but served them late;
//! - `VERDICT: ANOMALIES: <m> (no hidden records)` (exit status 1): something else was wrong,
//!   for instance an id at two offsets, a gap in the re-read, or a record at a different offset
//!   than acknowledged.
//!
//! Exit status 2 means the check could not run (bad flag, no broker binary, broker failure, time
//! limit).
//!
//! Usage: `broker-check [--producers N] [--secs S] [--rate R] [--mode spread|p0] [--tansu PATH]`

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const PARTITIONS: i32 = 6;
const TOPIC: &str = "race-check";

/// Time for everything but producing: broker start (15 s), topic creation, group assignment
/// (30 s), outstanding deliveries (30 s), drain (20 s), re-read (30 s), broker stop (5 s).
const FIXED_TIME_LIMIT: Duration = Duration::from_secs(180);
const ASSIGN_TIMEOUT: Duration = Duration::from_secs(30);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
const REREAD_TIMEOUT: Duration = Duration::from_secs(30);
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(15);
const BROKER_STOP_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_SECS: u64 = 3600;

const USAGE: &str = "\
usage: broker-check [--producers N] [--secs S] [--rate R] [--mode spread|p0] [--tansu PATH]

  --producers N   concurrent idempotent producers (default 3)
  --secs S        how long each producer sends, 1..=3600 (default 20)
  --rate R        records per second per producer (default 5000)
  --mode M        spread: each producer over all 6 partitions; p0: all to partition 0
                  (default spread)
  --tansu PATH    the tansu binary (default $TANSU_BIN, else $CADENZA_HOME/bin/tansu,
                  else ~/.cache/cadenza/bin/tansu)

Exit status: 0 no anomalies, 1 hidden records or other anomalies, 2 the check could not run.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Producer `i` sends record `seq` to partition `(seq + i) % 6`.
    Spread,
    /// Every record goes to partition 0.
    P0,
}

impl Mode {
    fn partition(self, producer: usize, seq: u64) -> i32 {
        match self {
            Mode::P0 => 0,
            Mode::Spread => {
                let p = (seq + producer as u64) % PARTITIONS as u64;
                i32::try_from(p).unwrap_or(0)
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Spread => "spread",
            Mode::P0 => "p0",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Args {
    producers: usize,
    secs: u64,
    rate: u64,
    mode: Mode,
    /// `None`: the default location (see [`default_tansu`]).
    tansu: Option<PathBuf>,
}

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Cli {
    Run(Args),
    Help,
}

/// Parses the flags (without the program name).
fn parse_args(argv: impl IntoIterator<Item = OsString>) -> Result<Cli> {
    let mut args = Args {
        producers: 3,
        secs: 20,
        rate: 5000,
        mode: Mode::Spread,
        tansu: None,
    };
    let mut argv = argv.into_iter();
    while let Some(flag) = argv.next() {
        let flag = flag
            .into_string()
            .map_err(|f| anyhow!("unknown argument {f:?} (see --help)"))?;
        if flag == "--help" || flag == "-h" {
            return Ok(Cli::Help);
        }
        let known = ["--producers", "--secs", "--rate", "--mode", "--tansu"];
        if !known.contains(&flag.as_str()) {
            bail!("unknown argument {flag:?} (see --help)");
        }
        let value = argv
            .next()
            .ok_or_else(|| anyhow!("{flag} needs a value (see --help)"))?;
        if flag == "--tansu" {
            if value.is_empty() {
                bail!("--tansu: the path is empty");
            }
            args.tansu = Some(PathBuf::from(value));
            continue;
        }
        let value = value
            .into_string()
            .map_err(|v| anyhow!("{flag}: {v:?} is not valid UTF-8"))?;
        match flag.as_str() {
            "--producers" => args.producers = positive(&flag, &value)?,
            "--secs" => {
                args.secs = positive(&flag, &value)?;
                if args.secs > MAX_SECS {
                    bail!("--secs: {value} is more than {MAX_SECS}");
                }
            }
            "--rate" => args.rate = positive(&flag, &value)?,
            "--mode" => {
                args.mode = match value.as_str() {
                    "spread" => Mode::Spread,
                    "p0" => Mode::P0,
                    _ => bail!("--mode: expected spread or p0, got {value:?}"),
                }
            }
            _ => bail!("unknown argument {flag:?} (see --help)"),
        }
    }
    Ok(Cli::Run(args))
}

fn positive<T: std::str::FromStr + Default + PartialEq>(flag: &str, value: &str) -> Result<T> {
    match value.parse::<T>() {
        Ok(n) if n != T::default() => Ok(n),
        _ => bail!("{flag}: expected a positive whole number, got {value:?}"),
    }
}

/// `$TANSU_BIN`, else `$CADENZA_HOME/bin/tansu`, else `$HOME/.cache/cadenza/bin/tansu`
/// (where `scripts/install-deps` installs it).
fn default_tansu() -> Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(bin) = var("TANSU_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let home = match var("CADENZA_HOME") {
        Some(home) => PathBuf::from(home),
        None => {
            let home = var("HOME")
                .context("HOME is not set: pass --tansu PATH or set TANSU_BIN or CADENZA_HOME")?;
            Path::new(&home).join(".cache").join("cadenza")
        }
    };
    Ok(home.join("bin").join("tansu"))
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Locks, ignoring poisoning: the data is plain records, still usable after a panic elsewhere.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- the broker ----

/// A running `tansu broker`. [`Broker::stop`] stops it by its process id; [`BrokerGuard`] calls
/// it when dropped, and the time-limit watchdog calls it too.
struct Broker {
    child: Mutex<Option<Child>>,
    pid: u32,
    port: u16,
    log: PathBuf,
}

impl Broker {
    /// SIGTERM, wait up to 5 s, then SIGKILL; reaps the process. Idempotent.
    fn stop(&self) {
        let Some(mut child) = lock(&self.child).take() else {
            return;
        };
        let pid = self.pid;
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if term.is_ok_and(|s| s.success()) {
            let t = Instant::now();
            while t.elapsed() < BROKER_STOP_TIMEOUT {
                match child.try_wait() {
                    Ok(Some(_)) => {
                        eprintln!("[check] tansu pid {pid} stopped");
                        return;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                    Err(e) => {
                        eprintln!("[check] waiting for tansu pid {pid}: {e}");
                        break;
                    }
                }
            }
        }
        // Child::kill sends SIGKILL to this child's pid only.
        if let Err(e) = child.kill() {
            eprintln!("[check] SIGKILL to tansu pid {pid}: {e}");
        }
        match child.wait() {
            Ok(_) => eprintln!("[check] tansu pid {pid} killed"),
            Err(e) => eprintln!("[check] reaping tansu pid {pid}: {e}"),
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn has_exited(&self) -> bool {
        match lock(&self.child).as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }
}

/// Stops the broker when dropped, so every return path (errors included) stops it.
struct BrokerGuard(Arc<Broker>);

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        self.0.stop();
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?;
    Ok(listener
        .local_addr()
        .context("reading the free port's address")?
        .port())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Starts `tansu broker` with memory storage on a free port of 127.0.0.1 and waits until the port
/// accepts connections. Under `setpriv --pdeathsig KILL` when available, so the broker also dies
/// if this process is killed.
fn start_broker(bin: &Path, log: &Path) -> Result<BrokerGuard> {
    let port = free_port()?;
    let url = format!("tcp://127.0.0.1:{port}");
    let log_file =
        File::create(log).with_context(|| format!("creating the log {}", log.display()))?;
    let log_file2 = log_file
        .try_clone()
        .with_context(|| format!("opening the log {}", log.display()))?;
    let have_setpriv = Command::new("setpriv")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mut cmd = if have_setpriv {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.arg("broker")
        .arg("--listener-url")
        .arg(&url)
        .arg("--advertised-listener-url")
        .arg(&url)
        .arg("--storage-engine")
        .arg("memory://tansu/")
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_file2);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    eprintln!(
        "[check] tansu pid {pid} on 127.0.0.1:{port}, log {}",
        log.display()
    );
    let guard = BrokerGuard(Arc::new(Broker {
        child: Mutex::new(Some(child)),
        pid,
        port,
        log: log.to_path_buf(),
    }));
    let t = Instant::now();
    loop {
        // Checked before and after connecting: another process may have taken the port.
        if guard.0.has_exited() {
            bail!(
                "tansu exited at start; log tail:\n{}",
                log_tail(&guard.0.log)
            );
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && !guard.0.has_exited() {
            return Ok(guard);
        }
        if t.elapsed() > BROKER_START_TIMEOUT {
            bail!(
                "tansu did not open 127.0.0.1:{port} within {BROKER_START_TIMEOUT:?}; log \
                 tail:\n{}",
                log_tail(&guard.0.log)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops the broker and exits with status 2 if the run is still going at `limit`.
fn start_watchdog(broker: Arc<Broker>, limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("[check] error: time limit of {limit:?} reached; stopping the broker");
        broker.stop();
        std::process::exit(2);
    });
}

// ---- clients ----

fn config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

/// One record as acknowledged or read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    partition: i32,
    offset: i64,
    id: String,
}

impl Rec {
    fn new(partition: i32, offset: i64, id: impl Into<String>) -> Rec {
        Rec {
            partition,
            offset,
            id: id.into(),
        }
    }

    fn from_message(m: &BorrowedMessage<'_>) -> Rec {
        let id = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        Rec::new(m.partition(), m.offset(), id)
    }

    fn at(&self) -> (i32, i64) {
        (self.partition, self.offset)
    }
}

/// Per partition, one past the highest offset in `recs`.
fn end_offsets<'a>(recs: impl IntoIterator<Item = &'a Rec>) -> BTreeMap<i32, i64> {
    let mut ends = BTreeMap::new();
    for r in recs {
        let e = ends.entry(r.partition).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    ends
}

/// The live group consumer: reads batches (up to 100 ms for the first record, then whatever is
/// ready, at most 500) and commits the stored offsets after each batch, until `stop`.
fn live_consumer(
    bootstrap: &str,
    stop: &AtomicBool,
    assigned: &AtomicBool,
    out: &Mutex<Vec<Rec>>,
) -> Result<()> {
    let c: BaseConsumer = config(bootstrap)
        .set("group.id", format!("check-{}", now_ms()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the live consumer")?;
    c.subscribe(&[TOPIC])
        .context("subscribing the live consumer")?;
    let mut batch = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if !assigned.load(Ordering::Relaxed)
            && c.assignment()
                .is_ok_and(|a| a.count() == PARTITIONS as usize)
        {
            assigned.store(true, Ordering::Relaxed);
        }
        let mut timeout = Timeout::After(Duration::from_millis(100));
        batch.clear();
        while batch.len() < 500 {
            match c.poll(timeout) {
                None => break,
                Some(Err(e)) => {
                    eprintln!("[live] consumer error: {e}");
                    break;
                }
                Some(Ok(m)) => {
                    batch.push(Rec::from_message(&m));
                    c.store_offset_from_message(&m)
                        .context("storing the live consumer's offset")?;
                }
            }
            timeout = Timeout::After(Duration::ZERO);
        }
        if !batch.is_empty() {
            lock(out).extend(batch.iter().cloned());
            match c.commit_consumer_state(CommitMode::Async) {
                Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => eprintln!("[live] commit: {e}"),
            }
        }
    }
    match c.commit_consumer_state(CommitMode::Sync) {
        Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => eprintln!("[live] final commit: {e}"),
    }
    Ok(())
}

/// A fresh consumer without a group: assigns every partition from the beginning and reads each up
/// to `ends[p]` (exclusive), then 500 ms more; or until `deadline`.
fn reread(bootstrap: &str, ends: &BTreeMap<i32, i64>, deadline: Duration) -> Result<Vec<Rec>> {
    let c: BaseConsumer = config(bootstrap)
        .set("group.id", format!("reread-{}", now_ms()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the re-read consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .context("building the re-read assignment")?;
    }
    c.assign(&tpl).context("assigning the re-read consumer")?;
    let mut out = Vec::new();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let t = Instant::now();
    loop {
        let done = ends
            .iter()
            .all(|(p, e)| next.get(p).copied().unwrap_or(0) >= *e);
        if done {
            // A little longer, to catch anything past the last acknowledged offset.
            let t2 = Instant::now();
            while t2.elapsed() < Duration::from_millis(500) {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
                    out.push(Rec::from_message(&m));
                }
            }
            break;
        }
        if t.elapsed() > deadline {
            eprintln!("[reread] deadline: positions {next:?}, wanted {ends:?}");
            break;
        }
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => eprintln!("[reread] error: {e}"),
            Some(Ok(m)) => {
                next.insert(m.partition(), m.offset() + 1);
                out.push(Rec::from_message(&m));
            }
        }
    }
    Ok(out)
}

/// One idempotent producer: `rate` records per second (in ticks of 10 ms) for `secs` seconds,
/// then waits for every delivery. Returns the acknowledged records and the failed count.
async fn produce(
    bootstrap: String,
    idx: usize,
    secs: u64,
    rate: u64,
    mode: Mode,
) -> Result<(Vec<Rec>, u64)> {
    let p: FutureProducer = config(&bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "30000")
        .create()
        .with_context(|| format!("creating producer {idx}"))?;
    let per_tick = (rate / 100).max(1);
    let mut futs = Vec::new();
    let start = tokio::time::Instant::now();
    let mut seq: u64 = 0;
    let mut interval = tokio::time::interval(Duration::from_millis(10));
    while start.elapsed() < Duration::from_secs(secs) {
        interval.tick().await;
        for _ in 0..per_tick {
            let id = format!("p{idx}-{seq:08}");
            let part = mode.partition(idx, seq);
            loop {
                let rec = FutureRecord::<str, str>::to(TOPIC)
                    .key(&id)
                    .payload(&id)
                    .partition(part);
                match p.send_result(rec) {
                    Ok(f) => {
                        futs.push((id.clone(), f));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => bail!("producer {idx}: {e}"),
                }
            }
            seq += 1;
        }
    }
    let mut acked = Vec::new();
    let mut failed = 0;
    for (id, f) in futs {
        match f.await {
            Ok(Ok(d)) => acked.push(Rec::new(d.partition, d.offset, id)),
            Ok(Err((e, _))) => {
                failed += 1;
                if failed < 5 {
                    eprintln!("[p{idx}] delivery failed {id}: {e}");
                }
            }
            Err(_) => failed += 1,
        }
    }
    eprintln!(
        "[p{idx}] sent {seq}, acked {}, failed {failed} in {:?}",
        acked.len(),
        start.elapsed()
    );
    Ok((acked, failed))
}

// ---- the comparison ----

/// `0-4,7,9-10`; at most 12 ranges are listed.
fn ranges(v: &[i64]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = Vec::new();
    for (a, b) in runs(&v) {
        out.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        });
    }
    if out.len() > 12 {
        let n = out.len();
        out.truncate(12);
        out.push(format!("... ({n} ranges)"));
    }
    out.join(",")
}

/// The runs of consecutive numbers in sorted, deduplicated `v`, as (first, last).
fn runs(v: &[i64]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push((v[i], v[j]));
        i = j + 1;
    }
    out
}

/// Within one read: the same offset with different ids, one id at several offsets, and gaps
/// (or a first offset other than 0) per partition. Returns the number of such problems.
fn self_check(name: &str, recs: &[Rec]) -> usize {
    let mut by_off: HashMap<(i32, i64), BTreeSet<&str>> = HashMap::new();
    let mut by_id: HashMap<&str, BTreeSet<(i32, i64)>> = HashMap::new();
    let mut redeliveries = 0;
    for r in recs {
        if !by_off.entry(r.at()).or_default().insert(&r.id) {
            redeliveries += 1;
        }
        by_id.entry(&r.id).or_default().insert(r.at());
    }
    let conflicting: Vec<_> = by_off.iter().filter(|(_, s)| s.len() > 1).collect();
    let multi: Vec<_> = by_id.iter().filter(|(_, s)| s.len() > 1).collect();
    println!(
        "  {name}: {} records ({} distinct offsets), same (p,offset,id) delivered again: \
         {redeliveries}",
        recs.len(),
        by_off.len()
    );
    println!(
        "  {name}: offsets with >1 different ids: {}",
        conflicting.len()
    );
    for (k, s) in conflicting.iter().take(5) {
        println!("    p{} off {}: {:?}", k.0, k.1, s);
    }
    println!("  {name}: ids at >1 offsets: {}", multi.len());
    for (k, s) in multi.iter().take(5) {
        println!("    {k}: {s:?}");
    }
    let mut problems = conflicting.len() + multi.len();
    for p in 0..PARTITIONS {
        let mut offs: Vec<i64> = by_off.keys().filter(|k| k.0 == p).map(|k| k.1).collect();
        offs.sort_unstable();
        let (Some(&first), Some(&last)) = (offs.first(), offs.last()) else {
            continue;
        };
        let gaps: Vec<String> = offs
            .windows(2)
            .filter(|w| w[1] != w[0] + 1)
            .map(|w| format!("{}..{}", w[0] + 1, w[1] - 1))
            .collect();
        if first != 0 || !gaps.is_empty() {
            println!(
                "  {name}: p{p} first offset {first} last {last} gaps {} {:?}",
                gaps.len(),
                &gaps[..gaps.len().min(8)]
            );
            problems += gaps.len() + usize::from(first != 0);
        }
    }
    problems
}

/// The outcome of [`compare`].
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Acknowledged ids the live consumer never received.
    hidden: usize,
    /// Every anomaly counted, the hidden records included.
    anomalies: usize,
}

impl Outcome {
    fn verdict(&self) -> String {
        if self.hidden > 0 {
            format!(
                "HIDDEN: {} acknowledged records never reached the live consumer ({} anomalies \
                 in all)",
                self.hidden, self.anomalies
            )
        } else if self.anomalies > 0 {
            format!("ANOMALIES: {} (no hidden records)", self.anomalies)
        } else {
            "OK: no loss, no hidden records, no duplicates or gaps".to_string()
        }
    }

    fn exit_code(&self) -> ExitCode {
        if self.anomalies > 0 || self.hidden > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// Compares the acknowledged records with what the live consumer received and what the re-read
/// found, and prints the details.
fn compare(acked: &[Rec], live: &[Rec], reread: &[Rec]) -> Outcome {
    let mut anomalies = 0;
    let live_ids: HashSet<&str> = live.iter().map(|r| r.id.as_str()).collect();
    let reread_at: HashMap<(i32, i64), &str> =
        reread.iter().map(|r| (r.at(), r.id.as_str())).collect();
    let reread_ids: HashMap<&str, (i32, i64)> =
        reread.iter().map(|r| (r.id.as_str(), r.at())).collect();
    let mut live_max: BTreeMap<i32, i64> = BTreeMap::new();
    for r in live {
        let e = live_max.entry(r.partition).or_insert(-1);
        *e = (*e).max(r.offset);
    }
    let below_live = |p: i32, o: i64| o < live_max.get(&p).copied().unwrap_or(-1);

    // Acknowledged but never received by the live consumer.
    let mut hidden: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut hidden_below_live = 0;
    let mut hidden_n = 0;
    for r in acked {
        if !live_ids.contains(r.id.as_str()) {
            hidden_n += 1;
            let off = reread_ids.get(r.id.as_str()).map_or(r.offset, |x| x.1);
            if below_live(r.partition, off) {
                hidden_below_live += 1;
            }
            hidden.entry(r.partition).or_default().push(off);
        }
    }
    println!(
        "acked ids never seen by live consumer: {hidden_n} (of which at offsets below the live \
         consumer's highest offset in that partition: {hidden_below_live})"
    );
    for (p, v) in &hidden {
        println!("  p{p}: {} at offsets {}", v.len(), ranges(v));
    }
    anomalies += hidden_n;

    // Acknowledged but missing from the re-read, or re-read at another offset.
    let lost = acked
        .iter()
        .filter(|r| !reread_ids.contains_key(r.id.as_str()))
        .count();
    let moved: Vec<&Rec> = acked
        .iter()
        .filter(|r| reread_ids.get(r.id.as_str()).is_some_and(|x| *x != r.at()))
        .collect();
    println!(
        "acked ids missing from re-read: {lost}; acked at a different (p,offset) than re-read: {}",
        moved.len()
    );
    for r in moved.iter().take(5) {
        println!(
            "  {}: acked p{}@{}, re-read {:?}",
            r.id,
            r.partition,
            r.offset,
            reread_ids.get(r.id.as_str())
        );
    }
    anomalies += lost + moved.len();

    // The live consumer and the re-read at the same offset.
    let mut differ = 0;
    let mut live_only = 0;
    for r in live {
        match reread_at.get(&r.at()) {
            Some(other) if *other != r.id => {
                differ += 1;
                if differ <= 5 {
                    println!(
                        "  p{}@{}: live saw {}, re-read {other}",
                        r.partition, r.offset, r.id
                    );
                }
            }
            None => live_only += 1,
            Some(_) => {}
        }
    }
    println!(
        "live vs re-read: same offset different id: {differ}; live offsets absent from re-read: \
         {live_only}"
    );
    anomalies += differ + live_only;

    // Offsets in the re-read that the live consumer passed without receiving them.
    let live_offs: BTreeSet<(i32, i64)> = live.iter().map(Rec::at).collect();
    let mut skipped: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in reread {
        if !live_offs.contains(&r.at()) && below_live(r.partition, r.offset) {
            skipped.entry(r.partition).or_default().push(r.offset);
        }
    }
    let nskip: usize = skipped.values().map(Vec::len).sum();
    println!("re-read offsets the live consumer passed without delivering: {nskip}");
    let id_at = |p: i32, o: i64| reread_at.get(&(p, o)).copied().unwrap_or("?");
    for (p, v) in &skipped {
        println!("  p{p}: {}", ranges(v));
        // The ids at both ends of each skipped range, and what surrounds it.
        let mut v = v.clone();
        v.sort_unstable();
        v.dedup();
        for (a, b) in runs(&v) {
            println!(
                "    {a}..{b}: ids {}..{}; live got @{}={:?} then @{}={:?}",
                id_at(*p, a),
                id_at(*p, b),
                a - 1,
                reread_at.get(&(*p, a - 1)),
                b + 1,
                reread_at.get(&(*p, b + 1))
            );
        }
    }
    anomalies += nskip;
    anomalies += self_check("live", live);
    anomalies += self_check("re-read", reread);
    let acked_ids: BTreeSet<&str> = acked.iter().map(|r| r.id.as_str()).collect();
    let extra = reread
        .iter()
        .filter(|r| !acked_ids.contains(r.id.as_str()))
        .count();
    if extra > 0 {
        println!("re-read records not acked (e.g. failed deliveries that landed): {extra}");
    }
    Outcome {
        hidden: hidden_n,
        anomalies,
    }
}

// ---- the run ----

async fn run(args: Args) -> Result<Outcome> {
    let tansu = match args.tansu {
        Some(path) => path,
        None => default_tansu()?,
    };
    if !tansu.is_file() {
        bail!(
            "tansu is not at {}: run scripts/install-deps, or pass --tansu PATH / set TANSU_BIN",
            tansu.display()
        );
    }
    let version = Command::new(&tansu)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --version", tansu.display()))?;
    println!(
        "tansu: {} ({})",
        String::from_utf8_lossy(&version.stdout).trim(),
        tansu.display()
    );
    println!(
        "mode={} producers={} secs={} rate/producer={}",
        args.mode.name(),
        args.producers,
        args.secs,
        args.rate
    );
    let log = std::env::temp_dir().join(format!("broker-check-tansu-{}.log", now_ms()));
    let broker = start_broker(&tansu, &log)?;
    start_watchdog(
        broker.0.clone(),
        Duration::from_secs(args.secs) + FIXED_TIME_LIMIT,
    );
    let bootstrap = broker.0.bootstrap();

    let admin: AdminClient<DefaultClientContext> = config(&bootstrap)
        .create()
        .context("creating the admin client")?;
    let results = admin
        .create_topics(
            &[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new()
                .operation_timeout(Some(Duration::from_secs(10)))
                .request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .context("creating the topic")?;
    for r in results {
        r.map_err(|(name, code)| anyhow!("creating topic {name}: {code}"))?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let assigned = Arc::new(AtomicBool::new(false));
    let live: Arc<Mutex<Vec<Rec>>> = Arc::default();
    let consumer = {
        let (b, s, a, l) = (
            bootstrap.clone(),
            stop.clone(),
            assigned.clone(),
            live.clone(),
        );
        std::thread::spawn(move || live_consumer(&b, &s, &a, &l))
    };
    let t = Instant::now();
    while !assigned.load(Ordering::Relaxed) {
        if consumer.is_finished() {
            consumer
                .join()
                .map_err(|_| anyhow!("the live consumer panicked"))??;
            bail!("the live consumer stopped before it was assigned");
        }
        if t.elapsed() > ASSIGN_TIMEOUT {
            stop.store(true, Ordering::Relaxed);
            bail!("the live consumer got no assignment in {ASSIGN_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("live consumer assigned after {:?}", t.elapsed());

    let producers: Vec<_> = (0..args.producers)
        .map(|i| {
            tokio::spawn(produce(
                bootstrap.clone(),
                i,
                args.secs,
                args.rate,
                args.mode,
            ))
        })
        .collect();
    let mut acked: Vec<Rec> = Vec::new();
    let mut failed = 0;
    for (i, h) in producers.into_iter().enumerate() {
        let (v, f) = h
            .await
            .with_context(|| format!("producer {i} panicked"))??;
        acked.extend(v);
        failed += f;
    }
    let ends = end_offsets(&acked);
    println!(
        "acked {} (failed {failed}); end offsets from acks {ends:?}",
        acked.len()
    );

    // Drain: until the live consumer has passed every acknowledged end offset, or 20 s.
    let t = Instant::now();
    loop {
        let reached = {
            let got = end_offsets(lock(&live).iter());
            ends.iter()
                .all(|(p, e)| got.get(p).copied().unwrap_or(0) >= *e)
        };
        if reached || t.elapsed() > DRAIN_TIMEOUT {
            println!("live drain: reached ends={reached} after {:?}", t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // anything late
    stop.store(true, Ordering::Relaxed);
    tokio::task::spawn_blocking(move || consumer.join())
        .await
        .context("joining the live consumer")?
        .map_err(|_| anyhow!("the live consumer panicked"))??;
    let live = std::mem::take(&mut *lock(&live));

    let reread = {
        let (b, e) = (bootstrap.clone(), ends.clone());
        tokio::task::spawn_blocking(move || reread(&b, &e, REREAD_TIMEOUT))
            .await
            .context("the re-read panicked")??
    };
    drop(admin);
    drop(broker);

    println!("== results ==");
    let outcome = compare(&acked, &live, &reread);
    println!("tansu log: {}", log.display());
    Ok(outcome)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(Cli::Run(args)) => args,
        Ok(Cli::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(run(args));
    runtime.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(outcome) => {
            println!("VERDICT: {}", outcome.verdict());
            outcome.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli> {
        parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn defaults_and_flags() -> Result<()> {
        let Cli::Run(a) = parse(&[])? else {
            bail!("expected a run");
        };
        assert_eq!(
            (a.producers, a.secs, a.rate, a.mode, a.tansu),
            (3, 20, 5000, Mode::Spread, None)
        );
        let Cli::Run(a) = parse(&[
            "--producers",
            "2",
            "--secs",
            "10",
            "--rate",
            "100",
            "--mode",
            "p0",
            "--tansu",
            "/x/tansu",
        ])?
        else {
            bail!("expected a run");
        };
        assert_eq!(
            (a.producers, a.secs, a.rate, a.mode),
            (2, 10, 100, Mode::P0)
        );
        assert_eq!(a.tansu, Some(PathBuf::from("/x/tansu")));
        assert_eq!(parse(&["--help"])?, Cli::Help);
        Ok(())
    }

    #[test]
    fn errors_name_the_flag() {
        for (args, flag) in [
            (&["--producers", "x"][..], "--producers"),
            (&["--producers", "0"][..], "--producers"),
            (&["--secs", "-1"][..], "--secs"),
            (&["--secs", "99999"][..], "--secs"),
            (&["--rate", ""][..], "--rate"),
            (&["--mode", "all"][..], "--mode"),
            (&["--rate"][..], "--rate"),
            (&["--tansu", ""][..], "--tansu"),
            (&["--bogus", "1"][..], "--bogus"),
        ] {
            match parse(args) {
                Ok(cli) => panic!("{args:?} parsed as {cli:?}"),
                Err(e) => assert!(e.to_string().contains(flag), "{args:?}: {e}"),
            }
        }
    }

    #[test]
    fn spread_and_p0_partitions() {
        assert_eq!(Mode::P0.partition(3, 17), 0);
        assert_eq!(Mode::Spread.partition(0, 0), 0);
        assert_eq!(Mode::Spread.partition(1, 0), 1);
        assert_eq!(Mode::Spread.partition(2, 5), 1);
    }

    #[test]
    fn ranges_are_compact() {
        assert_eq!(ranges(&[7, 0, 1, 2, 4, 2]), "0-2,4,7");
        assert_eq!(ranges(&[]), "");
        let many: Vec<i64> = (0..30).map(|i| i * 2).collect();
        assert!(ranges(&many).ends_with("... (30 ranges)"));
    }

    fn recs(part: i32, ids: &[&str]) -> Vec<Rec> {
        ids.iter()
            .enumerate()
            .map(|(o, id)| Rec::new(part, o as i64, *id))
            .collect()
    }

    #[test]
    fn all_delivered_is_ok() {
        let all = recs(0, &["a", "b", "c"]);
        let outcome = compare(&all, &all, &all);
        assert_eq!(
            outcome,
            Outcome {
                hidden: 0,
                anomalies: 0
            }
        );
        assert_eq!(outcome.exit_code(), ExitCode::SUCCESS);
        assert!(outcome.verdict().starts_with("OK"));
    }

    #[test]
    fn a_skipped_batch_is_hidden() {
        let all = recs(0, &["a", "b", "c", "d"]);
        let live: Vec<Rec> = all
            .iter()
            .filter(|r| r.offset != 1 && r.offset != 2)
            .cloned()
            .collect();
        let outcome = compare(&all, &live, &all);
        assert_eq!(outcome.hidden, 2);
        assert!(outcome.anomalies >= 2);
        assert_eq!(outcome.exit_code(), ExitCode::from(1));
        assert!(outcome.verdict().starts_with("HIDDEN: 2 "));
    }
}
