//! A private PostgreSQL server in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::Signal;
use nix::unistd::{geteuid, User};
use sqlx::{Connection, PgConnection};
use tempfile::TempDir;

use crate::process::{supervised_command, ChildProcess, RunAs};
use crate::util::{finish_temp_dir, free_port, tail_file, temp_dir};

/// How long a start may take before it is reported as failed.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL server on 127.0.0.1 with trust authentication, superuser `postgres`, `fsync`
/// off, and its data directory, Unix socket and log in a fresh temporary directory.
///
/// It can be stopped and started again on the same port and data. Dropping it stops the server
/// (immediate shutdown) and deletes the directory.
pub struct Postgres {
    bin: PathBuf,
    dir: Option<TempDir>,
    data: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    port: u16,
    run_as: Option<RunAs>,
    proc: Mutex<Option<Arc<ChildProcess>>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("port", &self.port)
            .field("data", &self.data)
            .finish()
    }
}

/// The directory holding `initdb` and `postgres`: `CADENZA_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian), else `pg_config --bindir`, else `PATH`.
pub(crate) fn pg_bin_dir() -> Result<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("CADENZA_PG_BIN").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if has_server(&dir) {
            return Ok(dir);
        }
        bail!(
            "CADENZA_PG_BIN={} has no initdb and postgres",
            dir.display()
        );
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, dir)) = debian.pop() {
        return Ok(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    if let Some(dir) = crate::util::which("initdb").and_then(|p| p.parent().map(Path::to_path_buf))
    {
        if has_server(&dir) {
            return Ok(dir);
        }
    }
    bail!(
        "PostgreSQL server binaries (initdb, postgres) not found: run scripts/install-deps \
         (it installs Debian's postgresql package), or set CADENZA_PG_BIN to their directory"
    )
}

/// PostgreSQL refuses to run as root: as root, run it as `CADENZA_PG_USER` (default `postgres`,
/// which Debian's package creates).
fn pg_run_as() -> Result<Option<RunAs>> {
    if !geteuid().is_root() {
        return Ok(None);
    }
    let name = std::env::var("CADENZA_PG_USER").unwrap_or_else(|_| "postgres".to_string());
    let user = User::from_name(&name)
        .with_context(|| format!("looking up the user {name}"))?
        .ok_or_else(|| {
            anyhow!(
                "running as root but there is no user {name:?} to run PostgreSQL as (it refuses \
                 root): install Debian's postgresql package (scripts/install-deps), or set \
                 CADENZA_PG_USER"
            )
        })?;
    Ok(Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    }))
}

