//! Text regions from a text detector's probability map (Differentiable Binarization, what
//! PaddleOCR's detection models output), and the pixel work around them: crops of the RGB8
//! image, 180° turns, reading order.
//!
//! Regions are axis-aligned rectangles: each connected blob of the thresholded (and dilated)
//! map is one candidate, scored by the mean probability inside its bounding box and grown by
//! DB's "unclip" distance (`area * ratio / perimeter`), because the detector is trained to
//! mark a shrunken core of each text line. Rotated or curved text is read inside its bounding
//! rectangle. Suppression of overlapping candidates is left to the caller (the kernels' NMS).

/// An RGB8 image, rows top to bottom, `[height, width, 3]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

/// A candidate text region in image pixels (corners, x2/y2 exclusive).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    pub x1: f32,
    pub y1: f32,
    pub x2: f32,
    pub y2: f32,
    /// Mean probability of the map inside the blob's bounding box.
    pub score: f32,
}

impl Region {
    fn height(&self) -> f32 {
        self.y2 - self.y1
    }
}

/// How the probability map is read.
#[derive(Debug, Clone, Copy)]
pub struct MapReading {
    /// A map pixel above this belongs to text.
    pub threshold: f32,
    /// DB's unclip ratio: how far a blob is grown to cover its whole text line.
    pub unclip_ratio: f32,
    /// At most this many blobs are considered (the largest first would need sorting; the map
    /// order, top to bottom, is what PaddleOCR uses too).
    pub max_candidates: usize,
}

/// Blobs narrower than this (map pixels) on their short side are noise.
const MIN_SIDE: usize = 3;

/// Candidate regions from a `[map_height, map_width]` probability map, scaled to an image of
/// `image_width`×`image_height`.
pub fn regions_from_map(
    map: &[f32],
    map_width: usize,
    map_height: usize,
    image_width: usize,
    image_height: usize,
    reading: &MapReading,
) -> Vec<Region> {
    if map_width == 0 || map_height == 0 || map.len() != map_width * map_height {
        return Vec::new();
    }
    let mask = dilated_mask(map, map_width, map_height, reading.threshold);
    let scale_x = image_width as f32 / map_width as f32;
    let scale_y = image_height as f32 / map_height as f32;
    let mut regions = Vec::new();
    for (x1, y1, x2, y2) in blob_boxes(&mask, map_width, map_height, reading.max_candidates) {
        let (w, h) = (x2 - x1, y2 - y1);
        if w.min(h) < MIN_SIDE {
            continue;
        }
        let mut sum = 0.0f64;
        for row in map[y1 * map_width..y2 * map_width].chunks_exact(map_width) {
            sum += row[x1..x2].iter().map(|&p| f64::from(p)).sum::<f64>();
        }
        let score = (sum / (w * h) as f64) as f32;
        let (w, h) = (w as f32, h as f32);
        let grow = w * h * reading.unclip_ratio / (2.0 * (w + h));
        if w.min(h) + 2.0 * grow < (MIN_SIDE + 2) as f32 {
            continue;
        }
        regions.push(Region {
            x1: ((x1 as f32 - grow) * scale_x).clamp(0.0, image_width as f32),
            y1: ((y1 as f32 - grow) * scale_y).clamp(0.0, image_height as f32),
            x2: ((x2 as f32 + grow) * scale_x).clamp(0.0, image_width as f32),
            y2: ((y2 as f32 + grow) * scale_y).clamp(0.0, image_height as f32),
            score,
        });
    }
    regions
}

/// `map > threshold`, dilated by a 2×2 square (as PaddleOCR does) so that letters a pixel
/// apart join one blob.
fn dilated_mask(map: &[f32], width: usize, height: usize, threshold: f32) -> Vec<bool> {
    let on: Vec<bool> = map.iter().map(|&p| p > threshold).collect();
    let mut out = on.clone();
    for y in 0..height {
        for x in 0..width {
            let i = y * width + x;
            out[i] = on[i]
                || (x > 0 && on[i - 1])
                || (y > 0 && on[i - width])
                || (x > 0 && y > 0 && on[i - width - 1]);
        }
    }
    out
}

