//! XXL-JOB's `xxl_job_info` rows (2.x; `job_cron` exports of older versions too) mapped to
//! Cadenza jobs, and the report of what an import does with each row.
//!
//! [`plan`] is pure: given the rows, the groups, the options and which XXL ids the source
//! already imported, it decides every row (`create`, `already_imported` or `error` with each
//! reason), so a dry run and a real import decide alike. The API writes what it decided.
//!
//! Mapping (see `docs/migrating-from-xxl-job.md`): `schedule_type`/`schedule_conf` → `schedule`
//! (`FIX_RATE` seconds → `every_ms`, cron in `--timezone`), the strategies by name, timeouts
//! seconds → ms, `executor_fail_retry_count` → `retries` (no backoff, as XXL-JOB), `child_jobid` →
//! `children` (remapped to the new ids), `alarm_email` → `alarm_emails`, `trigger_status` →
//! `enabled`. A BEAN job runs its executor's handler through the bridge (`xxl.<app>.<handler>`,
//! served with `--serve <type>=xxl:<app>/<handler>`) unless a handler mapping names a native job
//! type; a GLUE_SHELL job becomes a `shell` job running its source with bash; other GLUE jobs need
//! a handler mapping by job id.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::str::FromStr;

use cadenza_schemas::{BlockStrategy, JobId, JobType, MisfireStrategy, RouteStrategy, Schedule};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Cell, Row};
use crate::jobs::{
    Backoff, FieldError, JobSpec, DEFAULT_BACKOFF_MAX_MS, DEFAULT_MISFIRE_THRESHOLD_MS,
};

pub use cadenza_schemas::xxl_export::{DEFAULT_SHELL_JOB_TYPE, DEFAULT_SOURCE, MAX_SOURCE_LEN};

/// What an import does with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A new job (created, unless this is a dry run).
    Create,
    /// Imported from the same source before: `job_id` is the job it became; nothing changes.
    AlreadyImported,
    /// The row cannot be imported; `errors` says why. Nothing of the import is written.
    Error,
}

/// Why a row (or a column of it) cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RowError {
    /// The XXL-JOB column at fault (`executor_route_strategy`, `child_jobid`, …).
    pub column: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

fn row_err(column: &str, message: impl Into<String>) -> RowError {
    RowError {
        column: column.to_owned(),
        message: message.into(),
    }
}

/// A child job of an imported row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChildRef {
    /// Its XXL-JOB id.
    pub xxl_id: i64,
    /// Its Cadenza job id: known when it was imported before, or once this import created it.
    pub job_id: Option<i64>,
}

/// What the import does with one `xxl_job_info` row.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RowReport {
    /// The row's position in `jobs`, from 1.
    pub row: usize,
    /// Its XXL-JOB id (`id`), when readable.
    pub xxl_id: Option<i64>,
    /// Its name (`job_desc`), when readable.
    pub name: Option<String>,
    pub outcome: Outcome,
    /// The Cadenza job: the one created (real import) or the one imported before.
    pub job_id: Option<i64>,
    /// The job as created (`create`); its `children` are filled in by a real import only (a dry
    /// run lists them in `children` with their XXL ids).
    pub job: Option<JobSpec>,
    /// Its child jobs, by XXL id and, once known, Cadenza id.
    #[serde(default)]
    pub children: Vec<ChildRef>,
    /// The worker option its job type needs (`--serve TYPE=xxl:APP/HANDLER`, `--serve
    /// shell=shell`); none for a native job type (served by its own handler).
    pub serve: Option<String>,
    /// What a reader should know about the mapping (GLUE source, the time zone).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why the row cannot be imported (`error` only).
    #[serde(default)]
    pub errors: Vec<RowError>,
}

/// A `xxl_job_group` row that cannot be read.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupError {
    /// The row's position in `groups`, from 1.
    pub row: usize,
    pub column: String,
    pub message: String,
}

/// What an import does, row by row.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImportReport {
    /// True: nothing was written.
    pub dry_run: bool,
    /// The source the XXL ids are remembered under.
    pub source: String,
    /// The time zone cron expressions are evaluated in (XXL-JOB used its admin's JVM zone).
    pub timezone: String,
    /// Rows to create (dry run) or created.
    pub create: usize,
    /// Rows imported before.
    pub already_imported: usize,
    /// Rows that cannot be imported, plus unreadable group rows.
    pub errors: usize,
    /// One entry per `jobs` row, in order.
    pub rows: Vec<RowReport>,
    /// Unreadable `groups` rows.
    #[serde(default)]
    pub group_errors: Vec<GroupError>,
    /// The `--serve` options the workers need for the job types of the file's jobs, e.g.
    /// `--serve xxl.billing.invoiceJobHandler=xxl:billing/invoiceJobHandler`.
    pub serve: Vec<String>,
}

/// `--handler` mappings: which native job type runs a job instead of the bridge.
#[derive(Debug, Clone, Default)]
pub struct Handlers {
    by_job: HashMap<i64, JobType>,
    by_app_handler: HashMap<(String, String), JobType>,
    by_handler: HashMap<String, JobType>,
}

impl Handlers {
    /// Reads the mappings: keys `job:<xxl id>`, `<app>/<handler>` or `<handler>` (any app).
    /// The error names the key at fault.
    pub fn parse(map: &BTreeMap<String, JobType>) -> Result<Self, FieldError> {
        let mut h = Handlers::default();
        for (key, job_type) in map {
            let field = format!("handlers.{key}");
            let k = key.trim();
            if let Some(id) = k.strip_prefix("job:") {
                let id = id
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|i| *i > 0)
                    .ok_or_else(|| {
                        FieldError::new(
                            &field,
                            format!("{key:?}: job:<id> needs a positive XXL-JOB job id"),
                        )
                    })?;
                h.by_job.insert(id, job_type.clone());
            } else if let Some((app, handler)) = k.split_once('/') {
                if app.trim().is_empty() || handler.trim().is_empty() {
                    return Err(FieldError::new(
                        &field,
                        format!("{key:?}: give <app>/<handler>, <handler> or job:<id>"),
                    ));
                }
                h.by_app_handler.insert(
                    (app.trim().to_owned(), handler.trim().to_owned()),
                    job_type.clone(),
                );
            } else if k.is_empty() {
                return Err(FieldError::new(
                    &field,
                    "an empty key: give <app>/<handler>, <handler> or job:<id>",
                ));
            } else {
                h.by_handler.insert(k.to_owned(), job_type.clone());
            }
        }
        Ok(h)
    }

    fn for_job(&self, id: i64) -> Option<&JobType> {
        self.by_job.get(&id)
    }

    fn for_handler(&self, app: Option<&str>, handler: &str) -> Option<&JobType> {
        app.and_then(|a| self.by_app_handler.get(&(a.to_owned(), handler.to_owned())))
            .or_else(|| self.by_handler.get(handler))
    }
}

