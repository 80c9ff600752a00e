//! Native post-ops a model's config names (`"infergate": {"postprocess": [...]}`): softmax
//! top-k and non-max suppression, run by the engine on a request's model outputs with the
//! kernels crate (the GPU when usable, else the CPU fast path). Their results are extra named
//! output tensors that a client asks for (or gets, when it names none) like the model's own,
//! so a plain KServe client receives class indices or kept boxes instead of raw logits.
//!
//! Post-ops run per request after its share of a batch is split off, on the instance thread:
//! NMS keeps a different number of boxes per image, so it cannot run on the joined batch and
//! be split by rows afterwards.

use crate::error::{EngineError, Result};
use crate::signature::{ModelSignature, TensorSpec};
use crate::tensor::{DataType, Tensor, TensorData};
use infergate_kernels::nms::{Candidate, NmsSpec};
use infergate_kernels::softmax::TopKShape;
use infergate_kernels::{Fault, Ops};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeSet;

/// Larger values are a typo, not a use case.
const MAX_TOP_K: u32 = 4096;
const MAX_DETECTIONS: u32 = 10_000;

/// One post-op, tagged by `"op"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum PostOp {
    SoftmaxTopk(SoftmaxTopk),
    Nms(Nms),
}

/// Softmax over the last dimension of `output`, then its `k` most likely entries (by logit,
/// equal logits by lower index). Produces `indices_name` (INT64) and `scores_name` (FP32,
/// softmax probabilities), both shaped like `output` with the last dimension `k`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftmaxTopk {
    /// The model output holding the logits (FP32).
    pub output: String,
    pub k: u32,
    /// Name of the indices output; default `<output>_topk_indices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indices_name: Option<String>,
    /// Name of the probabilities output; default `<output>_topk_scores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores_name: Option<String>,
}

/// How a box's four numbers are to be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxFormat {
    /// Corners: x1, y1, x2, y2.
    #[default]
    Xyxy,
    /// Centre and size: cx, cy, w, h.
    Cxcywh,
}

/// Greedy non-max suppression per image over the model's candidate boxes. Produces TensorRT's
/// EfficientNMS outputs (each name prefixed by `prefix`): `num_detections` INT64 [N],
/// `detection_boxes` FP32 [N, max_detections, 4] (x1, y1, x2, y2), `detection_scores` FP32
/// [N, max_detections] and `detection_classes` INT64 [N, max_detections]; rows past an image's
/// count are zero boxes with score 0 and class -1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nms {
    /// Model output with the boxes, FP32 [N, B, 4].
    pub boxes: String,
    /// Model output with the scores: FP32 [N, B] (then `classes` may name the classes), or
    /// [N, B, C] per class (a box takes its best class).
    pub scores: String,
    /// Model output with each box's class, [N, B] INT64/INT32/FP32; without it (and with
    /// [N, B] scores) every box is class 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<String>,
    /// A box is suppressed when its IoU with a kept box is greater than this.
    pub iou_threshold: f32,
    /// Boxes scoring this or less are dropped before suppression.
    pub score_threshold: f32,
    pub max_detections: u32,
    /// Suppress only within a class (default), or across all classes.
    #[serde(default = "yes")]
    pub class_aware: bool,
    #[serde(default)]
    pub box_format: BoxFormat,
    /// Prefix of the four output names (for a model that already has a `num_detections`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

fn yes() -> bool {
    true
}

/// `"postprocess"` is one op or a list of them.
pub(crate) fn one_or_many<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<PostOp>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Many(Vec<serde_json::Value>),
        One(serde_json::Value),
    }
    let values = match Form::deserialize(d)? {
        Form::Many(v) => v,
        Form::One(v) => vec![v],
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v).map_err(|e| serde::de::Error::custom(format!("[{i}]: {e}")))
        })
        .collect()
}

fn invalid(index: usize, field: &str, message: String) -> EngineError {
    EngineError::InvalidConfig(format!("infergate.postprocess[{index}].{field}: {message}"))
}

impl SoftmaxTopk {
    fn indices_name(&self) -> String {
        self.indices_name
            .clone()
            .unwrap_or_else(|| format!("{}_topk_indices", self.output))
    }

    fn scores_name(&self) -> String {
        self.scores_name
            .clone()
            .unwrap_or_else(|| format!("{}_topk_scores", self.output))
    }
}

impl Nms {
    fn names(&self) -> [String; 4] {
        [
            "num_detections",
            "detection_boxes",
            "detection_scores",
            "detection_classes",
        ]
        .map(|n| format!("{}{n}", self.prefix))
    }
}

