//! `cadenza`: the command line over the admin's HTTP API. It speaks HTTP only (it links neither
//! a Kafka client nor a database driver), so it runs anywhere the API is reachable. Tables by default, `--json` for
//! scripts. The admin's URL and token come from flags, the environment (`CADENZA_URL`,
//! `CADENZA_API_TOKEN`) or the config file (`~/.config/cadenza/config.toml`: `url`, `token`),
//! in that order.

mod client;
mod files;
mod groups;
mod import;
mod replay;
mod workflows;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use cadenza_schemas::RunStatus;
use clap::{Args, Parser, Subcommand};
use comfy_table::{presets::NOTHING, Table};
use reqwest::Method;
use secrecy::SecretString;
use serde_json::{json, Map, Value};

pub use client::{CliError, Client};

#[derive(Debug, Parser)]
#[command(
    name = "cadenza",
    version,
    about = "Command line for the Cadenza scheduler's HTTP API"
)]
pub struct Cli {
    /// The admin's base URL.
    #[arg(long, env = "CADENZA_URL", global = true)]
    url: Option<String>,
    /// API token (CADENZA_API_TOKEN of the admin).
    #[arg(long, env = "CADENZA_API_TOKEN", hide_env_values = true, global = true,
          value_parser = secret)]
    token: Option<SecretString>,
    /// Config file with `url` and `token` (default ~/.config/cadenza/config.toml).
    #[arg(long, env = "CADENZA_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Job definitions.
    #[command(subcommand)]
    Jobs(JobsCmd),
    /// Runs (triggers) and their logs.
    #[command(subcommand)]
    Runs(RunsCmd),
    /// Workflows (graphs of jobs) and their runs.
    #[command(subcommand)]
    Workflows(workflows::WorkflowsCmd),
    /// Concurrency groups: cluster-wide limits and rates for the runs of their jobs.
    #[command(subcommand)]
    Groups(groups::GroupsCmd),
    /// Live and recently seen workers.
    Workers,
    /// Re-run triggers read back from a job type's topic.
    Replay(replay::ReplayArgs),
    /// Import job definitions from another scheduler (XXL-JOB).
    #[command(subcommand)]
    Import(import::ImportCmd),
    /// Schedules: the next fire times of one, as the admin computes them.
    #[command(subcommand)]
    Schedule(ScheduleCmd),
    /// The audit trail: who changed what, newest first.
    Audit {
        /// Only what this actor did (a user name, or `service`).
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        job_id: Option<i64>,
        /// From this time on (RFC 3339).
        #[arg(long)]
        from: Option<String>,
        /// Before this time (RFC 3339).
        #[arg(long)]
        to: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

#[derive(Debug, Subcommand)]
enum ScheduleCmd {
    /// The next fire times of a cron expression (or, with --every-ms, --delay-ms or --at, of
    /// another kind), in its time zone; the same checks and messages as creating a job.
    Preview {
        /// A cron expression, such as "0 0 10 * * MON-FRI".
        expr: Option<String>,
        /// IANA time zone of the cron expression (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        /// A fix_rate schedule of this interval instead.
        #[arg(long, conflicts_with_all = ["expr", "delay_ms", "at"])]
        every_ms: Option<i64>,
        /// A fix_delay schedule of this delay instead.
        #[arg(long, conflicts_with_all = ["expr", "at"])]
        delay_ms: Option<i64>,
        /// A once schedule at this instant (RFC 3339) instead.
        #[arg(long, conflicts_with = "expr")]
        at: Option<String>,
        /// How many fire times (1 to 100).
        #[arg(long, default_value_t = 5)]
        count: u32,
    },
}

#[derive(Debug, Subcommand)]
enum JobsCmd {
    /// List jobs.
    List {
        #[arg(long)]
        job_type: Option<String>,
        #[arg(long)]
        enabled: Option<bool>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Create a job from flags, or from a JSON file (`--file job.json`, `-` for stdin).
    Create(Box<CreateArgs>),
    /// Show one job.
    Show { id: i64 },
    /// Start scheduling a job.
    Enable { id: i64 },
    /// Stop scheduling a job.
    Disable { id: i64 },
    /// Delete a job and its runs.
    Delete { id: i64 },
    /// Run a job now, or later with --delay-ms / --at.
    Trigger {
        id: i64,
        /// Parameters for this run instead of the job's.
        #[arg(long)]
        params: Option<String>,
        /// Run it on this worker.
        #[arg(long)]
        worker: Option<String>,
        /// Run it this many milliseconds from now.
        #[arg(long, conflicts_with = "at")]
        delay_ms: Option<i64>,
        /// Run it at this instant (RFC 3339).
        #[arg(long)]
        at: Option<String>,
    },
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The whole job as JSON (the API's body); other flags override its fields.
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    job_type: Option<String>,
    /// `cron:<expr>`, `fix_rate:<ms>`, `fix_delay:<ms>`, `once:<RFC 3339>`, `none`, or JSON.
    #[arg(long)]
    schedule: Option<String>,
    /// IANA time zone of a cron schedule.
    #[arg(long)]
    timezone: Option<String>,
    #[arg(long)]
    route: Option<String>,
    #[arg(long)]
    block: Option<String>,
    #[arg(long)]
    misfire: Option<String>,
    #[arg(long)]
    params: Option<String>,
    #[arg(long)]
    timeout_ms: Option<i64>,
    #[arg(long)]
    retries: Option<i32>,
    #[arg(long)]
    retry_backoff_ms: Option<i64>,
    /// `fixed` or `exponential`.
    #[arg(long)]
    retry_backoff: Option<String>,
    #[arg(long)]
    retry_backoff_max_ms: Option<i64>,
    /// Child job ids, comma separated.
    #[arg(long, value_delimiter = ',')]
    children: Option<Vec<i64>>,
    #[arg(long)]
    alarm_webhook: Option<String>,
    /// Create it disabled.
    #[arg(long)]
    disabled: bool,
}

#[derive(Debug, Subcommand)]
enum RunsCmd {
    /// List runs, newest first.
    List {
        #[arg(long)]
        job_id: Option<i64>,
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show one run with its log.
    Show { id: i64 },
    /// Cancel a run: not yet published, it never runs; published or running, the worker that
    /// holds it stops it and reports it cancelled.
    Cancel { id: i64 },
    /// Follow a run's log until it ends.
    Tail {
        id: i64,
        /// Poll interval in milliseconds.
        #[arg(long, default_value_t = 500)]
        every_ms: u64,
    },
}

/// Parses the arguments and runs the command; the process's exit code.
///
/// When the reader of the output goes away (`cadenza runs list | head`), the command ends
/// quietly with 0, like the rest of a pipeline expects; no command panics on a closed pipe.
pub async fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => 0,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            note(format_args!("error: {e}"));
            match e {
                CliError::Usage(_) => 2,
                _ => 1,
            }
        }
    }
}

/// Parses the API token (kept out of `Debug` output).
fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}

