//! The scheduler's errors. Its loops log them and go on; callers outside the scheduler may turn
//! them into `anyhow::Error` with `?`.

use cadenza_schemas::JobTypeError;
use rdkafka::error::KafkaError;

use crate::ids::BadShard;

/// An error of another part of the admin (topic creation, partition reads) the scheduler
/// passes on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// A statement or transaction failed (connection, timeout, constraint).
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The broker refused or lost a record this scheduler produced.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// The trigger topic of a job type could not be found or created.
    #[error("trigger topic of {job_type}: {source}")]
    TriggerTopic {
        job_type: String,
        #[source]
        source: BoxError,
    },
    /// A partition could not be read back to its fence record.
    #[error("reading partition {partition} of {topic} back: {source}")]
    ReadBack {
        topic: String,
        partition: i32,
        #[source]
        source: BoxError,
    },
    /// The producers of a shard's earlier holders could not be fenced.
    #[error("fencing earlier holders: {0}")]
    Fence(String),
    /// A record could not be encoded.
    #[error("encoding a record: {0}")]
    Encode(#[from] serde_json::Error),
    /// A stored shard number is not one.
    #[error(transparent)]
    Shard(#[from] BadShard),
    /// A stored job type is not a valid one.
    #[error(transparent)]
    JobType(#[from] JobTypeError),
}
