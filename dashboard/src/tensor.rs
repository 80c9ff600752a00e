//! Tensors in the playground: request bodies generated from a model's inputs, images turned
//! into NCHW tensors in the browser, and readable summaries of outputs.

use crate::types::TensorSpec;
use serde_json::{json, Value};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// The concrete shape to offer for a spec: dynamic dimensions become 1.
pub fn default_shape(spec: &TensorSpec) -> Vec<i64> {
    spec.shape
        .iter()
        .map(|d| if *d < 0 { 1 } else { *d })
        .collect()
}

pub fn element_count(shape: &[i64]) -> usize {
    shape.iter().map(|d| (*d).max(0) as usize).product()
}

/// Parses "1, 3, 224, 224" or "[1,3,224,224]".
pub fn parse_shape(text: &str) -> Result<Vec<i64>, String> {
    text.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<i64>()
                .map_err(|_| format!("'{}' is not a dimension", d.trim()))
        })
        .filter(|d| !matches!(d, Err(e) if e == "'' is not a dimension"))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|s| {
            if s.iter().any(|d| *d < 0) {
                Err("dimensions must be ≥ 0".into())
            } else {
                Ok(s)
            }
        })
}

/// Zeros, "" for BYTES, false for BOOL: a neutral tensor of the right size.
pub fn zeros(datatype: &str, n: usize) -> Value {
    let zero = match datatype {
        "BYTES" => json!(""),
        "BOOL" => json!(false),
        _ => json!(0),
    };
    Value::Array(vec![zero; n])
}

fn flatten(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other.clone()),
    }
}

/// One request input from the form: `data` is a JSON array (flat or nested), empty for zeros.
pub fn input_json(spec: &TensorSpec, shape: &[i64], data: &str) -> Result<Value, String> {
    let n = element_count(shape);
    let data = if data.trim().is_empty() {
        zeros(&spec.datatype, n)
    } else {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| format!("input '{}': data is not JSON: {e}", spec.name))?;
        let mut flat = Vec::new();
        flatten(&v, &mut flat);
        if flat.len() != n {
            return Err(format!(
                "input '{}': {} values given, shape {:?} needs {n}",
                spec.name,
                flat.len(),
                shape
            ));
        }
        Value::Array(flat)
    };
    Ok(json!({"name": spec.name, "shape": shape, "datatype": spec.datatype, "data": data}))
}

/// How pixels become numbers for an image model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Preprocess {
    /// RGB, (x − 127) / 128: EfficientNet-Lite and most ImageNet exports.
    Imagenet,
    /// BGR, (x / 255 − 0.5) / 0.5: PaddleOCR (what rapidocr feeds its models).
    Paddle,
}

impl Preprocess {
    pub fn for_model(name: &str) -> Preprocess {
        if name.contains("ocr") {
            Preprocess::Paddle
        } else {
            Preprocess::Imagenet
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Preprocess::Imagenet => "RGB, (x − 127) / 128",
            Preprocess::Paddle => "BGR, (x / 255 − 0.5) / 0.5",
        }
    }
}

/// An input that takes an image: 4-D NCHW with 3 channels and a float type.
pub fn is_image_input(spec: &TensorSpec) -> bool {
    spec.shape.len() == 4
        && spec.shape[1] == 3
        && matches!(spec.datatype.as_str(), "FP32" | "FP16" | "FP64")
}

/// Height and width to resize an image of `w`×`h` to for `spec`: fixed dimensions as they are;
/// a dynamic width follows the aspect ratio (text lines); both dynamic keep the image's size
/// up to 960 on the long side, rounded to multiples of 32 (detection).
pub fn target_size(spec: &TensorSpec, w: u32, h: u32) -> (u32, u32) {
    let (sh, sw) = (spec.shape[2], spec.shape[3]);
    let round = |v: f64, m: f64| ((v / m).round() * m).max(m) as u32;
    match (sh > 0, sw > 0) {
        (true, true) => (sh as u32, sw as u32),
        (true, false) => {
            let th = sh as f64;
            (
                sh as u32,
                round((th * w as f64 / h as f64).min(2048.0), 8.0),
            )
        }
        (false, true) => {
            let tw = sw as f64;
            (
                round((tw * h as f64 / w as f64).min(2048.0), 8.0),
                sw as u32,
            )
        }
        (false, false) => {
            let scale = (960.0 / w.max(h) as f64).min(1.0);
            (round(h as f64 * scale, 32.0), round(w as f64 * scale, 32.0))
        }
    }
}

