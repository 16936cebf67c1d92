//! Topics as production needs them: every topic Cadenza creates carries its replication,
//! `min.insync.replicas`, cleanup policy and retention; one that exists with other settings is
//! named, with both values, by each process that uses it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::BTreeMap;
use std::time::Duration;

use cadenza_integration::{client_config, Cluster};
use cadenza_schemas::{JobType, TopicKind, TopicPolicy};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;

const WAIT: Duration = Duration::from_secs(30);

async fn describe(bootstrap: &str, topic: &str) -> BTreeMap<String, String> {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let described = admin
        .describe_configs(
            &[ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    let resource = described.into_iter().next().unwrap().unwrap();
    resource
        .entries
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect()
}

#[tokio::test]
async fn topics_are_created_as_production_needs_them_and_differences_are_named() {
    let cluster = Cluster::start().await.unwrap();
    let brokers = cluster.brokers();
    let t = cluster.topics();
    // The progress topic exists already, made by hand with the broker's defaults (deleted by
    // age after 7 days): what an older Cadenza created.
    let admin_client: AdminClient<DefaultClientContext> = client_config(&brokers).create().unwrap();
    admin_client
        .create_topics(
            &[NewTopic::new(&t.progress(), 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap()
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();

    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let worker = cluster
        .spawn_worker("topics.demo=noop", "topics", &[])
        .await
        .unwrap();
    let expected = format!(
        "topic {} has cleanup.policy=delete, Cadenza expects compact",
        t.progress()
    );
    admin.wait_for_log(&expected, WAIT).await.unwrap();
    worker.wait_for_log(&expected, WAIT).await.unwrap();
    worker
        .wait_for_log("Cadenza expects 86400000 (a record younger", WAIT)
        .await
        .unwrap();

    // Every topic Cadenza created itself has the settings of its kind, and nothing else is said
    // about it.
    let policy = TopicPolicy::default();
    let trigger = t.trigger(&JobType::parse("topics.demo").unwrap());
    for (topic, kind) in [
        (t.results(), TopicKind::Results),
        (t.workers(), TopicKind::Workers),
        (t.dlq(), TopicKind::Dlq),
        (trigger.clone(), TopicKind::Trigger),
    ] {
        let actual = describe(&brokers, &topic).await;
        let wanted = policy.configs(kind);
        for c in &wanted {
            assert_eq!(
                actual.get(c.name),
                Some(&c.value),
                "{topic}: {} ({})",
                c.name,
                c.why
            );
        }
        assert!(
            !admin.log().contains(&format!("topic {topic} has")),
            "{}",
            admin.log()
        );
        assert!(
            !worker.log().contains(&format!("topic {topic} has")),
            "{}",
            worker.log()
        );
    }
    let trigger_configs = describe(&brokers, &trigger).await;
    assert_eq!(trigger_configs["retention.ms"], "518400000");
    assert_eq!(trigger_configs["cleanup.policy"], "delete");
    assert_eq!(
        describe(&brokers, &t.workers()).await["cleanup.policy"],
        "compact"
    );
}

/// Settings that cannot work stop a process at start, naming the setting.
#[tokio::test]
async fn a_min_insync_above_the_replication_factor_is_refused_at_start() {
    let cluster = Cluster::start().await.unwrap();
    let err = cluster
        .spawn_admin(&[
            ("CADENZA_REPLICATION_FACTOR", "1"),
            ("CADENZA_MIN_INSYNC_REPLICAS", "2"),
        ])
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("exited before it was healthy"),
        "{err:#}"
    );
    // The first line of its log (a backtrace follows it).
    let message = cluster.dump_logs_tail(500);
    assert!(
        message.contains(
            "CADENZA_MIN_INSYNC_REPLICAS is 2; it must be between 1 and the replication factor (1)"
        ),
        "{message}"
    );
    let worker = cluster
        .spawn_worker(
            "topics.demo=noop",
            "topics",
            &[("CADENZA_MIN_INSYNC_REPLICAS", "2")],
        )
        .await
        .unwrap();
    let status = worker.wait_exit(WAIT).await.unwrap();
    assert!(!status.success());
    assert!(
        worker
            .log()
            .contains("CADENZA_MIN_INSYNC_REPLICAS is 2; it must be between 1"),
        "{}",
        worker.log()
    );
}
