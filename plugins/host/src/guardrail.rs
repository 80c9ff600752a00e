//! Chat guardrails: components of the `infergate:plugin/guardrail@0.1.0` world, which read a
//! chat's messages before the model and its answer after (whole or streamed in pieces) and let
//! the text pass, rewrite it, or refuse it. Every call runs as a pipeline plugin's does: a fresh
//! store and instance under the guardrail's limits (deadline, memory, tables), its faults
//! classified and counted, its output size checked.

use crate::call;
use crate::config::Limits;
use crate::error::{FaultKind, PluginError, PluginId};
use crate::shared::Shared;
use crate::store::CallState;
use crate::types::Metadata;
use std::sync::Arc;
use wasmtime::component::{Component, InstancePre};
use wasmtime::Store;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "infergate:plugin/guardrail@0.1.0",
        // The types and the log import are the pipeline plugins' own, so one linker serves both.
        with: {
            "infergate:plugin/types": crate::bindings::infergate::plugin::types,
            "infergate:plugin/log": crate::bindings::infergate::plugin::log,
        },
    });
}

use crate::bindings::infergate::plugin::types::PluginError as WitError;
use bindings::infergate::plugin::guardrail_types as wit;

/// What a guardrail says it is, read once when it is compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardrailDescription {
    pub name: String,
    pub version: String,
    pub summary: String,
}

/// One message as a guardrail sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatText {
    pub role: String,
    pub content: String,
}

/// A guardrail's decision on a request's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptVerdict {
    Pass,
    /// New contents, one per message, in order.
    Rewrite(Vec<String>),
    Refuse(String),
}

/// A guardrail's decision on text of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextVerdict {
    Pass,
    Rewrite(String),
    Refuse(String),
}

/// A guardrail's decision on a streamed answer's pending text: the verdict on all of it but
/// its last `hold` bytes, which stay pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamVerdict {
    pub verdict: TextVerdict,
    pub hold: u32,
}

struct Compiled {
    host: Arc<Shared>,
    pre: bindings::GuardrailPre<CallState>,
    sha256: String,
}

/// A validated, compiled guardrail. Cheap to clone and to share across threads; calls are
/// synchronous and CPU-bound: run them on a blocking thread.
#[derive(Clone)]
pub struct Guardrail {
    compiled: Arc<Compiled>,
    description: Arc<GuardrailDescription>,
    id: Arc<PluginId>,
    limits: Limits,
}

/// Compiles the guardrail of `component` (already compiled by the engine) and reads its
/// description under the host's default limits.
pub(crate) fn load(
    host: &Arc<Shared>,
    component: &Component,
    sha256: String,
) -> Result<Guardrail, PluginError> {
    let instance_pre: InstancePre<CallState> =
        host.linker.instantiate_pre(component).map_err(|e| {
            PluginError::invalid(format!(
                "imports something the host does not provide (guardrails get only \
                 infergate:plugin/log; WASI is not available): {e}"
            ))
        })?;
    let pre = bindings::GuardrailPre::new(instance_pre).map_err(|e| {
        PluginError::invalid(format!(
            "does not implement the world infergate:plugin/guardrail@0.1.0: {e}"
        ))
    })?;
    let compiled = Compiled {
        host: Arc::clone(host),
        pre,
        sha256,
    };
    let unknown = Arc::new(PluginId {
        name: "unknown".into(),
        version: "unknown".into(),
    });
    let limits = host.config.default_limits.clone();
    let mut store = call::new_store(host, &unknown, &limits);
    let described = compiled
        .pre
        .instantiate(&mut store)
        .and_then(|g| g.call_describe(&mut store))
        .map_err(|e| PluginError::invalid(format!("describe() did not complete: {e:#}")))?;
    let description = GuardrailDescription {
        name: described.name,
        version: described.version,
        summary: described.summary,
    };
    crate::validate::check_name_and_version(&description.name, &description.version)?;
    if description.summary.len() > 1024 {
        return Err(PluginError::invalid(
            "describe() returned a summary longer than 1024 bytes",
        ));
    }
    let id = PluginId {
        name: description.name.clone(),
        version: description.version.clone(),
    };
    Ok(Guardrail {
        limits: host.config.clamp(&limits),
        compiled: Arc::new(compiled),
        description: Arc::new(description),
        id: Arc::new(id),
    })
}

impl Guardrail {
    pub fn description(&self) -> &GuardrailDescription {
        &self.description
    }

    /// Name and version, as errors and logs name the guardrail.
    pub fn id(&self) -> &PluginId {
        &self.id
    }

    /// Hex SHA-256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.compiled.sha256
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same guardrail with other limits, capped by what the host allows.
    pub fn with_limits(&self, limits: Limits) -> Guardrail {
        Guardrail {
            limits: self.compiled.host.config.clamp(&limits),
            ..self.clone()
        }
    }

