//! Calls share nothing: every call starts from a fresh instance.

use crate::common::{host, load};
use infergate_plugin_host::{DataType, PreInput, Tensor};

#[test]
fn no_state_is_carried_between_calls() {
    let host = host();
    let counter = load(&host, "counter");
    for _ in 0..3 {
        let out = counter
            .preprocess(PreInput::Bytes(vec![]), &vec![])
            .expect("counter call");
        assert_eq!(
            out,
            vec![Tensor {
                name: "count".into(),
                datatype: DataType::Int64,
                shape: vec![1],
                data: 1i64.to_le_bytes().to_vec(),
            }],
            "a static incremented by an earlier call must not be seen"
        );
    }
}
