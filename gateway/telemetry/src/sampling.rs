//! Which traces are recorded: the server-wide setting and the per-model overrides of Triton's
//! trace extension (level, rate, count), changed at run time and read by the sampler for each
//! trace that starts in this process. The gateway keeps them in its store and applies them to
//! every replica (`infergate_service::trace_settings`); a worker keeps its own, and follows its
//! manager's decision on what the manager sends it.
//!
//! A model's override replaces the server-wide value field by field; a field it does not set
//! follows the server-wide one, as it is now. A model that sets `count` has its own count of
//! traces left; the others share the server-wide one. The count is of inference traces (those
//! that name their model): a trace of a health probe or an admin call is recorded by level and
//! rate alone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// Triton's `TIMESTAMPS` trace level, as a bit of [`Setting::level`]; no bit set is `OFF`.
pub const TIMESTAMPS: u8 = 1;
/// Triton's `TENSORS` level. Recorded like `TIMESTAMPS`: no span holds a tensor.
pub const TENSORS: u8 = 2;
/// Unlimited traces (`count`).
pub const UNLIMITED: i64 = -1;

/// The model a request names, in the parent context of its first span: the sampler applies
/// that model's settings to the trace.
#[derive(Debug, Clone)]
pub struct ForModel(pub Arc<str>);

/// The settings that apply, as Triton answers them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting {
    /// [`TIMESTAMPS`] | [`TENSORS`], or 0 for `OFF`.
    pub level: u8,
    /// One trace in `rate` is recorded; 0 records none but those a trusted caller asks for.
    pub rate: u32,
    /// Traces still to be recorded before recording stops; [`UNLIMITED`] for no end.
    pub count: i64,
}

/// A field of a change: left as it is, set, or cleared (a model's field then follows the
/// server-wide one; a server-wide field returns to its value at startup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Field<T> {
    #[default]
    Keep,
    Set(T),
    Clear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    pub level: Field<u8>,
    pub rate: Field<u32>,
    pub count: Field<i64>,
}

/// What a model sets itself; `None` follows the server-wide value.
#[derive(Debug, Default)]
struct Override {
    level: Option<u8>,
    ratio: Option<f64>,
    /// Shared by the override's successors, so a change to another field loses no count.
    count: Option<Arc<AtomicI64>>,
}

static LEVEL: AtomicU8 = AtomicU8::new(0);
/// The share of traces recorded, as `f64` bits (0.0 is all zero bits).
static RATIO: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicI64 = AtomicI64::new(UNLIMITED);
/// The server-wide level and ratio at startup, which clearing a field returns to.
static START_LEVEL: AtomicU8 = AtomicU8::new(0);
static START_RATIO: AtomicU64 = AtomicU64::new(0);
static MODELS: RwLock<BTreeMap<String, Arc<Override>>> = RwLock::new(BTreeMap::new());
/// Whether any model has an override: without one the sampler takes no lock.
static ANY_MODEL: AtomicBool = AtomicBool::new(false);

/// Called once when traces start being exported: every level recorded, `ratio` of the traces,
/// no count.
pub fn start(ratio: f64) {
    let ratio = ratio.clamp(0.0, 1.0).to_bits();
    START_LEVEL.store(TIMESTAMPS, Ordering::Relaxed);
    START_RATIO.store(ratio, Ordering::Relaxed);
    LEVEL.store(TIMESTAMPS, Ordering::Relaxed);
    RATIO.store(ratio, Ordering::Relaxed);
    COUNT.store(UNLIMITED, Ordering::Relaxed);
}

/// One trace in `rate` as a share.
fn ratio_of(rate: u32) -> f64 {
    if rate == 0 {
        0.0
    } else {
        1.0 / f64::from(rate)
    }
}

/// A share as Triton's rate (one in N), rounded: a ratio configured at startup need not be one
/// in a whole number.
fn rate_of(ratio: f64) -> u32 {
    if ratio <= 0.0 {
        0
    } else {
        (1.0 / ratio).round().min(f64::from(u32::MAX)) as u32
    }
}

fn models() -> std::sync::RwLockReadGuard<'static, BTreeMap<String, Arc<Override>>> {
    MODELS.read().unwrap_or_else(PoisonError::into_inner)
}

fn override_of(model: Option<&str>) -> Option<Arc<Override>> {
    let model = model?;
    if !ANY_MODEL.load(Ordering::Relaxed) {
        return None;
    }
    models().get(model).cloned()
}

/// Whether a trace's model matters to the sampler: some model has settings of its own, or the
/// server-wide count is limited (it counts only traces that name their model). Otherwise the
/// model need not be found and carried.
pub fn per_model() -> bool {
    ANY_MODEL.load(Ordering::Relaxed) || COUNT.load(Ordering::Relaxed) >= 0
}

/// What the sampler applies to a trace that starts now for `model`.
pub struct Applied {
    pub level: u8,
    pub ratio: f64,
    count: Option<Arc<AtomicI64>>,
}

