//! Triton's `sequence_batching` block of a model config, in Triton's field names: the strategy
//! (`direct` or `oldest`), how long a sequence may sit idle, the control inputs the engine fills
//! (START, END, READY, CORRID) and the implicit state carried from one request's output to the
//! next request's input. Checked without the model ([`SequenceBatching::validate`]) and against
//! it ([`SequenceBatching::validate_for`]); resolved into what the sequencer needs
//! ([`SequenceBatching::plan`]).

use crate::error::{EngineError, Result};
use crate::signature::{ModelSignature, TensorSpec};
use crate::tensor::DataType;
use serde::{Deserialize, Deserializer, Serialize};
use std::time::Duration;

/// Triton's default idle limit when the config leaves it at 0.
const DEFAULT_IDLE_US: u64 = 1_000_000;
/// A day: an idle limit beyond it is a typo that keeps state around for ever.
const MAX_IDLE_US: u64 = 86_400_000_000;
/// Upper bound of the batching delays, as for `dynamic_batching`.
const MAX_DELAY_US: u64 = 10_000_000;
/// Upper bound of the candidate sequences per instance (each holds its state in memory).
const MAX_CANDIDATES: u32 = 4_096;
/// Upper bound of the elements of a state's initial value (every new sequence allocates it).
const MAX_STATE_ELEMENTS: usize = 1 << 24;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SequenceBatching {
    /// How long a sequence may have no request queued or running before it is ended and its
    /// slot and state freed; 0 = Triton's default, one second.
    pub max_sequence_idle_microseconds: u64,
    /// Each sequence pinned to one batch slot (the default when neither strategy is named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<StrategyDirect>,
    /// Batches formed from the oldest requests of the candidate sequences, one per sequence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest: Option<StrategyOldest>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub control_input: Vec<ControlInput>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<SequenceState>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StrategyDirect {
    /// How long a batch may wait for more slots to become ready.
    pub max_queue_delay_microseconds: u64,
    /// The share of slots (0 to 1) that, once ready, runs the batch before the delay is up.
    pub minimum_slot_utilization: f32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StrategyOldest {
    /// Sequences that may hold a place per instance at once; 0 = max_batch_size (at least 1).
    pub max_candidate_sequences: u32,
    pub preferred_batch_size: Vec<u32>,
    pub max_queue_delay_microseconds: u64,
    /// Accepted for compatibility: each request has its own reply here.
    pub preserve_ordering: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlInput {
    pub name: String,
    pub control: Vec<Control>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    pub kind: ControlKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub int32_false_true: Vec<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fp32_false_true: Vec<f32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bool_false_true: Vec<bool>,
    /// CORRID's datatype: TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_type: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ControlKind {
    /// True on a sequence's first request.
    #[serde(rename = "CONTROL_SEQUENCE_START")]
    Start,
    /// True on a sequence's last request.
    #[serde(rename = "CONTROL_SEQUENCE_END")]
    End,
    /// True in the batch rows that hold a request (false in Direct's empty slots).
    #[serde(rename = "CONTROL_SEQUENCE_READY")]
    Ready,
    /// The row's correlation id.
    #[serde(rename = "CONTROL_SEQUENCE_CORRID")]
    CorrId,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequenceState {
    pub input_name: String,
    pub output_name: String,
    pub data_type: String,
    /// Without the batch dimension; -1 = set by the model's output.
    pub dims: Vec<i64>,
    /// At most one; zeros of the state's shape (its -1 dimensions as 1) when absent.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub initial_state: Vec<InitialState>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialState {
    pub name: String,
    pub data_type: String,
    pub dims: Vec<i64>,
    #[serde(default)]
    pub zero_data: bool,
    /// Triton reads it from the model's directory; refused here (use zero_data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_file: Option<String>,
}

/// `initial_state` is one object (Triton's text format) or a list (its JSON form).
fn one_or_many<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<InitialState>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Many(Vec<InitialState>),
        One(InitialState),
    }
    Ok(match Form::deserialize(d)? {
        Form::Many(v) => v,
        Form::One(v) => vec![v],
    })
}

/// How a boolean control says false and true: its datatype and the two values, little-endian.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Flag {
    pub datatype: DataType,
    pub values: [Vec<u8>; 2],
}

