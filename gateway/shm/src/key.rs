//! Which shared-memory keys may be opened: POSIX shared-memory object names (`/name`, one
//! component, no other slash) that start with the operator's prefix, so a client can register
//! its own objects and never another program's segments, and never a path. The prefix `/`
//! alone admits every object name (what Triton's clients and perf_analyzer create by default):
//! then only the object's permissions keep other programs' segments out.

use crate::error::{Result, ShmError};

/// Longest object name Linux accepts (`NAME_MAX`, without the leading slash).
const NAME_MAX: usize = 255;

/// Checks an operator's prefix: a key prefix itself (`/`, then characters other than `/`), so
/// that every key it admits is a single object name.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    let plain_rest = prefix.strip_prefix('/').is_some_and(plain);
    if !plain_rest {
        return Err(ShmError::invalid(format!(
            "shared-memory key prefix '{prefix}' must be '/' followed by characters other than '/' (e.g. '/infergate-', or '/' for any object name)"
        )));
    }
    Ok(())
}

/// Checks a client's key against `prefix`: a single object name under it.
pub(crate) fn check_key(key: &str, prefix: &str) -> Result<()> {
    let Some(rest) = key.strip_prefix('/') else {
        return Err(ShmError::invalid(format!(
            "shared-memory key '{}' must start with '/' (a POSIX shared-memory object name, not a path)",
            printable(key)
        )));
    };
    if rest.is_empty() || rest.len() > NAME_MAX || !plain(rest) || rest == "." || rest == ".." {
        return Err(ShmError::invalid(format!(
            "shared-memory key '{}' is not a single object name: '/' then 1 to {NAME_MAX} characters, no '/', no NUL",
            printable(key)
        )));
    }
    if !key.starts_with(prefix) {
        return Err(ShmError::invalid(format!(
            "shared-memory key '{}' is outside this server's prefix '{prefix}': only objects named so may be registered",
            printable(key)
        )));
    }
    Ok(())
}

/// No slash, no NUL, no control character.
fn plain(name: &str) -> bool {
    !name.chars().any(|c| c == '/' || c.is_control())
}

/// The key as it may go into a message: control characters escaped, at most 300 of them.
fn printable(key: &str) -> String {
    key.chars()
        .take(300)
        .flat_map(char::escape_default)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_single_names_under_the_prefix() {
        let prefix = "/infergate-";
        assert!(check_key("/infergate-input0", prefix).is_ok());
        for (key, reason) in [
            ("infergate-input0", "must start with '/'"),
            ("/dev/shm/infergate-x", "single object name"),
            ("/infergate-a/../../etc/passwd", "single object name"),
            ("/..", "single object name"),
            ("/", "single object name"),
            ("/infergate-\0x", "single object name"),
            ("/other-program", "outside this server's prefix"),
            ("/infergat", "outside this server's prefix"),
        ] {
            let e = check_key(key, prefix).unwrap_err();
            assert!(e.message.contains(reason), "{key:?}: {e}");
        }
        let long = format!("/infergate-{}", "x".repeat(300));
        assert!(check_key(&long, prefix).is_err());
    }

    #[test]
    fn a_prefix_is_itself_a_name_start() {
        assert!(check_prefix("/infergate-").is_ok());
        assert!(check_prefix("/").is_ok());
        assert!(check_key("/input_simple", "/").is_ok());
        assert!(check_key("/a/b", "/").is_err());
        for bad in ["", "infergate", "/a/b", "/dev/shm/"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
