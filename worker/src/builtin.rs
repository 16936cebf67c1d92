//! Built-in handlers of the `cadenza-worker` binary, and the `--serve job_type=builtin` spec
//! (`--serve job_type=xxl:APP/HANDLER` runs the job on an XXL-JOB executor: [`crate::xxl::bridge`]).
//!
//! | builtin | params | outcome |
//! |---|---|---|
//! | `noop` | ignored | succeeds at once |
//! | `sleep` | milliseconds | succeeds after sleeping (stops early when cancelled) |
//! | `fail` | message | fails with the params as message |
//! | `shell` | a command line for `sh -c` | exit code 0 succeeds; stdout and stderr are the run log; JSON the command writes to the file `$CADENZA_OUTPUT` is the run's output |
//! | `http` | JSON `{"url", "method"?, "body"?, "headers"?}` | a 2xx status succeeds |
//!
//! `shell` passes the run to the command in environment variables: `CADENZA_TRIGGER_ID`,
//! `CADENZA_JOB_ID`, `CADENZA_JOB_TYPE`, `CADENZA_ATTEMPT`, `CADENZA_SHARD_INDEX`,
//! `CADENZA_SHARD_TOTAL`; `CADENZA_UPSTREAM`, the outputs of a workflow node's parents as JSON
//! text (`{}` for other runs); `CADENZA_WORKFLOW_RUN_ID` and `CADENZA_WORKFLOW_NODE` for a
//! workflow node; and `CADENZA_OUTPUT`, the path of an empty file in a directory of the run's own
//! (removed when the run ends). If the command exits 0 having written JSON to that file, that
//! JSON is the run's output (at most [`MAX_OUTPUT_BYTES`]); content that is not JSON fails the
//! run.
//!
//! `http` reaches only the addresses its [`AddressPolicy`] allows (by default not loopback,
//! link-local, unspecified, multicast or cloud metadata addresses; see [`net_policy`]), checks
//! every redirect the same way, and keeps at most [`MAX_HTTP_BODY`] bytes of the answer.

use std::collections::BTreeMap;
use std::fmt;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cadenza_schemas::{JobType, JobTypeError, MAX_OUTPUT_BYTES};
use futures::future::BoxFuture;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::handler::{Handler, Outcome, RunContext, RunLog};
use crate::net_policy::{self, AddressPolicy};
use crate::xxl::bridge::{XxlTarget, XxlTargetError};

/// The built-in handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// Succeeds at once.
    Noop,
    /// Sleeps `params` milliseconds.
    Sleep,
    /// Fails with `params` as the message.
    Fail,
    /// Runs `params` with `sh -c`.
    Shell,
    /// Sends the HTTP request described by `params` (JSON).
    Http,
}

impl Builtin {
    /// Every builtin.
    pub const ALL: &'static [Builtin] = &[
        Builtin::Noop,
        Builtin::Sleep,
        Builtin::Fail,
        Builtin::Shell,
        Builtin::Http,
    ];

    /// The name used in `--serve`.
    pub const fn name(self) -> &'static str {
        match self {
            Builtin::Noop => "noop",
            Builtin::Sleep => "sleep",
            Builtin::Fail => "fail",
            Builtin::Shell => "shell",
            Builtin::Http => "http",
        }
    }

    /// A handler running this builtin.
    pub fn handler(self, options: &BuiltinOptions) -> Result<Arc<dyn Handler>, BuiltinError> {
        Ok(match self {
            Builtin::Noop => Arc::new(Noop),
            Builtin::Sleep => Arc::new(Sleep),
            Builtin::Fail => Arc::new(Fail),
            Builtin::Shell => Arc::new(Shell),
            Builtin::Http => Arc::new(Http::with_policy(options.http_policy.clone())?),
        })
    }
}

/// Settings of the builtins.
#[derive(Debug, Clone)]
pub struct BuiltinOptions {
    /// The addresses `http` may reach (`CADENZA_HTTP_ALLOW`, `CADENZA_HTTP_DENY`).
    pub http_policy: AddressPolicy,
}

impl Default for BuiltinOptions {
    fn default() -> Self {
        Self {
            http_policy: AddressPolicy::default_for(HTTP_SETTINGS),
        }
    }
}

/// Prefix of the settings of the `http` builtin's address policy.
pub const HTTP_SETTINGS: &str = "CADENZA_HTTP";

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A builtin could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
}

fn known() -> String {
    Builtin::ALL
        .iter()
        .map(|b| b.name())
        .chain(["xxl:APP/HANDLER"])
        .collect::<Vec<_>>()
        .join(", ")
}

