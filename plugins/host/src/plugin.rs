//! A compiled plugin and its calls. Every call gets a fresh `Store` and a
//! fresh instance from the pre-instantiated component, under the plugin's
//! limits, so nothing survives from one call to the next and a fault
//! poisons nothing but its own store.

use crate::call;
use crate::config::Limits;
use crate::convert;
use crate::error::{FaultKind, PluginError, PluginId};
use crate::lift::{Limited, RawDescription, RawPluginError, RawPostOutput, RawTensor};
use crate::lower::{InPreInput, InTensor};
use crate::scope::CallScope;
use crate::shared::Shared;
use crate::store::CallState;
use crate::types::{Description, Metadata, PostOutput, PreInput, Tensor};
use std::sync::Arc;
use wasmtime::component::{
    ComponentExportIndex, ComponentNamedList, Instance, InstancePre, Lift, Lower,
};
use wasmtime::Store;

/// Output budget for `describe`.
const DESCRIBE_BYTES: usize = 64 << 10;

pub(crate) struct Compiled {
    pub(crate) host: Arc<Shared>,
    pub(crate) instance_pre: InstancePre<CallState>,
    pub(crate) describe: ComponentExportIndex,
    pub(crate) preprocess: ComponentExportIndex,
    pub(crate) postprocess: ComponentExportIndex,
    pub(crate) sha256: String,
}

/// A validated, compiled plugin. Cheap to clone and to share across threads.
/// Calls are synchronous and CPU-bound: run them on a blocking thread.
#[derive(Clone)]
pub struct Plugin {
    compiled: Arc<Compiled>,
    description: Arc<Description>,
    id: Arc<PluginId>,
    limits: Limits,
}

type CallResult<T> = (Result<T, RawPluginError>,);

impl Plugin {
    pub(crate) fn new(
        compiled: Compiled,
        description: Description,
        id: PluginId,
        limits: Limits,
    ) -> Self {
        let limits = compiled.host.config.clamp(&limits);
        Plugin {
            compiled: Arc::new(compiled),
            description: Arc::new(description),
            id: Arc::new(id),
            limits,
        }
    }

    /// What the plugin said about itself when it was compiled.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Name and version, as errors and logs name the plugin.
    pub fn id(&self) -> &PluginId {
        &self.id
    }

    /// Hex SHA-256 of the component's bytes: its content address.
    pub fn sha256(&self) -> &str {
        &self.compiled.sha256
    }

    /// The limits every call of this handle runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same plugin with other limits, capped by what the host allows.
    pub fn with_limits(&self, limits: Limits) -> Plugin {
        Plugin {
            limits: self.compiled.host.config.clamp(&limits),
            ..self.clone()
        }
    }

    /// Pre-processing: request body or tensors + metadata -> model input tensors.
    pub fn preprocess(
        &self,
        input: PreInput,
        metadata: &Metadata,
    ) -> Result<Vec<Tensor>, PluginError> {
        let input = convert::pre_input_in(input);
        let output = self
            .call::<(&InPreInput, &[(String, String)]), CallResult<Limited<Vec<RawTensor>>>>(
                &self.compiled.preprocess,
                (&input, metadata.as_slice()),
            )?;
        let tensors = self.plugin_result(output)?;
        convert::tensors_from_raw(tensors.0)
            .map_err(|detail| self.fault(FaultKind::InvalidOutput, detail))
    }

    /// Post-processing: model output tensors + metadata -> response.
    pub fn postprocess(
        &self,
        outputs: Vec<Tensor>,
        metadata: &Metadata,
    ) -> Result<PostOutput, PluginError> {
        let outputs = convert::tensors_in(outputs);
        let output = self.call::<(&[InTensor], &[(String, String)]), CallResult<RawPostOutput>>(
            &self.compiled.postprocess,
            (outputs.as_slice(), metadata.as_slice()),
        )?;
        let output = self.plugin_result(output)?;
        convert::post_output_from_raw(output)
            .map_err(|detail| self.fault(FaultKind::InvalidOutput, detail))
    }

    /// Instantiates the plugin in a fresh store and drops it: the fixed cost
    /// every call pays before the plugin runs. For benchmarks and health checks.
    pub fn instantiate_only(&self) -> Result<(), PluginError> {
        let mut store = self.compiled.new_store(&self.id, &self.limits);
        self.compiled
            .instantiate(&mut store)
            .map(drop)
            .map_err(|e| self.classify(e, &store, false))
    }

    /// Counts the call and turns a `plugin-error` into a `PluginError`.
    fn plugin_result<T>(&self, output: CallResult<T>) -> Result<T, PluginError> {
        let metrics = &self.compiled.host.metrics;
        match output.0 {
            Ok(value) => {
                metrics.ok();
                Ok(value)
            }
            Err(RawPluginError::BadInput(message)) => {
                metrics.bad_input();
                Err(PluginError::BadInput {
                    plugin: (*self.id).clone(),
                    message: message.0,
                })
            }
            Err(RawPluginError::Failure(message)) => {
                Err(self.fault(FaultKind::Reported, message.0))
            }
        }
    }

    fn call<P, R>(&self, export: &ComponentExportIndex, params: P) -> Result<R, PluginError>
    where
        P: ComponentNamedList + Lower,
        R: ComponentNamedList + Lift,
    {
        self.compiled.host.metrics.call();
        let mut store = self.compiled.new_store(&self.id, &self.limits);
        let instance = self
            .compiled
            .instantiate(&mut store)
            .map_err(|e| self.classify(e, &store, false))?;
        let scope = CallScope::enter(self.limits.output_bytes);
        let result = instance
            .get_typed_func::<P, R>(&mut store, export)
            .and_then(|func| func.call(&mut store, params));
        result.map_err(|e| self.classify(e, &store, scope.exceeded()))
    }

    /// Says whose fault a failed instantiation or call was, and counts it.
    fn classify(
        &self,
        error: wasmtime::Error,
        store: &Store<CallState>,
        over_budget: bool,
    ) -> PluginError {
        call::classify(
            &self.compiled.host,
            &self.id,
            &self.limits,
            error,
            store,
            over_budget,
        )
    }

    fn fault(&self, kind: FaultKind, detail: String) -> PluginError {
        call::fault(&self.compiled.host, &self.id, kind, detail)
    }
}

impl Compiled {
    fn new_store(&self, id: &Arc<PluginId>, limits: &Limits) -> Store<CallState> {
        call::new_store(&self.host, id, limits)
    }

    fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Instance> {
        self.instance_pre.instantiate(store)
    }

    /// Calls `describe` under the host's default limits; used once, at compile time.
    pub(crate) fn describe(&self) -> Result<Description, String> {
        let unknown = Arc::new(PluginId {
            name: "unknown".into(),
            version: "unknown".into(),
        });
        let mut store = self.new_store(&unknown, &self.host.config.default_limits);
        let instance = self.instantiate(&mut store).map_err(|e| format!("{e:#}"))?;
        let scope = CallScope::enter(DESCRIBE_BYTES);
        let (raw,) = instance
            .get_typed_func::<(), (RawDescription,)>(&mut store, &self.describe)
            .and_then(|func| func.call(&mut store, ()))
            .map_err(|e| {
                if scope.exceeded() {
                    format!("returned more than {DESCRIBE_BYTES} bytes")
                } else {
                    format!("{e:#}")
                }
            })?;
        Ok(convert::description_from_raw(raw))
    }
}