/// A line on stderr. A closed stderr is ignored: what is said there is never the result.
fn note(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let (path, named) = match &cli.config {
        Some(p) => (Some(p.clone()), true),
        None => (client::default_config_path(), false),
    };
    let file = match path {
        Some(p) => client::read_config(&p, named)?,
        None => client::FileConfig::default(),
    };
    let url = cli
        .url
        .or(file.url)
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let client = Client::new(&url, cli.token.or(file.token))?;
    let out = Output { json: cli.json };
    match cli.command {
        Command::Jobs(cmd) => jobs(&client, &out, cmd).await,
        Command::Runs(cmd) => runs(&client, &out, cmd).await,
        Command::Workflows(cmd) => workflows::run(&client, &out, cmd).await,
        Command::Groups(cmd) => groups::run(&client, &out, cmd).await,
        Command::Workers => {
            let v = client.get("/api/workers").await?;
            out.table(&v, &v["workers"], &WORKER_COLUMNS)?;
            Ok(())
        }
        Command::Replay(args) => replay::run(&client, &out, args).await,
        Command::Import(cmd) => import::run(&client, &out, cmd).await,
        Command::Schedule(ScheduleCmd::Preview {
            expr,
            timezone,
            every_ms,
            delay_ms,
            at,
            count,
        }) => {
            let kind = match (&every_ms, &delay_ms, &at) {
                (Some(_), _, _) => "fix_rate",
                (_, Some(_), _) => "fix_delay",
                (_, _, Some(_)) => "once",
                _ => "cron",
            };
            let q = query(&[
                ("kind", Some(kind.to_owned())),
                ("expr", expr),
                ("timezone", timezone),
                ("every_ms", every_ms.map(|v| v.to_string())),
                ("delay_ms", delay_ms.map(|v| v.to_string())),
                ("at", at),
                ("count", Some(count.to_string())),
            ]);
            let v = client.get(&format!("/api/schedules/preview?{q}")).await?;
            let rows: Vec<Value> = v["fire_times"]
                .as_array()
                .into_iter()
                .flatten()
                .zip(v["local"].as_array().into_iter().flatten())
                .map(|(utc, local)| serde_json::json!({"local": local, "utc": utc}))
                .collect();
            out.table(&v, &Value::Array(rows), &PREVIEW_COLUMNS)?;
            Ok(())
        }
        Command::Audit {
            actor,
            job_id,
            from,
            to,
            limit,
        } => {
            let q = query(&[
                ("actor", actor),
                ("job_id", job_id.map(|j| j.to_string())),
                ("from", from),
                ("to", to),
                ("limit", Some(limit.to_string())),
            ]);
            let v = client.get(&format!("/api/audit?{q}")).await?;
            out.table(&v, &v["audit"], &AUDIT_COLUMNS)?;
            Ok(())
        }
    }
}

