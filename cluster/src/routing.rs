//! Which worker serves a request.
//!
//! Among ready workers, those with the model's version already loaded are preferred (a cold
//! load costs seconds). Among those, the power of two choices: two at random, the one with
//! fewer outstanding requests wins, which keeps queues even without a global view. When no
//! worker holds the model, or its copies queue for longer than the policy allows, the next
//! worker in the model's rendezvous order gets it, so every manager and replica grows a model
//! onto the same hosts and a model lives on as few workers as its load needs.

use std::time::Duration;

use rand::Rng;

use crate::liveness::WorkerState;
use crate::rendezvous;

/// What the router knows about one worker for the request's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub id: &'a str,
    pub state: WorkerState,
    /// The requested model version is loaded there (from its last heartbeat or our own load).
    pub loaded: bool,
    /// Requests this manager sent there and has not had answered yet.
    pub outstanding: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A model whose copies queue longer than this gets one more copy.
    pub scale_out_queue_delay: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            scale_out_queue_delay: Duration::from_millis(50),
        }
    }
}

/// The router's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    /// Where this request goes.
    pub worker: &'a str,
    /// A worker that should load the model as well (in the background), because its copies
    /// are falling behind. `None` when the current copies keep up or no worker is left.
    pub load_also: Option<&'a str>,
}

/// Why no worker can take the request. The gateway answers 503 with a Retry-After naming the
/// model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoWorker {
    #[error("no worker is ready")]
    NoneReady,
    #[error("every ready worker has already failed this request")]
    AllTried,
}

/// Chooses the worker for a request to `model`. `tried` lists the workers that already failed
/// this request (a retry after a reset goes elsewhere); `queue_delay` is the model's recent
/// queueing time on its current copies.
pub fn route<'a>(
    model: &str,
    candidates: &[Candidate<'a>],
    tried: &[&str],
    queue_delay: Duration,
    policy: &Policy,
    rng: &mut impl Rng,
) -> Result<Route<'a>, NoWorker> {
    let ready: Vec<&Candidate<'a>> = candidates.iter().filter(|c| c.state.routable()).collect();
    if ready.is_empty() {
        return Err(NoWorker::NoneReady);
    }
    let open: Vec<&Candidate<'a>> = ready
        .iter()
        .copied()
        .filter(|c| !tried.contains(&c.id))
        .collect();
    if open.is_empty() {
        return Err(NoWorker::AllTried);
    }
    let ranked = rendezvous::rank(model, open.iter().map(|c| c.id));
    let rank_of = |id: &str| ranked.iter().position(|r| *r == id).unwrap_or(usize::MAX);
    let loaded: Vec<&Candidate<'a>> = open.iter().copied().filter(|c| c.loaded).collect();
    let first_unloaded = ranked
        .iter()
        .copied()
        .find(|id| open.iter().any(|c| c.id == *id && !c.loaded));

    if loaded.is_empty() {
        // Nobody holds it: the model's first rendezvous choice loads it (lazily, on this
        // request), the same host every manager would pick.
        return Ok(Route {
            worker: ranked[0],
            load_also: None,
        });
    }
    let chosen = two_choices(&loaded, rng, &rank_of);
    let behind =
        queue_delay > policy.scale_out_queue_delay && loaded.iter().all(|c| c.outstanding > 0);
    Ok(Route {
        worker: chosen.id,
        load_also: if behind { first_unloaded } else { None },
    })
}

