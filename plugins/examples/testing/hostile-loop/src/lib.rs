//! Hostile test plugin: spins forever. The host's epoch deadline must stop it.

use infergate_plugin_sdk::*;
use std::hint::black_box;

struct HostileLoop;

impl Plugin for HostileLoop {
    fn describe() -> Description {
        describe(
            "hostile-loop",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["nothing, ever"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let mut spins = 0u64;
        loop {
            spins = black_box(spins.wrapping_add(1));
        }
    }
}

export_plugin!(HostileLoop);