/// Columns of a table: header and the JSON field shown.
type Columns = [(&'static str, &'static str)];

const PREVIEW_COLUMNS: [(&str, &str); 2] = [("FIRE TIME (ZONE)", "local"), ("UTC", "utc")];
const JOB_COLUMNS: [(&str, &str); 7] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("TYPE", "job_type"),
    ("SCHEDULE", "schedule"),
    ("ROUTE", "route"),
    ("ENABLED", "enabled"),
    ("NEXT FIRE", "next_fire_at"),
];
const RUN_COLUMNS: [(&str, &str); 9] = [
    ("ID", "id"),
    ("JOB", "job_id"),
    ("KIND", "kind"),
    ("STATUS", "status"),
    ("FIRE TIME", "fire_time"),
    ("WORKER", "worker_id"),
    ("ATTEMPT", "attempt"),
    ("PARENT", "parent_id"),
    ("MESSAGE", "message"),
];
const AUDIT_COLUMNS: [(&str, &str); 8] = [
    ("ID", "id"),
    ("AT", "at"),
    ("ACTOR", "actor"),
    ("ACTION", "action"),
    ("OUTCOME", "outcome"),
    ("JOB", "job_id"),
    ("TARGET", "target"),
    ("FROM", "source"),
];
const WORKER_COLUMNS: [(&str, &str); 6] = [
    ("WORKER", "worker_id"),
    ("GROUP", "group"),
    ("ALIVE", "alive"),
    ("JOB TYPES", "job_types"),
    ("RUNNING", "running"),
    ("LAST SEEN", "last_seen"),
];

pub(crate) struct Output {
    json: bool,
}

/// Writes `text` and a newline to stdout; the error (a closed pipe too) goes to the caller.
fn line(text: impl std::fmt::Display) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

