use crate::ids::JobType;

/// Default prefix of every topic name (`CADENZA_TOPIC_PREFIX`).
pub const DEFAULT_TOPIC_PREFIX: &str = "cadenza";

/// Kafka header carrying the W3C trace context of the run.
pub const HEADER_TRACEPARENT: &str = "traceparent";
/// Kafka header naming the record type on a trigger topic (`trigger` or `fence`), so consumers
/// can skip fence records without parsing the body.
pub const HEADER_RECORD: &str = "cadenza-record";

/// Topic names under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
}

impl Default for Topics {
    fn default() -> Self {
        Self::new(DEFAULT_TOPIC_PREFIX)
    }
}

impl Topics {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>.trigger.<job_type>`: triggers of one job type.
    pub fn trigger(&self, job_type: &JobType) -> String {
        format!("{}.trigger.{}", self.prefix, job_type)
    }

    /// The job type of a trigger topic name, if it is one under this prefix.
    pub fn job_type_of(&self, topic: &str) -> Option<JobType> {
        let rest = topic
            .strip_prefix(&self.prefix)?
            .strip_prefix(".trigger.")?;
        JobType::parse(rest).ok()
    }

    /// `<prefix>.results`: `started` and `finished` events from workers.
    pub fn results(&self) -> String {
        format!("{}.results", self.prefix)
    }

    /// `<prefix>.workers`: compacted heartbeats, key = worker id.
    pub fn workers(&self) -> String {
        format!("{}.workers", self.prefix)
    }

    /// `<prefix>.dlq`: messages a consumer could not parse, with the reason.
    pub fn dlq(&self) -> String {
        format!("{}.dlq", self.prefix)
    }

    /// `<prefix>.progress`: workers' per-partition progress records (see `ProgressRecord`).
    pub fn progress(&self) -> String {
        format!("{}.progress", self.prefix)
    }

    /// `<prefix>.xxl-bridge`: what XXL-JOB executors tell one bridge worker (beats, results),
    /// shared with the others.
    pub fn xxl_bridge(&self) -> String {
        format!("{}.xxl-bridge", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let t = Topics::new("t1");
        let jt = JobType::parse("demo.echo").unwrap();
        assert_eq!(t.trigger(&jt), "t1.trigger.demo.echo");
        assert_eq!(t.job_type_of("t1.trigger.demo.echo"), Some(jt));
        assert_eq!(t.job_type_of("t2.trigger.demo.echo"), None);
        assert_eq!(t.results(), "t1.results");
        assert_eq!(Topics::default().dlq(), "cadenza.dlq");
    }
}
