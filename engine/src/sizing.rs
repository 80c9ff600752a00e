//! How many execution instances a model version runs, and how many ONNX Runtime intra-op threads
//! each gets, when the operator did not say.
//!
//! Policy: a version left at the defaults gets the machine's cores, split as instances ×
//! intra-op threads ≈ cores, with at most [`INTRA_THREADS_PER_INSTANCE`] threads per instance,
//! and at least [`MIN_INSTANCES`] instances (on 2 cores or more) when it does not batch.
//! - Concurrent requests are served either as one batch (a version with `max_batch_size` > 0)
//!   or by several instances. A version that cannot batch and has one instance runs them one at
//!   a time, on intra-op threads alone: so it gets two instances at least, as Triton gives a CPU
//!   model by default: concurrent requests then run side by side with no synchronisation
//!   between threads, which serves more for less CPU (`bench/sizing.py`: on 2 cores, 2 × 1
//!   serves about a fifth more than 1 × 2 at concurrency 4). The price: a lone request runs on
//!   fewer threads, and the model's sessions take twice its memory (the budget counts each
//!   instance). `--instances 1` restores one instance on all cores.
//! - A version that batches keeps one instance per four cores: a second instance would halve
//!   its batches, and smaller batches cost more CPU per inference (`bench/cpu_per_request.py`).
//! - One compute-bound model at concurrency 1 runs on up to four cores (ORT's intra-op speed-up
//!   for one small batch flattens beyond that while its synchronisation cost grows); on a big
//!   machine the rest of the cores go to more instances, which serve concurrent requests
//!   without any synchronisation between them.
//! - A model whose config asks for many instances (`instance_group`: many small concurrent
//!   requests) gets the cores divided among them, one thread each at least.
//! - A model so small that a lone request runs in under [`SHORT_RUN`] on its planned threads
//!   gets one intra-op thread per instance (the instances stay as planned): ORT wakes and joins
//!   its pool threads at every operator it splits, which costs such a model more CPU than the
//!   split saves time. The load times a few runs of a made-up request of one sample and
//!   reloads the session with one thread when they are short (`lone_run`).
//! - Every version is sized for the whole machine: versions that are busy at the same time share
//!   the cores through the OS scheduler, and an idle one costs no CPU.
//!
//! Explicit settings win: `--instances`, `--intra-threads` and a config's `instance_group` are
//! taken as given, and the other figure is derived from the cores (intra-op threads derived
//! so are cut to one for a short run, as above). The cores are
//! `std::thread::available_parallelism`, which honours the process's CPU affinity and its
//! cgroup CPU quota (a container limited to 2 CPUs on a 64-core host sees 2).

use std::time::Duration;

/// A version left at the default intra-op threads whose lone request runs in less than this on
/// them gets one intra-op thread per instance instead (measured at load; see `lone_run`).
pub const SHORT_RUN: Duration = Duration::from_micros(200);

/// The fewest instances a defaulted version that does not batch gets on 2 cores or more.
pub const MIN_INSTANCES: usize = 2;

/// The most intra-op threads a defaulted instance gets; more cores mean more instances.
pub const INTRA_THREADS_PER_INSTANCE: usize = 4;

/// Instances and intra-op threads per instance of one model version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    pub instances: usize,
    pub intra_threads: usize,
}

/// The split for `cores` cores. `instances` and `intra_threads` are the operator's explicit
/// choices (`None` or 0: size it from the cores); `batches`: the version serves concurrent
/// requests as batches (`max_batch_size` > 0).
pub fn plan(
    cores: usize,
    instances: Option<usize>,
    intra_threads: Option<usize>,
    batches: bool,
) -> Threads {
    let cores = cores.max(1);
    let instances = instances.filter(|&n| n > 0);
    let intra = intra_threads.filter(|&n| n > 0);
    match (instances, intra) {
        (Some(instances), Some(intra_threads)) => Threads {
            instances,
            intra_threads,
        },
        (Some(instances), None) => Threads {
            instances,
            intra_threads: (cores / instances).max(1),
        },
        (None, Some(intra_threads)) => Threads {
            instances: (cores / intra_threads).max(1),
            intra_threads,
        },
        (None, None) => {
            let least = if batches { 1 } else { MIN_INSTANCES };
            let instances = cores
                .div_ceil(INTRA_THREADS_PER_INSTANCE)
                .max(least)
                .min(cores);
            Threads {
                instances,
                intra_threads: cores / instances,
            }
        }
    }
}

