//! The broker of the tests: Apache Kafka in KRaft mode (one node, or a cluster of three), or
//! Tansu (an in-memory Kafka-protocol broker) when `CADENZA_TEST_BROKER=tansu`.
//!
//! Kafka comes from `scripts/install-deps` (`$CADENZA_HOME/kafka/libs`, the version pinned in
//! `scripts/kafka/pom.xml`) and runs with the configuration of
//! `scripts/kafka/server.properties.in`, as `scripts/demo` and `scripts/services` run it. Each node
//! is broker and controller at once; a cluster of three has three controllers (a quorum of two),
//! replication factor 3 and `min.insync.replicas=2`, so losing any one node loses nothing.
//!
//! `scripts/test` starts one Kafka broker for the whole suite and names it in
//! `CADENZA_TEST_BROKERS`; [`Broker::shared`] uses it (tests keep apart by their topic prefix and
//! consumer group names), so a test that does not stop the broker pays no broker start. A test
//! that stops, kills or pauses brokers starts its own ([`Broker::start`],
//! [`Broker::start_cluster`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::Signal;
use rdkafka::consumer::{BaseConsumer, Consumer};
use tempfile::TempDir;

use crate::bins::{cadenza_home, tansu_bin};
use crate::kafka::client_config;
use crate::process::{supervised_command, ChildProcess};
use crate::util::{finish_temp_dir, free_port, tail_file, temp_dir, wait_for_port};

/// Which broker the tests run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Apache Kafka (the default, and what CI runs).
    Kafka,
    /// Tansu, memory storage: starts in milliseconds, keeps nothing across a restart.
    Tansu,
}

impl BrokerKind {
    /// `CADENZA_TEST_BROKER`: `kafka` (default) or `tansu`.
    pub fn selected() -> BrokerKind {
        match std::env::var("CADENZA_TEST_BROKER").ok().as_deref() {
            Some(v) if v.eq_ignore_ascii_case("tansu") => BrokerKind::Tansu,
            _ => BrokerKind::Kafka,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Kafka => "kafka",
            BrokerKind::Tansu => "tansu",
        }
    }
}

/// How long a Kafka node may take to accept connections after it is started.
const KAFKA_START_TIMEOUT: Duration = Duration::from_secs(60);

/// One broker process: a Kafka node (broker and controller) or Tansu.
pub struct BrokerNode {
    kind: BrokerKind,
    id: i32,
    port: u16,
    controller_port: u16,
    /// Kafka: `server.properties` and `data/`.
    dir: PathBuf,
    log: PathBuf,
    heap: String,
    proc: Mutex<Option<Arc<ChildProcess>>>,
}

impl std::fmt::Debug for BrokerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerNode")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("port", &self.port)
            .finish()
    }
}

impl BrokerNode {
    fn proc(&self) -> MutexGuard<'_, Option<Arc<ChildProcess>>> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its node id (`node.id`; 1 for a single broker).
    pub fn id(&self) -> i32 {
        self.id
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc().as_ref().map(|p| p.pid())
    }

