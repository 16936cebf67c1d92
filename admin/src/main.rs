use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc's malloc: the scheduler allocates and frees many small buffers per
/// trigger (rows, records, routes), and glibc's allocator took about a fifth of the admin's CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry =
        cadenza_worker::telemetry::init("cadenza-admin", "info,sqlx=warn,rdkafka=warn");
    let config = cadenza_admin::config::AdminConfig::parse();
    if let Some(command) = &config.command {
        let done = cadenza_admin::run_command(&config, command, std::io::stdin().lock()).await?;
        println!("{done}");
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        trigger.cancel();
    });
    cadenza_admin::run(config, shutdown).await
}
