//! Turning a sequence's token pieces into text a client may see: bytes decoded as UTF-8 across
//! token boundaries (a character split over two tokens is sent once whole), and text that could
//! still become a stop sequence held back, so streamed text never contains one.

/// What a piece of output produced.
#[derive(Debug, PartialEq)]
pub(crate) enum Pushed {
    /// Text now safe to show (may be empty).
    Text(String),
    /// A stop sequence appeared: the text before it, the generation ends.
    Stopped(String),
}

#[derive(Debug, Default)]
pub(crate) struct TextOutput {
    /// Bytes of an incomplete UTF-8 character.
    partial: Vec<u8>,
    /// Decoded text not yet handed out (a possible stop-sequence prefix).
    pending: String,
    stop: Vec<String>,
}

impl TextOutput {
    pub(crate) fn new(stop: Vec<String>) -> TextOutput {
        TextOutput {
            stop,
            ..TextOutput::default()
        }
    }

    pub(crate) fn push(&mut self, piece: &[u8]) -> Pushed {
        self.partial.extend_from_slice(piece);
        self.decode(false);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            self.pending.truncate(at);
            return Pushed::Stopped(std::mem::take(&mut self.pending));
        }
        Pushed::Text(release(&mut self.pending, &self.stop))
    }

    /// Everything left, at the end of the generation (an incomplete character becomes U+FFFD).
    pub(crate) fn finish(&mut self) -> String {
        self.decode(true);
        std::mem::take(&mut self.pending)
    }

    /// Moves the complete characters of `partial` to `pending`; invalid bytes become U+FFFD.
    fn decode(&mut self, at_end: bool) {
        let mut rest: &[u8] = &self.partial;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.pending.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // Safe: from_utf8 vouched for `good`.
                    self.pending
                        .push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            self.pending.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None if at_end => {
                            self.pending.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        self.partial = rest.to_vec();
    }
}

/// Takes from `pending` everything except the longest tail that could still begin one of the
/// stop sequences.
pub fn release(pending: &mut String, stop: &[String]) -> String {
    let hold = stop
        .iter()
        .map(|s| longest_suffix_prefix(pending, s))
        .max()
        .unwrap_or(0);
    let cut = pending.len() - hold;
    pending.drain(..cut).collect()
}

/// Length in bytes of the longest suffix of `text` that is a proper prefix of `stop`: what must
/// be held back while it may still become `stop`.
pub fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = stop.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && stop.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_split_over_tokens_come_out_whole() {
        let mut out = TextOutput::new(vec![]);
        let e = "é".as_bytes();
        assert_eq!(out.push(b"caf"), Pushed::Text("caf".into()));
        assert_eq!(out.push(&e[..1]), Pushed::Text("".into()));
        assert_eq!(out.push(&e[1..]), Pushed::Text("é".into()));
        assert_eq!(out.push(b"\xff!"), Pushed::Text("\u{FFFD}!".into()));
        assert_eq!(out.push(&e[..1]), Pushed::Text("".into()));
        assert_eq!(out.finish(), "\u{FFFD}");
    }

    #[test]
    fn stop_sequences_are_held_back_and_cut() {
        let mut out = TextOutput::new(vec!["\n\nQ:".into()]);
        assert_eq!(out.push(b"Paris"), Pushed::Text("Paris".into()));
        assert_eq!(out.push(b".\n"), Pushed::Text(".".into()));
        assert_eq!(out.push(b"\n"), Pushed::Text("".into()));
        assert_eq!(out.push(b"Q: next"), Pushed::Stopped("".into()));
        let mut out = TextOutput::new(vec!["ab".into()]);
        assert_eq!(out.push(b"xa"), Pushed::Text("x".into()));
        assert_eq!(out.push(b"c"), Pushed::Text("ac".into()));
        assert_eq!(out.push(b"a"), Pushed::Text("".into()));
        assert_eq!(out.finish(), "a");
        assert_eq!(longest_suffix_prefix("xé", "éa"), 2);
    }
}