    pub fn is_running(&self) -> bool {
        self.proc().as_ref().is_some_and(|p| p.is_running())
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    fn command(&self) -> Result<Command> {
        match self.kind {
            BrokerKind::Tansu => {
                let url = format!("tcp://127.0.0.1:{}", self.port);
                let mut cmd = supervised_command(&tansu_bin()?, None);
                cmd.arg("broker")
                    .arg("--listener-url")
                    .arg(&url)
                    .arg("--advertised-listener-url")
                    .arg(&url)
                    .arg("--storage-engine")
                    .arg("memory://tansu/");
                Ok(cmd)
            }
            BrokerKind::Kafka => {
                let mut cmd = supervised_command(&java_bin()?, None);
                cmd.args(jvm_args(&self.heap)?)
                    .arg("kafka.Kafka")
                    .arg(self.dir.join("server.properties"));
                Ok(cmd)
            }
        }
    }

    /// Starts the process (it must not be running) and waits until its port accepts
    /// connections.
    async fn launch(&self) -> Result<()> {
        let name = format!("{}-{}", self.kind.name(), self.id);
        let proc = Arc::new(ChildProcess::spawn(&name, self.command()?, &self.log)?);
        *self.proc() = Some(proc.clone());
        let timeout = match self.kind {
            BrokerKind::Kafka => KAFKA_START_TIMEOUT,
            BrokerKind::Tansu => Duration::from_secs(15),
        };
        let deadline = Instant::now() + timeout;
        let ready = loop {
            if proc.exit_status().is_some() {
                break Err(anyhow!("exited"));
            }
            if wait_for_port(self.port, Duration::from_millis(200))
                .await
                .is_ok()
            {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(anyhow!(
                    "nothing accepted connections on {} within {timeout:?}",
                    self.address()
                ));
            }
        };
        if let Err(e) = ready {
            let status = proc.exit_status();
            if status.is_none() {
                let _ = proc.kill_9();
            }
            *self.proc() = None;
            bail!(
                "{name} on port {}: {e} ({status:?}); log tail:\n{}",
                self.port,
                tail_file(&self.log, 40)
            );
        }
        Ok(())
    }

    /// Stops it with `signal` (SIGTERM: a controlled shutdown) and waits up to `grace`, then
    /// SIGKILL.
    pub async fn stop_with(&self, signal: Signal, grace: Duration) -> Result<()> {
        let proc = self.proc().take();
        match proc {
            Some(proc) => proc.stop(signal, grace).await.map(drop),
            None => Ok(()),
        }
    }

    /// SIGTERM and wait (SIGKILL after 30 s).
    pub async fn stop(&self) -> Result<()> {
        self.stop_with(Signal::SIGTERM, Duration::from_secs(30))
            .await
    }

    /// SIGKILL: the node dies at once, as a machine that loses power.
    pub fn kill_9(&self) -> Result<()> {
        let proc = self.proc().take();
        match proc {
            Some(proc) => proc.kill_9().map(drop),
            None => Ok(()),
        }
    }

    /// SIGSTOP: the node freezes (its sessions time out, its connections stay open).
    pub fn pause(&self) -> Result<()> {
        match self.proc().as_ref() {
            Some(proc) => proc.signal(Signal::SIGSTOP),
            None => bail!("broker node {} is not running", self.id),
        }
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) -> Result<()> {
        match self.proc().as_ref() {
            Some(proc) => proc.signal(Signal::SIGCONT),
            None => bail!("broker node {} is not running", self.id),
        }
    }

    /// Starts it again on the same ports after a stop or a kill: Kafka with its data, Tansu
    /// empty.
    pub async fn start_again(&self) -> Result<()> {
        if self.is_running() {
            bail!("broker node {} is already running", self.id);
        }
        self.launch().await
    }

    fn kill_now(&self) {
        if let Some(proc) = self.proc().take() {
            let result = match self.kind {
                // Its data goes with the directory: nothing to shut down cleanly for.
                BrokerKind::Kafka => proc.kill_9().map(drop),
                BrokerKind::Tansu => proc
                    .stop_blocking(Signal::SIGTERM, Duration::from_secs(5))
                    .map(drop),
            };
            if let Err(e) = result {
                eprintln!(
                    "[cadenza-integration] stopping broker node {}: {e:#}",
                    self.id
                );
            }
        }
    }
}

/// The broker (or brokers) of a test. Dropping it stops what it started and deletes their
/// directories; a shared broker is left running.
pub struct Broker {
    kind: BrokerKind,
    nodes: Vec<BrokerNode>,
    /// The bootstrap of a broker this process did not start (`CADENZA_TEST_BROKERS`).
    shared: Option<String>,
    dir: Option<TempDir>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("kind", &self.kind)
            .field("bootstrap", &self.bootstrap())
            .finish()
    }
}

impl Broker {
    /// The suite's shared broker when `scripts/test` started one (`CADENZA_TEST_BROKERS`, Kafka
    /// only), else a broker of this test's own ([`Self::start`]). It cannot be stopped.
    pub async fn shared() -> Result<Broker> {
        let kind = BrokerKind::selected();
        match std::env::var("CADENZA_TEST_BROKERS") {
            Ok(b) if kind == BrokerKind::Kafka && !b.trim().is_empty() => Ok(Broker {
                kind,
                nodes: Vec::new(),
                shared: Some(b.trim().to_owned()),
                dir: None,
            }),
            _ => Broker::start().await,
        }
    }