impl PostOp {
    /// The model outputs it reads.
    pub fn sources(&self) -> Vec<&str> {
        match self {
            PostOp::SoftmaxTopk(s) => vec![s.output.as_str()],
            PostOp::Nms(n) => {
                let mut v = vec![n.boxes.as_str(), n.scores.as_str()];
                v.extend(n.classes.as_deref());
                v
            }
        }
    }

    /// The outputs it produces.
    pub fn output_names(&self) -> Vec<String> {
        match self {
            PostOp::SoftmaxTopk(s) => vec![s.indices_name(), s.scores_name()],
            PostOp::Nms(n) => n.names().to_vec(),
        }
    }

    /// Checks what can be checked without the model; `index` names it in errors.
    fn validate(&self, index: usize) -> Result<()> {
        match self {
            PostOp::SoftmaxTopk(s) => {
                if s.k == 0 || s.k > MAX_TOP_K {
                    return Err(invalid(
                        index,
                        "k",
                        format!("must be between 1 and {MAX_TOP_K}, got {}", s.k),
                    ));
                }
            }
            PostOp::Nms(n) => {
                if !(0.0..=1.0).contains(&n.iou_threshold) {
                    return Err(invalid(
                        index,
                        "iou_threshold",
                        format!("must be between 0 and 1, got {}", n.iou_threshold),
                    ));
                }
                if !n.score_threshold.is_finite() {
                    return Err(invalid(
                        index,
                        "score_threshold",
                        "must be a finite number".into(),
                    ));
                }
                if n.max_detections == 0 || n.max_detections > MAX_DETECTIONS {
                    return Err(invalid(
                        index,
                        "max_detections",
                        format!(
                            "must be between 1 and {MAX_DETECTIONS}, got {}",
                            n.max_detections
                        ),
                    ));
                }
            }
        }
        for name in self.output_names() {
            if name.is_empty() {
                return Err(invalid(index, "op", "an output name is empty".into()));
            }
        }
        Ok(())
    }

    /// Checks the op against the model's outputs and describes what it produces.
    fn output_specs(&self, index: usize, signature: &ModelSignature) -> Result<Vec<TensorSpec>> {
        let source = |field: &str, name: &str, ranks: &[usize]| -> Result<&TensorSpec> {
            let spec = signature.output(name).ok_or_else(|| {
                invalid(index, field, format!("the model has no output '{name}'"))
            })?;
            if !ranks.contains(&spec.shape.len()) {
                return Err(invalid(
                    index,
                    field,
                    format!(
                        "output '{name}' has shape {:?}; rank {ranks:?} needed",
                        spec.shape
                    ),
                ));
            }
            Ok(spec)
        };
        let fp32 = |field: &str, spec: &TensorSpec| -> Result<()> {
            if spec.datatype == DataType::Fp32 {
                Ok(())
            } else {
                Err(invalid(
                    index,
                    field,
                    format!("output '{}' is {}, FP32 needed", spec.name, spec.datatype),
                ))
            }
        };
        match self {
            PostOp::SoftmaxTopk(s) => {
                let logits = source("output", &s.output, &[1, 2, 3, 4, 5, 6, 7, 8])?;
                fp32("output", logits)?;
                let classes = logits.shape[logits.shape.len() - 1];
                if classes >= 0 && i64::from(s.k) > classes {
                    return Err(invalid(
                        index,
                        "k",
                        format!("{} exceeds the {classes} classes of '{}'", s.k, s.output),
                    ));
                }
                let mut shape = logits.shape.clone();
                if let Some(last) = shape.last_mut() {
                    *last = i64::from(s.k);
                }
                Ok(vec![
                    TensorSpec {
                        name: s.indices_name(),
                        datatype: DataType::Int64,
                        shape: shape.clone(),
                    },
                    TensorSpec {
                        name: s.scores_name(),
                        datatype: DataType::Fp32,
                        shape,
                    },
                ])
            }
            PostOp::Nms(n) => {
                let boxes = source("boxes", &n.boxes, &[3])?;
                fp32("boxes", boxes)?;
                if boxes.shape[2] >= 0 && boxes.shape[2] != 4 {
                    return Err(invalid(
                        index,
                        "boxes",
                        format!("output '{}' must end in 4 coordinates", n.boxes),
                    ));
                }
                let scores = source("scores", &n.scores, &[2, 3])?;
                fp32("scores", scores)?;
                if let Some(classes) = &n.classes {
                    if scores.shape.len() == 3 {
                        return Err(invalid(
                            index,
                            "classes",
                            format!("'{}' already has per-class scores", n.scores),
                        ));
                    }
                    let spec = source("classes", classes, &[2])?;
                    if !matches!(
                        spec.datatype,
                        DataType::Int64 | DataType::Int32 | DataType::Fp32
                    ) {
                        return Err(invalid(
                            index,
                            "classes",
                            format!(
                                "output '{classes}' is {}; INT64, INT32 or FP32 needed",
                                spec.datatype
                            ),
                        ));
                    }
                }
                let batch = boxes.shape[0];
                let det = i64::from(n.max_detections);
                let [count, kept, kept_scores, kept_classes] = n.names();
                Ok(vec![
                    TensorSpec {
                        name: count,
                        datatype: DataType::Int64,
                        shape: vec![batch],
                    },
                    TensorSpec {
                        name: kept,
                        datatype: DataType::Fp32,
                        shape: vec![batch, det, 4],
                    },
                    TensorSpec {
                        name: kept_scores,
                        datatype: DataType::Fp32,
                        shape: vec![batch, det],
                    },
                    TensorSpec {
                        name: kept_classes,
                        datatype: DataType::Int64,
                        shape: vec![batch, det],
                    },
                ])
            }
        }
    }

