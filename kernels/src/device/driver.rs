//! The CUDA driver library: whether it is there, and its errors in the crate's terms.

use crate::error::{Error, Result};

/// Whether the CUDA driver library can be loaded, or why not.
pub fn driver_present() -> Result<()> {
    // SAFETY: only tries to dlopen the candidate library names.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::DeviceUnavailable(
            "CUDA driver (libcuda.so.1) not found: no NVIDIA driver on this host".into(),
        ))
    }
}

/// A driver call's result, its error naming the call.
pub(crate) fn drv<T>(
    op: &'static str,
    r: std::result::Result<T, cudarc::driver::DriverError>,
) -> Result<T> {
    r.map_err(|e| Error::device(op, e))
}
