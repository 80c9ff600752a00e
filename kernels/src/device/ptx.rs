//! The embedded CUDA sources, NVRTC compilation and the on-disk PTX cache.
//!
//! NVRTC comes from `libnvrtc.so.12` (the CUDA toolkit or PyPI's
//! `nvidia-cuda-nvrtc-cu12`); cudarc finds it by the names `libnvrtc.so`,
//! `libnvrtc.so.12`, ... on the loader path and *panics* when it is absent,
//! so [`nvrtc_version`] probes with `is_culib_present` before any call.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// One `.cu` file and the `extern "C"` kernels it defines.
#[derive(Debug)]
pub struct CudaSource {
    pub name: &'static str,
    pub source: &'static str,
    pub functions: &'static [&'static str],
}

pub const PREPROCESS: CudaSource = CudaSource {
    name: "preprocess",
    source: include_str!("../../cuda/preprocess.cu"),
    functions: &["resize_normalize_nchw"],
};

pub const SOFTMAX_TOPK: CudaSource = CudaSource {
    name: "softmax_topk",
    source: include_str!("../../cuda/softmax_topk.cu"),
    functions: &["softmax_topk"],
};

pub const NMS: CudaSource = CudaSource {
    name: "nms",
    source: include_str!("../../cuda/nms.cu"),
    functions: &["nms_rank", "nms_mask", "nms_select"],
};

/// Every CUDA source in the crate; tests compile each of them.
pub const SOURCES: [&CudaSource; 3] = [&PREPROCESS, &SOFTMAX_TOPK, &NMS];

/// Architecture to compile for when there is no device to ask (CI): Ampere,
/// whose PTX any newer GPU can JIT.
pub const DEFAULT_ARCH: &str = "compute_80";

/// Runs `f`, turning a cudarc panic (missing library or symbol) into an
/// error: cudarc reports those by panicking, and a kernel crate must not take
/// the server down because a shared library is older than expected.
pub(crate) fn guarded<T>(what: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(Error::DeviceUnavailable(format!("{what}: {message}")))
    })
}

/// The NVRTC library's version, or why it cannot be used.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    // SAFETY: only tries to dlopen the candidate library names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::DeviceUnavailable(
            "NVRTC not found: put libnvrtc.so.12 (CUDA toolkit or PyPI nvidia-cuda-nvrtc-cu12) \
             on LD_LIBRARY_PATH"
                .into(),
        ));
    }
    guarded("nvrtcVersion", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the library is present; both pointers are valid for writes.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| Error::device("nvrtcVersion", format!("{e:?}")))?;
        Ok((major, minor))
    })
}

/// Virtual architectures this NVRTC can target, as compute capabilities
/// ×10 (80 = compute_80), ascending.
pub fn supported_archs() -> Result<Vec<i32>> {
    nvrtc_version()?;
    guarded("nvrtcGetSupportedArchs", || {
        let mut count = 0;
        // SAFETY: library present; `count` is valid for writes.
        unsafe { cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut count) }
            .result()
            .map_err(|e| Error::device("nvrtcGetNumSupportedArchs", format!("{e:?}")))?;
        let mut archs = vec![0; count.max(0) as usize];
        // SAFETY: `archs` holds exactly `count` ints.
        unsafe { cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
            .result()
            .map_err(|e| Error::device("nvrtcGetSupportedArchs", format!("{e:?}")))?;
        archs.sort_unstable();
        Ok(archs)
    })
}

/// The newest virtual architecture NVRTC supports that the device can run:
/// PTX for an older architecture JITs on newer GPUs, the reverse fails.
pub fn arch_for_device(major: i32, minor: i32) -> Result<String> {
    let device = major * 10 + minor;
    supported_archs()?
        .into_iter()
        .rfind(|&a| a <= device)
        .map(|a| format!("compute_{a}"))
        .ok_or_else(|| {
            Error::DeviceUnavailable(format!(
                "this NVRTC supports no architecture at or below compute capability {major}.{minor}"
            ))
        })
}

/// Compiles one source to PTX text for `arch` (e.g. `compute_80`).
pub fn compile(source: &CudaSource, arch: &str) -> Result<String> {
    nvrtc_version()?;
    guarded("NVRTC compile", || {
        let options = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture={arch}")],
            name: Some(format!("{}.cu", source.name)),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source.source, options).map_err(|e| {
            Error::Compile {
                kernel: source.name,
                arch: arch.to_string(),
                log: match e {
                    cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                        log.to_string_lossy().into_owned()
                    }
                    other => format!("{other:?}"),
                },
            }
        })?;
        Ok(ptx.to_src())
    })
}

/// PTX files on disk, named by kernel, architecture, NVRTC version and
/// sha256 of the source, so an edited kernel or a new NVRTC never reuses a
/// stale file. A cache that cannot be read or written only costs a compile.
#[derive(Clone, Debug)]
pub struct PtxCache {
    dir: PathBuf,
}

impl PtxCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$INFERGATE_PTX_CACHE`, else `$XDG_CACHE_HOME/infergate/ptx`, else
    /// `$HOME/.cache/infergate/ptx`; `None` when none is set.
    pub fn from_env() -> Option<Self> {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("INFERGATE_PTX_CACHE")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("infergate/ptx")))
            .or_else(|| var("HOME").map(|d| d.join(".cache/infergate/ptx")))
            .map(Self::new)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_for(&self, source: &CudaSource, arch: &str, nvrtc: (i32, i32)) -> PathBuf {
        let digest = hex::encode(Sha256::digest(source.source.as_bytes()));
        self.dir.join(format!(
            "{}-{arch}-nvrtc{}.{}-{}.ptx",
            source.name,
            nvrtc.0,
            nvrtc.1,
            &digest[..16]
        ))
    }

    /// The cached PTX, or a fresh compile that is then stored.
    pub fn get_or_compile(&self, source: &CudaSource, arch: &str) -> Result<String> {
        let path = self.path_for(source, arch, nvrtc_version()?);
        if let Ok(ptx) = std::fs::read_to_string(&path) {
            tracing::debug!(kernel = source.name, path = %path.display(), "PTX cache hit");
            return Ok(ptx);
        }
        let ptx = compile(source, arch)?;
        if let Err(e) = self.store(&path, &ptx) {
            tracing::warn!(error = %e, "PTX cache not written; kernels will be recompiled next start");
        }
        Ok(ptx)
    }

    /// Drops a cached file that the driver refused to load.
    pub fn evict(&self, source: &CudaSource, arch: &str) {
        if let Ok(version) = nvrtc_version() {
            let _ = std::fs::remove_file(self.path_for(source, arch, version));
        }
    }

    /// Write to a temporary name and rename, so a concurrent reader never
    /// sees half a file.
    fn store(&self, path: &Path, ptx: &str) -> Result<()> {
        let io = |source| Error::Cache {
            path: path.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, ptx).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}