    /// A broker of this test's own, of the selected kind ([`BrokerKind::selected`]): one Kafka
    /// node (broker and controller) or Tansu.
    pub async fn start() -> Result<Broker> {
        match BrokerKind::selected() {
            BrokerKind::Kafka => Broker::start_kafka(1).await,
            BrokerKind::Tansu => Broker::start_tansu().await,
        }
    }

    /// A Kafka cluster of `n` nodes, each broker and controller, whatever broker is selected (a
    /// test of what a cluster does needs one). Three nodes have replication factor 3 and
    /// `min.insync.replicas=2`. Returns once every node is in the cluster's metadata.
    pub async fn start_cluster(n: usize) -> Result<Broker> {
        Broker::start_kafka(n).await
    }

    async fn start_tansu() -> Result<Broker> {
        let dir = temp_dir("cadenza-broker-")?;
        let mut node = BrokerNode {
            kind: BrokerKind::Tansu,
            id: 1,
            port: free_port()?,
            controller_port: 0,
            dir: dir.path().to_path_buf(),
            log: dir.path().join("tansu.log"),
            heap: String::new(),
            proc: Mutex::new(None),
        };
        // The free port may be taken before Tansu binds it: retry with another one.
        let mut attempt = 1;
        loop {
            match node.launch().await {
                Ok(()) => break,
                Err(e) if attempt < 3 => {
                    eprintln!("[cadenza-integration] {e:#}");
                    attempt += 1;
                    node.port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Broker {
            kind: BrokerKind::Tansu,
            nodes: vec![node],
            shared: None,
            dir: Some(dir),
        })
    }

    async fn start_kafka(n: usize) -> Result<Broker> {
        if n == 0 {
            bail!("a Kafka cluster needs at least one node");
        }
        let mut attempt = 1;
        loop {
            let dir = temp_dir("cadenza-kafka-")?;
            match Broker::try_start_kafka(n, dir.path()).await {
                Ok(nodes) => {
                    return Ok(Broker {
                        kind: BrokerKind::Kafka,
                        nodes,
                        shared: None,
                        dir: Some(dir),
                    })
                }
                // A free port may be taken before Kafka binds it: again, with other ports.
                Err(e) if attempt < 3 => {
                    eprintln!("[cadenza-integration] starting Kafka (attempt {attempt}): {e:#}");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_start_kafka(n: usize, root: &Path) -> Result<Vec<BrokerNode>> {
        let (replication, min_isr) = if n >= 3 { (3, 2) } else { (n, 1) };
        let heap = if n == 1 { "512m" } else { "384m" };
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let id = i32::try_from(i + 1)?;
            let dir = root.join(format!("node-{id}"));
            std::fs::create_dir_all(dir.join("data"))
                .with_context(|| format!("creating {}", dir.display()))?;
            nodes.push(BrokerNode {
                kind: BrokerKind::Kafka,
                id,
                port: free_port()?,
                controller_port: free_port()?,
                log: dir.join("kafka.log"),
                dir,
                heap: heap.to_owned(),
                proc: Mutex::new(None),
            });
        }
        let voters: Vec<String> = nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
            .collect();
        let voters = voters.join(",");
        let template = server_properties_template()?;
        for node in &nodes {
            let config = template
                .replace("@NODE_ID@", &node.id.to_string())
                .replace("@PORT@", &node.port.to_string())
                .replace("@CONTROLLER_PORT@", &node.controller_port.to_string())
                .replace("@VOTERS@", &voters)
                .replace("@REPLICATION@", &replication.to_string())
                .replace("@MIN_ISR@", &min_isr.to_string())
                .replace("@LOG_DIRS@", &node.dir.join("data").to_string_lossy());
            std::fs::write(node.dir.join("server.properties"), config)?;
        }
        // Every node of a cluster is formatted with the same cluster id, all at once.
        let cluster_id = kafka_cluster_id();
        let mut formats = Vec::with_capacity(n);
        for node in &nodes {
            let mut cmd = Command::new(java_bin()?);
            cmd.args(jvm_args("256m")?)
                .arg("kafka.tools.StorageTool")
                .arg("format")
                .arg("-t")
                .arg(&cluster_id)
                .arg("-c")
                .arg(node.dir.join("server.properties"));
            let log = std::fs::File::create(node.dir.join("format.log"))?;
            cmd.stdout(log.try_clone()?).stderr(log);
            let child = cmd.spawn().context("running Kafka's StorageTool format")?;
            formats.push((child, node.dir.clone()));
        }
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (mut child, dir) in formats {
                let status = child.wait()?;
                if !status.success() {
                    bail!(
                        "formatting Kafka's storage in {} failed ({status}):\n{}",
                        dir.display(),
                        tail_file(&dir.join("format.log"), 20)
                    );
                }
            }
            Ok(())
        })
        .await??;
        let started = futures::future::join_all(nodes.iter().map(|n| n.launch())).await;
        if let Some(e) = started.into_iter().find_map(|r| r.err()) {
            for node in &nodes {
                node.kill_now();
            }
            return Err(e);
        }
        let bootstrap = bootstrap_of(&nodes);
        if let Err(e) = wait_for_brokers(&bootstrap, n, KAFKA_START_TIMEOUT).await {
            let tails: Vec<String> = nodes
                .iter()
                .map(|n| format!("node {}:\n{}", n.id, n.log_tail(30)))
                .collect();
            for node in &nodes {
                node.kill_now();
            }
            bail!("{e:#}\n{}", tails.join("\n"));
        }
        Ok(nodes)
    }

    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// Whether this is the suite's shared broker (it cannot be stopped).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// `bootstrap.servers` / `CADENZA_BROKERS`: every node, comma-separated.
    pub fn bootstrap(&self) -> String {
        match &self.shared {
            Some(b) => b.clone(),
            None => bootstrap_of(&self.nodes),
        }
    }

    /// The nodes this test started (none for the shared broker).
    pub fn nodes(&self) -> &[BrokerNode] {
        &self.nodes
    }

    /// The node with `node.id` `id`.
    pub fn node(&self, id: i32) -> Result<&BrokerNode> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| anyhow!("no broker node {id} (the shared broker has none)"))
    }

    fn first(&self) -> Result<&BrokerNode> {
        self.nodes
            .first()
            .ok_or_else(|| anyhow!("the suite's shared broker cannot be stopped or signalled"))
    }

    /// The first node's port.
    pub fn port(&self) -> u16 {
        self.nodes.first().map_or(0, |n| n.port)
    }

    /// The first node's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.nodes.first().and_then(|n| n.pid())
    }

