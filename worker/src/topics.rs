//! The trigger topics of the job types this worker serves, created at start when they do not
//! exist yet.
//!
//! The admin creates a job type's topic when the first job of that type appears. A worker that
//! subscribed before then holds no partition of it until a metadata refresh and a rebalance
//! later, and meanwhile the admin, which routes only to workers whose heartbeats report
//! partitions of the topic, finds no live worker for the type. So the worker creates the topics
//! itself, before it subscribes, with `CADENZA_TRIGGER_PARTITIONS` partitions: its first
//! assignment includes them and its heartbeats report them. Whoever comes first (an admin or a
//! worker) creates a topic; the others find it existing, and its partition count is the one
//! used.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::{admin_client_config, WorkerConfig};

/// How long the worker waits for the topics it created (or found) to show in the metadata
/// before it subscribes anyway (the subscription picks a late one up on a metadata refresh).
const VISIBLE_WITHIN: Duration = Duration::from_secs(5);

type Admin = AdminClient<DefaultClientContext>;

/// What the worker found or did for one trigger topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// This worker created it.
    Created,
    /// It existed already (an admin or another worker created it).
    Existed,
    /// It could not be created (the reason); the admin creates it with the first job of its
    /// type.
    Failed(String),
}

/// The warning for a trigger topic that exists with another partition count than `who`'s
/// (`admin`, `worker`) setting: the topic's count is the one used. Shared with the admin.
pub fn partition_mismatch(
    topic: &str,
    who: &str,
    configured: i32,
    actual: usize,
) -> Option<String> {
    (usize::try_from(configured).ok() != Some(actual)).then(|| {
        format!(
            "trigger topic {topic} already exists with {actual} partitions, but this {who}'s \
             CADENZA_TRIGGER_PARTITIONS is {configured}: the topic's {actual} partitions are \
             used (give admins and workers the same setting)"
        )
    })
}

/// Creates the trigger topics `topics` that do not exist, waits (briefly) until they show in the
/// metadata, and warns about one whose partition count differs from the setting. Never fails:
/// a topic that cannot be created is reported and left to the admin, as before workers created
/// them.
pub(crate) async fn ensure_trigger_topics(
    config: &WorkerConfig,
    topics: &[String],
) -> BTreeMap<String, Ensured> {
    let admin: Admin = match admin_client_config(config).create() {
        Ok(a) => a,
        Err(error) => {
            tracing::warn!(%error, "cannot create an admin client: the trigger topics are left to the admin");
            return topics
                .iter()
                .map(|t| (t.clone(), Ensured::Failed(error.to_string())))
                .collect();
        }
    };
    let outcome = create(&admin, config, topics).await;
    let found: Vec<String> = outcome
        .iter()
        .filter(|(_, e)| !matches!(e, Ensured::Failed(_)))
        .map(|(t, _)| t.clone())
        .collect();
    let counts = partition_counts(admin, found, VISIBLE_WITHIN).await;
    for (topic, ensured) in &outcome {
        let count = counts.get(topic).copied();
        match ensured {
            Ensured::Created => tracing::info!(
                %topic,
                partitions = config.trigger_partitions,
                replication_factor = config.replication_factor,
                "trigger topic created"
            ),
            Ensured::Existed => {
                match count
                    .and_then(|n| partition_mismatch(topic, "worker", config.trigger_partitions, n))
                {
                    Some(warning) => tracing::warn!("{warning}"),
                    None => tracing::debug!(%topic, partitions = ?count, "trigger topic exists"),
                }
            }
            Ensured::Failed(reason) => tracing::warn!(
                %topic,
                reason,
                "cannot create the trigger topic; runs of its job type are routed to this \
                 worker once it exists (the admin creates it with the first job of the type)"
            ),
        }
        if count.is_none() && !matches!(ensured, Ensured::Failed(_)) {
            tracing::warn!(
                %topic,
                "the trigger topic is not in the broker's metadata after {VISIBLE_WITHIN:?}; \
                 subscribing anyway (it is picked up on a metadata refresh)"
            );
        }
    }
    outcome
}

async fn create(
    admin: &Admin,
    config: &WorkerConfig,
    topics: &[String],
) -> BTreeMap<String, Ensured> {
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            NewTopic::new(
                t,
                config.trigger_partitions,
                TopicReplication::Fixed(config.replication_factor),
            )
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let mut outcome: BTreeMap<String, Ensured> = topics
        .iter()
        .map(|t| {
            (
                t.clone(),
                Ensured::Failed("no answer from the broker".to_owned()),
            )
        })
        .collect();
    match admin.create_topics(&new, &opts).await {
        Ok(results) => {
            for r in results {
                let (topic, ensured) = match r {
                    Ok(topic) => (topic, Ensured::Created),
                    Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => (topic, Ensured::Existed),
                    Err((topic, code)) => (topic, Ensured::Failed(code.to_string())),
                };
                if let Some(e) = outcome.get_mut(&topic) {
                    *e = ensured;
                }
            }
        }
        Err(error) => {
            for e in outcome.values_mut() {
                *e = Ensured::Failed(error.to_string());
            }
        }
    }
    outcome
}

/// The partition counts of `topics` from the broker's metadata, polled until every one shows
/// with its partitions or `within` has passed (a topic just created may take a moment to show
/// on every broker). Topics that did not show are missing from the answer.
async fn partition_counts(
    admin: Admin,
    topics: Vec<String>,
    within: Duration,
) -> BTreeMap<String, usize> {
    let polled = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        let mut counts = BTreeMap::new();
        loop {
            for topic in &topics {
                if counts.contains_key(topic) {
                    continue;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                let md = match admin
                    .inner()
                    .fetch_metadata(Some(topic), left.max(Duration::from_millis(500)))
                {
                    Ok(md) => md,
                    Err(error) => {
                        tracing::debug!(%topic, %error, "cannot read the topic's metadata");
                        continue;
                    }
                };
                if let Some(t) = md.topics().iter().find(|t| t.name() == topic) {
                    if t.error().is_none() && !t.partitions().is_empty() {
                        counts.insert(topic.clone(), t.partitions().len());
                    }
                }
            }
            if counts.len() == topics.len() || Instant::now() >= deadline {
                return counts;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    match polled.await {
        Ok(counts) => counts,
        Err(error) => {
            tracing::warn!(%error, "reading the trigger topics' metadata failed");
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_count_mismatch_names_both_numbers() {
        assert_eq!(partition_mismatch("c.trigger.x", "worker", 6, 6), None);
        let w = partition_mismatch("c.trigger.x", "worker", 6, 4).unwrap();
        assert!(
            w.contains("c.trigger.x already exists with 4 partitions")
                && w.contains("this worker's CADENZA_TRIGGER_PARTITIONS is 6")
                && w.contains("the topic's 4 partitions are used"),
            "{w}"
        );
    }
}
