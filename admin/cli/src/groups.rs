//! `cadenza groups`: concurrency groups (a limit of runs in flight across the cluster, an
//! optional rate of starts).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::{cell, CliError, Client, Columns, Output};

#[derive(Debug, Subcommand)]
pub enum GroupsCmd {
    /// List the groups, with their slots in use and their queues.
    List,
    /// Show one group.
    Show { name: String },
    /// A group's queued runs in the order they will be released, with their place in line.
    Queue {
        name: String,
        /// How many runs to list (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Create a group.
    Create {
        name: String,
        /// Most runs of the group's jobs in flight at once.
        #[arg(long)]
        limit: i64,
        #[command(flatten)]
        rate: RateArgs,
    },
    /// Change a group's limit or rate.
    Update {
        name: String,
        #[arg(long)]
        limit: Option<i64>,
        #[command(flatten)]
        rate: RateArgs,
        /// Remove the group's rate.
        #[arg(long, conflicts_with_all = ["rate", "burst"])]
        no_rate: bool,
    },
    /// Delete a group that no job belongs to.
    Delete { name: String },
}

#[derive(Debug, Args)]
pub struct RateArgs {
    /// Starts a second (spread so that no second sees more than rate + burst).
    #[arg(long)]
    rate: Option<f64>,
    /// Starts allowed at once on top of the rate (with --rate).
    #[arg(long, requires = "rate")]
    burst: Option<i64>,
}

impl RateArgs {
    fn body(&self) -> Option<Value> {
        self.rate
            .map(|r| json!({"per_second": r, "burst": self.burst.unwrap_or(0)}))
    }
}

const COLUMNS: &Columns = &[
    ("NAME", "name"),
    ("LIMIT", "limit"),
    ("IN FLIGHT", "in_flight"),
    ("QUEUED", "queued"),
    ("JOBS", "jobs"),
    ("RATE", "rate"),
];

const QUEUE_COLUMNS: &Columns = &[
    ("PLACE", "place"),
    ("RUN", "id"),
    ("JOB", "job_id"),
    ("JOB NAME", "job_name"),
    ("PRIORITY", "priority"),
    ("FIRE TIME", "fire_time"),
];

/// A group's path: the name escaped (a name of other characters than the admin allows is
/// answered there, `404`).
fn path(name: &str) -> String {
    format!("/api/concurrency-groups/{}", super::urlencode(name))
}

pub(super) async fn run(client: &Client, out: &Output, cmd: GroupsCmd) -> Result<(), CliError> {
    match cmd {
        GroupsCmd::List => {
            let v = client.get("/api/concurrency-groups").await?;
            out.table(&v, &v["groups"], COLUMNS)?;
        }
        GroupsCmd::Show { name } => out.record(&client.get(&path(&name)).await?)?,
        GroupsCmd::Queue { name, limit } => {
            let v = client
                .get(&format!("{}/queue?limit={limit}", path(&name)))
                .await?;
            out.table(&v, &v["runs"], QUEUE_COLUMNS)?;
        }
        GroupsCmd::Create { name, limit, rate } => {
            let mut body = json!({"name": name, "limit": limit});
            if let Some(r) = rate.body() {
                body["rate"] = r;
            }
            let v = client.post("/api/concurrency-groups", Some(&body)).await?;
            out.done(
                &v,
                &format!(
                    "created concurrency group {} (limit {})",
                    cell(&v["name"]),
                    v["limit"]
                ),
            )?;
        }
        GroupsCmd::Update {
            name,
            limit,
            rate,
            no_rate,
        } => {
            let mut body = Map::new();
            if let Some(l) = limit {
                body.insert("limit".into(), Value::from(l));
            }
            if let Some(r) = rate.body() {
                body.insert("rate".into(), r);
            } else if no_rate {
                body.insert("rate".into(), Value::Null);
            }
            if body.is_empty() {
                return Err(CliError::Usage(
                    "groups update: give --limit, --rate or --no-rate".to_owned(),
                ));
            }
            let v = client
                .call(Method::PATCH, &path(&name), Some(&Value::Object(body)))
                .await?;
            out.done(
                &v,
                &format!("concurrency group {name} changed (limit {})", v["limit"]),
            )?;
        }
        GroupsCmd::Delete { name } => {
            let v = client.call(Method::DELETE, &path(&name), None).await?;
            out.done(&v, &format!("concurrency group {name} deleted"))?;
        }
    }
    Ok(())
}
