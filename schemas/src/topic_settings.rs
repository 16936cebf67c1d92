//! How each Cadenza topic is kept: the settings admins and workers create it with, and check an
//! existing one against at start (README, "Topics").
//!
//! Every topic gets its replication factor and `min.insync.replicas` from [`TopicPolicy`], and
//! its cleanup policy, retention and segment roll from its [`TopicKind`]. The values that matter
//! for correctness, and why:
//!
//! - **Trigger topics** keep triggers for `retention.ms` (the replay window, 6 days by default),
//!   in segments rolled hourly so that retention acts on time. The window plus one segment stays
//!   below the broker's `offsets.retention.minutes` (7 days by default): a worker group that was
//!   down long enough for Kafka to forget its committed offsets finds no trigger it had already
//!   run (it starts from the earliest retained one), only those published while it was away.
//! - **Progress** is compacted, never deleted by age: a worker group back after any time finds
//!   the last record of each partition it ran. Records younger than a day are never compacted,
//!   so a pointer that lags its partition's newest record still finds its own.
//! - **Workers** (heartbeats) is compacted with segments rolled every 10 minutes: an admin that
//!   starts reads one record per worker plus at most a few minutes of heartbeats.
//! - **Results**, **DLQ** and **XXL bridge** are deleted by age: 7 days, 30 days, 1 hour.

use std::collections::BTreeMap;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The default replay window of trigger topics (`CADENZA_TRIGGER_RETENTION_MS`): 6 days.
pub const DEFAULT_TRIGGER_RETENTION_MS: i64 = 6 * DAY_MS;

/// Segment roll of trigger topics: retention deletes whole segments only.
pub const TRIGGER_SEGMENT_MS: i64 = HOUR_MS;

/// Kafka's default `offsets.retention.minutes` (7 days), for the check when the broker's own
/// value cannot be read.
pub const KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES: i64 = 7 * 24 * 60;

/// The kinds of topic Cadenza uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TopicKind {
    /// `<prefix>.trigger.<job_type>`.
    Trigger,
    /// `<prefix>.results`.
    Results,
    /// `<prefix>.workers` (heartbeats).
    Workers,
    /// `<prefix>.dlq`.
    Dlq,
    /// `<prefix>.progress`.
    Progress,
    /// `<prefix>.xxl-bridge`.
    XxlBridge,
}

/// Replication settings shared by every topic, and the trigger topics' replay window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicPolicy {
    /// `CADENZA_REPLICATION_FACTOR`.
    pub replication_factor: i32,
    /// `CADENZA_MIN_INSYNC_REPLICAS`, else [`TopicPolicy::default_min_insync`].
    pub min_insync_replicas: i32,
    /// `CADENZA_TRIGGER_RETENTION_MS`.
    pub trigger_retention_ms: i64,
}

impl TopicPolicy {
    /// `min.insync.replicas` when it is not set: 2 with three or more replicas (a write survives
    /// the loss of any one broker and is refused rather than kept on a single copy), else 1.
    pub fn default_min_insync(replication_factor: i32) -> i32 {
        if replication_factor >= 3 {
            2
        } else {
            1
        }
    }

    /// The policy for `replication_factor`, with the default `min.insync.replicas` when
    /// `min_insync` is `None`.
    pub fn new(
        replication_factor: i32,
        min_insync: Option<i32>,
        trigger_retention_ms: i64,
    ) -> Self {
        Self {
            replication_factor,
            min_insync_replicas: min_insync
                .unwrap_or_else(|| Self::default_min_insync(replication_factor)),
            trigger_retention_ms,
        }
    }

    /// A setting that cannot work: `min.insync.replicas` above the replication factor refuses
    /// every `acks=all` write.
    pub fn problem(&self) -> Option<String> {
        if self.replication_factor < 1 {
            return Some(format!(
                "CADENZA_REPLICATION_FACTOR is {}; it must be at least 1",
                self.replication_factor
            ));
        }
        if self.min_insync_replicas < 1 || self.min_insync_replicas > self.replication_factor {
            return Some(format!(
                "CADENZA_MIN_INSYNC_REPLICAS is {}; it must be between 1 and the replication \
                 factor ({}), or every write would be refused",
                self.min_insync_replicas, self.replication_factor
            ));
        }
        if self.trigger_retention_ms < HOUR_MS {
            return Some(format!(
                "CADENZA_TRIGGER_RETENTION_MS is {}; it must be at least one hour (3600000)",
                self.trigger_retention_ms
            ));
        }
        None
    }

