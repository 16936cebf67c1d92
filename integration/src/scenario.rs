//! Shorthands the scenario tests share: jobs, runs, and the results topic read back.
//!
//! Each one panics, naming what went wrong, when the admin or the broker answers otherwise: in
//! a test that is the test's failure, and it keeps the scenarios about what they check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::ApiClient;
use crate::cluster::Cluster;
use crate::kafka::read_topic_to_end;
use crate::runs::json_time;
use crate::wait::wait_for;

/// The admins' default `CADENZA_PUBLISH_AHEAD_MS` (250 ms) with some slack: a run due within it
/// of a change (a disable, a worker leaving) was already routed and claimed for publication
/// before the change, and runs as it was claimed.
pub const PUBLISH_AHEAD: chrono::Duration = chrono::Duration::milliseconds(250 + 150);

/// How soon a job change (disable, new schedule, delete) takes effect with the admins'
/// defaults, with the same slack: runs of the schedule due within the publish-ahead plus the
/// 250 ms clock guard of it may already be taken for sending, and run as they were written.
pub const CHANGE_TAKES_EFFECT: chrono::Duration = chrono::Duration::milliseconds(250 + 250 + 150);

/// The statuses a run ends in.
pub const TERMINAL: &[&str] = &[
    "succeeded",
    "failed",
    "timed_out",
    "discarded",
    "cancelled",
    "lost",
    "misfired",
    "skipped",
];

/// Creates a job (`POST /api/jobs`, which must answer 201); its id.
pub async fn create_job(api: &ApiClient, body: Value) -> i64 {
    api.create_job(&body).await.unwrap()
}

