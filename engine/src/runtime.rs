//! The process's single ONNX Runtime environment. ORT allows one per process, so it is created
//! once from the shared library the operator points at and shared by every session.

use crate::error::{EngineError, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static ENVIRONMENT: OnceLock<
    std::result::Result<(PathBuf, ort::environment::Environment), String>,
> = OnceLock::new();

/// Loads `libonnxruntime` from `library` and creates the environment, once. Later calls return
/// the first environment (or the first failure); asking for a different library is an error.
pub fn init(library: &Path) -> Result<&'static ort::environment::Environment> {
    let entry = ENVIRONMENT.get_or_init(|| {
        if !library.is_file() {
            return Err(format!(
                "ONNX Runtime library not found at {} (set --ort-lib or ORT_DYLIB_PATH)",
                library.display()
            ));
        }
        let builder = ort::init_from(library)
            .map_err(|e| format!("loading {} failed: {e}", library.display()))?;
        let env = builder
            .with_name("infergate")
            .build()
            .map_err(|e| e.to_string())?;
        Ok((library.to_path_buf(), env))
    });
    match entry {
        Ok((loaded, env)) if loaded == library => Ok(env),
        Ok((loaded, _)) => Err(EngineError::Runtime(format!(
            "ONNX Runtime already loaded from {}, cannot switch to {}",
            loaded.display(),
            library.display()
        ))),
        Err(reason) => Err(EngineError::Runtime(reason.clone())),
    }
}
