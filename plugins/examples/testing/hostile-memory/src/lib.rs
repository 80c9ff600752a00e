//! Hostile test plugin: allocates and touches memory until it runs out. The
//! host's memory cap must stop it.

use infergate_plugin_sdk::*;
use std::hint::black_box;

struct HostileMemory;

impl Plugin for HostileMemory {
    fn describe() -> Description {
        describe(
            "hostile-memory",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["nothing, ever"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(black_box(vec![0xA5; 16 << 20]));
        }
    }
}

export_plugin!(HostileMemory);