/// How rows become jobs.
#[derive(Debug, Clone)]
pub struct Options {
    pub handlers: Handlers,
    /// The job type of GLUE_SHELL jobs (default `shell`).
    pub shell_job_type: JobType,
    /// IANA zone of cron expressions (XXL-JOB used its admin's JVM zone).
    pub timezone: String,
    /// Create every job disabled, whatever its `trigger_status`.
    pub all_disabled: bool,
    pub source: String,
}

/// A job imported before from the same source.
#[derive(Debug, Clone)]
pub struct Imported {
    pub job_id: i64,
    pub job_type: String,
}

/// The bridge's job type for an executor's handler: `xxl.<app>.<handler>`. Job types allow only
/// `[A-Za-z0-9._-]` (they name a Kafka topic); an app or handler with other characters (or a name
/// over 200 characters) has them replaced by `_`, cut to fit, and gets `-` and 8 hex digits of
/// the SHA-256 of `<app>/<handler>`, so two handlers never share a job type.
pub fn bridge_job_type(app: &str, handler: &str) -> JobType {
    const PREFIX: &str = "xxl.";
    // `JobType`'s limit (the trigger topic adds the prefix and `.trigger.`).
    const MAX_TYPE_LEN: usize = 200;
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let whole = format!("{PREFIX}{app}.{handler}");
    if plain(app) && plain(handler) && whole.len() <= MAX_TYPE_LEN {
        if let Ok(t) = JobType::parse(&whole) {
            return t;
        }
    }
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let digest = Sha256::digest(format!("{app}/{handler}").as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let mut app = clean(app);
    app.truncate(64);
    let mut handler = clean(handler);
    // "xxl." + app + "." + handler + "-" + 8 hex
    let room = MAX_TYPE_LEN - PREFIX.len() - app.len() - 1 - 9;
    handler.truncate(room);
    let name = format!("{PREFIX}{app}.{handler}-{hash}");
    // Only ASCII letters, digits, '_', '-' and '.' are left, within the length: always valid.
    JobType::parse(&name).unwrap_or_else(|_| {
        JobType::parse(&format!("{PREFIX}{hash}")).unwrap_or_else(|_| unreachable!())
    })
}

/// Quotes `s` for a POSIX shell: one word, nothing expanded.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `shell` built-in's command line (run with `sh -c`) for a GLUE_SHELL job: its source run
/// by bash with the positional arguments XXL-JOB gives a script: `$1` the job's
/// `executor_param` (one argument, as it is), `$2` the shard index, `$3` the shard total.
pub fn glue_shell_command(source: &str, param: &str) -> String {
    format!(
        "exec bash -c {} xxl-glue-shell {} \"$CADENZA_SHARD_INDEX\" \"$CADENZA_SHARD_TOTAL\"",
        sh_quote(source),
        sh_quote(param)
    )
}

/// A row with its column names in lower case.
struct View<'a> {
    cols: HashMap<String, &'a Cell>,
}

impl<'a> View<'a> {
    fn new(row: &'a Row) -> Self {
        View {
            cols: row
                .iter()
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v))
                .collect(),
        }
    }

    fn has(&self, col: &str) -> bool {
        self.cols.contains_key(col)
    }

    /// The trimmed text of a column; `None` when absent, null or empty.
    fn text(&self, col: &str) -> Option<String> {
        let t = self.cols.get(col)?.text()?;
        let t = t.trim();
        (!t.is_empty()).then(|| t.to_owned())
    }

    /// The text as it is (params and scripts keep their spaces); empty when absent or null.
    fn raw(&self, col: &str) -> String {
        self.cols
            .get(col)
            .and_then(|c| c.text())
            .unwrap_or_default()
    }

    /// A required column's trimmed text.
    fn required(&self, col: &str) -> Result<String, RowError> {
        if !self.has(col) {
            return Err(row_err(col, format!("missing column {col}")));
        }
        self.text(col)
            .ok_or_else(|| row_err(col, format!("{col} is empty")))
    }

    /// A whole number, `None` when absent, null or empty.
    fn int(&self, col: &str) -> Result<Option<i64>, RowError> {
        match self.cols.get(col) {
            None | Some(Cell::Null) => Ok(None),
            Some(Cell::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| row_err(col, format!("{n} is not a whole number"))),
            Some(Cell::Text(s)) if s.trim().is_empty() => Ok(None),
            Some(Cell::Text(s)) => s
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| row_err(col, format!("{s:?} is not a whole number"))),
        }
    }
}

/// An XXL-JOB strategy name (`SHARDING_BROADCAST`) as Cadenza's enum: the same words in snake
/// case. The error lists XXL-JOB's names.
fn strategy<T: FromStr + Copy>(
    v: &View,
    col: &str,
    what: &str,
    xxl_names: &[&str],
) -> Result<T, RowError> {
    let s = v.required(col)?;
    if xxl_names.iter().any(|n| n.eq_ignore_ascii_case(&s)) {
        if let Ok(t) = s.to_ascii_lowercase().parse::<T>() {
            return Ok(t);
        }
    }
    Err(row_err(
        col,
        format!(
            "unknown {what} {s:?}; expected one of: {}",
            xxl_names.join(", ")
        ),
    ))
}

const ROUTES: &[&str] = &[
    "FIRST",
    "LAST",
    "ROUND",
    "RANDOM",
    "CONSISTENT_HASH",
    "LEAST_FREQUENTLY_USED",
    "LEAST_RECENTLY_USED",
    "FAILOVER",
    "BUSYOVER",
    "SHARDING_BROADCAST",
];
const BLOCKS: &[&str] = &["SERIAL_EXECUTION", "DISCARD_LATER", "COVER_EARLY"];
const MISFIRES: &[&str] = &["DO_NOTHING", "FIRE_ONCE_NOW"];
const GLUE_TYPES: &[&str] = &[
    "BEAN",
    "GLUE_GROOVY",
    "GLUE_SHELL",
    "GLUE_PYTHON",
    "GLUE_PHP",
    "GLUE_NODEJS",
    "GLUE_POWERSHELL",
];

