//! The unary RPCs of `inference.GRPCInferenceService`, with the HTTP handlers' semantics:
//! liveness and readiness need no key; everything else needs an `infer`-scoped key and passes
//! the key's limits; models and pipelines resolve, infer and are described by the inference
//! service (`infergate_service::infer`) that the HTTP KServe handlers call too. The model
//! repository and shared-memory RPCs are [`control`]'s.

use super::auth::{self, Presented};
use super::{control, describe, stream};
use infergate_kserve::proto::grpc_inference_service_server::GrpcInferenceService;
use infergate_kserve::proto::{
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse,
    CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse,
    CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse, ModelConfigRequest,
    ModelConfigResponse, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelMetadataResponse, ModelReadyRequest, ModelReadyResponse, ModelStatisticsRequest,
    ModelStatisticsResponse, RepositoryIndexRequest, RepositoryIndexResponse,
    RepositoryModelLoadRequest, RepositoryModelLoadResponse, RepositoryModelUnloadRequest,
    RepositoryModelUnloadResponse, ServerLiveRequest, ServerLiveResponse, ServerMetadataRequest,
    ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse,
    SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse,
    SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse, TraceSettingRequest,
    TraceSettingResponse,
};
use infergate_kserve::status::status;
use infergate_kserve::{convert, ResponseStream};
use infergate_limits::Admission;
use infergate_service::error::Kind;
use infergate_service::infer;
use infergate_service::infer::describe as triton;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use std::sync::Arc;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

pub struct InferenceService {
    state: Arc<AppState>,
}

impl InferenceService {
    pub fn new(state: Arc<AppState>) -> InferenceService {
        InferenceService { state }
    }

