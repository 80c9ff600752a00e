//! One registered region: a POSIX shared-memory object opened with `shm_open`, and the part of
//! it (`offset`, `byte_size`) the client registered. Reads and writes go through `pread` and
//! `pwrite` on the object's descriptor, never through a mapping: a client that shrinks its
//! object (`ftruncate`) after registering makes them come up short, which is an error here,
//! where a copy from a mapping would take a SIGBUS and the server with it. A copy from a mapping
//! kept for the region's life is faster (`benches/copy.rs` measures both), but surviving a
//! shrink there takes a process-wide SIGBUS handler living beside wasmtime's; the kernel's
//! checked copy of a mapping (`process_vm_readv`) is no faster than `pread`. Every access checks
//! its span against the registered region before anything is allocated or copied, and the
//! object's real size before the copy.

use crate::error::{Result, ShmError};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;

pub(crate) struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    file: File,
}

impl Region {
    /// Opens the object `key` (already checked against the prefix) for reading and writing
    /// and checks that it holds `offset + byte_size` bytes.
    pub fn open(name: &str, key: &str, offset: u64, byte_size: u64) -> Result<Region> {
        if byte_size == 0 {
            return Err(ShmError::invalid(format!(
                "shared memory region '{name}': byte_size must be positive"
            )));
        }
        let end = offset.checked_add(byte_size).ok_or_else(|| {
            ShmError::invalid(format!(
                "shared memory region '{name}': offset {offset} + byte_size {byte_size} overflows"
            ))
        })?;
        let c_key = CString::new(key).map_err(|_| {
            ShmError::invalid(format!(
                "shared-memory key of region '{name}' holds a NUL byte"
            ))
        })?;
        // SAFETY: `c_key` is a valid NUL-terminated string that outlives the call; shm_open
        // only reads it, and returns a new descriptor or -1. glibc opens the object with
        // O_NOFOLLOW, so a symbolic link planted under /dev/shm is not followed.
        let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            let reason = match e.raw_os_error() {
                Some(libc::ENOENT) => "no such object".to_string(),
                Some(libc::EACCES) => {
                    "permission denied (the server must be able to read and write it)".into()
                }
                _ => e.to_string(),
            };
            return Err(ShmError::invalid(format!(
                "Unable to open shared memory region '{name}' (key '{key}'): {reason}"
            )));
        }
        // SAFETY: `fd` is the descriptor shm_open just returned; nothing else owns it, and the
        // File closes it once.
        let file = unsafe { File::from_raw_fd(fd) };
        let meta = file
            .metadata()
            .map_err(|e| ShmError::internal(format!("reading the size of key '{key}': {e}")))?;
        if !meta.file_type().is_file() {
            return Err(ShmError::invalid(format!(
                "key '{key}' of region '{name}' is not a shared-memory object"
            )));
        }
        if meta.len() < end {
            return Err(ShmError::invalid(format!(
                "shared memory region '{name}': key '{key}' holds {} bytes, less than offset {offset} + byte_size {byte_size}",
                meta.len()
            )));
        }
        Ok(Region {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
            file,
        })
    }

    /// Where `len` bytes at `offset` of the region lie in the object, checked against the
    /// registered region and the object's size now.
    fn span(&self, offset: u64, len: usize) -> Result<u64> {
        let len = len as u64;
        let fits = offset
            .checked_add(len)
            .is_some_and(|end| end <= self.byte_size);
        if !fits {
            return Err(ShmError::invalid(format!(
                "Invalid offset + byte size for shared memory region: '{}' (offset {offset} + {len} bytes, the region holds {})",
                self.name, self.byte_size
            )));
        }
        let at = self.offset + offset;
        let size = self
            .file
            .metadata()
            .map_err(|e| {
                ShmError::internal(format!("reading the size of key '{}': {e}", self.key))
            })?
            .len();
        if size < at + len {
            return Err(self.shrunk(size, at + len));
        }
        Ok(at)
    }

    fn shrunk(&self, size: u64, needed: u64) -> ShmError {
        ShmError::invalid(format!(
            "shared memory region '{}': key '{}' shrank to {size} bytes since it was registered; {needed} are needed",
            self.name, self.key
        ))
    }

    /// `len` bytes at `offset` of the region.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let at = self.span(offset, len)?;
        let mut out: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0usize;
        while done < len {
            let position = libc::off_t::try_from(at + done as u64)
                .map_err(|_| ShmError::invalid("shared-memory offset out of range"))?;
            // SAFETY: the destination is the vector's spare capacity, `len - done` bytes past
            // the `done` bytes already read, all within the `len` reserved above; pread writes
            // at most that many bytes and reads the descriptor this region owns.
            let n = unsafe {
                libc::pread(
                    std::os::fd::AsRawFd::as_raw_fd(&self.file),
                    out.as_mut_ptr().add(done).cast(),
                    len - done,
                    position,
                )
            };
            match n {
                n if n > 0 => done += n as usize,
                0 => return Err(self.shrunk(at + done as u64, at + len as u64)),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(ShmError::internal(format!(
                            "reading key '{}': {e}",
                            self.key
                        )));
                    }
                }
            }
        }
        // SAFETY: pread initialised all `len` bytes (`done == len`).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// Writes `bytes` at `offset` of the region. An object shrunk between the size check and
    /// the write grows back (pwrite extends a file); it never faults.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let at = self.span(offset, bytes.len())?;
        self.file
            .write_all_at(bytes, at)
            .map_err(|e| ShmError::internal(format!("writing key '{}': {e}", self.key)))
    }
}