impl Postgres {
    /// initdb into a fresh temporary directory and start the server on a free port; returns
    /// once it accepts connections.
    pub async fn start() -> Result<Postgres> {
        let bin = pg_bin_dir()?;
        let run_as = pg_run_as()?;
        let dir = temp_dir("cadenza-pg-")?;
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("sock");
        std::fs::create_dir(&socket_dir)?;
        if let Some(user) = run_as {
            for path in [dir.path(), socket_dir.as_path()] {
                std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
                    .with_context(|| format!("chown {} to uid {}", path.display(), user.uid))?;
            }
        }
        let log = dir.path().join("postgres.log");

        let mut initdb = supervised_command(&bin.join("initdb"), run_as);
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "-N",
            ])
            .env("LC_ALL", "C")
            .env_remove("PGDATA");
        let out = initdb.output().context("running initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }

        let mut pg = Postgres {
            bin,
            dir: Some(dir),
            data,
            socket_dir,
            log,
            port: free_port()?,
            run_as,
            proc: Mutex::new(None),
        };
        // The free port may be taken before the server binds it: retry with another one.
        let mut attempt = 1;
        loop {
            match pg.launch().await {
                Ok(()) => return Ok(pg),
                Err(e) if attempt < 3 && tail_file(&pg.log, 20).contains("could not bind") => {
                    eprintln!(
                        "[cadenza-integration] postgres port {} taken: {e:#}",
                        pg.port
                    );
                    attempt += 1;
                    pg.port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn proc(&self) -> MutexGuard<'_, Option<Arc<ChildProcess>>> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn launch(&self) -> Result<()> {
        let started = Instant::now();
        let mut cmd = supervised_command(&self.bin.join("postgres"), self.run_as);
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.socket_dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=32MB",
                "-c",
                "log_line_prefix=%m [%p] ",
            ])
            .env("LC_ALL", "C");
        if std::env::var_os("CADENZA_PG_STAT_STATEMENTS").is_some_and(|v| !v.is_empty() && v != "0")
        {
            cmd.args([
                "-c",
                "shared_preload_libraries=pg_stat_statements",
                "-c",
                "pg_stat_statements.track=all",
                "-c",
                "pg_stat_statements.track_planning=on",
            ]);
        }
        if std::env::var_os("CADENZA_PG_BENCH").is_some_and(|v| !v.is_empty() && v != "0") {
            // Sized for a sustained load rather than for many small servers at once: the
            // benchmark's tables outgrow 32 MB in seconds, and checkpoints forced by the
            // default max_wal_size would come every few seconds. Later settings win.
            cmd.args([
                "-c",
                "shared_buffers=512MB",
                "-c",
                "max_wal_size=8GB",
                "-c",
                "checkpoint_timeout=15min",
            ]);
        }
        let proc = Arc::new(ChildProcess::spawn("postgres", cmd, &self.log)?);
        *self.proc() = Some(proc.clone());

        let url = self.url("postgres");
        let mut last_error;
        loop {
            if let Some(status) = proc.exit_status() {
                *self.proc() = None;
                bail!(
                    "postgres exited at start ({status}); log tail:\n{}",
                    tail_file(&self.log, 30)
                );
            }
            match tokio::time::timeout(Duration::from_secs(2), PgConnection::connect(&url)).await {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => last_error = "connect timed out".to_string(),
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = proc.stop(Signal::SIGQUIT, Duration::from_secs(5)).await;
                *self.proc() = None;
                bail!(
                    "postgres did not accept connections within {START_TIMEOUT:?} (last error: \
                     {last_error}); log tail:\n{}",
                    tail_file(&self.log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The port it listens on (the same across [`Self::stop`] / [`Self::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The postmaster's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc().as_ref().map(|p| p.pid())
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.proc().as_ref().is_some_and(|p| p.is_running())
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    /// Creates database `name` (lowercase letters, digits, `_`) and returns its URL.
    pub async fn create_database(&self, name: &str) -> Result<String> {
        let valid = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && name.chars().next().is_some_and(|c| !c.is_ascii_digit());
        if !valid {
            bail!("invalid database name {name:?}: use lowercase letters, digits and _");
        }
        let mut conn = PgConnection::connect(&self.url("postgres"))
            .await
            .context("connecting to the postgres database")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .with_context(|| format!("CREATE DATABASE {name}"))?;
        let _ = conn.close().await;
        Ok(self.url(name))
    }

    /// Fast shutdown (SIGINT: disconnects clients, checkpoints) and waits for the exit.
    pub async fn stop(&self) -> Result<()> {
        self.shutdown(Signal::SIGINT).await
    }

    /// Immediate shutdown (SIGQUIT: no checkpoint, the next start runs crash recovery).
    pub async fn stop_immediate(&self) -> Result<()> {
        self.shutdown(Signal::SIGQUIT).await
    }

    async fn shutdown(&self, signal: Signal) -> Result<()> {
        let proc = self.proc().take();
        match proc {
            Some(proc) => proc.stop(signal, Duration::from_secs(30)).await.map(drop),
            None => Ok(()),
        }
    }

    /// Starts the server again after [`Self::stop`], same port and data.
    pub async fn start_again(&self) -> Result<()> {
        if self.is_running() {
            bail!("postgres is already running");
        }
        self.launch().await
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(proc) = self.proc().take() {
            if let Err(e) = proc.stop_blocking(Signal::SIGQUIT, Duration::from_secs(10)) {
                eprintln!("[cadenza-integration] stopping postgres: {e:#}");
            }
        }
        if let Some(dir) = self.dir.take() {
            finish_temp_dir(dir, "the PostgreSQL directory");
        }
    }
}
