use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, JobType, TriggerId, WorkerId};
use crate::strategy::{BlockStrategy, RouteStrategy, RunStatus, TriggerKind};

/// A record on a trigger topic `<prefix>.trigger.<job_type>`.
///
/// Key: the job id (decimal). Header `cadenza-record`: `trigger`, `fence` or `cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TriggerRecord {
    /// A run to execute.
    Trigger(TriggerMessage),
    /// A marker an admin writes when it takes over a shard, to read a partition back up to a known
    /// point. Workers skip it.
    Fence(FenceMessage),
    /// An operator cancels a run published earlier on the same partition: the worker that holds
    /// it stops it (waiting: never started; running: its handler is cancelled) and reports it
    /// `cancelled`. A worker that does not hold the run (already finished) skips it.
    Cancel(CancelMessage),
}

/// One run to execute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TriggerMessage {
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    pub job_type: JobType,
    pub kind: TriggerKind,
    /// The instant the run was due.
    pub fire_time: DateTime<Utc>,
    /// The job's parameters (free text; the handler interprets it).
    #[serde(default)]
    pub params: String,
    /// What to do when a run of the same job is already running or waiting on the worker.
    pub block: BlockStrategy,
    /// Cancel the run after this many milliseconds; 0 means no timeout.
    #[serde(default)]
    pub timeout_ms: u64,
    /// 1 for the first delivery; the worker adds one when it re-runs a redelivered trigger.
    #[serde(default = "one")]
    pub attempt: u32,
    /// Index of this shard for `sharding_broadcast` runs (0 otherwise).
    #[serde(default)]
    pub shard_index: u32,
    /// Number of shards for `sharding_broadcast` runs (1 otherwise).
    #[serde(default = "one")]
    pub shard_total: u32,
    /// The worker the partition selector chose, if any worker was live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_worker: Option<WorkerId>,
    /// The job's route strategy (the `xxl` bridge routes among executor addresses by it).
    /// Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteStrategy>,
    /// When the admin produced this record.
    pub published_at: DateTime<Utc>,
    /// The workflow run this run belongs to, for a run of a workflow node (kind `workflow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_run_id: Option<i64>,
    /// The key of the workflow node this is a run of (kind `workflow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_node: Option<String>,
    /// For a workflow node: the outputs of its direct parents, a JSON object from parent node key
    /// to that node's output (JSON `null` for a parent without output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<serde_json::Value>,
}

fn one() -> u32 {
    1
}

/// Most bytes of a run's output ([`RunFinished::output`]) serialized as JSON. A worker fails a
/// run whose handler returns more, rather than cut it: an output is data for the runs that
/// follow, and a truncated one would mislead them.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// Most bytes of a run's message ([`RunFinished::message`]): a longer one (an executor's
/// 1.5 MB answer, a broadcast joining many) is cut at this length with a note saying how much was
/// left out, so that the `finished` event always fits in a Kafka record.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;

/// Most bytes of a result event's record (`finished` with its message, log tail and output):
/// below the producer's and the broker's default record limit (1 MB), so that no result is
/// refused for its size. A worker keeps the end of a longer log.
pub const MAX_RESULT_RECORD_BYTES: usize = 900 * 1024;

/// `message` cut to at most [`MAX_MESSAGE_BYTES`] (at a character boundary), with a note saying
/// how many bytes were left out.
pub fn clip_message(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_MESSAGE_BYTES {
        return std::borrow::Cow::Borrowed(message);
    }
    let note = format!(" … [{} more bytes left out]", message.len());
    let mut end = MAX_MESSAGE_BYTES.saturating_sub(note.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let left_out = message.len() - end;
    std::borrow::Cow::Owned(format!(
        "{} … [{left_out} more bytes left out]",
        &message[..end]
    ))
}

/// The end of `log`, at most `max` bytes (at a line or character boundary), with a first line
/// saying how many bytes were left out.
pub fn log_tail(log: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if log.len() <= max {
        return std::borrow::Cow::Borrowed(log);
    }
    let note_room = 64;
    let mut start = log.len() - max.saturating_sub(note_room);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = log[start..].find('\n') {
        if nl < 1024 {
            start += nl + 1;
        }
    }
    std::borrow::Cow::Owned(format!(
        "[… {start} bytes of log left out]\n{}",
        &log[start..]
    ))
}

impl RunFinished {
    /// Cuts the message to [`MAX_MESSAGE_BYTES`] and, if the event's JSON is still larger than
    /// `max_bytes`, keeps only the end of its log so that it fits.
    pub fn fit(&mut self, max_bytes: usize) {
        if let Some(m) = &self.message {
            if let std::borrow::Cow::Owned(clipped) = clip_message(m) {
                self.message = Some(clipped);
            }
        }
        for _ in 0..4 {
            let Ok(len) = serde_json::to_vec(self).map(|v| v.len()) else {
                return;
            };
            if len <= max_bytes {
                return;
            }
            let Some(log) = self.log.take() else {
                return;
            };
            // The log's share of the excess, counted as JSON (escapes may make it longer).
            let escaped = serde_json::to_string(&log).map_or(log.len(), |s| s.len());
            let budget = escaped.saturating_sub(len - max_bytes);
            let keep = if escaped == 0 {
                0
            } else {
                // Escapes take the same share of what is kept as of the whole.
                (budget as f64 * log.len() as f64 / escaped as f64) as usize
            };
            self.log = Some(log_tail(&log, keep).into_owned());
        }
    }
}

/// Whether a JSON value holds a NUL character (U+0000) in a string or a key: PostgreSQL cannot
/// store it in `jsonb`, so such an output is refused.
pub fn json_has_nul(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(a) => a.iter().any(json_has_nul),
        serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || json_has_nul(v)),
        _ => false,
    }
}

