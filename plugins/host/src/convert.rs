//! Moves values between the public types and the plugin-facing ones. Tensor
//! data moves (no copy) into the lowering types; on the way out, tensors are
//! checked against their datatype and shape.

use crate::bindings::infergate::plugin::types as wit;
use crate::lift::{RawDescription, RawPostOutput, RawTensor};
use crate::lower::{Donated, InPreInput, InTensor};
use crate::types::{DataType, Description, PluginKind, PostOutput, PreInput, Tensor};

macro_rules! datatypes {
    ($($name:ident),*) => {
        fn datatype_to_wit(datatype: DataType) -> wit::Datatype {
            match datatype { $(DataType::$name => wit::Datatype::$name,)* }
        }
        fn datatype_from_wit(datatype: wit::Datatype) -> DataType {
            match datatype { $(wit::Datatype::$name => DataType::$name,)* }
        }
    };
}

datatypes!(Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Fp16, Fp32, Fp64, Bytes);

fn tensor_in(tensor: Tensor) -> InTensor {
    InTensor {
        name: tensor.name,
        datatype: datatype_to_wit(tensor.datatype),
        shape: tensor.shape,
        data: Donated::new(tensor.data),
    }
}

pub(crate) fn tensors_in(tensors: Vec<Tensor>) -> Vec<InTensor> {
    tensors.into_iter().map(tensor_in).collect()
}

pub(crate) fn pre_input_in(input: PreInput) -> InPreInput {
    match input {
        PreInput::Bytes(bytes) => InPreInput::Bytes(Donated::new(bytes)),
        PreInput::Tensors(tensors) => InPreInput::Tensors(tensors_in(tensors)),
    }
}

/// Tensors returned by a plugin; `Err` names the first malformed one.
pub(crate) fn tensors_from_raw(raw: Vec<RawTensor>) -> Result<Vec<Tensor>, String> {
    raw.into_iter()
        .map(|t| {
            let tensor = Tensor {
                name: t.name.0,
                datatype: datatype_from_wit(t.datatype),
                shape: t.shape.0,
                data: t.data.0,
            };
            tensor.check_layout().map(|()| tensor)
        })
        .collect()
}

pub(crate) fn post_output_from_raw(raw: RawPostOutput) -> Result<PostOutput, String> {
    Ok(match raw {
        RawPostOutput::Tensors(tensors) => PostOutput::Tensors(tensors_from_raw(tensors.0)?),
        RawPostOutput::Json(json) => PostOutput::Json(json.0),
        RawPostOutput::Bytes(bytes) => PostOutput::Bytes(bytes.0),
    })
}

pub(crate) fn description_from_raw(raw: RawDescription) -> Description {
    let strings = |list: Vec<crate::lift::Limited<String>>| list.into_iter().map(|s| s.0).collect();
    Description {
        name: raw.name.0,
        version: raw.version.0,
        kind: match raw.kind {
            wit::PluginKind::Pre => PluginKind::Pre,
            wit::PluginKind::Post => PluginKind::Post,
        },
        consumes: strings(raw.consumes.0),
        produces: strings(raw.produces.0),
    }
}
