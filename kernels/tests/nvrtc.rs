//! Every `.cu` compiles with NVRTC. With `REQUIRE_NVRTC=1` (CI) a missing
//! NVRTC fails the test; otherwise it is skipped with the reason printed.

use infergate_kernels::device::ptx::{self, PtxCache, DEFAULT_ARCH, SOURCES};
use infergate_kernels::Error;

fn nvrtc_or_skip() -> Option<(i32, i32)> {
    match ptx::nvrtc_version() {
        Ok(version) => Some(version),
        Err(e) => {
            if std::env::var("REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("REQUIRE_NVRTC=1 but NVRTC is unusable: {e}");
            }
            eprintln!("skipping NVRTC test: {e}");
            None
        }
    }
}

#[test]
fn every_cuda_source_compiles_to_ptx_with_its_kernels() {
    let Some(version) = nvrtc_or_skip() else {
        return;
    };
    eprintln!("NVRTC {}.{}", version.0, version.1);
    for source in SOURCES {
        let ptx = ptx::compile(source, DEFAULT_ARCH).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            ptx.contains(".target sm_80"),
            "{}: no sm_80 target",
            source.name
        );
        for function in source.functions {
            assert!(
                ptx.contains(&format!(".entry {function}(")),
                "{}: kernel {function} missing from PTX",
                source.name
            );
        }
    }
}

#[test]
fn picks_the_newest_supported_arch_at_or_below_the_device() {
    let Some(_) = nvrtc_or_skip() else {
        return;
    };
    assert_eq!(
        ptx::arch_for_device(8, 0).ok().as_deref(),
        Some("compute_80")
    );
    assert_eq!(
        ptx::arch_for_device(8, 6).ok().as_deref(),
        Some("compute_86")
    );
    // A future GPU gets the newest PTX this NVRTC can emit.
    let newest = ptx::supported_archs().unwrap_or_default().last().copied();
    assert_eq!(
        ptx::arch_for_device(99, 9).ok(),
        newest.map(|a| format!("compute_{a}"))
    );
}

#[test]
fn compile_errors_carry_the_nvrtc_log() {
    let Some(_) = nvrtc_or_skip() else {
        return;
    };
    let broken = ptx::CudaSource {
        name: "broken",
        source: "extern \"C\" __global__ void k(float* x) { x[0] = INFINITY; }",
        functions: &["k"],
    };
    match ptx::compile(&broken, DEFAULT_ARCH) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("INFINITY"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn ptx_cache_stores_and_reuses_by_source_arch_and_version() {
    let Some(version) = nvrtc_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cache = PtxCache::new(dir.path().join("ptx"));
    let source = &ptx::SOFTMAX_TOPK;
    let first = cache
        .get_or_compile(source, DEFAULT_ARCH)
        .unwrap_or_else(|e| panic!("{e}"));
    let path = cache.path_for(source, DEFAULT_ARCH, version);
    assert!(path.exists(), "{} not written", path.display());
    // A hit returns the file's content, not a recompile: prove it by
    // planting a marker.
    std::fs::write(&path, format!("{first}// cached")).unwrap_or_else(|e| panic!("{e}"));
    let second = cache
        .get_or_compile(source, DEFAULT_ARCH)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(second.ends_with("// cached"));
    // Another arch or another source is another file.
    assert_ne!(path, cache.path_for(source, "compute_90", version));
    assert_ne!(path, cache.path_for(&ptx::NMS, DEFAULT_ARCH, version));
    assert_ne!(
        path,
        cache.path_for(source, DEFAULT_ARCH, (version.0, version.1 + 1))
    );
}