    /// Whether every node runs (the shared broker: always).
    pub fn is_running(&self) -> bool {
        self.nodes.iter().all(|n| n.is_running())
    }

    /// The first node's log.
    pub fn log_path(&self) -> &Path {
        self.nodes
            .first()
            .map_or(Path::new("/nonexistent"), |n| n.log_path())
    }

    /// The last `lines` of every node's log.
    pub fn log_tail(&self, lines: usize) -> String {
        if self.nodes.is_empty() {
            return format!("(the suite's shared broker at {})", self.bootstrap());
        }
        let tails: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "--- {} node {} ({}) ---\n{}",
                    n.kind.name(),
                    n.id,
                    n.log.display(),
                    n.log_tail(lines)
                )
            })
            .collect();
        tails.join("\n")
    }

    /// Stops every node (SIGTERM, a controlled shutdown, SIGKILL after 30 s).
    pub async fn stop(&self) -> Result<()> {
        self.first()?;
        for node in &self.nodes {
            node.stop().await?;
        }
        Ok(())
    }

    /// Starts every node again on the same ports after [`Self::stop`]: Kafka with its data,
    /// Tansu empty. Returns once the cluster's metadata lists every node.
    pub async fn start_again(&self) -> Result<()> {
        self.first()?;
        if self.is_running() {
            bail!("the broker is already running");
        }
        let stopped: Vec<&BrokerNode> = self.nodes.iter().filter(|n| !n.is_running()).collect();
        let started = futures::future::join_all(stopped.iter().map(|n| n.launch())).await;
        started.into_iter().collect::<Result<Vec<()>>>()?;
        if self.kind == BrokerKind::Kafka {
            wait_for_brokers(&self.bootstrap(), self.nodes.len(), KAFKA_START_TIMEOUT).await?;
        }
        Ok(())
    }

    /// The node id of the leader of a partition, as the cluster's metadata says now.
    pub async fn leader_of(&self, topic: &str, partition: i32) -> Result<Option<i32>> {
        let bootstrap = self.bootstrap();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || -> Result<Option<i32>> {
            let consumer: BaseConsumer = client_config(&bootstrap).create()?;
            let md = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
            Ok(md
                .topics()
                .iter()
                .flat_map(|t| t.partitions())
                .find(|p| p.id() == partition)
                .map(|p| p.leader())
                .filter(|l| *l >= 0))
        })
        .await?
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.kill_now();
        }
        if let Some(dir) = self.dir.take() {
            finish_temp_dir(dir, "the broker's directory");
        }
    }
}