/// A bad `--serve` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeSpecError {
    /// No `=` between job type and builtin.
    #[error("{0:?} is not JOB_TYPE=BUILTIN (missing '=')")]
    MissingEquals(String),
    /// The job type is not valid.
    #[error("bad job type {job_type:?} in {spec:?}: {source}")]
    JobType {
        /// The whole entry.
        spec: String,
        /// The job type part.
        job_type: String,
        /// What is wrong with it.
        source: JobTypeError,
    },
    /// No builtin has that name.
    #[error("unknown builtin {name:?} in {spec:?}; expected one of: {known}")]
    UnknownBuiltin {
        /// The whole entry.
        spec: String,
        /// The builtin part.
        name: String,
        /// The builtins that exist.
        known: String,
    },
    /// `xxl:` without a valid `APP/HANDLER`.
    #[error("bad xxl target in {spec:?}: {source}")]
    Xxl {
        /// The whole entry.
        spec: String,
        /// What is wrong with it.
        source: XxlTargetError,
    },
}

impl FromStr for Builtin {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Builtin::ALL
            .iter()
            .copied()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown builtin {s:?}; expected one of: {}", known()))
    }
}

/// What serves a job type in `--serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// A builtin handler.
    Builtin(Builtin),
    /// A handler of an XXL-JOB executor app, through the bridge.
    Xxl(XxlTarget),
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Served::Builtin(b) => write!(f, "{b}"),
            Served::Xxl(t) => write!(f, "xxl:{t}"),
        }
    }
}

/// One `job_type=builtin` (or `job_type=xxl:APP/HANDLER`) entry of `--serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSpec {
    /// The job type to serve.
    pub job_type: JobType,
    /// What serves it.
    pub served: Served,
}

impl FromStr for ServeSpec {
    type Err = ServeSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let spec = spec.trim();
        let (job_type, name) = spec
            .split_once('=')
            .ok_or_else(|| ServeSpecError::MissingEquals(spec.to_owned()))?;
        let (job_type, name) = (job_type.trim(), name.trim());
        let job_type = JobType::parse(job_type).map_err(|source| ServeSpecError::JobType {
            spec: spec.to_owned(),
            job_type: job_type.to_owned(),
            source,
        })?;
        let served = if let Some(target) = name.strip_prefix("xxl:") {
            Served::Xxl(target.parse().map_err(|source| ServeSpecError::Xxl {
                spec: spec.to_owned(),
                source,
            })?)
        } else {
            Served::Builtin(name.parse().map_err(|_| ServeSpecError::UnknownBuiltin {
                spec: spec.to_owned(),
                name: name.to_owned(),
                known: known(),
            })?)
        };
        Ok(ServeSpec { job_type, served })
    }
}

impl fmt::Display for ServeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.job_type, self.served)
    }
}

/// `noop`: succeeds at once.
#[derive(Debug, Clone, Copy)]
pub struct Noop;

impl Handler for Noop {
    fn call(&self, _ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async { Outcome::success() })
    }
}

/// `sleep`: sleeps `params` milliseconds; stops early when cancelled.
#[derive(Debug, Clone, Copy)]
pub struct Sleep;

impl Handler for Sleep {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            let ms: u64 = match ctx.params.trim().parse() {
                Ok(ms) => ms,
                Err(_) => {
                    return Outcome::failure(format!(
                        "sleep: params must be a whole number of milliseconds, got {:?}",
                        ctx.params
                    ))
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                    ctx.log(format!("slept {ms} ms"));
                    Outcome::success()
                }
                _ = ctx.cancel.cancelled() => {
                    ctx.log("sleep interrupted: the run was cancelled");
                    Outcome::failure("sleep interrupted")
                }
            }
        })
    }
}

/// `fail`: fails with `params` as the message.
#[derive(Debug, Clone, Copy)]
pub struct Fail;

impl Handler for Fail {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            if ctx.params.is_empty() {
                Outcome::failure("failed on purpose (builtin fail)")
            } else {
                Outcome::failure(ctx.params)
            }
        })
    }
}

/// Longest line kept from a child's output; longer runs without a newline are split.
const MAX_LINE: usize = 16 * 1024;
/// After the shell exits, how long to wait for its output pipes to close (a background process
/// may hold them open).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);
/// The same after the shell was killed: what is left to read is of little use.
const KILLED_OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// `shell`: runs `params` with `sh -c`; stdout and stderr go to the run log (bounded by the run
/// log limit, oldest lines dropped); exit code 0 succeeds. `sh` leads a process group of its
/// own, and the whole group is killed (SIGKILL) when the run is cancelled (timeout, cover) or
/// abandoned, and when the run ends: nothing the command started outlives its run.
///
/// The command gets the run in environment variables (see the [module](self) documentation):
/// among them `CADENZA_UPSTREAM`, the upstream of a workflow node as JSON text (`{}` when the run
/// has none), and `CADENZA_OUTPUT`, the path of an empty file in a temporary directory of the
/// run's own, removed when the run ends. A command that exits 0 having written JSON there
/// succeeds with that JSON as its output ([`Outcome::SuccessWith`]); a file left empty (or
/// holding only whitespace) means no output; anything else fails the run, as does a file of more
/// than [`MAX_OUTPUT_BYTES`]. An upstream too big for an environment variable (128 KiB on Linux)
/// fails the run before the command starts.
#[derive(Debug, Clone, Copy)]
pub struct Shell;