/// Bounding boxes `(x1, y1, x2, y2)` (exclusive ends) of the 8-connected blobs of `mask`, in
/// the order their first pixel is met scanning rows.
fn blob_boxes(
    mask: &[bool],
    width: usize,
    height: usize,
    limit: usize,
) -> Vec<(usize, usize, usize, usize)> {
    let mut seen = vec![false; mask.len()];
    let mut boxes = Vec::new();
    let mut stack = Vec::new();
    for start in 0..mask.len() {
        if !mask[start] || seen[start] {
            continue;
        }
        if boxes.len() == limit {
            break;
        }
        seen[start] = true;
        stack.push(start);
        let (mut x1, mut y1, mut x2, mut y2) = (usize::MAX, usize::MAX, 0, 0);
        while let Some(i) = stack.pop() {
            let (x, y) = (i % width, i / width);
            x1 = x1.min(x);
            y1 = y1.min(y);
            x2 = x2.max(x + 1);
            y2 = y2.max(y + 1);
            for ny in y.saturating_sub(1)..(y + 2).min(height) {
                for nx in x.saturating_sub(1)..(x + 2).min(width) {
                    let j = ny * width + nx;
                    if mask[j] && !seen[j] {
                        seen[j] = true;
                        stack.push(j);
                    }
                }
            }
        }
        boxes.push((x1, y1, x2, y2));
    }
    boxes
}

/// Sorts regions as a page is read: lines top to bottom, and left to right within a line. Two
/// regions share a line when their vertical extents overlap by half the shorter one's height.
pub fn reading_order(mut regions: Vec<Region>) -> Vec<Region> {
    regions.sort_by(|a, b| a.y1.total_cmp(&b.y1).then(a.x1.total_cmp(&b.x1)));
    let mut lines: Vec<Vec<Region>> = Vec::new();
    for region in regions {
        let same_line = lines.last().is_some_and(|line| {
            let first = line[0];
            let overlap = first.y2.min(region.y2) - first.y1.max(region.y1);
            overlap >= 0.5 * first.height().min(region.height())
        });
        match lines.last_mut() {
            Some(line) if same_line => line.push(region),
            _ => lines.push(vec![region]),
        }
    }
    lines
        .into_iter()
        .flat_map(|mut line| {
            line.sort_by(|a, b| a.x1.total_cmp(&b.x1));
            line
        })
        .collect()
}

/// The pixels of `region` (rounded outwards, clipped to the image); `None` when nothing of it
/// lies inside the image.
pub fn crop(image: &RgbImage, region: &Region) -> Option<RgbImage> {
    let x1 = (region.x1.floor().max(0.0) as usize).min(image.width);
    let y1 = (region.y1.floor().max(0.0) as usize).min(image.height);
    let x2 = (region.x2.ceil().max(0.0) as usize).min(image.width);
    let y2 = (region.y2.ceil().max(0.0) as usize).min(image.height);
    if x2 <= x1 || y2 <= y1 {
        return None;
    }
    let width = x2 - x1;
    let mut pixels = Vec::with_capacity(width * (y2 - y1) * 3);
    for y in y1..y2 {
        let row = (y * image.width + x1) * 3;
        pixels.extend_from_slice(&image.pixels[row..row + width * 3]);
    }
    Some(RgbImage {
        width,
        height: y2 - y1,
        pixels,
    })
}

/// The image turned by 180° (a line the angle classifier found upside down).
pub fn rotate_180(image: &RgbImage) -> RgbImage {
    let pixels = image
        .pixels
        .chunks_exact(3)
        .rev()
        .flatten()
        .copied()
        .collect();
    RgbImage {
        width: image.width,
        height: image.height,
        pixels,
    }
}

