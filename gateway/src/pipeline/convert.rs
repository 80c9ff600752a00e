//! Tensors between the engine's form and the plugin host's (KServe binary layout: little-endian
//! elements, BYTES as 4-byte length-prefixed strings). Both sides already use the same bytes for
//! fixed-size types, so this mostly moves buffers.

use infergate_engine::{DataType, Tensor, TensorData};
use infergate_plugin_host as host;

fn datatype_to_host(d: DataType) -> host::Datatype {
    match d {
        DataType::Bool => host::Datatype::Bool,
        DataType::Uint8 => host::Datatype::Uint8,
        DataType::Uint16 => host::Datatype::Uint16,
        DataType::Uint32 => host::Datatype::Uint32,
        DataType::Uint64 => host::Datatype::Uint64,
        DataType::Int8 => host::Datatype::Int8,
        DataType::Int16 => host::Datatype::Int16,
        DataType::Int32 => host::Datatype::Int32,
        DataType::Int64 => host::Datatype::Int64,
        DataType::Fp16 => host::Datatype::Fp16,
        DataType::Fp32 => host::Datatype::Fp32,
        DataType::Fp64 => host::Datatype::Fp64,
        DataType::Bytes => host::Datatype::Bytes,
    }
}

fn datatype_from_host(d: host::Datatype) -> DataType {
    match d {
        host::Datatype::Bool => DataType::Bool,
        host::Datatype::Uint8 => DataType::Uint8,
        host::Datatype::Uint16 => DataType::Uint16,
        host::Datatype::Uint32 => DataType::Uint32,
        host::Datatype::Uint64 => DataType::Uint64,
        host::Datatype::Int8 => DataType::Int8,
        host::Datatype::Int16 => DataType::Int16,
        host::Datatype::Int32 => DataType::Int32,
        host::Datatype::Int64 => DataType::Int64,
        host::Datatype::Fp16 => DataType::Fp16,
        host::Datatype::Fp32 => DataType::Fp32,
        host::Datatype::Fp64 => DataType::Fp64,
        host::Datatype::Bytes => DataType::Bytes,
    }
}

pub fn to_host(t: Tensor) -> host::Tensor {
    let data = match t.data {
        TensorData::Raw(bytes) => bytes,
        TensorData::Bytes(items) => {
            let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 4).sum());
            for item in items {
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(&item);
            }
            out
        }
    };
    host::Tensor {
        name: t.name,
        datatype: datatype_to_host(t.datatype),
        // Engine tensors that reach a plugin have concrete shapes.
        shape: t.shape.iter().map(|&d| d.max(0) as u64).collect(),
        data,
    }
}

/// A plugin's output tensor in engine form. The host already checked the data length against
/// the datatype and shape, so only dimension overflow and BYTES framing can still fail.
pub fn from_host(t: host::Tensor) -> Result<Tensor, String> {
    let shape = t
        .shape
        .iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| format!("tensor '{}': dimension {d} too large", t.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let datatype = datatype_from_host(t.datatype);
    let data = if datatype == DataType::Bytes {
        let mut items = Vec::new();
        let mut rest = t.data.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<4>() {
            let len = u32::from_le_bytes(*len) as usize;
            let item = tail
                .get(..len)
                .ok_or_else(|| format!("tensor '{}': truncated BYTES element", t.name))?;
            items.push(item.to_vec());
            rest = &tail[len..];
        }
        if !rest.is_empty() {
            return Err(format!(
                "tensor '{}': trailing bytes after the last element",
                t.name
            ));
        }
        TensorData::Bytes(items)
    } else {
        TensorData::Raw(t.data)
    };
    Ok(Tensor {
        name: t.name,
        datatype,
        shape,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_bytes_tensors_round_trip() {
        let raw = Tensor {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape: vec![1, 2],
            data: TensorData::Raw(vec![0, 0, 128, 63, 0, 0, 0, 64]),
        };
        assert_eq!(from_host(to_host(raw.clone())).unwrap(), raw);
        let strings = Tensor {
            name: "text".into(),
            datatype: DataType::Bytes,
            shape: vec![2],
            data: TensorData::Bytes(vec![b"hello".to_vec(), Vec::new()]),
        };
        let wire = to_host(strings.clone());
        assert_eq!(wire.data.len(), 4 + 5 + 4);
        assert_eq!(from_host(wire).unwrap(), strings);
    }

    #[test]
    fn broken_bytes_framing_is_an_error() {
        let t = host::Tensor {
            name: "t".into(),
            datatype: host::Datatype::Bytes,
            shape: vec![1],
            data: vec![9, 0, 0, 0, b'a'],
        };
        assert!(from_host(t).unwrap_err().contains("truncated"));
    }
}
