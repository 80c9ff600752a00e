//! Checks on uploaded bytes and on what a plugin says about itself, with
//! reasons a plugin author can act on.

use crate::error::PluginError;
use crate::types::Description;

const WASM_MAGIC: &[u8; 4] = b"\0asm";
/// Version and layer of a core module (`01 00 00 00`) and of a component
/// (version 0x0d, layer 1).
const CORE_MODULE: [u8; 4] = [1, 0, 0, 0];
const COMPONENT: [u8; 4] = [0x0d, 0, 1, 0];

/// Rejects bytes that are not a WebAssembly component before compiling them.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), PluginError> {
    let Some((magic, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(PluginError::invalid(format!(
            "{} bytes is too short to be WebAssembly",
            bytes.len()
        )));
    };
    if magic != WASM_MAGIC {
        return Err(PluginError::invalid(
            "not a WebAssembly binary (no \\0asm header)",
        ));
    }
    match rest.first_chunk::<4>() {
        Some(&COMPONENT) => Ok(()),
        Some(&CORE_MODULE) => Err(PluginError::invalid(
            "a core WebAssembly module, not a component: build with the infergate plugin SDK \
             and wrap the module with `wasm-tools component new` (plugins/README.md)",
        )),
        Some(version) => Err(PluginError::invalid(format!(
            "unsupported WebAssembly version/layer {version:02x?}; expected a component (0d 00 01 00)"
        ))),
        None => Err(PluginError::invalid("truncated WebAssembly header")),
    }
}

const MAX_NAME: usize = 64;

/// A plugin's name must be usable in URLs, logs and metric labels.
pub(crate) fn check_description(description: &Description) -> Result<(), PluginError> {
    check_name_and_version(&description.name, &description.version)
}

/// What a plugin or guardrail calls itself: a name usable in URLs, logs and metric labels, and
/// a semantic version.
pub(crate) fn check_name_and_version(name: &str, version: &str) -> Result<(), PluginError> {
    let name_ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if !name_ok {
        return Err(PluginError::invalid(format!(
            "describe() returned name {name:?}: use 1-{MAX_NAME} characters of [a-z0-9-_], starting with a letter or digit"
        )));
    }
    let version_ok = !version.is_empty()
        && version.len() <= MAX_NAME
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'));
    if !version_ok {
        return Err(PluginError::invalid(format!(
            "describe() returned version {version:?}: use a semantic version such as 1.0.0"
        )));
    }
    Ok(())
}
