//! Hostile test plugin: recurses without bound. The host's wasm stack limit
//! must stop it.

use infergate_plugin_sdk::*;
use std::hint::black_box;

/// Each level calls the next through an opaque function pointer, so the
/// compiler can neither inline it nor turn it into a loop; the frames live on
/// the wasm stack, which the host bounds.
fn descend(depth: u64) -> u64 {
    let next: fn(u64) -> u64 = black_box(descend);
    next(depth + 1).wrapping_mul(31).wrapping_add(depth)
}

struct HostileRecursion;

impl Plugin for HostileRecursion {
    fn describe() -> Description {
        describe(
            "hostile-recursion",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["nothing, ever"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let depth = descend(black_box(0));
        Ok(vec![Tensor::from_i64("depth", vec![1], &[depth as i64])])
    }
}

export_plugin!(HostileRecursion);
