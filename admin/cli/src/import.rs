//! `cadenza import xxl-job FILE`: reads an export of XXL-JOB's `xxl_job_info` (and
//! `xxl_job_group`) and sends its rows to `POST /api/import/xxl-job`, which maps and creates the
//! jobs. The files are read here ([`crate::files`]); rows that cannot be read are named
//! with their line and refuse the import (the rest is shown by a dry run).

use std::path::{Path, PathBuf};

use cadenza_schemas::JobType;
use clap::{Args, Subcommand};
use comfy_table::{presets::NOTHING, Table};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::{line, note, schedule_text, CliError, Client, Output};
use crate::files::{self, Located};
use cadenza_schemas::xxl_export as xxl;

#[derive(Debug, Subcommand)]
pub enum ImportCmd {
    /// Import XXL-JOB job definitions from an export of its xxl_job_info table (mysql --batch
    /// output, CSV or JSON). See docs/migrating-from-xxl-job.md.
    XxlJob(XxlArgs),
}

#[derive(Debug, Args)]
pub struct XxlArgs {
    /// The export of xxl_job_info: `mysql --batch -e 'select * from xxl_job_info' xxl_job >
    /// jobs.tsv`, a CSV file with a header line, or JSON.
    file: PathBuf,
    /// The export of xxl_job_group (the app names of BEAN jobs), in the same formats. Not needed
    /// when FILE is a JSON object holding xxl_job_group too.
    #[arg(long)]
    groups: Option<PathBuf>,
    /// Show what would be imported and every row that cannot be; import nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run a BEAN handler (APP/HANDLER, or HANDLER of any app) or one job (job:XXL_ID, any glue
    /// type) with this native job type instead of the xxl bridge. Repeatable.
    #[arg(long = "handler", value_name = "APP/HANDLER=TYPE", value_parser = parse_handler)]
    handlers: Vec<(String, String)>,
    /// The job type of GLUE_SHELL jobs (a worker serves it with --serve TYPE=shell).
    #[arg(long, default_value = xxl::DEFAULT_SHELL_JOB_TYPE)]
    shell_job_type: String,
    /// The IANA time zone XXL-JOB's admin ran in: its cron expressions fire in that zone.
    #[arg(long, default_value = "UTC")]
    timezone: String,
    /// The name this XXL-JOB installation's ids are remembered under (importing again from the
    /// same source creates only what is new).
    #[arg(long, default_value = xxl::DEFAULT_SOURCE)]
    source: String,
    /// Create every job disabled, whatever its trigger status in XXL-JOB (enable them once XXL-JOB
    /// stopped running them).
    #[arg(long)]
    all_disabled: bool,
}

/// A row of a file that cannot be read.
struct Unreadable {
    /// The file's name as given.
    file: String,
    /// Where in it: `line 7`, `element 3`.
    at: String,
    message: String,
}

fn parse_handler(s: &str) -> Result<(String, String), String> {
    let (key, job_type) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?} is not APP/HANDLER=TYPE, HANDLER=TYPE or job:XXL_ID=TYPE"))?;
    if key.trim().is_empty() {
        return Err(format!("{s:?}: nothing before '='"));
    }
    JobType::parse(job_type.trim()).map_err(|e| format!("{s:?}: {e}"))?;
    Ok((key.trim().to_owned(), job_type.trim().to_owned()))
}

/// A file's name for messages.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn read_file(path: &Path, table: files::Table) -> Result<files::Export, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Input(format!("cannot read {}: {e}", shown(path))))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Input(format!(
            "{} is not UTF-8 text; export with mysql --default-character-set=utf8mb4",
            shown(path)
        ))
    })?;
    files::read(&text, table).map_err(|e| CliError::Input(format!("{}: {e}", shown(path))))
}

fn rows_json(rows: &[Located], group: bool) -> Value {
    Value::Array(
        rows.iter()
            .map(|l| serde_json::to_value(xxl::columns_read(&l.row, group)).unwrap_or(Value::Null))
            .collect(),
    )
}

