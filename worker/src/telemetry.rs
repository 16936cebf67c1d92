//! Logs and traces of the Cadenza binaries: `tracing` to stderr as always, and, when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) names a collector,
//! spans exported over OTLP/HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the default,
//! or `http/json`). Off otherwise: no exporter, no background thread, nothing sent.
//!
//! A run's spans form one trace, linked through the W3C `traceparent` header of its Kafka
//! records: the admin's `publish` span (its trace id is the one in the trigger's header), the
//! worker's `run` span (a child of it; the results it publishes carry the `run` span's context)
//! and the admin's `ingest` spans (children of `run`). Helpers here turn a header into a parent
//! ([`set_parent`]) and a span into a header ([`traceparent`]).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const TRACEPARENT: &str = "traceparent";

/// How long exiting waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether [`init`] started the span exporter. Per-run spans are only worth their cost when it
/// did; code on the hot path creates them only then.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// What [`init`] set up; dropping it flushes the spans not exported yet (at most a few seconds).
#[must_use = "dropping it at once stops the span exporter"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported (an OTLP endpoint is configured and the exporter started).
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            EXPORTING.store(false, Ordering::Relaxed);
            // The exporter's HTTP client may not be dropped on an async thread: flush and shut
            // down from a thread of our own.
            let done = std::thread::spawn(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT));
            if let Ok(Err(e)) = done.join() {
                eprintln!("OpenTelemetry: flushing spans at exit failed: {e}");
            }
        }
    }
}

/// Whether the standard variables ask for span export.
fn otlp_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Installs the global `tracing` subscriber: stderr logs filtered by `RUST_LOG` (else
/// `default_filter`), plus the OTLP span exporter when it is configured. `service` is the
/// `service.name` of the exported spans unless `OTEL_SERVICE_NAME` says otherwise.
pub fn init(service: &'static str, default_filter: &str) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let mut failure = None;
    let provider = if otlp_configured() {
        match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => {
                let mut resource = Resource::builder();
                if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
                    resource = resource.with_service_name(service);
                }
                Some(
                    SdkTracerProvider::builder()
                        .with_batch_exporter(exporter)
                        .with_resource(resource.build())
                        .build(),
                )
            }
            Err(e) => {
                failure = Some(e.to_string());
                None
            }
        }
    } else {
        None
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .init();
    if let Some(e) = failure {
        tracing::warn!(error = %e, "OTLP span exporter not started; spans are not exported");
    } else if provider.is_some() {
        EXPORTING.store(true, Ordering::Relaxed);
        tracing::info!("exporting spans over OTLP/HTTP");
    }
    Telemetry { provider }
}

/// Makes the context of a W3C `traceparent` header the parent of `span`. Does nothing when the
/// header is absent or malformed, or spans are not exported.
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(tp) = traceparent.filter(|_| exporting()) else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), tp.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        // An error only means the span is not recorded by the OpenTelemetry layer (export off).
        let _ = span.set_parent(cx);
    }
}

/// The W3C `traceparent` of `span`'s OpenTelemetry context, when spans are exported (`None`
/// otherwise: callers then send a header of their own).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if !exporting() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_spans_have_no_traceparent_and_parents_are_ignored() {
        let span = tracing::info_span!("publish");
        set_parent(
            &span,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        set_parent(&span, Some("garbage"));
        assert_eq!(traceparent(&span), None);
    }
}
