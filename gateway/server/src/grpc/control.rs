//! Triton's model repository, shared-memory and trace extensions over gRPC, with the HTTP
//! routes' semantics (`infergate_service::model_control`, `infergate_service::shared_memory`,
//! `infergate_service::trace_settings`): the index needs an `infer` key, load and unload an
//! `upload` key; shared memory is for loopback callers, each seeing its own regions; CUDA
//! shared memory answers as Triton does on a host without GPUs; reading the trace settings
//! needs an `infer` key, changing them an `admin` key.

use super::auth::{self, Presented};
use infergate_kserve::proto::model_repository_parameter::ParameterChoice;
use infergate_kserve::proto::repository_index_response::ModelIndex;
use infergate_kserve::proto::system_shared_memory_status_response::RegionStatus;
use infergate_kserve::proto::{
    CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse, RepositoryIndexRequest,
    RepositoryIndexResponse, RepositoryModelLoadRequest, RepositoryModelUnloadRequest,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryStatusRequest,
    SystemSharedMemoryStatusResponse, TraceSettingRequest, TraceSettingResponse,
};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::model_control::{self, LoadParameters};
use infergate_service::shared_memory;
use infergate_service::state::AppState;
use infergate_service::trace_settings;
use infergate_store::auth::Scope;

/// A repository name other than the one infergate has (its store) is refused, as Triton
/// refuses a repository it does not know.
fn check_repository(name: &str) -> ApiResult<()> {
    if name.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "unknown repository '{name}': infergate has one model repository, leave repository_name empty"
    )))
}

/// Triton's `TraceSetting`: without settings a read, else a change; a setting with no value
/// is cleared.
pub async fn trace_setting(
    state: &AppState,
    presented: &Presented,
    request: &TraceSettingRequest,
) -> ApiResult<TraceSettingResponse> {
    let model = (!request.model_name.is_empty()).then_some(request.model_name.as_str());
    let settings = if request.settings.is_empty() {
        let _admitted = auth::admit(state, presented, Scope::Infer).await?;
        trace_settings::read(state, model)?
    } else {
        let _admitted = auth::admit(state, presented, Scope::Admin).await?;
        let change: Vec<_> = request
            .settings
            .iter()
            .map(|(name, value)| {
                let values = (!value.value.is_empty()).then(|| value.value.clone());
                (name.clone(), values)
            })
            .collect();
        trace_settings::change(state, model, &change).await?
    };
    let settings = settings
        .into_iter()
        .map(|(name, value)| {
            (
                name.to_owned(),
                infergate_kserve::proto::trace_setting_response::SettingValue { value },
            )
        })
        .collect();
    Ok(TraceSettingResponse { settings })
}

pub async fn repository_index(
    state: &AppState,
    presented: &Presented,
    request: &RepositoryIndexRequest,
) -> ApiResult<RepositoryIndexResponse> {
    let _admitted = auth::admit(state, presented, Scope::Infer).await?;
    check_repository(&request.repository_name)?;
    let models = model_control::index(state, request.ready)
        .into_iter()
        .map(|e| ModelIndex {
            name: e.name,
            version: e.version,
            state: e.state,
            reason: e.reason,
        })
        .collect();
    Ok(RepositoryIndexResponse { models })
}

pub async fn load(
    state: &AppState,
    presented: &Presented,
    request: &RepositoryModelLoadRequest,
) -> ApiResult<()> {
    let _admitted = auth::admit(state, presented, Scope::Upload).await?;
    check_repository(&request.repository_name)?;
    let mut parameters = LoadParameters::default();
    for (name, value) in &request.parameters {
        if name == "config" {
            match &value.parameter_choice {
                Some(ParameterChoice::StringParam(text)) => parameters.config = Some(text.clone()),
                _ => {
                    return Err(ApiError::bad_request(
                        "parameter 'config' must be a string of JSON",
                    ))
                }
            }
        } else if name.starts_with("file:") {
            parameters.files.push(name.clone());
        }
    }
    model_control::load(state, &request.model_name, parameters).await
}

pub async fn unload(
    state: &AppState,
    presented: &Presented,
    request: &RepositoryModelUnloadRequest,
) -> ApiResult<()> {
    let _admitted = auth::admit(state, presented, Scope::Upload).await?;
    check_repository(&request.repository_name)?;
    model_control::unload(state, &request.model_name)
}

pub async fn shm_status(
    state: &AppState,
    presented: &Presented,
    request: &SystemSharedMemoryStatusRequest,
) -> ApiResult<SystemSharedMemoryStatusResponse> {
    let (caller, _admission) = auth::admit(state, presented, Scope::Infer).await?;
    let regions = shared_memory::regions(state, &caller, presented.client)?;
    let name = (!request.name.is_empty()).then_some(request.name.as_str());
    let regions = regions
        .status(name)?
        .into_iter()
        .map(|r| {
            (
                r.name.clone(),
                RegionStatus {
                    name: r.name,
                    key: r.key,
                    offset: r.offset,
                    byte_size: r.byte_size,
                },
            )
        })
        .collect();
    Ok(SystemSharedMemoryStatusResponse { regions })
}

pub async fn shm_register(
    state: &AppState,
    presented: &Presented,
    request: &SystemSharedMemoryRegisterRequest,
) -> ApiResult<()> {
    let (caller, _admission) = auth::admit(state, presented, Scope::Infer).await?;
    shared_memory::regions(state, &caller, presented.client)?.register(
        &request.name,
        &request.key,
        request.offset,
        request.byte_size,
    )
}

/// `name` empty: every region of the caller.
pub async fn shm_unregister(state: &AppState, presented: &Presented, name: &str) -> ApiResult<()> {
    let (caller, _admission) = auth::admit(state, presented, Scope::Infer).await?;
    let name = (!name.is_empty()).then_some(name);
    shared_memory::regions(state, &caller, presented.client)?.unregister(name);
    Ok(())
}

/// No CUDA shared memory here: no regions (a named one is not found).
pub async fn cuda_status(
    state: &AppState,
    presented: &Presented,
    request: &CudaSharedMemoryStatusRequest,
) -> ApiResult<CudaSharedMemoryStatusResponse> {
    let _admitted = auth::admit(state, presented, Scope::Infer).await?;
    if !request.name.is_empty() {
        return Err(ApiError::not_found(format!(
            "Unable to find cuda shared memory region: '{}'",
            request.name
        )));
    }
    Ok(CudaSharedMemoryStatusResponse::default())
}

/// Nothing to unregister, and registering is refused as on a host without GPUs.
pub async fn cuda_register_or_unregister(
    state: &AppState,
    presented: &Presented,
    register: Option<&str>,
) -> ApiResult<()> {
    let _admitted = auth::admit(state, presented, Scope::Infer).await?;
    match register {
        Some(name) => Err(shared_memory::cuda_register_refused(name)),
        None => Ok(()),
    }
}
