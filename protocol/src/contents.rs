//! gRPC's typed tensor contents (Triton's `InferTensorContents`): one repeated field per
//! element type, narrower integers carried in the 32-bit fields. Seen here as borrowed slices
//! so this crate needs no protobuf code.

use crate::limits;
use crate::tensor::{DataType, TensorData};

/// The fields of an `InferTensorContents` message.
#[derive(Debug, Default, Clone, Copy)]
pub struct TypedContents<'a> {
    pub bool_contents: &'a [bool],
    pub int_contents: &'a [i32],
    pub int64_contents: &'a [i64],
    pub uint_contents: &'a [u32],
    pub uint64_contents: &'a [u64],
    pub fp32_contents: &'a [f32],
    pub fp64_contents: &'a [f64],
    pub bytes_contents: &'a [Vec<u8>],
}

/// Decodes `count` elements of `datatype` from the field that carries it; integers must fit
/// their datatype.
pub fn decode(
    datatype: DataType,
    count: usize,
    c: &TypedContents<'_>,
) -> Result<TensorData, String> {
    fn le<S: Copy + std::fmt::Display, T: TryFrom<S>, const N: usize>(
        items: &[S],
        count: usize,
        field: &str,
        datatype: DataType,
        to_le: impl Fn(T) -> [u8; N],
    ) -> Result<TensorData, String> {
        limits::exactly(count, items.len(), field)?;
        let mut out = Vec::with_capacity(items.len() * N);
        for &x in items {
            let x = T::try_from(x).map_err(|_| format!("{x} is out of range for {datatype}"))?;
            out.extend_from_slice(&to_le(x));
        }
        Ok(TensorData::Raw(out))
    }
    let d = datatype;
    match datatype {
        DataType::Bool => {
            limits::exactly(count, c.bool_contents.len(), "bool_contents")?;
            Ok(TensorData::Raw(
                c.bool_contents.iter().map(|&b| u8::from(b)).collect(),
            ))
        }
        DataType::Int8 => le(c.int_contents, count, "int_contents", d, i8::to_le_bytes),
        DataType::Int16 => le(c.int_contents, count, "int_contents", d, i16::to_le_bytes),
        DataType::Int32 => le(c.int_contents, count, "int_contents", d, i32::to_le_bytes),
        DataType::Int64 => le(
            c.int64_contents,
            count,
            "int64_contents",
            d,
            i64::to_le_bytes,
        ),
        DataType::Uint8 => le(c.uint_contents, count, "uint_contents", d, u8::to_le_bytes),
        DataType::Uint16 => le(c.uint_contents, count, "uint_contents", d, u16::to_le_bytes),
        DataType::Uint32 => le(c.uint_contents, count, "uint_contents", d, u32::to_le_bytes),
        DataType::Uint64 => le(
            c.uint64_contents,
            count,
            "uint64_contents",
            d,
            u64::to_le_bytes,
        ),
        DataType::Fp32 => le(c.fp32_contents, count, "fp32_contents", d, f32::to_le_bytes),
        DataType::Fp64 => le(c.fp64_contents, count, "fp64_contents", d, f64::to_le_bytes),
        DataType::Fp16 => {
            Err("FP16 has no typed contents field: send it in raw_input_contents".into())
        }
        DataType::Bytes => {
            limits::exactly(count, c.bytes_contents.len(), "bytes_contents")?;
            Ok(TensorData::Bytes(c.bytes_contents.to_vec()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_integers_must_fit_and_counts_must_match() {
        let ints = TypedContents {
            int_contents: &[-2, 300],
            ..Default::default()
        };
        assert_eq!(
            decode(DataType::Int16, 2, &ints).unwrap(),
            TensorData::Raw([(-2i16).to_le_bytes(), 300i16.to_le_bytes()].concat())
        );
        assert!(decode(DataType::Int8, 2, &ints)
            .unwrap_err()
            .contains("300 is out of range for INT8"));
        assert!(decode(DataType::Int16, 1 << 40, &ints)
            .unwrap_err()
            .contains("shape needs"));
        assert!(decode(DataType::Fp16, 0, &ints).is_err());
    }
}
