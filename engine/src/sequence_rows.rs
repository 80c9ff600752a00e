//! A formed sequence batch as the model's tensors, and its results back per request: the
//! requests' inputs joined row by row (zeros in Direct's null rows), the control inputs the
//! engine fills (START, END, READY, CORRID per row), the state each row runs on; after the
//! run, each row's outputs split into what its client asked for and the state its sequence
//! keeps.

use crate::batcher;
use crate::error::{EngineError, Result};
use crate::queue::BatchKey;
use crate::sequence_config::{ControlKind, Fill, SequencePlan};
use crate::sequence_slots::{CorrelationId, Formed, Member, Pending, RowKey};
use crate::signature::ModelSignature;
use crate::tensor::{DataType, Tensor, TensorData};

/// The key rows must share to run together: the request's input shapes and the state's.
pub(crate) fn row_key(plan: &SequencePlan, pending: &Pending, state: Option<&[Tensor]>) -> RowKey {
    let states = match state {
        Some(state) if !pending.start => state.iter().map(|t| t.shape.clone()).collect(),
        _ => plan
            .states
            .iter()
            .map(|s| s.initial_shape.clone())
            .collect(),
    };
    RowKey {
        inputs: BatchKey::of(&pending.inputs, &[]),
        states,
    }
}

/// Checks that the model's CORRID control (if any) can hold `id`.
pub(crate) fn check_id(plan: &SequencePlan, model: &str, id: &CorrelationId) -> Result<()> {
    for control in &plan.controls {
        if let Fill::CorrId(dt) = control.fill {
            id_bytes(dt, id).map_err(|reason| {
                EngineError::InvalidInput(format!(
                    "sequence id {id} cannot be given to model '{model}': {reason}"
                ))
            })?;
        }
    }
    Ok(())
}

/// A correlation id as one element of the CORRID control's datatype.
fn id_bytes(dt: DataType, id: &CorrelationId) -> std::result::Result<Vec<u8>, String> {
    let n = match id {
        CorrelationId::Int(n) => *n,
        CorrelationId::Str(s) if dt == DataType::Bytes => return Ok(s.as_bytes().to_vec()),
        CorrelationId::Str(_) => {
            return Err(format!(
                "its CORRID control is {}, which holds integer ids only",
                dt.config_name()
            ))
        }
    };
    let out_of_range = || format!("it exceeds the CORRID control's {}", dt.config_name());
    Ok(match dt {
        DataType::Uint64 => n.to_le_bytes().to_vec(),
        DataType::Int64 => i64::try_from(n)
            .map_err(|_| out_of_range())?
            .to_le_bytes()
            .to_vec(),
        DataType::Uint32 => u32::try_from(n)
            .map_err(|_| out_of_range())?
            .to_le_bytes()
            .to_vec(),
        DataType::Int32 => i32::try_from(n)
            .map_err(|_| out_of_range())?
            .to_le_bytes()
            .to_vec(),
        _ => n.to_string().into_bytes(),
    })
}

/// One control input's tensor: one value per row.
fn control(plan: &SequencePlan, index: usize, formed: &Formed) -> Result<Tensor> {
    let c = &plan.controls[index];
    let mut shape = c.shape.clone();
    if plan.max_batch_size > 0 {
        shape[0] = formed.rows as i64;
    }
    let member_at = |row: usize| formed.members.iter().find(|m| m.row == row);
    let (datatype, data) = match &c.fill {
        Fill::Flag(kind, flag) => {
            let mut bytes = Vec::with_capacity(formed.rows * flag.values[0].len());
            for row in 0..formed.rows {
                let on = member_at(row).is_some_and(|m| match kind {
                    ControlKind::Start => m.pending.start,
                    ControlKind::End => m.pending.end,
                    ControlKind::Ready | ControlKind::CorrId => true,
                });
                bytes.extend_from_slice(&flag.values[usize::from(on)]);
            }
            (flag.datatype, TensorData::Raw(bytes))
        }
        Fill::CorrId(dt) => {
            let rows = (0..formed.rows).map(|row| match member_at(row) {
                Some(m) => id_bytes(*dt, &m.id).map_err(EngineError::Internal),
                None => Ok(match dt.size() {
                    Some(size) => vec![0; size],
                    None => Vec::new(),
                }),
            });
            let rows = rows.collect::<Result<Vec<_>>>()?;
            let data = match dt.size() {
                Some(_) => TensorData::Raw(rows.concat()),
                None => TensorData::Bytes(rows),
            };
            (*dt, data)
        }
    };
    Ok(Tensor::new(c.name.clone(), datatype, shape, data)?)
}

