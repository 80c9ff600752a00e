//! Real POSIX shared-memory objects, made as a Triton client makes them (`shm_open`,
//! `ftruncate`), registered, read and written through the registry: offsets, a region too
//! small, another owner's region, a shrunk object (also while reads run), unregister during
//! use, keys outside the prefix or shaped like paths.

mod common;

use common::{Object, PREFIX};
use infergate_shm::{ErrorKind, Limits, SharedMemory};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn registry() -> SharedMemory {
    SharedMemory::new(PREFIX, Limits::default()).unwrap()
}

#[test]
fn inputs_are_read_and_outputs_written_at_their_offsets() {
    let object = Object::new("roundtrip", 4096);
    object.fill(100, b"he\0llo");
    let shm = registry();
    // The region starts at byte 64 of the object: request offsets are relative to it.
    shm.register("key-a", "in", &object.key, 64, 1024).unwrap();
    assert_eq!(shm.read("key-a", "in", 36, 6).unwrap(), b"he\0llo");
    shm.write("key-a", "in", 500, &[1, 2, 3, 4]).unwrap();
    assert_eq!(object.contents(564, 4), [1, 2, 3, 4]);
    let status = shm.status("key-a", None).unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(
        (
            status[0].name.as_str(),
            status[0].key.as_str(),
            status[0].offset,
            status[0].byte_size
        ),
        ("in", object.key.as_str(), 64, 1024)
    );
    let e = shm.register("key-a", "in", &object.key, 0, 8).unwrap_err();
    assert!(e.message.contains("already in manager"), "{e}");
}

#[test]
fn spans_outside_the_region_or_the_object_are_refused_before_any_copy() {
    let object = Object::new("small", 4096);
    let shm = registry();
    let e = shm.register("k", "big", &object.key, 0, 8192).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("holds 4096 bytes"), "{e}");
    let e = shm
        .register("k", "past", &object.key, 4000, 200)
        .unwrap_err();
    assert!(e.message.contains("less than offset 4000"), "{e}");
    let e = shm
        .register("k", "wrap", &object.key, u64::MAX, 2)
        .unwrap_err();
    assert!(e.message.contains("overflows"), "{e}");

    shm.register("k", "r", &object.key, 0, 1024).unwrap();
    for (offset, len) in [(1000, 25), (1024, 1), (u64::MAX, 1)] {
        let e = shm.read("k", "r", offset, len).unwrap_err();
        assert!(e.message.contains("Invalid offset + byte size"), "{e}");
        let e = shm
            .write("k", "r", offset, &vec![0; len as usize])
            .unwrap_err();
        assert!(e.message.contains("Invalid offset + byte size"), "{e}");
    }
    // A declared size far beyond anything is refused before it is allocated.
    let e = shm.read("k", "r", 0, u64::MAX).unwrap_err();
    assert!(e.message.contains("exceeds this server's limit"), "{e}");
}

#[test]
fn another_owners_region_cannot_be_seen_or_used() {
    let object = Object::new("owners", 4096);
    let shm = registry();
    shm.register("key-a", "r", &object.key, 0, 4096).unwrap();
    for e in [
        shm.read("key-b", "r", 0, 4).unwrap_err(),
        shm.write("key-b", "r", 0, b"xx").unwrap_err(),
        shm.status("key-b", Some("r")).unwrap_err(),
        shm.region("anonymous", "r").err().unwrap(),
    ] {
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert_eq!(e.message, "Unable to find system shared memory region: 'r'");
    }
    assert!(shm.status("key-b", None).unwrap().is_empty());
    assert_eq!(shm.unregister("key-b", Some("r")), 0);
    assert_eq!(shm.unregister("key-b", None), 0);
    // The same name is another region for another owner.
    shm.register("key-b", "r", &object.key, 8, 8).unwrap();
    assert_eq!(shm.status("key-a", Some("r")).unwrap()[0].byte_size, 4096);
    assert_eq!(shm.status("key-b", Some("r")).unwrap()[0].byte_size, 8);
}

#[test]
fn a_shrunk_object_is_an_error_never_a_crash() {
    let object = Object::new("shrink", 1 << 20);
    let shm = registry();
    shm.register("k", "r", &object.key, 0, 1 << 20).unwrap();
    assert_eq!(shm.read("k", "r", 0, 1 << 20).unwrap().len(), 1 << 20);
    object.resize(4096);
    let e = shm.read("k", "r", 0, 1 << 20).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("shrank to 4096 bytes"), "{e}");
    let e = shm.write("k", "r", 8192, &[1; 16]).unwrap_err();
    assert!(e.message.contains("shrank"), "{e}");
    // What is still there can be used.
    assert_eq!(shm.read("k", "r", 0, 4096).unwrap().len(), 4096);
}