/// Decodes an image file in the browser and draws it resized onto `canvas`; returns the NCHW
/// float tensor and its height and width.
pub async fn image_tensor(
    file: &web_sys::File,
    spec: &TensorSpec,
    pre: Preprocess,
    canvas: &web_sys::HtmlCanvasElement,
) -> Result<(Vec<f32>, u32, u32), String> {
    let url = web_sys::Url::create_object_url_with_blob(file)
        .map_err(|_| "cannot read the file".to_string())?;
    let img = web_sys::HtmlImageElement::new().map_err(|_| "no image support".to_string())?;
    let loaded = js_sys::Promise::new(&mut |resolve, reject| {
        img.set_onload(Some(&resolve));
        img.set_onerror(Some(&reject));
    });
    img.set_src(&url);
    let result = JsFuture::from(loaded).await;
    let _ = web_sys::Url::revoke_object_url(&url);
    result.map_err(|_| format!("'{}' is not an image this browser can decode", file.name()))?;
    let (w, h) = (img.natural_width(), img.natural_height());
    if w == 0 || h == 0 {
        return Err("the image is empty".into());
    }
    let (th, tw) = target_size(spec, w, h);
    canvas.set_width(tw);
    canvas.set_height(th);
    let ctx: web_sys::CanvasRenderingContext2d = canvas
        .get_context("2d")
        .ok()
        .flatten()
        .ok_or("no 2D canvas")?
        .unchecked_into();
    ctx.set_image_smoothing_enabled(true);
    ctx.draw_image_with_html_image_element_and_dw_and_dh(&img, 0.0, 0.0, tw as f64, th as f64)
        .map_err(|_| "cannot draw the image".to_string())?;
    let pixels = ctx
        .get_image_data(0.0, 0.0, tw as f64, th as f64)
        .map_err(|_| "cannot read the pixels".to_string())?
        .data();
    let plane = (tw * th) as usize;
    let mut out = vec![0f32; plane * 3];
    for i in 0..plane {
        let (r, g, b) = (
            pixels[i * 4] as f32,
            pixels[i * 4 + 1] as f32,
            pixels[i * 4 + 2] as f32,
        );
        let (c0, c1, c2, f): (f32, f32, f32, fn(f32) -> f32) = match pre {
            Preprocess::Imagenet => (r, g, b, |x| (x - 127.0) / 128.0),
            Preprocess::Paddle => (b, g, r, |x| (x / 255.0 - 0.5) / 0.5),
        };
        out[i] = f(c0);
        out[plane + i] = f(c1);
        out[2 * plane + i] = f(c2);
    }
    Ok((out, th, tw))
}

/// How top classes were scored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scoring {
    /// The model's values already were probabilities (between 0 and 1, summing to 1).
    Probabilities,
    /// The model gave raw scores (logits); softmax was applied here.
    Softmax,
}

/// A readable reading of one output tensor.
pub enum Summary {
    /// Top classes of a classifier, with how their probabilities were obtained.
    TopK {
        top: Vec<(usize, f64)>,
        classes: usize,
        scoring: Scoring,
    },
    /// Greedy CTC decoding: class indices per position with blanks and repeats removed.
    Ctc {
        steps: usize,
        classes: usize,
        indices: Vec<usize>,
        confidence: f64,
    },
    Text(Vec<String>),
    /// A vector (an embedding, features): its length, norm and values.
    Vector {
        values: Vec<f64>,
        norm: f64,
    },
    Values {
        count: usize,
        first: Vec<f64>,
        min: f64,
        max: f64,
        mean: f64,
    },
}