impl Output {
    fn print_json(&self, v: &Value) -> std::io::Result<()> {
        line(serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
    }

    /// `whole` as JSON, or `rows` as a table.
    fn table(&self, whole: &Value, rows: &Value, columns: &Columns) -> std::io::Result<()> {
        if self.json {
            return self.print_json(whole);
        }
        let mut t = Table::new();
        t.load_style(NOTHING);
        t.set_header(columns.iter().map(|(h, _)| *h));
        for r in rows.as_array().map(Vec::as_slice).unwrap_or_default() {
            t.add_row(columns.iter().map(|(_, f)| cell(&r[*f])));
        }
        line(t)
    }

    /// One object as JSON, or as `key: value` lines.
    fn record(&self, v: &Value) -> std::io::Result<()> {
        if self.json {
            return self.print_json(v);
        }
        let Some(map) = v.as_object() else {
            return line(cell(v));
        };
        let mut out = std::io::stdout().lock();
        let width = map.keys().map(String::len).max().unwrap_or(0);
        for (k, val) in map {
            if k == "log" {
                continue;
            }
            writeln!(out, "{k:>width$}  {}", cell(val))?;
        }
        if let Some(log) = map.get("log").and_then(Value::as_str) {
            writeln!(out, "\n{log}")?;
        }
        out.flush()
    }

    /// A short confirmation, or the JSON.
    fn done(&self, v: &Value, text: &str) -> std::io::Result<()> {
        if self.json {
            self.print_json(v)
        } else {
            line(text)
        }
    }
}

/// A JSON value as a table cell: strings bare, objects compact, null empty.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => {
            let s = s.replace('\n', " ");
            if s.chars().count() > 60 {
                format!("{}…", s.chars().take(59).collect::<String>())
            } else {
                s
            }
        }
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Object(o) if o.contains_key("kind") => schedule_text(v),
        other => other.to_string(),
    }
}

/// A schedule as the `--schedule` shorthand.
fn schedule_text(s: &Value) -> String {
    match s["kind"].as_str().unwrap_or_default() {
        "cron" => {
            let tz = s["timezone"].as_str().unwrap_or("UTC");
            format!("cron:{} ({tz})", s["expr"].as_str().unwrap_or_default())
        }
        "fix_rate" => format!("fix_rate:{}", s["every_ms"]),
        "fix_delay" => format!("fix_delay:{}", s["delay_ms"]),
        "once" => format!("once:{}", s["at"].as_str().unwrap_or_default()),
        other => other.to_owned(),
    }
}

/// Parses `--schedule`: JSON, or `kind:value`.
fn parse_schedule(s: &str, timezone: Option<&str>) -> Result<Value, CliError> {
    if s.trim_start().starts_with('{') {
        return serde_json::from_str(s)
            .map_err(|e| CliError::Usage(format!("--schedule is not valid JSON: {e}")));
    }
    let (kind, value) = s.split_once(':').unwrap_or((s, ""));
    let ms = |field: &str| -> Result<Value, CliError> {
        let n: i64 = value.trim().parse().map_err(|_| {
            CliError::Usage(format!(
                "--schedule {kind}:<milliseconds>: {value:?} is not a number"
            ))
        })?;
        Ok(json!({"kind": kind, field: n}))
    };
    let v = match kind {
        "cron" => {
            let mut v = json!({"kind": "cron", "expr": value});
            if let Some(tz) = timezone {
                v["timezone"] = json!(tz);
            }
            v
        }
        "fix_rate" => ms("every_ms")?,
        "fix_delay" => ms("delay_ms")?,
        "once" => json!({"kind": "once", "at": value}),
        "none" => json!({"kind": "none"}),
        other => {
            return Err(CliError::Usage(format!(
                "--schedule: {other:?} is not a schedule kind; use cron:<expr>, fix_rate:<ms>, fix_delay:<ms>, once:<RFC 3339> or none"
            )))
        }
    };
    Ok(v)
}

/// The JSON object in file `p` (`-`: standard input), given with `--file`.
fn read_object(p: &std::path::Path) -> Result<Map<String, Value>, CliError> {
    let text = if p.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(p)
    }
    .map_err(|e| CliError::Usage(format!("--file {}: {e}", p.display())))?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CliError::Usage(format!(
            "--file {}: must hold a JSON object",
            p.display()
        ))),
        Err(e) => Err(CliError::Usage(format!(
            "--file {}: not valid JSON: {e}",
            p.display()
        ))),
    }
}

