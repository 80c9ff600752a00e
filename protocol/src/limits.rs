//! The one place where the sizes a client declares (shapes, element counts, section lengths)
//! are checked against the bytes it actually sent, before any memory is reserved for them.
//!
//! A shape is only a claim: `[68719476736, 16]` with one element of data must be an error,
//! never an allocation of 2^40 slots, and `[9223372036854775807]` must not overflow a
//! capacity computation. Every decoder asks here first, with the bytes it has, and reserves
//! only what those bytes can hold; the engine checks the decoded tensors against the model's
//! signature afterwards, at a cost bounded by the body's size.

use crate::tensor::{element_count, DataType};

/// The elements a shape declares: every dimension non-negative, the product within `usize`.
pub fn declared_elements(shape: &[i64]) -> Result<usize, String> {
    element_count(shape).ok_or_else(|| {
        if shape.iter().any(|&d| d < 0) {
            format!("invalid shape {shape:?}: dimensions must be non-negative")
        } else {
            format!("invalid shape {shape:?}: its element count overflows")
        }
    })
}

/// Fixed-size elements: `bytes` must be exactly `count` elements of `datatype`.
pub fn fixed_size(datatype: DataType, count: usize, bytes: usize) -> Result<(), String> {
    let needed = datatype.size().and_then(|size| count.checked_mul(size));
    if needed == Some(bytes) {
        Ok(())
    } else {
        Err(format!(
            "{bytes} binary bytes do not hold {count} {datatype} elements"
        ))
    }
}

/// BYTES in the binary layout: every element takes at least its 4-byte length prefix, so
/// `bytes` bytes hold at most `bytes / 4` of them.
pub fn length_prefixed(count: usize, bytes: usize) -> Result<(), String> {
    at_most(count, bytes / 4, || format!("{bytes} binary bytes"))
}

/// A JSON `data` value of `text_len` bytes: n elements take at least 2n - 1 bytes (one digit
/// each and the commas between them), so it holds at most `(text_len + 1) / 2`.
pub fn json_elements(count: usize, text_len: usize) -> Result<(), String> {
    at_most(count, text_len.div_ceil(2), || {
        format!("{text_len} bytes of JSON data")
    })
}

/// Typed gRPC contents: already decoded, so the count must match exactly.
pub fn exactly(count: usize, given: usize, field: &str) -> Result<(), String> {
    if count == given {
        Ok(())
    } else {
        Err(format!(
            "{given} elements in contents.{field}, shape needs {count}"
        ))
    }
}

fn at_most(count: usize, most: usize, held_by: impl FnOnce() -> String) -> Result<(), String> {
    if count <= most {
        Ok(())
    } else {
        Err(format!(
            "the shape declares {count} elements but {} hold at most {most}",
            held_by()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_shapes_are_errors_not_allocations() {
        assert!(declared_elements(&[i64::MAX, i64::MAX])
            .unwrap_err()
            .contains("overflows"));
        assert!(declared_elements(&[2, -1])
            .unwrap_err()
            .contains("non-negative"));
        assert_eq!(declared_elements(&[]), Ok(1));
        assert_eq!(declared_elements(&[0, i64::MAX]), Ok(0));
        let count = declared_elements(&[68719476736, 16]).unwrap();
        assert!(json_elements(count, 3).is_err());
        assert!(length_prefixed(count, 4).is_err());
        assert!(fixed_size(DataType::Fp32, usize::MAX, 4).is_err());
    }

    #[test]
    fn the_tightest_encodings_fit() {
        // "1" and "1,2,3" (with brackets: more bytes, still fits).
        assert!(json_elements(1, 1).is_ok());
        assert!(json_elements(3, 5).is_ok());
        assert!(json_elements(4, 5).is_err());
        assert!(length_prefixed(2, 8).is_ok());
        assert!(length_prefixed(3, 11).is_err());
        assert!(fixed_size(DataType::Fp32, 2, 8).is_ok());
    }
}
