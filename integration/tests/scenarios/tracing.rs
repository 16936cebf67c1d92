//! OpenTelemetry spans over OTLP/HTTP, received by a local collector stand-in (an HTTP server
//! that records what is POSTed to `/v1/traces`, in the `http/json` encoding the standard
//! `OTEL_EXPORTER_OTLP_PROTOCOL` selects). A run triggered by an API call that carries a W3C
//! `traceparent` is one trace across both processes: the API request span continues the
//! caller's trace, the admin's `publish` span starts the run's, the worker's `run` span is its
//! child (through the trigger record's header), and the admin's `ingest` spans of the run's
//! `started` and `finished` events are children of `run` (through the result records' header).
//! A failed run's `run` span has the error status.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::time::Duration;

use cadenza_integration::{wait_for, Cluster, Receiver};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    status: i64,
    attrs: Value,
}

impl Span {
    /// An attribute as a string (OTLP JSON gives 64-bit integers as strings).
    fn attr(&self, key: &str) -> Option<String> {
        let v = &self.attrs[key];
        ["stringValue", "intValue", "boolValue", "doubleValue"]
            .iter()
            .find_map(|k| match &v[k] {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            })
    }
}

/// Every span the collector got, from OTLP/JSON `ExportTraceServiceRequest` bodies.
fn spans(collector: &Receiver) -> Vec<Span> {
    let mut out = Vec::new();
    for r in collector.received() {
        assert_eq!(r.path, "/v1/traces", "spans go to the OTLP traces path");
        for rs in r.body["resourceSpans"].as_array().into_iter().flatten() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .and_then(|a| a["value"]["stringValue"].as_str())
                .unwrap_or_default()
                .to_owned();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let mut attrs = serde_json::Map::new();
                    for a in s["attributes"].as_array().into_iter().flatten() {
                        attrs.insert(
                            a["key"].as_str().unwrap_or_default().to_owned(),
                            a["value"].clone(),
                        );
                    }
                    out.push(Span {
                        service: service.clone(),
                        name: s["name"].as_str().unwrap_or_default().to_owned(),
                        trace_id: s["traceId"].as_str().unwrap_or_default().to_lowercase(),
                        span_id: s["spanId"].as_str().unwrap_or_default().to_lowercase(),
                        parent: s["parentSpanId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_lowercase(),
                        status: s["status"]["code"].as_i64().unwrap_or(0),
                        attrs: Value::Object(attrs),
                    });
                }
            }
        }
    }
    out
}

/// The run's spans once all four are in: (publish, run, ingest started, ingest finished).
fn run_spans(all: &[Span], trigger: i64) -> Option<(Span, Span, Span, Span)> {
    let id = trigger.to_string();
    let find = |service: &str, name: &str, event: Option<&str>| {
        all.iter()
            .find(|s| {
                s.service == service
                    && s.name == name
                    && s.attr("trigger_id").as_deref() == Some(&id)
                    && event.is_none_or(|e| s.attr("event").as_deref() == Some(e))
            })
            .cloned()
    };
    Some((
        find("cadenza-admin", "publish", None)?,
        find("cadenza-worker", "run", None)?,
        find("cadenza-admin", "ingest", Some("started"))?,
        find("cadenza-admin", "ingest", Some("finished"))?,
    ))
}

