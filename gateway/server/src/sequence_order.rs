//! The requests of one sequence, sent on one stream (gRPC `ModelStreamInfer`, a WebSocket),
//! run in the order they were sent. A stream runs its requests concurrently; a sequence's
//! requests must reach the model in order (its state advances one request at a time, and a
//! request that overtakes the sequence's start would find no sequence), as Triton's clients
//! expect when they send a sequence's requests without waiting for the answers.

use std::collections::HashMap;
use tokio::sync::oneshot;

/// Above this many sequences remembered, the finished ones are forgotten.
const PRUNE_ABOVE: usize = 1024;

/// Per stream: the last request of each sequence seen so far.
#[derive(Default)]
pub struct SequenceOrder {
    last: HashMap<String, oneshot::Receiver<()>>,
}

/// A request's place in its sequence's order: wait for [`Turn::wait`] before running, and drop
/// the turn (or its [`Turn::done`] guard) once the request has run.
pub struct Turn {
    previous: Option<oneshot::Receiver<()>>,
    done: Option<oneshot::Sender<()>>,
}

impl SequenceOrder {
    /// The turn of a request of sequence `key`, or a free turn for a request of no sequence.
    pub fn turn(&mut self, key: Option<String>) -> Turn {
        let Some(key) = key else {
            return Turn {
                previous: None,
                done: None,
            };
        };
        if self.last.len() > PRUNE_ABOVE {
            self.last
                .retain(|_, rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        }
        let (done, next) = oneshot::channel();
        let previous = self.last.insert(key, next);
        Turn {
            previous,
            done: Some(done),
        }
    }
}

impl Turn {
    /// Waits until the sequence's previous request has run (or was dropped), and returns the
    /// guard that lets the next one run when dropped.
    pub async fn wait(self) -> Option<oneshot::Sender<()>> {
        if let Some(previous) = self.previous {
            // A dropped sender (its request failed, or the client left) ends the wait too.
            let _ = previous.await;
        }
        self.done
    }
}

/// The key of a sequence id as a request parameter carries it (an integer or a string).
pub fn key_of_int(id: u64) -> Option<String> {
    (id != 0).then(|| format!("i{id}"))
}

pub fn key_of_str(id: &str) -> Option<String> {
    (!id.is_empty()).then(|| format!("s{id}"))
}

/// The sequence key of a JSON parameter value.
pub fn key_of_json(id: &serde_json::Value) -> Option<String> {
    match id {
        serde_json::Value::String(s) => key_of_str(s),
        other => other.as_u64().and_then(key_of_int),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn a_sequence_runs_in_order_and_others_do_not_wait() {
        let mut order = SequenceOrder::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let first = order.turn(key_of_int(7));
        let second = order.turn(key_of_int(7));
        let other = order.turn(key_of_str("x"));
        let free = order.turn(None);
        let spawn = |turn: Turn, name: &'static str| {
            let log = log.clone();
            tokio::spawn(async move {
                let done = turn.wait().await;
                log.lock().unwrap().push(name);
                drop(done);
            })
        };
        let b = spawn(second, "second");
        tokio::task::yield_now().await;
        let c = spawn(other, "other");
        let d = spawn(free, "free");
        c.await.unwrap();
        d.await.unwrap();
        assert!(!log.lock().unwrap().contains(&"second"), "second ran first");
        spawn(first, "first").await.unwrap();
        b.await.unwrap();
        let log = log.lock().unwrap();
        let at = |name| log.iter().position(|n| *n == name).unwrap();
        assert!(at("first") < at("second"), "{log:?}");
    }

    #[test]
    fn zero_and_empty_ids_are_no_sequence() {
        assert_eq!(key_of_int(0), None);
        assert_eq!(key_of_str(""), None);
        assert_eq!(key_of_json(&serde_json::json!(3)), Some("i3".into()));
        assert_ne!(
            key_of_json(&serde_json::json!("3")),
            key_of_json(&serde_json::json!(3))
        );
    }
}
