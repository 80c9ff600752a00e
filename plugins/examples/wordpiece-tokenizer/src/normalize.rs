//! BERT normalisation and pre-tokenisation: clean control characters, space
//! out CJK ideographs, lowercase, strip accents, split on whitespace and
//! punctuation.

use crate::vocab::{CHINESE_CHARS, LOWERCASE, STRIP_ACCENTS};
use unicode_general_category::{get_general_category, GeneralCategory as Gc};
use unicode_normalization::UnicodeNormalization;

/// The words of `text`, normalised, punctuation marks as words of their own.
pub fn words(text: &str) -> Vec<String> {
    let mut cleaned = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\0' || c == '\u{fffd}' || is_control(c) {
            continue;
        }
        if is_whitespace(c) {
            cleaned.push(' ');
        } else if CHINESE_CHARS && is_cjk(c) {
            cleaned.push(' ');
            cleaned.push(c);
            cleaned.push(' ');
        } else {
            cleaned.push(c);
        }
    }
    let normalized: String = if STRIP_ACCENTS {
        cleaned
            .nfd()
            .filter(|c| get_general_category(*c) != Gc::NonspacingMark)
            .collect()
    } else {
        cleaned
    };
    let normalized = if LOWERCASE {
        normalized.to_lowercase()
    } else {
        normalized
    };

    let mut words = Vec::new();
    for chunk in normalized.split(is_whitespace).filter(|w| !w.is_empty()) {
        let mut current = String::new();
        for c in chunk.chars() {
            if is_punctuation(c) {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                words.push(c.to_string());
            } else {
                current.push(c);
            }
        }
        if !current.is_empty() {
            words.push(current);
        }
    }
    words
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r') || get_general_category(c) == Gc::SpaceSeparator
}

fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && matches!(get_general_category(c), Gc::Control | Gc::Format)
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            Gc::ConnectorPunctuation
                | Gc::DashPunctuation
                | Gc::OpenPunctuation
                | Gc::ClosePunctuation
                | Gc::InitialPunctuation
                | Gc::FinalPunctuation
                | Gc::OtherPunctuation
        )
}

/// CJK Unified Ideographs blocks, as BERT defines them.
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}
