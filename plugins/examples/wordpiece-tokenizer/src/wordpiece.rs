//! Greedy longest-match-first WordPiece over the build-time vocabulary.

use crate::vocab::{CONTINUING_PREFIX, MAX_CHARS_PER_WORD, UNK_ID, VOCAB};

fn lookup(token: &str) -> Option<i64> {
    VOCAB
        .binary_search_by(|(t, _)| (*t).cmp(token))
        .ok()
        .map(|i| VOCAB[i].1)
}

/// Appends the ids of `word`'s pieces, or `[UNK]` if it cannot be split.
pub fn push_ids(word: &str, ids: &mut Vec<i64>) {
    if word.chars().count() > MAX_CHARS_PER_WORD {
        ids.push(UNK_ID);
        return;
    }
    let start_len = ids.len();
    let mut start = 0;
    let mut candidate = String::new();
    while start < word.len() {
        let mut end = word.len();
        let mut found = None;
        while end > start {
            candidate.clear();
            if start > 0 {
                candidate.push_str(CONTINUING_PREFIX);
            }
            candidate.push_str(&word[start..end]);
            if let Some(id) = lookup(&candidate) {
                found = Some(id);
                break;
            }
            // Step back one character, not one byte.
            end = word[..end]
                .char_indices()
                .next_back()
                .map_or(start, |(i, _)| i);
        }
        match found {
            Some(id) => {
                ids.push(id);
                start = end;
            }
            None => {
                ids.truncate(start_len);
                ids.push(UNK_ID);
                return;
            }
        }
    }
}
