//! Names a client gives to what it stores (models, pipelines, plugins): 1–128 characters of
//! letters, digits, '-', '_', '.', not starting with '.', so a name can never escape a
//! directory or hide control characters in logs.

use crate::DecodeError;

/// Checks `name`; the error says which `kind` of name is wrong and how names look.
pub fn check(kind: &str, name: &str) -> Result<(), DecodeError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(DecodeError(format!(
            "invalid {kind} name '{}': use 1-128 letters, digits, '-', '_' or '.', not starting with '.'",
            name.escape_debug()
        )))
    }
}