impl Handler for Shell {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        Box::pin(run_shell(ctx))
    }
}

async fn pump(mut r: impl AsyncRead + Unpin, log: RunLog) {
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                log.push(&String::from_utf8_lossy(&line));
                line.clear();
            } else {
                line.push(b);
                if line.len() >= MAX_LINE {
                    log.push(&String::from_utf8_lossy(&line));
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        log.push(&String::from_utf8_lossy(&line));
    }
}

/// The name of the file, in the run's temporary directory, that `CADENZA_OUTPUT` names.
const OUTPUT_FILE: &str = "output.json";
/// The longest value of `CADENZA_UPSTREAM`: Linux takes at most 128 KiB per environment string,
/// `NAME=value` and its terminating NUL included.
const MAX_UPSTREAM_ENV: usize = 128 * 1024 - "CADENZA_UPSTREAM=".len() - 1;

async fn run_shell(ctx: RunContext) -> Outcome {
    if ctx.params.trim().is_empty() {
        return Outcome::failure("shell: params must be a command line for sh -c; got nothing");
    }
    let upstream = match &ctx.upstream {
        Some(u) => u.to_string(),
        None => "{}".to_owned(),
    };
    if upstream.len() > MAX_UPSTREAM_ENV {
        return Outcome::failure(format!(
            "shell: the upstream is {} bytes of JSON, more than the environment variable \
             CADENZA_UPSTREAM can hold ({MAX_UPSTREAM_ENV}); have the parent nodes output less \
             (store large results elsewhere and pass references)",
            upstream.len()
        ));
    }
    // Removed when dropped, however this function ends.
    let dir = match tempfile::Builder::new().prefix("cadenza-run-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            return Outcome::failure(format!(
                "shell: cannot create a temporary directory for CADENZA_OUTPUT: {e}"
            ))
        }
    };
    let output_path = dir.path().join(OUTPUT_FILE);
    if let Err(e) = tokio::fs::File::create(&output_path).await {
        return Outcome::failure(format!(
            "shell: cannot create the CADENZA_OUTPUT file {}: {e}",
            output_path.display()
        ));
    }
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(&ctx.params)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("CADENZA_TRIGGER_ID", ctx.trigger_id.to_string())
        .env("CADENZA_JOB_ID", ctx.job_id.to_string())
        .env("CADENZA_JOB_TYPE", ctx.job_type.as_str())
        .env("CADENZA_ATTEMPT", ctx.attempt.to_string())
        .env("CADENZA_SHARD_INDEX", ctx.shard_index.to_string())
        .env("CADENZA_SHARD_TOTAL", ctx.shard_total.to_string())
        .env("CADENZA_UPSTREAM", upstream)
        .env("CADENZA_OUTPUT", &output_path)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(id) = ctx.workflow_run_id {
        command.env("CADENZA_WORKFLOW_RUN_ID", id.to_string());
    }
    if let Some(node) = &ctx.workflow_node {
        command.env("CADENZA_WORKFLOW_NODE", node);
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::failure(format!("shell: cannot start sh: {e}")),
    };
    // Kills the group however this function ends (including the task being aborted).
    let group = ProcessGroup(child.id());
    let mut pumps = tokio::task::JoinSet::new();
    if let Some(out) = child.stdout.take() {
        pumps.spawn(pump(out, ctx.log_handle()));
    }
    if let Some(err) = child.stderr.take() {
        pumps.spawn(pump(err, ctx.log_handle()));
    }
    let status = tokio::select! {
        s = child.wait() => s,
        _ = ctx.cancel.cancelled() => {
            group.kill();
            let _ = child.start_kill();
            let _ = child.wait().await;
            let _ = tokio::time::timeout(KILLED_OUTPUT_GRACE, async {
                while pumps.join_next().await.is_some() {}
            })
            .await;
            ctx.log("shell: killed, the run was cancelled");
            return Outcome::failure("shell: killed, the run was cancelled");
        }
    };
    if tokio::time::timeout(OUTPUT_GRACE, async {
        while pumps.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        ctx.log("shell: output still open after the command exited (a background process?); killing its process group");
        group.kill();
        pumps.abort_all();
    }
    drop(group);
    match status {
        Ok(s) if s.success() => match read_output(&output_path).await {
            Ok(None) => Outcome::success(),
            Ok(Some(output)) => Outcome::success_with(output),
            Err(why) => Outcome::failure(why),
        },
        Ok(s) => match s.code() {
            Some(code) => Outcome::failure(format!("exit code {code}")),
            None => Outcome::failure(signal_message(&s)),
        },
        Err(e) => Outcome::failure(format!("shell: waiting for sh failed: {e}")),
    }
}

