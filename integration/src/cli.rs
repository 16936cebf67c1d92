//! Running the `cadenza` CLI as a user would, with only the configuration a test gives it.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::cadenza_bin;

/// What a `cadenza` command did.
#[derive(Debug)]
pub struct CliOut {
    /// Its exit code (-1 if a signal ended it).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliOut {
    /// Standard output as JSON (for `--json`); panics with both outputs if it is not.
    #[allow(clippy::panic)]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `cadenza args…` with `HOME` = `home` (so only a config file there is read) and `env`,
/// none of the caller's `CADENZA_*` settings, for at most 60 s.
pub async fn run_cli(home: &Path, env: &[(&str, &str)], args: &[&str]) -> Result<CliOut> {
    let mut cmd = tokio::process::Command::new(cadenza_bin("cadenza")?);
    cmd.args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CADENZA_URL")
        .env_remove("CADENZA_API_TOKEN")
        .env_remove("CADENZA_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .context("cadenza did not finish within 60 s")??;
    Ok(CliOut {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
