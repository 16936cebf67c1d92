//! XXL-JOB's executor protocol (2.4.x) on the wire: the JSON bodies both sides send, and a
//! client for the calls an admin makes to an executor (`/run`, `/kill`, `/beat`, `/idleBeat`,
//! `/log`).
//!
//! Field names are Java's (camelCase), spellings included: a trigger carries `logDateTime`, a
//! callback and a log request `logDateTim`. Every answer is the envelope `{code, msg, content}`
//! with `code` 200 for success and 500 for failure (502 in a callback: timed out). Executors
//! differ in the details, so the client reads answers leniently: any content type, `msg` of
//! any JSON type, absent fields; but an answer that is not the envelope is an error naming what
//! came back.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The header both sides put the shared access token in.
pub const ACCESS_TOKEN_HEADER: &str = "XXL-JOB-ACCESS-TOKEN";
/// `code` of a successful answer or run.
pub const SUCCESS_CODE: i64 = 200;
/// `code` of a failed answer or run.
pub const FAIL_CODE: i64 = 500;
/// `handleCode` of a run the executor timed out (Java executors; others send 500).
pub const TIMEOUT_CODE: i64 = 502;
/// How long one call to an executor may take (XXL-JOB's own client uses 3 s).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The most of an unexpected answer quoted in an error.
const QUOTED: usize = 200;
/// The largest answer read from an executor (a `/log` page included).
pub const MAX_ANSWER_BYTES: usize = 2 * 1024 * 1024;

/// `POST /run`: one run for the executor's handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerParam {
    /// The job's id (executors keep one queue per job id, for the block strategy).
    pub job_id: i64,
    /// The handler's name on the executor.
    pub executor_handler: String,
    /// The job's parameters.
    pub executor_params: String,
    /// `SERIAL_EXECUTION`, `DISCARD_LATER` or `COVER_EARLY`.
    pub executor_block_strategy: String,
    /// Seconds; 0 is no limit.
    pub executor_timeout: i64,
    /// Identifies the run in callbacks and `/log`.
    pub log_id: i64,
    /// Milliseconds since the epoch; executors file the run's log under this date.
    pub log_date_time: i64,
    /// `BEAN`: the named handler runs.
    pub glue_type: String,
    /// GLUE jobs' source (empty for `BEAN`).
    pub glue_source: String,
    /// When the GLUE source last changed (0 for `BEAN`).
    pub glue_updatetime: i64,
    /// This executor's index in a sharding broadcast (0 otherwise).
    pub broadcast_index: u32,
    /// Executors in a sharding broadcast (1 otherwise).
    pub broadcast_total: u32,
}

/// `POST /kill` and `POST /idleBeat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobIdParam {
    /// The job.
    pub job_id: i64,
}

/// `POST /log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogParam {
    /// The trigger's `logDateTime` (Java executors find the log file by this date).
    pub log_date_tim: i64,
    /// The run.
    pub log_id: i64,
    /// 1 for the first line.
    pub from_line_num: i64,
}

/// What `/log` returns in `content`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LogResult {
    /// The first line returned.
    pub from_line_num: i64,
    /// The last line returned (equal to `from_line_num` when there was nothing new).
    pub to_line_num: i64,
    /// The lines, newline separated.
    pub log_content: Option<String>,
    /// Whether the end of the file was reached (the run may still be writing it).
    pub is_end: bool,
}

/// One item of `POST <admin>/api/callback` (the body is a list of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallbackParam {
    /// The run, as `logId` of its trigger.
    pub log_id: i64,
    /// The executor's own idea of the run's date; not used to match.
    #[serde(default)]
    pub log_date_tim: i64,
    /// 200 succeeded, 500 failed, 502 timed out.
    pub handle_code: i64,
    /// A string from Java executors; any JSON value from others.
    #[serde(default)]
    pub handle_msg: Value,
}

impl CallbackParam {
    /// `handle_msg` as text (`None` for null or empty).
    pub fn message(&self) -> Option<String> {
        text(&self.handle_msg)
    }

    /// The callback with its message cut to [`cadenza_schemas::MAX_MESSAGE_BYTES`] (with a
    /// note), as the run keeps it: small enough to log, to hand to the other bridges and to
    /// report.
    pub fn clipped(mut self) -> Self {
        if let Some(m) = self.message() {
            if m.len() > cadenza_schemas::MAX_MESSAGE_BYTES {
                self.handle_msg = Value::String(cadenza_schemas::clip_message(&m).into_owned());
            }
        }
        self
    }
}