/// Fence record written by an admin that took over a shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FenceMessage {
    /// The admin instance that wrote it.
    pub admin_id: String,
    pub shard: u32,
    /// The lease epoch of the writer.
    pub epoch: i64,
    /// Unique per fence, so the writer recognises its own record when reading back.
    pub nonce: String,
    pub written_at: DateTime<Utc>,
}

/// A request to cancel one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelMessage {
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    /// Who asked (a user or token name), for the run's message.
    pub by: String,
    pub requested_at: DateTime<Utc>,
}

/// An event on `<prefix>.results`. Key: the trigger id (decimal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ResultEvent {
    Started(RunStarted),
    Finished(RunFinished),
    /// Log lines of a run still running (the live log). The `finished` event's `log` replaces
    /// whatever was shipped this way.
    Log(RunLogLines),
}

impl ResultEvent {
    pub fn trigger_id(&self) -> TriggerId {
        match self {
            ResultEvent::Started(s) => s.trigger_id,
            ResultEvent::Finished(f) => f.trigger_id,
            ResultEvent::Log(l) => l.trigger_id,
        }
    }
}

/// A batch of log lines of a running run, in order. Batches of one run and attempt are numbered
/// from 1; a consumer applies each `seq` once and ignores older ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunLogLines {
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    pub worker_id: WorkerId,
    pub attempt: u32,
    /// 1, 2, … per run and attempt.
    pub seq: u64,
    /// The lines, without newlines. A line may say that earlier lines were left out (the
    /// worker bounds what it ships).
    pub lines: Vec<String>,
}

/// A worker began a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunStarted {
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    pub worker_id: WorkerId,
    /// The worker's consumer group (its deployment).
    pub group: String,
    pub partition: i32,
    pub offset: i64,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    /// When the admin published the trigger (its record's `published_at`), recorded as the
    /// run's publication time if the admin has not recorded one yet. Absent from older workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<DateTime<Utc>>,
}

/// A worker finished a run (any terminal status a worker can decide).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunFinished {
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    pub worker_id: WorkerId,
    pub group: String,
    pub partition: i32,
    pub offset: i64,
    pub attempt: u32,
    /// One of `succeeded`, `failed`, `timed_out`, `discarded`, `cancelled`.
    pub status: RunStatus,
    /// Absent when the run never started (e.g. discarded while waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: DateTime<Utc>,
    /// As in `started`: when the admin published the trigger. Absent from older workers, and
    /// when a worker reports a result again from its progress record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<DateTime<Utc>>,
    /// A person-readable reason for a status other than `succeeded`, or the handler's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The tail of the run's log (bounded by the worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The handler asked to be retried (reported with status `failed`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub retry_requested: bool,
    /// The handler's output, a JSON value of at most [`MAX_OUTPUT_BYTES`] serialized; only for
    /// succeeded runs. A workflow passes it to the node's children as their `upstream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The progress of one trigger partition in one worker group, on `<prefix>.progress` (key =
/// `<group>/<topic>/<partition>`): what the partition's next owner needs beyond the committed
/// offset — runs finished above it (not to run again), runs started and unfinished (to run again
/// with `attempt + 1`), and runs whose result was being reported (to report again, not rerun).
/// The group's committed offset for the partition in the auxiliary group `<group>~progress`
/// points at a record at or before the one in force: of the partition's records from there on,
/// the one with the highest `term`, and the latest of that term, is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressRecord {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// Every offset below is finished.
    pub position: i64,
    /// Finished offsets at or above `position`.
    #[serde(default)]
    pub finished: Vec<i64>,
    /// Offsets whose run started and had not finished, with the attempt that started.
    #[serde(default)]
    pub started: Vec<StartedOffset>,
    /// Offsets whose `finished` event was being published.
    #[serde(default)]
    pub reporting: Vec<ReportingOffset>,
    pub worker_id: WorkerId,
    pub written_at: DateTime<Utc>,
    /// The writer's term for the partition: the offset on `<prefix>.progress` of the
    /// [`ProgressClaim`] it wrote when the partition was assigned to it. A later owner's term is
    /// higher. Absent from records of earlier versions, which rank below any term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<i64>,
}