/// What the engine fills into one control input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fill {
    Flag(ControlKind, Flag),
    CorrId(DataType),
}

/// One control input resolved: its name, what goes into it and its shape in the model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ControlPlan {
    pub name: String,
    pub fill: Fill,
    pub shape: Vec<i64>,
}

/// One implicit state resolved: where it goes in and comes out, and its first value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StatePlan {
    pub input: String,
    pub output: String,
    pub datatype: DataType,
    /// The value a sequence starts from: with the batch dimension (1) when the model batches.
    pub initial_shape: Vec<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Strategy {
    Direct {
        delay: Duration,
        min_utilization: f32,
    },
    Oldest {
        candidates: usize,
        delay: Duration,
    },
}

/// The block resolved for the sequencer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SequencePlan {
    pub strategy: Strategy,
    /// Ascending (Oldest only).
    pub preferred: Vec<usize>,
    pub idle: Duration,
    /// 0 = the model has no batch dimension: one request per run.
    pub max_batch_size: usize,
    pub controls: Vec<ControlPlan>,
    pub states: Vec<StatePlan>,
}

fn invalid(message: String) -> EngineError {
    EngineError::InvalidConfig(format!("sequence_batching.{message}"))
}

fn datatype(field: &str, name: &str) -> Result<DataType> {
    DataType::from_config_name(name).ok_or_else(|| {
        invalid(format!(
            "{field}: '{name}' is not a Triton type (TYPE_FP32, TYPE_INT32, ...)"
        ))
    })
}

