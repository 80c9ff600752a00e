//! Helpers of the unit tests: specs in pixel levels and reproducible pseudo-random data.

use super::spec::{PreprocessSpec, ResizeMode};

/// Mean 0, std 1 (outputs in 0‥255 levels): the specs of the unit tests.
pub(super) fn test_spec(width: usize, height: usize, mode: ResizeMode) -> PreprocessSpec {
    PreprocessSpec {
        width,
        height,
        mean: [0.0; 3],
        std: [1.0; 3],
        mode,
    }
}

/// A xorshift32 generator: reproducible pseudo-random test data without a dependency.
pub(super) fn xorshift(mut seed: u32) -> impl FnMut() -> u32 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    }
}
