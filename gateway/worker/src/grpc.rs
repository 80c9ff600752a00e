//! KServe v2 over gRPC on a worker, for direct-mode clients (`tritonclient.grpc` with the token
//! from `/assign` as `authorization: Bearer` metadata) on a listener of its own, with the
//! worker's certificate.
//!
//! The messages, their conversion to the gateway's tensors and the error → status mapping are
//! the gateway's (`infergate_server::grpc`); what differs is what runs a request: the worker has no catalog
//! or keys, so a call is admitted by the direct token check the HTTP path uses
//! ([`Node::admit`]: a token for another model is PERMISSION_DENIED, a forged, expired or
//! missing one UNAUTHENTICATED) and runs on the worker's engine. Model metadata, configuration,
//! statistics, streams and model control stay on the manager (UNIMPLEMENTED here, saying so);
//! shared memory is for callers on the manager's own host, never a worker's.

use super::node::{Node, Peer};
use infergate_engine::ModelState;
use infergate_kserve::credentials::key_headers;
use infergate_kserve::proto::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
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
use infergate_kserve::{convert, status::status};
use infergate_service::error::ApiResult;
use infergate_service::infer::Request as InferRequest;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status, Streaming};

/// The gRPC service as a router for the worker's TLS listener (which marks each connection's
/// [`Peer`] in the request extensions).
pub(super) fn router(node: Arc<Node>, max_request_bytes: usize) -> axum::Router {
    let service = GrpcInferenceServiceServer::new(WorkerService { node })
        .max_decoding_message_size(max_request_bytes)
        .max_encoding_message_size(usize::MAX);
    tonic::service::Routes::new(service)
        .into_axum_router()
        .layer(axum::middleware::map_response(
            infergate_kserve::status::oversized_as_resource_exhausted,
        ))
}

struct WorkerService {
    node: Arc<Node>,
}

/// The connection's peer; a request that reached the service without one (never, through
/// [`router`]) is treated as a direct client, which needs a token.
fn peer<T>(request: &Request<T>) -> Peer {
    request
        .extensions()
        .get::<Peer>()
        .copied()
        .unwrap_or(Peer { cluster: false })
}

fn served_by_manager(what: &str) -> Status {
    Status::unimplemented(format!(
        "{what} is answered by the manager; a worker serves ModelInfer and ModelReady to direct clients"
    ))
}

impl WorkerService {
    async fn infer(
        &self,
        peer: Peer,
        request: Request<ModelInferRequest>,
    ) -> ApiResult<ModelInferResponse> {
        let headers = key_headers(request.metadata());
        let message = request.into_inner();
        let version = convert::version(&message.model_version)?;
        let record = self
            .node
            .admit(peer, &headers, &message.model_name, version)
            .await?;
        let document = convert::request(&message);
        let inputs = convert::decode_inputs(&message)?;
        // The request's raw bytes are copied into the inputs: free them before the model runs.
        drop(message);
        let inferred = self
            .node
            .execute(&record, InferRequest::kserve(&document, inputs)?)
            .await?;
        Ok(convert::response(inferred, document.id.unwrap_or_default()))
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for WorkerService {
    async fn server_live(
        &self,
        _request: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    /// False while the worker drains on SIGTERM.
    async fn server_ready(
        &self,
        _request: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: !self.node.is_draining(),
        }))
    }

    /// Needs a token for the model, like inference; true once the version is loaded here.
    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let peer = peer(&request);
        let headers = key_headers(request.metadata());
        let r = request.get_ref();
        let ready = async {
            let version = convert::version(&r.version)?;
            let record = self.node.admit(peer, &headers, &r.name, version).await?;
            Ok(self.node.state(&record) == ModelState::Ready)
        };
        let ready = ready.await.map_err(status)?;
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _request: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse {
            name: infergate_kserve::SERVER_NAME.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: Vec::new(),
        }))
    }

    async fn model_metadata(
        &self,
        _request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        Err(served_by_manager("ModelMetadata"))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let _counted = self.node.begin();
        let started = Instant::now();
        let answer = self.infer(peer(&request), request).await.map_err(status)?;
        self.node.answered(started.elapsed());
        Ok(Response::new(answer))
    }

    type ModelStreamInferStream = infergate_kserve::ResponseStream;

    async fn model_stream_infer(
        &self,
        _request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        Err(served_by_manager("ModelStreamInfer"))
    }

    async fn model_config(
        &self,
        _request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        Err(served_by_manager("ModelConfig"))
    }

    async fn model_statistics(
        &self,
        _request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        Err(served_by_manager("ModelStatistics"))
    }

    async fn repository_index(
        &self,
        _request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        Err(served_by_manager("RepositoryIndex"))
    }

    async fn repository_model_load(
        &self,
        _request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        Err(served_by_manager("RepositoryModelLoad"))
    }

    async fn repository_model_unload(
        &self,
        _request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        Err(served_by_manager("RepositoryModelUnload"))
    }

    async fn system_shared_memory_status(
        &self,
        _request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<SystemSharedMemoryStatusResponse>, Status> {
        Err(served_by_manager("SystemSharedMemoryStatus"))
    }

    async fn system_shared_memory_register(
        &self,
        _request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<SystemSharedMemoryRegisterResponse>, Status> {
        Err(served_by_manager("SystemSharedMemoryRegister"))
    }

    async fn system_shared_memory_unregister(
        &self,
        _request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<SystemSharedMemoryUnregisterResponse>, Status> {
        Err(served_by_manager("SystemSharedMemoryUnregister"))
    }

    async fn cuda_shared_memory_status(
        &self,
        _request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<CudaSharedMemoryStatusResponse>, Status> {
        Err(served_by_manager("CudaSharedMemoryStatus"))
    }

    async fn cuda_shared_memory_register(
        &self,
        _request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<CudaSharedMemoryRegisterResponse>, Status> {
        Err(served_by_manager("CudaSharedMemoryRegister"))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _request: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<CudaSharedMemoryUnregisterResponse>, Status> {
        Err(served_by_manager("CudaSharedMemoryUnregister"))
    }

    async fn trace_setting(
        &self,
        _request: Request<TraceSettingRequest>,
    ) -> Result<Response<TraceSettingResponse>, Status> {
        Err(served_by_manager("TraceSetting"))
    }
}
