//! The `cadenza-admin` binary before it does any work: what `--help` shows and
//! what the admin refuses to start with. No database or broker is needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DATABASE_URL: &str = "postgres://cadenza:db-hunter2@127.0.0.1:1/cadenza";

/// A command without the `CADENZA_*` variables of the environment the tests run in.
fn command(bin: &str) -> Command {
    let mut cmd = Command::new(bin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CADENZA_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("NO_COLOR", "1");
    cmd
}

/// Runs `cmd` to its end, killing it (and failing) after `limit`.
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn help_shows_no_secret_from_the_environment() {
    let mut admin = command(env!("CARGO_BIN_EXE_cadenza-admin"));
    admin
        .arg("--help")
        .env("CADENZA_DATABASE_URL", DATABASE_URL)
        .env("CADENZA_API_TOKEN", "token-hunter2")
        .env(
            "CADENZA_SMTP_URL",
            "smtp://alarms:smtp-hunter2@mail.internal:587",
        );
    let out = run_within(admin, Duration::from_secs(10));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.contains("CADENZA_DATABASE_URL"), "{help}");
    assert!(help.contains("CADENZA_ALARM_ALLOW"), "{help}");
    assert!(!help.contains("hunter2"), "{help}");
}

#[test]
fn an_open_api_beyond_loopback_is_refused_before_anything_starts() {
    let mut admin = command(env!("CARGO_BIN_EXE_cadenza-admin"));
    admin
        .env("CADENZA_DATABASE_URL", DATABASE_URL)
        .env("CADENZA_LISTEN", "0.0.0.0:0")
        .env("RUST_LOG", "info");
    let out = run_within(admin, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "refusing to start: CADENZA_LISTEN is 0.0.0.0:0, which is not a loopback address, \
             and CADENZA_API_TOKEN is not set"
        ),
        "{stderr}"
    );
    // It did not get as far as the database (nothing listens on port 1) or the listener.
    assert!(!stderr.contains("database not ready"), "{stderr}");
    assert!(!stderr.contains("admin started"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
