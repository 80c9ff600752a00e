//! Hostile test plugin: returns 1 GiB of output from 64 MiB of memory, by
//! returning 16 tensors whose data all point at one buffer, as a hand-crafted
//! component could. The host must refuse to copy it out.

use infergate_plugin_sdk::*;
use std::mem::ManuallyDrop;

const BUFFER: usize = 64 << 20;
const ALIASES: usize = 16;

struct HostileOutput;

impl Plugin for HostileOutput {
    fn describe() -> Description {
        describe(
            "hostile-output",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["1 GiB"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let mut buffer = ManuallyDrop::new(vec![7u8; BUFFER]);
        let (ptr, len, cap) = (buffer.as_mut_ptr(), buffer.len(), buffer.capacity());
        let tensors = (0..ALIASES)
            .map(|i| {
                // SAFETY: deliberately unsound aliasing; this plugin exists to
                // attack the host, and its instance is discarded after the call.
                let data = unsafe { Vec::from_raw_parts(ptr, len, cap) };
                Tensor::from_u8(&format!("alias-{i}"), vec![BUFFER as u64], data)
            })
            .collect();
        Ok(tensors)
    }
}

export_plugin!(HostileOutput);
