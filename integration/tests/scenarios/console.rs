//! The web console in headless Chromium (`integration/console/e2e.mjs`, driven by Playwright)
//! against a real admin, PostgreSQL, broker and a shell worker: sign in, a cron job's preview in
//! its time zone, the API's message at the wrong field, runs appearing, a run's log growing,
//! filters, workers, a workflow's graph and a workflow run whose failed node is retried from its
//! page, a running workflow run cancelled, a viewer without write buttons, a 390 px screen.
//!
//! Screenshots go to the test's directory, or to `CADENZA_CONSOLE_SHOTS` (the README's are
//! `docs/console/`: `CADENZA_CONSOLE_SHOTS=$PWD/docs/console cargo nextest run -p
//! cadenza-integration --test console`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::path::PathBuf;
use std::time::Duration;

use cadenza_integration::{cadenza_home, ApiClient, Cluster, StatusCode};
use serde_json::json;

/// The diamond a → (b, c) → d, where b (a shell job) fails the first time and succeeds the next
/// (a flag file in `dir`); its id.
async fn diamond(api: &ApiClient, dir: &std::path::Path) -> i64 {
    let flag = dir.join("diamond-b-ran-once");
    let script = format!(
        "test -f '{0}' && exit 0; touch '{0}'; echo first try fails; exit 3",
        flag.display()
    );
    let mut jobs = Vec::new();
    for (name, job_type, params) in [
        ("diamond a", "console.noop", ""),
        ("diamond b", "console.wf", script.as_str()),
        ("diamond c", "console.noop", ""),
        ("diamond d", "console.noop", ""),
    ] {
        let body = json!({"name": name, "job_type": job_type, "params": params,
            "schedule": {"kind": "none"}});
        jobs.push(api.create_job(&body).await.unwrap());
    }
    let (status, body) = api
        .post_json(
            "/api/workflows",
            &json!({"name": WORKFLOW, "schedule": {"kind": "none"}, "nodes": [
                {"key": "a", "job_id": jobs[0]},
                {"key": "b", "job_id": jobs[1], "parents": ["a"]},
                {"key": "c", "job_id": jobs[2], "parents": ["a"]},
                {"key": "d", "job_id": jobs[3], "parents": ["b", "c"]},
            ]}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_i64().unwrap()
}

/// A workflow whose first node sleeps a minute, then another; its id.
/// A job that fires every minute, found an hour behind (as after an outage): the scan skips
/// the 60 fire times past its misfire threshold, as one span, and fires the one on time.
async fn behind_by_an_hour(cluster: &Cluster, api: &ApiClient) -> i64 {
    let job = api
        .create_job(
            &json!({"name": "hourly backlog", "job_type": "console.noop",
            "schedule": {"kind": "fix_rate", "every_ms": 60_000}}),
        )
        .await
        .unwrap();
    let pool = cluster.pool().await.unwrap();
    sqlx::query("UPDATE jobs SET next_fire_at = now() - interval '3600 seconds' WHERE id = $1")
        .bind(job)
        .execute(&pool)
        .await
        .unwrap();
    cadenza_integration::wait_for(Duration::from_secs(30), "the skipped span", || async {
        let (_, m) = api.get_json(&format!("/api/misfires?job_id={job}")).await?;
        Ok((m["total"] == 60).then_some(m))
    })
    .await
    .map(|m| {
        assert_eq!(m["open"][0]["count"], 60, "{m}");
        assert_eq!(m["closed"], json!([]), "{m}");
    })
    .unwrap();
    job
}

async fn long(api: &ApiClient) -> i64 {
    let sleep = api
        .create_job(
            &json!({"name": "long sleep", "job_type": "console.wf", "params": "sleep 60",
            "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let after = api
        .create_job(&json!({"name": "long after", "job_type": "console.noop",
            "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let (status, body) = api
        .post_json(
            "/api/workflows",
            &json!({"name": LONG_WORKFLOW, "schedule": {"kind": "none"}, "nodes": [
                {"key": "sleep", "job_id": sleep},
                {"key": "after", "job_id": after, "parents": ["sleep"]},
            ]}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_i64().unwrap()
}

const ADMIN: (&str, &str) = ("ada", "console admin pw");
const VIEWER: (&str, &str) = ("vera", "console viewer pw");
const WORKFLOW: &str = "console diamond";
const LONG_WORKFLOW: &str = "console long";

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
        .spawn_worker(
            "console.sh=shell,console.wf=shell,console.noop=noop",
            "console",
            &[],
        )
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
    diamond(&admin.api(), cluster.dir()).await;
    long(&admin.api()).await;
    let backlog = behind_by_an_hour(&cluster, &admin.api()).await;

    let shots = std::env::var_os("CADENZA_CONSOLE_SHOTS")
        .map_or_else(|| cluster.dir().join("shots"), PathBuf::from);
    std::fs::create_dir_all(&shots).unwrap();
    let script = cadenza_integration::manifest_dir().join("console/e2e.mjs");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(&script)
        .env("CADENZA_URL", admin.base_url())
        .env("CADENZA_ADMIN_USER", ADMIN.0)
        .env("CADENZA_ADMIN_PASSWORD", ADMIN.1)
        .env("CADENZA_VIEWER_USER", VIEWER.0)
        .env("CADENZA_VIEWER_PASSWORD", VIEWER.1)
        .env("CADENZA_JOB_TYPE", "console.sh")
        .env("CADENZA_WORKFLOW", WORKFLOW)
        .env("CADENZA_LONG_WORKFLOW", LONG_WORKFLOW)
        .env("CADENZA_MISFIRED_JOB", backlog.to_string())
        .env("CADENZA_SHOTS", &shots)
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(210), cmd.output())
        .await
        .expect("the browser test ran over 210 s")
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