/// `POST <admin>/api/registry` and `/api/registryRemove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryParam {
    /// `EXECUTOR`.
    pub registry_group: String,
    /// The executor's app name.
    pub registry_key: String,
    /// The executor's address, `http://host:port/`.
    pub registry_value: String,
}

/// The answer envelope of every call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReturnT {
    /// 200 or 500.
    pub code: i64,
    /// Why, or a note (any JSON; usually a string or null).
    #[serde(default)]
    pub msg: Value,
    /// The answer's data (`/log`'s [`LogResult`]).
    #[serde(default)]
    pub content: Value,
}

impl ReturnT {
    /// `{"code":200,"msg":null,"content":null}`.
    pub fn success() -> Self {
        Self {
            code: SUCCESS_CODE,
            msg: Value::Null,
            content: Value::Null,
        }
    }

    /// `{"code":500,"msg":…}`.
    pub fn fail(msg: impl Into<String>) -> Self {
        Self {
            code: FAIL_CODE,
            msg: Value::String(msg.into()),
            content: Value::Null,
        }
    }

    /// `msg` as text (`None` for null or empty).
    pub fn message(&self) -> Option<String> {
        text(&self.msg)
    }
}

/// A JSON value as a person reads it: strings bare, null and "" as nothing, the rest as JSON.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Why a call to an executor did not get a successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No connection could be made: the call never reached the executor.
    Unreachable {
        /// The executor called.
        address: String,
        /// What failed.
        reason: String,
    },
    /// The connection broke after the call was sent: the executor may have acted on it.
    Broken {
        /// The executor called.
        address: String,
        /// What failed.
        reason: String,
    },
    /// No answer within the call timeout.
    TimedOut {
        /// The executor called.
        address: String,
        /// The call timeout.
        after: Duration,
    },
    /// An HTTP status other than 200.
    Status {
        /// The executor called.
        address: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// HTTP 200, but not the `{code, msg}` envelope.
    Garbage {
        /// The executor called.
        address: String,
        /// The start of the body.
        body: String,
    },
    /// The envelope with a code other than 200: the executor said no (a wrong access token,
    /// an unknown handler, a discarded run, …).
    Refused {
        /// The executor called.
        address: String,
        /// The answer's code.
        code: i64,
        /// The answer's message.
        msg: Option<String>,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Unreachable { address, reason } => {
                write!(f, "executor {address} is unreachable: {reason}")
            }
            CallError::Broken { address, reason } => {
                write!(f, "the call to executor {address} broke off: {reason}")
            }
            CallError::TimedOut { address, after } => {
                write!(f, "executor {address} did not answer within {after:?}")
            }
            CallError::Status {
                address,
                status,
                body,
            } => write!(f, "executor {address} answered HTTP {status}: {body:?}"),
            CallError::Garbage { address, body } => write!(
                f,
                "executor {address} answered something that is not XXL-JOB's {{code, msg}}: {body:?}"
            ),
            CallError::Refused { address, code, msg } => write!(
                f,
                "executor {address} refused (code {code}): {}",
                msg.as_deref().unwrap_or("no message")
            ),
        }
    }
}

impl std::error::Error for CallError {}

impl CallError {
    /// Whether the executor may not be there (unreachable, silent, or the connection broke).
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            CallError::Unreachable { .. } | CallError::TimedOut { .. } | CallError::Broken { .. }
        )
    }

    /// Whether the call certainly never reached the executor (no connection could be made), so
    /// sending it elsewhere cannot run it twice.
    pub fn never_reached(&self) -> bool {
        matches!(self, CallError::Unreachable { .. })
    }
}

fn quote(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let mut cut: String = s.chars().take(QUOTED).collect();
    if s.chars().count() > QUOTED {
        cut.push('…');
    }
    cut
}

/// Reads an answer: HTTP 200 and the envelope, whatever the content type says.
pub fn read_answer(address: &str, status: u16, body: &[u8]) -> Result<ReturnT, CallError> {
    if status != 200 {
        return Err(CallError::Status {
            address: address.to_owned(),
            status,
            body: quote(body),
        });
    }
    serde_json::from_slice::<ReturnT>(body).map_err(|_| CallError::Garbage {
        address: address.to_owned(),
        body: quote(body),
    })
}

/// The prefix of the settings of the executor address policy (`CADENZA_XXL_EXECUTOR_ALLOW`,
/// `CADENZA_XXL_EXECUTOR_DENY`), named in its messages.
pub const EXECUTOR_SETTINGS: &str = "CADENZA_XXL_EXECUTOR";

