//! Blocked terms: whole-word matches ignoring ASCII case, and what a stream must hold back.

use serde_json::Value;

/// Most terms, and bytes per term, a configuration may list.
const MAX_TERMS: usize = 1024;
const MAX_TERM_BYTES: usize = 256;

/// What to do with a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Refuse,
    Mask,
}

/// What checking a text found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Clean,
    /// The text with each match replaced by asterisks.
    Masked(String),
    /// The first blocked term found.
    Blocked(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    terms: Vec<String>,
    pub action: Action,
}

fn word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

impl Terms {
    /// From the attachment's configuration (JSON text).
    pub fn from_config(config: &str) -> Result<Terms, String> {
        let value: Value = serde_json::from_str(if config.trim().is_empty() { "{}" } else { config })
            .map_err(|e| format!("the configuration is not JSON: {e}"))?;
        let terms: Vec<String> = match value.get("terms") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|t| t.as_str().map(|s| s.trim().to_string()))
                .collect::<Option<_>>()
                .ok_or("terms must be a list of strings")?,
            Some(_) => return Err("terms must be a list of strings".into()),
            None => return Err("no terms configured: attach it with {\"terms\": [...]}".into()),
        };
        if terms.len() > MAX_TERMS || terms.iter().any(|t| t.is_empty() || t.len() > MAX_TERM_BYTES) {
            return Err(format!(
                "terms: at most {MAX_TERMS}, each 1 to {MAX_TERM_BYTES} bytes"
            ));
        }
        let action = match value.get("action").and_then(Value::as_str) {
            None | Some("refuse") => Action::Refuse,
            Some("mask") => Action::Mask,
            Some(other) => return Err(format!("action '{other}': use refuse or mask")),
        };
        Ok(Terms { terms, action })
    }

    /// Whole-word matches, in order, not overlapping: (start, end, term).
    fn matches<'t>(&'t self, text: &str) -> Vec<(usize, usize, &'t str)> {
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if i > 0 && word_char(bytes[i - 1]) && word_char(bytes[i]) {
                i += 1;
                continue;
            }
            let hit = self.terms.iter().find(|t| {
                let end = i + t.len();
                end <= bytes.len()
                    && bytes[i..end].eq_ignore_ascii_case(t.as_bytes())
                    && (end == bytes.len() || !word_char(bytes[end]) || !word_char(bytes[end - 1]))
            });
            match hit {
                Some(t) => {
                    found.push((i, i + t.len(), t.as_str()));
                    i += t.len();
                }
                None => i += 1,
            }
        }
        found
    }

    pub fn check(&self, text: &str) -> Outcome {
        let found = self.matches(text);
        let Some(first) = found.first() else {
            return Outcome::Clean;
        };
        match self.action {
            Action::Refuse => Outcome::Blocked(first.2.to_string()),
            Action::Mask => {
                let mut out = String::with_capacity(text.len());
                let mut copied = 0;
                for (start, end, _) in found {
                    out.push_str(&text[copied..start]);
                    out.push_str(&"*".repeat(text[start..end].chars().count()));
                    copied = end;
                }
                out.push_str(&text[copied..]);
                Outcome::Masked(out)
            }
        }
    }

    /// Bytes at the end of `text` that may be the start of a term (or a whole term the next
    /// character could still glue to a longer word).
    pub fn held(&self, text: &str) -> usize {
        let bytes = text.as_bytes();
        let longest = self.terms.iter().map(String::len).max().unwrap_or(0);
        (1..=longest.min(bytes.len()))
            .rev()
            .find(|&n| {
                let start = bytes.len() - n;
                text.is_char_boundary(start)
                    && (start == 0 || !word_char(bytes[start - 1]) || !word_char(bytes[start]))
                    && self.terms.iter().any(|t| {
                        t.len() >= n && t.as_bytes()[..n].eq_ignore_ascii_case(&bytes[start..])
                    })
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(action: &str) -> Terms {
        Terms::from_config(&format!(
            r#"{{"terms": ["secret project", "darn"], "action": "{action}"}}"#
        ))
        .unwrap()
    }

    #[test]
    fn whole_words_ignoring_case() {
        let t = terms("refuse");
        assert_eq!(t.check("The Secret Project is late"), Outcome::Blocked("secret project".into()));
        assert_eq!(t.check("darn it"), Outcome::Blocked("darn".into()));
        assert_eq!(t.check("darnation and secretive projects"), Outcome::Clean);
        let t = terms("mask");
        assert_eq!(t.check("oh DARN, darn."), Outcome::Masked("oh ****, ****.".into()));
    }

    #[test]
    fn configuration_is_checked() {
        assert!(Terms::from_config("{}").unwrap_err().contains("no terms"));
        assert!(Terms::from_config(r#"{"terms": [""]}"#).is_err());
        assert!(Terms::from_config(r#"{"terms": ["a"], "action": "shout"}"#).is_err());
        assert!(Terms::from_config("not json").is_err());
    }

    #[test]
    fn streams_hold_what_may_become_a_term() {
        let t = terms("refuse");
        assert_eq!(t.held("this is the sec"), 3);
        assert_eq!(t.held("this is the secret proj"), "secret proj".len());
        assert_eq!(t.held("it is dar"), 3);
        assert_eq!(t.held("it is darn"), 4);
        assert_eq!(t.held("nothing here"), 0);
        assert_eq!(t.held("undar"), 0);
    }
}
