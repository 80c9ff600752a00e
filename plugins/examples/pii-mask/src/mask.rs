//! Finding and masking personal data in text, without regular expressions: e-mail addresses
//! (a local part, `@`, a dotted domain with a top-level part of letters), card numbers (13 to 19
//! digits, spaces or dashes between groups, passing the Luhn check) and phone numbers (7 to 15
//! digits with an optional leading `+`, spaces, dashes, dots or parentheses between groups).

const EMAIL: &str = "[EMAIL]";
const CARD: &str = "[CARD]";
const PHONE: &str = "[PHONE]";

fn local_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '%' | '+' | '-')
}

fn domain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-')
}

fn number_char(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, ' ' | '-' | '.' | '(' | ')' | '+')
}

/// `text` with its personal data masked; None when it holds none.
pub fn mask(text: &str) -> Option<String> {
    let masked = mask_numbers(&mask_emails(text));
    (masked != text).then_some(masked)
}

fn mask_emails(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(at) = text[search..].find('@').map(|i| i + search) {
        let start = text[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| local_char(c))
            .last()
            .map_or(at, |(i, _)| i);
        // A local part does not start or end with a dot.
        let start = start + text[start..at].len() - text[start..at].trim_start_matches('.').len();
        let domain_end = text[at + 1..]
            .char_indices()
            .find(|&(_, c)| !domain_char(c))
            .map_or(text.len(), |(i, _)| at + 1 + i);
        let domain = text[at + 1..domain_end].trim_end_matches(['.', '-']);
        let end = at + 1 + domain.len();
        let tld_ok = domain
            .rsplit_once('.')
            .is_some_and(|(host, tld)| !host.is_empty() && tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic()));
        if start < at && start >= copied && tld_ok && !domain.starts_with('.') {
            out.push_str(&text[copied..start]);
            out.push_str(EMAIL);
            copied = end;
            search = end;
        } else {
            search = at + 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Whether `digits` pass the Luhn check.
pub fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let twice = d * 2;
                if twice > 9 {
                    twice - 9
                } else {
                    twice
                }
            } else {
                d
            }
        })
        .sum();
    sum % 10 == 0
}

