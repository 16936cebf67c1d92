//! A Tansu broker (Kafka protocol, in-memory storage).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{bail, Result};
use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::bins::tansu_bin;
use crate::process::{supervised_command, ChildProcess};
use crate::util::{finish_temp_dir, free_port, tail_file, temp_dir, wait_for_port};

/// A Tansu broker on a free 127.0.0.1 port with memory storage: a restart loses every topic.
/// Dropping it stops it (SIGTERM, then SIGKILL) and deletes its directory (the log).
pub struct Broker {
    bin: PathBuf,
    dir: Option<TempDir>,
    log: PathBuf,
    port: u16,
    proc: Mutex<Option<Arc<ChildProcess>>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("port", &self.port).finish()
    }
}

impl Broker {
    /// Starts Tansu and returns once its port accepts connections.
    pub async fn start() -> Result<Broker> {
        let dir = temp_dir("cadenza-broker-")?;
        let mut broker = Broker {
            bin: tansu_bin()?,
            log: dir.path().join("tansu.log"),
            dir: Some(dir),
            port: free_port()?,
            proc: Mutex::new(None),
        };
        // The free port may be taken before Tansu binds it: retry with another one.
        let mut attempt = 1;
        loop {
            match broker.launch().await {
                Ok(()) => return Ok(broker),
                Err(e) if attempt < 3 => {
                    eprintln!("[cadenza-integration] tansu on port {}: {e:#}", broker.port);
                    attempt += 1;
                    broker.port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn proc(&self) -> MutexGuard<'_, Option<Arc<ChildProcess>>> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn launch(&self) -> Result<()> {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut cmd = supervised_command(&self.bin, None);
        cmd.arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/");
        let proc = Arc::new(ChildProcess::spawn("tansu", cmd, &self.log)?);
        *self.proc() = Some(proc.clone());
        let ready = wait_for_port(self.port, Duration::from_secs(15)).await;
        if let Some(status) = proc.exit_status() {
            *self.proc() = None;
            bail!(
                "tansu exited at start ({status}); log tail:\n{}",
                tail_file(&self.log, 30)
            );
        }
        if let Err(e) = ready {
            let _ = proc.kill_9();
            *self.proc() = None;
            bail!("{e}; tansu log tail:\n{}", tail_file(&self.log, 30));
        }
        Ok(())
    }

    /// `127.0.0.1:<port>`, for `bootstrap.servers` / `CADENZA_BROKERS`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's PID while it runs.
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

    /// SIGTERM and wait (SIGKILL after 10 s).
    pub async fn stop(&self) -> Result<()> {
        let proc = self.proc().take();
        match proc {
            Some(proc) => proc
                .stop(Signal::SIGTERM, Duration::from_secs(10))
                .await
                .map(drop),
            None => Ok(()),
        }
    }

    /// Starts it again on the same port after [`Self::stop`]: empty, since storage is memory.
    pub async fn start_again(&self) -> Result<()> {
        if self.is_running() {
            bail!("the broker is already running");
        }
        self.launch().await
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(proc) = self.proc().take() {
            if let Err(e) = proc.stop_blocking(Signal::SIGTERM, Duration::from_secs(5)) {
                eprintln!("[cadenza-integration] stopping tansu: {e:#}");
            }
        }
        if let Some(dir) = self.dir.take() {
            finish_temp_dir(dir, "the broker's directory");
        }
    }
}
