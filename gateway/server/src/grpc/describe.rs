//! Metadata, model configuration and statistics as Triton's protobuf messages, built from what
//! the HTTP endpoints serve (`infer::Description`, the engine's Triton config JSON, the
//! engine's statistics) so both transports describe a model identically.

use infergate_engine::stats::StatDuration;
use infergate_engine::TensorSpec;
use infergate_kserve::proto::model_metadata_response::TensorMetadata;
use infergate_kserve::proto::{
    model_config, model_input, model_instance_group, model_queue_policy, model_sequence_batching,
    model_version_policy, DataType, InferBatchStatistics, InferStatistics, ModelConfig,
    ModelDynamicBatching, ModelInput, ModelInstanceGroup, ModelMetadataResponse, ModelOutput,
    ModelParameter, ModelQueuePolicy, ModelSequenceBatching, ModelStatistics,
    ModelTransactionPolicy, ModelVersionPolicy, StatisticDuration,
};
use infergate_service::catalog::model_key;
use infergate_service::infer::Description;
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use serde_json::Value;
use std::sync::Arc;

fn tensors(specs: Vec<TensorSpec>) -> Vec<TensorMetadata> {
    specs
        .into_iter()
        .map(|s| TensorMetadata {
            name: s.name,
            datatype: s.datatype.name().to_string(),
            shape: s.shape,
        })
        .collect()
}

pub fn metadata(d: Description) -> ModelMetadataResponse {
    ModelMetadataResponse {
        name: d.name,
        versions: d.versions,
        platform: d.platform.to_string(),
        inputs: tensors(d.inputs),
        outputs: tensors(d.outputs),
    }
}

// Readers of the engine's Triton config JSON: a missing field is the protobuf default, as a
// Triton client reading JSON treats it.
fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
fn unsigned(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or_default()
}
fn signed(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or_default()
}
fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or_default()
}
fn list(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}
fn integers(v: &Value, key: &str) -> Vec<i64> {
    list(v, key).iter().filter_map(Value::as_i64).collect()
}
/// A protobuf enum field; 0 (every enum's first value) when the name is unknown.
fn enum_value(known: Option<impl Into<i32>>) -> i32 {
    known.map_or(0, Into::into)
}
fn data_type(v: &Value) -> i32 {
    enum_value(DataType::from_str_name(&text(v, "data_type")))
}

fn version_policy(v: &Value) -> Option<ModelVersionPolicy> {
    use model_version_policy::{All, Latest, PolicyChoice, Specific};
    let choice = if let Some(latest) = v.get("latest") {
        PolicyChoice::Latest(Latest {
            num_versions: unsigned(latest, "num_versions") as u32,
        })
    } else if let Some(specific) = v.get("specific") {
        PolicyChoice::Specific(Specific {
            versions: integers(specific, "versions"),
        })
    } else if v.get("all").is_some() {
        PolicyChoice::All(All {})
    } else {
        return None;
    };
    Some(ModelVersionPolicy {
        policy_choice: Some(choice),
    })
}

fn dynamic_batching(v: &Value) -> ModelDynamicBatching {
    let policy = v.get("default_queue_policy").cloned().unwrap_or_default();
    ModelDynamicBatching {
        preferred_batch_size: integers(v, "preferred_batch_size")
            .into_iter()
            .map(|n| n as i32)
            .collect(),
        max_queue_delay_microseconds: unsigned(v, "max_queue_delay_microseconds"),
        preserve_ordering: flag(v, "preserve_ordering"),
        priority_levels: unsigned(v, "priority_levels"),
        default_priority_level: unsigned(v, "default_priority_level"),
        default_queue_policy: Some(ModelQueuePolicy {
            timeout_action: enum_value(model_queue_policy::TimeoutAction::from_str_name(&text(
                &policy,
                "timeout_action",
            ))),
            default_timeout_microseconds: unsigned(&policy, "default_timeout_microseconds"),
            allow_timeout_override: flag(&policy, "allow_timeout_override"),
            max_queue_size: unsigned(&policy, "max_queue_size") as u32,
        }),
    }
}