impl Control {
    /// The flag a boolean control sets, from its one `*_false_true` pair.
    fn flag(&self, at: &str) -> Result<Flag> {
        let given = [
            !self.int32_false_true.is_empty(),
            !self.fp32_false_true.is_empty(),
            !self.bool_false_true.is_empty(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 || self.data_type.is_some() {
            return Err(invalid(format!(
                "{at}: a START, END or READY control takes exactly one of int32_false_true, fp32_false_true or bool_false_true"
            )));
        }
        let pair = |len: usize| -> Result<()> {
            if len == 2 {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{at}: the false/true pair needs 2 values, got {len}"
                )))
            }
        };
        Ok(if given[0] {
            pair(self.int32_false_true.len())?;
            let v = &self.int32_false_true;
            Flag {
                datatype: DataType::Int32,
                values: [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
            }
        } else if given[1] {
            pair(self.fp32_false_true.len())?;
            let v = &self.fp32_false_true;
            Flag {
                datatype: DataType::Fp32,
                values: [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
            }
        } else {
            pair(self.bool_false_true.len())?;
            let v = &self.bool_false_true;
            Flag {
                datatype: DataType::Bool,
                values: [vec![u8::from(v[0])], vec![u8::from(v[1])]],
            }
        })
    }

    fn fill(&self, at: &str) -> Result<Fill> {
        if self.kind != ControlKind::CorrId {
            return Ok(Fill::Flag(self.kind, self.flag(at)?));
        }
        let name = self
            .data_type
            .as_deref()
            .ok_or_else(|| invalid(format!("{at}: CONTROL_SEQUENCE_CORRID needs a data_type")))?;
        let dt = datatype(&format!("{at}.data_type"), name)?;
        let flags_given = !self.int32_false_true.is_empty()
            || !self.fp32_false_true.is_empty()
            || !self.bool_false_true.is_empty();
        match dt {
            DataType::Uint64 | DataType::Int64 | DataType::Uint32 | DataType::Int32 | DataType::Bytes
                if !flags_given =>
            {
                Ok(Fill::CorrId(dt))
            }
            _ if flags_given => Err(invalid(format!(
                "{at}: CONTROL_SEQUENCE_CORRID takes a data_type, not false/true values"
            ))),
            _ => Err(invalid(format!(
                "{at}.data_type: {name} cannot hold a correlation id; use TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING"
            ))),
        }
    }
}

impl SequenceBatching {
    /// Checks what can be checked without the model (`max_batch_size` is the config's).
    pub fn validate(&self, max_batch_size: u32) -> Result<()> {
        self.plan_controls()?;
        if self.max_sequence_idle_microseconds > MAX_IDLE_US {
            return Err(invalid(format!(
                "max_sequence_idle_microseconds {} exceeds {MAX_IDLE_US} (a day)",
                self.max_sequence_idle_microseconds
            )));
        }
        match (&self.direct, &self.oldest) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "direct and oldest: name one strategy, not both".into(),
                ))
            }
            (Some(d), None) => {
                if d.max_queue_delay_microseconds > MAX_DELAY_US {
                    return Err(invalid(format!(
                        "direct.max_queue_delay_microseconds {} exceeds {MAX_DELAY_US}",
                        d.max_queue_delay_microseconds
                    )));
                }
                if !(0.0..=1.0).contains(&d.minimum_slot_utilization) {
                    return Err(invalid(format!(
                        "direct.minimum_slot_utilization {} must be between 0 and 1",
                        d.minimum_slot_utilization
                    )));
                }
            }
            (None, Some(o)) => {
                if o.max_queue_delay_microseconds > MAX_DELAY_US {
                    return Err(invalid(format!(
                        "oldest.max_queue_delay_microseconds {} exceeds {MAX_DELAY_US}",
                        o.max_queue_delay_microseconds
                    )));
                }
                if o.max_candidate_sequences > MAX_CANDIDATES {
                    return Err(invalid(format!(
                        "oldest.max_candidate_sequences {} exceeds {MAX_CANDIDATES}",
                        o.max_candidate_sequences
                    )));
                }
                for &p in &o.preferred_batch_size {
                    if p == 0 || p > max_batch_size.max(1) {
                        return Err(invalid(format!(
                            "oldest.preferred_batch_size {p} must be between 1 and max_batch_size ({max_batch_size})"
                        )));
                    }
                }
            }
            (None, None) => {}
        }
        let controls: Vec<&str> = self.control_input.iter().map(|c| c.name.as_str()).collect();
        for (i, s) in self.state.iter().enumerate() {
            let at = format!("state[{i}]");
            datatype(&format!("{at}.data_type"), &s.data_type)?;
            if s.input_name.is_empty() || s.output_name.is_empty() {
                return Err(invalid(format!(
                    "{at}: input_name and output_name are required"
                )));
            }
            if controls.contains(&s.input_name.as_str()) {
                return Err(invalid(format!(
                    "{at}.input_name '{}' is also a control input",
                    s.input_name
                )));
            }
            let earlier = &self.state[..i];
            if earlier.iter().any(|e| e.input_name == s.input_name) {
                return Err(invalid(format!(
                    "{at}.input_name '{}' is named by two states",
                    s.input_name
                )));
            }
            if earlier.iter().any(|e| e.output_name == s.output_name) {
                return Err(invalid(format!(
                    "{at}.output_name '{}' is named by two states",
                    s.output_name
                )));
            }
            if s.dims.iter().any(|&d| d < -1 || d == 0) {
                return Err(invalid(format!(
                    "{at}.dims {:?}: each dimension is positive or -1",
                    s.dims
                )));
            }
            match s.initial_state.as_slice() {
                [] => {}
                [init] => {
                    let at = format!("{at}.initial_state");
                    if init.name.is_empty() {
                        return Err(invalid(format!("{at}: 'name' is required")));
                    }
                    if init.data_type != s.data_type {
                        return Err(invalid(format!(
                            "{at}.data_type {} differs from the state's {}",
                            init.data_type, s.data_type
                        )));
                    }
                    if init.data_file.is_some() {
                        return Err(invalid(format!(
                            "{at}.data_file: initial state from a file is not supported; use zero_data"
                        )));
                    }
                    if !init.zero_data {
                        return Err(invalid(format!("{at}: set zero_data: true")));
                    }
                    let fits = init.dims.len() == s.dims.len()
                        && init
                            .dims
                            .iter()
                            .zip(&s.dims)
                            .all(|(&i, &d)| i > 0 && (d < 0 || d == i));
                    if !fits {
                        return Err(invalid(format!(
                            "{at}.dims {:?} must be concrete and fit the state's dims {:?}",
                            init.dims, s.dims
                        )));
                    }
                    if crate::tensor::element_count(&init.dims)
                        .is_none_or(|n| n > MAX_STATE_ELEMENTS)
                    {
                        return Err(invalid(format!(
                            "{at}.dims {:?} hold more than {MAX_STATE_ELEMENTS} elements",
                            init.dims
                        )));
                    }
                }
                more => {
                    return Err(invalid(format!(
                        "{at}.initial_state: at most one, got {}",
                        more.len()
                    )))
                }
            }
        }
        Ok(())
    }

    /// The control inputs resolved (names unique, one control each, each kind at most once).
    fn plan_controls(&self) -> Result<Vec<(String, Fill)>> {
        let mut out: Vec<(String, Fill)> = Vec::new();
        for (i, input) in self.control_input.iter().enumerate() {
            let at = format!("control_input[{i}]");
            if input.name.is_empty() {
                return Err(invalid(format!("{at}.name is required")));
            }
            if out.iter().any(|(n, _)| *n == input.name) {
                return Err(invalid(format!(
                    "{at}.name '{}' is named twice",
                    input.name
                )));
            }
            let [control] = input.control.as_slice() else {
                return Err(invalid(format!(
                    "{at}.control: exactly one control per input, got {}",
                    input.control.len()
                )));
            };
            let fill = control.fill(&format!("{at}.control[0]"))?;
            let kind = |f: &Fill| match f {
                Fill::Flag(k, _) => *k,
                Fill::CorrId(_) => ControlKind::CorrId,
            };
            if out.iter().any(|(_, f)| kind(f) == kind(&fill)) {
                return Err(invalid(format!(
                    "{at}: {:?} is controlled by two inputs",
                    control.kind
                )));
            }
            out.push((input.name.clone(), fill));
        }
        Ok(out)
    }

    /// Checks the block against the loaded model and resolves it: every control and state
    /// input is a model input of the right datatype holding one value per request (controls),
    /// and every state output a model output of the state's datatype.
    pub(crate) fn plan(
        &self,
        max_batch_size: u32,
        signature: &ModelSignature,
    ) -> Result<SequencePlan> {
        self.validate(max_batch_size)?;
        let batching = max_batch_size > 0;
        let input = |field: &str, name: &str| -> Result<&TensorSpec> {
            signature
                .input(name)
                .ok_or_else(|| invalid(format!("{field} '{name}' is not an input of the model")))
        };
        let mut controls = Vec::new();
        for (name, fill) in self.plan_controls()? {
            let spec = input("control_input", &name)?;
            let wanted = match &fill {
                Fill::Flag(_, flag) => flag.datatype,
                Fill::CorrId(dt) => *dt,
            };
            if spec.datatype != wanted {
                return Err(invalid(format!(
                    "control_input '{name}' is {} in the model, the control gives {}",
                    spec.datatype.config_name(),
                    wanted.config_name()
                )));
            }
            let rest = if batching {
                spec.shape.get(1..)
            } else {
                Some(&spec.shape[..])
            };
            if rest.is_none_or(|r| r.iter().any(|&d| d != 1 && d != -1)) {
                return Err(invalid(format!(
                    "control_input '{name}' has shape {:?} in the model; a control holds one value per request ([{}1])",
                    spec.shape,
                    if batching { "-1, " } else { "" }
                )));
            }
            let shape = spec.shape.iter().map(|&d| d.max(1)).collect();
            controls.push(ControlPlan { name, fill, shape });
        }
        let mut states = Vec::new();
        for s in &self.state {
            let dt = datatype("state.data_type", &s.data_type)?;
            let spec = input("state.input_name", &s.input_name)?;
            let out = signature.output(&s.output_name).ok_or_else(|| {
                invalid(format!(
                    "state.output_name '{}' is not an output of the model",
                    s.output_name
                ))
            })?;
            for spec in [spec, out] {
                if spec.datatype != dt {
                    return Err(invalid(format!(
                        "state '{}' is {} but the model's '{}' is {}",
                        s.input_name,
                        s.data_type,
                        spec.name,
                        spec.datatype.config_name()
                    )));
                }
                let rest = if batching {
                    spec.shape.get(1..).unwrap_or_default()
                } else {
                    &spec.shape[..]
                };
                let fits = rest.len() == s.dims.len()
                    && rest
                        .iter()
                        .zip(&s.dims)
                        .all(|(&m, &d)| m < 0 || d < 0 || m == d);
                if !fits {
                    return Err(invalid(format!(
                        "state '{}' has dims {:?}, the model's '{}' has shape {:?}",
                        s.input_name, s.dims, spec.name, spec.shape
                    )));
                }
            }
            let dims = match s.initial_state.first() {
                Some(init) => init.dims.clone(),
                None => s.dims.iter().map(|&d| d.max(1)).collect(),
            };
            let initial_shape = if batching {
                std::iter::once(1).chain(dims).collect()
            } else {
                dims
            };
            states.push(StatePlan {
                input: s.input_name.clone(),
                output: s.output_name.clone(),
                datatype: dt,
                initial_shape,
            });
        }
        let strategy = match &self.oldest {
            Some(o) => Strategy::Oldest {
                candidates: match o.max_candidate_sequences {
                    0 => max_batch_size.max(1) as usize,
                    n => n as usize,
                },
                delay: Duration::from_micros(o.max_queue_delay_microseconds),
            },
            None => {
                let d = self.direct.clone().unwrap_or_default();
                Strategy::Direct {
                    delay: Duration::from_micros(d.max_queue_delay_microseconds),
                    min_utilization: d.minimum_slot_utilization,
                }
            }
        };
        let mut preferred: Vec<usize> = self
            .oldest
            .as_ref()
            .map(|o| o.preferred_batch_size.iter().map(|&p| p as usize).collect())
            .unwrap_or_default();
        preferred.sort_unstable();
        preferred.dedup();
        let idle_us = match self.max_sequence_idle_microseconds {
            0 => DEFAULT_IDLE_US,
            us => us,
        };
        Ok(SequencePlan {
            strategy,
            preferred,
            idle: Duration::from_micros(idle_us),
            max_batch_size: max_batch_size as usize,
            controls,
            states,
        })
    }
}

