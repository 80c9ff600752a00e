//! Where the members of a JSON object lie in its text, also while the text is still being
//! generated: a streamed tool call's name is known once its string closes, and its arguments
//! are handed on as the model writes them, exactly as written.

use std::ops::Range;

/// A top-level member of an object: its key and where its value lies; `complete` is false for
/// the last member while its value is still being written (it then runs to the text's end).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    pub key: String,
    pub value: Range<usize>,
    pub complete: bool,
}

/// The members of the object `text` starts with (after whitespace), as far as written.
/// `closed` is the end of the object when its `}` has been written. None when the text is not
/// an object (so far).
pub(crate) fn members(text: &str) -> Option<(Vec<Member>, Option<usize>)> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if i == b.len() {
        return Some((Vec::new(), None));
    }
    if b[i] != b'{' {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut out = Vec::new();
    loop {
        if i == b.len() {
            return Some((out, None));
        }
        if b[i] == b'}' && out.is_empty() {
            return Some((out, Some(i + 1)));
        }
        if b[i] != b'"' {
            return None;
        }
        let Some(key_end) = string_end(b, i) else {
            return Some((out, None));
        };
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_ws(b, key_end);
        if i == b.len() {
            return Some((out, None));
        }
        if b[i] != b':' {
            return None;
        }
        let start = skip_ws(b, i + 1);
        if start == b.len() {
            return Some((out, None));
        }
        match value_end(b, start) {
            Some(end) => {
                out.push(Member {
                    key,
                    value: start..end,
                    complete: true,
                });
                i = skip_ws(b, end);
                if i == b.len() {
                    return Some((out, None));
                }
                match b[i] {
                    b',' => i = skip_ws(b, i + 1),
                    b'}' => return Some((out, Some(i + 1))),
                    _ => return None,
                }
            }
            None => {
                out.push(Member {
                    key,
                    value: start..b.len(),
                    complete: false,
                });
                return Some((out, None));
            }
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string starting at `start` (a `"`), if it is closed.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end (exclusive) of the JSON value starting at `start`, if it is complete. A number or
/// literal at the text's end is not known to be complete.
pub(crate) fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match b[start] {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let end = (start..b.len())
                .find(|&i| matches!(b[i], b',' | b'}' | b']') || b[i].is_ascii_whitespace())?;
            Some(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_while_written() {
        let text =
            r#" {"name": "get_weather", "arguments": {"city": "Paris, \"FR\"", "days": [1, 2]}} "#;
        let (m, closed) = members(text).unwrap();
        assert_eq!(closed, Some(text.len() - 1));
        assert_eq!(m[0].key, "name");
        assert_eq!(&text[m[0].value.clone()], r#""get_weather""#);
        assert_eq!(
            &text[m[1].value.clone()],
            r#"{"city": "Paris, \"FR\"", "days": [1, 2]}"#
        );
        // Every prefix: the members so far, the last one growing.
        for cut in 0..text.len() {
            let Some((m, closed)) = members(&text[..cut]) else {
                panic!("{cut}: {:?}", &text[..cut]);
            };
            assert!(closed.is_none() || cut == text.len() - 1);
            if let Some(last) = m.last().filter(|l| !l.complete) {
                assert_eq!(last.value.end, cut);
            }
        }
        assert_eq!(members("[1]"), None);
        assert_eq!(members(r#"{"a" 1}"#), None);
        assert_eq!(members("{}").unwrap(), (vec![], Some(2)));
        // A number at the end may go on.
        let (m, _) = members(r#"{"n": 12"#).unwrap();
        assert!(!m[0].complete);
    }
}
