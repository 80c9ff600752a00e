//! Decoupled models on the KServe gRPC stream (Triton's decoupled transaction policy): a request
//! is answered by zero or more responses, every response carrying Triton's `triton_final_response`
//! parameter, true on the last one. With the request parameter
//! `triton_enable_empty_final_response` (tritonclient's `enable_empty_final_response=True`) the
//! last one is an empty response of its own, as Triton sends it.
//!
//! - A chat model (GGUF) takes the inputs of Triton's LLM backends: `text_input` (BYTES, the
//!   prompt, continued as it is), optional `stream` (BOOL, default true: one response per
//!   generated piece of text; false: one response with the whole text), `max_tokens` (an
//!   integer) and `sampling_parameters` (BYTES, JSON: `temperature`, `top_p`, `top_k`, `seed`,
//!   `stop`, `max_tokens`, ... as the OpenAI endpoints take them), and answers `text_output`
//!   (BYTES). The prompt is not repeated in the output.
//! - A pipeline marked `decoupled` runs as any pipeline, and its answer goes out as the results
//!   it holds (`infergate_service::infer::results`).
//!
//! Unary calls to a decoupled model are refused (`super::infer`), as Triton refuses them.

use super::auth::{self, Presented};
use infergate_engine::{DataType, Tensor, TensorData};
use infergate_kserve::proto::infer_parameter::ParameterChoice;
use infergate_kserve::proto::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use infergate_kserve::{convert, PROTOCOL_LABEL};
use infergate_llm::Event;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::{self, Inferred, Target};
use infergate_service::phases::Outcome;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use infergate_store::models::ModelRecord;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tonic::Status;

/// The parameter every stream response carries: true on a request's last response.
const FINAL: &str = "triton_final_response";
/// The request parameter asking for the last response to be an empty one of its own.
const EMPTY_FINAL: &str = "triton_enable_empty_final_response";

type Out = mpsc::Sender<Result<ModelStreamInferResponse, Status>>;

/// Sets a response's final flag.
pub fn mark_final(response: &mut ModelInferResponse, last: bool) {
    response.parameters.insert(
        FINAL.to_string(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(last)),
        },
    );
}

/// The stream response for a failed request: its error, with the request's id and model so
/// the client can match it, and the final flag (nothing follows).
pub fn failed(
    e: ApiError,
    id: String,
    model_name: String,
    model_version: String,
) -> ModelStreamInferResponse {
    e.log("grpc");
    let mut response = ModelInferResponse {
        model_name,
        model_version,
        id,
        ..Default::default()
    };
    mark_final(&mut response, true);
    ModelStreamInferResponse {
        error_message: e.message,
        infer_response: Some(response),
    }
}

/// One request to a decoupled model, answered on `out`.
pub async fn serve(state: &AppState, presented: &Presented, message: ModelInferRequest, out: &Out) {
    let started = Instant::now();
    let (id, name, version) = (
        message.id.clone(),
        message.model_name.clone(),
        message.model_version.clone(),
    );
    let empty_final = matches!(
        message
            .parameters
            .get(EMPTY_FINAL)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    );
    let mut sender = Sender {
        out,
        held: None,
        empty_final,
        id: id.clone(),
    };
    let result = run(state, presented, message, &mut sender).await;
    let (model, model_version) = match &result {
        Ok(Some((model, version))) => (model.clone(), version.clone()),
        _ => (String::new(), String::new()),
    };
    let status = match result {
        Ok(_) => {
            sender.finish(&name, &version).await;
            200
        }
        Err(e) => {
            let status = infergate_kserve::http_error::status_of(e.kind).as_u16();
            // Results already sent stay sent; the error is the request's last response.
            if let Some(held) = sender.held.take() {
                let _ = out.send(Ok(stream_response(held))).await;
            }
            let _ = out.send(Ok(failed(e, id, name, version))).await;
            status
        }
    };
    state.metrics().inference(
        &model,
        &model_version,
        PROTOCOL_LABEL,
        status,
        started.elapsed(),
    );
}

/// Sends a request's responses, holding the latest back until the next comes (or the end),
/// so that the last one can carry the final flag.
struct Sender<'a> {
    out: &'a Out,
    held: Option<ModelInferResponse>,
    empty_final: bool,
    id: String,
}