fn is_probabilities(v: &[f64]) -> bool {
    let sum: f64 = v.iter().sum();
    v.iter().all(|x| (0.0..=1.0).contains(x)) && (sum - 1.0).abs() < 1e-3
}

fn softmax(v: &[f64]) -> Vec<f64> {
    if is_probabilities(v) {
        return v.to_vec();
    }
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = v.iter().map(|x| (x - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

/// What an output's name says it is.
fn named(name: &str, words: &[&str]) -> bool {
    let name = name.to_lowercase();
    words.iter().any(|w| name.contains(w))
}

pub fn summarize(output: &Value) -> Summary {
    let shape: Vec<usize> = output["shape"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(Value::as_u64)
                .map(|d| d as usize)
                .collect()
        })
        .unwrap_or_default();
    let name = output["name"].as_str().unwrap_or_default();
    let mut flat = Vec::new();
    flatten(&output["data"], &mut flat);
    if output["datatype"] == "BYTES" {
        return Summary::Text(
            flat.iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect(),
        );
    }
    let nums: Vec<f64> = flat.iter().filter_map(Value::as_f64).collect();
    let float = output["datatype"]
        .as_str()
        .is_some_and(|d| d.starts_with("FP"));
    let last = shape.last().copied().unwrap_or(0);
    // A sequence of per-step class probabilities (what CTC recognisers give): every step is a
    // distribution. Hidden states of the same shape are not, and stay plain values.
    if float
        && shape.len() == 3
        && shape[0] == 1
        && last >= 10
        && shape[1] >= 1
        && nums.len() == shape[1] * last
        && nums.chunks(last).all(is_probabilities)
    {
        let mut indices = Vec::new();
        let mut prev = usize::MAX;
        let mut conf = Vec::new();
        for step in nums.chunks(last) {
            let (best, score) =
                step.iter().enumerate().fold(
                    (0, f64::MIN),
                    |a, (i, v)| if *v > a.1 { (i, *v) } else { a },
                );
            if best != 0 && best != prev {
                indices.push(best);
                conf.push(score);
            }
            prev = best;
        }
        let confidence = if conf.is_empty() {
            0.0
        } else {
            conf.iter().sum::<f64>() / conf.len() as f64
        };
        return Summary::Ctc {
            steps: shape[1],
            classes: last,
            indices,
            confidence,
        };
    }
    let one_vector =
        float && last >= 2 && nums.len() == last && shape.iter().rev().skip(1).all(|d| *d == 1);
    if one_vector {
        let classifier = is_probabilities(&nums)
            || named(name, &["prob", "logit", "score", "class", "softmax"])
            || matches!(last, 1000 | 1001);
        let embedding = named(
            name,
            &["embed", "pool", "hidden", "feature", "vector", "sentence"],
        );
        if classifier && !embedding && last >= 3 {
            let scoring = if is_probabilities(&nums) {
                Scoring::Probabilities
            } else {
                Scoring::Softmax
            };
            let probs = softmax(&nums);
            let mut ranked: Vec<(usize, f64)> = probs.into_iter().enumerate().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            ranked.truncate(5);
            return Summary::TopK {
                top: ranked,
                classes: last,
                scoring,
            };
        }
        let norm = nums.iter().map(|v| v * v).sum::<f64>().sqrt();
        return Summary::Vector { values: nums, norm };
    }
    let count = nums.len();
    let min = nums.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = nums.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mean = if count == 0 {
        0.0
    } else {
        nums.iter().sum::<f64>() / count as f64
    };
    Summary::Values {
        count,
        first: nums.into_iter().take(8).collect(),
        min,
        max,
        mean,
    }
}

/// A copy of a request or response for display: long `data` arrays cut to their first values.
pub fn abbreviate(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("data", Value::Array(items)) if items.len() > 16 => {
                            let mut cut: Vec<Value> = items.iter().take(8).cloned().collect();
                            cut.push(json!(format!("… {} more values", items.len() - 8)));
                            Value::Array(cut)
                        }
                        _ => abbreviate(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(abbreviate).collect()),
        other => other.clone(),
    }
}
