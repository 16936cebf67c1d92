//! Wire formats of Cadenza.
//!
//! Everything in this crate crosses a process boundary: Kafka messages between the admin and the
//! workers, the names of topics and headers, and the enums of strategies, statuses and trigger kinds
//! that the HTTP API and the database share. Changing a field here is a compatibility decision: old
//! workers and admins must still read what new ones write (add optional fields; never rename).
//!
//! The JSON Schema of every message is generated from these types into `schemas/json/` and checked
//! by a test, so a change shows up in review.

mod ids;
mod messages;
mod schedule;
mod strategy;
mod topic_settings;
mod topics;

pub mod json_schema;
pub mod xxl_export;

pub use ids::{JobId, JobType, JobTypeError, TriggerId, WorkerId};
pub use messages::{
    clip_message, json_has_nul, log_tail, CancelMessage, DlqMessage, FenceMessage, Heartbeat,
    ProgressClaim, ProgressRecord, ReportingOffset, ResultEvent, RunFinished, RunLogLines,
    RunStarted, RunningJob, StartedOffset, TriggerMessage, TriggerRecord, MAX_MESSAGE_BYTES,
    MAX_OUTPUT_BYTES, MAX_RESULT_RECORD_BYTES,
};
pub use schedule::Schedule;
pub use strategy::{
    BlockStrategy, MisfireStrategy, Overlap, ParseEnumError, RouteStrategy, RunStatus, TriggerKind,
};
pub use topic_settings::{
    TopicConfig, TopicKind, TopicPolicy, DEFAULT_TRIGGER_RETENTION_MS,
    KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES, TRIGGER_SEGMENT_MS,
};
pub use topics::{Topics, DEFAULT_TOPIC_PREFIX, HEADER_RECORD, HEADER_TRACEPARENT};
