//! A name (and version) to its [`Target`]. Models win; models and pipelines share one namespace
//! (saving a pipeline under a model's name is refused).

use super::target::Target;
use crate::error::{ApiResult, Kind};
use crate::state::AppState;

/// A model version (the one its policy serves when `version` is None), else a pipeline of that
/// name (pipelines have the one version 1).
pub fn resolve(state: &AppState, name: &str, version: Option<u64>) -> ApiResult<Target> {
    match state.catalog().resolve(name, version) {
        Ok(record) => Ok(Target::Model(record)),
        Err(e) if e.kind == Kind::NotFound && matches!(version, None | Some(1)) => {
            state.pipelines().get(name).map(Target::Pipeline).ok_or(e)
        }
        Err(e) => Err(e),
    }
}
