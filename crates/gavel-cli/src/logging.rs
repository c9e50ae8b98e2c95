//! How the binary logs and traces: `tracing` events written to standard
//! error as text or JSON lines (`--log-format`), filtered by `GAVEL_LOG`,
//! and, for `gavel node --otlp-endpoint`, spans exported over OTLP/gRPC
//! (batched, resource `service.name=gavel`, `service.instance.id=<node id>`).

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

use crate::cli::LogFormat;

/// Where spans go when OTLP is configured.
pub struct Otlp<'a> {
    /// The collector's OTLP/gRPC endpoint (`http://host:4317`).
    pub endpoint: &'a str,
    /// The node id, as `service.instance.id`.
    pub node_id: u64,
}

/// Installs the global subscriber; returns the tracer provider to shut down
/// (flushing what is batched) at exit when OTLP is on. Must run inside the
/// tokio runtime: the exporter's channel is made on it.
pub fn init(
    default_filter: &str,
    format: LogFormat,
    otlp: Option<Otlp<'_>>,
) -> anyhow::Result<Option<SdkTracerProvider>> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GAVEL_LOG").unwrap_or_else(|_| default_filter.into());
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    let provider = match otlp {
        None => None,
        Some(otlp) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(otlp.endpoint)
                .build()
                .with_context(|| format!("the OTLP exporter for --otlp-endpoint {}", otlp.endpoint))?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name("gavel")
                .with_attribute(opentelemetry::KeyValue::new("service.instance.id", otlp.node_id.to_string()))
                .build();
            Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
        }
    };
    let spans =
        provider.as_ref().map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("gavel")).boxed());
    tracing_subscriber::registry().with(lines).with(spans).with(filter).init();
    Ok(provider)
}