#[tokio::test]
async fn a_run_is_one_trace_from_the_api_call_to_the_ingested_result() {
    let cluster = Cluster::start().await.unwrap();
    let collector = Receiver::start().await.unwrap();
    let endpoint = collector.url("");
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        // Export every 200 ms instead of 5 s.
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ];
    let admin = cluster.spawn_admin(&otel).await.unwrap();
    let worker = cluster
        .spawn_worker("tr.ok=noop,tr.fail=fail", "tr", &otel)
        .await
        .unwrap();
    let api = admin.api();
    let topic = cluster
        .topics()
        .trigger(&cadenza_schemas::JobType::parse("tr.ok").unwrap());
    api.wait_assignment(&topic, &[worker.id().to_owned()], 6, WAIT)
        .await
        .unwrap();
    let ok = api
        .create_job(&json!({"name": "traced", "job_type": "tr.ok", "schedule": {"kind": "none"}}))
        .await
        .unwrap();
    let fail = api
        .create_job(
            &json!({"name": "traced-fail", "job_type": "tr.fail", "params": "boom",
            "schedule": {"kind": "none"}}),
        )
        .await
        .unwrap();

    // A scheduled job, so that scans write triggers.
    api.create_job(&json!({"name": "tick", "job_type": "tr.ok",
        "schedule": {"kind": "fix_rate", "every_ms": 500}}))
        .await
        .unwrap();

    // The caller's trace context goes in with the API call.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let resp = reqwest::Client::new()
        .post(api.url(&format!("/api/jobs/{ok}/trigger")))
        .bearer_auth(cluster.token())
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let body: Value = resp.json().await.unwrap();
    let run = body["trigger_ids"][0].as_i64().unwrap();
    let failed = api.trigger_now(fail).await.unwrap();
    api.wait_run_status(run, "succeeded", WAIT).await.unwrap();
    api.wait_run_status(failed, "failed", WAIT).await.unwrap();

    let (publish, run_span, started, finished) =
        wait_for(WAIT, "the run's spans at the collector", || {
            let all = spans(&collector);
            async move { Ok(run_spans(&all, run)) }
        })
        .await
        .unwrap();
    println!("publish {publish:?}\nrun {run_span:?}\nstarted {started:?}\nfinished {finished:?}");
    assert_eq!(publish.attr("job_id"), Some(ok.to_string()));
    assert_eq!(publish.attr("job_type").as_deref(), Some("tr.ok"));
    assert_eq!(publish.trace_id.len(), 32);
    // The worker's run continues the trace the trigger record's header carried.
    assert_eq!(run_span.trace_id, publish.trace_id);
    assert_eq!(run_span.parent, publish.span_id);
    assert_eq!(run_span.attr("job_id"), Some(ok.to_string()));
    assert_eq!(run_span.attr("status").as_deref(), Some("succeeded"));
    assert_ne!(run_span.status, 2, "a succeeded run is not an error");
    // The admin's ingest of its results hangs under the worker's run.
    for ingest in [&started, &finished] {
        assert_eq!(ingest.trace_id, publish.trace_id);
        assert_eq!(ingest.parent, run_span.span_id);
        assert_eq!(ingest.attr("job_id"), Some(ok.to_string()));
    }

    let (_, failed_run, _, failed_end) = wait_for(WAIT, "the failed run's spans", || {
        let all = spans(&collector);
        async move { Ok(run_spans(&all, failed)) }
    })
    .await
    .unwrap();
    assert_eq!(
        failed_run.status, 2,
        "a failed run's span has the error status"
    );
    assert_eq!(failed_run.attr("status").as_deref(), Some("failed"));
    assert_eq!(failed_end.parent, failed_run.span_id);
    assert_ne!(failed_run.trace_id, run_span.trace_id, "one trace per run");

    // The API call that triggered the run continued the caller's trace.
    let all = spans(&collector);
    let request = all
        .iter()
        .find(|s| s.service == "cadenza-admin" && s.trace_id == caller_trace)
        .unwrap_or_else(|| panic!("no admin span in the caller's trace among {all:#?}"));
    assert_eq!(request.name, "POST /api/jobs/{id}/trigger");
    assert_eq!(request.parent, caller_span);
    assert_eq!(request.attr("job_id"), Some(ok.to_string()));
    assert_eq!(
        request.attr("http.response.status_code").as_deref(),
        Some("202")
    );
    // Scans that wrote triggers are spans too (exported in batches: wait for one, as above).
    wait_for(WAIT, "a scan span at the collector", || {
        let all = spans(&collector);
        async move {
            Ok(all
                .iter()
                .any(|s| s.name == "scan" && s.service == "cadenza-admin")
                .then_some(()))
        }
    })
    .await
    .unwrap();
    cluster.stop_all(Duration::from_secs(10)).await.unwrap();
}
