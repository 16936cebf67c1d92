//! Child processes: spawned with their output in a log file, signalled by PID, always reaped.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::util::{tail_file, which};

/// A Unix user to run a child as (PostgreSQL refuses to run as root).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV.get_or_init(|| which("setpriv")).as_deref()
}

/// A command for `program` that dies with the thread that spawned it (`setpriv --pdeathsig
/// KILL`, which execs without forking, so the child's PID is the program's), optionally as
/// another user.
pub(crate) fn supervised_command(program: &Path, run_as: Option<RunAs>) -> Command {
    match setpriv() {
        Some(setpriv) => {
            let mut cmd = Command::new(setpriv);
            cmd.args(["--pdeathsig", "KILL"]);
            if let Some(user) = run_as {
                cmd.arg("--reuid")
                    .arg(user.uid.to_string())
                    .arg("--regid")
                    .arg(user.gid.to_string())
                    .arg("--clear-groups");
            }
            cmd.arg("--").arg(program);
            cmd
        }
        None => {
            let mut cmd = Command::new(program);
            if let Some(user) = run_as {
                use std::os::unix::process::CommandExt;
                cmd.uid(user.uid).gid(user.gid);
            }
            cmd
        }
    }
}

/// Removes every inherited `CADENZA_*` variable, so a developer's shell (for instance after
/// `eval "$(scripts/services env)"`) cannot leak into a test.
pub(crate) fn clear_cadenza_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        // OTEL_*: a caller's collector settings would make the binaries export test spans.
        if key_str.starts_with("CADENZA_") || key_str.starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
}

struct State {
    child: Child,
    exit: Option<ExitStatus>,
}

/// A spawned child process. Signals go to its PID only while it has not been reaped, so a
/// recycled PID is never signalled.
pub(crate) struct ChildProcess {
    name: String,
    pid: u32,
    log: PathBuf,
    state: Mutex<State>,
}

impl std::fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProcess")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("log", &self.log)
            .finish()
    }
}

impl ChildProcess {
    /// Spawns `cmd` with stdin from /dev/null and stdout and stderr appended to `log`.
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening log file {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {name}: {cmd:?}"))?;
        Ok(Self {
            name: name.to_string(),
            pid: child.id(),
            log: log.to_path_buf(),
            state: Mutex::new(State { child, exit: None }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    pub(crate) fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    /// The exit status if the process has exited (reaping it).
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        let mut state = self.state();
        if state.exit.is_none() {
            if let Ok(Some(status)) = state.child.try_wait() {
                state.exit = Some(status);
            }
        }
        state.exit
    }

    pub(crate) fn is_running(&self) -> bool {
        self.exit_status().is_none()
    }

    /// Sends `signal` unless the process has already exited.
    pub(crate) fn signal(&self, signal: Signal) -> Result<()> {
        let mut state = self.state();
        if state.exit.is_none() {
            if let Ok(Some(status)) = state.child.try_wait() {
                state.exit = Some(status);
                return Ok(());
            }
            let pid = Pid::from_raw(i32::try_from(self.pid)?);
            kill(pid, signal)
                .with_context(|| format!("kill -{signal} {} ({})", self.pid, self.name))?;
        }
        Ok(())
    }

    /// Waits (blocking the thread) up to `timeout` for the process to exit.
    pub(crate) fn wait_blocking(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub(crate) async fn wait(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill_9(&self) -> Result<ExitStatus> {
        self.signal(Signal::SIGKILL)?;
        self.wait_blocking(Duration::from_secs(30))
            .ok_or_else(|| anyhow!("{} (pid {}) survived SIGKILL for 30 s", self.name, self.pid))
    }

    /// Sends `signal` (and SIGCONT, in case it was paused), waits up to `grace`, then SIGKILL.
    /// Blocks the thread: for `Drop`.
    pub(crate) fn stop_blocking(&self, signal: Signal, grace: Duration) -> Result<ExitStatus> {
        self.signal(signal)?;
        self.signal(Signal::SIGCONT)?;
        match self.wait_blocking(grace) {
            Some(status) => Ok(status),
            None => {
                self.kill_9()?;
                bail!(
                    "{} (pid {}) did not exit within {grace:?} after {signal}; killed it",
                    self.name,
                    self.pid
                )
            }
        }
    }

    /// Async [`Self::stop_blocking`].
    pub(crate) async fn stop(&self, signal: Signal, grace: Duration) -> Result<ExitStatus> {
        self.signal(signal)?;
        self.signal(Signal::SIGCONT)?;
        match self.wait(grace).await {
            Some(status) => Ok(status),
            None => {
                self.kill_9()?;
                bail!(
                    "{} (pid {}) did not exit within {grace:?} after {signal}; killed it",
                    self.name,
                    self.pid
                )
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.kill_9();
        }
    }
}

/// A handle on an admin or worker process started by a [`crate::Cluster`].
///
/// The process belongs to the cluster: dropping the handle does not stop it, dropping the
/// cluster does.
#[derive(Debug, Clone)]
pub struct ProcessHandle {
    id: String,
    proc: Arc<ChildProcess>,
}

impl ProcessHandle {
    pub(crate) fn new(id: String, proc: Arc<ChildProcess>) -> Self {
        Self { id, proc }
    }

    /// The harness's name for the process (a worker's `CADENZA_WORKER_ID`, `admin-N` for an
    /// admin).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&self) -> bool {
        self.proc.is_running()
    }

    /// The exit status, once it has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.proc.exit_status()
    }

    /// Sends any signal (no-op once the process has exited).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        self.proc.signal(signal)
    }

    /// SIGKILL and reap: a crash.
    pub fn kill_9(&self) -> Result<()> {
        self.proc.kill_9().map(drop)
    }

    /// SIGSTOP: the process freezes (a long GC pause, a stalled VM) until [`Self::resume`].
    pub fn pause(&self) -> Result<()> {
        self.proc.signal(Signal::SIGSTOP)
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) -> Result<()> {
        self.proc.signal(Signal::SIGCONT)
    }

    /// SIGTERM and wait up to 30 s for a graceful exit. An error if it had to be killed.
    pub async fn terminate(&self) -> Result<ExitStatus> {
        self.terminate_within(Duration::from_secs(30)).await
    }

    /// SIGTERM and wait up to `grace`; then SIGKILL and an error.
    pub async fn terminate_within(&self, grace: Duration) -> Result<ExitStatus> {
        self.proc.stop(Signal::SIGTERM, grace).await
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub async fn wait_exit(&self, timeout: Duration) -> Result<ExitStatus> {
        self.proc.wait(timeout).await.ok_or_else(|| {
            anyhow!(
                "{} (pid {}) still running after {timeout:?}; log tail:\n{}",
                self.id,
                self.pid(),
                self.log_tail(40)
            )
        })
    }

    /// The file holding the process's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        self.proc.log_path()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.proc.log_tail(lines)
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_for_log(&self, needle: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{:?} did not appear in the log of {} within {timeout:?}; log tail:\n{}",
                    needle,
                    self.id,
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
