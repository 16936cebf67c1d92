//! The admin's and two workers' `/metrics` with real traffic: each exposition parses with the
//! Prometheus project's own OpenMetrics parser (prometheus-client from PyPI, installed by
//! `scripts/install-deps`), and its values match what happened. Admin: triggers published equal
//! the runs the database records as published, ended runs per job type and status equal the
//! runs' statuses, a failed run counts as failed, every shard is held, the API requests are
//! counted by route template. Workers: consumer lag rises while runs queue behind a serial job
//! and drops to 0 once they finish; runs started and finished by status add up to the runs the
//! database records; handler durations are observed once per run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use cadenza_integration::{cadenza_home, free_port, wait_for, Cluster, StatusCode};
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
    let script = cadenza_integration::manifest_dir().join("metrics/parse.py");
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

/// The sum of the samples named `name` whose labels include `labels`.
fn sum(s: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.iter()
        .filter(|((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// A worker's `/metrics`, parsed.
async fn scrape(addr: &str) -> Samples {
    let resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    parse(&resp.text().await.unwrap())
}

/// Both workers' samples, in one map (their `group` label is the same, so the worker's address
/// is added as `instance`, as Prometheus would).
async fn scrape_all(addrs: &[String]) -> Samples {
    let mut all = Samples::new();
    for addr in addrs {
        for ((name, mut labels), v) in scrape(addr).await {
            labels.push(("instance".to_owned(), addr.clone()));
            labels.sort();
            all.insert((name, labels), v);
        }
    }
    all
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
    let serve = "m.ok=noop,m.fail=fail,m.slow=sleep";
    let addrs: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port().unwrap()))
        .collect();
    let mut workers = Vec::new();
    for addr in &addrs {
        let env = [("CADENZA_METRICS_LISTEN", addr.as_str())];
        workers.push(cluster.spawn_worker(serve, "m", &env).await.unwrap());
    }
    let api = admin.api();
    let ids: Vec<String> = workers.iter().map(|w| w.id().to_owned()).collect();
    let m_group = cluster.group("m");
    let topics = cluster.topics();
    let slow_topic = topics.trigger(&cadenza_schemas::JobType::parse("m.slow").unwrap());
    api.wait_assignment(&slow_topic, &ids, 6, WAIT)
        .await
        .unwrap();

    // Lag: five 1.5 s runs of one serial job wait on one partition, then drain.
    let slow = api
        .create_job(
            &json!({"name": "slow", "job_type": "m.slow", "params": "1500",
            "block": "serial_execution", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let mut slow_runs = Vec::new();
    for _ in 0..5 {
        slow_runs.push(api.trigger_now(slow).await.unwrap());
    }
    let lagging = wait_for(WAIT, "consumer lag on the slow job's partition", || {
        let addrs = addrs.clone();
        let topic = slow_topic.clone();
        async move {
            let s = scrape_all(&addrs).await;
            let lag = sum(&s, "cadenza_worker_consumer_lag", &[("topic", &topic)]);
            let waiting = sum(&s, "cadenza_worker_runs_waiting", &[("job_type", "m.slow")]);
            Ok((lag >= 2.0 && waiting >= 1.0).then_some(lag))
        }
    })
    .await
    .unwrap();
    println!("lag on {slow_topic} while the runs queue: {lagging}");
    for id in &slow_runs {
        api.wait_run_status(*id, "succeeded", WAIT).await.unwrap();
    }
    wait_for(
        WAIT,
        "consumer lag back to at most the commit marker",
        || {
            let addrs = addrs.clone();
            let topic = slow_topic.clone();
            async move {
                let s = scrape_all(&addrs).await;
                let series: Vec<String> = s
                    .iter()
                    .filter(|((n, l), _)| {
                        n == "cadenza_worker_consumer_lag"
                            && l.iter().any(|(k, v)| k == "topic" && *v == topic)
                    })
                    .map(|((_, l), v)| format!("{l:?}={v}"))
                    .collect();
                let drained = s
                    .iter()
                    .filter(|((n, l), _)| {
                        n == "cadenza_worker_consumer_lag"
                            && l.iter().any(|(k, v)| k == "topic" && *v == topic)
                    })
                    .all(|(_, v)| *v <= 1.0);
                // Every partition of the topic is reported by the worker that holds it, and is
                // committed past every run: a partition whose last record is the commit marker of
                // the transaction that carried its last trigger reads 1 (the marker is never
                // delivered, so the worker's commit stops just before it).
                if series.len() == 6 && drained {
                    Ok(Some(()))
                } else {
                    Err(anyhow::anyhow!("lag series seen: {series:?}"))
                }
            }
        },
    )
    .await
    .unwrap();
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
    // The often job's runs, the failed one, the five slow ones.
    assert_eq!(lateness_count, (published + 1 + 5) as f64);
    assert!(get(&s, "cadenza_fire_lateness_seconds_sum", &[]) / lateness_count < 1.0);
    assert_eq!(get(&s, "cadenza_shards_held", &[]), 64.0);
    assert_eq!(get(&s, "cadenza_shard_count", &[]), 64.0);
    assert!(get(&s, "cadenza_lease_acquisitions_total", &[]) >= 64.0);
    assert_eq!(get(&s, "cadenza_lease_losses_total", &[]), 0.0);
    assert!(get(&s, "cadenza_result_ingest_lag_seconds_count", &[]) >= (published + 1 + 5) as f64);
    assert!(get(&s, "cadenza_scan_duration_seconds_count", &[]) >= 1.0);
    // Publication keeps up on an idle machine: not behind when sampled (the scan holds back
    // above 1 s).
    let behind = s
        .get(&("cadenza_publication_behind_seconds".to_owned(), vec![]))
        .copied();
    assert!(
        behind.is_some_and(|b| b < 1.0),
        "publication behind: {behind:?}"
    );
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
        3.0
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

    // The workers: once everything ended, no partition lags (statistics refresh every 2 s)
    // beyond the commit marker of the transaction that carried its last trigger…
    let w = wait_for(WAIT, "no consumer lag on any partition", || {
        let addrs = addrs.clone();
        async move {
            let w = scrape_all(&addrs).await;
            let drained = w
                .iter()
                .filter(|((n, _), _)| n == "cadenza_worker_consumer_lag")
                .all(|(_, v)| *v <= 1.0);
            Ok(drained.then_some(w))
        }
    })
    .await
    .unwrap();
    // … and what they ran adds up to what the database recorded.
    for ((job_type, status), n) in &by_status {
        if !["succeeded", "failed"].contains(&status.as_str()) {
            continue;
        }
        assert_eq!(
            sum(
                &w,
                "cadenza_worker_runs_finished_total",
                &[
                    ("group", &m_group),
                    ("job_type", job_type),
                    ("status", status)
                ]
            ),
            *n as f64,
            "worker runs finished {job_type} {status}"
        );
    }
    assert_eq!(
        sum(
            &w,
            "cadenza_worker_runs_finished_total",
            &[("job_type", "m.fail"), ("status", "failed")]
        ),
        1.0
    );
    for job_type in ["m.ok", "m.fail", "m.slow"] {
        let ended: i64 = by_status
            .iter()
            .filter(|((t, st), _)| t == job_type && ["succeeded", "failed"].contains(&st.as_str()))
            .map(|(_, n)| n)
            .sum();
        let started = sum(
            &w,
            "cadenza_worker_runs_started_total",
            &[("job_type", job_type)],
        );
        assert_eq!(started, ended as f64, "{job_type} started");
        assert_eq!(
            sum(
                &w,
                "cadenza_worker_handler_duration_seconds_count",
                &[("job_type", job_type)]
            ),
            started,
            "{job_type} handler durations"
        );
    }
    // Five 1.5 s sleeps.
    let slept = sum(
        &w,
        "cadenza_worker_handler_duration_seconds_sum",
        &[("job_type", "m.slow")],
    );
    assert!((7.5..15.0).contains(&slept), "slept {slept} s");
    assert_eq!(sum(&w, "cadenza_worker_capacity_in_use", &[]), 0.0);
    assert_eq!(sum(&w, "cadenza_worker_capacity", &[]), 32.0);
    assert_eq!(sum(&w, "cadenza_worker_runs_waiting", &[]), 0.0);
    assert!(sum(&w, "cadenza_worker_rebalances_total", &[("kind", "assign")]) >= 2.0);
    assert!(
        sum(
            &w,
            "cadenza_worker_commit_rounds_total",
            &[("outcome", "ok")]
        ) >= 1.0
    );
    assert_eq!(sum(&w, "cadenza_worker_dlq_records_total", &[]), 0.0);
    for (name, labels) in w.keys() {
        for (k, _) in labels {
            assert!(
                [
                    "group",
                    "instance",
                    "job_type",
                    "status",
                    "topic",
                    "partition",
                    "kind",
                    "outcome",
                    "le"
                ]
                .contains(&k.as_str()),
                "{name} has label {k}"
            );
        }
    }
    let health = reqwest::get(format!("http://{}/healthz", addrs[0]))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // The Grafana dashboard and the alert rules read only series that exist.
    let seen: std::collections::BTreeSet<&str> =
        s.keys().chain(w.keys()).map(|(n, _)| n.as_str()).collect();
    let deploy = cadenza_integration::manifest_dir().join("../deploy");
    let dashboard = std::fs::read_to_string(deploy.join("grafana/cadenza.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let mut exprs: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        exprs.extend(
            targets
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_owned()),
        );
    }
    exprs.push(std::fs::read_to_string(deploy.join("prometheus/alerts.yml")).unwrap());
    let mut used = 0;
    for text in &exprs {
        for (at, _) in text.match_indices("cadenza_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                seen.contains(name.as_str()),
                "{name} is read by deploy/ but exposed by no one"
            );
            used += 1;
        }
    }
    assert!(used >= 20, "{used} series read");

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