    /// The topic-level settings of a kind, in a fixed order, each with why it has that value.
    pub fn configs(&self, kind: TopicKind) -> Vec<TopicConfig> {
        let isr = TopicConfig::new(
            "min.insync.replicas",
            self.min_insync_replicas,
            "how many replicas must have a write before it counts",
        );
        let mut out = match kind {
            TopicKind::Trigger => vec![
                TopicConfig::new("cleanup.policy", "delete", "triggers are kept by age"),
                TopicConfig::new(
                    "retention.ms",
                    self.trigger_retention_ms,
                    "the replay window (CADENZA_TRIGGER_RETENTION_MS)",
                ),
                TopicConfig::new(
                    "segment.ms",
                    TRIGGER_SEGMENT_MS,
                    "retention deletes whole segments: an hourly roll keeps the window exact",
                ),
            ],
            TopicKind::Results => vec![
                TopicConfig::new("cleanup.policy", "delete", "results are kept by age"),
                TopicConfig::new("retention.ms", 7 * DAY_MS, "7 days"),
                TopicConfig::new("segment.ms", HOUR_MS, "retention acts hourly"),
            ],
            TopicKind::Workers => vec![
                TopicConfig::new(
                    "cleanup.policy",
                    "compact",
                    "one heartbeat per worker is what an admin needs at start",
                ),
                TopicConfig::new(
                    "segment.ms",
                    10 * 60_000,
                    "compaction reaches heartbeats older than 10 minutes",
                ),
                TopicConfig::new(
                    "delete.retention.ms",
                    DAY_MS,
                    "a stopped worker's tombstone stays a day",
                ),
            ],
            TopicKind::Dlq => vec![
                TopicConfig::new("cleanup.policy", "delete", "kept by age"),
                TopicConfig::new("retention.ms", 30 * DAY_MS, "30 days to look into a bad record"),
                TopicConfig::new("segment.ms", DAY_MS, "retention acts daily"),
            ],
            TopicKind::Progress => vec![
                TopicConfig::new(
                    "cleanup.policy",
                    "compact",
                    "a worker group back after any time must find its partitions' last records (deleted by age, it would run finished triggers again)",
                ),
                TopicConfig::new(
                    "min.compaction.lag.ms",
                    DAY_MS,
                    "a record younger than a day is never compacted away",
                ),
                TopicConfig::new("segment.ms", HOUR_MS, "compaction reaches records older than an hour"),
            ],
            TopicKind::XxlBridge => vec![
                TopicConfig::new("cleanup.policy", "delete", "kept by age"),
                TopicConfig::new("retention.ms", HOUR_MS, "executors' callbacks matter for an hour"),
                TopicConfig::new("segment.ms", 10 * 60_000, "retention acts every 10 minutes"),
            ],
        };
        out.push(isr);
        out
    }

    /// What differs between an existing topic and the settings of its kind, one sentence each
    /// (empty when nothing does). `actual` holds the topic's configuration as the broker
    /// describes it; `replicas` its replication factor when known.
    pub fn differences(
        &self,
        topic: &str,
        kind: TopicKind,
        actual: &BTreeMap<String, String>,
        replicas: Option<i32>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = replicas.filter(|r| *r != self.replication_factor) {
            out.push(format!(
                "topic {topic} has {r} replicas, but CADENZA_REPLICATION_FACTOR is {}",
                self.replication_factor
            ));
        }
        for c in self.configs(kind) {
            let have = actual.get(c.name).map(String::as_str);
            if have != Some(c.value.as_str()) {
                out.push(format!(
                    "topic {topic} has {}={}, Cadenza expects {} ({})",
                    c.name,
                    have.unwrap_or("(not set)"),
                    c.value,
                    c.why
                ));
            }
        }
        out
    }

    /// The warning when trigger retention plus one segment reaches the broker's
    /// `offsets.retention.minutes`: a worker group down that long could find triggers it had run
    /// after Kafka forgot its offsets.
    pub fn offsets_retention_problem(&self, offsets_retention_minutes: i64) -> Option<String> {
        let offsets_ms = offsets_retention_minutes.saturating_mul(60_000);
        let kept_ms = self.trigger_retention_ms.saturating_add(TRIGGER_SEGMENT_MS);
        (offsets_retention_minutes > 0 && kept_ms >= offsets_ms).then(|| {
            format!(
                "the broker forgets a stopped consumer group's offsets after {offsets_retention_minutes} minutes (offsets.retention.minutes), but trigger topics keep triggers up to {} minutes (CADENZA_TRIGGER_RETENTION_MS plus a one-hour segment): a worker group stopped longer than the broker's limit would run triggers it had already run. Lower CADENZA_TRIGGER_RETENTION_MS or raise offsets.retention.minutes",
                kept_ms / 60_000
            )
        })
    }
}