pub async fn run(client: &Client, out: &Output, cmd: ImportCmd) -> Result<(), CliError> {
    let ImportCmd::XxlJob(a) = cmd;
    let export = read_file(&a.file, files::Table::Jobs)?;
    let jobs = export.jobs.ok_or_else(|| {
        CliError::Input(format!(
            "{} holds no xxl_job_info rows (it holds xxl_job_group: give it with --groups)",
            shown(&a.file)
        ))
    })?;
    let mut problems: Vec<Unreadable> = export
        .problems
        .into_iter()
        .map(|p| Unreadable {
            file: shown(&a.file),
            at: p.at,
            message: p.message,
        })
        .collect();
    let mut groups = export.groups;
    if let Some(path) = &a.groups {
        let g = read_file(path, files::Table::Groups)?;
        problems.extend(g.problems.into_iter().map(|p| Unreadable {
            file: shown(path),
            at: p.at,
            message: p.message,
        }));
        groups = Some(g.groups.ok_or_else(|| {
            CliError::Input(format!("{} holds no xxl_job_group rows", shown(path)))
        })?);
    }
    if jobs.is_empty() {
        if let Some(p) = problems.first() {
            return Err(CliError::Input(format!(
                "{} {}: {}",
                p.file, p.at, p.message
            )));
        }
        return Err(CliError::Input(format!(
            "{} holds no xxl_job_info rows",
            shown(&a.file)
        )));
    }
    // A file with unreadable rows is never imported: a dry run shows the rest.
    let dry_run = a.dry_run || !problems.is_empty();
    let mut body = json!({
        "jobs": rows_json(&jobs, false),
        "dry_run": dry_run,
        "shell_job_type": a.shell_job_type,
        "timezone": a.timezone,
        "source": a.source,
        "all_disabled": a.all_disabled,
    });
    if let Some(g) = &groups {
        body["groups"] = rows_json(g, true);
    }
    if !a.handlers.is_empty() {
        let map: Map<String, Value> = a
            .handlers
            .iter()
            .map(|(k, t)| (k.clone(), Value::from(t.clone())))
            .collect();
        body["handlers"] = Value::Object(map);
    }
    let (status, answer) = client
        .exchange(Method::POST, "/api/import/xxl-job", Some(&body))
        .await?;
    let report = match status {
        s if s.is_success() => answer,
        StatusCode::UNPROCESSABLE_ENTITY if answer["error"]["code"] == "import_rejected" => {
            answer["report"].clone()
        }
        _ => return Err(Client::api_error(status, &answer)),
    };
    print_report(out, &a, &jobs, &problems, &report)?;
    let bad_rows = report["errors"].as_u64().unwrap_or(0) as usize;
    let bad = bad_rows + problems.len();
    if bad > 0 {
        return Err(CliError::Input(format!(
            "{bad} rows cannot be imported (listed above); nothing was imported"
        )));
    }
    Ok(())
}

/// A row's outcome as the table shows it, and what the column DETAIL says.
fn detail(r: &Value) -> (String, String) {
    match r["outcome"].as_str().unwrap_or_default() {
        "create" => {
            let job = &r["job"];
            let what = match r["job_id"].as_i64() {
                Some(id) => format!("job {id}"),
                None => String::new(),
            };
            let detail = format!(
                "{} {} {}{}",
                schedule_text(&job["schedule"]),
                job["route"].as_str().unwrap_or_default(),
                job["block"].as_str().unwrap_or_default(),
                if job["enabled"] == true {
                    ""
                } else {
                    " disabled"
                }
            );
            (what, detail)
        }
        "already_imported" => (
            format!("job {}", r["job_id"]),
            "imported before; unchanged".to_owned(),
        ),
        _ => (String::new(), row_errors(r).join("; ")),
    }
}