/// The power of two choices among `loaded` (not empty): two distinct at random, fewer
/// outstanding wins, the model's rendezvous order breaks ties so idle traffic sticks to one copy.
fn two_choices<'a, 'c>(
    loaded: &[&'c Candidate<'a>],
    rng: &mut impl Rng,
    rank_of: &impl Fn(&str) -> usize,
) -> &'c Candidate<'a> {
    if loaded.len() == 1 {
        return loaded[0];
    }
    let a = rng.random_range(0..loaded.len());
    let mut b = rng.random_range(0..loaded.len() - 1);
    if b >= a {
        b += 1;
    }
    let (a, b) = (loaded[a], loaded[b]);
    let key = |c: &Candidate| (c.outstanding, rank_of(c.id));
    if key(b) < key(a) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn c(id: &str, state: WorkerState, loaded: bool, outstanding: u32) -> Candidate<'_> {
        Candidate {
            id,
            state,
            loaded,
            outstanding,
        }
    }

    const READY: WorkerState = WorkerState::Ready;
    const FAST: Duration = Duration::ZERO;

    #[test]
    fn no_ready_worker_and_all_tried_are_told_apart() {
        let mut rng = StdRng::seed_from_u64(1);
        let p = Policy::default();
        let lost = [
            c("a", WorkerState::Lost, true, 0),
            c("b", WorkerState::Draining, true, 0),
        ];
        assert_eq!(
            route("m", &lost, &[], FAST, &p, &mut rng),
            Err(NoWorker::NoneReady)
        );
        assert_eq!(
            route("m", &[], &[], FAST, &p, &mut rng),
            Err(NoWorker::NoneReady)
        );
        let one = [c("a", READY, true, 0)];
        assert_eq!(
            route("m", &one, &["a"], FAST, &p, &mut rng),
            Err(NoWorker::AllTried)
        );
    }

    #[test]
    fn a_loaded_copy_wins_over_idle_workers_without_it() {
        let mut rng = StdRng::seed_from_u64(2);
        let ws = [
            c("a", READY, false, 0),
            c("b", READY, true, 5),
            c("c", READY, false, 0),
        ];
        for _ in 0..50 {
            let r = route("m", &ws, &[], FAST, &Policy::default(), &mut rng).unwrap();
            assert_eq!(
                r,
                Route {
                    worker: "b",
                    load_also: None
                }
            );
        }
    }

    #[test]
    fn a_cold_model_goes_to_its_first_rendezvous_choice_on_every_manager() {
        let mut rng = StdRng::seed_from_u64(3);
        let ws = [
            c("a", READY, false, 0),
            c("b", READY, false, 0),
            c("c", READY, false, 0),
        ];
        let expected = rendezvous::rank("resnet", ["a", "b", "c"])[0];
        let r = route("resnet", &ws, &[], FAST, &Policy::default(), &mut rng).unwrap();
        assert_eq!(r.worker, expected);
        let mut reversed = ws;
        reversed.reverse();
        let r2 = route("resnet", &reversed, &[], FAST, &Policy::default(), &mut rng).unwrap();
        assert_eq!(r2.worker, expected);
    }

    #[test]
    fn the_less_loaded_of_two_copies_is_chosen() {
        let mut rng = StdRng::seed_from_u64(4);
        let ws = [c("a", READY, true, 9), c("b", READY, true, 1)];
        for _ in 0..50 {
            assert_eq!(
                route("m", &ws, &[], FAST, &Policy::default(), &mut rng)
                    .unwrap()
                    .worker,
                "b"
            );
        }
    }

    #[test]
    fn two_choices_spread_load_across_equal_copies() {
        let mut rng = StdRng::seed_from_u64(5);
        let ids = ["a", "b", "c", "d"];
        let mut outstanding = [0u32; 4];
        for _ in 0..400 {
            let ws: Vec<Candidate> = ids
                .iter()
                .zip(outstanding)
                .map(|(id, o)| c(id, READY, true, o))
                .collect();
            let r = route("m", &ws, &[], FAST, &Policy::default(), &mut rng).unwrap();
            let i = ids.iter().position(|id| *id == r.worker).unwrap();
            outstanding[i] += 1;
        }
        // Without completions the counts stay within a few of each other (random choice
        // would drift by tens).
        let (min, max) = (
            outstanding.iter().min().unwrap(),
            outstanding.iter().max().unwrap(),
        );
        assert!(max - min <= 3, "{outstanding:?}");
    }

    #[test]
    fn a_retry_skips_the_worker_that_failed() {
        let mut rng = StdRng::seed_from_u64(6);
        let ws = [
            c("a", READY, true, 0),
            c("b", READY, true, 7),
            c("x", WorkerState::Lost, true, 0),
        ];
        for _ in 0..20 {
            let r = route("m", &ws, &["a"], FAST, &Policy::default(), &mut rng).unwrap();
            assert_eq!(r.worker, "b");
        }
    }

    #[test]
    fn copies_falling_behind_ask_for_one_more_in_rendezvous_order() {
        let mut rng = StdRng::seed_from_u64(7);
        let p = Policy::default();
        let ws = [
            c("a", READY, true, 4),
            c("b", READY, false, 0),
            c("c", READY, false, 0),
            c("d", READY, false, 0),
        ];
        let next = rendezvous::rank("m", ["b", "c", "d"])[0];
        let slow = Duration::from_millis(200);
        assert_eq!(
            route("m", &ws, &[], slow, &p, &mut rng).unwrap().load_also,
            Some(next)
        );
        // Fast enough, or a copy idle: no new copy.
        assert_eq!(
            route("m", &ws, &[], FAST, &p, &mut rng).unwrap().load_also,
            None
        );
        let idle = [
            c("a", READY, true, 4),
            c("e", READY, true, 0),
            c("b", READY, false, 0),
        ];
        assert_eq!(
            route("m", &idle, &[], slow, &p, &mut rng)
                .unwrap()
                .load_also,
            None
        );
        // Nowhere left to grow.
        let full = [c("a", READY, true, 4), c("b", READY, true, 2)];
        assert_eq!(
            route("m", &full, &[], slow, &p, &mut rng)
                .unwrap()
                .load_also,
            None
        );
    }
}
