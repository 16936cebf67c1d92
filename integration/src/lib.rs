//! The end-to-end test harness of Cadenza.
//!
//! Integration tests start real servers as child processes: a private PostgreSQL
//! ([`Postgres`]), Apache Kafka ([`Broker`]: the suite's shared broker, one of the test's own,
//! or a three-node cluster; Tansu with `CADENZA_TEST_BROKER=tansu`), and `cadenza-admin` /
//! `cadenza-worker` processes on top of them ([`Cluster`]). Everything listens on free loopback
//! ports and lives in temporary directories, so tests run in parallel and leave nothing behind.
//!
//! ```no_run
//! use std::time::Duration;
//! use cadenza_integration::{wait_for, Cluster};
//! use serde_json::json;
//!
//! # async fn example() -> anyhow::Result<()> {
//! let cluster = Cluster::start().await?;
//! let admin = cluster.spawn_admin(&[]).await?;
//! let _worker = cluster.spawn_worker("demo.echo=noop", "g1", &[]).await?;
//! let api = &admin.api();
//! let (status, job) = api
//!     .post_json("/api/jobs", &json!({"name": "j", "job_type": "demo.echo",
//!         "schedule": {"kind": "fix_rate", "every_ms": 500}}))
//!     .await?;
//! assert_eq!(status, 201);
//! let id = job["id"].as_i64().unwrap_or_default();
//! wait_for(Duration::from_secs(30), "two succeeded runs", || async move {
//!     let (_, runs) = api
//!         .get_json(&format!("/api/triggers?job_id={id}&status=succeeded"))
//!         .await?;
//!     Ok(runs.as_array().filter(|r| r.len() >= 2).map(|_| ()))
//! })
//! .await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every child process is started through `setpriv --pdeathsig KILL` when `setpriv` exists, so a
//! test process killed by a timeout does not leave servers behind. The signal is tied to the
//! thread that spawned the child: spawn from the test's own task (not from `spawn_blocking`).
//!
//! Set `CADENZA_KEEP_TMP=1` to keep the temporary directories (data, logs) after a test, and
//! `CADENZA_PG_STAT_STATEMENTS=1` to load `pg_stat_statements` into the PostgreSQL it starts.

#![forbid(unsafe_code)]

mod api;
mod bins;
mod broker;
mod cli;
mod cluster;
mod kafka;
mod postgres;
mod process;
mod receiver;
mod runs;
pub mod scenario;
mod smtp;
mod util;
mod wait;

pub use api::ApiClient;
pub use bins::{bin_dir, cadenza_bin, cadenza_home, tansu_bin};
pub use broker::{kafka_home, kafka_version, Broker, BrokerKind, BrokerNode};
pub use cli::{run_cli, CliOut};
pub use cluster::{AdminHandle, Cluster, WorkerHandle};
pub use kafka::{
    client_config, create_topic, list_topics, produce, read_topic, read_topic_to,
    read_topic_to_end, topic_partition_count, EndMark, TopicRecord, END_MARKER_HEADER,
};
pub use nix::sys::signal::Signal;
pub use postgres::Postgres;
pub use process::ProcessHandle;
pub use receiver::{Received, Receiver};
pub use reqwest::{Method, StatusCode};
pub use runs::json_time;
pub use smtp::{Mail, SmtpSink};
pub use util::{free_port, random_hex, wait_for_port};
pub use wait::{wait_for, wait_until};

/// The integration crate's directory, where its test files live: as the test runner says when
/// it runs the test (`CARGO_MANIFEST_DIR`), else where it was compiled. A test binary reused
/// from a build in another checkout of the project (one shared build directory) would otherwise
/// read that checkout's files.
pub fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