/// The column a schedule came from: `schedule_conf`, or `job_cron` in old exports.
fn schedule(v: &View, tz: &str) -> Result<(Schedule, &'static str), RowError> {
    let cron = |expr: String| Schedule::Cron {
        expr,
        timezone: Some(tz.to_owned()),
    };
    if !v.has("schedule_type") {
        if v.has("job_cron") {
            let expr = v.required("job_cron")?;
            return Ok((cron(expr), "job_cron"));
        }
        return Err(row_err(
            "schedule_type",
            "missing column schedule_type (or job_cron, in exports of XXL-JOB before 2.3)",
        ));
    }
    let kind = v.required("schedule_type")?.to_ascii_uppercase();
    let seconds = |v: &View| -> Result<i64, RowError> {
        let s = v.int("schedule_conf")?.ok_or_else(|| {
            row_err(
                "schedule_conf",
                format!("a {kind} schedule needs its interval in seconds; schedule_conf is empty"),
            )
        })?;
        s.checked_mul(1000).ok_or_else(|| {
            row_err(
                "schedule_conf",
                format!("{s} seconds is too long an interval"),
            )
        })
    };
    match kind.as_str() {
        "NONE" => Ok((Schedule::None {}, "schedule_type")),
        "CRON" => {
            let expr = v.text("schedule_conf").ok_or_else(|| {
                row_err(
                    "schedule_conf",
                    "a CRON schedule needs a cron expression; schedule_conf is empty",
                )
            })?;
            Ok((cron(expr), "schedule_conf"))
        }
        "FIX_RATE" => Ok((
            Schedule::FixRate {
                every_ms: seconds(v)?,
            },
            "schedule_conf",
        )),
        // Never offered by XXL-JOB's console, but in its enum: the same meaning as Cadenza's.
        "FIX_DELAY" => Ok((
            Schedule::FixDelay {
                delay_ms: seconds(v)?,
            },
            "schedule_conf",
        )),
        _ => Err(row_err(
            "schedule_type",
            format!("unknown schedule type {kind:?}; expected one of: NONE, CRON, FIX_RATE"),
        )),
    }
}

/// The XXL-JOB column a `JobSpec` validation error is about.
fn column_of(field: &str, schedule_col: &str, params_col: &str) -> String {
    let col = match field {
        "name" => "job_desc",
        "params" => params_col,
        "timeout_ms" => "executor_timeout",
        "retries" => "executor_fail_retry_count",
        "job_type" => "executor_handler",
        f if f.starts_with("alarm_emails") => "alarm_email",
        "schedule.timezone" => "timezone",
        f if f.starts_with("schedule.") => schedule_col,
        other => other,
    };
    col.to_owned()
}

/// A mapped row, before children and cycles are resolved.
struct Mapped {
    spec: JobSpec,
    children: Vec<i64>,
    serve: Option<String>,
    notes: Vec<String>,
}

/// What runs a row.
struct Runs {
    job_type: JobType,
    params: String,
    /// The column `params` came from (named in a validation error).
    params_col: &'static str,
    serve: Option<String>,
    notes: Vec<String>,
}

/// What runs a row: its job type, params, serve line and notes; or why nothing can (an empty
/// list: the reason was reported with another column).
fn handler(
    v: &View,
    id: i64,
    opts: &Options,
    apps: Option<&HashMap<i64, String>>,
) -> Result<Runs, Vec<RowError>> {
    let glue = v
        .required("glue_type")
        .map_err(|e| vec![e])?
        .to_ascii_uppercase();
    if !GLUE_TYPES.contains(&glue.as_str()) {
        return Err(vec![row_err(
            "glue_type",
            format!(
                "unknown glue type {glue:?}; expected one of: {}",
                GLUE_TYPES.join(", ")
            ),
        )]);
    }
    let param = v.raw("executor_param");
    if let Some(t) = opts.handlers.for_job(id) {
        let mut notes = Vec::new();
        if glue != "BEAN" {
            notes.push(format!(
                "{glue} source is not carried over: job type {t} (--handler job:{id}) runs instead"
            ));
        }
        return Ok(Runs {
            job_type: t.clone(),
            params: param,
            params_col: "executor_param",
            serve: None,
            notes,
        });
    }
    match glue.as_str() {
        "BEAN" => {
            if !v.has("executor_handler") {
                return Err(vec![row_err(
                    "executor_handler",
                    "missing column executor_handler",
                )]);
            }
            let Some(h) = v.text("executor_handler") else {
                return Err(vec![row_err(
                    "executor_handler",
                    format!(
                        "a BEAN job needs the name of its executor's handler; executor_handler is \
                         empty (or map the job with --handler job:{id}=<job_type>)"
                    ),
                )]);
            };
            let group = v.int("job_group").ok().flatten();
            let app = match (group, apps) {
                (Some(g), Some(apps)) => apps.get(&g).map(String::as_str),
                _ => None,
            };
            if let Some(t) = opts.handlers.for_handler(app, &h) {
                return Ok(Runs {
                    job_type: t.clone(),
                    params: param,
                    params_col: "executor_param",
                    serve: None,
                    notes: Vec::new(),
                });
            }
            let Some(app) = app else {
                let why = match (group, apps) {
                    // job_group itself is reported as missing or unreadable.
                    (None, _) => return Err(Vec::new()),
                    (Some(g), None) => format!(
                        "no xxl_job_group rows were given, so the app name of job_group {g} is unknown"
                    ),
                    (Some(g), Some(_)) => {
                        format!("job_group {g} is not among the xxl_job_group rows given")
                    }
                };
                return Err(vec![row_err(
                    "job_group",
                    format!(
                        "{why}: give the xxl_job_group export (--groups FILE), or map the \
                         handler with --handler <app>/{h}=<job_type> or --handler {h}=<job_type>"
                    ),
                )]);
            };
            let t = bridge_job_type(app, &h);
            let serve = format!("--serve {}", sh_word(&format!("{t}=xxl:{app}/{h}")));
            Ok(Runs {
                job_type: t,
                params: param,
                params_col: "executor_param",
                serve: Some(serve),
                notes: Vec::new(),
            })
        }
        "GLUE_SHELL" => {
            if !v.has("glue_source") {
                return Err(vec![row_err("glue_source", "missing column glue_source")]);
            }
            let source = v.raw("glue_source");
            if source.trim().is_empty() {
                return Err(vec![row_err(
                    "glue_source",
                    "a GLUE_SHELL job needs its script; glue_source is empty",
                )]);
            }
            let t = opts.shell_job_type.clone();
            let serve = format!("--serve {t}=shell");
            let note = format!(
                "the GLUE_SHELL script runs with bash through the shell built-in (job type {t}), \
                 with executor_param as $1 and the shard index and total as $2 and $3, as XXL-JOB \
                 runs it"
            );
            Ok(Runs {
                job_type: t,
                params: glue_shell_command(&source, &param),
                params_col: "glue_source",
                serve: Some(serve),
                notes: vec![note],
            })
        }
        other => Err(vec![row_err(
            "glue_type",
            format!(
                "needs a handler: {other} source cannot run in Cadenza; write a handler for it \
                 and pass --handler job:{id}=<job_type>"
            ),
        )]),
    }
}

/// A shell word for a printed command line: as it is when plain, else single-quoted.
fn sh_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-=:/@%+,".contains(c))
    {
        s.to_owned()
    } else {
        sh_quote(s)
    }
}

