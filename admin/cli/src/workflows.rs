//! `cadenza workflows`: workflow definitions (from JSON files, the API's body) and their runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Subcommand;
use comfy_table::{presets::NOTHING, Table};
use reqwest::Method;
use serde_json::Value;

use super::{cell, line, note, query, read_object, CliError, Client, Columns, IfEmpty, Output};

#[derive(Debug, Subcommand)]
pub enum WorkflowsCmd {
    /// List workflows.
    List {
        /// Only workflows whose name contains this.
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        enabled: Option<bool>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one workflow and its nodes.
    Show { id: i64 },
    /// Create a workflow from a JSON file (the API's body: name, schedule, nodes, …; `-` for
    /// stdin).
    Create {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Replace a workflow's definition with a JSON file's (the whole body, as for create).
    Update {
        id: i64,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete a workflow and its workflow runs.
    Delete { id: i64 },
    /// Start scheduling a workflow.
    Enable { id: i64 },
    /// Stop scheduling a workflow.
    Disable { id: i64 },
    /// Run a workflow now.
    Trigger { id: i64 },
    /// List workflow runs, newest first.
    Runs {
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<i64>,
        /// running, succeeded, failed, cancelled or misfired.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show a workflow run and where each of its nodes stands.
    Run { id: i64 },
    /// Cancel a running workflow run: waiting nodes are skipped, running ones cancelled.
    Cancel { run: i64 },
    /// Run a failed or cancelled node of a workflow run again.
    RetryNode { run: i64, node: String },
    /// Count a failed or cancelled node of a workflow run as succeeded, so that what follows it
    /// runs.
    MarkSucceeded { run: i64, node: String },
}

const WORKFLOW_COLUMNS: [(&str, &str); 6] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("SCHEDULE", "schedule"),
    ("NODES", "node_count"),
    ("ENABLED", "enabled"),
    ("NEXT FIRE", "next_fire_at"),
];
const NODE_COLUMNS: [(&str, &str); 5] = [
    ("KEY", "key"),
    ("JOB", "job_id"),
    ("PARENTS", "parents"),
    ("AFTER", "after"),
    ("ALLOW FAILURE", "allow_failure"),
];
const RUN_COLUMNS: [(&str, &str); 8] = [
    ("ID", "id"),
    ("WORKFLOW", "workflow_id"),
    ("NAME", "workflow_name"),
    ("KIND", "kind"),
    ("STATUS", "status"),
    ("FIRE TIME", "fire_time"),
    ("NODES", "node_summary"),
    ("MESSAGE", "message"),
];
const NODE_RUN_COLUMNS: [(&str, &str); 6] = [
    ("KEY", "key"),
    ("STATUS", "status"),
    ("TRIES", "tries"),
    ("RUN", "run_id"),
    ("RUN STATUS", "run_status"),
    ("MESSAGE", "message"),
];

/// `rows` as a table (no JSON: the caller decides).
fn table(rows: &[Value], columns: &Columns) -> std::io::Result<()> {
    let mut t = Table::new();
    t.load_style(NOTHING);
    t.set_header(columns.iter().map(|(h, _)| *h));
    for r in rows {
        t.add_row(columns.iter().map(|(_, f)| cell(&r[*f])));
    }
    line(t)
}

/// The elements of `v[field]`.
fn items<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v[field].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// An object as `key: value` lines without its `nodes`, then its nodes as a table.
fn with_nodes(out: &Output, v: &Value, columns: &Columns) -> Result<(), CliError> {
    if out.json {
        out.print_json(v)?;
        return Ok(());
    }
    let mut head = v.clone();
    if let Some(o) = head.as_object_mut() {
        o.remove("nodes");
    }
    out.record(&head)?;
    line("")?;
    table(items(v, "nodes"), columns)?;
    Ok(())
}

/// How many nodes stand where: `1 running, 2 waiting`.
fn node_summary(run: &Value) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for n in items(run, "nodes") {
        *counts
            .entry(n["status"].as_str().unwrap_or("?"))
            .or_default() += 1;
    }
    counts
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) async fn run(client: &Client, out: &Output, cmd: WorkflowsCmd) -> Result<(), CliError> {
    match cmd {
        WorkflowsCmd::List {
            name,
            enabled,
            limit,
        } => {
            let q = query(&[
                ("name", name),
                ("enabled", enabled.map(|e| e.to_string())),
                ("limit", Some(limit.to_string())),
            ]);
            let v = client.get(&format!("/api/workflows?{q}")).await?;
            if out.json {
                out.print_json(&v)?;
            } else {
                let rows: Vec<Value> = items(&v, "workflows")
                    .iter()
                    .map(|w| {
                        let mut w = w.clone();
                        w["node_count"] = Value::from(items(&w, "nodes").len());
                        w
                    })
                    .collect();
                table(&rows, &WORKFLOW_COLUMNS)?;
            }
        }
        WorkflowsCmd::Show { id } => {
            let v = client.get(&format!("/api/workflows/{id}")).await?;
            with_nodes(out, &v, &NODE_COLUMNS)?;
        }
        WorkflowsCmd::Create { file } => {
            let body = Value::Object(read_object(&file)?);
            let v = client.post("/api/workflows", Some(&body)).await?;
            out.done(
                &v,
                &format!(
                    "created workflow {} ({}, {} nodes), next fire at {}",
                    v["id"],
                    cell(&v["name"]),
                    items(&v, "nodes").len(),
                    cell(&v["next_fire_at"]).if_empty("—")
                ),
            )?;
        }
        WorkflowsCmd::Update { id, file } => {
            let body = Value::Object(read_object(&file)?);
            let v = client
                .call(Method::PUT, &format!("/api/workflows/{id}"), Some(&body))
                .await?;
            out.done(
                &v,
                &format!(
                    "workflow {id} updated ({} nodes), next fire at {}",
                    items(&v, "nodes").len(),
                    cell(&v["next_fire_at"]).if_empty("—")
                ),
            )?;
        }
        WorkflowsCmd::Delete { id } => {
            let v = client
                .call(Method::DELETE, &format!("/api/workflows/{id}"), None)
                .await?;
            out.done(&v, &format!("workflow {id} deleted"))?;
        }
        WorkflowsCmd::Enable { id } => {
            let v = client
                .post(&format!("/api/workflows/{id}/enable"), None)
                .await?;
            out.done(&v, &format!("workflow {id} enabled"))?;
        }
        WorkflowsCmd::Disable { id } => {
            let v = client
                .post(&format!("/api/workflows/{id}/disable"), None)
                .await?;
            out.done(&v, &format!("workflow {id} disabled"))?;
        }
        WorkflowsCmd::Trigger { id } => {
            let v = client
                .post(&format!("/api/workflows/{id}/trigger"), None)
                .await?;
            out.done(
                &v,
                &format!(
                    "triggered workflow {id}: workflow run {} ({}; {})",
                    v["id"],
                    cell(&v["kind"]),
                    node_summary(&v)
                ),
            )?;
        }
        WorkflowsCmd::Runs {
            workflow,
            status,
            limit,
        } => {
            let q = query(&[
                ("workflow_id", workflow.map(|w| w.to_string())),
                ("status", status),
                ("limit", Some(limit.to_string())),
            ]);
            let v = client.get(&format!("/api/workflow-runs?{q}")).await?;
            if out.json {
                out.print_json(&v)?;
            } else {
                let rows: Vec<Value> = items(&v, "workflow_runs")
                    .iter()
                    .map(|r| {
                        let mut row = r.clone();
                        row["node_summary"] = Value::from(node_summary(r));
                        row
                    })
                    .collect();
                table(&rows, &RUN_COLUMNS)?;
            }
        }
        WorkflowsCmd::Run { id } => {
            let v = client.get(&format!("/api/workflow-runs/{id}")).await?;
            with_nodes(out, &v, &NODE_RUN_COLUMNS)?;
        }
        WorkflowsCmd::Cancel { run } => {
            let v = client
                .post(&format!("/api/workflow-runs/{run}/cancel"), None)
                .await?;
            if !out.json {
                note(format_args!("[workflow run {run} cancelled]"));
            }
            with_nodes(out, &v, &NODE_RUN_COLUMNS)?;
        }
        WorkflowsCmd::RetryNode { run, node } => {
            let v = client
                .post(
                    &format!("/api/workflow-runs/{run}/nodes/{}/retry", path_part(&node)),
                    None,
                )
                .await?;
            if !out.json {
                note(format_args!(
                    "[node {node:?} of workflow run {run} retried]"
                ));
            }
            with_nodes(out, &v, &NODE_RUN_COLUMNS)?;
        }
        WorkflowsCmd::MarkSucceeded { run, node } => {
            let v = client
                .post(
                    &format!(
                        "/api/workflow-runs/{run}/nodes/{}/mark-succeeded",
                        path_part(&node)
                    ),
                    None,
                )
                .await?;
            if !out.json {
                note(format_args!(
                    "[node {node:?} of workflow run {run} marked succeeded]"
                ));
            }
            with_nodes(out, &v, &NODE_RUN_COLUMNS)?;
        }
    }
    Ok(())
}

/// A node key as one path segment (keys are letters, digits, `_`, `-` and `.`; anything else is
/// percent-encoded, and the admin answers that no such node exists).
fn path_part(s: &str) -> String {
    super::urlencode(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_are_summed_up_by_status() {
        let run = json!({"nodes": [
            {"key": "a", "status": "running"},
            {"key": "b", "status": "waiting"},
            {"key": "c", "status": "waiting"},
        ]});
        assert_eq!(node_summary(&run), "1 running, 2 waiting");
        assert_eq!(node_summary(&json!({})), "");
    }
}