    /// Runs the op on a request's model outputs; returns its outputs. A model output that does
    /// not fit the op (wrong shape, NaN scores) is the model's fault.
    fn apply(&self, ops: &Ops, outputs: &[Tensor], model: &str) -> Result<Vec<Tensor>> {
        match self {
            PostOp::SoftmaxTopk(s) => softmax_topk(s, ops, outputs, model),
            PostOp::Nms(n) => nms(n, ops, outputs, model),
        }
    }
}

/// Checks every post-op (static checks), and that their output names are unique.
pub(crate) fn validate(ops: &[PostOp]) -> Result<()> {
    let mut names = BTreeSet::new();
    for (i, op) in ops.iter().enumerate() {
        op.validate(i)?;
        for name in op.output_names() {
            if !names.insert(name.clone()) {
                return Err(invalid(
                    i,
                    "op",
                    format!("output '{name}' is produced twice"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks the post-ops against the model and returns the outputs they add.
pub(crate) fn output_specs(ops: &[PostOp], signature: &ModelSignature) -> Result<Vec<TensorSpec>> {
    let mut specs = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        for spec in op.output_specs(i, signature)? {
            if signature.output(&spec.name).is_some() {
                return Err(invalid(
                    i,
                    "op",
                    format!(
                        "output '{}' would hide the model's output of that name",
                        spec.name
                    ),
                ));
            }
            specs.push(spec);
        }
    }
    Ok(specs)
}

/// What one request needs after its model run: the post-ops whose outputs it asked for, and
/// which tensors to return in which order.
#[derive(Debug)]
pub(crate) struct PostPlan {
    model: String,
    ops: Vec<PostOp>,
    /// Returned outputs by name, in order; empty = every model output fetched, then every
    /// post-op output.
    select: Vec<String>,
}

/// Splits a request's output names into the model outputs to fetch and the plan to run after.
/// Without post-ops the names go to the model as they are.
/// `model` names the version in the plan's errors; it is formatted only when the version has
/// post-ops (most requests have none, and pay nothing for the name).
pub(crate) fn plan(
    model: &dyn std::fmt::Display,
    ops: &[PostOp],
    signature: &ModelSignature,
    requested: Vec<String>,
) -> Result<(Vec<String>, Option<PostPlan>)> {
    if ops.is_empty() {
        crate::signature::check_outputs(signature, &requested)?;
        return Ok((requested, None));
    }
    if requested.is_empty() {
        let all = signature.outputs.iter().map(|s| s.name.clone()).collect();
        let plan = PostPlan {
            model: model.to_string(),
            ops: ops.to_vec(),
            select: Vec::new(),
        };
        return Ok((all, Some(plan)));
    }
    let mut fetch: Vec<String> = Vec::new();
    let mut needed: Vec<PostOp> = Vec::new();
    let add = |name: &str, fetch: &mut Vec<String>| {
        if !fetch.iter().any(|f| f == name) {
            fetch.push(name.to_string());
        }
    };
    for name in &requested {
        if signature.output(name).is_some() {
            add(name, &mut fetch);
        } else if let Some(op) = ops.iter().find(|op| op.output_names().contains(name)) {
            if !needed.contains(op) {
                for source in op.sources() {
                    add(source, &mut fetch);
                }
                needed.push(op.clone());
            }
        } else {
            let known: Vec<String> = signature
                .outputs
                .iter()
                .map(|s| s.name.clone())
                .chain(ops.iter().flat_map(PostOp::output_names))
                .map(|n| format!("'{n}'"))
                .collect();
            return Err(EngineError::InvalidInput(format!(
                "unknown output '{name}'; the model produces {}",
                known.join(", ")
            )));
        }
    }
    if needed.is_empty() {
        return Ok((requested, None));
    }
    let plan = PostPlan {
        model: model.to_string(),
        ops: needed,
        select: requested,
    };
    Ok((fetch, Some(plan)))
}

impl PostPlan {
    /// Runs the post-ops on one request's model outputs and returns what it asked for.
    pub fn apply(&self, ops: &Ops, mut outputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let mut produced = Vec::new();
        for op in &self.ops {
            produced.extend(op.apply(ops, &outputs, &self.model)?);
        }
        outputs.extend(produced);
        if self.select.is_empty() {
            return Ok(outputs);
        }
        let mut picked = Vec::with_capacity(self.select.len());
        for (n, name) in self.select.iter().enumerate() {
            let i = outputs
                .iter()
                .position(|t| &t.name == name)
                .ok_or_else(|| {
                    EngineError::Internal(format!("post-processing lost output '{name}'"))
                })?;
            // A name asked for again later gets a copy now.
            picked.push(if self.select[n + 1..].contains(name) {
                outputs[i].clone()
            } else {
                outputs.swap_remove(i)
            });
        }
        Ok(picked)
    }
}

fn model_failed(model: &str, reason: String) -> EngineError {
    EngineError::ModelFailed {
        model: model.to_string(),
        reason,
    }
}

fn find<'a>(outputs: &'a [Tensor], name: &str, model: &str) -> Result<&'a Tensor> {
    outputs.iter().find(|t| t.name == name).ok_or_else(|| {
        EngineError::Internal(format!(
            "model '{model}': output '{name}' was not fetched for post-processing"
        ))
    })
}

/// A kernel's refusal of a model's output is the model's fault (it produced NaN, say); a
/// device failure has already fallen back to the CPU inside `Ops`.
fn kernel_failed(model: &str, op: &str, e: infergate_kernels::Error) -> EngineError {
    match e.fault() {
        Fault::Input => model_failed(model, format!("post-op {op}: {e}")),
        Fault::Device | Fault::Internal => EngineError::Internal(format!("post-op {op}: {e}")),
    }
}

fn dims(tensor: &Tensor) -> Vec<usize> {
    tensor.shape.iter().map(|&d| d.max(0) as usize).collect()
}

fn floats(tensor: &Tensor, model: &str) -> Result<Vec<f32>> {
    tensor.to_f32().ok_or_else(|| {
        model_failed(
            model,
            format!(
                "output '{}' is {}, FP32 expected by its post-op",
                tensor.name, tensor.datatype
            ),
        )
    })
}

fn softmax_topk(
    s: &SoftmaxTopk,
    ops: &Ops,
    outputs: &[Tensor],
    model: &str,
) -> Result<Vec<Tensor>> {
    let logits = find(outputs, &s.output, model)?;
    let values = floats(logits, model)?;
    let shape = dims(logits);
    let cols = shape.last().copied().unwrap_or(0);
    let k = s.k as usize;
    if cols < k {
        return Err(model_failed(
            model,
            format!(
                "post-op softmax_topk: output '{}' has {cols} classes, fewer than k={k}",
                s.output
            ),
        ));
    }
    let rows = values.len() / cols;
    let mut probs = vec![0f32; rows * k];
    let mut indices = vec![0u32; rows * k];
    ops.softmax_topk(
        &values,
        TopKShape { rows, cols, k },
        &mut probs,
        &mut indices,
    )
    .map_err(|e| kernel_failed(model, "softmax_topk", e))?;
    let mut out_shape = logits.shape.clone();
    if let Some(last) = out_shape.last_mut() {
        *last = k as i64;
    }
    let indices: Vec<i64> = indices.into_iter().map(i64::from).collect();
    Ok(vec![
        Tensor::from_i64(s.indices_name(), out_shape.clone(), &indices)?,
        Tensor::from_f32(s.scores_name(), out_shape, &probs)?,
    ])
}

/// A class id read from the model's classes output: a non-negative integer.
fn class_ids(tensor: &Tensor, model: &str) -> Result<Vec<u32>> {
    let bad = |v: String| {
        model_failed(
            model,
            format!(
                "output '{}' holds class {v}; classes must be integers from 0",
                tensor.name
            ),
        )
    };
    let TensorData::Raw(bytes) = &tensor.data else {
        return Err(bad("strings".into()));
    };
    match tensor.datatype {
        DataType::Int64 => bytes
            .chunks_exact(8)
            .map(|c| {
                let v = i64::from_le_bytes(c.try_into().unwrap_or_default());
                u32::try_from(v).map_err(|_| bad(v.to_string()))
            })
            .collect(),
        DataType::Int32 => bytes
            .chunks_exact(4)
            .map(|c| {
                let v = i32::from_le_bytes(c.try_into().unwrap_or_default());
                u32::try_from(v).map_err(|_| bad(v.to_string()))
            })
            .collect(),
        DataType::Fp32 => floats(tensor, model)?
            .into_iter()
            .map(|v| {
                if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f32 {
                    Ok(v as u32)
                } else {
                    Err(bad(v.to_string()))
                }
            })
            .collect(),
        other => Err(bad(format!("of type {other}"))),
    }
}

fn nms(n: &Nms, ops: &Ops, outputs: &[Tensor], model: &str) -> Result<Vec<Tensor>> {
    let boxes_t = find(outputs, &n.boxes, model)?;
    let scores_t = find(outputs, &n.scores, model)?;
    let (bshape, sshape) = (dims(boxes_t), dims(scores_t));
    let (items, per_item) = match bshape.as_slice() {
        [items, per_item, 4] => (*items, *per_item),
        _ => {
            return Err(model_failed(
                model,
                format!(
                    "post-op nms: boxes output '{}' has shape {:?}, [N, B, 4] expected",
                    n.boxes, boxes_t.shape
                ),
            ))
        }
    };
    let classes_per_box = match sshape.as_slice() {
        [i, b] if (*i, *b) == (items, per_item) => 1,
        [i, b, c] if (*i, *b) == (items, per_item) && *c > 0 => *c,
        _ => {
            return Err(model_failed(
                model,
                format!(
                    "post-op nms: scores output '{}' has shape {:?}, [{items}, {per_item}] or [{items}, {per_item}, C] expected",
                    n.scores, scores_t.shape
                ),
            ))
        }
    };
    let boxes = floats(boxes_t, model)?;
    let scores = floats(scores_t, model)?;
    let given_classes = match &n.classes {
        Some(name) => {
            let t = find(outputs, name, model)?;
            if dims(t) != [items, per_item] {
                return Err(model_failed(
                    model,
                    format!(
                        "post-op nms: classes output '{name}' has shape {:?}, [{items}, {per_item}] expected",
                        t.shape
                    ),
                ));
            }
            Some(class_ids(t, model)?)
        }
        None => None,
    };
    let total = items * per_item;
    let mut candidates = Vec::with_capacity(total);
    let mut classes = Vec::with_capacity(total);
    for i in 0..total {
        let [a, b, c, d] = [0, 1, 2, 3].map(|j| boxes[i * 4 + j]);
        let (x1, y1, x2, y2) = match n.box_format {
            BoxFormat::Xyxy => (a, b, c, d),
            BoxFormat::Cxcywh => (a - c / 2.0, b - d / 2.0, a + c / 2.0, b + d / 2.0),
        };
        // Per-class scores: the box takes its best class (the lowest index on a tie).
        let row = &scores[i * classes_per_box..(i + 1) * classes_per_box];
        let (best, score) =
            row.iter()
                .copied()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |(bi, bs), (ci, s)| {
                    if s > bs || bs.is_nan() {
                        (ci, s)
                    } else {
                        (bi, bs)
                    }
                });
        let class = match &given_classes {
            Some(ids) => ids[i],
            None => best as u32,
        };
        classes.push(class);
        candidates.push(Candidate {
            x1,
            y1,
            x2,
            y2,
            score,
            class: if n.class_aware { class } else { 0 },
        });
    }
    let spec = NmsSpec {
        iou_threshold: n.iou_threshold,
        score_threshold: n.score_threshold,
        max_detections: n.max_detections as usize,
    };
    let kept = if per_item == 0 {
        vec![Vec::new(); items]
    } else {
        ops.nms(&candidates, per_item, &spec)
            .map_err(|e| kernel_failed(model, "nms", e))?
    };
    let det = n.max_detections as usize;
    let mut count = Vec::with_capacity(items);
    let mut out_boxes = vec![0f32; items * det * 4];
    let mut out_scores = vec![0f32; items * det];
    let mut out_classes = vec![-1i64; items * det];
    for (item, keep) in kept.iter().enumerate() {
        count.push(keep.len() as i64);
        for (slot, &index) in keep.iter().take(det).enumerate() {
            let c = &candidates[item * per_item + index as usize];
            let row = item * det + slot;
            out_boxes[row * 4..row * 4 + 4].copy_from_slice(&[c.x1, c.y1, c.x2, c.y2]);
            out_scores[row] = c.score;
            out_classes[row] = i64::from(classes[item * per_item + index as usize]);
        }
    }
    let [count_name, boxes_name, scores_name, classes_name] = n.names();
    let (items, det) = (items as i64, det as i64);
    Ok(vec![
        Tensor::from_i64(count_name, vec![items], &count)?,
        Tensor::from_f32(boxes_name, vec![items, det, 4], &out_boxes)?,
        Tensor::from_f32(scores_name, vec![items, det], &out_scores)?,
        Tensor::from_i64(classes_name, vec![items, det], &out_classes)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape,
        }
    }

    fn detector() -> ModelSignature {
        ModelSignature {
            inputs: vec![spec("images", DataType::Fp32, vec![-1, 3, 64, 64])],
            outputs: vec![
                spec("boxes", DataType::Fp32, vec![-1, -1, 4]),
                spec("scores", DataType::Fp32, vec![-1, -1, 3]),
                spec("logits", DataType::Fp32, vec![-1, 10]),
            ],
            metadata: BTreeMap::new(),
        }
    }

    fn parse(json: serde_json::Value) -> std::result::Result<Vec<PostOp>, String> {
        #[derive(Deserialize)]
        struct W {
            #[serde(deserialize_with = "one_or_many")]
            p: Vec<PostOp>,
        }
        let w: W =
            serde_json::from_value(serde_json::json!({ "p": json })).map_err(|e| e.to_string())?;
        validate(&w.p).map_err(|e| e.to_string())?;
        Ok(w.p)
    }

    #[test]
    fn parses_one_op_or_a_list_and_names_bad_fields() {
        let one =
            parse(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 5})).unwrap();
        assert_eq!(
            one[0].output_names(),
            ["logits_topk_indices", "logits_topk_scores"]
        );
        let two = parse(serde_json::json!([
            {"op": "softmax_topk", "output": "logits", "k": 5, "indices_name": "top", "scores_name": "p"},
            {"op": "nms", "boxes": "boxes", "scores": "scores", "iou_threshold": 0.45,
             "score_threshold": 0.25, "max_detections": 100, "class_aware": true, "box_format": "cxcywh"},
        ]))
        .unwrap();
        assert_eq!(two.len(), 2);
        let e = parse(serde_json::json!({"op": "softmax_topk", "output": "logits", "kk": 5}))
            .unwrap_err();
        assert!(e.contains("kk"), "{e}");
        let e = parse(serde_json::json!({"op": "argmax", "output": "logits"})).unwrap_err();
        assert!(e.contains("argmax"), "{e}");
        let e = parse(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 0}))
            .unwrap_err();
        assert!(e.contains("postprocess[0].k"), "{e}");
        let e = parse(serde_json::json!([{"op": "softmax_topk", "output": "logits", "k": 1},
            {"op": "nms", "boxes": "b", "scores": "s", "iou_threshold": 1.5, "score_threshold": 0.1, "max_detections": 10}]))
        .unwrap_err();
        assert!(e.contains("postprocess[1].iou_threshold"), "{e}");
        let e = parse(serde_json::json!({"op": "nms", "boxes": "b", "scores": "s", "iou_threshold": 0.5, "score_threshold": 0.1}))
            .unwrap_err();
        assert!(e.contains("max_detections"), "{e}");
        let e = parse(
            serde_json::json!([{"op": "softmax_topk", "output": "a", "k": 1, "indices_name": "x"},
            {"op": "softmax_topk", "output": "b", "k": 1, "indices_name": "x"}]),
        )
        .unwrap_err();
        assert!(e.contains("'x' is produced twice"), "{e}");
    }

    #[test]
    fn checks_ops_against_the_model_outputs() {
        let sig = detector();
        let check = |json| output_specs(&parse(json).unwrap(), &sig).map_err(|e| e.to_string());
        let specs =
            check(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 3})).unwrap();
        assert_eq!(specs[0].shape, vec![-1, 3]);
        assert_eq!(specs[0].datatype, DataType::Int64);
        let e = check(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 11}))
            .unwrap_err();
        assert!(
            e.contains("postprocess[0].k") && e.contains("10 classes"),
            "{e}"
        );
        let e = check(serde_json::json!({"op": "softmax_topk", "output": "logitz", "k": 1}))
            .unwrap_err();
        assert!(
            e.contains("postprocess[0].output") && e.contains("logitz"),
            "{e}"
        );
        let nms = serde_json::json!({"op": "nms", "boxes": "boxes", "scores": "scores",
            "iou_threshold": 0.5, "score_threshold": 0.1, "max_detections": 7});
        let specs = check(nms).unwrap();
        assert_eq!(specs[1].shape, vec![-1, 7, 4]);
        let e = check(
            serde_json::json!({"op": "nms", "boxes": "logits", "scores": "scores",
            "iou_threshold": 0.5, "score_threshold": 0.1, "max_detections": 7}),
        )
        .unwrap_err();
        assert!(e.contains("postprocess[0].boxes"), "{e}");
        let e = check(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 1, "indices_name": "boxes"}))
            .unwrap_err();
        assert!(e.contains("hide"), "{e}");
    }

    fn boxes_and_scores() -> Vec<Tensor> {
        // Two images, three boxes each, two classes of per-class scores.
        let boxes = [
            [0.0, 0.0, 10.0, 10.0],
            [1.0, 1.0, 11.0, 11.0],
            [20.0, 20.0, 30.0, 30.0],
            [0.0, 0.0, 10.0, 10.0],
            [0.0, 0.0, 10.0, 10.0],
            [50.0, 50.0, 60.0, 60.0],
        ]
        .concat();
        let scores = [
            [0.9, 0.0],
            [0.8, 0.1],
            [0.1, 0.7],
            [0.0, 0.6],
            [0.5, 0.0],
            [0.05, 0.01],
        ]
        .concat();
        vec![
            Tensor::from_f32("boxes", vec![2, 3, 4], &boxes).unwrap(),
            Tensor::from_f32("scores", vec![2, 3, 2], &scores).unwrap(),
        ]
    }

    #[test]
    fn nms_keeps_best_boxes_per_class_padded_to_max_detections() {
        let ops = parse(
            serde_json::json!({"op": "nms", "boxes": "boxes", "scores": "scores",
            "iou_threshold": 0.5, "score_threshold": 0.2, "max_detections": 4}),
        )
        .unwrap();
        let sig = detector();
        let (fetch, post) = plan(
            &"det",
            &ops,
            &sig,
            vec!["detection_classes".into(), "num_detections".into()],
        )
        .unwrap();
        assert_eq!(fetch, ["boxes", "scores"]);
        let out = post
            .unwrap()
            .apply(&Ops::cpu(), boxes_and_scores())
            .unwrap();
        assert_eq!(out[0].name, "detection_classes");
        assert_eq!(out[1].name, "num_detections");
        let counts: Vec<i64> = match &out[1].data {
            TensorData::Raw(b) => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            _ => unreachable!(),
        };
        // Image 0: box 1 overlaps box 0 (same class 0) and goes; box 2 is class 1.
        // Image 1: boxes 0 and 1 coincide but differ in class, so both stay; box 2 scores too low.
        assert_eq!(counts, [2, 2]);
        let classes: Vec<i64> = match &out[0].data {
            TensorData::Raw(b) => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            _ => unreachable!(),
        };
        assert_eq!(classes, [0, 1, -1, -1, 1, 0, -1, -1]);

        // Across classes, image 1's coinciding boxes suppress each other.
        let agnostic = parse(serde_json::json!({"op": "nms", "boxes": "boxes", "scores": "scores",
            "iou_threshold": 0.5, "score_threshold": 0.2, "max_detections": 4, "class_aware": false}))
        .unwrap();
        let (_, post) = plan(&"det", &agnostic, &sig, vec![]).unwrap();
        let out = post
            .unwrap()
            .apply(&Ops::cpu(), boxes_and_scores())
            .unwrap();
        let count = out.iter().find(|t| t.name == "num_detections").unwrap();
        assert_eq!(
            count.data,
            TensorData::Raw([2i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect())
        );
        let boxes = out
            .iter()
            .find(|t| t.name == "detection_boxes")
            .unwrap()
            .to_f32()
            .unwrap();
        assert_eq!(&boxes[..8], &[0.0, 0.0, 10.0, 10.0, 20.0, 20.0, 30.0, 30.0]);
        // The model's own outputs come first when the request names none.
        assert_eq!(out[0].name, "boxes");
    }

    #[test]
    fn a_model_output_that_breaks_the_op_is_the_models_fault() {
        let ops =
            parse(serde_json::json!({"op": "softmax_topk", "output": "logits", "k": 2})).unwrap();
        let (fetch, post) =
            plan(&"m", &ops, &detector(), vec!["logits_topk_scores".into()]).unwrap();
        assert_eq!(fetch, ["logits"]);
        let nan = Tensor::from_f32("logits", vec![1, 3], &[0.0, f32::NAN, 1.0]).unwrap();
        let e = post.unwrap().apply(&Ops::cpu(), vec![nan]).unwrap_err();
        assert_eq!(e.fault(), crate::Fault::Model, "{e}");
        let e = plan_err(&ops, "nope");
        assert!(
            e.contains("'logits_topk_indices'") && e.contains("'nope'"),
            "{e}"
        );
    }

    #[test]
    fn nms_on_detector_sized_outputs_keeps_what_the_reference_keeps() {
        // A YOLOv8-sized head: two images of 8400 boxes (centre format), 80 classes.
        let (items, per_item, classes) = (2usize, 8400usize, 80usize);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let boxes: Vec<f32> = (0..items * per_item)
            .flat_map(|_| {
                let (cx, cy) = (next() * 640.0, next() * 640.0);
                let (w, h) = (4.0 + next() * 120.0, 4.0 + next() * 120.0);
                [cx, cy, w, h]
            })
            .collect();
        let scores: Vec<f32> = (0..items * per_item * classes)
            .map(|_| next().powi(6))
            .collect();
        let outputs = vec![
            Tensor::from_f32("boxes", vec![2, 8400, 4], &boxes).unwrap(),
            Tensor::from_f32("scores", vec![2, 8400, 80], &scores).unwrap(),
        ];
        let ops = parse(
            serde_json::json!({"op": "nms", "boxes": "boxes", "scores": "scores",
            "iou_threshold": 0.45, "score_threshold": 0.25, "max_detections": 100,
            "box_format": "cxcywh"}),
        )
        .unwrap();
        let mut sig = detector();
        sig.outputs[1].shape = vec![-1, -1, 80];
        let (_, post) = plan(&"yolo", &ops, &sig, vec![]).unwrap();
        let out = post.unwrap().apply(&Ops::cpu(), outputs).unwrap();
        let get = |name: &str| out.iter().find(|t| t.name == name).unwrap();
        assert_eq!(get("detection_boxes").shape, vec![2, 100, 4]);
        let ints = |t: &Tensor| -> Vec<i64> {
            match &t.data {
                TensorData::Raw(b) => b
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                _ => unreachable!(),
            }
        };
        let counts = ints(get("num_detections"));
        let kept_classes = ints(get("detection_classes"));
        let kept_scores = get("detection_scores").to_f32().unwrap();

        // The kernels' scalar reference on candidates built here from the same numbers.
        let candidates: Vec<Candidate> = (0..items * per_item)
            .map(|i| {
                let b = &boxes[i * 4..i * 4 + 4];
                let row = &scores[i * classes..(i + 1) * classes];
                let mut best = 0;
                for c in 1..classes {
                    if row[c] > row[best] {
                        best = c;
                    }
                }
                Candidate {
                    x1: b[0] - b[2] / 2.0,
                    y1: b[1] - b[3] / 2.0,
                    x2: b[0] + b[2] / 2.0,
                    y2: b[1] + b[3] / 2.0,
                    score: row[best],
                    class: best as u32,
                }
            })
            .collect();
        let spec = NmsSpec {
            iou_threshold: 0.45,
            score_threshold: 0.25,
            max_detections: 100,
        };
        let reference =
            infergate_kernels::nms::nms_reference(&candidates, per_item, &spec).unwrap();
        for (item, keep) in reference.iter().enumerate() {
            assert!(!keep.is_empty() && keep.len() <= 100);
            assert_eq!(counts[item], keep.len() as i64, "image {item}");
            for (slot, &k) in keep.iter().enumerate() {
                let c = &candidates[item * per_item + k as usize];
                assert_eq!(kept_classes[item * 100 + slot], i64::from(c.class));
                assert_eq!(kept_scores[item * 100 + slot], c.score);
            }
        }
    }

    fn plan_err(ops: &[PostOp], name: &str) -> String {
        plan(&"m", ops, &detector(), vec![name.into()])
            .unwrap_err()
            .to_string()
    }
}
