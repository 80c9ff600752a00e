//! What the fast path keeps per image and per rayon task: the image's taps tables, the
//! normalisation constants, and one task's output rows. Built by [`super::resize_normalize`],
//! read by the row passes (`rows`, `horizontal`).

use super::geometry::Geometry;
use super::spec::{ImageU8, CHANNELS};
use super::taps::{AxisTaps, FixedTaps, QuadTaps, RgbxTaps};

/// Everything one image needs for the fast path.
pub(super) struct ImagePlan<'a> {
    pub(super) image: ImageU8<'a>,
    pub(super) geo: Geometry,
    pub(super) x: AxisTaps,
    pub(super) x_rgbx: RgbxTaps,
    pub(super) x_quads: QuadTaps,
    pub(super) y: AxisTaps,
    pub(super) y_fixed: FixedTaps,
}

/// Per channel: the mean subtracted, the inverse of the std it is scaled by, and the padding
/// value (already normalised).
pub(super) struct Norm {
    pub(super) mean: [f32; CHANNELS],
    pub(super) inv_std: [f32; CHANNELS],
    pub(super) pad: [f32; CHANNELS],
}

/// One rayon task: output rows `y0..` of one image, as many as `planes` hold.
pub(super) struct RowTask<'a, 'p> {
    pub(super) plan: &'a ImagePlan<'p>,
    /// Output width: each plane holds whole rows of it.
    pub(super) width: usize,
    pub(super) y0: usize,
    pub(super) planes: [&'a mut [f32]; CHANNELS],
    pub(super) norm: &'a Norm,
}
