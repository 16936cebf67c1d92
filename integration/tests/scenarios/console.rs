//! The web console in headless Chromium (`integration/console/e2e.mjs`, driven by Playwright)
//! against a real admin, PostgreSQL, broker and a shell worker: sign in, a cron job's preview in
//! its time zone, the API's message at the wrong field, runs appearing, a run's log growing,
//! filters, workers, a viewer without write buttons, a 390 px screen.
//!
//! Screenshots go to the test's directory, or to `CADENZA_CONSOLE_SHOTS` (the README's are
//! `docs/console/`: `CADENZA_CONSOLE_SHOTS=$PWD/docs/console cargo nextest run -p
//! cadenza-integration --test console`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::path::PathBuf;
use std::time::Duration;

use cadenza_integration::{cadenza_home, Cluster, StatusCode};
use serde_json::json;

const ADMIN: (&str, &str) = ("ada", "console admin pw");
const VIEWER: (&str, &str) = ("vera", "console viewer pw");

#[tokio::test]
async fn the_console_works_in_a_real_browser() {
    let playwright = cadenza_home().join("e2e/node_modules/playwright-core/index.mjs");
    let chromium = std::env::var_os("CADENZA_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    for needed in [&playwright, &chromium] {
        assert!(
            needed.exists(),
            "{} is missing: run scripts/install-deps",
            needed.display()
        );
    }
    let cluster = Cluster::start().await.unwrap();
    let bootstrap = format!("{}:{}", ADMIN.0, ADMIN.1);
    let admin = cluster
        .spawn_admin(&[("CADENZA_BOOTSTRAP_ADMIN", &bootstrap)])
        .await
        .unwrap();
    let _worker = cluster
        .spawn_worker("console.sh=shell", "console", &[])
        .await
        .unwrap();
    let (status, body) = admin
        .api()
        .post_json(
            "/api/users",
            &json!({"name": VIEWER.0, "role": "viewer", "password": VIEWER.1,
                "job_types": ["console.*"]}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let shots = std::env::var_os("CADENZA_CONSOLE_SHOTS")
        .map_or_else(|| cluster.dir().join("shots"), PathBuf::from);
    std::fs::create_dir_all(&shots).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("console/e2e.mjs");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(&script)
        .env("CADENZA_URL", admin.base_url())
        .env("CADENZA_ADMIN_USER", ADMIN.0)
        .env("CADENZA_ADMIN_PASSWORD", ADMIN.1)
        .env("CADENZA_VIEWER_USER", VIEWER.0)
        .env("CADENZA_VIEWER_PASSWORD", VIEWER.1)
        .env("CADENZA_JOB_TYPE", "console.sh")
        .env("CADENZA_SHOTS", &shots)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(150), cmd.output())
        .await
        .expect("the browser test ran over 150 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "the console failed in the browser:\n{stdout}\n{stderr}\nadmin log:\n{}",
        admin.log_tail(40)
    );
}
