//! Triton's binary tensor extension: a JSON header of `Inference-Header-Content-Length` bytes
//! followed by raw tensors, fixed-size elements little-endian, BYTES elements each prefixed by
//! its 4-byte little-endian length.

use crate::limits;
use crate::tensor::{DataType, Tensor, TensorData};
use crate::DecodeError;

/// Splits a body into its JSON header and binary section.
pub fn split_body(body: &[u8], header_len: Option<usize>) -> Result<(&[u8], &[u8]), DecodeError> {
    match header_len {
        None => Ok((body, &[])),
        Some(n) if n <= body.len() => Ok(body.split_at(n)),
        Some(n) => Err(DecodeError(format!(
            "Inference-Header-Content-Length is {n} but the body has only {} bytes",
            body.len()
        ))),
    }
}

/// Decodes `count` elements of `datatype` from exactly `bytes`.
pub fn decode(datatype: DataType, count: usize, bytes: &[u8]) -> Result<TensorData, String> {
    if datatype != DataType::Bytes {
        limits::fixed_size(datatype, count, bytes.len())?;
        if datatype == DataType::Bool && bytes.iter().any(|&b| b > 1) {
            return Err("BOOL elements must be 0 or 1".into());
        }
        return Ok(TensorData::Raw(bytes.to_vec()));
    }
    limits::length_prefixed(count, bytes.len())?;
    let mut items = Vec::with_capacity(count);
    let mut rest = bytes;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        if items.len() == count {
            break;
        }
        let len = u32::from_le_bytes(*len) as usize;
        let item = tail
            .get(..len)
            .ok_or("BYTES element longer than the data left")?;
        items.push(item.to_vec());
        rest = &tail[len..];
    }
    if items.len() != count {
        return Err(format!(
            "{} BYTES elements given, shape needs {count}",
            items.len()
        ));
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes left after the {count} BYTES elements the shape declares",
            rest.len()
        ));
    }
    Ok(TensorData::Bytes(items))
}

/// The bytes [`encode`] appends for `tensor`, known before encoding it (a request's JSON
/// header, which gives each tensor's size, comes before the tensors).
pub fn encoded_len(tensor: &Tensor) -> usize {
    match &tensor.data {
        TensorData::Raw(raw) => raw.len(),
        TensorData::Bytes(items) => items.iter().map(|item| 4 + item.len()).sum(),
    }
}

/// Appends a tensor's binary encoding to `out`.
pub fn encode(tensor: &Tensor, out: &mut Vec<u8>) {
    match &tensor.data {
        TensorData::Raw(raw) => out.extend_from_slice(raw),
        TensorData::Bytes(items) => {
            for item in items {
                // An element longer than u32::MAX cannot come from a request or a model here:
                // bodies and model outputs are capped far below 4 GiB.
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoded_length_is_known_before_encoding() {
        for data in [
            TensorData::Raw(vec![1, 2, 3, 4, 5, 6, 7, 8]),
            TensorData::Bytes(vec![b"ab".to_vec(), Vec::new(), b"xyz".to_vec()]),
        ] {
            let tensor = Tensor {
                name: "t".into(),
                datatype: DataType::Bytes,
                shape: vec![3],
                data,
            };
            let mut out = Vec::new();
            encode(&tensor, &mut out);
            assert_eq!(encoded_len(&tensor), out.len());
        }
    }

    #[test]
    fn bytes_framing_errors_are_reported() {
        assert!(decode(DataType::Bytes, 1, &[9, 0, 0, 0, b'a'])
            .unwrap_err()
            .contains("longer"));
        assert!(decode(DataType::Bytes, 1, &[0, 0, 0])
            .unwrap_err()
            .contains("at most 0"));
        assert!(decode(DataType::Bytes, 1, &[0, 0, 0, 0, 1])
            .unwrap_err()
            .contains("left after"));
        assert!(decode(DataType::Bool, 1, &[2])
            .unwrap_err()
            .contains("0 or 1"));
    }

    #[test]
    fn a_huge_declared_count_is_refused_before_allocating() {
        for datatype in DataType::ALL {
            assert!(decode(datatype, 1 << 40, &[1, 0, 0, 0, 7]).is_err());
            assert!(decode(datatype, usize::MAX, &[]).is_err());
        }
    }
}
