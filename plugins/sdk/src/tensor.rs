//! Building and reading tensors without hand-packing bytes.

use crate::{Datatype, PluginError, Tensor};

impl Datatype {
    /// Bytes per element; `None` for `bytes`, whose elements vary in length.
    pub fn element_size(self) -> Option<usize> {
        match self {
            Datatype::Bool | Datatype::Uint8 | Datatype::Int8 => Some(1),
            Datatype::Uint16 | Datatype::Int16 | Datatype::Fp16 => Some(2),
            Datatype::Uint32 | Datatype::Int32 | Datatype::Fp32 => Some(4),
            Datatype::Uint64 | Datatype::Int64 | Datatype::Fp64 => Some(8),
            Datatype::Bytes => None,
        }
    }
}

/// Iterator over the elements of a `bytes` tensor (4-byte little-endian length + bytes each).
pub struct ElementBytes<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ElementBytes<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let element = rest.get(..len)?;
        self.rest = &rest[len..];
        Some(element)
    }
}

macro_rules! numeric_constructors {
    ($($from:ident, $to:ident, $t:ty, $dt:ident;)*) => {$(
        #[doc = concat!("A `", stringify!($dt), "` tensor from `", stringify!($t), "` values.")]
        pub fn $from(name: &str, shape: Vec<u64>, values: &[$t]) -> Tensor {
            let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            Tensor { name: name.into(), datatype: Datatype::$dt, shape, data }
        }

        #[doc = concat!("The values of a `", stringify!($dt), "` tensor; `bad-input` for another datatype or a size mismatch.")]
        pub fn $to(&self) -> Result<Vec<$t>, PluginError> {
            self.check(Datatype::$dt)?;
            Ok(self
                .data
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect())
        }
    )*};
}

impl Tensor {
    /// Number of elements the shape describes.
    pub fn element_count(&self) -> u64 {
        self.shape.iter().product()
    }

    /// A `uint8` tensor taking ownership of `data` (no copy).
    pub fn from_u8(name: &str, shape: Vec<u64>, data: Vec<u8>) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: Datatype::Uint8,
            shape,
            data,
        }
    }

    /// A `bytes` tensor with one element per item.
    pub fn from_byte_strings<'a>(
        name: &str,
        shape: Vec<u64>,
        items: impl IntoIterator<Item = &'a [u8]>,
    ) -> Tensor {
        let mut data = Vec::new();
        for item in items {
            data.extend_from_slice(&(item.len() as u32).to_le_bytes());
            data.extend_from_slice(item);
        }
        Tensor {
            name: name.into(),
            datatype: Datatype::Bytes,
            shape,
            data,
        }
    }

    numeric_constructors! {
        from_i32, to_i32, i32, Int32;
        from_i64, to_i64, i64, Int64;
        from_f32, to_f32, f32, Fp32;
        from_f64, to_f64, f64, Fp64;
    }

    /// The elements of a `bytes` tensor.
    pub fn byte_elements(&self) -> Result<ElementBytes<'_>, PluginError> {
        if self.datatype != Datatype::Bytes {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` must be bytes, is {:?}",
                self.name, self.datatype
            )));
        }
        Ok(ElementBytes { rest: &self.data })
    }

    /// `bad-input` unless the tensor has `datatype` and as many bytes as its shape says.
    pub fn check(&self, datatype: Datatype) -> Result<(), PluginError> {
        if self.datatype != datatype {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` must be {:?}, is {:?}",
                self.name, datatype, self.datatype
            )));
        }
        let size = datatype.element_size().unwrap_or(1) as u64;
        if self.element_count().checked_mul(size) != Some(self.data.len() as u64) {
            return Err(PluginError::bad_input(format!(
                "tensor `{}`: shape {:?} does not match {} bytes of data",
                self.name,
                self.shape,
                self.data.len()
            )));
        }
        Ok(())
    }
}