/// Joins one tensor per row (a member's, or zeros shaped like the first member's in null rows).
fn rows_of(formed: &Formed, pick: impl Fn(&Member) -> Option<&Tensor>) -> Result<Tensor> {
    let first = formed
        .members
        .first()
        .and_then(&pick)
        .ok_or_else(|| EngineError::Internal("a sequence batch without its tensors".into()))?;
    if formed.rows == 1 && formed.members.len() == 1 {
        return Ok(first.clone());
    }
    let null = Tensor::zeros(first.name.clone(), first.datatype, first.shape.clone())?;
    let parts = (0..formed.rows)
        .map(|row| {
            let member = formed.members.iter().find(|m| m.row == row);
            match member.map(&pick) {
                Some(Some(t)) => Ok(t),
                Some(None) => Err(EngineError::Internal(format!(
                    "a sequence batch row lacks '{}'",
                    first.name
                ))),
                None => Ok(&null),
            }
        })
        .collect::<Result<Vec<&Tensor>>>()?;
    batcher::join(first, &parts)
}

/// The batch's inputs: the requests', the controls, the states.
pub(crate) fn inputs(plan: &SequencePlan, formed: &Formed) -> Result<Vec<Tensor>> {
    let first = formed
        .members
        .first()
        .ok_or_else(|| EngineError::Internal("empty sequence batch".into()))?;
    let mut out =
        Vec::with_capacity(first.pending.inputs.len() + plan.controls.len() + plan.states.len());
    for t in &first.pending.inputs {
        out.push(rows_of(formed, |m| {
            m.pending.inputs.iter().find(|i| i.name == t.name)
        })?);
    }
    for index in 0..plan.controls.len() {
        out.push(control(plan, index, formed)?);
    }
    for (index, _) in plan.states.iter().enumerate() {
        out.push(rows_of(formed, |m| m.state.get(index))?);
    }
    Ok(out)
}

/// The outputs a member gets when it names none: the model's, but for the state outputs.
fn default_outputs(plan: &SequencePlan, signature: &ModelSignature) -> Vec<String> {
    signature
        .outputs
        .iter()
        .filter(|o| !plan.is_state_output(&o.name))
        .map(|o| o.name.clone())
        .collect()
}