fn bootstrap_of(nodes: &[BrokerNode]) -> String {
    let addrs: Vec<String> = nodes.iter().map(|n| n.address()).collect();
    addrs.join(",")
}

/// Waits until the cluster's metadata lists `n` brokers.
async fn wait_for_brokers(bootstrap: &str, n: usize, timeout: Duration) -> Result<()> {
    let bootstrap = bootstrap.to_owned();
    tokio::task::spawn_blocking(move || -> Result<()> {
        let consumer: BaseConsumer = client_config(&bootstrap).create()?;
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            match consumer.fetch_metadata(None, Duration::from_secs(2)) {
                Ok(md) if md.brokers().len() >= n => return Ok(()),
                Ok(md) => last = format!("{} of {n} brokers", md.brokers().len()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("the Kafka cluster at {bootstrap} did not list {n} brokers within {timeout:?} (last: {last})")
    })
    .await?
}

/// The Java that runs Kafka: `$JAVA_HOME/bin/java`, else `java` on `PATH`.
fn java_bin() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|v| !v.is_empty()) {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Ok(java);
        }
    }
    crate::util::which("java")
        .ok_or_else(|| anyhow!("java not found (JAVA_HOME, PATH): run scripts/install-deps"))
}

/// `$CADENZA_KAFKA_HOME`, else `$CADENZA_HOME/kafka`: where `scripts/install-deps` puts Kafka.
pub fn kafka_home() -> PathBuf {
    match std::env::var_os("CADENZA_KAFKA_HOME").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => cadenza_home().join("kafka"),
    }
}

fn jvm_args(heap: &str) -> Result<Vec<String>> {
    let home = kafka_home();
    let libs = home.join("libs");
    if !libs
        .join(format!("kafka_2.13-{}.jar", kafka_version()?))
        .is_file()
    {
        bail!(
            "Apache Kafka {} is not installed in {}: run scripts/install-deps",
            kafka_version()?,
            libs.display()
        );
    }
    Ok(vec![
        "-Xms64m".into(),
        format!("-Xmx{heap}"),
        "-XX:+UseG1GC".into(),
        "-XX:MaxGCPauseMillis=20".into(),
        "-Djava.awt.headless=true".into(),
        format!(
            "-Dlog4j2.configurationFile={}",
            home.join("log4j2.yaml").display()
        ),
        "-cp".into(),
        format!("{}/*", libs.display()),
    ])
}

fn repo_file(relative: &str) -> PathBuf {
    crate::manifest_dir().join("..").join(relative)
}

/// The Kafka version pinned in `scripts/kafka/pom.xml`.
pub fn kafka_version() -> Result<String> {
    let pom = repo_file("scripts/kafka/pom.xml");
    let text =
        std::fs::read_to_string(&pom).with_context(|| format!("reading {}", pom.display()))?;
    text.split("<kafka.version>")
        .nth(1)
        .and_then(|rest| rest.split("</kafka.version>").next())
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| anyhow!("{} has no <kafka.version>", pom.display()))
}

fn server_properties_template() -> Result<String> {
    let path = repo_file("scripts/kafka/server.properties.in");
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// A random cluster id: 16 bytes in URL-safe base64 without padding, as Kafka writes them.
fn kafka_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes: [u8; 16] = rand::random();
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = String::with_capacity(22);
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(char::from(ALPHABET[((bits >> nbits) & 63) as usize]));
        }
    }
    if nbits > 0 {
        out.push(char::from(ALPHABET[((bits << (6 - nbits)) & 63) as usize]));
    }
    out
}
