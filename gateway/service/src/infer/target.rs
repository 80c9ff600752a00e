//! What a `/v2/models/{name}` name addresses: a model version or a pipeline ([`super::resolve`]
//! finds it).

use crate::pipelines::Pipeline;
use infergate_store::models::ModelRecord;
use std::sync::Arc;

pub enum Target {
    Model(Arc<ModelRecord>),
    Pipeline(Arc<Pipeline>),
}