/// An executor's address (what it registers, `http://10.0.0.5:9999/`) as a URL the bridge may
/// call: `http` or `https`, with a host, and with no user, query or fragment (a `#` or `?` in
/// an address would change the path the bridge calls). `policy` checks an address written as an
/// IP; a host name is checked when the call resolves it.
pub fn executor_url(
    address: &str,
    policy: &crate::net_policy::AddressPolicy,
) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(address.trim())
        .map_err(|e| format!("executor address {address:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "executor address {address:?}: only http and https are called"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("executor address {address:?} has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "executor address {address:?} carries credentials; register the address alone"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "executor address {address:?} has a query or a fragment ('?' or '#'); register the \
             address alone"
        ));
    }
    policy.check_url(&url).map_err(|d| d.to_string())?;
    Ok(url)
}

/// `address` (checked by [`executor_url`]) with `path` appended as its last segment.
fn call_url(
    address: &str,
    path: &str,
    policy: &crate::net_policy::AddressPolicy,
) -> Result<reqwest::Url, String> {
    let mut url = executor_url(address, policy)?;
    url.path_segments_mut()
        .map_err(|()| format!("executor address {address:?} cannot take a path"))?
        .pop_if_empty()
        .push(path);
    Ok(url)
}

/// The calls an admin makes to executors, with the access token and a timeout per call.
#[derive(Clone)]
pub struct ExecutorClient {
    http: reqwest::Client,
    token: Option<String>,
    timeout: Duration,
    policy: crate::net_policy::AddressPolicy,
}

impl fmt::Debug for ExecutorClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutorClient")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ExecutorClient {
    /// A client that sends `token` (if any), gives each call `timeout`, and calls only the
    /// addresses the default executor policy allows plus loopback (for tools and tests on one
    /// machine).
    pub fn new(token: Option<String>, timeout: Duration) -> Result<Self, reqwest::Error> {
        let loopback = ["127.0.0.0/8", "::1/128"]
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        Self::with_policy(
            token,
            timeout,
            crate::net_policy::AddressPolicy::new(loopback, Vec::new(), EXECUTOR_SETTINGS),
        )
    }

    /// A client that sends `token` (if any), gives each call `timeout`, and connects only to
    /// addresses `policy` allows (checked after resolution, as the `http` built-in does).
    pub fn with_policy(
        token: Option<String>,
        timeout: Duration,
        policy: crate::net_policy::AddressPolicy,
    ) -> Result<Self, reqwest::Error> {
        let http = policy
            .client_builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .build()?;
        Ok(Self {
            http,
            token: token.filter(|t| !t.trim().is_empty()),
            timeout,
            policy,
        })
    }

    /// The policy of the addresses this client calls.
    pub fn policy(&self) -> &crate::net_policy::AddressPolicy {
        &self.policy
    }

    async fn call<B: Serialize + ?Sized>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<ReturnT, CallError> {
        let url =
            call_url(address, path, &self.policy).map_err(|reason| CallError::Unreachable {
                address: address.to_owned(),
                reason,
            })?;
        let mut req = self
            .http
            .post(url)
            .header("Content-Type", "application/json;charset=UTF-8")
            .json(body);
        if let Some(token) = &self.token {
            req = req.header(ACCESS_TOKEN_HEADER, token);
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                CallError::TimedOut {
                    address: address.to_owned(),
                    after: self.timeout,
                }
            } else if e.is_connect() {
                CallError::Unreachable {
                    address: address.to_owned(),
                    reason: error_chain(&e),
                }
            } else {
                CallError::Broken {
                    address: address.to_owned(),
                    reason: error_chain(&e),
                }
            }
        };
        let mut resp = req.send().await.map_err(failed)?;
        let status = resp.status().as_u16();
        // Read at most MAX_ANSWER_BYTES: an executor answering without end (a huge log page)
        // costs this worker no more memory than that.
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(CallError::Broken {
                    address: address.to_owned(),
                    reason: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        read_answer(address, status, &body)
    }

    /// `call`, and a code other than 200 as [`CallError::Refused`].
    async fn ok<B: Serialize + ?Sized>(
        &self,
        address: &str,
        path: &str,
        body: &B,
    ) -> Result<ReturnT, CallError> {
        let answer = self.call(address, path, body).await?;
        if answer.code != SUCCESS_CODE {
            return Err(CallError::Refused {
                address: address.to_owned(),
                code: answer.code,
                msg: answer.message(),
            });
        }
        Ok(answer)
    }

    /// Starts (or queues) a run. `Ok` means the executor took it; its result comes by callback.
    pub async fn run(&self, address: &str, trigger: &TriggerParam) -> Result<ReturnT, CallError> {
        self.ok(address, "run", trigger).await
    }

    /// Stops the job's running run (and, on Java executors, its queued ones).
    pub async fn kill(&self, address: &str, job_id: i64) -> Result<ReturnT, CallError> {
        self.ok(address, "kill", &JobIdParam { job_id }).await
    }

    /// Whether the executor is alive.
    pub async fn beat(&self, address: &str) -> Result<ReturnT, CallError> {
        self.ok(address, "beat", &serde_json::json!({})).await
    }

    /// Whether the executor is alive and not running or queueing the job (`Refused` when busy).
    pub async fn idle_beat(&self, address: &str, job_id: i64) -> Result<ReturnT, CallError> {
        self.ok(address, "idleBeat", &JobIdParam { job_id }).await
    }

    /// Lines of a run's log from `from_line_num` on.
    pub async fn log(&self, address: &str, param: &LogParam) -> Result<LogResult, CallError> {
        let answer = self.ok(address, "log", param).await?;
        serde_json::from_value::<LogResult>(answer.content.clone()).map_err(|_| {
            CallError::Garbage {
                address: address.to_owned(),
                body: quote(answer.content.to_string().as_bytes()),
            }
        })
    }
}

