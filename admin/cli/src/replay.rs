//! `cadenza replay`: a time window or partition offset ranges of a job type's topic, run again.
//!
//! The admin replays at most `MAX_RUNS` triggers per request, so the CLI splits: a window is
//! halved until each part fits (found by dry runs), offset ranges are cut into chunks. The parts
//! then run one by one behind a progress bar.

use chrono::{DateTime, Utc};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::{CliError, Client, Output};

/// Offsets per request when replaying by partition offsets.
const CHUNK: i64 = 5_000;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The job type whose topic is read.
    #[arg(long)]
    job_type: String,
    /// Runs with a fire time at or after this (RFC 3339).
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// Runs with a fire time before this (RFC 3339).
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// An offset range `<partition>:<from>-<to>` (both included); repeat for more.
    #[arg(long = "partition", value_parser = parse_range)]
    partitions: Vec<(i32, i64, i64)>,
    /// Only triggers of this job.
    #[arg(long)]
    job_id: Option<i64>,
    /// List what would run; publish nothing.
    #[arg(long)]
    dry_run: bool,
}

fn parse_range(s: &str) -> Result<(i32, i64, i64), String> {
    let bad = || format!("{s:?} is not <partition>:<from offset>-<to offset>, e.g. 0:100-250");
    let (p, range) = s.split_once(':').ok_or_else(bad)?;
    let (a, b) = range.split_once('-').ok_or_else(bad)?;
    let p = p.trim().parse().map_err(|_| bad())?;
    let a: i64 = a.trim().parse().map_err(|_| bad())?;
    let b: i64 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(format!("{s:?}: the first offset is after the last"));
    }
    Ok((p, a, b))
}

fn parse_time(flag: &str, s: &str) -> Result<DateTime<Utc>, CliError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            CliError::Usage(format!(
                "{flag} {s:?} is not an RFC 3339 time such as 2026-11-21T10:00:00Z: {e}"
            ))
        })
}

/// One request's worth of the replay.
#[derive(Debug, Clone)]
enum Part {
    Window(DateTime<Utc>, DateTime<Utc>),
    Offsets(i32, i64, i64),
}

impl Part {
    fn body(&self, a: &ReplayArgs, dry_run: bool) -> Value {
        let mut b = json!({"job_type": a.job_type, "dry_run": dry_run});
        match self {
            Part::Window(f, t) => {
                b["from"] = json!(f.to_rfc3339());
                b["to"] = json!(t.to_rfc3339());
            }
            Part::Offsets(p, f, t) => {
                b["partitions"] = json!([{"partition": p, "from_offset": f, "to_offset": t}]);
            }
        }
        if let Some(j) = a.job_id {
            b["job_id"] = json!(j);
        }
        b
    }
}

/// Sends one part; `None` when it holds nothing to replay.
async fn send(client: &Client, body: &Value) -> Result<Option<Value>, CliError> {
    match client.post("/api/replay", Some(body)).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == Some("nothing_to_replay") => Ok(None),
        Err(e) => Err(e),
    }
}

