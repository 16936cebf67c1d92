//! The admin's `/metrics` with real traffic: the exposition parses with the Prometheus project's
//! own OpenMetrics parser (prometheus-client from PyPI, installed by `scripts/install-deps`), and
//! its values match what happened: triggers published equal the runs the database records as
//! published, ended runs per job type and status equal the runs' statuses, a failed run counts
//! as failed, every shard is held, the API requests are counted by route template.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use cadenza_integration::{cadenza_home, wait_for, Cluster, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// One sample: its name and labels (sorted), and value.
type Samples = BTreeMap<(String, Vec<(String, String)>), f64>;

/// `/metrics` parsed by prometheus_client's OpenMetrics parser.
fn parse(text: &str) -> Samples {
    let python = std::env::var_os("CADENZA_PROMPARSE_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| cadenza_home().join("promparse/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-deps",
        python.display()
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("metrics/parse.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the exposition does not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let labels: Vec<(String, String)> = v["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            (
                (v["name"].as_str().unwrap().to_owned(), labels),
                v["value"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn get(s: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut key: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    key.sort();
    s.get(&(name.to_owned(), key)).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn admin_metrics_parse_and_match_what_happened() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _worker = cluster
        .spawn_worker("m.ok=noop,m.fail=fail", "m", &[])
        .await
        .unwrap();
    let api = admin.api();
    let ok = api
        .create_job(&json!({"name": "often", "job_type": "m.ok",
            "schedule": {"kind": "fix_rate", "every_ms": 200}}))
        .await
        .unwrap();
    let fail = api
        .create_job(&json!({"name": "broken", "job_type": "m.fail",
            "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let failed = api.trigger_now(fail).await.unwrap();
    api.wait_run_status(failed, "failed", WAIT).await.unwrap();
    wait_for(WAIT, "20 runs of the often job succeeded", || {
        let api = api.clone();
        async move {
            let n = api.reported_runs(ok, "succeeded").await?;
            Ok((n >= 20).then_some(()))
        }
    })
    .await
    .unwrap();
    let (status, _) = api
        .post_empty(&format!("/api/jobs/{ok}/disable"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    // Quiet: every run published has ended and been ingested.
    let pool = cluster.pool().await.unwrap();
    wait_for(WAIT, "every run ended", || {
        let pool = pool.clone();
        async move {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM triggers WHERE finished_at IS NULL AND status <> 'misfired'",
            )
            .fetch_one(&pool)
            .await?;
            Ok((open == 0).then_some(()))
        }
    })
    .await
    .unwrap();

    let resp = reqwest::get(format!("{}/metrics", api.base_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "/metrics needs no credentials");
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = resp.text().await.unwrap();
    let s = parse(&text);

    let by_status: BTreeMap<(String, String), i64> = sqlx::query_as::<_, (String, String, i64)>(
        "SELECT job_type, status, count(*) FROM triggers GROUP BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(t, st, n)| ((t, st), n))
    .collect();
    let published: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM triggers WHERE job_type = 'm.ok' AND published_at IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    println!("database: {by_status:?}, published {published}");
    assert!(published >= 20);
    assert_eq!(
        get(
            &s,
            "cadenza_triggers_published_total",
            &[("job_type", "m.ok")]
        ),
        published as f64
    );
    assert_eq!(
        get(
            &s,
            "cadenza_triggers_published_total",
            &[("job_type", "m.fail")]
        ),
        1.0
    );
    for ((job_type, status), n) in &by_status {
        assert_eq!(
            get(
                &s,
                "cadenza_runs_ended_total",
                &[("job_type", job_type), ("status", status)]
            ),
            *n as f64,
            "{job_type} {status}"
        );
    }
    assert_eq!(
        get(
            &s,
            "cadenza_runs_ended_total",
            &[("job_type", "m.fail"), ("status", "failed")]
        ),
        1.0
    );
    // One lateness observation per published trigger, all on time on an idle machine.
    let lateness_count = get(&s, "cadenza_fire_lateness_seconds_count", &[]);
    assert_eq!(lateness_count, (published + 1) as f64);
    assert!(get(&s, "cadenza_fire_lateness_seconds_sum", &[]) / lateness_count < 1.0);
    assert_eq!(get(&s, "cadenza_shards_held", &[]), 64.0);
    assert!(get(&s, "cadenza_lease_acquisitions_total", &[]) >= 64.0);
    assert_eq!(get(&s, "cadenza_lease_losses_total", &[]), 0.0);
    assert!(get(&s, "cadenza_result_ingest_lag_seconds_count", &[]) >= (published + 1) as f64);
    assert!(get(&s, "cadenza_scan_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(
        get(
            &s,
            "cadenza_api_requests_total",
            &[
                ("method", "POST"),
                ("route", "/api/jobs"),
                ("status", "201")
            ]
        ),
        2.0
    );
    assert_eq!(
        get(
            &s,
            "cadenza_api_requests_total",
            &[
                ("method", "POST"),
                ("route", "/api/jobs/{id}/disable"),
                ("status", "200")
            ]
        ),
        1.0
    );
    // No run or job id is ever a label.
    for (name, labels) in s.keys() {
        for (k, _) in labels {
            assert!(
                ["job_type", "status", "outcome", "channel", "method", "route", "le"]
                    .contains(&k.as_str()),
                "{name} has label {k}"
            );
        }
    }
}