fn create_body(a: &CreateArgs) -> Result<Value, CliError> {
    let mut body: Map<String, Value> = match &a.file {
        None => Map::new(),
        Some(p) => read_object(p)?,
    };
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.to_owned(), v);
        }
    };
    set("name", a.name.clone().map(Value::from));
    set("job_type", a.job_type.clone().map(Value::from));
    if let Some(s) = &a.schedule {
        set("schedule", Some(parse_schedule(s, a.timezone.as_deref())?));
    }
    set("route", a.route.clone().map(Value::from));
    set("block", a.block.clone().map(Value::from));
    set("misfire", a.misfire.clone().map(Value::from));
    set("params", a.params.clone().map(Value::from));
    set("timeout_ms", a.timeout_ms.map(Value::from));
    set("retries", a.retries.map(Value::from));
    set("retry_backoff_ms", a.retry_backoff_ms.map(Value::from));
    set("retry_backoff", a.retry_backoff.clone().map(Value::from));
    set(
        "retry_backoff_max_ms",
        a.retry_backoff_max_ms.map(Value::from),
    );
    set("children", a.children.clone().map(Value::from));
    set("alarm_webhook", a.alarm_webhook.clone().map(Value::from));
    if a.disabled {
        set("enabled", Some(Value::Bool(false)));
    }
    for required in ["name", "job_type", "schedule"] {
        if !body.contains_key(required) {
            return Err(CliError::Usage(format!(
                "--{} is required (or give it in --file)",
                required.replace('_', "-")
            )));
        }
    }
    Ok(Value::Object(body))
}

/// `key=value&…` of the set parameters.
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", urlencode(v))))
        .collect();
    parts.join("&")
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn jobs(client: &Client, out: &Output, cmd: JobsCmd) -> Result<(), CliError> {
    match cmd {
        JobsCmd::List {
            job_type,
            enabled,
            limit,
        } => {
            let q = query(&[
                ("job_type", job_type),
                ("enabled", enabled.map(|e| e.to_string())),
                ("limit", Some(limit.to_string())),
            ]);
            let v = client.get(&format!("/api/jobs?{q}")).await?;
            out.table(&v, &v["jobs"], &JOB_COLUMNS)?;
        }
        JobsCmd::Create(a) => {
            let body = create_body(&a)?;
            let v = client.post("/api/jobs", Some(&body)).await?;
            out.done(
                &v,
                &format!(
                    "created job {} ({}), next fire at {}",
                    v["id"],
                    cell(&v["name"]),
                    cell(&v["next_fire_at"]).if_empty("—")
                ),
            )?;
        }
        JobsCmd::Show { id } => out.record(&client.get(&format!("/api/jobs/{id}")).await?)?,
        JobsCmd::Enable { id } => {
            let v = client.post(&format!("/api/jobs/{id}/enable"), None).await?;
            out.done(&v, &format!("job {id} enabled"))?;
        }
        JobsCmd::Disable { id } => {
            let v = client
                .post(&format!("/api/jobs/{id}/disable"), None)
                .await?;
            out.done(&v, &format!("job {id} disabled"))?;
        }
        JobsCmd::Delete { id } => {
            let v = client
                .call(Method::DELETE, &format!("/api/jobs/{id}"), None)
                .await?;
            out.done(&v, &format!("job {id} deleted"))?;
        }
        JobsCmd::Trigger {
            id,
            params,
            worker,
            delay_ms,
            at,
        } => {
            let mut body = Map::new();
            for (k, v) in [("params", params), ("worker", worker), ("at", at)] {
                if let Some(v) = v {
                    body.insert(k.to_owned(), Value::from(v));
                }
            }
            if let Some(d) = delay_ms {
                body.insert("delay_ms".to_owned(), Value::from(d));
            }
            let v = client
                .post(
                    &format!("/api/jobs/{id}/trigger"),
                    Some(&Value::Object(body)),
                )
                .await?;
            out.done(
                &v,
                &format!(
                    "triggered job {id}: run {} at {}",
                    cell(&v["trigger_ids"]),
                    cell(&v["fire_time"])
                ),
            )?;
        }
    }
    Ok(())
}

trait IfEmpty {
    fn if_empty(self, other: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, other: &str) -> String {
        if self.is_empty() {
            other.to_owned()
        } else {
            self
        }
    }
}

/// Whether a run's status (as the API shows it) is final.
fn is_terminal(status: &str) -> bool {
    status.parse::<RunStatus>().is_ok_and(|s| s.is_terminal())
}