/// The image padded on the right with `value` up to `width / height` = `aspect` (unchanged
/// when it is already that wide). A recogniser reads a short line best left-aligned on a
/// neutral background, as PaddleOCR feeds it, rather than centred by a letterbox.
pub fn pad_right_to_aspect(image: RgbImage, aspect: f32, value: u8) -> RgbImage {
    let wanted = (image.height as f32 * aspect).round() as usize;
    if wanted <= image.width {
        return image;
    }
    let mut pixels = Vec::with_capacity(wanted * image.height * 3);
    for row in image.pixels.chunks_exact(image.width * 3) {
        pixels.extend_from_slice(row);
        pixels.resize(pixels.len() + (wanted - image.width) * 3, value);
    }
    RgbImage {
        width: wanted,
        height: image.height,
        pixels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READING: MapReading = MapReading {
        threshold: 0.3,
        unclip_ratio: 1.6,
        max_candidates: 100,
    };

    /// A map with `value` inside each rectangle `(x1, y1, x2, y2)` and 0 elsewhere.
    fn map(
        width: usize,
        height: usize,
        blobs: &[(usize, usize, usize, usize)],
        value: f32,
    ) -> Vec<f32> {
        let mut m = vec![0.0; width * height];
        for &(x1, y1, x2, y2) in blobs {
            for y in y1..y2 {
                m[y * width + x1..y * width + x2].fill(value);
            }
        }
        m
    }

    #[test]
    fn each_blob_is_one_region_grown_by_the_unclip_distance_and_scaled() {
        let m = map(40, 20, &[(4, 2, 24, 6), (4, 10, 34, 15)], 0.9);
        let regions = regions_from_map(&m, 40, 20, 80, 40, &READING);
        assert_eq!(regions.len(), 2, "{regions:?}");
        // The dilation adds one pixel to the right and below: 21×5, grown by
        // 21·5·1.6/(2·26) = 3.23 map pixels on each side, then doubled into image pixels.
        let grow = 21.0 * 5.0 * 1.6 / 52.0;
        let r = regions[0];
        assert!((r.x1 - (4.0 - grow) * 2.0).abs() < 1e-4, "{r:?}");
        assert!((r.y2 - (7.0 + grow) * 2.0).abs() < 1e-4, "{r:?}");
        // The dilated border row/column has probability 0, which lowers the mean.
        assert!(
            (r.score - 0.9 * 20.0 * 4.0 / (21.0 * 5.0)).abs() < 1e-5,
            "{r:?}"
        );
    }

    #[test]
    fn faint_noise_and_specks_are_not_regions() {
        let faint = map(30, 30, &[(2, 2, 20, 8)], 0.2);
        assert!(regions_from_map(&faint, 30, 30, 30, 30, &READING).is_empty());
        let speck = map(30, 30, &[(2, 2, 3, 3)], 0.9);
        assert!(regions_from_map(&speck, 30, 30, 30, 30, &READING).is_empty());
        assert!(regions_from_map(&[0.5; 3], 2, 2, 30, 30, &READING).is_empty());
    }

    #[test]
    fn blobs_touching_diagonally_are_one_region() {
        let m = map(30, 30, &[(2, 2, 10, 8), (10, 8, 20, 14)], 0.9);
        assert_eq!(regions_from_map(&m, 30, 30, 30, 30, &READING).len(), 1);
    }

    fn region(x1: f32, y1: f32, x2: f32, y2: f32) -> Region {
        Region {
            x1,
            y1,
            x2,
            y2,
            score: 1.0,
        }
    }

    #[test]
    fn reading_order_is_lines_top_down_then_left_to_right() {
        let right_of_first = region(120.0, 12.0, 200.0, 40.0);
        let first = region(10.0, 10.0, 100.0, 38.0);
        let second_line = region(10.0, 60.0, 150.0, 90.0);
        let third_line = region(5.0, 110.0, 90.0, 140.0);
        let order = reading_order(vec![third_line, right_of_first, second_line, first]);
        assert_eq!(order, vec![first, right_of_first, second_line, third_line]);
    }

    fn image(width: usize, height: usize) -> RgbImage {
        RgbImage {
            width,
            height,
            pixels: (0..width * height * 3).map(|i| (i % 251) as u8).collect(),
        }
    }

    #[test]
    fn crops_round_outwards_and_clip_to_the_image() {
        let img = image(10, 8);
        let c = crop(&img, &region(2.5, 1.2, 5.1, 3.0)).unwrap();
        assert_eq!((c.width, c.height), (4, 2));
        assert_eq!(&c.pixels[..3], &img.pixels[(10 + 2) * 3..(10 + 2) * 3 + 3]);
        let clipped = crop(&img, &region(-4.0, 6.0, 30.0, 20.0)).unwrap();
        assert_eq!((clipped.width, clipped.height), (10, 2));
        assert!(crop(&img, &region(12.0, 0.0, 20.0, 5.0)).is_none());
    }

    #[test]
    fn short_lines_are_padded_on_the_right_to_the_aspect() {
        let img = image(4, 2);
        let padded = pad_right_to_aspect(img.clone(), 3.0, 128);
        assert_eq!((padded.width, padded.height), (6, 2));
        assert_eq!(&padded.pixels[..12], &img.pixels[..12]);
        assert_eq!(&padded.pixels[12..18], &[128; 6]);
        assert_eq!(&padded.pixels[18..30], &img.pixels[12..24]);
        assert_eq!(pad_right_to_aspect(img.clone(), 1.5, 128), img);
    }

    #[test]
    fn a_180_degree_turn_twice_is_the_same_image() {
        let img = image(5, 3);
        let turned = rotate_180(&img);
        assert_eq!(&turned.pixels[..3], &img.pixels[img.pixels.len() - 3..]);
        assert_eq!(rotate_180(&turned), img);
    }
}
