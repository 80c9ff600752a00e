//! Pre-processing: a PNG or JPEG image (request body, or one `bytes` tensor)
//! -> `image`, uint8 [H, W, 3] RGB.

use image::{ImageFormat, ImageReader, Limits};
use infergate_plugin_sdk::*;
use std::io::Cursor;

/// Largest decoded image accepted, in pixels (64 MP, 192 MiB of RGB).
const MAX_PIXELS: u64 = 64 << 20;

struct ImageDecode;

impl Plugin for ImageDecode {
    fn describe() -> Description {
        describe(
            "image-decode",
            "0.1.0",
            PluginKind::Pre,
            &["image/png", "image/jpeg"],
            &["image: uint8 [H,W,3] RGB"],
        )
    }

    fn preprocess(input: PreInput, metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let bytes = input_bytes(&input)?;
        let format = image::guess_format(bytes)
            .map_err(|e| PluginError::bad_input(format!("not an image: {e}")))?;
        if !matches!(format, ImageFormat::Png | ImageFormat::Jpeg) {
            return Err(PluginError::bad_input(format!(
                "unsupported image format {format:?}: send PNG or JPEG"
            )));
        }
        let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
        let mut limits = Limits::default();
        limits.max_alloc = Some(MAX_PIXELS * 4);
        reader.limits(limits);
        let rgb = reader
            .decode()
            .map_err(|e| PluginError::bad_input(format!("cannot decode {format:?}: {e}")))?
            .into_rgb8();
        let (width, height) = rgb.dimensions();
        let name = metadata_get(&metadata, "output-name").unwrap_or("image");
        Ok(vec![Tensor::from_u8(
            name,
            vec![u64::from(height), u64::from(width), 3],
            rgb.into_raw(),
        )])
    }
}

export_plugin!(ImageDecode);
