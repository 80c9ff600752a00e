//! How many execution instances a model version runs, and how many ONNX Runtime intra-op threads
//! each gets, when the operator did not say.
//!
//! Policy: a version left at the defaults gets the machine's cores, split as instances ×
//! intra-op threads ≈ cores, with at most [`INTRA_THREADS_PER_INSTANCE`] threads per instance.
//! - One compute-bound model at concurrency 1 runs on up to four cores (ORT's intra-op speed-up
//!   for one small batch flattens beyond that while its synchronisation cost grows); on a big
//!   machine the rest of the cores go to more instances, which serve concurrent requests
//!   without any synchronisation between them.
//! - A model whose config asks for many instances (`instance_group`: many small concurrent
//!   requests) gets the cores divided among them, one thread each at least.
//! - Every version is sized for the whole machine: versions that are busy at the same time share
//!   the cores through the OS scheduler, and an idle one costs no CPU.
//!
//! Explicit settings win: `--instances`, `--intra-threads` and a config's `instance_group` are
//! taken as given, and the other figure is derived from the cores. The cores are
//! `std::thread::available_parallelism`, which honours the process's CPU affinity and its
//! cgroup CPU quota (a container limited to 2 CPUs on a 64-core host sees 2).

/// The most intra-op threads a defaulted instance gets; more cores mean more instances.
pub const INTRA_THREADS_PER_INSTANCE: usize = 4;

/// Instances and intra-op threads per instance of one model version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    pub instances: usize,
    pub intra_threads: usize,
}

/// The split for `cores` cores. `instances` and `intra_threads` are the operator's explicit
/// choices (`None` or 0: size it from the cores).
pub fn plan(cores: usize, instances: Option<usize>, intra_threads: Option<usize>) -> Threads {
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
            let instances = cores.div_ceil(INTRA_THREADS_PER_INSTANCE);
            Threads {
                instances,
                intra_threads: cores / instances,
            }
        }
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
        for (cores, want) in [
            (1, t(1, 1)),
            (2, t(1, 2)),
            (3, t(1, 3)),
            (4, t(1, 4)),
            (5, t(2, 2)),
            (6, t(2, 3)),
            (8, t(2, 4)),
            (12, t(3, 4)),
            (32, t(8, 4)),
            (64, t(16, 4)),
        ] {
            let got = plan(cores, None, None);
            assert_eq!(got, want, "{cores} cores");
            assert!(got.instances * got.intra_threads <= cores);
            // Never more than one instance's worth of threads left idle.
            assert!(cores - got.instances * got.intra_threads < got.instances.max(2));
        }
        // Zero cores cannot be reported, but a zero must not divide by zero.
        assert_eq!(plan(0, None, None), t(1, 1));
    }

    #[test]
    fn explicit_settings_win_and_the_other_figure_fills_the_cores() {
        assert_eq!(plan(16, Some(3), Some(7)), t(3, 7), "both given: as is");
        assert_eq!(plan(2, Some(4), Some(4)), t(4, 4), "even oversubscribed");
        assert_eq!(plan(16, Some(2), None), t(2, 8));
        assert_eq!(plan(16, Some(32), None), t(32, 1), "at least one thread");
        assert_eq!(plan(16, None, Some(2)), t(8, 2));
        assert_eq!(plan(2, None, Some(8)), t(1, 8), "at least one instance");
        assert_eq!(
            plan(8, Some(0), Some(0)),
            plan(8, None, None),
            "0 means automatic"
        );
    }
}
