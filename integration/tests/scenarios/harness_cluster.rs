//! The cluster's process management, checked with stand-in `cadenza-admin` and `cadenza-worker`
//! scripts (so it does not depend on the real binaries' behaviour). This file holds a single
//! test because it points `CADENZA_BIN_DIR` at the stand-ins for the whole test process.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use cadenza_integration::{wait_for, Broker, Cluster, StatusCode};
use serde_json::json;

const FAKE_ADMIN: &str = r#"#!/usr/bin/env bash
echo "fake admin: db=$CADENZA_DATABASE_URL brokers=$CADENZA_BROKERS prefix=$CADENZA_TOPIC_PREFIX listen=$CADENZA_LISTEN rust_log=$RUST_LOG extra=${EXTRA:-}"
if [ -n "${FAKE_ADMIN_FAIL:-}" ]; then echo "boom: cannot start"; exit 3; fi
exec python3 -u - "${CADENZA_LISTEN##*:}" "$CADENZA_API_TOKEN" <<'PY'
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, token = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, {"ok": True})
        if self.headers.get("authorization") != "Bearer " + token:
            return self.reply(401, {"error": {"code": "unauthorized", "message": "no"}})
        self.reply(200, {"path": self.path})
    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        self.reply(201, {"echo": json.loads(self.rfile.read(n) or b"null")})
HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
"#;

const FAKE_WORKER: &str = r#"#!/usr/bin/env bash
echo "fake worker: args=$* id=$CADENZA_WORKER_ID group=$CADENZA_GROUP brokers=$CADENZA_BROKERS prefix=$CADENZA_TOPIC_PREFIX db=${CADENZA_DATABASE_URL:-unset}"
trap 'echo "got SIGTERM"; exit 0' TERM
while true; do sleep 0.05; done
"#;

fn write_script(dir: &Path, name: &str, body: &str) -> std::io::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, body)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn cluster_spawns_admins_and_workers_and_stops_them() {
    let bins = tempfile::tempdir().unwrap();
    write_script(bins.path(), "cadenza-admin", FAKE_ADMIN).unwrap();
    write_script(bins.path(), "cadenza-worker", FAKE_WORKER).unwrap();
    // Single test in this binary, nothing else reads the environment concurrently.
    std::env::set_var("CADENZA_BIN_DIR", bins.path());
    // A developer's shell variable must not leak into the children.
    std::env::set_var("CADENZA_DATABASE_URL", "postgres://leaked");

    // A broker of its own: dropping the cluster must stop it.
    let cluster = Cluster::start_on(Broker::start().await.unwrap())
        .await
        .unwrap();
    assert!(cluster.topic_prefix().starts_with('t') && cluster.topic_prefix().len() == 9);
    assert_eq!(cluster.token().len(), 32);
    let pool = cluster.pool().await.unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(db, cluster.database_name());
    pool.close().await;

    // An admin: env passed, healthz awaited, the API client carries the token.
    let admin = cluster.spawn_admin(&[("EXTRA", "x1")]).await.unwrap();
    let log = admin.log();
    assert!(
        log.contains(&format!("db={}", cluster.database_url())),
        "{log}"
    );
    assert!(log.contains(&format!("brokers={}", cluster.brokers())));
    assert!(log.contains(&format!("prefix={}", cluster.topic_prefix())));
    assert!(log.contains(&format!("listen={}", admin.listen())));
    assert!(log.contains("rust_log=info extra=x1"));
    let api = admin.api();
    let (status, body) = api.get_json("/api/jobs").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = api.with_token(None).get_json("/api/jobs").await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = api.post_json("/api/jobs", &json!({"a": 1})).await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["echo"]["a"], 1);

    // An admin that dies at start: the error carries its log.
    let err = cluster
        .spawn_admin(&[("FAKE_ADMIN_FAIL", "1")])
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("boom: cannot start"), "{err:#}");

    // Workers: unique ids, no database URL, SIGTERM and SIGKILL.
    let w1 = cluster
        .spawn_worker("demo.echo=noop", "g1", &[])
        .await
        .unwrap();
    let w2 = cluster
        .spawn_worker("demo.echo=noop,demo.fail=fail", "g1", &[])
        .await
        .unwrap();
    assert_ne!(w1.id(), w2.id());
    assert_eq!(w1.group(), format!("g1.{}", cluster.topic_prefix()));
    assert_eq!(w1.group(), cluster.group("g1"));
    w1.wait_for_log(&format!("id={}", w1.id()), Duration::from_secs(10))
        .await
        .unwrap();
    w2.wait_for_log(
        "args=--serve demo.echo=noop,demo.fail=fail",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert!(w1.log().contains("db=unset"), "{}", w1.log());

    let status = w1.terminate().await.unwrap();
    assert!(status.success(), "{status}");
    assert!(w1.log_tail(1).contains("got SIGTERM"));
    assert!(!w1.is_running());

    w2.pause().unwrap();
    w2.resume().unwrap();
    w2.kill_9().unwrap();
    assert!(!w2.is_running());
    assert!(!pid_alive(w2.pid()));

    // wait_for sees an outcome produced later.
    let w3 = cluster
        .spawn_worker("demo.sleep=sleep", "g2", &[])
        .await
        .unwrap();
    let found = wait_for(Duration::from_secs(10), "w3's banner", || {
        let log = w3.log();
        let want = format!("group={}", cluster.group("g2"));
        async move { Ok(log.contains(&want).then_some(log.len())) }
    })
    .await
    .unwrap();
    assert!(found > 0);

    let logs = cluster.dump_logs();
    assert!(logs.contains("admin-1") && logs.contains(w3.id()) && logs.contains("broker ("));

    // Dropping the cluster stops what still runs, by PID.
    let pids = [admin.pid(), w3.pid()];
    let pg_pid = cluster.postgres().pid().unwrap();
    let broker_pid = cluster.broker().pid().unwrap();
    drop(cluster);
    for pid in pids.into_iter().chain([pg_pid, broker_pid]) {
        assert!(!pid_alive(pid), "pid {pid} survived the cluster");
    }
}