/// A claim on `<prefix>.progress` (key = `<group>/claim`, header `cadenza-record: claim`),
/// written by a worker when partitions are assigned to it: its offset is the worker's term for
/// those partitions (see [`ProgressRecord::term`]), and the worker reads their progress records
/// back up to it. Nothing else reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressClaim {
    pub group: String,
    pub worker_id: WorkerId,
    pub written_at: DateTime<Utc>,
}

/// A run that started at `offset` with `attempt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StartedOffset {
    pub offset: i64,
    pub attempt: u32,
}

/// A run at `offset` whose `finished` event was being published (enough to publish it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReportingOffset {
    pub offset: i64,
    pub trigger_id: TriggerId,
    pub job_id: JobId,
    pub worker_id: WorkerId,
    pub attempt: u32,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub retry_requested: bool,
    /// The handler's output (see [`RunFinished::output`]), so a finished event published again
    /// keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

/// A worker's heartbeat on the compacted topic `<prefix>.workers` (key = worker id). A graceful
/// stop writes a tombstone (null value) under the same key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Heartbeat {
    pub worker_id: WorkerId,
    /// The worker's consumer group.
    pub group: String,
    /// Job types it has handlers for.
    pub job_types: Vec<JobType>,
    /// Partitions currently assigned to it, per topic.
    #[serde(default)]
    pub assignments: BTreeMap<String, Vec<i32>>,
    /// Jobs with runs in progress on it.
    #[serde(default)]
    pub running: Vec<RunningJob>,
    /// How many runs it executes at once.
    pub capacity: u32,
    /// The worker's software version.
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub sent_at: DateTime<Utc>,
    /// How often it sends a heartbeat, in milliseconds.
    pub interval_ms: u64,
}

/// Runs of one job in progress on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
pub struct RunningJob {
    pub job_id: JobId,
    /// Running plus waiting runs.
    pub runs: u32,
}