/// Maps one row whose id is known; every problem found, not only the first.
fn map_row(
    v: &View,
    id: i64,
    opts: &Options,
    apps: Option<&HashMap<i64, String>>,
    now: DateTime<Utc>,
) -> Result<Mapped, Vec<RowError>> {
    let mut errors = Vec::new();
    let name = v.required("job_desc").map_err(|e| errors.push(e)).ok();
    if let Err(e) = v.int("job_group").and_then(|g| {
        g.ok_or_else(|| row_err("job_group", "job_group is empty"))
            .map(|_| ())
    }) {
        if !v.has("job_group") {
            errors.push(row_err("job_group", "missing column job_group"));
        } else {
            errors.push(e);
        }
    }
    let sched = schedule(v, &opts.timezone).map_err(|e| errors.push(e)).ok();
    let misfire: Option<MisfireStrategy> = if v.text("misfire_strategy").is_some() {
        strategy(v, "misfire_strategy", "misfire strategy", MISFIRES)
            .map_err(|e| errors.push(e))
            .ok()
    } else {
        Some(MisfireStrategy::DoNothing)
    };
    let route: Option<RouteStrategy> =
        strategy(v, "executor_route_strategy", "route strategy", ROUTES)
            .map_err(|e| errors.push(e))
            .ok();
    let block: Option<BlockStrategy> =
        strategy(v, "executor_block_strategy", "block strategy", BLOCKS)
            .map_err(|e| errors.push(e))
            .ok();
    let timeout_ms = match v.int("executor_timeout") {
        Ok(None) => Some(0),
        Ok(Some(s)) if s >= 0 => s.checked_mul(1000).or_else(|| {
            errors.push(row_err(
                "executor_timeout",
                format!("{s} seconds is too long"),
            ));
            None
        }),
        Ok(Some(s)) => {
            errors.push(row_err(
                "executor_timeout",
                format!("{s} is negative; give seconds, 0 for no timeout"),
            ));
            None
        }
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let retries = match v.int("executor_fail_retry_count") {
        Ok(None) => Some(0),
        Ok(Some(n)) => i32::try_from(n).ok().filter(|n| *n >= 0).or_else(|| {
            errors.push(row_err(
                "executor_fail_retry_count",
                format!("{n} is not a count of retries (0 to 100)"),
            ));
            None
        }),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let enabled = match v.int("trigger_status") {
        Ok(None) | Ok(Some(0)) => Some(false),
        Ok(Some(1)) => Some(true),
        Ok(Some(n)) => {
            errors.push(row_err(
                "trigger_status",
                format!("{n} is not a trigger status; expected 1 (running) or 0 (stopped)"),
            ));
            None
        }
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let mut children = Vec::new();
    for part in v.raw("child_jobid").split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match part.parse::<i64>() {
            Ok(c) if c > 0 => {
                if c == id {
                    errors.push(row_err(
                        "child_jobid",
                        format!("job {id} cannot be its own child"),
                    ));
                } else if !children.contains(&c) {
                    children.push(c);
                }
            }
            _ => errors.push(row_err(
                "child_jobid",
                format!("{part:?} is not a job id; expected job ids separated by commas"),
            )),
        }
    }
    let alarm_emails: Vec<String> = v
        .raw("alarm_email")
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    let runs = handler(v, id, opts, apps)
        .map_err(|e| errors.extend(e))
        .ok();
    let (
        Some(name),
        Some((schedule, schedule_col)),
        Some(misfire),
        Some(route),
        Some(block),
        Some(timeout_ms),
        Some(retries),
        Some(enabled),
        Some(Runs {
            job_type,
            params,
            params_col,
            serve,
            mut notes,
        }),
        true,
    ) = (
        name,
        sched,
        misfire,
        route,
        block,
        timeout_ms,
        retries,
        enabled,
        runs,
        errors.is_empty(),
    )
    else {
        return Err(errors);
    };
    let enabled = if opts.all_disabled && enabled {
        notes.push("created disabled (all_disabled); trigger_status was 1".to_owned());
        false
    } else {
        enabled
    };
    let spec = JobSpec {
        name,
        job_type,
        schedule,
        route,
        block,
        misfire,
        misfire_threshold_ms: DEFAULT_MISFIRE_THRESHOLD_MS,
        params,
        timeout_ms,
        retries,
        retry_backoff_ms: 0,
        retry_backoff: Backoff::Fixed,
        retry_backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
        children: Vec::new(),
        alarm_webhook: None,
        alarm_emails,
        enabled,
        concurrency_group: None,
        priority: 0,
        overlap: cadenza_schemas::Overlap::Allow,
        jitter_ms: 0,
    };
    if let Err(e) = spec.validate(now) {
        return Err(vec![RowError {
            column: column_of(&e.field, schedule_col, params_col),
            message: format!("{}: {}", e.field, e.message),
        }]);
    }
    Ok(Mapped {
        spec,
        children,
        serve,
        notes,
    })
}

/// Reads the `xxl_job_group` rows: group id → app name, and the rows that cannot be read.
fn read_groups(groups: &[Row]) -> (HashMap<i64, String>, Vec<GroupError>) {
    let mut apps = HashMap::new();
    let mut errors = Vec::new();
    for (i, row) in groups.iter().enumerate() {
        let v = View::new(row);
        let err = |column: &str, message: String| GroupError {
            row: i + 1,
            column: column.to_owned(),
            message,
        };
        let id = match v.int("id") {
            Ok(Some(id)) => id,
            Ok(None) if !v.has("id") => {
                errors.push(err("id", "missing column id".into()));
                continue;
            }
            Ok(None) => {
                errors.push(err("id", "id is empty".into()));
                continue;
            }
            Err(e) => {
                errors.push(err("id", e.message));
                continue;
            }
        };
        let app = match v.required("app_name") {
            Ok(a) => a,
            Err(e) => {
                errors.push(err("app_name", e.message));
                continue;
            }
        };
        match apps.get(&id) {
            Some(other) if other != &app => errors.push(err(
                "id",
                format!("group {id} appears twice, as {other:?} and {app:?}"),
            )),
            _ => {
                apps.insert(id, app);
            }
        }
    }
    (apps, errors)
}

/// A cycle through `start` among `edges` (XXL ids), if there is one: `start → … → start`.
fn cycle_through(start: i64, edges: &HashMap<i64, Vec<i64>>) -> Option<Vec<i64>> {
    let mut came_from: HashMap<i64, i64> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for &c in edges.get(&n).map(Vec::as_slice).unwrap_or_default() {
            if c == start {
                let mut path = vec![n];
                let mut at = n;
                while at != start {
                    match came_from.get(&at) {
                        Some(prev) => at = *prev,
                        None => break,
                    }
                    path.push(at);
                }
                path.reverse();
                path.push(start);
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(c) {
                e.insert(n);
                queue.push_back(c);
            }
        }
    }
    None
}

/// Decides every row of an import. `imported` holds the ids the source imported before among the
/// rows' ids and children.
pub fn plan(
    jobs: &[Row],
    groups: Option<&[Row]>,
    opts: &Options,
    imported: &HashMap<i64, Imported>,
    dry_run: bool,
    now: DateTime<Utc>,
) -> ImportReport {
    let (apps, group_errors) = match groups {
        Some(g) => {
            let (a, e) = read_groups(g);
            (Some(a), e)
        }
        None => (None, Vec::new()),
    };
    let views: Vec<View> = jobs.iter().map(View::new).collect();
    // Ids first: duplicates and children are checked against the whole file.
    let ids: Vec<Result<i64, RowError>> = views
        .iter()
        .map(|v| match v.int("id") {
            Ok(Some(id)) if id > 0 => Ok(id),
            Ok(Some(id)) => Err(row_err("id", format!("{id} is not a job id"))),
            Ok(None) if !v.has("id") => Err(row_err("id", "missing column id")),
            Ok(None) => Err(row_err("id", "id is empty")),
            Err(e) => Err(e),
        })
        .collect();
    let mut rows_of: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, id) in ids.iter().enumerate() {
        if let Ok(id) = id {
            rows_of.entry(*id).or_default().push(i + 1);
        }
    }
    let mut rows = Vec::with_capacity(jobs.len());
    let mut mapped: HashMap<i64, Mapped> = HashMap::new();
    for (i, (v, id)) in views.iter().zip(&ids).enumerate() {
        let mut report = RowReport {
            row: i + 1,
            xxl_id: id.as_ref().ok().copied(),
            name: v.text("job_desc"),
            outcome: Outcome::Error,
            job_id: None,
            job: None,
            children: Vec::new(),
            serve: None,
            notes: Vec::new(),
            errors: Vec::new(),
        };
        let id = match id {
            Ok(id) => *id,
            Err(e) => {
                report.errors.push(e.clone());
                rows.push(report);
                continue;
            }
        };
        let same = &rows_of[&id];
        if same.len() > 1 {
            let list: Vec<String> = same.iter().map(usize::to_string).collect();
            report.errors.push(row_err(
                "id",
                format!("id {id} appears more than once (rows {})", list.join(", ")),
            ));
            rows.push(report);
            continue;
        }
        let result = map_row(v, id, opts, apps.as_ref(), now);
        if let Some(before) = imported.get(&id) {
            report.outcome = Outcome::AlreadyImported;
            report.job_id = Some(before.job_id);
            if let Ok(m) = &result {
                if m.spec.job_type.as_str() == before.job_type {
                    report.serve.clone_from(&m.serve);
                }
            }
            rows.push(report);
            continue;
        }
        match result {
            Ok(m) => {
                report.outcome = Outcome::Create;
                mapped.insert(id, m);
            }
            Err(e) => report.errors = e,
        }
        rows.push(report);
    }
    // Children: in the file or imported before; no cycle among the new jobs (Cadenza does not
    // let a job fire itself again, through any chain).
    let edges: HashMap<i64, Vec<i64>> = mapped
        .iter()
        .map(|(id, m)| {
            let to_new: Vec<i64> = m
                .children
                .iter()
                .copied()
                .filter(|c| mapped.contains_key(c))
                .collect();
            (*id, to_new)
        })
        .collect();
    for report in &mut rows {
        let Some(id) = report.xxl_id.filter(|_| report.outcome == Outcome::Create) else {
            continue;
        };
        let Some(m) = mapped.get(&id) else { continue };
        let mut errors = Vec::new();
        for &c in &m.children {
            if let Some(before) = imported.get(&c) {
                report.children.push(ChildRef {
                    xxl_id: c,
                    job_id: Some(before.job_id),
                });
            } else if rows_of.contains_key(&c) {
                report.children.push(ChildRef {
                    xxl_id: c,
                    job_id: None,
                });
            } else {
                errors.push(row_err(
                    "child_jobid",
                    format!(
                        "child job {c} is not in this export and was not imported from source {:?} \
                         before; import it too, or remove it from child_jobid",
                        opts.source
                    ),
                ));
            }
        }
        if let Some(path) = cycle_through(id, &edges) {
            let chain: Vec<String> = path.iter().map(i64::to_string).collect();
            errors.push(row_err(
                "child_jobid",
                format!(
                    "would make a cycle of child jobs: {} (XXL-JOB ids); a job must not fire \
                     itself again, so remove one of these children",
                    chain.join(" → ")
                ),
            ));
        }
        if errors.is_empty() {
            report.job = Some(m.spec.clone());
            report.serve.clone_from(&m.serve);
            report.notes.clone_from(&m.notes);
        } else {
            report.outcome = Outcome::Error;
            report.children.clear();
            report.errors = errors;
        }
    }
    let serve: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.outcome != Outcome::Error)
        .filter_map(|r| r.serve.clone())
        .collect();
    let count = |o: Outcome| rows.iter().filter(|r| r.outcome == o).count();
    ImportReport {
        dry_run,
        source: opts.source.clone(),
        timezone: opts.timezone.clone(),
        create: count(Outcome::Create),
        already_imported: count(Outcome::AlreadyImported),
        errors: count(Outcome::Error) + group_errors.len(),
        rows,
        group_errors,
        serve: serve.into_iter().collect(),
    }
}

