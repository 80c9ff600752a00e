//! The compiled-artifact cache: hits skip compilation, and a corrupted file
//! is detected, removed and recompiled rather than loaded.

use crate::common::plugin_bytes;
use infergate_plugin_host::{HostConfig, PluginHost, PreInput};

fn host_with_cache(dir: &std::path::Path) -> PluginHost {
    PluginHost::new(HostConfig {
        max_concurrent_calls: 8,
        ..HostConfig::with_cache_dir(dir)
    })
    .expect("plugin host")
}

fn works(host: &PluginHost, bytes: &[u8]) -> String {
    let plugin = host.compile(bytes).expect("compile");
    let out = plugin
        .preprocess(PreInput::Bytes(b"abc".to_vec()), &vec![])
        .expect("call");
    assert_eq!(out[0].data, b"abc");
    plugin.sha256().to_string()
}

#[test]
fn cache_hit_skips_compilation_and_corruption_forces_recompile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = plugin_bytes("passthrough");

    let first = host_with_cache(dir.path());
    let sha = works(&first, &bytes);
    let m = first.metrics();
    assert_eq!((m.compiles, m.cache_hits), (1, 0));
    let path = first.cache_path(&sha).expect("cache configured");
    assert!(path.is_file(), "{} written", path.display());
    drop(first);

    let second = host_with_cache(dir.path());
    works(&second, &bytes);
    let m = second.metrics();
    assert_eq!((m.compiles, m.cache_hits, m.cache_rejected), (0, 1, 0));
    drop(second);

    // Flip one byte deep inside the artifact (machine code or metadata).
    let mut artifact = std::fs::read(&path).expect("read cache file");
    let at = artifact.len() * 2 / 3;
    artifact[at] ^= 0x40;
    std::fs::write(&path, &artifact).expect("corrupt cache file");

    let third = host_with_cache(dir.path());
    works(&third, &bytes);
    let m = third.metrics();
    assert_eq!((m.compiles, m.cache_hits, m.cache_rejected), (1, 0, 1));
    drop(third);

    // Truncated: also rejected. Then the rewritten file is a hit again.
    std::fs::write(&path, &artifact[..10]).expect("truncate cache file");
    let fourth = host_with_cache(dir.path());
    works(&fourth, &bytes);
    assert_eq!(fourth.metrics().cache_rejected, 1);
    let fifth = host_with_cache(dir.path());
    works(&fifth, &bytes);
    assert_eq!(fifth.metrics().cache_hits, 1);

    // No temporary files left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list cache")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