/// The JSON the command wrote to the `CADENZA_OUTPUT` file at `path`: `None` when it left the
/// file empty (or only whitespace) or removed it; an error message (for the run) when the file
/// is larger than [`MAX_OUTPUT_BYTES`] or not JSON.
async fn read_output(path: &std::path::Path) -> Result<Option<serde_json::Value>, String> {
    let file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("shell: cannot read CADENZA_OUTPUT: {e}")),
    };
    let too_big = |bytes: String| {
        format!(
            "shell: the command wrote {bytes} bytes to CADENZA_OUTPUT; at most \
             {MAX_OUTPUT_BYTES} are kept (write less, or store it elsewhere and pass a reference)"
        )
    };
    let len = file
        .metadata()
        .await
        .map_err(|e| format!("shell: cannot read CADENZA_OUTPUT: {e}"))?
        .len();
    // Bounded read: a file that grows meanwhile is not read whole.
    let limit = MAX_OUTPUT_BYTES as u64;
    if len > limit {
        return Err(too_big(len.to_string()));
    }
    let mut text = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut text)
        .await
        .map_err(|e| format!("shell: cannot read CADENZA_OUTPUT: {e}"))?;
    if text.len() as u64 > limit {
        // It grew after it was measured.
        return Err(too_big(format!("more than {limit}")));
    }
    if text.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&text).map(Some).map_err(|e| {
        format!("shell: the command exited 0 but CADENZA_OUTPUT does not hold JSON: {e}")
    })
}

/// A process group led by a child started with `process_group(0)`: its id is the child's pid.
/// Dropping it kills the group (processes already gone are no error).
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            use nix::sys::signal::{killpg, Signal};
            use nix::unistd::Pid;
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(unix)]
fn signal_message(s: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match s.signal() {
        Some(sig) => format!("killed by signal {sig}"),
        None => format!("ended abnormally: {s}"),
    }
}

#[cfg(not(unix))]
fn signal_message(s: &std::process::ExitStatus) -> String {
    format!("ended abnormally: {s}")
}

/// Most of a response body kept in the run log: an excerpt for diagnosis, not a way to read
/// documents through the worker.
pub const MAX_HTTP_BODY: usize = 4 * 1024;
/// Redirects `http` follows, each checked against its address policy.
const MAX_REDIRECTS: usize = 10;

/// `http`: params are JSON `{"url": "...", "method": "GET", "body": ..., "headers": {...}}`
/// (`method` defaults to GET; a string `body` is sent as is, any other JSON value as JSON). A 2xx
/// status succeeds; the status and the start of the body go to the run log. Only addresses its
/// [`AddressPolicy`] allows are reached, redirects included.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    policy: AddressPolicy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpParams {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    body: Option<serde_json::Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

impl Http {
    /// A handler with its own connection pool and the default address policy.
    pub fn new() -> Result<Self, reqwest::Error> {
        Self::with_policy(AddressPolicy::default_for(HTTP_SETTINGS))
    }

    /// A handler that reaches only the addresses `policy` allows.
    pub fn with_policy(policy: AddressPolicy) -> Result<Self, reqwest::Error> {
        let client = policy
            .client_builder()
            .redirect(policy.redirect_policy(MAX_REDIRECTS))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("cadenza-worker/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, policy })
    }
}

impl Handler for Http {
    fn call(&self, ctx: RunContext) -> BoxFuture<'static, Outcome> {
        let client = self.client.clone();
        let policy = self.policy.clone();
        Box::pin(async move {
            let cancel = ctx.cancel.clone();
            tokio::select! {
                outcome = run_http(&client, &policy, &ctx) => outcome,
                _ = cancel.cancelled() => Outcome::failure("http: the run was cancelled"),
            }
        })
    }
}

/// The URL as shown in the run log: without credentials, query or fragment (they may carry
/// tokens).
fn shown_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

