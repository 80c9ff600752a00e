//! Test plugin: counts its calls in a static and returns the count. With a
//! fresh instance per call the count is always 1.

use infergate_plugin_sdk::*;
use std::sync::atomic::{AtomicI64, Ordering};

static CALLS: AtomicI64 = AtomicI64::new(0);

struct Counter;

impl Plugin for Counter {
    fn describe() -> Description {
        describe(
            "counter",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["count: int64 [1]"],
        )
    }

    fn preprocess(_input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let count = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(vec![Tensor::from_i64("count", vec![1], &[count])])
    }
}

export_plugin!(Counter);
