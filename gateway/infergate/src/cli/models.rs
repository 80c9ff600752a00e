//! `infergate models`: register and list model versions in a data directory (offline).

use super::data_dir::open_store;
use super::table::Table;
use anyhow::Context;
use clap::Subcommand;
use infergate_engine::kernels::DeviceChoice;
use infergate_service::config::{Config, Device};
use infergate_service::model_repository::{ModelRepository, ParsedConfig};
use std::path::PathBuf;

#[derive(Subcommand)]
pub(super) enum ModelsCommand {
    /// Validate a model file and register it as the next version of NAME: ONNX Runtime loads a
    /// .onnx file; a .gguf file's header, tensors and vocabulary are checked.
    Add {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// Path of libonnxruntime.so [default: $ORT_DYLIB_PATH].
        #[arg(long)]
        ort_lib: Option<PathBuf>,
        /// Model name.
        #[arg(long)]
        name: String,
        /// Model configuration as JSON (e.g. '{"dynamic_batching": {}}').
        #[arg(long)]
        config: Option<String>,
        /// Skip when the latest version of NAME already has this exact file.
        #[arg(long)]
        if_changed: bool,
        /// The .onnx or .gguf file.
        file: PathBuf,
    },
    /// List registered model versions.
    List {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
}

pub(super) fn run(cmd: ModelsCommand) -> anyhow::Result<()> {
    match cmd {
        ModelsCommand::Add {
            data_dir,
            ort_lib,
            name,
            config,
            if_changed,
            file,
        } => {
            let store = std::sync::Arc::new(open_store(&Some(data_dir))?);
            let config = match config {
                Some(text) => ParsedConfig::parse(&text)?,
                None => ParsedConfig::empty(),
            };
            if if_changed {
                let bytes =
                    std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
                let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
                let latest = store
                    .list_model_versions()?
                    .into_iter()
                    .rfind(|r| r.name == name);
                if let Some(latest) = latest.filter(|r| r.sha256 == sha && r.config == config.value)
                {
                    eprintln!(
                        "{name} version {} already has this file; skipped",
                        latest.version
                    );
                    return Ok(());
                }
            }
            let mut cfg = Config {
                ort_lib,
                ..Config::default()
            };
            // Registering only loads the file into ONNX Runtime to check it: no native op runs,
            // so no GPU is looked for (and none is reported missing).
            cfg.engine.device = Device(DeviceChoice::Cpu);
            let engine =
                infergate_engine::Engine::new(infergate_service::startup::engine_config(&cfg)?)?;
            let record = ModelRepository::new(store, std::sync::Arc::new(engine))
                .register_file(&name, &file, &config)?;
            println!(
                "{} version {} ({}, {} bytes)",
                record.name, record.version, record.sha256, record.size_bytes
            );
        }
        ModelsCommand::List { data_dir } => {
            let store = open_store(&Some(data_dir))?;
            let mut table = Table::new(&["NAME", "VERSION", "SIZE", "SHA256"]);
            for r in store.list_model_versions()? {
                table.row([
                    r.name,
                    r.version.to_string(),
                    r.size_bytes.to_string(),
                    r.sha256,
                ]);
            }
            table.print();
        }
    }
    Ok(())
}
