//! The destination → source mapping of each axis (see the module docs) and
//! the filter taps it implies, in f64: the formula every implementation
//! starts from.

use super::spec::{ImageU8, PreprocessSpec, ResizeMode};

/// One axis of the destination → source mapping (see the module docs).
/// Parameters are f32 because the CUDA kernel receives them as f32; every
/// implementation starts from these same numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AxisMap {
    /// First destination index inside the resized region.
    pub dst_start: usize,
    /// Number of destination indices inside the resized region.
    pub dst_len: usize,
    pub src_len: usize,
    /// Source span per destination pixel.
    pub ratio: f32,
    /// Source coordinate of the left edge of destination index `dst_start`.
    pub offset: f32,
}

#[cfg(test)]
impl AxisMap {
    /// The whole source axis onto the whole destination axis (tests).
    pub fn whole(src_len: usize, dst_len: usize) -> AxisMap {
        AxisMap {
            dst_start: 0,
            dst_len,
            src_len,
            ratio: (src_len as f64 / dst_len as f64) as f32,
            offset: 0.0,
        }
    }
}

/// Both axes of one image's mapping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Geometry {
    pub x: AxisMap,
    pub y: AxisMap,
}

impl Geometry {
    pub(crate) fn new(image: &ImageU8<'_>, spec: &PreprocessSpec) -> Self {
        let (w, h) = (image.width as f64, image.height as f64);
        let (out_w, out_h) = (spec.width as f64, spec.height as f64);
        let axis =
            |dst_start: usize, dst_len: usize, src_len: usize, span: f64, offset: f64| AxisMap {
                dst_start,
                dst_len,
                src_len,
                ratio: (span / dst_len as f64) as f32,
                offset: offset as f32,
            };
        match spec.mode {
            ResizeMode::Stretch => Geometry {
                x: axis(0, spec.width, image.width, w, 0.0),
                y: axis(0, spec.height, image.height, h, 0.0),
            },
            ResizeMode::Letterbox { .. } => {
                let scale = (out_w / w).min(out_h / h);
                let new_w = ((w * scale).round() as usize).clamp(1, spec.width);
                let new_h = ((h * scale).round() as usize).clamp(1, spec.height);
                Geometry {
                    x: axis((spec.width - new_w) / 2, new_w, image.width, w, 0.0),
                    y: axis((spec.height - new_h) / 2, new_h, image.height, h, 0.0),
                }
            }
            ResizeMode::CenterCrop => {
                let scale = (out_w / w).max(out_h / h);
                let (crop_w, crop_h) = (out_w / scale, out_h / scale);
                Geometry {
                    x: axis(0, spec.width, image.width, crop_w, (w - crop_w) / 2.0),
                    y: axis(0, spec.height, image.height, crop_h, (h - crop_h) / 2.0),
                }
            }
        }
    }
}

/// Filter taps of one destination index, in f64 (the reference's precision;
/// the fast path rounds the normalised weights to f32 once).
pub(super) fn taps_f64(axis: &AxisMap, dst: usize) -> (usize, Vec<f64>) {
    let ratio = axis.ratio as f64;
    let centre = axis.offset as f64 + ((dst - axis.dst_start) as f64 + 0.5) * ratio;
    let support = ratio.max(1.0);
    let lo = ((centre - support + 0.5).floor().max(0.0) as usize).min(axis.src_len - 1);
    let hi = ((centre + support + 0.5).floor() as usize).clamp(lo + 1, axis.src_len);
    let mut weights: Vec<f64> = (lo..hi)
        .map(|i| (1.0 - ((i as f64 + 0.5 - centre) / support).abs()).max(0.0))
        .collect();
    let sum: f64 = weights.iter().sum();
    if sum > 0.0 {
        weights.iter_mut().for_each(|w| *w /= sum);
    } else {
        // Unreachable for valid geometry (the pixel under the centre always
        // has positive weight); nearest pixel keeps the output defined.
        weights.iter_mut().for_each(|w| *w = 0.0);
        weights[0] = 1.0;
    }
    (lo, weights)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preprocess::test_support::test_spec as spec;

    #[test]
    fn upscaling_weights_are_two_tap_half_pixel_bilinear() {
        // 2 → 4: centres 0.25, 0.75, 1.25, 1.75 in source units.
        let image = ImageU8::new(&[0, 0, 0, 100, 100, 100], 2, 1).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(4, 1, ResizeMode::Stretch));
        let got: Vec<(usize, Vec<f64>)> = (0..4).map(|x| taps_f64(&geo.x, x)).collect();
        assert_eq!(got[0], (0, vec![1.0])); // clamped to the edge pixel
        assert_eq!(got[1], (0, vec![0.75, 0.25]));
        assert_eq!(got[2], (0, vec![0.25, 0.75]));
        assert_eq!(got[3], (1, vec![1.0]));
    }

    #[test]
    fn letterbox_centres_the_resized_image() {
        let data = vec![0u8; 100 * 50 * 3];
        let image = ImageU8::new(&data, 100, 50).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(64, 64, ResizeMode::Letterbox { pad: 114 }));
        assert_eq!((geo.x.dst_start, geo.x.dst_len), (0, 64));
        assert_eq!((geo.y.dst_start, geo.y.dst_len), (16, 32));
    }

    #[test]
    fn center_crop_takes_the_middle_window() {
        let data = vec![0u8; 200 * 100 * 3];
        let image = ImageU8::new(&data, 200, 100).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geometry::new(&image, &spec(50, 50, ResizeMode::CenterCrop));
        assert_eq!(geo.x.offset, 50.0);
        assert_eq!(geo.x.ratio, 2.0);
        assert_eq!(geo.y.offset, 0.0);
        assert_eq!(geo.y.ratio, 2.0);
    }
}
