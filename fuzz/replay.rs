//! Replays every fuzz corpus and regression input (`fuzz/corpus/TARGET/`,
//! `fuzz/regressions/TARGET/`) through the fuzz targets' checks on the stable toolchain, so
//! `cargo test` keeps every input the fuzzers found interesting (and every crash they found)
//! passing without libFuzzer or nightly.

#[path = "checks.rs"]
mod checks;

use std::path::Path;

#[test]
fn every_corpus_and_regression_input_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for (target, check) in checks::TARGETS {
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("a directory entry").path();
                let input = std::fs::read(&path).expect("a readable input");
                let outcome = std::panic::catch_unwind(|| check(&input));
                assert!(outcome.is_ok(), "{target}: {} fails", path.display());
                replayed += 1;
            }
        }
    }
    assert!(
        replayed >= checks::TARGETS.len(),
        "only {replayed} inputs found under {}",
        root.display()
    );
}