/// Threads of the async runtime (TLS, HTTP, request decode and encode, the hand-off to the
/// engine) when the operator did not say (`explicit` `None` or 0): in a process whose engine
/// runs models, half the cores (rounded up); in one that only routes to workers, every core.
///
/// Why half: the engine's instances and intra-op threads are already sized to the whole machine, so
/// an async worker per core as well puts two busy threads on every core, and async workers that run
/// out of tasks park and wake each other for work one thread would have done in turn
/// (`bench/cpu_per_request.py`: on 2 cores, one async thread costs about a tenth less CPU per
/// inference than two, at the same throughput). So 2 cores get 1, 4 get 2, 32 get 16. A single
/// worker has no other to hand its tasks to while a lone request's short model run blocks it, so it
/// runs a run of at most 2 ms inline (`instance::Scheduler::run_here`), as it does a short batch
/// its clock closes; longer runs hand the worker's tasks over first.
pub fn async_threads(cores: usize, explicit: Option<usize>, runs_models: bool) -> usize {
    let cores = cores.max(1);
    match explicit.filter(|&n| n > 0) {
        Some(n) => n,
        None if runs_models => cores.div_ceil(2),
        None => cores,
    }
}

/// The cores this process may use (affinity and cgroup quota included); 1 if unknown.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(instances: usize, intra_threads: usize) -> Threads {
        Threads {
            instances,
            intra_threads,
        }
    }

    #[test]
    fn defaults_use_every_core_with_at_most_four_threads_per_instance() {
        // (cores, a version that cannot batch, one that batches)
        for (cores, unbatched, batched) in [
            (1, t(1, 1), t(1, 1)),
            (2, t(2, 1), t(1, 2)),
            (3, t(2, 1), t(1, 3)),
            (4, t(2, 2), t(1, 4)),
            (5, t(2, 2), t(2, 2)),
            (6, t(2, 3), t(2, 3)),
            (8, t(2, 4), t(2, 4)),
            (12, t(3, 4), t(3, 4)),
            (32, t(8, 4), t(8, 4)),
            (64, t(16, 4), t(16, 4)),
        ] {
            for (batches, want) in [(false, unbatched), (true, batched)] {
                let got = plan(cores, None, None, batches);
                assert_eq!(got, want, "{cores} cores, batches: {batches}");
                assert!(got.instances * got.intra_threads <= cores);
                // Never more than one instance's worth of threads left idle.
                assert!(cores - got.instances * got.intra_threads < got.instances.max(2));
            }
        }
        // Zero cores cannot be reported, but a zero must not divide by zero.
        assert_eq!(plan(0, None, None, false), t(1, 1));
        assert_eq!(plan(0, None, None, true), t(1, 1));
    }

    #[test]
    fn the_async_runtime_gets_half_the_cores_beside_an_engine_and_all_without() {
        for (cores, beside_engine, routing_only) in [
            (0, 1, 1),
            (1, 1, 1),
            (2, 1, 2),
            (3, 2, 3),
            (4, 2, 4),
            (6, 3, 6),
            (32, 16, 32),
        ] {
            assert_eq!(async_threads(cores, None, true), beside_engine, "{cores}");
            assert_eq!(
                async_threads(cores, Some(0), true),
                beside_engine,
                "{cores}"
            );
            assert_eq!(async_threads(cores, None, false), routing_only, "{cores}");
        }
        assert_eq!(async_threads(2, Some(6), true), 6, "explicit wins");
        assert_eq!(async_threads(64, Some(3), false), 3, "explicit wins");
    }

    #[test]
    fn explicit_settings_win_and_the_other_figure_fills_the_cores() {
        assert_eq!(
            plan(16, Some(3), Some(7), false),
            t(3, 7),
            "both given: as is"
        );
        assert_eq!(
            plan(2, Some(4), Some(4), false),
            t(4, 4),
            "even oversubscribed"
        );
        assert_eq!(plan(16, Some(2), None, false), t(2, 8));
        assert_eq!(
            plan(2, Some(1), None, false),
            t(1, 2),
            "--instances 1: all the cores"
        );
        assert_eq!(
            plan(2, None, Some(1), true),
            t(2, 1),
            "--intra-threads 1 on a batcher"
        );
        assert_eq!(
            plan(16, Some(32), None, false),
            t(32, 1),
            "at least one thread"
        );
        assert_eq!(plan(16, None, Some(2), false), t(8, 2));
        assert_eq!(
            plan(2, None, Some(8), false),
            t(1, 8),
            "at least one instance"
        );
        assert_eq!(
            plan(8, Some(0), Some(0), false),
            plan(8, None, None, false),
            "0 means automatic"
        );
    }
}
