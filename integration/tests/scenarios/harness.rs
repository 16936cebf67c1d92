//! Smoke tests of the harness itself: the servers start, stop, restart, and talk.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::{Duration, Instant};

use std::ops::Range;

use cadenza_integration::{
    client_config, create_topic, list_topics, produce, random_hex, read_topic, read_topic_to,
    read_topic_to_end, topic_partition_count, wait_for, wait_until, Broker, BrokerKind, EndMark,
    Postgres, END_MARKER_HEADER,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::{Connection, PgConnection, Row};

#[tokio::test]
async fn postgres_starts_creates_a_database_and_restarts() {
    let started = Instant::now();
    let pg = Postgres::start().await.unwrap();
    eprintln!("postgres ready in {:?}", started.elapsed());
    let port = pg.port();

    let url = pg.create_database("harness_smoke").await.unwrap();
    assert_eq!(url, pg.url("harness_smoke"));
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (1, 'kept across a restart')")
        .execute(&mut conn)
        .await
        .unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(db, "harness_smoke");
    drop(conn);

    let pid = pg.pid().unwrap();
    pg.stop().await.unwrap();
    assert!(!pg.is_running());
    assert!(
        PgConnection::connect(&url).await.is_err(),
        "stopped server still answers"
    );

    let restarted = Instant::now();
    pg.start_again().await.unwrap();
    eprintln!("postgres restarted in {:?}", restarted.elapsed());
    assert_eq!(pg.port(), port);
    assert_ne!(pg.pid().unwrap(), pid);
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let row = sqlx::query("SELECT note FROM t WHERE id = 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>("note"), "kept across a restart");
    drop(conn);

    // Immediate shutdown, then crash recovery on the next start.
    pg.stop_immediate().await.unwrap();
    pg.start_again().await.unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn postgres_drop_stops_the_server_and_removes_its_directory() {
    let pg = Postgres::start().await.unwrap();
    let pid = pg.pid().unwrap();
    let data = pg.data_dir().to_path_buf();
    assert!(data.join("PG_VERSION").is_file());
    drop(pg);
    assert!(!data.exists(), "data directory left behind");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "postmaster {pid} still running"
    );
}

#[tokio::test]
async fn broker_creates_topics_and_reads_back_what_was_produced() {
    let broker = Broker::shared().await.unwrap();
    let bootstrap = broker.bootstrap();
    let topic = &format!("harness.smoke.{}", random_hex(8));

    assert_eq!(
        topic_partition_count(&bootstrap, topic).await.unwrap(),
        None
    );
    assert!(read_topic(&bootstrap, topic, Duration::from_secs(10))
        .await
        .unwrap()
        .is_empty());

    create_topic(&bootstrap, topic, 3).await.unwrap();
    assert_eq!(
        topic_partition_count(&bootstrap, topic).await.unwrap(),
        Some(3)
    );
    assert!(list_topics(&bootstrap).await.unwrap().contains(topic));

    let (partition, offset) = produce(&bootstrap, topic, Some(2), Some(b"k1"), b"{\"n\":1}")
        .await
        .unwrap();
    assert_eq!((partition, offset), (2, 0));
    produce(&bootstrap, topic, Some(0), None, b"plain")
        .await
        .unwrap();

    let records = read_topic(&bootstrap, topic, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].partition, 0);
    assert_eq!(records[0].payload_str(), Some("plain"));
    assert_eq!(records[0].key, None);
    assert_eq!(records[1].partition, 2);
    assert_eq!(records[1].offset, 0);
    assert_eq!(records[1].key_str(), Some("k1"));
    assert_eq!(records[1].payload_json().unwrap()["n"], 1);

    // Read to the end: the same records, never an end marker (this read's or an earlier one's).
    for _ in 0..2 {
        let to_end = read_topic_to_end(&bootstrap, topic, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(to_end, records);
    }
    assert!(
        read_topic_to_end(
            &bootstrap,
            &format!("harness.unknown.{}", random_hex(8)),
            Duration::from_secs(10)
        )
        .await
        .unwrap()
        .is_empty(),
        "a topic the broker does not know reads as empty"
    );
}

/// Sends the payloads `p<partition>-<n>` for `n` in `range` to `partition`, in order.
async fn send_range(producer: &FutureProducer, topic: &str, partition: i32, range: Range<usize>) {
    for n in range {
        let payload = format!("p{partition}-{n}");
        producer
            .send(
                FutureRecord::<[u8], str>::to(topic)
                    .partition(partition)
                    .payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

fn test_producer(bootstrap: &str) -> FutureProducer {
    client_config(bootstrap)
        .set("message.timeout.ms", "10000")
        .create()
        .unwrap()
}

/// A partition whose records stop for longer than a reader waiting for quiet would wait (here
/// while they are written; a busy broker or machine does the same to records already there) is
/// still read to its end marker, and so is every other one.
#[tokio::test]
async fn reading_to_the_end_waits_through_a_pause_in_a_partition() {
    let broker = Broker::shared().await.unwrap();
    let bootstrap = broker.bootstrap();
    let topic = &format!("harness.paused.{}", random_hex(8));
    create_topic(&bootstrap, topic, 3).await.unwrap();
    let producer = test_producer(&bootstrap);
    let end = EndMark::new();
    let reader = tokio::spawn({
        let (bootstrap, end) = (bootstrap.clone(), end.clone());
        let topic = topic.clone();
        async move { read_topic_to(&bootstrap, &topic, &end, Duration::from_secs(60)).await }
    });
    send_range(&producer, topic, 0, 0..200).await;
    send_range(&producer, topic, 1, 0..100).await;
    send_range(&producer, topic, 2, 0..200).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    send_range(&producer, topic, 1, 100..200).await;
    let offsets = end.write(&bootstrap, topic).await.unwrap();
    assert_eq!(offsets, [200, 200, 200]);

    let records = reader.await.unwrap().unwrap();
    assert_eq!(records.len(), 600);
    for p in 0..3 {
        let payloads: Vec<&str> = records
            .iter()
            .filter(|r| r.partition == p)
            .filter_map(|r| r.payload_str())
            .collect();
        let want: Vec<String> = (0..200).map(|n| format!("p{p}-{n}")).collect();
        assert_eq!(payloads, want, "partition {p}");
    }
}

/// A read whose end marker does not come on every partition fails within its timeout, naming
/// each partition that did not get there and how far it got. Another read's marker is no end.
#[tokio::test]
async fn reading_to_an_end_that_never_comes_fails_naming_the_partition() {
    let broker = Broker::shared().await.unwrap();
    let bootstrap = broker.bootstrap();
    let topic = &format!("harness.unended.{}", random_hex(8));
    create_topic(&bootstrap, topic, 3).await.unwrap();
    let producer = test_producer(&bootstrap);
    send_range(&producer, topic, 0, 0..5).await;
    send_range(&producer, topic, 1, 0..3).await;
    EndMark::new().write(&bootstrap, topic).await.unwrap();
    // This read's marker reaches partitions 0 and 2 only.
    let end = EndMark::new();
    for partition in [0, 2] {
        producer
            .send(
                FutureRecord::<str, str>::to(topic)
                    .partition(partition)
                    .key("cadenza-end-marker")
                    .headers(OwnedHeaders::new().insert(Header {
                        key: END_MARKER_HEADER,
                        value: Some(end.nonce()),
                    }))
                    .payload("{}"),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let started = Instant::now();
    let err = read_topic_to(&bootstrap, topic, &end, Duration::from_secs(3))
        .await
        .unwrap_err();
    let message = format!("{err:#}");
    assert!(started.elapsed() < Duration::from_secs(15), "{message}");
    assert!(
        message.contains(topic.as_str())
            && message.contains("partition 1 read through offset 3 (3 records)"),
        "{message}"
    );
    assert!(
        !message.contains("partition 0") && !message.contains("partition 2"),
        "{message}"
    );
}

#[tokio::test]
async fn broker_stops_and_starts_again_on_the_same_port() {
    let broker = Broker::start().await.unwrap();
    let port = broker.port();
    create_topic(&broker.bootstrap(), "before.restart", 1)
        .await
        .unwrap();
    let kept = produce(
        &broker.bootstrap(),
        "before.restart",
        Some(0),
        None,
        b"kept",
    )
    .await
    .unwrap();
    broker.stop().await.unwrap();
    assert!(!broker.is_running());
    broker.start_again().await.unwrap();
    assert_eq!(broker.port(), port);
    let count = topic_partition_count(&broker.bootstrap(), "before.restart")
        .await
        .unwrap();
    match broker.kind() {
        BrokerKind::Kafka => {
            // Apache Kafka keeps its log: the topic and what was written to it are still there.
            assert_eq!(count, Some(1));
            let records = read_topic_to_end(
                &broker.bootstrap(),
                "before.restart",
                Duration::from_secs(30),
            )
            .await
            .unwrap();
            assert_eq!(records.len(), 1, "{records:?}");
            assert_eq!((records[0].partition, records[0].offset), kept);
            assert_eq!(records[0].payload_str(), Some("kept"));
        }
        BrokerKind::Tansu => assert_eq!(
            count, None,
            "memory storage should have forgotten the topic"
        ),
    }
}

/// A cluster of three Kafka nodes: every topic on three replicas, two of them in sync for a
/// write; a node killed and started again comes back into the cluster with its data, and the
/// partitions it led move to another node meanwhile.
#[tokio::test]
async fn a_three_node_cluster_survives_losing_a_node() {
    let broker = Broker::start_cluster(3).await.unwrap();
    assert_eq!(broker.nodes().len(), 3);
    assert_eq!(broker.bootstrap().split(',').count(), 3);
    let bootstrap = broker.bootstrap();
    let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap).create().unwrap();
    admin
        .create_topics(
            &[NewTopic::new(
                "cluster.topic",
                3,
                TopicReplication::Fixed(3),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(20))),
        )
        .await
        .unwrap()
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let leader = wait_for(Duration::from_secs(20), "a leader of partition 0", || {
        let broker = &broker;
        async move { broker.leader_of("cluster.topic", 0).await }
    })
    .await
    .unwrap();
    let producer: FutureProducer = client_config(&bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    send_range(&producer, "cluster.topic", 0, 0..10).await;

    // The leader dies: the partition gets another leader and takes writes.
    broker.node(leader).unwrap().kill_9().unwrap();
    let next = wait_for(
        Duration::from_secs(30),
        "a new leader of partition 0",
        || {
            let broker = &broker;
            async move {
                Ok(broker
                    .leader_of("cluster.topic", 0)
                    .await
                    .ok()
                    .flatten()
                    .filter(|l| *l != leader))
            }
        },
    )
    .await
    .unwrap();
    assert_ne!(next, leader);
    send_range(&producer, "cluster.topic", 0, 10..20).await;

    broker.node(leader).unwrap().start_again().await.unwrap();
    assert!(broker.is_running());
    let records = read_topic_to_end(&bootstrap, "cluster.topic", Duration::from_secs(60))
        .await
        .unwrap();
    let payloads: Vec<&str> = records.iter().filter_map(|r| r.payload_str()).collect();
    let want: Vec<String> = (0..20).map(|n| format!("p0-{n}")).collect();
    assert_eq!(payloads, want);
}

#[tokio::test]
async fn wait_until_reports_what_it_waited_for() {
    let err = wait_until(Duration::from_millis(300), "the impossible", || async {
        Ok(false)
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("the impossible"), "{err}");

    let mut calls = 0;
    wait_until(Duration::from_secs(5), "the third call", || {
        calls += 1;
        let done = calls >= 3;
        async move { Ok(done) }
    })
    .await
    .unwrap();
    assert_eq!(calls, 3);
}
