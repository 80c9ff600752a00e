//! Tensors between the engine's form and the plugin host's (KServe binary layout: little-endian
//! elements, BYTES as 4-byte length-prefixed strings). Both sides share the protocol crate's
//! `DataType` and the same bytes for fixed-size types, so this mostly moves buffers; only BYTES
//! changes form (a list of strings in the engine, one length-prefixed buffer in a plugin, as the
//! WIT interface passes it).

use infergate_engine::{DataType, Tensor, TensorData};
use infergate_plugin_host as host;
use infergate_protocol::{binary, limits};

pub fn to_host(t: Tensor) -> host::Tensor {
    let data = match t.data {
        TensorData::Raw(bytes) => bytes,
        TensorData::Bytes(_) => {
            let mut out = Vec::with_capacity(t.byte_len() + 4 * t.element_count().unwrap_or(0));
            binary::encode(&t, &mut out);
            out
        }
    };
    host::Tensor {
        name: t.name,
        datatype: t.datatype,
        // Engine tensors that reach a plugin have concrete shapes.
        shape: t.shape.iter().map(|&d| d.max(0) as u64).collect(),
        data,
    }
}

/// A plugin's output tensor in engine form. The host checked the data length against the
/// datatype and shape already; the plugin is not trusted twice over, so the shape goes
/// through the same limits as a client's and the tensor is checked again.
pub fn from_host(t: host::Tensor) -> Result<Tensor, String> {
    let shape = t
        .shape
        .iter()
        .map(|&d| {
            i64::try_from(d).map_err(|_| format!("tensor '{}': dimension {d} too large", t.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let datatype = t.datatype;
    let data = if datatype == DataType::Bytes {
        let count =
            limits::declared_elements(&shape).map_err(|e| format!("tensor '{}': {e}", t.name))?;
        binary::decode(datatype, count, &t.data).map_err(|e| format!("tensor '{}': {e}", t.name))?
    } else {
        TensorData::Raw(t.data)
    };
    Tensor::new(t.name, datatype, shape, data).map_err(|e| e.to_string())
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
            datatype: host::DataType::Bytes,
            shape: vec![1],
            data: vec![9, 0, 0, 0, b'a'],
        };
        assert!(from_host(t).unwrap_err().contains("longer than the data"));
    }

    #[test]
    fn absurd_shapes_from_a_plugin_are_errors() {
        for (datatype, shape) in [
            (host::DataType::Fp32, vec![1 << 36, 16]),
            (host::DataType::Bytes, vec![1 << 36, 16]),
            (host::DataType::Fp32, vec![i64::MAX as u64, 4]),
            (host::DataType::Bytes, vec![i64::MAX as u64, 4]),
            (host::DataType::Uint8, vec![u64::MAX]),
        ] {
            let t = host::Tensor {
                name: "t".into(),
                datatype,
                shape: shape.clone(),
                data: vec![1, 0, 0, 0, 7],
            };
            let e = from_host(t).unwrap_err();
            assert!(e.contains("tensor 't'"), "{shape:?}: {e}");
        }
    }
}
