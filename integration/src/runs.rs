//! Jobs and runs through the API, as scenario tests use them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::Value;

use crate::api::ApiClient;
use crate::wait::wait_for;

/// An RFC 3339 time from a JSON value, such as a run's `fire_time`.
pub fn json_time(v: &Value) -> Result<DateTime<Utc>> {
    let s = v
        .as_str()
        .with_context(|| format!("not a string time: {v}"))?;
    Ok(DateTime::parse_from_rfc3339(s)
        .with_context(|| format!("not an RFC 3339 time: {s}"))?
        .with_timezone(&Utc))
}

impl ApiClient {
    /// `POST /api/jobs`; the new job's id (an error unless the admin answers 201).
    pub async fn create_job(&self, body: &Value) -> Result<i64> {
        let (status, job) = self.post_json("/api/jobs", body).await?;
        if status != StatusCode::CREATED {
            bail!("POST /api/jobs answered {status}: {job}");
        }
        job["id"]
            .as_i64()
            .with_context(|| format!("no id in {job}"))
    }

    /// `POST /api/jobs/{job}/trigger`; the first trigger id (an error unless 202).
    pub async fn trigger_now(&self, job: i64) -> Result<i64> {
        let (status, body) = self.post_empty(&format!("/api/jobs/{job}/trigger")).await?;
        if status != StatusCode::ACCEPTED {
            bail!("POST /api/jobs/{job}/trigger answered {status}: {body}");
        }
        body["trigger_ids"][0]
            .as_i64()
            .with_context(|| format!("no trigger id in {body}"))
    }

    /// `GET /api/triggers?<query>`: the runs, newest first.
    pub async fn runs(&self, query: &str) -> Result<Vec<Value>> {
        let (status, body) = self.get_json(&format!("/api/triggers?{query}")).await?;
        if status != StatusCode::OK {
            bail!("GET /api/triggers?{query} answered {status}: {body}");
        }
        Ok(body["triggers"].as_array().cloned().unwrap_or_default())
    }

    /// Waits until run `id` has `status` and returns it.
    pub async fn wait_run_status(&self, id: i64, status: &str, timeout: Duration) -> Result<Value> {
        wait_for(
            timeout,
            &format!("run {id} to be {status}"),
            || async move {
                let (_, r) = self.get_json(&format!("/api/triggers/{id}")).await?;
                Ok((r["status"] == status).then_some(r))
            },
        )
        .await
    }

    /// Live workers and their partitions of `topic`, as `GET /api/workers` shows them.
    pub async fn assignment(&self, topic: &str) -> Result<BTreeMap<String, Vec<i64>>> {
        let (status, body) = self.get_json("/api/workers").await?;
        if status != StatusCode::OK {
            bail!("GET /api/workers answered {status}: {body}");
        }
        let mut out = BTreeMap::new();
        for w in body["workers"].as_array().cloned().unwrap_or_default() {
            if w["alive"] != true {
                continue;
            }
            let parts: Vec<i64> = w["assignments"][topic]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            out.insert(
                w["worker_id"].as_str().unwrap_or_default().to_owned(),
                parts,
            );
        }
        Ok(out)
    }

    /// Waits until exactly `live` are live and hold all `partitions` partitions of `topic`
    /// between them, each at least one, none twice: the group has settled and the registry
    /// knows it.
    pub async fn wait_assignment(
        &self,
        topic: &str,
        live: &[String],
        partitions: usize,
        timeout: Duration,
    ) -> Result<()> {
        let want: BTreeSet<String> = live.iter().cloned().collect();
        wait_for(
            timeout,
            &format!("registry to show {live:?} sharing {topic}"),
            || {
                let want = want.clone();
                async move {
                    let a = self.assignment(topic).await?;
                    let ids: BTreeSet<String> = a.keys().cloned().collect();
                    let all: Vec<i64> = a.values().flatten().copied().collect();
                    let distinct: BTreeSet<i64> = all.iter().copied().collect();
                    let settled = ids == want
                        && a.values().all(|p| !p.is_empty())
                        && all.len() == partitions
                        && distinct.len() == partitions;
                    Ok(settled.then_some(()))
                }
            },
        )
        .await
    }

    /// The value of one sample of the admin's `/metrics`, written as it appears there
    /// (`cadenza_dlq_records_total`, `cadenza_alarms_total{channel="webhook",outcome="sent"}`);
    /// 0 when absent. (integration/tests/scenarios/metrics.rs reads the whole exposition with a real
    /// parser; this is for single values.)
    pub async fn metric(&self, sample: &str) -> Result<f64> {
        let (code, text) = self.get_text("/metrics").await?;
        if code != StatusCode::OK {
            bail!("GET /metrics answered {code}");
        }
        Ok(text
            .lines()
            .filter_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .find_map(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0))
    }

    /// Runs of `job` with `status` in the daily report (`GET /api/report`, its default window),
    /// summed over the days.
    pub async fn reported_runs(&self, job: i64, status: &str) -> Result<i64> {
        let (code, report) = self.get_json(&format!("/api/report?job_id={job}")).await?;
        if code != StatusCode::OK {
            bail!("GET /api/report answered {code}: {report}");
        }
        Ok(report["rows"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|r| r["status"] == status)
            .filter_map(|r| r["runs"].as_i64())
            .sum())
    }
}
