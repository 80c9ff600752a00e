//! Uploads that are not plugins are rejected as `Invalid` (HTTP 400) with a
//! reason, before anything could be stored.

use crate::common::{host, plugin_bytes};
use infergate_plugin_host::{PluginError, PluginFault};

fn reason(bytes: &[u8]) -> String {
    match host().compile(bytes) {
        Err(err @ PluginError::Invalid { .. }) => {
            assert_eq!(err.fault(), PluginFault::Invalid);
            err.to_string()
        }
        Err(other) => panic!("expected Invalid, got {other:?}"),
        Ok(plugin) => panic!("accepted as {}", plugin.id()),
    }
}

#[test]
fn non_wasm_is_invalid() {
    assert!(reason(b"#!/bin/sh\nrm -rf /\n").contains("not a WebAssembly binary"));
    assert!(reason(b"\0as").contains("too short"));
}

#[test]
fn core_module_is_invalid() {
    // The smallest valid core module: header only.
    assert!(reason(b"\0asm\x01\0\0\0").contains("core WebAssembly module"));
}

#[test]
fn component_with_another_world_is_invalid() {
    let why = reason(&plugin_bytes("wrong-world"));
    assert!(why.contains("infergate:plugin/plugin@0.1.0"), "{why}");
    // An empty component implements nothing either.
    let why = reason(b"\0asm\x0d\0\x01\0");
    assert!(why.contains("infergate:plugin/plugin@0.1.0"), "{why}");
}

#[test]
fn corrupted_component_is_invalid() {
    let mut bytes = plugin_bytes("passthrough");
    let middle = bytes.len() / 2;
    bytes.truncate(middle);
    assert!(reason(&bytes).contains("not a valid WebAssembly component"));
}

#[test]
fn invalid_uploads_are_counted() {
    let host = host();
    assert!(host.compile(b"nope").is_err());
    assert!(host.compile(b"\0asm\x01\0\0\0").is_err());
    assert_eq!(host.metrics().invalid, 2);
    assert_eq!(host.metrics().compiles, 0);
}