impl SequencePlan {
    /// Whether `name` is an input the engine fills (a control or a state), not the client.
    pub fn fills(&self, name: &str) -> bool {
        self.controls.iter().any(|c| c.name == name) || self.states.iter().any(|s| s.input == name)
    }

    /// Whether `name` is an output that carries state (returned only when asked for by name).
    pub fn is_state_output(&self, name: &str) -> bool {
        self.states.iter().any(|s| s.output == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> SequenceBatching {
        serde_json::from_value(v).unwrap()
    }

    fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
        }
    }

    /// The accumulator of `scripts/test_models.py`.
    fn accumulator() -> ModelSignature {
        ModelSignature {
            inputs: vec![
                spec("x", DataType::Fp32, &[-1, 1]),
                spec("start", DataType::Int32, &[-1, 1]),
                spec("ready", DataType::Int32, &[-1, 1]),
                spec("corrid", DataType::Int64, &[-1, 1]),
                spec("acc_in", DataType::Fp32, &[-1, 1]),
            ],
            outputs: vec![
                spec("acc_out", DataType::Fp32, &[-1, 1]),
                spec("sum", DataType::Fp32, &[-1, 1]),
                spec("corr", DataType::Int64, &[-1, 1]),
            ],
            metadata: Default::default(),
        }
    }

