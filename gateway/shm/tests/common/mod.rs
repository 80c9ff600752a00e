//! A client's POSIX shared-memory object, made as Triton's clients make them (`shm_open`,
//! `ftruncate`), for the tests and the benchmark.

#![allow(dead_code)] // the tests and the benchmark use different parts

use std::ffi::CString;

/// The prefix the tests' registries admit; every object here is named under it.
pub const PREFIX: &str = "/infergate-test-";

/// A client's object: created with `size` bytes, unlinked when dropped.
pub struct Object {
    pub key: String,
    pub fd: i32,
}

impl Object {
    pub fn new(tag: &str, size: usize) -> Object {
        let key = format!("{PREFIX}{}-{tag}", std::process::id());
        let name = CString::new(key.clone()).unwrap();
        // SAFETY: a valid C string; creates the object and returns a descriptor.
        let fd = unsafe {
            libc::shm_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        assert!(fd >= 0, "shm_open: {}", std::io::Error::last_os_error());
        let object = Object { key, fd };
        object.resize(size);
        object
    }

    pub fn resize(&self, size: usize) {
        // SAFETY: truncates the descriptor this object owns.
        let r = unsafe { libc::ftruncate(self.fd, size as libc::off_t) };
        assert_eq!(r, 0, "ftruncate: {}", std::io::Error::last_os_error());
    }

    pub fn fill(&self, at: usize, bytes: &[u8]) {
        // SAFETY: writes `bytes` from a valid slice into the descriptor this object owns.
        let n = unsafe {
            libc::pwrite(
                self.fd,
                bytes.as_ptr().cast(),
                bytes.len(),
                at as libc::off_t,
            )
        };
        assert_eq!(n, bytes.len() as isize);
    }

    pub fn contents(&self, at: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: reads at most `len` bytes into a buffer of `len` bytes.
        let n = unsafe { libc::pread(self.fd, out.as_mut_ptr().cast(), len, at as libc::off_t) };
        assert_eq!(n, len as isize);
        out
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let name = CString::new(self.key.clone()).unwrap();
        // SAFETY: unlinks the name and closes the descriptor this object made.
        unsafe {
            libc::shm_unlink(name.as_ptr());
            libc::close(self.fd);
        }
    }
}