impl Applied {
    /// Counts one recorded trace off the count; false when none are left.
    pub fn take(&self) -> bool {
        let count = self.count.as_deref().unwrap_or(&COUNT);
        count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| match left {
                0 => None,
                left if left < 0 => Some(left),
                left => Some(left - 1),
            })
            .is_ok()
    }
}

/// The settings for a trace of `model` (or of no model).
pub fn applied(model: Option<&str>) -> Applied {
    let own = override_of(model);
    let own = own.as_deref();
    Applied {
        level: own
            .and_then(|o| o.level)
            .unwrap_or_else(|| LEVEL.load(Ordering::Relaxed)),
        ratio: own
            .and_then(|o| o.ratio)
            .unwrap_or_else(|| f64::from_bits(RATIO.load(Ordering::Relaxed))),
        count: own.and_then(|o| o.count.clone()),
    }
}

/// The settings that apply to `model` (or server-wide), in Triton's terms.
pub fn current(model: Option<&str>) -> Setting {
    let applied = applied(model);
    let count = applied.count.as_deref().unwrap_or(&COUNT);
    Setting {
        level: applied.level,
        rate: rate_of(applied.ratio),
        count: count.load(Ordering::Relaxed),
    }
}

/// Applies `change` server-wide (`model` `None`) or to `model`'s override. A model whose
/// fields are all cleared has no override left.
pub fn update(model: Option<&str>, change: &Change) {
    let Some(model) = model else {
        match change.level {
            Field::Keep => {}
            Field::Set(level) => LEVEL.store(level, Ordering::Relaxed),
            Field::Clear => LEVEL.store(START_LEVEL.load(Ordering::Relaxed), Ordering::Relaxed),
        }
        match change.rate {
            Field::Keep => {}
            Field::Set(rate) => RATIO.store(ratio_of(rate).to_bits(), Ordering::Relaxed),
            Field::Clear => RATIO.store(START_RATIO.load(Ordering::Relaxed), Ordering::Relaxed),
        }
        match change.count {
            Field::Keep => {}
            Field::Set(count) => COUNT.store(count, Ordering::Relaxed),
            Field::Clear => COUNT.store(UNLIMITED, Ordering::Relaxed),
        }
        return;
    };
    let mut table = MODELS.write().unwrap_or_else(PoisonError::into_inner);
    let old = table.get(model).cloned().unwrap_or_default();
    let merged = Override {
        level: change.level.applied_to(old.level),
        ratio: change.rate.map(ratio_of).applied_to(old.ratio),
        count: change
            .count
            .map(|count| Arc::new(AtomicI64::new(count)))
            .applied_to(old.count.clone()),
    };
    if merged.level.is_none() && merged.ratio.is_none() && merged.count.is_none() {
        table.remove(model);
    } else {
        table.insert(model.to_owned(), Arc::new(merged));
    }
    ANY_MODEL.store(!table.is_empty(), Ordering::Relaxed);
}

impl<T> Field<T> {
    /// A value that was `old` after this change (`None`: not set).
    pub fn applied_to(self, old: Option<T>) -> Option<T> {
        match self {
            Field::Keep => old,
            Field::Set(value) => Some(value),
            Field::Clear => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Field<U> {
        match self {
            Field::Keep => Field::Keep,
            Field::Set(value) => Field::Set(f(value)),
            Field::Clear => Field::Clear,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Held by each test that changes the process's settings.
    pub(crate) static SETTINGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    // The settings are the process's: one test walks through them, on model names of its own.
    #[test]
    fn a_model_overrides_field_by_field_and_counts_down() {
        let _settings = SETTINGS.lock();
        let model = Some("sampling-test-model");
        let other = Some("sampling-test-other");
        update(
            model,
            &Change {
                rate: Field::Set(4),
                count: Field::Set(2),
                ..Change::default()
            },
        );
        let setting = current(model);
        assert_eq!((setting.rate, setting.count), (4, 2));
        assert_eq!(setting.level, current(None).level, "the level follows");
        assert_eq!(applied(model).ratio, 0.25);
        assert_eq!(current(other), current(None));
        // The count is the model's own, and a change of another field keeps what is left.
        assert!(applied(model).take());
        update(
            model,
            &Change {
                level: Field::Set(TENSORS),
                ..Change::default()
            },
        );
        assert!(applied(model).take());
        assert!(!applied(model).take(), "none left");
        assert_eq!(current(model).count, 0);
        assert_eq!(current(model).level, TENSORS);
        update(
            model,
            &Change {
                level: Field::Clear,
                rate: Field::Clear,
                count: Field::Clear,
            },
        );
        assert!(models().get("sampling-test-model").is_none());
        assert_eq!(current(model), current(None));
        assert_eq!((rate_of(0.0), rate_of(0.01), rate_of(1.0)), (0, 100, 1));
        assert_eq!(ratio_of(0), 0.0);
    }
}