/// A message a consumer could not use, on `<prefix>.dlq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DlqMessage {
    pub source_topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Why it could not be used.
    pub reason: String,
    /// The original value, as UTF-8 (invalid bytes replaced), truncated to a bounded size.
    pub payload: String,
    /// Who put it here (a worker id or an admin id).
    pub reporter: String,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_finished_event_is_cut_to_fit_a_record() {
        let mut f = RunFinished {
            trigger_id: TriggerId(1),
            job_id: JobId(2),
            worker_id: WorkerId("w".into()),
            group: "g".into(),
            partition: 0,
            offset: 5,
            attempt: 1,
            status: RunStatus::Succeeded,
            started_at: None,
            finished_at: DateTime::UNIX_EPOCH,
            published_at: None,
            message: Some(format!("head {}", "é".repeat(750_000))),
            // Control characters are escaped six times longer in JSON.
            log: Some(format!("{}\nlast line", "\u{1}".repeat(2_000_000))),
            retry_requested: false,
            output: Some(serde_json::json!({"rows": 3})),
        };
        f.fit(MAX_RESULT_RECORD_BYTES);
        let len = serde_json::to_vec(&f).unwrap().len();
        assert!(len <= MAX_RESULT_RECORD_BYTES, "{len}");
        let message = f.message.as_deref().unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(message.starts_with("head éé"));
        assert!(message.ends_with("more bytes left out]"), "{message}");
        let log = f.log.as_deref().unwrap();
        assert!(log.starts_with("[… "), "{}", &log[..40]);
        assert!(log.ends_with("\nlast line"));
        assert!(
            log.len() > 100_000,
            "most of the room is kept: {}",
            log.len()
        );
        assert_eq!(f.output, Some(serde_json::json!({"rows": 3})));

        // A small event is left as it is.
        let mut small = f.clone();
        small.message = Some("ok".into());
        small.log = Some("a\nb".into());
        let before = small.clone();
        small.fit(MAX_RESULT_RECORD_BYTES);
        assert_eq!(small, before);
    }

    #[test]
    fn trigger_record_is_tagged_and_defaults_apply() {
        let json = r#"{"type":"trigger","trigger_id":7,"job_id":3,"job_type":"demo.echo",
            "kind":"cron","fire_time":"2026-01-01T00:00:00Z","block":"serial_execution",
            "published_at":"2026-01-01T00:00:00.002Z"}"#;
        let TriggerRecord::Trigger(t) = serde_json::from_str(json).unwrap() else {
            panic!("expected a trigger");
        };
        assert_eq!(t.trigger_id, TriggerId(7));
        assert_eq!((t.attempt, t.shard_index, t.shard_total), (1, 0, 1));
        assert_eq!(t.params, "");
        let fence = r#"{"type":"fence","admin_id":"a","shard":1,"epoch":2,"nonce":"n","written_at":"2026-01-01T00:00:00Z"}"#;
        assert!(matches!(
            serde_json::from_str(fence).unwrap(),
            TriggerRecord::Fence(_)
        ));
    }

    #[test]
    fn result_event_round_trips() {
        let ev = ResultEvent::Finished(RunFinished {
            trigger_id: TriggerId(1),
            job_id: JobId(2),
            worker_id: WorkerId("w".into()),
            group: "g".into(),
            partition: 0,
            offset: 5,
            attempt: 1,
            status: RunStatus::Failed,
            started_at: None,
            finished_at: DateTime::UNIX_EPOCH,
            published_at: None,
            message: Some("boom".into()),
            log: None,
            retry_requested: false,
            output: None,
        });
        let s = serde_json::to_string(&ev).unwrap();
        assert!(s.starts_with(r#"{"event":"finished""#));
        assert_eq!(serde_json::from_str::<ResultEvent>(&s).unwrap(), ev);
    }

    #[test]
    fn a_nul_anywhere_in_an_output_is_found() {
        assert!(!json_has_nul(
            &serde_json::json!({"a": ["b", 1, null], "c": {"d": "e"}})
        ));
        assert!(json_has_nul(&serde_json::json!({"a": ["b\0"]})));
        assert!(json_has_nul(&serde_json::json!({"k\0": 1})));
    }

    #[test]
    fn workflow_fields_round_trip_and_stay_out_when_absent() {
        let json = r#"{"type":"trigger","trigger_id":7,"job_id":3,"job_type":"demo.echo",
            "kind":"workflow","fire_time":"2026-01-01T00:00:00Z","block":"serial_execution",
            "published_at":"2026-01-01T00:00:00.002Z","workflow_run_id":12,
            "workflow_node":"load","upstream":{"extract":{"rows":42},"check":null}}"#;
        let record: TriggerRecord = serde_json::from_str(json).unwrap();
        let TriggerRecord::Trigger(t) = &record else {
            panic!("expected a trigger");
        };
        assert_eq!(t.kind, TriggerKind::Workflow);
        assert_eq!(t.workflow_run_id, Some(12));
        assert_eq!(t.workflow_node.as_deref(), Some("load"));
        assert_eq!(
            t.upstream,
            Some(serde_json::json!({"extract": {"rows": 42}, "check": null}))
        );
        let again = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<TriggerRecord>(&again).unwrap(),
            record
        );

        // Without them (records of earlier versions, runs of other kinds): absent both ways.
        let mut plain = t.clone();
        plain.kind = TriggerKind::Cron;
        plain.workflow_run_id = None;
        plain.workflow_node = None;
        plain.upstream = None;
        let s = serde_json::to_string(&TriggerRecord::Trigger(plain)).unwrap();
        for field in ["workflow_run_id", "workflow_node", "upstream"] {
            assert!(!s.contains(field), "{field} in {s}");
        }
    }

    #[test]
    fn output_round_trips_and_old_records_parse_without_it() {
        let old_finished = r#"{"event":"finished","trigger_id":1,"job_id":2,"worker_id":"w",
            "group":"g","partition":0,"offset":5,"attempt":1,"status":"succeeded",
            "finished_at":"2026-01-01T00:00:00Z"}"#;
        let ResultEvent::Finished(mut f) = serde_json::from_str(old_finished).unwrap() else {
            panic!("expected a finished event");
        };
        assert_eq!(f.output, None);
        assert!(!serde_json::to_string(&f).unwrap().contains("output"));
        f.output = Some(serde_json::json!({"rows": 42}));
        let s = serde_json::to_string(&ResultEvent::Finished(f.clone())).unwrap();
        assert!(s.contains(r#""output":{"rows":42}"#), "{s}");
        assert_eq!(
            serde_json::from_str::<ResultEvent>(&s).unwrap(),
            ResultEvent::Finished(f)
        );

        let old_progress = r#"{"group":"g","topic":"t","partition":0,"position":3,
            "reporting":[{"offset":3,"trigger_id":1,"job_id":2,"worker_id":"w","attempt":1,
            "status":"succeeded","finished_at":"2026-01-01T00:00:00Z"}],
            "worker_id":"w","written_at":"2026-01-01T00:00:00Z"}"#;
        let mut p: ProgressRecord = serde_json::from_str(old_progress).unwrap();
        assert_eq!(p.reporting[0].output, None);
        p.reporting[0].output = Some(serde_json::json!([1, "two"]));
        let s = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<ProgressRecord>(&s).unwrap(), p);
    }
}
