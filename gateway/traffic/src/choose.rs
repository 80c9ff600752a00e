//! Which version serves a request that names none, and whether it is mirrored.
//!
//! A [`Router`] is built once from a validated policy (each time the policy changes) and then
//! answers per request with no allocation and no lock.
//!
//! - Sticky callers are placed by weighted rendezvous hashing: each version scores the caller
//!   with `weight / -ln(u)`, `u` a hash of (caller, version) in (0, 1), and the highest score
//!   wins. Version `v` wins with probability `weight_v / total` exactly, the hash (XXH3, fixed
//!   by its specification) is the same on every replica and after every restart, and a weight
//!   change moves the fewest callers: raising a version's weight only moves callers onto it,
//!   lowering it only moves callers off it, and the others keep their version.
//! - Other requests draw: a random number (or any well-spread request id) is mixed and cut by
//!   cumulative weight.
//! - The mirror decision is a hash of the request id against the percent, so it is
//!   deterministic for a given id (a test can count it) and independent of the draw.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::policy::{Sticky, TrafficPolicy};

/// Seeds fixed forever: changing one would move every sticky caller and reshuffle the mirror.
const STICKY_SEED: u64 = 0x6966_6761_7465_0001;
const MIRROR_SALT: u64 = 0x6966_6761_7465_0002;
/// The mirror samples in millionths, so a percent with four decimals is exact.
const MIRROR_SCALE: u64 = 1_000_000;

/// What the gateway knows of the request for the split.
#[derive(Debug, Clone, Copy)]
pub enum Pick<'a> {
    /// The sticky identity (the key's id as text, or the header's value): the same bytes always
    /// choose the same version while the policy is the same.
    Caller(&'a [u8]),
    /// A random number for a request with no sticky identity (policy not sticky, or the header
    /// missing). Request ids in sequence are fine: they are mixed first.
    Draw(u64),
}

#[derive(Debug, Clone, Copy)]
struct Arm {
    version: u64,
    weight: f64,
    /// Sum of the weights up to and including this arm.
    cumulative: u64,
}

/// A model's traffic policy compiled for the request path.
#[derive(Debug, Clone)]
pub struct Router {
    arms: Box<[Arm]>,
    total: u64,
    sticky: Option<Sticky>,
    mirror: Option<(u64, u64)>,
}

impl Router {
    /// Compiles a policy that [`TrafficPolicy::validate`] accepted. Entries of weight 0
    /// (only possible in a policy that was never validated) receive no traffic.
    pub fn new(policy: &TrafficPolicy) -> Router {
        let mut total = 0u64;
        let arms = policy
            .split
            .iter()
            .flatten()
            .filter(|e| e.weight > 0)
            .map(|e| {
                total += u64::from(e.weight);
                Arm {
                    version: e.version,
                    weight: f64::from(e.weight),
                    cumulative: total,
                }
            })
            .collect();
        let mirror = policy.mirror.map(|m| {
            let threshold = (m.percent.clamp(0.0, 100.0) / 100.0 * MIRROR_SCALE as f64).round();
            (m.version, threshold as u64)
        });
        Router {
            arms,
            total,
            sticky: policy.sticky.clone(),
            mirror,
        }
    }

    /// What the gateway must extract for [`Pick::Caller`]; `None`: always [`Pick::Draw`].
    pub fn sticky(&self) -> Option<&Sticky> {
        self.sticky.as_ref()
    }

    /// Whether the policy has a split at all (without one, the model's version policy picks).
    pub fn splits(&self) -> bool {
        !self.arms.is_empty()
    }

    /// The version for a request that named none; `None` when the policy has no split.
    pub fn choose(&self, pick: Pick<'_>) -> Option<u64> {
        match (self.arms.len(), pick) {
            (0, _) => None,
            (1, _) => Some(self.arms[0].version),
            (_, Pick::Caller(caller)) => Some(self.rendezvous(caller)),
            (_, Pick::Draw(draw)) => {
                let point = mix(draw) % self.total;
                let arm = self
                    .arms
                    .iter()
                    .find(|a| point < a.cumulative)
                    .unwrap_or(&self.arms[self.arms.len() - 1]);
                Some(arm.version)
            }
        }
    }

    fn rendezvous(&self, caller: &[u8]) -> u64 {
        let base = xxh3_64_with_seed(caller, STICKY_SEED);
        let mut best = (f64::NEG_INFINITY, 0u64);
        for arm in self.arms.iter() {
            let h = mix(base ^ mix(arm.version));
            // 53 random bits, centred in their interval: u is in (0, 1), never 0 or 1.
            let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let score = arm.weight / -u.ln();
            if score > best.0 {
                best = (score, arm.version);
            }
        }
        best.1
    }

    /// The version to copy this request to, if it is mirrored. `served` is the version that
    /// answers the caller: a request served by the mirror's own version is not copied.
    pub fn mirror(&self, served: u64, request_id: u64) -> Option<u64> {
        let (version, threshold) = self.mirror?;
        (version != served && mix(request_id ^ MIRROR_SALT) % MIRROR_SCALE < threshold)
            .then_some(version)
    }
}

