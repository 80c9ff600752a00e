//! `infergate plugins` and `infergate pipelines`: register WebAssembly plugins and declare
//! pipelines in a data directory, offline (the server loads them at its next start; the HTTP
//! API does the same live). Validation is the server's: plugins are compiled against the
//! plugin world, pipelines must name existing plugins in the right position and an existing
//! model.

use super::table::Table;
use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use infergate_plugin_host::PluginKind;
use infergate_service::config::Config;
use infergate_service::names::validate_name;
use infergate_service::pipelines::registry::{kind_of, PluginRegistry};
use infergate_service::pipelines::spec::{PipelineSpec, PipelineSpecExt};
use infergate_store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Subcommand)]
pub enum PluginsCommand {
    /// Validate a .wasm component and register it under the name and version it describes.
    Add {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// The .wasm component(s).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List registered plugins.
    List {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum PipelinesCommand {
    /// Create or replace pipeline NAME from a JSON spec (see the book: docs/src/pipelines.md).
    Put {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        /// Pipeline name.
        name: String,
        /// The spec, as JSON text or @FILE.
        spec: String,
    },
    /// List pipelines.
    List {
        /// Data directory [default: ./data].
        #[arg(long, env = "INFERGATE_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
    },
}

fn open(data_dir: &Path) -> anyhow::Result<(Arc<Store>, PluginRegistry)> {
    let store = Arc::new(super::data_dir::open_store(&Some(data_dir.to_path_buf()))?);
    let host = Arc::new(infergate_service::startup::plugin_host(
        &Config::default(),
        &store,
    )?);
    let registry = PluginRegistry::load(host, &store)?;
    Ok((store, registry))
}

pub fn plugins(cmd: PluginsCommand) -> anyhow::Result<()> {
    match cmd {
        PluginsCommand::Add { data_dir, files } => {
            let (store, registry) = open(&data_dir)?;
            for file in files {
                let bytes =
                    std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
                let (loaded, created) = registry
                    .register(&store, &bytes)
                    .map_err(|e| anyhow!("{}: {}", file.display(), e.message))?;
                let record = &loaded.record;
                let what = if created { "registered" } else { "unchanged" };
                println!(
                    "{}@{} {what} ({} bytes)",
                    record.name, record.version, record.size_bytes
                );
            }
        }
        PluginsCommand::List { data_dir } => {
            let (_, registry) = open(&data_dir)?;
            let mut table = Table::new(&["NAME", "VERSION", "KIND", "SHA256"]);
            for p in registry.all() {
                let r = &p.record;
                table.row([&r.name, &r.version, &r.kind.to_string(), &r.sha256]);
            }
            table.print();
        }
    }
    Ok(())
}

pub fn pipelines(cmd: PipelinesCommand) -> anyhow::Result<()> {
    match cmd {
        PipelinesCommand::Put {
            data_dir,
            name,
            spec,
        } => {
            validate_name("pipeline", &name)?;
            let text = match spec.strip_prefix('@') {
                Some(path) => {
                    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?
                }
                None => spec,
            };
            let value: serde_json::Value =
                serde_json::from_str(&text).context("the pipeline spec is not JSON")?;
            let spec = PipelineSpec::from_json(&value)?;
            let (store, registry) = open(&data_dir)?;
            let models = store.list_model_versions()?;
            if models.iter().any(|m| m.name == name) {
                bail!("'{name}' is already a model name; pipelines and models share one namespace");
            }
            if !models
                .iter()
                .any(|m| m.name == spec.model && spec.model_version.is_none_or(|v| v == m.version))
            {
                bail!("model '{}' is not registered", spec.model);
            }
            if let Some(missing) = spec
                .stage_models()
                .find(|stage| !models.iter().any(|m| m.name == *stage))
            {
                bail!("model '{missing}' (text detection) is not registered");
            }
            let mut refs = Vec::new();
            for (r, kind) in spec
                .pre_refs()?
                .into_iter()
                .map(|r| (r, PluginKind::Pre))
                .chain(spec.post_refs()?.into_iter().map(|r| (r, PluginKind::Post)))
            {
                let plugin = registry.resolve(&r)?;
                if plugin.kind() != kind_of(kind) {
                    bail!(
                        "plugin {r} cannot run in this position (it is a {}-plugin)",
                        plugin.record.kind
                    );
                }
                refs.push((r.name, r.version));
            }
            let normalized = serde_json::to_value(&spec)?;
            let (_, created) = store.put_pipeline(&name, &normalized, &refs)?;
            println!(
                "pipeline {name} {}",
                if created { "created" } else { "replaced" }
            );
        }
        PipelinesCommand::List { data_dir } => {
            let store = super::data_dir::open_store(&Some(data_dir))?;
            for p in store.list_pipelines()? {
                println!("{:<24} {}", p.name, p.spec);
            }
        }
    }
    Ok(())
}