async fn runs(client: &Client, out: &Output, cmd: RunsCmd) -> Result<(), CliError> {
    match cmd {
        RunsCmd::List {
            job_id,
            status,
            limit,
        } => {
            let q = query(&[
                ("job_id", job_id.map(|j| j.to_string())),
                ("status", status),
                ("limit", Some(limit.to_string())),
            ]);
            let v = client.get(&format!("/api/triggers?{q}")).await?;
            out.table(&v, &v["triggers"], &RUN_COLUMNS)?;
        }
        RunsCmd::Show { id } => out.record(&client.get(&format!("/api/triggers/{id}")).await?)?,
        RunsCmd::Cancel { id } => {
            let run = client
                .post(&format!("/api/triggers/{id}/cancel"), None)
                .await?;
            if !out.json {
                let now = run["status"].as_str().unwrap_or_default();
                note(format_args!(
                    "[run {id} {}]",
                    if now == "cancelled" {
                        "cancelled"
                    } else {
                        "cancel sent to its worker; `cadenza runs tail` shows when it stops"
                    }
                ));
            }
            out.record(&run)?;
        }
        RunsCmd::Tail { id, every_ms } => tail(client, out, id, every_ms).await?,
    }
    Ok(())
}

/// Prints a run's log as it grows, then its outcome.
async fn tail(client: &Client, out: &Output, id: i64, every_ms: u64) -> Result<(), CliError> {
    let mut shown = String::new();
    let mut last_status = String::new();
    loop {
        let run = client.get(&format!("/api/triggers/{id}")).await?;
        let status = run["status"].as_str().unwrap_or_default().to_owned();
        let log = run["log"].as_str().unwrap_or_default();
        if !out.json {
            if status != last_status {
                note(format_args!("[run {id} {status}]"));
                last_status.clone_from(&status);
            }
            let new = new_text(&shown, log);
            if !new.is_empty() {
                let mut stdout = std::io::stdout().lock();
                write!(stdout, "{new}")?;
                if !new.ends_with('\n') && is_terminal(&status) {
                    writeln!(stdout)?;
                }
                stdout.flush()?;
            }
        }
        shown = log.to_owned();
        if is_terminal(&status) {
            if out.json {
                out.print_json(&run)?;
            } else if let Some(m) = run["message"].as_str() {
                note(format_args!("[{m}]"));
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(every_ms.max(50))).await;
    }
}

/// What `now` adds to the log already shown (`before`). The admin keeps the log's tail, so the
/// two may overlap only partly; a log that starts over (a new attempt) is shown whole.
fn new_text<'a>(before: &str, now: &'a str) -> &'a str {
    if let Some(rest) = now.strip_prefix(before) {
        return rest;
    }
    // The longest suffix of `before` that `now` starts with.
    let mut i = before.len().saturating_sub(now.len());
    while i < before.len() {
        if before.is_char_boundary(i) && now.starts_with(&before[i..]) {
            return &now[before.len() - i..];
        }
        i += 1;
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_from_shorthand() {
        assert_eq!(
            parse_schedule("fix_rate:500", None).unwrap(),
            json!({"kind": "fix_rate", "every_ms": 500})
        );
        assert_eq!(
            parse_schedule("cron:*/5 * * * * *", Some("Europe/Paris")).unwrap(),
            json!({"kind": "cron", "expr": "*/5 * * * * *", "timezone": "Europe/Paris"})
        );
        assert_eq!(
            parse_schedule("none", None).unwrap(),
            json!({"kind": "none"})
        );
        let e = parse_schedule("hourly:1", None).unwrap_err().to_string();
        assert!(e.contains("--schedule"), "{e}");
        let e = parse_schedule("fix_rate:soon", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("soon"), "{e}");
    }

    #[test]
    fn new_log_text_is_what_was_not_shown() {
        assert_eq!(new_text("", "a\nb"), "a\nb");
        assert_eq!(new_text("a\n", "a\nb\n"), "b\n");
        // the admin dropped the head of a long log
        assert_eq!(new_text("xxabc", "abcdef"), "def");
        // a new attempt starts over
        assert_eq!(new_text("old log", "new"), "new");
    }

    #[test]
    fn query_strings_are_encoded() {
        assert_eq!(
            query(&[
                ("a", Some("x y".into())),
                ("b", None),
                ("c", Some("1".into()))
            ]),
            "a=x%20y&c=1"
        );
    }
}