/// The outputs the batch fetches: those its members asked for and the state outputs.
pub(crate) fn fetched(
    plan: &SequencePlan,
    signature: &ModelSignature,
    formed: &Formed,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for m in &formed.members {
        let asked = if m.pending.outputs.is_empty() {
            default_outputs(plan, signature)
        } else {
            m.pending.outputs.clone()
        };
        for name in asked {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    for s in &plan.states {
        if !names.contains(&s.output) {
            names.push(s.output.clone());
        }
    }
    names
}

/// Splits the batch's outputs by row: for each member, in member order, the outputs its client
/// asked for and the state its sequence keeps (named as the state inputs).
pub(crate) fn split(
    model: &str,
    plan: &SequencePlan,
    signature: &ModelSignature,
    formed: &Formed,
    outputs: Vec<Tensor>,
) -> Result<Vec<(Vec<Tensor>, Vec<Tensor>)>> {
    let mut per_row = if plan.max_batch_size > 0 {
        batcher::split(model, outputs, &vec![1; formed.rows])?
    } else {
        vec![outputs]
    };
    formed
        .members
        .iter()
        .map(|m| {
            let row = per_row
                .get_mut(m.row)
                .map(std::mem::take)
                .ok_or_else(|| EngineError::Internal("a sequence batch row went missing".into()))?;
            let asked = if m.pending.outputs.is_empty() {
                default_outputs(plan, signature)
            } else {
                m.pending.outputs.clone()
            };
            let state = plan
                .states
                .iter()
                .map(|s| {
                    let mut t = row
                        .iter()
                        .find(|t| t.name == s.output)
                        .cloned()
                        .ok_or_else(|| EngineError::ModelFailed {
                            model: model.to_string(),
                            reason: format!("state output '{}' missing from the results", s.output),
                        })?;
                    t.name = s.input.clone();
                    Ok(t)
                })
                .collect::<Result<Vec<_>>>()?;
            let answer = asked
                .iter()
                .filter_map(|name| row.iter().find(|t| t.name == *name).cloned())
                .collect();
            Ok((answer, state))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence_config::{ControlPlan, Flag, StatePlan, Strategy};
    use std::time::{Duration, Instant};

    fn plan(max_batch_size: usize) -> SequencePlan {
        let flag = Flag {
            datatype: DataType::Int32,
            values: [0i32.to_le_bytes().to_vec(), 1i32.to_le_bytes().to_vec()],
        };
        let b = if max_batch_size > 0 {
            vec![1, 1]
        } else {
            vec![1]
        };
        SequencePlan {
            strategy: Strategy::Direct {
                delay: Duration::ZERO,
                min_utilization: 0.0,
            },
            preferred: vec![],
            idle: Duration::from_secs(1),
            max_batch_size,
            controls: vec![
                ControlPlan {
                    name: "start".into(),
                    fill: Fill::Flag(ControlKind::Start, flag.clone()),
                    shape: b.clone(),
                },
                ControlPlan {
                    name: "ready".into(),
                    fill: Fill::Flag(ControlKind::Ready, flag),
                    shape: b.clone(),
                },
                ControlPlan {
                    name: "corrid".into(),
                    fill: Fill::CorrId(DataType::Int64),
                    shape: b.clone(),
                },
            ],
            states: vec![StatePlan {
                input: "acc_in".into(),
                output: "acc_out".into(),
                datatype: DataType::Fp32,
                initial_shape: b,
            }],
        }
    }

    fn member(id: u64, row: usize, x: f32, start: bool, acc: f32) -> Member {
        let (reply, _) = tokio::sync::oneshot::channel();
        Member {
            id: CorrelationId::Int(id),
            row,
            pending: Pending {
                inputs: vec![Tensor::from_f32("x", vec![1, 1], &[x]).unwrap()],
                outputs: vec![],
                start,
                end: false,
                enqueued: Instant::now(),
                reply,
            },
            state: vec![Tensor::from_f32("acc_in", vec![1, 1], &[acc]).unwrap()],
        }
    }

    fn ints(t: &Tensor) -> Vec<i64> {
        match &t.data {
            TensorData::Raw(b) if t.datatype == DataType::Int32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
            TensorData::Raw(b) => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            TensorData::Bytes(_) => panic!("bytes"),
        }
    }

    #[test]
    fn direct_rows_carry_controls_and_null_rows_are_not_ready() {
        let p = plan(4);
        // Slots 0 and 2 are ready; slot 1 is a null row.
        let formed = Formed {
            rows: 3,
            members: vec![member(7, 0, 1.5, true, 0.0), member(9, 2, 2.5, false, 10.0)],
            group: Some(0),
        };
        let t = inputs(&p, &formed).unwrap();
        let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["x", "start", "ready", "corrid", "acc_in"]);
        assert_eq!(t[0].shape, vec![3, 1]);
        assert_eq!(t[0].to_f32().unwrap(), vec![1.5, 0.0, 2.5]);
        assert_eq!(ints(&t[1]), vec![1, 0, 0]);
        assert_eq!(ints(&t[2]), vec![1, 0, 1]);
        assert_eq!(ints(&t[3]), vec![7, 0, 9]);
        assert_eq!(t[4].to_f32().unwrap(), vec![0.0, 0.0, 10.0]);

        let sig = ModelSignature {
            inputs: vec![],
            outputs: ["acc_out", "sum"]
                .iter()
                .map(|n| crate::signature::TensorSpec {
                    name: n.to_string(),
                    datatype: DataType::Fp32,
                    shape: vec![-1, 1],
                })
                .collect(),
            metadata: Default::default(),
        };
        assert_eq!(fetched(&p, &sig, &formed), ["sum", "acc_out"]);
        let outputs = vec![
            Tensor::from_f32("sum", vec![3, 1], &[1.5, 0.0, 12.5]).unwrap(),
            Tensor::from_f32("acc_out", vec![3, 1], &[1.5, 0.0, 12.5]).unwrap(),
        ];
        let rows = split("m", &p, &sig, &formed, outputs).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].0[0].name, "sum");
        assert_eq!(rows[1].0[0].to_f32().unwrap(), vec![12.5]);
        assert_eq!(rows[1].0.len(), 1, "state outputs only when asked for");
        assert_eq!(rows[1].1[0].name, "acc_in");
        assert_eq!(rows[1].1[0].to_f32().unwrap(), vec![12.5]);
    }

    #[test]
    fn ids_must_fit_the_corrid_control() {
        let p = plan(4);
        assert!(check_id(&p, "m", &CorrelationId::Int(5)).is_ok());
        let e = check_id(&p, "m", &CorrelationId::Str("abc".into())).unwrap_err();
        assert!(e.to_string().contains("integer ids only"), "{e}");
        let e = check_id(&p, "m", &CorrelationId::Int(u64::MAX)).unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");
        assert_eq!(
            id_bytes(DataType::Bytes, &CorrelationId::Int(42)).unwrap(),
            b"42"
        );
    }
}
