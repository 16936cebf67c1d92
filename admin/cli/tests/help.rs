//! The `cadenza` binary before it talks to an admin: what `--help` shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

#[test]
fn help_shows_no_token_from_the_environment() {
    let mut cli = Command::new(env!("CARGO_BIN_EXE_cadenza"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CADENZA_") {
            cli.env_remove(key);
        }
    }
    let out = cli
        .arg("--help")
        .env("CADENZA_API_TOKEN", "token-hunter2")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.contains("CADENZA_API_TOKEN"), "{help}");
    assert!(!help.contains("hunter2"), "{help}");
}