/// Every run of `job` (all pages of `GET /api/triggers`), oldest first.
pub async fn all_runs(api: &ApiClient, job: i64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut before = String::new();
    loop {
        let (status, body) = api
            .get_json(&format!("/api/triggers?job_id={job}&limit=1000{before}"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        let page = body["triggers"].as_array().cloned().unwrap_or_default();
        let Some(last) = page.last().and_then(|r| r["id"].as_i64()) else {
            break;
        };
        let n = page.len();
        out.extend(page);
        if n < 1000 {
            break;
        }
        before = format!("&before_id={last}");
    }
    out.sort_by_key(|r| r["id"].as_i64());
    out
}

/// An RFC 3339 time of a run, such as its `fire_time`.
pub fn time(v: &Value) -> DateTime<Utc> {
    json_time(v).unwrap()
}

/// A JSON string's text; empty for anything else.
pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Whether a run has ended.
pub fn is_terminal(r: &Value) -> bool {
    TERMINAL.contains(&r["status"].as_str().unwrap_or(""))
}

/// Waits until every run of the jobs is terminal; returns them all.
pub async fn quiesce(api: &ApiClient, jobs: &[i64], timeout: Duration) -> Vec<Value> {
    wait_for(
        timeout,
        "every run to reach a terminal status",
        || async move {
            let mut all = Vec::new();
            for j in jobs {
                all.extend(all_runs(api, *j).await);
            }
            let open: Vec<&Value> = all.iter().filter(|r| !is_terminal(r)).collect();
            if !open.is_empty() {
                eprintln!("{} run(s) not terminal yet, e.g. {}", open.len(), open[0]);
                return Ok(None);
            }
            Ok(Some(all))
        },
    )
    .await
    .unwrap()
}

/// The events of one run on `<prefix>.results`, in publication order.
#[derive(Debug, Default, Clone)]
pub struct RunEvents {
    /// (attempt, worker) of each `started` event.
    pub started: Vec<(u64, String)>,
    /// Status of each `finished` event.
    pub finished: Vec<String>,
    /// Attempt of each `finished` event.
    pub finished_attempts: Vec<u64>,
    /// A `started` event that came after a `finished` one: a finished run ran again.
    pub started_after_finished: bool,
}

/// Stops every admin and worker of the cluster, then reads the whole results topic back to its
/// end, by trigger id. Workers are the only writers of the topic: once they have stopped, an end
/// marker on each partition follows every event they published; the admin, which consumes the
/// topic and would send the markers to the DLQ, is stopped too.
pub async fn stop_all_and_read_results(cluster: &Cluster) -> BTreeMap<i64, RunEvents> {
    cluster.stop_all(Duration::from_secs(60)).await.unwrap();
    let topic = format!("{}.results", cluster.topic_prefix());
    let records = read_topic_to_end(&cluster.brokers(), &topic, Duration::from_secs(120))
        .await
        .unwrap();
    let mut out: BTreeMap<i64, RunEvents> = BTreeMap::new();
    // Sorted by (partition, offset); a run's events share a partition (keyed by trigger id).
    for r in records {
        let Ok(e) = r.payload_json() else { continue };
        let Some(id) = e["trigger_id"].as_i64() else {
            continue;
        };
        let ev = out.entry(id).or_default();
        match e["event"].as_str() {
            Some("started") => {
                if !ev.finished.is_empty() {
                    ev.started_after_finished = true;
                }
                ev.started.push((
                    e["attempt"].as_u64().unwrap_or(0),
                    e["worker_id"].as_str().unwrap_or("").to_owned(),
                ));
            }
            Some("finished") => {
                ev.finished
                    .push(e["status"].as_str().unwrap_or("").to_owned());
                ev.finished_attempts
                    .push(e["attempt"].as_u64().unwrap_or(0));
            }
            _ => {}
        }
    }
    out
}

/// Counts and violations of G3/G4 over the runs of a scenario.
#[derive(Debug, Default)]
pub struct Audit {
    /// Runs with an offset on a trigger topic.
    pub published: usize,
    /// Published runs with a `finished` event.
    pub finished: usize,
    /// Runs started more than once (a higher attempt after a worker was lost).
    pub re_executed: usize,
    /// Runs executed again after their `finished` event was published (G3 violations).
    pub duplicates: usize,
    /// Every violation found, one line each.
    pub problems: Vec<String>,
}

/// Checks every published run of `runs` against the results topic.
pub fn audit(runs: &[Value], events: &BTreeMap<i64, RunEvents>) -> Audit {
    let mut a = Audit::default();
    for r in runs.iter().filter(|r| !r["offset"].is_null()) {
        a.published += 1;
        let id = r["id"].as_i64().unwrap();
        let status = r["status"].as_str().unwrap_or("");
        if !is_terminal(r) {
            a.problems.push(format!("run {id} not terminal: {r}"));
        }
        let Some(ev) = events.get(&id) else {
            a.problems
                .push(format!("run {id} has no result event: {r}"));
            continue;
        };
        if ev.finished.is_empty() {
            a.problems.push(format!("run {id} has no finished event"));
        } else {
            a.finished += 1;
        }
        if ev.finished.iter().any(|s| s != status) {
            a.problems.push(format!(
                "run {id}: finished events {:?} disagree with its status {status}",
                ev.finished
            ));
        }
        // The same result may be published twice (an owner republishes what its predecessor
        // was reporting), but two attempts may not both report: both ran to the end.
        if ev
            .finished_attempts
            .iter()
            .any(|a| *a != ev.finished_attempts[0])
        {
            a.duplicates += 1;
            a.problems.push(format!(
                "run {id} reported by two attempts (two owners ran it): {ev:?}"
            ));
        }
        if ev.started_after_finished {
            a.duplicates += 1;
            a.problems
                .push(format!("run {id} ran again after it finished: {ev:?}"));
        }
        if ev.started.len() > 1 {
            a.re_executed += 1;
            for w in ev.started.windows(2) {
                if w[1].0 <= w[0].0 {
                    a.problems.push(format!(
                        "run {id} re-executed without a higher attempt: {ev:?}"
                    ));
                }
            }
            if r["attempt"].as_u64() != ev.started.last().map(|s| s.0) {
                a.problems.push(format!(
                    "run {id}: recorded attempt {} is not the last started one {ev:?}",
                    r["attempt"]
                ));
            }
        }
    }
    a
}

/// Disables the jobs (no new runs).
pub async fn disable(api: &ApiClient, jobs: &[i64]) {
    for j in jobs {
        let (status, body) = api
            .post_empty(&format!("/api/jobs/{j}/disable"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

/// A job on the `sleep` builtin.
pub fn sleep_job(name: &str, job_type: &str, ms: u64, schedule: Value) -> Value {
    json!({"name": name, "job_type": job_type, "params": ms.to_string(), "schedule": schedule})
}
