//! The `infergate` command, one module per subcommand: `serve` runs the gateway, `worker` joins
//! a manager; `keys`, `models`, `plugins`, `pipelines` and `workers` work offline on a data
//! directory, and `keys` and `workers` also online through the admin API (`--url`, in
//! [`client`]); `reference` prints the configuration and command-line references. Tables are
//! printed by [`table`].

mod api_reference;
mod cli_reference;
mod client;
mod config_reference;
mod data_dir;
mod keys;
mod models;
mod otlp_grpc;
mod pipelines;
mod reference;
mod serve;
mod split_layer;
mod table;
mod traces;
mod workers;

pub use serve::ServeArgs;

use anyhow::Context;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "infergate",
    version,
    about = "TLS edge gateway for machine-learning inference",
    long_about = "infergate serves machine-learning models (ONNX models on its own engine, GGUF chat models on llama.cpp) over KServe v2 (HTTP and gRPC), the OpenAI API and WebSockets, behind TLS, API keys with scopes and per-key rate limits. Keys, models, plugins and pipelines live in SQLite in the data directory, or in PostgreSQL shared by replicas; workers on other hosts can run the models.\n\nStart with `infergate serve`; the first start prints an admin API key and saves it to DATA_DIR/admin.key."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    ///
    /// Every flag has an INFERGATE_* variable and a key in the configuration file (see `infergate
    /// reference config`). The first start on an empty store creates an admin key, prints it
    /// once and writes it to DATA_DIR/admin.key (mode 0600). The server logs a line containing
    /// `listening on` when it accepts connections, then (with gRPC on) one containing `grpc
    /// listening on`. On SIGTERM or SIGINT it turns readiness off, lets in-flight requests and
    /// streams finish (up to `limits.shutdown_grace_s`) and exits 0.
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
    /// Print the configuration or command-line reference (Markdown), generated from the
    /// definitions the server parses.
    #[command(subcommand)]
    Reference(reference::ReferenceCommand),
}

pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The command's own arguments: where each came from (a flag or the environment).
    let mut own = &matches;
    while let Some((_, sub)) = own.subcommand() {
        own = sub;
    }
    // `serve` and `worker` start logging themselves (in `run`): whether traces are exported
    // is in their configuration. The offline commands print what they did; the engine's and
    // plugin host's start-up lines only when something is wrong.
    if !matches!(cli.command, Command::Serve(_) | Command::Worker(_)) {
        init_logging("text", "warn", None);
    }
    match settle(&mut cli, own).and_then(|()| run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("infergate: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The log filter of `serve` and `worker` without `INFERGATE_LOG`: llama.cpp reports every
/// tensor it loads at info level, so only its warnings.
const SERVER_LOG: &str = "info,llama-cpp-2=warn";

/// Installs the log output on standard error, and with `traces` the OpenTelemetry export
/// beside it; the export is returned to be shut down at exit.
fn init_logging(
    format: &str,
    default_filter: &str,
    traces: Option<traces::Settings>,
) -> Option<traces::Export> {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("INFERGATE_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colours only for a person at a terminal: a log file or journald gets plain text, and
    // every span's fields are formatted once per request without the escape codes (at the
    // default level the request span's three fields took ≈ 7,900 instructions with them).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let Some(settings) = traces else {
        // Without an export the subscriber stays the plain formatter with one global filter:
        // the cheapest per request.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        if format == "json" {
            builder.json().init();
        } else {
            builder.init();
        }
        return None;
    };
    with_export(format, filter, ansi, &settings)
}

/// The log output and the OpenTelemetry layer, each seeing its own spans
/// ([`split_layer`]): the log keeps `INFERGATE_LOG` and leaves out the spans that exist only
/// for traces; the traces get infergate's own spans and events at info and above whatever the
/// log level.
fn with_export(
    format: &str,
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    settings: &traces::Settings,
) -> Option<traces::Export> {
    use tracing_subscriber::fmt::format::{DefaultFields, JsonFields};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    // Static by target and level, so a callsite neither side wants is never evaluated again: a
    // dynamic filter would make every debug and trace callsite of every crate (h2, rustls...)
    // ask it on each hit.
    let filter = match format!("{}=off", infergate_telemetry::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let (export, tracer) = match traces::start(settings) {
        Ok(started) => started,
        Err(e) => {
            let log = if format == "json" {
                log.json().with_filter(filter).boxed()
            } else {
                log.with_filter(filter).boxed()
            };
            tracing_subscriber::registry().with(log).init();
            // The operator's setting is wrong, not the request path: serve without traces.
            tracing::error!("traces are not exported: {e:#}");
            return None;
        }
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        // Nothing here reads OpenTelemetry's current context (the hop asks the current span),
        // so entering a span need not attach one: a request's span is entered at every poll.
        .with_context_activation(false);
    let layers = if format == "json" {
        split_layer::Split::<JsonFields, _, _>::new(log.json(), filter, spans).boxed()
    } else {
        split_layer::Split::<DefaultFields, _, _>::new(log, filter, spans).boxed()
    };
    tracing_subscriber::registry().with(layers).init();
    infergate_telemetry::set_exporting();
    tracing::info!(
        endpoint = settings.endpoint,
        role = settings.role,
        sample_ratio = settings.sample_ratio,
        protocol = ?settings.protocol,
        "exporting traces over OTLP"
    );
    Some(export)
}

/// Settles what the parsed arguments leave open, with `own`, the command's own matches.
fn settle(cli: &mut Cli, own: &ArgMatches) -> anyhow::Result<()> {
    match &mut cli.command {
        Command::Keys(cmd) => cmd.target_mut().settle(own),
        Command::Workers(cmd) => cmd.target_mut().settle(own),
        _ => Ok(()),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let log_format = args.log_format().unwrap_or_else(|| "text".into());
            let config = match args.into_config() {
                Ok(config) => config,
                Err(e) => {
                    init_logging(&log_format, SERVER_LOG, None);
                    return Err(e);
                }
            };
            let traces = config
                .tracing
                .otlp_endpoint
                .clone()
                .map(|endpoint| traces::Settings {
                    endpoint,
                    protocol: config.tracing.otlp_protocol,
                    service_name: config.tracing.service_name.clone(),
                    // Without its own engine the server only routes to workers.
                    role: if config.cluster.local_engine {
                        "server"
                    } else {
                        "manager"
                    },
                    sample_ratio: config.tracing.sample_ratio,
                    max_queued_spans: config.tracing.max_queued_spans.get(),
                });
            let export = init_logging(&config.log_format, SERVER_LOG, traces);
            let served = async_runtime(config.async_threads())
                .and_then(|runtime| runtime.block_on(infergate_server::app::serve(config)));
            if let Some(export) = export {
                export.shutdown();
            }
            served
        }
        Command::Keys(cmd) => keys::run(cmd),
        Command::Models(cmd) => models::run(cmd),
        Command::Plugins(cmd) => pipelines::plugins(cmd),
        Command::Pipelines(cmd) => pipelines::pipelines(cmd),
        Command::Worker(args) => {
            let endpoint = match args.otlp_endpoint() {
                Ok(endpoint) => endpoint,
                Err(e) => {
                    init_logging("text", SERVER_LOG, None);
                    anyhow::bail!(e);
                }
            };
            let traces = endpoint.map(|(endpoint, protocol)| traces::Settings {
                endpoint: endpoint.to_owned(),
                protocol,
                service_name: "infergate".into(),
                role: "worker",
                sample_ratio: args.trace_sample_ratio(),
                max_queued_spans: 2048,
            });
            let export = init_logging("text", SERVER_LOG, traces);
            let served = async_runtime(args.async_threads())
                .and_then(|runtime| runtime.block_on(infergate_worker::agent::run(*args)));
            if let Some(export) = export {
                export.shutdown();
            }
            served
        }
        Command::Workers(cmd) => workers::run(cmd),
        Command::Reference(cmd) => reference::run(cmd, Cli::command()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed page equals what `infergate reference WHICH --write` would make of it.
    fn assert_current(page: &str, path: &str, which: &str, text: &str) {
        let expected = reference::splice(page, which, text).expect("the page has the markers");
        assert!(
            expected == page,
            "{path} differs from the reference the code prints: run \
             `cargo run -p infergate -- reference {which} --write {path}`"
        );
    }

    #[test]
    fn the_books_configuration_page_is_the_generated_reference() {
        assert_current(
            include_str!("../../../../docs/src/reference/configuration.md"),
            "docs/src/reference/configuration.md",
            "config",
            &config_reference::markdown(),
        );
    }

    #[test]
    fn the_books_command_line_page_is_the_generated_reference() {
        assert_current(
            include_str!("../../../../docs/src/reference/cli.md"),
            "docs/src/reference/cli.md",
            "cli",
            &cli_reference::markdown(Cli::command()),
        );
    }

    #[test]
    fn the_books_http_api_page_is_the_generated_reference() {
        assert_current(
            include_str!("../../../../docs/src/reference/http-api.md"),
            "docs/src/reference/http-api.md",
            "api",
            &api_reference::markdown(),
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