    /// Checks a call's key and limits; the admission is held until the handler returns.
    async fn admit<T>(&self, request: &Request<T>) -> Result<Admission, Status> {
        let presented = Presented::of(&self.state, request);
        auth::admit(&self.state, &presented, Scope::Infer)
            .await
            .map(|(_, admission)| admission)
            .map_err(status)
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(
        &self,
        _request: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    /// False while the server drains on shutdown.
    async fn server_ready(
        &self,
        _request: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.state.is_ready(),
        }))
    }

    /// Unknown model: NOT_FOUND; known but not servable (its load failed, a pipeline's plugin
    /// or model is missing): `ready: false`, where HTTP answers 503.
    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let _admission = self.admit(&request).await?;
        let r = request.get_ref();
        let target = convert::version(&r.version)
            .and_then(|version| infer::resolve(&self.state, &r.name, version))
            .map_err(status)?;
        let ready = match infer::readiness(&self.state, &target) {
            Ok(()) => true,
            Err(e) if e.kind == Kind::Overloaded => false,
            Err(e) => return Err(status(e)),
        };
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        request: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        let _admission = self.admit(&request).await?;
        Ok(Response::new(ServerMetadataResponse {
            name: infergate_kserve::SERVER_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: infergate_kserve::EXTENSIONS
                .iter()
                .map(|e| e.to_string())
                .collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let _admission = self.admit(&request).await?;
        let r = request.get_ref();
        let target = convert::version(&r.version)
            .and_then(|version| infer::resolve(&self.state, &r.name, version))
            .map_err(status)?;
        let description = infer::describe(&self.state, &target);
        Ok(Response::new(describe::metadata(description)))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        // Only while traces are exported (in the log too, naming the trace): a call has no span
        // of its own otherwise.
        let span = infergate_telemetry::logged_span!("grpc request", method = "ModelInfer");
        let model = Some(request.get_ref().model_name.as_str())
            .filter(|m| !m.is_empty() && infergate_telemetry::sampling::per_model());
        let trace = self.continue_trace(&span, &presented, request.metadata(), model);
        let mut response = super::infer::infer(&self.state, &presented, request.into_inner())
            .instrument(span)
            .await
            .map(Response::new)
            .map_err(status)?;
        if let Some(trace) = trace.and_then(|t| MetadataValue::try_from(t.as_bytes()).ok()) {
            response
                .metadata_mut()
                .insert(infergate_telemetry::w3c::TRACE_ID_METADATA, trace);
        }
        Ok(response)
    }

    type ModelStreamInferStream = ResponseStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let presented = Presented::of(&self.state, &request);
        // A stream without a valid key is refused as a whole; each request is checked again.
        presented
            .authorize(&self.state, Scope::Infer)
            .map_err(status)?;
        // The call's span, while traces are exported: each request of the stream is a child.
        let span = infergate_telemetry::logged_span!("grpc stream", method = "ModelStreamInfer");
        let trace = self.continue_trace(&span, &presented, request.metadata(), None);
        let responses = stream::open(self.state.clone(), presented, request.into_inner(), span);
        let mut response = Response::new(responses);
        if let Some(trace) = trace.and_then(|t| MetadataValue::try_from(t.as_bytes()).ok()) {
            response
                .metadata_mut()
                .insert(infergate_telemetry::w3c::TRACE_ID_METADATA, trace);
        }
        Ok(response)
    }

    /// Models only, as over HTTP: a pipeline has no Triton configuration (NOT_FOUND).
    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        let _admission = self.admit(&request).await?;
        let r = request.get_ref();
        let record = convert::version(&r.version)
            .and_then(|version| self.state.catalog().resolve(&r.name, version))
            .map_err(status)?;
        let config = describe::config(&triton::triton_config(&self.state, &record));
        Ok(Response::new(ModelConfigResponse {
            config: Some(config),
        }))
    }

    /// Every model's versions when `name` is empty, a model's versions, or one version.
    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let _admission = self.admit(&request).await?;
        let r = request.get_ref();
        let name = (!r.name.is_empty()).then_some(r.name.as_str());
        let records = convert::version(&r.version)
            .and_then(|version| triton::stats_records(&self.state, name, version))
            .map_err(status)?;
        Ok(Response::new(ModelStatisticsResponse {
            model_stats: records
                .iter()
                .map(|record| describe::statistics(&self.state, record))
                .collect(),
        }))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::repository_index(&self.state, &presented, request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::load(&self.state, &presented, request.get_ref())
            .await
            .map(|()| Response::new(RepositoryModelLoadResponse {}))
            .map_err(status)
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::unload(&self.state, &presented, request.get_ref())
            .await
            .map(|()| Response::new(RepositoryModelUnloadResponse {}))
            .map_err(status)
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<SystemSharedMemoryStatusResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::shm_status(&self.state, &presented, request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<SystemSharedMemoryRegisterResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::shm_register(&self.state, &presented, request.get_ref())
            .await
            .map(|()| Response::new(SystemSharedMemoryRegisterResponse {}))
            .map_err(status)
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<SystemSharedMemoryUnregisterResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::shm_unregister(&self.state, &presented, &request.get_ref().name)
            .await
            .map(|()| Response::new(SystemSharedMemoryUnregisterResponse {}))
            .map_err(status)
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<CudaSharedMemoryStatusResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::cuda_status(&self.state, &presented, request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<CudaSharedMemoryRegisterResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        let name = request.get_ref().name.clone();
        control::cuda_register_or_unregister(&self.state, &presented, Some(&name))
            .await
            .map(|()| Response::new(CudaSharedMemoryRegisterResponse {}))
            .map_err(status)
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<CudaSharedMemoryUnregisterResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::cuda_register_or_unregister(&self.state, &presented, None)
            .await
            .map(|()| Response::new(CudaSharedMemoryUnregisterResponse {}))
            .map_err(status)
    }

    async fn trace_setting(
        &self,
        request: Request<TraceSettingRequest>,
    ) -> Result<Response<TraceSettingResponse>, Status> {
        let presented = Presented::of(&self.state, &request);
        control::trace_setting(&self.state, &presented, request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }
}

/// The W3C trace context among a call's metadata, as headers (the rest is not copied).
impl InferenceService {
    /// Makes the trace a call's metadata names the parent of its `span` (the caller's sampled
    /// flag trusted as over HTTP); `model` decides by its trace settings when set. The trace
    /// id, for the answer's metadata ([`infergate_telemetry::w3c::record_ids`]).
    fn continue_trace(
        &self,
        span: &tracing::Span,
        presented: &Presented,
        metadata: &MetadataMap,
        model: Option<&str>,
    ) -> Option<http::HeaderValue> {
        if !infergate_telemetry::exporting() {
            return None;
        }
        let presents_key =
            infergate_kserve::credentials::presented_key(&presented.headers).is_some();
        let trusted = (self.state.config().tracing.honour_caller_sampling).trusts(presents_key);
        infergate_telemetry::w3c::continue_in(span, &trace_headers(metadata), trusted, model);
        infergate_telemetry::w3c::record_ids(span)
    }
}

fn trace_headers(metadata: &MetadataMap) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for name in [
        infergate_telemetry::w3c::TRACEPARENT,
        infergate_telemetry::w3c::TRACESTATE,
    ] {
        for value in metadata.get_all(name.as_str()) {
            if let Ok(value) = http::HeaderValue::from_bytes(value.as_bytes()) {
                headers.append(name.clone(), value);
            }
        }
    }
    headers
}
