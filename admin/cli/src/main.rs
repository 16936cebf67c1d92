//! `cadenza`: the command line over the admin's HTTP API (see `cadenza --help`).

#[tokio::main]
async fn main() {
    std::process::exit(cadenza_cli::main().await);
}