    fn block() -> serde_json::Value {
        json!({
            "max_sequence_idle_microseconds": 5000000,
            "oldest": {"max_candidate_sequences": 4, "preferred_batch_size": [2], "max_queue_delay_microseconds": 100},
            "control_input": [
                {"name": "start", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
                {"name": "ready", "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0, 1]}]},
                {"name": "corrid", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_INT64"}]}
            ],
            "state": [{"input_name": "acc_in", "output_name": "acc_out", "data_type": "TYPE_FP32", "dims": [1],
                       "initial_state": {"name": "zero", "data_type": "TYPE_FP32", "dims": [1], "zero_data": true}}]
        })
    }

    #[test]
    fn tritons_block_resolves_against_the_model() {
        let plan = parse(block()).plan(8, &accumulator()).unwrap();
        assert_eq!(
            plan.strategy,
            Strategy::Oldest {
                candidates: 4,
                delay: Duration::from_micros(100)
            }
        );
        assert_eq!(plan.idle, Duration::from_secs(5));
        assert_eq!(plan.controls.len(), 3);
        assert_eq!(plan.controls[0].shape, vec![1, 1]);
        assert_eq!(
            plan.controls[0].fill,
            Fill::Flag(
                ControlKind::Start,
                Flag {
                    datatype: DataType::Int32,
                    values: [0i32.to_le_bytes().to_vec(), 1i32.to_le_bytes().to_vec()]
                }
            )
        );
        assert_eq!(plan.controls[2].fill, Fill::CorrId(DataType::Int64));
        assert_eq!(plan.states[0].initial_shape, vec![1, 1]);
        assert!(plan.fills("acc_in") && plan.fills("start") && !plan.fills("x"));
        assert!(plan.is_state_output("acc_out") && !plan.is_state_output("sum"));

        let direct = parse(json!({"control_input": []})).plan(0, &accumulator());
        // Without batching a control holds [1]; the model's [-1, 1] is not that shape, but no
        // control is named, so the plan is Direct with Triton's one-second idle limit.
        let direct = direct.unwrap();
        assert_eq!(direct.idle, Duration::from_secs(1));
        assert!(matches!(direct.strategy, Strategy::Direct { .. }));
    }

    #[test]
    fn mistakes_name_the_field() {
        let cases = [
            (json!({"direct": {}, "oldest": {}}), "one strategy"),
            (
                json!({"control_input": [{"name": "start", "control": [{"kind": "CONTROL_SEQUENCE_START"}]}]}),
                "exactly one of int32_false_true",
            ),
            (
                json!({"control_input": [{"name": "start", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [1]}]}]}),
                "needs 2 values",
            ),
            (
                json!({"control_input": [{"name": "corrid", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_FP32"}]}]}),
                "cannot hold a correlation id",
            ),
            (
                json!({"control_input": [
                    {"name": "a", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
                    {"name": "b", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]}]}),
                "controlled by two inputs",
            ),
            (
                json!({"state": [{"input_name": "acc_in", "output_name": "acc_out", "data_type": "TYPE_FP32", "dims": [1],
                                  "initial_state": {"name": "f", "data_type": "TYPE_FP32", "dims": [1], "data_file": "x"}}]}),
                "data_file",
            ),
            (
                json!({"state": [{"input_name": "acc_in", "output_name": "acc_out", "data_type": "TYPE_FP32", "dims": [-1],
                                  "initial_state": {"name": "z", "data_type": "TYPE_FP32", "dims": [-1], "zero_data": true}}]}),
                "must be concrete",
            ),
            (
                json!({"oldest": {"preferred_batch_size": [9]}}),
                "preferred_batch_size 9",
            ),
            (
                json!({"max_sequence_idle_microseconds": 100000000000u64}),
                "a day",
            ),
        ];
        for (v, expected) in cases {
            let e = parse(v.clone()).validate(8).unwrap_err().to_string();
            assert!(
                e.contains("sequence_batching.") && e.contains(expected),
                "{v}: {e}"
            );
        }
        let unknown =
            serde_json::from_value::<SequenceBatching>(json!({"iterative_sequence": true}));
        assert!(unknown.is_err());
    }

    #[test]
    fn the_model_must_have_the_named_inputs_and_outputs() {
        let sig = accumulator();
        let mut wrong_type = block();
        wrong_type["control_input"][0]["control"][0] =
            json!({"kind": "CONTROL_SEQUENCE_START", "fp32_false_true": [0, 1]});
        let mut missing = block();
        missing["state"][0]["output_name"] = json!("nope");
        let mut no_input = block();
        no_input["control_input"][1]["name"] = json!("go");
        for (v, expected) in [
            (wrong_type, "is TYPE_INT32 in the model"),
            (missing, "'nope' is not an output"),
            (no_input, "'go' is not an input"),
        ] {
            let e = parse(v).plan(8, &sig).unwrap_err().to_string();
            assert!(e.contains(expected), "{e}");
        }
    }
}
