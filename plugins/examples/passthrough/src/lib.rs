//! Returns its input unchanged: the host's per-call overhead, measured.

use infergate_plugin_sdk::*;

struct Passthrough;

impl Plugin for Passthrough {
    fn describe() -> Description {
        describe(
            "passthrough",
            "0.1.0",
            PluginKind::Pre,
            &["any"],
            &["the input"],
        )
    }

    fn preprocess(input: PreInput, _metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        Ok(match input {
            PreInput::Tensors(tensors) => tensors,
            PreInput::Bytes(bytes) => {
                vec![Tensor::from_u8("bytes", vec![bytes.len() as u64], bytes)]
            }
        })
    }

    fn postprocess(outputs: Vec<Tensor>, _metadata: Metadata) -> Result<PostOutput, PluginError> {
        Ok(PostOutput::Tensors(outputs))
    }
}

export_plugin!(Passthrough);