#[test]
fn reads_while_the_client_shrinks_and_regrows_its_object_never_fault() {
    let object = Arc::new(Object::new("race", 1 << 20));
    let shm = registry();
    shm.register("k", "r", &object.key, 0, 1 << 20).unwrap();
    let region = shm.region("k", "r").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let resizer = {
        let (object, stop) = (object.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) && flips < 200_000 {
                object.resize(if flips.is_multiple_of(2) { 0 } else { 1 << 20 });
                flips += 1;
            }
        })
    };
    let (mut whole, mut refused) = (0, 0);
    for _ in 0..2_000 {
        match region.read(0, 1 << 20) {
            Ok(bytes) => {
                assert_eq!(bytes.len(), 1 << 20);
                whole += 1;
            }
            Err(e) => {
                assert!(e.message.contains("shrank"), "{e}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    resizer.join().unwrap();
    // Every read either got the whole region or was refused; the process is still here.
    assert_eq!(whole + refused, 2_000);
}

#[test]
fn unregistering_a_region_in_use_lets_the_request_finish() {
    let object = Object::new("inuse", 4096);
    object.fill(0, b"kept");
    let shm = registry();
    shm.register("k", "r", &object.key, 0, 4096).unwrap();
    shm.register("k", "other", &object.key, 0, 16).unwrap();
    let held = shm.region("k", "r").unwrap();
    assert_eq!(shm.unregister("k", Some("r")), 1);
    assert_eq!(held.read(0, 4).unwrap(), b"kept");
    held.write(8, b"late").unwrap();
    assert_eq!(object.contents(8, 4), b"late");
    assert_eq!(
        shm.read("k", "r", 0, 4).unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert_eq!(shm.unregister("k", None), 1);
    assert!(shm.status("k", None).unwrap().is_empty());
}

#[test]
fn keys_outside_the_prefix_or_shaped_like_paths_are_refused() {
    let object = Object::new("keys", 4096);
    let shm = registry();
    for key in [
        "/etc/passwd",
        "/dev/shm/infergate-test-x",
        "/infergate-test-../../etc/passwd",
        "infergate-test-x",
        "/other-program-segment",
        "/..",
    ] {
        let e = shm.register("k", "r", key, 0, 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{key}");
    }
    let e = shm
        .register(
            "k",
            "r",
            &format!("{PREFIX}missing-{}", std::process::id()),
            0,
            1,
        )
        .unwrap_err();
    assert!(e.message.contains("no such object"), "{e}");
    assert!(
        SharedMemory::new("/", Limits::default()).is_ok(),
        "'/' admits every object name"
    );
    assert!(SharedMemory::new("/dev/shm/", Limits::default()).is_err());
    assert!(shm.register("k", "ok", &object.key, 0, 1).is_ok());
}

#[test]
fn a_symbolic_link_under_the_prefix_is_not_followed() {
    let link = format!("/dev/shm{PREFIX}{}-link", std::process::id());
    if std::os::unix::fs::symlink("/etc/hostname", &link).is_err() {
        eprintln!("skipped: cannot create {link}");
        return;
    }
    let shm = registry();
    let key = link.trim_start_matches("/dev/shm");
    let e = shm.register("k", "r", key, 0, 1).unwrap_err();
    let _ = std::fs::remove_file(&link);
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn an_owner_holds_a_bounded_number_of_regions() {
    let object = Object::new("limit", 4096);
    let shm = SharedMemory::new(
        PREFIX,
        Limits {
            max_regions_per_owner: 2,
            max_transfer_bytes: 1024,
        },
    )
    .unwrap();
    shm.register("k", "a", &object.key, 0, 8).unwrap();
    shm.register("k", "b", &object.key, 0, 8).unwrap();
    let e = shm.register("k", "c", &object.key, 0, 8).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LimitExceeded);
    shm.register("other", "c", &object.key, 0, 8).unwrap();
    shm.register("k", "big", &object.key, 0, 8).unwrap_err();
    assert_eq!(shm.unregister("k", Some("a")), 1);
    shm.register("k", "big", &object.key, 0, 4096).unwrap();
    let e = shm.read("k", "big", 0, 2048).unwrap_err();
    assert!(e.message.contains("limit of 1024"), "{e}");
}