/// An error and its causes on one line (reqwest's own message is only the outermost).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_param_has_java_field_names() {
        let t = TriggerParam {
            job_id: 7,
            executor_handler: "demoJobHandler".into(),
            executor_params: "a=1".into(),
            executor_block_strategy: "SERIAL_EXECUTION".into(),
            executor_timeout: 30,
            log_id: 42,
            log_date_time: 1_700_000_000_000,
            glue_type: "BEAN".into(),
            glue_source: String::new(),
            glue_updatetime: 0,
            broadcast_index: 1,
            broadcast_total: 2,
        };
        let v = serde_json::to_value(&t).unwrap();
        for key in [
            "jobId",
            "executorHandler",
            "executorParams",
            "executorBlockStrategy",
            "executorTimeout",
            "logId",
            "logDateTime",
            "glueType",
            "glueSource",
            "glueUpdatetime",
            "broadcastIndex",
            "broadcastTotal",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        let log = serde_json::to_value(LogParam {
            log_date_tim: 1,
            log_id: 2,
            from_line_num: 1,
        })
        .unwrap();
        assert_eq!(log["logDateTim"], 1);
    }

    #[test]
    fn answers_are_read_leniently_but_not_blindly() {
        // Java executors leave out null fields and say text/html; pyxxl says "Running".
        assert_eq!(read_answer("e", 200, br#"{"code":200}"#).unwrap().code, 200);
        let r = read_answer("e", 200, br#"{"code":200,"msg":"Running"}"#).unwrap();
        assert_eq!(r.message().as_deref(), Some("Running"));
        let r = read_answer("e", 200, br#"{"code":500,"msg":{"why":1}}"#).unwrap();
        assert_eq!(r.message().as_deref(), Some(r#"{"why":1}"#));
        // Not the envelope, or not 200: the error quotes what came back, bounded.
        let e = read_answer("http://x", 200, b"<html>hello</html>").unwrap_err();
        assert!(e.to_string().contains("<html>hello</html>"), "{e}");
        let e = read_answer("http://x", 200, &[b'x'; 1000]).unwrap_err();
        assert!(e.to_string().len() < 400, "{e}");
        let e = read_answer("http://x", 404, b"Not Found").unwrap_err();
        assert!(e.to_string().contains("HTTP 404"), "{e}");
    }

    #[test]
    fn callbacks_accept_any_message_type() {
        let items: Vec<CallbackParam> = serde_json::from_str(
            r#"[{"logId":1,"logDateTim":5,"handleCode":200,"handleMsg":"ok","executeResult":{"code":200}},
                {"logId":2,"handleCode":500,"handleMsg":null},
                {"logId":3,"handleCode":502,"handleMsg":["a"]}]"#,
        )
        .unwrap();
        assert_eq!(items[0].message().as_deref(), Some("ok"));
        assert_eq!(items[1].message(), None);
        assert_eq!(items[2].message().as_deref(), Some(r#"["a"]"#));
    }
}
