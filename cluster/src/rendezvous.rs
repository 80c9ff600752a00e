//! Rendezvous (highest random weight) hashing: every manager and replica ranks the workers for
//! a model in the same order without talking to each other, and removing a worker only moves
//! the models that ranked it first.

use sha2::{Digest, Sha256};

/// The weight of `worker` for `model`: the first 8 bytes of SHA-256 over both names. SHA-256
/// rather than a faster hash because the order must be the same on every host and every build
/// (std's `DefaultHasher` is not stable across releases).
pub fn weight(model: &str, worker: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update((model.len() as u64).to_le_bytes());
    hasher.update(model.as_bytes());
    hasher.update(worker.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// `workers` ordered from the most to the least preferred for `model`.
pub fn rank<'a>(model: &str, workers: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut ranked: Vec<(u64, &str)> = workers.into_iter().map(|w| (weight(model, w), w)).collect();
    // Ties are practically impossible; the id breaks them so the order is total.
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    ranked.into_iter().map(|(_, w)| w).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_stable_and_independent_of_input_order() {
        let a = rank("resnet", ["w1", "w2", "w3", "w4"]);
        let b = rank("resnet", ["w4", "w3", "w2", "w1"]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn removing_a_worker_moves_only_the_models_it_led() {
        let workers = ["w1", "w2", "w3", "w4", "w5"];
        let models: Vec<String> = (0..200).map(|i| format!("model-{i}")).collect();
        let mut moved = 0;
        let mut led_by_w3 = 0;
        for m in &models {
            let before = rank(m, workers)[0];
            let after = rank(m, workers.iter().copied().filter(|w| *w != "w3"))[0];
            if before == "w3" {
                led_by_w3 += 1;
            } else {
                assert_eq!(before, after, "{m} moved although its first choice stayed");
            }
            moved += usize::from(before != after);
        }
        assert_eq!(moved, led_by_w3);
        // Spread: each of 5 workers leads some of 200 models (expected 40 each).
        for w in workers {
            let led = models.iter().filter(|m| rank(m, workers)[0] == w).count();
            assert!((15..=70).contains(&led), "{w} leads {led} of 200");
        }
    }
}