impl Default for TopicPolicy {
    fn default() -> Self {
        Self::new(1, None, DEFAULT_TRIGGER_RETENTION_MS)
    }
}

/// One topic-level setting and why Cadenza sets it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub name: &'static str,
    pub value: String,
    pub why: &'static str,
}

impl TopicConfig {
    fn new(name: &'static str, value: impl ToString, why: &'static str) -> Self {
        Self {
            name,
            value: value.to_string(),
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_insync_follows_the_replication_factor_unless_set() {
        assert_eq!(
            TopicPolicy::new(1, None, DEFAULT_TRIGGER_RETENTION_MS).min_insync_replicas,
            1
        );
        assert_eq!(
            TopicPolicy::new(2, None, DEFAULT_TRIGGER_RETENTION_MS).min_insync_replicas,
            1
        );
        assert_eq!(
            TopicPolicy::new(3, None, DEFAULT_TRIGGER_RETENTION_MS).min_insync_replicas,
            2
        );
        assert_eq!(
            TopicPolicy::new(5, Some(3), DEFAULT_TRIGGER_RETENTION_MS).min_insync_replicas,
            3
        );
        assert!(TopicPolicy::new(3, Some(4), DEFAULT_TRIGGER_RETENTION_MS)
            .problem()
            .is_some_and(|p| p.contains("CADENZA_MIN_INSYNC_REPLICAS is 4")));
        assert!(TopicPolicy::new(3, None, 1000)
            .problem()
            .is_some_and(|p| p.contains("CADENZA_TRIGGER_RETENTION_MS")));
        assert_eq!(TopicPolicy::default().problem(), None);
    }

    #[test]
    fn every_kind_sets_its_cleanup_policy_and_min_insync() {
        let p = TopicPolicy::new(3, None, DEFAULT_TRIGGER_RETENTION_MS);
        for kind in [
            TopicKind::Trigger,
            TopicKind::Results,
            TopicKind::Workers,
            TopicKind::Dlq,
            TopicKind::Progress,
            TopicKind::XxlBridge,
        ] {
            let c = p.configs(kind);
            assert!(c.iter().any(|c| c.name == "cleanup.policy"), "{kind:?}");
            assert!(c
                .iter()
                .any(|c| c.name == "min.insync.replicas" && c.value == "2"));
        }
        let progress = p.configs(TopicKind::Progress);
        assert!(progress
            .iter()
            .any(|c| c.name == "cleanup.policy" && c.value == "compact"));
        assert!(!progress.iter().any(|c| c.name == "retention.ms"));
    }

    #[test]
    fn differences_name_the_topic_the_setting_and_both_values() {
        let p = TopicPolicy::new(3, None, DEFAULT_TRIGGER_RETENTION_MS);
        let mut actual: BTreeMap<String, String> = p
            .configs(TopicKind::Progress)
            .into_iter()
            .map(|c| (c.name.to_owned(), c.value))
            .collect();
        assert!(p
            .differences("c.progress", TopicKind::Progress, &actual, Some(3))
            .is_empty());
        actual.insert("cleanup.policy".into(), "delete".into());
        let d = p.differences("c.progress", TopicKind::Progress, &actual, Some(1));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].contains("topic c.progress has 1 replicas, but CADENZA_REPLICATION_FACTOR is 3")
        );
        assert!(
            d[1].starts_with("topic c.progress has cleanup.policy=delete, Cadenza expects compact")
        );
    }

    #[test]
    fn trigger_retention_stays_below_the_brokers_offsets_retention() {
        let p = TopicPolicy::default();
        assert_eq!(
            p.offsets_retention_problem(KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES),
            None
        );
        let long = TopicPolicy::new(1, None, 7 * DAY_MS);
        let warning = long
            .offsets_retention_problem(KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES)
            .unwrap();
        assert!(warning.contains("offsets.retention.minutes"), "{warning}");
    }
}