/// Dry-runs a window, halving it until every part fits in one request; the parts with their
/// counts and dry-run answers.
async fn plan_window(
    client: &Client,
    a: &ReplayArgs,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(Part, Value)>, CliError> {
    let mut todo = vec![(from, to)];
    let mut parts = Vec::new();
    while let Some((f, t)) = todo.pop() {
        let part = Part::Window(f, t);
        match send(client, &part.body(a, true)).await {
            Ok(Some(v)) => parts.push((part, v)),
            Ok(None) => {}
            Err(e)
                if e.code() == Some("replay_too_large")
                    && t - f > chrono::Duration::milliseconds(1) =>
            {
                let mid = f + (t - f) / 2;
                // Later half first on the stack: parts come out in time order.
                todo.push((mid, t));
                todo.push((f, mid));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(parts)
}

pub async fn run(client: &Client, out: &Output, a: ReplayArgs) -> Result<(), CliError> {
    // Each part with its weight on the progress bar: runs found by the plan, or offsets.
    let parts: Vec<(Part, u64)> = match (&a.from, &a.to, a.partitions.is_empty()) {
        (Some(f), Some(t), true) => {
            let (f, t) = (parse_time("--from", f)?, parse_time("--to", t)?);
            if f >= t {
                return Err(CliError::Usage(format!(
                    "--from {} is not before --to {}",
                    f.to_rfc3339(),
                    t.to_rfc3339()
                )));
            }
            let planned = plan_window(client, &a, f, t).await?;
            if planned.is_empty() {
                // Ask once more for the admin's own words on the whole window.
                client
                    .post("/api/replay", Some(&Part::Window(f, t).body(&a, true)))
                    .await?;
            }
            if a.dry_run {
                return print_dry(out, &a, planned.into_iter().map(|(_, v)| v).collect());
            }
            planned
                .into_iter()
                .map(|(p, v)| (p, v["count"].as_u64().unwrap_or(0)))
                .collect()
        }
        (None, None, false) => a
            .partitions
            .iter()
            .flat_map(|&(p, from, to)| {
                (from..=to).step_by(CHUNK as usize).map(move |s| {
                    let end = (s + CHUNK - 1).min(to);
                    (Part::Offsets(p, s, end), (end - s + 1) as u64)
                })
            })
            .collect(),
        _ => {
            return Err(CliError::Usage(
                "give either --from and --to, or --partition ranges".into(),
            ))
        }
    };

    let total: u64 = parts.iter().map(|(_, w)| w).sum();
    let bar = if out.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut answers = Vec::new();
    for (part, weight) in &parts {
        answers.extend(send(client, &part.body(&a, a.dry_run)).await?);
        bar.inc(*weight);
    }
    bar.finish_and_clear();
    if answers.is_empty() {
        return Err(CliError::Api {
            status: reqwest::StatusCode::UNPROCESSABLE_ENTITY,
            code: "nothing_to_replay".into(),
            message: format!(
                "no trigger of job type {} was published in the given offset ranges; nothing to replay",
                a.job_type
            ),
        });
    }
    if a.dry_run {
        return print_dry(out, &a, answers);
    }
    let replayed: u64 = answers.iter().filter_map(|v| v["replayed"].as_u64()).sum();
    let ids: Vec<String> = answers
        .iter()
        .filter_map(|v| v["replay_id"].as_i64())
        .map(|i| i.to_string())
        .collect();
    let summary = json!({"replayed": replayed, "replay_ids": ids, "parts": answers});
    out.done(
        &summary,
        &format!(
            "replayed {replayed} runs of {} (replay {})",
            a.job_type,
            ids.join(", ")
        ),
    )?;
    Ok(())
}

fn print_dry(out: &Output, a: &ReplayArgs, answers: Vec<Value>) -> Result<(), CliError> {
    let runs: Vec<Value> = answers
        .iter()
        .flat_map(|v| v["runs"].as_array().cloned().unwrap_or_default())
        .collect();
    let whole = json!({"dry_run": true, "job_type": a.job_type, "count": runs.len(), "runs": runs});
    out.table(
        &whole,
        &whole["runs"],
        &[
            ("ORIGINAL", "original_id"),
            ("JOB", "job_id"),
            ("FIRE TIME", "fire_time"),
            ("PARTITION", "partition"),
            ("OFFSET", "offset"),
            ("SHARD", "shard_index"),
        ],
    )?;
    if !out.json {
        super::line(format_args!(
            "{} runs would be replayed (dry run: nothing was published)",
            runs.len()
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges_parse_or_explain() {
        assert_eq!(super::parse_range("2:10-20"), Ok((2, 10, 20)));
        assert!(super::parse_range("2:20-10").unwrap_err().contains("after"));
        assert!(super::parse_range("x").unwrap_err().contains("0:100-250"));
    }
}
