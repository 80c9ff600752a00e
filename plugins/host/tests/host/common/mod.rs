//! Shared by the integration tests: the real plugins built by plugins/build.sh.

#![allow(dead_code)] // each test binary uses a different subset

use infergate_plugin_host::{HostConfig, Limits, Plugin, PluginHost};
use std::path::PathBuf;
use std::time::Duration;

/// `plugins/dist`, or `INFERGATE_PLUGIN_DIST` when set.
pub fn dist_dir() -> PathBuf {
    std::env::var_os("INFERGATE_PLUGIN_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist"))
}

/// The bytes of a built plugin; fails the test, loudly, when it is missing.
pub fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = dist_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nbuild the plugins first: run plugins/build.sh",
            path.display()
        )
    })
}

/// Limits small enough that hostile plugins hit them quickly.
pub fn test_limits() -> Limits {
    Limits {
        // Long enough that hostile-memory reaches its memory cap before the deadline even on
        // a loaded 2-core CI machine (300 ms was seen to run out first there); hostile-loop
        // still ends by it.
        deadline: Duration::from_secs(2),
        memory_bytes: 96 << 20,
        output_bytes: 16 << 20,
        ..Limits::default()
    }
}

/// A host sharing one compiled-artifact cache across test runs, so each
/// plugin is compiled once.
pub fn host() -> PluginHost {
    PluginHost::new(HostConfig {
        max_concurrent_calls: 32,
        max_memory_bytes: 256 << 20,
        ..HostConfig::with_cache_dir(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"),
        )
    })
    .expect("plugin host")
}

pub fn load(host: &PluginHost, name: &str) -> Plugin {
    host.compile(&plugin_bytes(name))
        .unwrap_or_else(|e| panic!("compiling {name}: {e}"))
        .with_limits(test_limits())
}

pub fn load_guardrail(host: &PluginHost, name: &str) -> infergate_plugin_host::Guardrail {
    host.compile_guardrail(&plugin_bytes(name))
        .unwrap_or_else(|e| panic!("compiling guardrail {name}: {e}"))
        .with_limits(test_limits())
}
