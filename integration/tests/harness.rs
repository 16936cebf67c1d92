//! Smoke tests of the harness itself: the servers start, stop, restart, and talk.

use std::time::{Duration, Instant};

use cadenza_integration::{
    create_topic, list_topics, produce, read_topic, topic_partition_count, wait_until, Broker,
    Postgres,
};
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
    let broker = Broker::start().await.unwrap();
    let bootstrap = broker.bootstrap();
    let topic = "harness.smoke";

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
    assert!(list_topics(&bootstrap)
        .await
        .unwrap()
        .contains(&topic.to_string()));

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
}

#[tokio::test]
async fn broker_stops_and_starts_again_empty_on_the_same_port() {
    let broker = Broker::start().await.unwrap();
    let port = broker.port();
    create_topic(&broker.bootstrap(), "before.restart", 1)
        .await
        .unwrap();
    broker.stop().await.unwrap();
    assert!(!broker.is_running());
    broker.start_again().await.unwrap();
    assert_eq!(broker.port(), port);
    assert_eq!(
        topic_partition_count(&broker.bootstrap(), "before.restart")
            .await
            .unwrap(),
        None,
        "memory storage should have forgotten the topic"
    );
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
