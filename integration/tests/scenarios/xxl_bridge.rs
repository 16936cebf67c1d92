//! The XXL-JOB bridge end to end: a real admin, a `cadenza-worker` serving job types with
//! `--serve T=xxl:APP/HANDLER`, and two pyxxl executors (PyPI, unchanged) whose admin address is
//! the bridge. Runs are created and read through the admin's API, as a user sees them: success
//! with the handler's message and log, failure with its message, timeout → /kill (the executor
//! is idle again, its late result is counted once and does not change the run), a sharding
//! broadcast across both executors, and an executor SIGKILLed mid-run whose run finishes on the
//! other one. Then executors that answer garbage, refuse the token or hang: each run fails with
//! that reason and the worker goes on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use cadenza_integration::scenario::text;
use cadenza_integration::{
    cadenza_home, free_port, wait_for, wait_for_port, ApiClient, Cluster, ProcessHandle,
};
use cadenza_worker::xxl::protocol::{ExecutorClient, DEFAULT_CALL_TIMEOUT};
use serde_json::{json, Value};

const TOKEN: &str = "bridge-e2e-token";
const WAIT: Duration = Duration::from_secs(60);
const APP: &str = "billing-app";

fn pyxxl_python() -> PathBuf {
    std::env::var_os("CADENZA_PYXXL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| cadenza_home().join("pyxxl/bin/python"))
}

/// Starts a pyxxl executor of `app` on a free port whose admin is the bridge at `bridge`.
fn start_executor(cluster: &Cluster, name: &str, bridge: &str, app: &str) -> (ProcessHandle, u16) {
    let port = free_port().unwrap();
    let logs = cluster.dir().join(name);
    std::fs::create_dir_all(&logs).unwrap();
    let script = cadenza_integration::manifest_dir().join("tests/xxl/executor.py");
    let script = script.to_str().expect("the checkout path is UTF-8");
    let proc = cluster
        .spawn_process(
            name,
            &pyxxl_python(),
            &[
                script,
                &format!("{bridge}/xxl-job-admin/api/"),
                app,
                &port.to_string(),
                TOKEN,
                logs.to_str().unwrap(),
            ],
        )
        .unwrap();
    (proc, port)
}

/// The addresses the bridge lists for `app` (`GET /executors`).
async fn registered(bridge: &str, app: &str) -> anyhow::Result<Vec<String>> {
    let body: Value = reqwest::Client::new()
        .get(format!("{bridge}/executors"))
        .header("XXL-JOB-ACCESS-TOKEN", TOKEN)
        .send()
        .await?
        .json()
        .await?;
    Ok(body["apps"][app]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

async fn wait_registered(bridge: &str, app: &str, want: &[String]) {
    wait_for(
        WAIT,
        &format!("{want:?} registered for {app}"),
        || async move { Ok((registered(bridge, app).await? == want).then_some(())) },
    )
    .await
    .unwrap();
}

/// Waits until run `id` has ended (any final status) and returns it with its log.
async fn ended(api: &ApiClient, id: i64) -> Value {
    wait_for(WAIT, &format!("run {id} to end"), || async move {
        let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
        let done = ["succeeded", "failed", "timed_out", "cancelled", "discarded"]
            .contains(&r["status"].as_str().unwrap_or_default());
        Ok(done.then_some(r))
    })
    .await
    .unwrap()
}

async fn run_job(api: &ApiClient, body: Value) -> (i64, i64) {
    let job = api.create_job(&body).await.unwrap();
    let run = api.trigger_now(job).await.unwrap();
    (job, run)
}

/// `cadenza_worker_xxl_callbacks_total{group, outcome}` from the worker's metrics.
async fn callbacks_counted(metrics: &str, group: &str, outcome: &str) -> anyhow::Result<f64> {
    ApiClient::new(metrics, None)?
        .metric(&format!(
            "cadenza_worker_xxl_callbacks_total{{group=\"{group}\",outcome=\"{outcome}\"}}"
        ))
        .await
}

/// A `cadenza-worker` serving `serve` with the bridge on a free port and its metrics on another.
struct BridgeWorker {
    worker: cadenza_integration::WorkerHandle,
    url: String,
    metrics: String,
}

async fn bridge_worker(
    cluster: &Cluster,
    serve: &[&str],
    group: &str,
    extra_env: &[(&str, &str)],
) -> BridgeWorker {
    let (bridge_port, metrics_port) = (free_port().unwrap(), free_port().unwrap());
    let listen = format!("127.0.0.1:{bridge_port}");
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let mut env = vec![
        ("CADENZA_XXL_LISTEN", listen.as_str()),
        ("CADENZA_XXL_ACCESS_TOKEN", TOKEN),
        ("CADENZA_METRICS_LISTEN", metrics_listen.as_str()),
    ];
    env.extend_from_slice(extra_env);
    let worker = cluster
        .spawn_worker(&serve.join(","), group, &env)
        .await
        .unwrap();
    wait_for_port(bridge_port, WAIT).await.unwrap();
    BridgeWorker {
        worker,
        url: format!("http://{listen}"),
        metrics: format!("http://{metrics_listen}"),
    }
}

#[tokio::test]
async fn bridge_runs_jobs_on_pyxxl_executors() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let BridgeWorker {
        worker,
        url: bridge,
        metrics,
    } = bridge_worker(
        &cluster,
        &[
            "xb.echo=xxl:billing-app/echoHandler",
            "xb.fail=xxl:billing-app/failHandler",
            "xb.sleep=xxl:billing-app/sleepHandler",
            "xb.shard=xxl:billing-app/shardHandler",
            "xb.big=xxl:billing-app/bigHandler",
        ],
        "bridge",
        &[],
    )
    .await;

    let (exec_a, port_a) = start_executor(&cluster, "pyxxl-a", &bridge, APP);
    let (exec_b, port_b) = start_executor(&cluster, "pyxxl-b", &bridge, APP);
    let mut addresses = vec![
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    ];
    // The bridge orders addresses as XXL-JOB's admin does: sorted.
    addresses.sort();
    wait_registered(&bridge, APP, &addresses).await;

    // Addresses the bridge would not call are not registered: a cloud metadata address, a
    // fragment that would change the path called, credentials; the registry is unchanged.
    for bad in [
        "http://169.254.169.254:80",
        &format!("http://127.0.0.1:{port_a}/#/run"),
        "http://user:pw@10.1.2.3:9999",
    ] {
        let answer: Value = reqwest::Client::new()
            .post(format!("{bridge}/xxl-job-admin/api/registry"))
            .header("XXL-JOB-ACCESS-TOKEN", TOKEN)
            .json(&json!({"registryGroup": "EXECUTOR", "registryKey": APP, "registryValue": bad}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["code"], 500, "{bad}: {answer}");
    }
    assert_eq!(registered(&bridge, APP).await.unwrap(), addresses);

    // Success: the executor's return value is the run's message, its log the run's log.
    let (echo_job, id) = run_job(
        &api,
        json!({"name": "echo", "job_type": "xb.echo", "params": "invoice-42",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{run}\n{}", cluster.dump_logs());
    assert_eq!(run["message"], "echo invoice-42", "{run}");
    let log = text(&run["log"]);
    assert!(
        log.contains("xxl: running echoHandler on http://127.0.0.1:"),
        "{log}"
    );
    assert!(log.contains("echo got invoice-42"), "{log}");
    assert!(run["started_at"].is_string() && run["finished_at"].is_string());

    // Failure, with the exception's message.
    let (fail_job, id) = run_job(
        &api,
        json!({"name": "fail", "job_type": "xb.fail", "params": "x=1",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "failed", "{run}");
    let msg = text(&run["message"]);
    assert!(
        msg.contains("failed on the executor") && msg.contains("bad input: x=1"),
        "{msg}"
    );

    // An executor answering a 1.5 MB message: the finished event would be larger than a Kafka
    // record may be; its message is cut (with a note) and the run ends.
    let (_, id) = run_job(
        &api,
        json!({"name": "big", "job_type": "xb.big", "params": "1500000",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let msg = text(&run["message"]);
    assert!(
        msg.starts_with("big xxx") && msg.ends_with("more bytes left out]"),
        "{}",
        &msg[..msg.len().min(200)]
    );
    assert!(
        msg.len() <= cadenza_schemas::MAX_MESSAGE_BYTES,
        "{}",
        msg.len()
    );

    // A run that ended by its result sends no /kill (it would stop other runs of the job).
    for job in [echo_job, fail_job] {
        for exec in [&exec_a, &exec_b] {
            let said = exec.log();
            assert!(
                !said.contains(&format!("start kill job: job_id={job}\n")),
                "{said}"
            );
        }
    }

    // A forged callback (from anyone holding the token: every executor has it) guessing the
    // log id of a running run does not end it: log ids cannot be guessed.
    let (_, id) = run_job(
        &api,
        json!({"name": "nap", "job_type": "xb.sleep", "params": "3",
               "schedule": {"kind": "none"}}),
    )
    .await;
    wait_for(WAIT, "the nap to run", || {
        let api = api.clone();
        async move {
            let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
            Ok(text(&r["log"]).contains("sleeping 3").then_some(()))
        }
    })
    .await
    .unwrap();
    let forged: Vec<Value> = (0..4)
        .flat_map(|attempt| (0..3).map(move |dispatch| (attempt, dispatch)))
        .map(|(attempt, dispatch)| {
            json!({"logId": id * 10_000 + attempt * 1000 + dispatch, "logDateTim": 0,
                   "handleCode": 200, "handleMsg": "forged"})
        })
        .collect();
    let answer: Value = reqwest::Client::new()
        .post(format!("{bridge}/xxl-job-admin/api/callback"))
        .header("XXL-JOB-ACCESS-TOKEN", TOKEN)
        .json(&forged)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], 200, "{answer}");
    let run = ended(&api, id).await;
    assert_eq!(
        (&run["status"], &run["message"]),
        (&json!("succeeded"), &json!("slept 3.0")),
        "{run}"
    );

    // Timeout: Cadenza's timeout ends the run, /kill stops it on the executor (idle again at
    // once, not after 30 s), and the executor's own result, which comes after, is counted as
    // late and does not change the run.
    let (job, id) = run_job(
        &api,
        json!({"name": "slow", "job_type": "xb.sleep", "params": "30", "timeout_ms": 2000,
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "timed_out", "{run}");
    let log = text(&run["log"]);
    assert!(log.contains("sleeping 30"), "{log}");
    let on = addresses
        .iter()
        .find(|a| log.contains(&format!("running sleepHandler on {a}")))
        .unwrap_or_else(|| panic!("no executor named in {log}"));
    let client = ExecutorClient::new(Some(TOKEN.into()), DEFAULT_CALL_TIMEOUT).unwrap();
    wait_for(
        Duration::from_secs(5),
        "the killed run to leave the executor",
        || {
            let client = client.clone();
            async move { Ok(client.idle_beat(on, job).await.is_ok().then_some(())) }
        },
    )
    .await
    .unwrap();
    let group = cluster.group("bridge");
    wait_for(WAIT, "the late result to be counted", || {
        let (metrics, group) = (metrics.clone(), group.clone());
        async move { Ok((callbacks_counted(&metrics, &group, "late").await? == 1.0).then_some(())) }
    })
    .await
    .unwrap();
    // The late result is the executor's answer to /kill (CancelledError), not its own
    // timeout (TimeoutError, one second after Cadenza's).
    let late = worker
        .log()
        .lines()
        .find(|l| l.contains("recorded as late"))
        .map(String::from)
        .unwrap_or_default();
    assert!(late.contains("CancelledError"), "{late}");
    let (_, again) = api.get_json(&format!("/api/triggers/{id}")).await.unwrap();
    assert_eq!(again["status"], "timed_out", "{again}");

    // Sharding broadcast: one worker, so one run, sent to both executors with index p of 2.
    let (_, id) = run_job(
        &api,
        json!({"name": "shard", "job_type": "xb.shard", "route": "sharding_broadcast",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let msg = text(&run["message"]);
    for (p, address) in addresses.iter().enumerate() {
        let port = address.rsplit(':').next().unwrap();
        assert!(
            msg.contains(&format!(
                "[{p} of 2] {address} succeeded: shard {p}/2 on {port}"
            )),
            "{msg}"
        );
    }
    let log = text(&run["log"]);
    for (p, address) in addresses.iter().enumerate() {
        let port = address.rsplit(':').next().unwrap();
        let prefix = format!("[{p} of 2] ");
        let said = format!("shard {p} of 2 on {port}");
        assert!(
            log.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(&said)),
            "the executor's log of shard {p} is in the run's log: {log}"
        );
    }

    // An executor killed mid-run: its run is sent to the other address and finishes there.
    let (_, id) = run_job(
        &api,
        json!({"name": "long", "job_type": "xb.sleep", "params": "15", "route": "first",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let first = addresses[0].clone();
    wait_for(WAIT, "the run to start on the first executor", || {
        let (api, first) = (&api, &first);
        async move {
            let (_, r) = api.get_json(&format!("/api/triggers/{id}")).await?;
            Ok(text(&r["log"])
                .contains(&format!("running sleepHandler on {first}"))
                .then_some(()))
        }
    })
    .await
    .unwrap();
    let victim = if first.ends_with(&format!(":{port_a}")) {
        &exec_a
    } else {
        &exec_b
    };
    victim.kill_9().unwrap();
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{run}\n{}", worker.log_tail(40));
    assert_eq!(run["message"], "slept 15.0", "{run}");
    assert_eq!(run["attempt"], 1, "moved by the bridge, not redelivered");
    let log = text(&run["log"]);
    assert!(
        log.contains(&format!("executor {first} stopped answering")),
        "{log}"
    );
    assert!(
        log.contains(&format!("running sleepHandler on {}", addresses[1])),
        "{log}"
    );
    // (The forged callbacks above were handed to the other bridges: `forwarded`, not `unknown`.)
    assert_eq!(
        callbacks_counted(&metrics, &cluster.group("bridge"), "unknown")
            .await
            .unwrap(),
        0.0
    );
}

/// What the broken executor answers `/run`, by handler name.
async fn broken_run(Json(trigger): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match text(&trigger["executorHandler"]) {
        "garbage" => "<html>502 Bad Gateway</html>".into_response(),
        "refuse" => Json(json!({"code": 500, "msg": "The access token is wrong."})).into_response(),
        _ => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Json(json!({"code": 200})).into_response()
        }
    }
}

async fn broken_ok() -> Json<Value> {
    Json(json!({"code": 200, "msg": null}))
}

#[tokio::test]
async fn bridge_fails_runs_on_broken_executors_and_goes_on() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let BridgeWorker { url: bridge, .. } = bridge_worker(
        &cluster,
        &[
            "xb.garbage=xxl:broken-app/garbage",
            "xb.refuse=xxl:broken-app/refuse",
            "xb.hang=xxl:broken-app/hang",
            "xb.nobody=xxl:absent-app/echoHandler",
            "xb.echo=xxl:billing-app/echoHandler",
        ],
        "bridge",
        &[
            ("CADENZA_XXL_ADDRESS_WAIT_MS", "1000"),
            // The broken executor registers once, without beating.
            ("CADENZA_XXL_DEAD_AFTER_MS", "600000"),
        ],
    )
    .await;

    // A broken executor: it registers like any other, then answers /run badly.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let broken = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/run", axum::routing::post(broken_run))
        .route("/kill", axum::routing::post(broken_ok))
        .route("/log", axum::routing::post(broken_ok))
        .route("/beat", axum::routing::post(broken_ok));
    tokio::spawn(async move { axum::serve(listener, app).await });
    register(&bridge, "broken-app", &broken).await;
    let (_exec, port) = start_executor(&cluster, "pyxxl", &bridge, APP);
    wait_registered(&bridge, APP, &[format!("http://127.0.0.1:{port}")]).await;

    let cases = [
        ("xb.garbage", "answered something that is not XXL-JOB's"),
        (
            "xb.refuse",
            "refused (code 500): The access token is wrong.",
        ),
        ("xb.hang", "did not answer within 3s"),
        (
            "xb.nobody",
            "no executor of app \"absent-app\" is registered",
        ),
    ];
    let mut ids = Vec::new();
    for (job_type, _) in &cases {
        let (_, id) = run_job(
            &api,
            json!({"name": job_type, "job_type": job_type, "schedule": {"kind": "none"}}),
        )
        .await;
        ids.push(id);
    }
    for ((job_type, reason), id) in cases.iter().zip(ids) {
        let run = ended(&api, id).await;
        assert_eq!(run["status"], "failed", "{job_type}: {run}");
        assert!(text(&run["message"]).contains(reason), "{job_type}: {run}");
    }

    // The worker goes on: a healthy executor's run still succeeds.
    let (_, id) = run_job(
        &api,
        json!({"name": "echo", "job_type": "xb.echo", "params": "still here",
               "schedule": {"kind": "none"}}),
    )
    .await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["message"], "echo still here");
}

#[tokio::test]
async fn bridge_workers_share_executors_and_results() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let echo = ["xb.echo=xxl:billing-app/echoHandler"];
    let b1 = bridge_worker(&cluster, &echo, "bridges", &[]).await;
    let b2 = bridge_worker(&cluster, &echo, "bridges", &[]).await;
    let (bridge1, bridge2) = (&b1.url, &b2.url);

    // The executor knows only the first bridge; the second learns of it from the first.
    let (_exec, port) = start_executor(&cluster, "pyxxl", bridge1, APP);
    let address = vec![format!("http://127.0.0.1:{port}")];
    wait_registered(bridge1, APP, &address).await;
    wait_registered(bridge2, APP, &address).await;

    let topic = cluster
        .topics()
        .trigger(&cadenza_schemas::JobType::parse("xb.echo").unwrap());
    let live = vec![b1.worker.id().to_owned(), b2.worker.id().to_owned()];
    api.wait_assignment(&topic, &live, 6, WAIT).await.unwrap();

    // Round robin over the two workers: runs taken by the second bridge get their results,
    // which the executor sends to the first, through the topic.
    let job = api
        .create_job(
            &json!({"name": "echo", "job_type": "xb.echo", "params": "shared",
                            "route": "round", "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(api.trigger_now(job).await.unwrap());
    }
    let mut by_worker = std::collections::BTreeMap::<String, usize>::new();
    for id in ids {
        let run = ended(&api, id).await;
        assert_eq!(
            run["status"],
            "succeeded",
            "{run}\n{}",
            cluster.dump_logs_tail(30)
        );
        assert_eq!(run["message"], "echo shared");
        *by_worker
            .entry(text(&run["worker_id"]).to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        by_worker.keys().cloned().collect::<Vec<_>>(),
        {
            let mut l = live.clone();
            l.sort();
            l
        },
        "both bridges ran some"
    );
    assert!(
        callbacks_counted(&b1.metrics, &cluster.group("bridges"), "forwarded")
            .await
            .unwrap()
            >= 1.0
    );

    // A record on the shared topic that no bridge signed (anything else that can write to the
    // topic) registers nothing: it goes to the DLQ with the reason.
    let forged = json!({"from": "mallory", "at_ms": chrono::Utc::now().timestamp_millis(),
                        "event": "beat", "app": "evil-app", "address": "http://10.6.6.6:9999"});
    cadenza_integration::produce(
        &cluster.brokers(),
        &cluster.topics().xxl_bridge(),
        None,
        Some(b"evil-app"),
        &serde_json::to_vec(&forged).unwrap(),
    )
    .await
    .unwrap();
    let dlq = cluster.dlq_records(Duration::from_secs(30)).await.unwrap();
    assert!(
        dlq.iter().any(|r| r
            .to_string()
            .contains("without a valid cadenza-signature header")),
        "{dlq:?}"
    );
    for bridge in [bridge1, bridge2] {
        assert!(registered(bridge, "evil-app").await.unwrap().is_empty());
    }
}

/// What a scripted executor saw, for [`scripted_executor`].
#[derive(Default)]
struct Seen {
    /// (handler, log id, job id) of every `/run`.
    runs: Vec<(String, i64, i64)>,
    /// `/log` answers given.
    log_answers: usize,
    /// Job ids of every `/kill`.
    kills: Vec<i64>,
}

type SeenBy = std::sync::Arc<std::sync::Mutex<Seen>>;

/// One `/log` answer of the `chatty` handler: 1,500 new lines of 1,000 bytes.
const CHATTY_LINES: i64 = 1500;

/// An executor that takes every run and never calls back (the test does), answers `/idleBeat`
/// busy, and answers `/log` of a `chatty` run with [`CHATTY_LINES`] new lines every time (of
/// any other run with nothing new); it closes every
/// connection after its answer, so it is gone as soon as its listener is.
async fn scripted_executor(listener: tokio::net::TcpListener, seen: SeenBy) {
    use axum::extract::State;
    use axum::routing::post;
    async fn run(State(s): State<SeenBy>, Json(t): Json<Value>) -> Json<Value> {
        let handler = text(&t["executorHandler"]).to_owned();
        let (log_id, job_id) = (t["logId"].as_i64().unwrap(), t["jobId"].as_i64().unwrap());
        s.lock().unwrap().runs.push((handler, log_id, job_id));
        Json(json!({"code": 200}))
    }
    async fn log(State(s): State<SeenBy>, Json(p): Json<Value>) -> Json<Value> {
        let from = p["fromLineNum"].as_i64().unwrap_or(1);
        let chatty = {
            let s = s.lock().unwrap();
            let id = p["logId"].as_i64();
            s.runs
                .iter()
                .any(|(h, l, _)| h == "chatty" && Some(*l) == id)
        };
        if !chatty {
            return Json(json!({"code": 200, "content": {"fromLineNum": from,
                "toLineNum": from - 1, "logContent": "", "isEnd": false}}));
        }
        let line = "x".repeat(999);
        let content = vec![line.as_str(); CHATTY_LINES as usize].join("\n");
        s.lock().unwrap().log_answers += 1;
        Json(json!({"code": 200, "content": {"fromLineNum": from,
            "toLineNum": from + CHATTY_LINES - 1, "logContent": content, "isEnd": false}}))
    }
    async fn kill(State(s): State<SeenBy>, Json(p): Json<Value>) -> Json<Value> {
        s.lock().unwrap().kills.push(p["jobId"].as_i64().unwrap());
        Json(json!({"code": 200}))
    }
    async fn busy() -> Json<Value> {
        Json(json!({"code": 500, "msg": "job thread is running or has trigger queue."}))
    }
    let app = axum::Router::new()
        .route("/run", post(run))
        .route("/log", post(log))
        .route("/kill", post(kill))
        .route("/beat", post(broken_ok))
        .route("/idleBeat", post(busy))
        .layer(axum::middleware::map_response(
            |mut r: axum::response::Response| async move {
                r.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
                r
            },
        ))
        .with_state(seen);
    axum::serve(listener, app).await.unwrap();
}

/// Registers `address` for `app` with the bridge, as an executor does once.
async fn register(bridge: &str, app: &str, address: &str) {
    let r = reqwest::Client::new()
        .post(format!("{bridge}/xxl-job-admin/api/registry"))
        .header("XXL-JOB-ACCESS-TOKEN", TOKEN)
        .json(&json!({"registryGroup": "EXECUTOR", "registryKey": app, "registryValue": address}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!((status, &body["code"]), (200, &json!(200)), "{body}");
}

/// Calls back a run's success as its executor would.
async fn call_back(bridge: &str, log_id: i64, msg: &str) {
    let r = reqwest::Client::new()
        .post(format!("{bridge}/xxl-job-admin/api/callback"))
        .header("XXL-JOB-ACCESS-TOKEN", TOKEN)
        .json(&json!([{"logId": log_id, "logDateTim": 0, "handleCode": 200, "handleMsg": msg}]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// Waits until `seen` shows a `/run` of `handler` and returns its log id and job id.
async fn run_seen(seen: &SeenBy, handler: &str) -> (i64, i64) {
    wait_for(WAIT, &format!("a /run of {handler}"), || async {
        let s = seen.lock().unwrap();
        Ok(s.runs
            .iter()
            .find(|(h, ..)| h == handler)
            .map(|(_, log_id, job_id)| (*log_id, *job_id)))
    })
    .await
    .unwrap()
}

/// An executor that writes its log without end has 4 MiB of it copied into the run (with a note
/// saying where the rest is), not all of it; an executor a run was moved away from (it refused
/// three polls in a row) gets `/kill` for it as soon as it answers again, so the run does not go
/// on in two places.
#[tokio::test]
async fn bridge_caps_copied_logs_and_kills_a_moved_run_when_its_executor_is_back() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();
    let BridgeWorker { url: bridge, .. } = bridge_worker(
        &cluster,
        &[
            "xb.chatty=xxl:moody-app/chatty",
            "xb.vanish=xxl:moody-app/vanish",
        ],
        "bridge",
        &[("CADENZA_XXL_DEAD_AFTER_MS", "600000")],
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let first_addr = listener.local_addr().unwrap();
    let first_seen = SeenBy::default();
    let first = tokio::spawn(scripted_executor(listener, first_seen.clone()));
    register(&bridge, "moody-app", &format!("http://{first_addr}")).await;

    // The log: polled once a second, 1.5 MB an answer, copied up to 4 MiB: three answers.
    let (_, id) = run_job(
        &api,
        json!({"name": "chatty", "job_type": "xb.chatty", "schedule": {"kind": "none"}}),
    )
    .await;
    let (log_id, _) = run_seen(&first_seen, "chatty").await;
    wait_for(WAIT, "three answers of the executor's log", || async {
        Ok((first_seen.lock().unwrap().log_answers >= 3).then_some(()))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        first_seen.lock().unwrap().log_answers,
        3,
        "no more of the log is asked for once 4 MiB are copied"
    );
    call_back(&bridge, log_id, "talked enough").await;
    let run = ended(&api, id).await;
    assert_eq!(run["status"], "succeeded", "{}", run["message"]);
    let log = text(&run["log"]);
    assert!(
        log.contains("bytes of the executor's log copied; the rest is on the executor"),
        "{}",
        &log[log.len().saturating_sub(500)..]
    );

    // The move: the executor goes away mid-run; a second one takes the run after 3 refused
    // polls; the first is told to kill the run once it listens again.
    let (_, id) = run_job(
        &api,
        json!({"name": "vanish", "job_type": "xb.vanish", "schedule": {"kind": "none"}}),
    )
    .await;
    let (_, job_id) = run_seen(&first_seen, "vanish").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second_seen = SeenBy::default();
    register(
        &bridge,
        "moody-app",
        &format!("http://{}", listener.local_addr().unwrap()),
    )
    .await;
    let _second = tokio::spawn(scripted_executor(listener, second_seen.clone()));
    first.abort();
    let _ = first.await;
    let (second_log_id, _) = run_seen(&second_seen, "vanish").await;
    assert!(
        first_seen.lock().unwrap().kills.is_empty(),
        "it was not reachable"
    );
    call_back(&bridge, second_log_id, "done elsewhere").await;
    let run = ended(&api, id).await;
    assert_eq!(
        (&run["status"], &run["message"]),
        (&json!("succeeded"), &json!("done elsewhere")),
        "{}",
        run["message"]
    );
    let log = text(&run["log"]);
    assert!(
        log.contains("stopped answering (3 polls refused); trying another address"),
        "{}",
        &log[log.len().saturating_sub(2000)..]
    );
    let listener = tokio::net::TcpListener::bind(first_addr).await.unwrap();
    let _back = tokio::spawn(scripted_executor(listener, first_seen.clone()));
    wait_for(
        Duration::from_secs(20),
        "/kill on the executor that came back",
        || async {
            Ok(first_seen
                .lock()
                .unwrap()
                .kills
                .contains(&job_id)
                .then_some(()))
        },
    )
    .await
    .unwrap();
}