fn row_errors(r: &Value) -> Vec<String> {
    r["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}: {}",
                e["column"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn short(s: &str, n: usize) -> String {
    let s = s.replace('\n', " ");
    if s.chars().count() > n {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    } else {
        s
    }
}

fn print_report(
    out: &Output,
    a: &XxlArgs,
    jobs: &[Located],
    problems: &[Unreadable],
    report: &Value,
) -> Result<(), CliError> {
    // Where a row of the report is in the jobs file: `line 7`.
    let at = |r: &Value| -> String {
        r["row"]
            .as_u64()
            .and_then(|i| jobs.get((i as usize).checked_sub(1)?))
            .map_or_else(|| format!("row {}", r["row"]), |l| l.at.clone())
    };
    let file = shown(&a.file);
    if out.json {
        let mut whole = report.clone();
        if !problems.is_empty() {
            whole["file_errors"] = problems
                .iter()
                .map(|p| json!({"file": p.file, "at": p.at, "message": p.message}))
                .collect();
        }
        for r in whole["rows"].as_array_mut().into_iter().flatten() {
            let where_ = at(r);
            r["at"] = Value::from(where_);
        }
        out.print_json(&whole)?;
        return Ok(());
    }
    let rows = report["rows"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut t = Table::new();
    t.load_style(NOTHING);
    t.set_header([
        "WHERE", "XXL ID", "NAME", "OUTCOME", "JOB", "JOB TYPE", "DETAIL",
    ]);
    for r in rows {
        let (job, detail) = detail(r);
        t.add_row([
            at(r),
            r["xxl_id"]
                .as_i64()
                .map(|i| i.to_string())
                .unwrap_or_default(),
            short(r["name"].as_str().unwrap_or_default(), 40),
            r["outcome"].as_str().unwrap_or_default().to_owned(),
            job,
            r["job"]["job_type"].as_str().unwrap_or_default().to_owned(),
            short(&detail, 70),
        ]);
    }
    for p in problems {
        t.add_row([
            if p.file == file {
                p.at.clone()
            } else {
                format!("{} {}", p.file, p.at)
            },
            String::new(),
            String::new(),
            "error".to_owned(),
            String::new(),
            String::new(),
            short(&p.message, 70),
        ]);
    }
    line(t)?;
    let serve: Vec<&str> = report["serve"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !serve.is_empty() {
        line("\nWorkers serving these jobs need:\n  cadenza-worker \\")?;
        for (i, s) in serve.iter().enumerate() {
            let more = if i + 1 < serve.len() { " \\" } else { "" };
            line(format!("    {s}{more}"))?;
        }
    }
    for r in rows {
        for n in r["notes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            line(format!(
                "note: {file} {} (xxl id {}): {n}",
                at(r),
                r["xxl_id"]
            ))?;
        }
    }
    // Every problem in full, naming the row and the column.
    for p in problems {
        note(format_args!("error: {} {}: {}", p.file, p.at, p.message));
    }
    for r in rows.iter().filter(|r| r["outcome"] == "error") {
        let id = r["xxl_id"]
            .as_i64()
            .map(|i| format!(" (xxl id {i})"))
            .unwrap_or_default();
        for e in row_errors(r) {
            note(format_args!("error: {file} {}{id}: {e}", at(r)));
        }
    }
    for g in report["group_errors"].as_array().into_iter().flatten() {
        let groups = a.groups.as_deref().unwrap_or(&a.file);
        note(format_args!(
            "error: {} group row {}: {}: {}",
            shown(groups),
            g["row"],
            g["column"].as_str().unwrap_or_default(),
            g["message"].as_str().unwrap_or_default()
        ));
    }
    let create = report["create"].as_u64().unwrap_or(0);
    let before = report["already_imported"].as_u64().unwrap_or(0);
    let errors = report["errors"].as_u64().unwrap_or(0) + problems.len() as u64;
    let tz = report["timezone"].as_str().unwrap_or("UTC");
    let summary = if errors > 0 && !a.dry_run {
        format!("nothing imported: {errors} rows cannot be imported")
    } else if report["dry_run"] == true {
        format!(
            "dry run: {create} to create, {before} already imported, {errors} cannot be imported; \
             nothing was written (cron in {tz})"
        )
    } else {
        format!(
            "imported {create} jobs from source {:?} ({before} imported before; cron in {tz})",
            a.source
        )
    };
    line(format!("\n{summary}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_options() {
        assert_eq!(
            parse_handler("billing/invoiceJobHandler=billing.invoice").unwrap(),
            ("billing/invoiceJobHandler".into(), "billing.invoice".into())
        );
        assert_eq!(
            parse_handler("job:12=reports.daily").unwrap(),
            ("job:12".into(), "reports.daily".into())
        );
        assert!(parse_handler("nothing")
            .unwrap_err()
            .contains("APP/HANDLER=TYPE"));
        assert!(parse_handler("a/b=bad type")
            .unwrap_err()
            .contains("job_type may only contain"));
        assert!(parse_handler("=x").is_err());
    }
}
