//! The `infergate` command, one module per subcommand: `serve` runs the gateway, `worker` joins
//! a manager; `keys`, `models`, `plugins`, `pipelines` and `workers` work offline on a data
//! directory, and `keys` and `workers` also online through the admin API (`--url`, in
//! [`client`]). Tables are printed by [`table`].

mod client;
mod data_dir;
mod keys;
mod models;
mod pipelines;
mod serve;
mod table;
mod workers;

pub use serve::ServeArgs;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "infergate",
    version,
    about = "TLS edge gateway for machine-learning inference",
    long_about = "infergate serves ONNX models over KServe v2 (HTTP), with API keys, TLS and an embedded SQLite store.\n\nStart with `infergate serve`; the first start prints an admin API key and saves it to DATA_DIR/admin.key."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(Box<ServeArgs>),
    /// Create, list and revoke API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Register and list models in a data directory (offline; the server loads them at start).
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Register and list WebAssembly plugins in a data directory (offline).
    #[command(subcommand)]
    Plugins(pipelines::PluginsCommand),
    /// Declare and list pipelines in a data directory (offline).
    #[command(subcommand)]
    Pipelines(pipelines::PipelinesCommand),
    /// Run a worker: join a manager (`infergate serve`) and run model versions for it.
    Worker(Box<infergate_worker::args::WorkerArgs>),
    /// Join secrets for workers, and the workers that joined.
    #[command(subcommand)]
    Workers(workers::WorkersCommand),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = match &cli.command {
        Command::Serve(a) => a.log_format().unwrap_or_else(|| "text".into()),
        _ => "text".into(),
    };
    init_logging(&log_format);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infergate: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    use tracing_subscriber::EnvFilter;
    // llama.cpp reports every tensor it loads at info level: only its warnings by default.
    let filter = EnvFilter::try_from_env("INFERGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,llama-cpp-2=warn"));
    // Colours only for a person at a terminal: a log file or journald gets plain text, and
    // every span's fields are formatted once per request without the escape codes (at the
    // default level the request span's three fields took ≈ 7,900 instructions with them).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = args.into_config()?;
            let runtime = async_runtime(config.async_threads())?;
            runtime.block_on(infergate_server::app::serve(config))
        }
        Command::Keys(cmd) => keys::run(cmd),
        Command::Models(cmd) => models::run(cmd),
        Command::Plugins(cmd) => pipelines::plugins(cmd),
        Command::Pipelines(cmd) => pipelines::pipelines(cmd),
        Command::Worker(args) => {
            let runtime = async_runtime(args.async_threads())?;
            runtime.block_on(infergate_worker::agent::run(*args))
        }
        Command::Workers(cmd) => workers::run(cmd),
    }
}

/// The multi-threaded runtime `serve` and `worker` run on, with `threads` workers
/// (`infergate_engine::sizing::async_threads`); it logs the count it really has.
fn async_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let threads = runtime.metrics().num_workers();
    tracing::info!(threads, "async runtime");
    Ok(runtime)
}
