//! The scalar reference: the module's formula (the CUDA kernel's, in
//! `cuda/preprocess.cu`) evaluated per output element in f64.

use super::geometry::{taps_f64, Geometry};
use super::spec::{check_batch, ImageU8, PreprocessSpec, CHANNELS};
use crate::error::Result;

/// Scalar reference: the module's formula evaluated per output element in
/// f64, rounded to f32 at the end. Slow; the yardstick for the other paths.
pub fn resize_normalize_reference(
    images: &[ImageU8<'_>],
    spec: &PreprocessSpec,
    out: &mut [f32],
) -> Result<()> {
    check_batch(images, spec, out)?;
    let inv_std = spec.inv_std();
    let pad = spec.pad_normalized();
    let plane = spec.width * spec.height;
    for (image, out) in images
        .iter()
        .zip(out.chunks_exact_mut(spec.output_len_per_image()))
    {
        let geo = Geometry::new(image, spec);
        for y in 0..spec.height {
            for x in 0..spec.width {
                let inside = (geo.y.dst_start..geo.y.dst_start + geo.y.dst_len).contains(&y)
                    && (geo.x.dst_start..geo.x.dst_start + geo.x.dst_len).contains(&x);
                for c in 0..CHANNELS {
                    out[c * plane + y * spec.width + x] = if inside {
                        let (ylo, wy) = taps_f64(&geo.y, y);
                        let (xlo, wx) = taps_f64(&geo.x, x);
                        let mut value = 0.0f64;
                        for (j, wyj) in wy.iter().enumerate() {
                            let row = image.row(ylo + j);
                            let mut acc = 0.0f64;
                            for (i, wxi) in wx.iter().enumerate() {
                                acc += wxi * row[(xlo + i) * CHANNELS + c] as f64;
                            }
                            value += wyj * acc;
                        }
                        ((value - spec.mean[c] as f64) * inv_std[c] as f64) as f32
                    } else {
                        pad[c]
                    };
                }
            }
        }
    }
    Ok(())
}