impl Sender<'_> {
    /// Queues a response; false when the client is gone.
    async fn send(&mut self, mut response: ModelInferResponse) -> bool {
        response.id = self.id.clone();
        mark_final(&mut response, false);
        match self.held.replace(response) {
            Some(previous) => self.out.send(Ok(stream_response(previous))).await.is_ok(),
            None => !self.out.is_closed(),
        }
    }

    /// The last response: the one held, flagged final, or an empty final one.
    async fn finish(&mut self, model_name: &str, model_version: &str) {
        let empty = || {
            let mut response = ModelInferResponse {
                model_name: model_name.to_string(),
                model_version: model_version.to_string(),
                id: self.id.clone(),
                ..Default::default()
            };
            mark_final(&mut response, true);
            response
        };
        let last = match self.held.take() {
            Some(held) if self.empty_final => {
                let _ = self.out.send(Ok(stream_response(held))).await;
                empty()
            }
            Some(mut held) => {
                mark_final(&mut held, true);
                held
            }
            None => empty(),
        };
        let _ = self.out.send(Ok(stream_response(last))).await;
    }
}

fn stream_response(response: ModelInferResponse) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(response),
    }
}

/// Runs the request, sending its results; the model and version that served (for the
/// metrics).
async fn run(
    state: &AppState,
    presented: &Presented,
    message: ModelInferRequest,
    sender: &mut Sender<'_>,
) -> ApiResult<Option<(String, String)>> {
    let (caller, _admission) = auth::admit(state, presented, Scope::Infer).await?;
    let version = convert::version(&message.model_version)?;
    let target = infer::resolve(state, &message.model_name, version)?;
    match target {
        Target::Model(record) => {
            generate(state, &caller, &record, &message, sender).await?;
            Ok(Some((record.name.clone(), record.version.to_string())))
        }
        Target::Pipeline(pipeline) => {
            let request = convert::request(&message);
            let inputs = convert::decode_inputs(&message)?;
            drop(message);
            let request_in = infer::Request::kserve(&request, inputs)?;
            let target = Target::Pipeline(pipeline.clone());
            let mut inferred = infer::run(state, &caller, target, version, request_in).await?;
            let passage = std::mem::take(&mut inferred.passage);
            let Inferred {
                model,
                version,
                outputs,
                ..
            } = inferred;
            for outputs in infer::results::split(&pipeline.record.name, outputs)? {
                let result = Inferred {
                    model: model.clone(),
                    version,
                    outputs,
                    served: None,
                    times: None,
                    passage: Default::default(),
                };
                if !sender.send(convert::response(result, String::new())).await {
                    return Ok(None);
                }
            }
            passage.finish(Outcome::Sent);
            Ok(None)
        }
    }
}

/// A chat model's generation, one response per piece of text (or one for all of it when the
/// request's `stream` input is false).
async fn generate(
    state: &AppState,
    caller: &Caller,
    record: &Arc<ModelRecord>,
    message: &ModelInferRequest,
    sender: &mut Sender<'_>,
) -> ApiResult<()> {
    let inputs = convert::decode_inputs(message)?;
    let (document, stream) = generation_request(&record.name, &inputs)?;
    let (mut generation, mut passage) =
        crate::api::openai_llm::start(state, caller, record, document).await?;
    let tokens = state.metrics().token_counter(&record.name, PROTOCOL_LABEL);
    let _in_progress = state.metrics().generation_started();
    let mut whole = String::new();
    let respond = |text: String| {
        let tensor = Tensor {
            name: "text_output".into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: TensorData::Bytes(vec![text.into_bytes()]),
        };
        convert::response(
            Inferred {
                model: record.name.clone(),
                version: record.version,
                outputs: vec![tensor],
                served: None,
                times: None,
                passage: Default::default(),
            },
            String::new(),
        )
    };
    while let Some(event) = generation.events.recv().await {
        match event {
            Event::Text { text, .. } => {
                tokens.inc();
                passage.generated(1);
                let text = passage.text(0, text)?;
                if text.is_empty() {
                    continue;
                }
                if !stream {
                    whole.push_str(&text);
                } else if !sender.send(respond(text)).await {
                    // The client is gone: dropping the receiver stops the generation; the
                    // passage, dropped unfinished, settles what was generated.
                    return Ok(());
                }
            }
            Event::Done(done) => {
                let tail = passage.end_of_text(0)?;
                if stream {
                    if !tail.is_empty() {
                        sender.send(respond(tail)).await;
                    }
                } else {
                    whole.push_str(&tail);
                    sender.send(respond(whole)).await;
                }
                passage.set_generated(u64::from(done.completion_tokens));
                passage.finish(Outcome::Sent);
                return Ok(());
            }
            Event::Error(message) => {
                let e = ApiError::internal(message);
                passage.finish(Outcome::Failed(e.kind));
                return Err(e);
            }
        }
    }
    Err(ApiError::internal("the generation ended without finishing"))
}

