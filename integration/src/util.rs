//! Small helpers: ports, random names, files.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::Rng;

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, release it).
///
/// Another process may take it before the caller binds it; the servers the harness starts
/// retry with a new port when that happens.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// `n` random lowercase hex characters.
pub fn random_hex(n: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(HEX[rng.random_range(0..16)]))
        .collect()
}

/// Waits until `127.0.0.1:port` accepts a TCP connection.
pub async fn wait_for_port(port: u16, timeout: Duration) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("nothing accepted connections on {addr} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The last `n` lines of a text file (lossy UTF-8); a note instead when it cannot be read.
pub(crate) fn tail_file(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            lines[start..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Whether `CADENZA_KEEP_TMP` asks to keep temporary directories.
pub(crate) fn keep_tmp() -> bool {
    std::env::var_os("CADENZA_KEEP_TMP").is_some_and(|v| !v.is_empty() && v != "0")
}

/// A fresh temporary directory with a recognisable prefix.
pub(crate) fn temp_dir(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("creating a temporary directory")
}

/// Drops a temporary directory, or keeps it (and says where) under `CADENZA_KEEP_TMP`.
pub(crate) fn finish_temp_dir(dir: tempfile::TempDir, what: &str) {
    if keep_tmp() {
        let path = dir.keep();
        eprintln!("[cadenza-integration] kept {what} in {}", path.display());
    }
}

/// The first executable called `name` on `PATH`.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