fn mask_numbers(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let glued_before = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let Some(end) = number_at(bytes, i).filter(|_| !glued_before) else {
            i += 1;
            // Past this run of digits: a number starts only where one can.
            while i < bytes.len() && bytes[i].is_ascii_digit() && bytes[i - 1].is_ascii_digit() {
                i += 1;
            }
            continue;
        };
        let glued_after = bytes.get(end).is_some_and(u8::is_ascii_alphanumeric);
        // Neither card nor phone as a whole: no part of it is one either.
        if let Some(label) = classify(&text[i..end]).filter(|_| !glued_after) {
            out.push_str(&text[copied..i]);
            out.push_str(label);
            copied = end;
        }
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Where a number written from `i` ends: an optional '+', then groups of digits (a group may be
/// in parentheses) with at most one space, dash or dot between two groups.
fn number_at(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    if bytes.get(j) == Some(&b'+') {
        j += 1;
    }
    let mut end = None;
    loop {
        let open = bytes.get(j) == Some(&b'(');
        let start = if open { j + 1 } else { j };
        let digits = bytes[start.min(bytes.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            break;
        }
        let mut after = start + digits;
        if open {
            if bytes.get(after) != Some(&b')') {
                break;
            }
            after += 1;
        }
        end = Some(after);
        j = after;
        match bytes.get(j) {
            Some(b' ' | b'-' | b'.')
                if bytes.get(j + 1).is_some_and(|b| b.is_ascii_digit() || *b == b'(') =>
            {
                j += 1
            }
            Some(b'(') => {}
            _ => break,
        }
    }
    end
}

/// What a number is: a card (13 to 19 digits passing the Luhn check, grouped by spaces or
/// dashes if at all), a phone number (7 to 15 digits; under 10 only when written with
/// separators or a '+'), or neither (a decimal, an id, a year).
fn classify(span: &str) -> Option<&'static str> {
    let digits: Vec<u8> = span.bytes().filter(u8::is_ascii_digit).map(|b| b - b'0').collect();
    let separators: Vec<u8> = span.bytes().filter(|b| !b.is_ascii_digit()).collect();
    let card_like = !separators.iter().any(|b| matches!(b, b'(' | b')' | b'+' | b'.'));
    if (13..=19).contains(&digits.len()) && card_like && luhn(&digits) {
        return Some(CARD);
    }
    let decimal = separators == [b'.'];
    let written_as_phone = separators.iter().any(|b| *b != b'.') || separators.len() > 1;
    let phone =
        (7..=15).contains(&digits.len()) && !decimal && (digits.len() >= 10 || written_as_phone);
    phone.then_some(PHONE)
}

/// Bytes at the end of streamed text that may still become part of a match once more text
/// comes: the trailing run of e-mail characters (a word, or a local part before its '@'), or the
/// trailing run of digits and separators.
pub fn held_suffix(text: &str) -> usize {
    let run = |keep: fn(char) -> bool| -> usize {
        text.chars()
            .rev()
            .take_while(|&c| keep(c))
            .map(char::len_utf8)
            .sum()
    };
    let email = run(|c| local_char(c) || c == '@');
    let number = run(number_char);
    let number = if text[text.len() - number..].bytes().any(|b| b.is_ascii_digit() || b == b'+' || b == b'(') {
        number
    } else {
        0
    };
    email.max(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_cards_and_phones_are_masked() {
        let cases = [
            ("write to jane.doe+news@example.co.uk today", "write to [EMAIL] today"),
            ("card 4111 1111 1111 1111 expires", "card [CARD] expires"),
            ("card 4111-1111-1111-1111.", "card [CARD]."),
            ("call +1 (555) 010-9999 now", "call [PHONE] now"),
            ("call 555-0199 or 06 12 34 56 78", "call [PHONE] or [PHONE]"),
        ];
        for (text, masked) in cases {
            assert_eq!(mask(text).as_deref(), Some(masked), "{text}");
        }
    }

    #[test]
    fn ordinary_text_and_numbers_pass() {
        for text in [
            "the year 2024 had 365 days",
            "pi is 3.14159 and e is 2.718",
            "user@localhost is not an address here",
            "@mention and a@b",
            "order 12345",
            "a 3 - 4 - 5 triangle",
        ] {
            assert_eq!(mask(text), None, "{text}");
        }
        // 16 digits failing the Luhn check are no card (but are too long for a phone).
        assert_eq!(mask("id 4111 1111 1111 1112"), None);
    }

    #[test]
    fn luhn_check() {
        assert!(luhn(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
        assert!(luhn(&[7, 9, 9, 2, 7, 3, 9, 8, 7, 1, 3]));
        assert!(!luhn(&[7, 9, 9, 2, 7, 3, 9, 8, 7, 1, 4]));
    }

    #[test]
    fn what_streams_hold_back() {
        assert_eq!(held_suffix("mail me at jane.d"), "jane.d".len());
        assert_eq!(held_suffix("call +1 555 01"), " +1 555 01".len());
        assert_eq!(held_suffix("all done. "), 0);
        assert_eq!(held_suffix("hello"), 5);
    }

    /// A masker fed any split of a text, holding back what `held_suffix` says, releases the
    /// text masked as a whole.
    #[test]
    fn any_split_masks_as_the_whole() {
        let text = "Reach jane.doe@example.com or +44 20 7946 0958; card 4111 1111 1111 1111 ok.";
        let whole = mask(text).unwrap();
        for size in 1..12 {
            let mut out = String::new();
            let mut pending = String::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                pending.extend(piece);
                let hold = held_suffix(&pending);
                let ready = &pending[..pending.len() - hold];
                out.push_str(&mask(ready).unwrap_or_else(|| ready.to_string()));
                pending = pending[pending.len() - hold..].to_string();
            }
            out.push_str(&mask(&pending).unwrap_or(pending));
            assert_eq!(out, whole, "pieces of {size}");
        }
    }
}
