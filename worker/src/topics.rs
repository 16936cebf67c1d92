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

use cadenza_schemas::{
    TopicConfig, TopicKind, TopicPolicy, KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES,
};
use rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
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

/// A new topic of `kind` with the settings of `policy`; `configs` is `policy.configs(kind)`,
/// which the topic borrows. Shared with the admin.
pub fn new_topic<'a>(
    name: &'a str,
    partitions: i32,
    policy: &TopicPolicy,
    configs: &'a [TopicConfig],
) -> NewTopic<'a> {
    configs.iter().fold(
        NewTopic::new(
            name,
            partitions,
            TopicReplication::Fixed(policy.replication_factor),
        ),
        |topic, c| topic.set(c.name, &c.value),
    )
}

/// Compares the existing `topics` with the settings of their kinds and the broker's
/// `offsets.retention.minutes` with the trigger topics' retention; returns what differs, one
/// sentence each (see [`TopicPolicy::differences`]). A topic that does not exist (yet) is left
/// out; a broker that cannot describe configurations gives one sentence saying so. Shared with
/// the admin.
pub async fn check_topics(
    admin: std::sync::Arc<AdminClient<DefaultClientContext>>,
    policy: &TopicPolicy,
    topics: &[(String, TopicKind)],
) -> Vec<String> {
    let mut out = Vec::new();
    let names: Vec<String> = topics.iter().map(|(t, _)| t.clone()).collect();
    let (replicas, broker) = {
        let client = std::sync::Arc::clone(&admin);
        let names = names.clone();
        match tokio::task::spawn_blocking(move || {
            let md = client
                .inner()
                .fetch_metadata(None, Duration::from_secs(10))?;
            let replicas: BTreeMap<String, i32> = md
                .topics()
                .iter()
                .filter(|t| names.iter().any(|n| n == t.name()))
                .filter_map(|t| {
                    let r = t.partitions().first()?.replicas().len();
                    Some((t.name().to_owned(), i32::try_from(r).ok()?))
                })
                .collect();
            Ok::<_, rdkafka::error::KafkaError>((replicas, md.brokers().first().map(|b| b.id())))
        })
        .await
        {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                return vec![format!(
                    "cannot read the topics' metadata to check their settings: {error}"
                )]
            }
            Err(error) => return vec![format!("cannot check the topics' settings: {error}")],
        }
    };
    let mut specs: Vec<ResourceSpecifier<'_>> = topics
        .iter()
        .filter(|(t, _)| replicas.contains_key(t))
        .map(|(t, _)| ResourceSpecifier::Topic(t))
        .collect();
    if let Some(id) = broker {
        specs.push(ResourceSpecifier::Broker(id));
    }
    if specs.is_empty() {
        return out;
    }
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    // A topic created a moment ago may be described with no entries by a broker that has not
    // seen it yet: ask again, a few times, before comparing.
    let mut attempt = 0;
    let described = loop {
        attempt += 1;
        let described = match admin.describe_configs(&specs, &opts).await {
            Ok(d) => d,
            Err(error) => return vec![format!("the broker cannot describe the topics' settings, so they were not checked: {error}")],
        };
        let incomplete = described
            .iter()
            .any(|r| r.as_ref().map_or(true, |r| r.entries.is_empty()));
        if !incomplete || attempt >= 10 {
            break described;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut offsets_retention = None;
    for resource in described {
        let resource = match resource {
            Ok(r) => r,
            Err(code) => {
                out.push(format!(
                    "the broker did not describe a topic's settings ({code}); not checked"
                ));
                continue;
            }
        };
        if resource.entries.is_empty() {
            out.push(format!(
                "the broker described no settings of {:?}; not checked",
                resource.specifier
            ));
            continue;
        }
        let values: BTreeMap<String, String> = resource
            .entries
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect();
        match &resource.specifier {
            OwnedResourceSpecifier::Topic(name) => {
                if let Some((_, kind)) = topics.iter().find(|(t, _)| t == name) {
                    out.extend(policy.differences(
                        name,
                        *kind,
                        &values,
                        replicas.get(name).copied(),
                    ));
                }
            }
            OwnedResourceSpecifier::Broker(_) => {
                offsets_retention = values
                    .get("offsets.retention.minutes")
                    .and_then(|v| v.parse::<i64>().ok());
            }
            _ => {}
        }
    }
    if topics.iter().any(|(_, k)| *k == TopicKind::Trigger) {
        let minutes = offsets_retention.unwrap_or(KAFKA_DEFAULT_OFFSETS_RETENTION_MINUTES);
        out.extend(policy.offsets_retention_problem(minutes));
    }
    out
}

/// Logs a warning for each way the `topics` differ from the settings this worker would create
/// them with (see [`check_topics`]), or that they match.
pub(crate) async fn warn_about_topics(config: &WorkerConfig, topics: &[(String, TopicKind)]) {
    warn_about_topics_with(
        admin_client_config(config).create(),
        &config.topic_policy(),
        topics,
    )
    .await;
}

/// [`check_topics`] with `admin` (as created), each difference logged as a warning, or that
/// there is none. Shared with the admin.
pub async fn warn_about_topics_with(
    admin: Result<Admin, rdkafka::error::KafkaError>,
    policy: &TopicPolicy,
    topics: &[(String, TopicKind)],
) {
    let admin = match admin {
        Ok(a) => a,
        Err(error) => {
            tracing::warn!(%error, "cannot create an admin client: the topics' settings were not checked");
            return;
        }
    };
    let differences = check_topics(std::sync::Arc::new(admin), policy, topics).await;
    if differences.is_empty() {
        tracing::info!(
            topics = topics.len(),
            "the topics' settings are as Cadenza expects"
        );
    }
    for d in differences {
        tracing::warn!("{d}");
    }
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
                min_insync_replicas = config.topic_policy().min_insync_replicas,
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
    let policy = config.topic_policy();
    let configs = policy.configs(TopicKind::Trigger);
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| new_topic(t, config.trigger_partitions, &policy, &configs))
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
