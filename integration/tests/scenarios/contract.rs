//! The HTTP API keeps its OpenAPI contract: the document served at `/api/openapi.json` is the
//! committed `docs/openapi.json`, and schemathesis, driven by that document, finds no server
//! error and no answer that breaks it (status, content type, headers, body schema), with positive
//! and negative data on every operation.
//!
//! The suite runs a bounded number of examples per operation; `scripts/fuzz-api` runs more.
//! `CADENZA_FUZZ_EXAMPLES` sets the number (default 20), `CADENZA_FUZZ_SEED` the seed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use cadenza_integration::{cadenza_home, Cluster};

/// schemathesis, as `scripts/install-deps` installs it (or `CADENZA_SCHEMATHESIS`).
fn schemathesis() -> PathBuf {
    std::env::var_os("CADENZA_SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cadenza_home().join("schemathesis/bin/schemathesis"))
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test]
async fn the_api_keeps_its_openapi_contract_under_schemathesis() {
    let st = schemathesis();
    assert!(
        st.exists(),
        "{} is missing: run scripts/install-deps",
        st.display()
    );
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let base = admin.api().base_url().to_owned();

    // The served document is the committed one.
    let served = reqwest::get(format!("{base}/api/openapi.json"))
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(
        served.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let served = served.text().await.unwrap();
    let committed =
        std::fs::read_to_string(cadenza_integration::manifest_dir().join("../docs/openapi.json"))
            .unwrap();
    assert!(
        served == committed,
        "the admin serves another document than docs/openapi.json"
    );

    let examples = env_or("CADENZA_FUZZ_EXAMPLES", 20);
    let seed = env_or("CADENZA_FUZZ_SEED", 1);
    let reports = cluster.dir().join("schemathesis");
    let config = cadenza_integration::manifest_dir().join("schemathesis.toml");
    let mut cmd = tokio::process::Command::new(&st);
    cmd.arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{base}/api/openapi.json"))
        .args(["--url", &base])
        .args([
            "--header",
            &format!("Authorization: Bearer {}", cluster.token()),
        ])
        .args(["--checks", "all"])
        .args(["--max-examples", &examples.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(["--workers", "1", "--request-timeout", "30", "--no-color"])
        .args(["--generation-database", "none"])
        .arg("--report-dir")
        .arg(&reports)
        .env("SCHEMATHESIS_HOOKS", "")
        // Its cache of failing cases goes to the working directory: the test's own.
        .current_dir(cluster.dir())
        .kill_on_drop(true)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(Duration::from_secs(20 * 60), cmd.output())
        .await
        .expect("schemathesis ran over 20 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: String = {
        let lines: Vec<&str> = stdout.lines().collect();
        lines[lines.len().saturating_sub(300)..].join("\n")
    };
    assert!(
        out.status.success(),
        "schemathesis found contract violations (seed {seed}, {examples} examples per operation):\n{tail}\n{stderr}\nadmin log:\n{}",
        admin.log_tail(60)
    );
    eprintln!("{tail}");
}
