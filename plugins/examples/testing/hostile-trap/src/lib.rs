//! Hostile test plugin: panics (a wasm trap) as soon as it is called.

use infergate_plugin_sdk::*;

struct HostileTrap;

impl Plugin for HostileTrap {
    fn describe() -> Description {
        describe(
            "hostile-trap",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["nothing, ever"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        panic!("hostile-trap: trapping on purpose")
    }
}

export_plugin!(HostileTrap);