/// The OpenAI-style document a chat model's request stands for, and whether to stream.
fn generation_request(model: &str, inputs: &[Tensor]) -> ApiResult<(Value, bool)> {
    let named = |name: &str| inputs.iter().find(|t| t.name == name);
    let text = |t: &Tensor| -> ApiResult<String> {
        match &t.data {
            TensorData::Bytes(items) if items.len() == 1 => String::from_utf8(items[0].clone())
                .map_err(|_| {
                    ApiError::bad_request(format!("input '{}' must be UTF-8 text", t.name))
                }),
            _ => Err(ApiError::bad_request(format!(
                "input '{}' must be one BYTES element",
                t.name
            ))),
        }
    };
    if let Some(unknown) = inputs.iter().find(|t| {
        !matches!(
            t.name.as_str(),
            "text_input"
                | "stream"
                | "max_tokens"
                | "sampling_parameters"
                | "exclude_input_in_output"
        )
    }) {
        return Err(ApiError::bad_request(format!(
            "unexpected inference input '{}' for model '{model}': a chat model takes text_input, and optionally stream, max_tokens, sampling_parameters",
            unknown.name
        )));
    }
    let prompt = named("text_input").ok_or_else(|| {
        ApiError::bad_request(format!(
            "expected input 'text_input' (BYTES, the prompt) for model '{model}'"
        ))
    })?;
    let mut document = match named("sampling_parameters") {
        Some(t) => match serde_json::from_str::<Value>(&text(t)?) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(ApiError::bad_request(
                    "input 'sampling_parameters' must be a JSON object",
                ))
            }
        },
        None => Map::new(),
    };
    for refused in ["prompt", "messages", "n", "logprobs", "stream"] {
        document.remove(refused);
    }
    document.insert("prompt".into(), Value::String(text(prompt)?));
    if let Some(t) = named("max_tokens") {
        let n = first_integer(t).filter(|n| *n > 0).ok_or_else(|| {
            ApiError::bad_request("input 'max_tokens' must be a positive integer")
        })?;
        document.insert("max_tokens".into(), Value::from(n));
    }
    let stream = match named("stream").map(|t| &t.data) {
        None => true,
        Some(TensorData::Raw(bytes)) if bytes.len() == 1 => bytes[0] != 0,
        Some(_) => return Err(ApiError::bad_request("input 'stream' must be one BOOL")),
    };
    Ok((Value::Object(document), stream))
}

/// The first element of an integer tensor (INT32, INT64, UINT32, UINT64).
fn first_integer(t: &Tensor) -> Option<i64> {
    let TensorData::Raw(raw) = &t.data else {
        return None;
    };
    match t.datatype {
        DataType::Int32 => raw
            .first_chunk::<4>()
            .map(|b| i64::from(i32::from_le_bytes(*b))),
        DataType::Uint32 => raw
            .first_chunk::<4>()
            .map(|b| i64::from(u32::from_le_bytes(*b))),
        DataType::Int64 => raw.first_chunk::<8>().map(|b| i64::from_le_bytes(*b)),
        DataType::Uint64 => raw
            .first_chunk::<8>()
            .and_then(|b| i64::try_from(u64::from_le_bytes(*b)).ok()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(name: &str, text: &str) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: TensorData::Bytes(vec![text.as_bytes().to_vec()]),
        }
    }

    #[test]
    fn triton_llm_inputs_become_an_openai_document() {
        let inputs = vec![
            bytes("text_input", "Once upon"),
            bytes(
                "sampling_parameters",
                r#"{"temperature": 0, "max_tokens": 9, "n": 3}"#,
            ),
            Tensor {
                name: "stream".into(),
                datatype: DataType::Bool,
                shape: vec![1],
                data: TensorData::Raw(vec![0]),
            },
        ];
        let (document, stream) = generation_request("m", &inputs).unwrap();
        assert!(!stream);
        assert_eq!(document["prompt"], "Once upon");
        assert_eq!(document["max_tokens"], 9);
        assert!(document.get("n").is_none());
        let e = generation_request("m", &[bytes("prompt", "x")]).unwrap_err();
        assert!(
            e.message.contains("unexpected inference input 'prompt'"),
            "{}",
            e.message
        );
        let e = generation_request("m", &[]).unwrap_err();
        assert!(e.message.contains("text_input"), "{}", e.message);
    }
}