/// The ids a plan needs to know about from earlier imports: every row's id and children.
pub fn referenced_ids(jobs: &[Row]) -> Vec<i64> {
    let mut ids = HashSet::new();
    for row in jobs {
        let v = View::new(row);
        if let Ok(Some(id)) = v.int("id") {
            ids.insert(id);
        }
        for part in v.raw("child_jobid").split(',') {
            if let Ok(c) = part.trim().parse::<i64>() {
                ids.insert(c);
            }
        }
    }
    let mut ids: Vec<i64> = ids.into_iter().collect();
    ids.sort_unstable();
    ids
}

/// The children of a created row as Cadenza ids, once every new job has its id.
pub fn resolve_children(report: &mut RowReport, new_ids: &HashMap<i64, i64>) -> Vec<JobId> {
    for c in &mut report.children {
        if c.job_id.is_none() {
            c.job_id = new_ids.get(&c.xxl_id).copied();
        }
    }
    report
        .children
        .iter()
        .filter_map(|c| c.job_id.map(JobId))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: serde_json::Value) -> Row {
        serde_json::from_value(v).unwrap()
    }

    /// A complete xxl_job_info row of XXL-JOB 2.4, with `over` changed.
    fn job(id: i64, over: serde_json::Value) -> Row {
        let mut base = json!({
            "id": id, "job_group": 1, "job_desc": format!("job {id}"), "add_time": "2024-01-02 03:04:05",
            "update_time": "2024-01-02 03:04:05", "author": "ops", "alarm_email": "",
            "schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "misfire_strategy": "DO_NOTHING",
            "executor_route_strategy": "FIRST", "executor_handler": "demoJobHandler",
            "executor_param": "", "executor_block_strategy": "SERIAL_EXECUTION",
            "executor_timeout": 0, "executor_fail_retry_count": 0, "glue_type": "BEAN",
            "glue_source": "", "glue_remark": "GLUE代码初始化", "glue_updatetime": null,
            "child_jobid": "", "trigger_status": 1, "trigger_last_time": 0, "trigger_next_time": 0
        });
        for (k, v) in over.as_object().unwrap() {
            base[k] = v.clone();
        }
        row(base)
    }

    fn groups() -> Vec<Row> {
        vec![
            row(
                json!({"id": 1, "app_name": "xxl-job-executor-sample", "title": "示例执行器", "address_type": 0, "address_list": null}),
            ),
            row(json!({"id": 2, "app_name": "billing", "title": "Billing"})),
        ]
    }

    fn opts() -> Options {
        Options {
            handlers: Handlers::default(),
            shell_job_type: JobType::parse("shell").unwrap(),
            timezone: "Asia/Shanghai".into(),
            all_disabled: false,
            source: DEFAULT_SOURCE.into(),
        }
    }

    fn run(jobs: &[Row], o: &Options) -> ImportReport {
        let g = groups();
        plan(jobs, Some(&g), o, &HashMap::new(), true, Utc::now())
    }

    fn only_error(r: &RowReport) -> (&str, &str) {
        assert_eq!(r.outcome, Outcome::Error, "{r:?}");
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        (&r.errors[0].column, &r.errors[0].message)
    }

    #[test]
    fn a_bean_cron_job_maps_field_by_field() {
        let j = job(
            7,
            json!({"job_group": 2, "executor_handler": "invoiceJobHandler",
                "executor_route_strategy": "SHARDING_BROADCAST", "executor_block_strategy": "COVER_EARLY",
                "misfire_strategy": "FIRE_ONCE_NOW", "executor_timeout": "30", "executor_fail_retry_count": 3,
                "executor_param": " a b ", "alarm_email": "ops@example.com, dev@example.com", "trigger_status": 0}),
        );
        let r = run(&[j], &opts());
        assert_eq!(r.errors, 0, "{r:?}");
        let row = &r.rows[0];
        assert_eq!((row.xxl_id, row.outcome), (Some(7), Outcome::Create));
        let s = row.job.as_ref().unwrap();
        assert_eq!(s.name, "job 7");
        assert_eq!(s.job_type.as_str(), "xxl.billing.invoiceJobHandler");
        assert_eq!(
            s.schedule,
            Schedule::Cron {
                expr: "0 0 2 * * ?".into(),
                timezone: Some("Asia/Shanghai".into())
            }
        );
        assert_eq!(s.route, RouteStrategy::ShardingBroadcast);
        assert_eq!(s.block, BlockStrategy::CoverEarly);
        assert_eq!(s.misfire, MisfireStrategy::FireOnceNow);
        assert_eq!(s.misfire_threshold_ms, 5000);
        assert_eq!(
            (s.timeout_ms, s.retries, s.retry_backoff_ms),
            (30_000, 3, 0)
        );
        assert_eq!(s.params, " a b ", "params are passed as they are");
        assert_eq!(s.alarm_emails, vec!["ops@example.com", "dev@example.com"]);
        assert!(!s.enabled);
        assert_eq!(
            row.serve.as_deref(),
            Some("--serve xxl.billing.invoiceJobHandler=xxl:billing/invoiceJobHandler")
        );
        assert_eq!(r.serve, vec![row.serve.clone().unwrap()]);
    }

    #[test]
    fn every_strategy_name_of_xxl_job_maps() {
        for (i, name) in ROUTES.iter().enumerate() {
            let r = run(&[job(1, json!({"executor_route_strategy": name}))], &opts());
            let s = r.rows[0].job.as_ref().unwrap();
            assert_eq!(s.route, RouteStrategy::ALL[i], "{name}");
        }
        for (i, name) in BLOCKS.iter().enumerate() {
            let r = run(&[job(1, json!({"executor_block_strategy": name}))], &opts());
            assert_eq!(r.rows[0].job.as_ref().unwrap().block, BlockStrategy::ALL[i]);
        }
        for (i, name) in MISFIRES.iter().enumerate() {
            let r = run(&[job(1, json!({"misfire_strategy": name}))], &opts());
            assert_eq!(
                r.rows[0].job.as_ref().unwrap().misfire,
                MisfireStrategy::ALL[i]
            );
        }
        let r = run(
            &[job(1, json!({"executor_route_strategy": "SOMETIMES"}))],
            &opts(),
        );
        let (col, msg) = only_error(&r.rows[0]);
        assert_eq!(col, "executor_route_strategy");
        assert!(
            msg.contains("\"SOMETIMES\"") && msg.contains("SHARDING_BROADCAST"),
            "{msg}"
        );
        // Cadenza's own fire_all is not an XXL-JOB misfire strategy.
        let r = run(&[job(1, json!({"misfire_strategy": "FIRE_ALL"}))], &opts());
        assert_eq!(only_error(&r.rows[0]).0, "misfire_strategy");
    }

    #[test]
    fn schedules_fix_rate_none_and_old_job_cron() {
        let r = run(
            &[
                job(
                    1,
                    json!({"schedule_type": "FIX_RATE", "schedule_conf": "30"}),
                ),
                job(2, json!({"schedule_type": "NONE", "schedule_conf": null})),
                job(
                    3,
                    json!({"schedule_type": "FIX_RATE", "schedule_conf": "soon"}),
                ),
                job(4, json!({"schedule_type": "HOURLY"})),
            ],
            &opts(),
        );
        let spec = |i: usize| r.rows[i].job.as_ref().unwrap();
        assert_eq!(spec(0).schedule, Schedule::FixRate { every_ms: 30_000 });
        assert_eq!(spec(1).schedule, Schedule::None {});
        assert_eq!(only_error(&r.rows[2]).0, "schedule_conf");
        let (col, msg) = only_error(&r.rows[3]);
        assert_eq!(col, "schedule_type");
        assert!(msg.contains("NONE, CRON, FIX_RATE"), "{msg}");

        let mut old = job(5, json!({"job_cron": "0 */5 * * * ?"}));
        old.remove("schedule_type");
        old.remove("schedule_conf");
        old.remove("misfire_strategy");
        let r = run(&[old.clone()], &opts());
        let s = r.rows[0].job.as_ref().unwrap();
        assert!(
            matches!(&s.schedule, Schedule::Cron { expr, .. } if expr == "0 */5 * * * ?"),
            "{s:?}"
        );
        assert_eq!(s.misfire, MisfireStrategy::DoNothing);
        old.remove("job_cron");
        let r = run(&[old], &opts());
        let (col, msg) = only_error(&r.rows[0]);
        assert_eq!(col, "schedule_type");
        assert!(msg.contains("missing column"), "{msg}");
    }

    #[test]
    fn a_cron_expression_the_parser_refuses_names_the_parser_message() {
        let r = run(&[job(1, json!({"schedule_conf": "0 0 25 * * ?"}))], &opts());
        let (col, msg) = only_error(&r.rows[0]);
        assert_eq!(col, "schedule_conf");
        assert!(
            msg.starts_with("schedule.expr: cron expression")
                && msg.contains("hour field \"25\": 25 is out of range"),
            "{msg}"
        );
    }

    /// `L`, `W` and `#`: Quartz syntax that XXL-JOB jobs use.
    #[test]
    fn quartz_expressions_of_xxl_job_import() {
        for expr in [
            "0 0 0 L * ?",
            "0 0 10 15W * ?",
            "0 0 12 ? * 6#3",
            "0 0 8 LW * ?",
            "0 0 10 ? * 2L",
            "0 0 0 L-3 * ?",
        ] {
            let r = run(&[job(1, json!({"schedule_conf": expr}))], &opts());
            assert_eq!(
                r.rows[0].outcome,
                Outcome::Create,
                "{expr}: {:?}",
                r.rows[0].errors
            );
        }
    }

    #[test]
    fn children_are_remapped_and_must_exist() {
        let mut before = HashMap::new();
        before.insert(
            40,
            Imported {
                job_id: 400,
                job_type: "x".into(),
            },
        );
        let g = groups();
        let r = plan(
            &[
                job(1, json!({"child_jobid": "2, 40"})),
                job(2, json!({})),
                job(3, json!({"child_jobid": "99"})),
                job(4, json!({"child_jobid": "4"})),
                job(5, json!({"child_jobid": "2,x"})),
            ],
            Some(&g),
            &opts(),
            &before,
            true,
            Utc::now(),
        );
        assert_eq!(
            r.rows[0].children,
            vec![
                ChildRef {
                    xxl_id: 2,
                    job_id: None
                },
                ChildRef {
                    xxl_id: 40,
                    job_id: Some(400)
                }
            ]
        );
        let (col, msg) = only_error(&r.rows[2]);
        assert_eq!(col, "child_jobid");
        assert!(msg.contains("child job 99 is not in this export"), "{msg}");
        assert!(only_error(&r.rows[3]).1.contains("its own child"));
        assert!(only_error(&r.rows[4]).1.contains("\"x\" is not a job id"));
        let mut report = r.rows[0].clone();
        let ids = resolve_children(&mut report, &HashMap::from([(2, 20)]));
        assert_eq!(ids, vec![JobId(20), JobId(400)]);
    }

    #[test]
    fn a_cycle_of_children_is_refused_like_the_api_refuses_it() {
        let r = run(
            &[
                job(1, json!({"child_jobid": "2"})),
                job(2, json!({"child_jobid": "3"})),
                job(3, json!({"child_jobid": "1"})),
                job(4, json!({"child_jobid": "1"})),
            ],
            &opts(),
        );
        for i in 0..3 {
            let (col, msg) = only_error(&r.rows[i]);
            assert_eq!(col, "child_jobid");
            assert!(msg.contains("cycle"), "{msg}");
        }
        assert!(
            r.rows[0].errors[0].message.contains("1 → 2 → 3 → 1"),
            "{:?}",
            r.rows[0].errors
        );
        // 4 leads into the cycle but is not on it.
        assert_eq!(r.rows[3].outcome, Outcome::Create);
    }

    #[test]
    fn already_imported_rows_change_nothing() {
        let before = HashMap::from([(
            1,
            Imported {
                job_id: 10,
                job_type: "xxl.xxl-job-executor-sample.demoJobHandler".into(),
            },
        )]);
        let g = groups();
        let r = plan(
            &[job(1, json!({})), job(2, json!({"child_jobid": "1"}))],
            Some(&g),
            &opts(),
            &before,
            true,
            Utc::now(),
        );
        assert_eq!(r.rows[0].outcome, Outcome::AlreadyImported);
        assert_eq!(r.rows[0].job_id, Some(10));
        assert!(r.rows[0].job.is_none());
        assert_eq!(
            r.rows[1].children,
            vec![ChildRef {
                xxl_id: 1,
                job_id: Some(10)
            }]
        );
        assert_eq!((r.create, r.already_imported, r.errors), (1, 1, 0));
        assert_eq!(r.serve.len(), 1, "{:?}", r.serve);
    }

    #[test]
    fn bean_jobs_without_groups_need_a_mapping() {
        let jobs = [
            job(1, json!({})),
            job(2, json!({"executor_handler": "other"})),
        ];
        let r = plan(&jobs, None, &opts(), &HashMap::new(), true, Utc::now());
        let (col, msg) = only_error(&r.rows[0]);
        assert_eq!(col, "job_group");
        assert!(
            msg.contains("no xxl_job_group rows were given") && msg.contains("--groups"),
            "{msg}"
        );

        let mut o = opts();
        o.handlers = Handlers::parse(&BTreeMap::from([
            (
                "demoJobHandler".to_owned(),
                JobType::parse("demo.native").unwrap(),
            ),
            ("job:2".to_owned(), JobType::parse("by.id").unwrap()),
        ]))
        .unwrap();
        let r = plan(&jobs, None, &o, &HashMap::new(), true, Utc::now());
        assert_eq!(
            r.rows[0].job.as_ref().unwrap().job_type.as_str(),
            "demo.native"
        );
        assert_eq!(r.rows[1].job.as_ref().unwrap().job_type.as_str(), "by.id");
        assert!(
            r.serve.is_empty(),
            "native types need no bridge: {:?}",
            r.serve
        );
        // app/handler wins over the bare handler
        o.handlers = Handlers::parse(&BTreeMap::from([
            (
                "demoJobHandler".to_owned(),
                JobType::parse("any.app").unwrap(),
            ),
            (
                "billing/demoJobHandler".to_owned(),
                JobType::parse("billing.native").unwrap(),
            ),
        ]))
        .unwrap();
        let r = run(&[job(1, json!({"job_group": 2})), job(2, json!({}))], &o);
        assert_eq!(
            r.rows[0].job.as_ref().unwrap().job_type.as_str(),
            "billing.native"
        );
        assert_eq!(r.rows[1].job.as_ref().unwrap().job_type.as_str(), "any.app");
        let r = run(&[job(1, json!({"job_group": 9}))], &opts());
        assert!(only_error(&r.rows[0])
            .1
            .contains("job_group 9 is not among"));
    }

    #[test]
    fn handler_keys_are_checked() {
        let t = JobType::parse("a").unwrap();
        for bad in ["job:x", "job:0", "/h", "app/", " "] {
            let e = Handlers::parse(&BTreeMap::from([(bad.to_owned(), t.clone())])).unwrap_err();
            assert_eq!(e.field, format!("handlers.{bad}"));
        }
    }

    #[test]
    fn glue_jobs() {
        let shell = job(
            1,
            json!({"glue_type": "GLUE_SHELL", "executor_handler": "", "executor_param": "x y",
                "glue_source": "#!/bin/bash\necho \"xxl-job: hello shell\"\nexit 0\n"}),
        );
        let groovy = job(
            2,
            json!({"glue_type": "GLUE_GROOVY", "executor_handler": ""}),
        );
        let r = run(&[shell.clone(), groovy.clone()], &opts());
        let s = r.rows[0].job.as_ref().unwrap();
        assert_eq!(s.job_type.as_str(), "shell");
        assert!(
            s.params.starts_with("exec bash -c '#!/bin/bash\necho"),
            "{}",
            s.params
        );
        assert_eq!(r.rows[0].serve.as_deref(), Some("--serve shell=shell"));
        let (col, msg) = only_error(&r.rows[1]);
        assert_eq!(col, "glue_type");
        assert!(
            msg.starts_with("needs a handler: GLUE_GROOVY source cannot run in Cadenza")
                && msg.contains("--handler job:2=<job_type>"),
            "{msg}"
        );
        let mut o = opts();
        o.shell_job_type = JobType::parse("ops.sh").unwrap();
        o.handlers = Handlers::parse(&BTreeMap::from([(
            "job:2".to_owned(),
            JobType::parse("reports.native").unwrap(),
        )]))
        .unwrap();
        let r = run(&[shell, groovy], &o);
        assert_eq!(r.rows[0].job.as_ref().unwrap().job_type.as_str(), "ops.sh");
        assert_eq!(r.serve, vec!["--serve ops.sh=shell"]);
        let g = r.rows[1].job.as_ref().unwrap();
        assert_eq!(g.job_type.as_str(), "reports.native");
        assert!(r.rows[1].notes[0].contains("GLUE_GROOVY source is not carried over"));
        let r = run(&[job(3, json!({"glue_type": "GLUE_RUBY"}))], &opts());
        assert!(only_error(&r.rows[0]).1.contains("unknown glue type"));
    }

    /// Runs the shell built-in's command line the way the worker does (`sh -c`).
    fn sh(command: &str, index: &str, total: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .env("CADENZA_SHARD_INDEX", index)
            .env("CADENZA_SHARD_TOTAL", total)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn glue_shell_scripts_get_xxl_jobs_arguments_whatever_they_hold() {
        let script = "#!/bin/bash\n# it's bash: arrays work\nargs=(\"$@\")\nprintf '[%s]' \"$#\" \"${args[@]}\"\necho\necho 'done'\n";
        for param in [
            "",
            "plain",
            "two words",
            "it's \"quoted\" $HOME `date` $(id) \\ ; rm -rf /tmp/never",
            "line one\nline two",
        ] {
            let out = sh(&glue_shell_command(script, param), "1", "3");
            assert_eq!(
                out,
                format!("[3][{param}][1][3]\ndone\n"),
                "param {param:?}"
            );
        }
        // The exit code is the script's: the run fails when the script fails.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(glue_shell_command("exit 3", ""))
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn bridge_job_types_are_valid_and_distinct() {
        assert_eq!(
            bridge_job_type("billing-app", "invoiceJobHandler").as_str(),
            "xxl.billing-app.invoiceJobHandler"
        );
        let a = bridge_job_type("app", "pay.job");
        let b = bridge_job_type("app", "pay_job");
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("xxl.app.pay_job-"), "{a}");
        let long = bridge_job_type(&"a".repeat(100), &"h/".repeat(200));
        assert!(long.as_str().len() <= 200);
        let cjk = bridge_job_type("执行器", "任务");
        assert!(JobType::parse(cjk.as_str()).is_ok(), "{cjk}");
        assert_ne!(cjk, bridge_job_type("执行", "器任务"));
    }

    #[test]
    fn bad_rows_name_every_problem() {
        let r = run(
            &[
                job(
                    1,
                    json!({"executor_timeout": "-5", "executor_fail_retry_count": "many",
                    "trigger_status": 2, "alarm_email": "ops@example.com,nobody"}),
                ),
                job(1, json!({})),
                row(json!({"job_desc": "no id"})),
            ],
            &opts(),
        );
        assert_eq!(r.rows[0].outcome, Outcome::Error);
        assert!(r.rows[0].errors[0]
            .message
            .contains("appears more than once (rows 1, 2)"));
        let (col, msg) = only_error(&r.rows[2]);
        assert_eq!((col, msg), ("id", "missing column id"));
        assert_eq!(r.rows[2].name.as_deref(), Some("no id"));

        let r = run(
            &[job(
                1,
                json!({"executor_timeout": "-5", "executor_fail_retry_count": "many",
                "trigger_status": 2}),
            )],
            &opts(),
        );
        let cols: Vec<&str> = r.rows[0].errors.iter().map(|e| e.column.as_str()).collect();
        assert_eq!(
            cols,
            [
                "executor_timeout",
                "executor_fail_retry_count",
                "trigger_status"
            ]
        );
        let r = run(
            &[job(1, json!({"alarm_email": "ops@example.com,nobody"}))],
            &opts(),
        );
        let (col, msg) = only_error(&r.rows[0]);
        assert_eq!(col, "alarm_email");
        assert!(msg.contains("\"nobody\" is not an e-mail address"), "{msg}");
        let mut no_route = job(1, json!({}));
        no_route.remove("executor_route_strategy");
        let r = run(&[no_route], &opts());
        assert_eq!(
            only_error(&r.rows[0]),
            (
                "executor_route_strategy",
                "missing column executor_route_strategy"
            )
        );
    }

    #[test]
    fn all_disabled_creates_every_job_disabled() {
        let mut o = opts();
        o.all_disabled = true;
        let r = run(&[job(1, json!({"trigger_status": 1}))], &o);
        assert!(!r.rows[0].job.as_ref().unwrap().enabled);
        let r = run(&[job(1, json!({"trigger_status": "1"}))], &opts());
        assert!(r.rows[0].job.as_ref().unwrap().enabled);
    }

    #[test]
    fn group_rows_are_read() {
        let g = vec![
            row(json!({"id": 1, "app_name": "a"})),
            row(json!({"app_name": "b"})),
            row(json!({"id": 1, "app_name": "c"})),
        ];
        let r = plan(
            &[job(1, json!({}))],
            Some(&g),
            &opts(),
            &HashMap::new(),
            true,
            Utc::now(),
        );
        assert_eq!(r.group_errors.len(), 2, "{:?}", r.group_errors);
        assert_eq!(r.errors, 2);
        assert_eq!(
            r.rows[0].job.as_ref().unwrap().job_type.as_str(),
            "xxl.a.demoJobHandler"
        );
    }

    #[test]
    fn children_are_referenced_ids() {
        assert_eq!(
            referenced_ids(&[job(3, json!({"child_jobid": "4,5"}))]),
            vec![3, 4, 5]
        );
    }
}
