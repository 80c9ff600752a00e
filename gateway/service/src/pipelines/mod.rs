//! Pipelines: pre-plugins (WebAssembly) → model → post-plugins, served like a model. What a
//! pipeline is and holds; running one is the inference service's (`crate::infer::stages`).
//!
//! - [`spec`]: the JSON a user PUTs (with the engine's resize + normalize pre-op, when named),
//!   and plugin references (`name` or `name@version`).
//! - [`registry`]: compiled plugins in memory, upload validation and storage.
//! - [`text_regions`]: regions from a detector's probability map; crops and reading order.
//! - [`convert`]: tensors between the engine's and the plugin host's form.

pub mod convert;
pub mod registry;
pub mod spec;
pub mod text_regions;

use infergate_store::plugins::PipelineRecord;
use parking_lot::RwLock;
use spec::{PipelineSpec, PipelineSpecExt};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A saved pipeline, parsed.
pub struct Pipeline {
    pub record: PipelineRecord,
    pub spec: PipelineSpec,
}

/// The saved pipelines, kept in memory so the request path never queries SQLite.
#[derive(Default)]
pub struct Pipelines {
    by_name: RwLock<BTreeMap<String, Arc<Pipeline>>>,
}

impl Pipelines {
    /// Loads saved pipelines; one whose spec no longer parses is reported and left out.
    pub fn load(records: Vec<PipelineRecord>) -> Pipelines {
        let pipelines = Pipelines::default();
        for record in records {
            match PipelineSpec::from_json(&record.spec) {
                Ok(spec) => {
                    pipelines.insert(record, spec);
                }
                Err(e) => {
                    tracing::error!(pipeline = %record.name, error = %e, "saved pipeline is invalid")
                }
            }
        }
        pipelines
    }

    /// Saves a pipeline in memory and returns it; requests already running keep the old one.
    pub fn insert(&self, record: PipelineRecord, spec: PipelineSpec) -> Arc<Pipeline> {
        let pipeline = Arc::new(Pipeline { record, spec });
        self.by_name
            .write()
            .insert(pipeline.record.name.clone(), pipeline.clone());
        pipeline
    }

    pub fn get(&self, name: &str) -> Option<Arc<Pipeline>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Pipeline>> {
        self.by_name.read().values().cloned().collect()
    }

    pub fn remove(&self, name: &str) -> bool {
        self.by_name.write().remove(name).is_some()
    }
}