    /// Before the model: the messages.
    pub fn check_prompt(
        &self,
        messages: &[ChatText],
        metadata: &Metadata,
    ) -> Result<PromptVerdict, PluginError> {
        let messages: Vec<wit::ChatMessage> = messages
            .iter()
            .map(|m| wit::ChatMessage {
                role: m.role.clone(),
                content: m.content.clone(),
            })
            .collect();
        let verdict = self.call(|g, store| g.call_check_prompt(store, &messages, metadata))?;
        let verdict = match verdict {
            wit::PromptVerdict::Pass => PromptVerdict::Pass,
            wit::PromptVerdict::Rewrite(contents) => {
                if contents.len() != messages.len() {
                    return Err(self.fault(
                        FaultKind::InvalidOutput,
                        format!(
                            "rewrote {} messages into {} contents; one per message is required",
                            messages.len(),
                            contents.len()
                        ),
                    ));
                }
                self.check_size(contents.iter().map(String::len).sum())?;
                PromptVerdict::Rewrite(contents)
            }
            wit::PromptVerdict::Refuse(reason) => PromptVerdict::Refuse(self.reason(reason)?),
        };
        self.compiled.host.metrics.ok();
        Ok(verdict)
    }

    /// After the model: a whole answer.
    pub fn check_answer(
        &self,
        text: &str,
        metadata: &Metadata,
    ) -> Result<TextVerdict, PluginError> {
        let verdict = self.call(|g, store| g.call_check_answer(store, text, metadata))?;
        let verdict = self.text_verdict(verdict)?;
        self.compiled.host.metrics.ok();
        Ok(verdict)
    }

    /// A streamed answer's pending text (`released`: the end of what was sent, for context).
    pub fn check_stream(
        &self,
        released: &str,
        pending: &str,
        last: bool,
        metadata: &Metadata,
    ) -> Result<StreamVerdict, PluginError> {
        let verdict =
            self.call(|g, store| g.call_check_stream(store, released, pending, last, metadata))?;
        let hold = if last { 0 } else { verdict.hold };
        if hold as usize > pending.len() || !pending.is_char_boundary(pending.len() - hold as usize)
        {
            return Err(self.fault(
                FaultKind::InvalidOutput,
                format!(
                    "held {hold} bytes of {} pending, not the end of a character",
                    pending.len()
                ),
            ));
        }
        let verdict = StreamVerdict {
            verdict: self.text_verdict(verdict.verdict)?,
            hold,
        };
        self.compiled.host.metrics.ok();
        Ok(verdict)
    }

    fn text_verdict(&self, verdict: wit::TextVerdict) -> Result<TextVerdict, PluginError> {
        Ok(match verdict {
            wit::TextVerdict::Pass => TextVerdict::Pass,
            wit::TextVerdict::Rewrite(text) => {
                self.check_size(text.len())?;
                TextVerdict::Rewrite(text)
            }
            wit::TextVerdict::Refuse(reason) => TextVerdict::Refuse(self.reason(reason)?),
        })
    }

    /// A refusal's reason, which the client reads: at most 1 KiB.
    fn reason(&self, reason: String) -> Result<String, PluginError> {
        if reason.len() > 1024 {
            return Err(self.fault(
                FaultKind::OutputTooLarge,
                format!(
                    "refused with a reason of {} bytes (at most 1024)",
                    reason.len()
                ),
            ));
        }
        Ok(reason)
    }

    fn check_size(&self, bytes: usize) -> Result<(), PluginError> {
        if bytes > self.limits.output_bytes {
            return Err(self.fault(
                FaultKind::OutputTooLarge,
                format!(
                    "returned more than its output limit of {} bytes",
                    self.limits.output_bytes
                ),
            ));
        }
        Ok(())
    }

    /// One call in a fresh store and instance; a `plugin-error` it returns is counted and
    /// turned into a [`PluginError`].
    fn call<T>(
        &self,
        f: impl FnOnce(
            &bindings::Guardrail,
            &mut Store<CallState>,
        ) -> wasmtime::Result<Result<T, WitError>>,
    ) -> Result<T, PluginError> {
        let host = &self.compiled.host;
        host.metrics.call();
        let mut store = call::new_store(host, &self.id, &self.limits);
        let instance = self
            .compiled
            .pre
            .instantiate(&mut store)
            .map_err(|e| call::classify(host, &self.id, &self.limits, e, &store, false))?;
        match f(&instance, &mut store) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(WitError::BadInput(message))) => {
                host.metrics.bad_input();
                Err(PluginError::BadInput {
                    plugin: (*self.id).clone(),
                    message,
                })
            }
            Ok(Err(WitError::Failure(message))) => Err(self.fault(FaultKind::Reported, message)),
            Err(e) => Err(call::classify(
                host,
                &self.id,
                &self.limits,
                e,
                &store,
                false,
            )),
        }
    }

    fn fault(&self, kind: FaultKind, detail: String) -> PluginError {
        call::fault(&self.compiled.host, &self.id, kind, detail)
    }
}