fn sequence_batching(v: &Value) -> ModelSequenceBatching {
    use model_sequence_batching::{control, Control, ControlInput, State, StrategyChoice};
    let floats = |c: &Value, key: &str| -> Vec<f32> {
        list(c, key)
            .iter()
            .filter_map(Value::as_f64)
            .map(|f| f as f32)
            .collect()
    };
    let strategy = if let Some(oldest) = v.get("oldest") {
        Some(StrategyChoice::Oldest(
            model_sequence_batching::StrategyOldest {
                max_candidate_sequences: signed(oldest, "max_candidate_sequences") as i32,
                preferred_batch_size: integers(oldest, "preferred_batch_size")
                    .into_iter()
                    .map(|n| n as i32)
                    .collect(),
                max_queue_delay_microseconds: unsigned(oldest, "max_queue_delay_microseconds"),
                preserve_ordering: flag(oldest, "preserve_ordering"),
            },
        ))
    } else {
        v.get("direct").map(|direct| {
            StrategyChoice::Direct(model_sequence_batching::StrategyDirect {
                max_queue_delay_microseconds: unsigned(direct, "max_queue_delay_microseconds"),
                minimum_slot_utilization: direct
                    .get("minimum_slot_utilization")
                    .and_then(Value::as_f64)
                    .unwrap_or_default() as f32,
            })
        })
    };
    ModelSequenceBatching {
        max_sequence_idle_microseconds: unsigned(v, "max_sequence_idle_microseconds"),
        control_input: list(v, "control_input")
            .iter()
            .map(|input| ControlInput {
                name: text(input, "name"),
                control: list(input, "control")
                    .iter()
                    .map(|c| Control {
                        kind: enum_value(control::Kind::from_str_name(&text(c, "kind"))),
                        int32_false_true: integers(c, "int32_false_true")
                            .into_iter()
                            .map(|n| n as i32)
                            .collect(),
                        fp32_false_true: floats(c, "fp32_false_true"),
                        data_type: data_type(c),
                        bool_false_true: list(c, "bool_false_true")
                            .iter()
                            .filter_map(Value::as_bool)
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
        state: list(v, "state")
            .iter()
            .map(|s| State {
                input_name: text(s, "input_name"),
                output_name: text(s, "output_name"),
                data_type: data_type(s),
                dims: integers(s, "dims"),
            })
            .collect(),
        strategy_choice: strategy,
    }
}

/// The engine's Triton configuration JSON (what `GET /v2/models/{m}/config` serves) as the
/// protobuf `ModelConfig`. Warmup samples are not carried (clients do not read them).
pub fn config(v: &Value) -> ModelConfig {
    ModelConfig {
        name: text(v, "name"),
        platform: text(v, "platform"),
        backend: text(v, "backend"),
        version_policy: v.get("version_policy").and_then(version_policy),
        max_batch_size: signed(v, "max_batch_size") as i32,
        input: list(v, "input")
            .iter()
            .map(|t| ModelInput {
                name: text(t, "name"),
                data_type: data_type(t),
                format: enum_value(model_input::Format::from_str_name(&text(t, "format"))),
                dims: integers(t, "dims"),
                is_shape_tensor: flag(t, "is_shape_tensor"),
                allow_ragged_batch: flag(t, "allow_ragged_batch"),
                optional: flag(t, "optional"),
            })
            .collect(),
        output: list(v, "output")
            .iter()
            .map(|t| ModelOutput {
                name: text(t, "name"),
                data_type: data_type(t),
                dims: integers(t, "dims"),
                label_filename: text(t, "label_filename"),
                is_shape_tensor: flag(t, "is_shape_tensor"),
            })
            .collect(),
        instance_group: list(v, "instance_group")
            .iter()
            .map(|g| ModelInstanceGroup {
                name: text(g, "name"),
                count: signed(g, "count") as i32,
                gpus: integers(g, "gpus").into_iter().map(|n| n as i32).collect(),
                kind: enum_value(model_instance_group::Kind::from_str_name(&text(g, "kind"))),
            })
            .collect(),
        default_model_filename: text(v, "default_model_filename"),
        scheduling_choice: v
            .get("dynamic_batching")
            .map(|db| model_config::SchedulingChoice::DynamicBatching(dynamic_batching(db)))
            .or_else(|| {
                v.get("sequence_batching").map(|sb| {
                    model_config::SchedulingChoice::SequenceBatching(sequence_batching(sb))
                })
            }),
        model_transaction_policy: v.get("model_transaction_policy").map(|p| {
            ModelTransactionPolicy {
                decoupled: flag(p, "decoupled"),
            }
        }),
        parameters: v
            .get("parameters")
            .and_then(Value::as_object)
            .map(|map| {
                map.iter()
                    .map(|(name, p)| {
                        let string_value = text(p, "string_value");
                        (name.clone(), ModelParameter { string_value })
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn duration(d: StatDuration) -> Option<StatisticDuration> {
    Some(StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

/// One version's cumulative statistics, as `GET /v2/models/{m}/stats` reports them.
pub fn statistics(state: &AppState, record: &Arc<ModelRecord>) -> ModelStatistics {
    let s = state.engine().stats(&model_key(record)).unwrap_or_default();
    ModelStatistics {
        name: record.name.clone(),
        version: record.version.to_string(),
        last_inference: s.last_inference,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
        }),
        batch_stats: s
            .batch_stats
            .iter()
            .map(|b| InferBatchStatistics {
                batch_size: b.batch_size,
                compute_input: duration(b.compute_input),
                compute_infer: duration(b.compute_infer),
                compute_output: duration(b.compute_output),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_engine::{ModelConfig as EngineConfig, ModelSignature};

    /// Every field the HTTP config carries and the protobuf has arrives with its value.
    #[test]
    fn the_engine_config_json_converts_field_by_field() {
        let engine_config = EngineConfig::from_json(&serde_json::json!({
            "max_batch_size": 8,
            "dynamic_batching": {"preferred_batch_size": [4], "max_queue_delay_microseconds": 100,
                "default_queue_policy": {"timeout_action": "DELAY", "max_queue_size": 16}},
            "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
            "version_policy": {"specific": {"versions": [1, 3]}},
        }))
        .unwrap();
        let signature = ModelSignature {
            inputs: vec![TensorSpec {
                name: "x".into(),
                datatype: infergate_engine::DataType::Int64,
                shape: vec![-1, 128],
            }],
            outputs: vec![TensorSpec {
                name: "y".into(),
                datatype: infergate_engine::DataType::Fp32,
                shape: vec![-1, 384],
            }],
            metadata: Default::default(),
        };
        let c = config(&engine_config.to_triton_json("m", &signature, 1));
        assert_eq!((c.name.as_str(), c.max_batch_size), ("m", 8));
        assert_eq!(c.platform, "onnxruntime_onnx");
        assert_eq!(c.input[0].data_type, DataType::TypeInt64 as i32);
        assert_eq!(c.input[0].dims, [128]);
        assert_eq!(c.output[0].dims, [384]);
        assert_eq!(c.instance_group[0].count, 2);
        assert_eq!(
            c.instance_group[0].kind,
            model_instance_group::Kind::Cpu as i32
        );
        let Some(model_config::SchedulingChoice::DynamicBatching(db)) = c.scheduling_choice else {
            panic!("dynamic batching is lost");
        };
        assert_eq!(db.preferred_batch_size, [4]);
        assert_eq!(db.max_queue_delay_microseconds, 100);
        let policy = db.default_queue_policy.unwrap();
        assert_eq!(
            policy.timeout_action,
            model_queue_policy::TimeoutAction::Delay as i32
        );
        assert_eq!(policy.max_queue_size, 16);
        assert_eq!(
            c.version_policy.unwrap().policy_choice,
            Some(model_version_policy::PolicyChoice::Specific(
                model_version_policy::Specific {
                    versions: vec![1, 3]
                }
            ))
        );
    }
}