/// SplitMix64's finaliser: a bijection on u64 that spreads any input over all bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mirror, SplitEntry};
    use proptest::prelude::*;

    fn router(weights: &[(u64, u32)], sticky: bool) -> Router {
        Router::new(&TrafficPolicy {
            split: Some(
                weights
                    .iter()
                    .map(|&(version, weight)| SplitEntry { version, weight })
                    .collect(),
            ),
            sticky: sticky.then_some(Sticky::Key),
            mirror: None,
        })
    }

    /// Whether `k` successes in `n` trials is within 5 standard deviations of `p`.
    fn binomial_ok(k: u64, n: u64, p: f64) -> bool {
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (k as f64 - n as f64 * p).abs() <= 5.0 * sd.max(1.0)
    }

    #[test]
    fn split_shares_follow_the_weights() {
        let r = router(&[(1, 90), (2, 10)], true);
        let n = 20_000u64;
        let (mut sticky_v2, mut drawn_v2) = (0, 0);
        for i in 0..n {
            if r.choose(Pick::Caller(i.to_string().as_bytes())) == Some(2) {
                sticky_v2 += 1;
            }
            if r.choose(Pick::Draw(i)) == Some(2) {
                drawn_v2 += 1;
            }
        }
        assert!(binomial_ok(sticky_v2, n, 0.1), "sticky: {sticky_v2}/{n}");
        assert!(binomial_ok(drawn_v2, n, 0.1), "drawn: {drawn_v2}/{n}");
        let three = router(&[(5, 1), (6, 2), (7, 1)], true);
        let mut counts = [0u64; 3];
        for i in 0..n {
            let v = three.choose(Pick::Caller(&i.to_le_bytes())).unwrap();
            counts[(v - 5) as usize] += 1;
        }
        for (count, p) in counts.iter().zip([0.25, 0.5, 0.25]) {
            assert!(binomial_ok(*count, n, p), "{counts:?}");
        }
    }

    #[test]
    fn a_caller_keeps_its_version_and_every_replica_agrees() {
        let a = router(&[(1, 50), (2, 50)], true);
        // A replica built from the same policy, in another order.
        let b = router(&[(2, 50), (1, 50)], true);
        for i in 0..1000u32 {
            let caller = format!("key-{i}");
            let first = a.choose(Pick::Caller(caller.as_bytes()));
            for _ in 0..3 {
                assert_eq!(a.choose(Pick::Caller(caller.as_bytes())), first);
            }
            assert_eq!(b.choose(Pick::Caller(caller.as_bytes())), first);
        }
        // Pinned values: the hash and the seeds must never change between releases, or every
        // sticky caller would move at the upgrade.
        let placed: Vec<u64> = (0..12u32)
            .map(|i| a.choose(Pick::Caller(i.to_string().as_bytes())).unwrap())
            .collect();
        assert_eq!(placed, vec![1, 1, 2, 1, 1, 2, 2, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn no_split_and_single_version() {
        let none = Router::new(&TrafficPolicy {
            split: None,
            sticky: None,
            mirror: Some(Mirror {
                version: 2,
                percent: 100.0,
            }),
        });
        assert!(!none.splits());
        assert_eq!(none.choose(Pick::Draw(3)), None);
        assert_eq!(none.mirror(1, 3), Some(2));
        assert_eq!(
            none.mirror(2, 3),
            None,
            "the mirror's own version is not copied"
        );
        let one = router(&[(4, 7)], true);
        assert_eq!(one.choose(Pick::Caller(b"x")), Some(4));
        assert_eq!(one.choose(Pick::Draw(9)), Some(4));
        assert_eq!(one.mirror(4, 1), None);
    }

    #[test]
    fn mirror_share_is_counted_per_request_id() {
        let n = 100_000u64;
        for percent in [0.0, 0.5, 10.0, 50.0, 100.0] {
            let r = Router::new(&TrafficPolicy {
                split: None,
                sticky: None,
                mirror: Some(Mirror {
                    version: 3,
                    percent,
                }),
            });
            let mirrored = (0..n).filter(|&id| r.mirror(1, id).is_some()).count() as u64;
            match percent {
                0.0 => assert_eq!(mirrored, 0),
                100.0 => assert_eq!(mirrored, n),
                p => assert!(binomial_ok(mirrored, n, p / 100.0), "{p}%: {mirrored}"),
            }
            // Deterministic: the same ids give the same answer.
            assert_eq!(r.mirror(1, 77), r.mirror(1, 77));
        }
    }

    proptest! {
        #[test]
        fn changing_one_weight_moves_callers_only_to_or_from_that_version(
            weights in prop::collection::vec(1u32..1000, 2..6),
            which in 0usize..6,
            new_weight in 1u32..1000,
        ) {
            let which = which % weights.len();
            let before: Vec<(u64, u32)> =
                weights.iter().enumerate().map(|(i, &w)| (i as u64 + 1, w)).collect();
            let mut after = before.clone();
            after[which].1 = new_weight;
            let changed = after[which].0;
            let (a, b) = (router(&before, true), router(&after, true));
            for caller in 0..300u32 {
                let bytes = caller.to_le_bytes();
                let (x, y) = (a.choose(Pick::Caller(&bytes)).unwrap(), b.choose(Pick::Caller(&bytes)).unwrap());
                if x != y {
                    if new_weight > before[which].1 {
                        prop_assert_eq!(y, changed, "a raise moved a caller between other versions");
                    } else {
                        prop_assert_eq!(x, changed, "a cut moved a caller between other versions");
                    }
                }
            }
        }

        #[test]
        fn adding_or_removing_a_version_moves_only_its_callers(
            weights in prop::collection::vec(1u32..1000, 2..6),
            extra in 1u32..1000,
        ) {
            let before: Vec<(u64, u32)> =
                weights.iter().enumerate().map(|(i, &w)| (i as u64 + 1, w)).collect();
            let mut after = before.clone();
            after.push((99, extra));
            let (a, b) = (router(&before, true), router(&after, true));
            for caller in 0..300u32 {
                let bytes = caller.to_le_bytes();
                let (x, y) = (a.choose(Pick::Caller(&bytes)).unwrap(), b.choose(Pick::Caller(&bytes)).unwrap());
                prop_assert!(x == y || y == 99);
            }
        }
    }
}
