//! ONNX Runtime string tensors holding any bytes. ORT's string elements are byte strings with a
//! length (`std::string`), but the `ort` crate fills them from C strings (a zero byte ends the
//! element, so it refuses one) and reads them back as UTF-8 `String`s. A KServe BYTES element is
//! any bytes (a serialized protobuf, an image, `b"he\0llo"`), so both directions go through
//! ORT's length-based calls here: `GetResizedStringTensorElementBuffer` to fill an element from
//! a buffer and a length, `GetStringTensorContent` to read all elements with their offsets.

use ort::memory::Allocator;
use ort::value::{DynTensor, DynValue, TensorElementType};
use ort::AsPointer;

/// Calls one `OrtApi` function and turns its status into a `Result`.
///
/// # Safety
/// `status` must be the status an `OrtApi` function just returned (null or owned by us).
unsafe fn check(status: ort::sys::OrtStatusPtr) -> Result<(), String> {
    // SAFETY: the caller passes a fresh status; `result_from_status` reads and releases it.
    unsafe { ort::Error::result_from_status(status) }.map_err(|e| e.message().to_string())
}

/// A string tensor of `shape` whose elements are `items`, byte for byte. `items` must hold
/// exactly the shape's element count (`Tensor::check` proved it for request tensors).
pub(crate) fn to_value(shape: &[i64], items: &[Vec<u8>]) -> Result<DynValue, String> {
    let mut value = DynTensor::new(
        &Allocator::default(),
        TensorElementType::String,
        shape.to_vec(),
    )
    .map_err(|e| e.message().to_string())?;
    let count = value.shape().num_elements();
    if count != items.len() {
        return Err(format!(
            "{} BYTES elements for shape {shape:?}, which holds {count}",
            items.len()
        ));
    }
    let api = ort::api();
    let ptr = value.ptr_mut();
    for (index, item) in items.iter().enumerate() {
        let mut buffer: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `ptr` is a live CPU string tensor of `count` elements and `index < count`;
        // ORT resizes that element to `item.len()` bytes and hands back its buffer.
        unsafe {
            check((api.GetResizedStringTensorElementBuffer)(
                ptr,
                index,
                item.len(),
                &mut buffer,
            ))?;
        }
        if item.is_empty() {
            continue;
        }
        if buffer.is_null() {
            return Err(format!("ORT gave no buffer for BYTES element {index}"));
        }
        // SAFETY: ORT sized `buffer` to `item.len()` bytes for this element, and it is not
        // `item`'s memory.
        unsafe { std::ptr::copy_nonoverlapping(item.as_ptr(), buffer.cast::<u8>(), item.len()) };
    }
    Ok(value.into_dyn())
}

/// The elements of a string tensor (a model's output), byte for byte, in order.
pub(crate) fn from_value(value: &DynValue) -> Result<Vec<Vec<u8>>, String> {
    let count = match value.dtype() {
        ort::value::ValueType::Tensor {
            ty: TensorElementType::String,
            shape,
            ..
        } => shape.num_elements(),
        other => return Err(format!("not a string tensor: {other:?}")),
    };
    let api = ort::api();
    let ptr = value.ptr();
    let mut total = 0usize;
    // SAFETY: `ptr` is a live string tensor; ORT writes the sum of its element lengths.
    unsafe { check((api.GetStringTensorDataLength)(ptr, &mut total))? };
    let mut content = vec![0u8; total];
    let mut offsets = vec![0usize; count];
    if count > 0 {
        // SAFETY: `content` holds the `total` bytes ORT reported and `offsets` one slot per
        // element; ORT writes no more than that into either.
        unsafe {
            check((api.GetStringTensorContent)(
                ptr,
                content.as_mut_ptr().cast(),
                total,
                offsets.as_mut_ptr(),
                count,
            ))?;
        }
    }
    let mut items = Vec::with_capacity(count);
    for (i, &start) in offsets.iter().enumerate() {
        let end = offsets.get(i + 1).copied().unwrap_or(total);
        let item = content
            .get(start..end)
            .ok_or_else(|| format!("ORT gave element {i} the bytes {start}..{end} of {total}"))?;
        items.push(item.to_vec());
    }
    Ok(items)
}
