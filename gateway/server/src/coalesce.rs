//! Streamed tokens written in bursts instead of one by one.
//!
//! Every write of a streamed token costs a wake-up of the writer task, a TLS record, a syscall and
//! a wake-up of the client: on a small model, a sizeable share of its step time (`cargo bench -p
//! infergate --bench streaming`). The generation holds back tokens produced within `interval` of
//! the last release and releases them together with the next one after it (or with any non-token
//! event, which never waits). No timer is involved: a held token waits at most `interval` plus one
//! model step, and a model slower than `interval` per step sends every token at once.

use std::time::{Duration, Instant};

pub struct Coalescer<T> {
    interval: Duration,
    last_release: Option<Instant>,
    held: Vec<T>,
}

impl<T> Coalescer<T> {
    /// `interval` zero releases every token at once.
    pub fn new(interval: Duration) -> Self {
        Coalescer {
            interval,
            last_release: None,
            held: Vec::new(),
        }
    }

    /// A token produced now: returns what to send (empty while it is held back).
    pub fn token(&mut self, item: T) -> Vec<T> {
        self.token_at(item, Instant::now())
    }

    /// An event that must go out now, after the tokens held before it.
    pub fn urgent(&mut self, item: T) -> Vec<T> {
        self.held.push(item);
        self.release(Instant::now())
    }

    /// Everything held back, for a stream that ends without a final event (an error).
    pub fn take_held(&mut self) -> Vec<T> {
        std::mem::take(&mut self.held)
    }

    fn token_at(&mut self, item: T, now: Instant) -> Vec<T> {
        self.held.push(item);
        match self.last_release {
            Some(last) if now.saturating_duration_since(last) < self.interval => Vec::new(),
            _ => self.release(now),
        }
    }

    fn release(&mut self, now: Instant) -> Vec<T> {
        self.last_release = Some(now);
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_tokens_within_the_interval_and_releases_them_in_order() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = Coalescer::new(ms(2));
        // The first token after a quiet period goes out at once.
        assert_eq!(c.token_at(1, t0), vec![1]);
        assert!(c.token_at(2, t0 + ms(1)).is_empty());
        assert!(c.token_at(3, t0 + ms(1)).is_empty());
        // The interval has passed: everything held goes out with this one.
        assert_eq!(c.token_at(4, t0 + ms(2)), vec![2, 3, 4]);
        assert!(c.token_at(5, t0 + ms(3)).is_empty());
        // A non-token event never waits and takes the held tokens with it.
        assert_eq!(c.urgent(6), vec![5, 6]);
        assert!(c.urgent(7) == vec![7]);
        assert!(c.token_at(8, Instant::now()).is_empty());
        assert_eq!(c.take_held(), vec![8]);
    }

    #[test]
    fn zero_interval_releases_every_token() {
        let mut c = Coalescer::new(Duration::ZERO);
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(c.token_at(i, t0), vec![i]);
        }
    }

    #[test]
    fn a_slow_model_sends_every_token_at_once() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = Coalescer::new(ms(2));
        for i in 0..5u32 {
            assert_eq!(c.token_at(i, t0 + ms(10) * i), vec![i]);
        }
    }
}