async fn run_http(client: &reqwest::Client, policy: &AddressPolicy, ctx: &RunContext) -> Outcome {
    let params: HttpParams = match serde_json::from_str(&ctx.params) {
        Ok(p) => p,
        Err(e) => {
            return Outcome::failure(format!(
                r#"http: params must be JSON {{"url": "...", "method"?: "GET", "body"?: ..., "headers"?: {{...}}}}: {e}"#
            ))
        }
    };
    let method_name = params
        .method
        .as_deref()
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = match reqwest::Method::from_bytes(method_name.as_bytes()) {
        Ok(m) => m,
        Err(_) => return Outcome::failure(format!("http: bad method {method_name:?}")),
    };
    let url = match reqwest::Url::parse(&params.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        Ok(u) => {
            return Outcome::failure(format!(
                "http: url must be http:// or https://, not {}:",
                u.scheme()
            ))
        }
        Err(e) => return Outcome::failure(format!("http: url is not a URL: {e}")),
    };
    let shown = shown_url(&url);
    // A host that is an IP address is not resolved, so the resolver cannot check it.
    if let Err(denied) = policy.check_url(&url) {
        ctx.log(format!("{method_name} {shown} refused: {denied}"));
        return Outcome::failure(format!("http: {denied}"));
    }
    let mut req = client.request(method, url);
    for (k, v) in &params.headers {
        req = req.header(k, v);
    }
    req = match params.body {
        None | Some(serde_json::Value::Null) => req,
        Some(serde_json::Value::String(s)) => req.body(s),
        Some(v) => req.json(&v),
    };
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            let why = net_policy::describe(&e);
            ctx.log(format!("{method_name} {shown} failed: {why}"));
            return Outcome::failure(format!("http: {method_name} {shown} failed: {why}"));
        }
    };
    let status = resp.status();
    ctx.log(format!("{method_name} {shown} -> {status}"));
    let mut body: Vec<u8> = Vec::new();
    let mut truncated = false;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_HTTP_BODY.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if chunk.len() > room {
                    truncated = true;
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                ctx.log(format!(
                    "http: reading the body failed: {}",
                    net_policy::describe(&e)
                ));
                break;
            }
        }
    }
    if !body.is_empty() {
        ctx.log(String::from_utf8_lossy(&body));
    }
    if truncated {
        ctx.log(format!("[body truncated at {MAX_HTTP_BODY} bytes]"));
    }
    if status.is_success() {
        Outcome::Success(Some(format!("HTTP {status}")))
    } else {
        Outcome::failure(format!("HTTP {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio_util::sync::CancellationToken;

    fn ctx(params: &str) -> (RunContext, RunLog, CancellationToken) {
        let mut t = crate::testing::trigger(0);
        t.params = params.to_owned();
        let cancel = CancellationToken::new();
        let log = RunLog::new(4096);
        (
            RunContext::new(&t, cancel.clone(), log.clone()),
            log,
            cancel,
        )
    }

    #[test]
    fn serve_specs_parse_and_name_the_bad_part() {
        assert_eq!(
            "demo.echo=noop".parse::<ServeSpec>().unwrap(),
            ServeSpec {
                job_type: JobType::parse("demo.echo").unwrap(),
                served: Served::Builtin(Builtin::Noop)
            }
        );
        assert_eq!(
            " a = shell ".parse::<ServeSpec>().unwrap().served,
            Served::Builtin(Builtin::Shell)
        );
        let xxl = "billing.invoice=xxl:billing-app/invoiceJobHandler"
            .parse::<ServeSpec>()
            .unwrap();
        assert_eq!(
            xxl.to_string(),
            "billing.invoice=xxl:billing-app/invoiceJobHandler"
        );
        let e = "b=xxl:billing-app"
            .parse::<ServeSpec>()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("bad xxl target in \"b=xxl:billing-app\""),
            "{e}"
        );
        assert_eq!(
            "demo.echo".parse::<ServeSpec>().unwrap_err().to_string(),
            "\"demo.echo\" is not JOB_TYPE=BUILTIN (missing '=')"
        );
        let e = "demo=teleport"
            .parse::<ServeSpec>()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown builtin \"teleport\" in \"demo=teleport\"; expected one of: noop, sleep, fail, shell, http, xxl:APP/HANDLER"
        );
        let e = "bad type=noop"
            .parse::<ServeSpec>()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "bad job type \"bad type\" in \"bad type=noop\": job_type may only contain"
            ),
            "{e}"
        );
        assert!(matches!(
            "=noop".parse::<ServeSpec>(),
            Err(ServeSpecError::JobType { .. })
        ));
        for b in Builtin::ALL {
            assert_eq!(b.name().parse::<Builtin>().unwrap(), *b);
        }
    }

    #[tokio::test]
    async fn noop_and_fail() {
        assert_eq!(Noop.call(ctx("x").0).await, Outcome::success());
        assert_eq!(Fail.call(ctx("nope").0).await, Outcome::failure("nope"));
        assert_eq!(
            Fail.call(ctx("").0).await,
            Outcome::failure("failed on purpose (builtin fail)")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_sleeps_honours_cancel_and_rejects_bad_params() {
        let start = tokio::time::Instant::now();
        let (c, log, _) = ctx("250");
        assert_eq!(Sleep.call(c).await, Outcome::success());
        assert_eq!(start.elapsed(), Duration::from_millis(250));
        assert_eq!(log.contents().as_deref(), Some("slept 250 ms"));

        let (c, _, cancel) = ctx("100000");
        let run = tokio::spawn(Sleep.call(c));
        tokio::time::sleep(Duration::from_millis(5)).await;
        cancel.cancel();
        assert_eq!(run.await.unwrap(), Outcome::failure("sleep interrupted"));

        let Outcome::Failure(m) = Sleep.call(ctx("soon").0).await else {
            panic!("bad params must fail");
        };
        assert_eq!(
            m,
            "sleep: params must be a whole number of milliseconds, got \"soon\""
        );
    }

    #[tokio::test]
    async fn shell_logs_output_and_uses_the_exit_code() {
        let (c, log, _) = ctx("echo out; echo err >&2; echo \"id=$CADENZA_TRIGGER_ID\"; exit 0");
        assert_eq!(Shell.call(c).await, Outcome::success());
        let log = log.contents().unwrap();
        for want in ["out", "err", "id=1"] {
            assert!(
                log.lines().any(|l| l == want),
                "{want:?} missing from {log:?}"
            );
        }
        let (c, log, _) = ctx("printf 'partial'; exit 3");
        assert_eq!(Shell.call(c).await, Outcome::failure("exit code 3"));
        assert_eq!(log.contents().as_deref(), Some("partial"));
        assert_eq!(
            Shell.call(ctx("  ").0).await,
            Outcome::failure("shell: params must be a command line for sh -c; got nothing")
        );
    }

    /// A context for a run of workflow node `load` (workflow run 12) with `upstream`.
    fn node_ctx(params: &str, upstream: serde_json::Value) -> (RunContext, RunLog) {
        let mut t = crate::testing::trigger(0);
        t.params = params.to_owned();
        t.kind = cadenza_schemas::TriggerKind::Workflow;
        t.workflow_run_id = Some(12);
        t.workflow_node = Some("load".into());
        t.upstream = Some(upstream);
        let log = RunLog::new(64 * 1024);
        (
            RunContext::new(&t, CancellationToken::new(), log.clone()),
            log,
        )
    }

    #[tokio::test]
    async fn shell_output_file_becomes_the_runs_output() {
        let upstream = serde_json::json!({ "extract": { "file": "a.csv" }, "check": null });
        let (c, log) = node_ctx(
            r#"printf '{"rows":42}' > "$CADENZA_OUTPUT"; echo "$CADENZA_UPSTREAM"
               echo "node=$CADENZA_WORKFLOW_NODE run=$CADENZA_WORKFLOW_RUN_ID"
               echo "dir=$(dirname "$CADENZA_OUTPUT")""#,
            upstream.clone(),
        );
        assert_eq!(
            Shell.call(c).await,
            Outcome::success_with(serde_json::json!({ "rows": 42 }))
        );
        let log = log.contents().unwrap();
        let lines: Vec<&str> = log.lines().collect();
        // One line of JSON (its keys in either order).
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(lines[0]).unwrap(),
            upstream
        );
        assert_eq!(lines[1], "node=load run=12");
        // The run's directory is gone once the run is over.
        let dir = lines[2].strip_prefix("dir=").unwrap();
        assert!(dir.contains("cadenza-run-"), "{dir}");
        assert!(
            !std::path::Path::new(dir).exists(),
            "{dir} outlived its run"
        );
    }

    #[tokio::test]
    async fn shell_without_upstream_or_output() {
        // Not a workflow node: `{}` upstream, no workflow variables; an untouched (or blank)
        // output file is no output.
        let (c, log, _) = ctx(
            r#"echo "$CADENZA_UPSTREAM [${CADENZA_WORKFLOW_NODE-unset}] [${CADENZA_WORKFLOW_RUN_ID-unset}]"
               test -f "$CADENZA_OUTPUT" && test ! -s "$CADENZA_OUTPUT" && echo empty"#,
        );
        assert_eq!(Shell.call(c).await, Outcome::success());
        assert_eq!(log.contents().as_deref(), Some("{} [unset] [unset]\nempty"));
        let (c, _, _) = ctx(r#"echo "  " > "$CADENZA_OUTPUT""#);
        assert_eq!(Shell.call(c).await, Outcome::success());
        let (c, _, _) = ctx(r#"rm "$CADENZA_OUTPUT""#);
        assert_eq!(Shell.call(c).await, Outcome::success());
    }

    #[tokio::test]
    async fn shell_output_that_is_not_json_or_too_big_fails_the_run() {
        let (c, _, _) = ctx(r#"echo 'rows: 42' > "$CADENZA_OUTPUT""#);
        assert_eq!(
            Shell.call(c).await,
            Outcome::failure(
                "shell: the command exited 0 but CADENZA_OUTPUT does not hold JSON: expected \
                 value at line 1 column 1"
            )
        );
        let (c, _, _) =
            ctx(r#"printf '"%s"' "$(head -c 20478 /dev/zero | tr '\0' x)" > "$CADENZA_OUTPUT""#);
        assert_eq!(
            Shell.call(c).await,
            Outcome::failure(
                "shell: the command wrote 20480 bytes to CADENZA_OUTPUT; at most 16384 are kept \
                 (write less, or store it elsewhere and pass a reference)"
            )
        );
        // A failing command's output is not looked at.
        let (c, _, _) = ctx(r#"echo '{"rows":1}' > "$CADENZA_OUTPUT"; exit 3"#);
        assert_eq!(Shell.call(c).await, Outcome::failure("exit code 3"));
    }

    #[tokio::test]
    async fn shell_refuses_an_upstream_too_big_for_the_environment() {
        let big = serde_json::json!({ "a": "x".repeat(MAX_UPSTREAM_ENV) });
        let (c, _) = node_ctx("true", big);
        let Outcome::Failure(m) = Shell.call(c).await else {
            panic!("an oversized upstream must fail");
        };
        assert!(
            m.starts_with(&format!(
                "shell: the upstream is {} bytes of JSON, more than the environment variable \
                 CADENZA_UPSTREAM can hold",
                MAX_UPSTREAM_ENV + 8
            )),
            "{m}"
        );
    }

    #[tokio::test]
    async fn shell_is_killed_on_cancel() {
        let (c, log, cancel) = ctx("echo started; exec sleep 30");
        let run = tokio::spawn(Shell.call(c));
        // Wait for the command to be running (its first line is in the log).
        while log.contents().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let t = std::time::Instant::now();
        cancel.cancel();
        assert_eq!(
            run.await.unwrap(),
            Outcome::failure("shell: killed, the run was cancelled")
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[cfg(target_os = "linux")]
    fn alive(pid: &str) -> bool {
        // A zombie (killed, not yet reaped by its new parent) counts as dead.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
            .unwrap_or(false)
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn shell_cancel_kills_the_whole_process_group() {
        // A pipeline and a background grandchild: killing `sh` alone would leave them running.
        let (c, log, cancel) = ctx("sleep 30 & echo bg=$!; sleep 30 | cat");
        let run = tokio::spawn(Shell.call(c));
        let pid = loop {
            if let Some(l) = log.contents() {
                break l.strip_prefix("bg=").unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(alive(&pid));
        cancel.cancel();
        run.await.unwrap();
        let t = std::time::Instant::now();
        while alive(&pid) && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!alive(&pid), "background process {pid} survived the cancel");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn shell_leaves_nothing_behind_when_it_exits() {
        let (c, log, _) = ctx("sleep 30 > /dev/null 2>&1 & echo bg=$!");
        assert_eq!(Shell.call(c).await, Outcome::success());
        let pid = log
            .contents()
            .unwrap()
            .strip_prefix("bg=")
            .unwrap()
            .to_owned();
        let t = std::time::Instant::now();
        while alive(&pid) && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!alive(&pid), "background process {pid} outlived its run");
    }

    /// Serves one canned HTTP response; returns its URL and the request it received.
    async fn one_shot_server(response: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            // Read headers and a small body (good enough for the requests below).
            loop {
                let n = sock.read(&mut buf).await.unwrap();
                req.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&req);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if req.len() >= end + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            sock.write_all(response.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
        (url, task)
    }

    /// An `http` handler that may reach this machine's loopback addresses (the test servers).
    fn http_allowing_loopback() -> Http {
        let allow = vec![
            net_policy::parse_net("127.0.0.0/8").unwrap(),
            net_policy::parse_net("::1").unwrap(),
        ];
        Http::with_policy(AddressPolicy::new(allow, Vec::new(), HTTP_SETTINGS)).unwrap()
    }

    #[tokio::test]
    async fn http_succeeds_on_2xx_and_logs_status_and_body() {
        let (url, server) = one_shot_server(
            "HTTP/1.1 201 Created\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
        )
        .await;
        let params =
            serde_json::json!({"url": url, "method": "post", "body": {"a": 1}}).to_string();
        let (c, log, _) = ctx(&params);
        let http = http_allowing_loopback();
        assert_eq!(
            http.call(c).await,
            Outcome::Success(Some("HTTP 201 Created".into()))
        );
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /hook HTTP/1.1"), "{req}");
        assert!(req.ends_with(r#"{"a":1}"#), "{req}");
        assert_eq!(
            log.contents().unwrap(),
            format!("POST {url} -> 201 Created\nhello")
        );
    }

    #[tokio::test]
    async fn http_fails_on_other_statuses_and_bad_params() {
        let (url, server) = one_shot_server(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
        let http = http_allowing_loopback();
        let params = serde_json::json!({ "url": url }).to_string();
        assert_eq!(
            http.call(ctx(&params).0).await,
            Outcome::failure("HTTP 503 Service Unavailable")
        );
        assert!(server.await.unwrap().starts_with("GET /hook"));
        let Outcome::Failure(m) = http.call(ctx("not json").0).await else {
            panic!("bad params must fail");
        };
        assert!(m.starts_with("http: params must be JSON"), "{m}");
        let params = serde_json::json!({ "url": "file:///etc/passwd" }).to_string();
        assert_eq!(
            http.call(ctx(&params).0).await,
            Outcome::failure("http: url must be http:// or https://, not file:")
        );
    }

    /// Counts the connections made to a listener on 127.0.0.1 (answering nothing).
    async fn counting_listener() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(sock);
            }
        });
        (port, count)
    }

    #[tokio::test]
    async fn http_refuses_loopback_and_metadata_addresses_by_default() {
        let (port, connections) = counting_listener().await;
        let http = Http::new().unwrap();
        for (url, want) in [
            (
                format!("http://127.0.0.1:{port}/admin?token=s3cret"),
                "http: address 127.0.0.1, a loopback address (127.0.0.0/8), denied unless \
                 CADENZA_HTTP_ALLOW lists it"
                    .to_owned(),
            ),
            (
                format!("http://localhost:{port}/admin"),
                format!(
                    "http: GET http://localhost:{port}/admin failed: localhost resolves to 127.0.0.1, \
                     a loopback address (127.0.0.0/8), denied unless CADENZA_HTTP_ALLOW lists it"
                ),
            ),
            (
                "http://169.254.169.254/latest/meta-data/".to_owned(),
                "http: address 169.254.169.254, a link-local address (169.254.0.0/16), denied \
                 unless CADENZA_HTTP_ALLOW lists it"
                    .to_owned(),
            ),
        ] {
            let params = serde_json::json!({ "url": url }).to_string();
            let (c, log, _) = ctx(&params);
            let Outcome::Failure(m) = http.call(c).await else {
                panic!("{url} must be refused");
            };
            // `localhost` may resolve to ::1 first.
            let m = m.replace("::1, a loopback address (::1/128)", "127.0.0.1, a loopback address (127.0.0.0/8)");
            assert_eq!(m, want);
            assert!(!log.contents().unwrap_or_default().contains("s3cret"));
        }
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn http_checks_every_redirect() {
        let (url, server) = one_shot_server(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://169.254.169.254/latest/meta-data/\r\n\
             content-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
        let params = serde_json::json!({ "url": url }).to_string();
        let Outcome::Failure(m) = http_allowing_loopback().call(ctx(&params).0).await else {
            panic!("a redirect to a metadata address must fail");
        };
        server.await.unwrap();
        assert_eq!(
            m,
            format!(
                "http: GET {url} failed: redirect refused: address 169.254.169.254, a link-local \
                 address (169.254.0.0/16), denied unless CADENZA_HTTP_ALLOW lists it"
            )
        );
    }

    #[tokio::test]
    async fn http_keeps_only_an_excerpt_of_the_body() {
        let big = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: 10000\r\nconnection: close\r\n\r\n{}",
            "x".repeat(10_000)
        );
        let (url, server) = one_shot_server(Box::leak(big.into_boxed_str())).await;
        let params = serde_json::json!({ "url": url }).to_string();
        let mut t = crate::testing::trigger(0);
        t.params = params;
        let log = RunLog::new(64 * 1024);
        let c = RunContext::new(&t, CancellationToken::new(), log.clone());
        assert!(matches!(
            http_allowing_loopback().call(c).await,
            Outcome::Success(_)
        ));
        server.await.unwrap();
        let log = log.contents().unwrap();
        assert_eq!(
            log.matches('x').count(),
            MAX_HTTP_BODY,
            "{} bytes of log",
            log.len()
        );
        assert!(log.ends_with("[body truncated at 4096 bytes]"), "{log}");
    }
}
